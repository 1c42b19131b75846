// BaPipe's balanced partition: T, the inter-layer dynamic programme, the
// communication check and its coarse-grained path, intra-layer splits, the
// memory bound and fine-tuning, and the split partition file round trip.
// Platforms are built in code (no engine): hosts differing by speed_factor
// or by per-device layer times, every pair routed.

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/partition.hpp"
#include "expect_input_error.hpp"
#include "partitioners/bapipe.hpp"
#include "partitioners/partitioners.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

constexpr double kExact = 1e-9;

/// Hosts h0, h1, ... with these speed factors (and device types, when
/// given), every pair routed at `bandwidth` B/s with `latency` s.
PlatformSummary platform(const std::vector<double>& speeds, double bandwidth = 1e18, double latency = 0,
                         const std::vector<std::string>& devices = {}) {
  PlatformSummary summary;
  summary.file = "test.xml";
  const std::size_t n = speeds.size();
  for (std::size_t h = 0; h < n; ++h) {
    HostInfo host;
    host.name = "h" + std::to_string(h);
    host.speed_factor = speeds[h];
    if (h < devices.size()) host.device_type = devices[h];
    summary.hosts.push_back(host);
  }
  summary.route_bandwidth_Bps.assign(n, std::vector<double>(n, bandwidth));
  summary.route_latency_s.assign(n, std::vector<double>(n, latency));
  for (std::size_t h = 0; h < n; ++h) summary.route_bandwidth_Bps[h][h] = summary.route_latency_s[h][h] = 0;
  return summary;
}

/// A chain whose layer l takes work[l] (forward a third of it, backward the
/// rest), outputs output[l] bytes (default 1) and has 10 parameter bytes.
Profile with_work(const std::vector<double>& work, const std::vector<double>& output = {}) {
  Profile profile;
  profile.name = "work";
  profile.input_bytes = 1;
  for (std::size_t l = 0; l < work.size(); ++l)
    profile.layers.push_back({"l" + std::to_string(l), work[l] / 3, work[l] - work[l] / 3,
                              l < output.size() ? output[l] : 1.0, 10, {}});
  return profile;
}

PartitionerInput input_for(const Profile& profile, const PlatformSummary& summary) {
  PartitionerInput input;
  input.profile = profile;
  input.platform = summary;
  input.straight = true;
  return input;
}

/// Stage s's compute on its host for a partition over `profile`.
std::vector<double> stage_compute(const Profile& profile, const std::vector<int>& last, const PlatformSummary& summary) {
  std::vector<double> compute;
  int first = 0;
  for (std::size_t s = 0; s < last.size(); ++s) {
    double sum = 0;
    for (int l = first; l <= last[s]; ++l) {
      const LayerTimes times = layer_times_on(profile.layers[l], summary.hosts[s]);
      sum += times.forward_s + times.backward_s;
    }
    compute.push_back(sum);
    first = last[s] + 1;
  }
  return compute;
}

/// The longest layer of `profile` on `host`.
double longest_layer(const Profile& profile, const HostInfo& host) {
  double longest = 0;
  for (const Layer& layer : profile.layers) {
    const LayerTimes times = layer_times_on(layer, host);
    longest = std::max(longest, times.forward_s + times.backward_s);
  }
  return longest;
}

bool has_note(const PartitionerOutput& output, const std::string& part) {
  return std::any_of(output.notes.begin(), output.notes.end(),
                     [&](const std::string& note) { return note.find(part) != std::string::npos; });
}

std::string all_notes(const PartitionerOutput& output) {
  std::string text;
  for (const std::string& note : output.notes) text += note + "\n";
  return text;
}

// ----------------------------------------------------------------- step 1

TEST(Bapipe, IdealStageTimeIsTheHarmonicShare) {
  // Work 12 on speeds 1, 1, 2, 2: T_n = 12, 12, 6, 6, so T = 1 / (1/12 + 1/12 + 1/6 + 1/6) = 2.
  const Profile profile = with_work({3, 3, 3, 3});
  EXPECT_NEAR(bapipe_ideal_stage_time(profile, platform({1, 1, 2, 2})), 2.0, kExact);
  // Per-device times replace speed_factor for hosts of that type.
  Profile typed = profile;
  for (Layer& layer : typed.layers) layer.device_times["VCU129"] = {0.5, 1.0};  // 1.5 per layer, 6 in all
  EXPECT_NEAR(bapipe_ideal_stage_time(typed, platform({1, 1}, 1e18, 0, {"VCU129", "VCU118"})), 1 / (1.0 / 6 + 1.0 / 12),
              kExact);
}

