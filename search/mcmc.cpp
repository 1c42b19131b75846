#include "search/mcmc.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "api/simulation.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/metrics.hpp"
#include "core/platform_check.hpp"
#include "core/precision.hpp"
#include "sim/engine.hpp"

namespace pipegrid::search {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Draws from the generator by arithmetic of our own, so that a seed gives
// the same chain whatever the standard library's distributions do.
struct Draw {
  std::mt19937_64 engine;
  explicit Draw(std::uint64_t seed) : engine(seed) {}
  /// In [0, n), n >= 1.
  int below(int n) { return static_cast<int>(engine() % static_cast<std::uint64_t>(n)); }
  /// In [0, 1).
  double unit() { return static_cast<double>(engine() >> 11) * 0x1.0p-53; }
};

std::vector<bool> hosts_used(const Strategy& strategy, int except_stage, int hosts) {
  std::vector<bool> used(static_cast<std::size_t>(hosts), false);
  for (int s = 0; s < strategy.num_stages(); ++s) {
    if (s == except_stage) continue;
    const StageConfig& stage = strategy.stages[static_cast<std::size_t>(s)];
    for (int r = 0; r < stage.data; ++r)
      for (int k = 0; k < stage.tensor; ++k) used[static_cast<std::size_t>(stage.host(r, k))] = true;
  }
  return used;
}

// The groups of t hosts (aligned, consecutive) none of whose hosts is used.
std::vector<int> free_groups(const std::vector<bool>& used, int t) {
  std::vector<int> groups;
  for (int g = 0; (g + 1) * t <= static_cast<int>(used.size()); ++g) {
    bool free = true;
    for (int k = 0; k < t && free; ++k) free = !used[static_cast<std::size_t>(g * t + k)];
    if (free) groups.push_back(g);
  }
  return groups;
}

// `count` of `pool`, drawn without replacement, in ascending order.
std::vector<int> draw_groups(std::vector<int> pool, int count, Draw& draw) {
  for (int i = 0; i < count; ++i) std::swap(pool[static_cast<std::size_t>(i)], pool[static_cast<std::size_t>(i + draw.below(static_cast<int>(pool.size()) - i))]);
  pool.resize(static_cast<std::size_t>(count));
  std::sort(pool.begin(), pool.end());
  return pool;
}

class Proposer {
 public:
  Proposer(const CostModel& model, int max_stages) : model_(model), max_stages_(max_stages) {}

  // FlexFlow's proposal, for a pipeline of stages: one stage's configuration
  // (tensor degree, data degree, placement) replaced by a random one, one
  // boundary moved, or a stage split in two or two merged.
  std::optional<Strategy> propose(const Strategy& current, Draw& draw) const {
    const double kind = draw.unit();
    if (kind < 0.4) return change_stage(current, draw);
    if (kind < 0.7) return move_boundary(current, draw);
    if (kind < 0.85) return split_stage(current, draw);
    return merge_stages(current, draw);
  }

  Strategy random_strategy(Draw& draw) const {
    const int hosts = static_cast<int>(model_.platform().hosts.size());
    const int layers = model_.layers();
    const int stages = 1 + draw.below(std::min({max_stages_, 4, layers, hosts}));
    std::vector<int> cuts;  // first layer of stages 1..S-1
    while (static_cast<int>(cuts.size()) < stages - 1) {
      const int cut = 1 + draw.below(layers - 1);
      if (std::find(cuts.begin(), cuts.end(), cut) == cuts.end()) cuts.push_back(cut);
    }
    std::sort(cuts.begin(), cuts.end());
    Strategy strategy;
    int host = 0;
    for (int s = 0; s < stages; ++s) {
      StageConfig stage;
      stage.first_layer = s == 0 ? 0 : cuts[static_cast<std::size_t>(s) - 1];
      stage.last_layer = s + 1 < stages ? cuts[static_cast<std::size_t>(s)] - 1 : layers - 1;
      const int left = hosts - host - (stages - s - 1);
      stage.data = 1 + draw.below(std::min(left, model_.micro_batches()));
      for (int r = 0; r < stage.data; ++r) stage.groups.push_back(host++);
      strategy.stages.push_back(stage);
    }
    return strategy;
  }

