#include "cli/plan_mcmc.hpp"

#include <fmt/format.h>

#include <iostream>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/plan.hpp"

namespace pipegrid::cli {

void add_mcmc_plan_options(CLI::App& plan, McmcPlanOptions& options) {
  search::SearchRequest& request = options.request;
  plan.add_option("--profile", request.profile_file, "profile JSON, or PipeDream graph.txt (--search mcmc)");
  plan.add_option("--platform", request.platform_file, "SimGrid platform XML (enumerate: identical GPUs; or --server)");
  plan.add_option("--batch-size", options.batch_size, "the profile's micro-batch size (a graph.txt that does not say)");
  plan.add_option("--micro-batch-size", options.micro_batch_size, "samples per micro-batch (the profile's by default)");
  plan.add_option("--micro-batch-scaling", request.micro_batch_scaling, "none or linear: a size the profile does not cover (as simulate's)");
  plan.add_option("--micro-batches", request.micro_batches, "micro-batches per mini-batch (or --global-batch-size)");
  plan.add_option("--global-batch-size", options.global_batch_size, "samples per iteration (mcmc: micro-batch size x micro-batches)");
  plan.add_option("--memory", request.memory, "replace every GPU's memory capacity (80GB, 16GiB)");
  plan.add_option("--optimizer", request.optimizer, "sgd, momentum or adam (default: the dtype's)");
  plan.add_option("--seed", options.seed, "the search's random seed (default 1)");
  plan.add_option("--budget-steps", options.budget_steps, "strategies to time (deterministic with --seed)");
  plan.add_option("--budget-seconds", options.budget_seconds, "wall-clock budget of the search (not deterministic)");
  plan.add_option("--beta", request.beta, "Metropolis: accept a proposal worse by x (relative to data parallelism) with probability exp(-beta x) (default 10)");
  plan.add_option("--restart-steps", request.restart_steps, "steps without a new best before restarting from the best (default max(50, budget/10))");
  plan.add_option("--max-stages", request.max_stages, "most pipeline stages (default: min(layers, hosts))");
  plan.add_option("--max-tensor-parallel", request.max_tensor_parallel, "largest tensor-parallel degree (default: a server's hosts)");
  plan.add_option("--top", request.top, "rows of the table: enumerate 10 layouts by default; mcmc 3 strategies, each re-run in SimGrid");
  plan.add_flag("--check-delta", request.check_delta, "check every delta simulation against a full one (exactly)");
  plan.add_flag("--no-simgrid", [&request](std::int64_t) { request.simgrid = false; }, "do not re-run the best strategies in SimGrid");
  plan.add_option("--save-plan", options.save_plan, "write the best strategy's plan (pipegrid simulate --plan FILE re-runs it)");
  plan.add_flag("--json", options.json, "print the result as one JSON object instead of the table");
}

int run_mcmc_plan(const McmcPlanOptions& options) {
  search::SearchRequest request = options.request;
  if (options.batch_size != 0) {
    if (options.batch_size < 1) throw InputError(fmt::format("--batch-size: expected an integer >= 1, found {}", options.batch_size));
    request.batch_size = options.batch_size;
  }
  if (options.micro_batch_size != 0) request.micro_batch_size = options.micro_batch_size;
  if (options.global_batch_size != 0) request.global_batch_size = options.global_batch_size;
  if (options.budget_steps != 0) request.budget_steps = options.budget_steps;
  if (options.budget_seconds != 0) request.budget_seconds = options.budget_seconds;
  request.seed = options.seed;
  const std::unique_ptr<search::CostModel> model = search::make_cost_model(request);
  search::SearchResult result = search::mcmc_search(*model, request);
  if (request.simgrid) {
    std::vector<search::Candidate> dp = {result.data_parallel};
    search::rerun_in_simgrid(*model, request, dp);
    result.data_parallel = dp.front();
    search::rerun_in_simgrid(*model, request, result.top);
  }
  if (!options.save_plan.empty()) {
    if (result.top.empty()) throw InputError("--save-plan: the search found no strategy that fits in memory");
    std::string why;
    const std::optional<Plan> plan = search::strategy_plan(*model, request, result.top.front().strategy, &why);
    if (!plan) throw InputError(fmt::format("--save-plan: {}", why));
    write_file_atomically(options.save_plan, plan_to_json(*plan));
  }
  std::cout << (options.json ? search::result_to_json(*model, request, result) : search::result_to_table(*model, request, result));
  return 0;
}

}  // namespace pipegrid::cli
