#pragma once
// Metrics derived from a timeline. Memory follows SEMANTICS.md: weights +
// gradients, activation stashes (F start .. matching B end; with GPipe's
// recomputation only the stage input, plus the full stash from R start to B
// end; with Megatron's, the checkpoints, plus one checkpoint group from R
// start to B end) and receive buffers (arrival .. end of the consuming
// operation).

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/partition.hpp"
#include "core/timeline.hpp"

namespace pipegrid {

/** How a schedule keeps weight versions (SEMANTICS.md, Weight versions). A
 *  new version appears at every update: at the end of a device's all-reduce
 *  when it has ALLREDUCE records, else after every `update_interval`-th
 *  backward on the device. A device keeps the latest version and every older
 *  one still referenced. */
enum class WeightVersioning {
  Single,        ///< flushed schedules and dp: one version, updated at the flush
  Stashing,      ///< pipedream, 2bw: a forward takes the latest version and keeps it until its backward ends
  VerticalSync,  ///< pipedream --vertical-sync: a mini-batch uses, on every stage, the version the input stage gave it
  Prediction,    ///< pipeoptim: the latest version, plus a predicted one while a forward runs
};

/// What one micro-batch of a stage keeps under Megatron-LM's layer-wise
/// recomputation (StageRecompute, core/recompute.hpp).
struct LayerwiseStash {
  double kept_bytes = 0;       ///< from the start of its F to the end of its backward
  double recompute_bytes = 0;  ///< besides, from the start of its R to the end of its backward (its I when split)
};

struct MemoryModel {
  std::vector<StageCost> stages;
  /// GPipe's recomputation: a micro-batch keeps its stage input from F to
  /// its backward's end, and the whole stash from its R on.
  bool recompute = false;
  /// Megatron-LM's layer-wise recomputation, per stage (in place of
  /// `recompute`'s rule); empty: none. A micro-batch without an R keeps its
  /// whole stash, as under `recompute`.
  std::vector<LayerwiseStash> layerwise;
  WeightVersioning versioning = WeightVersioning::Single;
  int update_interval = 1;   ///< backwards per update on a device without all-reduces
  /// What stays resident per byte of a stage's weights for the whole run:
  /// one weight version, its gradients, fp32 master weights (mixed
  /// precision) and the optimizer's state, as resident_weight_factor()
  /// (core/precision.hpp) gives it: fp32 sgd 2, momentum 3, adam 4; fp16 or
  /// bf16 sgd 4, momentum 6, adam 8. Further weight versions (stashing
  /// schedules) add one copy of the weight bytes each.
  double resident_weight_factor = 2;
  /// What an optimizer step holds on top of the resident bytes, per byte of
  /// weights (step_gradient_copy_bytes_per_parameter / dtype bytes). A
  /// host's peak is at least resident + this x its weights: the step runs
  /// once a flushed schedule has freed its activations (for schedules that
  /// step between micro-batches, a lower bound).
  double step_weight_factor = 0;
  /// The two factors above for the routed experts' weights
  /// (StageCost::expert_weight_bytes), which Megatron's distributed
  /// optimizer shards over the expert-data-parallel group rather than the
  /// data-parallel one; negative: the same as the dense weights'.
  double expert_resident_weight_factor = -1, expert_step_weight_factor = -1;
  /// Per stage, bytes resident for the whole run besides the weights'
  /// factors: the FP8 recipe's weight copies and transposes that Transformer
  /// Engine caches (core/fp8.hpp). Empty: none.
  std::vector<double> stage_resident_bytes;
  /// device memory capacity per host; absent = unlimited
  std::map<std::string, double> capacity_bytes;
  /// what a host's process holds besides the model (HostInfo::memory_reserve_of
  /// its capacity); absent = 0. Out of memory: peak > capacity - reserve.
  std::map<std::string, double> reserve_bytes;
};

/** The stages each host holds: one for a classic pipeline (and each replica
 *  of a replicated stage), several for interleaved and V schedules. */
using HostStages = std::map<std::string, std::vector<int>>;
/** One stage per host. */
HostStages host_stages(const std::map<std::string, int>& stage_of_host);

struct DeviceMetrics {
  std::string host;
  std::vector<int> stages;  ///< the stages it holds
  double busy_s = 0;  ///< time the device computes (union over its streams), whole run
  /// Flushed: 1 - busy / run span. Otherwise the idle share of the device
  /// inside the steady-state window: 1 - (busy time inside it) / its length.
  double bubble_fraction = 0;
  /// The zero-bubble papers' bubble: 1 - busy / (its last compute end - its
  /// first compute start), the device's own span (0 without compute).
  double span_bubble_fraction = 0;
  /// Chunk-micro-batches whose F has started and whose final backward (B,
  /// or W when split) has not ended, at most at once.
  int peak_stashed_microbatches = 0;
  int peak_weight_versions = 1;
  double peak_memory_bytes = 0;
  std::optional<double> memory_capacity_bytes;
  double memory_reserve_bytes = 0;  ///< held back from the capacity (MemoryModel::reserve_bytes)
  bool oom = false;  ///< peak_memory_bytes > capacity - reserve
};

/** Steady state of a schedule that does not flush (docs/semantics.md,
 *  Metrics). A mini-batch completes when its last compute action ends. Only
 *  completions before the drain count: the drain starts at the earliest
 *  start, over devices, of a device's last forward; before it the run is
 *  identical to any longer run of the same schedule. The period is measured
 *  over whole cycles at the end of that steady part. */
struct SteadyState {
  /// true: the gaps between the last steady completions repeat with a cycle
  /// of `cycle_minibatches` (relative tolerance 1e-9) over at least 3 cycles
  /// and at least the last half of the steady completions. false: no cycle
  /// was confirmed; the period is an estimate, the mean gap over the last
  /// half of the steady completions in whole rounds of the replicas, never
  /// below the devices' lower bound (see SteadyStateHints, `measured_over`).
  bool periodic = false;
  double period_s = 0;
  /// The mean gap over the window: `period_s` itself, except when an
  /// estimate (not periodic) below the devices' lower bound was raised to it.
  double estimate_s = 0;
  int cycle_minibatches = 0;   ///< completions per cycle (0 when not periodic)
  int warmup_minibatches = 0;  ///< completions before the first periodic one (periodic only)
  double warmup_s = 0;         ///< from the first operation to the first periodic completion
  /// The period is the mean gap between completions over this window.
  double window_start_s = 0, window_end_s = 0;
  int window_gaps = 0;            ///< gaps between completions inside the window
  int steady_completions = 0;     ///< completions before the drain
  double drain_start_s = 0;       ///< completions after this time are drain, not steady state
  /// What the period was measured over, for people ("whole cycles of 3
  /// mini-batches after a warm-up of 21", "the last 12 gaps before the
  /// drain: no cycle confirmed", ...).
  std::string measured_over;
};

/** What the devices tell about the period beyond the completion times; it
 *  matters only when no cycle is confirmed. */
struct SteadyStateHints {
  /// Completions per round of the replicas' round robin (mini-batch b goes
  /// to replica b mod r): the least common multiple of the stages' replica
  /// counts. Completions of one round come from different replicas, in
  /// bursts, so an estimate over a part of a round is biased by the phase;
  /// the estimate is taken over whole rounds.
  int rotation = 1;
  /// A proven lower bound of the steady-state period: the largest, over
  /// devices, compute per mini-batch it handles divided by its stage's
  /// replicas (in steady state a replica takes one mini-batch in r). While
  /// the pipeline settles (the lag between the slowest device and the
  /// completions shrinking), completions can come faster than that for a
  /// long time; an estimate below it is raised to it.
  double lower_bound_s = 0;
  std::string lower_bound_from;  ///< the device it comes from, for `measured_over`
};

/** Finds the steady state of mini-batch completion times (any order).
 *  `run_start_s` is the start of the first operation; completions later than
 *  `drain_start_s` are left out. Without a confirmed cycle the estimate is
 *  the mean gap over whole rounds of `hints.rotation` completions covering
 *  at least the last half of the gaps (when there are that many), never
 *  below `hints.lower_bound_s`. */
SteadyState steady_state_of(std::vector<double> completions, double run_start_s, double drain_start_s,
                            const SteadyStateHints& hints = {});

/** The steady state of a timeline: completions are the ends of each
 *  mini-batch's last compute record, the drain starts at the earliest start,
 *  over hosts, of a host's last forward ("F"). The hints come from
 *  `stage_of_host` (every host of the plan, computing or not) or, without
 *  it, from the hosts that run one stage's compute records. */
SteadyState steady_state_of(const Timeline& timeline);
SteadyState steady_state_of(const Timeline& timeline, const HostStages& stages_of_host);

/** The hints of a timeline: the rotation from the replica counts of
 *  `stage_of_host`, the lower bound from each host's compute (the union of
 *  its compute records) per mini-batch it runs a forward of. */
SteadyStateHints steady_state_hints(const Timeline& timeline, const HostStages& stages_of_host);
SteadyStateHints steady_state_hints(const Timeline& timeline, const std::map<std::string, int>& stage_of_host);

/** Length of the union of `intervals` (busy time of a device whose
 *  streams may overlap), in all and inside [window_start_s, window_end_s]. */
struct BusyTime {
  double total_s = 0, in_window_s = 0;
};
BusyTime busy_time(std::vector<std::pair<double, double>> intervals, double window_start_s, double window_end_s);

/** The mini-batch time of a timeline, one meaning everywhere
 *  (docs/semantics.md): when mini-batches overlap (no flush), the
 *  steady-state period; otherwise the span divided by the mini-batches.
 *  Bubbles come with it: per host with compute records, 1 - busy / length
 *  of the window the time is measured over (the steady-state window, or the
 *  whole span). */
struct MinibatchTime {
  double minibatch_time_s = 0;
  double mean_minibatch_span_s = 0;  ///< span / mini-batches, warm-up and drain included
  int minibatches = 0;               ///< distinct mini-batch numbers of compute records
  std::optional<SteadyState> steady_state;  ///< present when mini-batches overlap
  double bubble_fraction = 0;        ///< mean over hosts with compute records
};
/// `steady_state` forces the choice (true: steady-state period) instead of
/// deciding by overlap.
MinibatchTime minibatch_time_of(const Timeline& timeline, std::optional<bool> steady_state = std::nullopt);

/** True when some mini-batch starts before the previous one has ended: the
 *  schedule does not flush, so the mini-batch time is a steady-state period. */
bool minibatches_overlap(const Timeline& timeline);

/** An impossible result: a bug of the simulator or of a metric, never bad
 *  input. The CLI reports it and exits with status 3. */
class InvariantViolation : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

struct Metrics {
  /// The time per mini-batch in steady operation (docs/semantics.md, one
  /// meaning everywhere): flushed schedules, the span of the run divided by
  /// the mini-batches (each mini-batch is alike); others, the steady-state
  /// period.
  double minibatch_time_s = 0;
  /// The span of the whole run (first start to last end, warm-up and drain
  /// included) divided by the mini-batches simulated.
  double mean_minibatch_span_s = 0;
  double throughput_samples_per_s = 0;
  double bubble_fraction = 0;  ///< mean over devices
  double span_bubble_fraction = 0;  ///< mean over devices of DeviceMetrics::span_bubble_fraction
  double bytes_per_sample = 0;
  int samples_per_minibatch = 0;
  std::optional<SteadyState> steady_state;  ///< for schedules that do not flush
  std::vector<DeviceMetrics> devices;
};

/** Fills TimelineRecord::memory_bytes (device memory after each record ends)
 *  and returns per-host peak memory and peak stashed micro-batches.
 *  `stages_of_host` maps each host to its stages (their weights add up).
 *  A split backward frees the stash in two parts: its I everything but
 *  StageCost::weight_gradient_stash_bytes, its W the rest. */
struct MemoryPeaks {
  std::map<std::string, double> peak_bytes;
  std::map<std::string, int> peak_stashed;
  std::map<std::string, int> peak_versions;
};
MemoryPeaks annotate_memory(Timeline& timeline, const MemoryModel& model, const HostStages& stages_of_host);
MemoryPeaks annotate_memory(Timeline& timeline, const MemoryModel& model,
                            const std::map<std::string, int>& stage_of_host);

/** With `steady_state` (schedules that do not flush) the mini-batch time is
 *  the steady-state period and bubbles are measured inside its window.
 *  Checks the result's invariants and throws InvariantViolation naming the
 *  one broken: every device's busy time within the run's span; bubble
 *  fractions in [0, 1]; without a flush, the period at least every device's
 *  compute per mini-batch it handles divided by its stage's replicas (an
 *  estimate, no cycle confirmed, below it was raised to it: see
 *  SteadyStateHints; a confirmed cycle below it is a bug). */
Metrics compute_metrics(Timeline& timeline, const MemoryModel& model, const HostStages& stages_of_host,
                        int mini_batches, int samples_per_minibatch, bool steady_state = false);
Metrics compute_metrics(Timeline& timeline, const MemoryModel& model,
                        const std::map<std::string, int>& stage_of_host, int mini_batches,
                        int samples_per_minibatch, bool steady_state = false);

}  // namespace pipegrid
