// Model generators (generators/model_generators.hpp): FLOP counts against values
// derived by hand, parameter counts of the published models, GNMT-L's W(L)
// exactly, option errors, and the analytic profile fields in JSON.

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

#include "generators/model_generators.hpp"
#include "core/profile.hpp"
#include "expect_input_error.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

const Layer& layer_named(const Profile& profile, const std::string& name) {
  for (const Layer& layer : profile.layers)
    if (layer.name == name) return layer;
  ADD_FAILURE() << "no layer " << name;
  static const Layer none;
  return none;
}

double parameters_of(const Layer& layer, double element_bytes) { return layer.parameter_bytes / element_bytes; }

TEST(ModelGenerators, OneLinearLayerByHand) {
  // mlp with one layer: Linear 256 -> 10 on 32 samples, fp32.
  // Forward: 32 x 10 outputs, each 256 multiply-adds = 2 x 32 x 256 x 10 =
  // 163,840 FLOPs; the input gradient (dY W^T) and the weight gradient
  // (X^T dY) are products of the same shape: 163,840 each.
  // Parameters 256 x 10 + 10 = 2,570 -> 10,280 bytes. Read: input 32 x 256,
  // weights 2,560 and bias 10, x 4 bytes = 43,048; written 32 x 10 x 4.
  const Profile profile = generate_model_profile({"mlp", {{"layers", 1}}, std::nullopt, ""});
  ASSERT_EQ(profile.layers.size(), 2u);  // fc1, loss
  const Layer& fc = profile.layers[0];
  EXPECT_EQ(fc.name, "fc1");
  EXPECT_EQ(fc.op, "linear");
  EXPECT_EQ(*fc.forward_flops, 163840);
  EXPECT_EQ(*fc.backward_input_flops, 163840);
  EXPECT_EQ(*fc.backward_weight_flops, 163840);
  EXPECT_EQ(fc.parameter_bytes, 10280);
  EXPECT_EQ(*fc.bytes_read, 43048);
  EXPECT_EQ(*fc.bytes_written, 1280);
  EXPECT_EQ(fc.output_bytes, 1280);
  EXPECT_FALSE(fc.times_given);
  EXPECT_EQ(profile.input_bytes, 32 * 256 * 4);
  EXPECT_EQ(profile.layers[1].op, "loss");
  EXPECT_EQ(profile.layers[1].parameter_bytes, 0);
}

TEST(ModelGenerators, OneConvolutionByHand) {
  // VGG-16's conv1_1 on one 3 x 224 x 224 image: 64 output channels of
  // 224 x 224 (padding 1), each output 3 x 3 x 3 = 27 multiply-adds:
  // 2 x 224 x 224 x 64 x 27 = 173,408,256 FLOPs per pass.
  // Parameters 64 x 27 + 64 = 1,792.
  const Profile profile = generate_model_profile({"vgg16", {}, 1, ""});
  const Layer& conv = layer_named(profile, "conv1_1");
  EXPECT_EQ(conv.op, "conv2d");
  EXPECT_EQ(*conv.forward_flops, 173408256);
  EXPECT_EQ(*conv.backward_input_flops, 173408256);
  EXPECT_EQ(*conv.backward_weight_flops, 173408256);
  EXPECT_EQ(parameters_of(conv, 4), 1792);
  // Output (and what the ReLU keeps): 64 x 224 x 224 x 4 bytes.
  EXPECT_EQ(conv.output_bytes, 64.0 * 224 * 224 * 4);
  EXPECT_EQ(*conv.activation_bytes, 64.0 * 224 * 224 * 4);
}

TEST(ModelGenerators, OneLstmStepByHand) {
  // GNMT's second encoder layer, LSTM(2048 -> 1024), one token of one
  // sentence: the four gates are W_ih x (4096 x 2048) plus W_hh h
  // (4096 x 1024): 4096 x 3072 multiply-adds = 2 x 4 x 1024 x (2048 + 1024)
  // = 25,165,824 FLOPs; again for the input (and recurrent) gradients, and
  // for the weight gradients. Parameters 4h(i + h) + 8h = 12,591,104.
  const Profile profile = generate_model_profile({"gnmt", {{"sequence", 1}}, 1, ""});
  const Layer& lstm = layer_named(profile, "lstm_enc2");
  EXPECT_EQ(lstm.op, "lstm");
  EXPECT_EQ(*lstm.forward_flops, 25165824);
  EXPECT_EQ(*lstm.backward_input_flops, 25165824);
  EXPECT_EQ(*lstm.backward_weight_flops, 25165824);
  EXPECT_EQ(parameters_of(lstm, 4), 12591104);
  // Kept for the backward: gates (4h), cell state and output (h each).
  EXPECT_EQ(*lstm.activation_bytes, 6 * 1024 * 4);
}

