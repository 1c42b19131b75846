// Device models (issue 15): the catalogue, the roofline on hand numbers, the
// Eigen fit on synthetic data, FPGAs on and off chip, fill_analytic_times,
// PipeDream operator FLOPs, and the device_model host property.

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/device_model.hpp"
#include "core/error.hpp"
#include "core/pipedream_flops.hpp"
#include "core/platform.hpp"
#include "core/profile.hpp"
#include "expect_input_error.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

void expect_relative(double actual, double expected, double tolerance = 1e-9) {
  EXPECT_LE(std::fabs(actual - expected), tolerance * std::fabs(expected)) << actual << " vs " << expected;
}

TEST(DeviceCatalogue, ListsTheSixEntries) {
  EXPECT_EQ(device_catalogue_names(), "V100, A100, H100, H200, H800, VCU118, VCU129");
  const DeviceModel& v100 = device_model("V100", "test");
  EXPECT_EQ(v100.kind, DeviceKind::Gpu);
  EXPECT_DOUBLE_EQ(v100.peak_flops("fp32"), 14e12);
  EXPECT_DOUBLE_EQ(v100.peak_flops(""), 14e12);
  EXPECT_DOUBLE_EQ(v100.peak_flops("fp16"), 112e12);
  EXPECT_DOUBLE_EQ(device_model("H100", "test").peak_flops("bf16"), 989.5e12);
  EXPECT_DOUBLE_EQ(device_model("H200", "test").memory_bandwidth_Bps, 4.8e12);
  const DeviceModel& vcu129 = device_model("VCU129", "test");
  EXPECT_EQ(vcu129.kind, DeviceKind::Fpga);
  EXPECT_EQ(vcu129.dsp_slices, 12288);
  EXPECT_DOUBLE_EQ(vcu129.peak_flops("fp16"), 2.0 * 12288 * 200e6 * 0.8);
  EXPECT_EQ(find_device_model("v100"), nullptr);  // names are exact
}

TEST(DeviceCatalogue, UnknownNamesAndUnsupportedDtypes) {
  const std::string unknown = input_error_of([] { device_model("B200", "p.xml: host 'g'"); });
  EXPECT_CONTAINS(unknown, "p.xml: host 'g'");
  EXPECT_CONTAINS(unknown, "'B200'");
  EXPECT_CONTAINS(unknown, "V100, A100, H100, H200, H800, VCU118, VCU129");
  EXPECT_CONTAINS(input_error_of([] { device_model("V100", "t").peak_flops("bf16"); }), "no bf16");
  EXPECT_CONTAINS(input_error_of([] { device_model("VCU118", "t").peak_flops("fp32"); }), "16-bit");
  EXPECT_CONTAINS(input_error_of([] { device_model("A100", "t").peak_flops("int8"); }), "'int8'");
}

TEST(DeviceCatalogue, OtherGpusScaleTheV100Curves) {
  const DeviceModel& v100 = device_model("V100", "t");
  const DeviceModel& h100 = device_model("H100", "t");
  for (int c = 0; c < kOpClassCount; ++c) {
    EXPECT_DOUBLE_EQ(h100.efficiency[c].forward.compute.e_max, v100.efficiency[c].forward.compute.e_max);
    expect_relative(h100.efficiency[c].forward.compute.half, v100.efficiency[c].forward.compute.half * 67.0 / 14.0);
    expect_relative(h100.efficiency[c].backward.memory.half, v100.efficiency[c].backward.memory.half * 3350.0 / 900.0);
  }
}

PassEfficiency hand_curves() {
  PassEfficiency curves;
  curves.compute = {0.5, 1e9};
  curves.memory = {0.8, 0};
  return curves;
}

