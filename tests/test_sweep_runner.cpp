// sweep/runner: a run's Fast attempt that leaves no report (it died, or gave
// up for a second SimGrid engine) is run again Isolated, and only that
// outcome is recorded; a Fast attempt's report is final; a run that dies
// Isolated too is recorded once, as crashed. Fast attempts work on a thread
// of their own. Each attempt is a forked child of the test.

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sweep/runner.hpp"

namespace {

using pipegrid::sweep::ChildReport;
using pipegrid::sweep::PlannedRun;
using pipegrid::sweep::RunMode;
using pipegrid::sweep::RunOutcome;

struct Recorded {
  std::map<std::string, RunOutcome> outcomes;
  std::map<std::string, int> finished;  ///< times each label was handed over
};

Recorded run_all(const std::vector<std::string>& labels, const pipegrid::sweep::RunInChild& child, int jobs) {
  std::vector<PlannedRun> runs;
  for (const std::string& label : labels) {
    PlannedRun run;
    run.label = label;
    run.key = label;
    runs.push_back(run);
  }
  std::vector<const PlannedRun*> pointers;
  for (const PlannedRun& run : runs) pointers.push_back(&run);
  pipegrid::sweep::RunnerOptions options;
  options.jobs = jobs;
  Recorded recorded;
  pipegrid::sweep::run_in_children(pointers, child, options, [&](const PlannedRun& run, const RunOutcome& outcome) {
    recorded.outcomes[run.label] = outcome;
    ++recorded.finished[run.label];
  });
  return recorded;
}

TEST(SweepRunner, AFastAttemptWithoutAReportIsRunAgainIsolated) {
  // "gives-up": exits without a report when Fast (as a second engine does);
  // "aborts": dies of SIGABRT when Fast; "reports": Fast reports "ok" (an
  // Isolated attempt would say "error"); "dies": no report either way.
  const auto child = [](const PlannedRun& run, RunMode mode) -> ChildReport {
    const bool fast = mode == RunMode::Fast;
    if (run.label == "gives-up" && fast) _exit(75);
    if (run.label == "aborts" && fast) std::abort();
    if (run.label == "dies") _exit(9);
    if (run.label == "reports") return {fast ? "ok" : "error", fast ? "" : "run again", ""};
    return {fast ? "error" : "ok", fast ? "recorded the Fast attempt" : "", ""};
  };
  for (const int jobs : {1, 2, 4}) {
    const Recorded recorded = run_all({"gives-up", "aborts", "reports", "dies", "plain"}, child, jobs);
    EXPECT_EQ(recorded.outcomes.at("gives-up").status, "ok") << jobs;
    EXPECT_EQ(recorded.outcomes.at("aborts").status, "ok") << jobs;
    EXPECT_EQ(recorded.outcomes.at("reports").status, "ok") << jobs;
    EXPECT_EQ(recorded.outcomes.at("dies").status, "crashed") << jobs;
    EXPECT_EQ(recorded.outcomes.at("dies").reason, "the run's process exited with status 9 without a result") << jobs;
    // Any other run: its Fast attempt reports "error", and that is final.
    EXPECT_EQ(recorded.outcomes.at("plain").status, "error") << jobs;
    for (const auto& [label, count] : recorded.finished) EXPECT_EQ(count, 1) << label << " with --jobs " << jobs;
    EXPECT_EQ(recorded.finished.size(), 5u);
  }
}

TEST(SweepRunner, FastAttemptsWorkOnAThreadOfTheirOwn) {
  const auto child = [](const PlannedRun&, RunMode mode) -> ChildReport {
    const bool own_thread = syscall(SYS_gettid) != getpid();
    return {own_thread == (mode == RunMode::Fast) ? "ok" : "error", "", ""};
  };
  const Recorded recorded = run_all({"a", "b"}, child, 2);
  EXPECT_EQ(recorded.outcomes.at("a").status, "ok");
  EXPECT_EQ(recorded.outcomes.at("b").status, "ok");
}

}  // namespace
