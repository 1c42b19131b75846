#pragma once
// `pipegrid platform cluster --servers S --gpus-per-server G --device NAME
// --memory BYTES --intra BW[,LATENCY] --inter BW[,LATENCY]
// [--intra-link shared|per-gpu] [--speed FLOPS] --output FILE`: writes a
// SimGrid platform for a cluster of identical GPU servers
// (generators/cluster_platform.hpp; docs/platforms.md, Generated clusters).

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

/** Adds the subcommand `platform` (with its subcommand `cluster`) to `app`;
 *  returns it so the caller can test whether it was chosen. */
CLI::App* add_platform_command(CLI::App& app);

/** Runs the subcommand once parsed; returns the exit status. */
int run_platform_command();

}  // namespace pipegrid::cli
