#pragma once
// PyTorch profiler (Kineto) Chrome traces of a real pipeline-parallel run,
// one file per rank, turned into pipegrid's inputs (issue 31, part 3): the
// measured timeline (render/timeline_csv.hpp's schema, as execute --csv
// writes it), a profile with each stage's measured F/B/I/W times
// (core/profile.hpp), a platform whose links carry the p2p bandwidth and
// latency fitted from the measured transfers, and the Program that ran
// (core/program.hpp: each rank's actions in their order). docs/kineto.md states every
// rule used here (which ranges are actions, how kernels and transfers are
// attributed, how times are taken).

#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "core/profile.hpp"
#include "core/program.hpp"
#include "core/timeline.hpp"

namespace pipegrid::kineto {

/** One rule of a range mapping: a record_function range whose whole name
 *  matches `pattern` (ECMAScript) is the action `kind` of `stage` and
 *  `micro_batch`. Each field is a literal or "$n" (the n-th capture group;
 *  kind may also embed one, e.g. "SEND_$2"). kind: F, B, I, W, R, SEND_F or
 *  SEND_B. stage absent: the rank's own stage (the rank: one stage per
 *  rank). bytes (SEND_ only, optional): the message size when the trace
 *  records none (Gloo under the legacy profiler). second_kind,
 *  second_stage, second_micro_batch (all three or none): the range is an
 *  overlapped forward-and-backward pair (DualPipeV's OVERLAP_F_B), the
 *  action above run first and this one second; one of the two is an F, the
 *  other a B or an I. */
struct RangeRule {
  std::string pattern;
  std::regex regex;
  std::string kind, stage, micro_batch, bytes;
  std::string second_kind, second_stage, second_micro_batch;
};

/** Rules tried in order; the first whose pattern matches a range's whole name wins. */
struct RangeMapping {
  std::vector<RangeRule> rules;
  std::string origin;  ///< "default mapping" or the --map file, for messages
};

/** The defaults: torch.distributed.pipelining's ranges in PyTorch 2.11
 *  ("Forward N", "Backward N" of GPipe; "PP:<stage><F|B|I|W><mb>",
 *  "PP:(<stage>F<mb>;<stage>B<mb>)OVERLAP_F_B" and
 *  "PP:<stage>SEND_<F|B><mb>" of the runtime schedules); docs/kineto.md. */
RangeMapping default_mapping();

/** A mapping file (JSON): {"rules": [{"pattern": ..., "kind": ..., "stage":
 *  ..., "micro_batch": ..., "bytes": ..., "second_kind": ..., "second_stage":
 *  ..., "second_micro_batch": ...}, ...]}. Throws InputError naming
 *  `origin`, the rule's index and the field. */
RangeMapping parse_mapping_json(const std::string& text, const std::string& origin);

/** A complete event ("ph": "X") of a trace, as the importer reads it. */
struct TraceEvent {
  std::size_t index = 0;  ///< position in the file's traceEvents (for messages)
  std::string name, cat;
  std::string pid, tid;   ///< as text: Kineto writes numbers, the legacy profiler strings
  double ts_us = 0, dur_us = 0;
  std::optional<long long> correlation;  ///< args.correlation (launches and GPU events)
  // record_param_comms's args (absent elsewhere).
  std::string collective, dtype;
  double in_elements = 0, out_elements = 0;
  std::optional<int> dst_rank, src_rank;   ///< group ranks ("Dst Rank", "Src Rank")
  std::vector<int> group_ranks;            ///< "Process Group Ranks", global ranks
};

/** One rank's trace: its events and what the file says about the run. */
struct RankTrace {
  std::string file;
  std::optional<int> rank, world_size;  ///< distributedInfo, when present
  std::vector<TraceEvent> events;       ///< its "X" events in file order
};

/** Parses a Chrome trace: an object with "traceEvents" (Kineto) or a bare
 *  array of events (the legacy autograd profiler of PyTorch builds without
 *  Kineto). Throws InputError naming `file` and the event's index and name:
 *  no traceEvents, an "X" event without numeric ts or dur, a negative dur. */
RankTrace parse_kineto_trace(const std::string& text, const std::string& file);

struct ImportOptions {
  RangeMapping mapping = default_mapping();
  int micro_batch_size = 1;  ///< written into the profile
};

/** What the traces give pipegrid. */
struct ImportResult {
  Timeline timeline;          ///< hosts gpu<r> (traces with kernels) or cpu<r>, one per rank
  Profile profile;            ///< one layer per stage ("stage<s>"): its medians
  std::string platform_xml;   ///< one host per rank, a link per pair: the fitted copy
  int stages = 0, micro_batches = 0, mini_batches = 0;
  bool gpu = false;
  double latency_s = 0, bandwidth_Bps = 0;  ///< the p2p fit
  std::optional<double> allreduce_bus_bandwidth_Bps;  ///< where all-reduces appear
  std::vector<std::string> notes;  ///< what was left out or assumed, for people
  /** What ran: device r is rank r, holding the stages of its actions
   *  (ascending), one stream with its actions in the order their CPU ranges
   *  (or anonymous blocks) began, an overlapped pair where one range ran
   *  two actions; mini-batches as in the timeline. Not checked here:
   *  validate_program (core/program.hpp) says whether it can run. */
  Program program;
};

/** Imports one trace per rank (any order; distributedInfo's rank, else the
 *  position in `ranks`). Throws InputError naming the file and event: a rank
 *  missing or given twice, a send without its receive, a range whose
 *  captured stage or micro-batch is not a number, no action at all. */
ImportResult import_traces(const std::vector<RankTrace>& ranks, const ImportOptions& options);

}  // namespace pipegrid::kineto
