// Profile queries that do not depend on a file format: per-host layer times
// and micro-batch sizes.

#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/profile.hpp"

namespace pipegrid {

LayerTimes layer_times_on(const Layer& layer, const HostInfo& host) {
  if (!host.device_type.empty())
    if (const auto it = layer.device_times.find(host.device_type); it != layer.device_times.end()) return it->second;
  return {layer.forward_s / host.speed_factor, layer.backward_s / host.speed_factor};
}

std::vector<int> profile_micro_batch_sizes(const Profile& profile) { return {profile.micro_batch_size}; }

Profile profile_at_micro_batch_size(const Profile& profile, int size) {
  if (size != profile.micro_batch_size)
    throw InputError(fmt::format("profile {}: measured at micro-batch size {} only, so it has no times at size {}",
                                 profile.name, profile.micro_batch_size, size));
  return profile;
}

}  // namespace pipegrid