 private:
  std::optional<Strategy> change_stage(const Strategy& current, Draw& draw) const {
    Strategy next = current;
    const int s = draw.below(current.num_stages());
    StageConfig& stage = next.stages[static_cast<std::size_t>(s)];
    const std::vector<bool> used = hosts_used(current, s, static_cast<int>(model_.platform().hosts.size()));
    const std::vector<int>& degrees = model_.tensor_degrees();
    const int t = degrees[static_cast<std::size_t>(draw.below(static_cast<int>(degrees.size())))];
    const std::vector<int> pool = free_groups(used, t);
    if (pool.empty()) return std::nullopt;
    const int d = 1 + draw.below(std::min(static_cast<int>(pool.size()), model_.micro_batches()));
    stage.tensor = t;
    stage.data = d;
    stage.groups = draw_groups(pool, d, draw);
    if (next == current) return std::nullopt;
    return next;
  }

  std::optional<Strategy> move_boundary(const Strategy& current, Draw& draw) const {
    if (current.num_stages() < 2) return std::nullopt;
    Strategy next = current;
    const int b = draw.below(current.num_stages() - 1);
    StageConfig& left = next.stages[static_cast<std::size_t>(b)];
    StageConfig& right = next.stages[static_cast<std::size_t>(b) + 1];
    // The left stage's new last layer, in [its first, the right's last - 1].
    const int span = right.last_layer - left.first_layer;
    if (span < 2) return std::nullopt;
    int last = left.first_layer + draw.below(span);
    if (last == left.last_layer) last = left.first_layer + (last - left.first_layer + 1) % span;
    left.last_layer = last;
    right.first_layer = last + 1;
    return next;
  }

  std::optional<Strategy> split_stage(const Strategy& current, Draw& draw) const {
    if (current.num_stages() >= max_stages_) return std::nullopt;
    const int s = draw.below(current.num_stages());
    const StageConfig& stage = current.stages[static_cast<std::size_t>(s)];
    if (stage.last_layer == stage.first_layer) return std::nullopt;
    const int cut = stage.first_layer + 1 + draw.below(stage.last_layer - stage.first_layer);
    StageConfig first = stage, second = stage;
    first.last_layer = cut - 1;
    second.first_layer = cut;
    const std::vector<bool> used = hosts_used(current, -1, static_cast<int>(model_.platform().hosts.size()));
    const std::vector<int> pool = free_groups(used, 1);
    if (!pool.empty()) {
      second.tensor = 1;
      second.data = 1;
      second.groups = {pool[static_cast<std::size_t>(draw.below(static_cast<int>(pool.size())))]};
    } else if (stage.data >= 2) {  // the replicas shared out between the two
      const int keep = stage.data / 2;
      first.data = keep;
      first.groups.assign(stage.groups.begin(), stage.groups.begin() + keep);
      second.data = stage.data - keep;
      second.groups.assign(stage.groups.begin() + keep, stage.groups.end());
    } else {
      return std::nullopt;
    }
    Strategy next = current;
    next.stages[static_cast<std::size_t>(s)] = first;
    next.stages.insert(next.stages.begin() + s + 1, second);
    return next;
  }

  std::optional<Strategy> merge_stages(const Strategy& current, Draw& draw) const {
    if (current.num_stages() < 2) return std::nullopt;
    const int b = draw.below(current.num_stages() - 1);
    StageConfig merged = current.stages[static_cast<std::size_t>(b) + static_cast<std::size_t>(draw.below(2))];
    merged.first_layer = current.stages[static_cast<std::size_t>(b)].first_layer;
    merged.last_layer = current.stages[static_cast<std::size_t>(b) + 1].last_layer;
    Strategy next = current;
    next.stages[static_cast<std::size_t>(b)] = merged;
    next.stages.erase(next.stages.begin() + b + 1);
    return next;
  }