TEST(ModelGenerators, OneTransformerBlockByHand) {
  // GPT-2 small's block on one sample: s = 1024 tokens, h = 768, a = 12,
  // f = 3072. Matrix products, 2 FLOPs per multiply-add:
  //   Q, K, V:        2 s h (3h)          = 6 s h^2
  //   Q K^T:          2 a s s (h/a)       = 2 s^2 h
  //   softmax x V:    2 a s s (h/a)       = 2 s^2 h
  //   output proj.:   2 s h h             = 2 s h^2
  //   FFN:            2 s h f + 2 s f h   = 4 s h f
  // forward = 8 s h^2 + 4 s h f + 4 s^2 h
  //         = 8 x 1024 x 589,824 + 4 x 1024 x 768 x 3072 + 4 x 1024^2 x 768
  //         = 4,831,838,208 + 9,663,676,416 + 3,221,225,472 = 17,716,740,096.
  // Weight gradient: the weight products again, 8 s h^2 + 4 s h f =
  // 14,495,514,624; input gradient: those plus both inputs of the two
  // activation products, 14,495,514,624 + 8 s^2 h = 20,937,965,568.
  // Parameters: 4h^2 + 2hf + 9h + f = 7,087,872 (12h^2 + 13h).
  const Profile profile = generate_model_profile({"gpt", {}, 1, "fp16"});
  const Layer& block = layer_named(profile, "block1");
  EXPECT_EQ(block.op, "transformer");
  EXPECT_EQ(*block.forward_flops, 17716740096.0);
  EXPECT_EQ(*block.backward_weight_flops, 14495514624.0);
  EXPECT_EQ(*block.backward_input_flops, 20937965568.0);
  EXPECT_EQ(parameters_of(block, 2), 7087872);
  // Korthikanti et al. 2022 at 2 bytes: s b h (34 + 5 a s / h)
  // = 1024 x 768 x (34 + 5 x 12 x 1024 / 768) = 786,432 x 114 = 89,653,248.
  EXPECT_EQ(*block.activation_bytes, 89653248);
  // fp32: the 2-byte terms doubled, the 1-byte dropout masks not:
  // 66 s h + 9 a s^2 = 51,904,512 + 113,246,208 = 165,150,720.
  const Profile fp32 = generate_model_profile({"gpt", {}, 1, "fp32"});
  EXPECT_EQ(*layer_named(fp32, "block1").activation_bytes, 165150720);
}

TEST(ModelGenerators, GptSmallParameters) {
  // GPT-2 small: 124,439,808 parameters with the head tied to the token
  // embedding; here the head is its own layer (50,257 x 768 more).
  const Profile profile = generate_model_profile({"gpt", {}, std::nullopt, ""});
  EXPECT_EQ(profile_parameter_count(profile), 124439808.0 + 50257.0 * 768);
  EXPECT_EQ(profile.layers.size(), 12u + 4);
  EXPECT_EQ(profile.sequence_length, 1024);
  EXPECT_EQ(profile.micro_batch_size, 8);
  EXPECT_EQ(profile.dtype, "fp32");
}

/// A gpt spec: the options given, micro-batch and dtype.
ModelSpec gpt(std::map<std::string, long long> options, long long micro_batch_size = 1, const std::string& dtype = "bf16") {
  return {"gpt", std::move(options), micro_batch_size, dtype};
}

/// Llama-2-7B as gpt options: 32 blocks of width 4096, 32 heads, SwiGLU MLP
/// of 11008, rotary positions, an untied head, a vocabulary of 32000.
std::map<std::string, long long> llama2_7b() {
  return {{"layers", 32}, {"hidden", 4096}, {"heads", 32},  {"ffn", 11008},
          {"swiglu", 1},  {"rotary", 1},    {"sequence", 4096}, {"vocabulary", 32000}};
}

