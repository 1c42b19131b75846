#include "cli/partition_command.hpp"

#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/partition.hpp"
#include "core/io.hpp"
#include "partitioners/partitioners.hpp"

namespace pipegrid::cli {
namespace {

/// What `partition` is asked: the request, and where its result goes.
api::PartitionRequest request;
std::string output_file;  ///< --output: the partition file; "": none
bool print_json = false;  ///< --json: one JSON object on stdout, not the table

std::string layer_range(int first, int last) { return first == last ? std::to_string(first) : fmt::format("{}-{}", first, last); }

}  // namespace

CLI::App* add_partition_command(CLI::App& app) {
  auto* command = app.add_subcommand("partition", "choose stages, layers, replicas and hosts with a partitioner");
  command->add_option("--partitioner", request.partitioner, "pipedream, bapipe or uniform")->required();
  command->add_option("--profile", request.profile_file, "profile JSON, or PipeDream graph.txt")->required();
  command->add_option("--platform", request.platform_file, "SimGrid platform XML (hosts, routes, memory)");
  command->add_option("--machines", request.machines,
                      "pipedream: machines per level, lowest first (e.g. 4 4: 4 GPUs per server, 4 servers)");
  command->add_option("--bandwidth", request.bandwidths,
                      "bandwidth per level, lowest first: bytes/s or SimGrid units (10Gbps, 1.25GBps)");
  command->add_flag("--straight", request.straight, "no replicated stages");
  command->add_flag("--split-layers", request.split_layers,
                    "bapipe: split boundary layers between GPUs too (by default only between FPGAs)");
  command->add_option("--memory", request.memory, "memory per device (bytes or 16GiB): the partition must fit");
  command->add_option("--cost-model", request.cost_model, "pipedream: released (default) or paper");
  command->add_option("--schedule", request.schedule, "the schedule the partition is for (memory estimates)");
  command->add_option("--micro-batches", request.micro_batches, "micro-batches per mini-batch (memory estimates)");
  command->add_option("--optimizer", request.optimizer,
                      "sgd, momentum or adam: optimizer state (memory estimates; default: adam for fp16 and bf16, sgd for "
                      "fp32)");
  command->add_option("--dtype", request.dtype,
                      "fp32, fp16 or bf16: the profile's number format when it states none (memory per parameter)");
  command->add_option("--output", output_file, "write the partition file (read by simulate --partition)");
  command->add_flag("--json", print_json, "print one JSON object on stdout");
  command->add_option("--batch-size", request.batch_size, "micro-batch size the profile was measured at (graph.txt)");
  return command;
}

int run_partition_command() {
  const api::PartitionResult result = api::partition(request);
  const PartitionerOutput& output = result.chosen;
  if (!output_file.empty()) write_file_atomically(output_file, api::partition_file_text(output));
  const Profile& profile = output.profile;
  const std::vector<int>& idle = result.stages_without_compute;
  const std::string& idle_note = result.no_compute_note;
  if (print_json) {
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
    document["partitioner"] = request.partitioner;
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
  std::cout << fmt::format("{} partition of {} ({} layers, micro-batch {})\n", request.partitioner, profile.name,
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
  if (!output_file.empty())
    std::cout << fmt::format("partition file: {} (pipegrid simulate --partition {})\n", output_file, output_file);
  return 0;
}

}  // namespace pipegrid::cli