  const CostModel& model_;
  int max_stages_;
};

bool fits(const CostModel& model, const Strategy& strategy) {
  for (const StageConfig& stage : strategy.stages)
    if (!model.fits_memory(stage)) return false;
  return true;
}

// Keeps the `capacity` best distinct strategies, best first (ties: the one
// found first).
void keep_best(std::vector<Candidate>& best, std::size_t capacity, const Strategy& strategy, double cost) {
  for (const Candidate& candidate : best)
    if (candidate.strategy == strategy) return;
  if (best.size() >= capacity && cost >= best.back().engine_s) return;
  auto at = std::upper_bound(best.begin(), best.end(), cost, [](double c, const Candidate& other) { return c < other.engine_s; });
  best.insert(at, Candidate{strategy, cost, std::nullopt, ""});
  if (best.size() > capacity) best.pop_back();
}

}  // namespace

std::unique_ptr<CostModel> make_cost_model(SearchRequest& request) {
  if (request.profile_file.empty()) throw InputError("plan --search mcmc: --profile is required");
  if (request.platform_file.empty()) throw InputError("plan --search mcmc: --platform is required");
  Profile profile = read_profile(request.profile_file, request.batch_size);
  const MicroBatchScaling& scaling = micro_batch_scaling(request.micro_batch_scaling);
  if (request.micro_batch_size)
    profile = profile_at_micro_batch_size(profile, *request.micro_batch_size, scaling).profile;
  else if (!profile.measured.empty())
    profile = profile_at_micro_batch_size(profile, profile.micro_batch_size);
  const PlatformSummary platform = sim::read_platform(request.platform_file, sim::PlatformRoutes::All);
  if (request.global_batch_size) {
    const long long b = profile.micro_batch_size;
    if (*request.global_batch_size < 1 || *request.global_batch_size % b != 0)
      throw InputError(fmt::format("--global-batch-size: expected a multiple of the micro-batch size {}, found {}", b,
                                   *request.global_batch_size));
    const long long m = *request.global_batch_size / b;
    if (request.micro_batches != 0 && request.micro_batches != m)
      throw InputError(fmt::format("--micro-batches {} disagrees with --global-batch-size {} / micro-batch size {} = {}",
                                   request.micro_batches, *request.global_batch_size, b, m));
    if (m > 100000) throw InputError(fmt::format("--global-batch-size: {} micro-batches, at most 100000", m));
    request.micro_batches = static_cast<int>(m);
  }
  if (request.micro_batches < 1)
    throw InputError("plan --search mcmc: give --global-batch-size or --micro-batches (an integer >= 1)");
  if (request.top < 1) throw InputError(fmt::format("--top: expected an integer >= 1, found {}", request.top));
  if (request.budget_steps && *request.budget_steps < 1)
    throw InputError(fmt::format("--budget-steps: expected an integer >= 1, found {}", *request.budget_steps));
  if (request.budget_seconds && !(*request.budget_seconds > 0))
    throw InputError(fmt::format("--budget-seconds: expected a number > 0, found {}", *request.budget_seconds));
  if (!request.budget_steps && !request.budget_seconds)
    throw InputError("plan --search mcmc: give --budget-steps (deterministic with --seed) or --budget-seconds");
  if (!(request.beta > 0) || !std::isfinite(request.beta))
    throw InputError(fmt::format("--beta: expected a number > 0, found {}", request.beta));
  if (request.max_stages < 0 || request.max_tensor_parallel < 0 || request.restart_steps < 0)
    throw InputError("--max-stages, --max-tensor-parallel and --restart-steps: expected integers >= 0");
  std::optional<double> memory;
  if (!request.memory.empty()) memory = parse_bytes(request.memory, "--memory");
  const std::string dtype = profile.dtype;
  std::string optimizer = request.optimizer.empty() ? default_optimizer(dtype) : request.optimizer;
  optimizer_copies(optimizer);  // InputError naming --optimizer
  // Tensor degrees: divisors of the hosts whose aligned groups stay in one
  // server, up to --max-tensor-parallel.
  const int hosts = static_cast<int>(platform.hosts.size());
  std::vector<int> degrees;
  for (int t = 1; t <= std::min(hosts, kMaxTensorParallel); ++t) {
    if (hosts % t != 0) continue;
    if (request.max_tensor_parallel > 0 && t > request.max_tensor_parallel) break;
    if (t > 1 && tensor_parallel_spans_servers(platform, tensor_parallel_groups(platform, t))) continue;
    degrees.push_back(t);
  }
  return std::make_unique<CostModel>(profile, platform, request.micro_batches, degrees, memory, optimizer);
}

