#include "cli/sweep_command.hpp"

#include <signal.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/model_command.hpp"
#include "cli/partition_command.hpp"
#include "api/simulation.hpp"
#include "partitioners/partitioners.hpp"
#include "cli/simulate_options.hpp"
#include "cli/usage.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/metrics.hpp"
#include "core/platform_check.hpp"
#include "core/profile.hpp"
#include "core/termination.hpp"
#include "sim/engine.hpp"
#include "sim/platform_xml.hpp"
#include "sweep/csv.hpp"
#include "sweep/experiment.hpp"
#include "sweep/inputs.hpp"
#include "sweep/report.hpp"
#include "sweep/results.hpp"
#include "sweep/runner.hpp"

namespace pipegrid::cli {
namespace {

namespace fs = std::filesystem;
using sweep::ExperimentPlan;
using sweep::ParameterSpec;
using sweep::PlannedRun;

constexpr const char* kVersion = "0.1.0";

struct SweepOptions {
  std::string file, out, where, shard, run, svg, trace, save_plan, time = "04:00:00";
  std::vector<std::string> sets;
  int jobs = 0, shards = 0, cpus = 1;
  double timeout_s = 0;
  bool retry_failed = false, fresh = false;
};

SweepOptions options;
CLI::App *plan_command, *run_command, *status_command, *merge_command, *report_command, *show_command, *slurm_command;

/// The capabilities this build has, for an experiment's `requires`.
const std::vector<std::string>& capabilities() {
  static const std::vector<std::string> list = {"simulate", "partition", "sweep", "simulate-partitioner", "micro-batch-scaling", "platform-cluster",
                                                  "model-generator", "model-command",
                                                  "pipedream-recompute"};
  return list;
}

/// The parameters of a command: its own input options, '-' -> '_' (not
/// its output flags). nullopt: this build has no such command.
std::optional<std::vector<ParameterSpec>> parameters_of(const std::string& command) {
  CLI::App app;
  api::PlanRequest request;
  ModelSpec model;
  CLI::App* options_of = &app;
  std::vector<ParameterSpec> parameters;
  if (command == "simulate") add_simulate_input_options(app, request);
  else if (command == "partition") options_of = add_partition_command(app);
  else if (command == "model") {
    // `pipegrid model NAME`: the name is the positional parameter `model`.
    ParameterSpec name;
    name.name = "model";
    parameters.push_back(name);
    add_model_options(app, model);
  } else return std::nullopt;
  for (const CLI::Option* option : options_of->get_options()) {
    if (option->get_lnames().empty()) continue;
    const std::string long_name = option->get_lnames().front();
    if (long_name == "help" || long_name == "json" || long_name == "output") continue;
    ParameterSpec spec;
    spec.flag = "--" + long_name;
    spec.name = long_name;
    std::replace(spec.name.begin(), spec.name.end(), '-', '_');
    const std::string type = option->get_type_name();
    spec.several = option->get_expected_max() > 1;
    if (option->get_expected_max() == 0) spec.kind = ParameterSpec::Kind::Flag;
    else if (spec.several) spec.kind = ParameterSpec::Kind::Text;
    else if (type == "INT" || type == "UINT") spec.kind = ParameterSpec::Kind::Int;
    else if (type == "FLOAT") spec.kind = ParameterSpec::Kind::Real;
    else spec.kind = ParameterSpec::Kind::Text;
    if (spec.name == "platform" || spec.name == "profile" || spec.name == "program" || spec.name == "megatron_args_file")
      spec.kind = ParameterSpec::Kind::Path;
    if (spec.name == "partition") {
      spec.kind = ParameterSpec::Kind::Path;
      spec.literals = partition_rule_names();
    }
    parameters.push_back(spec);
  }
  return parameters;
}

/// Every input read once: children of the sweep inherit the parent's reads.
struct InputReads {
  std::map<std::string, long long> hosts, layers;
};
InputReads reads;

sweep::InputQueries input_queries() {
  sweep::InputQueries queries;
  queries.content_hash = [](const sweep::Setting& setting) {
    if (!setting.inline_platform.empty()) return sweep::sha256_hex(sweep::inline_platform_xml(setting));
    return api::input_file_sha256(setting.resolved_path);
  };
  queries.hosts = [](const sweep::Setting& setting) {
    if (!setting.inline_platform.empty())
      return static_cast<long long>(check_platform_xml(setting.value.text, sweep::inline_platform_xml(setting)).hosts);
    const std::string& path = setting.resolved_path;
    if (const auto found = reads.hosts.find(path); found != reads.hosts.end()) return found->second;
    const long long count = static_cast<long long>(check_platform_xml(path, read_text_file(path)).hosts);
    reads.hosts[path] = count;
    return count;
  };
  queries.layers = [](const sweep::Setting& setting) {
    const std::string& path = setting.resolved_path;
    if (const auto found = reads.layers.find(path); found != reads.layers.end()) return found->second;
    const long long count = static_cast<long long>(read_profile(path, std::nullopt).layers.size());
    reads.layers[path] = count;
    return count;
  };
  return queries;
}

ExperimentPlan make_experiment_plan(const std::string& file, const std::vector<std::string>& sets, const std::string& where) {
  sweep::PlanOptions plan_options;
  plan_options.sets = sets;
  plan_options.where = where;
  // The command is read from the file; its parameters decide the rest.
  return sweep::plan_experiment(file, parameters_of, capabilities(), plan_options, input_queries());
}

/// The command line that reproduces a run (argv[0] excluded).
std::vector<std::string> command_line_of(const ExperimentPlan& plan, const PlannedRun& run) {
  std::vector<std::string> args = {plan.command};
  for (const ParameterSpec& spec : plan.parameters) {
    const auto found = run.settings.find(spec.name);
    if (found == run.settings.end() || found->second.value.absent()) continue;
    const sweep::Setting& setting = found->second;
    if (spec.kind == ParameterSpec::Kind::Flag) {
      if (setting.value.boolean) args.push_back(spec.flag);
      continue;
    }
    if (!spec.flag.empty()) args.push_back(spec.flag);  // none: a positional
    if (spec.several && setting.value.kind == sweep::Scalar::Kind::Text) {
      std::istringstream words(setting.value.text);
      for (std::string word; words >> word;) args.push_back(word);
      continue;
    }
    args.push_back(setting.resolved_path.empty() ? setting.value.to_text() : setting.resolved_path);
  }
  return args;
}

std::string shell_quote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@") == std::string::npos)
    return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

/// Refuses a value bound for the sbatch script that holds a control
/// character: a newline would end an #SBATCH directive or a comment line and
/// start a shell command. `field` names where the value came from.
void check_no_control_characters(const std::string& field, const std::string& value) {
  const auto found = std::find_if(value.begin(), value.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7f;
  });
  if (found == value.end()) return;
  throw InputError(fmt::format("{}: expected no control characters (the sbatch script holds it on one line), found byte 0x{:02x} in '{}'",
                               field, static_cast<unsigned char>(*found), printable(value)));
}

/// One argument of an #SBATCH directive, as sbatch reads it: sbatch splits
/// the line at blanks, honours double quotes, takes a backslash as an escape
/// and an unquoted '#' as the start of a comment (older versions even inside
/// quotes). So: bare when safe, else double-quoted with '"', '\\' and '#'
/// escaped. No control characters (check_no_control_characters).
std::string sbatch_quote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == std::string::npos)
    return word;
  std::string quoted = "\"";
  for (const char c : word) {
    if (c == '"' || c == '\\' || c == '#') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

/// Slurm's time limit forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (digits
/// only; minutes and seconds below 60, and hours below 24 after a day count;
/// a leading field of up to 8 digits), or UNLIMITED or INFINITE.
bool is_slurm_time_limit(const std::string& text) {
  if (text == "UNLIMITED" || text == "INFINITE") return true;
  const auto digits = [](const std::string& field, std::size_t most) {
    return !field.empty() && field.size() <= most && field.find_first_not_of("0123456789") == std::string::npos;
  };
  std::string clock = text;
  const std::size_t dash = text.find('-');
  const bool days = dash != std::string::npos;
  if (days) {
    if (!digits(text.substr(0, dash), 8)) return false;
    clock = text.substr(dash + 1);
  }
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (std::size_t colon; (colon = clock.find(':', start)) != std::string::npos; start = colon + 1) fields.push_back(clock.substr(start, colon - start));
  fields.push_back(clock.substr(start));
  if (fields.size() > 3) return false;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const bool leading = i == 0 && !days;
    if (!digits(fields[i], leading ? 8 : 2)) return false;
    const int limit = days && i == 0 ? 24 : 60;  // D-H..., else minutes or seconds
    if (!leading && std::stoi(fields[i]) >= limit) return false;
  }
  return true;
}

