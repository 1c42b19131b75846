// Profile queries that do not depend on a file format: per-host layer times
// and micro-batch sizes (interpolation between measured sizes).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/platform_check.hpp"
#include "core/profile.hpp"

namespace pipegrid {

namespace {

/// The layer's device times for `host`: those of its device type, else those
/// of its device model (fill_analytic_times keys them so); null when neither.
const LayerTimes* device_times_of(const Layer& layer, const HostInfo& host) {
  for (const std::string* key : {&host.device_type, &host.device_model})
    if (!key->empty())
      if (const auto it = layer.device_times.find(*key); it != layer.device_times.end()) return &it->second;
  return nullptr;
}

}  // namespace

void take_values_at_size(Layer& layer, const LayerAtSize& at) {
  layer.forward_s = at.forward_s;
  layer.backward_s = at.backward_s;
  layer.output_bytes = at.output_bytes;
  layer.activation_bytes = at.activation_bytes;
  layer.device_times = at.device_times;
  layer.backward_input_s = at.backward_input_s;
  layer.backward_weight_s = at.backward_weight_s;
  layer.forward_flops = at.forward_flops;
  layer.backward_input_flops = at.backward_input_flops;
  layer.backward_weight_flops = at.backward_weight_flops;
  layer.bytes_read = at.bytes_read;
  layer.bytes_written = at.bytes_written;
  layer.times_given = at.times_given;
}

LayerTimes layer_times_on(const Layer& layer, const HostInfo& host) {
  if (const LayerTimes* times = device_times_of(layer, host)) return *times;
  return {layer.forward_s / host.speed_factor, layer.backward_s / host.speed_factor};
}

BackwardSplit backward_split(double backward_s, std::optional<double> input_s, std::optional<double> weight_s,
                             bool has_parameters) {
  if (input_s && weight_s) return {*input_s, *weight_s};
  if (has_parameters) return {backward_s / 2, backward_s / 2};
  return {backward_s, 0};
}

BackwardSplit backward_split(const Layer& layer) {
  return backward_split(layer.backward_s, layer.backward_input_s, layer.backward_weight_s, layer.has_parameters());
}

BackwardSplit backward_split(const Layer& layer, const LayerTimes& times) {
  return backward_split(times.backward_s, times.backward_input_s, times.backward_weight_s, layer.has_parameters());
}

BackwardSplit backward_split_on(const Layer& layer, const HostInfo& host) {
  if (const LayerTimes* times = device_times_of(layer, host)) return backward_split(layer, *times);
  const BackwardSplit own = backward_split(layer);
  return {own.input_s / host.speed_factor, own.weight_s / host.speed_factor};
}

bool backward_split_sums_to(double backward, double input, double weight) {
  constexpr double kRelativeTolerance = 1e-9;
  const double sum = input + weight;
  return std::fabs(sum - backward) <= kRelativeTolerance * std::max(std::fabs(backward), std::fabs(sum));
}

std::vector<int> profile_micro_batch_sizes(const Profile& profile) {
  if (profile.measured.empty()) return {profile.micro_batch_size};
  std::vector<int> sizes;
  for (const MeasuredSize& measured : profile.measured) sizes.push_back(measured.micro_batch_size);
  return sizes;
}

namespace {

/// The straight line through two measured sizes, evaluated at `size`.
class SizeLine {
 public:
  SizeLine(const Profile& profile, std::size_t a, std::size_t b, int size)
      : profile_(profile), a_(profile.measured[a]), b_(profile.measured[b]), size_(size),
        t_(static_cast<double>(size - a_.micro_batch_size) /
           static_cast<double>(b_.micro_batch_size - a_.micro_batch_size)) {}

  /// v(size) from v(a) and v(b); `field` names the value in the error thrown
  /// when extrapolation makes it negative.
  double at(double value_a, double value_b, const std::string& field) const {
    const double value = value_a + (value_b - value_a) * t_;
    if (value < 0)
      throw InputError(fmt::format(
          "profile {}: {}: extrapolating to micro-batch size {} along the line through sizes {} ({}) and {} ({}) gives "
          "{} (expected a non-negative value): measure the profile at a size nearer {}, or scale the nearest measured "
          "size with --micro-batch-scaling linear",
          profile_.name, field, size_, a_.micro_batch_size, value_a, b_.micro_batch_size, value_b, value, size_));
    return value;
  }
  const MeasuredSize& a() const { return a_; }
  const MeasuredSize& b() const { return b_; }

