#pragma once
// The LibTorch commands (execute, calibrate, validate and the hidden __rank
// of `--launcher processes`) are built into a second executable,
// pipegrid-torch (the whole CLI with LibTorch linked), placed next to
// pipegrid. pipegrid itself never loads LibTorch, whose loading alone takes
// ~0.7 s: it registers these commands as stand-ins (listed in --help with
// the same summaries) and, when the parse chose one, replaces itself by
// pipegrid-torch with the same command line, which then parses, helps,
// fails and exits exactly as a single executable would. LibTorch-free.

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

// The one-line summaries `pipegrid --help` shows (shared by both executables).
inline constexpr const char* kExecuteSummary =
    "run a schedule for real with LibTorch (CPU threads or CUDA GPUs) and record its timeline";
inline constexpr const char* kCalibrateSummary =
    "measure a zoo model's layers, the copies between devices, the optimizer step and the per-action overhead with LibTorch "
    "on the devices that will run it; write a profile and a platform";
inline constexpr const char* kValidateSummary =
    "calibrate, simulate a plan, run it for real R times (or read timelines measured elsewhere), and compare";

/** Adds `name` to `app` as a stand-in for pipegrid-torch's command of that
 *  name: listed in --help with `summary` (hidden when empty), it takes the
 *  rest of the command line unparsed (its own --help included). */
CLI::App* add_forwarded_command(CLI::App& app, const char* name, const char* summary);

/** Whether a parse of `app` (finished or failed) chose a stand-in. */
bool forwarded_command_chosen(const CLI::App& app);

/** Replaces this process by `executable_name` in this executable's folder
 *  (/proc/self/exe) with the same argv (argv[0] too, so help and messages
 *  name the program as typed). Returns only when that fails: prints why
 *  (`pipegrid: error: ...`) and returns 3. */
int forward_to_torch_executable(const char* executable_name, char** argv);

}  // namespace pipegrid::cli
