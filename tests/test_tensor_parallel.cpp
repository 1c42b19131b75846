// Tensor parallelism (core/tensor_parallel.hpp) and bytes per parameter
// (core/precision.hpp): hand-computed values on hand-made profiles.

#include <gtest/gtest.h>

#include <map>

#include <fmt/format.h>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/metrics.hpp"
#include "core/partition.hpp"
#include "core/plan.hpp"
#include "core/precision.hpp"
#include "core/tensor_parallel.hpp"
#include "generators/model_generators.hpp"
#include "partitioners/bapipe.hpp"
#include "partitioners/explorer.hpp"

namespace pipegrid {
namespace {

Layer layer(const std::string& name, const std::string& op, bool flops, double forward, double backward, double output,
            double parameters) {
  Layer l;
  l.name = name;
  l.op = op;
  if (flops) {
    l.forward_flops = 8e9;
    l.backward_input_flops = 8e9;
    l.backward_weight_flops = 8e9;
    l.bytes_read = 4e6;
    l.bytes_written = 2e6;
  }
  l.forward_s = forward;
  l.backward_s = backward;
  l.output_bytes = output;
  l.parameter_bytes = parameters;
  return l;
}

// embedding, two transformer blocks with FLOPs (the second stashes 3 MB of
// its own), a transformer without FLOPs, the loss.
Profile transformer_profile() {
  Profile profile;
  profile.name = "tiny-gpt";
  profile.input_bytes = 1000;
  profile.layers = {layer("embedding", "embedding", true, 0.001, 0.002, 1e6, 4e6),
                    layer("block0", "transformer", true, 0.010, 0.020, 1e6, 8e6),
                    layer("block1", "transformer", true, 0.010, 0.020, 1e6, 8e6),
                    layer("measured-block", "transformer", false, 0.010, 0.020, 1e6, 8e6),
                    layer("loss", "loss", false, 0.0005, 0.0005, 4, 0)};
  profile.layers[2].activation_bytes = 3e6;
  return profile;
}

const TensorParallelLink kLink{1e-6, 1e9};  // 1 us, 1 GB/s

TEST(TensorParallel, RingAllReduceTime) {
  // 2 (t - 1) x (latency + bytes / (t x bandwidth)).
  EXPECT_DOUBLE_EQ(ring_all_reduce_s(4e6, 4, kLink), 6 * (1e-6 + 1e-3));           // 0.006006
  EXPECT_DOUBLE_EQ(ring_all_reduce_s(2e6, 2, {0, 1e9}), 0.002);                   // 2 x 1 x 2e6 / 2e9
  EXPECT_DOUBLE_EQ(ring_all_reduce_s(8e6, 8, {5e-6, 2e9}), 14 * (5e-6 + 8e6 / 16e9));  // 0.00707
  EXPECT_EQ(ring_all_reduce_s(1e9, 1, kLink), 0);
}

TEST(TensorParallel, SplitsTransformerLayersWithFlops) {
  const TensorParallelProfile result = tensor_parallel_profile(transformer_profile(), 2, kLink);
  EXPECT_EQ(result.split, (std::vector<int>{1, 2}));
  EXPECT_EQ(result.replicated, (std::vector<int>{0, 3, 4}));
  // One all-reduce of 1 MB over 2 hosts: 2 x 1 x (1e-6 + 1e6 / 2e9) = 0.001002 s.
  const double all_reduce = 0.001002;
  const Layer& block = result.profile.layers[1];
  EXPECT_DOUBLE_EQ(block.forward_s, 0.010 / 2 + 2 * all_reduce);         // 0.007004
  EXPECT_DOUBLE_EQ(*block.backward_input_s, 0.010 / 2 + 2 * all_reduce);  // I = 0.01 by the default rule
  EXPECT_DOUBLE_EQ(*block.backward_weight_s, 0.010 / 2);
  EXPECT_DOUBLE_EQ(block.backward_s, 0.020 / 2 + 2 * all_reduce);        // 0.012004
  EXPECT_DOUBLE_EQ(block.parameter_bytes, 4e6);
  EXPECT_DOUBLE_EQ(block.output_bytes, 5e5);
  EXPECT_DOUBLE_EQ(block.stashed_bytes(), 5e5);
  EXPECT_DOUBLE_EQ(*block.forward_flops, 4e9);
  EXPECT_DOUBLE_EQ(*block.backward_input_flops, 4e9);
  EXPECT_DOUBLE_EQ(*block.backward_weight_flops, 4e9);
  EXPECT_DOUBLE_EQ(*block.bytes_read, 2e6);
  EXPECT_DOUBLE_EQ(*block.bytes_written, 1e6);
  // Its own stash divided too.
  EXPECT_DOUBLE_EQ(result.profile.layers[2].stashed_bytes(), 1.5e6);
  EXPECT_TRUE(backward_split_sums_to(block.backward_s, *block.backward_input_s, *block.backward_weight_s));
}

TEST(TensorParallel, ReplicatedLayersKeepTimeAndMemory) {
  const Profile original = transformer_profile();
  const TensorParallelProfile result = tensor_parallel_profile(original, 4, kLink);
  for (const int l : {0, 3, 4}) {
    const Layer& before = original.layers[static_cast<std::size_t>(l)];
    const Layer& after = result.profile.layers[static_cast<std::size_t>(l)];
    EXPECT_EQ(after.forward_s, before.forward_s) << before.name;
    EXPECT_EQ(after.backward_s, before.backward_s) << before.name;
    EXPECT_FALSE(after.backward_input_s.has_value()) << before.name;
    EXPECT_EQ(after.parameter_bytes, before.parameter_bytes) << before.name;
    EXPECT_EQ(after.stashed_bytes(), before.stashed_bytes()) << before.name;  // stashed in full on every member
    EXPECT_EQ(after.output_bytes, before.output_bytes / 4) << before.name;    // each member sends its share
    EXPECT_EQ(after.forward_flops, before.forward_flops) << before.name;
  }
  EXPECT_EQ(result.profile.input_bytes, original.input_bytes);
  EXPECT_EQ(result.note.rfind("tensor parallel 4: 2 transformer layers split; no layer split over the vocabulary (none "
                              "gives `vocabulary`: an embedding, head or loss stays whole on every member); 3 layers "
                              "replicated: embedding, measured-block, loss;",
                              0),
            0u)
      << result.note;
}

TEST(TensorParallel, ProfileWithoutFlopsIsReplicated) {
  Profile profile = transformer_profile();
  for (Layer& l : profile.layers) l.forward_flops.reset();
  const TensorParallelProfile result = tensor_parallel_profile(profile, 2, kLink);
  EXPECT_TRUE(result.split.empty());
  EXPECT_EQ(result.replicated.size(), 5u);
  EXPECT_EQ(result.profile.layers[1].forward_s, 0.010);
  EXPECT_EQ(result.note.rfind("tensor parallel 2: no transformer layer split (none with FLOPs); no layer split over the "
                              "vocabulary",
                              0),
            0u)
      << result.note;
}

TEST(TensorParallel, DeviceTimesAreSplitToo) {
  Profile profile = transformer_profile();
  profile.layers[1].device_times["H100"] = {0.004, 0.006, 0.002, 0.004};
  const TensorParallelProfile result = tensor_parallel_profile(profile, 2, kLink);
  const LayerTimes& times = result.profile.layers[1].device_times.at("H100");
  EXPECT_DOUBLE_EQ(times.forward_s, 0.002 + 0.002004);
  EXPECT_DOUBLE_EQ(*times.backward_input_s, 0.001 + 0.002004);
  EXPECT_DOUBLE_EQ(*times.backward_weight_s, 0.002);
  EXPECT_DOUBLE_EQ(times.backward_s, 0.003 + 0.002004);
}

TEST(TensorParallel, OneIsTheIdentity) {
  const Profile profile = transformer_profile();
  const TensorParallelProfile result = tensor_parallel_profile(profile, 1, kLink);
  EXPECT_EQ(profile_to_json(result.profile), profile_to_json(profile));
  EXPECT_TRUE(result.note.empty());
  EXPECT_THROW(tensor_parallel_profile(profile, 0, kLink), InputError);
}

TEST(TensorParallel, MemoryPerDevice) {
  // Two stages of the profile split 2 ways: weights per member = replicated
  // in full + split / 2; fp16 Adam keeps 8 bytes per weight byte (16 per
  // parameter of 2 bytes).
  const TensorParallelProfile result = tensor_parallel_profile(transformer_profile(), 2, kLink);
  Partition partition = uniform_partition(result.profile, {"a", "b"}, 2);  // layers 0-2 | 3-4
  const std::vector<StageCost> costs = stage_costs(result.profile, partition);
  EXPECT_DOUBLE_EQ(costs[0].weight_bytes, 4e6 + 4e6 + 4e6);
  EXPECT_DOUBLE_EQ(costs[1].weight_bytes, 8e6);
  EXPECT_DOUBLE_EQ(costs[0].output_bytes, 5e5);  // block1's output, one member's share
  // Stage 0 stashes its input, the embedding's output in full and the two blocks' halves.
  EXPECT_DOUBLE_EQ(costs[0].stash_bytes, 1000 + 1e6 + 5e5 + 1.5e6);
  MemoryModel model;
  model.stages = costs;
  model.resident_weight_factor = resident_weight_factor("fp16", "adam");
  Timeline timeline;
  timeline.hosts = {"a", "b"};
  const MemoryPeaks peaks = annotate_memory(timeline, model, std::map<std::string, int>{{"a", 0}, {"b", 1}});
  EXPECT_DOUBLE_EQ(peaks.peak_bytes.at("a"), 8 * 12e6);
  EXPECT_DOUBLE_EQ(peaks.peak_bytes.at("b"), 8 * 8e6);
}

PlatformSummary two_servers(int gpus_per_server) {
  PlatformSummary platform;
  platform.file = "cluster.xml";
  for (int s = 0; s < 2; ++s)
    for (int g = 0; g < gpus_per_server; ++g) {
      HostInfo host;
      host.name = "s" + std::to_string(s) + "-gpu" + std::to_string(g);
      host.server = "server" + std::to_string(s);
      platform.hosts.push_back(host);
    }
  const std::size_t n = platform.hosts.size();
  platform.route_bandwidth_Bps.assign(n, std::vector<double>(n, 0));
  platform.route_latency_s.assign(n, std::vector<double>(n, 0));
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t b = 0; b < n; ++b)
      if (a != b) {
        const bool same = platform.hosts[a].server == platform.hosts[b].server;
        platform.route_bandwidth_Bps[a][b] = same ? 150e9 : 3.125e9;
        platform.route_latency_s[a][b] = same ? 2e-6 : 5e-6;
      }
  if (gpus_per_server == 4) {
    // One narrower pair inside server 1 (the ring's slowest step).
    platform.route_bandwidth_Bps[5][6] = 100e9;
    platform.route_latency_s[7][4] = 3e-6;
  }
  return platform;
}

TEST(TensorParallel, GroupsAndTheirLink) {
  const PlatformSummary platform = two_servers(4);
  const auto groups = tensor_parallel_groups(platform, 4);
  EXPECT_EQ(groups, (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  const TensorParallelLink link = tensor_parallel_link(platform, groups);
  EXPECT_EQ(link.bandwidth_Bps, 100e9);  // 5 -> 6
  EXPECT_EQ(link.latency_s, 3e-6);       // 7 -> 4, the ring closing
  const PlatformSummary leaders = leader_platform(platform, groups);
  ASSERT_EQ(leaders.hosts.size(), 2u);
  EXPECT_EQ(leaders.hosts[1].name, "s1-gpu0");
  EXPECT_EQ(leaders.route_bandwidth_Bps[0][1], 3.125e9);
  EXPECT_EQ(leaders.route_latency_s[1][0], 5e-6);
  EXPECT_EQ(tensor_parallel_groups(platform, 2).size(), 4u);
}

TEST(TensorParallel, RefusesGroupsThatDoNotFit) {
  const PlatformSummary platform = two_servers(2);  // 4 hosts, 2 per server
  try {
    tensor_parallel_groups(platform, 3);
    ADD_FAILURE() << "3 does not divide 4 hosts";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--tensor-parallel 3: cluster.xml has 4 hosts, not a multiple of 3"), std::string::npos)
        << error.what();
  }
}

// A group of 4 over two servers of 2 GPUs: its ring 0 -> 1 -> 2 -> 3 -> 0
// crosses between the servers twice, each crossing as 2 channels (0 -> 2
// and 1 -> 3; 2 -> 0 and 3 -> 1).
TEST(TensorParallel, GroupsSpanningServersRunTheirCrossingsOverChannels) {
  const PlatformSummary platform = two_servers(2);
  const auto groups = tensor_parallel_groups(platform, 4);
  ASSERT_EQ(groups, (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  EXPECT_TRUE(tensor_parallel_spans_servers(platform, groups));
  EXPECT_FALSE(tensor_parallel_spans_servers(platform, tensor_parallel_groups(platform, 2)));
  using Pairs = std::vector<std::pair<std::size_t, std::size_t>>;
  EXPECT_EQ(tensor_parallel_route_pairs(platform, groups), (Pairs{{0, 1}, {0, 2}, {1, 3}, {2, 3}, {2, 0}, {3, 1}}));
  // Route matrices without links: every route a link of its own, so the two
  // channels of a crossing add up: 2 x 3.125 GB/s, below NVLink's 150.
  TensorParallelLink link = tensor_parallel_link(platform, groups);
  EXPECT_EQ(link.bandwidth_Bps, 6.25e9);
  EXPECT_EQ(link.latency_s, 5e-6);
  EXPECT_EQ(link.crossing_channels, 2);

  // The same rings over named links. Per-GPU NICs: each channel its own
  // NIC, the total 2 x 25 GB/s. One NIC per server: both channels share it,
  // each at half its bandwidth, the total one NIC's 25 GB/s. The FATPIPE
  // switch (40 GB/s) on every crossing gives each flow its whole bandwidth
  // (shared, it would hold the two channels to 40 GB/s in all).
  const auto table = [&](bool nic_per_gpu) {
    RouteTable routes;
    const auto add_link = [&](const std::string& name, double bandwidth, bool shared) {
      routes.links.push_back({name, bandwidth, shared});
      return static_cast<int>(routes.links.size() - 1);
    };
    const int nvlink = add_link("nvlink", 150e9, true), sw = add_link("switch", 40e9, false);
    std::map<std::string, int> nics;
    const auto nic = [&](std::size_t host, const char* direction) {
      const std::string name = fmt::format("{}-nic-{}", nic_per_gpu ? platform.hosts[host].name : platform.hosts[host].server, direction);
      if (!nics.count(name)) nics[name] = add_link(name, 25e9, true);
      return nics[name];
    };
    for (const auto& [a, b] : tensor_parallel_route_pairs(platform, groups)) {
      if (platform.hosts[a].server == platform.hosts[b].server)
        routes.routes.push_back({true, 2e-6, {nvlink}});
      else
        routes.routes.push_back({true, 7e-6, {nic(a, "up"), sw, nic(b, "down")}});
    }
    return routes;
  };
  link = tensor_parallel_link(platform, groups, table(true));
  EXPECT_EQ(link.bandwidth_Bps, 50e9);
  EXPECT_EQ(link.latency_s, 7e-6);
  link = tensor_parallel_link(platform, groups, table(false));
  EXPECT_EQ(link.bandwidth_Bps, 25e9);

  // A group inside one server is weighed as before: its slowest route.
  const PlatformSummary four = two_servers(4);
  EXPECT_EQ(tensor_parallel_link(four, tensor_parallel_groups(four, 4)).crossing_channels, 0);

  RouteTable missing = table(true);
  missing.routes[2].found = false;
  try {
    tensor_parallel_link(platform, groups, missing);
    ADD_FAILURE() << "a channel's route is missing";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("no route from 's0-gpu1' to 's1-gpu1'"), std::string::npos) << error.what();
  }
}

TEST(Precision, BytesPerParameterTable) {
  struct Row {
    const char* dtype;
    const char* optimizer;
    int weights, gradients, master, optimizer_bytes, total;
    double per_weight_byte;
  };
  const Row rows[] = {
      {"fp32", "sgd", 4, 4, 0, 0, 8, 2},      {"fp32", "momentum", 4, 4, 0, 4, 12, 3}, {"fp32", "adam", 4, 4, 0, 8, 16, 4},
      {"fp16", "sgd", 2, 2, 4, 0, 8, 4},      {"fp16", "momentum", 2, 2, 4, 4, 12, 6}, {"fp16", "adam", 2, 2, 4, 8, 16, 8},
      {"bf16", "sgd", 2, 2, 4, 0, 8, 4},      {"bf16", "momentum", 2, 2, 4, 4, 12, 6}, {"bf16", "adam", 2, 2, 4, 8, 16, 8},
  };
  for (const Row& row : rows) {
    const ParameterBytes bytes = bytes_per_parameter(row.dtype, row.optimizer);
    EXPECT_EQ(bytes.weights, row.weights) << row.dtype << " " << row.optimizer;
    EXPECT_EQ(bytes.gradients, row.gradients) << row.dtype << " " << row.optimizer;
    EXPECT_EQ(bytes.master_weights, row.master) << row.dtype << " " << row.optimizer;
    EXPECT_EQ(bytes.optimizer, row.optimizer_bytes) << row.dtype << " " << row.optimizer;
    EXPECT_EQ(bytes.total(), row.total) << row.dtype << " " << row.optimizer;
    EXPECT_EQ(resident_weight_factor(row.dtype, row.optimizer), row.per_weight_byte) << row.dtype << " " << row.optimizer;
  }
  // Not stated: fp32, exactly the weights + gradients + optimizer copies of before.
  EXPECT_EQ(resident_weight_factor("", "sgd"), 2.0);
  EXPECT_EQ(resident_weight_factor("", "adam"), 4.0);
  EXPECT_THROW(bytes_per_parameter("fp8", "sgd"), InputError);
  EXPECT_THROW(bytes_per_parameter("fp32", "lamb"), InputError);
}

TEST(Precision, RunDtype) {
  EXPECT_EQ(run_dtype("", "", "p.json"), "");
  EXPECT_EQ(run_dtype("", "fp16", "p.json"), "fp16");
  EXPECT_EQ(run_dtype("bf16", "", "p.json"), "bf16");
  EXPECT_EQ(run_dtype("fp16", "fp16", "p.json"), "fp16");
  try {
    run_dtype("fp32", "fp16", "p.json");
    ADD_FAILURE() << "conflict accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--dtype fp16: profile p.json states dtype fp32"), std::string::npos) << error.what();
  }
  EXPECT_THROW(run_dtype("", "int8", "p.json"), InputError);
}

TEST(Precision, Fp32MemoryUnchanged) {
  // The default factor is fp32 SGD's 2 (weights + gradients): what the
  // memory model counted before mixed precision.
  MemoryModel model;
  EXPECT_EQ(model.resident_weight_factor, resident_weight_factor("", "sgd"));
  EXPECT_EQ(resident_weight_factor("fp32", "momentum"), 2.0 + optimizer_copies("momentum"));
  EXPECT_EQ(resident_weight_factor("fp32", "adam"), 2.0 + optimizer_copies("adam"));
}

TEST(Precision, BapipeChargesTheSameBytesPerParameter) {
  StageCost first;
  first.weight_bytes = 10;
  first.stash_bytes = 100;
  first.output_bytes = 7;
  // f w + k (a + o), f = bytes kept per weight byte: fp16 Adam 8, fp32 SGD 2.
  EXPECT_EQ(bapipe_memory_demand(first, 0, {4, 3}, resident_weight_factor("fp16", "adam")), 80 + 4 * (100 + 7));
  EXPECT_EQ(bapipe_memory_demand(first, 0, {4, 3}, resident_weight_factor("fp32", "momentum")), 30 + 4 * (100 + 7));
  EXPECT_EQ(bapipe_memory_demand(first, 0, {4, 3}), bapipe_memory_demand(first, 0, {4, 3}, resident_weight_factor("", "sgd")));
}

TEST(TensorParallel, ReduceScatterAndAllGatherTimes) {
  // (t - 1) x (latency + bytes / (t x bandwidth)) each; together one all-reduce.
  EXPECT_DOUBLE_EQ(reduce_scatter_s(4e6, 4, kLink), 3 * (1e-6 + 1e-3));
  EXPECT_DOUBLE_EQ(all_gather_s(4e6, 4, kLink), 3 * (1e-6 + 1e-3));
  EXPECT_DOUBLE_EQ(reduce_scatter_s(8e6, 8, {5e-6, 2e9}) + all_gather_s(8e6, 8, {5e-6, 2e9}),
                   ring_all_reduce_s(8e6, 8, {5e-6, 2e9}));
  EXPECT_EQ(reduce_scatter_s(1e9, 1, kLink), 0);
  EXPECT_EQ(all_gather_s(1e9, 1, kLink), 0);
}

// A GPT as the generator marks it (bf16: 2 bytes per element): the
// embedding (vocabulary 1000; a 1 MB position table; its output kept whole
// without sequence parallelism), one transformer block (a quarter of its
// 4 MB stash kept whole), the final norm, the head (vocabulary 1000, logits
// of 4000 tokens: 8 MB) and the loss (vocabulary 1000).
Profile vocabulary_profile() {
  Profile profile;
  profile.name = "vocab-gpt";
  profile.dtype = "bf16";
  profile.input_bytes = 32000;
  profile.layers = {layer("embedding", "embedding", true, 0.001, 0.002, 1e6, 4e6),
                    layer("block", "transformer", true, 0.010, 0.020, 1e6, 8e6),
                    layer("final_norm", "norm", true, 0.0002, 0.0004, 1e6, 2e3),
                    layer("head", "linear", true, 0.004, 0.008, 8e6, 4e6),
                    layer("loss", "loss", true, 0.001, 0.0005, 4, 0)};
  Layer& embedding = profile.layers[0];
  embedding.vocabulary = 1000;
  embedding.replicated_parameter_bytes = 1e6;
  embedding.replicated_activation_fraction = 1;
  profile.layers[1].activation_bytes = 4e6;
  profile.layers[1].replicated_activation_fraction = 0.25;
  profile.layers[3].vocabulary = 1000;
  profile.layers[4].vocabulary = 1000;
  profile.layers[4].activation_bytes = 8e6;
  return profile;
}

// t = 2 over kLink: an all-reduce of 1 MB is 2 x (1e-6 + 1e6 / 2e9) =
// 0.001002 s, a reduce-scatter or all-gather of it 0.000501 s; the loss's
// all-reduces carry 4 x 4000 rows (8 MB of bf16 logits / (1000 x 2 bytes)):
// 2 x (1e-6 + 16000 / 2e9) = 1.8e-5 s each.
constexpr double kAllReduce = 0.001002, kHalf = 0.000501, kLossAllReduce = 1.8e-5;

// --tp-comm-overlap: the block's 4 collectives per pass (4 x kHalf =
// 0.002004 s) run under its GEMMs, everything but its attention core; the
// embedding's and the head's collectives stay exposed.
TEST(TensorParallel, CommOverlapHidesTheBlocksCollectivesUnderItsGemms) {
  Profile profile = vocabulary_profile();
  profile.layers[1].attention_core_flops_share = 0.75;  // GEMMs: 0.25 x 0.005 s per member pass
  profile.layers[1].device_times["H100"] = LayerTimes{0.004, 0.006, 0.002, 0.004};
  const TensorParallelProfile result = tensor_parallel_profile(profile, 2, kLink, true, true);
  const Layer& block = result.profile.layers[1];
  EXPECT_NEAR(overlapped_collectives_s(4 * kHalf, 0.25 * 0.005), 4 * kHalf - 0.00125, 1e-15);
  EXPECT_EQ(overlapped_collectives_s(0.001, 0.002), 0.0);
  EXPECT_NEAR(block.forward_s, 0.005 + 4 * kHalf - 0.00125, 1e-12);
  EXPECT_NEAR(*block.backward_input_s, 0.005 + 4 * kHalf - 0.00125, 1e-12);
  EXPECT_NEAR(*block.backward_weight_s, 0.005, 1e-12);
  // On the device's own times: forward 0.002 per member, GEMMs 0.0005.
  EXPECT_NEAR(block.device_times.at("H100").forward_s, 0.002 + 4 * kHalf - 0.0005, 1e-12);
  EXPECT_NEAR(*block.device_times.at("H100").backward_input_s, 0.001 + 4 * kHalf - 0.00025, 1e-12);
  // GEMMs longer than the collectives hide them all.
  profile.layers[1].attention_core_flops_share = 0.1;
  EXPECT_NEAR(tensor_parallel_profile(profile, 2, kLink, true, true).profile.layers[1].forward_s, 0.005, 1e-12);
  // The head and the embedding are not overlapped.
  const TensorParallelProfile plain = tensor_parallel_profile(profile, 2, kLink, true);
  for (const std::size_t l : {std::size_t{0}, std::size_t{3}}) {
    EXPECT_EQ(result.profile.layers[l].forward_s, plain.profile.layers[l].forward_s);
    EXPECT_EQ(*result.profile.layers[l].backward_input_s, *plain.profile.layers[l].backward_input_s);
  }
  EXPECT_NE(result.note.find("--tp-comm-overlap: a transformer layer's all-gathers and reduce-scatters pipelined"),
            std::string::npos)
      << result.note;
  EXPECT_THROW(tensor_parallel_profile(profile, 2, kLink, false, true), InputError);
}

TEST(TensorParallel, VocabularySplitAsMegatronCore) {
  const TensorParallelProfile result = tensor_parallel_profile(vocabulary_profile(), 2, kLink);
  EXPECT_EQ(result.split, (std::vector<int>{1}));
  EXPECT_EQ(result.vocabulary, (std::vector<int>{0, 3, 4}));
  EXPECT_TRUE(result.sequence.empty());
  EXPECT_EQ(result.replicated, (std::vector<int>{2}));
  const std::vector<Layer>& layers = result.profile.layers;
  // The embedding: its lookups whole (each member gathers every token), one
  // all-reduce of its output forward, nothing backward; the word table
  // split, the position table whole; its output stashed whole.
  const Layer& embedding = layers[0];
  EXPECT_NEAR(embedding.forward_s, 0.001 + kAllReduce, 1e-12);
  EXPECT_NEAR(*embedding.backward_input_s, 0.001, 1e-12);
  EXPECT_NEAR(*embedding.backward_weight_s, 0.001, 1e-12);
  EXPECT_NEAR(embedding.backward_s, 0.002, 1e-12);
  EXPECT_DOUBLE_EQ(embedding.parameter_bytes, 1e6 + 3e6 / 2);
  EXPECT_DOUBLE_EQ(embedding.stashed_bytes(), 1e6);
  EXPECT_DOUBLE_EQ(*embedding.forward_flops, 8e9);
  EXPECT_DOUBLE_EQ(embedding.output_bytes, 5e5);
  // The block: its replicated quarter of the stash kept whole.
  const Layer& block = layers[1];
  EXPECT_NEAR(block.forward_s, 0.005 + 2 * kAllReduce, 1e-12);
  EXPECT_NEAR(*block.backward_input_s, 0.005 + 2 * kAllReduce, 1e-12);
  EXPECT_DOUBLE_EQ(block.stashed_bytes(), 4e6 * 0.25 + 4e6 * 0.75 / 2);  // 2.5 MB
  EXPECT_DOUBLE_EQ(block.parameter_bytes, 4e6);
  // The final norm: replicated.
  EXPECT_EQ(layers[2].forward_s, 0.0002);
  EXPECT_EQ(layers[2].stashed_bytes(), 1e6);
  // The head: V / t logits; the input's gradient all-reduced backward (1 MB).
  const Layer& head = layers[3];
  EXPECT_NEAR(head.forward_s, 0.002, 1e-12);
  EXPECT_NEAR(*head.backward_input_s, 0.002 + kAllReduce, 1e-12);
  EXPECT_NEAR(*head.backward_weight_s, 0.002, 1e-12);
  EXPECT_NEAR(head.backward_s, 0.004 + kAllReduce, 1e-12);
  EXPECT_DOUBLE_EQ(head.parameter_bytes, 2e6);
  EXPECT_DOUBLE_EQ(head.stashed_bytes(), 4e6);
  EXPECT_DOUBLE_EQ(head.output_bytes, 4e6);
  EXPECT_DOUBLE_EQ(*head.forward_flops, 4e9);
  EXPECT_DOUBLE_EQ(*head.bytes_read, 2e6);
  // The loss: its work split, three all-reduces of one fp32 per token forward.
  const Layer& loss = layers[4];
  EXPECT_NEAR(loss.forward_s, 0.0005 + 3 * kLossAllReduce, 1e-12);
  EXPECT_NEAR(*loss.backward_input_s, 0.00025, 1e-12);
  EXPECT_EQ(*loss.backward_weight_s, 0);
  EXPECT_DOUBLE_EQ(loss.stashed_bytes(), 4e6);
  EXPECT_DOUBLE_EQ(*loss.backward_input_flops, 4e9);
  for (const Layer& l : layers)
    if (l.backward_input_s) {
      EXPECT_TRUE(backward_split_sums_to(l.backward_s, *l.backward_input_s, *l.backward_weight_s)) << l.name;
    }
  EXPECT_NE(result.note.find("split over the vocabulary as Megatron-Core's VocabParallelEmbedding, ColumnParallelLinear "
                             "head and vocab_parallel_cross_entropy: embedding (its word table; its position table and "
                             "its lookups whole), head, loss; 1 layer replicated: final_norm"),
            std::string::npos)
      << result.note;
  EXPECT_NE(result.note.find("embedding 1 all-reduce of its output in the forward; head 1 all-reduce of its input's "
                             "gradient in the backward; loss 3 all-reduces of one fp32 value per token in the forward"),
            std::string::npos)
      << result.note;
  // Utilisation counts the head's and the loss's FLOPs t times, the embedding's once.
  EXPECT_TRUE(tensor_parallel_splits(vocabulary_profile().layers[3]));
  EXPECT_TRUE(tensor_parallel_splits(vocabulary_profile().layers[4]));
  EXPECT_FALSE(tensor_parallel_splits(vocabulary_profile().layers[0]));
  EXPECT_FALSE(tensor_parallel_splits(vocabulary_profile().layers[2]));
  EXPECT_TRUE(tensor_parallel_splits(vocabulary_profile().layers[2], true));
}

TEST(TensorParallel, VocabularyFieldsAloneDecide) {
  // The same ops without `vocabulary` (a measured profile): replicated, and
  // the note says why.
  Profile profile = vocabulary_profile();
  for (Layer& l : profile.layers) l.vocabulary.reset();
  const TensorParallelProfile result = tensor_parallel_profile(profile, 2, kLink);
  EXPECT_EQ(result.replicated, (std::vector<int>{0, 2, 3, 4}));
  EXPECT_EQ(result.profile.layers[3].forward_s, 0.004);
  EXPECT_EQ(result.profile.layers[0].parameter_bytes, 4e6);
  EXPECT_NE(result.note.find("no layer split over the vocabulary (none gives `vocabulary`"), std::string::npos) << result.note;
  // A profile that states no dtype is fp32: 8 MB of logits are 2000 rows.
  Profile fp32 = vocabulary_profile();
  fp32.dtype.clear();
  const double loss_all_reduce = 2 * (1e-6 + 4 * 2000 / 2e9);
  EXPECT_NEAR(tensor_parallel_profile(fp32, 2, kLink).profile.layers[4].forward_s, 0.0005 + 3 * loss_all_reduce, 1e-12);
}

TEST(TensorParallel, FlowsListTheCollectivesComputeCharges) {
  // Every layer kind, with and without sequence parallelism: under Flows the
  // times hold no collective, and each pass's listed collectives cost, as
  // compute charges them, exactly what Compute added to it.
  for (const bool sequence_parallel : {false, true}) {
    const TensorParallelProfile compute = tensor_parallel_profile(vocabulary_profile(), 2, kLink, sequence_parallel);
    const TensorParallelProfile flows = tensor_parallel_profile(vocabulary_profile(), 2, kLink, sequence_parallel, false,
                                                                TensorParallelCollectives::Flows);
    ASSERT_EQ(flows.collectives.size(), flows.profile.layers.size());
    EXPECT_EQ(flows.collectives, compute.collectives);
    int with_collectives = 0;
    for (std::size_t l = 0; l < flows.profile.layers.size(); ++l) {
      const Layer& c = compute.profile.layers[l];
      const Layer& f = flows.profile.layers[l];
      EXPECT_NEAR(c.forward_s - f.forward_s, collectives_s(flows.collectives[l].forward, 2, kLink), 1e-15) << l;
      // A replicated layer's backward keeps its own form (no parts given).
      ASSERT_EQ(c.backward_input_s.has_value(), f.backward_input_s.has_value()) << l;
      EXPECT_EQ(c.backward_weight_s, f.backward_weight_s) << l;
      if (!f.backward_input_s) continue;
      EXPECT_NEAR(*c.backward_input_s - *f.backward_input_s, collectives_s(flows.collectives[l].backward_input, 2, kLink),
                  1e-15)
          << l;
      with_collectives += !flows.collectives[l].empty();
    }
    EXPECT_EQ(with_collectives, 4) << sequence_parallel;  // embedding, block, head, loss
  }
  // The block: 2 all-reduces of its output per pass (sequence parallel: 2
  // reduce-scatters and 2 all-gathers).
  const TensorParallelProfile flows =
      tensor_parallel_profile(vocabulary_profile(), 2, kLink, false, false, TensorParallelCollectives::Flows);
  EXPECT_EQ(flows.collectives[1].forward,
            (std::vector<RingCollective>{{RingCollectiveKind::AllReduce, 2, vocabulary_profile().layers[1].output_bytes}}));
  EXPECT_EQ(ring_steps(RingCollectiveKind::AllReduce, 4), 6);
  EXPECT_EQ(ring_steps(RingCollectiveKind::AllGather, 4), 3);
  EXPECT_EQ(ring_steps(RingCollectiveKind::ReduceScatter, 1), 0);
  EXPECT_EQ(parse_tensor_parallel_collectives("flows"), TensorParallelCollectives::Flows);
  EXPECT_EQ(parse_tensor_parallel_collectives("compute"), TensorParallelCollectives::Compute);
  EXPECT_THROW(tensor_parallel_profile(vocabulary_profile(), 2, kLink, true, true, TensorParallelCollectives::Flows), InputError);
  try {
    parse_tensor_parallel_collectives("ring");
    FAIL() << "ring accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--tp-collectives"), std::string::npos) << error.what();
  }
}

