// The explorer's pure parts: which schedules and micro-batch shapes it tries,
// and how simulated candidates rank (constructed outcomes, no simulation).

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "expect_input_error.hpp"
#include "partitioners/explorer.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

std::vector<HostInfo> hosts_of(const std::vector<Execution>& executions) {
  std::vector<HostInfo> hosts;
  for (std::size_t h = 0; h < executions.size(); ++h) {
    HostInfo host;
    host.name = "h" + std::to_string(h);
    host.execution = executions[h];
    host.kind = executions[h] == Execution::Async ? DeviceKind::Fpga : DeviceKind::Gpu;
    hosts.push_back(host);
  }
  return hosts;
}

std::vector<std::string> names(const std::vector<ExploredSchedule>& schedules, bool stale) {
  std::vector<std::string> result;
  for (const ExploredSchedule& schedule : schedules)
    if (schedule.stale_weights == stale) result.push_back(schedule.name);
  return result;
}

TEST(ExplorerSchedules, GpusGetBaPipesSynchronousSchedulesAndTheStaleOnesApart) {
  const auto schedules = exploration_schedules(hosts_of({Execution::Sync, Execution::Sync}), {});
  EXPECT_EQ(names(schedules, false), (std::vector<std::string>{"gpipe", "1f1b-sno", "1f1b-so", "dp", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb1p", "zb-auto", "zb-v", "dualpipev"}));
  EXPECT_EQ(names(schedules, true), (std::vector<std::string>{"pipedream", "pipedream-2bw", "pipeoptim"}));
}

TEST(ExplorerSchedules, FpgasGetTheAsynchronousOnes) {
  const auto schedules = exploration_schedules(hosts_of({Execution::Async, Execution::Async, Execution::Async}), {});
  EXPECT_EQ(names(schedules, false), (std::vector<std::string>{"gpipe", "1f1b-as", "fbp-as", "dp", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb1p", "zb-auto", "zb-v", "dualpipev"}));
}

TEST(ExplorerSchedules, AMixedPlatformHasNoFbpAs) {
  const auto schedules = exploration_schedules(hosts_of({Execution::Async, Execution::Sync}), {});
  EXPECT_EQ(names(schedules, false), (std::vector<std::string>{"gpipe", "1f1b-sno", "1f1b-so", "1f1b-as", "dp", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb1p", "zb-auto", "zb-v", "dualpipev"}));
}

TEST(ExplorerSchedules, RequestedNamesAreKeptInCatalogOrderAndCheckedAgainstTheHosts) {
  const auto gpus = hosts_of({Execution::Sync, Execution::Sync});
  const auto schedules = exploration_schedules(gpus, {"dp", "gpipe"});
  EXPECT_EQ(names(schedules, false), (std::vector<std::string>{"gpipe", "dp"}));
  EXPECT_TRUE(names(schedules, true).empty());
  EXPECT_CONTAINS(input_error_of([&] { exploration_schedules(gpus, {"fbp-as"}); }),
                  "--schedules: fbp-as cannot run on this platform: it runs forward and backward at once");
  EXPECT_CONTAINS(input_error_of([&] { exploration_schedules(hosts_of({Execution::Async}), {"1f1b-so"}); }),
                  "--schedules: 1f1b-so cannot run on this platform");
  EXPECT_CONTAINS(input_error_of([&] { exploration_schedules(gpus, {"zigzag"}); }), "zigzag");
}

TEST(ExplorerMicroBatches, OneMeasuredSizeKeepsItAndVariesM) {
  const MicroBatchChoices choices = micro_batch_choices(1024, {128}, {});
  ASSERT_EQ(choices.shapes.size(), 4u);
  const int expected_counts[] = {1, 2, 4, 8};
  for (std::size_t i = 0; i < choices.shapes.size(); ++i) {
    EXPECT_EQ(choices.shapes[i].micro_batches, expected_counts[i]);
    EXPECT_EQ(choices.shapes[i].micro_batch_size, 128);
  }
  EXPECT_CONTAINS(choices.note, "micro-batches of 128 samples only");
  EXPECT_CONTAINS(choices.note, "no invented scaling");
  EXPECT_CONTAINS(input_error_of([] { micro_batch_choices(1000, {128}, {}); }),
                  "--mini-batch-size 1000: the profile has times for micro-batches of 128 samples only, so the mini-batch "
                  "must be a multiple of 128");
}

TEST(ExplorerMicroBatches, SeveralSizesSplitTheMiniBatchWithinTheMeasuredRange) {
  // 96 samples: M = 2 (48), 3 (32), 4 (24), 6 (16); M = 1 (96) and M >= 8
  // (12 and less) lie outside 16..64.
  const MicroBatchChoices choices = micro_batch_choices(96, {16, 32, 64}, {});
  std::vector<std::pair<int, int>> shapes;
  for (const MicroBatchShape& shape : choices.shapes) shapes.emplace_back(shape.micro_batches, shape.micro_batch_size);
  EXPECT_EQ(shapes, (std::vector<std::pair<int, int>>{{2, 48}, {3, 32}, {4, 24}, {6, 16}}));
  EXPECT_CONTAINS(choices.note, "never extrapolated");
}

TEST(ExplorerMicroBatches, RequestedCountsFilterAndNothingLeftIsAnError) {
  const MicroBatchChoices choices = micro_batch_choices(1024, {128}, {8, 2, 3});
  ASSERT_EQ(choices.shapes.size(), 2u);
  EXPECT_EQ(choices.shapes[0].micro_batches, 2);
  EXPECT_EQ(choices.shapes[1].micro_batches, 8);
  EXPECT_CONTAINS(input_error_of([] { micro_batch_choices(1024, {128}, {3}); }), "no micro-batch count fits");
  EXPECT_CONTAINS(input_error_of([] { micro_batch_choices(1024, {128}, {0}); }), "--micro-batches: expected integers >= 1, found 0");
  EXPECT_CONTAINS(input_error_of([] { micro_batch_choices(0, {128}, {}); }), "--mini-batch-size: expected an integer >= 1, found 0");
}

CandidateOutcome fitting(const std::string& schedule, double throughput, double peak) {
  CandidateOutcome outcome;
  outcome.schedule = schedule;
  outcome.throughput_samples_per_s = throughput;
  outcome.peak_memory_bytes = peak;
  return outcome;
}

CandidateOutcome out_of_memory(const std::string& schedule, double throughput, double peak, double capacity) {
  CandidateOutcome outcome = fitting(schedule, throughput, peak);
  outcome.overflows.push_back({"gpu0", peak, capacity});
  return outcome;
}

std::vector<std::size_t> all(const std::vector<CandidateOutcome>& outcomes) {
  std::vector<std::size_t> members;
  for (std::size_t i = 0; i < outcomes.size(); ++i) members.push_back(i);
  return members;
}

TEST(ExplorerRanking, TheFastestThatFitsWinsAndLosersSayByHowMuch) {
  const std::vector<CandidateOutcome> outcomes = {fitting("gpipe", 100, 5), fitting("1f1b-so", 125, 9), fitting("1f1b-sno", 120, 6)};
  const auto ranking = rank_candidates(outcomes, all(outcomes));
  ASSERT_EQ(ranking.size(), 3u);
  EXPECT_EQ(ranking[0].index, 1u);
  EXPECT_EQ(ranking[0].rank, 1);
  EXPECT_EQ(ranking[0].verdict, "winner");
  EXPECT_EQ(ranking[1].index, 2u);
  EXPECT_EQ(ranking[1].verdict, "slower by 4.0% (120 vs 125 samples/s)");
  EXPECT_EQ(ranking[2].index, 0u);
  EXPECT_EQ(ranking[2].rank, 3);
  EXPECT_EQ(ranking[2].verdict, "slower by 20.0% (100 vs 125 samples/s)");
}

TEST(ExplorerRanking, EqualThroughputGoesToTheSmallerPeakMemory) {
  // 1e-12 apart: the same throughput (within 1e-9 relative).
  const std::vector<CandidateOutcome> outcomes = {fitting("1f1b-so", 200, 2048), fitting("1f1b-sno", 200 * (1 + 1e-12), 1024),
                                                  fitting("gpipe", 200, 1024)};
  const auto ranking = rank_candidates(outcomes, all(outcomes));
  EXPECT_EQ(ranking[0].index, 1u);  // smaller memory; earlier than gpipe among equals
  EXPECT_EQ(ranking[1].index, 2u);
  EXPECT_EQ(ranking[1].verdict, "as fast, with the same peak memory; listed later");
  EXPECT_EQ(ranking[2].index, 0u);
  EXPECT_EQ(ranking[2].verdict, "as fast, more peak memory (2 KiB vs 1 KiB)");
}

TEST(ExplorerRanking, AMemoryLimitThatExcludesTheWinnerPicksTheNext) {
  // The same candidates, simulated once with room for all and once under a
  // limit that the fastest (and only it) exceeds.
  std::vector<CandidateOutcome> outcomes = {fitting("1f1b-so", 125, 12.0 * (1 << 30)), fitting("1f1b-sno", 120, 9.0 * (1 << 30)),
                                            fitting("gpipe", 110, 15.0 * (1 << 30))};
  EXPECT_EQ(rank_candidates(outcomes, all(outcomes))[0].index, 0u);
  outcomes[0] = out_of_memory("1f1b-so", 125, 12.0 * (1 << 30), 10.0 * (1 << 30));
  outcomes[2] = out_of_memory("gpipe", 110, 15.0 * (1 << 30), 10.0 * (1 << 30));
  const auto ranking = rank_candidates(outcomes, all(outcomes));
  EXPECT_EQ(ranking[0].index, 1u);
  EXPECT_EQ(ranking[0].verdict, "winner");
  // Out of memory: after those that fit, the nearest to fitting first.
  EXPECT_EQ(ranking[1].index, 0u);
  EXPECT_EQ(ranking[1].rank, 0);
  EXPECT_EQ(ranking[1].verdict, "out of memory on gpu0 by 2 GiB (12 GiB > 10 GiB)");
  EXPECT_EQ(ranking[2].index, 2u);
  EXPECT_EQ(ranking[2].verdict, "out of memory on gpu0 by 5 GiB (15 GiB > 10 GiB)");
}

TEST(ExplorerRanking, FailedCandidatesComeLastWithTheirErrorAndOnlyMembersAreRanked) {
  std::vector<CandidateOutcome> outcomes = {fitting("pipedream", 900, 1), fitting("gpipe", 100, 1), fitting("dp", 150, 1)};
  outcomes[2].error = "no uniform partition: 4 hosts, one stage each, but only 3 layers";
  CandidateOutcome two_devices = out_of_memory("1f1b-so", 300, 40, 30);
  two_devices.overflows.push_back({"gpu3", 50, 30});
  outcomes.push_back(two_devices);
  const auto ranking = rank_candidates(outcomes, {1, 2, 3});  // pipedream ranked apart
  ASSERT_EQ(ranking.size(), 3u);
  EXPECT_EQ(ranking[0].index, 1u);
  EXPECT_EQ(ranking[1].index, 3u);
  EXPECT_EQ(ranking[1].verdict, "out of memory on gpu3 by 20 B (50 B > 30 B), and on 1 more");
  EXPECT_EQ(ranking[2].index, 2u);
  EXPECT_EQ(ranking[2].rank, 0);
  EXPECT_EQ(ranking[2].verdict, "no uniform partition: 4 hosts, one stage each, but only 3 layers");
}

TEST(ExplorerRanking, NothingFitsMeansNoWinner) {
  const std::vector<CandidateOutcome> outcomes = {out_of_memory("gpipe", 1, 2, 1)};
  const auto ranking = rank_candidates(outcomes, all(outcomes));
  ASSERT_EQ(ranking.size(), 1u);
  EXPECT_EQ(ranking[0].rank, 0);
  EXPECT_TRUE(rank_candidates(outcomes, {}).empty());
}

TEST(ExplorerRanking, IdleStagesRankAfterTheSamePartitionOnFewerDevices) {
  // pipedream-straight on 8 devices has stages 3 and 6 doing no compute;
  // the same partition without them on 6 devices is 0.1% slower: it ranks
  // first, and the 8-device one right after it, saying why.
  CandidateOutcome idle = fitting("1f1b-so", 415.7 * 1.001, 10);
  idle.partitioner = "pipedream-straight";
  idle.devices = 8;
  idle.idle_stages = {3, 6};
  idle.merged_as = "pipedream-straight-merged";
  CandidateOutcome merged = fitting("1f1b-so", 415.7, 10);
  merged.partitioner = "uniform=pipedream-straight-merged";
  merged.devices = 6;
  const CandidateOutcome other = fitting("1f1b-so", 415.6, 10);
  std::vector<CandidateOutcome> outcomes = {idle, other, merged};
  auto ranking = rank_candidates(outcomes, all(outcomes));
  EXPECT_EQ(ranking[0].index, 2u);
  EXPECT_EQ(ranking[1].index, 0u);
  EXPECT_EQ(ranking[1].verdict,
            "stages 3 and 6 do no compute: the same partition without them (uniform=pipedream-straight-merged, 6 devices) runs at "
            "415.7 vs 416.1 samples/s on 2 fewer devices");
  EXPECT_EQ(ranking[2].index, 1u);
  // Another shape's merged partition does not count.
  outcomes[2].micro_batches = 2;
  EXPECT_EQ(rank_candidates(outcomes, all(outcomes))[0].index, 0u);
  // Slower than kFewerDevicesShare of the idle one's throughput: ranked by throughput alone.
  outcomes[2].micro_batches = 1;
  outcomes[2].throughput_samples_per_s = 0.98 * outcomes[0].throughput_samples_per_s;
  ranking = rank_candidates(outcomes, all(outcomes));
  EXPECT_EQ(ranking[0].index, 0u);
  EXPECT_EQ(ranking[0].verdict, "winner");
}

}  // namespace
}  // namespace pipegrid
