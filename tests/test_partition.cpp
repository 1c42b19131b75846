// Uniform and replicated partitions, --replicas, stage costs and the
// partition file.

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "expect_input_error.hpp"
#include "core/partition.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

Profile chain(int layers) {
  Profile profile;
  profile.name = "chain";
  profile.input_bytes = 1000;
  for (int l = 0; l < layers; ++l)
    profile.layers.push_back({"l" + std::to_string(l), 1.0 + l, 2.0 + l, 100.0 * (l + 1), 10.0 * (l + 1), {}, {}});
  return profile;
}

TEST(Partition, UniformSplitsAsEvenlyAsTheCountAllows) {
  const Partition partition = uniform_partition(chain(10), {"a", "b", "c", "d"}, 4);
  EXPECT_EQ(partition.stage_of_layer, (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(partition.hosts, (std::vector<std::vector<std::string>>{{"a"}, {"b"}, {"c"}, {"d"}}));
}

TEST(Partition, MoreStagesThanLayersIsAnError) {
  try {
    uniform_partition(chain(3), {"a", "b", "c", "d"}, 4);
    FAIL();
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("4 stages need at least 4 layers, found 3"), std::string::npos) << error.what();
  }
  EXPECT_THROW(uniform_partition(chain(8), {"a", "b"}, 4), InputError);
}

TEST(Partition, StageCostsSumLayersAndFollowTheStashRule) {
  const Profile profile = chain(4);
  const Partition partition = uniform_partition(profile, {"a", "b"}, 2);
  const auto stages = stage_costs(profile, partition);
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].first_layer, 0);
  EXPECT_EQ(stages[0].last_layer, 1);
  EXPECT_EQ(stages[1].first_layer, 2);
  EXPECT_DOUBLE_EQ(stages[0].forward_s, 1 + 2);
  EXPECT_DOUBLE_EQ(stages[1].backward_s, 4 + 5);
  EXPECT_DOUBLE_EQ(stages[0].input_bytes, 1000);
  EXPECT_DOUBLE_EQ(stages[0].output_bytes, 200);  // the cut after layer 1
  EXPECT_DOUBLE_EQ(stages[1].input_bytes, 200);
  EXPECT_DOUBLE_EQ(stages[1].output_bytes, 0);
  EXPECT_DOUBLE_EQ(stages[0].stash_bytes, 1000 + 100 + 200);
  EXPECT_DOUBLE_EQ(stages[1].stash_bytes, 200 + 300 + 400);
  EXPECT_DOUBLE_EQ(stages[1].weight_bytes, 30 + 40);
}

TEST(Partition, FileRoundTrips) {
  const Profile profile = chain(5);
  Partition partition;
  partition.stage_of_layer = {0, 1, 1, 1, 2};
  partition.hosts = {{"a"}, {"b", "c"}, {"d"}};
  EXPECT_EQ(partition_to_json(parse_partition_json(partition_to_json(partition), "p.json", profile)),
            partition_to_json(partition));
  EXPECT_EQ(parse_partition_json(partition_to_json(partition), "p.json", profile).stage_of_layer, partition.stage_of_layer);
}