sweep::Shard shard_option(const std::string& text) {
  if (text.empty()) return {};
  if (text == "auto") return sweep::shard_from_environment([](const char* name) { return std::getenv(name); });
  return sweep::parse_shard(text);
}

ReportSpec report_spec_of(const ExperimentPlan& plan);

int plan_main() {
  const std::optional<sweep::Shard> shard = options.shard.empty() ? std::nullopt : std::optional(shard_option(options.shard));
  const ExperimentPlan plan = make_experiment_plan(options.file, options.sets, options.where);
  report_spec_of(plan);
  std::cout << fmt::format("experiment {}: {}\n", plan.name, plan.title.empty() ? "(no title)" : plan.title);
  std::cout << fmt::format("command: {}\n", plan.command);
  for (const std::string& include : plan.includes) std::cout << fmt::format("includes: {}\n", include);
  for (const std::string& note : plan.notes) std::cout << fmt::format("note: {}\n", note);
  for (const sweep::AxisReport& axis : plan.axes) {
    std::string values;
    for (const std::string& value : axis.values) values += (values.empty() ? "" : ", ") + value;
    std::cout << fmt::format("axis {} ({} value{}): {}{}\n", axis.name, axis.values.size(), axis.values.size() == 1 ? "" : "s", values,
                             axis.when ? fmt::format("  [when {}]", *axis.when) : "");
  }
  std::cout << fmt::format("combinations: {}\n", plan.runs_before_where);
  for (const sweep::WhereReport& rule : plan.where_rules)
    std::cout << fmt::format("where {} dropped {}{}\n", rule.rule, rule.dropped, rule.why.empty() ? "" : fmt::format(" ({})", rule.why));
  if (!options.where.empty())
    std::cout << fmt::format("--where {} dropped {}\n", options.where, plan.runs_after_file_where - static_cast<int>(plan.runs.size()));
  std::cout << fmt::format("runs: {}\n", plan.runs.size());
  if (shard) std::cout << fmt::format("shard {}/{}: {} runs\n", shard->index, shard->count, sweep::runs_of_shard(plan.runs, *shard).size());
  // Both checks are reported: plan shows everything that is in the way.
  int status = 0;
  for (void (*check)(const ExperimentPlan&) : {sweep::check_requires, sweep::check_inputs_exist}) {
    try {
      check(plan);
    } catch (const InputError& error) {
      std::cerr << "pipegrid: error: " << error.what() << "\n";
      status = 2;
    }
  }
  return status;
}

