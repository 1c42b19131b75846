// Comparison of simulated and measured timelines (core/timeline_compare.hpp):
// hand-built timelines whose errors are known exactly.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/timeline_compare.hpp"
#include "expect_input_error.hpp"
#include "render/timeline_svg.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

TimelineRecord compute(const std::string& host, int stage, const std::string& action, int micro_batch, double start,
                       double end, int mini_batch = 0) {
  TimelineRecord record;
  record.host = host;
  record.stage = stage;
  record.action = action;
  record.micro_batch = micro_batch;
  record.mini_batch = mini_batch;
  record.start_s = start;
  record.end_s = end;
  return record;
}

/// Two stages, two micro-batches, unit-time actions; span 6 s, one mini-batch.
/// Each device computes 4 s of the 6: bubble fraction 1/3.
Timeline two_stages(const std::string& host0, const std::string& host1) {
  Timeline timeline;
  timeline.hosts = {host0, host1};
  timeline.records = {
      compute(host0, 0, "F", 0, 0, 1), compute(host0, 0, "F", 1, 1, 2), compute(host1, 1, "F", 0, 1, 2),
      compute(host1, 1, "F", 1, 2, 3), compute(host1, 1, "B", 1, 3, 4), compute(host1, 1, "B", 0, 4, 5),
      compute(host0, 0, "B", 1, 4, 5), compute(host0, 0, "B", 0, 5, 6),
  };
  TimelineRecord send = compute(host0, 0, "SEND_F", 0, 1, 1.5);
  send.peer = host1;
  send.bytes = 100;
  timeline.records.push_back(send);
  return timeline;
}

/// `timeline` with every time t replaced by scale * t + shift.
Timeline rescaled(Timeline timeline, double scale, double shift) {
  for (TimelineRecord& record : timeline.records) {
    record.start_s = scale * record.start_s + shift;
    record.end_s = scale * record.end_s + shift;
  }
  return timeline;
}

TEST(NearestRankPercentile, IsAValueOfRankCeilPN) {
  const std::vector<double> ten = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  EXPECT_EQ(nearest_rank_percentile(ten, 50), 5);   // rank ceil(5) = 5
  EXPECT_EQ(nearest_rank_percentile(ten, 90), 9);   // rank 9
  EXPECT_EQ(nearest_rank_percentile(ten, 95), 10);  // rank ceil(9.5) = 10
  EXPECT_EQ(nearest_rank_percentile(ten, 0), 1);
  EXPECT_EQ(nearest_rank_percentile(ten, 100), 10);
  std::vector<double> twenty;
  for (int k = 1; k <= 20; ++k) twenty.push_back(k);
  EXPECT_EQ(nearest_rank_percentile(twenty, 95), 19);  // 0.95 x 20 = 19 exactly, not 20
  EXPECT_EQ(nearest_rank_percentile({3, 1, 2}, 50), 2);
  EXPECT_EQ(nearest_rank_percentile({4, 1}, 50), 1);  // the lower middle value
  EXPECT_EQ(nearest_rank_percentile({}, 50), 0);
}

TEST(ActionName, FollowsTheProgramTextForm) {
  EXPECT_EQ(action_name(compute("g", 2, "F", 5, 0, 1), 0), "2F5");
  EXPECT_EQ(action_name(compute("g", 1, "B", 3, 0, 1, 1), 0), "1B3@1");
  EXPECT_EQ(action_name(compute("g", 0, "SEND_F", 1, 0, 1), 2), "0SEND_F1[r2]");
  EXPECT_EQ(action_name(compute("g", 1, "ALLREDUCE", -1, 0, 1, 3), 0), "1ALLREDUCE@3");
  EXPECT_EQ(action_name(compute("g", 1, "ALLREDUCE", 7, 0, 1), 1), "1ALLREDUCE7[r1]");
}

TEST(CompareTimelines, IdenticalTimelinesHaveNoError) {
  const Timeline timeline = two_stages("gpu0", "gpu1");
  const TimelineComparison c = compare_timelines(timeline, "sim", timeline, "real", {});
  EXPECT_EQ(c.matched, 9u);
  EXPECT_EQ(c.simulated_minibatches, 1);
  EXPECT_EQ(c.simulated_minibatch_time_s, 6);
  EXPECT_EQ(c.measured_minibatch_time_s, 6);
  EXPECT_EQ(c.relative_error, 0);
  EXPECT_EQ(c.action_error.median, 0);
  EXPECT_EQ(c.action_error.p95, 0);
  EXPECT_EQ(c.action_error.max, 0);
  EXPECT_DOUBLE_EQ(c.simulated_bubble_fraction, 1.0 / 3);
  EXPECT_EQ(c.simulated_bubble_fraction, c.measured_bubble_fraction);
  EXPECT_TRUE(c.only_simulated.empty());
  EXPECT_TRUE(c.only_measured.empty());
}

