// Calibration on cpu:N (validate/calibrate.hpp): the profile's layers and
// bytes against the zoo model, the copy fit, and the platform XML loaded by
// the simulator. Each test runs in its own process (gtest_discover_tests),
// as read_platform starts a SimGrid engine.

#include <gtest/gtest.h>

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
  request.devices = 3;
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
  EXPECT_GT(calibration.optimizer_s_per_byte, 0);
  // The profile survives the JSON round trip the simulator reads.
  EXPECT_EQ(parse_profile_json(profile_to_json(profile), "calibrated").layers.size(), profile.layers.size());
}

INSTANTIATE_TEST_SUITE_P(Zoo, CalibrateModel,
                         ::testing::Values(ModelConfig{"mlp", {{"width", 32}, {"depth", 4}, {"classes", 5}}},
                                           ModelConfig{"transformer", {{"vocab", 50}, {"width", 32}, {"heads", 2}, {"layers", 2}, {"seq", 8}}},
                                           ModelConfig{"gnmt", {{"vocab", 40}, {"hidden", 16}, {"layers", 2}, {"seq", 6}}}),
                         [](const auto& info) { return info.param.name; });

TEST(Calibrate, RejectsBadRequests) {
  CalibrationRequest request = small_request({"mlp", {{"width", 8}, {"depth", 2}}});
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

}  // namespace
}  // namespace pipegrid::validate