TEST(Roofline, ComputeBoundAndMemoryBoundOnHandNumbers) {
  const PassEfficiency curves = hand_curves();
  // compute (1e10 + 1e9) / (1e12 x 0.5) = 0.022 s; memory 1e6 / 0.8e11.
  expect_relative(gpu_pass_time({1e10, 1e6, 1}, curves, 1e12, 1e11, 1e-6), 0.022 + 1e-6);
  // memory 1e10 / (1e11 x 0.8) = 0.125 s beats compute (1e6 + 1e9) / 5e11.
  expect_relative(gpu_pass_time({1e6, 1e10, 1}, curves, 1e12, 1e11, 1e-6), 0.125 + 1e-6);
  // Four sequential steps of 2.5e9 FLOPs each: (1e10 + 4e9) / 5e11.
  expect_relative(gpu_pass_time({1e10, 0, 4}, curves, 1e12, 1e11, 0), 0.028);
  EXPECT_EQ(gpu_pass_time({0, 0, 1}, curves, 1e12, 1e11, 1e-6), 0);
  // The efficiency form: e(s) = e_max s / (s + half).
  EXPECT_DOUBLE_EQ(curves.compute.at(1e9), 0.25);
  EXPECT_DOUBLE_EQ(curves.compute.at(0), 0);
}

TEST(Roofline, LayerPassesAndTheirSplit) {
  DeviceModel device = device_model("V100", "t");
  for (ClassEfficiency& efficiency : device.efficiency) efficiency.forward = efficiency.backward = hand_curves();
  device.peak_fp32_flops = 1e12;
  device.memory_bandwidth_Bps = 1e11;
  device.layer_overhead_s = 1e-6;
  Layer layer;
  layer.name = "fc";
  layer.op = "linear";
  layer.parameter_bytes = 4e6;
  layer.forward_flops = 1e10;
  layer.backward_input_flops = 2e10;
  layer.backward_weight_flops = 1e10;
  layer.bytes_read = 5e5;
  layer.bytes_written = 5e5;
  layer.times_given = false;
  const LayerTimes times = analytic_layer_times(layer, device, "fp32", 0);
  expect_relative(times.forward_s, 0.022 + 1e-6);
  expect_relative(*times.backward_input_s, 0.042 + 1e-6);
  expect_relative(*times.backward_weight_s, 0.022 + 1e-6);
  expect_relative(times.backward_s, 0.064 + 2e-6);
  // No input gradient (a first layer) and no parameters: no I, no W.
  layer.backward_input_flops = 0;
  layer.parameter_bytes = 0;
  const LayerTimes alone = analytic_layer_times(layer, device, "fp32", 0);
  EXPECT_EQ(*alone.backward_input_s, 0);
  EXPECT_EQ(*alone.backward_weight_s, 0);
  EXPECT_EQ(alone.backward_s, 0);
  // An LSTM runs its sequence_length steps one after the other.
  layer.op = "lstm";
  expect_relative(analytic_layer_times(layer, device, "fp32", 4).forward_s, 0.028 + 1e-6);
  layer.forward_flops.reset();
  EXPECT_CONTAINS(input_error_of([&] { analytic_layer_times(layer, device, "fp32", 0); }), "'fc'");
}

TEST(Roofline, FpgaWeightsOnAndOffChip) {
  const DeviceModel& vcu118 = device_model("VCU118", "t");
  const double rate = 2.0 * 6840 * 200e6 * 0.8;
  expect_relative(fpga_pass_time(1e9, 1e8, vcu118, true), 1e9 / rate);
  expect_relative(fpga_pass_time(1e9, 1e8, vcu118, false), 1e8 / 40e9);  // DDR bound
  expect_relative(fpga_pass_time(1e10, 1e6, vcu118, false), 1e10 / rate);  // compute bound
  Layer layer;
  layer.name = "conv";
  layer.op = "conv2d";
  layer.parameter_bytes = 1e8;
  layer.forward_flops = layer.backward_input_flops = layer.backward_weight_flops = 1e9;
  const LayerTimes on = analytic_layer_times(layer, vcu118, "fp16", 0, true);
  const LayerTimes off = analytic_layer_times(layer, vcu118, "fp16", 0, false);
  expect_relative(on.backward_s, 2e9 / rate);
  expect_relative(off.backward_s, 2 * 1e8 / 40e9);
  EXPECT_CONTAINS(input_error_of([&] { analytic_layer_times(layer, vcu118, "fp32", 0); }), "fp16");
}