TEST(CompareTimelines, AShiftAloneIsNoError) {
  const Timeline sim = two_stages("gpu0", "gpu1");
  const TimelineComparison c = compare_timelines(sim, "sim", rescaled(two_stages("cpu0", "cpu1"), 1, 123.5), "real", {});
  EXPECT_EQ(c.relative_error, 0);
  EXPECT_EQ(c.action_error.max, 0);
}

TEST(CompareTimelines, ATwiceSlowerRunGivesKnownErrors) {
  // Measured: every time doubled, then shifted by 10 s, on devices named
  // differently. Shifted to 0, a measured time is twice the simulated one,
  // so an action's start error is s / 12 and its end error e / 12 (the
  // measured mini-batch time is 12 s).
  const Timeline sim = two_stages("gpu0", "gpu1");
  CompareOptions options;
  options.compute_only = true;  // the 8 compute actions
  options.worst = 3;
  const TimelineComparison c =
      compare_timelines(sim, "sim", rescaled(two_stages("cpu0", "cpu1"), 2, 10), "real", options);
  EXPECT_EQ(c.matched, 8u);
  EXPECT_EQ(c.simulated_minibatch_time_s, 6);
  EXPECT_EQ(c.measured_minibatch_time_s, 12);
  EXPECT_EQ(c.relative_error, -0.5);
  // Ends 1 2 2 3 4 5 5 6: nearest-rank median rank 4 -> 3, p95 rank 8 -> 6.
  EXPECT_DOUBLE_EQ(c.end_error.median, 3.0 / 12);
  EXPECT_DOUBLE_EQ(c.end_error.p95, 6.0 / 12);
  EXPECT_DOUBLE_EQ(c.end_error.max, 6.0 / 12);
  // Starts 0 1 1 2 3 4 4 5.
  EXPECT_DOUBLE_EQ(c.start_error.median, 2.0 / 12);
  EXPECT_DOUBLE_EQ(c.start_error.p95, 5.0 / 12);
  // The action error is the worse end: here always the end.
  EXPECT_DOUBLE_EQ(c.action_error.median, 3.0 / 12);
  EXPECT_DOUBLE_EQ(c.action_error.p95, 0.5);
  ASSERT_EQ(c.worst.size(), 3u);
  EXPECT_EQ(c.worst[0].name, "0B0");
  EXPECT_EQ(c.worst[1].name, "0B1");  // ties (5/12) in name order
  EXPECT_EQ(c.worst[2].name, "1B0");
  EXPECT_EQ(c.worst[0].measured_start_s, 10);
  EXPECT_EQ(c.worst[0].measured_end_s, 12);
  EXPECT_DOUBLE_EQ(c.measured_bubble_fraction, 1.0 / 3);
}

TEST(CompareTimelines, MiniBatchTimeIsTheSpanOverMiniBatches) {
  Timeline sim;
  sim.records = {compute("g", 0, "F", 0, 0, 1, 0), compute("g", 0, "F", 0, 1, 3, 1), compute("g", 0, "F", 0, 3, 4, 2)};
  const TimelineComparison c = compare_timelines(sim, "sim", sim, "real", {});
  EXPECT_EQ(c.simulated_minibatches, 3);
  EXPECT_DOUBLE_EQ(c.simulated_minibatch_time_s, 4.0 / 3);
  EXPECT_EQ(c.simulated_bubble_fraction, 0);
}

TEST(CompareTimelines, BusyTimeIsTheUnionOfComputeIntervals) {
  // Two overlapping streams on one device, busy from 0 to 3 of a 4 s span.
  Timeline sim;
  sim.records = {compute("g", 0, "F", 0, 0, 2), compute("g", 0, "B", 1, 1, 3), compute("h", 1, "F", 0, 3, 4)};
  sim.records[1].stream = 1;
  const TimelineComparison c = compare_timelines(sim, "sim", sim, "real", {});
  EXPECT_DOUBLE_EQ(c.simulated_bubble_fraction, (0.25 + 0.75) / 2);
}

