// `pipegrid plan` (this branch's stand-in: the lead's plan_command.cpp
// replaces it at merge and wires in add_mcmc_plan_options/run_mcmc_plan).
#include "cli/plan_command.hpp"

#include <fmt/format.h>

#include "cli/plan_mcmc.hpp"
#include "core/error.hpp"

namespace pipegrid::cli {

namespace {
std::string search_kind = "enumerate";
McmcPlanOptions mcmc_options;
}  // namespace

CLI::App* add_plan_command(CLI::App& app) {
  CLI::App* plan = app.add_subcommand("plan", "search for a parallel strategy (--search mcmc: FlexFlow's MCMC search)");
  plan->add_option("--search", search_kind, "enumerate or mcmc (default enumerate)");
  add_mcmc_plan_options(*plan, mcmc_options);
  return plan;
}

int run_plan_command() {
  if (search_kind == "mcmc") return run_mcmc_plan(mcmc_options);
  if (search_kind == "enumerate") throw InputError("plan --search enumerate: not in this branch (use --search mcmc)");
  throw InputError(fmt::format("--search: expected enumerate or mcmc, found '{}'", search_kind));
}

}  // namespace pipegrid::cli
