// Simulated vs measured timelines: matching by action identity, error
// metrics, and the table / JSON reports. Definitions: timeline_compare.hpp
// and docs/validation.md.

#include "core/timeline_compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/metrics.hpp"

namespace pipegrid {

namespace {

/// What identifies a record in both timelines.
using ActionKey = std::tuple<std::string, int, int, int, int>;  // action, stage, micro-batch, mini-batch, replica

constexpr std::size_t kListedNames = 8;  // names shown in messages about unmatched actions

/// A timeline ready for matching: times shifted to start at 0, mini-batches
/// renumbered if asked, records grouped by key in start-time order.
struct Prepared {
  std::vector<TimelineRecord> records;  ///< shifted, renumbered
  std::vector<int> replica;             ///< per record
  std::map<int, int> replicas;          ///< stage -> hosts holding records of it
  std::map<ActionKey, std::vector<std::size_t>> groups;
  double span_s = 0;
  int minibatches = 0;
  double bubble_fraction = 0;
  MinibatchTime time;  ///< the mini-batch time as docs/semantics.md defines it
};

Prepared prepare(const Timeline& timeline, const std::string& origin, const CompareOptions& options) {
  if (timeline.records.empty()) throw InputError(fmt::format("{}: the timeline has no records", origin));
  Prepared prepared;
  prepared.records = timeline.records;
  double first = prepared.records.front().start_s, last = prepared.records.front().end_s;
  int first_minibatch = prepared.records.front().mini_batch;
  for (const TimelineRecord& record : prepared.records) {
    if (!std::isfinite(record.start_s) || !std::isfinite(record.end_s))
      throw InputError(fmt::format("{}: {}: expected finite start_s and end_s, found {} and {}", origin,
                                   action_name(record, 0), record.start_s, record.end_s));
    first = std::min(first, record.start_s);
    last = std::max(last, record.end_s);
    first_minibatch = std::min(first_minibatch, record.mini_batch);
  }
  prepared.span_s = last - first;
  for (TimelineRecord& record : prepared.records) {
    record.start_s -= first;
    record.end_s -= first;
    if (options.align_first) record.mini_batch -= first_minibatch;
  }

  // Host order: the timeline's list, then hosts seen only in records.
  std::map<std::string, std::size_t> host_order;
  for (const std::string& host : timeline.hosts) host_order.emplace(host, host_order.size());
  for (const TimelineRecord& record : prepared.records) host_order.emplace(record.host, host_order.size());
  // Replica rank of a host within a stage: its rank among the stage's hosts in that order.
  std::map<int, std::set<std::pair<std::size_t, std::string>>> stage_hosts;
  for (const TimelineRecord& record : prepared.records)
    stage_hosts[record.stage].insert({host_order.at(record.host), record.host});
  std::map<std::pair<int, std::string>, int> rank;
  for (const auto& [stage, hosts] : stage_hosts) {
    prepared.replicas[stage] = static_cast<int>(hosts.size());
    int r = 0;
    for (const auto& entry : hosts) rank[{stage, entry.second}] = r++;
  }

  std::set<int> minibatches, all_minibatches;
  prepared.replica.resize(prepared.records.size());
  for (std::size_t i = 0; i < prepared.records.size(); ++i) {
    const TimelineRecord& record = prepared.records[i];
    prepared.replica[i] = rank.at({record.stage, record.host});
    all_minibatches.insert(record.mini_batch);
    if (record.kind() == RecordKind::Compute) minibatches.insert(record.mini_batch);
    if (options.compute_only && record.kind() != RecordKind::Compute) continue;
    prepared.groups[{record.action, record.stage, record.micro_batch, record.mini_batch, prepared.replica[i]}].push_back(i);
  }
  prepared.minibatches = static_cast<int>(minibatches.empty() ? all_minibatches.size() : minibatches.size());
  for (auto& [key, indices] : prepared.groups)
    std::stable_sort(indices.begin(), indices.end(), [&](std::size_t a, std::size_t b) {
      return prepared.records[a].start_s < prepared.records[b].start_s;
    });

  Timeline shifted;
  shifted.hosts = timeline.hosts;
  shifted.records = prepared.records;
  prepared.time = minibatch_time_of(shifted, options.steady_cycle ? std::optional<bool>(true) : options.steady_period);
  prepared.bubble_fraction = prepared.time.bubble_fraction;
  return prepared;
}

/// Names of the records of `side` whose key (and occurrence) `other` lacks,
/// in `side`'s time order.
std::vector<std::string> unmatched(const Prepared& side, const Prepared& other) {
  std::vector<std::size_t> indices;
  for (const auto& [key, group] : side.groups) {
    const auto found = other.groups.find(key);
    const std::size_t common = found == other.groups.end() ? 0 : found->second.size();
    for (std::size_t k = common; k < group.size(); ++k) indices.push_back(group[k]);
  }
  std::stable_sort(indices.begin(), indices.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(side.records[a].start_s, a) < std::tie(side.records[b].start_s, b);
  });
  std::vector<std::string> names;
  for (std::size_t index : indices) names.push_back(action_name(side.records[index], side.replica[index]));
  return names;
}

std::string listed(const std::vector<std::string>& names) {
  std::string text;
  for (std::size_t k = 0; k < names.size() && k < kListedNames; ++k) text += (k ? ", " : "") + names[k];
  if (names.size() > kListedNames) text += fmt::format(", ... ({} more)", names.size() - kListedNames);
  return text;
}

ErrorSummary summarise(const std::vector<double>& values) {
  ErrorSummary summary;
  summary.median = nearest_rank_percentile(values, 50);
  summary.p95 = nearest_rank_percentile(values, 95);
  summary.max = values.empty() ? 0 : *std::max_element(values.begin(), values.end());
  return summary;
}

std::string percent(double fraction) { return fmt::format("{:.2f}%", 100 * fraction); }

std::string minibatches(int count) { return fmt::format("{} mini-batch{}", count, count == 1 ? "" : "es"); }

std::string file_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }


