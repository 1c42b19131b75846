// What `sweep run` and `sweep status` decide from recorded rows and run
// results (sweep/results.hpp): which runs a resumed sweep runs again (none
// with a row, failed ones with --retry-failed, one run per key), how runs
// are counted by status, and the reason an out-of-memory run records. And
// what it reads and writes of its inputs (sweep/inputs.hpp): the files its
// runs read, the checks before anything runs, inline platforms as files.

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "scratch_folder.hpp"

#include "core/io.hpp"
#include "expect_input_error.hpp"
#include "sweep/inputs.hpp"
#include "sweep/results.hpp"

namespace {

namespace fs = std::filesystem;
using pipegrid::sweep::PlannedRun;
using pipegrid::sweep::RecordedRuns;

PlannedRun run_of(const std::string& key, const std::string& label) {
  PlannedRun run;
  run.key = key;
  run.label = label;
  return run;
}

/// Rows recorded with these statuses, by key (the status column third of four).
RecordedRuns recorded_with(const std::map<std::string, std::string>& statuses) {
  RecordedRuns recorded;
  recorded.header = {"run_key", "label", "status", "reason"};
  for (const auto& [key, status] : statuses) recorded.runs[key] = {key, "label of " + key, status, ""};
  return recorded;
}

std::vector<std::string> labels_of(const std::vector<const PlannedRun*>& runs) {
  std::vector<std::string> labels;
  for (const PlannedRun* run : runs) labels.push_back(run->label);
  return labels;
}

TEST(SweepResume, RecordedStatusIsTheStatusCellOrNothing) {
  const RecordedRuns recorded = recorded_with({{"a", "oom"}});
  EXPECT_EQ(pipegrid::sweep::recorded_status(recorded, "a"), "oom");
  EXPECT_EQ(pipegrid::sweep::recorded_status(recorded, "b"), "");
  RecordedRuns without_status = recorded;
  without_status.header = {"run_key", "label", "state", "reason"};
  EXPECT_EQ(pipegrid::sweep::recorded_status(without_status, "a"), "");
}

TEST(SweepResume, RunsWithARowAreSkippedFailedOnesRunAgainOnlyWhenAsked) {
  const std::vector<PlannedRun> selected = {run_of("k-ok", "ok"),        run_of("k-oom", "oom"),     run_of("k-infeasible", "infeasible"),
                                            run_of("k-error", "error"),  run_of("k-crash", "crash"), run_of("k-timeout", "timeout"),
                                            run_of("k-new", "new")};
  const RecordedRuns recorded = recorded_with({{"k-ok", "ok"},
                                               {"k-oom", "oom"},
                                               {"k-infeasible", "infeasible"},
                                               {"k-error", "error"},
                                               {"k-crash", "crashed"},
                                               {"k-timeout", "timeout"}});
  const pipegrid::sweep::RunsToDo resumed = pipegrid::sweep::runs_to_do(selected, recorded, false);
  EXPECT_EQ(labels_of(resumed.runs), (std::vector<std::string>{"new"}));
  EXPECT_EQ(resumed.resumed, 6);
  const pipegrid::sweep::RunsToDo retried = pipegrid::sweep::runs_to_do(selected, recorded, true);
  EXPECT_EQ(labels_of(retried.runs), (std::vector<std::string>{"error", "crash", "timeout", "new"}));
  EXPECT_EQ(retried.resumed, 3);
  ASSERT_FALSE(retried.runs.empty());
  EXPECT_EQ(retried.runs.front(), &selected[3]);  // pointers into `selected`
}

TEST(SweepResume, RunsEqualButForTheirLabelsRunOnce) {
  const std::vector<PlannedRun> selected = {run_of("same", "first"), run_of("other", "other"), run_of("same", "second")};
  const pipegrid::sweep::RunsToDo todo = pipegrid::sweep::runs_to_do(selected, RecordedRuns{}, false);
  EXPECT_EQ(labels_of(todo.runs), (std::vector<std::string>{"first", "other"}));
  EXPECT_EQ(todo.resumed, 0);
}

TEST(SweepResume, StatusCountsSplitResultsFailuresAndRunsNotRun) {
  pipegrid::sweep::StatusCounts counts;
  for (const std::string status : {"ok", "ok", "oom", "infeasible", "error", "timeout", "crashed", "", ""}) counts.add(status);
  EXPECT_EQ(counts.by_status, (std::map<std::string, int>{
                                  {"ok", 2}, {"oom", 1}, {"infeasible", 1}, {"error", 1}, {"timeout", 1}, {"crashed", 1}}));
  EXPECT_EQ(counts.not_run, 2);
  EXPECT_EQ(counts.failed, 3);
  EXPECT_EQ(pipegrid::sweep::run_statuses(),
            (std::vector<std::string>{"ok", "oom", "infeasible", "error", "timeout", "crashed"}));
}

TEST(SweepResume, AnOutOfMemoryRunNamesItsFirstDeviceAboveCapacityLessReserve) {
  pipegrid::DeviceMetrics fits, over, reserved;
  fits.host = "gpu0";
  fits.peak_memory_bytes = 512;
  fits.memory_capacity_bytes = 1024;
  over.host = "gpu1";
  over.peak_memory_bytes = 1110;
  over.memory_capacity_bytes = 1024;
  over.oom = true;
  reserved.host = "gpu2";
  reserved.peak_memory_bytes = 1110;
  reserved.memory_capacity_bytes = 1536;
  reserved.memory_reserve_bytes = 600;
  reserved.oom = true;
  EXPECT_EQ(pipegrid::sweep::out_of_memory_reason({fits}), std::nullopt);
  EXPECT_EQ(pipegrid::sweep::out_of_memory_reason({fits, over, reserved}), "gpu1 needs 1.084 KiB of 1 KiB");
  EXPECT_EQ(pipegrid::sweep::out_of_memory_reason({reserved, over}), "gpu2 needs 1.084 KiB of 936 B (600 B held in reserve)");
}

// Expert parallelism's metrics (issue 32) are columns of runs.csv, filled
// from the JSON where present and empty where a run has none.
TEST(SweepResume, ExpertParallelMetricsAreColumnsFilledOnlyWhereTheJsonHasThem) {
  const std::vector<std::string>& columns = pipegrid::sweep::metric_columns("simulate");
  const auto cell = [&](const pipegrid::sweep::ParsedMetrics& parsed, const std::string& column) {
    const auto found = std::find(columns.begin(), columns.end(), column);
    EXPECT_NE(found, columns.end()) << column;
    return found == columns.end() ? std::string("?") : parsed.cells.at(static_cast<std::size_t>(found - columns.begin()));
  };
  const auto with_experts = pipegrid::sweep::parse_metrics(
      "simulate", R"({"minibatch_time_s": 2, "all_to_all_s_per_device": 0.5, "all_to_all_exposed_s_per_device": 0.25,
                      "fb_overlap_effective": 0.75})");
  EXPECT_EQ(cell(with_experts, "all_to_all_s_per_device"), "0.5");
  EXPECT_EQ(cell(with_experts, "all_to_all_exposed_s_per_device"), "0.25");
  EXPECT_EQ(cell(with_experts, "fb_overlap_effective"), "0.75");
  const auto no_pairs = pipegrid::sweep::parse_metrics(
      "simulate", R"({"minibatch_time_s": 2, "all_to_all_s_per_device": 0.5, "fb_overlap_effective": null})");
  EXPECT_EQ(cell(no_pairs, "fb_overlap_effective"), "");
  const auto dense = pipegrid::sweep::parse_metrics("simulate", R"({"minibatch_time_s": 2})");
  EXPECT_EQ(cell(dense, "minibatch_time_s"), "2");
  EXPECT_EQ(cell(dense, "all_to_all_s_per_device"), "");
  EXPECT_EQ(cell(dense, "all_to_all_exposed_s_per_device"), "");
}

