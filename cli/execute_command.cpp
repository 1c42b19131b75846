#include "cli/execute_command.hpp"

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/launcher_flag.hpp"
#include "cli/model_flags.hpp"
#include "cli/torch_forward.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/platform_check.hpp"
#include "core/program.hpp"
#include "core/recompute.hpp"
#include "core/timeline.hpp"
#include "core/torch_schedule.hpp"
#include "render/chrome_trace.hpp"
#include "render/timeline_csv.hpp"
#include "render/timeline_svg.hpp"
#include "schedules/schedules.hpp"
#include "validate/executor.hpp"
#include "validate/model_zoo.hpp"

namespace pipegrid::cli {
namespace {

struct ExecuteOptions {
  std::string model;
  ModelFlags model_flags;
  std::string schedule;
  std::string program_file;
  std::string program_format = "text";
  int virtual_stages = 0;  ///< 0: the schedule's default
  int stages = 1;
  std::vector<int> layers_per_stage;
  int micro_batches = 1;
  int micro_batch_size = 8;
  int mini_batches = 3;
  int warmup = 1;
  std::string device = "cpu";
  std::string copy_through = "device";
  double learning_rate = 0.01;
  std::uint64_t seed = 1;
  bool recompute = false;
  std::string recompute_granularity, recompute_method;  ///< refused: kLayerRecomputeFlags
  int recompute_num_layers = 0;
  std::vector<int> replicas;
  bool vertical_sync = false;
  int update_interval = 0;
  bool wait_free = false;
  std::string csv, svg, trace;
  bool json = false;
  LauncherFlags launcher;
};

ExecuteOptions options;
CLI::App* command = nullptr;

}  // namespace

CLI::App* add_execute_command(CLI::App& app) {
  command = app.add_subcommand("execute", kExecuteSummary);
  command->add_option("--model", options.model, "zoo model: mlp, vgg16, gnmt or gpt (its options: the flags below)")->required();
  add_model_flags(*command, options.model_flags);
  command->add_option("--schedule", options.schedule,
                      "gpipe, 1f1b-sno, 1f1b-so, 1f1b-as, fbp-as (cpu only), dp, interleaved-1f1b, looped-bfs, zb-h1, zb-h2, "
                      "zb1p, zb-v, dualpipev, or pipedream, pipedream-2bw, pipeoptim (one micro-batch per mini-batch)");
  command->add_option("--virtual-stages", options.virtual_stages,
                      "stages per device (default: 2 for interleaved-1f1b, looped-bfs and zb1p; zb-v and dualpipev always 2; "
                      "1 for the others); --stages counts all the stages");
  command->add_option("--program", options.program_file,
                      "run this Program file instead of --schedule (stages, micro-batches, mini-batches and devices from the "
                      "file; flushed weights)");
  command->add_option("--program-format", options.program_format,
                      "format of --program: text (pipegrid's, default) or torch-csv (PyTorch pipelining, one mini-batch)");
  command->add_option("--replicas", options.replicas,
                      "replicas per stage, e.g. 2,1 (sets the stages; devices = their sum); dp: --replicas N")->delimiter(',');
  command->add_flag("--vertical-sync", options.vertical_sync, "pipedream: every stage uses the input stage's weight version");
  command->add_option("--update-interval", options.update_interval,
                      "pipedream-2bw: mini-batches per weight update (default: the number of stages)");
  command->add_flag("--wait-free", options.wait_free, "dp: one all-reduce per layer with parameters (run after the backward)");
  command->add_option("--stages", options.stages,
                      "number of stages (default 1, or --virtual-stages: one device); devices = stages / --virtual-stages");
  command->add_option("--layers-per-stage", options.layers_per_stage,
                      "layers of each stage, e.g. 3,5 (default: as equal as possible)")->delimiter(',');
  command->add_option("--micro-batches", options.micro_batches, "micro-batches per mini-batch (M, default 1)");
  command->add_option("--micro-batch-size", options.micro_batch_size, "samples per micro-batch (default 8)");
  command->add_option("--mini-batches", options.mini_batches, "measured mini-batches (default 3; --program: from the file)");
  command->add_option("--warmup", options.warmup,
                      "mini-batches run before the measured ones, left out of the timeline (default 1; --program: the "
                      "Program's first ones, default 1 when it has more than one)");
  command->add_option("--device", options.device,
                      "cpu or cpu:N (worker threads), cuda or cuda:N (one GPU per stage), cuda-partitioned:N (GPU 0 split "
                      "into N SM partitions); N = devices (stages, or the sum of --replicas)");
  command->add_option("--copy-through", options.copy_through,
                      "GPUs: device (default: device-to-device copies) or host (staged through pinned host memory, as over PCIe)");
  command->add_option("--learning-rate", options.learning_rate, "SGD learning rate (default 0.01)");
  command->add_option("--seed", options.seed, "seed of the weights and the data (default 1)");
  command->add_flag("--recompute", options.recompute, "activation recomputation: forwards keep only the stage input");
  // simulate's options of Megatron-LM's recomputation, refused with the
  // reason: the executor recomputes whole stages only.
  command->add_option("--recompute-granularity", options.recompute_granularity,
                      "refused: the executor recomputes whole stages only (--recompute); simulate models Megatron-LM's");
  command->add_option("--recompute-method", options.recompute_method, "refused, as --recompute-granularity");
  command->add_option("--recompute-num-layers", options.recompute_num_layers, "refused, as --recompute-granularity");
  command->add_option("--csv", options.csv, "write the measured timeline as CSV");
  command->add_option("--svg", options.svg, "write the measured timeline as an SVG Gantt chart");
  command->add_option("--trace", options.trace, "write a Chrome trace (Perfetto) JSON file");
  command->add_flag("--json", options.json, "print one JSON object with the measured times on stdout");
  add_launcher_flags(*command, options.launcher);
  return command;
}

namespace {

/** "0,3" */
std::string stage_list(const std::vector<int>& stages) { return fmt::format("{}", fmt::join(stages, ",")); }

/** "0-2,9-11": the layers of each stage, in the device's order. */
std::string layer_list(const validate::LayerRanges& ranges, const std::vector<int>& stages) {
  std::vector<std::string> parts;
  for (const int stage : stages) parts.push_back(fmt::format("{}-{}", ranges[stage].first, ranges[stage].second - 1));
  return fmt::format("{}", fmt::join(parts, ","));
}

}  // namespace

int run_execute_command() {
  for (const char* flag : kLayerRecomputeFlags)
    if (command->count(flag)) throw InputError(executor_layer_recompute_refusal(flag, "execute"));
  const validate::ModelConfig model = model_from_flags(options.model, options.model_flags, *command);
  const bool from_file = !options.program_file.empty();
  if (from_file) {
    // The Program is the schedule: its stages, micro-batches, mini-batches and devices.
    for (const char* flag : {"--schedule", "--micro-batches", "--mini-batches", "--replicas", "--virtual-stages", "--recompute",
                             "--vertical-sync", "--update-interval", "--wait-free"})
      if (command->count(flag))
        throw InputError(fmt::format("--program {}: the Program says what {} would; drop {}", options.program_file, flag, flag));
  } else {
    if (options.schedule.empty()) throw InputError("execute: --schedule or --program is required");
    if (command->count("--program-format")) throw InputError("--program-format: applies to --program FILE");
  }
  // A Program file runs as a flushed schedule of one or more stages per device does (gpipe's entry).
  const ScheduleInfo& info = from_file ? schedule_info("gpipe") : schedule_info(options.schedule);
  if (options.vertical_sync && !takes_option(info, ScheduleOption::VerticalSync))
    throw InputError(fmt::format("--vertical-sync: applies to {}, not {}", schedules_taking(ScheduleOption::VerticalSync), info.name));
  if (options.update_interval != 0 && !takes_option(info, ScheduleOption::UpdateInterval))
    throw InputError(fmt::format("--update-interval: applies to {}, not {}", schedules_taking(ScheduleOption::UpdateInterval), info.name));
  // The weight rule of the schedule (SEMANTICS.md); the update points come
  // from the Program. A Program file is flushed (one update per mini-batch).
  const validate::WeightRule rule = validate::weight_rule_of(info, options.vertical_sync);
  if (!info.flushed && rule == validate::WeightRule::Flush)
    throw InputError(fmt::format("--schedule {}: the executor has no weight rule for it", info.name));
  if (info.single_stage && options.replicas.size() != 1)
    throw InputError(fmt::format("--schedule {}: runs the whole model on every device; give the devices as --replicas N", info.name));
  const int virtual_stages = from_file ? 1 : options.virtual_stages != 0 ? options.virtual_stages : default_virtual_stages(info.name);
  if (virtual_stages < 1)
    throw InputError(fmt::format("--virtual-stages: expected 1 or more stages per device, found {}", options.virtual_stages));
  if (virtual_stages > 1 && !options.replicas.empty())
    throw InputError(fmt::format("--virtual-stages {}: devices holding several stages are not replicated; drop --replicas",
                                 virtual_stages));
  if (virtual_stages > 1 && !command->count("--stages") && options.layers_per_stage.empty()) options.stages = virtual_stages;
  if (!options.replicas.empty()) {
    const int stages = static_cast<int>(options.replicas.size());
    if (command->count("--stages") && options.stages != stages)
      throw InputError(fmt::format("--replicas gives {} stages, --stages says {}", stages, options.stages));
    if (!options.layers_per_stage.empty() && static_cast<int>(options.layers_per_stage.size()) != stages)
      throw InputError(fmt::format("--replicas gives {} stages, --layers-per-stage {}", stages, options.layers_per_stage.size()));
    options.stages = stages;
  }
  if (options.mini_batches < 1) throw InputError(fmt::format("--mini-batches: expected at least 1, found {}", options.mini_batches));
  if (options.warmup < 0) throw InputError(fmt::format("--warmup: expected 0 or more, found {}", options.warmup));

  Program program_from_file;
  if (from_file) {
    std::vector<std::string> notes;
    program_from_file = read_program_file(options.program_file, options.program_format, &notes);
    for (const std::string& note : notes) std::cerr << "pipegrid: note: " << note << "\n";
    if (command->count("--stages") && options.stages != program_from_file.num_stages)
      throw InputError(fmt::format("--stages {}: the Program {} has {} stages", options.stages, options.program_file,
                                   program_from_file.num_stages));
    options.stages = program_from_file.num_stages;
    options.micro_batches = program_from_file.micro_batches;
    if (!command->count("--warmup")) options.warmup = program_from_file.mini_batches > 1 ? 1 : 0;
    if (options.warmup >= program_from_file.mini_batches)
      throw InputError(fmt::format("--warmup {}: the Program {} runs {} mini-batches; expected fewer warm-up ones", options.warmup,
                                   options.program_file, program_from_file.mini_batches));
    options.mini_batches = program_from_file.mini_batches - options.warmup;
  }

  validate::ExecutionRequest request;
  request.model = model;
  const int layers = validate::num_layers(model);
  if (!options.layers_per_stage.empty()) {
    if (command->count("--stages") && options.stages != static_cast<int>(options.layers_per_stage.size()))
      throw InputError(fmt::format("--layers-per-stage gives {} stages, --stages says {}", options.layers_per_stage.size(), options.stages));
    options.stages = static_cast<int>(options.layers_per_stage.size());
    request.stages = validate::ranges_from_counts(options.layers_per_stage, layers);
  } else {
    request.stages = validate::uniform_ranges(layers, options.stages);
  }
  ScheduleOptions schedule;
  schedule.num_stages = options.stages;
  schedule.virtual_stages = virtual_stages;
  schedule.micro_batches = options.micro_batches;
  schedule.mini_batches = options.warmup + options.mini_batches;
  schedule.recompute = options.recompute;
  schedule.replicas = options.replicas;
  schedule.update_interval = options.update_interval;
  schedule.wait_free = options.wait_free;
  request.program = from_file ? program_from_file : generate_schedule(options.schedule, schedule);
  if (!from_file)
    for (const DeviceProgram& device : request.program.devices)
      if (static_cast<int>(device.stages.size()) != virtual_stages)
        throw InputError(fmt::format("--virtual-stages {}: schedule {} puts {} stage{} on a device", virtual_stages, options.schedule,
                                     device.stages.size(), device.stages.size() == 1 ? "" : "s"));
  request.weight_rule = rule;
  request.update_interval = from_file ? 0 : update_interval(options.schedule, schedule);
  request.micro_batch_size = options.micro_batch_size;
  request.warmup_mini_batches = options.warmup;
  request.learning_rate = options.learning_rate;
  request.seed = options.seed;
  request.device = validate::parse_device_spec(options.device);
  if (options.copy_through != "device" && options.copy_through != "host")
    throw InputError(fmt::format("--copy-through '{}': expected device or host", options.copy_through));
  request.copy_through_host = options.copy_through == "host";
  request.launcher = launcher_from_flags(options.launcher);

  const validate::ExecutionResult result = validate::execute(request);
  if (!result.primary) return 0;  // an env rank other than 0: rank 0 reports
  const std::string schedule_name = from_file ? "program " + options.program_file : options.schedule;

  OutputFileSet files;  // all or none
  if (!options.csv.empty()) files.add(options.csv, timeline_to_csv(result.timeline));
  if (!options.trace.empty()) files.add(options.trace, timeline_to_chrome_trace(result.timeline));
  if (!options.svg.empty()) {
    SvgOptions svg;
    svg.title = fmt::format("measured: {} on {} ({}, M={}, {} stages, micro-batch {})", schedule_name, options.model,
                            options.device, options.micro_batches, options.stages, options.micro_batch_size);
    files.add(options.svg, timeline_to_svg(result.timeline, svg));
  }
  files.commit();

  const int samples = options.micro_batches * options.micro_batch_size;
  if (options.json) {
    nlohmann::json json;
    json["model"] = model.name;
    json["model_options"] = model.options;
    json["schedule"] = from_file ? nlohmann::json(nullptr) : nlohmann::json(options.schedule);
    json["program"] = from_file ? nlohmann::json(options.program_file) : nlohmann::json(nullptr);
    json["weight_rule"] = validate::to_string(rule);
    json["replicas"] = !options.replicas.empty() && request.program.devices.size() > static_cast<std::size_t>(options.stages)
                           ? nlohmann::json(options.replicas)
                           : nlohmann::json(nullptr);
    json["device"] = options.device;
    json["launcher"] = options.launcher.kind;
    json["clock"] = result.clock;
    json["stages"] = options.stages;
    json["virtual_stages"] = virtual_stages;
    json["micro_batches"] = options.micro_batches;
    json["micro_batch_size"] = options.micro_batch_size;
    json["measured_mini_batches"] = result.measured_mini_batches;
    json["measured_minibatch_time_s"] = result.minibatch_time_s;
    json["mean_minibatch_span_s"] = result.mean_minibatch_span_s;
    json["throughput_samples_per_s"] = samples / result.minibatch_time_s;
    json["devices"] = nlohmann::json::array();
    for (std::size_t d = 0; d < result.devices.size(); ++d) {
      const validate::DeviceSummary& device = result.devices[d];
      nlohmann::json layers = nlohmann::json::array();  // [first, last] of each stage
      for (const int stage : device.stages) layers.push_back({request.stages[stage].first, request.stages[stage].second});
      const double span = result.mean_minibatch_span_s * result.measured_mini_batches;
      json["devices"].push_back({{"host", device.host},
                                 {"stages", device.stages},
                                 {"layers", layers},
                                 {"busy_s", device.busy_s},
                                 {"optimizer_step_s", device.step_s},
                                 {"clock_offset_residual_s", result.clock_offset_residual_s.at(d)},
                                 {"bubble_fraction", 1 - device.busy_s / span},
                                 {"peak_memory_bytes", device.peak_memory_bytes < 0 ? nlohmann::json(nullptr)
                                                                                    : nlohmann::json(device.peak_memory_bytes)}});
    }
    std::cout << json.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{} on {}: {} layers in {} stages on {} devices, {} ({} weights) with M={} micro-batches of {} samples\n",
                           model.name, options.device, layers, options.stages, request.program.devices.size(), schedule_name,
                           validate::to_string(rule), options.micro_batches, options.micro_batch_size);
  std::cout << fmt::format("measured mini-batch time: {} ({} of {} after {} warm-up), {:.1f} samples/s\n",
                           human_seconds(result.minibatch_time_s),
                           result.minibatch_time_s == result.mean_minibatch_span_s ? "mean" : "steady-state period",
                           result.measured_mini_batches, options.warmup, samples / result.minibatch_time_s);
  std::size_t stages_width = 5, layers_width = 9;
  for (const validate::DeviceSummary& device : result.devices) {
    stages_width = std::max(stages_width, stage_list(device.stages).size());
    layers_width = std::max(layers_width, layer_list(request.stages, device.stages).size());
  }
  std::cout << fmt::format("{:<8} {:>{}} {:>{}} {:>12} {:>8} {:>14}\n", "device", "stage", stages_width, "layers", layers_width, "busy",
                           "bubble", "optimizer step");
  for (const validate::DeviceSummary& device : result.devices) {
    const double span = result.mean_minibatch_span_s * result.measured_mini_batches;
    std::cout << fmt::format("{:<8} {:>{}} {:>{}} {:>12} {:>8.3f} {:>14}\n", device.host, stage_list(device.stages), stages_width,
                             layer_list(request.stages, device.stages), layers_width,
                             human_seconds(device.busy_s / result.measured_mini_batches), 1 - device.busy_s / span,
                             human_seconds(device.step_s / result.measured_mini_batches));
  }
  for (const validate::DeviceSummary& device : result.devices)
    if (device.peak_memory_bytes >= 0)
      std::cout << fmt::format("{:<8} peak memory allocated {}\n", device.host, human_bytes(static_cast<double>(device.peak_memory_bytes)));
  std::cout << "busy and optimizer step: per mini-batch; bubble: 1 - busy / span of the measured mini-batches\n";
  return 0;
}

}  // namespace pipegrid::cli
