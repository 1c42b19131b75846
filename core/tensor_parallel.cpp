#include "core/tensor_parallel.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/platform_check.hpp"

namespace pipegrid {

namespace {

void check_t(int t) {
  if (t < 1 || t > kMaxTensorParallel)
    throw InputError(fmt::format("--tensor-parallel: expected hosts per group from 1 to {}, found {}", kMaxTensorParallel, t));
}

// "a, b, c" for at most `shown` names, then "and N more".
std::string name_list(const Profile& profile, const std::vector<int>& layers, std::size_t shown = 6) {
  std::string text;
  for (std::size_t i = 0; i < layers.size() && i < shown; ++i)
    text += (text.empty() ? "" : ", ") + profile.layers[static_cast<std::size_t>(layers[i])].name;
  if (layers.size() > shown) text += fmt::format(" and {} more", layers.size() - shown);
  return text;
}

}  // namespace

double ring_all_reduce_s(double bytes, int t, const TensorParallelLink& link) {
  if (t <= 1) return 0;
  return 2.0 * (t - 1) * (link.latency_s + bytes / (t * link.bandwidth_Bps));
}

bool tensor_parallel_splits(const Layer& layer) { return layer.op == "transformer" && layer.has_flops(); }

TensorParallelProfile tensor_parallel_profile(const Profile& profile, int t, const TensorParallelLink& link) {
  check_t(t);
  TensorParallelProfile result;
  result.profile = profile;
  if (t == 1) {
    for (std::size_t l = 0; l < profile.layers.size(); ++l) result.replicated.push_back(static_cast<int>(l));
    return result;
  }
  const double n = t;
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& original = profile.layers[l];
    Layer& layer = result.profile.layers[l];
    layer.output_bytes = original.output_bytes / n;
    if (!tensor_parallel_splits(original)) {
      layer.activation_bytes = original.stashed_bytes();
      result.replicated.push_back(static_cast<int>(l));
      continue;
    }
    result.split.push_back(static_cast<int>(l));
    const double all_reduce = ring_all_reduce_s(original.output_bytes, t, link);
    const BackwardSplit backward = backward_split(original);
    layer.forward_s = original.forward_s / n + 2 * all_reduce;
    layer.backward_input_s = backward.input_s / n + 2 * all_reduce;
    layer.backward_weight_s = backward.weight_s / n;
    layer.backward_s = *layer.backward_input_s + *layer.backward_weight_s;
    for (auto& [device, times] : layer.device_times) {
      const BackwardSplit parts = backward_split(original, original.device_times.at(device));
      times.forward_s = times.forward_s / n + 2 * all_reduce;
      times.backward_input_s = parts.input_s / n + 2 * all_reduce;
      times.backward_weight_s = parts.weight_s / n;
      times.backward_s = *times.backward_input_s + *times.backward_weight_s;
    }
    layer.parameter_bytes = original.parameter_bytes / n;
    layer.activation_bytes = original.stashed_bytes() / n;
    for (std::optional<double>* value : {&layer.forward_flops, &layer.backward_input_flops, &layer.backward_weight_flops,
                                         &layer.bytes_read, &layer.bytes_written})
      if (value->has_value()) **value /= n;
  }
  std::string split_text = result.split.empty()
                               ? std::string("no layer split (no transformer layer with FLOPs)")
                               : fmt::format("{} transformer layer{} split", result.split.size(), result.split.size() == 1 ? "" : "s");
  std::string replicated_text = result.replicated.empty()
                                    ? std::string("no layer replicated")
                                    : fmt::format("{} layer{} replicated: {}", result.replicated.size(),
                                                  result.replicated.size() == 1 ? "" : "s", name_list(profile, result.replicated));
  result.note = fmt::format("tensor parallel {}: {}; {}", t, split_text, replicated_text);
  if (!result.split.empty())
    result.note += fmt::format(
        "; per split layer 2 all-reduces of its output in the forward and 2 in the backward, each a ring over {} hosts "
        "(2 x {} x ({} + bytes / ({} x {:.4g} GB/s)))",
        t, t - 1, human_seconds(link.latency_s), t, link.bandwidth_Bps / 1e9);
  result.note += fmt::format("; transfers between stages carry output_bytes / {} (each member sends its share in parallel; "
                             "the group's first host stands for it)",
                             t);
  return result;
}