std::string now_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::function<int(int, char**)> dispatch_command;

/// A Fast run's child that needs a second SimGrid engine gives up (no
/// report): the runner runs it again Isolated.
[[noreturn]] void give_up_for_a_second_engine() { _exit(75); }

/// A simulate run: its command line parsed with simulate's own input
/// options into an api::PlanRequest, checked as `pipegrid simulate` checks
/// it, and run through the facade. ok, or oom with the first device out of
/// memory; a command line CLI11 refuses is an error with the usage message
/// `pipegrid simulate` exits 2 with. Throws what api::make_plan and
/// api::run_plan throw.
sweep::ChildReport run_simulate(std::vector<std::string> args) {
  CLI::App app;
  app.require_subcommand(1);
  CLI::App* simulate = app.add_subcommand("simulate");
  api::PlanRequest request;
  add_simulate_input_options(*simulate, request);
  read_integers_as_decimal(app);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  try {
    app.parse(static_cast<int>(args.size()), argv.data());
  } catch (const CLI::ParseError& error) {
    return {"error", fmt::format("exit status 2: {}", first_line("pipegrid: error: " + usage_error_text(app, error))), ""};
  }
  check_simulate_inputs(*simulate, request);
  Plan plan = api::make_plan(request);
  const api::RunResult result = api::run_plan(plan);
  sweep::ChildReport report{"ok", "", api::metrics_to_json(plan, result)};
  if (const std::optional<std::string> reason = sweep::out_of_memory_reason(result.metrics.devices)) {
    report.status = "oom";
    report.reason = *reason;
  }
  return report;
}