TEST(ModelGenerators, GptDefaultsGivenExplicitlyChangeNothing) {
  // The options added for Megatron launches, given at their defaults: the
  // same profile, byte for byte, and the same name (the name writes them
  // only away from their defaults).
  const Profile plain = generate_model_profile(gpt({{"layers", 2}, {"hidden", 256}, {"heads", 4}}, 2, "fp16"));
  const Profile given = generate_model_profile(gpt({{"layers", 2},
                                                    {"hidden", 256},
                                                    {"heads", 4},
                                                    {"query_groups", 4},
                                                    {"swiglu", 0},
                                                    {"linear_bias", 1},
                                                    {"rmsnorm", 0},
                                                    {"rotary", 0},
                                                    {"positions", 1024},
                                                    {"tied_embeddings", 0},
                                                    {"flash_attention", 0}},
                                                   2, "fp16"));
  EXPECT_EQ(profile_to_json(given), profile_to_json(plain));
  EXPECT_EQ(plain.name, "gpt layers=2 hidden=256 heads=4 ffn=1024 sequence=1024 vocabulary=50257 micro_batch_size=2 dtype=fp16");
  // The block as before the options: 4h^2 + 2hf + 9h + f parameters and
  // Korthikanti's activation, at a width and FFN other than GPT-2's.
  const Profile other = generate_model_profile(gpt({{"hidden", 320}, {"heads", 5}, {"ffn", 1000}, {"sequence", 64}}, 3, "fp32"));
  const double h = 320, f = 1000, rows = 3 * 64, scores = 3 * 5 * 64 * 64;
  EXPECT_EQ(parameters_of(layer_named(other, "block1"), 4), 4 * h * h + 2 * h * f + 9 * h + f);
  EXPECT_EQ(*layer_named(other, "block1").activation_bytes,
            4 * (8 * rows * h + 2 * rows * f + 2 * scores) + 2 * rows * h + scores);
}

TEST(ModelGenerators, GptLlama2Parameters) {
  // Llama-2-7B (Touvron et al. 2023): 6,738,415,616 parameters, with
  // RMSNorm and no biases: 32 x (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096)
  // + 2 x 32000 x 4096 + 4096.
  auto options = llama2_7b();
  options["linear_bias"] = 0;
  options["rmsnorm"] = 1;
  EXPECT_EQ(profile_parameter_count(generate_model_profile(gpt(options))), 6738415616.0);
  // With the block's biases (Q, K, V 3h, output h, up 2f, down h) and
  // LayerNorm (2h per norm): 50,688 more per block, 4,096 more in the final
  // norm: 6,740,041,728, still 6.74B.
  EXPECT_EQ(profile_parameter_count(generate_model_profile(gpt(llama2_7b()))), 6740041728.0);
  // Llama-2-70B: 80 blocks of 8192, 64 heads in 8 key/value groups, SwiGLU
  // 28672: 80 x (2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 28672 + 2 x 8192)
  // + 2 x 32000 x 8192 + 8192 = 68,976,648,192.
  const Profile llama70 = generate_model_profile(gpt({{"layers", 80},
                                                      {"hidden", 8192},
                                                      {"heads", 64},
                                                      {"query_groups", 8},
                                                      {"ffn", 28672},
                                                      {"swiglu", 1},
                                                      {"rotary", 1},
                                                      {"linear_bias", 0},
                                                      {"rmsnorm", 1},
                                                      {"sequence", 4096},
                                                      {"vocabulary", 32000}}));
  EXPECT_EQ(profile_parameter_count(llama70), 68976648192.0);
  EXPECT_EQ(parameters_of(layer_named(llama70, "block1"), 2), 855654400);
  EXPECT_EQ(llama70.name,
            "gpt layers=80 hidden=8192 heads=64 ffn=28672 sequence=4096 vocabulary=32000 query_groups=8 swiglu=1 "
            "linear_bias=0 rmsnorm=1 rotary=1 micro_batch_size=1 dtype=bf16");
}

TEST(ModelGenerators, GptMatrixProductFlopsAreTwiceParametersTimesTokens) {
  // Without biases and norms' parameters in the way, a block's weight
  // products are 2 x (its weights) x (tokens) FLOPs in each pass; the
  // forward adds Q K^T and attention x V (4 B s^2 h), the input gradient
  // twice that. GQA (2 groups of 8 heads) and SwiGLU.
  const double batch = 2, s = 128, h = 512, heads = 8, groups = 2, f = 1376;
  const Profile profile = generate_model_profile(gpt({{"layers", 1},
                                                      {"hidden", 512},
                                                      {"heads", 8},
                                                      {"query_groups", 2},
                                                      {"ffn", 1376},
                                                      {"swiglu", 1},
                                                      {"linear_bias", 0},
                                                      {"rmsnorm", 1},
                                                      {"sequence", 128},
                                                      {"vocabulary", 1000}},
                                                     2, "fp32"));
  const Layer& block = layer_named(profile, "block1");
  const double tokens = batch * s, kv = groups * h / heads;
  const double weights = parameters_of(block, 4) - 2 * h;  // less the two RMSNorm scales
  EXPECT_EQ(weights, h * (h + 2 * kv) + h * h + h * 2 * f + f * h);
  EXPECT_EQ(*block.backward_weight_flops, 2 * weights * tokens);
  EXPECT_EQ(*block.forward_flops, 2 * weights * tokens + 4 * batch * s * s * h);
  EXPECT_EQ(*block.backward_input_flops, 2 * weights * tokens + 8 * batch * s * s * h);
  const Layer& head = layer_named(profile, "head");
  EXPECT_EQ(*head.forward_flops, 2 * parameters_of(head, 4) * tokens);
  // Kept for the backward: 6 N h + 2 N kv + 3 N f + 2 B a s^2 elements
  // (SwiGLU keeps gate and value), plus the 1-byte dropout masks.
  const double scores = batch * heads * s * s;
  EXPECT_EQ(*block.activation_bytes,
            4 * (6 * tokens * h + 2 * tokens * kv + 3 * tokens * f + 2 * scores) + 2 * tokens * h + scores);
}