std::vector<std::vector<int>> tensor_parallel_groups(const PlatformSummary& platform, int t) {
  check_t(t);
  const std::size_t hosts = platform.hosts.size();
  if (hosts % static_cast<std::size_t>(t) != 0)
    throw InputError(fmt::format("--tensor-parallel {}: {} has {} hosts, not a multiple of {}: groups of {} consecutive hosts "
                                 "must cover them all",
                                 t, printable(platform.file), hosts, t, t));
  std::vector<std::vector<int>> groups(hosts / static_cast<std::size_t>(t));
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (int m = 0; m < t; ++m) groups[g].push_back(static_cast<int>(g) * t + m);
    const HostInfo& first = platform.hosts[static_cast<std::size_t>(groups[g].front())];
    for (const int member : groups[g]) {
      const HostInfo& host = platform.hosts[static_cast<std::size_t>(member)];
      if (host.server != first.server)
        throw InputError(fmt::format(
            "--tensor-parallel {}: group {} ({} .. {}) spans two servers: '{}' is in zone '{}', '{}' in zone '{}'; a "
            "tensor-parallel group is t consecutive hosts of one server (one innermost zone of the platform): give a t "
            "that divides the hosts of each server",
            t, g, printable(first.name), printable(platform.hosts[static_cast<std::size_t>(groups[g].back())].name),
            printable(first.name), printable(first.server), printable(host.name), printable(host.server)));
    }
  }
  return groups;
}

TensorParallelLink tensor_parallel_link(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups) {
  TensorParallelLink link;
  bool any = false;
  for (const std::vector<int>& group : groups) {
    if (group.size() < 2) continue;
    if (platform.route_bandwidth_Bps.size() != platform.hosts.size())
      throw InputError(fmt::format("--tensor-parallel: the routes of {} are unknown", printable(platform.file)));
    for (std::size_t m = 0; m < group.size(); ++m) {
      const auto a = static_cast<std::size_t>(group[m]), b = static_cast<std::size_t>(group[(m + 1) % group.size()]);
      const double bandwidth = platform.route_bandwidth_Bps[a][b];
      if (!(bandwidth > 0))
        throw InputError(fmt::format("--tensor-parallel: {} has no route from '{}' to '{}', a step of a tensor-parallel "
                                     "group's all-reduce ring",
                                     printable(platform.file), printable(platform.hosts[a].name), printable(platform.hosts[b].name)));
      const double latency = platform.route_latency_s[a][b];
      link.bandwidth_Bps = any ? std::min(link.bandwidth_Bps, bandwidth) : bandwidth;
      link.latency_s = any ? std::max(link.latency_s, latency) : latency;
      any = true;
    }
  }
  return link;
}

PlatformSummary leader_platform(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups) {
  PlatformSummary leaders;
  leaders.file = platform.file;
  leaders.links = platform.links;
  std::vector<std::size_t> index;
  for (const std::vector<int>& group : groups) index.push_back(static_cast<std::size_t>(group.front()));
  for (const std::size_t i : index) leaders.hosts.push_back(platform.hosts[i]);
  const bool routes = platform.route_bandwidth_Bps.size() == platform.hosts.size();
  const bool links = platform.route_links.size() == platform.hosts.size();
  if (routes) {
    leaders.route_bandwidth_Bps.assign(index.size(), std::vector<double>(index.size(), 0.0));
    leaders.route_latency_s.assign(index.size(), std::vector<double>(index.size(), 0.0));
  }
  if (links) leaders.route_links.assign(index.size(), std::vector<std::vector<int>>(index.size()));
  for (std::size_t a = 0; a < index.size(); ++a)
    for (std::size_t b = 0; b < index.size(); ++b) {
      if (routes) {
        leaders.route_bandwidth_Bps[a][b] = platform.route_bandwidth_Bps[index[a]][index[b]];
        leaders.route_latency_s[a][b] = platform.route_latency_s[index[a]][index[b]];
      }
      if (links) leaders.route_links[a][b] = platform.route_links[index[a]][index[b]];
    }
  if (!links) leaders.links.clear();
  return leaders;
}

}  // namespace pipegrid
