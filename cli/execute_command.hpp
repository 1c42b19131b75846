#pragma once
// `pipegrid execute`: runs a schedule for real with LibTorch on a zoo model
// (validate/), prints the measured mini-batch time and each device's busy
// time, and writes the measured timeline with the simulator's writers.
// Compiled only when LibTorch is found (PIPEGRID_WITH_TORCH).

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

/** Adds the subcommand and its options to `app`; returns it so the caller can
 *  test whether it was chosen. */
CLI::App* add_execute_command(CLI::App& app);

/** Runs the subcommand once parsed; returns the exit status. */
int run_execute_command();

}  // namespace pipegrid::cli
