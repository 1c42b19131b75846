// Device models (core/device_model.hpp; docs/devices.md gives the sources).

#include "core/device_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

#include <Eigen/Dense>
#include <fmt/format.h>

#include "core/error.hpp"
#include "core/precision.hpp"
#include "core/tensor_parallel.hpp"

namespace pipegrid {

namespace {

constexpr double kTera = 1e12, kGiga = 1e9, kGiB = 1024.0 * 1024 * 1024, kMega = 1e6;

/// The V100's fitted curves by OpClass (Conv, Matmul, Memory). Refit with
///   pipegrid_model_error_bench --print-constants
/// (bench/model_error_bench.cpp, built with -DPIPEGRID_BUILD_BENCH=ON): it
/// fits all six PipeDream profiles (models/pipedream) and prints this table.
/// Compute curves: e_max against the V100's FP32 peak, half in FLOPs; memory
/// curves: e_max against its bandwidth, half in bytes. Every e_max is at
/// most its cap (kMaxComputeEfficiency, kMaxMemoryEfficiency): the conv
/// curves and the matmul backward, whose free fits run faster (conv 1.66 and
/// 1.50: cuDNN's Winograd and FFT algorithms do fewer operations than the
/// direct convolution counted here; matmul backward 1.05), sit at the cap
/// with their half refitted. The error of these curves is in docs/devices.md.
constexpr double kV100Fitted[kOpClassCount][2][2][2] = {
    // {forward {compute {e_max, half}, memory {e_max, half}}, backward {...}}
    /* Conv */ {{{0.9, 0}, {0.737716, 2.01508e+08}}, {{0.9, 0}, {0.769626, 3.99214e+07}}},
    /* Matmul */ {{{0.586572, 6.58266e+06}, {0.737716, 2.01508e+08}}, {{0.9, 3.80924e+08}, {0.769626, 3.99214e+07}}},
    /* Memory */ {{{0.9, 0}, {0.737716, 2.01508e+08}}, {{0.9, 0}, {0.769626, 3.99214e+07}}},
};

ClassEfficiency fitted_row(int c) {
  ClassEfficiency out;
  PassEfficiency* passes[2] = {&out.forward, &out.backward};
  for (int p = 0; p < 2; ++p) {
    passes[p]->compute = {kV100Fitted[c][p][0][0], kV100Fitted[c][p][0][1]};
    passes[p]->memory = {kV100Fitted[c][p][1][0], kV100Fitted[c][p][1][1]};
  }
  return out;
}

// Tensor-core model constants (docs/devices.md, "Tensor-core model", gives
// each one's source). The A100's GEMM and memory efficiencies and kernel
// overhead are fitted (pipegrid_tensor_core_bench --print-constants: Zero
// Bubble's Table 9 pass times and Korthikanti et al.'s Table 4 layer times;
// the fit holds no kernel overhead); the other GPUs carry those fractions
// over, unvalidated. The flash-attention efficiencies are the published
// kernel rates of FlashAttention-2 (A100) and FlashAttention-3 (H100, H200).
constexpr double kA100GemmEfficiency = 0.833777;
constexpr double kMemoryEfficiency = 0.446807;
constexpr double kKernelOverhead = 0;
constexpr double kA100AttentionForward = 0.70, kA100AttentionBackward = 0.55;
constexpr double kV100GemmEfficiency = kA100GemmEfficiency, kV100AttentionForward = 0.40, kV100AttentionBackward = 0.30;
constexpr double kH100GemmEfficiency = kA100GemmEfficiency, kH100AttentionForward = 0.60, kH100AttentionBackward = 0.45;

// Vendor figures (docs/devices.md, Catalogue, names each datasheet).
constexpr double kV100Fp32 = 14 * kTera, kV100Fp16 = 112 * kTera, kV100Bandwidth = 900 * kGiga;

DeviceModel gpu(std::string name, std::string description, double fp32, double fp16, double bf16, double fp8,
                double bandwidth, double memory) {
  DeviceModel device;
  device.name = std::move(name);
  device.description = std::move(description);
  device.kind = DeviceKind::Gpu;
  device.peak_fp32_flops = fp32;
  device.peak_fp16_flops = fp16;
  device.peak_bf16_flops = bf16;
  device.peak_fp8_flops = fp8;
  device.memory_bandwidth_Bps = bandwidth;
  device.memory_bytes = memory;
  return device;
}

DeviceModel fpga(std::string name, std::string description, int dsp, double on_chip_megabits, double ddr_bandwidth,
                 double ddr_bytes) {
  DeviceModel device;
  device.name = std::move(name);
  device.description = std::move(description);
  device.kind = DeviceKind::Fpga;
  device.dsp_slices = dsp;
  device.clock_hz = 200 * kMega;  // assumed design clock (docs/devices.md)
  device.fpga_efficiency = 0.8;   // assumed DSP utilisation (docs/devices.md)
  device.on_chip_bytes = on_chip_megabits * kMega / 8;
  device.ddr_bandwidth_Bps = ddr_bandwidth;
  device.memory_bytes = ddr_bytes;
  return device;
}

std::vector<DeviceModel> build_catalogue() {
  ClassEfficiency v100[kOpClassCount];
  for (int c = 0; c < kOpClassCount; ++c) v100[c] = fitted_row(c);
  std::vector<DeviceModel> gpus = {
      gpu("V100", "NVIDIA Tesla V100 PCIe 16 GB", kV100Fp32, kV100Fp16, 0, 0, kV100Bandwidth, 16 * kGiB),
      gpu("A100", "NVIDIA A100 SXM4 80 GB", 19.5 * kTera, 312 * kTera, 312 * kTera, 0, 2039 * kGiga, 80 * kGiB),
      // FP8 dense: half the datasheets' 3,958 TFLOP/s "with sparsity" (H100, H200, H800 SXM).
      gpu("H100", "NVIDIA H100 SXM5 80 GB", 67 * kTera, 989.5 * kTera, 989.5 * kTera, 1979 * kTera, 3350 * kGiga, 80 * kGiB),
      gpu("H200", "NVIDIA H200 SXM 141 GB", 67 * kTera, 989.5 * kTera, 989.5 * kTera, 1979 * kTera, 4800 * kGiga, 141 * kGiga),
      // The H800 SXM5: the H100 SXM5's tensor cores and HBM3, NVLink cut to
      // 400 GB/s (both directions; the cluster preset hgx-h800 carries it).
      gpu("H800", "NVIDIA H800 SXM5 80 GB", 67 * kTera, 989.5 * kTera, 989.5 * kTera, 1979 * kTera, 3350 * kGiga, 80 * kGiB),
  };
  // Tensor-core models (docs/devices.md, "Tensor-core model", gives each
  // constant's source): {sms, GEMM, flash forward, flash backward, memory,
  // kernel overhead}.
  const TensorCoreModel tensor_cores[] = {
      {80, kV100GemmEfficiency, kV100AttentionForward, kV100AttentionBackward, kMemoryEfficiency, kKernelOverhead},
      {108, kA100GemmEfficiency, kA100AttentionForward, kA100AttentionBackward, kMemoryEfficiency, kKernelOverhead},
      {132, kH100GemmEfficiency, kH100AttentionForward, kH100AttentionBackward, kMemoryEfficiency, kKernelOverhead},
      {132, kH100GemmEfficiency, kH100AttentionForward, kH100AttentionBackward, kMemoryEfficiency, kKernelOverhead},
      {132, kH100GemmEfficiency, kH100AttentionForward, kH100AttentionBackward, kMemoryEfficiency, kKernelOverhead},
  };
  std::vector<DeviceModel> out;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const DeviceModel& device = gpus[i];
    out.push_back(with_efficiency(device, v100));
    out.back().tensor_cores = tensor_cores[i];
    const TensorCoreModel& model = out.back().tensor_cores;
    for (const double compute : {model.gemm_efficiency, model.attention_forward_efficiency, model.attention_backward_efficiency})
      if (!(compute > 0 && compute <= kMaxComputeEfficiency) || !(model.memory_efficiency > 0 && model.memory_efficiency <= kMaxMemoryEfficiency))
        throw std::logic_error(fmt::format("device model {}: a tensor-core efficiency outside (0, cap]", device.name));
    for (const ClassEfficiency& curves : out.back().efficiency)
      for (const PassEfficiency* pass : {&curves.forward, &curves.backward})
        if (!(pass->compute.e_max <= kMaxComputeEfficiency) || !(pass->memory.e_max <= kMaxMemoryEfficiency))
          throw std::logic_error(fmt::format("device model {}: a fitted efficiency above its cap ({:g} compute, {:g} "
                                             "memory): refit the constants",
                                             device.name, pass->compute.e_max, pass->memory.e_max));
  }
  out.push_back(fpga("VCU118", "Xilinx VCU118 (Virtex UltraScale+ XCVU9P)", 6840, 345.9, 40 * kGiga, 8 * kGiB));
  out.push_back(fpga("VCU129", "Xilinx VCU129 (Virtex UltraScale+ XCVU29P)", 12288, 454.9, 40 * kGiga, 8 * kGiB));
  return out;
}

std::string printable_dtype(std::string_view dtype) { return dtype.empty() ? std::string("fp32") : std::string(dtype); }

}  // namespace