TEST(Partition, BadFilesNameTheField) {
  const Profile profile = chain(4);
  auto message = [&](const std::string& text) {
    try {
      parse_partition_json(text, "p.json", profile);
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  EXPECT_NE(message("{").find("p.json: malformed JSON"), std::string::npos);
  EXPECT_NE(message(R"({"stages": [{"layers": [0, 1], "hosts": ["a"]}, {"layers": [3, 3], "hosts": ["b"]}]})")
                .find("stages[1].layers: expected a range starting at layer 2"),
            std::string::npos);
  EXPECT_NE(message(R"({"stages": [{"layers": [0, 3], "hosts": []}]})").find("stages[0].hosts"), std::string::npos);
  EXPECT_NE(message(R"({"stages": [{"layers": [0, 2], "hosts": ["a"]}]})").find("expected a stage for each of the 4 layers"),
            std::string::npos);
  EXPECT_NE(message(R"({"stages": [{"layers": "all", "hosts": ["a"]}]})").find("stages[0].layers"), std::string::npos);
}

// ------------------------------------------------------- intra-layer splits

TEST(Partition, SplitLayersMakesTwoParts) {
  Profile profile = chain(4);  // layer l: forward 1+l, backward 2+l, output 100(l+1), parameters 10(l+1)
  profile.layers[2].device_times["VCU129"] = {0.5, 1.5};
  const Profile split = split_layers(profile, {{2, 0.25}});
  ASSERT_EQ(split.layers.size(), 5u);
  EXPECT_EQ(split.layers[1].name, "l1");
  const Layer& first = split.layers[2];
  const Layer& second = split.layers[3];
  EXPECT_EQ(first.name, "l2[0:0.25]");
  EXPECT_EQ(second.name, "l2[0.25:1]");
  EXPECT_DOUBLE_EQ(first.forward_s, 3 * 0.25);
  EXPECT_DOUBLE_EQ(first.backward_s, 4 * 0.25);
  EXPECT_DOUBLE_EQ(second.forward_s, 3 * 0.75);
  EXPECT_DOUBLE_EQ(second.backward_s, 4 * 0.75);
  EXPECT_DOUBLE_EQ(first.parameter_bytes, 30 * 0.25);
  EXPECT_DOUBLE_EQ(second.parameter_bytes, 30 * 0.75);
  // The earlier stage sends the layer's input and its share of the output.
  EXPECT_DOUBLE_EQ(first.output_bytes, 200 + 0.25 * 300);
  EXPECT_DOUBLE_EQ(second.output_bytes, 300);
  EXPECT_DOUBLE_EQ(first.device_times.at("VCU129").forward_s, 0.125);
  EXPECT_DOUBLE_EQ(second.device_times.at("VCU129").backward_s, 1.125);
  // Layer 0's input is the model's.
  EXPECT_DOUBLE_EQ(split_layers(profile, {{0, 0.5}}).layers[0].output_bytes, 1000 + 50);
}

TEST(Partition, SplitLayersRejectsBadSplits) {
  const Profile profile = chain(4);
  EXPECT_CONTAINS(input_error_of([&] { split_layers(profile, {{1, 0}}); }),
                  "split of layer 1: expected a fraction strictly between 0 and 1, found 0");
  EXPECT_CONTAINS(input_error_of([&] { split_layers(profile, {{1, 1}}); }), "found 1");
  EXPECT_CONTAINS(input_error_of([&] { split_layers(profile, {{4, 0.5}}); }), "split 0: expected a layer in 0..3, found 4");
  EXPECT_CONTAINS(input_error_of([&] { split_layers(profile, {{2, 0.5}, {2, 0.5}}); }),
                  "split 1: expected a layer after 2");
}

TEST(Partition, SplitFileAppliesTheSplitAndRoundTrips) {
  const Profile profile = chain(5);
  const std::string text = R"({"stages": [{"layers": [0, 2], "split_last": 0.4, "hosts": ["a"]},
                                          {"layers": [2, 3], "hosts": ["b"]},
                                          {"layers": [4, 4], "hosts": ["c"]}]})";
  const PartitionFile file = parse_partition_file(text, "p.json", profile);
  ASSERT_EQ(file.profile.layers.size(), 6u);
  EXPECT_EQ(file.profile.layers[2].name, "l2[0:0.4]");
  EXPECT_EQ(file.profile.layers[3].name, "l2[0.4:1]");
  EXPECT_EQ(file.partition.stage_of_layer, (std::vector<int>{0, 0, 0, 1, 1, 2}));
  EXPECT_EQ(file.partition.split_last, (std::vector<double>{0.4, 0, 0}));
  // Stage costs see the parts: stage 0 sends layer 2's input and 0.4 of its output.
  const auto stages = stage_costs(file.profile, file.partition);
  EXPECT_DOUBLE_EQ(stages[0].forward_s, 1 + 2 + 0.4 * 3);
  EXPECT_DOUBLE_EQ(stages[1].forward_s, 0.6 * 3 + 4);
  EXPECT_DOUBLE_EQ(stages[0].output_bytes, 200 + 0.4 * 300);
  EXPECT_DOUBLE_EQ(stages[1].input_bytes, 200 + 0.4 * 300);

  // Written back it names the unsplit layers again, and reads back the same.
  const std::string written = partition_to_json(file.partition);
  EXPECT_EQ(written, R"({
  "stages": [
    {
      "layers": [
        0,
        2
      ],
      "split_last": 0.4,
      "hosts": [
        "a"
      ]
    },
    {
      "layers": [
        2,
        3
      ],
      "hosts": [
        "b"
      ]
    },
    {
      "layers": [
        4,
        4
      ],
      "hosts": [
        "c"
      ]
    }
  ]
}
)");
  const PartitionFile again = parse_partition_file(written, "again.json", profile);
  EXPECT_EQ(partition_to_json(again.partition), written);
  EXPECT_EQ(profile_to_json(again.profile), profile_to_json(file.profile));
  // A plan keeps the profile with the parts: the same text reads against it.
  const Partition over_parts = parse_partition_json(written, "plan.json: partition", file.profile);
  EXPECT_EQ(over_parts.stage_of_layer, file.partition.stage_of_layer);
  EXPECT_EQ(over_parts.split_last, file.partition.split_last);
}