TEST(Bapipe, InterLayerMinimisesTheBottleneckThenLeansTowardT) {
  // Six unit layers on speeds 2, 1: T = 1 / (1/3 + 1/6) = 2: four layers on
  // the fast host, two on the slow one, both exactly T.
  const PlatformSummary two = platform({2, 1});
  EXPECT_EQ(bapipe_inter_layer(with_work({1, 1, 1, 1, 1, 1}), two), (std::vector<int>{3, 5}));
  // Bottleneck 4 (the heavy layer) whatever the rest does; among the splits
  // reaching it, stage 0 = 3 and stage 2 = 3 are the closest to T = 10/3.
  EXPECT_EQ(bapipe_inter_layer(with_work({1, 1, 1, 4, 1, 1, 1}), platform({1, 1, 1})), (std::vector<int>{2, 3, 6}));
}

TEST(Bapipe, InterLayerMatchesBruteForce) {
  const unsigned seed = 20240701;
  std::mt19937 random(seed);
  for (int round = 0; round < 300; ++round) {
    const int layers = std::uniform_int_distribution<int>(1, 9)(random);
    const int hosts = std::uniform_int_distribution<int>(1, std::min(4, layers))(random);
    std::vector<double> work(layers), speeds(hosts);
    for (double& w : work)
      w = round % 2 ? std::uniform_int_distribution<int>(0, 4)(random) : std::uniform_real_distribution<double>(0, 3)(random);
    for (double& s : speeds) s = std::uniform_int_distribution<int>(1, 3)(random);
    const Profile profile = with_work(work);
    const PlatformSummary summary = platform(speeds);
    const double T = bapipe_ideal_stage_time(profile, summary);
    const std::string context = "seed " + std::to_string(seed) + ", round " + std::to_string(round);

    // (largest compute, sum of squared distances to T) of a split.
    const auto objective = [&](const std::vector<int>& last) {
      const std::vector<double> compute = stage_compute(profile, last, summary);
      double largest = 0, sum = 0;
      for (const double c : compute) largest = std::max(largest, c), sum += (c - T) * (c - T);
      return std::make_pair(largest, sum);
    };
    // Every split: the smallest largest compute, then the smallest sum.
    double best_max = std::numeric_limits<double>::infinity(), best_sum = best_max;
    std::vector<int> last(hosts);
    const std::function<void(int, int)> split = [&](int stage, int first) {
      if (stage == hosts - 1) {
        last[stage] = layers - 1;
        const auto [largest, sum] = objective(last);
        if (largest < best_max || (largest == best_max && sum < best_sum)) best_max = largest, best_sum = sum;
        return;
      }
      for (int end = first; end <= layers - hosts + stage; ++end) {
        last[stage] = end;
        split(stage + 1, end + 1);
      }
    };
    split(0, 0);
    const auto [largest, sum] = objective(bapipe_inter_layer(profile, summary));
    EXPECT_EQ(largest, best_max) << context;
    EXPECT_NEAR(sum, best_sum, kExact * (1 + best_sum)) << context;
  }
}

TEST(Bapipe, InterLayerTiesGoToShorterEarlyStages) {
  // Four unit layers on three equal hosts: T = 4/3; 1+1+2, 1+2+1 and 2+1+1
  // all have bottleneck 2 and the same distances to T: the cuts (0, 1) win.
  EXPECT_EQ(bapipe_inter_layer(with_work({1, 1, 1, 1}), platform({1, 1, 1})), (std::vector<int>{0, 1, 3}));
}