OpClass op_class(std::string_view op) {
  if (op == "conv2d") return OpClass::Conv;
  if (op == "embedding" || op == "norm" || op == "pool" || op == "elementwise" || op == "loss") return OpClass::Memory;
  return OpClass::Matmul;
}

const char* to_string(OpClass op_class) {
  switch (op_class) {
    case OpClass::Conv: return "conv";
    case OpClass::Matmul: return "matmul";
    case OpClass::Memory: return "memory";
  }
  return "?";
}

double DeviceModel::peak_flops(std::string_view dtype) const {
  const std::string type = printable_dtype(dtype);
  if (kind == DeviceKind::Fpga) {
    if (type == "fp16" || type == "bf16") return 2.0 * dsp_slices * clock_hz * fpga_efficiency;
    throw InputError(fmt::format("device model {}: FPGA boards are modelled with 16-bit arithmetic (fp16 or bf16, one "
                                 "multiply-add per DSP slice per cycle), found dtype '{}': give the profile dtype fp16",
                                 name, type));
  }
  double peak = 0;
  if (type == "fp32") peak = peak_fp32_flops;
  else if (type == "fp16") peak = peak_fp16_flops;
  else if (type == "bf16") peak = peak_bf16_flops;
  else
    throw InputError(fmt::format("device model {}: expected dtype fp32, fp16 or bf16, found '{}'", name, type));
  if (peak <= 0) throw InputError(fmt::format("device model {} ({}) has no {} arithmetic", name, description, type));
  return peak;
}