SearchResult mcmc_search(const CostModel& model, const SearchRequest& request) {
  const auto started = std::chrono::steady_clock::now();
  const int hosts = static_cast<int>(model.platform().hosts.size());
  const int max_stages = request.max_stages > 0 ? std::min({request.max_stages, model.layers(), hosts})
                                                : std::min(model.layers(), hosts);
  SearchResult result;
  TaskGraphEngine engine(model), checker(model);
  Draw draw(request.seed);
  const Proposer proposer(model, max_stages);

  const auto evaluate = [&](const Strategy& strategy) -> double {
    if (!fits(model, strategy)) {
      ++result.rejected_memory;
      return kInfinity;
    }
    const double cost = request.full_only ? engine.full(strategy) : engine.delta(strategy);
    result.tasks_retimed += engine.last_retimed();
    result.tasks_total += engine.task_count();
    if (request.check_delta) {
      const double full = checker.full(strategy);
      if (full != cost || checker.ends() != engine.ends())
        throw InvariantViolation(fmt::format("search: delta simulation gives {:.17g} s, full simulation {:.17g} s for {}", cost,
                                             full, strategy_text(strategy, model.platform())));
      ++result.delta_checks;
    }
    return cost;
  };

  // The baseline: data parallelism, data degree up to the micro-batches.
  Strategy dp = data_parallel_strategy(model.layers(), model.platform());
  if (dp.stages[0].data > model.micro_batches()) {
    dp.stages[0].data = model.micro_batches();
    dp.stages[0].groups.resize(static_cast<std::size_t>(model.micro_batches()));
  }
  TaskGraphEngine baseline(model);
  const double dp_cost = baseline.full(dp);
  result.data_parallel = Candidate{dp, dp_cost, std::nullopt, model.fits_memory(dp.stages[0]) ? "" : "does not fit in memory"};
  const double scale = std::isfinite(dp_cost) && dp_cost > 0 ? dp_cost : 1.0;

  const std::size_t capacity = static_cast<std::size_t>(request.top);
  std::vector<Candidate> best;
  Strategy best_strategy;
  double best_cost = kInfinity;
  // Initial candidates as FlexFlow's: data parallelism and a random strategy.
  Strategy random = proposer.random_strategy(draw);
  for (int attempt = 0; attempt < 100 && !fits(model, random); ++attempt) random = proposer.random_strategy(draw);
  std::vector<Strategy> initial = {dp, random};
  const long long total_steps = request.budget_steps.value_or(std::numeric_limits<long long>::max());
  const int restart_steps =
      request.restart_steps > 0 ? request.restart_steps
                                : static_cast<int>(std::max<long long>(50, request.budget_steps.value_or(500) / 10));
  const auto out_of_time = [&] {
    if (!request.budget_seconds) return false;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() >= *request.budget_seconds;
  };
  for (std::size_t chain = 0; chain < initial.size(); ++chain) {
    const long long chain_end = chain + 1 == initial.size() ? total_steps
                                                            : std::min(total_steps, result.steps + total_steps / static_cast<long long>(initial.size()));
    Strategy current = initial[chain];
    double current_cost = evaluate(current);
    ++result.steps;
    if (current_cost < best_cost) best_cost = current_cost, best_strategy = current;
    if (std::isfinite(current_cost)) keep_best(best, capacity, current, current_cost);
    int since_best = 0;
    while (result.steps < chain_end && !out_of_time()) {
      std::optional<Strategy> proposal;
      for (int attempt = 0; attempt < 16 && !proposal; ++attempt) proposal = proposer.propose(current, draw);
      if (!proposal) break;
      const double cost = evaluate(*proposal);
      ++result.steps;
      if (std::isfinite(cost)) keep_best(best, capacity, *proposal, cost);
      const bool accept = std::isfinite(cost) &&
                          (cost <= current_cost || draw.unit() < std::exp(-request.beta * (cost - current_cost) / scale));
      if (accept) {
        current = std::move(*proposal);
        current_cost = cost;
        ++result.accepted;
      }
      if (current_cost < best_cost) {
        best_cost = current_cost;
        best_strategy = current;
        since_best = 0;
      } else if (++since_best >= restart_steps && std::isfinite(best_cost)) {
        current = best_strategy;
        current_cost = best_cost;
        since_best = 0;
        ++result.restarts;
      }
    }
  }
  result.top = std::move(best);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

std::optional<Plan> strategy_plan(const CostModel& model, const SearchRequest& request, const Strategy& strategy,
                                  std::string* why) {
  if (const std::string problem = strategy_problem(strategy, model.layers(), model.platform()); !problem.empty()) {
    if (why) *why = problem;
    return std::nullopt;
  }
  Plan plan;
  // Each stage's layers as its tensor-parallel members run them (their
  // collectives charged in their times); the leaders run the pipeline.
  plan.profile = model.profile();
  const PlatformSummary& platform = model.platform();
  plan.partition.hosts.resize(strategy.stages.size());
  for (std::size_t s = 0; s < strategy.stages.size(); ++s) {
    const StageConfig& stage = strategy.stages[s];
    const Profile& member = model.member_profile(stage.tensor);
    for (int l = stage.first_layer; l <= stage.last_layer; ++l) {
      plan.profile.layers[static_cast<std::size_t>(l)] = member.layers[static_cast<std::size_t>(l)];
      plan.partition.stage_of_layer.push_back(static_cast<int>(s));
    }
    if (s == 0) plan.profile.input_bytes = model.profile().input_bytes / stage.tensor;
    for (int r = 0; r < stage.data; ++r)
      plan.partition.hosts[s].push_back(platform.hosts[static_cast<std::size_t>(stage.host(r))].name);
  }
  plan.platform_file = request.platform_file;
  plan.platform_xml = read_text_file(request.platform_file);
  plan.schedule = "gpipe";
  plan.micro_batches = model.micro_batches();
  plan.mini_batches = 1;
  plan.network = "analytic";
  plan.transfer_rule = "fifo";
  plan.optimizer = model.optimizer();
  plan.dtype = model.profile().dtype;
  plan.memory_bytes = model.memory_override();
  plan.partitioner = "mcmc";
  return plan;
}

void rerun_in_simgrid(const CostModel& model, const SearchRequest& request, std::vector<Candidate>& candidates) {
  for (Candidate& candidate : candidates) {
    std::string why;
    std::optional<Plan> plan = strategy_plan(model, request, candidate.strategy, &why);
    if (!plan) {
      candidate.simgrid_note = why;
      continue;
    }
    try {
      const api::RunResult run = api::run_plan(*plan);
      candidate.simgrid_s = run.metrics.minibatch_time_s;
    } catch (const InputError& error) {
      candidate.simgrid_note = error.what();
    }
  }
}

namespace {

nlohmann::json strategy_json(const Strategy& strategy, const PlatformSummary& platform) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageConfig& stage : strategy.stages) {
    nlohmann::json replicas = nlohmann::json::array();
    for (int r = 0; r < stage.data; ++r) {
      nlohmann::json members = nlohmann::json::array();
      for (int k = 0; k < stage.tensor; ++k) members.push_back(platform.hosts[static_cast<std::size_t>(stage.host(r, k))].name);
      replicas.push_back(members);
    }
    stages.push_back({{"layers", {stage.first_layer, stage.last_layer}},
                      {"tensor", stage.tensor},
                      {"data", stage.data},
                      {"replicas", replicas}});
  }
  return stages;
}