// What must hold: on a platform of two device types, every stage's time is
// within one layer's time (the longest layer on its host) of T, for the
// inter-layer partition and for the final one.
TEST(Bapipe, EveryStageIsWithinOneLayerOfT) {
  const unsigned seed = 7;
  std::mt19937 random(seed);
  const std::vector<std::vector<double>> platforms = {{1.7965, 1.7965, 1, 1}, {1, 2.5}, {3, 3, 3, 1, 1}, {1, 1, 1, 2}};
  for (int round = 0; round < 400; ++round) {
    const std::vector<double>& speeds = platforms[round % platforms.size()];
    const int layers = std::uniform_int_distribution<int>(static_cast<int>(speeds.size()), 30)(random);
    std::vector<double> work(layers);
    for (double& w : work) w = std::uniform_real_distribution<double>(0.1, round % 3 == 0 ? 10 : 2)(random);
    const Profile profile = with_work(work, std::vector<double>(layers, 0));
    const PlatformSummary summary = platform(speeds);
    const double T = bapipe_ideal_stage_time(profile, summary);
    const std::string context = "seed " + std::to_string(seed) + ", round " + std::to_string(round);

    const std::vector<double> compute = stage_compute(profile, bapipe_inter_layer(profile, summary), summary);
    for (std::size_t s = 0; s < compute.size(); ++s)
      EXPECT_LE(std::fabs(compute[s] - T), longest_layer(profile, summary.hosts[s]) + kExact * T)
          << context << ", inter-layer stage " << s << ": " << compute[s] << " vs T = " << T;

    const PartitionerOutput output = bapipe_partition(input_for(profile, summary));
    for (std::size_t s = 0; s < output.stages.size(); ++s)
      EXPECT_LE(std::fabs(output.stages[s].compute_s - T), longest_layer(profile, summary.hosts[s]) + kExact * T)
          << context << ", final stage " << s << "\n" << all_notes(output);
  }
}

TEST(Bapipe, PerDeviceTimesActLikeTheirSpeed) {
  // Per-device times of half the profile's on type "fast" place layers as a
  // speed_factor of 2 does.
  Profile typed = with_work({1, 2, 1, 3, 1, 1, 2});
  for (Layer& layer : typed.layers) layer.device_times["fast"] = {layer.forward_s / 2, layer.backward_s / 2};
  const std::vector<int> by_type = bapipe_inter_layer(typed, platform({1, 1, 1}, 1e18, 0, {"slow", "fast", "slow"}));
  EXPECT_EQ(by_type, bapipe_inter_layer(typed, platform({1, 2, 1})));
  EXPECT_EQ(by_type, (std::vector<int>{1, 4, 6}));
}

// ----------------------------------------------------------------- step 2

/// Four unit layers on two equal hosts (T = 2): the inter-layer split is
/// 0-1 | 2-3, each stage computing 2. The cut after layer 1 carries `cut`
/// bytes, every other layer 0.5.
Profile four_layers(double cut) {
  Profile profile = with_work({1, 1, 1, 1}, {0.5, cut, 0.5, 0.5});
  profile.input_bytes = 0.5;
  return profile;
}

