// Mixture of experts, multi-head latent attention and multi-token
// prediction in the gpt generator (generators/model_generators.hpp): the
// published parameter counts of DeepSeek-V3 and Mixtral 8x7B, DeepSeek-V3's
// activated FLOPs per token, the MoE block against a dense block it equals,
// the kernels (core/gpu_kernels.hpp), tensor parallelism of the experts
// (core/tensor_parallel.hpp), the profile JSON fields and Megatron-LM's
// arguments (layout/megatron_args.hpp).

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/gpu_kernels.hpp"
#include "core/partition.hpp"
#include "core/profile.hpp"
#include "core/tensor_parallel.hpp"
#include "expect_input_error.hpp"
#include "generators/model_generators.hpp"
#include "layout/megatron_args.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

/// DeepSeek-V3 (DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024, section
/// 4.2 and its config.json): 61 layers, the first 3 dense (ffn 18432),
/// hidden 7168, 128 heads with MLA (q rank 1536, kv rank 512, qk 128 +
/// 64, v 128), 256 routed experts of 2048 + 1 shared of 2048, top-8,
/// vocabulary 129280, untied, RMSNorm, SwiGLU, no biases.
std::map<std::string, long long> deepseek_v3(long long mtp_layers = 0) {
  return {{"layers", 61},           {"hidden", 7168},      {"heads", 128},           {"ffn", 18432},
          {"vocabulary", 129280},   {"sequence", 4096},    {"swiglu", 1},            {"linear_bias", 0},
          {"rmsnorm", 1},           {"rotary", 1},         {"flash_attention", 0},   {"num_experts", 256},
          {"moe_topk", 8},          {"moe_ffn", 2048},     {"moe_shared_ffn", 2048}, {"moe_dense_first", 3},
          {"mla", 1},               {"q_lora_rank", 1536}, {"kv_lora_rank", 512},    {"qk_head_dim", 128},
          {"qk_pos_emb_head_dim", 64}, {"v_head_dim", 128}, {"mtp_layers", mtp_layers}};
}

/// Mixtral 8x7B (Jiang et al. 2024, "Mixtral of Experts", Table 1): 32
/// layers, hidden 4096, 32 heads, 8 key/value groups, 8 experts of 14336
/// (SwiGLU), top-2, vocabulary 32000, untied, RMSNorm, no biases.
std::map<std::string, long long> mixtral() {
  return {{"layers", 32},       {"hidden", 4096},  {"heads", 32},     {"query_groups", 8}, {"ffn", 14336},
          {"vocabulary", 32000}, {"sequence", 4096}, {"swiglu", 1},   {"linear_bias", 0},  {"rmsnorm", 1},
          {"rotary", 1},        {"num_experts", 8}, {"moe_topk", 2}};
}

Profile generate(const std::map<std::string, long long>& options, std::optional<long long> micro = 1) {
  return generate_model_profile({"gpt", options, micro, "bf16"});
}

/// Parameters a token activates: every parameter but the routed experts
/// it is not routed to (topk of E of them).
double activated_parameters(const Profile& profile, double topk, double experts) {
  double bytes = 0;
  for (const Layer& layer : profile.layers)
    bytes += layer.parameter_bytes - layer.expert_parameter_bytes * (1 - topk / experts);
  return bytes / 2;
}

TEST(MixtureOfExperts, DeepSeekV3ParameterCounts) {
  const Profile profile = generate(deepseek_v3());
  // 671B total (the report's abstract and Table 1, rounded to 1B): within
  // 0.5% (pipegrid counts 671.0B; the expert-bias buffers and rounding
  // stay far inside).
  EXPECT_NEAR(profile_parameter_count(profile) / 1e9, 671, 671 * 0.005);
  // 37B activated per token (rounded to 1B): pipegrid's 37.5B counts the
  // word embedding (0.93B) too; within 2% covers the rounding and the
  // embedding's treatment.
  EXPECT_NEAR(activated_parameters(profile, 8, 256) / 1e9, 37, 37 * 0.02);
  // Per MoE block: 256 x 3 x 7168 x 2048 routed expert weights.
  const Layer& moe = profile.layers[4];  // embedding, block1..3 dense, block4 the first MoE
  EXPECT_EQ(moe.name, "block4");
  EXPECT_DOUBLE_EQ(moe.expert_parameter_bytes, 2.0 * 256 * 3 * 7168 * 2048);
  EXPECT_EQ(profile.layers[3].expert_parameter_bytes, 0);  // block3 is dense
  // The dispatch: 4096 tokens x 8 x 7168 x 2 bytes (uniform routing).
  EXPECT_DOUBLE_EQ(moe.moe_dispatch_bytes, 4096.0 * 8 * 7168 * 2);
}