 private:
  const Profile& profile_;
  const MeasuredSize& a_;
  const MeasuredSize& b_;
  int size_;
  double t_;
};

/// A backward split (both parts or neither, at both sizes: check_profile)
/// along `line`, each part like backward_s, then both scaled by
/// backward / (I + W) so that they sum to the line's `backward` up to
/// rounding (extrapolation could otherwise magnify the 1e-9 a file may be
/// off by). Absent at the sizes: absent. `path` names the fields' owner.
void split_on_line(const SizeLine& line, const std::optional<double>& input_a, const std::optional<double>& weight_a,
                   const std::optional<double>& input_b, const std::optional<double>& weight_b, double backward,
                   const std::string& path, std::optional<double>& input, std::optional<double>& weight) {
  input.reset();
  weight.reset();
  if (!(input_a && weight_a && input_b && weight_b)) return;
  double i = line.at(*input_a, *input_b, path + ".backward_input_s");
  double w = line.at(*weight_a, *weight_b, path + ".backward_weight_s");
  if (i + w > 0) {
    const double scale = backward / (i + w);
    i *= scale;
    w *= scale;
  } else {
    i = backward;  // both parts 0: so is backward, up to rounding
  }
  input = i;
  weight = w;
}

/// The single-size profile holding measured size `m` exactly.
Profile profile_at_measured(const Profile& profile, const MeasuredSize& m) {
  Profile result = profile;
  result.measured.clear();
  result.micro_batch_size = m.micro_batch_size;
  result.input_bytes = m.input_bytes;
  for (std::size_t l = 0; l < result.layers.size(); ++l) take_values_at_size(result.layers[l], m.layers[l]);
  return result;
}

/// The analytic fields of a layer (Layer and LayerAtSize alike), by name.
template <typename L>
auto analytic_fields(L& layer) {
  return std::vector<std::pair<const char*, decltype(&layer.forward_flops)>>{{"forward_flops", &layer.forward_flops},
          {"backward_input_flops", &layer.backward_input_flops},
          {"backward_weight_flops", &layer.backward_weight_flops},
          {"bytes_read", &layer.bytes_read},
          {"bytes_written", &layer.bytes_written}};
}

/// The single-size profile at `size` along the line through the measured
/// sizes around it, or through the two nearest when it lies outside them.
Profile profile_on_line(const Profile& profile, int size) {
  const std::vector<MeasuredSize>& measured = profile.measured;
  std::size_t b = 1;
  while (b + 1 < measured.size() && measured[b].micro_batch_size < size) ++b;
  const SizeLine line(profile, b - 1, b, size);

  Profile result = profile;
  result.measured.clear();
  result.micro_batch_size = size;
  result.input_bytes = line.at(line.a().input_bytes, line.b().input_bytes, "input_bytes");
  for (std::size_t l = 0; l < result.layers.size(); ++l) {
    Layer& layer = result.layers[l];
    const LayerAtSize& at_a = line.a().layers[l];
    const LayerAtSize& at_b = line.b().layers[l];
    const std::string path = fmt::format("layers[{}]", l);
    layer.forward_s = line.at(at_a.forward_s, at_b.forward_s, path + ".forward_s");
    layer.backward_s = line.at(at_a.backward_s, at_b.backward_s, path + ".backward_s");
    layer.output_bytes = line.at(at_a.output_bytes, at_b.output_bytes, path + ".output_bytes");
    layer.activation_bytes.reset();
    if (at_a.activation_bytes && at_b.activation_bytes)  // at every size or none (check_profile)
      layer.activation_bytes =
          line.at(*at_a.activation_bytes, *at_b.activation_bytes, path + ".activation_bytes");
    split_on_line(line, at_a.backward_input_s, at_a.backward_weight_s, at_b.backward_input_s, at_b.backward_weight_s,
                  layer.backward_s, path, layer.backward_input_s, layer.backward_weight_s);
    // The analytic fields, given at every size or at none (check_profile).
    const auto fields_a = analytic_fields(at_a), fields_b = analytic_fields(at_b);
    const auto fields = analytic_fields(layer);
    for (std::size_t f = 0; f < fields.size(); ++f) {
      fields[f].second->reset();
      if (*fields_a[f].second && *fields_b[f].second)
        *fields[f].second = line.at(**fields_a[f].second, **fields_b[f].second, path + "." + fields[f].first);
    }
    layer.times_given = at_a.times_given;
    layer.device_times.clear();
    for (const auto& [device, times_a] : at_a.device_times) {
      const LayerTimes& times_b = at_b.device_times.at(device);  // same types at every size (check_profile)
      const std::string device_path = fmt::format("{}.devices.{}", path, device);
      LayerTimes& times = layer.device_times[device];
      times.forward_s = line.at(times_a.forward_s, times_b.forward_s, device_path + ".forward_s");
      times.backward_s = line.at(times_a.backward_s, times_b.backward_s, device_path + ".backward_s");
      split_on_line(line, times_a.backward_input_s, times_a.backward_weight_s, times_b.backward_input_s,
                    times_b.backward_weight_s, times.backward_s, device_path, times.backward_input_s,
                    times.backward_weight_s);
    }
  }
  // Extrapolated far enough, a value passes the limits a file is held to.
  check_profile(result, fmt::format("profile {} at micro-batch size {}", profile.name, size));
  return result;
}

/// Rule none: no size is invented for a single-size profile; a multi-size
/// one is extrapolated along the line through its two nearest sizes.
class NoScaling final : public MicroBatchScaling {
 public:
  const std::string& name() const override {
    static const std::string name = "none";
    return name;
  }
  ProfileAtSize outside_measured(const Profile& profile, int size) const override {
    if (profile.measured.empty())
      throw InputError(fmt::format(
          "profile {}: measured at micro-batch size {} only, so it has no times at size {} (give times at several "
          "sizes, \"micro_batch_sizes\", to interpolate, or derive them from size {} with --micro-batch-scaling "
          "linear: times and activation bytes proportional to the samples)",
          profile.name, profile.micro_batch_size, size, profile.micro_batch_size));
    return {profile_on_line(profile, size), ""};
  }
};

/// Rule linear: the nearest measured size's values, those that grow with
/// the samples scaled by size / measured size.
class LinearScaling final : public MicroBatchScaling {
 public:
  const std::string& name() const override {
    static const std::string name = "linear";
    return name;
  }
  ProfileAtSize outside_measured(const Profile& profile, int size) const override {
    Profile result = profile;
    if (!profile.measured.empty())
      result = profile_at_measured(profile, size < profile.measured.front().micro_batch_size ? profile.measured.front()
                                                                                            : profile.measured.back());
    const int measured = result.micro_batch_size;
    const auto scaled = [&](double value) { return value * size / measured; };
    const auto scaled_split = [&](std::optional<double>& part) {
      if (part) part = scaled(*part);
    };
    result.micro_batch_size = size;
    result.input_bytes = scaled(result.input_bytes);
    for (Layer& layer : result.layers) {
      layer.forward_s = scaled(layer.forward_s);
      layer.backward_s = scaled(layer.backward_s);
      scaled_split(layer.backward_input_s);
      scaled_split(layer.backward_weight_s);
      layer.output_bytes = scaled(layer.output_bytes);
      if (layer.activation_bytes) layer.activation_bytes = scaled(*layer.activation_bytes);
      for (const auto& [name, field] : analytic_fields(layer)) scaled_split(*field);
      for (auto& [device, times] : layer.device_times) {
        times.forward_s = scaled(times.forward_s);
        times.backward_s = scaled(times.backward_s);
        scaled_split(times.backward_input_s);
        scaled_split(times.backward_weight_s);
      }
    }
    check_profile(result, fmt::format("profile {} scaled linearly to micro-batch size {}", profile.name, size));
    return {std::move(result),
            fmt::format("{} samples derived from the measured {} by linear scaling: times, activation and input bytes "
                        "x {}/{}, parameter bytes unchanged",
                        size, measured, size, measured)};
  }
};

const std::vector<const MicroBatchScaling*>& scaling_rules() {
  static const NoScaling none;
  static const LinearScaling linear;
  static const std::vector<const MicroBatchScaling*> rules = {&none, &linear};
  return rules;
}

}  // namespace

const std::vector<std::string>& micro_batch_scaling_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const MicroBatchScaling* rule : scaling_rules()) all.push_back(rule->name());
    return all;
  }();
  return names;
}