TEST(Partition, SplitOfTheFirstLayerAndTwoSplitsInARow) {
  const Profile profile = chain(3);
  // Layer 0 shared by stages 0 and 1; layer 1 shared by stages 1 and 2.
  const std::string text = R"({"stages": [{"layers": [0, 0], "split_last": 0.5, "hosts": ["a"]},
                                          {"layers": [0, 1], "split_last": 0.75, "hosts": ["b"]},
                                          {"layers": [1, 2], "hosts": ["c"]}]})";
  const PartitionFile file = parse_partition_file(text, "p.json", profile);
  ASSERT_EQ(file.profile.layers.size(), 5u);
  EXPECT_EQ(file.partition.stage_of_layer, (std::vector<int>{0, 1, 1, 2, 2}));
  EXPECT_EQ(partition_to_json(parse_partition_file(partition_to_json(file.partition), "p.json", profile).partition),
            partition_to_json(file.partition));
}

TEST(Partition, BadSplitsNameTheStageAndField) {
  const Profile profile = chain(4);
  const auto message = [&](const std::string& text) {
    return input_error_of([&] { parse_partition_file(text, "p.json", profile); });
  };
  EXPECT_CONTAINS(message(R"({"stages": [{"layers": [0, 1], "split_last": 1, "hosts": ["a"]}, {"layers": [1, 3], "hosts": ["b"]}]})"),
                  "p.json: stages[0].split_last: expected the fraction of layer 1 this stage does, strictly between 0 and 1, found 1");
  EXPECT_CONTAINS(message(R"({"stages": [{"layers": [0, 1], "split_last": 0, "hosts": ["a"]}, {"layers": [1, 3], "hosts": ["b"]}]})"),
                  "stages[0].split_last: expected the fraction of layer 1 this stage does, strictly between 0 and 1, found 0");
  EXPECT_CONTAINS(message(R"({"stages": [{"layers": [0, 1], "split_last": "half", "hosts": ["a"]}, {"layers": [1, 3], "hosts": ["b"]}]})"),
                  "found \"half\"");
  EXPECT_CONTAINS(message(R"({"stages": [{"layers": [0, 1], "split_last": 0.5, "hosts": ["a"]}, {"layers": [2, 3], "hosts": ["b"]}]})"),
                  "p.json: stages[1].layers: expected a range starting at layer 1, found [2, 3] (stages[0] shares layer 1 with it: split_last)");
  EXPECT_CONTAINS(message(R"({"stages": [{"layers": [0, 1], "hosts": ["a"]}, {"layers": [2, 3], "split_last": 0.5, "hosts": ["b"]}]})"),
                  "p.json: stages[1].split_last: the last stage has no next stage to share layer 3 with");
  EXPECT_CONTAINS(message(R"({"stages": [{"layers": [0, 1], "split_last": 0.5, "hosts": ["a"]}, {"layers": [1, 1], "split_last": 0.5, "hosts": ["b"]}, {"layers": [1, 3], "hosts": ["c"]}]})"),
                  "p.json: stages[1].split_last: layer 1 is already shared with stages[0]; a layer is split at most once");
  EXPECT_CONTAINS(message(R"({"stages": [{"layers": [0, 1], "split_last": 0.5, "hosts": ["a"]}, {"layers": [1, 2], "hosts": ["b"]}]})"),
                  "p.json: expected a stage for each of the 4 layers of 'chain', found 3");
}

TEST(Partition, CheckPartitionValidatesSplits) {
  const Profile profile = split_layers(chain(3), {{1, 0.5}});
  Partition partition;
  partition.stage_of_layer = {0, 0, 1, 1};
  partition.hosts = {{"a"}, {"b"}};
  partition.split_last = {0.5};
  EXPECT_CONTAINS(input_error_of([&] { check_partition(partition, profile, "p"); }),
                  "p: split_last: expected one fraction per stage (2), found 1");
  partition.split_last = {1.5, 0};
  EXPECT_CONTAINS(input_error_of([&] { check_partition(partition, profile, "p"); }),
                  "p: stage 0: split_last: expected 0 (none) or a fraction strictly between 0 and 1, found 1.5");
  partition.split_last = {0.5, 0.5};
  EXPECT_CONTAINS(input_error_of([&] { check_partition(partition, profile, "p"); }),
                  "p: stage 1: split_last: the last stage has no next stage to share a layer with");
  partition.split_last = {0.5, 0};
  EXPECT_NO_THROW(check_partition(partition, profile, "p"));
}

