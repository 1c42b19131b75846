// The schedules of issue 14 through the whole run (api::make_plan, the SimGrid
// engine, metrics) on a platform whose transfers take no time: the engine's
// makespan, per-device work, span bubble and in-flight peaks equal the
// independent list-scheduling model's (list_schedule_model.hpp), so the
// closed forms the model is checked against hold for the engine too; and the
// section 12 table of SCHEDULES-BEYOND.md exactly.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "api/simulation.hpp"
#include "list_schedule_model.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid {
namespace {

const std::string kSource = PIPEGRID_SOURCE_DIR;

// Eight layers, each with forward TF/2, input gradient TB/2 and weight
// gradient TW/2: a stage of two layers (one stage per device on four
// devices) takes TF, TB, TW; a chunk of one layer (v = 2) half of that.
std::string write_profile(const testutil::Times& t) {
  const std::string path = fmt::format("{}/pipegrid-beyond-{}-{}-{}-{}.json", std::filesystem::temp_directory_path().string(),
                                       t.tf, t.tb, t.tw, getpid());
  std::string layers;
  for (int l = 0; l < 8; ++l)
    layers += fmt::format(
        "{}    {{\"name\": \"l{}\", \"forward_s\": {}, \"backward_s\": {}, \"backward_input_s\": {}, \"backward_weight_s\": {}, "
        "\"output_bytes\": 0, \"parameter_bytes\": 1000}}",
        l == 0 ? "" : ",\n", l, t.tf / 2, t.tb / 2 + t.tw / 2, t.tb / 2, t.tw / 2);
  std::ofstream(path) << "{\"name\": \"uniform8\", \"micro_batch_size\": 1, \"input_bytes\": 0, \"layers\": [\n" << layers << "\n]}\n";
  return path;
}

struct EngineRun {
  api::RunResult result;
  double makespan = 0, span_bubble = 0;
};

EngineRun run_engine(const std::string& schedule, int m, const testutil::Times& t) {
  const std::string profile = write_profile(t);
  api::PlanRequest request;
  request.platform_file = kSource + "/tests/data/common/ring4-free.xml";
  request.profile_file = profile;
  request.schedule = schedule;
  request.micro_batches = m;
  request.network = "analytic";
  request.fb_overlap = t.overlap;
  Plan plan = api::make_plan(request);
  std::filesystem::remove(profile);
  EngineRun run;
  run.result = api::run_plan(plan);
  run.makespan = run.result.metrics.minibatch_time_s;
  for (const DeviceMetrics& device : run.result.metrics.devices) {
    double first = 1e300, last = 0;
    for (const TimelineRecord& r : run.result.timeline.records)
      if (r.host == device.host && r.kind() == RecordKind::Compute) {
        first = std::min(first, r.start_s);
        last = std::max(last, r.end_s);
      }
    run.span_bubble = std::max(run.span_bubble, last - first - device.busy_s);
  }
  return run;
}

void expect_engine_equals_model(const std::string& schedule, int m, const testutil::Times& t) {
  const std::string what = fmt::format("{} m={} TF={} TB={} TW={} F&B={}", schedule, m, t.tf, t.tb, t.tw, t.overlap);
  const EngineRun engine = run_engine(schedule, m, t);
  const testutil::ModelRun model = testutil::simulate(engine.result.program, default_virtual_stages(schedule), t);
  ASSERT_TRUE(model.complete) << what;
  EXPECT_NEAR(engine.makespan, model.makespan, 1e-9 * model.makespan) << what;
  EXPECT_NEAR(engine.span_bubble, model.span_bubble, 1e-9 * model.makespan) << what;
  ASSERT_EQ(engine.result.metrics.devices.size(), model.peak.size()) << what;
  for (std::size_t d = 0; d < model.peak.size(); ++d)
    EXPECT_EQ(engine.result.metrics.devices[d].peak_stashed_microbatches, model.peak[d]) << what << ", device " << d;
}

const std::vector<std::string> kSchedules = {"interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb1p", "zb-v", "dualpipev"};

TEST(SchedulesBeyondEngine, SectionTwelveTable) {
  struct Row {
    std::string schedule;
    double makespan, span_bubble;
    std::vector<int> peak;
  };
  const std::vector<Row> rows = {
      {"1f1b-sno", 33, 9, {4, 3, 2, 1}},          {"interleaved-1f1b", 28.5, 4.5, {11, 9, 7, 5}},
      {"looped-bfs", 28.5, 4.5, {16, 16, 16, 16}}, {"zb-h1", 27, 3, {4, 4, 4, 4}},
      {"zb-h2", 27, 0, {7, 7, 7, 7}},              {"zb1p", 25.5, 1.5, {8, 8, 8, 8}},
      {"zb-v", 25.5, 0, {8, 8, 8, 8}},             {"dualpipev", 27, 3, {9, 9, 9, 9}},
  };
  for (const Row& row : rows) {
    const EngineRun run = run_engine(row.schedule, 8, {});
    EXPECT_NEAR(run.makespan, row.makespan, 1e-9) << row.schedule;
    EXPECT_NEAR(run.span_bubble, row.span_bubble, 1e-9) << row.schedule;
    // The global bubble: every device works m (TF + TB + TW) = 24.
    for (const DeviceMetrics& device : run.result.metrics.devices) EXPECT_NEAR(device.busy_s, 24, 1e-9) << row.schedule;
    std::vector<int> peak;
    for (const DeviceMetrics& device : run.result.metrics.devices) peak.push_back(device.peak_stashed_microbatches);
    EXPECT_EQ(peak, row.peak) << row.schedule;
  }
}

TEST(SchedulesBeyondEngine, EqualsTheListSchedulingModelAtNonUniformTimes) {
  const std::vector<testutil::Times> times = {{1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {1, 1, 2}, {0.7, 1.3, 0.4}};
  for (const std::string& schedule : kSchedules)
    for (const testutil::Times& t : times)
      for (const int m : {8, 12}) expect_engine_equals_model(schedule, m, t);
}

TEST(SchedulesBeyondEngine, ClosedFormsThroughTheEngine) {
  // Bubble (span) of the critical device, m = 12, p = 4, v = 2 where chunked.
  const int p = 4, m = 12;
  for (const testutil::Times& t : std::vector<testutil::Times>{{1, 1, 1}, {1, 2, 1}, {0.7, 1.3, 0.4}}) {
    const double work = m * (t.tf + t.tb + t.tw);
    const auto span_of = [&](const std::string& schedule) { return run_engine(schedule, m, t).makespan; };
    EXPECT_NEAR(span_of("interleaved-1f1b"), work + (p - 1) * (t.tf + t.tb + t.tw) / 2, 1e-9 * work);
    EXPECT_NEAR(span_of("looped-bfs"), work + (p - 1) * (t.tf + t.tb + t.tw) / 2, 1e-9 * work);
    EXPECT_NEAR(span_of("zb-h1"), work + (p - 1) * std::max(t.tf + t.tb - t.tw, t.tb), 1e-9 * work);
    EXPECT_NEAR(span_of("zb1p"), work + (p - 1) * std::max(t.tf + t.tb - t.tw, t.tb) / 2, 1e-9 * work);
  }
}

TEST(SchedulesBeyondEngine, OverlappedPairsTakeTheirFraction) {
  // DualPipeV with F&B = 0.7 (F + B): the engine follows the model.
  expect_engine_equals_model("dualpipev", 8, {1, 1, 1, 0.7});
  expect_engine_equals_model("dualpipev", 12, {0.7, 1.3, 0.4, 0.5});
}

// DualPipe (issue 32): two copies of the model as the two replicas of each
// stage. The engine equals the model, the section 12 row (26, span bubble 2,
// 5 in flight) holds, and so does the README's (PP/2 - 1)(F&B + B - 3W)
// where it is exact (I = F, W <= F, F&B = F + B: test_schedules_dualpipe.cpp).
// The mini-batch ends with the copies' gradient all-reduces: on a device,
// its two stages of 2 x 1000 B each, a ring of two (two steps of 1000 B) at
// 1 TB/s without latency: 4 x 1 ns after the last backward.
TEST(SchedulesBeyondEngine, DualPipeEqualsTheModelAndTheReadmeBubble) {
  for (const testutil::Times& t : std::vector<testutil::Times>{{1, 1, 1}, {1, 2, 1}, {0.7, 1.3, 0.4}, {1, 1, 1, 0.7}})
    for (const int m : {8, 12}) expect_engine_equals_model("dualpipe", m, t);
  const double all_reduces = 4e-9;
  const EngineRun table = run_engine("dualpipe", 8, {});
  EXPECT_NEAR(table.makespan, 26 + all_reduces, 1e-11);
  EXPECT_NEAR(table.span_bubble, 2, 1e-9);
  for (const DeviceMetrics& device : table.result.metrics.devices) {
    EXPECT_NEAR(device.busy_s, 24, 1e-9);
    EXPECT_EQ(device.peak_stashed_microbatches, 5);
  }
  const int p = 4;
  for (const testutil::Times& t : std::vector<testutil::Times>{{1, 1, 1}, {1, 1, 0.5}, {0.8, 0.8, 0.3}}) {
    const double b = t.tb + t.tw, bubble = (p / 2 - 1) * ((t.tf + b) + b - 3 * t.tw);
    const EngineRun run = run_engine("dualpipe", 12, t);
    EXPECT_NEAR(run.span_bubble, bubble, 1e-9) << "F=" << t.tf << " W=" << t.tw;
    EXPECT_NEAR(run.makespan, 12 * (t.tf + b) + bubble + all_reduces, 1e-11) << "F=" << t.tf << " W=" << t.tw;
  }
}

}  // namespace
}  // namespace pipegrid