const std::vector<DeviceModel>& device_catalogue() {
  static const std::vector<DeviceModel> catalogue = build_catalogue();
  return catalogue;
}

std::string device_catalogue_names() {
  std::string out;
  for (const DeviceModel& device : device_catalogue()) out += (out.empty() ? "" : ", ") + device.name;
  return out;
}

const DeviceModel* find_device_model(std::string_view name) {
  for (const DeviceModel& device : device_catalogue())
    if (device.name == name) return &device;
  return nullptr;
}

const DeviceModel& device_model(std::string_view name, const std::string& what) {
  if (const DeviceModel* device = find_device_model(name)) return *device;
  std::string shown(name.substr(0, 64));
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  throw InputError(fmt::format("{}: unknown device model '{}': expected one of {}", what, shown, device_catalogue_names()));
}

ClassEfficiency v100_fitted_efficiency(OpClass op_class) { return fitted_row(static_cast<int>(op_class)); }

ClassEfficiency scale_efficiency(const ClassEfficiency& fitted, double peak_ratio, double bandwidth_ratio) {
  ClassEfficiency out = fitted;
  for (PassEfficiency* pass : {&out.forward, &out.backward}) {
    pass->compute.half *= peak_ratio;
    pass->memory.half *= bandwidth_ratio;
  }
  return out;
}

DeviceModel with_efficiency(const DeviceModel& device, const ClassEfficiency (&v100_fitted)[kOpClassCount]) {
  DeviceModel out = device;
  if (out.kind != DeviceKind::Gpu) return out;
  // The fit is against the V100's FP32 peak; a GPU's `half` scales with its
  // own FP32 peak (its other dtypes use the same curves at their peaks).
  const double peak_ratio = out.peak_fp32_flops / kV100Fp32;
  const double bandwidth_ratio = out.memory_bandwidth_Bps / kV100Bandwidth;
  for (int c = 0; c < kOpClassCount; ++c) out.efficiency[c] = scale_efficiency(v100_fitted[c], peak_ratio, bandwidth_ratio);
  return out;
}

