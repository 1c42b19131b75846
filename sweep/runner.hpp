#pragma once
// Runs a sweep's runs, one forked child each, `jobs` at a time, and hands
// each outcome to the caller as it finishes. The parent reads every input
// once before forking; children inherit what it read.

#include <functional>
#include <string>
#include <vector>

#include "sweep/experiment.hpp"
#include "sweep/results.hpp"

namespace pipegrid::sweep {

/// What a run's child reports: status ok/oom/infeasible/error, a one-line
/// reason, and the command's JSON when it ran to the end.
struct ChildReport {
  std::string status, reason, json;
};

/// How a run's child runs it. Fast: on a thread of its own (a fresh malloc
/// arena, not the parent's heap), as the caller sees fit to do it quickly (a
/// sweep runs its engine in the child itself); a child that ends without a
/// report (it died, or it gave up) is run again Isolated, the plain way, and
/// only that outcome is recorded. Runs are deterministic, so either way
/// gives the result the plain way gives.
enum class RunMode { Fast, Isolated };

/// Called in the child, once per attempt. Throws nothing the runner must know
/// about: the caller maps its exceptions to a status itself.
using RunInChild = std::function<ChildReport(const PlannedRun&, RunMode)>;

struct RunnerOptions {
  int jobs = 1;
  double timeout_s = 0;      ///< 0: none; past it the child is killed: status timeout
  double grace_s = 30;       ///< on SIGTERM: in-flight runs get this long, then are killed
  bool progress = false;     ///< a progress bar on stderr (a terminal)
};

struct RunnerSummary {
  std::map<std::string, int> by_status;
  bool interrupted = false;  ///< SIGTERM stopped the dispatching
};

/** Runs `runs`; `finished` is called in the parent for each, in completion
 *  order. Errors' first lines go to stderr as they happen. */
RunnerSummary run_in_children(const std::vector<const PlannedRun*>& runs, const RunInChild& run_in_child,
                              const RunnerOptions& options,
                              const std::function<void(const PlannedRun&, const RunOutcome&)>& finished);

}  // namespace pipegrid::sweep