TEST(ModelGenerators, GptSwigluRotaryAndTiedByHand) {
  const std::map<std::string, long long> base = {{"layers", 1}, {"hidden", 256}, {"heads", 4}, {"ffn", 512},
                                                 {"sequence", 64}, {"vocabulary", 1000}};
  const double e = 2, rows = 64, h = 256, f = 512, d = 64;
  const Profile gelu = generate_model_profile(gpt(base));
  auto with = [&](std::map<std::string, long long> more) {
    more.insert(base.begin(), base.end());
    return generate_model_profile(gpt(more));
  };
  // SwiGLU: the up projection's weights and biases double (h f + f more),
  // the activation reads 2 N f (gate and value) and writes N f once more.
  const Profile swiglu = with({{"swiglu", 1}});
  EXPECT_EQ(parameters_of(layer_named(swiglu, "block1"), e) - parameters_of(layer_named(gelu, "block1"), e), h * f + f);
  EXPECT_EQ(*layer_named(swiglu, "block1").forward_flops - *layer_named(gelu, "block1").forward_flops, 2 * rows * h * f);
  EXPECT_EQ(*layer_named(swiglu, "block1").bytes_written - *layer_named(gelu, "block1").bytes_written,
            e * (rows * f + rows * f));  // the up projection's second half, the product
  EXPECT_EQ(*layer_named(swiglu, "block1").activation_bytes - *layer_named(gelu, "block1").activation_bytes,
            e * rows * f);
  // Rotary: no position table (64 x 256 parameters fewer), Q and K rotated
  // in the block (read Q, K and the cos and sin tables, write Q and K);
  // nothing more kept for the backward.
  const Profile rotary = with({{"rotary", 1}});
  EXPECT_EQ(parameters_of(layer_named(gelu, "embedding"), e) - parameters_of(layer_named(rotary, "embedding"), e),
            64 * h);
  EXPECT_EQ(*layer_named(rotary, "embedding").forward_flops, 0);
  EXPECT_EQ(*layer_named(rotary, "block1").bytes_read - *layer_named(gelu, "block1").bytes_read,
            e * (rows * 2 * h + 2 * 64 * d));
  EXPECT_EQ(*layer_named(rotary, "block1").bytes_written - *layer_named(gelu, "block1").bytes_written, e * rows * 2 * h);
  EXPECT_EQ(*layer_named(rotary, "block1").activation_bytes, *layer_named(gelu, "block1").activation_bytes);
  EXPECT_EQ(*layer_named(rotary, "block1").forward_flops, *layer_named(gelu, "block1").forward_flops);
  // A learned table longer than the sequence (Megatron's
  // --max-position-embeddings): more parameters, the same work.
  const Profile longer = with({{"positions", 256}});
  EXPECT_EQ(parameters_of(layer_named(longer, "embedding"), e) - parameters_of(layer_named(gelu, "embedding"), e),
            (256 - 64) * h);
  EXPECT_EQ(*layer_named(longer, "embedding").bytes_read, *layer_named(gelu, "embedding").bytes_read);
  // Tied: the head keeps its product and gradient, not its parameters.
  const Profile tied = with({{"tied_embeddings", 1}});
  EXPECT_EQ(layer_named(tied, "head").parameter_bytes, 0);
  EXPECT_EQ(profile_parameter_count(gelu) - profile_parameter_count(tied), 1000 * h);
  EXPECT_EQ(*layer_named(tied, "head").backward_weight_flops, *layer_named(gelu, "head").backward_weight_flops);
  // Without biases: 3h (Q, K, V) + h + f + h fewer; RMSNorm: h fewer per norm.
  EXPECT_EQ(parameters_of(layer_named(gelu, "block1"), e) -
                parameters_of(layer_named(with({{"linear_bias", 0}, {"rmsnorm", 1}}), "block1"), e),
            5 * h + f + 2 * h);
}