nlohmann::json candidate_json(const Candidate& candidate, const PlatformSummary& platform, double dp_s) {
  nlohmann::json out = {{"stages", strategy_json(candidate.strategy, platform)},
                        {"strategy", strategy_text(candidate.strategy, platform)}};
  out["engine_minibatch_time_s"] = std::isfinite(candidate.engine_s) ? nlohmann::json(candidate.engine_s) : nlohmann::json();
  if (candidate.simgrid_s) out["simgrid_minibatch_time_s"] = *candidate.simgrid_s;
  if (!candidate.simgrid_note.empty()) out["note"] = candidate.simgrid_note;
  if (std::isfinite(dp_s) && std::isfinite(candidate.engine_s) && candidate.engine_s > 0)
    out["speedup_over_data_parallel"] = dp_s / candidate.engine_s;
  return out;
}

}  // namespace

std::string result_to_json(const CostModel& model, const SearchRequest& request, const SearchResult& result) {
  const PlatformSummary& platform = model.platform();
  nlohmann::json out;
  out["search"] = "mcmc";
  out["profile"] = request.profile_file;
  out["platform"] = request.platform_file;
  out["hosts"] = platform.hosts.size();
  out["micro_batch_size"] = model.profile().micro_batch_size;
  out["micro_batches"] = model.micro_batches();
  out["global_batch_size"] = static_cast<long long>(model.profile().micro_batch_size) * model.micro_batches();
  out["schedule"] = "gpipe";
  out["optimizer"] = model.optimizer();
  out["tensor_degrees"] = model.tensor_degrees();
  out["seed"] = request.seed;
  if (request.budget_steps) out["budget_steps"] = *request.budget_steps;
  if (request.budget_seconds) out["budget_seconds"] = *request.budget_seconds;
  out["beta"] = request.beta;
  out["steps"] = result.steps;
  out["accepted"] = result.accepted;
  out["restarts"] = result.restarts;
  out["rejected_memory"] = result.rejected_memory;
  if (request.check_delta) out["delta_checks"] = result.delta_checks;
  out["tasks_retimed_fraction"] =
      result.tasks_total > 0 ? static_cast<double>(result.tasks_retimed) / static_cast<double>(result.tasks_total) : 0.0;
  const double dp_s = result.data_parallel.engine_s;
  out["data_parallel"] = candidate_json(result.data_parallel, platform, dp_s);
  nlohmann::json top = nlohmann::json::array();
  for (const Candidate& candidate : result.top) top.push_back(candidate_json(candidate, platform, dp_s));
  out["strategies"] = top;
  return out.dump(2) + "\n";
}