const MicroBatchScaling& micro_batch_scaling(const std::string& name) {
  for (const MicroBatchScaling* rule : scaling_rules())
    if (rule->name() == name) return *rule;
  std::string known;
  for (const std::string& each : micro_batch_scaling_names()) known += (known.empty() ? "" : " or ") + each;
  throw InputError(fmt::format("--micro-batch-scaling: expected {}, found '{}'", known, printable(name)));
}

ProfileAtSize profile_at_micro_batch_size(const Profile& profile, int size, const MicroBatchScaling& rule) {
  if (size < 1)
    throw InputError(fmt::format("profile {}: micro-batch size: expected an integer >= 1, found {}", profile.name, size));
  if (profile.measured.empty()) {
    if (size == profile.micro_batch_size) return {profile, ""};
    return rule.outside_measured(profile, size);
  }
  check_profile(profile, fmt::format("profile {}", profile.name));
  const std::vector<MeasuredSize>& measured = profile.measured;
  for (const MeasuredSize& m : measured)
    if (m.micro_batch_size == size) return {profile_at_measured(profile, m), ""};
  if (size < measured.front().micro_batch_size || size > measured.back().micro_batch_size)
    return rule.outside_measured(profile, size);
  return {profile_on_line(profile, size), ""};
}

Profile profile_at_micro_batch_size(const Profile& profile, int size) {
  return profile_at_micro_batch_size(profile, size, micro_batch_scaling("none")).profile;
}

}  // namespace pipegrid
