// Per-action overhead and optimizer steps (host properties action_overhead,
// optimizer_step_rate, optimizer_step_overhead; docs/semantics.md "Action
// overhead and optimizer steps"): property parsing and its errors, and the
// closed forms the engine must reproduce exactly (1e-9 relative) on
// latency-only chains.
//
// Values are binary fractions, so the expected times are exact: overhead
// o = 1/4 per action, step overhead 1/2 and rate 16 B/s, so stage s (weight
// bytes 8 (s + 3), sim_test_util) steps for 1/2 + (s + 3)/2 seconds.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/metrics.hpp"
#include "core/platform.hpp"
#include "core/program.hpp"
#include "core/timeline.hpp"
#include "core/timeline_compare.hpp"
#include "schedules/schedules.hpp"
#include "sim/engine.hpp"
#include "sim_test_util.hpp"

namespace pipegrid {
namespace {

constexpr double kOverhead = 0.25, kStepOverhead = 0.5, kStepRate = 16;

bool near(double actual, double expected) { return std::abs(actual - expected) <= 1e-9 * std::abs(expected) + 1e-12; }

double step_of(int stage) { return kStepOverhead + testutil::weight_unit(stage) / kStepRate; }

std::string error_of(const std::map<std::string, std::string>& properties) {
  try {
    host_info_from_properties("plat.xml", "gpu0", properties);
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(HostProperties, OverheadAndStepTermsParseWithUnits) {
  const HostInfo none = host_info_from_properties("plat.xml", "gpu0", {});
  EXPECT_EQ(none.action_overhead_s, 0);
  EXPECT_FALSE(none.has_optimizer_step());
  EXPECT_EQ(none.optimizer_step_s(1e6), 0);

  const HostInfo info = host_info_from_properties(
      "plat.xml", "gpu0", {{"action_overhead", "12us"}, {"optimizer_step_rate", "2GBps"}, {"optimizer_step_overhead", "3ms"}});
  EXPECT_DOUBLE_EQ(info.action_overhead_s, 12e-6);
  EXPECT_TRUE(info.has_optimizer_step());
  EXPECT_DOUBLE_EQ(*info.optimizer_step_rate_Bps, 2e9);
  EXPECT_DOUBLE_EQ(*info.optimizer_step_overhead_s, 3e-3);
  EXPECT_DOUBLE_EQ(info.optimizer_step_s(4e9), 3e-3 + 2);

  // Plain numbers are seconds and bytes per second; either step term alone
  // makes a step.
  const HostInfo rate_only = host_info_from_properties("plat.xml", "gpu0", {{"optimizer_step_rate", "16"}});
  EXPECT_TRUE(rate_only.has_optimizer_step());
  EXPECT_EQ(rate_only.optimizer_step_s(32), 2);
  const HostInfo overhead_only =
      host_info_from_properties("plat.xml", "gpu0", {{"optimizer_step_overhead", "0.5"}, {"action_overhead", "0"}});
  EXPECT_TRUE(overhead_only.has_optimizer_step());
  EXPECT_EQ(overhead_only.optimizer_step_s(1e9), 0.5);
  EXPECT_EQ(overhead_only.action_overhead_s, 0);

  EXPECT_DOUBLE_EQ(parse_duration("2m", "t"), 120);
  EXPECT_DOUBLE_EQ(parse_duration("5ns", "t"), 5e-9);
  EXPECT_DOUBLE_EQ(parse_duration("1.5", "t"), 1.5);
}

TEST(HostProperties, BadValuesNameFileHostPropertyAndValue) {
  const struct {
    const char* property;
    const char* value;
    const char* expected;
  } cases[] = {
      {"action_overhead", "fast", "non-negative duration"},
      {"action_overhead", "-1us", "non-negative duration"},
      {"action_overhead", "3 parsecs", "non-negative duration"},
      {"action_overhead", "inf", "non-negative duration"},
      {"optimizer_step_overhead", "1kg", "non-negative duration"},
      {"optimizer_step_rate", "0", "positive bandwidth"},
      {"optimizer_step_rate", "-5GBps", "positive bandwidth"},
      {"optimizer_step_rate", "quick", "positive bandwidth"},
  };
  for (const auto& c : cases) {
    const std::string message = error_of({{c.property, c.value}});
    ASSERT_FALSE(message.empty()) << c.property << "=" << c.value << " was accepted";
    for (const std::string& part : {std::string("plat.xml"), std::string("'gpu0'"), fmt::format("'{}'", c.property),
                                    fmt::format("'{}'", c.value), std::string(c.expected)})
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' missing from: " << message;
  }
}

// A chain platform (sim_test_util) whose hosts all carry `properties`.
std::string chain_with(int hosts, DeviceKind kind, double hop_s, const std::string& properties) {
  std::string xml = testutil::chain_platform_xml(hosts, kind, hop_s);
  const std::string kind_prop = fmt::format("<prop id=\"kind\" value=\"{}\"/>", to_string(kind));
  for (std::size_t at = xml.find(kind_prop); at != std::string::npos; at = xml.find(kind_prop, at + 1))
    xml.insert(at + kind_prop.size(), properties);
  return xml;
}

std::string overhead_props() { return fmt::format("<prop id=\"action_overhead\" value=\"{}\"/>", kOverhead); }
std::string step_props() {
  return fmt::format("<prop id=\"optimizer_step_rate\" value=\"{}Bps\"/><prop id=\"optimizer_step_overhead\" value=\"{}s\"/>",
                     kStepRate, kStepOverhead);
}

struct ChainRun {
  Timeline timeline;
  Metrics metrics;
};

// `schedule` on a balanced straight chain of `stages` hosts, analytic network.
ChainRun run_chain(const std::string& platform_file, const std::string& schedule, int stages, int micro_batches,
              int mini_batches, double forward_s, double backward_s, ScheduleOptions options = {}) {
  options.num_stages = stages;
  options.micro_batches = micro_batches;
  options.mini_batches = mini_batches;
  sim::SimulationRequest request;
  request.platform_file = platform_file;
  request.program = generate_schedule(schedule, options);
  request.stages = testutil::balanced_stages(stages, forward_s, backward_s);
  request.update_interval = update_interval(schedule, options);
  std::map<std::string, int> stage_of_host;
  for (int s = 0; s < stages; ++s) {
    request.hosts.push_back({testutil::chain_host(s)});
    stage_of_host[testutil::chain_host(s)] = s;
  }
  ChainRun run;
  run.timeline = sim::simulate(request).timeline;
  MemoryModel memory;
  memory.stages = request.stages;
  const bool flushed = schedule_info(schedule).flushed;
  if (!flushed) {
    memory.versioning = WeightVersioning::Stashing;
    memory.update_interval = update_interval(schedule, options);
  }
  run.metrics = compute_metrics(run.timeline, memory, stage_of_host, mini_batches, micro_batches, !flushed);
  return run;
}

std::vector<const TimelineRecord*> records_of(const Timeline& timeline, const std::string& action) {
  std::vector<const TimelineRecord*> found;
  for (const TimelineRecord& record : timeline.records)
    if (record.action == action) found.push_back(&record);
  return found;
}

TEST(ActionOverhead, GPipeAndOneFOneBAddTwoOverheadsPerMicroBatchSlot) {
  // Without a step term: (M + N - 1)(F + B + 2o) (+ the SR terms), no "U".
  for (const double hop : {0.0, 0.5}) {
    const testutil::TempFile platform("pipegrid-overhead", ".xml", chain_with(4, DeviceKind::Gpu, hop, overhead_props()));
    for (int n = 2; n <= 4; ++n)
      for (int m = 1; m <= 5; ++m) {
        const double f = 1, b = 2, slot = f + b + 2 * kOverhead;
        const ChainRun gpipe = run_chain(platform.path(), "gpipe", n, m, 1, f, b);
        EXPECT_TRUE(near(gpipe.metrics.minibatch_time_s, (m + n - 1) * slot + 2 * (n - 1) * hop))
            << "gpipe N=" << n << " M=" << m << " SR=" << hop << ": " << gpipe.metrics.minibatch_time_s;
        EXPECT_TRUE(records_of(gpipe.timeline, "U").empty());
        const ChainRun sno = run_chain(platform.path(), "1f1b-sno", n, m, 1, f, b);
        const double sno_expected = (m + n - 1) * slot + (n + m - 2 - (m - 1 + n - 1) / n) * 2 * hop;
        EXPECT_TRUE(near(sno.metrics.minibatch_time_s, sno_expected))
            << "1f1b-sno N=" << n << " M=" << m << " SR=" << hop << ": " << sno.metrics.minibatch_time_s << " vs "
            << sno_expected;
        for (const TimelineRecord* forward : records_of(gpipe.timeline, "F"))
          EXPECT_TRUE(near(forward->end_s - forward->start_s, f + kOverhead));
      }
  }
}

TEST(OptimizerStep, FlushedMiniBatchTimeIsTheSlotsPlusTheInputStagesStep) {
  // Flushed schedules on a chain: stage 0's last backward ends the
  // mini-batch, then its step s_0; the later stages step earlier (their step
  // s_i = s_0 + i/2 is shorter than the i (B + o) their last backward is
  // ahead by). Per mini-batch: (M + N - 1)(F + B + 2o) + SR terms + s_0,
  // with K mini-batches exactly K times that.
  const testutil::TempFile platform("pipegrid-step", ".xml",
                                    chain_with(4, DeviceKind::Gpu, 0.5, overhead_props() + step_props()));
  const testutil::TempFile no_hop("pipegrid-step0", ".xml",
                                  chain_with(4, DeviceKind::Gpu, 0, overhead_props() + step_props()));
  for (const auto* file : {&platform, &no_hop}) {
    const double hop = file == &platform ? 0.5 : 0;
    for (int n = 2; n <= 4; ++n)
      for (int m = 1; m <= 5; ++m)
        for (int k : {1, 2}) {
          const double f = 1, b = 2, slot = f + b + 2 * kOverhead;
          const ChainRun gpipe = run_chain(file->path(), "gpipe", n, m, k, f, b);
          const double expected = (m + n - 1) * slot + 2 * (n - 1) * hop + step_of(0);
          EXPECT_TRUE(near(gpipe.metrics.minibatch_time_s, expected))
              << "gpipe N=" << n << " M=" << m << " K=" << k << " SR=" << hop << ": " << gpipe.metrics.minibatch_time_s
              << " vs " << expected;
          const ChainRun sno = run_chain(file->path(), "1f1b-sno", n, m, k, f, b);
          const double sno_expected = (m + n - 1) * slot + (n + m - 2 - (m - 1 + n - 1) / n) * 2 * hop + step_of(0);
          EXPECT_TRUE(near(sno.metrics.minibatch_time_s, sno_expected))
              << "1f1b-sno N=" << n << " M=" << m << " K=" << k << " SR=" << hop << ": " << sno.metrics.minibatch_time_s
              << " vs " << sno_expected;
          // One step per device and mini-batch, right after its last backward.
          const auto steps = records_of(gpipe.timeline, "U");
          ASSERT_EQ(steps.size(), static_cast<std::size_t>(n * k));
          for (const TimelineRecord* step : steps) {
            EXPECT_TRUE(near(step->end_s - step->start_s, step_of(step->stage)));
            double last_backward_end = -1;
            int last_micro_batch = -1;
            for (const TimelineRecord* backward : records_of(gpipe.timeline, "B"))
              if (backward->host == step->host && backward->mini_batch == step->mini_batch &&
                  backward->end_s > last_backward_end) {
                last_backward_end = backward->end_s;
                last_micro_batch = backward->micro_batch;
              }
            EXPECT_EQ(step->start_s, last_backward_end);
            EXPECT_EQ(step->micro_batch, last_micro_batch);
            for (const TimelineRecord* forward : records_of(gpipe.timeline, "F"))
              if (forward->host == step->host && forward->mini_batch > step->mini_batch) {
                EXPECT_GE(forward->start_s, step->end_s);
              }
          }
        }
  }
}

TEST(OptimizerStep, RecomputationAndOneFOneBSoKeepTheForm) {
  // With SR = 0, 1F1B-SO gives (M + N - 1)(F + B + 2o) + s_0. GPipe with
  // recomputation: a stage runs each R while it waits for the gradient, so
  // only the input stage's M recomputations add up:
  // (M + N - 1)(F + B + 2o) + M (F + o) + s_0.
  const testutil::TempFile platform("pipegrid-step-so", ".xml",
                                    chain_with(3, DeviceKind::Gpu, 0, overhead_props() + step_props()));
  for (int m = 1; m <= 6; ++m) {
    const ChainRun so = run_chain(platform.path(), "1f1b-so", 3, m, 2, 1, 1);
    EXPECT_TRUE(near(so.metrics.minibatch_time_s, (m + 2) * (2 + 2 * kOverhead) + step_of(0))) << "M=" << m;
    ScheduleOptions recompute;
    recompute.recompute = true;
    const ChainRun gpipe = run_chain(platform.path(), "gpipe", 3, m, 2, 1, 1, recompute);
    const double expected = (m + 2) * (2 + 2 * kOverhead) + m * (1 + kOverhead) + step_of(0);
    EXPECT_TRUE(near(gpipe.metrics.minibatch_time_s, expected))
        << "M=" << m << ": " << gpipe.metrics.minibatch_time_s << " vs " << expected;
  }
}

TEST(OptimizerStep, PipeDreamStepsAfterEveryBackwardAndTheSlowestStageSetsThePeriod) {
  // Straight balanced pipeline, SR = 0: every stage steps after each
  // backward; the last stage has the longest step, so the steady period is
  // F + B + 2o + s_(N-1).
  const testutil::TempFile platform("pipegrid-step-pd", ".xml",
                                    chain_with(4, DeviceKind::Gpu, 0, overhead_props() + step_props()));
  for (int n = 2; n <= 4; ++n) {
    const int mini_batches = 32;
    const ChainRun run = run_chain(platform.path(), "pipedream", n, 1, mini_batches, 1, 2);
    ASSERT_TRUE(run.metrics.steady_state.has_value());
    EXPECT_TRUE(near(run.metrics.minibatch_time_s, 1 + 2 + 2 * kOverhead + step_of(n - 1)))
        << "N=" << n << ": " << run.metrics.minibatch_time_s;
    EXPECT_EQ(records_of(run.timeline, "U").size(), static_cast<std::size_t>(n * mini_batches));
    for (const TimelineRecord* step : records_of(run.timeline, "U")) {
      bool follows = false;
      for (const TimelineRecord* backward : records_of(run.timeline, "B"))
        follows = follows || (backward->host == step->host && backward->micro_batch == step->micro_batch &&
                              backward->mini_batch == step->mini_batch && backward->end_s == step->start_s);
      EXPECT_TRUE(follows) << step->host << " U@" << step->mini_batch;
    }
  }
}

TEST(OptimizerStep, TwoBwStepsEveryUpdateInterval) {
  const testutil::TempFile platform("pipegrid-step-2bw", ".xml", chain_with(3, DeviceKind::Gpu, 0, step_props()));
  ScheduleOptions options;
  options.update_interval = 3;
  const ChainRun run = run_chain(platform.path(), "pipedream-2bw", 3, 1, 10, 1, 1, options);
  std::map<std::string, std::vector<int>> stepped;  // host -> mini-batches of its steps
  for (const TimelineRecord* step : records_of(run.timeline, "U")) stepped[step->host].push_back(step->mini_batch);
  ASSERT_EQ(stepped.size(), 3u);
  for (auto& [host, list] : stepped) {
    std::sort(list.begin(), list.end());
    EXPECT_EQ(list, (std::vector<int>{2, 5, 8})) << host;  // the 3rd, 6th and 9th backwards
  }
}

TEST(OptimizerStep, ReplicatedStagesStepWhenTheirAllReduceEnds) {
  // dp on two hosts: each all-reduces at the end of the mini-batch, then
  // steps; the next mini-batch starts after the step.
  const testutil::TempFile platform("pipegrid-step-dp", ".xml", chain_with(2, DeviceKind::Gpu, 0.5, step_props()));
  ScheduleOptions options;
  options.num_stages = 1;
  options.micro_batches = 4;
  options.mini_batches = 2;
  options.replicas = {2};
  sim::SimulationRequest request;
  request.platform_file = platform.path();
  request.program = generate_schedule("dp", options);
  request.stages = testutil::balanced_stages(1, 1, 1);
  request.update_interval = update_interval("dp", options);
  request.hosts = {{testutil::chain_host(0), testutil::chain_host(1)}};
  const Timeline timeline = sim::simulate(request).timeline;
  const auto steps = records_of(timeline, "U");
  ASSERT_EQ(steps.size(), 4u);  // 2 hosts x 2 mini-batches
  for (const TimelineRecord* step : steps) {
    EXPECT_TRUE(near(step->end_s - step->start_s, step_of(0)));
    bool after_all_reduce = false;
    for (const TimelineRecord* all_reduce : records_of(timeline, "ALLREDUCE"))
      after_all_reduce = after_all_reduce || (all_reduce->host == step->host && all_reduce->mini_batch == step->mini_batch &&
                                              all_reduce->end_s == step->start_s);
    EXPECT_TRUE(after_all_reduce) << step->host << " U@" << step->mini_batch;
    for (const TimelineRecord* forward : records_of(timeline, "F"))
      if (forward->host == step->host && forward->mini_batch > step->mini_batch) {
        EXPECT_GE(forward->start_s, step->end_s);
      }
  }
}

TEST(ActionOverhead, APerLayerBackwardTakesItBeforeItsFirstLayer) {
  // dp --wait-free on two hosts: the backward is cut into per-layer
  // segments; the overhead comes first, so the backward takes B + o and the
  // last layer's all-reduce (the first to start) starts o + its share of B
  // after the backward does.
  const testutil::TempFile platform("pipegrid-overhead-wf", ".xml",
                                    chain_with(2, DeviceKind::Gpu, 0, overhead_props()));
  ScheduleOptions options;
  options.num_stages = 1;
  options.micro_batches = 2;
  options.replicas = {2};
  options.wait_free = true;
  sim::SimulationRequest request;
  request.platform_file = platform.path();
  request.program = generate_schedule("dp", options);
  request.stages = testutil::balanced_stages(1, 1, 2);
  request.stage_layers = {{{1.5, 8, 0.5}, {0.5, 8, 0.5}}};  // backward 1.5 + 0.5, 8 weight bytes each
  request.hosts = {{testutil::chain_host(0), testutil::chain_host(1)}};
  const Timeline timeline = sim::simulate(request).timeline;
  const auto backwards = records_of(timeline, "B");
  ASSERT_EQ(backwards.size(), 2u);
  for (const TimelineRecord* backward : backwards) {
    EXPECT_TRUE(near(backward->end_s - backward->start_s, 2 + kOverhead));
    double first_all_reduce = -1;
    for (const TimelineRecord* all_reduce : records_of(timeline, "ALLREDUCE"))
      if (all_reduce->host == backward->host && all_reduce->micro_batch == 1)
        first_all_reduce = all_reduce->start_s;
    EXPECT_TRUE(near(first_all_reduce, backward->start_s + kOverhead + 0.5)) << first_all_reduce;
  }
  EXPECT_TRUE(records_of(timeline, "U").empty());
}

TEST(OptimizerStep, FbpAsOtherStreamWaitsForTheStep) {
  // fbp-as runs forwards and backwards on two streams; the forward stream's
  // first action of the next mini-batch waits for the step.
  const testutil::TempFile platform("pipegrid-step-fbp", ".xml", chain_with(2, DeviceKind::Fpga, 0, step_props()));
  const ChainRun run = run_chain(platform.path(), "fbp-as", 2, 3, 2, 1, 1);
  const auto steps = records_of(run.timeline, "U");
  ASSERT_EQ(steps.size(), 4u);
  for (const TimelineRecord* step : steps)
    for (const TimelineRecord* forward : records_of(run.timeline, "F"))
      if (forward->host == step->host && forward->mini_batch > step->mini_batch) {
        EXPECT_GE(forward->start_s, step->end_s);
      }
}

TEST(OptimizerStep, ABadPropertyInThePlatformNamesFileAndProperty) {
  const std::string xml = chain_with(2, DeviceKind::Gpu, 0, "<prop id=\"optimizer_step_rate\" value=\"fast\"/>");
  const testutil::TempFile platform("pipegrid-step-bad", ".xml", xml);
  try {
    run_chain(platform.path(), "gpipe", 2, 2, 1, 1, 1);
    ADD_FAILURE() << "a malformed optimizer_step_rate was accepted";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(platform.path()), std::string::npos) << message;
    EXPECT_NE(message.find("'optimizer_step_rate'"), std::string::npos) << message;
    EXPECT_NE(message.find("'fast'"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace pipegrid
