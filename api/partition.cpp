#include "api/partition.hpp"

#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/device_model.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/model_graph.hpp"
#include "core/partition.hpp"
#include "core/plan.hpp"
#include "core/platform.hpp"
#include "core/precision.hpp"
#include "partitioners/pipedream.hpp"
#include "sim/engine.hpp"

namespace pipegrid::api {
namespace {

/// A platform summary for a machine hierarchy: hosts gpu0.. in hierarchy
/// order (lowest level fastest), each pair joined at the bandwidth of the
/// lowest level whose component holds both, no latency.
PlatformSummary machines_platform(const std::vector<int>& machines, const std::vector<double>& bandwidths) {
  PlatformSummary platform;
  platform.file = "--machines";
  const int total = total_machines(machines);  // bounded: the matrices below are total x total
  for (int d = 0; d < total; ++d) {
    HostInfo host;
    host.name = fmt::format("gpu{}", d);
    platform.hosts.push_back(host);
  }
  platform.route_bandwidth_Bps.assign(total, std::vector<double>(total, 0.0));
  platform.route_latency_s.assign(total, std::vector<double>(total, 0.0));
  for (int a = 0; a < total; ++a)
    for (int b = 0; b < total; ++b) {
      if (a == b) continue;
      int span = 1;
      for (std::size_t level = 0; level < machines.size(); ++level) {
        span *= machines[level];
        if (a / span == b / span) {
          platform.route_bandwidth_Bps[a][b] = bandwidths[level];
          break;
        }
      }
    }
  return platform;
}

/// "stage 3 does no compute ...": what the stages without compute mean; ""
/// for none.
std::string no_compute_note(const PartitionerOutput& chosen, const std::vector<int>& idle) {
  if (idle.empty()) return "";
  int devices = 0;
  for (const int s : idle) devices += static_cast<int>(chosen.stages[s].hosts.size());
  std::string note = fmt::format("{} {} no compute (its layers take 0 s on its hosts): merged into a neighbour, the pipeline "
                                 "needs {} fewer device{} for the same compute (explore runs that partition too)",
                                 stage_list_text(idle), idle.size() == 1 ? "does" : "do", devices, devices == 1 ? "" : "s");
  if (idle.size() > 1) note.replace(note.find("its layers take 0 s on its hosts"), 32, "their layers take 0 s on their hosts");
  return note;
}

}  // namespace

PartitionResult partition(const PartitionRequest& request) {
  PartitionerInput input;
  // No partitioner's result depends on the micro-batch size: a graph.txt
  // whose batch size cannot be inferred is read anyway (reported as unknown).
  input.graph = read_model_graph(request.profile_file, request.batch_size, BatchSizeUse::Optional);
  input.profile = input.graph->profile;
  input.profile_file = request.profile_file;
  std::vector<double> bandwidths;
  for (const std::string& text : request.bandwidths) bandwidths.push_back(parse_bandwidth(text, "--bandwidth"));
  if (request.machines.size() != bandwidths.size())
    throw InputError(fmt::format("--machines gives {} levels and --bandwidth {}: expected one bandwidth per level",
                                 request.machines.size(), bandwidths.size()));
  if (request.platform_file.empty() && request.machines.empty())
    throw InputError("partition: give --platform FILE, or --machines N... with --bandwidth B...");
  if (!request.machines.empty() && request.partitioner != "pipedream" && !request.platform_file.empty())
    throw InputError(fmt::format("--machines: applies to the pipedream partitioner, not {} (its hosts come from --platform)",
                                 request.partitioner));
  input.platform = request.platform_file.empty() ? machines_platform(request.machines, bandwidths)
                                                 : sim::read_platform(request.platform_file);
  // Layers given by FLOPs only: timed by the hosts' device models
  // (--machines hosts have none: such a profile then needs --platform).
  try {
    fill_analytic_times(input.graph->profile, input.platform);
  } catch (const InputError& error) {
    throw InputError(fmt::format("{}: {}", request.profile_file, error.what()));
  }
  for (Layer& layer : input.graph->profile.layers) layer.times_given = true;
  input.profile = input.graph->profile;
  input.machines = request.machines;
  input.bandwidths_Bps = bandwidths;
  input.straight = request.straight;
  input.split_layers = request.split_layers;
  if (!request.memory.empty()) input.memory_limit_bytes = parse_bytes(request.memory, "--memory");
  input.cost_model = request.cost_model;
  input.schedule = request.schedule;
  input.micro_batches = request.micro_batches;
  if (!request.optimizer.empty()) optimizer_copies(request.optimizer);  // a clear error for an unknown optimizer
  input.dtype = run_dtype(input.profile.dtype, request.dtype, request.profile_file);
  input.optimizer = request.optimizer.empty() ? default_optimizer(input.dtype) : request.optimizer;

  PartitionResult result;
  result.chosen = run_partitioner(request.partitioner, input);
  for (std::size_t s = 0; s < result.chosen.stages.size(); ++s)
    if (result.chosen.stages[s].compute_s == 0) result.stages_without_compute.push_back(static_cast<int>(s));
  result.no_compute_note = no_compute_note(result.chosen, result.stages_without_compute);
  return result;
}

std::string partition_file_text(const PartitionerOutput& chosen) {
  nlohmann::ordered_json document = nlohmann::ordered_json::parse(partition_to_json(chosen.partition));
  if (!chosen.layer_order.empty()) document["layer_order"] = chosen.layer_order;
  return document.dump(2) + "\n";
}

}  // namespace pipegrid::api