TEST(TensorParallel, SequenceParallelism) {
  const TensorParallelProfile result = tensor_parallel_profile(vocabulary_profile(), 2, kLink, true);
  EXPECT_EQ(result.split, (std::vector<int>{1}));
  EXPECT_EQ(result.vocabulary, (std::vector<int>{0, 3, 4}));
  EXPECT_EQ(result.sequence, (std::vector<int>{2}));
  EXPECT_TRUE(result.replicated.empty());
  const std::vector<Layer>& layers = result.profile.layers;
  // The embedding with a position table: all-reduce forward (then a local
  // scatter), the scatter's all-gather backward; its output split.
  EXPECT_NEAR(layers[0].forward_s, 0.001 + kAllReduce, 1e-12);
  EXPECT_NEAR(*layers[0].backward_input_s, 0.001 + kHalf, 1e-12);
  EXPECT_DOUBLE_EQ(layers[0].stashed_bytes(), 5e5);
  EXPECT_DOUBLE_EQ(layers[0].parameter_bytes, 2.5e6);
  // The block: 2 reduce-scatters + 2 all-gathers per pass; all its stash split.
  EXPECT_NEAR(layers[1].forward_s, 0.005 + 4 * kHalf, 1e-12);
  EXPECT_NEAR(*layers[1].backward_input_s, 0.005 + 4 * kHalf, 1e-12);
  EXPECT_DOUBLE_EQ(layers[1].stashed_bytes(), 2e6);
  // The norm: its work and stash split, its parameters whole.
  EXPECT_NEAR(layers[2].forward_s, 0.0001, 1e-12);
  EXPECT_NEAR(*layers[2].backward_input_s, 0.0001, 1e-12);
  EXPECT_NEAR(*layers[2].backward_weight_s, 0.0001, 1e-12);
  EXPECT_DOUBLE_EQ(layers[2].stashed_bytes(), 5e5);
  EXPECT_DOUBLE_EQ(layers[2].parameter_bytes, 2e3);
  EXPECT_DOUBLE_EQ(*layers[2].forward_flops, 4e9);
  // The head: all-gather of its input forward, reduce-scatter of its gradient backward.
  EXPECT_NEAR(layers[3].forward_s, 0.002 + kHalf, 1e-12);
  EXPECT_NEAR(*layers[3].backward_input_s, 0.002 + kHalf, 1e-12);
  EXPECT_NEAR(*layers[3].backward_weight_s, 0.002, 1e-12);
  // The loss: as without.
  EXPECT_NEAR(layers[4].forward_s, 0.0005 + 3 * kLossAllReduce, 1e-12);
  // Without a position table the embedding reduce-scatters its output.
  Profile rotary = vocabulary_profile();
  rotary.layers[0].replicated_parameter_bytes = 0;
  const TensorParallelProfile without = tensor_parallel_profile(rotary, 2, kLink, true);
  EXPECT_NEAR(without.profile.layers[0].forward_s, 0.001 + kHalf, 1e-12);
  EXPECT_NEAR(*without.profile.layers[0].backward_input_s, 0.001 + kHalf, 1e-12);
  EXPECT_DOUBLE_EQ(without.profile.layers[0].parameter_bytes, 2e6);
  EXPECT_EQ(result.note.rfind("tensor parallel 2 with sequence parallelism: 1 transformer layer split;", 0), 0u) << result.note;
  EXPECT_NE(result.note.find("1 norm split over the sequence: final_norm"), std::string::npos) << result.note;
  EXPECT_NE(result.note.find("head 1 all-gather of its input in the forward, 1 reduce-scatter of the input's gradient in "
                             "the backward"),
            std::string::npos)
      << result.note;
  EXPECT_NE(without.note.find("embedding 1 reduce-scatter of its output in the forward, 1 all-gather of its gradient in "
                              "the backward"),
            std::string::npos)
      << without.note;
}