/// Each mini-batch's completion (the end of its last compute record), the
/// drain start (the earliest, over hosts, of a host's last forward start)
/// and the first start, as steady_state_of (core/metrics.cpp) takes them.
struct Completions {
  std::map<int, double> of;
  double drain_s = 0, first_s = 0;
};

Completions completions_of(const std::vector<TimelineRecord>& records) {
  Completions result;
  std::map<std::string, double> last_forward_start;
  bool any = false;
  for (const TimelineRecord& r : records) {
    if (r.kind() != RecordKind::Compute) continue;
    result.first_s = any ? std::min(result.first_s, r.start_s) : r.start_s;
    any = true;
    auto [it, inserted] = result.of.try_emplace(r.mini_batch, r.end_s);
    if (!inserted) it->second = std::max(it->second, r.end_s);
    if (r.action == "F") {
      auto [last, added] = last_forward_start.try_emplace(r.host, r.start_s);
      if (!added) last->second = std::max(last->second, r.start_s);
    }
  }
  result.drain_s = 0;
  for (const auto& [k, end] : result.of) result.drain_s = std::max(result.drain_s, end);
  for (const auto& [host, start] : last_forward_start) result.drain_s = std::min(result.drain_s, start);
  return result;
}

/// The largest k such that mini-batches first..k are all there and all
/// complete by the drain (a relative slack of 1e-12, as steady_state_of);
/// first - 1 when none.
int last_steady_minibatch(const Completions& completions) {
  if (completions.of.empty()) return -1;
  const double slack = 1e-12 * std::max(std::fabs(completions.drain_s), std::fabs(completions.of.rbegin()->second));
  int expected = completions.of.begin()->first, last = expected - 1;
  for (const auto& [k, end] : completions.of) {
    if (k != expected || end > completions.drain_s + slack) break;
    last = k;
    ++expected;
  }
  return last;
}

/// Each host's stages (from its compute records), for steady_state_hints.
HostStages host_stages_of(const std::vector<TimelineRecord>& records) {
  std::map<std::string, std::set<int>> sets;
  for (const TimelineRecord& r : records)
    if (r.kind() == RecordKind::Compute) sets[r.host].insert(r.stage);
  HostStages stages;
  for (const auto& [host, set] : sets) stages[host] = std::vector<int>(set.begin(), set.end());
  return stages;
}

