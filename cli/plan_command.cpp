#include "cli/plan_command.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "api/planner.hpp"
#include "cli/model_command.hpp"
#include "cli/plan_mcmc.hpp"
#include "layout/megatron_args.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/platform_check.hpp"
#include "generators/cluster_platform.hpp"
#include "render/charts.hpp"

namespace pipegrid::cli {
namespace {

api::PlannerRequest request;
std::string megatron_args_file;
std::string server;
int gpus = 0;
std::string save_platform, pareto_svg, output_json;
bool print_json = false;
std::string sequence_parallel = "both", distributed_optimizer = "both", overlap = "on";
std::string search_kind = "enumerate";
ModelSpec model_spec;  ///< --model gpt and its options: the model as the generator builds it
// --search mcmc's options (cli/plan_mcmc.hpp); --platform, --memory,
// --global-batch-size, --top and --json are registered there once and
// shared with the enumeration.
McmcPlanOptions mcmc_options;
CLI::App* plan_app = nullptr;

// Options only one search reads: given to the other, they are refused.
const std::vector<std::string> kEnumerateOnly = {
    "--server", "--gpus", "--save-platform", "--megatron-args", "--megatron-args-file", "--model", "--tensor-parallel",
    "--pipeline-parallel", "--data-parallel", "--virtual-stages", "--micro-batch-sizes", "--max-micro-batch-size",
    "--schedules", "--recompute", "--sequence-parallel", "--distributed-optimizer", "--overlap-grad-reduce",
    "--exhaustive", "--jobs", "--pareto-svg", "--output-json"};
const std::vector<std::string> kMcmcOnly = {
    "--profile", "--batch-size", "--micro-batch-size", "--micro-batch-scaling", "--micro-batches", "--optimizer", "--seed",
    "--budget-steps", "--budget-seconds", "--beta", "--restart-steps", "--max-stages", "--max-tensor-parallel",
    "--check-delta", "--no-simgrid", "--save-plan"};

void refuse_other_search_options(const std::vector<std::string>& names, const std::string& search, const std::string& other) {
  for (const std::string& name : names)
    if (plan_app->count(name) > 0)
      throw InputError(fmt::format("{}: an option of plan --search {}, not of --search {}", name, other, search));
}

/// "[#####-----] 7/12 simulated, best 14.52 s" on stderr when it is a terminal.
class ProgressBar {
 public:
  void update(std::size_t done, std::size_t due, double best_s) {
    started_ = true;
    if (!enabled_ || due == 0) return;
    const int width = 30;
    const int filled = static_cast<int>(width * done / due);
    std::cerr << fmt::format("\rplan: [{}{}] {}/{} simulated{}", std::string(filled, '#'),
                             std::string(width - filled, '-'), done, due,
                             best_s > 0 ? fmt::format(", best {:.4g} s", best_s) : std::string())
              << std::flush;
  }
  void finish() const {
    if (enabled_ && started_) std::cerr << "\r" << std::string(79, ' ') << "\r" << std::flush;
  }

