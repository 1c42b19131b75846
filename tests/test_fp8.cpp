// The FP8 recipe (core/fp8.hpp): the FP8 peaks of the catalogue, the GEMMs
// of the tensor-core model at the FP8 rate with Transformer Engine's casts,
// the refusals, and the memory terms (docs/semantics.md, FP8).

#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "core/device_model.hpp"
#include "core/fp8.hpp"
#include "core/gpu_kernels.hpp"
#include "core/profile.hpp"
#include "core/utilisation.hpp"
#include "expect_input_error.hpp"
#include "generators/model_generators.hpp"

namespace pipegrid {
namespace {

Profile gpt(bool flash, long long hidden = 1024, long long ffn = 0, bool swiglu = false) {
  std::map<std::string, long long> options = {{"layers", 1}, {"hidden", hidden}, {"heads", 16}, {"sequence", 2048},
                                              {"vocabulary", 51200}, {"flash_attention", flash ? 1 : 0}};
  if (ffn) options["ffn"] = ffn;
  if (swiglu) options["swiglu"] = 1;
  return generate_model_profile({"gpt", options, 2, "bf16"});
}

const Layer& layer_of(const Profile& profile, const std::string& op) {
  for (const Layer& layer : profile.layers)
    if (layer.op == op) return layer;
  throw std::logic_error("no layer of op " + op);
}

PlatformSummary one_host(const std::string& model) {
  PlatformSummary platform;
  platform.file = "p.xml";
  HostInfo host;
  host.name = "gpu0";
  host.device_model = model;
  platform.hosts.push_back(host);
  return platform;
}

TEST(Fp8Catalogue, HopperHasTheDenseFp8PeakTwiceItsBf16AndOthersNone) {
  for (const char* name : {"H100", "H200", "H800"}) {
    const DeviceModel& device = device_model(name, "test");
    EXPECT_DOUBLE_EQ(device.peak_fp8_flops, 1979e12) << name;
    EXPECT_NEAR(device.peak_fp8_flops / device.peak_bf16_flops, 2, 0.001) << name;
  }
  for (const char* name : {"V100", "A100", "VCU118"}) EXPECT_EQ(device_model(name, "test").peak_fp8_flops, 0) << name;
  const DeviceModel& h800 = device_model("H800", "test");
  const DeviceModel& h100 = device_model("H100", "test");
  EXPECT_EQ(h800.peak_bf16_flops, h100.peak_bf16_flops);
  EXPECT_EQ(h800.memory_bandwidth_Bps, h100.memory_bandwidth_Bps);
  EXPECT_EQ(h800.tensor_cores.sms, 132);
}

TEST(Fp8Kernels, LinearGemmsRunAtTheFp8PeakOthersAsBefore) {
  const DeviceModel& h100 = device_model("H100", "test");
  for (const bool flash : {true, false})
    for (const int t : {1, 4}) {
      const Profile profile = gpt(flash);
      const Layer& block = layer_of(profile, "transformer");
      const TensorParallelShare share{t, t > 1};
      const LayerKernels bf16 = layer_kernels(block, h100.tensor_cores, h100.peak_bf16_flops, 2, share);
      const LayerKernels fp8 = layer_kernels(block, h100.tensor_cores, h100.peak_bf16_flops, 2, share, h100.peak_fp8_flops);
      const double ratio = h100.peak_bf16_flops / h100.peak_fp8_flops;
      // The attention core (unfused: its batched GEMMs) stays at the bf16 rate.
      const double core_gemm = bf16.attention_core.gemm_s;
      EXPECT_DOUBLE_EQ(fp8.attention_core.gemm_s, core_gemm);
      EXPECT_NEAR(fp8.forward.gemm_s, (bf16.forward.gemm_s - core_gemm) * ratio + core_gemm, 1e-12 * bf16.forward.gemm_s);
      EXPECT_EQ(fp8.forward.attention_forward_s, bf16.forward.attention_forward_s);
      EXPECT_EQ(fp8.input.attention_backward_s, bf16.input.attention_backward_s);
      EXPECT_NEAR(fp8.weight.gemm_s, bf16.weight.gemm_s * ratio, 1e-12 * bf16.weight.gemm_s);
      if (flash) {
        EXPECT_NEAR(fp8.input.gemm_s, bf16.input.gemm_s * ratio, 1e-12 * bf16.input.gemm_s);
      }
      // The casts: each GEMM's input in the forward, each output gradient
      // in the input gradient, e + 2 bytes per value, one kernel each.
      const TransformerShape& g = *block.transformer_shape;
      const double tokens = g.batch * g.sequence, rows = t > 1 ? tokens / t : tokens;
      const double h = g.hidden, f = g.ffn, kv = g.kv_columns;
      EXPECT_NEAR(fp8.forward.memory_bytes - bf16.forward.memory_bytes, 4 * (rows * h + tokens * h / t + rows * h + tokens * f / t),
                  1e-6);
      EXPECT_NEAR(fp8.input.memory_bytes - bf16.input.memory_bytes,
                  4 * (tokens * (h + 2 * kv) / t + rows * h + tokens * f / t + rows * h), 1e-6);
      EXPECT_EQ(fp8.forward.kernels - bf16.forward.kernels, 4);
      EXPECT_EQ(fp8.input.kernels - bf16.input.kernels, 4);
      EXPECT_EQ(fp8.weight.memory_bytes, bf16.weight.memory_bytes);
    }
}

TEST(Fp8Kernels, EmbeddingHeadAndLossStayInBf16) {
  const DeviceModel& h100 = device_model("H100", "test");
  const Profile profile = gpt(true);
  for (const char* op : {"embedding", "norm", "linear", "loss"}) {
    const Layer& layer = layer_of(profile, op);
    const LayerKernels bf16 = layer_kernels(layer, h100.tensor_cores, h100.peak_bf16_flops, 2, {});
    const LayerKernels fp8 = layer_kernels(layer, h100.tensor_cores, h100.peak_bf16_flops, 2, {}, h100.peak_fp8_flops);
    for (const auto& [a, b] : {std::pair{&bf16.forward, &fp8.forward}, std::pair{&bf16.input, &fp8.input},
                               std::pair{&bf16.weight, &fp8.weight}}) {
      EXPECT_EQ(a->gemm_s, b->gemm_s) << op;
      EXPECT_EQ(a->memory_bytes, b->memory_bytes) << op;
    }
  }
}

TEST(Fp8Kernels, ABlockRunsFasterButNoFasterThanTheFp8PeakAllows) {
  const DeviceModel& h100 = device_model("H100", "test");
  const Profile profile = gpt(true, 4096);
  const Layer& block = layer_of(profile, "transformer");
  const ShapedTimes bf16 = shaped_layer_times(block, h100, "bf16", {});
  const ShapedTimes fp8 = shaped_layer_times(block, h100, "bf16", {}, true);
  EXPECT_LT(fp8.times.forward_s, bf16.times.forward_s);
  EXPECT_GT(fp8.times.forward_s, bf16.times.forward_s / 2);
  EXPECT_LT(*block.forward_flops / fp8.times.forward_s, h100.peak_fp8_flops);
  EXPECT_CONTAINS(testutil::input_error_of([&] { shaped_layer_times(block, device_model("A100", "test"), "bf16", {}, true); }),
                  "device model A100 (NVIDIA A100 SXM4 80 GB) has no FP8 tensor cores");
}

TEST(Fp8Recipe, RefusalsSayWhatWasExpectedAndFound) {
  EXPECT_NO_THROW(check_fp8_recipe("", "fp32"));
  EXPECT_NO_THROW(check_fp8_recipe("hybrid", "bf16"));
  EXPECT_NO_THROW(check_fp8_recipe("e4m3", "fp16"));
  EXPECT_EQ(testutil::input_error_of([] { check_fp8_recipe("e5m2", "bf16"); }),
            "--fp8-format: expected hybrid (E4M3 forward, E5M2 gradients) or e4m3, found 'e5m2'");
  EXPECT_EQ(testutil::input_error_of([] { check_fp8_recipe("hybrid", "fp32"); }),
            "--fp8-format hybrid: FP8 is a recipe on top of 16-bit mixed precision (Megatron: --bf16 or --fp16 with "
            "--fp8-format); expected dtype bf16 or fp16, found fp32");
  EXPECT_EQ(testutil::input_error_of([] { check_fp8_recipe("hybrid", ""); }),
            "--fp8-format hybrid: FP8 is a recipe on top of 16-bit mixed precision (Megatron: --bf16 or --fp16 with "
            "--fp8-format); expected dtype bf16 or fp16, found fp32 (no dtype given)");
}

TEST(Fp8Recipe, HostsWithoutFp8AndLayersNotTimedByKernelsAreRefused) {
  const Profile profile = gpt(true);
  EXPECT_NO_THROW(check_fp8_hosts(profile, one_host("H100"), "hybrid"));
  EXPECT_EQ(testutil::input_error_of([&] { check_fp8_hosts(profile, one_host("A100"), "hybrid"); }),
            "--fp8-format hybrid: p.xml: host 'gpu0' is a A100 (NVIDIA A100 SXM4 80 GB), which has no FP8 tensor cores; "
            "FP8 runs on H100, H200 or H800");
  EXPECT_CONTAINS(testutil::input_error_of([&] { check_fp8_hosts(profile, one_host("VCU118"), "e4m3"); }),
                  "host 'gpu0' is a VCU118");
  EXPECT_CONTAINS(testutil::input_error_of([&] { check_fp8_hosts(profile, one_host(""), "e4m3"); }),
                  "host 'gpu0' has no device model");
  Profile measured = profile;
  measured.layers[1].times_given = true;
  EXPECT_CONTAINS(testutil::input_error_of([&] { check_fp8_hosts(measured, one_host("H100"), "hybrid"); }),
                  "layer 1 'block1' has measured times");
  Profile unshaped = profile;
  unshaped.layers[1].transformer_shape.reset();
  EXPECT_CONTAINS(testutil::input_error_of([&] { check_fp8_hosts(unshaped, one_host("H100"), "hybrid"); }),
                  "layer 1 'block1' has no transformer_shape");
}

TEST(Fp8Memory, GemmParametersAreTheBlocksLinearWeights) {
  const Profile profile = gpt(true, 1024);
  EXPECT_DOUBLE_EQ(fp8_gemm_parameters(layer_of(profile, "transformer")), 12.0 * 1024 * 1024);  // 4 h^2 + 8 h^2
  for (const char* op : {"embedding", "norm", "linear", "loss"}) EXPECT_EQ(fp8_gemm_parameters(layer_of(profile, op)), 0) << op;
  const Profile swiglu = gpt(true, 1024, 2816, true);
  EXPECT_DOUBLE_EQ(fp8_gemm_parameters(layer_of(swiglu, "transformer")), 4.0 * 1024 * 1024 + 3.0 * 1024 * 2816);
  EXPECT_EQ(kFp8WeightCacheBytesPerParameter, 2);
  EXPECT_EQ(fp8_weight_cast_bytes_per_parameter(2), 4);
}

TEST(Fp8Memory, SavedGemmInputsTakeOneByte) {
  for (const bool flash : {true, false}) {
    Profile profile = gpt(flash);
    const Layer before = layer_of(profile, "transformer");
    const Layer embedding_before = layer_of(profile, "embedding");
    apply_fp8_activations(profile, 2);
    const Layer& after = layer_of(profile, "transformer");
    const TransformerShape& g = *before.transformer_shape;
    const double n = g.batch * g.sequence, h = g.hidden, f = g.ffn;
    // Norm outputs (2 N h) and the down projection's input (N f) at 1 byte
    // instead of 2; the output projection's input: an FP8 copy beside flash
    // attention's bf16 output (+N h), or 1 byte instead of 2 (-N h).
    const double expected = -(2 * n * h + n * f) + (flash ? n * h : -n * h);
    EXPECT_NEAR(*after.activation_bytes - *before.activation_bytes, expected, 1e-6) << flash;
    // Of what tensor parallelism keeps whole, the norms' outputs shrink by N h each.
    EXPECT_NEAR(after.replicated_activation_fraction * *after.activation_bytes,
                before.replicated_activation_fraction * *before.activation_bytes - 2 * n * h, 1e-3);
    // The attention core keeps what it kept.
    EXPECT_NEAR(*after.attention_core_stash_share * *after.activation_bytes,
                *before.attention_core_stash_share * *before.activation_bytes, 1e-3);
    EXPECT_EQ(layer_of(profile, "embedding").activation_bytes, embedding_before.activation_bytes);
  }
}

TEST(Fp8Utilisation, MfuStaysAgainstBf16AndTheFp8PeakIsReported) {
  Profile profile = gpt(true, 4096);
  PlatformSummary platform = one_host("H100");
  fill_analytic_times(profile, platform, FpgaWeights::WholeModel, {}, "hybrid");
  double seconds = 0;
  for (const Layer& layer : profile.layers) seconds += layer.forward_s + layer.backward_s;
  const FlopsUtilisation u = flops_utilisation(profile, 1, false, 1, seconds, {"gpu0"}, platform, "bf16", false, {}, true);
  ASSERT_TRUE(u.mfu && u.mfu_of_fp8_peak && u.peak_fp8_flops);
  EXPECT_DOUBLE_EQ(*u.peak_flops, 989.5e12);
  EXPECT_DOUBLE_EQ(*u.peak_fp8_flops, 1979e12);
  EXPECT_NEAR(*u.mfu_of_fp8_peak, *u.mfu * 989.5 / 1979, 1e-12);
  EXPECT_LT(*u.mfu_of_fp8_peak, 1);
  EXPECT_TRUE(passes_above_hardware(profile, device_model("H100", "test"), "bf16", true).empty());
  const FlopsUtilisation without = flops_utilisation(profile, 1, false, 1, seconds, {"gpu0"}, platform, "bf16");
  EXPECT_FALSE(without.peak_fp8_flops);
  EXPECT_FALSE(without.mfu_of_fp8_peak);
}

}  // namespace
}  // namespace pipegrid