TEST(MixtureOfExperts, MultiHeadLatentAttentionParametersByHand) {
  // DeepSeek-V3's dense block1: q down 7168 x 1536, q up 1536 x 128 x
  // (128 + 64), kv down 7168 x (512 + 64), kv up 512 x 128 x (128 + 128),
  // output 128 x 128 x 7168; RMSNorms 2 x 7168 + 1536 + 512; SwiGLU MLP 3 x
  // 7168 x 18432.
  const Profile profile = generate(deepseek_v3());
  const double attention = 7168.0 * 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 + 512.0 * 128 * 256 + 128.0 * 128 * 7168;
  const double norms = 2 * 7168.0 + 1536 + 512, mlp = 3 * 7168.0 * 18432;
  EXPECT_DOUBLE_EQ(profile.layers[1].parameter_bytes / 2, attention + norms + mlp);
  // An MoE block: the same attention, the router 7168 x 256, 256 + 1
  // experts of 3 x 7168 x 2048.
  const double expert = 3 * 7168.0 * 2048;
  EXPECT_DOUBLE_EQ(profile.layers[4].parameter_bytes / 2, attention + norms + 7168.0 * 256 + 257 * expert);
  // The imbalance scales the dispatch: 150% -> 1.5 x.
  std::map<std::string, long long> options = deepseek_v3();
  options["moe_imbalance"] = 150;
  EXPECT_DOUBLE_EQ(generate(options).layers[4].moe_dispatch_bytes, 1.5 * profile.layers[4].moe_dispatch_bytes);
}

TEST(MixtureOfExperts, DeepSeekV3WithMultiTokenPrediction) {
  const Profile without = generate(deepseek_v3());
  const Profile with = generate(deepseek_v3(1));
  // One MTP module (an MoE block as the last layer, the 2h -> h projection
  // and three norms): ~11.6B; Hugging Face's 685B also counts the module's
  // copies of the embedding and the head (2 x 0.93B), which Megatron shares.
  const double module = (profile_parameter_count(with) - profile_parameter_count(without)) / 1e9;
  EXPECT_NEAR(module, 11.6, 0.1);
  const double vocabulary_tables = 2 * 129280.0 * 7168 / 1e9;
  EXPECT_NEAR(profile_parameter_count(with) / 1e9 + vocabulary_tables, 685, 685 * 0.005);
  // The module runs after the final norm; the head and the loss take 2 x the rows.
  ASSERT_EQ(with.layers.size(), without.layers.size() + 1);
  const Layer& mtp = with.layers[with.layers.size() - 3];
  EXPECT_EQ(mtp.name, "mtp1");
  EXPECT_GT(mtp.expert_parameter_bytes, 0);
  EXPECT_DOUBLE_EQ(*with.layers.back().forward_flops, 2 * *without.layers.back().forward_flops);
}

TEST(MixtureOfExperts, DeepSeekV3TrainingFlopsPerToken) {
  // Matrix products of a training step: 6 FLOPs per activated parameter
  // per token (forward 2, input and weight gradients 2 each), plus the
  // attention core's products (3 x its forward), minus the embedding
  // (a lookup, no product). Checked within 0.5% (the loss's and the
  // embedding's element-wise FLOPs are under 0.001%).
  const Profile profile = generate(deepseek_v3());
  double core = 0;
  for (const Layer& layer : profile.layers)
    if (layer.attention_core_flops_share) core += 3 * *layer.attention_core_flops_share * *layer.forward_flops;
  const double tokens = 4096;
  const double embedding = 129280.0 * 7168;
  const double per_token = (profile_total_flops(profile) - core) / tokens;
  EXPECT_NEAR(per_token / (6 * (activated_parameters(profile, 8, 256) - embedding)), 1, 0.005);
  EXPECT_NEAR(per_token / 1e9, 6 * 36.6, 6 * 36.6 * 0.01);
}