double gpu_pass_time(const PassWork& work, const PassEfficiency& curves, double peak_flops, double bandwidth_Bps,
                     double overhead_s) {
  if (work.flops <= 0 && work.bytes <= 0) return 0;
  const double steps = std::max(1, work.steps);
  // flops / (P e(flops / steps)) = (flops + steps half) / (P e_max), written
  // in the second form so that it is exact and defined at half = 0. The
  // steps divide the compute only: the bytes count as one transfer.
  const double compute =
      work.flops > 0 ? (work.flops + steps * curves.compute.half) / (peak_flops * curves.compute.e_max) : 0;
  const double memory =
      work.bytes > 0 ? (work.bytes + curves.memory.half) / (bandwidth_Bps * curves.memory.e_max) : 0;
  return std::max(compute, memory) + overhead_s;
}

double fpga_pass_time(double flops, double weight_bytes, const DeviceModel& fpga, bool weights_on_chip) {
  if (flops <= 0 && weight_bytes <= 0) return 0;
  const double compute = flops > 0 ? flops / (2.0 * fpga.dsp_slices * fpga.clock_hz * fpga.fpga_efficiency) : 0;
  const double memory = weights_on_chip ? 0 : weight_bytes / fpga.ddr_bandwidth_Bps;
  return std::max(compute, memory) + fpga.layer_overhead_s;
}

LayerTimes analytic_layer_times(const Layer& layer, const DeviceModel& device, std::string_view dtype,
                                int sequence_length, bool weights_on_chip) {
  if (!layer.forward_flops)
    throw InputError(fmt::format("layer '{}' has neither times nor forward_flops: device model {} cannot time it",
                                 layer.name, device.name));
  const double bytes = layer.bytes_read.value_or(0) + layer.bytes_written.value_or(0);
  const double forward = *layer.forward_flops;
  const double input = layer.backward_input_flops.value_or(0);
  const double weight = layer.backward_weight_flops.value_or(0);
  const bool runs_input = input > 0, runs_weight = layer.has_parameters();
  LayerTimes times;
  if (device.kind == DeviceKind::Fpga) {
    device.peak_flops(dtype);  // refuses fp32
    const double weights = layer.parameter_bytes;
    times.forward_s = fpga_pass_time(forward, weights, device, weights_on_chip);
    times.backward_input_s = runs_input ? fpga_pass_time(input, weights, device, weights_on_chip) : 0.0;
    times.backward_weight_s = runs_weight ? fpga_pass_time(weight, weights, device, weights_on_chip) : 0.0;
  } else {
    const double peak = device.peak_flops(dtype);
    const ClassEfficiency& curves = device.efficiency[static_cast<int>(op_class(layer.op))];
    const int steps = layer.op == "lstm" && sequence_length > 0 ? sequence_length : 1;
    auto pass = [&](double flops, const PassEfficiency& efficiency) {
      return gpu_pass_time({flops, bytes, steps}, efficiency, peak, device.memory_bandwidth_Bps,
                           device.layer_overhead_s);
    };
    times.forward_s = pass(forward, curves.forward);
    times.backward_input_s = runs_input ? pass(input, curves.backward) : 0.0;
    times.backward_weight_s = runs_weight ? pass(weight, curves.backward) : 0.0;
  }
  times.backward_s = *times.backward_input_s + *times.backward_weight_s;
  return times;
}

bool times_by_kernels(const Layer& layer, const DeviceModel& device) {
  return layer.transformer_shape.has_value() && device.kind == DeviceKind::Gpu && device.tensor_cores.present();
}

