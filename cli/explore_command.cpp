#include "cli/explore_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/explore.hpp"
#include "core/io.hpp"
#include "core/plan.hpp"

namespace pipegrid::cli {
namespace {

// The flags that make the request; --json and --save-plan choose what is
// printed and written from the result.
api::ExploreRequest request;
bool print_json = false;
std::string save_plan;

std::vector<std::vector<int>> stage_layer_ranges(const Partition& partition) {
  std::vector<std::vector<int>> ranges(partition.num_stages(), std::vector<int>{-1, -1});
  for (std::size_t l = 0; l < partition.stage_of_layer.size(); ++l) {
    auto& range = ranges[partition.stage_of_layer[l]];
    if (range[0] < 0) range[0] = static_cast<int>(l);
    range[1] = static_cast<int>(l);
  }
  return ranges;
}

/// Draws "[#####-----] 23/77" on stderr when it is a terminal; finish()
/// erases it once an update has come (api::explore tells the first one
/// before its first simulation).
class ProgressBar {
 public:
  void update(std::size_t done, std::size_t total) {
    started_ = true;
    if (!enabled_ || total == 0) return;
    const int width = 40;
    const int filled = static_cast<int>(width * done / total);
    std::cerr << fmt::format("\rexplore: [{}{}] {}/{} candidates simulated", std::string(filled, '#'),
                             std::string(width - filled, '-'), done, total)
              << std::flush;
  }
  void finish() const {
    if (enabled_ && started_) std::cerr << "\r" << std::string(80, ' ') << "\r" << std::flush;
  }