TEST(MixtureOfExperts, MixtralParameterCounts) {
  const Profile profile = generate(mixtral());
  // 46.7B total and 12.9B active (Mistral AI, "Mixtral of experts", 2023;
  // the paper's 47B and 13B), within 0.2% and 0.5% (both given to 0.1B).
  EXPECT_NEAR(profile_parameter_count(profile) / 1e9, 46.7, 46.7 * 0.002);
  EXPECT_NEAR(activated_parameters(profile, 2, 8) / 1e9, 12.9, 12.9 * 0.005);
}

TEST(MixtureOfExperts, OneExpertIsTheDenseBlockPlusTheRouter) {
  // E = 1, top-1, expert width ffn, no shared expert: the dense block's
  // products and parameters plus the router's (N x h x 1).
  const std::map<std::string, long long> dense = {{"layers", 2}, {"hidden", 256}, {"heads", 4}, {"sequence", 64}};
  std::map<std::string, long long> moe = dense;
  moe["num_experts"] = 1;
  moe["moe_topk"] = 1;
  const Profile a = generate(dense, 2), b = generate(moe, 2);
  const Layer& block_a = a.layers[1];
  const Layer& block_b = b.layers[1];
  const double rows = 2 * 64, h = 256;
  EXPECT_DOUBLE_EQ(*block_b.forward_flops, *block_a.forward_flops + 2 * rows * h);
  EXPECT_DOUBLE_EQ(*block_b.backward_weight_flops, *block_a.backward_weight_flops + 2 * rows * h);
  EXPECT_DOUBLE_EQ(block_b.parameter_bytes, block_a.parameter_bytes + 2 * h);
  EXPECT_DOUBLE_EQ(block_b.expert_parameter_bytes, 2 * (h * 4 * h + 4 * h + 4 * h * h + h));
  // A dense model's name has none of the new options.
  EXPECT_EQ(a.name.find("experts"), std::string::npos);
  EXPECT_NE(b.name.find("num_experts=1"), std::string::npos);
}

TEST(MixtureOfExperts, LayerFrequencyAndDenseFirst) {
  std::map<std::string, long long> options = {{"layers", 7},         {"hidden", 64},         {"heads", 4},
                                              {"sequence", 16},      {"num_experts", 4},     {"moe_dense_first", 1},
                                              {"moe_layer_freq", 2}};
  const Profile profile = generate(options);
  // Blocks 2, 4, 6 are MoE (0-based 1, 3, 5).
  for (int block = 1; block <= 7; ++block)
    EXPECT_EQ(profile.layers[static_cast<std::size_t>(block)].expert_parameter_bytes > 0, block % 2 == 0) << block;
}

TEST(MixtureOfExperts, MegatronPartitionPutsMultiTokenPredictionOnTheLastStage) {
  // 4 blocks over 2 pipeline ranks: 2 each; the MTP module (after the final
  // norm) is no block of the split and sits on the last stage, as Megatron
  // builds it.
  const Profile profile = generate({{"layers", 4}, {"hidden", 64}, {"heads", 4}, {"sequence", 16}, {"mtp_layers", 1}});
  ASSERT_EQ(profile.layers[6].name, "mtp1");
  const Partition partition = megatron_partition(profile, {"a", "b"}, 2, 1, {0, 1}, std::nullopt, std::nullopt, false, false);
  EXPECT_EQ(partition.stage_of_layer, (std::vector<int>{0, 0, 0, 1, 1, 1, 1, 1, 1}));
}