ShapedTimes shaped_layer_times(const Layer& layer, const DeviceModel& device, std::string_view dtype,
                               const TensorParallelShare& share, bool fp8) {
  const double peak = device.peak_flops(dtype);
  const double element = dtype_bytes(std::string(dtype.empty() ? "fp32" : dtype), "the profile's dtype");
  const TensorCoreModel& model = device.tensor_cores;
  if (fp8 && !(device.peak_fp8_flops > 0))
    throw InputError(fmt::format("device model {} ({}) has no FP8 tensor cores", device.name, device.description));
  const LayerKernels kernels = layer_kernels(layer, model, peak, element, share, fp8 ? device.peak_fp8_flops : 0);
  const double bandwidth = device.memory_bandwidth_Bps;
  ShapedTimes out;
  out.times.forward_s = kernels.forward.seconds(model, bandwidth);
  out.times.backward_input_s = kernels.runs_input ? kernels.input.seconds(model, bandwidth) : 0.0;
  out.times.backward_weight_s = kernels.weight.seconds(model, bandwidth);
  out.times.backward_s = *out.times.backward_input_s + *out.times.backward_weight_s;
  if (out.times.forward_s > 0)
    out.attention_core_time_share = std::min(1.0, kernels.attention_core.seconds(model, bandwidth) / out.times.forward_s);
  return out;
}

namespace {

/// Which of `layers` (indices into profile.layers) an FPGA board keeps on
/// chip, as much as its on-chip RAM allows (docs/devices.md, FPGAs): each
/// layer needs 2 x its parameter bytes (weights and gradients); layers go on
/// chip in order of the time streaming them from DDR would add per byte
/// (largest first, then layer order) while they fit. Layers without
/// parameters are on chip.
struct OnChip {
  std::map<std::size_t, bool> of_layer;
  double kept_bytes = 0, streamed_bytes = 0;
  int streamed_layers = 0;
};
OnChip keep_on_chip(const Profile& profile, const std::vector<std::size_t>& layers, const DeviceModel& device) {
  struct Candidate {
    std::size_t layer;
    double penalty_per_byte;
  };
  std::vector<Candidate> candidates;
  OnChip result;
  for (const std::size_t l : layers) {
    const Layer& layer = profile.layers[l];
    result.of_layer[l] = true;
    if (layer.parameter_bytes <= 0) continue;
    double penalty = 0;
    if (layer.has_flops()) {
      const LayerTimes chip = analytic_layer_times(layer, device, profile.dtype, profile.sequence_length, true);
      const LayerTimes ddr = analytic_layer_times(layer, device, profile.dtype, profile.sequence_length, false);
      penalty = (ddr.forward_s + ddr.backward_s) - (chip.forward_s + chip.backward_s);
    }
    candidates.push_back({l, penalty / layer.parameter_bytes});
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.penalty_per_byte > b.penalty_per_byte; });
  double room = device.on_chip_bytes;
  for (const Candidate& candidate : candidates) {
    const double need = 2 * profile.layers[candidate.layer].parameter_bytes;
    if (need <= room) {
      room -= need;
      result.kept_bytes += need;
    } else {
      result.of_layer[candidate.layer] = false;
      result.streamed_bytes += need;
      ++result.streamed_layers;
    }
  }
  return result;
}

/// The layer's base times (what code reading forward_s/backward_s sees)
/// become its device times for `model`.
void take_base_times(Layer& layer, const std::string& model) {
  const LayerTimes& times = layer.device_times.at(model);
  layer.forward_s = times.forward_s;
  layer.backward_s = times.backward_s;
  layer.backward_input_s = times.backward_input_s;
  layer.backward_weight_s = times.backward_weight_s;
}

std::string on_chip_text(const OnChip& on_chip, const DeviceModel& device) {
  if (on_chip.streamed_layers == 0)
    return fmt::format("weights and gradients, {:.1f} MB, fit in its {:.1f} MB of on-chip RAM", on_chip.kept_bytes / 1e6,
                       device.on_chip_bytes / 1e6);
  return fmt::format("weights and gradients, {:.1f} MB, exceed its {:.1f} MB of on-chip RAM: {:.1f} MB kept on chip, {} "
                     "layer(s) ({:.1f} MB) streamed from DDR",
                     (on_chip.kept_bytes + on_chip.streamed_bytes) / 1e6, device.on_chip_bytes / 1e6,
                     on_chip.kept_bytes / 1e6, on_chip.streamed_layers, on_chip.streamed_bytes / 1e6);
}

}  // namespace