TEST(CompareTimelines, ActionsInOneTimelineOnlyAreAnError) {
  const Timeline sim = two_stages("gpu0", "gpu1");
  Timeline real = two_stages("cpu0", "cpu1");
  real.records.erase(real.records.begin() + 5);  // 1B0
  real.records.push_back(compute("cpu1", 1, "R", 0, 3.5, 4));
  const std::string message = input_error_of([&] { compare_timelines(sim, "sim.csv", real, "real.csv", {}); });
  EXPECT_CONTAINS(message, "1 only in sim.csv: 1B0");
  EXPECT_CONTAINS(message, "1 only in real.csv: 1R0");
  EXPECT_CONTAINS(message, "--allow-missing");

  CompareOptions options;
  options.allow_missing = true;
  const TimelineComparison c = compare_timelines(sim, "sim.csv", real, "real.csv", options);
  EXPECT_EQ(c.matched, 8u);
  EXPECT_EQ(c.only_simulated, std::vector<std::string>{"1B0"});
  EXPECT_EQ(c.only_measured, std::vector<std::string>{"1R0"});
}

TEST(CompareTimelines, TransfersAreIgnoredWithComputeOnly) {
  const Timeline sim = two_stages("gpu0", "gpu1");
  Timeline real = two_stages("cpu0", "cpu1");
  real.records.pop_back();  // the send
  EXPECT_CONTAINS(input_error_of([&] { compare_timelines(sim, "sim", real, "real", {}); }), "0SEND_F0");
  CompareOptions options;
  options.compute_only = true;
  EXPECT_EQ(compare_timelines(sim, "sim", real, "real", options).matched, 8u);
}

/// two_stages with an optimizer step after each device's last backward
/// (gpu1 steps from 5 to 5.5, gpu0 from 6 to 7: span 7 s).
Timeline two_stages_with_steps(const std::string& host0, const std::string& host1) {
  Timeline timeline = two_stages(host0, host1);
  timeline.records.push_back(compute(host1, 1, "U", 0, 5, 5.5));
  timeline.records.push_back(compute(host0, 0, "U", 0, 6, 7));
  return timeline;
}

TEST(CompareTimelines, StepsAreIgnoredWhenOneTimelineHasNone) {
  // The simulated timeline has steps, the measured one does not: the steps
  // are dropped before anything is computed, so the comparison is that of
  // two_stages with itself.
  const TimelineComparison c =
      compare_timelines(two_stages_with_steps("gpu0", "gpu1"), "sim", two_stages("cpu0", "cpu1"), "real", {});
  EXPECT_EQ(c.matched, 9u);
  EXPECT_EQ(c.simulated_minibatch_time_s, 6);
  EXPECT_EQ(c.relative_error, 0);
  EXPECT_DOUBLE_EQ(c.simulated_bubble_fraction, 1.0 / 3);
  EXPECT_TRUE(c.only_simulated.empty());
  // The other way round too.
  const TimelineComparison reverse =
      compare_timelines(two_stages("gpu0", "gpu1"), "sim", two_stages_with_steps("cpu0", "cpu1"), "real", {});
  EXPECT_EQ(reverse.matched, 9u);
  EXPECT_EQ(reverse.measured_minibatch_time_s, 6);
  EXPECT_TRUE(reverse.only_measured.empty());
}

TEST(CompareTimelines, StepsAreMatchedWhenBothTimelinesHaveThem) {
  const Timeline sim = two_stages_with_steps("gpu0", "gpu1");
  Timeline real = two_stages_with_steps("cpu0", "cpu1");
  real.records.back().end_s = 8;  // gpu0's step takes 2 s instead of 1
  const TimelineComparison c = compare_timelines(sim, "sim", real, "real", {});
  EXPECT_EQ(c.matched, 11u);
  EXPECT_EQ(c.simulated_minibatch_time_s, 7);
  EXPECT_EQ(c.measured_minibatch_time_s, 8);
  ASSERT_FALSE(c.worst.empty());
  EXPECT_EQ(c.worst[0].name, "0U0");
  EXPECT_DOUBLE_EQ(c.worst[0].end_error, 1.0 / 8);
  // A step present in one timeline only is a missing action like any other.
  real.records.erase(real.records.end() - 2);  // 1U0
  EXPECT_CONTAINS(input_error_of([&] { compare_timelines(sim, "sim", real, "real", {}); }), "1 only in sim: 1U0");
}

