#include "core/utilisation.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/tensor_parallel.hpp"

namespace pipegrid {

namespace {

/// "a, b, c" of at most `shown` names, then "and N more".
std::string name_list(const std::vector<std::string>& names, std::size_t shown = 3) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < shown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > shown) out += fmt::format(" and {} more", names.size() - shown);
  return out;
}

/// The device's peak FLOP/s at `dtype` as the hardware states it (an FPGA:
/// one multiply-add per DSP slice per cycle, without the model's assumed
/// DSP efficiency); 0 when it has no such arithmetic.
double hardware_peak_flops(const DeviceModel& device, const std::string& dtype) {
  try {
    const double peak = device.peak_flops(dtype);
    if (device.kind == DeviceKind::Fpga) return 2.0 * device.dsp_slices * device.clock_hz;
    return peak;
  } catch (const InputError&) {
    return 0;
  }
}

}  // namespace

FlopsUtilisation flops_utilisation(const Profile& profile, int tensor_parallel, bool recompute, int micro_batches,
                                   double minibatch_time_s, const std::vector<std::string>& hosts,
                                   const PlatformSummary& platform, const std::string& dtype, bool sequence_parallel,
                                   const std::vector<double>& recomputed_share, bool fp8) {
  FlopsUtilisation out;
  const int t = std::max(1, tensor_parallel);
  out.gpus = static_cast<int>(hosts.size()) * t;
  std::vector<std::string> reasons;

  double model_per_micro_batch = 0, forward_per_micro_batch = 0, recomputed_per_micro_batch = 0;
  std::vector<std::string> without_flops;
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& layer = profile.layers[l];
    if (!layer.has_flops()) {
      without_flops.push_back("'" + layer.name + "'");
      continue;
    }
    const double members = tensor_parallel_splits(layer, sequence_parallel) ? t : 1;
    const double forward = *layer.forward_flops * members;
    forward_per_micro_batch += forward;
    if (l < recomputed_share.size()) recomputed_per_micro_batch += recomputed_share[l] * forward;
    model_per_micro_batch +=
        forward + (layer.backward_input_flops.value_or(0) + layer.backward_weight_flops.value_or(0)) * members;
  }
  if (without_flops.empty()) {
    out.model_flops = model_per_micro_batch * micro_batches;
    const double recomputed = !recomputed_share.empty() ? recomputed_per_micro_batch : recompute ? forward_per_micro_batch : 0;
    out.hardware_flops = *out.model_flops + recomputed * micro_batches;
  } else {
    reasons.push_back(without_flops.size() == profile.layers.size()
                          ? fmt::format("profile '{}' gives no FLOPs (measured times only)", profile.name)
                          : fmt::format("{} of {} layers of profile '{}' have no FLOPs ({})", without_flops.size(),
                                        profile.layers.size(), profile.name, name_list(without_flops)));
  }

  double peak = 0, fp8_peak = 0;
  std::vector<std::string> without_peak;
  std::set<std::string> seen;
  for (const std::string& name : hosts) {
    const HostInfo& host = platform.host(name);
    const DeviceModel* device = host.device_model.empty() ? nullptr : find_device_model(host.device_model);
    const double host_peak = device ? hardware_peak_flops(*device, dtype) : 0;
    if (device && device->kind == DeviceKind::Gpu) fp8_peak += device->peak_fp8_flops * t;
    if (host_peak > 0) peak += host_peak * t;
    else if (seen.insert(name).second)
      without_peak.push_back(fmt::format("'{}'{}", name,
                                         device ? fmt::format(" ({} has no {})", device->name, dtype.empty() ? "fp32" : dtype)
                                                : ""));
  }
  if (without_peak.empty() && !hosts.empty()) out.peak_flops = peak;
  else if (!without_peak.empty())
    reasons.push_back(without_peak.size() == hosts.size() && std::none_of(hosts.begin(), hosts.end(), [&](const std::string& name) {
                        return !platform.host(name).device_model.empty();
                      })
                          ? std::string("no host has a device model (no peak FLOP/s)")
                          : fmt::format("no peak FLOP/s for host {}", name_list(without_peak)));

  if (out.model_flops && minibatch_time_s > 0 && out.gpus > 0) {
    out.tflops_per_gpu = *out.model_flops / minibatch_time_s / out.gpus / 1e12;
    if (out.peak_flops) {
      out.mfu = *out.model_flops / minibatch_time_s / *out.peak_flops;
      out.hfu = *out.hardware_flops / minibatch_time_s / *out.peak_flops;
      if (fp8 && fp8_peak > 0) {
        out.peak_fp8_flops = fp8_peak;
        out.mfu_of_fp8_peak = *out.model_flops / minibatch_time_s / fp8_peak;
      }
    }
  }
  for (const std::string& reason : reasons) out.unavailable += (out.unavailable.empty() ? "" : "; ") + reason;
  return out;
}

std::vector<std::string> passes_above_hardware(const Profile& profile, const DeviceModel& device,
                                               const std::string& dtype, bool fp8) {
  std::vector<std::string> out;
  if (device.kind != DeviceKind::Gpu) return out;
  const double peak = fp8 && device.peak_fp8_flops > 0 ? device.peak_fp8_flops : device.peak_flops(dtype);
  const std::string peak_name = fp8 ? "FP8" : dtype.empty() ? "fp32" : dtype;
  const double bandwidth = device.memory_bandwidth_Bps;
  // A relative tolerance for rounding only: a pass at exactly the bound is allowed.
  constexpr double kRounding = 1e-9;
  for (const Layer& layer : profile.layers) {
    if (layer.times_given || !layer.has_flops()) continue;
    const auto own = layer.device_times.find(device.name);
    const LayerTimes times = own != layer.device_times.end()
                                 ? own->second
                                 : LayerTimes{layer.forward_s, layer.backward_s, layer.backward_input_s, layer.backward_weight_s};
    const double bytes = layer.bytes_read.value_or(0) + layer.bytes_written.value_or(0);
    struct Pass {
      const char* name;
      double flops;
      std::optional<double> seconds;
    };
    const Pass passes[] = {{"forward", *layer.forward_flops, times.forward_s},
                           {"input gradient", layer.backward_input_flops.value_or(0), times.backward_input_s},
                           {"weight gradient", layer.backward_weight_flops.value_or(0), times.backward_weight_s}};
    for (const Pass& pass : passes) {
      if (!pass.seconds || *pass.seconds <= 0 || pass.flops <= 0) continue;
      const double rate = pass.flops / *pass.seconds;
      if (rate > peak * (1 + kRounding))
        out.push_back(fmt::format("layer '{}': its {} runs at {:.1f} TFLOP/s, above the {} {} peak of {:.1f} TFLOP/s",
                                  layer.name, pass.name, rate / 1e12, device.name, peak_name, peak / 1e12));
      if (bytes > 0 && bytes / *pass.seconds > bandwidth * (1 + kRounding))
        out.push_back(fmt::format("layer '{}': its {} moves {:.0f} GB/s, above the {} memory bandwidth of {:.0f} GB/s",
                                  layer.name, pass.name, bytes / *pass.seconds / 1e9, device.name, bandwidth / 1e9));
    }
  }
  return out;
}

}  // namespace pipegrid