TEST(TensorParallel, GptGeneratorMarksWhatMegatronSplits) {
  // GPT-2 small in fp16: Korthikanti et al.'s 10 s b h of s b h (34 + 5 a s / h)
  // kept whole per block without sequence parallelism; the position table
  // (1024 x 768) replicated.
  const Profile profile = generate_model_profile({"gpt", {{"layers", 2}}, 1, "fp16"});
  const double s = 1024, h = 768, a = 12;
  const Layer& block = profile.layers[1];
  EXPECT_EQ(block.op, "transformer");
  EXPECT_FALSE(block.vocabulary.has_value());
  EXPECT_NEAR(block.replicated_activation_fraction, 10 / (34 + 5 * a * s / h), 1e-12);
  EXPECT_NEAR(*block.activation_bytes, s * h * (34 + 5 * a * s / h), 1e-9 * *block.activation_bytes);
  const Layer& embedding = profile.layers.front();
  EXPECT_EQ(embedding.vocabulary, 50257);
  EXPECT_EQ(embedding.replicated_parameter_bytes, 2 * 1024 * h);
  EXPECT_EQ(embedding.replicated_activation_fraction, 1);
  const Layer& head = profile.layers[profile.layers.size() - 2];
  EXPECT_EQ(head.op, "linear");
  EXPECT_EQ(head.vocabulary, 50257);
  EXPECT_EQ(profile.layers.back().vocabulary, 50257);
  EXPECT_FALSE(profile.layers[profile.layers.size() - 3].vocabulary.has_value());  // final_norm
  // Rotary: no position table.
  EXPECT_EQ(generate_model_profile({"gpt", {{"layers", 1}, {"rotary", 1}}, 1, "fp16"}).layers[0].replicated_parameter_bytes, 0);
  // Per member at t = 8 with sequence parallelism: s b h (34 + 5 a s / h) / t.
  const TensorParallelProfile split = tensor_parallel_profile(profile, 8, kLink, true);
  EXPECT_NEAR(split.profile.layers[1].stashed_bytes(), s * h * (34 + 5 * a * s / h) / 8, 1e-6);
  // Without: s b h (10 + 24 / t + 5 a s / (h t)).
  const TensorParallelProfile plain = tensor_parallel_profile(profile, 8, kLink);
  EXPECT_NEAR(plain.profile.layers[1].stashed_bytes(), s * h * (10 + 24.0 / 8 + 5 * a * s / (h * 8)), 1e-6);
}