int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

int positive_mod(int a, int b) { return ((a % b) + b) % b; }

/// One steady cycle of `sim` against `real` (compare_timelines'
/// options.steady_cycle): fills the periods, the cycle and the unmatched
/// lists of `result`, and returns the matched actions.
std::vector<MatchedAction> compare_steady_cycle(const Prepared& sim, const std::string& simulated_origin, const Prepared& real,
                                                const std::string& measured_origin, const CompareOptions& options,
                                                TimelineComparison& result) {
  if (!sim.time.steady_state || !real.time.steady_state)
    throw InputError(fmt::format("{}: no compute records: no steady state to compare",
                                 sim.time.steady_state ? measured_origin : simulated_origin));
  SteadyCycle cycle;
  const SteadyState& simulated_steady = *sim.time.steady_state;
  cycle.cycle_confirmed = simulated_steady.periodic;
  long long length = simulated_steady.periodic ? simulated_steady.cycle_minibatches : 1;
  for (const auto& [stage, replicas] : sim.replicas) length = std::lcm(length, static_cast<long long>(replicas));
  length = std::lcm(length, static_cast<long long>(std::max(1, options.cycle_multiple)));
  const Completions simulated = completions_of(sim.records);
  if (length > static_cast<long long>(simulated.of.size()))
    throw InputError(fmt::format("{}: {}; one steady cycle is {}", simulated_origin,
                                 minibatches(static_cast<int>(simulated.of.size())), minibatches(static_cast<int>(length))));
  const int C = static_cast<int>(length);
  cycle.cycle_minibatches = C;
  cycle.simulated_period_over = simulated_steady.measured_over;

  // The simulated cycle: the last C mini-batches complete before the drain.
  const int last = last_steady_minibatch(simulated);
  const int first = last - C + 1;
  if (simulated.of.empty() || first - 1 < simulated.of.begin()->first)
  {
    const int steady = last - (simulated.of.empty() ? 0 : simulated.of.begin()->first) + 1;
    throw InputError(fmt::format("{}: {} before the drain; comparing one steady cycle of {} needs {} (simulate more "
                                 "mini-batches)",
                                 simulated_origin, steady == 1 ? "1 mini-batch completes" : minibatches(steady) + " complete",
                                 minibatches(C), C + 1));
  }
  cycle.simulated_first_minibatch = first;
  cycle.simulated_last_minibatch = last;
  cycle.simulated_start_s = simulated.of.at(first - 1);
  const double period_s = sim.time.minibatch_time_s;
  const double window_end_s = cycle.simulated_start_s + C * period_s;
  const double eps = 1e-9 * C * period_s;

  // The measured cycle: as far into the run as the simulated one, at the same phase.
  const Completions measured = completions_of(real.records);
  const int simulated_count = simulated.of.rbegin()->first + 1;
  const int measured_count = measured.of.empty() ? 0 : measured.of.rbegin()->first + 1;
  const int warmup = std::max(0, options.measured_warmup);
  const int room = measured_count - simulated_count;
  const int shift = room - positive_mod(room + warmup, C);  // D
  cycle.measured_first_minibatch = first + shift;
  cycle.measured_last_minibatch = last + shift;
  const auto before = measured.of.find(first + shift - 1);
  if (before == measured.of.end())
    throw InputError(fmt::format(
        "{}: mini-batches {}..{} are the steady cycle matching the simulated {}..{}, and mini-batch {} (whose completion "
        "starts it) is not in the timeline; the measured run needs more mini-batches",
        measured_origin, first + shift, last + shift, first, last, first + shift - 1));
  cycle.measured_start_s = before->second;

  // The measured period: whole cycles of C before its drain.
  std::vector<double> measured_completions;
  for (const auto& [k, end] : measured.of) measured_completions.push_back(end);
  Timeline measured_timeline;
  measured_timeline.records = real.records;
  SteadyStateHints hints = steady_state_hints(measured_timeline, host_stages_of(real.records));
  hints.rotation = C;
  const SteadyState measured_steady = steady_state_of(measured_completions, measured.first_s, measured.drain_s, hints);
  result.simulated_minibatch_time_s = period_s;
  result.measured_minibatch_time_s = measured_steady.period_s;
  cycle.measured_period_over = measured_steady.measured_over;

  // Keys of the measured counterpart: mini-batches shifted by D, rounds of
  // an all-reduce by the Program's shift in rounds less the rounds the
  // executor renumbers away.
  const int program_shift = shift + warmup;  // a multiple of C
  const auto to_measured = [&](ActionKey key, int direction) {
    auto& [action, stage, micro_batch, mini_batch, replica] = key;
    if (action == "ALLREDUCE") {
      const auto found = sim.replicas.find(stage);
      const int r = found == sim.replicas.end() ? 1 : found->second;
      mini_batch += direction * (program_shift / r - (warmup + r - 1) / r);
    } else {
      mini_batch += direction * shift;
    }
    return key;
  };

  std::vector<MatchedAction> matched;
  std::vector<std::size_t> missing;  // simulated records without a measured counterpart
  int lowest = std::numeric_limits<int>::max(), highest = std::numeric_limits<int>::min();
  for (const auto& [key, group] : sim.groups)
    for (std::size_t k = 0; k < group.size(); ++k) {
      const TimelineRecord& s = sim.records[group[k]];
      if (s.start_s < cycle.simulated_start_s - eps || s.start_s >= window_end_s - eps) continue;
      if (s.action != "ALLREDUCE") {
        lowest = std::min(lowest, s.mini_batch);
        highest = std::max(highest, s.mini_batch);
      }
      const auto found = real.groups.find(to_measured(key, +1));
      if (found == real.groups.end() || k >= found->second.size()) {
        missing.push_back(group[k]);
        continue;
      }
      const TimelineRecord& m = real.records[found->second[k]];
      MatchedAction action;
      action.name = action_name(s, sim.replica[group[k]]);
      if (k > 0) action.name += fmt::format("#{}", k);
      action.simulated_start_s = s.start_s - cycle.simulated_start_s;
      action.simulated_end_s = s.end_s - cycle.simulated_start_s;
      action.measured_start_s = m.start_s - cycle.measured_start_s;
      action.measured_end_s = m.end_s - cycle.measured_start_s;
      matched.push_back(std::move(action));
    }
  std::stable_sort(missing.begin(), missing.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(sim.records[a].start_s, a) < std::tie(sim.records[b].start_s, b);
  });
  for (const std::size_t index : missing) result.only_simulated.push_back(action_name(sim.records[index], sim.replica[index]));

  // Measured records of the cycle's mini-batches that the simulation lacks.
  std::vector<std::size_t> extra;
  if (lowest <= highest)
    for (const auto& [key, group] : real.groups) {
      const ActionKey back = to_measured(key, -1);
      const auto& [action, stage, micro_batch, mini_batch, replica] = back;
      int r = 1;
      if (action == "ALLREDUCE")
        if (const auto found = sim.replicas.find(stage); found != sim.replicas.end()) r = found->second;
      const bool in_range = action == "ALLREDUCE" ? mini_batch >= floor_div(lowest, r) && mini_batch <= floor_div(highest, r)
                                                  : mini_batch >= lowest && mini_batch <= highest;
      if (!in_range) continue;
      const auto found = sim.groups.find(back);
      const std::size_t common = found == sim.groups.end() ? 0 : found->second.size();
      for (std::size_t k = common; k < group.size(); ++k) extra.push_back(group[k]);
    }
  std::stable_sort(extra.begin(), extra.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(real.records[a].start_s, a) < std::tie(real.records[b].start_s, b);
  });
  for (const std::size_t index : extra) result.only_measured.push_back(action_name(real.records[index], real.replica[index]));
  result.cycle = std::move(cycle);
  return matched;
}

}  // namespace