TEST(MixtureOfExperts, OptionErrors) {
  std::map<std::string, long long> options = {{"num_experts", 4}, {"moe_topk", 5}};
  EXPECT_NE(input_error_of([&] { generate(options); }).find("--moe-topk"), std::string::npos);
  EXPECT_NE(input_error_of([&] { generate({{"moe_imbalance", 99}}); }).find("--moe-imbalance"), std::string::npos);
  EXPECT_NE(input_error_of([&] { generate({{"mla", 1}, {"query_groups", 4}}); }).find("--query-groups"),
            std::string::npos);
}

TEST(MixtureOfExperts, KernelsOfTheBusiestRank) {
  Profile profile = generate(mixtral());
  Layer block = profile.layers[1];
  const TensorCoreModel model{132, 1, 1, 1, 1, 0};
  const double peak = 989e12;
  const auto seconds = [&](const Layer& layer, int ep) {
    TensorParallelShare share;
    share.expert_parallel = ep;
    return layer_kernels(layer, model, peak, 2, share).forward.seconds(model, 3.35e12);
  };
  const double uniform = seconds(block, 8);
  block.transformer_shape->imbalance = 1.5;
  EXPECT_GT(seconds(block, 8), uniform);  // the busiest rank's experts take more rows
  // At ep 1 every expert is local: no rank is busier.
  Layer balanced = profile.layers[1];
  EXPECT_DOUBLE_EQ(seconds(block, 1), seconds(balanced, 1));
  // The experts' GEMM FLOPs at ep 8 with 8 experts: 1 local expert of N x 2 x 8 / 8 rows.
  EXPECT_GT(seconds(balanced, 1), 0);
}

TEST(MixtureOfExperts, TensorParallelSplitsExpertsByExpertTensorParallel) {
  const Profile profile = generate(mixtral());
  const Layer& whole = profile.layers[1];
  const TensorParallelLink link{1e-6, 1e11, 1, 0, 0};
  const TensorParallelProfile t4 = tensor_parallel_profile(profile, 4, link);
  const TensorParallelProfile etp1 =
      tensor_parallel_profile(profile, 4, link, false, false, TensorParallelCollectives::Compute, false, 1);
  const double experts = whole.expert_parameter_bytes, dense = whole.parameter_bytes - experts;
  EXPECT_DOUBLE_EQ(t4.profile.layers[1].parameter_bytes, dense / 4 + experts / 4);
  EXPECT_DOUBLE_EQ(etp1.profile.layers[1].parameter_bytes, dense / 4 + experts);
  EXPECT_DOUBLE_EQ(etp1.profile.layers[1].expert_parameter_bytes, experts);
  EXPECT_DOUBLE_EQ(t4.profile.layers[1].moe_dispatch_bytes, whole.moe_dispatch_bytes / 4);
  EXPECT_NE(input_error_of([&] {
              tensor_parallel_profile(profile, 4, link, false, false, TensorParallelCollectives::Compute, false, -1);
            }).find("--expert-tensor-parallel"),
            std::string::npos);
}

TEST(MixtureOfExperts, ProfileJsonRoundTrip) {
  const Profile profile = generate(deepseek_v3(1));
  const Profile back = parse_profile_json(profile_to_json(profile), "test");
  ASSERT_EQ(back.layers.size(), profile.layers.size());
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& a = profile.layers[l];
    const Layer& b = back.layers[l];
    EXPECT_EQ(a.expert_parameter_bytes, b.expert_parameter_bytes) << a.name;
    EXPECT_EQ(a.moe_dispatch_bytes, b.moe_dispatch_bytes) << a.name;
    ASSERT_TRUE(b.transformer_shape.has_value());
    EXPECT_EQ(a.transformer_shape->experts, b.transformer_shape->experts);
    EXPECT_EQ(a.transformer_shape->topk, b.transformer_shape->topk);
    EXPECT_EQ(a.transformer_shape->kv_lora_rank, b.transformer_shape->kv_lora_rank);
    EXPECT_EQ(a.transformer_shape->qk_pos_head_dim, b.transformer_shape->qk_pos_head_dim);
    EXPECT_EQ(a.transformer_shape->batch, b.transformer_shape->batch);
  }
  const std::string bad = R"({"name": "x", "micro_batch_size": 1, "layers": [{"name": "a", "forward_s": 1, "backward_s": 1,
    "output_bytes": 1, "parameter_bytes": 10, "expert_parameter_bytes": 11}]})";
  EXPECT_NE(input_error_of([&] { parse_profile_json(bad, "p.json"); }).find("expert_parameter_bytes"), std::string::npos);
  const std::string dispatch = R"({"name": "x", "micro_batch_size": 1, "layers": [{"name": "a", "forward_s": 1, "backward_s": 1,
    "output_bytes": 1, "parameter_bytes": 10, "moe_dispatch_bytes": 5}]})";
  EXPECT_NE(input_error_of([&] { parse_profile_json(dispatch, "p.json"); }).find("moe_dispatch_bytes"),
            std::string::npos);
}

