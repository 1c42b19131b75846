// The tensor-core kernel model (core/gpu_kernels.hpp), its fit, and how
// device models use it (core/device_model.hpp).

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/device_model.hpp"
#include "core/gpu_kernels.hpp"
#include "core/precision.hpp"
#include "core/partition.hpp"
#include "core/profile.hpp"
#include "core/recompute.hpp"
#include "expect_input_error.hpp"
#include "generators/model_generators.hpp"

namespace pipegrid {
namespace {

constexpr double kPeak = 312e12;

void expect_input_error(const std::function<void()>& action, const std::string& part) {
  EXPECT_CONTAINS(testutil::input_error_of(action), part);
}

TEST(GemmModel, OneFullWaveOfLargeTilesRunsAtThePeak) {
  // 108 tiles of 256 x 128 (9 x 12) fill one wave of an A100 exactly.
  const GemmShape gemm{256 * 9, 128 * 12, 4096, 1};
  const double flops = 2 * gemm.m * gemm.n * gemm.k;
  EXPECT_NEAR(gemm_unit_time_s(gemm, 108, kPeak), flops / kPeak, 1e-9 * flops / kPeak);
  TensorCoreModel model{108, 0.8, 0.7, 0.55, 0.5, 3e-6};
  KernelSums one_gemm;
  one_gemm.gemm_s = gemm_unit_time_s(gemm, model.sms, kPeak);
  one_gemm.kernels = 1;
  EXPECT_NEAR(one_gemm.seconds(model, 1e12), flops / kPeak / 0.8 + 3e-6, 1e-9 * flops / kPeak);
}

TEST(GemmModel, AWaveOneTileOverPaysForTheWholeWave) {
  // 109 tiles of 256 x 128: two waves of the large tile, or smaller tiles
  // (128 x 128: 218 of 216 slots, two waves too): never faster than 2 x
  // the full wave's time of 128x128 tiles over the same K.
  const GemmShape full{256 * 9, 128 * 12, 4096, 1};
  const GemmShape over{256 * 9 + 256, 128 * 12, 4096, 1};
  const double one_wave = gemm_unit_time_s(full, 108, kPeak);
  const double flops_over = 2 * over.m * over.n * over.k;
  EXPECT_GT(gemm_unit_time_s(over, 108, kPeak), flops_over / kPeak * (1 + 1e-9));
  EXPECT_GT(gemm_unit_time_s(over, 108, kPeak), one_wave);
}

TEST(GemmModel, NeverAboveThePeakAndZeroWithoutWork) {
  for (const double m : {1.0, 7.0, 64.0, 1000.0, 8192.0, 65536.0})
    for (const double n : {1.0, 96.0, 2304.0, 6144.0})
      for (const double k : {1.0, 64.0, 768.0, 12288.0})
        for (const int sms : {80, 108, 132}) {
          const double t = gemm_unit_time_s({m, n, k, 3}, sms, kPeak);
          EXPECT_GE(t, 3 * 2 * m * n * k / kPeak * (1 - 1e-12)) << m << " " << n << " " << k << " " << sms;
        }
  EXPECT_EQ(gemm_unit_time_s({0, 10, 10, 1}, 108, kPeak), 0);
  EXPECT_EQ(gemm_unit_time_s({10, 10, -1, 1}, 108, kPeak), 0);
}

Profile gpt(long long hidden, long long heads, long long batch, bool flash, const std::string& dtype = "bf16") {
  return generate_model_profile({"gpt",
                                 {{"layers", 2}, {"hidden", hidden}, {"heads", heads}, {"sequence", 2048},
                                  {"vocabulary", 51200}, {"flash_attention", flash ? 1 : 0}},
                                 batch, dtype});
}

/// A platform of one host, gpu0, of device model A100.
PlatformSummary one_a100() {
  PlatformSummary platform;
  platform.file = "p.xml";
  HostInfo host;
  host.name = "gpu0";
  host.device_model = "A100";
  platform.hosts.push_back(host);
  return platform;
}

TEST(TransformerKernels, EveryGptLayerCarriesItsShape) {
  const Profile profile = gpt(1024, 16, 2, true);
  for (const Layer& layer : profile.layers) {
    ASSERT_TRUE(layer.transformer_shape) << layer.name;
    EXPECT_EQ(layer.transformer_shape->batch, 2);
    EXPECT_EQ(layer.transformer_shape->hidden, 1024);
    EXPECT_TRUE(layer.transformer_shape->flash_attention);
  }
}

TEST(TransformerKernels, GemmWorkMatchesTheGeneratorsFlopsAndSplitsOverTensorParallelMembers) {
  // With every GEMM dimension a multiple of 256, no tile is partial: the
  // GEMM seconds at efficiency 1 are at least FLOPs / peak and within the
  // wave quantisation of it (under 10% for these sizes).
  const Profile profile = gpt(4096, 32, 4, true);
  const Layer& block = profile.layers[1];
  ASSERT_EQ(block.op, "transformer");
  TensorCoreModel model{108, 1, 1, 1, 1, 0};
  const LayerKernels whole = layer_kernels(block, model, kPeak, 2, {1, false});
  const double h = 4096, tokens = 4 * 2048.0;
  const double gemm_flops = 2 * tokens * (3 * h * h + h * h + 4 * h * h + 4 * h * h);  // QKV, projection, MLP
  EXPECT_GE(whole.forward.gemm_s, gemm_flops / kPeak * (1 - 1e-12));
  EXPECT_LE(whole.forward.gemm_s, gemm_flops / kPeak * 1.10);
  EXPECT_GE(whole.weight.gemm_s, gemm_flops / kPeak * (1 - 1e-12));
  // Flash attention: 4 B s^2 h forward, halved by the causal mask; 2.5 x that backward.
  const double attention = 4 * 4 * 2048.0 * 2048 * h * 0.5;
  EXPECT_NEAR(whole.forward.attention_forward_s, attention / kPeak, 1e-12);
  EXPECT_NEAR(whole.input.attention_backward_s, 2.5 * attention / kPeak, 1e-12);
  EXPECT_NEAR(whole.attention_core.attention_forward_s, attention / kPeak, 1e-12);
  // Four members: a quarter of the GEMM work each (within quantisation),
  // the norms' bytes whole without sequence parallelism, a quarter with it.
  const LayerKernels member = layer_kernels(block, model, kPeak, 2, {4, false});
  const LayerKernels sequence = layer_kernels(block, model, kPeak, 2, {4, true});
  EXPECT_GE(member.forward.gemm_s, gemm_flops / 4 / kPeak * (1 - 1e-12));
  EXPECT_LE(member.forward.gemm_s, gemm_flops / 4 / kPeak * 1.10);
  EXPECT_NEAR(member.forward.attention_forward_s, whole.forward.attention_forward_s / 4, 1e-15);
  EXPECT_LT(sequence.forward.memory_bytes, member.forward.memory_bytes);
  EXPECT_LT(member.forward.memory_bytes, whole.forward.memory_bytes);
}

TEST(TransformerKernels, AHeadWithoutVocabularyIsNotSplit) {
  // Tensor parallelism splits a head or loss over the vocabulary only when
  // the layer gives `vocabulary`; without it the member runs it whole.
  const Profile profile = gpt(1024, 16, 1, true);
  Layer head = profile.layers[profile.layers.size() - 2];
  ASSERT_EQ(head.op, "linear");
  TensorCoreModel model{108, 1, 1, 1, 1, 0};
  const double split = layer_kernels(head, model, kPeak, 2, {4, false}).forward.gemm_s;
  head.vocabulary.reset();
  EXPECT_NEAR(layer_kernels(head, model, kPeak, 2, {4, false}).forward.gemm_s,
              layer_kernels(head, model, kPeak, 2, {1, false}).forward.gemm_s, 1e-15);
  EXPECT_GT(layer_kernels(head, model, kPeak, 2, {4, false}).forward.gemm_s, 3 * split);
}

TEST(TransformerKernels, UnfusedAttentionMovesTheScores) {
  const Profile flash = gpt(2048, 16, 1, true), unfused = gpt(2048, 16, 1, false);
  TensorCoreModel model{108, 1, 1, 1, 1, 0};
  const LayerKernels f = layer_kernels(flash.layers[1], model, kPeak, 2, {});
  const LayerKernels u = layer_kernels(unfused.layers[1], model, kPeak, 2, {});
  const double scores = 1 * 16 * 2048.0 * 2048;
  // Softmax (2 e) and dropout (2 e + 1 mask byte) per score, forward.
  EXPECT_NEAR(u.attention_core.memory_bytes, scores * (2 * 2 + 2 * 2 + 1), 1e-6);
  EXPECT_EQ(f.attention_core.memory_bytes, 0);
  EXPECT_NEAR(u.forward.memory_bytes - f.forward.memory_bytes, scores * 9, 1e-6);
  EXPECT_EQ(u.forward.attention_forward_s, 0);
  EXPECT_GT(u.attention_core.gemm_s, 0);
}

TEST(TransformerKernels, NoPassOfAnyGpuRunsAboveItsPeak) {
  for (const DeviceModel& device : device_catalogue()) {
    if (device.kind != DeviceKind::Gpu) continue;
    for (const std::string dtype : {"fp16", "bf16"}) {
      if ((dtype == "bf16" ? device.peak_bf16_flops : device.peak_fp16_flops) <= 0) continue;
      for (const bool flash : {true, false})
        for (const int t : {1, 2, 8}) {
          const Profile profile = gpt(4096, 32, 2, flash, dtype);
          for (const Layer& layer : profile.layers) {
            const ShapedTimes shaped = shaped_layer_times(layer, device, dtype, {t, t > 1});
            const double peak = device.peak_flops(dtype);
            // The layer's FLOPs of one member: at most 1 / t of the whole (the embedding runs whole).
            const double split = layer.op == "embedding" ? 1 : t;
            if (*layer.forward_flops > 0) {
              EXPECT_LE(*layer.forward_flops / split / shaped.times.forward_s, peak * kMaxComputeEfficiency * (1 + 1e-9))
                  << device.name << " " << layer.name;
            }
            const double bytes = *layer.bytes_read + *layer.bytes_written;
            EXPECT_GT(shaped.times.forward_s, 0) << device.name << " " << layer.name << " " << bytes;
            EXPECT_GE(shaped.attention_core_time_share, 0);
            EXPECT_LE(shaped.attention_core_time_share, 1);
          }
        }
    }
  }
}

TEST(TensorCoreFit, RecoversKnownConstantsExactly) {
  const TensorCoreModel truth{108, 0.8, 0.7, 0.55, 0.5, 4e-6};
  const double bandwidth = 2e12;
  std::vector<TensorCoreSample> samples;
  for (const double hidden : {1024.0, 2048.0, 4096.0})
    for (const double batch : {1.0, 4.0}) {
      Layer layer;
      layer.name = "b";
      layer.op = "transformer";
      TransformerShape shape;
      shape.batch = batch;
      shape.sequence = 1024;
      shape.hidden = hidden;
      shape.heads = hidden / 128;
      shape.kv_columns = hidden;
      shape.ffn = 4 * hidden;
      shape.flash_attention = true;
      layer.transformer_shape = shape;
      const LayerKernels k = layer_kernels(layer, truth, kPeak, 2, {});
      for (const KernelSums* pass : {&k.forward, &k.input, &k.weight})
        samples.push_back({*pass, pass->seconds(truth, bandwidth)});
    }
  const TensorCoreModel fitted = fit_tensor_cores(samples, truth, bandwidth);
  EXPECT_NEAR(fitted.gemm_efficiency, 0.8, 1e-9);
  EXPECT_NEAR(fitted.memory_efficiency, 0.5, 1e-9);
  EXPECT_NEAR(fitted.kernel_overhead_s, 4e-6, 1e-12);
  // Faster than the caps allow: held at them.
  for (TensorCoreSample& sample : samples) sample.measured_s *= 0.5;
  const TensorCoreModel capped = fit_tensor_cores(samples, truth, bandwidth);
  EXPECT_NEAR(capped.gemm_efficiency, kMaxComputeEfficiency, 1e-12);
  EXPECT_LE(capped.memory_efficiency, kMaxMemoryEfficiency + 1e-12);
  EXPECT_GE(capped.kernel_overhead_s, 0);
  expect_input_error([&] { fit_tensor_cores({samples[0], samples[1]}, truth, bandwidth); }, "at least 3 samples");
}

TEST(TensorCoreModel, FillAnalyticTimesStoresTTimesTheMembersTimesOfSplitLayers) {
  Profile whole = gpt(2048, 16, 1, true);
  Profile split = whole;
  const PlatformSummary platform = one_a100();
  fill_analytic_times(whole, platform);
  const std::vector<std::string> notes = fill_analytic_times(split, platform, FpgaWeights::WholeModel, {4, false});
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.front().find("kernel by kernel"), std::string::npos) << notes.front();
  EXPECT_NE(notes.front().find("as one of 4 tensor-parallel members"), std::string::npos) << notes.front();
  const DeviceModel& a100 = *find_device_model("A100");
  for (std::size_t l = 0; l < whole.layers.size(); ++l) {
    const Layer& layer = split.layers[l];
    const ShapedTimes member = shaped_layer_times(layer, a100, "bf16", {4, false});
    const double divided = layer.op == "embedding" || layer.op == "norm" ? 1 : 4;
    EXPECT_NEAR(layer.forward_s, divided * member.times.forward_s, 1e-15) << layer.name;
    EXPECT_NEAR(layer.backward_s, divided * member.times.backward_s, 1e-15) << layer.name;
    // A member's GEMMs are smaller: never faster than a quarter of the whole.
    if (layer.op == "transformer") {
      EXPECT_GE(layer.forward_s, whole.layers[l].forward_s * (1 - 1e-12));
      ASSERT_TRUE(layer.attention_core_time_share);
      EXPECT_GT(*layer.attention_core_time_share, 0);
    }
  }
}

TEST(TensorCoreModel, SelectiveRecomputeAddsTheAttentionCoresTimeNotItsFlops) {
  Profile profile = gpt(2048, 16, 1, false);
  const PlatformSummary platform = one_a100();
  fill_analytic_times(profile, platform);
  const Partition partition = uniform_partition(profile, {"gpu0"}, 1);
  const std::vector<StageRecompute> stages = stage_recompute(profile, partition, {"selective", "", 0});
  ASSERT_EQ(stages.size(), 1u);
  double expected = 0;
  for (const Layer& layer : profile.layers)
    if (layer.op == "transformer") {
      ASSERT_TRUE(layer.attention_core_time_share);
      // Unfused attention's softmax and dropout move the scores: a larger share of the time than of the FLOPs.
      EXPECT_GT(*layer.attention_core_time_share, *layer.attention_core_flops_share);
      expected += *layer.attention_core_time_share * layer.forward_s;
    }
  EXPECT_NEAR(stages[0].recompute_s, expected, 1e-15);
}

TEST(TransformerShapeJson, RoundTripsAndRejectsBadValues) {
  const Profile profile = gpt(1024, 16, 2, false);
  const Profile read = parse_profile_json(profile_to_json(profile), "p.json");
  ASSERT_EQ(read.layers.size(), profile.layers.size());
  for (std::size_t l = 0; l < read.layers.size(); ++l) {
    ASSERT_TRUE(read.layers[l].transformer_shape);
    const TransformerShape& a = *read.layers[l].transformer_shape;
    const TransformerShape& b = *profile.layers[l].transformer_shape;
    EXPECT_EQ(a.batch, b.batch);
    EXPECT_EQ(a.hidden, b.hidden);
    EXPECT_EQ(a.kv_columns, b.kv_columns);
    EXPECT_EQ(a.vocabulary, b.vocabulary);
    EXPECT_EQ(a.flash_attention, b.flash_attention);
    EXPECT_EQ(a.position_table, b.position_table);
  }
  const std::string layer = R"({"name": "b", "op": "transformer", "forward_flops": 1, "backward_input_flops": 1,
      "backward_weight_flops": 1, "output_bytes": 1, "parameter_bytes": 1, "transformer_shape": )";
  const auto with_shape = [&](const std::string& shape, const std::string& op = "transformer") {
    std::string text = layer + shape + "}";
    text.replace(text.find("transformer"), 11, op);
    return R"({"name": "x", "micro_batch_size": 1, "input_bytes": 1, "layers": [)" + text + "]}";
  };
  const std::string good = R"({"batch": 1, "sequence": 8, "hidden": 16, "heads": 2, "kv_columns": 16, "ffn": 64, "vocabulary": 0})";
  EXPECT_NO_THROW(parse_profile_json(with_shape(good), "p.json"));
  expect_input_error([&] { parse_profile_json(with_shape(R"({"batch": 1})"), "p.json"); },
                     "p.json: layers[0].transformer_shape.sequence: expected a number > 0");
  expect_input_error(
      [&] {
        parse_profile_json(with_shape(R"({"batch": 1, "sequence": 8, "hidden": -16, "heads": 2, "kv_columns": 16, "ffn": 64, "vocabulary": 0})"),
                           "p.json");
      },
      "transformer_shape.hidden: expected a number > 0 (at most 1e12), found -16");
  expect_input_error([&] { parse_profile_json(with_shape(R"({"batch": 1, "sequence": 8, "hidden": 16, "heads": 2, "kv_columns": 16, "ffn": 64, "vocabulary": 0, "swiglu": 1})"), "p.json"); },
                     "transformer_shape.swiglu: expected true or false, found 1");
  expect_input_error([&] { parse_profile_json(with_shape(R"({"batch": 1, "sequence": 8, "hidden": 16, "heads": 2, "kv_columns": 16, "ffn": 64, "vocabulary": 0, "depth": 1})"), "p.json"); },
                     "depth");
  expect_input_error([&] { parse_profile_json(with_shape(good, "conv2d"), "p.json"); },
                     "a transformer_shape needs op embedding, transformer, norm, linear or loss, found op 'conv2d'");
}

