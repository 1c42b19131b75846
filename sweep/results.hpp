#pragma once
// A sweep's result files (EXPERIMENTS.md "Results"): runs.csv, devices.csv,
// manifest.json, and the per-shard journals a run appends to as it goes
// (shards/shard-I-of-N.csv, shards/devices-I-of-N.csv; an unsharded run is
// shard 0 of 1), from which runs.csv and devices.csv are derived.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/metrics.hpp"
#include "sweep/experiment.hpp"

namespace pipegrid::sweep {

/// The statuses a run may end with, in the order outputs list them: ok,
/// oom, infeasible, error, timeout, crashed.
const std::vector<std::string>& run_statuses();
/// error, timeout and crashed: the run failed (`sweep run` exits 1, and
/// --retry-failed runs it again); ok, oom and infeasible are results.
bool is_failed_status(const std::string& status);

/** The reason of a simulate run that ran out of memory: the first of
 *  `devices` (in the order metrics list them) whose peak is above its
 *  capacity less its reserve, "gpu0 needs 1.084 KiB of 1 KiB" (the
 *  capacity less the reserve, "(256 B held in reserve)" added when there is
 *  one); nullopt when every device fits (the run is ok). */
std::optional<std::string> out_of_memory_reason(const std::vector<DeviceMetrics>& devices);

/// What one run ended with, as the parent records it.
struct RunOutcome {
  std::string status;  ///< ok, oom, infeasible, error, timeout, crashed
  std::string reason;  ///< one line; empty for ok
  std::string json;    ///< the command's --json output, when it ran to the end
  double wall_s = 0;
};

/// The metric columns of a command's rows, after status and reason.
const std::vector<std::string>& metric_columns(const std::string& command);
/// The volatile columns, last: they differ between two runs of one plan.
const std::vector<std::string>& volatile_columns();
const std::vector<std::string>& devices_columns();
/// The metric columns as runs.csv names them for a plan: a metric whose
/// name a parameter or label column already has (`partition`, when a study
/// sets partition files) gets "_result" appended (`partition_result`).
std::vector<std::string> metric_header(const ExperimentPlan& plan);
/// The whole header of runs.csv for a plan.
std::vector<std::string> runs_header(const ExperimentPlan& plan);
/// The names a label may not take: the fixed columns of runs.csv
/// (run_key, run_index, label, status, reason, the volatile columns) and of
/// devices.csv, every command's metric columns, and those with "_result".
bool is_reserved_column(const std::string& name);
/// The reserved names as a message lists them.
std::string reserved_column_list();

/// Metric cells (and device rows, without their run_key) from the
/// command's JSON; an out-of-memory run keeps all of them.
struct ParsedMetrics {
  std::vector<std::string> cells;
  std::vector<std::vector<std::string>> devices;
};
ParsedMetrics parse_metrics(const std::string& command, const std::string& json);

/** The journal lines of one finished run: its runs.csv row and its
 *  devices.csv rows. */
struct RunRows {
  std::vector<std::string> run;
  std::vector<std::vector<std::string>> devices;
};
RunRows rows_of(const ExperimentPlan& plan, const PlannedRun& run, const RunOutcome& outcome, const Shard& shard,
                const std::string& finished_at, const std::string& version);

/// Rows already recorded in a results folder (every journal in shards/),
/// by run key. Reading changes no file.
///
/// Every run journal's header must be `runs_header` and every device
/// journal's devices_columns(); a row's status one of ok, oom, infeasible,
/// error, timeout, crashed; a numeric metric or device cell empty or a
/// number that is not negative (`inf` and `nan` are numbers). Anything else,
/// and any line that is not CSV with the header's number of fields, is an
/// InputError naming the journal, the line and the column (`header_from`
/// names where `runs_header` comes from). The one exception is a journal's
/// torn last line (no line break at its end: a kill in the middle of a
/// write): it is ignored, with a note. A simulate run recorded `ok` or
/// `oom` without device rows (they were lost) is left out, as not run,
/// with a note naming it.
struct RecordedRuns {
  std::vector<std::string> header;  ///< runs_header: every run journal's
  std::map<std::string, std::vector<std::string>> runs;                  ///< by key
  std::map<std::string, std::vector<std::vector<std::string>>> devices;  ///< by key
  std::vector<std::string> conflicts;  ///< keys with two different non-volatile results
  std::vector<std::string> notes;      ///< torn last lines ignored, runs without their device rows
};
RecordedRuns read_recorded_runs(const std::string& dir, const std::vector<std::string>& runs_header, const std::string& command,
                                const std::string& header_from);
/// The same, with the columns and command of DIR/manifest.json (InputError
/// when it is missing or not a manifest).
RecordedRuns read_recorded_runs(const std::string& dir);

/** The status recorded for the run `key`; "" when it has no row. */
std::string recorded_status(const RecordedRuns& recorded, const std::string& key);

/** What `sweep run` runs of `selected` (the runs of its shard), resuming
 *  where the folder's recorded rows leave off: the runs without a row, and
 *  with `retry_failed` those recorded with a failed status too, in plan
 *  order; runs equal but for their labels (one key) run once. */
struct RunsToDo {
  std::vector<const PlannedRun*> runs;  ///< into `selected`
  int resumed = 0;                      ///< runs skipped: they have a row
};
RunsToDo runs_to_do(const std::vector<PlannedRun>& selected, const RecordedRuns& recorded, bool retry_failed);

/** Runs counted by status, as `sweep run` and `sweep status` report them. */
struct StatusCounts {
  std::map<std::string, int> by_status;  ///< the runs with a status
  int not_run = 0;                       ///< the runs without one ("")
  int failed = 0;                        ///< the runs whose status is_failed_status
  void add(const std::string& status);
};

/** Appends whole lines to the shard's journals (one write() per line;
 *  devices first, then the run, so a run row means its devices are in; a
 *  line break in a cell is written as a space, so a record is one line).
 *  Creates the folder and headers as needed, cuts a torn last line off the
 *  shard's journals, and refuses (InputError) a journal whose header is not
 *  `runs_header` (or devices_columns()). */
class Journal {
 public:
  Journal(const std::string& dir, const Shard& shard, const std::vector<std::string>& runs_header);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  void append(const RunRows& rows);

 private:
  int runs_fd_ = -1, devices_fd_ = -1;
  std::string runs_path_;
};

/** Writes runs.csv and devices.csv (all or none) from the journals, in plan
 *  order (the manifest's plan). Returns the keys of the plan without a row.
 *  Throws InputError when one key has two different non-volatile results
 *  (a determinism check) or the folder holds no manifest. */
struct MergeResult {
  std::vector<std::string> missing_labels;
  int rows = 0;
  std::vector<std::string> notes;  ///< read_recorded_runs's
};
MergeResult merge_results(const std::string& dir);

/** manifest.json: experiment text and hash, resolved includes, the plan
 *  (key, index, label of every run), input file hashes, columns, version. */
std::string manifest_json(const ExperimentPlan& plan, const std::map<std::string, std::string>& input_hashes,
                          const std::string& version);
/** Writes it atomically (a temporary, then rename). */
void write_manifest(const std::string& dir, const std::string& text);

}  // namespace pipegrid::sweep
