// Megatron-LM's layer-wise recomputation (core/recompute.hpp): its rules, and
// Korthikanti et al.'s activation bytes per transformer layer (arXiv
// 2205.05198, Table 2) exactly on generated gpt layers; fp32 gradients
// (core/precision.hpp); the plan fields.

#include <gtest/gtest.h>

#include <string>

#include "core/plan.hpp"
#include "core/precision.hpp"
#include "core/recompute.hpp"
#include "expect_input_error.hpp"
#include "generators/model_generators.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

// s = 128, b = 2, h = 256, a = 8, fp16, GeLU with f = 4h, kv = h:
// Korthikanti's assumptions.
constexpr double s = 128, b = 2, h = 256, a = 8;
constexpr double sbh = s * b * h;

Profile gpt(bool flash = false) {
  return generate_model_profile({"gpt",
                                 {{"layers", 4},
                                  {"hidden", 256},
                                  {"heads", 8},
                                  {"sequence", 128},
                                  {"vocabulary", 1000},
                                  {"flash_attention", flash ? 1 : 0}},
                                 2,
                                 "fp16"});
}

// Stage 0: embedding, block1, block2; stage 1: block3, block4, final norm,
// head, loss. Forward times 1, 2, 4, ... so that sums tell layers apart.
struct TwoStages {
  Profile profile;
  Partition partition;
};
TwoStages two_stages(bool flash = false) {
  TwoStages run{gpt(flash), {}};
  run.partition.stage_of_layer = {0, 0, 0, 1, 1, 1, 1, 1};
  run.partition.hosts = {{"a"}, {"b"}};
  double forward = 1;
  for (Layer& layer : run.profile.layers) {
    layer.forward_s = forward;
    forward *= 2;
  }
  return run;
}

void expect_exact(double actual, double expected, const std::string& what) {
  EXPECT_NEAR(actual, expected, 1e-9 * std::abs(expected)) << what;
}

TEST(Recompute, KorthikantiActivationBytesPerLayerExactly) {
  const Profile unfused = gpt(false), fused = gpt(true);
  ASSERT_EQ(unfused.layers.size(), 8u);
  const Layer& layer = unfused.layers[1];
  ASSERT_EQ(layer.op, "transformer");
  // No recomputation: s b h (34 + 5 a s / h) bytes at 16 bits.
  expect_exact(layer.stashed_bytes(), sbh * (34 + 5 * a * s / h), "no recomputation");
  // Selective recomputation drops the attention core: 34 s b h.
  expect_exact(layer.stashed_bytes() * (1 - *layer.attention_core_stash_share), 34 * sbh, "selective");
  // Full recomputation: the checkpoint is the layer's input, 2 s b h.
  expect_exact(unfused.layers[0].output_bytes, 2 * sbh, "full: the checkpoint");
  for (std::size_t l = 1; l <= 4; ++l) expect_exact(unfused.layers[l].output_bytes, 2 * sbh, "a block's output");
  // Fused attention keeps no s x s term, only its log-sum-exp (fp32, per
  // query row and head), which selective recomputation drops too.
  const Layer& flash = fused.layers[1];
  expect_exact(flash.stashed_bytes(), 34 * sbh + 4 * b * a * s, "fused attention");
  expect_exact(flash.stashed_bytes() * (1 - *flash.attention_core_stash_share), 34 * sbh, "fused, selective");
  // The attention core's FLOPs, 4 b s^2 h (Q K^T and attention x V), of the
  // layer's forward.
  expect_exact(*layer.attention_core_flops_share * *layer.forward_flops, 4 * b * s * s * h, "attention core FLOPs");
  expect_exact(*flash.attention_core_flops_share * *flash.forward_flops, 4 * b * s * s * h, "fused core FLOPs");
  // Layers other than the blocks have no attention core.
  EXPECT_FALSE(unfused.layers[0].attention_core_flops_share);
  EXPECT_FALSE(unfused.layers[7].attention_core_stash_share);
}

