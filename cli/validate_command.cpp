#include "cli/validate_command.hpp"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/calibrate_command.hpp"
#include "cli/launcher_flag.hpp"
#include "cli/model_flags.hpp"
#include "cli/run.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/termination.hpp"
#include "core/timeline_compare.hpp"
#include "render/timeline_csv.hpp"
#include "render/timeline_svg.hpp"
#include "schedules/schedules.hpp"
#include "validate/executor.hpp"
#include "validate/model_zoo.hpp"

namespace pipegrid::cli {
namespace {

struct ValidateOptions {
  std::string plan;
  std::string model;
  ModelFlags model_flags;
  std::string schedule;
  int stages = 2;
  std::optional<int> virtual_stages;
  std::vector<int> layers_per_stage;
  std::vector<std::string> measured;
  int micro_batches = 1;
  int micro_batch_size = 8;
  std::string device = "cpu";
  int repeats = 3;
  int mini_batches = 3;
  int warmup = 1;
  int calibration_repeats = 5;
  std::uint64_t seed = 1;
  std::string profile, platform;
  std::string network = "analytic";
  std::string svg;
  bool json = false;
  LauncherFlags launcher;
};

ValidateOptions options;
CLI::App* command = nullptr;

/// A file under /tmp holding `text`, removed on scope exit.
class TemporaryFile {
 public:
  TemporaryFile(const std::string& suffix, const std::string& text) {
    std::string name = "/tmp/pipegrid-validate-XXXXXX" + suffix;
    {
      // Created and registered (removed if pipegrid is terminated) at once.
      TerminationSignalsBlocked blocked;
      const int fd = mkstemps(name.data(), static_cast<int>(suffix.size()));
      if (fd < 0) throw InputError("validate: cannot create a temporary file under /tmp");
      close(fd);
      registered_ = std::make_unique<RegisteredTemporary>(name);
    }
    path_ = name;
    try {
      write_file_atomically(path_, text);
    } catch (...) {
      std::remove(path_.c_str());
      throw;
    }
  }
  ~TemporaryFile() { std::remove(path_.c_str()); }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<RegisteredTemporary> registered_;
};

}  // namespace

CLI::App* add_validate_command(CLI::App& app) {
  command = app.add_subcommand(
      "validate", "calibrate, simulate a plan, run it for real R times (or read timelines measured elsewhere), and compare");
  command->add_option("--plan", options.plan,
                      "a plan saved by simulate --save-plan from a calibrated profile: its model, schedule, M, mini-batches, "
                      "partition and platform (instead of --model, --schedule, ...)");
  command->add_option("--model", options.model, "zoo model: mlp, vgg16, gnmt or gpt (its options: the flags below, as for execute)");
  add_model_flags(*command, options.model_flags);
  command->add_option("--schedule", options.schedule, "gpipe, 1f1b-sno or 1f1b-so");
  command->add_option("--stages", options.stages,
                      "number of stages, layers split as execute does (default 2); devices = stages / --virtual-stages");
  command->add_option("--virtual-stages", options.virtual_stages,
                      "stages per device of interleaved and V schedules (default: the schedule's)");
  command->add_option("--layers-per-stage", options.layers_per_stage, "layers of each stage, e.g. 3,5 (default: as equal as possible)")
      ->delimiter(',');
  command->add_option("--micro-batches", options.micro_batches, "micro-batches per mini-batch (M, default 1)");
  command->add_option("--micro-batch-size", options.micro_batch_size, "samples per micro-batch (default 8)");
  command->add_option("--device", options.device, "cpu:N, cuda:N or cuda-partitioned:N (N = stages), as for execute");
  command->add_option("--repeats", options.repeats, "real runs compared with the simulation (default 3)");
  command->add_option("--mini-batches", options.mini_batches, "measured (and simulated) mini-batches per run (default 3)");
  command->add_option("--warmup", options.warmup, "mini-batches run before the measured ones (default 1)");
  command->add_option("--calibration-repeats", options.calibration_repeats, "timed runs per calibration measurement (default 5)");
  command->add_option("--seed", options.seed, "seed of the weights and the data (default 1)");
  command->add_option("--profile", options.profile, "profile JSON to simulate with instead of calibrating (with --platform)");
  command->add_option("--platform", options.platform, "platform XML to simulate with instead of calibrating (with --profile)");
  command->add_option("--network", options.network,
                      "analytic (default: a copy takes exactly the fitted latency + bytes/bandwidth) or simgrid");
  command->add_option("--measured", options.measured,
                      "timeline CSVs of the plan measured elsewhere (execute --csv, e.g. on a GPU machine without SimGrid), "
                      "comma-separated, instead of running it here; needs --profile and --platform from that machine")
      ->delimiter(',');
  command->add_option("--svg", options.svg, "write the simulated and the first measured timeline stacked on one time axis");
  command->add_flag("--json", options.json, "print one JSON object (compare's) on stdout");
  add_launcher_flags(*command, options.launcher);
  return command;
}

namespace {

/** `--plan FILE`: the plan to simulate as saved, and what the real run
 *  needs from it (the options it sets, and its stage layer ranges). */
struct SavedPlan {
  Plan plan;
  validate::ModelConfig model;
  validate::LayerRanges ranges;
};

SavedPlan read_saved_plan(const std::string& file) {
  std::vector<std::string> plan_gives = {"--model",        "--schedule",         "--stages",       "--layers-per-stage",
                                         "--micro-batches", "--micro-batch-size", "--mini-batches", "--profile",
                                         "--platform",      "--network"};
  for (const std::string& flag : given_model_flags(*command)) plan_gives.push_back(flag);
  for (const std::string& flag : plan_gives)
    if (command->count(flag)) throw InputError(fmt::format("{}: --plan {} gives it; leave it out", flag, file));
  SavedPlan saved;
  saved.plan = read_plan_file(file);
  const Plan& plan = saved.plan;
  if (plan.profile.model.empty())
    throw InputError(fmt::format("{}: profile: names no model to run (its \"model\", which pipegrid calibrate writes); save the "
                                 "plan from a calibrated profile, or give --model and --schedule instead of --plan",
                                 file));
  saved.model = validate::model_from_spec(plan.profile.model, file + ": profile");
  const int layers = validate::num_layers(saved.model);
  if (static_cast<int>(plan.profile.layers.size()) != layers)
    throw InputError(fmt::format("{}: profile: {} layers, its model '{}' has {}", file, plan.profile.layers.size(),
                                 plan.profile.model, layers));
  // Each stage one host and one contiguous layer range, in order: what the
  // executor runs.
  const Partition& partition = plan.partition;
  for (int s = 0; s < partition.num_stages(); ++s) {
    if (partition.hosts[s].size() != 1)
      throw InputError(fmt::format("{}: partition: stage {} has {} replicas; validate runs one device per stage", file, s,
                                   partition.hosts[s].size()));
    if (partition.split_after(s) != 0)
      throw InputError(fmt::format("{}: partition: stage {} splits a layer; the executor runs whole layers", file, s));
  }
  int next = 0;
  for (int s = 0; s < partition.num_stages(); ++s) {
    int last = next;
    while (last < layers && partition.stage_of_layer[last] == s) ++last;
    if (last == next)
      throw InputError(fmt::format("{}: partition: stage {} has no layers right after stage {}'s; validate runs contiguous stages "
                                   "in order", file, s, s - 1));
    saved.ranges.push_back({next, last});
    next = last;
  }
  if (next != layers)
    throw InputError(fmt::format("{}: partition: layer {} is not in the stage after its predecessor's; validate runs contiguous "
                                 "stages in order", file, next));
  options.schedule = plan.schedule;
  options.stages = partition.num_stages();
  options.micro_batches = plan.micro_batches;
  options.micro_batch_size = plan.profile.micro_batch_size;
  options.mini_batches = plan.mini_batches;
  return saved;
}

}  // namespace

int run_validate_command() {
  std::optional<SavedPlan> saved;
  if (!options.plan.empty()) {
    saved = read_saved_plan(options.plan);
  } else {
    if (options.model.empty()) throw InputError("validate: --model is required (or give --plan FILE)");
    if (options.schedule.empty()) throw InputError("validate: --schedule is required (or give --plan FILE)");
  }
  const validate::ModelConfig model = saved ? saved->model : model_from_flags(options.model, options.model_flags, *command);
  if (!schedule_info(options.schedule).flushed)
    throw InputError(fmt::format("--schedule {}: validate runs the flushed schedules (gpipe, the 1f1b family, the interleaved, "
                                 "zero-bubble and DualPipeV ones)",
                                 options.schedule));
  const int virtual_stages = saved ? saved->plan.virtual_stages
                                   : options.virtual_stages.value_or(default_virtual_stages(options.schedule));
  if (saved && options.virtual_stages)
    throw InputError(fmt::format("--virtual-stages: --plan {} gives it; leave it out", options.plan));
  if (options.repeats < 1) throw InputError(fmt::format("--repeats: expected at least 1, found {}", options.repeats));
  if (options.mini_batches < 1) throw InputError(fmt::format("--mini-batches: expected at least 1, found {}", options.mini_batches));
  if (options.warmup < 0) throw InputError(fmt::format("--warmup: expected 0 or more, found {}", options.warmup));
  if (options.profile.empty() != options.platform.empty())
    throw InputError("--profile and --platform go together: give both, or neither to calibrate");
  if (!options.measured.empty() && options.profile.empty() && !saved)
    throw InputError("--measured: give the --profile and --platform calibrated on the machine that measured them");
  if (!options.measured.empty() && command->count("--repeats"))
    throw InputError("--repeats: the measured runs are the --measured files; give one or the other");
  const int layers = validate::num_layers(model);
  if (!options.layers_per_stage.empty()) {
    if (command->count("--stages") && options.stages != static_cast<int>(options.layers_per_stage.size()))
      throw InputError(fmt::format("--layers-per-stage gives {} stages, --stages says {}", options.layers_per_stage.size(), options.stages));
    options.stages = static_cast<int>(options.layers_per_stage.size());
  }
  if (virtual_stages < 1 || options.stages % virtual_stages != 0)
    throw InputError(fmt::format("--stages {}: {} holds {} stages per device; expected a multiple of {}", options.stages,
                                 options.schedule, virtual_stages, virtual_stages));
  const int devices = options.stages / virtual_stages;
  validate::DeviceSpec device = validate::parse_device_spec(options.device);
  if (device.count == 0) device.count = devices;
  if (device.count != devices)
    throw InputError(fmt::format("--device {}: expected one device per {} ({})", options.device,
                                 virtual_stages == 1 ? "stage" : fmt::format("{} stages", virtual_stages), devices));

  // The real run's layer split (execute's), used by the simulation too.
  const validate::LayerRanges ranges = saved                              ? saved->ranges
                                       : options.layers_per_stage.empty() ? validate::uniform_ranges(layers, options.stages)
                                                                          : validate::ranges_from_counts(options.layers_per_stage, layers);

  std::string profile_text, platform_text;
  if (saved) {
    // The plan is simulated as saved.
  } else if (options.profile.empty()) {
    validate::CalibrationRequest request;
    request.model = model;
    request.micro_batch_size = options.micro_batch_size;
    request.repeats = options.calibration_repeats;
    request.seed = options.seed;
    request.launcher = launcher_from_flags(options.launcher);
    const validate::Calibration calibration = calibrate_for_device(request, device);
    profile_text = profile_to_json(calibration.profile);
    platform_text = validate::calibration_platform_xml(
        calibration, device.count,
        fmt::format("model {}, micro-batch size {}, device {}", model.name, options.micro_batch_size, options.device));
  } else {
    profile_text = read_text_file(options.profile);
    platform_text = read_text_file(options.platform);
  }
  const std::string origin = saved ? options.plan : options.profile.empty() ? "calibrated profile" : options.profile;
  std::optional<RunResult> simulated_run;
  if (saved) {
    simulated_run = run_plan(saved->plan);
  } else {
  const TemporaryFile profile_file(".json", profile_text);
  const TemporaryFile platform_file(".xml", platform_text);

  PlanRequest plan_request;
  plan_request.profile_file = profile_file.path();
  plan_request.platform_file = platform_file.path();
  plan_request.micro_batch_size = options.micro_batch_size;
  plan_request.schedule = options.schedule;
  plan_request.micro_batches = options.micro_batches;
  plan_request.mini_batches = options.mini_batches;
  plan_request.network = options.network;
  plan_request.virtual_stages = virtual_stages;
  Plan plan = make_plan(plan_request);
  if (!options.profile.empty() && !plan.profile.model.empty()) {
    // A calibrated profile names its model: the one run here.
    const validate::ModelConfig calibrated = validate::model_from_spec(plan.profile.model, options.profile);
    if (validate::model_to_spec(calibrated) != validate::model_to_spec(model))
      throw InputError(fmt::format("{}: calibrated for model '{}'; the model run here is '{}'", options.profile,
                                   plan.profile.model, validate::model_to_spec(model)));
  }
  if (static_cast<int>(plan.profile.layers.size()) != layers)
    throw InputError(fmt::format("{}: {} layers, model {} has {}", origin, plan.profile.layers.size(), model.name, layers));
  if (plan.partition.num_stages() != options.stages)
    throw InputError(fmt::format("{}: the platform has {} hosts, expected one per device ({} stages, {} per device)",
                                 options.platform.empty() ? "calibrated platform" : options.platform,
                                 plan.partition.num_stages() / virtual_stages, options.stages, virtual_stages));
  for (int s = 0; s < options.stages; ++s)
    for (int l = ranges[s].first; l < ranges[s].second; ++l) plan.partition.stage_of_layer[l] = s;
  simulated_run = run_plan(plan);
  }
  const RunResult& simulated = *simulated_run;

  validate::ExecutionRequest request;
  request.model = model;
  request.stages = ranges;
  ScheduleOptions schedule;
  schedule.num_stages = options.stages;
  schedule.micro_batches = options.micro_batches;
  schedule.mini_batches = options.warmup + options.mini_batches;
  schedule.recompute = saved && saved->plan.recompute;
  schedule.virtual_stages = virtual_stages;
  request.program = generate_schedule(options.schedule, schedule);
  request.micro_batch_size = options.micro_batch_size;
  request.warmup_mini_batches = options.warmup;
  request.seed = options.seed;
  request.device = device;
  request.launcher = launcher_from_flags(options.launcher);

  CompareOptions compare;
  compare.align_first = true;
  const std::string simulated_origin = "simulated";
  std::vector<TimelineComparison> runs;
  Timeline first_measured;
  for (const std::string& file : options.measured) {
    const Timeline measured = parse_timeline_csv(read_text_file(file), file);
    runs.push_back(compare_timelines(simulated.timeline, simulated_origin, measured, file, compare));
    if (runs.size() == 1) first_measured = measured;
  }
  for (int r = 0; options.measured.empty() && r < options.repeats; ++r) {
    const validate::ExecutionResult measured = validate::execute(request);
    if (!measured.primary) continue;  // an env rank other than 0: rank 0 compares
    runs.push_back(compare_timelines(simulated.timeline, simulated_origin, measured.timeline, fmt::format("run {}", r), compare));
    if (r == 0) first_measured = measured.timeline;
  }
  if (runs.empty() && options.repeats > 0 && options.measured.empty()) return 0;  // env ranks other than 0
  if (!options.svg.empty())
    write_file_atomically(options.svg,
                          comparison_to_svg(simulated.timeline, first_measured,
                                            fmt::format("{} on {} ({}, M={}, {} stages): simulated vs measured", options.schedule,
                                                        model.name, options.device, options.micro_batches, options.stages)));
  if (options.json) {
    nlohmann::json json = nlohmann::json::parse(comparison_to_json(runs, simulated_origin));
    json["model"] = model.name;
    json["schedule"] = options.schedule;
    json["stages"] = options.stages;
    json["micro_batches"] = options.micro_batches;
    json["micro_batch_size"] = options.micro_batch_size;
    json["device"] = options.device;
    json["calibrated"] = !saved && options.profile.empty();
    if (saved) json["plan"] = options.plan;
    json["measured_here"] = options.measured.empty();
    std::cout << json.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{} on {}: {} layers in {} stages ({}), {} with M={} micro-batches of {} samples, {}\n",
                           model.name, options.device, layers, options.stages, origin, options.schedule,
                           options.micro_batches, options.micro_batch_size,
                           options.measured.empty() ? fmt::format("{} real runs", options.repeats)
                                                    : fmt::format("{} measured timelines", options.measured.size()));
  std::cout << comparison_to_table(runs, simulated_origin);
  return 0;
}

}  // namespace pipegrid::cli