/// In a run's child: the run's command line, a simulate run through the
/// facade (run_simulate), another command run as `pipegrid ... --json`
/// would and its JSON read back; stdout and stderr kept in memory. Fast: its
/// first SimGrid engine runs in this child rather than in a child of its own.
sweep::ChildReport run_child(const ExperimentPlan& plan, const PlannedRun& run, sweep::RunMode mode) {
  if (mode == sweep::RunMode::Fast) sim::run_next_engine_in_process(give_up_for_a_second_engine);
  std::vector<std::string> args = {"pipegrid"};
  for (const std::string& arg : command_line_of(plan, run)) args.push_back(arg);
  std::fflush(nullptr);
  const int out = memfd_create("stdout", 0), err = memfd_create("stderr", 0);
  if (out < 0 || err < 0) return {"crashed", "memfd_create failed", ""};
  ::dup2(out, STDOUT_FILENO);
  ::dup2(err, STDERR_FILENO);
  sweep::ChildReport report;
  try {
    if (plan.command == "simulate") return run_simulate(std::move(args));
    args.push_back("--json");
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const int status = dispatch_command(static_cast<int>(args.size()), argv.data());
    std::cout.flush();
    std::fflush(nullptr);
    report.json = read_descriptor_from_start(out);
    if (status != 0) return {"error", fmt::format("exit status {}: {}", status, first_line(read_descriptor_from_start(err))), ""};
    report.status = "ok";
    // Read back as a JSON object (text that is not one is an internal error);
    // its devices out of memory, if it lists any, make the run oom.
    const nlohmann::json document = nlohmann::json::parse(report.json);
    for (const nlohmann::json& device : document.value("devices", nlohmann::json::array()))
      if (device.value("oom", false)) {
        report.status = "oom";
        const double reserve = device.value("memory_reserve_bytes", 0.0);
        report.reason = fmt::format("{} needs {} of {}{}", device.value("host", "?"), human_bytes(device.value("peak_memory_bytes", 0.0)),
                                    human_bytes(device.value("memory_capacity_bytes", 0.0) - reserve),
                                    reserve > 0 ? fmt::format(" ({} held in reserve)", human_bytes(reserve)) : "");
        break;
      }
  } catch (const InfeasibleError& error) {
    return {"infeasible", first_line(error.what()), ""};
  } catch (const InputError& error) {
    return {"error", first_line(error.what()), ""};
  } catch (const ProgramError& error) {
    return {"error", first_line(error.what()), ""};
  } catch (const InvariantViolation& error) {
    return {"crashed", "invariant violated: " + first_line(error.what()), ""};
  } catch (const std::exception& error) {
    return {"crashed", "internal error: " + first_line(error.what()), ""};
  }
  return report;
}

/// Reads every input file of `runs` once in the parent (its children inherit them).
void read_inputs_once(const std::vector<const PlannedRun*>& runs) {
  const sweep::RunInputs inputs = sweep::inputs_of(runs);
  api::enable_input_cache();
  for (const std::string& path : inputs.profiles) api::preload_profile(path);
  for (const std::string& path : inputs.platforms) api::preload_platform(path, inputs.partitioners);
  // Tensor parallelism reads the routes too (api::make_plan): read them here, so
  // that a run needs no engine of its own for them. A platform whose routes
  // cannot be read is left to the runs, which report it as before.
  if (inputs.tensor_parallel && !inputs.partitioners)
    for (const std::string& path : inputs.platforms) try {
        api::preload_platform(path, true);
      } catch (const InputError&) {
      }
}

std::map<std::string, std::string> input_hashes(const ExperimentPlan& plan) {
  std::map<std::string, std::string> hashes;
  for (const std::string& path : plan.input_files) hashes[path] = api::input_file_sha256(path);
  return hashes;
}

