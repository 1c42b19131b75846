// Tensor parallelism (core/tensor_parallel.hpp) and bytes per parameter
// (core/precision.hpp): hand-computed values on hand-made profiles.

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/metrics.hpp"
#include "core/partition.hpp"
#include "core/plan.hpp"
#include "core/precision.hpp"
#include "core/tensor_parallel.hpp"
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
  EXPECT_EQ(result.note.rfind("tensor parallel 4: 2 transformer layers split; 3 layers replicated: embedding, measured-block, loss;", 0), 0u)
      << result.note;
}

TEST(TensorParallel, ProfileWithoutFlopsIsReplicated) {
  Profile profile = transformer_profile();
  for (Layer& l : profile.layers) l.forward_flops.reset();
  const TensorParallelProfile result = tensor_parallel_profile(profile, 2, kLink);
  EXPECT_TRUE(result.split.empty());
  EXPECT_EQ(result.replicated.size(), 5u);
  EXPECT_EQ(result.profile.layers[1].forward_s, 0.010);
  EXPECT_EQ(result.note.rfind("tensor parallel 2: no layer split (no transformer layer with FLOPs); 5 layers replicated", 0), 0u)
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
  try {
    tensor_parallel_groups(platform, 4);
    ADD_FAILURE() << "a group of 4 spans both servers";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("'s0-gpu0' is in zone 'server0', 's1-gpu0' in zone 'server1'"), std::string::npos)
        << error.what();
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