TEST(EfficiencyFit, RecoversKnownCoefficientsExactly) {
  const double a = 1.0 / (14e12 * 0.6), b = 2.5e9 * a;  // e_max 0.6, half 2.5e9 FLOPs
  std::vector<FitSample> samples;
  for (const double x : {1e8, 3e9, 2e10, 7e10, 4e11})
    for (const double n : {1.0, 2.0, 48.0}) samples.push_back({x, n, a * x + b * n});
  const LinearFit fit = fit_time_line(samples);
  expect_relative(fit.a, a);
  expect_relative(fit.b, b);
  const EfficiencyCurve curve = curve_from_fit(fit, 14e12);
  expect_relative(curve.e_max, 0.6);
  expect_relative(curve.half, 2.5e9);
  // A free fit with a negative intercept is refitted through the origin.
  const LinearFit clamped = fit_time_line({{1, 1, 3}, {2, 1, 7}, {3, 1, 11}});
  EXPECT_EQ(clamped.b, 0);
  expect_relative(clamped.a, (3 + 14 + 33) / 14.0);
  EXPECT_CONTAINS(input_error_of([] { fit_time_line({}); }), "no samples");
}

TEST(EfficiencyFit, ASlopeAboveTheCapIsHeldAtItAndTheInterceptRefitted) {
  // Samples of a line steeper than allowed: e_max 1.2 at 14 TFLOP/s, half 1e9.
  const double peak = 14e12, free_a = 1.0 / (peak * 1.2), free_b = 1e9 * free_a;
  std::vector<FitSample> samples;
  for (const double x : {1e9, 5e9, 3e10})
    for (const double n : {1.0, 3.0}) samples.push_back({x, n, free_a * x + free_b * n});
  const double min_slope = 1.0 / (kMaxComputeEfficiency * peak);
  const LinearFit fit = fit_time_line(samples, min_slope);
  EXPECT_TRUE(fit.at_min_slope);
  expect_relative(fit.a, min_slope);
  // b = sum n (t - a x) / sum n^2 over the samples (closed form).
  double numerator = 0, denominator = 0;
  for (const FitSample& s : samples) {
    numerator += s.n * (s.t - min_slope * s.x);
    denominator += s.n * s.n;
  }
  const double b = std::max(0.0, numerator / denominator);
  EXPECT_EQ(fit.b, 0);  // the capped line is above every sample: no intercept is left
  EXPECT_EQ(b, 0);
  expect_relative(curve_from_fit(fit, peak).e_max, kMaxComputeEfficiency);
  // A gentler cap leaves room for an intercept, fitted exactly.
  const double loose_slope = 1.0 / (1.1 * peak);
  const LinearFit loose = fit_time_line(samples, loose_slope);
  EXPECT_TRUE(loose.at_min_slope);
  numerator = denominator = 0;
  for (const FitSample& s : samples) {
    numerator += s.n * (s.t - loose_slope * s.x);
    denominator += s.n * s.n;
  }
  ASSERT_GT(numerator, 0);
  expect_relative(loose.b, numerator / denominator);
  // A slope under the cap is the free fit, untouched.
  const LinearFit free = fit_time_line(samples, 1.0 / (2 * peak));
  EXPECT_FALSE(free.at_min_slope);
  expect_relative(free.a, free_a);
  expect_relative(free.b, free_b);
}