int run_main() {
  if (options.out.empty()) throw InputError("sweep run: --out DIR is required");
  // Left out, --jobs is every core and --timeout none; given, they must mean something.
  if (run_command->count("--jobs") > 0 && options.jobs < 1)
    throw InputError(fmt::format("--jobs: expected an integer >= 1 (leave it out for every core), found {}", options.jobs));
  if (run_command->count("--timeout") > 0 && !(std::isfinite(options.timeout_s) && options.timeout_s > 0 && options.timeout_s <= 1e8))
    throw InputError(fmt::format("--timeout: expected a positive finite number of seconds, at most 1e8 (leave it out for none), found {}",
                                 options.timeout_s));
  ExperimentPlan plan = make_experiment_plan(options.file, options.sets, options.where);
  sweep::check_requires(plan);
  sweep::check_inputs_exist(plan);
  report_spec_of(plan);
  const sweep::Shard shard = shard_option(options.shard);
  std::error_code error;
  fs::create_directories(options.out, error);
  if (error) throw InputError(fmt::format("--out {}: cannot create: {}", options.out, error.message()));
  sweep::materialize_inline_platforms(plan.runs, options.out);
  if (options.fresh)
    for (const char* name : {"shards", "runs.csv", "devices.csv"}) fs::remove_all(fs::path(options.out) / name);
  // Other shards may be appending to their journals in this folder: only
  // this shard's own journals are repaired (Journal, below). Read before the
  // manifest is written: journals of another plan leave it as it was.
  const sweep::RecordedRuns recorded = sweep::read_recorded_runs(options.out, sweep::runs_header(plan), plan.command, "the columns of this plan");
  std::set<std::string> warned;
  const auto warn = [&](const std::vector<std::string>& notes) {
    for (const std::string& note : notes)
      if (warned.insert(note).second) std::cerr << "pipegrid: warning: " << note << "\n";
  };
  warn(recorded.notes);
  sweep::write_manifest(options.out, sweep::manifest_json(plan, input_hashes(plan), kVersion));
  // Only this shard's runs are kept, once: every run forks this process,
  // and a fork costs in proportion to the memory it copies the mappings of.
  const std::vector<PlannedRun> selected = shard.count == 1 ? std::move(plan.runs) : sweep::runs_of_shard(plan.runs, shard);
  plan.runs = {};
  const sweep::RunsToDo todo = sweep::runs_to_do(selected, recorded, options.retry_failed);
  read_inputs_once(todo.runs);
  const fs::path partitions = fs::path(options.out) / "cache" / "partitions";
  fs::create_directories(partitions, error);
  if (error) throw InputError(fmt::format("{}: cannot create: {}", partitions.string(), error.message()));
  api::set_partition_cache(partitions.string());
  sweep::Journal journal(options.out, shard, sweep::runs_header(plan));
  sweep::RunnerOptions runner;
  runner.jobs = options.jobs > 0 ? options.jobs : static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  runner.timeout_s = options.timeout_s;
  runner.progress = isatty(STDERR_FILENO) != 0;
  std::map<std::string, std::string> new_status;
  if (todo.resumed > 0)
    std::cerr << fmt::format("pipegrid: {} of {} runs already have a row in {}: skipped\n", todo.resumed, selected.size(), options.out);
  malloc_trim(0);  // what planning freed leaves the process before the forks copy it
  const sweep::RunnerSummary summary = sweep::run_in_children(
      todo.runs, [&](const PlannedRun& run, sweep::RunMode mode) { return run_child(plan, run, mode); }, runner,
      [&](const PlannedRun& run, const sweep::RunOutcome& outcome) {
        journal.append(sweep::rows_of(plan, run, outcome, shard, now_utc(), kVersion));
        new_status[run.key] = outcome.status;
        // Test hook (tests/check_sweep.sh resume): the parent stops for good
        // once three rows are in its journal, to be killed there.
        if (new_status.size() == 3) hold_if_injected("hold-sweep-after-3-rows");
      });
  // The result of every selected run, recorded before or now.
  sweep::StatusCounts counts;
  for (const PlannedRun& run : selected) {
    const auto found = new_status.find(run.key);
    counts.add(found != new_status.end() ? found->second : sweep::recorded_status(recorded, run.key));
  }
  std::string line;
  for (const std::string& status : sweep::run_statuses())
    if (counts.by_status[status] > 0) line += fmt::format("{}{} {}", line.empty() ? "" : ", ", status, counts.by_status[status]);
  const bool sharded = shard.count > 1 || !options.shard.empty();
  std::string where = fmt::format("{}/shards/shard-{}-of-{}.csv", options.out, shard.index, shard.count);
  if (!sharded && !summary.interrupted) {
    const sweep::MergeResult merged = sweep::merge_results(options.out);
    warn(merged.notes);
    where = fmt::format("{}/runs.csv ({} rows) and devices.csv", options.out, merged.rows);
  }
  std::cout << fmt::format("{}: {} run{}{}: {}{} -> {}\n", plan.name, selected.size(), selected.size() == 1 ? "" : "s",
                           sharded ? fmt::format(" in shard {}/{}", shard.index, shard.count) : "", line.empty() ? "none" : line,
                           counts.not_run ? fmt::format(", {} not run", counts.not_run) : "", where);
  if (summary.interrupted) {
    std::cerr << "pipegrid: stopped by SIGTERM; run the same command again to finish\n";
    return 128 + SIGTERM;
  }
  return counts.failed > 0 ? 1 : 0;
}

