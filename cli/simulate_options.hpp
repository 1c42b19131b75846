#pragma once
// simulate's input options, defined once: `pipegrid simulate` adds them to
// its command, and a sweep takes its parameters from the same definitions
// (every input flag added here is a sweep parameter at once).

#include <CLI/CLI.hpp>

#include "api/simulation.hpp"

namespace pipegrid::cli {

/** Adds every input option of simulate (not --plan, not the output flags)
 *  to `command`, bound to `request`. */
void add_simulate_input_options(CLI::App& command, api::PlanRequest& request);

}  // namespace pipegrid::cli