TEST(ModelGenerators, GptFusedAttentionByHand) {
  // One block, B = 2, s = 64, h = 256, a = 4 heads in 2 key/value groups
  // (kv = 128), bf16. Fused attention: the same forward FLOPs; the input
  // gradient adds the recomputed Q K^T, 2 B s^2 h; the scores (2 B a s^2
  // elements), their dropout mask (B a s^2 bytes) are not kept, the
  // log-sum-exp (4 bytes x B a s) is.
  const std::map<std::string, long long> options = {{"layers", 1},   {"hidden", 256},    {"heads", 4},
                                                    {"query_groups", 2}, {"sequence", 64}, {"vocabulary", 1000}};
  auto fused_options = options;
  fused_options["flash_attention"] = 1;
  const Profile plain_profile = generate_model_profile(gpt(options, 2));
  const Layer& plain = layer_named(plain_profile, "block1");
  const Profile fused_profile = generate_model_profile(gpt(fused_options, 2));
  const Layer& fused = layer_named(fused_profile, "block1");
  const double batch = 2, s = 64, h = 256, heads = 4, kv = 128, e = 2, rows = batch * s;
  const double scores = batch * heads * s * s;
  EXPECT_EQ(*fused.forward_flops, *plain.forward_flops);
  EXPECT_EQ(*fused.backward_weight_flops, *plain.backward_weight_flops);
  EXPECT_EQ(*fused.backward_input_flops - *plain.backward_input_flops, 2 * batch * s * s * h);
  EXPECT_EQ(*plain.activation_bytes - *fused.activation_bytes, e * 2 * scores + scores - 4 * batch * heads * s);
  // Memory traffic of the attention: unfused, Q K^T reads Q and K and
  // writes the scores, softmax and dropout read and write them, attention
  // x V reads the probabilities and V and writes the output; fused, one
  // kernel reads Q, K, V and writes the output and the log-sum-exp.
  const double d = h / heads;
  const double unfused_read = e * (batch * heads * 2 * s * d + 2 * scores + batch * heads * (s * s + s * d));
  const double unfused_written = e * (3 * scores + batch * heads * s * d) + scores;
  EXPECT_EQ(*plain.bytes_read - *fused.bytes_read, unfused_read - e * rows * (h + 2 * kv));
  EXPECT_EQ(*plain.bytes_written - *fused.bytes_written, unfused_written - (e * rows * h + 4 * batch * heads * s));
  EXPECT_EQ(fused_profile.name,
            "gpt layers=1 hidden=256 heads=4 ffn=1024 sequence=64 vocabulary=1000 query_groups=2 flash_attention=1 "
            "micro_batch_size=2 dtype=bf16");
}

TEST(ModelGenerators, GptSwigluDefaultFfnIsMegatrons) {
  // megatron/training/arguments.py (core_v0.14.0): int((4 h 2 / 3) / 64) x 64.
  const std::pair<long long, long long> expected[] = {{4096, 10880}, {768, 2048}, {1000, 2624}, {5120, 13632}, {64, 128}};
  for (const auto& [hidden, ffn] : expected) {
    const ResolvedModel model = resolve_model_spec(gpt({{"hidden", hidden}, {"heads", 1}, {"swiglu", 1}}));
    EXPECT_EQ(model.options.at("ffn"), ffn) << "hidden " << hidden;
  }
  EXPECT_EQ(resolve_model_spec(gpt({{"hidden", 1000}, {"heads", 1}})).options.at("ffn"), 4000);
  EXPECT_EQ(resolve_model_spec(gpt({{"hidden", 1000}, {"heads", 1}, {"swiglu", 1}, {"ffn", 7}})).options.at("ffn"), 7);
  EXPECT_CONTAINS(input_error_of([] { resolve_model_spec(gpt({{"hidden", 16}, {"heads", 1}, {"swiglu", 1}})); }),
                  "--ffn: with --swiglu 1 the default int(8 x hidden / 3 / 64) x 64 is 0 at --hidden 16; give --ffn");
}

