// pipegrid: predict, draw and check pipeline-parallel DNN training.
// Subcommands: simulate, model, schedule, partition, explore, plan, export, compare, platform, trace, demo, execute, calibrate, validate (the last three in LibTorch builds).
// Flag spellings are stable: users script against them.
// Built twice where LibTorch is found (cli/CMakeLists.txt): pipegrid-torch with
// every command (PIPEGRID_WITH_TORCH), and pipegrid without LibTorch, whose
// stand-ins for the LibTorch commands hand their command lines to
// pipegrid-torch (PIPEGRID_TORCH_EXECUTABLE, cli/torch_forward.hpp).

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/compare_command.hpp"
#include "cli/model_command.hpp"
#include "cli/platform_command.hpp"
#include "cli/torch_forward.hpp"
#include "cli/trace_command.hpp"
#include "cli/usage.hpp"
#ifdef PIPEGRID_WITH_TORCH
#include "cli/calibrate_command.hpp"
#include "cli/execute_command.hpp"
#include "validate/launch.hpp"
#endif
#ifdef PIPEGRID_WITH_SIMGRID
#include "cli/chakra_command.hpp"
#include "cli/explore_command.hpp"
#include "cli/plan_command.hpp"
#include "cli/partition_command.hpp"
#include "api/simulation.hpp"
#include "cli/simulate_options.hpp"
#include "cli/sweep_command.hpp"
#ifdef PIPEGRID_WITH_TORCH
#include "cli/validate_command.hpp"
#endif
#endif
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/metrics.hpp"
#include "core/partition.hpp"
#include "core/platform_check.hpp"
#include "core/program.hpp"
#include "core/torch_schedule.hpp"
#include "core/termination.hpp"
#include "render/chrome_trace.hpp"
#include "render/timeline_csv.hpp"
#include "render/timeline_svg.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid::cli {
namespace {

#ifdef PIPEGRID_WITH_SIMGRID
struct OutputFiles {
  std::string trace, csv, svg, save_plan, layout_json;
  bool json = false;
};

void add_output_options(CLI::App& command, OutputFiles& outputs) {
  command.add_flag("--json", outputs.json, "print one JSON object with the metrics on stdout");
  command.add_option("--trace", outputs.trace, "write a Chrome trace (Perfetto) JSON file");
  command.add_option("--csv", outputs.csv, "write the timeline as CSV");
  command.add_option("--svg", outputs.svg, "write the timeline as an SVG Gantt chart");
  command.add_option("--save-plan", outputs.save_plan, "write the plan (everything needed to re-run) as JSON");
  command.add_option("--layout-json", outputs.layout_json,
                     "write the rank map (every GPU's tensor, data and pipeline rank in Megatron-Core's order, its "
                     "host, stages and layers, and the groups) as JSON");
}

/// Adds the run's outputs to `files` (committed by the caller, all or none).
void write_outputs(const Plan& plan, const api::RunResult& result, const OutputFiles& outputs, OutputFileSet& files) {
  if (!outputs.csv.empty()) files.add(outputs.csv, timeline_to_csv(result.timeline));
  if (!outputs.trace.empty()) files.add(outputs.trace, timeline_to_chrome_trace(result.timeline));
  if (!outputs.svg.empty()) files.add(outputs.svg, api::timeline_svg_of_run(plan, result));
  if (!outputs.save_plan.empty()) files.add(outputs.save_plan, plan_to_json(plan));
  if (!outputs.layout_json.empty()) files.add(outputs.layout_json, api::layout_to_json(plan, result.platform));
}

std::string data_dir() {
  if (const char* dir = std::getenv("PIPEGRID_DATA_DIR")) return dir;
  return PIPEGRID_SOURCE_DIR;
}

int run_demo_into(const std::string& output_dir, int micro_batches, const std::string& platform, const std::string& profile,
                  const std::string& partition);

int run_demo(const std::string& output_dir, int micro_batches) {
  const std::string platform = data_dir() + "/platforms/bapipe-4xv100-pcie3.xml";
  const std::string profile = data_dir() + "/models/pipedream/vgg16/graph.txt";
  const std::string partition = data_dir() + "/models/pipedream/vgg16/partition-4-stages.json";
  const bool created = mkdir(output_dir.c_str(), 0777) == 0;
  if (!created && errno != EEXIST)
    throw InputError(fmt::format("{}: cannot create the demo's output folder", output_dir));
  try {
    return run_demo_into(output_dir, micro_batches, platform, profile, partition);
  } catch (...) {
    // Nothing was committed: leave no empty folder behind either.
    if (created) rmdir(output_dir.c_str());
    throw;
  }
}

int run_demo_into(const std::string& output_dir, int micro_batches, const std::string& platform, const std::string& profile,
                  const std::string& partition) {
  // Every schedule's files are committed together at the end.
  OutputFileSet files;
  bool header_printed = false;
  const auto print_header = [&](const Plan& plan) {
    std::cout << fmt::format(
        "pipegrid demo: VGG-16 (PipeDream's published profile: {} layers, batch {} per micro-batch, inferred from "
        "its input node)\non BaPipe's 4x V100 PCIe Gen3 x16 cluster, {} micro-batches per mini-batch, one stage per GPU "
        "with the\nshipped compute-balanced partition (layers 0-2, 3-7, 8-16, 17-39), SimGrid's network model.\n\n",
        plan.profile.layers.size(), plan.profile.micro_batch_size, micro_batches);
    std::cout << fmt::format("{:<10} {:>17} {:>20} {:>7} {:>11} {:>9} {:>12}  {}\n", "schedule", "time per 1024",
                             "throughput", "bubble", "peak stash", "versions", "peak memory", "out of memory (16 GiB V100s)");
    header_printed = true;
  };
  for (const std::string schedule : {"gpipe", "1f1b-sno", "1f1b-so", "pipedream", "dp"}) {
    api::PlanRequest request;
    request.platform_file = platform;
    request.profile_file = profile;
    request.schedule = schedule;
    request.network = "simgrid";
    if (schedule == "pipedream") {
      // No flush: mini-batches of one micro-batch flow continuously; as many
      // are simulated as it takes to confirm the steady-state cycle.
      request.partition = partition;
    } else if (schedule == "dp") {
      // The whole model on each GPU, micro-batches split among them, then a
      // ring all-reduce of the gradients.
      request.micro_batches = micro_batches;
    } else {
      request.partition = partition;
      request.micro_batches = micro_batches;
    }
    Plan plan = api::make_plan(request);
    if (!header_printed) print_header(plan);
    const api::RunResult result = api::run_plan(plan);
    std::string stashes, versions;
    std::string out_of_memory;
    double peak_memory = 0;
    for (const DeviceMetrics& device : result.metrics.devices) {
      stashes += (stashes.empty() ? "" : ",") + std::to_string(device.peak_stashed_microbatches);
      versions += (versions.empty() ? "" : ",") + std::to_string(device.peak_weight_versions);
      peak_memory = std::max(peak_memory, device.peak_memory_bytes);
      if (device.oom) out_of_memory += (out_of_memory.empty() ? "" : ", ") + device.host;
    }
    // Time per 1024 samples (one mini-batch of the flushed schedules), so
    // PipeDream's steady-state period compares with the others.
    const double samples = static_cast<double>(micro_batches) * plan.profile.micro_batch_size;
    std::cout << fmt::format("{:<10} {:>17} {:>10.1f} samples/s {:>7.3f} {:>11} {:>9} {:>12}  {}\n", schedule,
                             human_seconds(samples / result.metrics.throughput_samples_per_s), result.metrics.throughput_samples_per_s,
                             result.metrics.bubble_fraction, stashes, versions, human_bytes(peak_memory),
                             out_of_memory.empty() ? "none" : out_of_memory);
    OutputFiles outputs;
    outputs.svg = fmt::format("{}/{}.svg", output_dir, schedule);
    outputs.trace = fmt::format("{}/{}.trace.json", output_dir, schedule);
    outputs.csv = fmt::format("{}/{}.csv", output_dir, schedule);
    outputs.save_plan = fmt::format("{}/{}.plan.json", output_dir, schedule);
    write_outputs(plan, result, outputs, files);
  }
  files.commit();
  std::cout << "\npeak stash: micro-batches stashed at once, per GPU; versions: weight versions kept, per GPU.\n"
               "pipedream: no flush, mini-batches of one micro-batch flow through the 4 stages (1F1B, NOAM = 4,\n"
               "weight stashing); its time is the steady-state period, over whole cycles before the drain.\n"
               "dp: the whole model on every GPU, 2 micro-batches each, then a ring all-reduce of VGG-16's\n"
               "528 MB of gradients over PCIe. Memory counts weights x versions,\n"
               "gradients, stashed activations and receive buffers (SEMANTICS.md); at 128 samples per micro-batch\n"
               "VGG-16's early activations alone outgrow a 16 GiB V100 once a few micro-batches are in flight.\n";
  std::cout << fmt::format(
      "\nTimelines (SVG), Perfetto traces, CSV and plans are in {}/ . Open {}/1f1b-so.svg in a browser, or load a "
      ".trace.json in https://ui.perfetto.dev .\n",
      output_dir, output_dir);
  return 0;
}
#endif

int main_with_exceptions(int argc, char** argv) {
  CLI::App app{"pipegrid: predict, draw and check pipeline-parallel DNN training on SimGrid platforms"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pipegrid 0.1.0");

#ifdef PIPEGRID_WITH_SIMGRID
  auto* simulate = app.add_subcommand("simulate", "simulate a schedule on a platform and report its metrics");
  api::PlanRequest request;
  std::string plan_file;
  OutputFiles outputs;
  simulate->add_option("--plan", plan_file, "re-run a saved plan (other inputs are then taken from it)");
  add_simulate_input_options(*simulate, request);
  add_output_options(*simulate, outputs);
  std::string chakra_prefix;
  simulate->add_option("--chakra", chakra_prefix,
                       "replay the MLCommons Chakra traces <PREFIX>.<rank>.et (and <PREFIX>.json) on --platform instead of "
                       "simulating a schedule (docs/chakra.md)");
  CLI::App* export_traces = add_export_command(app);
#endif

  auto* schedule = app.add_subcommand("schedule", "print a schedule's Program in text form");
  ScheduleOptions schedule_options;
  std::string schedule_name;
  bool list = false;
  schedule->add_flag("--list", list, "list the known schedules");
  schedule->add_option("--schedule", schedule_name, "schedule name");
  schedule->add_option("--stages", schedule_options.num_stages, "number of stages (N)");
  schedule->add_option("--micro-batches", schedule_options.micro_batches, "micro-batches per mini-batch (M)");
  schedule->add_option("--mini-batches", schedule_options.mini_batches, "mini-batches (default 1)");
  schedule->add_flag("--recompute", schedule_options.recompute, "activation recomputation");
  std::string schedule_replicas;
  schedule->add_option("--replicas", schedule_replicas, "replicas per stage, e.g. 3,1 (sets the stages)");
  schedule->add_option("--update-interval", schedule_options.update_interval, "pipedream-2bw: mini-batches per update");
  schedule->add_flag("--wait-free", schedule_options.wait_free, "dp: per-layer all-reduces");
  schedule->add_option("--pipeline-depth", schedule_options.pipeline_depth, "pipedream family: admitted per input replica");
  schedule->add_option("--virtual-stages", schedule_options.virtual_stages,
                       "stages per device of interleaved and V schedules (default: the schedule's)");
  schedule->add_option("--activation-limit", schedule_options.activation_limit,
                       "zb-auto: activation memory per stage in p micro-batches' activations (default 1: ZB-1p; 2: "
                       "ZB-2p); printed with T_F = T_B = T_W = 1 and no transfer time (simulate plans with the run's times)");
  int schedule_devices = 0;
  schedule->add_option("--devices", schedule_devices, "devices (p); the stages are then p x --virtual-stages");
  std::string schedule_format = "text";
  schedule->add_option("--format", schedule_format, "output: text (pipegrid's Program, default) or torch-csv (PyTorch pipelining)");
  std::string program_to_check, check_format = "text";
  schedule->add_option("--check", program_to_check, "parse and validate a Program file, then print it");
  schedule->add_option("--program-format", check_format, "the --check file's format: text (default) or torch-csv");

  CLI::App* compare = add_compare_command(app);
  CLI::App* platform = add_platform_command(app);
  CLI::App* model = add_model_command(app);
  CLI::App* trace = add_trace_command(app);
#ifdef PIPEGRID_WITH_TORCH
  CLI::App* execute = add_execute_command(app);
  CLI::App* calibrate = add_calibrate_command(app);
  // One rank of `--launcher processes` (validate/launch.hpp); hidden.
  CLI::App* launched_rank = app.add_subcommand("__rank", "");
  launched_rank->group("");
  std::string rank_folder;
  int rank_index = 0;
  launched_rank->add_option("folder", rank_folder)->required();
  launched_rank->add_option("rank", rank_index)->required();
#elif defined(PIPEGRID_TORCH_EXECUTABLE)
  add_forwarded_command(app, "execute", kExecuteSummary);
  add_forwarded_command(app, "calibrate", kCalibrateSummary);
  add_forwarded_command(app, "__rank", "");
#endif
#ifdef PIPEGRID_WITH_SIMGRID
  CLI::App* partition = add_partition_command(app);
  CLI::App* explore = add_explore_command(app);
  CLI::App* plan_layouts = add_plan_command(app);
  CLI::App* sweep = add_sweep_command(app);
#ifdef PIPEGRID_WITH_TORCH
  CLI::App* validate_plan = add_validate_command(app);
#elif defined(PIPEGRID_TORCH_EXECUTABLE)
  add_forwarded_command(app, "validate", kValidateSummary);
#endif

  auto* demo = app.add_subcommand("demo", "compare GPipe, 1F1B-SNO and 1F1B-SO for VGG-16 on 4 V100s");
  std::string demo_dir = "pipegrid-demo";
  int demo_micro_batches = 8;
  demo->add_option("--output", demo_dir, "folder for the demo's pictures and traces (default pipegrid-demo)");
  demo->add_option("--micro-batches", demo_micro_batches, "micro-batches per mini-batch (default 8)");
#endif

  read_integers_as_decimal(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
#ifdef PIPEGRID_TORCH_EXECUTABLE
    // `pipegrid --help execute` and alike: pipegrid-torch's to answer.
    if (forwarded_command_chosen(app)) return forward_to_torch_executable(PIPEGRID_TORCH_EXECUTABLE, argv);
#endif
    // Help and version: CLI11 prints them (stdout). A usage error exits 2
    // like any other bad input, with pipegrid's prefix.
    if (error.get_exit_code() == 0) return app.exit(error);
    std::cerr << "pipegrid: error: " << usage_error_text(app, error) << "\nRun with --help for more information.\n";
    return 2;
  }
#ifdef PIPEGRID_TORCH_EXECUTABLE
  if (forwarded_command_chosen(app)) return forward_to_torch_executable(PIPEGRID_TORCH_EXECUTABLE, argv);
#endif

#ifdef PIPEGRID_WITH_SIMGRID
  if (*simulate && simulate->count("--chakra") > 0)
    return run_chakra_replay(*simulate, chakra_prefix, request.platform_file, request.network, request.transfer_rule,
                             request.collective_model, {outputs.csv, outputs.trace, outputs.svg, outputs.json});
  if (*export_traces) return run_export_command();
  if (*simulate) {
    Plan plan;
    if (!plan_file.empty()) {
      plan = read_plan_file(plan_file);
    } else {
      check_simulate_inputs(*simulate, request);
      plan = api::make_plan(request);
    }
    api::enable_progress_on_terminal();
    const api::RunResult result = api::run_plan(plan);
    // The table lists the warnings itself; with --json they go to stderr too.
    if (outputs.json)
      for (const std::string& warning : result.warnings) std::cerr << "pipegrid: warning: " << warning << "\n";
    OutputFileSet files;
    write_outputs(plan, result, outputs, files);
    files.commit();
    std::cout << (outputs.json ? api::metrics_to_json(plan, result) : api::metrics_to_table(plan, result));
    return 0;
  }
#endif
  if (*schedule) {
    if (schedule_format != "text" && schedule_format != "torch-csv")
      throw InputError(fmt::format("--format: expected text or torch-csv, found '{}'", printable(schedule_format)));
    const auto print_program = [&](const Program& program) {
      std::cout << (schedule_format == "torch-csv" ? program_to_torch_csv(program) : program_to_text(program));
    };
    if (list) {
      std::size_t width = 0;
      for (const ScheduleInfo& info : schedule_catalog()) width = std::max(width, info.name.size());
      for (const ScheduleInfo& info : schedule_catalog()) std::cout << fmt::format("{:<{}}  {}\n", info.name, width, info.summary);
      return 0;
    }
    if (!program_to_check.empty()) {
      std::vector<std::string> notes;
      const Program program = read_program_file(program_to_check, check_format, &notes);
      for (const std::string& note : notes) std::cerr << "pipegrid: note: " << note << "\n";
      print_program(program);
      return 0;
    }
    if (schedule_name.empty()) throw InputError("schedule: --schedule is required (or --list, or --check FILE)");
    if (!schedule->count("--virtual-stages")) schedule_options.virtual_stages = default_virtual_stages(schedule_name);
    if (schedule->count("--activation-limit") && !(schedule_options.activation_limit > 0))
      throw InputError(fmt::format("--activation-limit: expected a number > 0 (p micro-batches' activations per stage), found {}",
                                   schedule_options.activation_limit));
    if (schedule->count("--devices")) {
      if (schedule_devices < 1) throw InputError(fmt::format("--devices: expected an integer >= 1, found {}", schedule_devices));
      const int stages = schedule_devices * schedule_options.virtual_stages;
      if (schedule->count("--stages") && schedule_options.num_stages != stages)
        throw InputError(fmt::format("--devices {} x --virtual-stages {} gives {} stages, --stages says {}", schedule_devices,
                                     schedule_options.virtual_stages, stages, schedule_options.num_stages));
      schedule_options.num_stages = stages;
    }
    if (!schedule_replicas.empty()) {
      schedule_options.replicas = parse_replicas(schedule_replicas);
      const int stages = static_cast<int>(schedule_options.replicas.size());
      if (schedule->count("--stages") && schedule_options.num_stages != stages)
        throw InputError(fmt::format("--replicas {} gives {} stages, --stages says {}", schedule_replicas, stages, schedule_options.num_stages));
      schedule_options.num_stages = stages;
    }
    const Program program = generate_schedule(schedule_name, schedule_options);
    validate_program(program);
    print_program(program);
    return 0;
  }
  if (*compare) return run_compare_command();
  if (*platform) return run_platform_command();
  if (*model) return run_model_command();
  if (*trace) return run_trace_command();
#ifdef PIPEGRID_WITH_TORCH
  if (*launched_rank) {
    validate::run_launched_rank(rank_folder, rank_index);
    return 0;
  }
  if (*execute) return run_execute_command();
  if (*calibrate) return run_calibrate_command();
#endif
#ifdef PIPEGRID_WITH_SIMGRID
  if (*partition) return run_partition_command();
  if (*explore) return run_explore_command();
  if (*plan_layouts) return run_plan_command();
  // A sweep's runs are command lines run as this function runs them.
  if (*sweep) return run_sweep_command(main_with_exceptions);
#ifdef PIPEGRID_WITH_TORCH
  if (*validate_plan) return run_validate_command();
#endif
  if (*demo) return run_demo(demo_dir, demo_micro_batches);
#endif
  return 0;
}

}  // namespace
}  // namespace pipegrid::cli

int main(int argc, char** argv) {
  // SIGTERM/SIGINT/SIGHUP take the simulation children and the temporary
  // files with them (core/termination.hpp).
  pipegrid::install_termination_handlers();
  try {
    return pipegrid::cli::main_with_exceptions(argc, argv);
  } catch (const pipegrid::InputError& error) {
    std::cerr << "pipegrid: error: " << error.what() << "\n";
    return 2;
  } catch (const pipegrid::ProgramError& error) {
    std::cerr << "pipegrid: error: " << error.what() << "\n";
    return 2;
  } catch (const pipegrid::InvariantViolation& error) {
    std::cerr << "pipegrid: internal error: invariant violated (a bug in pipegrid, not in your input; please report it "
                 "with the command line): "
              << error.what() << "\n";
    return 3;
  } catch (const std::exception& error) {
    std::cerr << "pipegrid: internal error: " << error.what() << "\n";
    return 3;
  }
}