TEST(DeviceCatalogue, NoModelledPassRunsAboveTheHardware) {
  // Every catalogue GPU, dtype and operation class: from tiny to huge
  // passes, FLOPs / time <= peak x cap and bytes / time <= bandwidth x cap.
  for (const DeviceModel& device : device_catalogue()) {
    if (device.kind != DeviceKind::Gpu) continue;
    for (const ClassEfficiency& curves : device.efficiency)
      for (const PassEfficiency* pass : {&curves.forward, &curves.backward}) {
        EXPECT_LE(pass->compute.e_max, kMaxComputeEfficiency) << device.name;
        EXPECT_LE(pass->memory.e_max, kMaxMemoryEfficiency) << device.name;
      }
    for (const char* dtype : {"fp32", "fp16", "bf16"}) {
      if (std::string(dtype) == "bf16" && device.peak_bf16_flops <= 0) continue;
      const double peak = device.peak_flops(dtype);
      for (const char* op : {"conv2d", "linear", "transformer", "lstm", "norm", "embedding"})
        for (const double flops : {1e6, 1e9, 1e12, 1e15, 1e18})
          for (const double bytes : {1e3, 1e6, 1e9, 1e12}) {
            Layer layer;
            layer.name = "probe";
            layer.op = op;
            layer.parameter_bytes = 4096;
            layer.forward_flops = flops;
            layer.backward_input_flops = flops;
            layer.backward_weight_flops = flops;
            layer.bytes_read = bytes / 2;
            layer.bytes_written = bytes / 2;
            const LayerTimes times = analytic_layer_times(layer, device, dtype, 8);
            for (const double seconds : {times.forward_s, *times.backward_input_s, *times.backward_weight_s}) {
              ASSERT_GT(seconds, 0);
              EXPECT_LE(flops / seconds, peak * kMaxComputeEfficiency * (1 + 1e-12))
                  << device.name << " " << dtype << " " << op << " " << flops << " FLOPs";
              EXPECT_LE(bytes / seconds, device.memory_bandwidth_Bps * kMaxMemoryEfficiency * (1 + 1e-12))
                  << device.name << " " << dtype << " " << op << " " << bytes << " bytes";
            }
          }
    }
  }
}

Profile tiny_profile() {
  Profile profile;
  profile.name = "tiny";
  Layer measured;
  measured.name = "measured";
  measured.forward_s = 1;
  measured.backward_s = 2;
  measured.output_bytes = 8;
  Layer conv;
  conv.name = "conv";
  conv.op = "conv2d";
  conv.parameter_bytes = 1e6;
  conv.forward_flops = conv.backward_input_flops = conv.backward_weight_flops = 4e11;
  conv.bytes_read = conv.bytes_written = 1e8;
  conv.times_given = false;
  Layer relu;
  relu.name = "relu";
  relu.op = "elementwise";
  relu.forward_flops = relu.backward_input_flops = 2.5e7;
  relu.backward_weight_flops = 0;
  relu.bytes_read = relu.bytes_written = 1e8;
  relu.times_given = false;
  profile.layers = {measured, conv, relu};
  return profile;
}

HostInfo host_of(const std::string& name, const std::string& model) {
  HostInfo host;
  host.name = name;
  host.device_model = model;
  return host;
}

TEST(FillAnalyticTimes, TwoModelsBaseFromTheFirstHost) {
  Profile profile = tiny_profile();
  PlatformSummary platform;
  platform.file = "two.xml";
  platform.hosts = {host_of("g0", "A100"), host_of("g1", "H100"), host_of("g2", "A100")};
  const std::vector<std::string> notes = fill_analytic_times(profile, platform);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_CONTAINS(notes[0], "A100");
  EXPECT_CONTAINS(notes[1], "H100");
  // The measured layer is untouched.
  EXPECT_EQ(profile.layers[0].forward_s, 1);
  EXPECT_TRUE(profile.layers[0].device_times.empty());
  for (const std::size_t i : {1u, 2u}) {
    const Layer& layer = profile.layers[i];
    ASSERT_EQ(layer.device_times.size(), 2u);
    const LayerTimes a100 = analytic_layer_times(layer, device_model("A100", "t"), "", 0);
    const LayerTimes h100 = analytic_layer_times(layer, device_model("H100", "t"), "", 0);
    EXPECT_EQ(layer.device_times.at("A100").forward_s, a100.forward_s);
    EXPECT_EQ(layer.device_times.at("H100").backward_s, h100.backward_s);
    EXPECT_EQ(layer.forward_s, a100.forward_s);  // base times: the first host's model
    EXPECT_EQ(layer.backward_s, a100.backward_s);
    EXPECT_EQ(*layer.backward_input_s, *a100.backward_input_s);
    EXPECT_GT(layer.forward_s, 0);
    // A host finds its model's times through layer_times_on and backward_split_on.
    EXPECT_EQ(layer_times_on(layer, platform.hosts[1]).forward_s, h100.forward_s);
    EXPECT_EQ(backward_split_on(layer, platform.hosts[1]).weight_s, *h100.backward_weight_s);
  }
  EXPECT_LT(profile.layers[1].device_times.at("H100").forward_s, profile.layers[1].device_times.at("A100").forward_s);
  EXPECT_EQ(*profile.layers[2].backward_weight_s, 0);  // no parameters, no W
}

