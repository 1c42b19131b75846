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

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/model_graph.hpp"
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

PartitionerInput input_for(const Profile& profile, const PlatformSummary& summary, bool split_layers = false) {
  PartitionerInput input;
  input.profile = profile;
  input.platform = summary;
  input.straight = true;
  input.split_layers = split_layers;
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

TEST(Bapipe, CoarsePathWhenAWholeLayerSplitPredictsAShorterMiniBatch) {
  // 1 B/s, no latency: a transfer of b bytes takes b seconds. 1f1b-so with
  // M = 2 (the default). Stages compute F = 2/3, B = 4/3 (0-1 | 2-3).
  const PlatformSummary links = platform({1, 1}, 1.0);
  // Every cut carries 0.5 bytes: transfers lengthen the mini-batch (6 s ->
  // 7 s) but no other split is shorter: the inter-layer split stays.
  const PartitionerOutput even = bapipe_partition(input_for(four_layers(0.5), links));
  EXPECT_EQ(even.partition.stage_of_layer, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_TRUE(has_note(even, "inter-layer: predicted mini-batch 7 s (6 s without transfers); steady state 2 s per micro-batch, "
                             "the slowest compute (communication hidden)"))
      << all_notes(even);
  EXPECT_TRUE(has_note(even, "coarse-grained: no whole-layer split predicts a shorter mini-batch")) << all_notes(even);
  ASSERT_TRUE(even.predicted_minibatch_s);
  EXPECT_NEAR(*even.predicted_minibatch_s, 7, kExact);
  EXPECT_NEAR(even.time_per_stage_s, 2, kExact);
  // The middle cut carries 2 bytes: 0-1 | 2-3 takes 10 s (F0 F1 on h0, 2 s
  // each way, h1's F0 F1 B0 B1, the gradients back 2 s each); 0 | 1-3, whose
  // cut carries 0.5 bytes, takes 8 s.
  const PartitionerOutput coarse = bapipe_partition(input_for(four_layers(2), links));
  EXPECT_TRUE(has_note(coarse, "coarse-grained: the shortest predicted mini-batch with transfers counted: 0 | 1-3 (10 s -> 8 s)"))
      << all_notes(coarse);
  EXPECT_EQ(coarse.partition.stage_of_layer, (std::vector<int>{0, 1, 1, 1}));
  EXPECT_TRUE(coarse.partition.split_last.empty());
  EXPECT_NEAR(*coarse.predicted_minibatch_s, 8, kExact);
  EXPECT_NEAR(coarse.time_per_stage_s, 3, kExact);  // steady state: stage 1's compute
  EXPECT_EQ(coarse.bottleneck_stage, 1);
  // No transfers: the coarse step is not needed.
  const PartitionerOutput free = bapipe_partition(input_for(four_layers(0), platform({1, 1})));
  EXPECT_TRUE(has_note(free, "coarse-grained: not needed: transfers add nothing")) << all_notes(free);
}

TEST(Bapipe, CoarsePathKeepsTheInterLayerSplitWhenEveryCutCostsTheSame) {
  // Every cut carries 3 bytes at 1 B/s: every split pays 3 s each way.
  const PartitionerOutput output = bapipe_partition(input_for(with_work({1, 1, 1, 1}, {3, 3, 3, 3}), platform({1, 1}, 1.0)));
  EXPECT_EQ(output.partition.stage_of_layer, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_TRUE(has_note(output, "steady state 3 s per micro-batch, set by link route h0 -> h1, which carries 3 s of transfers per "
                               "micro-batch, above the slowest compute (2 s)"))
      << all_notes(output);
  EXPECT_NEAR(output.time_per_stage_s, 3, kExact);
}

// ----------------------------------------------------------------- cost model

/// N stages, stage s on host s, each computing F and B, sending `bytes`.
std::vector<PipelineStage> even_stages(int N, double F, double B, double bytes = 1) {
  std::vector<PipelineStage> stages(N);
  for (int s = 0; s < N; ++s) stages[s] = {s, F, B, s + 1 < N ? bytes : 0};
  return stages;
}

TEST(BapipeCostModel, MiniBatchMatchesTheClosedFormsOnLatencyOnlyLinks) {
  // docs/semantics.md, Closed forms: every hop takes SR (latency; the
  // bandwidth is infinite), synchronous hosts.
  for (const int N : {2, 3, 4})
    for (const int M : {1, 2, 3, 5, 8})
      for (const double SR : {0.0, 0.25, 1.5}) {
        const double F = 1, B = 2;
        const PlatformSummary links = platform(std::vector<double>(N, 1), 1e300, SR);
        const std::vector<PipelineStage> stages = even_stages(N, F, B);
        const std::string context = fmt::format("N = {}, M = {}, SR = {}", N, M, SR);
        EXPECT_NEAR(bapipe_pipeline_time(stages, links, "gpipe", M).minibatch_s, (M + N - 1) * (F + B) + 2 * (N - 1) * SR, kExact)
            << context;
        const int ceiling = (M - 1 + N - 1) / N;
        EXPECT_NEAR(bapipe_pipeline_time(stages, links, "1f1b-sno", M).minibatch_s,
                    (M + N - 1) * (F + B) + (N + M - 2 - ceiling) * 2 * SR, kExact)
            << context;
        // 1F1B-SO holds iff M <= 4 or 2 SR <= F + B.
        if (M <= 4 || 2 * SR <= F + B) {
          EXPECT_NEAR(bapipe_pipeline_time(stages, links, "1f1b-so", M).minibatch_s, (M + N - 1) * (F + B) + (N - 1) * 2 * SR,
                      kExact)
              << context;
        }
        EXPECT_NEAR(bapipe_pipeline_time(stages, links, "1f1b-so", M).minibatch_without_transfers_s, (M + N - 1) * (F + B), kExact)
            << context;
      }
  // The simulator's smallest counterexample: N = 2, M = 5, F = B = 1, SR = 5/4 takes 15.
  EXPECT_NEAR(bapipe_pipeline_time(even_stages(2, 1, 1), platform({1, 1}, 1e300, 1.25), "1f1b-so", 5).minibatch_s, 15, kExact);
}

TEST(BapipeCostModel, SteadyStateIsTheSlowestCycle) {
  // Two stages, F = B = 1, SR = 1.25 (latency): 1f1b-so with M = 8 (k = 4,
  // 2) has the cycle F0 + SR + F1 + B1 + SR + B0 = 6.5 over 3 micro-batches
  // in flight, above the compute 2.
  const PlatformSummary links = platform({1, 1}, 1e300, 1.25);
  const PipelineTime so = bapipe_pipeline_time(even_stages(2, 1, 1), links, "1f1b-so", 8);
  EXPECT_NEAR(so.time_per_micro_batch_s, 6.5 / 3, kExact);
  EXPECT_FALSE(so.communication_hidden());
  EXPECT_NE(so.bound.find("the cycle through stages 0-1 (h0-h1)"), std::string::npos) << so.bound;
  // 1f1b-sno: 2 in flight: (4 + 2.5) / 2.
  EXPECT_NEAR(bapipe_pipeline_time(even_stages(2, 1, 1), links, "1f1b-sno", 8).time_per_micro_batch_s, 6.5 / 2, kExact);
  // SR = 1 = (F + B) / 2: hidden, the compute sets it.
  const PipelineTime hidden = bapipe_pipeline_time(even_stages(2, 1, 1), platform({1, 1}, 1e300, 1), "1f1b-so", 8);
  EXPECT_NEAR(hidden.time_per_micro_batch_s, 2, kExact);
  EXPECT_TRUE(hidden.communication_hidden());
  // With M = k_0 = 4 stage 0 runs every forward first: no cycle starts there.
  EXPECT_NEAR(bapipe_pipeline_time(even_stages(2, 1, 1), links, "1f1b-so", 4).time_per_micro_batch_s, 2, kExact);
  // Asynchronous hosts stream their outputs: SR <= min(F, B) is hidden.
  PlatformSummary fpgas = platform({1, 1}, 1e300, 1);
  for (HostInfo& host : fpgas.hosts) host.execution = Execution::Async;
  EXPECT_NEAR(bapipe_pipeline_time(even_stages(2, 1, 1), fpgas, "1f1b-as", 8).time_per_micro_batch_s, 2, kExact);
  // gpipe: the slowest forward + the slowest backward.
  std::vector<PipelineStage> uneven = even_stages(2, 1, 1);
  uneven[0].forward_s = 2;
  uneven[1].backward_s = 3;
  EXPECT_NEAR(bapipe_pipeline_time(uneven, platform({1, 1}), "gpipe", 8).time_per_micro_batch_s, 5, kExact);
}

TEST(BapipeCostModel, TransfersSharingALinkAreChargedTogether) {
  // Three GPUs on a switch, each with one link up and one down (as
  // platforms/bapipe-4xv100-pcie3.xml): h1's gradient to h0 and activation
  // to h2 share h1's up link, 10 B/s. Boundary 0 carries 20 bytes, boundary
  // 1 carries 10.
  PlatformSummary star = platform({1, 1, 1}, 10);
  for (int h = 0; h < 3; ++h) {
    star.links.push_back({fmt::format("h{}_UP", h), 10, true});
    star.links.push_back({fmt::format("h{}_DOWN", h), 10, true});
  }
  star.route_links.assign(3, std::vector<std::vector<int>>(3));
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b)
      if (a != b) star.route_links[a][b] = {2 * a, 2 * b + 1};
  std::vector<PipelineStage> stages = even_stages(3, 1, 2);
  stages[0].output_bytes = 20;
  stages[1].output_bytes = 10;
  const PipelineTime shared = bapipe_pipeline_time(stages, star, "1f1b-so", 16);
  // h1_UP and h1_DOWN each carry 30 bytes per micro-batch: 3 s a transfer.
  EXPECT_NEAR(shared.transfer_s[0], 3, kExact);
  EXPECT_NEAR(shared.transfer_s[2], 3, kExact);
  // The cycle over the three stages: 3 x (1 + 2) + 4 transfers of 3 s, over
  // k_0 - k_2 + 1 = 6 - 2 + 1 = 5 micro-batches in flight.
  EXPECT_NEAR(shared.time_per_micro_batch_s, 21.0 / 5, kExact);
  EXPECT_NE(shared.bound.find("the cycle through stages 0-2"), std::string::npos) << shared.bound;
  // Fast compute: the link itself, 30 bytes per micro-batch, sets the pace.
  for (PipelineStage& stage : stages) stage.forward_s = stage.backward_s = 0.01;
  const PipelineTime link_bound = bapipe_pipeline_time(stages, star, "gpipe", 16);
  EXPECT_NEAR(link_bound.time_per_micro_batch_s, 2 + 2, kExact);  // gpipe: 20 bytes a phase on h0_UP, then on h1_UP
  stages = even_stages(3, 1, 2);
  stages[0].output_bytes = 20;
  stages[1].output_bytes = 10;
  // Without link information each route is its own link: 2 s and 1 s.
  const PipelineTime own = bapipe_pipeline_time(stages, platform({1, 1, 1}, 10), "1f1b-so", 16);
  EXPECT_NEAR(own.transfer_s[0], 2, kExact);
  EXPECT_NEAR(own.transfer_s[2], 1, kExact);
  // A FATPIPE link gives every flow its whole bandwidth.
  for (LinkInfo& link : star.links) link.shared = false;
  EXPECT_NEAR(bapipe_pipeline_time(stages, star, "1f1b-so", 16).transfer_s[0], 2, kExact);
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
  const PartitionerOutput output = bapipe_partition(input_for(profile, platform({1, 1}), true));
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
  const PartitionerOutput hetero = bapipe_partition(input_for(two, mixed, true));
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
  const PartitionerOutput slow = bapipe_partition(input_for(three_layers(), platform({1, 1}, 4.0), true));
  EXPECT_TRUE(slow.partition.split_last.empty());
  EXPECT_EQ(slow.partition.stage_of_layer, (std::vector<int>{0, 1, 1}));
  EXPECT_NEAR(slow.time_per_stage_s, 2, kExact);
  EXPECT_TRUE(has_note(slow, "intra-layer: no split")) << all_notes(slow);

  // With M = 2 the split's longer transfer (1 s) delays the fill more than
  // it saves; with M = 16 the steady state counts: split.
  PartitionerInput fast_input = input_for(three_layers(), platform({1, 1}, 8.0), true);
  EXPECT_TRUE(bapipe_partition(fast_input).partition.split_last.empty());
  fast_input.micro_batches = 16;
  const PartitionerOutput fast = bapipe_partition(fast_input);
  EXPECT_EQ(fast.partition.split_last, (std::vector<double>{0.5, 0}));
  EXPECT_NEAR(fast.stages[0].communication_s, 1, kExact);
  // Steady state: the cycle F0 + 1 + F1 + B1 + 1 + B0 = 5 over 3 in flight.
  EXPECT_NEAR(fast.time_per_stage_s, 5.0 / 3, kExact);
}

TEST(Bapipe, SplitPartitionRoundTripsThroughItsFile) {
  const Profile profile = three_layers();
  const PartitionerOutput output = bapipe_partition(input_for(profile, platform({1, 1}), true));
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
  PartitionerInput input = input_for(profile, platform({1, 1, 1}), true);
  input.platform.hosts[0].memory_bytes = 145;
  input.platform.hosts[1].memory_bytes = 150;
  input.platform.hosts[2].memory_bytes = 40;
  const PartitionerOutput output = bapipe_partition(input);
  EXPECT_TRUE(has_note(output, "h2 needs 43 B, more than its 40 B: fine-tuning")) << all_notes(output);
  EXPECT_TRUE(has_note(output, "fine-tuning: the shortest predicted mini-batch that fits: 0 | 1-2 | 3"))
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

TEST(Bapipe, KeepsWholeLayersWhereTheSplitLengthensTheMiniBatch) {
  // tests/data/split-layer-hetero simulates a split partition: the tiny
  // profile on gpu0 (speed_factor 2) and gpu1, 100 B/s and 0.25 s between
  // them, 2 KiB each, 1f1b-so with M = 3. 0-2 | 3 computes 2.75 s and
  // 0.75 s; fc1 split 7/15 on gpu0 makes both T = 25/12 s, but its extra
  // transfer lengthens the mini-batch: the golden simulation (network
  // analytic) takes 9.96333 s with the split, the cost model predicts
  // 9.97667 s (0.14% more); whole layers take 8.7 s (simulated: the same).
  const std::string root = PIPEGRID_SOURCE_DIR;
  const Profile profile = read_profile(root + "/tests/data/common/tiny.json", std::nullopt);
  PlatformSummary summary = platform({2, 1}, 100, 0.25);
  summary.hosts[0].name = "gpu0";
  summary.hosts[1].name = "gpu1";
  for (HostInfo& host : summary.hosts) host.memory_bytes = 2048;
  const PartitionFile split = parse_partition_file(read_text_file(root + "/tests/data/split-layer-hetero/partition.json"),
                                                   "partition.json", profile);
  EXPECT_NEAR(bapipe_pipeline_time(pipeline_stages(split.profile, split.partition, summary), summary, "1f1b-so", 3).minibatch_s,
              9.963333333333333, 0.005 * 9.963333333333333);
  PartitionerInput input = input_for(profile, summary, true);
  input.micro_batches = 3;
  const PartitionerOutput output = bapipe_partition(input);
  EXPECT_TRUE(output.partition.split_last.empty());
  EXPECT_EQ(output.partition.stage_of_layer, (std::vector<int>{0, 0, 0, 1}));
  EXPECT_NEAR(*output.predicted_minibatch_s, 8.7, kExact);
  EXPECT_NEAR(output.time_per_stage_s, 2.75, kExact);
  EXPECT_TRUE(has_note(output, "intra-layer: splits would even out stages but not shorten the predicted mini-batch (8.7 s)"))
      << all_notes(output);
  // Without --split-layers, GPUs are not even tried.
  input.split_layers = false;
  EXPECT_TRUE(has_note(bapipe_partition(input), "intra-layer: not tried: layers stay whole between synchronous hosts (GPUs)"));
}

TEST(Bapipe, SplitsBetweenAsynchronousHostsByDefault) {
  // Three unit layers on two FPGAs (asynchronous): layer 1 is split without
  // being asked (BaPipe's FPGA technique); a GPU on either side stops it.
  PlatformSummary fpgas = platform({1, 1}, 8.0);
  for (HostInfo& host : fpgas.hosts) host.execution = Execution::Async;
  PartitionerInput input = input_for(three_layers(), fpgas);
  input.micro_batches = 16;
  EXPECT_FALSE(bapipe_partition(input).partition.split_last.empty()) << all_notes(bapipe_partition(input));
  input.platform.hosts[1].execution = Execution::Sync;
  input.schedule = "1f1b-so";
  EXPECT_TRUE(bapipe_partition(input).partition.split_last.empty());
}

// The partitions explore tries and simulate --partitioner runs
// (partition_for_run): the names, and infeasible runs told apart from bad
// input.

/// Runs `action`, expects an InfeasibleError, and returns its message.
std::string infeasible_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const InfeasibleError& error) {
    return error.what();
  } catch (const InputError& error) {
    ADD_FAILURE() << "expected an InfeasibleError, found an InputError: " << error.what();
    return {};
  }
  ADD_FAILURE() << "expected an InfeasibleError, none was thrown";
  return {};
}

RunPartitionInput run_input(const Profile& profile, const PlatformSummary& summary) {
  RunPartitionInput input;
  input.graph = chain_graph(profile);
  input.platform = summary;
  input.schedule = "1f1b-so";
  input.micro_batches = 2;
  return input;
}

TEST(PartitionForRun, NamesAndWhatEachChooses) {
  EXPECT_EQ(run_partitioner_names(),
            (std::vector<std::string>{"uniform", "pipedream", "pipedream-straight", "pipedream-memory", "bapipe"}));
  const Profile profile = with_work({1, 1, 1, 1});
  RunPartitionInput input = run_input(profile, platform({1, 1}));
  const PartitionerOutput uniform = partition_for_run("uniform", input);
  EXPECT_EQ(uniform.partition.stage_of_layer, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(uniform.partition.hosts, (std::vector<std::vector<std::string>>{{"h0"}, {"h1"}}));
  // bapipe: the same as run_partitioner with the run's schedule and M.
  PartitionerInput direct = input_for(profile, input.platform);
  direct.schedule = "1f1b-so";
  direct.micro_batches = 2;
  EXPECT_EQ(partition_for_run("bapipe", input).partition.stage_of_layer,
            run_partitioner("bapipe", direct).partition.stage_of_layer);
  // pipedream-straight: no replicated stage.
  for (const auto& hosts : partition_for_run("pipedream-straight", input).partition.hosts) EXPECT_EQ(hosts.size(), 1u);
  EXPECT_EQ(input_error_of([&] { partition_for_run("metis", input); }),
            "--partitioner: expected one of uniform, pipedream, pipedream-straight, pipedream-memory, bapipe, found 'metis'");
}

TEST(PartitionForRun, NoPartitionIsInfeasibleBadInputIsNot) {
  const Profile two_layers = with_work({1, 1});
  const RunPartitionInput three_hosts = run_input(two_layers, platform({1, 1, 1}));
  EXPECT_EQ(infeasible_error_of([&] { partition_for_run("uniform", three_hosts); }),
            "uniform: 3 hosts, one stage each, but only 2 layers");
  EXPECT_CONTAINS(infeasible_error_of([&] { partition_for_run("bapipe", three_hosts); }),
                  "partitioner bapipe: profile 'work' has 2 layers, fewer than the 3 hosts of test.xml");
  EXPECT_CONTAINS(infeasible_error_of([&] { partition_for_run("pipedream-straight", three_hosts); }),
                  "pipedream: a straight pipeline over 3 machines needs at least 3 states");
  RunPartitionInput tight = run_input(with_work({1, 1, 1, 1}), platform({1, 1}));
  tight.memory_limit_bytes = 1;
  EXPECT_CONTAINS(infeasible_error_of([&] { partition_for_run("bapipe", tight); }),
                  "partitioner bapipe: no partition of profile 'work' into whole layers fits the memory of test.xml");
  EXPECT_CONTAINS(infeasible_error_of([&] { partition_for_run("pipedream-memory", tight); }),
                  "pipedream: no partition of 4 states over 2 machines keeps every stage's stash within --memory 1 bytes");
  // No memory known: pipedream-memory cannot run (bad input, not infeasible).
  const RunPartitionInput unknown = run_input(with_work({1, 1, 1, 1}), platform({1, 1}));
  EXPECT_EQ(pipedream_memory_capacity(unknown.platform, std::nullopt), std::nullopt);
  const std::string message = input_error_of([&] { partition_for_run("pipedream-memory", unknown); });
  EXPECT_CONTAINS(message, "pipedream-memory: partitions within the devices' memory, and test.xml gives no `memory` for every host");
  try {
    partition_for_run("pipedream-memory", unknown);
  } catch (const InfeasibleError&) {
    ADD_FAILURE() << "a missing memory is bad input, not an infeasible run";
  } catch (const InputError&) {
  }
  // A flushed schedule for bapipe is input, not infeasibility.
  RunPartitionInput stale = run_input(with_work({1, 1, 1, 1}), platform({1, 1}));
  stale.schedule = "pipedream";
  try {
    partition_for_run("bapipe", stale);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InfeasibleError& error) {
    ADD_FAILURE() << "not infeasible: " << error.what();
  } catch (const InputError& error) {
    EXPECT_CONTAINS(std::string(error.what()), "partitioner bapipe: plans pipelines that flush every mini-batch");
  }
}

TEST(PartitionForRun, MemoryCapacityIsTheLimitOrTheSmallestHost) {
  PlatformSummary summary = platform({1, 1});
  summary.hosts[0].memory_bytes = 300;
  EXPECT_EQ(pipedream_memory_capacity(summary, std::nullopt), std::nullopt);
  summary.hosts[1].memory_bytes = 200;
  EXPECT_EQ(pipedream_memory_capacity(summary, std::nullopt), 200);
  EXPECT_EQ(pipedream_memory_capacity(summary, 1000), 1000);
}

}  // namespace
}  // namespace pipegrid
