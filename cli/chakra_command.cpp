#include "cli/chakra_command.hpp"

#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/simulation.hpp"
#include "cli/simulate_options.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/device_model.hpp"
#include "core/metrics.hpp"
#include "core/plan.hpp"
#include "core/platform.hpp"
#include "core/platform_check.hpp"
#include "interchange/chakra_io.hpp"
#include "interchange/program_graph.hpp"
#include "render/chrome_trace.hpp"
#include "render/timeline_csv.hpp"
#include "render/timeline_svg.hpp"
#include "sim/graph_engine.hpp"

namespace pipegrid::cli {
namespace {

CLI::App* export_app = nullptr;
api::PlanRequest export_request;
std::string export_plan_file, export_format = "chakra", export_prefix;

struct NodeCounts {
  int compute = 0, sends = 0, receives = 0, collectives = 0, other = 0;
  int total() const { return compute + sends + receives + collectives + other; }
};

NodeCounts count_nodes(const interchange::ExecutionTraceSet& set) {
  NodeCounts counts;
  for (const interchange::RankGraph& rank : set.ranks)
    for (const interchange::ExecutionNode& node : rank.nodes) switch (node.type) {
        case interchange::NodeType::CompNode: ++counts.compute; break;
        case interchange::NodeType::CommSendNode: ++counts.sends; break;
        case interchange::NodeType::CommRecvNode: ++counts.receives; break;
        case interchange::NodeType::CommCollNode: ++counts.collectives; break;
        default: ++counts.other; break;
      }
  return counts;
}

/// `word` as one POSIX shell word (single-quoted unless plainly safe).
std::string shell_word(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-+=:,") == std::string::npos)
    return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string counts_text(const NodeCounts& counts) {
  std::string text = fmt::format("{} nodes: {} compute, {} sends, {} receives, {} collectives", counts.total(), counts.compute,
                                 counts.sends, counts.receives, counts.collectives);
  if (counts.other) text += fmt::format(", {} other", counts.other);
  return text;
}

}  // namespace

CLI::App* add_export_command(CLI::App& app) {
  export_app = app.add_subcommand("export", "simulate a run and write its execution traces (MLCommons Chakra: one file per rank)");
  export_app->add_option("--format", export_format, "chakra (default): <PREFIX>.<rank>.et per platform host and <PREFIX>.json, "
                                                    "the communicator groups");
  export_app->add_option("--out", export_prefix, "path prefix of the files written (required)");
  export_app->add_option("--plan", export_plan_file, "export a saved plan (simulate --save-plan) instead of simulate's inputs");
  add_simulate_input_options(*export_app, export_request);
  return export_app;
}

int run_export_command() {
  if (export_format != "chakra")
    throw InputError(fmt::format("--format: expected chakra (MLCommons Chakra execution traces), found '{}'", printable(export_format)));
  if (export_prefix.empty()) throw InputError("export: --out PREFIX is required (files <PREFIX>.<rank>.et and <PREFIX>.json)");
  if (export_prefix.back() == '/')
    throw InputError(fmt::format("--out: expected a path prefix such as traces/run (files <PREFIX>.<rank>.et), found the "
                                 "folder '{}'",
                                 printable(export_prefix)));
  Plan plan;
  if (!export_plan_file.empty()) {
    for (const CLI::Option* option : export_app->get_options())
      if (option->count() > 0 && option->get_lnames().front() != "plan" && option->get_lnames().front() != "out" &&
          option->get_lnames().front() != "format")
        throw InputError(fmt::format("--{}: the plan (--plan) holds the inputs; give one or the other", option->get_lnames().front()));
    plan = read_plan_file(export_plan_file);
  } else {
    check_simulate_inputs(*export_app, export_request);
    plan = api::make_plan(export_request);
  }
  api::enable_progress_on_terminal();
  const api::RunResult result = api::run_plan(plan);
  const interchange::ExecutionTraceSet set = interchange::trace_set_of_run(plan, result);
  interchange::write_chakra_trace_set(set, export_prefix);
  std::cout << fmt::format("wrote {} .. {} ({} ranks, one per platform host) and {} ({} communicator group{})\n",
                           interchange::chakra_trace_file(export_prefix, 0),
                           interchange::chakra_trace_file(export_prefix, static_cast<int>(set.ranks.size()) - 1), set.ranks.size(),
                           interchange::chakra_comm_groups_file(export_prefix), set.process_groups.size(),
                           set.process_groups.size() == 1 ? "" : "s");
  std::cout << counts_text(count_nodes(set)) << "\n";
  std::cout << fmt::format("the run: {} of {} on {}, mini-batches {}, mini-batch time {} s\n", plan.schedule, plan.profile.name,
                           plan.platform_file, plan.mini_batches, format_exact(result.metrics.minibatch_time_s));
  std::cout << fmt::format("replay: pipegrid simulate --platform {} --chakra {}\n", shell_word(plan.platform_file),
                           shell_word(export_prefix));
  for (const std::string& warning : result.warnings) std::cerr << "pipegrid: warning: " << warning << "\n";
  return 0;
}

int run_chakra_replay(const CLI::App& simulate, const std::string& prefix, const std::string& platform_file,
                      const std::string& network, const std::string& transfer_rule, const std::string& collective_model,
                      const ChakraReplayOutputs& outputs) {
  static const std::set<std::string> kApplies = {"chakra", "platform", "network",  "transfer-rule", "collective-model",
                                                 "csv",    "svg",      "trace",    "json"};
  for (const CLI::Option* option : simulate.get_options()) {
    if (option->get_lnames().empty() || option->count() == 0) continue;
    const std::string& name = option->get_lnames().front();
    if (!kApplies.count(name))
      throw InputError(fmt::format("--{}: does not apply to --chakra (the traces hold the model, the layout and the schedule; "
                                   "what applies: --platform, --network, --transfer-rule, --collective-model and the outputs "
                                   "--csv, --svg, --trace, --json)",
                                   name));
  }
  if (prefix.empty() || prefix.back() == '/')
    throw InputError(fmt::format("--chakra: expected the traces' path prefix (files <PREFIX>.0.et, <PREFIX>.1.et, ...), "
                                 "found '{}'",
                                 printable(prefix)));
  if (platform_file.empty()) throw InputError("--chakra: --platform FILE is required (rank r runs on the platform's r-th host)");
  sim::GraphReplayOptions options;
  options.network = sim::parse_network_model(network);
  options.transfer_rule = sim::parse_transfer_rule(transfer_rule);
  options.collective_model = sim::parse_collective_model(collective_model);
  const interchange::ExecutionTraceSet set = interchange::read_chakra_trace_set(prefix);
  const PlatformSummary platform = api::platform_summary(platform_file);
  api::enable_progress_on_terminal();
  Timeline timeline;
  try {
    timeline = sim::simulate_graph(set, platform_file, options);
  } catch (const InputError& error) {
    // The replay names ranks and nodes: the files are the set's.
    throw InputError(fmt::format("{}: {}", prefix + ".<rank>.et",
                                 error.what()));
  }
  const bool tensor_memory = !timeline.memory_series.empty();

  // Per rank: its host, compute busy time (union of its compute records),
  // bytes it sends, and the FLOPs its compute nodes state.
  double start = 0, end = 0;
  bool any = false;
  for (const TimelineRecord& record : timeline.records) {
    start = any ? std::min(start, record.start_s) : record.start_s;
    end = any ? std::max(end, record.end_s) : record.end_s;
    any = true;
  }
  const double span = end - start;
  std::map<std::string, std::vector<std::pair<double, double>>> compute_of;
  std::map<std::string, double> bytes_of;
  for (const TimelineRecord& record : timeline.records) {
    if (record.kind() == RecordKind::Compute) compute_of[record.host].push_back({record.start_s, record.end_s});
    else bytes_of[record.host] += record.bytes;
  }
  const NodeCounts counts = count_nodes(set);
  nlohmann::ordered_json json;
  json["traces"] = prefix;
  json["platform"] = platform_file;
  json["ranks"] = set.ranks.size();
  json["nodes"] = {{"compute", counts.compute}, {"sends", counts.sends}, {"receives", counts.receives},
                   {"collectives", counts.collectives}, {"other", counts.other}};
  json["span_s"] = span;
  std::string table = fmt::format("chakra traces {}: {} ranks, {}\nreplayed on {} (network {}, transfer rule {}; dispatch: "
                                  "docs/semantics.md, \"Replaying an execution graph\")\nspan {} s\n\n",
                                  prefix, set.ranks.size(), counts_text(counts), platform_file, network, transfer_rule,
                                  format_exact(span));
  table += fmt::format("{:>4}  {:<16} {:>9} {:>14} {:>7} {:>14} {:>12} {:>14}\n", "rank", "host", "compute", "busy s", "idle", "sent",
                       "TFLOP/s", "tensor peak");
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (std::size_t r = 0; r < set.ranks.size(); ++r) {
    const std::string& host = platform.hosts.at(r).name;
    double peak = 0;
    if (const auto series = timeline.memory_series.find(host); series != timeline.memory_series.end())
      for (const auto& [time, bytes] : series->second) peak = std::max(peak, bytes);
    const BusyTime busy = busy_time(compute_of[host], start, end);
    double flops = 0;
    bool flops_known = false;
    int compute_nodes = 0;
    for (const interchange::ExecutionNode& node : set.ranks[r].nodes)
      if (node.type == interchange::NodeType::CompNode) {
        ++compute_nodes;
        if (node.num_ops) flops += *node.num_ops, flops_known = true;
      }
    const double idle = span > 0 ? 1 - busy.in_window_s / span : 0;
    const std::string rate = flops_known && span > 0 ? fmt::format("{:.3f}", flops / span / 1e12) : "-";
    table += fmt::format("{:>4}  {:<16} {:>9} {:>14.6f} {:>6.1f}% {:>14} {:>12} {:>14}\n", r, host, compute_nodes, busy.in_window_s,
                         100 * idle, human_bytes(bytes_of[host]), rate, tensor_memory ? human_bytes(peak) : "-");
    nlohmann::ordered_json rank = {{"rank", r}, {"host", host}, {"compute_nodes", compute_nodes}, {"busy_s", busy.in_window_s},
                                   {"idle_fraction", idle}, {"bytes_sent", bytes_of[host]}};
    rank["tflops_per_second"] = flops_known && span > 0 ? nlohmann::ordered_json(flops / span / 1e12) : nlohmann::ordered_json();
    rank["tensor_peak_bytes"] = tensor_memory ? nlohmann::ordered_json(peak) : nlohmann::ordered_json();
    ranks.push_back(rank);
  }
  json["devices"] = ranks;
  // A node that states more FLOPs than its host's device can run in its
  // duration, at the device's best peak over the number formats it has,
  // cannot be true on this platform: said, never hidden.
  std::vector<std::string> warnings;
  for (std::size_t r = 0; r < set.ranks.size(); ++r) {
    const HostInfo& host = platform.hosts.at(r);
    const DeviceModel* device = host.device_model.empty() ? nullptr : find_device_model(host.device_model);
    if (!device) continue;
    double peak = 0;
    for (const char* dtype : {"fp32", "fp16", "bf16"}) {
      try {
        peak = std::max(peak, device->peak_flops(dtype));
      } catch (const InputError&) {
      }
    }
    int above = 0;
    double fastest = 0;
    for (const interchange::ExecutionNode& node : set.ranks[r].nodes)
      if (node.type == interchange::NodeType::CompNode && node.num_ops && node.duration_s > 0) {
        const double rate = *node.num_ops / node.duration_s;
        fastest = std::max(fastest, rate);
        above += rate > peak * (1 + 1e-9) ? 1 : 0;
      }
    if (peak > 0 && above > 0)
      warnings.push_back(fmt::format("rank {} ({}): {} compute node(s) state more FLOPs than a {} can run in their "
                                     "durations (up to {:.1f} TFLOP/s against its {:.1f} TFLOP/s peak): these traces' "
                                     "num_ops or durations are not this platform's",
                                     r, host.name, above, device->name, fastest / 1e12, peak / 1e12));
  }
  json["warnings"] = warnings;
  for (const std::string& warning : warnings) table += "warning: " + warning + "\n";
  // The table lists the warnings itself; with --json they go to stderr too.
  if (outputs.json)
    for (const std::string& warning : warnings) std::cerr << "pipegrid: warning: " << warning << "\n";
  table += "\nTFLOP/s: the FLOPs the rank's compute nodes state (num_ops) over the span; '-' where they state none.\n";
  table += tensor_memory ? "tensor peak: the most bytes of compute nodes' tensor_size held at once, each from its node's start until its "
                           "rank's last data dependent has ended (no weights, no workspace; docs/chakra.md).\n"
                         : "tensor peak: '-', the traces state no tensor_size.\n";

  OutputFileSet files;
  if (!outputs.csv.empty()) files.add(outputs.csv, timeline_to_csv(timeline));
  if (!outputs.trace.empty()) files.add(outputs.trace, timeline_to_chrome_trace(timeline));
  if (!outputs.svg.empty()) {
    SvgOptions svg;
    const std::string platform_name = platform_file.substr(platform_file.find_last_of('/') + 1);
    svg.title = fmt::format("Chakra traces {} replayed on {}", prefix.substr(prefix.find_last_of('/') + 1), platform_name);
    files.add(outputs.svg, timeline_to_svg(timeline, svg));
  }
  files.commit();
  std::cout << (outputs.json ? json.dump(2) + "\n" : table);
  return 0;
}

}  // namespace pipegrid::cli
