#pragma once
// `pipegrid plan`: which layout to run (api/planner.hpp searches). Here only
// its flags, turned into an api::PlannerRequest, and the printing of the
// result: the counts of the search, the top layouts, the winner's
// --megatron-args line, the Pareto chart (--pareto-svg) and JSON (--json).

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

/** Adds the subcommand and its options to `app`; returns it so the caller can
 *  test whether it was chosen. */
CLI::App* add_plan_command(CLI::App& app);

/** Runs the subcommand once parsed; returns the exit status: 0 with a
 *  winner, 1 when no layout fits. */
int run_plan_command();

}  // namespace pipegrid::cli