TEST(CompareTimelines, NoCommonActionIsAnError) {
  Timeline sim, real;
  sim.records = {compute("g", 0, "F", 0, 0, 1)};
  real.records = {compute("c", 0, "F", 0, 0, 1, 2)};
  const std::string message = input_error_of([&] { compare_timelines(sim, "sim.csv", real, "real.csv", {}); });
  EXPECT_CONTAINS(message, "no action in common");
  EXPECT_CONTAINS(message, "--align first");
}

TEST(CompareTimelines, AlignFirstNumbersMiniBatchesFromZero) {
  // The measured run left out warm-up mini-batches 0 and 1.
  Timeline sim, real;
  sim.records = {compute("g", 0, "F", 0, 0, 1, 0), compute("g", 0, "F", 0, 1, 2, 1)};
  real.records = {compute("c", 0, "F", 0, 5, 6, 2), compute("c", 0, "F", 0, 6, 7, 3)};
  CompareOptions options;
  options.align_first = true;
  const TimelineComparison c = compare_timelines(sim, "sim", real, "real", options);
  EXPECT_EQ(c.matched, 2u);
  EXPECT_EQ(c.action_error.max, 0);
}

TEST(CompareTimelines, ReplicasMatchByRankNotByHostName) {
  // Stage 0 replicated on two devices (data parallel: the same micro-batch
  // number on each, and an all-reduce part on each). The measured run lists
  // its devices in the same order under other names; the second replica is
  // slower in both runs, so matching by replica rank gives no error, while
  // matching by start time alone would pair the wrong records.
  auto build = [](const std::string& a, const std::string& b, double shift) {
    Timeline timeline;
    timeline.hosts = {a, b};
    timeline.records = {compute(b, 0, "F", 0, 0 + shift, 2 + shift), compute(a, 0, "F", 0, 0.5 + shift, 1 + shift),
                        compute(a, 0, "ALLREDUCE", -1, 2 + shift, 3 + shift),
                        compute(b, 0, "ALLREDUCE", -1, 2 + shift, 3.5 + shift)};
    return timeline;
  };
  const TimelineComparison c =
      compare_timelines(build("gpu0", "gpu1", 0), "sim", build("cuda:0", "cuda:1", 7), "real", {});
  EXPECT_EQ(c.matched, 4u);
  EXPECT_EQ(c.action_error.max, 0);
  // Swapping the measured device order swaps the replicas: now they differ.
  Timeline swapped = build("cuda:0", "cuda:1", 0);
  swapped.hosts = {"cuda:1", "cuda:0"};
  const TimelineComparison d = compare_timelines(build("gpu0", "gpu1", 0), "sim", swapped, "real", {});
  EXPECT_GT(d.action_error.max, 0);
  EXPECT_DOUBLE_EQ(d.action_error.max, 1 / 3.5);  // each forward paired with the other replica's
  EXPECT_EQ(d.worst.front().name, "0F0");         // tied with 0F0[r1], first by name
}

TEST(CompareTimelines, RepeatedActionsPairInStartOrder) {
  // The same action twice on one device (a timeline that repeats an action):
  // first with first, second with second, the second named "#1".
  Timeline sim, real;
  sim.records = {compute("g", 0, "F", 0, 2, 3), compute("g", 0, "F", 0, 0, 1)};
  real.records = {compute("c", 0, "F", 0, 0, 1), compute("c", 0, "F", 0, 2, 4)};
  const TimelineComparison c = compare_timelines(sim, "sim", real, "real", {});
  EXPECT_EQ(c.matched, 2u);
  ASSERT_EQ(c.worst.size(), 2u);
  EXPECT_EQ(c.worst[0].name, "0F0#1");
  EXPECT_DOUBLE_EQ(c.worst[0].end_error, 1.0 / 4);
  EXPECT_EQ(c.worst[1].error(), 0);
}

TEST(CompareTimelines, BadTimelinesAreInputErrors) {
  const Timeline good = two_stages("gpu0", "gpu1");
  EXPECT_CONTAINS(input_error_of([&] { compare_timelines(good, "sim.csv", Timeline{}, "real.csv", {}); }),
                  "real.csv: the timeline has no records");
  Timeline instant;
  instant.records = {compute("c", 0, "F", 0, 2, 2)};
  EXPECT_CONTAINS(input_error_of([&] { compare_timelines(instant, "sim.csv", instant, "real.csv", {}); }),
                  "real.csv: the measured mini-batch time is 0");
  Timeline infinite = good;
  infinite.records[2].end_s = std::numeric_limits<double>::infinity();
  EXPECT_CONTAINS(input_error_of([&] { compare_timelines(infinite, "sim.csv", good, "real.csv", {}); }),
                  "sim.csv: 1F0: expected finite start_s and end_s");
}