 private:
  bool enabled_ = isatty(STDERR_FILENO) == 1;
  bool started_ = false;
};

std::string throughput_text(double samples_per_s) { return fmt::format("{:.4g}", samples_per_s); }

std::string layout_text(const CandidateOutcome& outcome) {
  return api::layout_label(outcome.tensor_parallel, outcome.pipeline_parallel, outcome.data_parallel);
}

/// What the winner and each schedule's best line say of the layout: with
/// `layouts`, the layout and the global batch; else with `tensor_parallel`,
/// the group size; else nothing (as before either existed).
std::string layout_words(const CandidateOutcome& outcome, bool layouts, bool tensor_parallel) {
  if (layouts) return fmt::format(", layout {}, global batch {}", layout_text(outcome), outcome.global_batch_size);
  return tensor_parallel ? fmt::format(", tensor parallel {}", outcome.tensor_parallel) : std::string();
}

// With `layouts`, columns "layout" (t x p x d) and "global" (samples per
// mini-batch) after the replicas; else with `tensor_parallel`, a column "tp"
// (hosts per tensor-parallel group); without either the table reads as
// before tensor parallelism and layouts.
std::string table(const std::vector<CandidateOutcome>& outcomes, const std::vector<RankedCandidate>& ranking,
                  bool tensor_parallel, bool layouts) {
  // Partition labels ("uniform=bapipe") and replicas vary in length: the
  // columns take the widest.
  std::size_t partition_width = 9, replicas_width = 8, schedule_width = 13, layout_width = 6;
  for (const RankedCandidate& entry : ranking) {
    schedule_width = std::max(schedule_width, outcomes[entry.index].schedule.size());
    partition_width = std::max(partition_width, outcomes[entry.index].partitioner.size());
    replicas_width = std::max(replicas_width, outcomes[entry.index].replicas.size());
    layout_width = std::max(layout_width, layout_text(outcomes[entry.index]).size());
  }
  std::string tp = "tp", layout = "layout", global = "global";  // the row's layout cells
  const auto row = [&](const std::string& rank, const std::string& schedule, const std::string& m, const std::string& micro,
                       const std::string& partition, const std::string& replicas, const std::string& throughput,
                       const std::string& time, const std::string& bubble, const std::string& mfu, const std::string& memory,
                       const std::string& verdict) {
    const std::string layout_cells = layouts            ? fmt::format(" {:<{}} {:>6}", layout, layout_width, global)
                                     : tensor_parallel ? fmt::format(" {:>3}", tp)
                                                       : std::string();
    return fmt::format("{:>4}  {:<{}} {:>4} {:>6}  {:<{}}  {:<{}}{} {:>10} {:>11} {:>6} {:>6} {:>11}  {}\n", rank, schedule,
                       schedule_width, m, micro, partition, partition_width, replicas, replicas_width, layout_cells,
                       throughput, time, bubble, mfu, memory, verdict);
  };
  std::string text = row("rank", "schedule", "M", "micro", "partition", "replicas", "samples/s", "mini-batch", "bubble", "MFU",
                         "peak mem", "verdict");
  for (const RankedCandidate& entry : ranking) {
    const CandidateOutcome& o = outcomes[entry.index];
    const bool ran = !o.error;
    tp = std::to_string(o.tensor_parallel);
    layout = layout_text(o);
    global = std::to_string(o.global_batch_size);
    text += row(entry.rank > 0 ? std::to_string(entry.rank) : "-", o.schedule, std::to_string(o.micro_batches),
                std::to_string(o.micro_batch_size), o.partitioner, o.replicas.empty() ? "-" : o.replicas,
                ran ? throughput_text(o.throughput_samples_per_s) : "-", ran ? human_seconds(o.minibatch_time_s) : "-",
                ran ? fmt::format("{:.3f}", o.bubble_fraction) : "-",
                ran && o.mfu ? fmt::format("{:.1f}%", *o.mfu * 100) : "-", ran ? human_bytes(o.peak_memory_bytes) : "-",
                entry.verdict);
  }
  return text;
}

/// The best fitting candidate of each schedule, in ranking order: the
/// summary that says why the winner's schedule won.
std::string best_per_schedule(const std::vector<CandidateOutcome>& outcomes, const std::vector<RankedCandidate>& ranking,
                              bool tensor_parallel, bool layouts) {
  std::string text;
  std::set<std::string> seen;
  std::optional<double> best;
  std::size_t width = 13;
  for (const RankedCandidate& entry : ranking) width = std::max(width, outcomes[entry.index].schedule.size());
  for (const RankedCandidate& entry : ranking) {
    const CandidateOutcome& o = outcomes[entry.index];
    if (entry.rank == 0 || !seen.insert(o.schedule).second) continue;
    if (!best) best = o.throughput_samples_per_s;
    text += fmt::format("  {:<{}} {:>10} samples/s  {:>7}  with M={}, micro-batch {}, {} partition ({}){}, peak {} on {}\n",
                        o.schedule, width, throughput_text(o.throughput_samples_per_s),
                        seen.size() == 1                                              ? "best"
                        : std::fabs(o.throughput_samples_per_s - *best) <= 1e-9 * *best ? "same"
                                                                                        : fmt::format("-{:.1f}%", 100.0 * (1.0 - o.throughput_samples_per_s / *best)),
                        o.micro_batches, o.micro_batch_size, o.partitioner, o.replicas,
                        layout_words(o, layouts, tensor_parallel),
                        human_bytes(o.peak_memory_bytes), o.peak_memory_host);
  }
  for (const RankedCandidate& entry : ranking) {
    const CandidateOutcome& o = outcomes[entry.index];
    if (!seen.insert(o.schedule).second) continue;
    // Every candidate of this schedule is out of memory or failed; the first
    // listed is the closest to fitting.
    text += fmt::format("  {:<{}} {:>10} {:>17}  nothing fits: {}\n", o.schedule, width, "-", "", entry.verdict);
  }
  return text;
}

nlohmann::ordered_json ranked_json(const api::ExploreResult& result, const std::vector<RankedCandidate>& ranking) {
  const std::vector<CandidateOutcome>& outcomes = result.outcomes;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const RankedCandidate& entry : ranking) {
    const CandidateOutcome& o = outcomes[entry.index];
    nlohmann::ordered_json item;
    item["rank"] = entry.rank;
    item["verdict"] = entry.verdict;
    item["fits"] = o.fits();
    item["schedule"] = o.schedule;
    item["stale_weights"] = o.stale_weights;
    if (result.shows_tensor_parallel() || result.shows_layouts()) item["tensor_parallel"] = o.tensor_parallel;
    if (result.shows_layouts()) {
      item["pipeline_parallel"] = o.pipeline_parallel;
      item["data_parallel"] = o.data_parallel;
      item["layout"] = layout_text(o);
      item["global_batch_size"] = o.global_batch_size;
    }
    item["micro_batches"] = o.micro_batches;
    item["micro_batch_size"] = o.micro_batch_size;
    item["partitioner"] = o.partitioner;
    item["stages_without_compute"] = o.idle_stages;
    if (const std::optional<Partition>& ran_on = result.partitions[entry.index]) {
      const Partition& partition = *ran_on;
      nlohmann::ordered_json stages = nlohmann::ordered_json::array();
      const auto ranges = stage_layer_ranges(partition);
      for (int s = 0; s < partition.num_stages(); ++s)
        stages.push_back({{"layers", ranges[s]}, {"replicas", partition.hosts[s].size()}, {"hosts", partition.hosts[s]}});
      item["stages"] = stages;
    }
    if (o.error) {
      item["error"] = *o.error;
    } else {
      item["throughput_samples_per_s"] = o.throughput_samples_per_s;
      item["minibatch_time_s"] = o.minibatch_time_s;
      item["bubble_fraction"] = o.bubble_fraction;
      item["tflops_per_gpu"] = o.tflops_per_gpu ? nlohmann::ordered_json(*o.tflops_per_gpu) : nlohmann::ordered_json();
      item["mfu"] = o.mfu ? nlohmann::ordered_json(*o.mfu) : nlohmann::ordered_json();
      item["peak_memory_bytes"] = o.peak_memory_bytes;
      item["peak_memory_host"] = o.peak_memory_host;
      nlohmann::ordered_json overflows = nlohmann::ordered_json::array();
      for (const MemoryOverflow& overflow : o.overflows)
        overflows.push_back({{"host", overflow.host}, {"peak_memory_bytes", overflow.peak_bytes}, {"capacity_bytes", overflow.capacity_bytes}});
      item["out_of_memory"] = overflows;
    }
    list.push_back(item);
  }
  return list;
}

}  // namespace

