#include "cli/validate_command.hpp"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/calibrate_command.hpp"
#include "cli/launcher_flag.hpp"
#include "cli/model_flags.hpp"
#include "api/simulation.hpp"
#include "cli/torch_forward.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/recompute.hpp"
#include "core/termination.hpp"
#include "core/timeline_compare.hpp"
#include "core/torch_schedule.hpp"
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
  std::string program_file;
  std::string program_format = "text";
  std::vector<int> replicas;
  bool vertical_sync = false;
  int update_interval = 0;
  bool wait_free = false;
  bool recompute = false;
  std::string recompute_granularity, recompute_method;  ///< refused: kLayerRecomputeFlags
  int recompute_num_layers = 0;
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
  std::string transfer_rule = "share";
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
  command = app.add_subcommand("validate", kValidateSummary);
  command->add_option("--plan", options.plan,
                      "a plan saved by simulate --save-plan from a calibrated profile: its model, schedule, M, mini-batches, "
                      "partition and platform (instead of --model, --schedule, ...)");
  command->add_option("--model", options.model, "zoo model: mlp, vgg16, gnmt or gpt (its options: the flags below, as for execute)");
  add_model_flags(*command, options.model_flags);
  command->add_option("--schedule", options.schedule,
                      "any schedule execute runs: gpipe, 1f1b-*, fbp-as (cpu), dp, interleaved-1f1b, looped-bfs, zb-*, zb1p, "
                      "dualpipev, or (compared in the steady state) pipedream, pipedream-2bw, pipeoptim");
  command->add_option("--program", options.program_file,
                      "run and simulate this Program file instead of --schedule (as execute --program: flushed weights, "
                      "warm-up = its first --warmup mini-batches, default 1 when it has more than one)");
  command->add_option("--program-format", options.program_format, "format of --program: text (default) or torch-csv");
  command->add_option("--replicas", options.replicas,
                      "replicas per stage, e.g. 2,1 (sets the stages; devices = their sum); dp: --replicas N")
      ->delimiter(',');
  command->add_flag("--vertical-sync", options.vertical_sync, "pipedream: every stage uses the input stage's weight version");
  command->add_option("--update-interval", options.update_interval,
                      "pipedream-2bw: mini-batches per weight update (default: the number of stages)");
  command->add_flag("--wait-free", options.wait_free, "dp: one all-reduce per layer with parameters");
  command->add_flag("--recompute", options.recompute, "activation recomputation (whole stages, as execute runs it)");
  // simulate's options of Megatron-LM's recomputation, refused with the
  // reason: the executor recomputes whole stages only.
  command->add_option("--recompute-granularity", options.recompute_granularity,
                      "refused: the executor recomputes whole stages only (--recompute); simulate models Megatron-LM's");
  command->add_option("--recompute-method", options.recompute_method, "refused, as --recompute-granularity");
  command->add_option("--recompute-num-layers", options.recompute_num_layers, "refused, as --recompute-granularity");
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
  command->add_option("--mini-batches", options.mini_batches,
                      "measured (and simulated) mini-batches per run (default 3; pipedream, pipedream-2bw, pipeoptim: as "
                      "many as simulate needs to confirm a steady-state cycle, from max(32, 4 x devices))");
  command->add_option("--warmup", options.warmup,
                      "mini-batches run before the measured ones (default 1; with replicated stages of the steady-state "
                      "schedules, the least that makes the run whole rounds of the replicas); with --measured, what "
                      "those runs left out");
  command->add_option("--calibration-repeats", options.calibration_repeats, "timed runs per calibration measurement (default 5)");
  command->add_option("--seed", options.seed, "seed of the weights and the data (default 1)");
  command->add_option("--profile", options.profile, "profile JSON to simulate with instead of calibrating (with --platform)");
  command->add_option("--platform", options.platform, "platform XML to simulate with instead of calibrating (with --profile)");
  command->add_option("--network", options.network,
                      "analytic (default: a copy takes exactly the fitted latency + bytes/bandwidth) or simgrid");
  command->add_option("--transfer-rule", options.transfer_rule,
                      "how concurrent transfers share the network in the simulation: share (default) or fifo, as for simulate");
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
                                         "--platform",      "--network",          "--program",      "--replicas",
                                         "--vertical-sync", "--update-interval",  "--wait-free",    "--recompute",
                                         "--transfer-rule"};
  for (const std::string& flag : given_model_flags(*command)) plan_gives.push_back(flag);
  for (const std::string& flag : plan_gives)
    if (command->count(flag)) throw InputError(fmt::format("{}: --plan {} gives it; leave it out", flag, file));
  SavedPlan saved;
  saved.plan = read_plan_file(file);
  const Plan& plan = saved.plan;
  if (plan.layer_recompute.enabled())
    throw InputError(executor_layer_recompute_refusal(
        fmt::format("--plan {}: recompute_granularity \"{}\"", file, plan.layer_recompute.granularity), "validate",
        fmt::format("--plan {}", file)));
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

