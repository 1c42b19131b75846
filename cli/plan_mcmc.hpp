#pragma once
// `pipegrid plan --search mcmc`: FlexFlow's MCMC strategy search
// (search/mcmc.hpp). Its flags are added to the `plan` subcommand, which
// registers them once; run_mcmc_plan runs the search, re-runs the best
// strategies in SimGrid and prints a table (or JSON with --json).

#include <CLI/CLI.hpp>
#include <string>

#include "search/mcmc.hpp"

namespace pipegrid::cli {

struct McmcPlanOptions {
  search::SearchRequest request;
  std::string save_plan;  ///< write the best strategy's plan here ("": not)
  bool json = false;
  /// Shared with the enumeration search's option of the same name.
  long long budget_steps = 0;
  double budget_seconds = 0;
  unsigned long long seed = 1;
  int batch_size = 0;
  int micro_batch_size = 0;
  long long global_batch_size = 0;
};

/** Adds the search's options to the `plan` subcommand: --profile,
 *  --batch-size, --micro-batch-size, --micro-batch-scaling, --micro-batches, --seed, --budget-steps,
 *  --budget-seconds, --beta, --restart-steps, --max-stages,
 *  --max-tensor-parallel, --optimizer, --check-delta, --no-simgrid,
 *  --save-plan, and the ones the enumeration search shares: --platform,
 *  --memory, --global-batch-size, --top, --json. */
void add_mcmc_plan_options(CLI::App& plan, McmcPlanOptions& options);

/** Runs the search; returns the exit status (0). InputError propagates (the
 *  CLI's exit status 2). */
int run_mcmc_plan(const McmcPlanOptions& options);

}  // namespace pipegrid::cli