TEST(Recompute, FullUniformKeepsEachGroupsInputAndHoldsOneGroup) {
  const TwoStages run = two_stages();
  const std::vector<Layer>& l = run.profile.layers;
  const double block = l[1].stashed_bytes();
  const double ids = run.profile.input_bytes;
  // Groups of 1: every block's input kept; one block's activations held.
  const std::vector<StageRecompute> one = stage_recompute(run.profile, run.partition, {"full", "uniform", 1});
  ASSERT_EQ(one.size(), 2u);
  expect_exact(one[0].kept_bytes, ids + l[0].stashed_bytes() + 2 * (2 * sbh), "stage 0, groups of 1");
  expect_exact(one[0].recompute_bytes, block, "stage 0 holds one block");
  EXPECT_EQ(one[0].layer_share, (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(one[0].recompute_s, 2 + 4);
  // Stage 1: block 3's input is the stage's (counted once); block 4's kept.
  expect_exact(one[1].kept_bytes, 2 * sbh + 2 * sbh + l[5].stashed_bytes() + l[6].stashed_bytes() + l[7].stashed_bytes(),
               "stage 1, groups of 1");
  EXPECT_EQ(one[1].layer_share, (std::vector<double>{1, 1, 0, 0, 0}));
  EXPECT_EQ(one[1].recompute_s, 8 + 16);
  // Groups of 2 (and of 3: one shorter group): one checkpoint per stage,
  // two blocks held.
  for (const int n : {2, 3}) {
    const std::vector<StageRecompute> two = stage_recompute(run.profile, run.partition, {"full", "uniform", n});
    expect_exact(two[0].kept_bytes, ids + l[0].stashed_bytes() + 2 * sbh, "stage 0, groups of 2");
    expect_exact(two[0].recompute_bytes, 2 * block, "stage 0 holds two blocks");
    expect_exact(two[1].kept_bytes, 2 * sbh + l[5].stashed_bytes() + l[6].stashed_bytes() + l[7].stashed_bytes(),
                 "stage 1, groups of 2");
    EXPECT_EQ(two[1].recompute_s, 8 + 16);
  }
  // Tensor parallelism without sequence parallelism: a member keeps each
  // checkpoint whole, t x the profile's (a member's) output bytes.
  const std::vector<StageRecompute> t2 = stage_recompute(run.profile, run.partition, {"full", "uniform", 1}, 2);
  expect_exact(t2[0].kept_bytes, ids + l[0].stashed_bytes() + 2 * (4 * sbh), "stage 0, factor 2");
  expect_exact(t2[1].kept_bytes, 2 * (2 * sbh) + 4 * sbh + l[5].stashed_bytes() + l[6].stashed_bytes() + l[7].stashed_bytes(),
               "stage 1, factor 2: its input held whole");
}

TEST(Recompute, FullBlockCheckpointsTheFirstLayersOfEachStageOnly) {
  const TwoStages run = two_stages();
  const std::vector<Layer>& l = run.profile.layers;
  const double block = l[1].stashed_bytes();
  const std::vector<StageRecompute> stages = stage_recompute(run.profile, run.partition, {"full", "block", 1});
  expect_exact(stages[0].kept_bytes, run.profile.input_bytes + l[0].stashed_bytes() + 2 * sbh + block,
               "stage 0: block 1 checkpointed, block 2 whole");
  expect_exact(stages[0].recompute_bytes, block, "one block held");
  EXPECT_EQ(stages[0].layer_share, (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(stages[0].recompute_s, 2);
  expect_exact(stages[1].kept_bytes, 2 * sbh + block + l[5].stashed_bytes() + l[6].stashed_bytes() + l[7].stashed_bytes(),
               "stage 1: block 3 checkpointed (the stage input), block 4 whole");
  EXPECT_EQ(stages[1].recompute_s, 8);
  // More layers than the stage holds: every block, each alone.
  const std::vector<StageRecompute> all = stage_recompute(run.profile, run.partition, {"full", "block", 5});
  const std::vector<StageRecompute> uniform = stage_recompute(run.profile, run.partition, {"full", "uniform", 1});
  for (std::size_t stage = 0; stage < 2; ++stage) {
    expect_exact(all[stage].kept_bytes, uniform[stage].kept_bytes, "block 5 = uniform 1");
    EXPECT_EQ(all[stage].recompute_s, uniform[stage].recompute_s);
  }
}

TEST(Recompute, SelectiveDropsTheAttentionCores) {
  for (const bool flash : {false, true}) {
    const TwoStages run = two_stages(flash);
    const std::vector<Layer>& l = run.profile.layers;
    const double core = l[1].stashed_bytes() * *l[1].attention_core_stash_share;
    const double share = *l[1].attention_core_flops_share;
    const std::vector<StageRecompute> stages = stage_recompute(run.profile, run.partition, {"selective", "", 0});
    const std::vector<StageCost> costs = stage_costs(run.profile, run.partition);
    const std::string what = flash ? "fused" : "unfused";
    expect_exact(stages[0].kept_bytes, costs[0].stash_bytes - 2 * core, what + ": stage 0");
    expect_exact(stages[0].kept_bytes, run.profile.input_bytes + l[0].stashed_bytes() + 2 * 34 * sbh, what + ": 34 sbh");
    expect_exact(stages[0].recompute_bytes, core, what + ": one core held");
    expect_exact(stages[1].kept_bytes, costs[1].stash_bytes - 2 * core, what + ": stage 1");
    EXPECT_EQ(stages[0].layer_share, (std::vector<double>{0, share, share}));
    expect_exact(stages[0].recompute_s, share * 2 + share * 4, what + ": recompute time");
  }
}

TEST(Recompute, MegatronRulesWithItsMessages) {
  EXPECT_NO_THROW(check_layer_recompute({}));
  EXPECT_NO_THROW(check_layer_recompute({"full", "uniform", 1}));
  EXPECT_NO_THROW(check_layer_recompute({"selective", "", 0}));
  EXPECT_CONTAINS(input_error_of([] { check_layer_recompute({"full", "", 1}); }),
                  "--recompute-granularity full: Using recompute_granularity: full so recompute_method must be \"block\" "
                  "or \"uniform\"");
  EXPECT_CONTAINS(input_error_of([] { check_layer_recompute({"full", "uniform", 0}); }),
                  "--recompute-num-layers: When using recompute_granularity: full recompute_num_layers must be at least 1 "
                  "(Megatron-LM), found nothing");
  EXPECT_CONTAINS(input_error_of([] { check_layer_recompute({"selective", "block", 0}); }),
                  "--recompute-method block: recompute method is not yet supported for selective recomputing granularity");
  EXPECT_CONTAINS(input_error_of([] { check_layer_recompute({"selective", "", 2}); }),
                  "--recompute-num-layers 2: When using recompute_granularity: selective recompute_num_layers must be None");
  EXPECT_CONTAINS(input_error_of([] { check_layer_recompute({"partial", "", 0}); }),
                  "--recompute-granularity: expected full or selective, found 'partial'");
  EXPECT_CONTAINS(input_error_of([] { check_layer_recompute({"full", "even", 1}); }),
                  "--recompute-method: expected uniform or block, found 'even'");
  EXPECT_CONTAINS(input_error_of([] { check_layer_recompute({"", "uniform", 0}); }),
                  "--recompute-method uniform: applies with --recompute-granularity full");
  EXPECT_CONTAINS(input_error_of([] { check_layer_recompute({"", "", 3}); }),
                  "--recompute-num-layers 3: applies with --recompute-granularity full");
  // The profile: transformer layers, and their attention cores for selective.
  Profile measured = gpt();
  EXPECT_NO_THROW(check_layer_recompute_profile({"selective", "", 0}, measured, "model gpt"));
  measured.layers[2].attention_core_flops_share.reset();
  measured.layers[2].attention_core_stash_share.reset();
  EXPECT_NO_THROW(check_layer_recompute_profile({"full", "block", 1}, measured, "profile p.json"));
  EXPECT_CONTAINS(input_error_of([&] { check_layer_recompute_profile({"selective", "", 0}, measured, "profile p.json"); }),
                  "--recompute-granularity selective: recomputes each transformer layer's attention core, and layer "
                  "'block2' of profile p.json does not give it");
  for (Layer& layer : measured.layers) layer.op.clear();
  EXPECT_CONTAINS(input_error_of([&] { check_layer_recompute_profile({"full", "uniform", 1}, measured, "profile p.json"); }),
                  "--recompute-granularity full: recomputes transformer layers (op \"transformer\"), and profile p.json "
                  "has none");
}

TEST(Recompute, Fp32GradientsAreMegatronsEighteenBytes) {
  // Megatron-LM core_v0.14.0, docs/source/api-guide/dist_optimizer.md: bf16
  // parameters with fp32 gradients, 18 bytes per parameter (Adam).
  EXPECT_EQ(bytes_per_parameter("bf16", "adam", "fp32").total(), 18);
  EXPECT_EQ(bytes_per_parameter("fp16", "adam", "fp32").total(), 18);
  EXPECT_EQ(bytes_per_parameter("bf16", "adam", "fp32").gradients, 4);
  EXPECT_EQ(bytes_per_parameter("bf16", "adam").total(), 16);
  EXPECT_EQ(bytes_per_parameter("bf16", "adam", "bf16").total(), 16);
  EXPECT_EQ(bytes_per_parameter("fp32", "adam", "fp32").total(), 16);
  EXPECT_DOUBLE_EQ(resident_weight_factor("bf16", "adam", "fp32"), 9);
  EXPECT_DOUBLE_EQ(resident_weight_factor("fp16", "sgd", "fp32"), 5);
  EXPECT_CONTAINS(input_error_of([] { bytes_per_parameter("fp32", "adam", "bf16"); }),
                  "--gradient-dtype bf16: expected fp32 or the run's dtype (fp32)");
  EXPECT_CONTAINS(input_error_of([] { check_gradient_dtype("fp16", "bf16"); }),
                  "--gradient-dtype bf16: expected fp32 or the run's dtype (fp16)");
  EXPECT_CONTAINS(input_error_of([] { check_gradient_dtype("fp16", "fp8"); }), "--gradient-dtype: expected fp32, fp16 or bf16");
}

TEST(Recompute, PlanFieldsRoundTripAndAreCheckedWhenRead) {
  Plan plan;
  plan.profile = gpt();
  plan.partition.stage_of_layer.assign(plan.profile.layers.size(), 0);
  plan.partition.hosts = {{"a"}};
  plan.schedule = "gpipe";
  plan.platform_file = "p.xml";
  plan.platform_xml = "<platform/>";
  plan.dtype = "fp16";
  const std::string plain = plan_to_json(plan);
  EXPECT_EQ(plain.find("recompute_granularity"), std::string::npos);  // only when set
  EXPECT_EQ(plain.find("gradient_dtype"), std::string::npos);
  plan.layer_recompute = {"full", "block", 2};
  plan.gradient_dtype = "fp32";
  const Plan read = parse_plan_json(plan_to_json(plan), "plan.json");
  EXPECT_EQ(read.layer_recompute.granularity, "full");
  EXPECT_EQ(read.layer_recompute.method, "block");
  EXPECT_EQ(read.layer_recompute.num_layers, 2);
  EXPECT_EQ(read.gradient_dtype, "fp32");
  EXPECT_EQ(plan_to_json(read), plan_to_json(plan));
  plan.recompute = true;
  EXPECT_CONTAINS(input_error_of([&] { parse_plan_json(plan_to_json(plan), "plan.json"); }),
                  "plan.json: recompute and recompute_granularity: GPipe's and Megatron's recomputation; a plan has one");
  plan.recompute = false;
  plan.layer_recompute = {"selective", "uniform", 0};
  EXPECT_CONTAINS(input_error_of([&] { parse_plan_json(plan_to_json(plan), "plan.json"); }),
                  "plan.json: --recompute-method uniform: recompute method is not yet supported");
  plan.layer_recompute = {};
  plan.gradient_dtype = "bf16";
  EXPECT_CONTAINS(input_error_of([&] { parse_plan_json(plan_to_json(plan), "plan.json"); }),
                  "plan.json: gradient_dtype: --gradient-dtype bf16: expected fp32 or the run's dtype (fp16)");
}

}  // namespace
}  // namespace pipegrid

namespace pipegrid {
namespace {

// execute and validate refuse Megatron's recomputation: the message names
// the flag, the command, why, and what to give instead.
TEST(Recompute, TheExecutorRefusesLayerRecomputationNamingTheFlag) {
  for (const char* flag : kLayerRecomputeFlags) {
    const std::string message = executor_layer_recompute_refusal(flag, "execute");
    EXPECT_EQ(message.rfind(std::string(flag) + ": pipegrid execute runs the model for real", 0), 0u) << message;
    EXPECT_NE(message.find("recomputes whole stages only"), std::string::npos) << message;
    EXPECT_NE(message.find("give --recompute to execute, or " + std::string(flag) + " to simulate"), std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace pipegrid