void check_fp8_hosts(const Profile& profile, const PlatformSummary& platform, const std::string& format) {
  for (const HostInfo& host : platform.hosts) {
    const DeviceModel* device = host.device_model.empty() ? nullptr : find_device_model(host.device_model);
    if (device == nullptr)
      throw InputError(fmt::format("--fp8-format {}: {}: host '{}' has no device model; FP8 runs on a GPU with FP8 tensor "
                                   "cores that pipegrid times by its device model (H100, H200 or H800): give the host a "
                                   "device_model property",
                                   format, platform.file, host.name));
    if (!(device->peak_fp8_flops > 0))
      throw InputError(fmt::format("--fp8-format {}: {}: host '{}' is a {} ({}), which has no FP8 tensor cores; FP8 runs "
                                   "on H100, H200 or H800",
                                   format, platform.file, host.name, device->name, device->description));
  }
  for (std::size_t i = 0; i < profile.layers.size(); ++i) {
    const Layer& layer = profile.layers[i];
    if (layer.times_given)
      throw InputError(fmt::format("--fp8-format {}: profile '{}': layer {} '{}' has measured times; FP8 changes the GEMMs "
                                   "of the tensor-core model, so every layer must be timed by the device models (a "
                                   "profile without times, e.g. --model gpt)",
                                   format, profile.name, i, layer.name));
    if (!layer.transformer_shape)
      throw InputError(fmt::format("--fp8-format {}: profile '{}': layer {} '{}' has no transformer_shape; FP8 applies "
                                   "to the tensor-core model, which times GPT-style layers kernel by kernel (--model gpt)",
                                   format, profile.name, i, layer.name));
  }
}

