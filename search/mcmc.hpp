#pragma once
// FlexFlow's strategy search (Jia et al., MLSys 2019, section 6): Markov chain
// Monte Carlo over strategies (search/strategy.hpp) with the Metropolis
// criterion, each proposal timed by the task-graph engine's delta
// simulation (search/engine.hpp); the best strategies found are re-run in
// SimGrid (api::run_plan) before they are reported. docs/search.md.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "search/engine.hpp"
#include "search/strategy.hpp"

namespace pipegrid::search {

/** What to search: inputs (read by make_cost_model) and the search's knobs. */
struct SearchRequest {
  std::string profile_file;
  std::string platform_file;
  std::optional<int> batch_size;  ///< the profile's micro-batch size (graph.txt without one)
  /// Run micro-batches of this many samples (profile_at_micro_batch_size
  /// with `micro_batch_scaling`, as simulate's --micro-batch-size).
  std::optional<int> micro_batch_size;
  std::string micro_batch_scaling = "none";
  int micro_batches = 0;          ///< M: micro-batches per mini-batch (0: from global_batch_size)
  std::optional<long long> global_batch_size;
  std::string memory;        ///< replaces every host's capacity ("" none)
  std::string optimizer;     ///< "" : default_optimizer of the profile's dtype
  int max_tensor_parallel = 0;  ///< largest tensor degree (0: a server's hosts)
  int max_stages = 0;           ///< most pipeline stages (0: min(layers, hosts))

  std::uint64_t seed = 1;
  std::optional<long long> budget_steps;
  std::optional<double> budget_seconds;
  /// Metropolis: a proposal costing c' from c is accepted with probability
  /// min(1, exp(-beta (c' - c) / c0)), c0 the data-parallel strategy's cost.
  double beta = 10;
  /// Steps without a new best after which the chain restarts from the best.
  int restart_steps = 0;  ///< 0: max(50, budget_steps / 10)
  int top = 3;
  bool check_delta = false;  ///< compare every delta with a full simulation (exactly)
  bool full_only = false;    ///< time proposals by full simulation only (the bench's baseline)
  bool simgrid = true;       ///< re-run the top strategies in SimGrid
};

/** Reads the profile and the platform (routes included) and builds the
 *  CostModel; fills request.micro_batches from the global batch.
 *  InputError naming the flag or file on bad input. */
std::unique_ptr<CostModel> make_cost_model(SearchRequest& request);

struct Candidate {
  Strategy strategy;
  double engine_s = 0;  ///< the task-graph engine's mini-batch time
  /// SimGrid's (--network analytic --transfer-rule fifo): absent when not
  /// run or not expressible as a plan (stages of different tensor degrees).
  std::optional<double> simgrid_s;
  std::string simgrid_note;  ///< why there is no SimGrid time, or its error
};

struct SearchResult {
  Candidate data_parallel;       ///< the baseline
  std::vector<Candidate> top;    ///< best first, distinct strategies
  std::int64_t steps = 0, accepted = 0, restarts = 0, rejected_memory = 0;
  std::int64_t delta_checks = 0;  ///< delta simulations compared with full (check_delta)
  std::int64_t tasks_retimed = 0, tasks_total = 0;  ///< summed over the proposals timed
  double seconds = 0;  ///< wall clock of the search (not in the JSON: it varies)
};

/** Runs the search. Deterministic for a given request when budget_steps is
 *  set and budget_seconds is not. InvariantViolation when check_delta finds
 *  a delta that differs from the full simulation. */
SearchResult mcmc_search(const CostModel& model, const SearchRequest& request);

/** The plan that runs `strategy` in SimGrid (gpipe, one mini-batch,
 *  analytic network, fifo transfers; docs/search.md), or nullopt with
 *  `why` set when a Plan cannot express it (stages of different tensor
 *  degrees). */
std::optional<Plan> strategy_plan(const CostModel& model, const SearchRequest& request, const Strategy& strategy,
                                  std::string* why);

/** Re-runs each candidate's plan in SimGrid (api::run_plan; each
 *  simulation in a forked child) and fills simgrid_s or simgrid_note. */
void rerun_in_simgrid(const CostModel& model, const SearchRequest& request, std::vector<Candidate>& candidates);

std::string result_to_json(const CostModel& model, const SearchRequest& request, const SearchResult& result);
std::string result_to_table(const CostModel& model, const SearchRequest& request, const SearchResult& result);

}  // namespace pipegrid::search