// ------------------------------------------------------------- --replicas

/// A profile whose layer l takes work[l] (forward 0.25 of it, backward the rest).
Profile with_work(const std::vector<double>& work) {
  Profile profile;
  profile.name = "work";
  for (std::size_t l = 0; l < work.size(); ++l)
    profile.layers.push_back({"l" + std::to_string(l), work[l] / 4, work[l] - work[l] / 4, 100, 10, {}, {}});
  return profile;
}

/// Hosts h0, h1, ... with the given speed factors.
std::vector<HostInfo> hosts_with_speeds(const std::vector<double>& speeds) {
  std::vector<HostInfo> hosts;
  for (std::size_t h = 0; h < speeds.size(); ++h) {
    HostInfo host;
    host.name = "h" + std::to_string(h);
    host.speed_factor = speeds[h];
    hosts.push_back(host);
  }
  return hosts;
}

std::vector<HostInfo> plain_hosts(int count) { return hosts_with_speeds(std::vector<double>(count, 1.0)); }

/// The slowest stage's time per replica, from stage_costs(): the objective
/// replicated_partition() minimises, computed independently of it.
double bottleneck(const Profile& profile, const Partition& partition, const std::vector<HostInfo>& hosts,
                  const std::vector<int>& replicas) {
  const auto stages = stage_costs(profile, partition);
  double worst = 0;
  std::size_t next_host = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    double slowest = std::numeric_limits<double>::infinity();
    for (int r = 0; r < replicas[s]; ++r) slowest = std::min(slowest, hosts[next_host++].speed_factor);
    worst = std::max(worst, (stages[s].forward_s + stages[s].backward_s) / (static_cast<double>(replicas[s]) * slowest));
  }
  return worst;
}

TEST(Replicas, ParsesCountsPerStage) {
  EXPECT_EQ(parse_replicas("3,1"), (std::vector<int>{3, 1}));
  EXPECT_EQ(parse_replicas("4,2,1,1"), (std::vector<int>{4, 2, 1, 1}));
  EXPECT_EQ(parse_replicas("2"), (std::vector<int>{2}));
  EXPECT_EQ(parse_replicas(" 15 , 1 "), (std::vector<int>{15, 1}));
}

TEST(Replicas, BadTextNamesTheFlagAndQuotesTheValue) {
  const auto message = [](const std::string& text) { return input_error_of([&] { parse_replicas(text); }); };
  EXPECT_CONTAINS(message(""),
                  "--replicas: expected replica counts per stage separated by commas, such as 3,1; found an empty value");
  EXPECT_CONTAINS(message("  "), "found an empty value");
  EXPECT_CONTAINS(message("3,1,"), "--replicas: stage 2: expected a replica count, found nothing in '3,1,' (a stray comma?)");
  EXPECT_CONTAINS(message(",3"), "--replicas: stage 0: expected a replica count, found nothing in ',3'");
  EXPECT_CONTAINS(message("3,,1"), "stage 1: expected a replica count, found nothing in '3,,1'");
  EXPECT_CONTAINS(message("3,x"), "--replicas: stage 1: expected a whole number of replicas, found 'x' in '3,x'");
  EXPECT_CONTAINS(message("1.5"), "stage 0: expected a whole number of replicas, found '1.5' in '1.5'");
  EXPECT_CONTAINS(message("3-1"), "found '3-1' in '3-1'");
  EXPECT_CONTAINS(message("3 1"), "found '3 1' in '3 1'");
  EXPECT_CONTAINS(message("+2"), "found '+2'");
  EXPECT_CONTAINS(message("2,0"), "--replicas: stage 1: expected at least 1 replica, found '0' in '2,0'");
  EXPECT_CONTAINS(message("-1,2"), "--replicas: stage 0: expected at least 1 replica, found '-1' in '-1,2'");
  EXPECT_CONTAINS(message("99999999999"), "found '99999999999' in '99999999999' (too large)");
}

// ------------------------------------------------------ replicated partition