TEST(OptimizerStep, BytesPerParameterAsMegatronSteps) {
  EXPECT_EQ(optimizer_step_bytes_per_parameter("fp16", "adam"), 46);
  EXPECT_EQ(optimizer_step_bytes_per_parameter("bf16", "adam"), 38);
  EXPECT_EQ(optimizer_step_bytes_per_parameter("fp32", "adam"), 32);
  EXPECT_EQ(optimizer_step_bytes_per_parameter("fp32", "sgd"), 16);
  EXPECT_EQ(optimizer_step_bytes_per_parameter("bf16", "momentum"), 30);
}

TEST(OptimizerStep, GpuHostsWithoutADeclaredStepTakeTheDevicesStreamingRate) {
  PlatformSummary platform;
  HostInfo declared, modelled, bare;
  declared.name = "a";
  declared.device_model = "A100";
  declared.optimizer_step_rate_Bps = 1e9;
  modelled.name = "b";
  modelled.device_model = "H100";
  bare.name = "c";
  platform.hosts = {declared, modelled, bare};
  EXPECT_EQ(give_device_optimizer_steps(platform, 19), 1);
  EXPECT_EQ(*platform.hosts[0].optimizer_step_rate_Bps, 1e9);
  EXPECT_NEAR(*platform.hosts[1].optimizer_step_rate_Bps, 3350e9 * kMaxMemoryEfficiency / 19, 1e-3);
  EXPECT_FALSE(platform.hosts[2].has_optimizer_step());
  EXPECT_EQ(give_device_optimizer_steps(platform, 0), 0);
}

}  // namespace
}  // namespace pipegrid