TEST(ModelGenerators, GptNewOptionErrors) {
  EXPECT_EQ(input_error_of([] { resolve_model_spec(gpt({{"swiglu", 2}})); }),
            "--swiglu: expected an integer from 0 to 1, found 2");
  EXPECT_EQ(input_error_of([] { resolve_model_spec(gpt({{"tied_embeddings", -1}})); }),
            "--tied-embeddings: expected an integer from 0 to 1, found -1");
  EXPECT_EQ(input_error_of([] { resolve_model_spec(gpt({{"query_groups", 5}})); }),
            "--query-groups: expected a divisor of --heads (12), found 5");
  EXPECT_EQ(input_error_of([] { resolve_model_spec(gpt({{"query_groups", 0}})); }),
            "--query-groups: expected an integer from 1 to 10000000, found 0");
  EXPECT_EQ(input_error_of([] { resolve_model_spec(gpt({{"positions", 512}})); }),
            "--positions: expected at least --sequence (1024) rows, found 512");
  EXPECT_CONTAINS(input_error_of([] { resolve_model_spec(gpt({{"rotary", 1}, {"positions", 2048}})); }),
                  "--positions: rotary position embedding (--rotary 1) has no position table");
  EXPECT_CONTAINS(input_error_of([] { resolve_model_spec({"mlp", {{"swiglu", 1}}, std::nullopt, ""}); }),
                  "--swiglu: model mlp has no such option");
}

TEST(ModelGenerators, OptionRangesAreSharedByName) {
  // The CLI defines one flag per option name, checked against one range.
  for (const ModelInfo& info : model_generators())
    for (const ModelOptionInfo& option : info.options) {
      EXPECT_EQ(model_option_min(option.name), option.min_value) << info.name << " " << option.name;
      EXPECT_EQ(model_option_max(option.name), option.max_value) << info.name << " " << option.name;
      EXPECT_LE(option.min_value, option.max_value);
      if (option.default_value) {
        EXPECT_GE(*option.default_value, option.min_value) << info.name << " " << option.name;
        EXPECT_LE(*option.default_value, option.max_value) << info.name << " " << option.name;
      }
    }
  EXPECT_EQ(model_option_min("swiglu"), 0);
  EXPECT_EQ(model_option_max("swiglu"), 1);
  EXPECT_EQ(model_option_max("layers"), 100000);
  EXPECT_EQ(model_option_max("micro_batch_size"), 1000000);
  EXPECT_EQ(model_option_min("micro_batch_size"), 1);
}

TEST(ModelGenerators, Vgg16AndResnet50Parameters) {
  EXPECT_EQ(profile_parameter_count(generate_model_profile({"vgg16", {}, std::nullopt, ""})), 138357544);
  EXPECT_EQ(profile_parameter_count(generate_model_profile({"resnet50", {}, std::nullopt, ""})), 25557032);
  // fp16 halves the bytes, not the count.
  const Profile half = generate_model_profile({"resnet50", {}, std::nullopt, "bf16"});
  EXPECT_EQ(profile_parameter_count(half), 25557032);
  double bytes = 0;
  for (const Layer& layer : half.layers) bytes += layer.parameter_bytes;
  EXPECT_EQ(bytes, 2.0 * 25557032);
  // PipeDream's vgg16 profile: the input is 128 images of 3 x 224 x 224 fp32.
  EXPECT_EQ(generate_model_profile({"vgg16", {}, std::nullopt, ""}).input_bytes, 77070336);
}

TEST(ModelGenerators, GnmtParameterCountIsW) {
  // RESULTS.md 0.3: W(L) = 99,319,360 + [2 x 8,396,800 + 12,591,104 +
  // (L/2 - 2) x 8,396,800] + [10,494,976 + (L/2 - 1) x 12,591,104].
  const std::pair<long long, double> expected[] = {
      {4, 151790144},     {8, 193765952},     {16, 277717568},     {32, 445620800},     {42, 550560320},
      {60, 739451456},    {74, 886366784},    {118, 1348100672},   {158, 1767858752}};
  for (const auto& [layers, w] : expected) {
    const Profile profile = generate_model_profile({"gnmt", {{"layers", layers}}, std::nullopt, ""});
    double bytes = 0;
    for (const Layer& layer : profile.layers) bytes += layer.parameter_bytes;
    EXPECT_EQ(bytes, 4 * w) << "L = " << layers;
    // embeddings, L/2 encoder layers, attention + L/2 - 1 decoder layers, classifier, loss
    EXPECT_EQ(profile.layers.size(), static_cast<std::size_t>(layers + 4)) << "L = " << layers;
  }
  // PipeDream's gnmt profile: the encoder's output is 32 x 48 x 1024 fp32.
  const Profile gnmt8 = generate_model_profile({"gnmt", {}, std::nullopt, ""});
  EXPECT_EQ(layer_named(gnmt8, "lstm_enc4").output_bytes, 6291456);
  EXPECT_EQ(layer_named(gnmt8, "attention").parameter_bytes, 4 * 10494976.0);
}

