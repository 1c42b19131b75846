#pragma once
// `pipegrid sweep plan|run|status|merge|report|show|slurm`: experiment files
// (EXPERIMENTS.md) expanded by the sweep module, each run a command line
// (simulate, partition or model) in a forked child: a simulate run parsed
// with simulate's own options and run through the api facade, another
// command run as pipegrid runs it.

#include <functional>

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

CLI::App* add_sweep_command(CLI::App& app);
/** `dispatch` runs one pipegrid command line (argv[0] first) and throws
 *  what the command throws: a run's child calls it for the run's command
 *  when that is not simulate, and `sweep show` for the run it shows. */
int run_sweep_command(const std::function<int(int, char**)>& dispatch);

}  // namespace pipegrid::cli
