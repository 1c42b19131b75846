// Expert parallelism (docs/semantics.md, "Expert parallelism") through
// api::make_plan, the engine and metrics on a generated cluster of two
// servers of 8 H100s: memory by expert shard (and the distributed
// optimizer's expert-data sharding), the refusals with their messages,
// fb_overlap_effective and the exposed all-to-alls by schedule,
// --megatron-args' --expert-model-parallel-size, plan files.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <unistd.h>

#include "api/simulation.hpp"
#include "core/plan.hpp"
#include "expect_input_error.hpp"
#include "generators/cluster_platform.hpp"

namespace pipegrid {
namespace {

// h100-2x8.xml as `pipegrid platform cluster --servers 2 --gpus-per-server 8
// --device H100 --memory 80GB --intra 450GBps,2us --inter 50GBps,5us` writes it.
const std::string& platform_file() {
  static const std::string path = [] {
    const std::filesystem::path file =
        std::filesystem::temp_directory_path() / ("pipegrid-ep-h100-2x8-" + std::to_string(::getpid()) + ".xml");
    const ClusterSpec spec = cluster_spec_from_options(
        {{"servers", "2"}, {"gpus_per_server", "8"}, {"device", "H100"}, {"memory", "80GB"}, {"intra", "450GBps,2us"},
         {"inter", "50GBps,5us"}},
        "test");
    std::ofstream(file) << cluster_platform_xml(spec);
    return file.string();
  }();
  static const struct Remover {
    ~Remover() { std::filesystem::remove(path); }
  } remover;
  return path;
}

struct MoeSetup {
  int ep = 1, p = 2, d = 8;
  std::string schedule = "1f1b-sno";
  bool distributed_optimizer = false;
  long long num_experts = 8;
};

api::PlanRequest moe_request(const MoeSetup& setup) {
  api::PlanRequest request;
  request.platform_file = platform_file();
  request.model = {"gpt",
                   {{"layers", 4}, {"hidden", 512}, {"heads", 8}, {"sequence", 256}, {"vocabulary", 8192}, {"swiglu", 1},
                    {"num_experts", setup.num_experts}, {"moe_topk", 2}},
                   1,
                   "bf16"};
  if (setup.num_experts == 0) request.model.options.erase("num_experts");
  request.schedule = setup.schedule;
  request.micro_batches = 8;
  request.network = "analytic";
  request.optimizer = "adam";
  request.pipeline_parallel = setup.p;
  request.data_parallel = setup.d;
  request.expert_parallel = setup.ep;
  request.distributed_optimizer = setup.distributed_optimizer;
  return request;
}

api::RunResult run(const MoeSetup& setup) {
  Plan plan = api::make_plan(moe_request(setup));
  return api::run_plan(plan);
}

std::map<std::string, double> peaks(const api::RunResult& result) {
  std::map<std::string, double> out;
  for (const DeviceMetrics& device : result.metrics.devices) out[device.host] = device.peak_memory_bytes;
  return out;
}

TEST(ExpertParallelRun, PeakMemoryFallsByTheExpertShard) {
  // Each rank keeps 1 / ep of the routed experts' weights, gradients and
  // optimizer state (E bytes of them on its stage at ep 1): its peak is
  // its dense part + R E / ep + activations, so ep 1 -> 2 saves R E / 2
  // and ep 2 -> 4 saves R E / 4, twice less.
  // Each peak is at the optimizer step: adam in bf16 holds 20 bytes per
  // parameter (10 x its bf16 weight bytes) there.
  const auto one = peaks(run({1})), four = peaks(run({4}));
  Plan plan = api::make_plan(moe_request({2}));
  const api::RunResult at_two = api::run_plan(plan);
  const auto two = peaks(at_two);
  ASSERT_EQ(one.size(), 16u);
  for (const DeviceMetrics& device : at_two.metrics.devices) {
    double shard = 0;  // the expert weight bytes of its stages at ep 2: half the ep 1 bytes
    for (std::size_t l = 0; l < plan.profile.layers.size(); ++l)
      for (const int stage : device.stages)
        if (plan.partition.stage_of_layer[l] == stage) shard += plan.profile.layers[l].expert_parameter_bytes;
    ASSERT_GT(shard, 0) << device.host;
    EXPECT_NEAR(one.at(device.host) - device.peak_memory_bytes, 10 * shard, 1) << device.host;
  }
  for (const auto& [host, peak] : one) {
    EXPECT_GT(peak, two.at(host)) << host;
    EXPECT_GT(two.at(host), four.at(host)) << host;
    EXPECT_NEAR((peak - two.at(host)) / (two.at(host) - four.at(host)), 2, 1e-9) << host;
  }
}

TEST(ExpertParallelRun, TheDistributedOptimizerShardsTheExpertsStateOverTheExpertDataGroup) {
  // Adam in bf16, each peak at the optimizer step: 20 bytes per parameter
  // (weights 2 + gradients 2 + master 4 + optimizer 8 + the step's fp32
  // gradient copy 4). With the distributed optimizer the last 16 are
  // sharded (Megatron-LM's table: 4 + 16 / shards), the experts' over
  // edp = t cp d / (etp ep) = 8 / ep: per rank (E / ep) (4 + 16 ep / 8)
  // per expert parameter, the sharded part the same at every ep. So from
  // ep 1 to 2 a rank saves 4 / 20 of what it saves without the distributed
  // optimizer (had the experts' state been sharded over d = 8 whatever ep,
  // (4 + 2) / 20).
  const auto plain1 = peaks(run({1})), plain2 = peaks(run({2}));
  const auto dist1 = peaks(run({1, 2, 8, "1f1b-sno", true})), dist2 = peaks(run({2, 2, 8, "1f1b-sno", true}));
  for (const auto& [host, peak] : plain1) {
    EXPECT_LT(dist1.at(host), peak) << host;
    EXPECT_NEAR((dist1.at(host) - dist2.at(host)) / (peak - plain2.at(host)), 4.0 / 20.0, 1e-9) << host;
  }
}

TEST(ExpertParallelRun, RefusalsNameTheFlagAndTheSizes) {
  EXPECT_CONTAINS(testutil::input_error_of([] { api::make_plan(moe_request({3})); }),
                  "--expert-parallel 3: expected a divisor of --num-experts 8 (each rank holds num_experts / ep "
                  "experts, as Megatron-Core asserts)");
  // p 2 x d 4 on 16 GPUs would not fill the cluster, so d 2 with p 8: 2 stage ranks.
  EXPECT_CONTAINS(testutil::input_error_of([] { api::make_plan(moe_request({4, 8, 2})); }),
                  "--expert-parallel 4 x expert tensor parallel 1 = 4: expected a divisor of tensor x context x data "
                  "parallel = 1 x 1 x 2 = 2 (the ranks of a pipeline stage, which Megatron-Core splits into expert "
                  "groups)");
  MoeSetup dense{2};
  dense.num_experts = 0;
  EXPECT_CONTAINS(testutil::input_error_of([&] { api::make_plan(moe_request(dense)); }),
                  "--expert-parallel 2: --model gpt has no routed experts (no layer with expert_parameter_bytes; a gpt "
                  "model has them with --num-experts)");
  api::PlanRequest etp = moe_request({2});
  etp.expert_tensor_parallel = 2;  // t is 1
  EXPECT_CONTAINS(testutil::input_error_of([&] { api::make_plan(etp); }),
                  "--expert-tensor-parallel 2: expected 1 or the tensor-parallel size 1 (other expert tensor sizes are "
                  "not modelled)");
}

TEST(ExpertParallelRun, DualPipeHidesPartOfTheAllToAllsOneFOneBNone) {
  for (const char* schedule : {"dualpipev", "dualpipe"}) {
    const api::RunResult result = run({4, 2, 8, schedule});
    ASSERT_TRUE(result.fb_overlap_effective().has_value()) << schedule;
    EXPECT_LT(*result.fb_overlap_effective(), 1) << schedule;
    EXPECT_GE(*result.fb_overlap_effective(), 0.5) << schedule;
    EXPECT_GT(result.all_to_all_s, 0) << schedule;
    EXPECT_LT(result.all_to_all_exposed_s, result.all_to_all_s) << schedule;
  }
  const api::RunResult plain = run({4});
  EXPECT_FALSE(plain.fb_overlap_effective().has_value());
  EXPECT_GT(plain.all_to_all_s, 0);
  EXPECT_EQ(plain.all_to_all_exposed_s, plain.all_to_all_s);
  EXPECT_EQ(run({1}).all_to_all_s, 0);
}

api::PlanRequest megatron_request(const std::string& extra) {
  api::PlanRequest request;
  request.platform_file = platform_file();
  request.network = "analytic";
  request.megatron_args =
      "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --swiglu --seq-length 1024 "
      "--max-position-embeddings 1024 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 32 --bf16 "
      "--pipeline-model-parallel-size 2 --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 4" +
      extra;
  return request;
}

TEST(ExpertParallelRun, MegatronArgsGiveTheExpertParallelSizeAndDisagreementIsRefused) {
  Plan plan = api::make_plan(megatron_request(""));
  EXPECT_EQ(plan.expert_parallel, 4);
  EXPECT_GT(api::run_plan(plan).all_to_all_s, 0);
  api::PlanRequest agreeing = megatron_request("");
  agreeing.expert_parallel = 4;
  EXPECT_EQ(api::make_plan(agreeing).expert_parallel, 4);
  api::PlanRequest disagreeing = megatron_request("");
  disagreeing.expert_parallel = 2;
  const std::string message = testutil::input_error_of([&] { api::make_plan(disagreeing); });
  EXPECT_CONTAINS(message, "--expert-parallel 2: ");
  EXPECT_CONTAINS(message, "--expert-model-parallel-size 4; drop --expert-parallel or make them agree");
}

TEST(ExpertParallelRun, PlanFilesKeepTheExpertParallelSizeAndRerunAlike) {
  Plan plan = api::make_plan(moe_request({4, 2, 8, "dualpipev"}));
  const std::string text = plan_to_json(plan);
  EXPECT_NE(text.find("\"expert_parallel\": 4"), std::string::npos);
  Plan reread = parse_plan_json(text, "p.json");
  EXPECT_EQ(reread.expert_parallel, 4);
  EXPECT_EQ(plan_to_json(reread), text);
  const api::RunResult first = api::run_plan(plan);
  const api::RunResult again = api::run_plan(reread);
  EXPECT_EQ(first.metrics.minibatch_time_s, again.metrics.minibatch_time_s);
  EXPECT_EQ(first.all_to_all_s, again.all_to_all_s);
  EXPECT_EQ(first.all_to_all_exposed_s, again.all_to_all_exposed_s);
  EXPECT_EQ(first.fb_overlap_effective(), again.fb_overlap_effective());
  EXPECT_EQ(peaks(first), peaks(again));
}

}  // namespace
}  // namespace pipegrid