TEST(CompareReports, JsonHasTheStableKeysAndTheSpread) {
  const Timeline sim = two_stages("gpu0", "gpu1");
  CompareOptions options;
  options.compute_only = true;
  const std::vector<TimelineComparison> runs = {
      compare_timelines(sim, "sim.csv", rescaled(sim, 2, 0), "a.csv", options),
      compare_timelines(sim, "sim.csv", rescaled(sim, 1, 0), "b.csv", options),
      compare_timelines(sim, "sim.csv", rescaled(sim, 3, 0), "c.csv", options)};
  const nlohmann::json json = nlohmann::json::parse(comparison_to_json(runs, "sim.csv"));
  EXPECT_EQ(json["simulated_minibatch_time_s"], 6.0);
  EXPECT_EQ(json["measured_minibatch_time_s"], 12.0);  // the first run
  EXPECT_EQ(json["relative_error"], -0.5);
  EXPECT_DOUBLE_EQ(json["action_error_median"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(json["action_error_p95"].get<double>(), 0.5);
  EXPECT_TRUE(json.contains("action_error_max"));
  EXPECT_TRUE(json.contains("simulated_bubble_fraction"));
  EXPECT_TRUE(json.contains("measured_bubble_fraction"));
  EXPECT_EQ(json["worst_actions"][0]["action"], "0B0");
  EXPECT_EQ(json["runs"].size(), 3u);
  EXPECT_EQ(json["spread"]["measured_minibatch_time_s"]["min"], 6.0);
  EXPECT_EQ(json["spread"]["measured_minibatch_time_s"]["median"], 12.0);
  EXPECT_EQ(json["spread"]["measured_minibatch_time_s"]["max"], 18.0);
  const std::string table = comparison_to_table(runs, "sim.csv");
  EXPECT_CONTAINS(table, "spread over 3 measured runs");
  EXPECT_CONTAINS(table, "-50.00%");
}

// One steady cycle (CompareOptions::steady_cycle): synthetic PipeDream-like
// runs whose cycles and errors are known exactly.

/// Two stages, one micro-batch per mini-batch, mini-batches 0..K-1, in units
/// of `scale` s: stage 0 on host a runs F_k in [2k, 2k+1) and B_k in
/// [2k+3, 2k+4); stage 1 on host b F_k in [2k+1, 2k+2) (its start delayed by
/// `delay` x k units) and B_k in [2k+2, 2k+3). Mini-batch k completes at
/// 2k+4; the drain starts at a's last forward, 2(K-1), so mini-batches
/// 0..K-3 are steady and the period is 2 units. `stretch` > 0 makes a's
/// B_k end stretch x k^2 units later: completions that never repeat.
Timeline pipedream_two_stages(int K, double scale, double delay = 0, double stretch = 0) {
  Timeline timeline;
  timeline.hosts = {"a", "b"};
  for (int k = 0; k < K; ++k) {
    timeline.records.push_back(compute("a", 0, "F", 0, scale * (2 * k), scale * (2 * k + 1), k));
    timeline.records.push_back(compute("b", 1, "F", 0, scale * (2 * k + 1 + delay * k), scale * (2 * k + 2), k));
    timeline.records.push_back(compute("b", 1, "B", 0, scale * (2 * k + 2), scale * (2 * k + 3), k));
    timeline.records.push_back(compute("a", 0, "B", 0, scale * (2 * k + 3), scale * (2 * k + 4 + stretch * k * k), k));
  }
  return timeline;
}

CompareOptions steady_options() {
  CompareOptions options;
  options.align_first = true;
  options.steady_cycle = true;
  return options;
}

TEST(SteadyCycle, ComparesOneCycleFromEachCyclesStart) {
  // Measured: 1.5 x slower, and b's forward of mini-batch k starts k/16 units
  // late, so every cycle of the measured run differs from the others.
  const Timeline sim = pipedream_two_stages(8, 1.0);
  const Timeline real = pipedream_two_stages(8, 1.5, 0.0625);
  const TimelineComparison c = compare_timelines(sim, "sim", real, "real", steady_options());
  ASSERT_TRUE(c.cycle.has_value());
  EXPECT_EQ(c.cycle->cycle_minibatches, 1);
  EXPECT_TRUE(c.cycle->cycle_confirmed);
  // The last mini-batch completed before the drain (2 x 7 = 14) is 5: 5 x 2 + 4 = 14.
  EXPECT_EQ(c.cycle->simulated_first_minibatch, 5);
  EXPECT_EQ(c.cycle->simulated_last_minibatch, 5);
  EXPECT_EQ(c.cycle->measured_first_minibatch, 5);
  EXPECT_EQ(c.cycle->measured_last_minibatch, 5);
  EXPECT_EQ(c.cycle->simulated_start_s, 12.0);  // completion of mini-batch 4
  EXPECT_EQ(c.cycle->measured_start_s, 18.0);
  EXPECT_TRUE(c.steady_state);
  EXPECT_EQ(c.simulated_minibatch_time_s, 2.0);
  EXPECT_EQ(c.measured_minibatch_time_s, 3.0);
  EXPECT_DOUBLE_EQ(c.relative_error, -1.0 / 3);
  // The cycle [12, 14): 0F6, 0B5, 1B5, 1F6, at offsets (0,1), (1,2), (0,1), (1,2);
  // measured (0,1.5), (1.5,3), (0,1.5), (2.0625,3): 1F6 starts 1.5 x 6 / 16 late.
  EXPECT_EQ(c.matched, 4u);
  EXPECT_TRUE(c.only_simulated.empty());
  EXPECT_TRUE(c.only_measured.empty());
  EXPECT_DOUBLE_EQ(c.action_error.median, 1.0 / 6);
  EXPECT_DOUBLE_EQ(c.action_error.max, 1.0625 / 3);
  EXPECT_DOUBLE_EQ(c.start_error.max, 1.0625 / 3);  // off by one cycle: 0.96875 / 3 (1F5), by two 0.875 / 3
  EXPECT_DOUBLE_EQ(c.end_error.max, 1.0 / 3);
  ASSERT_FALSE(c.worst.empty());
  EXPECT_EQ(c.worst[0].name, "1F0@6");
  EXPECT_EQ(c.worst[0].simulated_start_s, 1.0);
  EXPECT_EQ(c.worst[0].measured_start_s, 2.0625);
  // The whole-run comparison of the same timelines differs.
  CompareOptions whole;
  whole.align_first = true;
  EXPECT_FALSE(compare_timelines(sim, "sim", real, "real", whole).cycle.has_value());
}

TEST(SteadyCycle, TheMeasuredCycleIsAsFarFromTheEnd) {
  // A longer measured run: its cycle is the one just before its own drain,
  // mini-batch 7, at the same distance from the end as the simulated 5.
  const TimelineComparison c =
      compare_timelines(pipedream_two_stages(8, 1.0), "sim", pipedream_two_stages(10, 1.5, 0.0625), "real", steady_options());
  ASSERT_TRUE(c.cycle.has_value());
  EXPECT_EQ(c.cycle->simulated_first_minibatch, 5);
  EXPECT_EQ(c.cycle->measured_first_minibatch, 7);
  EXPECT_EQ(c.cycle->measured_start_s, 24.0);  // completion of mini-batch 6: 1.5 x 16
  EXPECT_EQ(c.worst[0].name, "1F0@6");
  EXPECT_EQ(c.worst[0].measured_start_s, 2.25);  // measured 1F8: 1.5 x (17 + 8 / 16) - 24
  EXPECT_DOUBLE_EQ(c.start_error.max, 1.25 / 3);
}

TEST(SteadyCycle, CyclesOfSeveralMiniBatchesKeepTheProgramPhase) {
  // A cycle of 2 and a measured run that dropped 1 warm-up mini-batch: its
  // mini-batch j is the Program's j + 1, so the measured cycle is 3..4 (the
  // Program's 4..5, as the simulated 4..5), not 4..5.
  CompareOptions options = steady_options();
  options.cycle_multiple = 2;
  options.measured_warmup = 1;
  const TimelineComparison c =
      compare_timelines(pipedream_two_stages(8, 1.0), "sim", pipedream_two_stages(8, 1.5, 0.0625), "real", options);
  ASSERT_TRUE(c.cycle.has_value());
  EXPECT_EQ(c.cycle->cycle_minibatches, 2);
  EXPECT_EQ(c.cycle->simulated_first_minibatch, 4);
  EXPECT_EQ(c.cycle->simulated_last_minibatch, 5);
  EXPECT_EQ(c.cycle->measured_first_minibatch, 3);
  EXPECT_EQ(c.cycle->measured_last_minibatch, 4);
  EXPECT_EQ(c.cycle->simulated_start_s, 10.0);
  EXPECT_EQ(c.cycle->measured_start_s, 12.0);  // completion of measured 2: 1.5 x 8
  EXPECT_EQ(c.matched, 8u);
  // Simulated 1F6 starts 3 into its cycle; its counterpart, measured 1F5, at
  // 1.5 x (11 + 5 / 16) - 12 = 4.96875 (a cycle later, measured 1F6: 4.0625).
  EXPECT_DOUBLE_EQ(c.start_error.max, 1.96875 / 3);
}

/// A replicated PipeDream-like run as the executor records it: stage 0 on
/// hosts a0 and a1 (the Program's mini-batch p on a<p mod 2>), stage 1 on b;
/// units of `scale` s: F_p on its stage-0 host in [2p, 2p+1), on b in
/// [2p+1, 2p+2), B_p on b in [2p+2, 2p+3), on stage 0 in [2p+5, 2p+6); the
/// all-reduce of round j (mini-batches 2j, 2j+1) on a0 and a1 in [4j+8,
/// 4j+8.5). The Program's first `warmup` mini-batches are dropped, the rest
/// renumbered from 0, rounds by ceil(warmup / 2) (all-reduces with a
/// warm-up backward dropped).
Timeline replicated_run(int program_minibatches, int warmup, double scale) {
  Timeline timeline;
  timeline.hosts = {"a0", "a1", "b"};
  for (int p = warmup; p < program_minibatches; ++p) {
    const std::string a = p % 2 == 0 ? "a0" : "a1";
    const int k = p - warmup;
    timeline.records.push_back(compute(a, 0, "F", 0, scale * (2 * p), scale * (2 * p + 1), k));
    timeline.records.push_back(compute("b", 1, "F", 0, scale * (2 * p + 1), scale * (2 * p + 2), k));
    timeline.records.push_back(compute("b", 1, "B", 0, scale * (2 * p + 2), scale * (2 * p + 3), k));
    timeline.records.push_back(compute(a, 0, "B", 0, scale * (2 * p + 5), scale * (2 * p + 6), k));
  }
  for (int j = 0; 2 * j + 1 < program_minibatches; ++j) {
    if (2 * j < warmup) continue;
    for (const char* host : {"a0", "a1"}) {
      TimelineRecord all_reduce = compute(host, 0, "ALLREDUCE", -1, scale * (4 * j + 8), scale * (4 * j + 8.5), j - (warmup + 1) / 2);
      all_reduce.peer = host == std::string("a0") ? "a1" : "a0";
      all_reduce.bytes = 8;
      timeline.records.push_back(all_reduce);
    }
  }
  return timeline;
}

TEST(SteadyCycle, ReplicasAndAllReducesMatchAtTheProgramsPhase) {
  // Replicas 2,1: cycles of 2 mini-batches (the replicas' round). The
  // measured run dropped 1 warm-up mini-batch: its mini-batch j ran on
  // a<(j+1) mod 2>, and its rounds are the Program's less 1.
  CompareOptions options = steady_options();
  options.measured_warmup = 1;
  const TimelineComparison c = compare_timelines(replicated_run(12, 0, 1.0), "sim", replicated_run(13, 1, 1.5), "real", options);
  ASSERT_TRUE(c.cycle.has_value());
  EXPECT_EQ(c.cycle->cycle_minibatches, 2);
  // Drain at a0's last forward (Program 10: 20); completions 2k+6 <= 20: 0..7.
  EXPECT_EQ(c.cycle->simulated_first_minibatch, 6);
  EXPECT_EQ(c.cycle->simulated_last_minibatch, 7);
  EXPECT_EQ(c.cycle->measured_first_minibatch, 5);
  EXPECT_EQ(c.cycle->measured_last_minibatch, 6);
  // [16, 20): a0 F8 B6, a1 F9 B7, b B7 F8 B8 F9, and both parts of round 2.
  EXPECT_EQ(c.matched, 10u);
  EXPECT_TRUE(c.only_simulated.empty());
  EXPECT_TRUE(c.only_measured.empty());
  EXPECT_DOUBLE_EQ(c.relative_error, -1.0 / 3);
  // Every measured offset is 1.5 x the simulated one: error = offset / 6 (period 3);
  // the latest end in the cycle is 4 units in.
  EXPECT_DOUBLE_EQ(c.action_error.max, 2.0 / 3);
  bool all_reduce = false;
  for (const MatchedAction& action : c.worst) all_reduce = all_reduce || action.name.find("ALLREDUCE") != std::string::npos;
  EXPECT_FALSE(all_reduce);  // they start the cycle: the smallest errors
  // Without the measured warm-up the replicas and rounds would be paired
  // out of phase: no measured counterpart for half of the cycle.
  options.measured_warmup = 0;
  EXPECT_CONTAINS(input_error_of([&] { compare_timelines(replicated_run(12, 0, 1.0), "sim", replicated_run(13, 1, 1.5), "real", options); }),
                  "do not hold the same actions");
}

TEST(SteadyCycle, WithoutAConfirmedCycleOneMiniBatchIsCompared) {
  // The simulated completions never repeat: no cycle confirmed; the cycle
  // compared is the replicas' round (1) and the period an estimate.
  const TimelineComparison c =
      compare_timelines(pipedream_two_stages(8, 1.0, 0, 0.01), "sim", pipedream_two_stages(8, 1.5), "real", steady_options());
  ASSERT_TRUE(c.cycle.has_value());
  EXPECT_FALSE(c.cycle->cycle_confirmed);
  EXPECT_EQ(c.cycle->cycle_minibatches, 1);
  EXPECT_EQ(c.matched, 4u);
  EXPECT_EQ(c.measured_minibatch_time_s, 3.0);
  EXPECT_NE(c.cycle->simulated_period_over.find("the mean of the last"), std::string::npos) << c.cycle->simulated_period_over;
}

TEST(SteadyCycle, TooFewMiniBatchesBeforeTheDrainIsAnError) {
  // K = 3: only mini-batch 0 completes before the drain (at 4); a cycle of 1
  // needs the completion of the mini-batch before it too.
  EXPECT_CONTAINS(input_error_of([&] {
                    compare_timelines(pipedream_two_stages(3, 1.0), "sim", pipedream_two_stages(3, 1.5), "real", steady_options());
                  }),
                  "sim: 1 mini-batch completes before the drain; comparing one steady cycle of 1 mini-batch needs 2");
}

TEST(SteadyCycle, ReportsSayWhichComparison) {
  const Timeline sim = pipedream_two_stages(8, 1.0);
  const std::vector<TimelineComparison> runs = {
      compare_timelines(sim, "sim", pipedream_two_stages(8, 1.5, 0.0625), "real", steady_options())};
  const nlohmann::json json = nlohmann::json::parse(comparison_to_json(runs, "sim"));
  EXPECT_EQ(json["comparison"], "steady-state");
  EXPECT_EQ(json["simulated_minibatch_time_s"], 2.0);
  EXPECT_EQ(json["measured_minibatch_time_s"], 3.0);
  EXPECT_EQ(json["steady_cycle"]["cycle_minibatches"], 1);
  EXPECT_EQ(json["steady_cycle"]["measured_first_minibatch"], 5);
  EXPECT_DOUBLE_EQ(json["action_error_p95"].get<double>(), 1.0625 / 3);
  const std::string table = comparison_to_table(runs, "sim");
  EXPECT_CONTAINS(table, "steady state: one cycle of 1 mini-batch compared, simulated mini-batches 5..5, measured 5..5");
  EXPECT_CONTAINS(table, "4 actions of the cycle matched; error = |simulated - measured| / measured period");
  CompareOptions whole;
  whole.align_first = true;
  const nlohmann::json flushed =
      nlohmann::json::parse(comparison_to_json({compare_timelines(two_stages("g0", "g1"), "s", two_stages("g0", "g1"), "m", whole)}, "s"));
  EXPECT_EQ(flushed["comparison"], "whole-minibatch");
  EXPECT_TRUE(flushed["steady_cycle"].is_null());
}

TEST(CompareReports, SvgStacksBothTimelinesUnderHeadings) {
  const std::string svg = comparison_to_svg(two_stages("gpu0", "gpu0b"), rescaled(two_stages("gpu0", "cpu1"), 2, 4), "t");
  const auto simulated = svg.find(">simulated</text>");
  const auto measured = svg.find(">measured</text>");
  ASSERT_NE(simulated, std::string::npos);
  ASSERT_NE(measured, std::string::npos);
  EXPECT_LT(simulated, measured);
  // The same host name in both runs gives two rows, both labelled gpu0.
  std::size_t rows = 0;
  for (auto at = svg.find(">gpu0</text>"); at != std::string::npos; at = svg.find(">gpu0</text>", at + 1)) ++rows;
  EXPECT_EQ(rows, 2u);
  // One time axis.
  EXPECT_EQ(svg.find("axis-title"), svg.rfind("axis-title"));
}

}  // namespace
}  // namespace pipegrid