 private:
  bool enabled_ = isatty(STDERR_FILENO) == 1;
  bool started_ = false;
};

std::vector<bool> switch_values(const std::string& text, const std::string& flag) {
  if (text == "both") return {false, true};
  if (text == "on") return {true};
  if (text == "off") return {false};
  throw InputError(fmt::format("{}: expected on, off or both, found '{}'", flag, printable(text)));
}

std::string optional_number(const std::optional<double>& value, const char* format) {
  return value ? fmt::format(fmt::runtime(format), *value) : std::string("-");
}

std::string table_text(const api::PlannerResult& result) {
  std::string out;
  out += fmt::format("plan: {} GPUs ({} per server, {}), {} usable per GPU, global batch {}\n", result.gpus,
                     result.gpus_per_server, result.device,
                     std::isfinite(result.usable_memory_bytes) ? human_bytes(result.usable_memory_bytes) : "unlimited",
                     result.global_batch_size);
  out += fmt::format("search: {} layouts enumerated, {} refused by Megatron-LM's rules, {} cannot fit (memory bound), "
                     "{} cannot beat the best (time bound), {} simulated ({} jobs)\n",
                     result.enumerated, result.refused, result.memory_bounded, result.time_bounded, result.simulated,
                     result.jobs);
  for (const auto& [reason, count] : result.refusals) out += fmt::format("  refused ({}): {}\n", count, reason);
  if (result.simulated > 0)
    out += fmt::format("bound: simulated / lower bound {:.3f} mean, {:.3f} max over the layouts simulated\n",
                       result.mean_bound_ratio, result.max_bound_ratio);
  if (result.best_unsimulated_bound_s)
    out += fmt::format("proof: every layout not simulated has a time bound of at least {:.4g} s\n",
                       *result.best_unsimulated_bound_s);
  out += "\n";
  const std::size_t shown = std::min<std::size_t>(result.ranking.size(), static_cast<std::size_t>(request.top));
  if (shown > 0)
    out += fmt::format("{:>4}  {:<36} {:>16} {:>11} {:>10} {:>9} {:>7} {:>6} {:>10} {:>9}\n", "rank", "layout", "schedule",
                       "iteration", "samples/s", "TFLOP/s", "MFU", "bubble", "peak", "bound");
  for (std::size_t i = 0; i < shown; ++i) {
    const api::SimulatedLayout& s = result.ranking[i];
    const std::string rank = s.fits ? fmt::format("{}", i + 1) : "-";
    if (!s.error.empty()) {
      out += fmt::format("{:>4}  {:<36} {:>16} refused: {}\n", rank, s.layout.label(), s.layout.schedule, s.error);
      continue;
    }
    out += fmt::format("{:>4}  {:<36} {:>16} {:>9.4g} s {:>10.4g} {:>9} {:>7} {:>6.3f} {:>10} {:>7.4g} s{}\n", rank,
                       s.layout.label(), s.layout.schedule, s.iteration_time_s, s.throughput_samples_per_s,
                       optional_number(s.tflops_per_gpu, "{:.1f}"),
                       s.mfu ? fmt::format("{:.1f}%", *s.mfu * 100) : std::string("-"), s.bubble_fraction,
                       human_bytes(s.peak_memory_bytes), s.bound_time_s, s.fits ? "" : "  does not fit");
  }
  if (result.ranking.size() > shown)
    out += fmt::format("      ... {} more simulated (--top, --json)\n", result.ranking.size() - shown);
  if (shown > 0) out += "\n";
  if (!result.pareto.empty()) {
    out += "Pareto front (throughput against peak memory, layouts simulated):";
    for (const std::size_t i : result.pareto)
      out += fmt::format(" {} ({:.4g} samples/s, {})", result.ranking[i].layout.label(),
                         result.ranking[i].throughput_samples_per_s, human_bytes(result.ranking[i].peak_memory_bytes));
    out += "\n";
  }
  if (result.has_winner()) {
    const api::SimulatedLayout& winner = result.ranking.front();
    out += fmt::format("winner: {} ({}), {:.4g} s per iteration, {:.4g} samples/s", winner.layout.label(),
                       winner.layout.schedule, winner.iteration_time_s, winner.throughput_samples_per_s);
    if (winner.tflops_per_gpu) out += fmt::format(", {:.1f} TFLOP/s per GPU", *winner.tflops_per_gpu);
    if (winner.mfu) out += fmt::format(", MFU {:.1f}%", *winner.mfu * 100);
    out += "\n";
    out += fmt::format("--megatron-args \"{}\"\n", winner.megatron_args);
  } else {
    out += "no layout fits in memory";
    if (result.least_discarded_memory_bytes)
      out += fmt::format(": the least any discarded layout needs is at least {} ({}), against {} usable per GPU",
                         human_bytes(*result.least_discarded_memory_bytes), result.least_discarded_memory_layout,
                         human_bytes(result.usable_memory_bytes));
    out += "\n";
  }
  for (const std::string& note : result.notes) out += "note: " + note + "\n";
  return out;
}

std::string pareto_text(const api::PlannerResult& result) {
  charts::ParetoChart chart;
  chart.title = fmt::format("pipegrid plan: {} GPUs ({}), global batch {}: throughput against peak memory", result.gpus,
                            result.device, result.global_batch_size);
  std::map<std::string, charts::Series> by_schedule;
  for (const api::SimulatedLayout& s : result.ranking) {
    if (!s.error.empty()) continue;
    charts::Series& series = by_schedule[s.layout.schedule];
    series.name = s.layout.schedule;
    series.points.push_back({s.peak_memory_bytes, s.throughput_samples_per_s, !s.fits,
                             fmt::format("{}: {:.4g} s", s.layout.label(), s.iteration_time_s)});
  }
  for (auto& [name, series] : by_schedule) chart.series.push_back(std::move(series));
  chart.y.from_zero = false;  // the layouts differ by a few percent: a range from 0 hides it
  if (std::isfinite(result.usable_memory_bytes)) chart.capacity_bytes = result.usable_memory_bytes;
  return charts::pareto_chart_svg(chart);
}

// `--server NAME --gpus N`: a cluster of a catalogue server, written to a
// temporary file removed on exit (or kept with --save-platform).
class TemporaryPlatform {
 public:
  ~TemporaryPlatform() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  std::string make(const std::string& xml) {
    char name[] = "/tmp/pipegrid-plan-XXXXXX.xml";
    const int fd = mkstemps(name, 4);
    if (fd < 0) throw InputError("plan: cannot create a temporary platform file in /tmp");
    close(fd);
    path_ = name;
    write_file_atomically(path_, xml);
    return path_;
  }