TEST(ModelGenerators, OptionErrors) {
  for (long long layers : {3LL, 5LL, 2LL, 7LL}) {
    const std::string message =
        input_error_of([&] { generate_model_profile({"gnmt", {{"layers", layers}}, std::nullopt, ""}); });
    EXPECT_CONTAINS(message, "--layers");
    EXPECT_CONTAINS(message, "even L >= 4");
  }
  EXPECT_CONTAINS(input_error_of([] { generate_model_profile({"gnmt", {{"heads", 4}}, std::nullopt, ""}); }), "--heads");
  EXPECT_CONTAINS(input_error_of([] { generate_model_profile({"bert", {}, std::nullopt, ""}); }), "'bert'");
  EXPECT_CONTAINS(input_error_of([] { generate_model_profile({"gpt", {{"hidden", 100}}, std::nullopt, ""}); }),
                  "multiple of --heads");
  EXPECT_CONTAINS(input_error_of([] { generate_model_profile({"gpt", {}, std::nullopt, "fp8"}); }), "--dtype");
  EXPECT_CONTAINS(input_error_of([] { generate_model_profile({"mlp", {}, 0, ""}); }), "--micro-batch-size");
  EXPECT_CONTAINS(input_error_of([] { generate_model_profile({"mlp", {{"hidden", 0}}, std::nullopt, ""}); }), "--hidden");
  EXPECT_CONTAINS(input_error_of([] { generate_model_profile({"vgg16", {{"image", 100}}, std::nullopt, ""}); }),
                  "multiple of 32");
  // Values too large for the limits: an InputError, never inf.
  EXPECT_CONTAINS(input_error_of([] {
                    generate_model_profile({"gpt", {{"hidden", 9999360}, {"heads", 1}, {"sequence", 10000000}}, 1000000, ""});
                  }),
                  "expected at most");
}

TEST(ModelGenerators, EveryModelPassesCheckAndTotals) {
  for (const ModelInfo& info : model_generators()) {
    const Profile profile = generate_model_profile({info.name, {}, std::nullopt, ""});
    EXPECT_NO_THROW(check_profile(profile, info.name));
    double total = 0;
    for (const Layer& layer : profile.layers) {
      EXPECT_FALSE(layer.op.empty()) << info.name << " " << layer.name;
      EXPECT_TRUE(layer.has_flops());
      total += *layer.forward_flops + *layer.backward_input_flops + *layer.backward_weight_flops;
    }
    EXPECT_EQ(profile_total_flops(profile), total);
    EXPECT_GT(total, 0) << info.name;
  }
}

TEST(ModelGenerators, JsonRoundTripKeepsAnalyticFields) {
  const Profile profile = generate_model_profile({"gnmt", {}, std::nullopt, "fp16"});
  const std::string text = profile_to_json(profile);
  const Profile back = parse_profile_json(text, "round trip");
  EXPECT_EQ(profile_to_json(back), text);
  EXPECT_EQ(back.dtype, "fp16");
  EXPECT_EQ(back.sequence_length, 48);
  ASSERT_EQ(back.layers.size(), profile.layers.size());
  for (std::size_t l = 0; l < back.layers.size(); ++l) {
    EXPECT_EQ(back.layers[l].forward_flops, profile.layers[l].forward_flops);
    EXPECT_EQ(back.layers[l].bytes_written, profile.layers[l].bytes_written);
    EXPECT_EQ(back.layers[l].op, profile.layers[l].op);
    EXPECT_FALSE(back.layers[l].times_given);
  }
  EXPECT_EQ(text.find("forward_s"), std::string::npos);
}

TEST(ProfileAnalyticFields, TimesAreOptionalWithFlops) {
  const Profile profile = parse_profile_json(
      R"({"name": "m", "micro_batch_size": 4, "dtype": "bf16", "layers": [
           {"name": "a", "forward_s": 1, "backward_s": 2, "output_bytes": 8, "parameter_bytes": 4, "op": "linear",
            "forward_flops": 10, "backward_input_flops": 10, "backward_weight_flops": 10, "bytes_read": 3},
           {"name": "b", "output_bytes": 8, "parameter_bytes": 0, "forward_flops": 5, "backward_input_flops": 5,
            "backward_weight_flops": 0}]})",
      "t.json");
  EXPECT_TRUE(profile.layers[0].times_given);
  EXPECT_EQ(*profile.layers[0].bytes_read, 3);
  EXPECT_FALSE(profile.layers[0].bytes_written.has_value());
  EXPECT_FALSE(profile.layers[1].times_given);
  EXPECT_EQ(profile.layers[1].forward_s, 0);
  EXPECT_EQ(profile_to_json(parse_profile_json(profile_to_json(profile), "again")), profile_to_json(profile));
}