CLI::App* add_explore_command(CLI::App& app) {
  auto* command = app.add_subcommand("explore", "find the fastest schedule x micro-batches x partition that fits in memory");
  command->add_option("--platform", request.platform_file, "SimGrid platform XML (hosts, routes, memory)")->required();
  command->add_option("--profile", request.profile_file, "profile JSON, or PipeDream graph.txt")->required();
  command->add_option("--mini-batch-size", request.mini_batch_size, "samples per mini-batch (split into M micro-batches)")->required();
  command->add_option("--memory", request.memory,
                      "memory per device (bytes or 16GiB), in place of the hosts' own `memory`");
  command->add_option("--schedules", request.schedules, "only these schedules (default: every one valid on the hosts)")->delimiter(',');
  command->add_option("--partitioners", request.partitioners,
                      "only these partitioners (default: uniform,pipedream,bapipe, and megatron for profiles with "
                      "transformer layers)")
      ->delimiter(',');
  command->add_option("--micro-batches", request.micro_batches,
                      "only these micro-batch counts M, per pipeline (default: every divisor)")
      ->delimiter(',');
  command->add_option("--semantics", request.semantics,
                      "exact (default: stale-weight schedules ranked apart) or all (one ranking for every schedule)");
  command->add_option("--jobs", request.jobs, "simulations at once (default: the number of cores)");
  command->add_option("--network", request.network, "simgrid (default) or analytic");
  command->add_option("--transfer-rule", request.transfer_rule,
                      "share (default) or fifo: how concurrent activations and gradients share the network (as simulate)");
  command->add_option("--optimizer", request.optimizer,
                      "sgd, momentum or adam: optimizer state in memory (default: adam for fp16 and bf16, sgd for fp32)");
  command->add_option("--batch-size", request.batch_size, "micro-batch size the profile was measured at (graph.txt)");
  command->add_option("--save-plan", save_plan, "write the winner's plan (pipegrid simulate --plan FILE re-runs it)");
  command->add_flag("--json", print_json, "print one JSON object on stdout");
  command->add_flag("--split-layers", request.split_layers,
                    "bapipe: split boundary layers between GPUs too (by default only between FPGAs)");
  command->add_option("--tensor-parallel", request.tensor_parallel,
                      "only these tensor-parallel group sizes (default: 1, 2, 4, 8 where they divide the servers' hosts, "
                      "t > 1 for profiles with transformer layers with FLOPs)")
      ->delimiter(',');
  command->add_flag("--sequence-parallel", request.sequence_parallel,
                    "Megatron's sequence parallelism in every candidate with t > 1 (docs/semantics.md, Tensor parallelism)");
  command->add_option("--data-parallel", request.data_parallel,
                      "only layouts t x p x d with these data-parallel sizes d (default: every divisor of the hosts / t; "
                      "1: one pipeline over every group, hosts / t: dp)")
      ->delimiter(',');
  command->add_option("--dtype", request.dtype, "fp32, fp16 or bf16: the profile's number format when it states none");
  return command;
}

