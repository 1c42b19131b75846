// Calibration on cpu:N (validate/calibrate.hpp): the profile's layers and
// bytes against the zoo model, the copy fit, and the platform XML loaded by
// the simulator. Each test runs in its own process (gtest_discover_tests),
// as read_platform starts a SimGrid engine.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/io.hpp"
#include "sim/engine.hpp"
#include "tests/expect_input_error.hpp"
#include "validate/calibrate.hpp"
#include "validate/detail/model.hpp"
#include "validate/model_zoo.hpp"

namespace pipegrid::validate {
namespace {

using testutil::input_error_of;

CalibrationRequest small_request(const ModelConfig& model) {
  CalibrationRequest request;
  request.model = resolve_model(model);
  request.micro_batch_size = 3;
  request.device = {"cpu", 3};
  request.warmup = 1;
  request.repeats = 3;
  request.seed = 5;
  return request;
}

double bytes_of(const torch::Tensor& tensor) { return static_cast<double>(tensor.numel() * tensor.element_size()); }

class CalibrateModel : public ::testing::TestWithParam<ModelConfig> {};

TEST_P(CalibrateModel, LayersAndBytesAreTheModelsAndTimesPositive) {
  const CalibrationRequest request = small_request(GetParam());
  const Calibration calibration = calibrate(request);
  const Profile& profile = calibration.profile;
  const int layers = num_layers(request.model);
  ASSERT_EQ(static_cast<int>(profile.layers.size()), layers);
  EXPECT_EQ(profile.name, request.model.name);
  EXPECT_EQ(profile.micro_batch_size, 3);
  EXPECT_EQ(calibration.hosts, (std::vector<std::string>{"cpu0", "cpu1", "cpu2"}));
  EXPECT_EQ(calibration.clock, "steady clock");
  EXPECT_EQ(calibration.memory_bytes, 0);

  const detail::LayerList modules = detail::build_layers(request.model, request.seed);
  const detail::Batch batch = detail::make_batch(request.model, request.seed, 0, 0, 3);
  EXPECT_EQ(profile.input_bytes, bytes_of(batch.input));
  torch::NoGradGuard no_grad;
  torch::Tensor activation = batch.input;
  for (int l = 0; l < layers; ++l) {
    activation = detail::run_layers(modules, l, l + 1, activation);
    double parameters = 0;
    for (const torch::Tensor& parameter : detail::parameters_of(modules, l, l + 1)) parameters += bytes_of(parameter);
    const Layer& layer = profile.layers[l];
    EXPECT_EQ(layer.parameter_bytes, parameters) << "layer " << l;
    EXPECT_EQ(layer.output_bytes, bytes_of(activation)) << "layer " << l;
    EXPECT_GT(layer.forward_s, 0) << "layer " << l;
    EXPECT_GT(layer.backward_s, 0) << "layer " << l;
  }
  EXPECT_EQ(calibration.copies.size(), 7u);
  EXPECT_GE(calibration.latency_s, 0);
  EXPECT_GT(calibration.bandwidth_bytes_per_s, 0);
  // One step sample per distinct prefix size, fitted; the overhead from real runs.
  ASSERT_GE(calibration.steps.size(), 2u);
  for (std::size_t k = 1; k < calibration.steps.size(); ++k)
    EXPECT_GT(calibration.steps[k].bytes, calibration.steps[k - 1].bytes);
  double model_bytes = 0;
  for (const Layer& layer : profile.layers) model_bytes += layer.parameter_bytes;
  EXPECT_EQ(calibration.steps.back().bytes, model_bytes);
  EXPECT_GE(calibration.step_overhead_s, 0);
  EXPECT_GT(calibration.step_rate_bytes_per_s, 0);
  EXPECT_GE(calibration.overhead.action_overhead_s, 0);
  EXPECT_GE(calibration.overhead.wakeup_s, 0);
  // gpipe on min(3, layers) stages, 4 micro-batches, 2 measured mini-batches,
  // 3 runs: an F and a B per stage and micro-batch.
  EXPECT_EQ(calibration.overhead.actions, 2 * std::min(3, layers) * 4 * 2 * 3);
  // The profile survives the JSON round trip the simulator reads.
  EXPECT_EQ(parse_profile_json(profile_to_json(profile), "calibrated").layers.size(), profile.layers.size());
}

INSTANTIATE_TEST_SUITE_P(Zoo, CalibrateModel,
                         ::testing::Values(ModelConfig{"mlp", {{"hidden", 32}, {"layers", 4}, {"classes", 5}}},
                                           ModelConfig{"gpt", {{"vocabulary", 50}, {"hidden", 32}, {"heads", 2}, {"layers", 2}, {"sequence", 8}}},
                                           ModelConfig{"gnmt", {{"vocabulary", 40}, {"hidden", 16}, {"layers", 2}, {"sequence", 6}}}),
                         [](const auto& info) { return info.param.name; });

TEST(Calibrate, RejectsBadRequests) {
  CalibrationRequest request = small_request({"mlp", {{"hidden", 8}, {"layers", 2}}});
  request.repeats = 0;
  EXPECT_NE(input_error_of([&] { calibrate(request); }).find("--repeats"), std::string::npos);
  request.repeats = 1;
  request.micro_batch_size = 0;
  EXPECT_NE(input_error_of([&] { calibrate(request); }).find("--micro-batch-size"), std::string::npos);
}

TEST(Calibrate, FitRecoversLatencyAndBandwidth) {
  std::vector<CopySample> samples;
  for (double bytes : {1e3, 1e4, 1e5, 1e6}) samples.push_back({bytes, 2e-6 + bytes / 5e9});
  const auto [latency, bandwidth] = fit_latency_bandwidth(samples);
  EXPECT_NEAR(latency, 2e-6, 1e-12);
  EXPECT_NEAR(bandwidth / 5e9, 1, 1e-9);
  EXPECT_FALSE(input_error_of([] { fit_latency_bandwidth({{1e3, 1e-6}, {1e3, 2e-6}}); }).empty());
}

TimelineRecord record(const std::string& host, int stage, const std::string& action, int micro_batch, double start,
                      double end) {
  TimelineRecord r;
  r.host = host;
  r.stage = stage;
  r.action = action;
  r.micro_batch = micro_batch;
  r.start_s = start;
  r.end_s = end;
  return r;
}

TEST(Calibrate, OverheadAttributionOnAKnownTimeline) {
  // Two stages of one layer each: forward 1, backward 2 (profile). Times in
  // units of 1/4 so every value is exact.
  Profile profile;
  profile.layers.resize(2);
  for (Layer& layer : profile.layers) {
    layer.forward_s = 1;
    layer.backward_s = 2;
  }
  Timeline timeline;
  timeline.records = {
      record("a", 0, "F", 0, 0, 1.25),        // +0.25 in the action
      record("a", 0, "SEND_F", 0, 1.25, 1.5),  // 0.25 of sending
      record("a", 0, "F", 1, 1.75, 3),        // dispatch 0.25 after the send, +0.25
      record("a", 0, "SEND_F", 1, 3, 3.25),
      record("b", 1, "F", 0, 2, 3),           // the device's first record: no gap; +0
      record("b", 1, "F", 1, 3.75, 5),        // waited: input at 3.25, started 3.75 (0.5); +0.25
      record("b", 1, "B", 1, 5.25, 7.75),     // dispatch 0.25, +0.5
      record("b", 1, "SEND_B", 1, 7.75, 8),
      record("b", 1, "B", 0, 8.25, 10.75),    // dispatch 0.25, +0.5
      record("b", 1, "SEND_B", 0, 10.75, 11),
      record("a", 0, "B", 1, 8.5, 11),        // waited: input at 8, started 8.5, +0.5
      record("a", 0, "B", 0, 11.25, 13.75),   // dispatch 0.25 (its input came at 11), +0.5
  };
  // Copies take 0.25 (latency only): a message can be received when its SEND
  // record ends.
  LayerRanges ranges = {{0, 1}, {1, 2}};
  const Calibration::Overhead overhead = attribute_overhead({timeline}, profile, ranges, 0.25, 0);
  EXPECT_EQ(overhead.actions, 8);
  // F takes 0.25 beyond its layer time of 1 and B 0.5 beyond 2: that grows
  // with the layers, a factor and not a constant. Group medians (F0 1.25,
  // F1 1.125, B0 and B1 2.5, two actions each) fit a constant of -0.125,
  // set to 0; the factor is all durations over all layer times.
  EXPECT_DOUBLE_EQ(overhead.in_action_s, 0);
  EXPECT_DOUBLE_EQ(overhead.compute_factor, (2.5 + 2.25 + 5 + 5) / (2 + 2 + 4 + 4));
  EXPECT_NE(overhead.fit_note.find("below 0"), std::string::npos) << overhead.fit_note;
  EXPECT_DOUBLE_EQ(overhead.dispatch_s, 0.25);
  EXPECT_DOUBLE_EQ(overhead.send_s, 1.0 / 8);  // 4 sends of 0.25 over 8 actions
  EXPECT_DOUBLE_EQ(overhead.action_overhead_s, 0.25 + 0.125);
  EXPECT_DOUBLE_EQ(overhead.wakeup_s, 0.5 - 0.25);
  // The action after a device's last backward of a mini-batch is not a
  // dispatch sample (the optimizer step runs there).
  timeline.records.push_back(record("a", 0, "F", 0, 20, 21));
  timeline.records.back().mini_batch = 1;
  EXPECT_DOUBLE_EQ(attribute_overhead({timeline}, profile, ranges, 0.25, 0).dispatch_s, 0.25);
  EXPECT_FALSE(input_error_of([&] { attribute_overhead({Timeline{}}, profile, ranges, 0.25, 0); }).empty());
}

// A group of `count` actions of layer time x, each taking constant + factor x.
StageTimeGroup group_of(double x, double constant, double factor, int count) {
  return {x, std::vector<double>(count, constant + factor * x)};
}

TEST(Calibrate, StageTimeFitSeparatesAFactorFromAConstant) {
  // Contention only: actions take 8 x their layers (the 32 ms actions of 4 ms
  // layers). Folding that into a constant would give 28 ms per action; it
  // is a factor.
  StageTimeFit fit = fit_stage_times({group_of(4e-3, 0, 8, 6), group_of(8e-3, 0, 8, 6), group_of(4.5e-3, 0, 8, 4)});
  EXPECT_NEAR(fit.constant_s, 0, 1e-12);
  EXPECT_NEAR(fit.factor, 8, 1e-9);
  // A true constant (graph set-up) and a factor together.
  fit = fit_stage_times({group_of(1e-3, 2e-5, 1.5, 4), group_of(2e-3, 2e-5, 1.5, 4), group_of(2.2e-3, 2e-5, 1.5, 2)});
  EXPECT_NEAR(fit.constant_s, 2e-5, 1e-12);
  EXPECT_NEAR(fit.factor, 1.5, 1e-9);
  EXPECT_TRUE(fit.note.empty()) << fit.note;
  // A constant larger than the layers' time (tiny layers) is kept when it
  // stays under kMaxConstantShare of the shortest action.
  fit = fit_stage_times({group_of(1e-5, 1.2e-5, 1, 3), group_of(2e-5, 1.2e-5, 1, 3)});
  EXPECT_NEAR(fit.constant_s, 1.2e-5, 1e-15);
  EXPECT_NEAR(fit.factor, 1, 1e-9);
}

TEST(Calibrate, StageTimeFitPutsDescheduledTimeInTheFactor) {
  // Constant 2e-5, factor 1.5, and one action of each group descheduled for
  // 10 ms: the medians, so the constant, do not move; the factor counts the
  // stalls, per profiled second.
  std::vector<StageTimeGroup> groups = {group_of(1e-3, 2e-5, 1.5, 5), group_of(2e-3, 2e-5, 1.5, 5)};
  for (StageTimeGroup& group : groups) group.durations_s.front() += 1e-2;
  const StageTimeFit fit = fit_stage_times(groups);
  EXPECT_NEAR(fit.constant_s, 2e-5, 1e-12);
  EXPECT_NEAR(fit.factor, (5 * 1.5e-3 + 5 * 3e-3 + 2e-2) / (5 * 1e-3 + 5 * 2e-3), 1e-9);
}

TEST(Calibrate, StageTimeFitBoundsTheConstant) {
  // Fitted constant 0.9 of the shortest action (1.0): capped at
  // kMaxConstantShare, the factor takes the rest.
  StageTimeFit fit = fit_stage_times({{1, {1.0}}, {2, {1.1}}});
  EXPECT_DOUBLE_EQ(fit.constant_s, kMaxConstantShare * 1.0);
  EXPECT_DOUBLE_EQ(fit.factor, (2.1 - 2 * kMaxConstantShare) / 3);
  EXPECT_NE(fit.note.find("capped"), std::string::npos) << fit.note;
  // A decreasing line (noise): capped the same way, the factor positive.
  fit = fit_stage_times({{1, {3.0}}, {2, {1.0}}});
  EXPECT_DOUBLE_EQ(fit.constant_s, kMaxConstantShare * 1.0);
  EXPECT_DOUBLE_EQ(fit.factor, (4 - 2 * kMaxConstantShare) / 3);
  // One layer time: nothing to tell them apart, the constant is the median
  // residual.
  fit = fit_stage_times({{2, {2.5, 2.5, 9}}, {2.1, {2.5}}});
  EXPECT_DOUBLE_EQ(fit.constant_s, (0.5 * 3 + 0.4 * 1) / 4);
  EXPECT_DOUBLE_EQ(fit.factor, (16.5 - 4 * fit.constant_s) / 8.1);
  EXPECT_NE(fit.note.find("one profiled action size"), std::string::npos) << fit.note;
  // Nothing measured.
  fit = fit_stage_times({});
  EXPECT_EQ(fit.factor, 1);
  EXPECT_EQ(fit.constant_s, 0);
}

TEST(Calibrate, ContentionIsNotAPerActionOverhead) {
  // gpipe, 2 stages of one layer (forward 4 ms, backward 8 ms), M = 4, both
  // workers sharing cores with other work: every action takes 8 x its
  // layers, back to back (instant sends, no dispatch gap), stage 1's F2 is
  // descheduled for 50 ms inside the action and stage 0's F2 for 20 ms
  // before it starts, its input there. The per-action overhead must stay 0;
  // the factor is 8, plus the stalls per profiled second.
  Profile profile;
  profile.layers.resize(2);
  for (Layer& layer : profile.layers) {
    layer.forward_s = 4e-3;
    layer.backward_s = 8e-3;
  }
  Timeline timeline;
  double t0 = 0, t1 = 0;
  for (int m = 0; m < 4; ++m) {
    if (m == 2) t0 += 20e-3;
    timeline.records.push_back(record("a", 0, "F", m, t0, t0 + 32e-3));
    t0 += 32e-3;
    timeline.records.push_back(record("a", 0, "SEND_F", m, t0, t0));
    const double start = std::max(t1, t0);
    const double stall = m == 2 ? 50e-3 : 0;
    timeline.records.push_back(record("b", 1, "F", m, start, start + 32e-3 + stall));
    t1 = start + 32e-3 + stall;
  }
  for (int m = 3; m >= 0; --m) {
    timeline.records.push_back(record("b", 1, "B", m, t1, t1 + 64e-3));
    t1 += 64e-3;
    timeline.records.push_back(record("b", 1, "SEND_B", m, t1, t1));
    t0 = std::max(t0, t1);
    timeline.records.push_back(record("a", 0, "B", m, t0, t0 + 64e-3));
    t0 += 64e-3;
  }
  const Calibration::Overhead overhead = attribute_overhead({timeline}, profile, {{0, 1}, {1, 2}}, 0, 0);
  EXPECT_EQ(overhead.actions, 16);
  EXPECT_NEAR(overhead.in_action_s, 0, 1e-12);
  EXPECT_NEAR(overhead.dispatch_s, 0, 1e-12);
  EXPECT_NEAR(overhead.action_overhead_s, 0, 1e-12);
  EXPECT_NEAR(overhead.compute_factor, (8 * 32e-3 + 8 * 64e-3 + 50e-3 + 20e-3) / (8 * 4e-3 + 8 * 8e-3), 1e-9);
}

TEST(Calibrate, PlatformCarriesTheOverheadAndStepTerms) {
  Calibration calibration;
  calibration.copies = {{1e3, 1e-6}, {1e6, 1e-4}};
  calibration.latency_s = 1e-6;
  calibration.bandwidth_bytes_per_s = 1e10;
  calibration.step_overhead_s = 5e-6;
  calibration.step_rate_bytes_per_s = 4e9;
  calibration.overhead.action_overhead_s = 1.5e-5;
  calibration.overhead.wakeup_s = 2e-6;
  calibration.overhead.compute_factor = 1.25;
  const std::string path = ::testing::TempDir() + "calibrated-terms.xml";
  write_file_atomically(path, calibration_platform_xml(calibration, 2, "test"));
  const PlatformSummary platform = sim::read_platform(path);
  std::remove(path.c_str());
  ASSERT_EQ(platform.hosts.size(), 2u);
  for (const HostInfo& host : platform.hosts) {
    EXPECT_DOUBLE_EQ(host.action_overhead_s, 1.5e-5);
    ASSERT_TRUE(host.optimizer_step_rate_Bps.has_value());
    EXPECT_DOUBLE_EQ(*host.optimizer_step_rate_Bps, 4e9);
    EXPECT_DOUBLE_EQ(host.optimizer_step_overhead_s.value_or(-1), 5e-6);
    EXPECT_DOUBLE_EQ(host.speed_factor, 0.8);  // 1 / compute_factor
  }
  EXPECT_NEAR(platform.route_latency_s[0][1], 3e-6, 1e-15);  // copy latency + wake-up
}

TEST(Calibrate, PlatformLoadsWithEveryHostAndRoute) {
  Calibration calibration;
  calibration.copies = {{1e3, 1e-6}, {1e6, 1e-4}};
  calibration.latency_s = 1e-6;
  calibration.bandwidth_bytes_per_s = 1e10;
  const std::string path = ::testing::TempDir() + "calibrated-platform.xml";
  write_file_atomically(path, calibration_platform_xml(calibration, 3, "test"));
  const PlatformSummary platform = sim::read_platform(path);
  std::remove(path.c_str());
  ASSERT_EQ(platform.hosts.size(), 3u);
  for (int a = 0; a < 3; ++a) {
    EXPECT_EQ(platform.hosts[a].name, "cpu" + std::to_string(a));
    EXPECT_EQ(platform.hosts[a].execution, Execution::Sync);
    for (int b = 0; b < 3; ++b) {
      if (a == b) continue;
      EXPECT_NEAR(platform.route_bandwidth_Bps[a][b], 1e10, 1e3) << a << "->" << b;
      EXPECT_NEAR(platform.route_latency_s[a][b], 1e-6, 1e-12) << a << "->" << b;
    }
  }
}

TEST(Calibrate, PlatformNamesTheDevicesAndTheirMemory) {
  Calibration calibration;
  calibration.copies = {{1e3, 1e-6}, {1e6, 1e-4}};
  calibration.latency_s = 1e-6;
  calibration.bandwidth_bytes_per_s = 2e11;
  calibration.hosts = {"gpu0p0", "gpu0p1"};
  calibration.memory_bytes = 40e9;
  const std::string path = ::testing::TempDir() + "calibrated-gpu-platform.xml";
  const std::string xml = calibration_platform_xml(calibration, 2, "test");
  EXPECT_NE(xml.find("CUDA events"), std::string::npos);
  write_file_atomically(path, xml);
  const PlatformSummary platform = sim::read_platform(path);
  std::remove(path.c_str());
  ASSERT_EQ(platform.hosts.size(), 2u);
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(platform.hosts[d].name, "gpu0p" + std::to_string(d));
    ASSERT_TRUE(platform.hosts[d].memory_bytes.has_value());
    EXPECT_DOUBLE_EQ(*platform.hosts[d].memory_bytes, 40e9);
  }
  EXPECT_NEAR(platform.route_bandwidth_Bps[0][1], 2e11, 1e4);
}

TEST(Calibrate, RefusesDevicesItCannotMeasure) {
  CalibrationRequest request = small_request({"mlp", {}});
  request.device = {"cpu", 0};
  EXPECT_NE(input_error_of([&] { calibrate(request); }).find("at least 1 device"), std::string::npos);
  request.device = {"cpu", 2};
  request.copy_through_host = true;
  EXPECT_NE(input_error_of([&] { calibrate(request); }).find("only for cuda devices"), std::string::npos);
  if (!cuda_devices_built()) {
    request.copy_through_host = false;
    request.device = {"cuda-partitioned", 2};
    EXPECT_NE(input_error_of([&] { calibrate(request); }).find("no CUDA LibTorch"), std::string::npos);
  }
}

}  // namespace
}  // namespace pipegrid::validate