TEST(ProfileAnalyticFields, Errors) {
  const auto parse = [](const std::string& layer) {
    return input_error_of([&] {
      parse_profile_json(R"({"name": "m", "micro_batch_size": 1, "layers": [)" + layer + "]}", "e.json");
    });
  };
  const std::string neither = parse(R"({"name": "x", "output_bytes": 1, "parameter_bytes": 0})");
  EXPECT_CONTAINS(neither, "e.json: layers[0] ('x')");
  EXPECT_CONTAINS(neither, "forward_flops");
  EXPECT_CONTAINS(parse(R"({"name": "x", "forward_s": 1, "output_bytes": 1, "parameter_bytes": 0, "forward_flops": 1,
                            "backward_input_flops": 1, "backward_weight_flops": 1})"),
                  "layers[0].backward_s");
  EXPECT_CONTAINS(parse(R"({"name": "x", "output_bytes": 1, "parameter_bytes": 0, "forward_flops": 1})"),
                  "backward_input_flops");
  EXPECT_CONTAINS(parse(R"({"name": "x", "output_bytes": 1, "parameter_bytes": 0, "forward_flops": -1,
                            "backward_input_flops": 1, "backward_weight_flops": 1})"),
                  "layers[0].forward_flops: expected a non-negative number");
  EXPECT_CONTAINS(parse(R"({"name": "x", "output_bytes": 1, "parameter_bytes": 0, "forward_flops": 1e30,
                            "backward_input_flops": 1, "backward_weight_flops": 1})"),
                  "floating-point operations");
  EXPECT_CONTAINS(parse(R"({"name": "x", "forward_s": 1, "backward_s": 1, "output_bytes": 1, "parameter_bytes": 0,
                            "op": "matmul"})"),
                  "layers[0].op: expected one of embedding");
  EXPECT_CONTAINS(parse(R"({"name": "x", "forward_s": 1, "backward_s": 1, "output_bytes": 1, "parameter_bytes": 0,
                            "flops": 1})"),
                  "'flops'");
  EXPECT_CONTAINS(parse(R"({"name": "x", "output_bytes": 1, "parameter_bytes": 0, "forward_flops": 1,
                            "backward_input_flops": 1, "backward_weight_flops": 1, "backward_input_s": 1,
                            "backward_weight_s": 1})"),
                  "backward_input_s");
  EXPECT_CONTAINS(input_error_of([] {
                    parse_profile_json(R"({"name": "m", "micro_batch_size": 1, "dtype": "fp8", "layers": [
                      {"name": "x", "forward_s": 1, "backward_s": 1, "output_bytes": 1, "parameter_bytes": 0}]})",
                                       "e.json");
                  }),
                  "dtype");
}

TEST(ProfileAnalyticFields, ScaleWithTheSamples) {
  const Profile profile = generate_model_profile({"mlp", {{"layers", 2}}, 4, ""});
  const ProfileAtSize scaled = profile_at_micro_batch_size(profile, 8, micro_batch_scaling("linear"));
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    EXPECT_EQ(*scaled.profile.layers[l].forward_flops, 2 * *profile.layers[l].forward_flops);
    EXPECT_EQ(*scaled.profile.layers[l].bytes_read, 2 * *profile.layers[l].bytes_read);
    EXPECT_FALSE(scaled.profile.layers[l].times_given);
  }
  // Interpolated between two measured sizes like the times.
  const Profile multi = parse_profile_json(
      R"({"name": "m", "micro_batch_sizes": [2, 6], "layers": [
           {"name": "a", "output_bytes": [2, 6], "parameter_bytes": 4, "forward_flops": [10, 30],
            "backward_input_flops": [10, 30], "backward_weight_flops": [20, 60], "bytes_written": [1, 5]}]})",
      "multi.json");
  const Profile at4 = profile_at_micro_batch_size(multi, 4);
  EXPECT_EQ(*at4.layers[0].forward_flops, 20);
  EXPECT_EQ(*at4.layers[0].backward_weight_flops, 40);
  EXPECT_EQ(*at4.layers[0].bytes_written, 3);
  EXPECT_FALSE(at4.layers[0].bytes_read.has_value());
  EXPECT_FALSE(at4.layers[0].times_given);
  EXPECT_EQ(profile_to_json(parse_profile_json(profile_to_json(multi), "again")), profile_to_json(multi));
}

}  // namespace
}  // namespace pipegrid