pipegrid::sweep::Setting path_setting(const std::string& path, const std::string& text = "") {
  pipegrid::sweep::Setting setting;
  setting.value = pipegrid::sweep::Scalar::of_text(text.empty() ? path : text);
  setting.resolved_path = path;
  return setting;
}

TEST(SweepInputs, RunsReadTheirProfilesAndPlatformsRoutesForPartitionersAndTensorParallelism) {
  PlannedRun plain = run_of("a", "plain");
  plain.settings["profile"] = path_setting("p1.json");
  plain.settings["platform"] = path_setting("x.xml");
  plain.settings["partitioner"] = path_setting("", "uniform");
  PlannedRun other = run_of("b", "other");
  other.settings["profile"] = path_setting("p2.json");
  other.settings["platform"] = path_setting("x.xml");
  other.settings["tensor_parallel"].value = pipegrid::sweep::Scalar::of_int(1);
  pipegrid::sweep::RunInputs inputs = pipegrid::sweep::inputs_of({&plain, &other});
  EXPECT_EQ(inputs.profiles, (std::set<std::string>{"p1.json", "p2.json"}));
  EXPECT_EQ(inputs.platforms, (std::set<std::string>{"x.xml"}));
  EXPECT_FALSE(inputs.partitioners);
  EXPECT_FALSE(inputs.tensor_parallel);

  PlannedRun partitioned = run_of("c", "partitioned");
  partitioned.settings["partitioner"] = path_setting("", "bapipe");
  PlannedRun split = run_of("d", "split");
  split.settings["tensor_parallel"].value = pipegrid::sweep::Scalar::of_int(2);
  inputs = pipegrid::sweep::inputs_of({&plain, &partitioned, &split});
  EXPECT_TRUE(inputs.partitioners);
  EXPECT_TRUE(inputs.tensor_parallel);
}

