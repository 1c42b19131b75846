// The compiled half of the Python package `pipegrid` (python/pipegrid/
// __init__.py is the other): the library facade (api/) called with keyword
// arguments named as the sweep parameters are (simulate's flags, '-' -> '_'),
// parsed by the very option definitions the CLI and the sweeps use
// (cli/simulate_options.hpp), so a keyword means what its flag means.
//
// simulate runs in this process (its SimGrid engines in forked children, as
// for the CLI). explore, plan and sweep run their CLI command in a forked
// child of their own: those commands keep their flags in globals, which a
// second call would inherit. Every forked child leaves with _exit: none ever
// returns into the interpreter (guarded below for the paths we do not own).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/simulation.hpp"
#include "cli/chakra_command.hpp"
#include "cli/explore_command.hpp"
#include "cli/trace_command.hpp"
#include "cli/model_command.hpp"
#include "cli/partition_command.hpp"
#include "cli/plan_command.hpp"
#include "cli/simulate_options.hpp"
#include "cli/sweep_command.hpp"
#include "cli/usage.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/metrics.hpp"
#include "core/plan.hpp"
#include "core/program.hpp"
#include "core/suggest.hpp"
#include "core/termination.hpp"
#include "render/timeline_csv.hpp"
#include "render/timeline_svg.hpp"

namespace py = pybind11;

namespace pipegrid::python {
namespace {

// pipegrid.Error and its subclasses (created at import, owned by the module).
PyObject* error_type = nullptr;
PyObject* input_error_type = nullptr;
PyObject* infeasible_error_type = nullptr;
PyObject* internal_error_type = nullptr;

/// Status a forked child exits with when it would have returned into Python.
constexpr int kEscapedChildStatus = 70;

/** Runs `work` (which may fork) and makes sure only the calling process comes
 *  back: a forked child that returns or throws out of `work` (a fork path
 *  that forgot its _exit) leaves with _exit here, never running Python's
 *  finalisers or atexit handlers, nor flushing its buffers a second time. */
void in_calling_process(const std::function<void()>& work) {
  const pid_t caller = getpid();
  const auto leave_if_child = [caller] {
    if (getpid() == caller) return;
    static const char message[] = "pipegrid: internal error: a forked child came back to the Python module; it exits\n";
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, message, sizeof message - 1);
    _exit(kEscapedChildStatus);
  };
  try {
    work();
  } catch (...) {
    leave_if_child();
    throw;
  }
  leave_if_child();
}

[[noreturn]] void raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

/** Runs `work` with the GIL released, in the calling process only, one call
 *  at a time (the facade keeps process-wide state: other Python threads run
 *  meanwhile, other pipegrid calls wait), and turns pipegrid's exceptions
 *  into pipegrid.Error's classes (GIL held again). */
void call_released(const std::function<void()>& work) {
  static std::mutex one_call_at_a_time;
  std::string message;
  PyObject* type = nullptr;
  try {
    py::gil_scoped_release release;
    const std::lock_guard<std::mutex> lock(one_call_at_a_time);
    in_calling_process(work);
    return;
  } catch (const InfeasibleError& error) {
    type = infeasible_error_type, message = error.what();
  } catch (const InputError& error) {
    type = input_error_type, message = error.what();
  } catch (const ProgramError& error) {
    type = input_error_type, message = error.what();
  } catch (const InvariantViolation& error) {
    type = internal_error_type, message = std::string("invariant violated: ") + error.what();
  } catch (const std::exception& error) {
    type = internal_error_type, message = std::string("internal error: ") + error.what();
  }
  raise(type, message);
}

// ---- keywords -> command lines ------------------------------------------------

/// A command's keyword: the option's long name with '-' -> '_' (as a sweep
/// names its parameters: cli/sweep_command.cpp, parameters_of).
struct Keyword {
  std::string name;
  const CLI::Option* option;
  bool flag;     ///< takes no value: True adds it, False leaves it out
  bool several;  ///< takes several values: a list or tuple gives them
};

/// The keywords of `command`'s options, less `reserved` (what the module
/// sets itself) and --help.
std::vector<Keyword> keywords_of(const CLI::App& command, const std::vector<std::string>& reserved) {
  std::vector<Keyword> keywords;
  for (const CLI::Option* option : command.get_options()) {
    if (option->get_lnames().empty()) continue;
    std::string name = option->get_lnames().front();
    if (name == "help" || std::find(reserved.begin(), reserved.end(), name) != reserved.end()) continue;
    std::replace(name.begin(), name.end(), '-', '_');
    keywords.push_back({name, option, option->get_expected_max() == 0, option->get_expected_max() > 1});
  }
  return keywords;
}

std::vector<std::string> names_of(const std::vector<Keyword>& keywords) {
  std::vector<std::string> names;
  for (const Keyword& keyword : keywords) names.push_back(keyword.name);
  return names;
}

/// One Python value as a command-line word: str and os.PathLike as they are,
/// int in decimal, float in the shortest text that reads back the same.
std::string word_of(const std::string& function, const std::string& name, const py::handle& value) {
  if (py::isinstance<py::bool_>(value))
    raise(input_error_type, fmt::format("{}: keyword {}={}: expected a value, not a switch", function, name,
                                        value.cast<bool>() ? "True" : "False"));
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::int_>(value)) return py::str(value).cast<std::string>();
  if (py::isinstance<py::float_>(value)) return py::repr(value).cast<std::string>();
  if (py::hasattr(value, "__fspath__")) return py::module_::import("os").attr("fspath")(value).cast<std::string>();
  raise(input_error_type, fmt::format("{}: keyword {}: expected a str, int, float or path, found {}", function, name,
                                      py::repr(py::type::of(value)).cast<std::string>()));
}