std::vector<std::string> fill_analytic_times(Profile& profile, const PlatformSummary& platform, FpgaWeights fpga_weights,
                                             const TensorParallelShare& share, const std::string& fp8_format) {
  std::vector<std::size_t> missing;
  for (std::size_t i = 0; i < profile.layers.size(); ++i)
    if (!profile.layers[i].times_given) missing.push_back(i);
  if (missing.empty()) return {};
  auto layer_label = [&](std::size_t i) { return fmt::format("layer {} '{}'", i, profile.layers[i].name); };
  if (!profile.measured.empty())
    throw InputError(fmt::format("profile '{}': {} has no times; a profile measured at several micro-batch sizes must "
                                 "give every layer's times",
                                 profile.name, layer_label(missing.front())));
  for (const std::size_t i : missing) {
    const Layer& layer = profile.layers[i];
    if (!layer.has_flops())
      throw InputError(fmt::format("profile '{}': {} has neither forward_s/backward_s nor forward_flops: give its "
                                   "times or its FLOPs",
                                   profile.name, layer_label(i)));
    for (const HostInfo& host : platform.hosts) {
      if (!host.device_model.empty()) continue;
      if (!host.device_type.empty() && layer.device_times.count(host.device_type)) continue;
      throw InputError(fmt::format(
          "{}: host '{}' has no device model, and profile '{}' gives no times for {}: give the host a device_model "
          "property (one of {}), or give the layer's times",
          platform.file, host.name, profile.name, layer_label(i), device_catalogue_names()));
    }
  }
  std::vector<std::string> models;  // in host order, each once
  for (const HostInfo& host : platform.hosts)
    if (!host.device_model.empty() && std::find(models.begin(), models.end(), host.device_model) == models.end())
      models.push_back(host.device_model);
  std::vector<std::size_t> all_layers(profile.layers.size());
  for (std::size_t i = 0; i < all_layers.size(); ++i) all_layers[i] = i;
  std::vector<std::string> notes;
  for (const std::string& name : models) {
    const DeviceModel& device = device_model(name, fmt::format("{}: device_model", platform.file));
    // FPGAs: the whole model's weights on one board, as much as fits
    // (WholeModel), or every layer on chip (StagesFit) until
    // place_fpga_weights knows each board's stages.
    OnChip on_chip;
    if (device.kind == DeviceKind::Fpga && fpga_weights == FpgaWeights::WholeModel)
      on_chip = keep_on_chip(profile, all_layers, device);
    int by_kernels = 0;
    for (const std::size_t i : missing) {
      Layer& layer = profile.layers[i];
      if (times_by_kernels(layer, device)) {
        ++by_kernels;
        const ShapedTimes shaped = shaped_layer_times(layer, device, profile.dtype, share, !fp8_format.empty());
        // Stored as the whole group's: tensor_parallel_profile and context_parallel_profile divide them back.
        const double divided = (share.t > 1 && tensor_parallel_splits(layer, share.sequence_parallel) ? share.t : 1) *
                               std::max(1, share.context_parallel);
        LayerTimes times = shaped.times;
        times.forward_s *= divided;
        times.backward_input_s = *times.backward_input_s * divided;
        times.backward_weight_s = *times.backward_weight_s * divided;
        times.backward_s = *times.backward_input_s + *times.backward_weight_s;
        layer.device_times[name] = times;
        if (name == platform.hosts.front().device_model && layer.op == "transformer")
          layer.attention_core_time_share = shaped.attention_core_time_share;
        continue;
      }
      const auto kept = on_chip.of_layer.find(i);
      layer.device_times[name] = analytic_layer_times(layer, device, profile.dtype, profile.sequence_length,
                                                      kept == on_chip.of_layer.end() || kept->second);
    }
    std::string note = fmt::format("{} layer(s) of '{}' timed by the {} device model ({}, dtype {})", missing.size(),
                                   profile.name, name, device.description, printable_dtype(profile.dtype));
    if (by_kernels > 0)
      note += fmt::format("; {} kernel by kernel (tensor-core model: GEMMs by shape at {:.0f}% of the dense peak, "
                          "flash attention {:.0f}% forward and {:.0f}% backward, element-wise at {:.0f}% of {:.4g} GB/s, "
                          "{}{}{})",
                          by_kernels, 100 * device.tensor_cores.gemm_efficiency,
                          100 * device.tensor_cores.attention_forward_efficiency,
                          100 * device.tensor_cores.attention_backward_efficiency,
                          100 * device.tensor_cores.memory_efficiency, device.memory_bandwidth_Bps / 1e9,
                          device.tensor_cores.kernel_overhead_s > 0
                              ? fmt::format("{:g} us per kernel", device.tensor_cores.kernel_overhead_s * 1e6)
                              : std::string("no fixed cost per kernel"),
                          share.t > 1 ? fmt::format(", as one of {} tensor-parallel members", share.t) : "",
                          share.context_parallel > 1
                              ? fmt::format(", as one of {} context-parallel ranks", share.context_parallel)
                              : "");
    if (by_kernels > 0 && !fp8_format.empty())
      note += fmt::format("; FP8 recipe {}: the blocks' linear GEMMs at the FP8 dense peak {:.4g} TFLOP/s with their "
                          "input and output-gradient casts (docs/semantics.md, FP8)",
                          fp8_format, device.peak_fp8_flops / 1e12);
    if (device.kind == DeviceKind::Fpga)
      note += fpga_weights == FpgaWeights::StagesFit ? "; weights on chip while the partition is chosen"
                                                     : "; the whole model's " + on_chip_text(on_chip, device);
    notes.push_back(std::move(note));
  }
  const std::string& first = platform.hosts.front().device_model;
  if (!first.empty())
    for (const std::size_t i : missing) take_base_times(profile.layers[i], first);
  return notes;
}

std::vector<std::string> place_fpga_weights(Profile& profile, const Partition& partition, const PlatformSummary& platform) {
  std::vector<std::string> notes;
  if (partition.stage_of_layer.size() != profile.layers.size()) return notes;
  std::map<std::string, std::vector<int>> stages_of_host;
  for (int stage = 0; stage < partition.num_stages(); ++stage)
    for (const std::string& host : partition.hosts[static_cast<std::size_t>(stage)]) stages_of_host[host].push_back(stage);
  // layer -> (model -> on chip on every board of that model holding it)
  std::map<std::size_t, std::map<std::string, bool>> on_chip_of_layer;
  for (const HostInfo& host : platform.hosts) {
    if (host.device_model.empty()) continue;
    const DeviceModel& device = device_model(host.device_model, fmt::format("{}: device_model", platform.file));
    if (device.kind != DeviceKind::Fpga) continue;
    const auto held = stages_of_host.find(host.name);
    if (held == stages_of_host.end()) continue;
    std::vector<std::size_t> layers;
    bool analytic = false;  // a board running measured layers only keeps their times: nothing to say
    for (std::size_t l = 0; l < profile.layers.size(); ++l)
      if (std::find(held->second.begin(), held->second.end(), partition.stage_of_layer[l]) != held->second.end()) {
        layers.push_back(l);
        analytic = analytic || !profile.layers[l].times_given;
      }
    if (!analytic) continue;
    const OnChip on_chip = keep_on_chip(profile, layers, device);
    notes.push_back(fmt::format("host '{}' ({}): its stages' {}", host.name, host.device_model, on_chip_text(on_chip, device)));
    for (const std::size_t l : layers) {
      if (profile.layers[l].times_given) continue;
      auto [entry, inserted] = on_chip_of_layer[l].emplace(host.device_model, on_chip.of_layer.at(l));
      if (!inserted) entry->second = entry->second && on_chip.of_layer.at(l);
    }
  }
  const std::string& first = platform.hosts.empty() ? std::string() : platform.hosts.front().device_model;
  for (const auto& [l, models] : on_chip_of_layer) {
    Layer& layer = profile.layers[l];
    for (const auto& [model, on_chip] : models) {
      layer.device_times[model] =
          analytic_layer_times(layer, device_model(model, "device_model"), profile.dtype, profile.sequence_length, on_chip);
      if (model == first) take_base_times(layer, model);
    }
  }
  return notes;
}