TEST(TensorParallel, FieldsInProfileJson) {
  Profile profile = vocabulary_profile();
  const Profile back = parse_profile_json(profile_to_json(profile), "p.json");
  EXPECT_EQ(back.layers[0].vocabulary, 1000);
  EXPECT_EQ(back.layers[0].replicated_parameter_bytes, 1e6);
  EXPECT_EQ(back.layers[0].replicated_activation_fraction, 1);
  EXPECT_EQ(back.layers[1].replicated_activation_fraction, 0.25);
  EXPECT_FALSE(back.layers[2].vocabulary.has_value());
  EXPECT_EQ(profile_to_json(back), profile_to_json(profile));
  const auto error_of = [](const std::string& fields) {
    try {
      parse_profile_json(R"({"name": "p", "micro_batch_size": 1, "layers": [{"name": "x", "forward_s": 1, "backward_s": 1, )"
                         R"("output_bytes": 1, "parameter_bytes": 10, )" +
                             fields + "}]}",
                         "p.json");
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(R"("op": "norm", "vocabulary": 5)"),
            "p.json: layers[0].vocabulary: applies to a layer with op embedding, linear or loss (the word embedding, the "
            "head and the loss Megatron splits over the vocabulary), found op 'norm'");
  EXPECT_EQ(error_of(R"("vocabulary": 5)"),
            "p.json: layers[0].vocabulary: applies to a layer with op embedding, linear or loss (the word embedding, the "
            "head and the loss Megatron splits over the vocabulary), found no op");
  EXPECT_EQ(error_of(R"("op": "loss", "vocabulary": 0)"),
            "p.json: layers[0].vocabulary: expected an integer from 1 to 1000000000 (the vocabulary size), found 0");
  EXPECT_EQ(error_of(R"("replicated_parameter_bytes": 11)"),
            "p.json: layers[0].replicated_parameter_bytes: expected at most parameter_bytes (10), found 11");
  EXPECT_EQ(error_of(R"("replicated_activation_fraction": 1.5)"),
            "p.json: layers[0].replicated_activation_fraction: expected a number from 0 to 1, found 1.5");
  EXPECT_EQ(error_of(R"("op": "linear", "vocabulary": 5, "replicated_parameter_bytes": 4, "replicated_activation_fraction": 0.5)"),
            "no error");
  // check_profile holds programmatic profiles to the same rules.
  profile.layers[2].vocabulary = 7;
  EXPECT_THROW(check_profile(profile, "p"), InputError);
}

TEST(TensorParallel, ExplorerGroupSizes) {
  // Groups fit for t dividing 4 (a server of 4 hosts).
  const auto why_not = [](int t) { return 4 % t == 0 ? std::string() : "--tensor-parallel " + std::to_string(t) + ": no"; };
  EXPECT_EQ(exploration_tensor_parallel({}, true, why_not), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(exploration_tensor_parallel({}, false, why_not), (std::vector<int>{1}));
  EXPECT_EQ(exploration_tensor_parallel({4, 1, 4}, true, why_not), (std::vector<int>{1, 4}));
  EXPECT_THROW(exploration_tensor_parallel({8}, true, why_not), InputError);
  EXPECT_THROW(exploration_tensor_parallel({2}, false, why_not), InputError);
}

}  // namespace
}  // namespace pipegrid