/** Appends the command-line words of `options` (keyword -> value) to `args`.
 *  None leaves a keyword out. InputError (pipegrid.InputError) for an
 *  unknown keyword (naming the closest known one), a switch given another
 *  value than True or False, or a list for a keyword that takes one value. */
void append_keywords(const std::string& function, const std::vector<Keyword>& keywords, const py::dict& options,
                     std::vector<std::string>& args) {
  for (const auto& [key, value] : options) {
    const std::string name = py::str(key).cast<std::string>();
    const auto found = std::find_if(keywords.begin(), keywords.end(), [&](const Keyword& k) { return k.name == name; });
    if (found == keywords.end())
      raise(input_error_type, fmt::format("{}: unknown keyword '{}'{}", function, name, did_you_mean(name, names_of(keywords))));
    if (value.is_none()) continue;
    const std::string flag = "--" + found->option->get_lnames().front();
    if (found->flag) {
      if (!py::isinstance<py::bool_>(value))
        raise(input_error_type, fmt::format("{}: keyword {} is a switch: expected True or False, found {}", function, name,
                                            py::repr(value).cast<std::string>()));
      if (value.cast<bool>()) args.push_back(flag);
      continue;
    }
    if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
      if (!found->several)
        raise(input_error_type, fmt::format("{}: keyword {} takes one value, found {}", function, name,
                                            py::repr(value).cast<std::string>()));
      for (const py::handle& item : value) args.push_back(flag + "=" + word_of(function, name, item));
      continue;
    }
    // --flag=VALUE: a value that starts with '-' (megatron_args) stays a value.
    args.push_back(flag + "=" + word_of(function, name, value));
  }
}

/// Parses `args` (argv[0] first) as the CLI would: a usage error is an
/// InputError worded as the CLI words it.
void parse(CLI::App& app, std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  try {
    app.parse(static_cast<int>(args.size()), argv.data());
  } catch (const CLI::ParseError& error) {
    throw InputError(cli::usage_error_text(app, error));
  }
}

// ---- simulate ----------------------------------------------------------------

/// A simulation's plan and result, kept for the Python objects that show it.
struct SimulationRun {
  Plan plan;
  api::RunResult result;

  std::string metrics_json() const { return api::metrics_to_json(plan, result); }
  std::string plan_json() const { return plan_to_json(plan); }
  std::string timeline_csv() const { return timeline_to_csv(result.timeline); }
  /// The SVG `pipegrid simulate --svg` writes for the same run.
  std::string timeline_svg() const { return api::timeline_svg_of_run(plan, result); }
};

/// simulate's command: its input options bound to `request`.
struct SimulateCommand {
  CLI::App app;
  CLI::App* simulate;
  api::PlanRequest request;
  SimulateCommand() {
    app.require_subcommand(1);
    simulate = app.add_subcommand("simulate");
    cli::add_simulate_input_options(*simulate, request);
    cli::read_integers_as_decimal(app);
  }
};

std::vector<std::string> simulate_keywords() {
  SimulateCommand command;
  return names_of(keywords_of(*command.simulate, {}));
}

std::shared_ptr<SimulationRun> simulate(const py::dict& options) {
  auto command = std::make_unique<SimulateCommand>();
  std::vector<std::string> args = {"pipegrid", "simulate"};
  append_keywords("simulate", keywords_of(*command->simulate, {}), options, args);
  auto run = std::make_shared<SimulationRun>();
  call_released([&] {
    parse(command->app, args);
    cli::check_simulate_inputs(*command->simulate, command->request);
    run->plan = api::make_plan(command->request);
    run->result = api::run_plan(run->plan);
  });
  return run;
}