/// A scratch folder, removed with its content at the end of the test.
class Scratch : public pipegrid::testutil::ScratchFolder {
 public:
  Scratch() : ScratchFolder("pipegrid-sweep-inputs") {}
};

TEST(SweepInputs, ChecksNameTheMissingCapabilitiesAndInputs) {
  const Scratch scratch;
  const std::string present = (scratch.path() / "present.json").string();
  std::ofstream(present) << "{}";
  pipegrid::sweep::ExperimentPlan plan;
  plan.file = "study.toml";
  plan.input_files = {present};
  pipegrid::sweep::check_requires(plan);
  pipegrid::sweep::check_inputs_exist(plan);

  plan.missing_capabilities = {"execute", "validate"};
  EXPECT_EQ(pipegrid::testutil::input_error_of([&] { pipegrid::sweep::check_requires(plan); }),
            "study.toml: requires execute, validate, which this build of pipegrid lacks (the study is pending)");
  const std::string missing = (scratch.path() / "missing.json").string();
  plan.input_files = {missing, present, missing + "2"};
  EXPECT_EQ(pipegrid::testutil::input_error_of([&] { pipegrid::sweep::check_inputs_exist(plan); }),
            "study.toml: 2 input files are missing:\n  " + missing + "\n  " + missing + "2");
  plan.input_files = {scratch.path().string()};
  EXPECT_EQ(pipegrid::testutil::input_error_of([&] { pipegrid::sweep::check_inputs_exist(plan); }),
            "study.toml: input '" + scratch.path().string() + "' is a folder, not a file");
}

TEST(SweepInputs, AnInlinePlatformIsWrittenOnceAsItsXmlAndRunsPointAtIt) {
  pipegrid::sweep::Setting inline_platform;
  inline_platform.inline_platform = {{"servers", "1"},          {"gpus_per_server", "2"},  {"device", "A100"},
                                     {"memory", "80GB"},        {"intra", "300GBps,2us"}, {"inter", "25GBps,5us"}};
  inline_platform.value = pipegrid::sweep::Scalar::of_text("cluster:...");
  std::vector<PlannedRun> runs = {run_of("a", "a"), run_of("b", "b"), run_of("c", "c")};
  runs[0].settings["platform"] = inline_platform;
  runs[1].settings["platform"] = inline_platform;
  runs[2].settings["platform"] = path_setting("file.xml");
  const Scratch scratch;
  pipegrid::sweep::materialize_inline_platforms(runs, scratch.path().string());
  const std::string xml = pipegrid::sweep::inline_platform_xml(inline_platform);
  const fs::path expected = scratch.path() / "platforms" / (pipegrid::sweep::sha256_hex(xml).substr(0, 16) + ".xml");
  EXPECT_EQ(runs[0].settings.at("platform").resolved_path, expected.string());
  EXPECT_EQ(runs[1].settings.at("platform").resolved_path, expected.string());
  EXPECT_EQ(runs[2].settings.at("platform").resolved_path, "file.xml");
  EXPECT_EQ(pipegrid::read_text_file(expected.string()), xml);
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(scratch.path() / "platforms")) files += entry.is_regular_file();
  EXPECT_EQ(files, 1u);
}

}  // namespace
