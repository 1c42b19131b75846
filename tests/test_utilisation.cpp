// Issue 26: what a run implies (TFLOP/s per GPU, MFU, HFU with Megatron's
// definitions) and the check that no modelled pass runs above the hardware.

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/device_model.hpp"
#include "generators/model_generators.hpp"
#include "core/platform.hpp"
#include "core/profile.hpp"
#include "core/utilisation.hpp"
#include "expect_input_error.hpp"

namespace pipegrid {
namespace {

void expect_relative(double actual, double expected, double tolerance = 1e-9) {
  EXPECT_LE(std::fabs(actual - expected), tolerance * std::fabs(expected)) << actual << " vs " << expected;
}

Layer flops_layer(const std::string& name, const std::string& op, double forward, double input, double weight) {
  Layer layer;
  layer.name = name;
  layer.op = op;
  layer.forward_s = 1e-3;
  layer.backward_s = 2e-3;
  layer.parameter_bytes = 1e6;
  layer.forward_flops = forward;
  layer.backward_input_flops = input;
  layer.backward_weight_flops = weight;
  return layer;
}

PlatformSummary platform_of(const std::vector<std::string>& models) {
  PlatformSummary platform;
  for (std::size_t i = 0; i < models.size(); ++i) {
    HostInfo host;
    host.name = "gpu" + std::to_string(i);
    host.device_model = models[i];
    platform.hosts.push_back(host);
  }
  return platform;
}

TEST(FlopsUtilisation, ClosedFormWithTensorParallelismAndRecomputation) {
  Profile profile;
  profile.name = "hand";
  // Per tensor-parallel member (t = 2): the transformer layer's FLOPs are
  // halves, the others replicated whole.
  profile.layers = {flops_layer("embed", "embedding", 1e9, 0, 2e9), flops_layer("block", "transformer", 5e12, 5e12, 5e12),
                    flops_layer("head", "linear", 1e12, 1e12, 1e12)};
  const PlatformSummary platform = platform_of({"H100", "H100"});
  const int micro_batches = 8;
  const double time = 0.5;
  const FlopsUtilisation u = flops_utilisation(profile, 2, true, micro_batches, time, {"gpu0", "gpu1"}, platform, "bf16");
  // Model FLOPs per micro-batch: 3e9 + 2 x 15e12 + 3e12; the forwards: 1e9 + 2 x 5e12 + 1e12.
  const double model = 8 * (3e9 + 30e12 + 3e12), forward = 8 * (1e9 + 10e12 + 1e12);
  ASSERT_TRUE(u.model_flops && u.hardware_flops && u.peak_flops && u.tflops_per_gpu && u.mfu && u.hfu);
  expect_relative(*u.model_flops, model);
  expect_relative(*u.hardware_flops, model + forward);
  EXPECT_EQ(u.gpus, 4);
  expect_relative(*u.peak_flops, 4 * 989.5e12);
  expect_relative(*u.tflops_per_gpu, model / time / 4 / 1e12);
  expect_relative(*u.mfu, model / time / (4 * 989.5e12));
  expect_relative(*u.hfu, (model + forward) / time / (4 * 989.5e12));
  EXPECT_EQ(u.unavailable, "");
  // Without recomputation HFU is MFU.
  const FlopsUtilisation plain = flops_utilisation(profile, 2, false, micro_batches, time, {"gpu0", "gpu1"}, platform, "bf16");
  expect_relative(*plain.hfu, *plain.mfu);
}

TEST(FlopsUtilisation, GptModelFlopsAreMegatronsFormula) {
  // Narayanan et al. 2021, eq. (3) without recomputation (72 = 3 x 24):
  // F = 72 B s l h^2 (1 + s / (6 h) + V / (12 h l)) for f = 4 h. The
  // generator also counts the norms' and the loss's few FLOPs, which the
  // formula leaves out: they must stay below 0.5%.
  const long long layers = 24, hidden = 2048, sequence = 2048, vocabulary = 51200;
  const Profile profile = generate_model_profile(
      {"gpt", {{"layers", layers}, {"hidden", hidden}, {"heads", 16}, {"sequence", sequence}, {"vocabulary", vocabulary}}, 4, "bf16"});
  const double b = 4, s = sequence, l = layers, h = hidden, v = vocabulary;
  const double megatron = 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * h * l));
  const FlopsUtilisation u = flops_utilisation(profile, 1, false, 1, 1.0, {"gpu0"}, platform_of({"A100"}), "bf16");
  ASSERT_TRUE(u.model_flops);
  EXPECT_GE(*u.model_flops, megatron);
  EXPECT_LE(*u.model_flops, megatron * 1.005);
}