 private:
  std::string path_;
};

}  // namespace

CLI::App* add_plan_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "plan", "which layout to run: every Megatron-LM layout (t x p x d, v, micro-batch, recomputation, sequence "
              "parallelism, distributed optimizer) bounded, the best simulated");
  command->add_option("--search", search_kind,
                      "enumerate (default: Megatron-LM layouts, bounded, the best simulated) or mcmc (FlexFlow's "
                      "search over per-stage strategies, docs/search.md)");
  command->add_option("--server", server,
                      "instead of --platform: a catalogue server (" + fmt::format("{}", fmt::join(catalogue_server_names(), ", ")) +
                          "), with --gpus");
  command->add_option("--gpus", gpus, "GPUs of --server (a multiple of its GPUs per server)");
  command->add_option("--save-platform", save_platform, "with --server: write the generated platform here");
  command->add_option("--megatron-args", request.megatron_args,
                      "the model and its training as Megatron-LM arguments, without the layout");
  command->add_option("--megatron-args-file", megatron_args_file, "a file holding those arguments");
  command->add_option("--model", model_spec.name,
                      "instead of --megatron-args: the gpt generator's model (its options --layers, --hidden, ... and "
                      "--dtype, as simulate --model takes them), laid out as Megatron-LM's arguments");
  add_model_options(*command, model_spec, false);
  command->add_option("--tensor-parallel", request.tensor_parallel,
                      "only these tensor sizes (default: the divisors of a server's GPUs)")
      ->delimiter(',');
  command->add_option("--pipeline-parallel", request.pipeline_parallel, "only these pipeline sizes")->delimiter(',');
  command->add_option("--data-parallel", request.data_parallel, "only these data-parallel sizes")->delimiter(',');
  command->add_option("--virtual-stages", request.virtual_stages, "only these model chunks per rank (interleaved)")
      ->delimiter(',');
  command->add_option("--micro-batch-sizes", request.micro_batch_sizes, "only these micro-batch sizes")->delimiter(',');
  command->add_option("--max-micro-batch-size", request.max_micro_batch_size,
                      "micro-batch sizes tried: the divisors of global / d up to this (default 16)");
  command->add_option("--schedules", request.schedules, "1f1b-sno and/or interleaved-1f1b (default both)")->delimiter(',');
  command->add_option("--recompute", request.recompute, "none, selective and/or full (default all three)")->delimiter(',');
  command->add_option("--sequence-parallel", sequence_parallel, "on, off or both (default both)");
  command->add_option("--distributed-optimizer", distributed_optimizer, "on, off or both (default both)");
  command->add_option("--overlap-grad-reduce", overlap,
                      "on (default) or off: --overlap-grad-reduce (and --overlap-param-gather) in layouts of d > 1");
  command->add_flag("--exhaustive", request.exhaustive,
                    "simulate every layout the memory bound keeps (slow: for studying the bound)");
  command->add_option("--jobs", request.jobs, "simulations at once (default: the number of cores)");
  command->add_option("--pareto-svg", pareto_svg, "write the Pareto chart (throughput against peak memory) here");
  command->add_option("--output-json", output_json, "write the result as JSON here (sweep's from_plan reads it)");
  add_mcmc_plan_options(*command, mcmc_options);
  plan_app = command;
  return command;
}

