#pragma once
// `pipegrid validate`: calibrates a zoo model on cpu:N (or reads a given
// profile and platform), simulates a plan with the same layer split as the
// real run, runs the plan for real R times, and compares the simulated
// timeline with the measured ones (core/timeline_compare.hpp).
// Compiled only when LibTorch is found (PIPEGRID_WITH_TORCH).

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

/** Adds the subcommand and its options to `app`; returns it so the caller can
 *  test whether it was chosen. */
CLI::App* add_validate_command(CLI::App& app);

/** Runs the subcommand once parsed; returns the exit status. */
int run_validate_command();

}  // namespace pipegrid::cli
