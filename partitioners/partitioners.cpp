// The partitioner registry, the uniform baseline, and the per-stage report
// every partitioner gives.

#include "partitioners/partitioners.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/platform_check.hpp"
#include "partitioners/bapipe.hpp"
#include "partitioners/pipedream.hpp"

namespace pipegrid {

const std::vector<std::string>& partitioner_names() {
  static const std::vector<std::string> names = {"uniform", "pipedream", "bapipe"};
  return names;
}

std::vector<StageReport> report_stages(const Profile& profile, const Partition& partition, const PlatformSummary& platform) {
  std::vector<StageReport> reports(partition.num_stages());
  const std::vector<StageCost> costs = stage_costs(profile, partition);
  for (int s = 0; s < partition.num_stages(); ++s) {
    StageReport& report = reports[s];
    report.first_layer = costs[s].first_layer;
    report.last_layer = costs[s].last_layer;
    report.hosts = partition.hosts[s];
    const double replicas = static_cast<double>(report.hosts.size());
    for (const std::string& name : report.hosts) {
      const HostInfo& host = platform.host(name);
      double compute = 0;
      for (int l = report.first_layer; l <= report.last_layer; ++l) {
        const LayerTimes times = layer_times_on(profile.layers[l], host);
        compute += times.forward_s + times.backward_s;
      }
      report.compute_s = std::max(report.compute_s, compute / replicas);
    }
    // Activations out to the next stage and gradients back, each over the
    // route between the stages' first replicas.
    const auto transfer = [&](const std::string& from, const std::string& to, double bytes) {
      if (bytes <= 0) return 0.0;
      const int a = platform.host_index(from), b = platform.host_index(to);
      if (a == b) return 0.0;
      const double bandwidth = platform.route_bandwidth_Bps[a][b];
      if (bandwidth <= 0) throw InputError(fmt::format("{}: no route from {} to {}", platform.file, from, to));
      return platform.route_latency_s[a][b] + bytes / bandwidth;
    };
    if (s + 1 < partition.num_stages())
      report.communication_s = std::max(report.communication_s,
                                        transfer(report.hosts.front(), partition.hosts[s + 1].front(), costs[s].output_bytes));
    if (s > 0)
      report.communication_s = std::max(report.communication_s,
                                        transfer(report.hosts.front(), partition.hosts[s - 1].front(), costs[s].input_bytes));
    report.memory_bytes = 0;
  }
  return reports;
}

std::vector<int> idle_stages(const Profile& profile, const Partition& partition, const PlatformSummary& platform) {
  std::vector<int> idle;
  const std::vector<StageReport> reports = report_stages(profile, partition, platform);
  for (int s = 0; s < static_cast<int>(reports.size()); ++s)
    if (reports[s].compute_s == 0) idle.push_back(s);
  return idle;
}

std::optional<Partition> merge_idle_stages(const Profile& profile, const Partition& partition, const PlatformSummary& platform) {
  const std::vector<int> idle = idle_stages(profile, partition, platform);
  const int stages = partition.num_stages();
  if (idle.empty() || static_cast<int>(idle.size()) == stages || !partition.split_last.empty()) return std::nullopt;
  // new_index[s]: the busy stage stage s's layers go to, numbered among the busy ones.
  std::vector<int> new_index(stages, -1);
  int busy = -1;
  for (int s = 0; s < stages; ++s) {
    if (std::find(idle.begin(), idle.end(), s) == idle.end()) ++busy;
    new_index[s] = busy;
  }
  for (int s = 0; s < stages && new_index[s] < 0; ++s) new_index[s] = 0;
  Partition merged;
  for (const int stage : partition.stage_of_layer) merged.stage_of_layer.push_back(new_index[stage]);
  for (int s = 0; s < stages; ++s)
    if (std::find(idle.begin(), idle.end(), s) == idle.end()) merged.hosts.push_back(partition.hosts[s]);
  return merged;
}

std::string stage_list_text(const std::vector<int>& stages) {
  std::string text = stages.size() == 1 ? "stage " : "stages ";
  for (std::size_t i = 0; i < stages.size(); ++i)
    text += (i == 0 ? "" : i + 1 == stages.size() ? " and " : ", ") + std::to_string(stages[i]);
  return text;
}

namespace {

PartitionerOutput uniform(const PartitionerInput& input) {
  std::vector<std::string> hosts;
  for (const HostInfo& host : input.platform.hosts) hosts.push_back(host.name);
  const int stages = static_cast<int>(std::min(hosts.size(), input.profile.layers.size()));
  PartitionerOutput output;
  output.profile = input.profile;
  output.partition = uniform_partition(input.profile, hosts, stages);
  output.stages = report_stages(output.profile, output.partition, input.platform);
  for (int s = 0; s < stages; ++s)
    if (output.stages[s].compute_s > output.time_per_stage_s) {
      output.time_per_stage_s = output.stages[s].compute_s;
      output.bottleneck_stage = s;
    }
  output.notes.push_back(fmt::format("uniform: {} layers over {} stages by count, one host each", input.profile.layers.size(), stages));
  if (static_cast<int>(hosts.size()) > stages)
    output.notes.push_back(fmt::format("{} hosts left unused: fewer layers than hosts", hosts.size() - stages));
  return output;
}

}  // namespace

PartitionerOutput run_partitioner(const std::string& name, const PartitionerInput& input) {
  if (name == "uniform") return uniform(input);
  if (name == "pipedream") return pipedream_partition(input);
  if (name == "bapipe") return bapipe_partition(input);
  std::string known;
  for (const std::string& each : partitioner_names()) known += (known.empty() ? "" : ", ") + each;
  throw InputError(fmt::format("--partitioner: expected one of {}, found '{}'", known, name));
}

const std::vector<std::string>& run_partitioner_names() {
  static const std::vector<std::string> names = {"uniform", "pipedream", "pipedream-straight", "pipedream-memory", "bapipe"};
  return names;
}

std::optional<double> pipedream_memory_capacity(const PlatformSummary& platform, std::optional<double> memory_limit_bytes) {
  std::optional<double> capacity;
  for (const HostInfo& host : platform.hosts) {
    if (!memory_limit_bytes && !host.memory_bytes) return std::nullopt;
    const double whole = memory_limit_bytes ? *memory_limit_bytes : *host.memory_bytes;
    const double usable = whole - host.memory_reserve_of(whole);
    capacity = capacity ? std::min(*capacity, usable) : usable;
  }
  return capacity ? capacity : memory_limit_bytes;
}

PartitionerOutput partition_for_run(const std::string& name, const RunPartitionInput& input) {
  const std::vector<std::string>& names = run_partitioner_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string known;
    for (const std::string& each : names) known += (known.empty() ? "" : ", ") + each;
    throw InputError(fmt::format("--partitioner: expected one of {}, found '{}'", known, name));
  }
  const Profile& profile = input.graph.profile;
  if (name == "uniform") {
    std::vector<std::string> hosts;
    for (const HostInfo& host : input.platform.hosts) hosts.push_back(host.name);
    if (hosts.size() > profile.layers.size())
      throw InfeasibleError(fmt::format("uniform: {} hosts, one stage each, but only {} layers", hosts.size(), profile.layers.size()));
    PartitionerOutput output;
    output.profile = profile;
    output.partition = uniform_partition(profile, hosts, static_cast<int>(hosts.size()));
    return output;
  }
  PartitionerInput partitioner;
  partitioner.graph = input.graph;
  partitioner.profile = profile;
  partitioner.platform = input.platform;
  partitioner.dtype = input.dtype;
  partitioner.optimizer = input.optimizer;
  partitioner.gradient_dtype = input.gradient_dtype;
  if (name == "bapipe") {
    partitioner.schedule = input.schedule;
    partitioner.micro_batches = input.micro_batches;
    partitioner.memory_limit_bytes = input.memory_limit_bytes;
    partitioner.split_layers = input.split_layers;
    return run_partitioner("bapipe", partitioner);
  }
  partitioner.straight = name == "pipedream-straight";
  if (name == "pipedream-memory") {
    partitioner.memory_limit_bytes = pipedream_memory_capacity(input.platform, input.memory_limit_bytes);
    if (!partitioner.memory_limit_bytes)
      throw InputError(fmt::format("pipedream-memory: partitions within the devices' memory, and {} gives no `memory` for "
                                   "every host: give --memory",
                                   input.platform.file));
  }
  return run_partitioner("pipedream", partitioner);
}

const std::vector<std::string>& partition_rule_names() {
  static const std::vector<std::string> names = {"uniform", "balanced", "megatron"};
  return names;
}

bool is_partition_rule(const std::string& name) {
  const std::vector<std::string>& names = partition_rule_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

Partition partition_by_rule(const std::string& name, const Profile& profile, const std::vector<std::string>& stage_hosts,
                            int virtual_stages, const std::vector<int>& device_of_stage,
                            const MegatronStageSplit& megatron) {
  const int stages = static_cast<int>(stage_hosts.size());
  if (name == "uniform") return uniform_partition(profile, stage_hosts, stages);
  if (name == "balanced") return balanced_partition(profile, stage_hosts, stages);
  if (name == "megatron")
    return megatron_partition(profile, stage_hosts, stages, virtual_stages, device_of_stage, megatron.first_rank_layers,
                              megatron.last_rank_layers, megatron.embedding_slot, megatron.loss_slot);
  throw InputError(fmt::format("--partition: expected uniform, balanced, megatron or a partition file, found '{}'",
                               printable(name)));
}

}  // namespace pipegrid