nlohmann::json read_manifest(const std::string& dir) {
  const fs::path path = fs::path(dir) / "manifest.json";
  if (!fs::exists(path)) throw InputError(fmt::format("{}: no manifest.json: not the output folder of `pipegrid sweep run`", dir));
  try {
    return nlohmann::json::parse(read_text_file(path.string()));
  } catch (const nlohmann::json::exception& error) {
    throw InputError(fmt::format("{}: not valid JSON: {}", path.string(), error.what()));
  }
}

int status_main() {
  const nlohmann::json manifest = read_manifest(options.out);
  const sweep::RecordedRuns recorded = sweep::read_recorded_runs(options.out);
  for (const std::string& note : recorded.notes) std::cerr << "pipegrid: warning: " << note << "\n";
  sweep::StatusCounts counts;
  for (const nlohmann::json& run : manifest.at("plan")) counts.add(sweep::recorded_status(recorded, run.at("key").get<std::string>()));
  std::cout << fmt::format("{}: {} ({} runs)\n", options.out, manifest.value("name", ""), manifest.at("plan").size());
  for (const std::string& status : sweep::run_statuses())
    if (counts.by_status[status] > 0) std::cout << fmt::format("  {:<11}{}\n", status, counts.by_status[status]);
  std::cout << fmt::format("  {:<11}{}\n", "not run", counts.not_run);
  if (!recorded.conflicts.empty()) std::cout << fmt::format("  {} key(s) recorded with two different results (see sweep merge)\n", recorded.conflicts.size());
  const bool runs_csv = fs::exists(fs::path(options.out) / "runs.csv");
  std::cout << fmt::format("  runs.csv: {}\n", runs_csv ? "written" : counts.not_run ? "not yet (run the missing shards, then sweep merge)" : "not yet (sweep merge)");
  return 0;
}

int merge_main() {
  const sweep::MergeResult merged = sweep::merge_results(options.out);
  for (const std::string& note : merged.notes) std::cerr << "pipegrid: warning: " << note << "\n";
  std::cout << fmt::format("{}/runs.csv: {} rows\n", options.out, merged.rows);
  if (merged.missing_labels.empty()) return 0;
  std::cerr << fmt::format("pipegrid: {} run{} of the plan have no row yet:\n", merged.missing_labels.size(), merged.missing_labels.size() == 1 ? "" : "s");
  for (const std::string& label : merged.missing_labels) std::cerr << "  " << label << "\n";
  return 1;
}


int show_main() {
  const nlohmann::json manifest = read_manifest(options.out);
  ExperimentPlan plan = make_experiment_plan(manifest.at("experiment"), manifest.value("sets", std::vector<std::string>{}),
                                             manifest.value("where", std::string()));
  sweep::materialize_inline_platforms(plan.runs, options.out);
  const auto found = std::find_if(plan.runs.begin(), plan.runs.end(),
                                  [&](const PlannedRun& run) { return run.key == options.run || run.label == options.run; });
  if (found == plan.runs.end())
    throw InputError(fmt::format("--run {}: no run of {} has this key or label (see {}/runs.csv)", options.run, plan.file, options.out));
  std::vector<std::string> args = {"pipegrid"};
  for (const std::string& arg : command_line_of(plan, *found)) args.push_back(arg);
  for (const auto& [flag, value] : {std::pair{"--svg", options.svg}, {"--trace", options.trace}, {"--save-plan", options.save_plan}})
    if (!value.empty()) {
      args.push_back(flag);
      args.push_back(value);
    }
  std::string line;
  for (const std::string& arg : args) line += (line.empty() ? "" : " ") + shell_quote(arg);
  std::cerr << "pipegrid: " << found->label << " [" << found->key << "]: " << line << "\n";
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return dispatch_command(static_cast<int>(args.size()), argv.data());
}

/// The most array tasks `sweep slurm` writes: --shard's limit.
constexpr int kMaxArrayTasks = 1000000;

/// Where the experiment's name comes from, for messages: its `name` key
/// (FILE:LINE) or, without one, its file name.
std::string name_field_of(const ExperimentPlan& plan) {
  try {
    const toml::table root = toml::parse(plan.experiment_text, plan.file);
    if (const toml::node* name = root.get("name")) return fmt::format("{}:{}: name", plan.file, name->source().begin.line);
  } catch (const toml::parse_error&) {
  }
  return fmt::format("{}: the experiment's name (its file name: it has no `name` key)", plan.file);
}

