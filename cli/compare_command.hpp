#pragma once
// `pipegrid compare SIM_TIMELINE REAL_TIMELINE [REAL_TIMELINE...]`: compares
// a simulated timeline (CSV) with measured ones made elsewhere and reports
// the mini-batch time error, per-action start/end errors, bubble fractions
// and the spread over the measured runs, as a table or JSON, with an
// optional SVG of both timelines stacked on one time axis.

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

/** Adds the subcommand and its options to `app`; returns it so the caller can
 *  test whether it was chosen. */
CLI::App* add_compare_command(CLI::App& app);

/** Runs the subcommand once parsed; returns the exit status. */
int run_compare_command();

}  // namespace pipegrid::cli