double nearest_rank_percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100 * n - 1e-9));
  return values[std::clamp<std::size_t>(rank, 1, values.size()) - 1];
}

std::string action_name(const TimelineRecord& record, int replica) {
  std::string text = fmt::format("{}{}", record.stage, record.action);
  if (record.action != "ALLREDUCE" || record.micro_batch >= 0) text += fmt::format("{}", record.micro_batch);
  if (record.mini_batch != 0) text += fmt::format("@{}", record.mini_batch);
  if (replica > 0) text += fmt::format("[r{}]", replica);
  return text;
}

TimelineComparison compare_timelines(const Timeline& simulated, const std::string& simulated_origin,
                                     const Timeline& measured, const std::string& measured_origin,
                                     const CompareOptions& options) {
  // Optimizer steps ("U") are compared only when both timelines record them:
  // a timeline from before they were simulated or measured still compares.
  const auto has_steps = [](const Timeline& timeline) {
    return std::any_of(timeline.records.begin(), timeline.records.end(),
                       [](const TimelineRecord& record) { return record.action == kOptimizerStepAction; });
  };
  const bool drop_steps = has_steps(simulated) != has_steps(measured);
  const auto without_steps = [&](const Timeline& timeline) {
    if (!drop_steps) return timeline;
    Timeline kept = timeline;
    std::erase_if(kept.records, [](const TimelineRecord& record) { return record.action == kOptimizerStepAction; });
    return kept;
  };
  Prepared sim = prepare(without_steps(simulated), simulated_origin, options);
  Prepared real = prepare(without_steps(measured), measured_origin, options);
  // One definition for both sides: a steady-state period when either
  // timeline's mini-batches overlap (unless the options say which).
  if (!options.steady_cycle && !options.steady_period &&
      sim.time.steady_state.has_value() != real.time.steady_state.has_value()) {
    for (Prepared* side : {&sim, &real}) {
      Timeline shifted;
      shifted.records = side->records;
      side->time = minibatch_time_of(shifted, true);
      side->bubble_fraction = side->time.bubble_fraction;
    }
  }
  TimelineComparison result;
  result.measured_origin = measured_origin;
  result.simulated_minibatches = sim.minibatches;
  result.measured_minibatches = real.minibatches;
  result.simulated_span_s = sim.span_s;
  result.measured_span_s = real.span_s;
  result.simulated_minibatch_time_s = sim.time.minibatch_time_s;
  result.measured_minibatch_time_s = real.time.minibatch_time_s;
  result.simulated_mean_minibatch_span_s = sim.span_s / sim.minibatches;
  result.measured_mean_minibatch_span_s = real.span_s / real.minibatches;
  result.steady_state = sim.time.steady_state.has_value() || real.time.steady_state.has_value();
  std::vector<MatchedAction> matched;
  if (options.steady_cycle) matched = compare_steady_cycle(sim, simulated_origin, real, measured_origin, options, result);
  if (!(result.measured_minibatch_time_s > 0))
    throw InputError(fmt::format("{}: the measured mini-batch time is 0 (every record starts and ends at {}): "
                                 "errors are normalised by it",
                                 measured_origin, format_exact(measured.records.front().start_s)));
  result.relative_error =
      (result.simulated_minibatch_time_s - result.measured_minibatch_time_s) / result.measured_minibatch_time_s;
  result.simulated_bubble_fraction = sim.bubble_fraction;
  result.measured_bubble_fraction = real.bubble_fraction;
  if (!options.steady_cycle) {
    result.only_simulated = unmatched(sim, real);
    result.only_measured = unmatched(real, sim);
    for (const auto& [key, sim_group] : sim.groups) {
      const auto found = real.groups.find(key);
      if (found == real.groups.end()) continue;
      for (std::size_t k = 0; k < sim_group.size() && k < found->second.size(); ++k) {
        const TimelineRecord& s = sim.records[sim_group[k]];
        const TimelineRecord& m = real.records[found->second[k]];
        MatchedAction action;
        action.name = action_name(s, sim.replica[sim_group[k]]);
        if (k > 0) action.name += fmt::format("#{}", k);
        action.simulated_start_s = s.start_s;
        action.simulated_end_s = s.end_s;
        action.measured_start_s = m.start_s;
        action.measured_end_s = m.end_s;
        matched.push_back(std::move(action));
      }
    }
  }
  for (MatchedAction& action : matched) {
    action.start_error = std::fabs(action.simulated_start_s - action.measured_start_s) / result.measured_minibatch_time_s;
    action.end_error = std::fabs(action.simulated_end_s - action.measured_end_s) / result.measured_minibatch_time_s;
  }
  if (matched.empty())
    throw InputError(fmt::format(
        "{} and {} have no action in common (actions are matched by stage, action, micro-batch, mini-batch and replica; "
        "simulated: {}; measured: {}){}",
        simulated_origin, measured_origin, listed(result.only_simulated), listed(result.only_measured),
        options.align_first ? "" : "; if the measured run left out warm-up mini-batches, try --align first"));
  if (!options.allow_missing && (!result.only_simulated.empty() || !result.only_measured.empty())) {
    std::string message = fmt::format("{} and {} do not hold the same actions:", simulated_origin, measured_origin);
    if (!result.only_simulated.empty())
      message += fmt::format(" {} only in {}: {};", result.only_simulated.size(), simulated_origin, listed(result.only_simulated));
    if (!result.only_measured.empty())
      message += fmt::format(" {} only in {}: {};", result.only_measured.size(), measured_origin, listed(result.only_measured));
    message += " use --allow-missing to compare the common ones";
    if (!options.align_first) message += ", --align first to number both runs' mini-batches from 0";
    if (!options.compute_only) message += ", --compute-only to ignore transfers";
    throw InputError(message);
  }

  result.matched = matched.size();
  std::vector<double> starts, ends, errors;
  for (const MatchedAction& action : matched) {
    starts.push_back(action.start_error);
    ends.push_back(action.end_error);
    errors.push_back(action.error());
  }
  result.start_error = summarise(starts);
  result.end_error = summarise(ends);
  result.action_error = summarise(errors);
  std::stable_sort(matched.begin(), matched.end(), [](const MatchedAction& a, const MatchedAction& b) {
    if (a.error() != b.error()) return a.error() > b.error();
    return a.name < b.name;
  });
  const std::size_t worst = static_cast<std::size_t>(std::max(0, options.worst));
  if (matched.size() > worst) matched.resize(worst);
  result.worst = std::move(matched);
  return result;
}