TEST(Bapipe, CoarsePathTriggersExactlyWhenATransferExceedsItsStagesCompute) {
  // 1 B/s, no latency: a transfer of b bytes takes b seconds.
  const PlatformSummary links = platform({1, 1}, 1.0);
  // At the boundary: 2 bytes take exactly the stages' compute, 2 s.
  const PartitionerOutput hidden = bapipe_partition(input_for(four_layers(2), links));
  EXPECT_EQ(hidden.partition.stage_of_layer, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_NEAR(hidden.stages[0].communication_s, 2, kExact);
  EXPECT_NEAR(hidden.time_per_stage_s, 2, kExact);
  EXPECT_TRUE(has_note(hidden, "communication is hidden")) << all_notes(hidden);
  EXPECT_FALSE(has_note(hidden, "coarse-grained")) << all_notes(hidden);
  // Just above: communication is the bottleneck, and the coarse partition
  // avoids the cut whose activation does not cross within T = 2.
  const PartitionerOutput coarse = bapipe_partition(input_for(four_layers(2 + 0x1p-20), links));
  EXPECT_TRUE(has_note(coarse, "communication is the bottleneck: stage 0 (h0) transfers")) << all_notes(coarse);
  EXPECT_TRUE(has_note(coarse, "coarse-grained: cuts only where")) << all_notes(coarse);
  EXPECT_EQ(coarse.partition.stage_of_layer, (std::vector<int>{0, 1, 1, 1}));
  EXPECT_TRUE(coarse.partition.split_last.empty());
  EXPECT_NEAR(coarse.time_per_stage_s, 3, kExact);
  EXPECT_EQ(coarse.bottleneck_stage, 1);

  // Latency counts: 1 s + 1 byte at 1 B/s is 2 s, hidden; 1 s + 1.5 bytes is not.
  const PlatformSummary slow_start = platform({1, 1}, 1.0, 1.0);
  EXPECT_TRUE(has_note(bapipe_partition(input_for(four_layers(1), slow_start)), "communication is hidden"));
  EXPECT_TRUE(has_note(bapipe_partition(input_for(four_layers(1.5), slow_start)), "communication is the bottleneck"));

  // The input gradient over the incoming link counts too: activations go
  // forward fast, gradients come back at 1 B/s; stage 1 sends 2.5 bytes back.
  PlatformSummary lopsided = platform({1, 1}, 1.0);
  lopsided.route_bandwidth_Bps[0][1] = 1e18;
  const PartitionerOutput back = bapipe_partition(input_for(four_layers(2.5), lopsided));
  EXPECT_TRUE(has_note(back, "communication is the bottleneck: stage 1 (h1) transfers 2.5 s")) << all_notes(back);
  lopsided.route_bandwidth_Bps[1][0] = 1.25;  // 2 s back: hidden
  EXPECT_TRUE(has_note(bapipe_partition(input_for(four_layers(2.5), lopsided)), "communication is hidden"));
}

TEST(Bapipe, CoarsePathWithoutAnyCutUnderTheThresholdCountsTransfers) {
  // Every cut carries 3 bytes at 1 B/s: none crosses within T = 2. The
  // partition then minimises the largest of compute and transfer per stage.
  const PartitionerOutput output = bapipe_partition(input_for(with_work({1, 1, 1, 1}, {3, 3, 3, 3}), platform({1, 1}, 1.0)));
  EXPECT_TRUE(has_note(output, "coarse-grained: no 2 stages cut only where")) << all_notes(output);
  // Every split has a 3 s transfer: the tie goes to the shortest first stage.
  EXPECT_EQ(output.partition.stage_of_layer, (std::vector<int>{0, 1, 1, 1}));
  EXPECT_NEAR(output.time_per_stage_s, 3, kExact);  // the transfer
}

// ----------------------------------------------------------------- step 3

/// Three unit layers (outputs 4, 8, 0; input 2) on two hosts.
Profile three_layers() {
  Profile profile = with_work({1, 1, 1}, {4, 8, 0});
  profile.input_bytes = 2;
  return profile;
}

TEST(Bapipe, IntraLayerSplitEqualisesTheNeighbours) {
  const Profile profile = three_layers();
  // Equal hosts, T = 1.5: 0 | 1-2 (1 and 2), then layer 1 split in half.
  const PartitionerOutput output = bapipe_partition(input_for(profile, platform({1, 1})));
  ASSERT_EQ(output.partition.split_last, (std::vector<double>{0.5, 0}));
  EXPECT_EQ(output.partition.stage_of_layer, (std::vector<int>{0, 0, 1, 1}));
  ASSERT_EQ(output.profile.layers.size(), 4u);
  EXPECT_EQ(output.profile.layers[1].name, "l1[0:0.5]");
  EXPECT_EQ(output.profile.layers[2].name, "l1[0.5:1]");
  // Stage 0 sends layer 1's input (4 bytes) and half its output (8 / 2).
  EXPECT_EQ(output.profile.layers[1].output_bytes, 4 + 0.5 * 8);
  EXPECT_EQ(output.profile.layers[2].output_bytes, 8);
  EXPECT_NEAR(output.stages[0].compute_s, 1.5, kExact);
  EXPECT_NEAR(output.stages[1].compute_s, 1.5, kExact);
  EXPECT_NEAR(output.time_per_stage_s, 1.5, kExact);
  EXPECT_TRUE(has_note(output, "intra-layer: layer 1 'l1' split 0.5 / 0.5 between stage 0 (h0) and stage 1 (h1)")) << all_notes(output);

  // Speeds 2 and 1 on two unit layers, T = 2/3: 0 | 1 computes 0.5 and 1;
  // f = (B + y - A) / (x + y) = (0 + 1 - 0.5) / (0.5 + 1) = 1/3, both T.
  const Profile two = with_work({1, 1});
  const PlatformSummary mixed = platform({2, 1});
  const PartitionerOutput hetero = bapipe_partition(input_for(two, mixed));
  ASSERT_EQ(hetero.partition.split_last.size(), 2u);
  EXPECT_NEAR(hetero.partition.split_last[0], 1.0 / 3, kExact);
  const double T = bapipe_ideal_stage_time(two, mixed);
  EXPECT_NEAR(T, 2.0 / 3, kExact);
  EXPECT_NEAR(hetero.stages[0].compute_s, T, kExact);
  EXPECT_NEAR(hetero.stages[1].compute_s, T, kExact);
}

TEST(Bapipe, IntraLayerSplitOnlyWhenItLowersTheBottleneckWithItsTransfer) {
  // The split of layer 1 sends 4 + 0.5 x 8 = 8 bytes. At 4 B/s that is 2 s,
  // no better than the unsplit bottleneck (2 s): no split. At 8 B/s it is
  // 1 s, under the balanced 1.5 s: split. (The unsplit cut, 4 bytes, is
  // within the stages' compute either way.)
  const PartitionerOutput slow = bapipe_partition(input_for(three_layers(), platform({1, 1}, 4.0)));
  EXPECT_TRUE(slow.partition.split_last.empty());
  EXPECT_EQ(slow.partition.stage_of_layer, (std::vector<int>{0, 1, 1}));
  EXPECT_NEAR(slow.time_per_stage_s, 2, kExact);
  EXPECT_TRUE(has_note(slow, "intra-layer: no split")) << all_notes(slow);

  const PartitionerOutput fast = bapipe_partition(input_for(three_layers(), platform({1, 1}, 8.0)));
  EXPECT_EQ(fast.partition.split_last, (std::vector<double>{0.5, 0}));
  EXPECT_NEAR(fast.stages[0].communication_s, 1, kExact);
  EXPECT_NEAR(fast.time_per_stage_s, 1.5, kExact);
}

TEST(Bapipe, SplitPartitionRoundTripsThroughItsFile) {
  const Profile profile = three_layers();
  const PartitionerOutput output = bapipe_partition(input_for(profile, platform({1, 1})));
  ASSERT_FALSE(output.partition.split_last.empty());
  const std::string text = partition_to_json(output.partition);
  EXPECT_NE(text.find("\"split_last\": 0.5"), std::string::npos) << text;
  const PartitionFile file = parse_partition_file(text, "bapipe.json", profile);
  EXPECT_EQ(profile_to_json(file.profile), profile_to_json(output.profile));
  EXPECT_EQ(file.partition.stage_of_layer, output.partition.stage_of_layer);
  EXPECT_EQ(file.partition.split_last, output.partition.split_last);
  EXPECT_EQ(file.partition.hosts, output.partition.hosts);
  EXPECT_EQ(partition_to_json(file.partition), text);
  // The stage reports of the file's partition are the partitioner's.
  const auto reread = report_stages(file.profile, file.partition, platform({1, 1}));
  for (std::size_t s = 0; s < reread.size(); ++s) {
    EXPECT_EQ(reread[s].compute_s, output.stages[s].compute_s);
    EXPECT_EQ(reread[s].communication_s, output.stages[s].communication_s);
  }
}

// ----------------------------------------------------------------- step 4

TEST(Bapipe, StashBoundFollowsTheSchedule) {
  EXPECT_EQ(bapipe_stash_bound("gpipe", 4, 5), (std::vector<int>{5, 5, 5, 5}));
  EXPECT_EQ(bapipe_stash_bound("1f1b-sno", 4, 5), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(bapipe_stash_bound("1f1b-as", 4, 3), (std::vector<int>{3, 3, 2, 1}));
  EXPECT_EQ(bapipe_stash_bound("1f1b-so", 4, 5), (std::vector<int>{5, 5, 4, 2}));
  EXPECT_EQ(bapipe_stash_bound("fbp-as", 4, 5), (std::vector<int>{5, 5, 4, 2}));
  EXPECT_EQ(bapipe_stash_bound("fbp-as", 3, 2), (std::vector<int>{2, 2, 2}));
  EXPECT_CONTAINS(input_error_of([] { bapipe_stash_bound("pipedream", 2, 1); }),
                  "partitioner bapipe: plans pipelines that flush every mini-batch (gpipe, 1f1b-sno, 1f1b-so, 1f1b-as, "
                  "fbp-as); found schedule 'pipedream'");
  EXPECT_CONTAINS(input_error_of([] { bapipe_stash_bound("dp", 2, 1); }), "found schedule 'dp'");
}

TEST(Bapipe, MemoryDemandBound) {
  StageCost first;
  first.weight_bytes = 10;
  first.stash_bytes = 100;
  first.input_bytes = 30;  // the model's input: stashed, never received
  first.output_bytes = 7;
  // 2w + k (a + o): every stashed micro-batch's gradient may be waiting.
  EXPECT_EQ(bapipe_memory_demand(first, 0, {4, 3}), 20 + 4 * (100 + 7));
  StageCost later;
  later.weight_bytes = 2;
  later.stash_bytes = 50;
  later.input_bytes = 8;
  later.output_bytes = 5;
  // i >= o: S = 3 stashes, k' - S + 1 = 2 activations, S - 1 = 2 gradients.
  EXPECT_EQ(bapipe_memory_demand(later, 1, {4, 3}), 4 + 3 * 50 + 2 * 8 + 2 * 5);
  // i < o: one activation fewer, one gradient more.
  later.input_bytes = 5;
  later.output_bytes = 8;
  EXPECT_EQ(bapipe_memory_demand(later, 1, {4, 3}), 4 + 3 * 50 + 1 * 5 + 3 * 8);
  // The last stage sends nothing: 2w + S a + (k' - S + 1) i.
  later.output_bytes = 0;
  EXPECT_EQ(bapipe_memory_demand(later, 1, {2, 1}), 4 + 1 * 50 + 2 * 5);
}

/// Layers 0 and 1 hold 40 parameter bytes each, layers 2 and 3 one byte.
Profile heavy_front() {
  Profile profile = with_work({1, 1, 1, 1});
  profile.layers[0].parameter_bytes = profile.layers[1].parameter_bytes = 40;
  profile.layers[2].parameter_bytes = profile.layers[3].parameter_bytes = 1;
  return profile;
}

TEST(Bapipe, ReportsItsMemoryBoundPerStage) {
  PartitionerInput input = input_for(heavy_front(), platform({1, 1}));
  input.schedule = "gpipe";
  input.micro_batches = 3;
  const PartitionerOutput output = bapipe_partition(input);
  const std::vector<StageCost> costs = stage_costs(output.profile, output.partition);
  for (std::size_t s = 0; s < costs.size(); ++s)
    EXPECT_EQ(output.stages[s].memory_bytes, bapipe_memory_demand(costs[s], static_cast<int>(s), {3, 3}));
  // 0-1 | 2-3, 1f1b-so-free gpipe with M = 3: stage 0 = 2 x 80 + 3 x (3 + 1).
  EXPECT_EQ(output.partition.stage_of_layer, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(output.stages[0].memory_bytes, 160 + 3 * (3 + 1));
  EXPECT_TRUE(has_note(output, "memory, gpipe with M = 3")) << all_notes(output);
  EXPECT_TRUE(has_note(output, ": fits: h0 172 B (no limit)")) << all_notes(output);
}

TEST(Bapipe, FineTuningMovesLayersUntilThePlanFits) {
  // 1f1b-so, M = 2 (the default: one micro-batch per stage). Balanced, 0-1 |
  // 2-3 needs 2 x 80 + 2 x (3 + 1) = 168 bytes on h0. With 150 bytes per
  // device, layer 1 moves to h1: 0 | 1-3 needs 86 and 93.
  PartitionerInput input = input_for(heavy_front(), platform({1, 1}));
  input.memory_limit_bytes = 150;
  const PartitionerOutput output = bapipe_partition(input);
  EXPECT_EQ(output.partition.stage_of_layer, (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(output.stages[0].memory_bytes, 86);
  EXPECT_EQ(output.stages[1].memory_bytes, 93);
  for (const StageReport& stage : output.stages) EXPECT_LE(stage.memory_bytes, 150);
  EXPECT_TRUE(has_note(output, "h0 needs 168 B, more than its 150 B: fine-tuning")) << all_notes(output);
  EXPECT_TRUE(has_note(output, "fine-tuning: layer 1 moves from stage 0 (h0) to stage 1 (h1)")) << all_notes(output);
  EXPECT_TRUE(has_note(output, "fits: h0 86 B of 150 B, h1 93 B of 150 B")) << all_notes(output);
  EXPECT_NEAR(output.time_per_stage_s, 3, kExact);

  // Without the limit the hosts' own memory counts.
  PartitionerInput by_host = input_for(heavy_front(), platform({1, 1}));
  by_host.platform.hosts[0].memory_bytes = 150;
  EXPECT_EQ(bapipe_partition(by_host).partition.stage_of_layer, (std::vector<int>{0, 1, 1, 1}));
}

TEST(Bapipe, FineTuningSplitsAgainWhereThePlanStillFits) {
  // Three equal hosts, layers of 3, 3, 2 and 3 s, layer 2 heavy (31 of 34
  // parameter bytes), h2 with room for 40 bytes. Inter-layer 0 | 1 | 2-3
  // split twice (bottleneck 4 s) leaves layer 2's half on h2 (43 bytes);
  // fine-tuning keeps layer 2 off h2 (0 | 1-2 | 3), then splits layers 1 and
  // 2 again where h2 still fits: bottleneck 4 s again.
  Profile profile = with_work({3, 3, 2, 3});
  profile.layers[2].parameter_bytes = 31;
  for (const int l : {0, 1, 3}) profile.layers[l].parameter_bytes = 1;
  PartitionerInput input = input_for(profile, platform({1, 1, 1}));
  input.platform.hosts[0].memory_bytes = 145;
  input.platform.hosts[1].memory_bytes = 150;
  input.platform.hosts[2].memory_bytes = 40;
  const PartitionerOutput output = bapipe_partition(input);
  EXPECT_TRUE(has_note(output, "h2 needs 43 B, more than its 40 B: fine-tuning")) << all_notes(output);
  EXPECT_TRUE(has_note(output, "fine-tuning: the smallest bottleneck that fits with every transfer within its stage's "
                               "compute: 0 | 1-2 | 3"))
      << all_notes(output);
  ASSERT_EQ(output.partition.split_last.size(), 3u) << all_notes(output);
  EXPECT_NEAR(output.partition.split_last[0], 1.0 / 3, kExact);
  EXPECT_NEAR(output.partition.split_last[1], 0.75, kExact);
  for (std::size_t s = 0; s < 3; ++s) EXPECT_LE(output.stages[s].memory_bytes, *input.platform.hosts[s].memory_bytes);
  EXPECT_NEAR(output.time_per_stage_s, 4, kExact);
}

TEST(Bapipe, NoPartitionFitsNamesTheHostWhatItNeedsAndHas) {
  // 50 bytes per device: the best split, 0 | 1-3, needs 86 and 93.
  PartitionerInput input = input_for(heavy_front(), platform({1, 1}));
  input.memory_limit_bytes = 50;
  EXPECT_CONTAINS(input_error_of([&] { bapipe_partition(input); }),
                  "partitioner bapipe: no partition of profile 'work' into whole layers fits the memory of test.xml (1f1b-so "
                  "with M = 2");
  EXPECT_CONTAINS(input_error_of([&] { bapipe_partition(input); }),
                  "the best found, layers 0 | 1-3, needs 93 B on h1 (stage 1), which has 50 B");
}

// ----------------------------------------------------------------- inputs

TEST(Bapipe, RejectsWhatItCannotPlan) {
  EXPECT_CONTAINS(input_error_of([] { bapipe_partition(input_for(with_work({1, 1}), platform({1, 1, 1}))); }),
                  "partitioner bapipe: profile 'work' has 2 layers, fewer than the 3 hosts of test.xml (one stage per host)");
  PartitionerInput pipedream = input_for(with_work({1, 1}), platform({1, 1}));
  pipedream.schedule = "pipedream";
  EXPECT_CONTAINS(input_error_of([&] { bapipe_partition(pipedream); }), "found schedule 'pipedream'");
  PartitionerInput fbp = input_for(with_work({1, 1}), platform({1, 1}));
  fbp.schedule = "fbp-as";
  EXPECT_CONTAINS(input_error_of([&] { bapipe_partition(fbp); }), "--schedule fbp-as: host 'h0' executes synchronously");
  PartitionerInput negative = input_for(with_work({1, 1}), platform({1, 1}));
  negative.micro_batches = -1;
  EXPECT_CONTAINS(input_error_of([&] { bapipe_partition(negative); }),
                  "partitioner bapipe: micro-batches: expected an integer >= 1, found -1");
  PartitionerInput no_route = input_for(four_layers(1), platform({1, 1}));
  no_route.platform.route_bandwidth_Bps[0][1] = 0;
  EXPECT_CONTAINS(input_error_of([&] { bapipe_partition(no_route); }), "test.xml: no route from h0 to h1");
  EXPECT_CONTAINS(input_error_of([] { bapipe_partition(input_for(with_work({1}), platform({}))); }),
                  "test.xml: expected at least one host, found none");
}

TEST(Bapipe, SameInputSameOutput) {
  const Profile profile = with_work({0.1, 0.2, 0.3, 0.6, 0.1, 0.2, 0.3, 0.25, 0.5});
  const PartitionerOutput first = bapipe_partition(input_for(profile, platform({1.7965, 1.7965, 1, 1}, 1e3)));
  for (int run = 0; run < 3; ++run) {
    const PartitionerOutput again = bapipe_partition(input_for(profile, platform({1.7965, 1.7965, 1, 1}, 1e3)));
    EXPECT_EQ(partition_to_json(again.partition), partition_to_json(first.partition));
    EXPECT_EQ(again.notes, first.notes);
  }
  EXPECT_EQ(run_partitioner("bapipe", input_for(profile, platform({1.7965, 1.7965, 1, 1}, 1e3))).notes, first.notes);
}

TEST(Bapipe, ChoosesTheSplitOfTheEndToEndCase) {
  // tests/data/split-layer-hetero simulates this partition: the tiny profile
  // on gpu0 (speed_factor 2) and gpu1, 100 B/s and 0.25 s between them, 2 KiB
  // each. 0-2 | 3 computes 2.75 s and 0.75 s; fc1 split 7/15 on gpu0 makes
  // both T = 1 / (1/3.125 + 1/6.25) = 25/12 s.
  const Profile profile = read_profile(std::string(PIPEGRID_SOURCE_DIR) + "/tests/data/common/tiny.json", std::nullopt);
  PlatformSummary summary = platform({2, 1}, 100, 0.25);
  summary.hosts[0].name = "gpu0";
  summary.hosts[1].name = "gpu1";
  for (HostInfo& host : summary.hosts) host.memory_bytes = 2048;
  PartitionerInput input = input_for(profile, summary);
  input.micro_batches = 3;
  const PartitionerOutput output = bapipe_partition(input);
  EXPECT_NEAR(output.partition.split_after(0), 7.0 / 15, kExact);
  EXPECT_NEAR(output.time_per_stage_s, 25.0 / 12, kExact);
  EXPECT_EQ(partition_to_json(output.partition),
            read_text_file(std::string(PIPEGRID_SOURCE_DIR) + "/tests/data/split-layer-hetero/partition.json"));
  // The bound the simulation stays under (its peaks: 1443.67 and 666.67 bytes).
  EXPECT_NEAR(output.stages[0].memory_bytes, 1553, kExact * 1553);
  EXPECT_NEAR(output.stages[1].memory_bytes, 2000.0 / 3, kExact * 1000);
}

}  // namespace
}  // namespace pipegrid