int run_plan_command() {
  if (search_kind == "mcmc") {
    refuse_other_search_options(kEnumerateOnly, "mcmc", "enumerate");
    return run_mcmc_plan(mcmc_options);
  }
  if (search_kind != "enumerate")
    throw InputError(fmt::format("--search: expected enumerate or mcmc, found '{}'", printable(search_kind)));
  refuse_other_search_options(kMcmcOnly, "enumerate", "mcmc");
  // The options both searches read (registered with --search mcmc's).
  request.platform_file = mcmc_options.request.platform_file;
  request.memory = mcmc_options.request.memory;
  if (plan_app->count("--global-batch-size") > 0) request.global_batch_size = mcmc_options.global_batch_size;
  if (plan_app->count("--top") > 0) request.top = mcmc_options.request.top;
  print_json = mcmc_options.json;
  TemporaryPlatform temporary;
  if (!megatron_args_file.empty()) {
    if (!request.megatron_args.empty())
      throw InputError(fmt::format("--megatron-args and --megatron-args-file {}: both give the model; give one",
                                   printable(megatron_args_file)));
    request.megatron_args = read_text_file(megatron_args_file);
    request.origin = megatron_args_file;
  }
  if (!model_spec.name.empty()) {
    if (!request.megatron_args.empty())
      throw InputError(fmt::format("--model {} and {}: both give the model; give one", printable(model_spec.name), request.origin));
    request.megatron_args = megatron_arguments_of_gpt(model_spec);
    request.origin = "--model " + model_spec.name;
  } else if (!model_spec.options.empty() || !model_spec.dtype.empty()) {
    throw InputError("plan: a model option (--layers, --hidden, --dtype, ...) without --model");
  }
  if (!server.empty() || gpus != 0) {
    if (!request.platform_file.empty())
      throw InputError("--platform and --server: both give the platform; give one");
    if (server.empty()) throw InputError("--gpus: give --server too (a catalogue server)");
    const CatalogueServer& entry = catalogue_server(server);
    if (gpus < 1 || gpus % entry.gpus_per_server != 0)
      throw InputError(fmt::format("--gpus: expected a multiple of {}'s {} GPUs per server, found {}", server,
                                   entry.gpus_per_server, gpus));
    const std::string xml = cluster_platform_xml(catalogue_cluster_spec(entry, gpus / entry.gpus_per_server));
    request.platform_file = temporary.make(xml);
    if (!save_platform.empty()) write_file_atomically(save_platform, xml);
  } else if (!save_platform.empty()) {
    throw InputError("--save-platform: only with --server (--platform is a file already)");
  }
  if (request.platform_file.empty()) throw InputError("plan: give --platform FILE, or --server NAME --gpus N");
  request.sequence_parallel = switch_values(sequence_parallel, "--sequence-parallel");
  request.distributed_optimizer = switch_values(distributed_optimizer, "--distributed-optimizer");
  if (overlap != "on" && overlap != "off")
    throw InputError(fmt::format("--overlap-grad-reduce: expected on or off, found '{}'", printable(overlap)));
  request.overlap_grad_reduce = overlap == "on";

  ProgressBar bar;
  const api::PlannerResult result =
      api::plan(request, [&](std::size_t done, std::size_t due, double best) { bar.update(done, due, best); });
  bar.finish();
  const std::string json = api::planner_result_to_json(result);
  OutputFileSet files;
  if (!pareto_svg.empty()) files.add(pareto_svg, pareto_text(result));
  if (!output_json.empty()) files.add(output_json, json);
  files.commit();
  std::cout << (print_json ? json : table_text(result));
  // Wall-clock figures only on a terminal: outputs stay the same bytes.
  if (!print_json && isatty(STDERR_FILENO) == 1)
    std::cerr << fmt::format("plan: searched in {:.1f} s ({:.0f} layouts per second)\n", result.elapsed_s,
                             result.elapsed_s > 0 ? static_cast<double>(result.enumerated) / result.elapsed_s : 0.0);
  return result.has_winner() ? 0 : 1;
}

}  // namespace pipegrid::cli