TEST(FlopsUtilisation, AbsentFiguresSayWhy) {
  Profile measured;
  measured.name = "measured";
  Layer timed;
  timed.name = "conv1";
  timed.forward_s = 1e-3;
  measured.layers = {timed, flops_layer("fc", "linear", 1e9, 1e9, 1e9)};
  const FlopsUtilisation none = flops_utilisation(measured, 1, false, 4, 1.0, {"gpu0"}, platform_of({"V100"}), "");
  EXPECT_FALSE(none.model_flops);
  EXPECT_FALSE(none.tflops_per_gpu);
  EXPECT_FALSE(none.mfu);
  EXPECT_NE(none.unavailable.find("1 of 2 layers of profile 'measured' have no FLOPs ('conv1')"), std::string::npos)
      << none.unavailable;

  Profile analytic;
  analytic.name = "a";
  analytic.layers = {flops_layer("fc", "linear", 1e12, 1e12, 1e12)};
  // A host without a device model: TFLOP/s per GPU, but no MFU.
  const FlopsUtilisation no_peak = flops_utilisation(analytic, 1, false, 2, 1.0, {"gpu0", "gpu1"}, platform_of({"A100", ""}), "bf16");
  ASSERT_TRUE(no_peak.tflops_per_gpu);
  expect_relative(*no_peak.tflops_per_gpu, 6e12 / 2 / 1e12);
  EXPECT_FALSE(no_peak.mfu);
  EXPECT_NE(no_peak.unavailable.find("'gpu1'"), std::string::npos) << no_peak.unavailable;
  // A device model without the dtype (a V100 has no bf16).
  const FlopsUtilisation no_dtype = flops_utilisation(analytic, 1, false, 2, 1.0, {"gpu0"}, platform_of({"V100"}), "bf16");
  EXPECT_FALSE(no_dtype.mfu);
  Profile measured_only;
  measured_only.name = "m";
  measured_only.layers = {timed};
  EXPECT_EQ(flops_utilisation(measured_only, 1, false, 1, 1.0, {"gpu0"}, platform_of({""}), "").unavailable,
            "profile 'm' gives no FLOPs (measured times only); no host has a device model (no peak FLOP/s)");
  EXPECT_NE(no_dtype.unavailable.find("V100 has no bf16"), std::string::npos) << no_dtype.unavailable;
}

TEST(FlopsUtilisation, FpgaPeakIsTheDspRateWithoutTheAssumedEfficiency) {
  Profile analytic;
  analytic.name = "a";
  analytic.layers = {flops_layer("fc", "linear", 1e12, 1e12, 1e12)};
  const FlopsUtilisation u = flops_utilisation(analytic, 1, false, 1, 1.0, {"gpu0"}, platform_of({"VCU118"}), "fp16");
  ASSERT_TRUE(u.peak_flops);
  expect_relative(*u.peak_flops, 2.0 * 6840 * 200e6);
}

TEST(PassesAboveHardware, OnlyModelledPassesAreChecked) {
  const DeviceModel& a100 = device_model("A100", "test");
  Profile profile;
  profile.name = "p";
  Layer fast = flops_layer("fast", "linear", 312e12, 0, 0);  // 312 TFLOP forward in 0.5 s: 624 TFLOP/s
  fast.times_given = false;
  fast.forward_s = 0.5;
  fast.bytes_read = fast.bytes_written = 0;
  Layer slow = fast;
  slow.name = "slow";
  slow.forward_s = 1.0;  // exactly the peak: allowed
  Layer streaming = flops_layer("streaming", "norm", 1, 0, 0);
  streaming.times_given = false;
  streaming.bytes_read = streaming.bytes_written = 2039e9;  // 4078 GB in 1 s: twice the bandwidth
  streaming.forward_s = 1.0;
  Layer measured = fast;
  measured.name = "measured";
  measured.times_given = true;  // a measured time may beat the FLOP count (Winograd)
  profile.layers = {fast, slow, streaming, measured};
  const std::vector<std::string> lines = passes_above_hardware(profile, a100, "bf16");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "layer 'fast': its forward runs at 624.0 TFLOP/s, above the A100 bf16 peak of 312.0 TFLOP/s");
  EXPECT_EQ(lines[1], "layer 'streaming': its forward moves 4078 GB/s, above the A100 memory bandwidth of 2039 GB/s");
  // A device's own times win over the base times.
  profile.layers = {fast};
  profile.layers[0].device_times["A100"] = LayerTimes{2.0, 0, std::nullopt, std::nullopt};
  EXPECT_TRUE(passes_above_hardware(profile, a100, "bf16").empty());
}

}  // namespace
}  // namespace pipegrid