TEST(FillAnalyticTimes, ErrorsNameTheLayerAndTheHost) {
  PlatformSummary platform;
  platform.file = "two.xml";
  platform.hosts = {host_of("g0", "V100"), host_of("cpu1", "")};
  Profile profile = tiny_profile();
  const std::string message = input_error_of([&] { fill_analytic_times(profile, platform); });
  EXPECT_CONTAINS(message, "two.xml");
  EXPECT_CONTAINS(message, "host 'cpu1'");
  EXPECT_CONTAINS(message, "layer 1 'conv'");
  EXPECT_CONTAINS(message, "device_model");
  EXPECT_CONTAINS(message, "V100, A100, H100, H200, H800, VCU118, VCU129");
  // Device times of the host's device type serve that host.
  platform.hosts[1].device_type = "cpu";
  profile.layers[1].device_times["cpu"] = {1, 2};
  profile.layers[2].device_times["cpu"] = {1, 2};
  EXPECT_NO_THROW(fill_analytic_times(profile, platform));
  // A layer with neither times nor FLOPs.
  Profile no_flops = tiny_profile();
  no_flops.layers[2].forward_flops.reset();
  platform.hosts = {host_of("g0", "V100")};
  EXPECT_CONTAINS(input_error_of([&] { fill_analytic_times(no_flops, platform); }), "layer 2 'relu'");
  // Nothing to fill: no error even without device models.
  Profile measured = tiny_profile();
  measured.layers.resize(1);
  platform.hosts = {host_of("cpu0", "")};
  EXPECT_TRUE(fill_analytic_times(measured, platform).empty());
}

TEST(FillAnalyticTimes, FpgaWeightsOnChipWhenTheModelFits) {
  Profile profile = tiny_profile();
  profile.dtype = "fp16";
  profile.layers[1].parameter_bytes = 1e9;  // beyond the VCU118's 43 MB of on-chip RAM
  profile.layers[1].forward_flops = 1e9;     // 0.46 ms of DSP time: DDR bound (25 ms)
  PlatformSummary platform;
  platform.file = "f.xml";
  platform.hosts = {host_of("f0", "VCU118")};
  const std::vector<std::string> notes = fill_analytic_times(profile, platform);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_CONTAINS(notes[0], "streamed from DDR");
  expect_relative(profile.layers[1].forward_s, 1e9 / 40e9);
}