const DeviceModel* gpu_device_model(const HostInfo& host) {
  const DeviceModel* device = host.device_model.empty() ? nullptr : find_device_model(host.device_model);
  return device != nullptr && device->kind == DeviceKind::Gpu ? device : nullptr;
}

int give_device_optimizer_steps(PlatformSummary& platform, double step_bytes_per_weight_byte) {
  if (!(step_bytes_per_weight_byte > 0)) return 0;
  int given = 0;
  for (HostInfo& host : platform.hosts) {
    const DeviceModel* device = gpu_device_model(host);
    if (device == nullptr || host.has_optimizer_step()) continue;
    host.optimizer_step_rate_Bps = device->memory_bandwidth_Bps * kMaxMemoryEfficiency / step_bytes_per_weight_byte;
    ++given;
  }
  return given;
}

LinearFit fit_time_line(const std::vector<FitSample>& samples, double min_slope) {
  if (samples.empty()) throw InputError("efficiency fit: no samples");
  const Eigen::Index rows = static_cast<Eigen::Index>(samples.size());
  Eigen::MatrixXd design(rows, 2);
  Eigen::VectorXd times(rows);
  for (Eigen::Index i = 0; i < rows; ++i) {
    const FitSample& sample = samples[static_cast<std::size_t>(i)];
    design(i, 0) = sample.x;
    design(i, 1) = sample.n;
    times(i) = sample.t;
  }
  // Columns scaled to unit norm first: x (FLOPs) and n (steps) differ by
  // ten orders of magnitude.
  const Eigen::Vector2d scale(std::max(design.col(0).norm(), 1e-300), std::max(design.col(1).norm(), 1e-300));
  const Eigen::MatrixXd scaled = design * scale.cwiseInverse().asDiagonal();
  LinearFit fit;
  const Eigen::Vector2d free = scaled.colPivHouseholderQr().solve(times);
  fit.a = free(0) / scale(0);
  fit.b = free(1) / scale(1);
  if (!(fit.b >= 0) || design.col(1).norm() == 0) {
    const Eigen::VectorXd x = design.col(0);
    fit.a = x.squaredNorm() > 0 ? x.dot(times) / x.squaredNorm() : 0;
    fit.b = 0;
  }
  if (min_slope > 0 && fit.a < min_slope) {
    // The slope held at its bound; the intercept alone fits what is left.
    const Eigen::VectorXd n = design.col(1);
    const Eigen::VectorXd residual = times - min_slope * design.col(0);
    fit.a = min_slope;
    fit.b = n.squaredNorm() > 0 ? std::max(0.0, n.dot(residual) / n.squaredNorm()) : 0;
    fit.at_min_slope = true;
  }
  if (!(fit.a > 0) || !std::isfinite(fit.a))
    throw InputError(fmt::format("efficiency fit: the fitted time per unit of work is {:g}, not positive", fit.a));
  return fit;
}

EfficiencyCurve curve_from_fit(const LinearFit& fit, double rate) { return {1.0 / (fit.a * rate), fit.b / fit.a}; }

}  // namespace pipegrid