std::string result_to_table(const CostModel& model, const SearchRequest& request, const SearchResult& result) {
  const PlatformSummary& platform = model.platform();
  std::string text = fmt::format(
      "mcmc search: {} layers, {} hosts, gpipe, {} micro-batches of {} (global batch {}), seed {}, {} steps ({} accepted, "
      "{} restarts, {} over memory)\n",
      model.layers(), platform.hosts.size(), model.micro_batches(), model.profile().micro_batch_size,
      static_cast<long long>(model.profile().micro_batch_size) * model.micro_batches(), request.seed, result.steps,
      result.accepted, result.restarts, result.rejected_memory);
  const auto line = [&](const std::string& label, const Candidate& candidate) {
    const std::string simgrid = candidate.simgrid_s ? fmt::format("{:.6g} s", *candidate.simgrid_s) : std::string("-");
    const double dp_s = result.data_parallel.engine_s;
    const std::string speedup = std::isfinite(candidate.engine_s) && std::isfinite(dp_s)
                                    ? fmt::format("{:.3f}x", dp_s / candidate.engine_s)
                                    : std::string("-");
    text += fmt::format("{:<6} {:>12} {:>12} {:>8}  {}{}\n", label,
                        std::isfinite(candidate.engine_s) ? fmt::format("{:.6g} s", candidate.engine_s) : std::string("inf"),
                        simgrid, speedup, strategy_text(candidate.strategy, platform),
                        candidate.simgrid_note.empty() ? "" : "  (" + candidate.simgrid_note + ")");
  };
  text += fmt::format("{:<6} {:>12} {:>12} {:>8}  {}\n", "rank", "engine", "simgrid", "vs dp", "strategy");
  line("dp", result.data_parallel);
  for (std::size_t i = 0; i < result.top.size(); ++i) line(std::to_string(i + 1), result.top[i]);
  return text;
}

}  // namespace pipegrid::search