// ---- explore, plan, sweep: their CLI command in a forked child ---------------

/// A CLI command the module runs: where its options are, and what the
/// module sets itself.
struct Command {
  CLI::App app;
  CLI::App* options = nullptr;  ///< the (sub)command holding the keywords' options
  std::vector<std::string> reserved;
  std::function<int()> run;
};

int run_dispatched(int argc, char** argv);

/// The command `name` (explore, plan or sweep-run), built afresh.
std::unique_ptr<Command> make_command(const std::string& name) {
  auto command = std::make_unique<Command>();
  command->app.require_subcommand(1);
  if (name == "explore") {
    command->options = cli::add_explore_command(command->app);
    command->reserved = {"json"};
    command->run = [] { return cli::run_explore_command(); };
  } else if (name == "plan") {
    command->options = cli::add_plan_command(command->app);
    command->reserved = {"output-json"};
    command->run = [] { return cli::run_plan_command(); };
  } else if (name == "sweep") {
    CLI::App* sweep = cli::add_sweep_command(command->app);
    command->options = sweep->get_subcommand("run");
    command->run = [] { return cli::run_sweep_command(run_dispatched); };
  } else if (name == "export") {
    command->options = cli::add_export_command(command->app);
    command->reserved = {"format", "out"};
    command->run = [] { return cli::run_export_command(); };
  } else if (name == "trace") {
    CLI::App* trace = cli::add_trace_command(command->app);
    command->options = trace->get_subcommand("import");
    command->reserved = {"csv", "profile", "platform", "program"};
    command->run = [] { return cli::run_trace_command(); };
  } else {
    throw std::logic_error("no such command: " + name);
  }
  cli::read_integers_as_decimal(command->app);
  return command;
}

/// A sweep run's command other than simulate (partition, model), as the CLI
/// runs it (a sweep runs simulate itself).
int run_dispatched(int argc, char** argv) {
  CLI::App app;
  app.require_subcommand(1);
  CLI::App* partition = cli::add_partition_command(app);
  CLI::App* model = cli::add_model_command(app);
  cli::read_integers_as_decimal(app);
  std::vector<std::string> args(argv, argv + argc);
  parse(app, args);
  if (*partition) return cli::run_partition_command();
  if (*model) return cli::run_model_command();
  throw InputError("sweep: the Python module runs simulate, partition and model commands");
}

/// What a command's child reports: its exit status and stdout, or the error
/// it ended with (kind input, infeasible or internal).
struct CommandOutcome {
  int status = 0;
  std::string out, error_kind, message;
};

/** Runs `args` (argv[0] first) with the command `name` in a forked child
 *  whose stdout is kept; the child leaves with _exit whatever happens. */