TEST(FillAnalyticTimes, FpgaOnChipNeedsRoomForWeightsAndGradients) {
  // VCU118: 345.9 Mb = 43.2375 MB on chip. 30 MB of fp16 weights fit alone,
  // but not with their 30 MB of gradients: the conv's streamed from DDR.
  Profile profile = tiny_profile();
  profile.dtype = "fp16";
  profile.layers[0].parameter_bytes = 0;
  profile.layers[1].parameter_bytes = 20e6;
  profile.layers[2].parameter_bytes = 10e6;
  profile.layers[1].forward_flops = 1e6;  // DSP time 0.37 us: DDR bound (20e6 / 40e9 = 0.5 ms)
  PlatformSummary platform;
  platform.file = "f.xml";
  platform.hosts = {host_of("f0", "VCU118"), host_of("f1", "VCU118")};
  for (HostInfo& host : platform.hosts) host.kind = DeviceKind::Fpga;
  const std::vector<std::string> notes = fill_analytic_times(profile, platform);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_CONTAINS(notes[0], "streamed from DDR");
  expect_relative(profile.layers[1].forward_s, 20e6 / 40e9);
  // Two stages, one per board: 2 x 20 MB = 40 MB fits the first board, so
  // its layer runs from chip (compute only); the second board's 2 x 10 MB too.
  Partition partition;
  partition.stage_of_layer = {0, 0, 1};
  partition.hosts = {{"f0"}, {"f1"}};
  const std::vector<std::string> placed = place_fpga_weights(profile, partition, platform);
  ASSERT_EQ(placed.size(), 2u);
  EXPECT_CONTAINS(placed[1], "host 'f1' (VCU118): its stages' weights and gradients, 20.0 MB, fit in");
  EXPECT_CONTAINS(placed[0], "host 'f0' (VCU118): its stages' weights and gradients, 40.0 MB, fit in its 43.2 MB");
  const LayerTimes on_chip = analytic_layer_times(profile.layers[1], device_model("VCU118", "t"), "fp16", 0, true);
  expect_relative(profile.layers[1].forward_s, on_chip.forward_s);
  expect_relative(profile.layers[1].device_times.at("VCU118").forward_s, on_chip.forward_s);
  EXPECT_LT(on_chip.forward_s, 20e6 / 40e9);
  // Both stages on one board: 60 MB does not fit: DDR times stay.
  partition.hosts = {{"f0"}, {"f0"}};
  Profile again = profile;
  fill_analytic_times(again, platform, FpgaWeights::StagesFit);  // optimistic while partitioning
  expect_relative(again.layers[1].forward_s, on_chip.forward_s);
  const std::vector<std::string> one_board = place_fpga_weights(again, partition, platform);
  ASSERT_EQ(one_board.size(), 1u);
  // As much as fits: the relu's 2 x 10 MB (more DDR time per byte) stay, the conv streams.
  EXPECT_CONTAINS(one_board[0], "60.0 MB, exceed its 43.2 MB of on-chip RAM: 20.0 MB kept on chip, 1 layer(s) (40.0 MB) "
                                "streamed from DDR");
  EXPECT_LT(again.layers[2].forward_s, 10e6 / 40e9);
  expect_relative(again.layers[1].forward_s, 20e6 / 40e9);
}

TEST(PipeDreamFlops, Conv2dNode) {
  // 2 images, 128 channels of 56 x 56 out: 6272 positions x 128 x 64 x 9 MACs.
  const double out = 2.0 * 128 * 56 * 56 * 4;
  const NodeCost cost = pipedream_node_cost("Conv2d(64, 128, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))",
                                            {out}, 1000, 295424, 2, true, "t");
  EXPECT_TRUE(cost.timed);
  EXPECT_EQ(cost.op, "conv2d");
  EXPECT_DOUBLE_EQ(cost.forward_flops, 2.0 * 6272 * 128 * 64 * 9);
  EXPECT_DOUBLE_EQ(cost.backward_input_flops, 2.0 * 6272 * 128 * 64 * 9);
  EXPECT_DOUBLE_EQ(cost.backward_weight_flops, 2.0 * 6272 * 128 * 64 * 9);
  EXPECT_DOUBLE_EQ(cost.bytes_read, 1000 + 295424);
  EXPECT_DOUBLE_EQ(cost.bytes_written, out);
  // The first layer (fed by the model's input) has no input gradient.
  EXPECT_EQ(pipedream_node_cost("Conv2d(3, 64, kernel_size=(3, 3))", {out / 2}, 1, 1, 2, false, "t")
                .backward_input_flops,
            0);
  EXPECT_CONTAINS(input_error_of([] { pipedream_node_cost("Conv2d(3)", {4}, 0, 0, 1, true, "g.txt: node7"); }),
                  "g.txt: node7");
}

