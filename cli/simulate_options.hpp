#pragma once
// simulate's input options, defined once: `pipegrid simulate` adds them to
// its command, and a sweep takes its parameters from the same definitions
// (every input flag added here is a sweep parameter at once) and parses its
// simulate runs' command lines with them; both check them alike.

#include <CLI/CLI.hpp>

#include "api/simulation.hpp"

namespace pipegrid::cli {

/** Adds every input option of simulate (not --plan, not the output flags)
 *  to `command`, bound to `request`. */
void add_simulate_input_options(CLI::App& command, api::PlanRequest& request);

/** The checks simulate makes of its parsed input options before
 *  api::make_plan (without --plan): --platform, a model (--profile, --model
 *  or --megatron-args) and a schedule (--schedule or --program) given, and
 *  the flags that exclude or need one another (--micro-batches with
 *  --program or --global-batch-size, --program-format without --program).
 *  `command` is the command the options were added to and parsed by (it
 *  tells which flags were given). Throws InputError naming the flags. */
void check_simulate_inputs(const CLI::App& command, const api::PlanRequest& request);

}  // namespace pipegrid::cli