CommandOutcome run_command_in_child(const std::string& name, const std::vector<std::string>& args) {
  const int out_fd = memfd_create("pipegrid-stdout", 0), report_fd = memfd_create("pipegrid-report", 0);
  if (out_fd < 0 || report_fd < 0) throw std::runtime_error("memfd_create failed");
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t child = fork_child(ChildStop::Terminate);
  if (child == 0) {
    ::dup2(out_fd, STDOUT_FILENO);
    nlohmann::json report;
    // A grandchild (a run the command forks) that came back here leaves at
    // once: the report is this child's alone.
    const pid_t reporter = getpid();
    try {
      in_calling_process([&] {
        std::unique_ptr<Command> command = make_command(name);
        parse(command->app, args);
        report["status"] = command->run();
      });
    } catch (const InfeasibleError& error) {
      report = {{"kind", "infeasible"}, {"message", error.what()}};
    } catch (const InputError& error) {
      report = {{"kind", "input"}, {"message", error.what()}};
    } catch (const ProgramError& error) {
      report = {{"kind", "input"}, {"message", error.what()}};
    } catch (const InvariantViolation& error) {
      report = {{"kind", "internal"}, {"message", std::string("invariant violated: ") + error.what()}};
    } catch (const std::exception& error) {
      report = {{"kind", "internal"}, {"message", std::string("internal error: ") + error.what()}};
    } catch (...) {
      report = {{"kind", "internal"}, {"message", "internal error: an unknown exception"}};
    }
    if (getpid() != reporter) _exit(kEscapedChildStatus);
    std::cout.flush();
    std::fflush(nullptr);
    const std::string text = report.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::size_t written = 0;
    while (written < text.size()) {
      const ssize_t n = ::write(report_fd, text.data() + written, text.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(3);
      written += static_cast<std::size_t>(n);
    }
    _exit(0);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  forget_child(child);
  CommandOutcome outcome;
  outcome.out = read_descriptor_from_start(out_fd);
  const std::string report_text = read_descriptor_from_start(report_fd);
  ::close(out_fd);
  ::close(report_fd);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || report_text.empty()) {
    outcome.error_kind = "internal";
    outcome.message = WIFSIGNALED(status) ? fmt::format("internal error: {}'s process died of signal {}", name, WTERMSIG(status))
                                          : fmt::format("internal error: {}'s process failed", name);
    return outcome;
  }
  const nlohmann::json report = nlohmann::json::parse(report_text);
  if (report.contains("kind")) {
    outcome.error_kind = report.at("kind");
    outcome.message = report.at("message");
  } else {
    outcome.status = report.at("status");
  }
  return outcome;
}

std::vector<std::string> command_keywords(const std::string& name) {
  const std::unique_ptr<Command> command = make_command(name);
  return names_of(keywords_of(*command->options, command->reserved));
}

/** Runs the command `name` with `positional` words and keyword `options`;
 *  `extra` are words the module adds (--json). Returns (exit status,
 *  stdout). Raises pipegrid.Error's classes for the command's errors. */
std::pair<int, std::string> run_command(const std::string& name, const std::vector<std::string>& positional,
                                        const py::dict& options, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"pipegrid"};
  if (name == "sweep") args.insert(args.end(), {"sweep", "run"});
  else if (name == "trace") args.insert(args.end(), {"trace", "import"});
  else args.push_back(name);
  args.insert(args.end(), positional.begin(), positional.end());
  {
    const std::unique_ptr<Command> command = make_command(name);
    append_keywords(name, keywords_of(*command->options, command->reserved), options, args);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  CommandOutcome outcome;
  call_released([&] { outcome = run_command_in_child(name, args); });
  if (outcome.error_kind == "infeasible") raise(infeasible_error_type, outcome.message);
  if (outcome.error_kind == "input") raise(input_error_type, outcome.message);
  if (!outcome.error_kind.empty()) raise(internal_error_type, outcome.message);
  return {outcome.status, outcome.out};
}

PyObject* new_error_type(py::module_& module, const char* name, PyObject* base, const char* doc) {
  PyObject* type = PyErr_NewExceptionWithDoc(fmt::format("pipegrid.{}", name).c_str(), doc, base, nullptr);
  if (!type) throw py::error_already_set();
  module.add_object(name, py::handle(type));
  return type;
}

}  // namespace
}  // namespace pipegrid::python

PYBIND11_MODULE(_pipegrid, module) {
  using namespace pipegrid::python;
  module.doc() = "pipegrid's library facade (the package pipegrid wraps it)";
  error_type = new_error_type(module, "Error", PyExc_Exception, "Every error pipegrid reports; str(error) is its message.");
  input_error_type = new_error_type(module, "InputError", error_type,
                                    "Bad input: a file, a field, a keyword (the CLI's exit status 2).");
  infeasible_error_type = new_error_type(module, "InfeasibleError", input_error_type,
                                         "Well-formed input that admits no run (a partitioner found no partition).");
  internal_error_type = new_error_type(module, "InternalError", error_type,
                                       "A broken invariant or an internal failure: a bug in pipegrid.");

  py::class_<SimulationRun, std::shared_ptr<SimulationRun>>(module, "SimulationRun")
      .def("metrics_json", &SimulationRun::metrics_json)
      .def("plan_json", &SimulationRun::plan_json)
      .def("timeline_csv", &SimulationRun::timeline_csv)
      .def("timeline_svg", &SimulationRun::timeline_svg)
      .def_property_readonly("warnings", [](const SimulationRun& run) { return run.result.warnings; });
  module.def("simulate", &simulate, py::arg("options"),
             "Simulates the run the keywords describe (simulate's flags, '-' -> '_'); the GIL is released meanwhile.");
  module.def("simulate_keywords", &simulate_keywords, "simulate's keywords, in the CLI's order of its flags");
  module.def("command_keywords", &command_keywords, py::arg("command"), "the keywords of explore, plan, sweep, export or trace");
  module.def("run_command", &run_command, py::arg("command"), py::arg("positional"), py::arg("options"), py::arg("extra"),
             "Runs explore, plan, sweep (run), export or trace (import) in a forked child; returns (exit status, stdout).");
  module.def(
      "timeline_csv_to_svg",
      [](const std::string& csv, const std::string& title) -> std::string {
        pipegrid::SvgOptions options;
        options.title = title;
        return pipegrid::timeline_to_svg(pipegrid::parse_timeline_csv(csv, "timeline"), options);
      },
      py::arg("csv"), py::arg("title"), "A timeline CSV (execute --csv's schema) drawn as an SVG Gantt chart.");
}
