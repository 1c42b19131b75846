// The analytic V100 model's error against PipeDream's measured profiles
// (models/pipedream/*/graph.txt, fp32, batch sizes inferred from the files):
// per model, whole-model forward+backward predicted vs measured and the
// per-layer median and worst relative errors, with leave-one-model-out fits
// (fit on the other models, predict this one) and in-sample. Prints a table
// (docs/devices.md quotes it); asserts nothing.
//   pipegrid_model_error_bench                    the tables
//   pipegrid_model_error_bench --print-constants  the all-model fit as core/device_model.cpp's kV100Fitted

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/device_model.hpp"
#include "core/error.hpp"
#include "core/pipedream_flops.hpp"

namespace {

using namespace pipegrid;

/// Layers below this share of their model's measured time are left out of
/// the per-layer statistics (their relative errors say little).
constexpr double kLayerShare = 0.01;

struct ModelError {
  double measured_s = 0, predicted_s = 0;
  double layer_median = 0, layer_worst = 0;
  std::string worst_layer;
  int layers_counted = 0;
};

ModelError evaluate(const PipeDreamModel& model, const DeviceModel& device) {
  ModelError out;
  std::vector<std::pair<double, std::string>> errors;
  std::vector<std::pair<double, double>> per_node;  // (measured, predicted)
  for (const PipeDreamNode& node : model.nodes) {
    if (!node.measured) continue;
    const LayerTimes times = analytic_layer_times(node_layer(node), device, "fp32", node.cost.steps);
    const double measured = node.forward_s + node.backward_s, predicted = times.forward_s + times.backward_s;
    out.measured_s += measured;
    out.predicted_s += predicted;
    per_node.emplace_back(measured, predicted);
  }
  std::size_t i = 0;
  for (const PipeDreamNode& node : model.nodes) {
    if (!node.measured) continue;
    const auto [measured, predicted] = per_node[i++];
    if (measured < kLayerShare * out.measured_s) continue;
    errors.emplace_back(std::fabs(predicted - measured) / measured, node.name);
  }
  std::sort(errors.begin(), errors.end());
  out.layers_counted = static_cast<int>(errors.size());
  if (!errors.empty()) {
    const std::size_t n = errors.size();
    out.layer_median = n % 2 ? errors[n / 2].first : (errors[n / 2 - 1].first + errors[n / 2].first) / 2;
    out.layer_worst = errors.back().first;
    out.worst_layer = errors.back().second.substr(0, 48);
  }
  return out;
}

DeviceModel fitted_v100(const std::vector<PipeDreamModel>& models) {
  const DeviceModel& v100 = *find_device_model("V100");
  ClassEfficiency fitted[kOpClassCount];
  fit_efficiency(models, v100.peak_fp32_flops, v100.memory_bandwidth_Bps, fitted);
  DeviceModel out = v100;
  for (int c = 0; c < kOpClassCount; ++c) out.efficiency[c] = fitted[c];
  return out;
}

void print_row(const PipeDreamModel& model, const ModelError& error) {
  const double relative = (error.predicted_s - error.measured_s) / error.measured_s;
  std::printf("| %-10s | %5d | %9.1f | %9.1f | %+6.1f%% | %3d | %6.1f%% | %7.1f%% %s |\n", model.name.c_str(),
              model.batch_size, error.measured_s * 1e3, error.predicted_s * 1e3, relative * 100, error.layers_counted,
              error.layer_median * 100, error.layer_worst * 100, error.worst_layer.c_str());
}

void print_header() {
  std::printf("| model      | batch | measured ms | predicted ms | error | layers | layer median | layer worst |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
}

void print_constants(const DeviceModel& device) {
  std::printf("constexpr double kV100Fitted[kOpClassCount][2][2][2] = {\n");
  std::printf("    // {forward {compute {e_max, half}, memory {e_max, half}}, backward {...}}\n");
  const char* names[kOpClassCount] = {"Conv", "Matmul", "Memory"};
  for (int c = 0; c < kOpClassCount; ++c) {
    const ClassEfficiency& e = device.efficiency[c];
    std::printf("    /* %s */ {{{%.6g, %.6g}, {%.6g, %.6g}}, {{%.6g, %.6g}, {%.6g, %.6g}}},\n", names[c],
                e.forward.compute.e_max, e.forward.compute.half, e.forward.memory.e_max, e.forward.memory.half,
                e.backward.compute.e_max, e.backward.compute.half, e.backward.memory.e_max, e.backward.memory.half);
  }
  std::printf("};\n");
}

}  // namespace

int main(int argc, char** argv) {
  const bool constants = argc > 1 && std::strcmp(argv[1], "--print-constants") == 0;
  try {
    std::vector<PipeDreamModel> models;
    for (const char* name : {"vgg16", "alexnet", "resnet50", "resnet101", "gnmt", "gnmt_large"})
      models.push_back(read_pipedream_model(std::string(PIPEGRID_SOURCE_DIR) + "/models/pipedream/" + name + "/graph.txt"));
    const DeviceModel all = fitted_v100(models);
    if (constants) {
      print_constants(all);
      return 0;
    }
    std::printf("Analytic V100 model (fp32 peak %.4g TFLOP/s, %.4g GB/s) vs PipeDream's measured profiles.\n",
                all.peak_fp32_flops / 1e12, all.memory_bandwidth_Bps / 1e9);
    std::printf("Times: forward + backward of one batch, nodes PipeDream timed; per-layer errors over nodes with "
                ">= %.0f%% of the model's measured time.\n\n",
                kLayerShare * 100);
    std::printf("Leave-one-model-out (fit on the other %zu models, predict this one):\n\n", models.size() - 1);
    print_header();
    double worst_held_out = 0;
    for (std::size_t held = 0; held < models.size(); ++held) {
      std::vector<PipeDreamModel> rest;
      for (std::size_t i = 0; i < models.size(); ++i)
        if (i != held) rest.push_back(models[i]);
      const ModelError error = evaluate(models[held], fitted_v100(rest));
      worst_held_out = std::max(worst_held_out, std::fabs(error.predicted_s / error.measured_s - 1));
      print_row(models[held], error);
    }
    std::printf("\nWorst held-out whole-model error: %.1f%%\n\nIn-sample (fit on all %zu models):\n\n",
                worst_held_out * 100, models.size());
    print_header();
    for (const PipeDreamModel& model : models) print_row(model, evaluate(model, all));
    std::printf("\nFitted V100 curves (all models; compute half in FLOPs, memory half in bytes):\n");
    for (int c = 0; c < kOpClassCount; ++c) {
      const ClassEfficiency& e = all.efficiency[c];
      std::printf("  %-6s forward: compute e_max %.3f half %.3g, memory e_max %.3f half %.3g; backward: compute e_max "
                  "%.3f half %.3g, memory e_max %.3f half %.3g\n",
                  to_string(static_cast<OpClass>(c)), e.forward.compute.e_max, e.forward.compute.half,
                  e.forward.memory.e_max, e.forward.memory.half, e.backward.compute.e_max, e.backward.compute.half,
                  e.backward.memory.e_max, e.backward.memory.half);
    }
  } catch (const InputError& error) {
    std::fprintf(stderr, "model_error_bench: %s\n", error.what());
    return 2;
  }
  return 0;
}