const char* const kDeepSeekLaunch =
    "--num-layers 61 --hidden-size 7168 --num-attention-heads 128 --ffn-hidden-size 18432 --seq-length 4096 "
    "--max-position-embeddings 4096 --padded-vocab-size 129280 --swiglu --disable-bias-linear --normalization RMSNorm "
    "--position-embedding-type rope --untie-embeddings-and-output-weights --micro-batch-size 1 --bf16 "
    "--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 "
    "--v-head-dim 128 --kv-channels 128 --num-experts 256 --moe-router-topk 8 --moe-ffn-hidden-size 2048 "
    "--moe-shared-expert-intermediate-size 2048 --moe-grouped-gemm --moe-router-score-function sigmoid "
    "--mtp-num-layers 1 ";

TEST(MixtureOfExperts, MegatronArgumentsOfDeepSeekV3) {
  const MegatronLaunch launch = read_megatron_args(std::string(kDeepSeekLaunch) + "--moe-layer-freq \"([0]*3+[1]*58)\"", "launch");
  const ResolvedModel model = resolve_model_spec(launch.model);
  EXPECT_EQ(model.options.at("num_experts"), 256);
  EXPECT_EQ(model.options.at("moe_topk"), 8);
  EXPECT_EQ(model.options.at("moe_ffn"), 2048);
  EXPECT_EQ(model.options.at("moe_shared_ffn"), 2048);
  EXPECT_EQ(model.options.at("moe_dense_first"), 3);
  EXPECT_EQ(model.options.at("moe_layer_freq"), 1);
  EXPECT_EQ(model.options.at("mla"), 1);
  EXPECT_EQ(model.options.at("q_lora_rank"), 1536);
  EXPECT_EQ(model.options.at("kv_lora_rank"), 512);
  EXPECT_EQ(model.options.at("mtp_layers"), 1);
  // The integer form: every 2nd layer MoE from the first.
  const MegatronLaunch every2 = read_megatron_args(std::string(kDeepSeekLaunch) + "--moe-layer-freq 2", "launch");
  EXPECT_EQ(resolve_model_spec(every2.model).options.at("moe_layer_freq"), 2);
  EXPECT_EQ(resolve_model_spec(every2.model).options.at("moe_dense_first"), 0);
  // The reverse (plan's launch line) reads back to the same model.
  const MegatronLaunch again = read_megatron_args(megatron_arguments_of_gpt(launch.model) + " --micro-batch-size 1", "again");
  EXPECT_EQ(resolve_model_spec(again.model).options, model.options);
}

TEST(MixtureOfExperts, MegatronArgumentsRefused) {
  const std::string base = kDeepSeekLaunch;
  EXPECT_NE(input_error_of([&] { read_megatron_args(base + "--moe-layer-freq \"[1,1]+[0]*59\"", "l"); }).find("--moe-layer-freq"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { read_megatron_args(base + "--moe-layer-freq \"[0]*3+[1]*57\"", "l"); }).find("Invalid length"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { read_megatron_args(base + "--moe-layer-freq \"[0]*3+[2]*58\"", "l"); }).find("0 or 1"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { read_megatron_args(base + "--moe-expert-capacity-factor 1.0", "l"); }).find("capacity"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { read_megatron_args(base + "--moe-router-topk 300", "l"); }).find("--moe-router-topk: expected at most --num-experts (256)"),
            std::string::npos);
}

}  // namespace
}  // namespace pipegrid