/// Prints an sbatch job-array script: task T of N runs shard T/N. Every
/// value from the file or a flag is checked (no control characters; --time
/// in a Slurm form) and quoted for the place it goes: sbatch_quote in
/// #SBATCH lines, shell_quote on command lines.
int slurm_main() {
  if (options.out.empty()) throw InputError("sweep slurm: --out DIR is required");
  if (options.shards < 1 || options.shards > kMaxArrayTasks)
    throw InputError(fmt::format("--shards: expected an integer from 1 to {}, found {}", kMaxArrayTasks, options.shards));
  if (options.cpus < 1) throw InputError(fmt::format("--cpus: expected an integer >= 1, found {}", options.cpus));
  if (!is_slurm_time_limit(options.time))
    throw InputError(fmt::format("--time: expected a Slurm time limit, MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (digits; "
                                 "minutes and seconds below 60, hours below 24 after D-), found '{}'",
                                 printable(options.time)));
  const std::string out_path = fs::absolute(options.out).lexically_normal().string();
  const std::string file_path = fs::absolute(options.file).lexically_normal().string();
  check_no_control_characters("--out", out_path);
  check_no_control_characters(options.file, file_path);
  // In sbatch's --output a backslash turns off the %A/%a replacement.
  if (out_path.find('\\') != std::string::npos)
    throw InputError(fmt::format("--out: expected no backslash (sbatch's --output would not replace %A and %a), found '{}'", out_path));
  const ExperimentPlan plan = make_experiment_plan(options.file, options.sets, options.where);
  sweep::check_requires(plan);
  check_no_control_characters(name_field_of(plan), plan.name);
  if (static_cast<std::size_t>(options.shards) > plan.runs.size())
    throw InputError(fmt::format("--shards: expected at most {} (the runs of {}: a task without a run is wasted), found {}",
                                 plan.runs.size(), plan.file, options.shards));
  std::string sets;
  for (const std::string& set : options.sets) sets += " --set " + shell_quote(set);
  if (!options.where.empty()) sets += " --where " + shell_quote(options.where);
  const std::string file = shell_quote(file_path);
  const std::string out = shell_quote(out_path);
  std::string log_pattern;  // sbatch's --output pattern: a '%' of the path is written %%
  for (const char c : out_path) log_pattern += c == '%' ? std::string("%%") : std::string(1, c);
  log_pattern += "/slurm-%A_%a.log";
  std::cout << fmt::format(
      "#!/bin/bash\n"
      "# {} runs of {} in {} array tasks; submit with: sbatch THIS_FILE\n"
      "#SBATCH --job-name={}\n"
      "#SBATCH --array=0-{}\n"
      "#SBATCH --cpus-per-task={}\n"
      "#SBATCH --time={}\n"
      "#SBATCH --output={}\n"
      "set -euo pipefail\n"
      "# Task T runs shard T/{} (the runs with run_index % {} == T); resubmit failed tasks\n"
      "# with sbatch --array=T1,T2,... THIS_FILE: each resumes where it stopped.\n"
      "pipegrid sweep run {} --out {} --shard \"$SLURM_ARRAY_TASK_ID/{}\" --jobs \"${{SLURM_CPUS_PER_TASK:-{}}}\"{}\n"
      "# When every task has finished:\n"
      "#   pipegrid sweep merge {}\n"
      "#   pipegrid sweep report {} --out {}\n",
      plan.runs.size(), plan.name, options.shards, sbatch_quote("pipegrid-" + plan.name), options.shards - 1, options.cpus, options.time,
      sbatch_quote(log_pattern), options.shards, options.shards, file, out, options.shards, options.cpus, sets, out, file, out);
  return 0;
}

/// The file's [[table]], [[expect]] and [report] sections (checked: a typo
/// there is an error before anything runs).
ReportSpec report_spec_of(const ExperimentPlan& plan) {
  toml::table root;
  try {
    root = toml::parse(plan.experiment_text, plan.file);
  } catch (const toml::parse_error& error) {
    throw InputError(fmt::format("{}:{}: not valid TOML: {}", plan.file, error.source().begin.line, error.description()));
  }
  return parse_report_spec(root, plan.file);
}

