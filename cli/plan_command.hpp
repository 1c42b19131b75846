#pragma once
// `pipegrid plan`: strategy searches (--search mcmc: cli/plan_mcmc.hpp).

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

CLI::App* add_plan_command(CLI::App& app);
int run_plan_command();

}  // namespace pipegrid::cli