namespace {

/** The Program the executor runs for `plan` with `schedule`
 *  (api::plan_schedule_options, with the warm-up mini-batches in front):
 *  generated from its schedule, or its Program file as it is. */
Program executed_program(const Plan& plan, const ScheduleOptions& schedule) {
  return plan.program_text.empty() ? generate_schedule(plan.schedule, schedule) : parse_program_text(plan.program_text, "program");
}

/** `timeline` without its first `count` mini-batches (a flushed run's
 *  warm-up; all-reduce rounds are mini-batches there), renumbered from 0. */
Timeline without_first_minibatches(Timeline timeline, int count) {
  std::erase_if(timeline.records, [&](const TimelineRecord& record) { return record.mini_batch < count; });
  for (TimelineRecord& record : timeline.records) record.mini_batch -= count;
  return timeline;
}

}  // namespace

int run_validate_command() {
  for (const char* flag : kLayerRecomputeFlags)
    if (command->count(flag)) throw InputError(executor_layer_recompute_refusal(flag, "validate"));
  std::optional<SavedPlan> saved;
  const bool from_file = !options.program_file.empty();
  if (!options.plan.empty()) {
    saved = read_saved_plan(options.plan);
  } else {
    if (options.model.empty()) throw InputError("validate: --model is required (or give --plan FILE)");
    if (from_file) {
      // The Program is the schedule: its stages, micro-batches, mini-batches and devices.
      for (const char* flag : {"--schedule", "--micro-batches", "--mini-batches", "--replicas", "--virtual-stages", "--recompute",
                               "--vertical-sync", "--update-interval", "--wait-free"})
        if (command->count(flag))
          throw InputError(fmt::format("--program {}: the Program says what {} would; drop {}", options.program_file, flag, flag));
    } else if (options.schedule.empty()) {
      throw InputError("validate: --schedule or --program is required (or give --plan FILE)");
    }
  }
  if (!from_file && command->count("--program-format")) throw InputError("--program-format: applies to --program FILE");
  const validate::ModelConfig model = saved ? saved->model : model_from_flags(options.model, options.model_flags, *command);
  if (!from_file) {
    const ScheduleInfo& info = schedule_info(options.schedule);
    if (options.vertical_sync && !takes_option(info, ScheduleOption::VerticalSync))
      throw InputError(fmt::format("--vertical-sync: applies to {}, not {}", schedules_taking(ScheduleOption::VerticalSync), info.name));
    if (options.update_interval != 0 && !takes_option(info, ScheduleOption::UpdateInterval))
      throw InputError(fmt::format("--update-interval: applies to {}, not {}", schedules_taking(ScheduleOption::UpdateInterval), info.name));
    if (info.single_stage && options.replicas.size() != 1 && !saved)
      throw InputError(fmt::format("--schedule {}: runs the whole model on every device; give the devices as --replicas N", info.name));
  }
  // Read once: the Program file sets the stages, micro-batches and devices.
  Program program_file;
  if (from_file) {
    std::vector<std::string> notes;
    program_file = read_program_file(options.program_file, options.program_format, &notes);
    for (const std::string& note : notes) std::cerr << "pipegrid: note: " << note << "\n";
    if (command->count("--stages") && options.stages != program_file.num_stages)
      throw InputError(fmt::format("--stages {}: the Program {} has {} stages", options.stages, options.program_file,
                                   program_file.num_stages));
    options.stages = program_file.num_stages;
    options.micro_batches = program_file.micro_batches;
    if (!command->count("--warmup")) options.warmup = program_file.mini_batches > 1 ? 1 : 0;
    if (options.warmup >= program_file.mini_batches)
      throw InputError(fmt::format("--warmup {}: the Program {} runs {} mini-batches; expected fewer warm-up ones", options.warmup,
                                   options.program_file, program_file.mini_batches));
  }
  const int virtual_stages = saved      ? saved->plan.virtual_stages
                             : from_file ? 1
                                         : options.virtual_stages.value_or(default_virtual_stages(options.schedule));
  if (saved && options.virtual_stages)
    throw InputError(fmt::format("--virtual-stages: --plan {} gives it; leave it out", options.plan));
  if (!options.replicas.empty()) {
    if (virtual_stages > 1)
      throw InputError(fmt::format("--virtual-stages {}: devices holding several stages are not replicated; drop --replicas",
                                   virtual_stages));
    const int stages = static_cast<int>(options.replicas.size());
    if (command->count("--stages") && options.stages != stages)
      throw InputError(fmt::format("--replicas gives {} stages, --stages says {}", stages, options.stages));
    if (!options.layers_per_stage.empty() && static_cast<int>(options.layers_per_stage.size()) != stages)
      throw InputError(fmt::format("--replicas gives {} stages, --layers-per-stage {}", stages, options.layers_per_stage.size()));
    for (const int replicas : options.replicas)
      if (replicas < 1) throw InputError(fmt::format("--replicas: expected 1 or more per stage, found {}", replicas));
    options.stages = stages;
  }
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
  int devices = options.stages / virtual_stages;
  if (from_file) devices = static_cast<int>(program_file.devices.size());
  if (!options.replicas.empty()) devices = std::accumulate(options.replicas.begin(), options.replicas.end(), 0);
  validate::DeviceSpec device = validate::parse_device_spec(options.device);
  if (device.count == 0) device.count = devices;
  if (device.count != devices)
    throw InputError(fmt::format("--device {}: expected one device per {} ({})", options.device,
                                 from_file                   ? fmt::format("device of the Program {}", options.program_file)
                                 : !options.replicas.empty() ? std::string("stage replica")
                                 : virtual_stages == 1       ? std::string("stage")
                                                             : fmt::format("{} stages", virtual_stages),
                                 devices));

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
    // fbp-as on CPUs runs each device's two streams as two threads, in
    // parallel: the calibrated hosts then execute asynchronously.
    if (!from_file && schedule_info(options.schedule).needs_async && device.kind == "cpu") {
      const std::string kind = "<prop id=\"kind\" value=\"gpu\"/>\n";
      for (std::size_t at = platform_text.find(kind); at != std::string::npos; at = platform_text.find(kind, at + 1))
        platform_text.insert(at + kind.size(), "      <prop id=\"execution\" value=\"async\"/>\n");
    }
  } else {
    profile_text = read_text_file(options.profile);
    platform_text = read_text_file(options.platform);
  }
  const std::string origin = saved ? options.plan : options.profile.empty() ? "calibrated profile" : options.profile;
  // Schedules without a flush are compared in the steady state, over as
  // many mini-batches as simulate takes to confirm a cycle (unless given).
  const bool flushed = from_file || schedule_info(options.schedule).flushed;
  Plan plan;
  std::optional<api::RunResult> simulated_run;
  if (saved) {
    plan = saved->plan;
    simulated_run = api::run_plan(plan);
  } else {
  const TemporaryFile profile_file(".json", profile_text);
  const TemporaryFile platform_file(".xml", platform_text);

  api::PlanRequest plan_request;
  plan_request.profile_file = profile_file.path();
  plan_request.platform_file = platform_file.path();
  plan_request.micro_batch_size = options.micro_batch_size;
  plan_request.schedule = options.schedule;
  plan_request.micro_batches = options.micro_batches;
  if (!from_file && (flushed || command->count("--mini-batches"))) plan_request.mini_batches = options.mini_batches;
  plan_request.network = options.network;
  plan_request.transfer_rule = options.transfer_rule;
  if (!from_file) plan_request.virtual_stages = virtual_stages;
  plan_request.program_file = options.program_file;
  plan_request.program_format = options.program_format;
  // dp runs the whole model on every host of the platform: its replicas are the hosts.
  if (from_file || !schedule_info(options.schedule).single_stage)
    plan_request.replicas = fmt::format("{}", fmt::join(options.replicas, ","));
  plan_request.vertical_sync = options.vertical_sync;
  plan_request.update_interval = options.update_interval;
  plan_request.wait_free = options.wait_free;
  plan_request.recompute = options.recompute;
  plan = api::make_plan(plan_request);
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
  std::size_t hosts = 0;
  for (const auto& replicas : plan.partition.hosts) hosts += replicas.size();
  if (virtual_stages == 1 && !from_file && static_cast<int>(hosts) != devices)
    throw InputError(fmt::format("{}: the plan uses {} hosts, expected one per device ({})",
                                 options.platform.empty() ? "calibrated platform" : options.platform, hosts, devices));
  for (int s = 0; s < options.stages; ++s)
    for (int l = ranges[s].first; l < ranges[s].second; ++l) plan.partition.stage_of_layer[l] = s;
  simulated_run = api::run_plan(plan);
  }
  const api::RunResult& simulated = *simulated_run;
  const bool steady = !api::plan_schedule_info(plan).flushed;
  for (const std::string& warning : simulated.warnings)
    // A flushed run is compared over whole mini-batches, whatever its timeline's overlap says.
    if (steady || warning.find("steady-state cycle") == std::string::npos)
      std::cerr << "pipegrid: warning: " << (warning.rfind("warning: ", 0) == 0 ? warning.substr(9) : warning) << "\n";
  const int stages = plan.partition.num_stages();
  options.mini_batches = from_file ? program_file.mini_batches - options.warmup : plan.mini_batches;
  // With replicated stages, a run of whole rounds of the replicas (every
  // all-reduce has all of them): the warm-up, unless given, is the least
  // (at least 1) that makes it so.
  int round = 1, cycle_multiple = 1;
  for (const auto& hosts : plan.partition.hosts) round = std::lcm(round, static_cast<int>(hosts.size()));
  if (steady && !command->count("--warmup") && options.measured.empty())
    while ((options.warmup + options.mini_batches) % round != 0) ++options.warmup;

  validate::ExecutionRequest request;
  request.model = model;
  request.stages = ranges;
  const ScheduleOptions schedule = api::plan_schedule_options(plan, options.warmup + plan.mini_batches);
  request.program = from_file ? program_file : executed_program(plan, schedule);
  // The weight rule of the schedule (execute's); a Program file is flushed.
  const std::string schedule_name = from_file ? "program " + options.program_file : plan.schedule;
  if (!from_file) request.weight_rule = validate::weight_rule_of(api::plan_schedule_info(plan), plan.vertical_sync);
  if (!from_file && request.weight_rule == validate::WeightRule::TwoBW) {
    // Updates (all-reduces of a replicated stage) every U rounds: cycles of whole update intervals.
    for (const auto& hosts : plan.partition.hosts)
      cycle_multiple = std::lcm(cycle_multiple, static_cast<int>(hosts.size()) * update_interval(plan.schedule, schedule));
  }
  request.update_interval = from_file ? 0 : update_interval(plan.schedule, schedule);
  request.micro_batch_size = options.micro_batch_size;
  request.warmup_mini_batches = options.warmup;
  request.seed = options.seed;
  request.device = device;
  request.launcher = launcher_from_flags(options.launcher);

  CompareOptions compare;
  compare.align_first = true;
  compare.steady_period = steady;  // flushed: span / mini-batches, as simulate has it
  compare.steady_cycle = steady;
  compare.cycle_multiple = cycle_multiple;
  compare.measured_warmup = options.warmup;
  const std::string simulated_origin = "simulated";
  // A Program file's warm-up mini-batches are simulated too: left out here as the run leaves them out.
  const Timeline simulated_timeline =
      from_file ? without_first_minibatches(simulated.timeline, options.warmup) : simulated.timeline;
  std::vector<TimelineComparison> runs;
  Timeline first_measured;
  for (const std::string& file : options.measured) {
    const Timeline measured = parse_timeline_csv(read_text_file(file), file);
    runs.push_back(compare_timelines(simulated_timeline, simulated_origin, measured, file, compare));
    if (runs.size() == 1) first_measured = measured;
  }
  for (int r = 0; options.measured.empty() && r < options.repeats; ++r) {
    const validate::ExecutionResult measured = validate::execute(request);
    if (!measured.primary) continue;  // an env rank other than 0: rank 0 compares
    runs.push_back(compare_timelines(simulated_timeline, simulated_origin, measured.timeline, fmt::format("run {}", r), compare));
    if (r == 0) first_measured = measured.timeline;
  }
  if (runs.empty() && options.repeats > 0 && options.measured.empty()) return 0;  // env ranks other than 0
  if (!options.svg.empty())
    write_file_atomically(options.svg,
                          comparison_to_svg(simulated_timeline, first_measured,
                                            fmt::format("{} on {} ({}, M={}, {} stages): simulated vs measured", schedule_name,
                                                        model.name, options.device, plan.micro_batches, stages)));
  const int samples = plan.micro_batches * options.micro_batch_size;
  const TimelineComparison& first = runs.front();
  if (options.json) {
    nlohmann::json json = nlohmann::json::parse(comparison_to_json(runs, simulated_origin));
    json["model"] = model.name;
    json["schedule"] = from_file ? nlohmann::json(nullptr) : nlohmann::json(plan.schedule);
    json["program"] = from_file ? nlohmann::json(options.program_file) : nlohmann::json(nullptr);
    json["stages"] = stages;
    json["virtual_stages"] = plan.virtual_stages;
    json["replicas"] = options.replicas.empty() ? nlohmann::json(nullptr) : nlohmann::json(options.replicas);
    json["micro_batches"] = plan.micro_batches;
    json["micro_batch_size"] = options.micro_batch_size;
    json["warmup_minibatches"] = options.warmup;
    json["simulated_throughput_samples_per_s"] = samples / first.simulated_minibatch_time_s;
    json["measured_throughput_samples_per_s"] = samples / first.measured_minibatch_time_s;
    json["device"] = options.device;
    json["calibrated"] = !saved && options.profile.empty();
    if (saved) json["plan"] = options.plan;
    json["measured_here"] = options.measured.empty();
    std::cout << json.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{} on {}: {} layers in {} stages ({}), {} with M={} micro-batches of {} samples, {}\n", model.name,
                           options.device, layers, stages, origin, schedule_name, plan.micro_batches, options.micro_batch_size,
                           options.measured.empty()
                               ? fmt::format("{} real runs of {} mini-batches after {} warm-up", options.repeats,
                                             options.mini_batches, options.warmup)
                               : fmt::format("{} measured timelines", options.measured.size()));
  std::cout << (steady ? "compared in the steady state: period, throughput and the actions of one steady cycle\n"
                       : "compared over whole mini-batches: every action of the run\n");
  std::cout << comparison_to_table(runs, simulated_origin);
  std::cout << fmt::format("throughput: simulated {:.1f} samples/s, measured {:.1f} samples/s ({} samples per mini-batch)\n",
                           samples / first.simulated_minibatch_time_s, samples / first.measured_minibatch_time_s, samples);
  return 0;
}

}  // namespace pipegrid::cli