std::string comparison_to_table(const std::vector<TimelineComparison>& runs, const std::string& simulated_origin) {
  if (runs.empty()) return {};
  const TimelineComparison& c = runs.front();
  std::string text;
  text += fmt::format("simulated: {} ({} in {})\n", simulated_origin, minibatches(c.simulated_minibatches),
                      human_seconds(c.simulated_span_s));
  text += fmt::format("measured:  {} ({} in {}){}\n", c.measured_origin, minibatches(c.measured_minibatches),
                      human_seconds(c.measured_span_s), runs.size() > 1 ? ", the first of the measured runs" : "");
  text += fmt::format("\n{:<18} {:>12} {:>12} {:>10}\n", "", "simulated", "measured", "error");
  text += fmt::format("{:<18} {:>12} {:>12} {:>10}\n", "mini-batch time", human_seconds(c.simulated_minibatch_time_s),
                      human_seconds(c.measured_minibatch_time_s), fmt::format("{:+.2f}%", 100 * c.relative_error));
  if (c.steady_state)
    text += fmt::format("{:<18} {:>12} {:>12} {:>10}\n", "mean span", human_seconds(c.simulated_mean_minibatch_span_s),
                        human_seconds(c.measured_mean_minibatch_span_s),
                        fmt::format("{:+.2f}%", 100 * (c.simulated_mean_minibatch_span_s - c.measured_mean_minibatch_span_s) /
                                                    c.measured_mean_minibatch_span_s));
  text += fmt::format("{:<18} {:>12.4f} {:>12.4f} {:>+10.4f}\n", "bubble fraction", c.simulated_bubble_fraction,
                      c.measured_bubble_fraction, c.simulated_bubble_fraction - c.measured_bubble_fraction);
  if (c.cycle) {
    const SteadyCycle& cycle = *c.cycle;
    text += fmt::format("\nsteady state: one cycle of {} compared, simulated mini-batches {}..{}, measured {}..{}{}\n",
                        minibatches(cycle.cycle_minibatches), cycle.simulated_first_minibatch, cycle.simulated_last_minibatch,
                        cycle.measured_first_minibatch, cycle.measured_last_minibatch,
                        cycle.cycle_confirmed ? "" : " (no simulated cycle confirmed: the replicas' round)");
    text += fmt::format("simulated period: {}\nmeasured period:  {}\n", cycle.simulated_period_over, cycle.measured_period_over);
    text += fmt::format(
        "\n{} actions of the cycle matched; error = |simulated - measured| / measured period, times from each cycle's start\n",
        c.matched);
  } else {
    text += fmt::format("\n{} actions matched; error = |simulated - measured| / measured mini-batch time, both timelines from 0\n",
                        c.matched);
  }
  text += fmt::format("{:<18} {:>10} {:>10} {:>10}\n", "", "median", "p95", "max");
  for (const auto& [label, summary] : {std::pair{"start", c.start_error}, {"end", c.end_error}, {"action (worse end)", c.action_error}})
    text += fmt::format("{:<18} {:>10} {:>10} {:>10}\n", label, percent(summary.median), percent(summary.p95), percent(summary.max));
  if (!c.worst.empty()) {
    text += fmt::format("\nworst actions:\n{:<18} {:>12} {:>12} {:>12} {:>12} {:>9}\n", "action", "sim start", "sim end",
                        "real start", "real end", "error");
    for (const MatchedAction& action : c.worst)
      text += fmt::format("{:<18} {:>12} {:>12} {:>12} {:>12} {:>9}\n", action.name, human_seconds(action.simulated_start_s),
                          human_seconds(action.simulated_end_s), human_seconds(action.measured_start_s),
                          human_seconds(action.measured_end_s), percent(action.error()));
  }
  if (!c.only_simulated.empty())
    text += fmt::format("\nonly in the simulated timeline ({} actions, not compared): {}\n", c.only_simulated.size(), listed(c.only_simulated));
  if (!c.only_measured.empty())
    text += fmt::format("\nonly in the measured timeline ({} actions, not compared): {}\n", c.only_measured.size(), listed(c.only_measured));
  if (runs.size() > 1) {
    text += fmt::format("\nspread over {} measured runs:\n{:<4} {:<24} {:>15} {:>10} {:>10} {:>10}\n", runs.size(), "run",
                        "file", "mini-batch time", "error", "median", "p95");
    std::vector<double> times, errors;
    for (std::size_t r = 0; r < runs.size(); ++r) {
      const TimelineComparison& run = runs[r];
      text += fmt::format("{:<4} {:<24} {:>15} {:>10} {:>10} {:>10}\n", r + 1, file_name(run.measured_origin),
                          human_seconds(run.measured_minibatch_time_s), fmt::format("{:+.2f}%", 100 * run.relative_error),
                          percent(run.action_error.median), percent(run.action_error.p95));
      times.push_back(run.measured_minibatch_time_s);
      errors.push_back(run.relative_error);
    }
    text += fmt::format("measured mini-batch time: min {}, median {}, max {}\n",
                        human_seconds(nearest_rank_percentile(times, 0)), human_seconds(nearest_rank_percentile(times, 50)),
                        human_seconds(nearest_rank_percentile(times, 100)));
  }
  return text;
}