TEST(ReplicatedPartition, TwoReplicasTakeTwiceTheLayers) {
  // F+B = 1 per layer. 2,1: stage 0 takes 4 layers (4/2 = 2), stage 1 two (2).
  const std::vector<HostInfo> hosts = plain_hosts(4);  // h3 stays unused
  const Partition partition = replicated_partition(with_work({1, 1, 1, 1, 1, 1}), hosts, {2, 1});
  EXPECT_EQ(partition.stage_of_layer, (std::vector<int>{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(partition.hosts, (std::vector<std::vector<std::string>>{{"h0", "h1"}, {"h2"}}));
}

TEST(ReplicatedPartition, HostsGoToStagesInPlatformOrder) {
  // Eight equal layers on 1,3,2,1: a bottleneck of 1 holds 1+3+2+1 = 7 layers
  // only; 4/3 holds 1+4+2+1 = 8, which is then the one split.
  const Profile profile = with_work({1, 1, 1, 1, 1, 1, 1, 1});
  const std::vector<HostInfo> hosts = plain_hosts(8);
  const Partition partition = replicated_partition(profile, hosts, {1, 3, 2, 1});
  EXPECT_EQ(partition.hosts, (std::vector<std::vector<std::string>>{{"h0"}, {"h1", "h2", "h3"}, {"h4", "h5"}, {"h6"}}));
  EXPECT_EQ(partition.stage_of_layer, (std::vector<int>{0, 1, 1, 1, 1, 2, 2, 3}));
  EXPECT_EQ(bottleneck(profile, partition, hosts, {1, 3, 2, 1}), 4.0 / 3);
}

TEST(ReplicatedPartition, TiesGoToTheLexicographicallySmallestCuts) {
  // Four equal layers on three single-replica stages: 1+1+2, 1+2+1 and 2+1+1
  // all have bottleneck 2; the cuts (1, 2) come first.
  EXPECT_EQ(replicated_partition(with_work({1, 1, 1, 1}), plain_hosts(3), {1, 1, 1}).stage_of_layer,
            (std::vector<int>{0, 1, 2, 2}));
  // A heavy last layer alone sets the bottleneck (5); the three light layers
  // split 1+2 or 2+1 under it, and stage 0 takes the fewest.
  EXPECT_EQ(replicated_partition(with_work({1, 1, 1, 5}), plain_hosts(3), {1, 1, 1}).stage_of_layer,
            (std::vector<int>{0, 1, 1, 2}));
  // Zero-cost layers tie everywhere: they go to the later stage.
  EXPECT_EQ(replicated_partition(with_work({3, 0, 0, 3}), plain_hosts(2), {1, 1}).stage_of_layer,
            (std::vector<int>{0, 1, 1, 1}));
}

TEST(ReplicatedPartition, AStageRunsAtItsSlowestReplicasSpeed) {
  const Profile profile = with_work({1, 1, 1, 1, 1, 1});
  // 1,1 with speeds 1 and 2: 2 layers at speed 1, 4 at speed 2 (both 2).
  EXPECT_EQ(replicated_partition(profile, hosts_with_speeds({1, 2}), {1, 1}).stage_of_layer,
            (std::vector<int>{0, 0, 1, 1, 1, 1}));
  // 2,1 with speeds 1, 4 | 1: stage 0 goes at 2 x 1, as with plain hosts.
  EXPECT_EQ(replicated_partition(profile, hosts_with_speeds({1, 4, 1}), {2, 1}).stage_of_layer,
            (std::vector<int>{0, 0, 0, 0, 1, 1}));
  // 2,1 with speeds 4, 4 | 1: stage 0 goes at 8; stage 1 keeps one layer.
  EXPECT_EQ(replicated_partition(profile, hosts_with_speeds({4, 4, 1}), {2, 1}).stage_of_layer,
            (std::vector<int>{0, 0, 0, 0, 0, 1}));
}

TEST(ReplicatedPartition, MatchesBruteForceOverEverySplit) {
  const unsigned seed = 20240611;
  std::mt19937 random(seed);
  for (int round = 0; round < 600; ++round) {
    const int layers = std::uniform_int_distribution<int>(1, 9)(random);
    const int num_stages = std::uniform_int_distribution<int>(1, std::min(4, layers))(random);
    // Small integer work makes exact ties common; the rest are arbitrary reals.
    const bool integral = round % 2 == 0;
    std::vector<double> work(layers);
    for (double& w : work)
      w = integral ? std::uniform_int_distribution<int>(0, 4)(random) : std::uniform_real_distribution<double>(0, 3)(random);
    std::vector<int> replicas(num_stages);
    int needed = 0;
    for (int& r : replicas) needed += r = std::uniform_int_distribution<int>(1, 3)(random);
    std::vector<double> speeds(needed + std::uniform_int_distribution<int>(0, 2)(random));
    for (double& s : speeds) s = round % 3 == 0 ? std::uniform_int_distribution<int>(1, 3)(random) : 1.0;
    const Profile profile = with_work(work);
    const std::vector<HostInfo> hosts = hosts_with_speeds(speeds);
    const std::string context = "seed " + std::to_string(seed) + ", round " + std::to_string(round);

    // Every split, cuts in lexicographic order; the first minimum wins.
    std::optional<Partition> first_best;
    double minimum = std::numeric_limits<double>::infinity();
    Partition candidate;
    candidate.hosts.resize(num_stages);
    const std::function<void(int, int)> split = [&](int stage, int first) {
      if (stage == num_stages - 1) {
        candidate.stage_of_layer.resize(first);
        candidate.stage_of_layer.resize(layers, stage);
        const double value = bottleneck(profile, candidate, hosts, replicas);
        if (value < minimum) minimum = value, first_best = candidate;
        return;
      }
      for (int last = first; last <= layers - num_stages + stage; ++last) {
        candidate.stage_of_layer.resize(first);
        candidate.stage_of_layer.resize(last + 1, stage);
        split(stage + 1, last + 1);
      }
    };
    split(0, 0);

    const Partition partition = replicated_partition(profile, hosts, replicas);
    ASSERT_NO_THROW(check_partition(partition, profile, context)) << context;
    ASSERT_TRUE(first_best.has_value()) << context;
    EXPECT_EQ(bottleneck(profile, partition, hosts, replicas), minimum) << context;
    EXPECT_EQ(partition.stage_of_layer, first_best->stage_of_layer) << context << " (tie rule)";
  }
}

TEST(ReplicatedPartition, SameInputSamePartition) {
  // Sums that round differently by order (0.1 + 0.2 + 0.3) still give one answer.
  const Profile profile = with_work({0.1, 0.2, 0.3, 0.6, 0.1, 0.2, 0.3});
  const Partition first = replicated_partition(profile, plain_hosts(3), {1, 1, 1});
  for (int run = 0; run < 5; ++run)
    EXPECT_EQ(replicated_partition(profile, plain_hosts(3), {1, 1, 1}).stage_of_layer, first.stage_of_layer);
}

TEST(ReplicatedPartition, ErrorsNameTheCounts) {
  EXPECT_CONTAINS(input_error_of([] { replicated_partition(with_work({1, 1, 1}), plain_hosts(3), {3, 1}); }),
                  "--replicas 3,1: expected at least 4 hosts on the platform (one per replica), found 3");
  EXPECT_CONTAINS(input_error_of([] { replicated_partition(with_work({1, 1}), plain_hosts(4), {1, 1, 1}); }),
                  "--replicas 1,1,1: profile 'work': 3 stages need at least 3 layers, found 2");
  EXPECT_CONTAINS(input_error_of([] { replicated_partition(with_work({1, 1}), plain_hosts(4), {}); }),
                  "--replicas: expected at least one stage, found none");
  EXPECT_CONTAINS(input_error_of([] { replicated_partition(with_work({1, 1}), plain_hosts(4), {1, 0}); }),
                  "--replicas 1,0: stage 1: expected at least 1 replica, found 0");
}

TEST(ReplicatedPartition, Vgg16FifteenToOne) {
  const Profile profile = read_profile(std::string(PIPEGRID_SOURCE_DIR) + "/models/pipedream/vgg16/graph.txt", std::nullopt);
  ASSERT_EQ(profile.layers.size(), 40u);
  const std::vector<HostInfo> hosts = plain_hosts(16);
  const Partition partition = replicated_partition(profile, hosts, parse_replicas("15,1"));
  ASSERT_NO_THROW(check_partition(partition, profile, "vgg16 --replicas 15,1"));
  ASSERT_EQ(partition.num_stages(), 2);
  EXPECT_EQ(partition.hosts[0].size(), 15u);
  EXPECT_EQ(partition.hosts[0].front(), "h0");
  EXPECT_EQ(partition.hosts[0].back(), "h14");
  EXPECT_EQ(partition.hosts[1], (std::vector<std::string>{"h15"}));
  // Layers 0-24 (through conv5_1, the 11th convolution) on 15 replicas:
  // 635.1 ms / 15 = 42.34 ms, the bottleneck; layers 25-39 (conv5_2, conv5_3
  // and the classifier) on one: 37.4 ms. One layer less for stage 0 would
  // leave stage 1 50.4 ms.
  const auto stages = stage_costs(profile, partition);
  EXPECT_EQ(stages[0].last_layer, 24);
  EXPECT_EQ(stages[1].first_layer, 25);
  EXPECT_NEAR(bottleneck(profile, partition, hosts, {15, 1}), 0.0423406, 1e-7);
}

}  // namespace
}  // namespace pipegrid

namespace pipegrid {
namespace {

TEST(PartitionFile, LayerOrderIsReadWhenPresentAndCheckedForIndices) {
  EXPECT_TRUE(parse_partition_layer_order(R"({"stages": []})", "p.json").empty());
  EXPECT_EQ(parse_partition_layer_order(R"({"stages": [], "layer_order": [0, 2, 1]})", "p.json"), (std::vector<int>{0, 2, 1}));
  EXPECT_CONTAINS(testutil::input_error_of([] { parse_partition_layer_order(R"({"layer_order": {"a": 1}})", "p.json"); }),
                  "p.json: layer_order: expected a list of layer indices");
  EXPECT_CONTAINS(testutil::input_error_of([] { parse_partition_layer_order(R"({"layer_order": [0, 1.5]})", "p.json"); }),
                  "p.json: layer_order[1]: expected a layer index in 0..2147483646, found 1.5");
}

}  // namespace
}  // namespace pipegrid

namespace pipegrid {
namespace {

// A GPT-like chain: embedding, `blocks` transformer layers, norm, head, loss.
Profile transformer_chain(int blocks) {
  Profile profile;
  profile.name = "gpt-like";
  const auto add = [&](const std::string& name, const std::string& op) {
    Layer layer;
    layer.name = name;
    layer.op = op;
    layer.forward_s = 1;
    layer.backward_s = 2;
    profile.layers.push_back(layer);
  };
  add("embedding", "embedding");
  for (int b = 1; b <= blocks; ++b) add("block" + std::to_string(b), "transformer");
  add("final_norm", "norm");
  add("head", "linear");
  add("loss", "loss");
  return profile;
}

std::vector<std::string> hosts_of(int stages) {
  std::vector<std::string> hosts;
  for (int s = 0; s < stages; ++s) hosts.push_back("h" + std::to_string(s));
  return hosts;
}

// stage_of_layer for: embedding, blocks..., final_norm, head, loss.
TEST(MegatronPartition, EvenBlocksEmbeddingFirstHeadAndLossLast) {
  const Partition partition =
      megatron_partition(transformer_chain(8), hosts_of(4), 4, 1, {0, 1, 2, 3}, std::nullopt, std::nullopt);
  EXPECT_EQ(partition.stage_of_layer, (std::vector<int>{0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 3, 3}));
  EXPECT_EQ(partition.hosts[2], std::vector<std::string>{"h2"});
}

TEST(MegatronPartition, VirtualStagesTakeLayersInStageOrderRoundTheLoop) {
  // p = 2, v = 2 (loop): stage s on rank s mod 2; 8 blocks, 2 per chunk.
  const Partition partition =
      megatron_partition(transformer_chain(8), hosts_of(4), 4, 2, {0, 1, 0, 1}, std::nullopt, std::nullopt);
  EXPECT_EQ(partition.stage_of_layer, (std::vector<int>{0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 3, 3}));
}

TEST(MegatronPartition, UnevenFirstAndLastRanksSplitTheRestEvenly) {
  const Partition partition = megatron_partition(transformer_chain(8), hosts_of(4), 4, 1, {0, 1, 2, 3}, 1, 1);
  EXPECT_EQ(partition.stage_of_layer, (std::vector<int>{0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3}));
  // A V map (zb-v, p = 2): rank 0 holds stages 0 and 3, rank 1 stages 1 and 2.
  const Partition v = megatron_partition(transformer_chain(8), hosts_of(4), 4, 2, {0, 1, 1, 0}, 2, std::nullopt);
  // rank 0: 2 blocks (1 per chunk); rank 1: 6 (3 per chunk).
  EXPECT_EQ(v.stage_of_layer, (std::vector<int>{0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3}));
}

// Zero Bubble's interleaved layout: every transformer layer a chunk, the
// embedding and the loss each in a chunk of their own (p = 2, v = 3:
// 4 blocks + 2 slots = 6 chunks).
TEST(MegatronPartition, TheEmbeddingAndTheLossMayEachTakeALayersPlace) {
  const Partition partition = megatron_partition(transformer_chain(4), hosts_of(6), 6, 3, {0, 1, 0, 1, 0, 1},
                                                 std::nullopt, std::nullopt, true, true);
  // embedding | b1 | b2 | b3 | b4 | final_norm, head, loss
  EXPECT_EQ(partition.stage_of_layer, (std::vector<int>{0, 1, 2, 3, 4, 5, 5, 5}));
  // Only the embedding: 4 blocks + 1 = 5 does not split over 2 ranks.
  EXPECT_CONTAINS(input_error_of([] {
                    megatron_partition(transformer_chain(4), hosts_of(2), 2, 1, {0, 1}, std::nullopt, std::nullopt, true,
                                       false);
                  }),
                  "5 layers (the embedding and the loss counted as layers) do not split evenly over 2 pipeline ranks");
  // 5 blocks + the embedding = 6 over 2 ranks: 2 + 3 | 3 (head and loss follow the last block).
  EXPECT_EQ(megatron_partition(transformer_chain(5), hosts_of(2), 2, 1, {0, 1}, std::nullopt, std::nullopt, true, false)
                .stage_of_layer,
            (std::vector<int>{0, 0, 0, 1, 1, 1, 1, 1, 1}));
}

TEST(MegatronPartition, RefusesCountsMegatronRefuses) {
  EXPECT_CONTAINS(input_error_of([] {
                    megatron_partition(transformer_chain(9), hosts_of(4), 4, 1, {0, 1, 2, 3}, std::nullopt, std::nullopt);
                  }),
                  "9 transformer layers do not split evenly over 4 pipeline ranks; expected a multiple of 4");
  EXPECT_CONTAINS(input_error_of([] {
                    megatron_partition(transformer_chain(6), hosts_of(4), 4, 2, {0, 1, 0, 1}, std::nullopt, std::nullopt);
                  }),
                  "pipeline rank 0 holds 3 transformer layers, which do not split into its 2 virtual stages");
  EXPECT_CONTAINS(input_error_of([] {
                    megatron_partition(transformer_chain(8), hosts_of(4), 4, 1, {0, 1, 2, 3}, 3, std::nullopt);
                  }),
                  "--first-pipeline-layers 3: 8 transformer layers leave 5 for the other 3");
  Profile plain = transformer_chain(2);
  for (Layer& layer : plain.layers) layer.op = "linear";
  EXPECT_CONTAINS(input_error_of([&] { megatron_partition(plain, hosts_of(2), 2, 1, {0, 1}, std::nullopt, std::nullopt); }),
                  "has no transformer layers");
}

}  // namespace
}  // namespace pipegrid

namespace pipegrid {
namespace {

// chain(): layer l costs (1 + l) + (2 + l) = 3 + 2l seconds (F + B).
TEST(BalancedPartition, MinimisesTheLargestStage) {
  EXPECT_EQ(balanced_partition(chain(4), {"a", "b"}, 2).stage_of_layer, (std::vector<int>{0, 0, 0, 1}));  // 15 | 9
  EXPECT_EQ(balanced_partition(chain(4), {"a", "b", "c"}, 3).stage_of_layer, (std::vector<int>{0, 0, 1, 2}));  // 8 | 7 | 9
  const Partition one_each = balanced_partition(chain(3), {"a", "b", "c"}, 3);
  EXPECT_EQ(one_each.stage_of_layer, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(one_each.hosts[1], std::vector<std::string>{"b"});
}

TEST(BalancedPartition, MatchesEveryContiguousSplitOnSmallChains) {
  // Exhaustive check against every split of 7 layers into 3 stages.
  Profile profile = chain(7);
  const double costs[] = {5, 1, 9, 2, 2, 8, 3};
  for (std::size_t l = 0; l < 7; ++l) profile.layers[l].forward_s = costs[l], profile.layers[l].backward_s = 0;
  double best = 1e300;
  for (int a = 1; a < 6; ++a)
    for (int b = a + 1; b < 7; ++b) {
      double s0 = 0, s1 = 0, s2 = 0;
      for (int l = 0; l < 7; ++l) (l < a ? s0 : l < b ? s1 : s2) += costs[l];
      best = std::min(best, std::max({s0, s1, s2}));
    }
  const Partition partition = balanced_partition(profile, {"a", "b", "c"}, 3);
  std::vector<double> stage(3, 0.0);
  for (std::size_t l = 0; l < 7; ++l) stage[static_cast<std::size_t>(partition.stage_of_layer[l])] += costs[l];
  EXPECT_DOUBLE_EQ(*std::max_element(stage.begin(), stage.end()), best);
}

}  // namespace
}  // namespace pipegrid
