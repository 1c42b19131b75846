#pragma once
// `pipegrid sweep plan|run|status|merge|report|show|slurm`: experiment files
// (EXPERIMENTS.md) expanded by the sweep module, each run a simulate command
// line in a forked child.

#include <functional>

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

CLI::App* add_sweep_command(CLI::App& app);
/** `dispatch` runs one pipegrid command line (argv[0] first) and throws
 *  what the command throws: a run's child calls it for the run's command. */
int run_sweep_command(const std::function<int(int, char**)>& dispatch);

}  // namespace pipegrid::cli