std::string comparison_to_json(const std::vector<TimelineComparison>& runs, const std::string& simulated_origin) {
  nlohmann::ordered_json document;
  if (runs.empty()) return "{}\n";
  const TimelineComparison& c = runs.front();
  document["simulated"] = simulated_origin;
  document["measured"] = c.measured_origin;
  document["simulated_minibatches"] = c.simulated_minibatches;
  document["measured_minibatches"] = c.measured_minibatches;
  document["simulated_span_s"] = c.simulated_span_s;
  document["measured_span_s"] = c.measured_span_s;
  document["simulated_minibatch_time_s"] = c.simulated_minibatch_time_s;
  document["measured_minibatch_time_s"] = c.measured_minibatch_time_s;
  document["minibatch_time_is_steady_period"] = c.steady_state;
  // Which comparison: every action of whole mini-batches, every action
  // with steady-state periods (overlapping mini-batches), or one steady cycle.
  document["comparison"] = c.cycle ? "steady-state" : c.steady_state ? "steady-period" : "whole-minibatch";
  if (c.cycle) {
    const SteadyCycle& cycle = *c.cycle;
    document["steady_cycle"] = {{"cycle_minibatches", cycle.cycle_minibatches},
                                {"cycle_confirmed", cycle.cycle_confirmed},
                                {"simulated_first_minibatch", cycle.simulated_first_minibatch},
                                {"simulated_last_minibatch", cycle.simulated_last_minibatch},
                                {"measured_first_minibatch", cycle.measured_first_minibatch},
                                {"measured_last_minibatch", cycle.measured_last_minibatch},
                                {"simulated_start_s", cycle.simulated_start_s},
                                {"measured_start_s", cycle.measured_start_s},
                                {"simulated_period_over", cycle.simulated_period_over},
                                {"measured_period_over", cycle.measured_period_over}};
  } else {
    document["steady_cycle"] = nullptr;
  }
  document["simulated_mean_minibatch_span_s"] = c.simulated_mean_minibatch_span_s;
  document["measured_mean_minibatch_span_s"] = c.measured_mean_minibatch_span_s;
  document["relative_error"] = c.relative_error;
  document["matched_actions"] = c.matched;
  for (const auto& [prefix, summary] : {std::pair{"action_error", c.action_error}, {"start_error", c.start_error}, {"end_error", c.end_error}}) {
    document[fmt::format("{}_median", prefix)] = summary.median;
    document[fmt::format("{}_p95", prefix)] = summary.p95;
    document[fmt::format("{}_max", prefix)] = summary.max;
  }
  document["simulated_bubble_fraction"] = c.simulated_bubble_fraction;
  document["measured_bubble_fraction"] = c.measured_bubble_fraction;
  document["bubble_fraction_error"] = c.simulated_bubble_fraction - c.measured_bubble_fraction;
  nlohmann::ordered_json worst = nlohmann::ordered_json::array();
  for (const MatchedAction& action : c.worst)
    worst.push_back({{"action", action.name},
                     {"simulated_start_s", action.simulated_start_s},
                     {"simulated_end_s", action.simulated_end_s},
                     {"measured_start_s", action.measured_start_s},
                     {"measured_end_s", action.measured_end_s},
                     {"start_error", action.start_error},
                     {"end_error", action.end_error},
                     {"error", action.error()}});
  document["worst_actions"] = worst;
  document["only_simulated"] = c.only_simulated;
  document["only_measured"] = c.only_measured;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  std::map<std::string, std::vector<double>> columns;
  for (const TimelineComparison& run : runs) {
    list.push_back({{"measured", run.measured_origin},
                    {"measured_minibatch_time_s", run.measured_minibatch_time_s},
                    {"relative_error", run.relative_error},
                    {"action_error_median", run.action_error.median},
                    {"action_error_p95", run.action_error.p95},
                    {"action_error_max", run.action_error.max},
                    {"measured_bubble_fraction", run.measured_bubble_fraction}});
    columns["measured_minibatch_time_s"].push_back(run.measured_minibatch_time_s);
    columns["relative_error"].push_back(run.relative_error);
    columns["action_error_p95"].push_back(run.action_error.p95);
  }
  document["runs"] = list;
  nlohmann::ordered_json spread;
  for (const char* name : {"measured_minibatch_time_s", "relative_error", "action_error_p95"})
    spread[name] = {{"min", nearest_rank_percentile(columns[name], 0)},
                    {"median", nearest_rank_percentile(columns[name], 50)},
                    {"max", nearest_rank_percentile(columns[name], 100)}};
  document["spread"] = spread;
  return document.dump(2) + "\n";
}

}  // namespace pipegrid
