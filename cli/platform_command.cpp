#include "cli/platform_command.hpp"

#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "generators/cluster_platform.hpp"
#include "core/io.hpp"
#include "core/platform.hpp"

namespace pipegrid::cli {
namespace {

struct PlatformCommandOptions {
  CLI::App* cluster = nullptr;
  /// Every option's text, by flag; only those given reach the spec.
  std::map<std::string, std::string> values;
  std::string output;
};

PlatformCommandOptions options;

}  // namespace

CLI::App* add_platform_command(CLI::App& app) {
  auto* command = app.add_subcommand("platform", "write SimGrid platform files");
  command->require_subcommand(1);
  auto* cluster = command->add_subcommand("cluster", "a cluster of identical GPU servers on a switch or a leaf-spine fabric: zones per server, leaf and spine");
  options.cluster = cluster;
  const std::vector<std::pair<std::string, std::string>> flags = {
      {"--servers", "servers (zones)"},
      {"--gpus-per-server", "GPU hosts per server"},
      {"--device", "each host's `device` property (a profile's per-device times), such as V100"},
      {"--memory", "each GPU's memory (bytes, or with a unit: 16GiB, 80GB)"},
      {"--memory-reserve",
       fmt::format("what each GPU's process holds besides the model (CUDA context, NCCL buffers, fragmentation): a fraction "
                   "of --memory in [0, 1) or a size (2GiB); default {} (docs/platforms.md)",
                   kDefaultClusterMemoryReserve)},
      {"--intra", "between two GPUs of a server: BANDWIDTH[,LATENCY] (150GBps,2us; latency 0 when omitted)"},
      {"--inter", "between GPUs of two servers: BANDWIDTH[,LATENCY] (25Gbps,5us)"},
      {"--intra-link", "per-gpu (default: each GPU its own full-duplex link) or shared (one link per server for all)"},
      {"--speed", "host speed in flop/s with a SimGrid unit (default 1Tf; not used for profile-timed work)"},
      {"--nic", "per-server (default: one NIC link per server, shared by its GPUs) or per-gpu (each GPU its own NIC "
                "link of the --inter bandwidth, as DGX A100/H100's 8 x 200/400 Gb/s)"},
      {"--servers-per-leaf", "servers under one leaf switch, a divisor of --servers (default: every server on one "
                             "switch); leaves join through a spine"},
      {"--oversubscription", "a leaf's downlink to uplink bandwidth, >= 1 (default 1: non-blocking; 2 for 2:1); needs "
                             "two or more leaves"},
      {"--intra-nccl-efficiency", "the share of the intra bandwidth NCCL achieves, in (0, 1], or none (default from "
                                  "--device: A100 0.77, H100 0.822, ...; docs/platforms.md, NCCL defaults)"},
      {"--inter-nccl-efficiency", "the share of the inter bandwidth NCCL achieves, in (0, 1], or none (default 0.92 for a GPU)"},
      {"--intra-nccl-latency", "NCCL's start latency per operation inside a server (10us), or none (default 10us with "
                               "NVLink devices)"},
      {"--inter-nccl-latency", "NCCL's start latency per operation between servers, or none (default 25us for a GPU)"},
  };
  for (const auto& [flag, help] : flags) cluster->add_option(flag, options.values[flag], help);
  cluster->add_option("--output", options.output, "the platform file to write")->required();
  return command;
}

int run_platform_command() {
  std::map<std::string, std::string> given;
  for (const auto& [flag, value] : options.values)
    if (options.cluster->count(flag) > 0) given[flag] = value;
  const ClusterSpec spec = cluster_spec_from_options(given, "platform cluster");
  write_file_atomically(options.output, cluster_platform_xml(spec));
  const MemoryReserve reserve = parse_memory_reserve(spec.memory_reserve, "--memory-reserve");
  const std::string reserve_text =
      reserve.fraction ? fmt::format("{:g}% of it", *reserve.fraction * 100) : spec.memory_reserve;
  std::string fabric;
  if (spec.nic == NicLayout::PerGpu) fabric += ", a NIC per GPU";
  if (spec.servers_per_leaf > 0 && spec.servers_per_leaf < spec.servers)
    fabric += fmt::format(", {} leaves of {} servers on a spine (oversubscription {:g})", spec.servers / spec.servers_per_leaf,
                          spec.servers_per_leaf, spec.oversubscription);
  // NCCL's values where the cluster has links of that level.
  std::vector<std::string> nccl;
  const auto level = [&](const char* where, const LinkNccl& values) {
    nccl.push_back(fmt::format("{} {}", where, nccl_values_text(values)));
  };
  if (spec.gpus_per_server > 1 && !spec.intra_nccl.is_default()) level("inside a server", spec.intra_nccl);
  if (spec.servers > 1 && !spec.inter_nccl.is_default()) level("between servers", spec.inter_nccl);
  const std::string nccl_note = nccl.empty() ? "" : fmt::format("; NCCL {}", fmt::join(nccl, ", "));
  std::cout << fmt::format("{}: {} hosts, {} server{} x {} GPU{} (s0-gpu0 ... s{}-gpu{}){}, device {}, memory {} each, {} "
                           "held in reserve{}",
                           options.output, spec.servers * spec.gpus_per_server, spec.servers, spec.servers == 1 ? "" : "s",
                           spec.gpus_per_server, spec.gpus_per_server == 1 ? "" : "s", spec.servers - 1,
                           spec.gpus_per_server - 1, fabric, spec.device, spec.memory, reserve_text,
                           options.cluster->count("--memory-reserve") ? "" : " (the default; --memory-reserve)") +
                   nccl_note + "\n";
  return 0;
}

}  // namespace pipegrid::cli