int run_explore_command() {
  ProgressBar progress_bar;
  api::ExploreResult result;
  try {
    result = api::explore(request, [&](std::size_t simulated, std::size_t total) { progress_bar.update(simulated, total); });
  } catch (...) {
    progress_bar.finish();
    throw;
  }
  progress_bar.finish();
  const bool show_tp = result.shows_tensor_parallel();
  const bool show_layouts = result.shows_layouts();
  const std::vector<CandidateOutcome>& outcomes = result.outcomes;
  const std::vector<RankedCandidate>& ranking = result.ranking;
  const std::vector<RankedCandidate>& stale_ranking = result.stale_weight_ranking;
  const bool has_winner = result.has_winner();

  if (has_winner && !save_plan.empty()) write_file_atomically(save_plan, plan_to_json(*result.best_plan));

  const std::string& platform_name = result.platform.file;
  const Profile& profile = result.profile;
  std::string memory_rule = "each host's own `memory`";
  if (result.memory_limit_bytes)
    memory_rule = fmt::format("{} per device (--memory, in place of the hosts' own)", human_bytes(*result.memory_limit_bytes));
  if (std::any_of(result.platform.hosts.begin(), result.platform.hosts.end(),
                  [](const HostInfo& host) { return host.memory_reserve_bytes || host.memory_reserve_fraction; }))
    memory_rule += ", less each host's `memory_reserve` (out of memory: peak > capacity - reserve)";
  if (print_json) {
    nlohmann::ordered_json document;
    document["platform"] = platform_name;
    document["profile"] = profile.name;
    document["mini_batch_size"] = request.mini_batch_size;
    if (result.memory_limit_bytes) document["memory_limit_bytes"] = *result.memory_limit_bytes;
    document["semantics"] = request.semantics;
    if (request.transfer_rule != "share") document["transfer_rule"] = request.transfer_rule;
    document["micro_batch_note"] = result.micro_batch_choices.note;
    if (!result.device_model_notes.empty()) document["device_model_notes"] = result.device_model_notes;
    if (show_tp) {
      document["tensor_parallel_tried"] = result.tensor_parallel_tried;
      nlohmann::ordered_json notes = nlohmann::ordered_json::object();
      for (const auto& [t, note] : result.tensor_parallel_notes)
        if (t > 1) notes[std::to_string(t)] = note;
      document["tensor_parallel_notes"] = notes;
    }
    if (show_layouts) {
      nlohmann::ordered_json layouts = nlohmann::ordered_json::array();
      for (const api::ExploredLayout& layout : result.layouts)
        layouts.push_back({{"layout", api::layout_label(layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel)},
                           {"tensor_parallel", layout.tensor_parallel},
                           {"pipeline_parallel", layout.pipeline_parallel},
                           {"data_parallel", layout.data_parallel},
                           {"candidates", layout.candidates}});
      document["layouts_tried"] = layouts;
    }
    if (!result.layout_notes.empty()) document["layout_notes"] = result.layout_notes;
    document["candidates_simulated"] = outcomes.size();
    if (has_winner) document["winner"] = ranked_json(result, {ranking.front()})[0];
    else document["winner"] = nullptr;
    document["ranking"] = ranked_json(result, ranking);
    if (request.semantics == "exact") document["stale_weight_ranking"] = ranked_json(result, stale_ranking);
    std::cout << document.dump(2) << "\n";
    return has_winner ? 0 : 1;
  }

  std::string kinds;
  std::map<std::string, int> kind_counts;
  for (const HostInfo& host : result.platform.hosts)
    ++kind_counts[host.device_type.empty() ? to_string(host.kind) : host.device_type];
  for (const auto& [kind, count] : kind_counts) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", count, kind);
  std::cout << fmt::format("pipegrid explore: {} ({} layers) on {} ({} hosts: {}), mini-batch {} samples\n", profile.name,
                           profile.layers.size(), platform_name, result.platform.hosts.size(), kinds, request.mini_batch_size);
  std::cout << fmt::format("micro-batches: {}\n", result.micro_batch_choices.note);
  for (const std::string& note : result.device_model_notes) std::cout << fmt::format("device model: {}\n", note);
  std::cout << fmt::format("memory: {}; {} network model{}; {} candidates simulated, {} at a time\n", memory_rule, request.network,
                           request.transfer_rule != "share" ? fmt::format(", transfer rule {}", request.transfer_rule) : "",
                           outcomes.size(), result.jobs);
  if (show_tp) {
    std::string tried;
    for (const int t : result.tensor_parallel_tried) tried += (tried.empty() ? "" : ", ") + std::to_string(t);
    std::cout << fmt::format("tensor parallel: t = {} hosts per group (tp)\n", tried);
    for (const auto& [t, note] : result.tensor_parallel_notes)
      if (t > 1) std::cout << fmt::format("  {}\n", note);
  }
  if (show_layouts) {
    std::cout << fmt::format("layouts: {} tried, t x p x d = {} hosts (candidates each):\n", result.layouts.size(),
                             result.platform.hosts.size());
    std::map<int, std::string> per_t;
    for (const api::ExploredLayout& layout : result.layouts)
      per_t[layout.tensor_parallel] += fmt::format("{}p{} d{} ({})", per_t[layout.tensor_parallel].empty() ? "" : ", ",
                                                   layout.pipeline_parallel, layout.data_parallel, layout.candidates);
    for (const auto& [t, text] : per_t) std::cout << fmt::format("  t{}: {}\n", t, text);
  }
  for (const std::string& note : result.layout_notes) std::cout << fmt::format("layout: {}\n", note);
  std::cout << "\n";
  if (has_winner) {
    const CandidateOutcome& w = outcomes[ranking.front().index];
    std::cout << fmt::format("winner: {} with M={} micro-batches of {}, {} partition (replicas {}{}): {} samples/s, mini-batch {}, "
                             "peak memory {} on {}\n",
                             w.schedule, w.micro_batches, w.micro_batch_size, w.partitioner, w.replicas,
                             layout_words(w, show_layouts, show_tp),
                             throughput_text(w.throughput_samples_per_s),
                             human_seconds(w.minibatch_time_s), human_bytes(w.peak_memory_bytes), w.peak_memory_host);
  } else {
    std::cout << "no candidate fits: every one is out of memory or failed (see the verdicts)\n";
  }
  std::cout << "\nbest of each schedule:\n" << best_per_schedule(outcomes, ranking, show_tp, show_layouts);
  std::cout << "\nall candidates" << (request.semantics == "exact" ? " (weight-exact schedules)" : "") << ":\n"
            << table(outcomes, ranking, show_tp, show_layouts);
  if (!stale_ranking.empty()) {
    std::cout << "\nstale-weight schedules, ranked apart (they trade statistical efficiency for throughput; --semantics all "
                 "ranks them with the others):\n"
              << table(outcomes, stale_ranking, show_tp, show_layouts);
  }
  std::cout << (show_layouts ? "\nM: micro-batches per pipeline (dp: per mini-batch, over its replicas)" : "\nM: micro-batches per mini-batch")
            << "; micro: samples per micro-batch; replicas: per stage (dp: hosts running the whole model);\nsamples/s: "
               "throughput (flushed schedules: one mini-batch; the others: the steady state); a partition named a=b was "
               "chosen alike by both.\n";
  if (show_layouts)
    std::cout << "layout: t x p x d (Megatron-LM's sizes): t hosts per tensor-parallel group, p pipeline ranks, d whole "
                 "pipelines, ranks in Megatron-Core's order\n(tensor fastest, then data, then pipeline); d1: one pipeline "
                 "over every group (stages replicated by PipeDream's partition only); global: samples per mini-batch "
                 "(micro x M x d).\n";
  if (show_tp)
    std::cout << (show_layouts ? "t" : "tp") << ": hosts per tensor-parallel group (t consecutive hosts of one server run each stage split t ways; "
                 "stages placed on the groups' first hosts; peak memory per group member).\n";
  if (has_winner && !save_plan.empty())
    std::cout << fmt::format("winner's plan: {} (pipegrid simulate --plan {} --svg winner.svg){}\n", save_plan,
                             save_plan,
                             result.memory_limit_bytes ? "; the plan checks memory against the platform's own `memory`, "
                                                              "not --memory"
                                                            : "");
  return has_winner ? 0 : 1;
}

}  // namespace pipegrid::cli