int report_main() {
  const ExperimentPlan plan = make_experiment_plan(options.file, options.sets, options.where);
  const ReportSpec spec = report_spec_of(plan);
  ReportContext context;
  context.name = plan.name;
  context.title = plan.title;
  for (const sweep::AxisReport& axis : plan.axes) context.axes.push_back({axis.name, axis.keys});
  context.metric_columns = sweep::metric_header(plan);
  const ReportResult result = write_report(spec, context, options.out);
  for (const std::string& warning : result.warnings) std::cerr << "pipegrid: warning: " << warning << "\n";
  for (const std::string& failure : result.failures) std::cerr << "pipegrid: expect broken: " << failure << "\n";
  std::cout << fmt::format("{}: {} runs, {} files in {} (report.md, report.html); expects: {} checked, {} broken\n", plan.name,
                           result.runs, result.files.size(), options.out, result.checked_expects, result.broken_expects);
  return result.broken_expects > 0 ? 1 : 0;
}

}  // namespace

CLI::App* add_sweep_command(CLI::App& app) {
  CLI::App* sweep = app.add_subcommand("sweep", "run an experiment file's parameter sweep; tables, checks and plots");
  sweep->require_subcommand(1);
  const auto add_plan_options = [](CLI::App* command) {
    command->add_option("FILE", options.file, "experiment file (TOML)")->required();
    command->add_option("--set", options.sets, "KEY=VALUE: set a parameter (replaces an axis that sets it)");
    command->add_option("--where", options.where, "keep only the runs for which this expression is true");
  };
  plan_command = sweep->add_subcommand("plan", "list the runs an experiment file gives; run nothing");
  add_plan_options(plan_command);
  plan_command->add_option("--shard", options.shard, "I/N: show the size of this shard");
  run_command = sweep->add_subcommand("run", "run every run that has no row yet (one forked process each)");
  add_plan_options(run_command);
  run_command->add_option("--out", options.out, "results folder (runs.csv, devices.csv, manifest.json)")->required();
  run_command->add_option("--jobs", options.jobs, "runs at a time, >= 1 (default: every core)");
  run_command->add_option("--shard", options.shard, "I/N: the runs with run_index % N == I; auto: from Slurm or MPI variables");
  run_command->add_option("--timeout", options.timeout_s, "seconds per run, > 0; past it the run is killed (status timeout; default: none)");
  run_command->add_flag("--retry-failed", options.retry_failed, "run again the runs recorded as error, crashed or timeout");
  run_command->add_flag("--fresh", options.fresh, "forget the recorded rows and run everything");
  status_command = sweep->add_subcommand("status", "count a results folder's runs by status");
  status_command->add_option("DIR", options.out, "results folder")->required();
  merge_command = sweep->add_subcommand("merge", "derive runs.csv and devices.csv from the shards' rows");
  merge_command->add_option("DIR", options.out, "results folder")->required();
  report_command = sweep->add_subcommand("report", "tables, checks and plots from a results folder (never simulates)");
  add_plan_options(report_command);
  report_command->add_option("--out", options.out, "results folder")->required();
  show_command = sweep->add_subcommand("show", "re-simulate one run to draw it (runs are deterministic)");
  show_command->add_option("DIR", options.out, "results folder")->required();
  show_command->add_option("--run", options.run, "the run's key or label")->required();
  show_command->add_option("--svg", options.svg, "write its timeline as SVG");
  show_command->add_option("--trace", options.trace, "write its Chrome trace");
  show_command->add_option("--save-plan", options.save_plan, "write its plan");
  slurm_command = sweep->add_subcommand("slurm", "print an sbatch job-array script for a sweep (never submits)");
  add_plan_options(slurm_command);
  slurm_command->add_option("--out", options.out, "results folder")->required();
  slurm_command->add_option("--shards", options.shards, "array tasks, 1 to the number of runs (at most 1000000)")->required();
  slurm_command->add_option("--cpus", options.cpus, "CPUs per task (--jobs of each task; default 1)");
  slurm_command->add_option("--time", options.time, "time limit per task: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (default 04:00:00)");
  return sweep;
}

int run_sweep_command(const std::function<int(int, char**)>& dispatch) {
  dispatch_command = dispatch;
  if (*plan_command) return plan_main();
  if (*run_command) return run_main();
  if (*status_command) return status_main();
  if (*merge_command) return merge_main();
  if (*report_command) return report_main();
  if (*show_command) return show_main();
  if (*slurm_command) return slurm_main();
  return 0;
}

}  // namespace pipegrid::cli