TEST(PipeDreamFlops, LinearAndClassifierNodes) {
  const double rows = 10;
  const NodeCost linear =
      pipedream_node_cost("Linear(in_features=1024, out_features=32320, bias=True)", {rows * 32320 * 4}, 0, 0, 1, true, "t");
  EXPECT_EQ(linear.op, "linear");
  EXPECT_DOUBLE_EQ(linear.forward_flops, 2.0 * 10 * 1024 * 32320);
  EXPECT_EQ(linear.backward_weight_flops, 0);  // no parameter bytes given
  const NodeCost classifier = pipedream_node_cost(
      "Classifier(  (classifier): Linear(in_features=1024, out_features=32320, bias=True))", {rows * 32320 * 4}, 0,
      132512000, 1, true, "t");
  EXPECT_DOUBLE_EQ(classifier.forward_flops, 2.0 * 10 * 1024 * 32320);
  EXPECT_DOUBLE_EQ(classifier.backward_weight_flops, 2.0 * 10 * 1024 * 32320);
}

TEST(PipeDreamFlops, LstmNode) {
  // B = 4, T = 5, H = 1024, input 2048: outputs [T B H, B H, B H] floats.
  const double h = 4.0 * 1024 * 4;
  const NodeCost lstm = pipedream_node_cost("LSTM(2048, 1024)", {5 * h, h, h}, 5 * 2 * h, 50364416, 4, true, "t");
  EXPECT_EQ(lstm.op, "lstm");
  EXPECT_EQ(lstm.steps, 5);
  const double macs = 5.0 * 4 * 4 * 1024 * (2048 + 1024);
  EXPECT_DOUBLE_EQ(lstm.forward_flops, 2 * macs);
  EXPECT_DOUBLE_EQ(lstm.backward_input_flops, 2 * macs);
  EXPECT_DOUBLE_EQ(lstm.backward_weight_flops, 2 * macs);
  EXPECT_DOUBLE_EQ(lstm.bytes_written, 7 * h);
  // Functional operations are not timed.
  EXPECT_FALSE(pipedream_node_cost("Add(inplace)", {8}, 8, 0, 1, true, "t").timed);
  EXPECT_FALSE(pipedream_node_cost("__getitem__(0)", {8}, 8, 0, 1, true, "t").timed);
}

TEST(PipeDreamFlops, ReadsEveryProfileWeHold) {
  for (const char* name : {"vgg16", "alexnet", "resnet50", "resnet101", "gnmt", "gnmt_large"}) {
    const PipeDreamModel model =
        read_pipedream_model(std::string(PIPEGRID_SOURCE_DIR) + "/models/pipedream/" + name + "/graph.txt");
    int measured = 0;
    for (const PipeDreamNode& node : model.nodes) measured += node.measured;
    EXPECT_GT(measured, 5) << name;
  }
  const PipeDreamModel gnmt = read_pipedream_model(std::string(PIPEGRID_SOURCE_DIR) + "/models/pipedream/gnmt/graph.txt");
  EXPECT_EQ(gnmt.batch_size, 32);
  for (const PipeDreamNode& node : gnmt.nodes)
    if (node.name.find("LSTM(1024, 1024)") != std::string::npos && node.name.find("Emu") == std::string::npos &&
        node.name.find("Attention") == std::string::npos) {
      EXPECT_EQ(node.cost.steps, 48) << node.name;  // 6291456 B = 48 x 32 x 1024 x 4
      EXPECT_DOUBLE_EQ(node.cost.forward_flops, 2.0 * 48 * 32 * 4 * 1024 * 2048);
    }
}

