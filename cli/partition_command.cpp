#include "cli/partition_command.hpp"

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/simulation.hpp"
#include "core/device_model.hpp"
#include "core/error.hpp"
#include "core/plan.hpp"
#include "core/precision.hpp"
#include "core/io.hpp"
#include "core/model_graph.hpp"
#include "partitioners/partitioners.hpp"
#include "partitioners/pipedream.hpp"
#include "sim/engine.hpp"

namespace pipegrid::cli {
namespace {

struct PartitionOptions {
  std::string partitioner;
  std::string profile;
  std::string platform;
  std::vector<int> machines;
  std::vector<std::string> bandwidths;
  bool straight = false;
  bool split_layers = false;
  std::string memory;
  std::string cost_model = "released";
  std::string schedule;
  int micro_batches = 0;
  std::string optimizer;  ///< "": default_optimizer of the dtype
  std::string dtype;
  std::string output;
  bool json = false;
  std::optional<int> batch_size;
};

PartitionOptions options;

/// A platform summary for `--machines`: hosts gpu0.. in hierarchy order
/// (lowest level fastest), each pair joined at the bandwidth of the lowest
/// level whose component holds both, no latency.
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

std::string layer_range(int first, int last) { return first == last ? std::to_string(first) : fmt::format("{}-{}", first, last); }

std::string partition_file_text(const PartitionerOutput& output) {
  nlohmann::ordered_json document = nlohmann::ordered_json::parse(partition_to_json(output.partition));
  if (!output.layer_order.empty()) document["layer_order"] = output.layer_order;
  return document.dump(2) + "\n";
}

}  // namespace

CLI::App* add_partition_command(CLI::App& app) {
  auto* command = app.add_subcommand("partition", "choose stages, layers, replicas and hosts with a partitioner");
  command->add_option("--partitioner", options.partitioner, "pipedream, bapipe or uniform")->required();
  command->add_option("--profile", options.profile, "profile JSON, or PipeDream graph.txt")->required();
  command->add_option("--platform", options.platform, "SimGrid platform XML (hosts, routes, memory)");
  command->add_option("--machines", options.machines,
                      "pipedream: machines per level, lowest first (e.g. 4 4: 4 GPUs per server, 4 servers)");
  command->add_option("--bandwidth", options.bandwidths,
                      "bandwidth per level, lowest first: bytes/s or SimGrid units (10Gbps, 1.25GBps)");
  command->add_flag("--straight", options.straight, "no replicated stages");
  command->add_flag("--split-layers", options.split_layers,
                    "bapipe: split boundary layers between GPUs too (by default only between FPGAs)");
  command->add_option("--memory", options.memory, "memory per device (bytes or 16GiB): the partition must fit");
  command->add_option("--cost-model", options.cost_model, "pipedream: released (default) or paper");
  command->add_option("--schedule", options.schedule, "the schedule the partition is for (memory estimates)");
  command->add_option("--micro-batches", options.micro_batches, "micro-batches per mini-batch (memory estimates)");
  command->add_option("--optimizer", options.optimizer,
                      "sgd, momentum or adam: optimizer state (memory estimates; default: adam for fp16 and bf16, sgd for "
                      "fp32)");
  command->add_option("--dtype", options.dtype,
                      "fp32, fp16 or bf16: the profile's number format when it states none (memory per parameter)");
  command->add_option("--output", options.output, "write the partition file (read by simulate --partition)");
  command->add_flag("--json", options.json, "print one JSON object on stdout");
  command->add_option("--batch-size", options.batch_size, "micro-batch size the profile was measured at (graph.txt)");
  return command;
}

int run_partition_command() {
  PartitionerInput input;
  // No partitioner's result depends on the micro-batch size: a graph.txt
  // whose batch size cannot be inferred is read anyway (reported as unknown).
  input.graph = read_model_graph(options.profile, options.batch_size, BatchSizeUse::Optional);
  input.profile = input.graph->profile;
  input.profile_file = options.profile;
  std::vector<double> bandwidths;
  for (const std::string& text : options.bandwidths) bandwidths.push_back(parse_bandwidth(text, "--bandwidth"));
  if (options.machines.size() != bandwidths.size())
    throw InputError(fmt::format("--machines gives {} levels and --bandwidth {}: expected one bandwidth per level",
                                 options.machines.size(), bandwidths.size()));
  if (options.platform.empty() && options.machines.empty())
    throw InputError("partition: give --platform FILE, or --machines N... with --bandwidth B...");
  if (!options.machines.empty() && options.partitioner != "pipedream" && !options.platform.empty())
    throw InputError(fmt::format("--machines: applies to the pipedream partitioner, not {} (its hosts come from --platform)",
                                 options.partitioner));
  input.platform = options.platform.empty() ? machines_platform(options.machines, bandwidths) : sim::read_platform(options.platform);
  // Layers given by FLOPs only: timed by the hosts' device models
  // (--machines hosts have none: such a profile then needs --platform).
  try {
    fill_analytic_times(input.graph->profile, input.platform);
  } catch (const InputError& error) {
    throw InputError(fmt::format("{}: {}", options.profile, error.what()));
  }
  for (Layer& layer : input.graph->profile.layers) layer.times_given = true;
  input.profile = input.graph->profile;
  input.machines = options.machines;
  input.bandwidths_Bps = bandwidths;
  input.straight = options.straight;
  input.split_layers = options.split_layers;
  if (!options.memory.empty()) input.memory_limit_bytes = parse_bytes(options.memory, "--memory");
  input.cost_model = options.cost_model;
  input.schedule = options.schedule;
  input.micro_batches = options.micro_batches;
  if (!options.optimizer.empty()) optimizer_copies(options.optimizer);  // a clear error for an unknown optimizer
  input.dtype = run_dtype(input.profile.dtype, options.dtype, options.profile);
  input.optimizer = options.optimizer.empty() ? default_optimizer(input.dtype) : options.optimizer;
  const PartitionerOutput output = run_partitioner(options.partitioner, input);

  if (!options.output.empty()) write_file_atomically(options.output, partition_file_text(output));
  const Profile& profile = output.profile;
  std::vector<int> idle;
  for (std::size_t s = 0; s < output.stages.size(); ++s)
    if (output.stages[s].compute_s == 0) idle.push_back(static_cast<int>(s));
  std::string idle_note;
  if (!idle.empty()) {
    int devices = 0;
    for (const int s : idle) devices += static_cast<int>(output.stages[s].hosts.size());
    idle_note = fmt::format("{} {} no compute (its layers take 0 s on its hosts): merged into a neighbour, the pipeline "
                            "needs {} fewer device{} for the same compute (explore runs that partition too)",
                            stage_list_text(idle), idle.size() == 1 ? "does" : "do", devices, devices == 1 ? "" : "s");
    if (idle.size() > 1) idle_note.replace(idle_note.find("its layers take 0 s on its hosts"), 32, "their layers take 0 s on their hosts");
  }
  if (options.json) {
    nlohmann::ordered_json stages = nlohmann::ordered_json::array();
    for (std::size_t s = 0; s < output.stages.size(); ++s) {
      const StageReport& stage = output.stages[s];
      nlohmann::ordered_json entry;
      entry["layers"] = {stage.first_layer, stage.last_layer};
      entry["first_layer_name"] = profile.layers[stage.first_layer].name;
      entry["last_layer_name"] = profile.layers[stage.last_layer].name;
      entry["replicas"] = stage.hosts.size();
      entry["hosts"] = stage.hosts;
      entry["compute_s"] = stage.compute_s;
      entry["communication_s"] = stage.communication_s;
      entry["memory_bytes"] = stage.memory_bytes;
      if (output.predicted_minibatch_s) entry["stage_time_s"] = stage.stage_time_s;
      entry["no_compute"] = stage.compute_s == 0;
      stages.push_back(entry);
    }
    nlohmann::ordered_json document;
    document["partitioner"] = options.partitioner;
    document["profile"] = profile.name;
    document["micro_batch_size"] =
        profile.micro_batch_size_known ? nlohmann::ordered_json(profile.micro_batch_size) : nlohmann::ordered_json();
    if (!profile.micro_batch_size_note.empty()) document["micro_batch_size_note"] = profile.micro_batch_size_note;
    document["time_per_stage_s"] = output.time_per_stage_s;
    if (output.predicted_minibatch_s) {
      document["predicted_minibatch_time_s"] = *output.predicted_minibatch_s;
      document["predicted_for"] = output.predicted_for;
    }
    document["bottleneck_stage"] = output.bottleneck_stage;
    document["stages_without_compute"] = idle;
    document["stages"] = stages;
    if (!output.layer_order.empty()) document["layer_order"] = output.layer_order;
    nlohmann::ordered_json notes = output.notes;
    if (!idle_note.empty()) notes.push_back(idle_note);
    document["notes"] = notes;
    std::cout << document.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{} partition of {} ({} layers, micro-batch {})\n", options.partitioner, profile.name,
                           profile.layers.size(),
                           profile.micro_batch_size_known ? std::to_string(profile.micro_batch_size) : "size unknown");
  if (!profile.micro_batch_size_note.empty())
    std::cout << fmt::format("  micro-batch size {}{}\n", profile.micro_batch_size_note,
                             profile.micro_batch_size_known ? "" : " (the partition does not depend on it)");
  for (const std::string& note : output.notes) std::cout << "  " << note << "\n";
  if (output.predicted_minibatch_s) {
    std::cout << fmt::format("predicted mini-batch time (the partitioner's objective), {}: {}\n", output.predicted_for,
                             human_seconds(*output.predicted_minibatch_s));
    std::cout << fmt::format("time per stage (steady state per micro-batch): {}\n\n", human_seconds(output.time_per_stage_s));
  } else {
    std::cout << fmt::format("time per stage (the partitioner's objective): {}\n\n", human_seconds(output.time_per_stage_s));
  }
  const bool stage_times = output.predicted_minibatch_s.has_value();
  std::cout << fmt::format("{:>5}  {:<9} {:>8}  {:<28} {:>16} {:>13} {:>12}{}\n", "stage", "layers", "replicas", "hosts",
                           "compute/replica", "transfer", "memory est.", stage_times ? fmt::format(" {:>12}", "stage time") : "");
  for (std::size_t s = 0; s < output.stages.size(); ++s) {
    const StageReport& stage = output.stages[s];
    std::string hosts;
    for (const std::string& host : stage.hosts) hosts += (hosts.empty() ? "" : ",") + host;
    if (hosts.size() > 28) hosts = hosts.substr(0, 25) + "...";
    std::string marks;
    if (static_cast<int>(s) == output.bottleneck_stage) marks += "  <- bottleneck";
    if (stage.compute_s == 0) marks += "  <- no compute";
    std::cout << fmt::format("{:>5}  {:<9} {:>8}  {:<28} {:>16} {:>13} {:>12}{}{}\n", s, layer_range(stage.first_layer, stage.last_layer),
                             stage.hosts.size(), hosts, human_seconds(stage.compute_s), human_seconds(stage.communication_s),
                             human_bytes(stage.memory_bytes),
                             stage_times ? fmt::format(" {:>12}", human_seconds(stage.stage_time_s)) : "", marks);
  }
  std::cout << "\ncompute/replica: forward + backward of one micro-batch on the stage's slowest host, divided by its replicas;\n";
  if (stage_times)
    std::cout << "transfer: its longest activation or gradient transfer, charged with every transfer of a micro-batch sharing "
                 "its links;\nstage time: the slowest steady-state bound through the stage (its compute, a link it uses, a "
                 "cycle of stages).\n";
  else
    std::cout << "transfer: the larger of its activation and gradient transfers over the platform's routes.\n";
  if (!idle_note.empty()) std::cout << idle_note << ".\n";
  if (!options.output.empty())
    std::cout << fmt::format("partition file: {} (pipegrid simulate --partition {})\n", options.output, options.output);
  return 0;
}

}  // namespace pipegrid::cli