TEST(DeviceModelProperty, ParsedAndChecked) {
  const HostInfo h100 = host_info_from_properties("p.xml", "g0", {{"device_model", "H100"}});
  EXPECT_EQ(h100.device_model, "H100");
  EXPECT_EQ(h100.kind, DeviceKind::Gpu);
  const HostInfo v100 = host_info_from_properties("p.xml", "g0", {{"device", "V100"}});
  EXPECT_EQ(v100.device_type, "V100");
  EXPECT_EQ(v100.device_model, "V100");
  const HostInfo own = host_info_from_properties("p.xml", "g0", {{"device", "rtx"}});
  EXPECT_EQ(own.device_model, "");
  const HostInfo both = host_info_from_properties("p.xml", "g0", {{"device", "lab-gpu"}, {"device_model", "A100"}});
  EXPECT_EQ(both.device_type, "lab-gpu");
  EXPECT_EQ(both.device_model, "A100");
  const HostInfo board = host_info_from_properties("p.xml", "f0", {{"device", "VCU118"}});
  EXPECT_EQ(board.kind, DeviceKind::Fpga);  // an absent kind follows the model
  EXPECT_EQ(board.execution, Execution::Async);
  const std::string unknown =
      input_error_of([] { host_info_from_properties("p.xml", "g0", {{"device_model", "RTX4090"}}); });
  EXPECT_CONTAINS(unknown, "p.xml: host 'g0': property 'device_model'");
  EXPECT_CONTAINS(unknown, "'RTX4090'");
  EXPECT_CONTAINS(unknown, "V100, A100, H100, H200, H800, VCU118, VCU129");
  EXPECT_CONTAINS(input_error_of([] {
                    host_info_from_properties("p.xml", "g0", {{"device_model", "VCU129"}, {"kind", "gpu"}});
                  }),
                  "is an fpga");
  EXPECT_CONTAINS(input_error_of([] { host_info_from_properties("p.xml", "g0", {{"device_modle", "V100"}}); }),
                  "did you mean 'device_model'");
}

TEST(DeviceModelProperty, DeviceTypeTimesWinOverTheModel) {
  Layer layer;
  layer.name = "l";
  layer.forward_s = 8;
  layer.backward_s = 8;
  layer.device_times["lab"] = {1, 2};
  layer.device_times["V100"] = {3, 4};
  HostInfo host;
  host.device_type = "lab";
  host.device_model = "V100";
  EXPECT_EQ(layer_times_on(layer, host).forward_s, 1);
  host.device_type = "other";
  EXPECT_EQ(layer_times_on(layer, host).forward_s, 3);
  host.device_model = "";
  host.speed_factor = 2;
  EXPECT_EQ(layer_times_on(layer, host).forward_s, 4);
}

TEST(MemoryReserve, AFractionOrASizeBelowTheMemory) {
  const MemoryReserve fraction = parse_memory_reserve("0.05", "r");
  ASSERT_TRUE(fraction.fraction);
  EXPECT_FALSE(fraction.bytes);
  EXPECT_DOUBLE_EQ(*fraction.fraction, 0.05);
  const MemoryReserve size = parse_memory_reserve("2GiB", "r");
  ASSERT_TRUE(size.bytes);
  EXPECT_DOUBLE_EQ(*size.bytes, 2.0 * 1024 * 1024 * 1024);
  // A plain number of at least 1 is bytes.
  EXPECT_DOUBLE_EQ(*parse_memory_reserve("1", "r").bytes, 1);
  EXPECT_EQ(input_error_of([] { parse_memory_reserve("-0.5", "p.xml: host 'g0': property 'memory_reserve'"); }),
            "p.xml: host 'g0': property 'memory_reserve': expected a fraction of the memory in [0, 1) (such as 0.05) or "
            "a size in bytes (such as 2GiB), found '-0.5'");
  const HostInfo host = host_info_from_properties("p.xml", "g0", {{"memory", "80GiB"}, {"memory_reserve", "0.1"}});
  EXPECT_DOUBLE_EQ(host.memory_reserve_of(80.0 * 1024 * 1024 * 1024), 8.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(host.memory_reserve_of(10), 1);  // simulate --memory 10: a tenth of it
  const HostInfo fixed = host_info_from_properties("p.xml", "g0", {{"memory", "80GiB"}, {"memory_reserve", "3GiB"}});
  EXPECT_DOUBLE_EQ(fixed.memory_reserve_of(10), 3.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(host_info_from_properties("p.xml", "g0", {{"memory", "80GiB"}}).memory_reserve_of(80), 0);
  EXPECT_EQ(input_error_of([] {
              host_info_from_properties("p.xml", "g0", {{"memory", "16GiB"}, {"memory_reserve", "16GiB"}});
            }),
            "p.xml: host 'g0': property 'memory_reserve': expected a reserve below the host's memory (16GiB), found "
            "'16GiB'");
}

}  // namespace
}  // namespace pipegrid
