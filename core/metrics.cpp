#include "core/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/io.hpp"

namespace pipegrid {

namespace {

// A change of a device's memory (bytes) or stash count at a time. At equal
// times releases come first, so a buffer freed at t and another allocated at
// t never both count.
struct Change {
  double time;
  double bytes;
  int stashes;
  std::size_t record;  ///< record whose end this change is reported after, or npos
};

using Key = std::tuple<int, int, int>;  // stage, micro-batch, mini-batch

Key key_of(const TimelineRecord& record) { return {record.stage, record.micro_batch, record.mini_batch}; }

// Changes of a device's count of weight versions over time.
struct VersionTrack {
  std::vector<std::pair<double, int>> deltas;  ///< (time, change of the count)
  int peak = 1;
};

// Counts weight versions per host from the timeline (SEMANTICS.md): a host
// keeps its latest version and every older one still referenced.
std::map<std::string, VersionTrack> weight_versions(const Timeline& timeline, const MemoryModel& model) {
  std::map<std::string, VersionTrack> tracks;
  if (model.versioning == WeightVersioning::Single) return tracks;
  if (model.versioning == WeightVersioning::Prediction) {
    // The predicted version lives while a forward runs; the last stage's
    // version gap is 0 (PipeOptim: s = D - rank - 1), so it keeps one.
    int last_stage = 0;
    for (const TimelineRecord& r : timeline.records) last_stage = std::max(last_stage, r.stage);
    std::map<std::string, std::vector<std::pair<double, int>>> events;
    for (const TimelineRecord& r : timeline.records)
      if (r.action == "F" && (r.stage < last_stage || last_stage == 0)) {
        events[r.host].push_back({r.start_s, +1});
        events[r.host].push_back({r.end_s, -1});
      }
    for (auto& [host, list] : events) {
      std::stable_sort(list.begin(), list.end());  // releases (-1) first at equal times
      VersionTrack& track = tracks[host];
      int predicted = 0;
      for (const auto& [time, change] : list) {
        const int before = 1 + std::min(predicted, 1);
        predicted += change;
        const int after = 1 + std::min(predicted, 1);
        if (after != before) track.deltas.push_back({time, after - before});
        track.peak = std::max(track.peak, after);
      }
    }
    return tracks;
  }

  // Update times per host: ends of its all-reduce rounds, else every
  // update_interval-th backward end.
  std::map<std::string, std::map<int, double>> round_end;
  std::map<std::string, std::vector<double>> backward_ends;
  std::map<std::pair<std::string, Key>, double> backward_end_of;
  std::map<Key, const TimelineRecord*> input_forward;  // (0, m, k) -> stage-0 forward
  for (const TimelineRecord& r : timeline.records) {
    if (TimelineRecord::is_collective(r.action)) {
      double& end = round_end[r.host][r.mini_batch];
      end = std::max(end, r.end_s);
    } else if (r.action == "B") {
      backward_ends[r.host].push_back(r.end_s);
      backward_end_of[{r.host, key_of(r)}] = r.end_s;
    } else if (r.action == "F" && r.stage == 0) {
      input_forward[key_of(r)] = &r;
    }
  }
  std::map<std::string, std::vector<double>> updates;
  for (const auto& [host, ends] : backward_ends) {
    std::vector<double>& list = updates[host];
    if (auto rounds = round_end.find(host); rounds != round_end.end()) {
      for (const auto& [round, end] : rounds->second) list.push_back(end);
    } else {
      std::vector<double> sorted = ends;
      std::sort(sorted.begin(), sorted.end());
      const std::size_t interval = static_cast<std::size_t>(std::max(1, model.update_interval));
      for (std::size_t i = interval; i <= sorted.size(); i += interval) list.push_back(sorted[i - 1]);
    }
    std::sort(list.begin(), list.end());
  }
  auto version_at = [&](const std::string& host, double time) {
    const auto& list = updates[host];
    return static_cast<int>(std::upper_bound(list.begin(), list.end(), time) - list.begin());
  };

  // Events per host: (time, order, version); order 0 releases a reference,
  // 1 makes a new latest version, 2 takes a reference.
  std::map<std::string, std::vector<std::tuple<double, int, int>>> events;
  for (const auto& [host, list] : updates)
    for (std::size_t u = 0; u < list.size(); ++u) events[host].push_back({list[u], 1, static_cast<int>(u + 1)});
  for (const TimelineRecord& r : timeline.records) {
    if (r.action != "F") continue;
    double from = r.start_s;
    int version = version_at(r.host, r.start_s);
    if (model.versioning == WeightVersioning::VerticalSync) {
      if (auto input = input_forward.find({0, r.micro_batch, r.mini_batch}); input != input_forward.end()) {
        from = std::min(from, input->second->start_s);
        version = version_at(input->second->host, input->second->start_s);
      }
    }
    const auto end = backward_end_of.find({r.host, key_of(r)});
    const double until = end == backward_end_of.end() ? r.end_s : std::max(end->second, r.start_s);
    events[r.host].push_back({from, 2, version});
    events[r.host].push_back({until, 0, version});
  }
  for (auto& [host, list] : events) {
    std::sort(list.begin(), list.end());
    VersionTrack& track = tracks[host];
    std::map<int, int> references;
    int latest = 0;
    auto count = [&] { return static_cast<int>(references.size()) + (references.count(latest) ? 0 : 1); };
    for (const auto& [time, order, version] : list) {
      const int before = count();
      if (order == 0) {
        if (--references[version] == 0) references.erase(version);
      } else if (order == 1) {
        latest = std::max(latest, version);
      } else {
        ++references[version];
      }
      const int after = count();
      if (after != before) track.deltas.push_back({time, after - before});
      track.peak = std::max(track.peak, after);
    }
  }
  return tracks;
}

// An estimate (no cycle confirmed) below the proven lower bound of the
// period is raised to it: the long-run period cannot be shorter.
void raise_to_lower_bound(SteadyState& steady, const SteadyStateHints& hints) {
  steady.estimate_s = steady.period_s;
  if (steady.periodic || !(steady.period_s < hints.lower_bound_s)) return;
  steady.measured_over += fmt::format(
      ", {:.9g} s, raised to {:.9g} s, the least the period can be ({})", steady.period_s, hints.lower_bound_s,
      hints.lower_bound_from.empty() ? std::string("the slowest device's compute per mini-batch") : hints.lower_bound_from);
  steady.period_s = hints.lower_bound_s;
}

}  // namespace

SteadyState steady_state_of(std::vector<double> completions, double run_start_s, double drain_start_s,
                            const SteadyStateHints& hints) {
  SteadyState steady;
  steady.drain_start_s = drain_start_s;
  std::sort(completions.begin(), completions.end());
  if (completions.empty()) {
    steady.measured_over = "no mini-batch completed";
    return steady;
  }
  // Completions up to the drain (a relative slack of 1e-12 for a completion
  // at the very instant the last forward starts).
  const double slack = 1e-12 * std::max(std::fabs(drain_start_s), std::fabs(completions.back()));
  std::vector<double> valid;
  for (double c : completions)
    if (c <= drain_start_s + slack) valid.push_back(c);
  steady.steady_completions = static_cast<int>(valid.size());
  if (valid.size() < 2) {
    // Too short to see a steady state: the mean over all completions, or
    // the one completion's time from the start.
    const std::size_t n = completions.size();
    steady.window_start_s = n >= 2 ? completions.front() : run_start_s;
    steady.window_end_s = completions.back();
    steady.window_gaps = n >= 2 ? static_cast<int>(n - 1) : 1;
    steady.period_s = (steady.window_end_s - steady.window_start_s) / steady.window_gaps;
    steady.measured_over = n >= 2 ? fmt::format("all {} completions: fewer than 2 before the drain", n)
                                  : "the one completion from the start of the run";
    raise_to_lower_bound(steady, hints);
    return steady;
  }
  const std::size_t G = valid.size() - 1;  // gaps h[i] = valid[i+1] - valid[i]
  std::vector<double> gaps(G);
  double largest = 0;
  for (std::size_t i = 0; i < G; ++i) {
    gaps[i] = valid[i + 1] - valid[i];
    largest = std::max(largest, std::fabs(gaps[i]));
  }
  const double tolerance = 1e-9 * largest;
  // The smallest cycle L whose repetition, traced back from the last gap
  // before the drain, covers at least 3 cycles and the last half of the
  // gaps: the steady state is what the run settles into, so it must hold at
  // the end of the steady part and be seen repeating.
  const std::size_t needed_half = (G + 1) / 2;
  for (std::size_t L = 1; 3 * L <= G; ++L) {
    std::size_t first = G - L;  // gaps [first, G) repeat with period L
    while (first > 0 && std::fabs(gaps[first - 1] - gaps[first - 1 + L]) <= tolerance) --first;
    const std::size_t covered = G - first;
    if (covered < 3 * L || covered < needed_half) continue;
    const std::size_t whole = covered / L * L;
    steady.periodic = true;
    steady.cycle_minibatches = static_cast<int>(L);
    steady.window_start_s = valid[G - whole];
    steady.window_end_s = valid[G];
    steady.window_gaps = static_cast<int>(whole);
    steady.period_s = (steady.window_end_s - steady.window_start_s) / static_cast<double>(whole);
    steady.warmup_minibatches = static_cast<int>(first);
    steady.warmup_s = valid[first] - run_start_s;
    steady.measured_over = fmt::format("{} whole cycles of {} before the drain", whole / L, L == 1 ? std::string("1 mini-batch") : fmt::format("{} mini-batches", L));
    steady.estimate_s = steady.period_s;
    return steady;
  }
  // No cycle confirmed: the mean gap over the last half of the steady part,
  // widened to whole rounds of the replicas' round robin when there are
  // that many gaps (a part of a round is biased by the replicas' phase).
  std::size_t counted = std::max<std::size_t>(1, needed_half);
  const std::size_t rotation = static_cast<std::size_t>(std::max(1, hints.rotation));
  const bool whole_rounds = rotation > 1 && G >= rotation;
  if (whole_rounds) counted = std::min((counted + rotation - 1) / rotation, G / rotation) * rotation;
  steady.window_start_s = valid[G - counted];
  steady.window_end_s = valid[G];
  steady.window_gaps = static_cast<int>(counted);
  steady.period_s = (steady.window_end_s - steady.window_start_s) / static_cast<double>(counted);
  steady.measured_over = fmt::format("the mean of the last {} of {} gaps between completions before the drain{}", counted, G,
                                     whole_rounds ? fmt::format(" ({} round{} of {} replicas)", counted / rotation, counted == rotation ? "" : "s", rotation)
                                                  : std::string());
  raise_to_lower_bound(steady, hints);
  return steady;
}

HostStages host_stages(const std::map<std::string, int>& stage_of_host) {
  HostStages stages;
  for (const auto& [host, stage] : stage_of_host) stages[host] = {stage};
  return stages;
}

namespace {

// Replicas of each stage: the hosts that hold it.
std::map<int, int> replicas_of_stages(const HostStages& stages_of_host) {
  std::map<int, int> replicas;
  for (const auto& [host, stages] : stages_of_host)
    for (const int stage : stages) ++replicas[stage];
  return replicas;
}

// The replicas of a host's stages (a host of several stages is their only one).
int replicas_of_host(const HostStages& stages_of_host, const std::map<int, int>& replicas_of_stage, const std::string& host) {
  const auto stages = stages_of_host.find(host);
  if (stages == stages_of_host.end() || stages->second.empty()) return 1;
  const auto replicas = replicas_of_stage.find(stages->second.front());
  return replicas == replicas_of_stage.end() ? 1 : replicas->second;
}

std::string stage_list(const std::vector<int>& stages) {
  std::string text;
  for (const int stage : stages) text += (text.empty() ? "" : ",") + std::to_string(stage);
  return text;
}

}  // namespace

SteadyStateHints steady_state_hints(const Timeline& timeline, const std::map<std::string, int>& stage_of_host) {
  return steady_state_hints(timeline, host_stages(stage_of_host));
}

SteadyStateHints steady_state_hints(const Timeline& timeline, const HostStages& stages_of_host) {
  SteadyStateHints hints;
  const std::map<int, int> replicas_of_stage = replicas_of_stages(stages_of_host);
  long long rotation = 1;
  for (const auto& [stage, replicas] : replicas_of_stage) {
    rotation = std::lcm(rotation, static_cast<long long>(replicas));
    if (rotation > std::numeric_limits<int>::max()) {
      rotation = 1;  // no run is that long: whole rounds cannot be had anyway
      break;
    }
  }
  hints.rotation = static_cast<int>(rotation);
  // The same quantities as compute_metrics's invariant, computed the same way.
  std::map<std::string, std::vector<std::pair<double, double>>> busy;
  std::map<std::string, std::set<int>> handled;
  for (const TimelineRecord& r : timeline.records) {
    if (r.kind() != RecordKind::Compute) continue;
    busy[r.host].push_back({r.start_s, r.end_s});
    if (r.action == "F") handled[r.host].insert(r.mini_batch);
  }
  for (const auto& [host, minibatches] : handled) {
    if (minibatches.empty()) continue;
    const int replicas = replicas_of_host(stages_of_host, replicas_of_stage, host);
    const double bound = busy_time(busy[host], 0, 0).total_s / static_cast<double>(minibatches.size()) / replicas;
    if (bound > hints.lower_bound_s) {
      hints.lower_bound_s = bound;
      const auto stages = stages_of_host.find(host);
      hints.lower_bound_from = fmt::format(
          "device {}'s compute per mini-batch{}", host,
          replicas > 1 ? fmt::format(" / {} replicas of stage {}", replicas, stage_list(stages->second)) : std::string());
    }
  }
  return hints;
}

SteadyState steady_state_of(const Timeline& timeline) {
  // The stages' hosts as the timeline shows them: each host that computes
  // for one stage only.
  std::map<std::string, std::set<int>> stages_of_host;
  for (const TimelineRecord& r : timeline.records)
    if (r.kind() == RecordKind::Compute) stages_of_host[r.host].insert(r.stage);
  HostStages single;
  for (const auto& [host, stages] : stages_of_host)
    if (stages.size() == 1) single[host] = {*stages.begin()};
  return steady_state_of(timeline, single);
}

SteadyState steady_state_of(const Timeline& timeline, const HostStages& stages_of_host) {
  std::map<int, double> completion;
  std::map<std::string, double> last_forward_start;
  double first = 0;
  bool any = false;
  for (const TimelineRecord& r : timeline.records) {
    if (r.kind() != RecordKind::Compute) continue;
    first = any ? std::min(first, r.start_s) : r.start_s;
    any = true;
    auto [it, inserted] = completion.try_emplace(r.mini_batch, r.end_s);
    if (!inserted) it->second = std::max(it->second, r.end_s);
    if (r.action == "F") {
      auto [last, new_host] = last_forward_start.try_emplace(r.host, r.start_s);
      if (!new_host) last->second = std::max(last->second, r.start_s);
    }
  }
  std::vector<double> completions;
  for (const auto& [k, end] : completion) completions.push_back(end);
  double drain = completions.empty() ? 0 : *std::max_element(completions.begin(), completions.end());
  for (const auto& [host, start] : last_forward_start) drain = std::min(drain, start);
  return steady_state_of(std::move(completions), first, drain, steady_state_hints(timeline, stages_of_host));
}

bool minibatches_overlap(const Timeline& timeline) {
  std::map<int, std::pair<double, double>> extent;  // mini-batch -> (first start, last end)
  for (const TimelineRecord& r : timeline.records) {
    if (r.kind() != RecordKind::Compute) continue;
    auto [it, inserted] = extent.try_emplace(r.mini_batch, r.start_s, r.end_s);
    if (!inserted) it->second = {std::min(it->second.first, r.start_s), std::max(it->second.second, r.end_s)};
  }
  for (auto it = extent.begin(); it != extent.end() && std::next(it) != extent.end(); ++it)
    if (std::next(it)->second.first < it->second.second) return true;
  return false;
}

BusyTime busy_time(std::vector<std::pair<double, double>> intervals, double window_start_s, double window_end_s) {
  std::sort(intervals.begin(), intervals.end());
  BusyTime busy;
  double covered_until = -1e300;
  for (const auto& [start, end] : intervals) {
    const double from = std::max(start, covered_until);
    if (end > from) {
      busy.total_s += end - from;
      busy.in_window_s += std::max(0.0, std::min(end, window_end_s) - std::max(from, window_start_s));
    }
    covered_until = std::max(covered_until, end);
  }
  return busy;
}

MinibatchTime minibatch_time_of(const Timeline& timeline, std::optional<bool> steady_state) {
  MinibatchTime result;
  double first = 0, last = 0;
  bool any = false;
  std::set<int> minibatches;
  std::map<std::string, std::vector<std::pair<double, double>>> busy;
  for (const TimelineRecord& r : timeline.records) {
    if (r.kind() == RecordKind::Transfer && !TimelineRecord::is_collective(r.action)) continue;
    first = any ? std::min(first, r.start_s) : r.start_s;
    last = any ? std::max(last, r.end_s) : r.end_s;
    any = true;
    if (r.kind() == RecordKind::Compute) {
      minibatches.insert(r.mini_batch);
      busy[r.host].push_back({r.start_s, r.end_s});
    }
  }
  result.minibatches = static_cast<int>(minibatches.size());
  if (!any || minibatches.empty()) return result;
  result.mean_minibatch_span_s = (last - first) / result.minibatches;
  result.minibatch_time_s = result.mean_minibatch_span_s;
  double window_start = first, window_end = last;
  if (steady_state.value_or(minibatches_overlap(timeline))) {
    result.steady_state = steady_state_of(timeline);
    result.minibatch_time_s = result.steady_state->period_s;
    if (result.steady_state->window_end_s > result.steady_state->window_start_s) {
      window_start = result.steady_state->window_start_s;
      window_end = result.steady_state->window_end_s;
    }
  }
  double sum = 0;
  for (auto& [host, intervals] : busy) {
    const BusyTime time = busy_time(std::move(intervals), window_start, window_end);
    sum += window_end > window_start ? std::clamp(1 - time.in_window_s / (window_end - window_start), 0.0, 1.0) : 0.0;
  }
  result.bubble_fraction = busy.empty() ? 0 : sum / static_cast<double>(busy.size());
  return result;
}

MemoryPeaks annotate_memory(Timeline& timeline, const MemoryModel& model,
                            const std::map<std::string, int>& stage_of_host) {
  return annotate_memory(timeline, model, host_stages(stage_of_host));
}

MemoryPeaks annotate_memory(Timeline& timeline, const MemoryModel& model, const HostStages& stages_of_host) {
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::map<std::string, std::vector<Change>> changes;
  // Ends of compute actions, to know when a received message is consumed.
  std::map<std::pair<std::string, std::tuple<char, int, int, int>>, double> compute_end;
  std::map<std::pair<std::string, Key>, double> recompute_start;
  for (const TimelineRecord& r : timeline.records)
    if (r.kind() == RecordKind::Compute) {
      compute_end[{r.host, {r.action[0], r.stage, r.micro_batch, r.mini_batch}}] = r.end_s;
      if (r.action == "R") recompute_start[{r.host, key_of(r)}] = r.start_s;
    }

  for (std::size_t i = 0; i < timeline.records.size(); ++i) {
    const TimelineRecord& r = timeline.records[i];
    changes[r.host].push_back({r.end_s, 0, 0, i});
    if (TimelineRecord::is_collective(r.action)) continue;  // reduced in place in the gradient buffer
    if (r.kind() == RecordKind::Transfer) {
      // Receive buffer on the peer: from arrival until its consumer ends.
      const bool forward = r.action == "SEND_F";
      const auto consumer = std::make_tuple(forward ? 'F' : 'B', r.stage + (forward ? 1 : -1), r.micro_batch, r.mini_batch);
      auto end = compute_end.find({r.peer, consumer});
      if (!forward && end == compute_end.end())  // a split backward: its I consumes the gradient
        end = compute_end.find({r.peer, {'I', r.stage - 1, r.micro_batch, r.mini_batch}});
      changes[r.peer].push_back({r.end_s, r.bytes, 0, none});
      changes[r.peer].push_back({end == compute_end.end() ? r.end_s : std::max(r.end_s, end->second), -r.bytes, 0, none});
      continue;
    }
    if (r.stage < 0 || r.stage >= static_cast<int>(model.stages.size())) continue;
    const StageCost& stage = model.stages[r.stage];
    // The end of the micro-batch's backward: its B, or its W when split
    // (then its I frees all but what the W needs).
    auto backward_end = compute_end.find({r.host, {'B', r.stage, r.micro_batch, r.mini_batch}});
    const auto input_end = compute_end.find({r.host, {'I', r.stage, r.micro_batch, r.mini_batch}});
    const bool split = backward_end == compute_end.end() && input_end != compute_end.end();
    if (split) backward_end = compute_end.find({r.host, {'W', r.stage, r.micro_batch, r.mini_batch}});
    const bool layerwise = static_cast<std::size_t>(r.stage) < model.layerwise.size();
    const bool recomputes = model.recompute || layerwise;
    if (r.action == "F") {
      const double release = backward_end == compute_end.end() ? r.end_s : backward_end->second;
      const double kept = layerwise         ? model.layerwise[r.stage].kept_bytes
                          : model.recompute ? stage.input_bytes
                                            : stage.stash_bytes;
      changes[r.host].push_back({r.start_s, kept, 1, none});
      if (split) {
        // From the I's end only the W's part stays.
        const double partial = std::max(r.start_s, input_end->second);
        changes[r.host].push_back({partial, -kept, 0, none});
        changes[r.host].push_back({partial, stage.weight_gradient_stash_bytes, 0, none});
        changes[r.host].push_back({std::max(partial, release), -stage.weight_gradient_stash_bytes, -1, none});
      } else {
        changes[r.host].push_back({release, -kept, -1, none});
      }
      if (recomputes && !recompute_start.count({r.host, key_of(r)})) {
        // Recomputation asked for but this micro-batch was not recomputed: it
        // kept its full stash.
        changes[r.host].push_back({r.start_s, stage.stash_bytes - kept, 0, none});
        changes[r.host].push_back({release, -(stage.stash_bytes - kept), 0, none});
      }
    } else if (r.action == "R") {
      const auto release_at = split ? input_end : backward_end;
      const double release = release_at == compute_end.end() ? r.end_s : release_at->second;
      const double held = layerwise ? model.layerwise[r.stage].recompute_bytes : stage.stash_bytes - stage.input_bytes;
      changes[r.host].push_back({r.start_s, held, 0, none});
      changes[r.host].push_back({release, -held, 0, none});
    }
  }

  MemoryPeaks peaks;
  auto weight_bytes_of = [&](const std::string& host) {
    double bytes = 0;
    if (auto stages = stages_of_host.find(host); stages != stages_of_host.end())
      for (const int stage : stages->second)
        if (stage >= 0 && stage < static_cast<int>(model.stages.size())) bytes += model.stages[stage].weight_bytes;
    return bytes;
  };
  auto stage_resident_of = [&](const std::string& host) {
    double bytes = 0;
    if (auto stages = stages_of_host.find(host); stages != stages_of_host.end())
      for (const int stage : stages->second)
        if (stage >= 0 && static_cast<std::size_t>(stage) < model.stage_resident_bytes.size())
          bytes += model.stage_resident_bytes[static_cast<std::size_t>(stage)];
    return bytes;
  };
  // One weight version, its gradients, master weights and the optimizer's
  // state; more versions come and go with the version track.
  const double base_copies = model.resident_weight_factor;
  auto expert_bytes_of = [&](const std::string& host) {
    double bytes = 0;
    if (auto stages = stages_of_host.find(host); stages != stages_of_host.end())
      for (const int stage : stages->second)
        if (stage >= 0 && stage < static_cast<int>(model.stages.size())) bytes += model.stages[stage].expert_weight_bytes;
    return bytes;
  };
  // Resident and step bytes of a host's weights: the routed experts' at
  // their own factors when given.
  const double expert_copies =
      model.expert_resident_weight_factor >= 0 ? model.expert_resident_weight_factor : model.resident_weight_factor;
  const double expert_step = model.expert_step_weight_factor >= 0 ? model.expert_step_weight_factor : model.step_weight_factor;
  auto resident_of = [&](const std::string& host) {
    const double experts = expert_bytes_of(host);
    return base_copies * (weight_bytes_of(host) - experts) + expert_copies * experts;
  };
  auto step_of = [&](const std::string& host) {
    const double experts = expert_bytes_of(host);
    return model.step_weight_factor * (weight_bytes_of(host) - experts) + expert_step * experts;
  };
  for (const auto& [host, track] : weight_versions(timeline, model)) {
    peaks.peak_versions[host] = track.peak;
    for (const auto& [time, change] : track.deltas) changes[host].push_back({time, change * weight_bytes_of(host), 0, none});
  }
  for (auto& [host, list] : changes) {
    const double base = resident_of(host) + stage_resident_of(host);
    // Releases, then reports of record ends, then allocations.
    std::stable_sort(list.begin(), list.end(), [](const Change& x, const Change& y) {
      auto rank = [](const Change& c) { return c.bytes < 0 || c.stashes < 0 ? 0 : c.record != static_cast<std::size_t>(-1) ? 1 : 2; };
      return std::make_tuple(x.time, rank(x)) < std::make_tuple(y.time, rank(y));
    });
    double bytes = base, peak = base;
    int stashes = 0, peak_stashes = 0;
    auto& series = timeline.memory_series[host];
    series.clear();
    for (const Change& change : list) {
      if (series.empty()) series.push_back({change.time, bytes});
      bytes += change.bytes;
      stashes += change.stashes;
      if (series.back().first == change.time)
        series.back().second = bytes;
      else if (series.back().second != bytes)
        series.push_back({change.time, bytes});
      peak = std::max(peak, bytes);
      peak_stashes = std::max(peak_stashes, stashes);
      if (change.record != static_cast<std::size_t>(-1)) timeline.records[change.record].memory_bytes = bytes;
    }
    peaks.peak_bytes[host] = std::max(peak, base + step_of(host));
    peaks.peak_stashed[host] = peak_stashes;
  }
  for (const auto& [host, stages] : stages_of_host)
    if (!peaks.peak_bytes.count(host))
      peaks.peak_bytes[host] = resident_of(host) + step_of(host) + stage_resident_of(host);
  return peaks;
}

Metrics compute_metrics(Timeline& timeline, const MemoryModel& model, const std::map<std::string, int>& stage_of_host,
                        int mini_batches, int samples_per_minibatch, bool steady_state) {
  return compute_metrics(timeline, model, host_stages(stage_of_host), mini_batches, samples_per_minibatch, steady_state);
}

Metrics compute_metrics(Timeline& timeline, const MemoryModel& model, const HostStages& stages_of_host, int mini_batches,
                        int samples_per_minibatch, bool steady_state) {
  Metrics metrics;
  metrics.samples_per_minibatch = samples_per_minibatch;
  const MemoryPeaks peaks = annotate_memory(timeline, model, stages_of_host);
  double first = 0, last = 0, transferred = 0;
  bool any = false;
  std::map<std::string, std::vector<std::pair<double, double>>> busy;
  std::map<std::string, std::set<int>> minibatches_of_host;
  for (const TimelineRecord& r : timeline.records) {
    if (r.kind() == RecordKind::Transfer) transferred += r.bytes;
    // The span covers compute and all-reduces (the update ends a flushed
    // mini-batch); other transfers end before the operation they feed.
    if (r.kind() == RecordKind::Transfer && !TimelineRecord::is_collective(r.action)) continue;
    first = any ? std::min(first, r.start_s) : r.start_s;
    last = any ? std::max(last, r.end_s) : r.end_s;
    any = true;
    if (r.kind() == RecordKind::Compute) {
      busy[r.host].push_back({r.start_s, r.end_s});
      if (r.action == "F") minibatches_of_host[r.host].insert(r.mini_batch);
    }
  }
  const double span = last - first;
  metrics.mean_minibatch_span_s = mini_batches > 0 ? span / mini_batches : 0;
  metrics.minibatch_time_s = metrics.mean_minibatch_span_s;
  if (steady_state && any) {
    metrics.steady_state = steady_state_of(timeline, stages_of_host);
    metrics.minibatch_time_s = metrics.steady_state->period_s;
  }
  metrics.throughput_samples_per_s = metrics.minibatch_time_s > 0 ? samples_per_minibatch / metrics.minibatch_time_s : 0;
  const double samples = static_cast<double>(samples_per_minibatch) * mini_batches;
  metrics.bytes_per_sample = samples > 0 ? transferred / samples : 0;

  // Bubbles are measured over the run (flushed) or inside the steady-state
  // window (otherwise), never clamped: a value outside [0, 1] is a bug.
  double window_start = first, window_end = last;
  if (metrics.steady_state && metrics.steady_state->window_end_s > metrics.steady_state->window_start_s) {
    window_start = metrics.steady_state->window_start_s;
    window_end = metrics.steady_state->window_end_s;
  }
  const double window = window_end - window_start;
  const double slack = 1e-9 * std::max(span, 1e-300);
  const std::map<int, int> replicas_of_stage = replicas_of_stages(stages_of_host);
  double bubble_sum = 0, span_bubble_sum = 0;
  for (const std::string& host : timeline.hosts) {
    DeviceMetrics device;
    device.host = host;
    if (auto stages = stages_of_host.find(host); stages != stages_of_host.end()) device.stages = stages->second;
    // The device's own span: its first compute start to its last compute end.
    double own_first = 0, own_last = 0;
    for (std::size_t i = 0; i < busy[host].size(); ++i) {
      own_first = i == 0 ? busy[host][i].first : std::min(own_first, busy[host][i].first);
      own_last = i == 0 ? busy[host][i].second : std::max(own_last, busy[host][i].second);
    }
    const BusyTime time = busy_time(busy[host], window_start, window_end);
    device.busy_s = time.total_s;
    const double busy_in_window = time.in_window_s;
    if (device.busy_s > span + slack)
      throw InvariantViolation(fmt::format("device {} is busy {} s, longer than the whole run ({} s)", host,
                                           format_exact(device.busy_s), format_exact(span)));
    const double bubble = window > 0 ? 1 - busy_in_window / window : 0;
    if (bubble < -1e-9 || bubble > 1 + 1e-9)
      throw InvariantViolation(fmt::format("device {}: bubble fraction {} outside [0, 1]", host, format_exact(bubble)));
    device.bubble_fraction = std::clamp(bubble, 0.0, 1.0);  // rounding only
    const double own_span = own_last - own_first;
    const double span_bubble = own_span > 0 ? 1 - device.busy_s / own_span : 0;
    if (span_bubble < -1e-9 || span_bubble > 1 + 1e-9)
      throw InvariantViolation(fmt::format("device {}: span bubble fraction {} outside [0, 1]", host, format_exact(span_bubble)));
    device.span_bubble_fraction = std::clamp(span_bubble, 0.0, 1.0);
    if (metrics.steady_state) {
      // In steady state a device of a stage with r replicas handles one
      // mini-batch in r, so the period is at least its compute per
      // mini-batch it handles divided by r. An estimate (no cycle
      // confirmed) was raised to this bound by steady_state_of; a confirmed
      // cycle below it is a bug.
      const auto handled = minibatches_of_host.find(host);
      const int replicas = replicas_of_host(stages_of_host, replicas_of_stage, host);
      if (handled != minibatches_of_host.end() && !handled->second.empty()) {
        const double bound = device.busy_s / static_cast<double>(handled->second.size()) / replicas;
        if (metrics.minibatch_time_s < bound * (1 - 1e-9))
          throw InvariantViolation(fmt::format(
              "steady-state period {} s is shorter than device {}'s compute per mini-batch ({} s over {} mini-batches, {} "
              "replicas of stage {}: {} s)",
              format_exact(metrics.minibatch_time_s), host, format_exact(device.busy_s), handled->second.size(), replicas,
              stage_list(device.stages), format_exact(bound)));
      }
    }
    if (auto peak = peaks.peak_bytes.find(host); peak != peaks.peak_bytes.end()) device.peak_memory_bytes = peak->second;
    if (auto peak = peaks.peak_stashed.find(host); peak != peaks.peak_stashed.end())
      device.peak_stashed_microbatches = peak->second;
    if (auto peak = peaks.peak_versions.find(host); peak != peaks.peak_versions.end())
      device.peak_weight_versions = peak->second;
    if (auto capacity = model.capacity_bytes.find(host); capacity != model.capacity_bytes.end()) {
      device.memory_capacity_bytes = capacity->second;
      if (auto reserve = model.reserve_bytes.find(host); reserve != model.reserve_bytes.end())
        device.memory_reserve_bytes = reserve->second;
      device.oom = device.peak_memory_bytes > capacity->second - device.memory_reserve_bytes;
    }
    bubble_sum += device.bubble_fraction;
    span_bubble_sum += device.span_bubble_fraction;
    metrics.devices.push_back(device);
  }
  metrics.bubble_fraction = metrics.devices.empty() ? 0 : bubble_sum / static_cast<double>(metrics.devices.size());
  metrics.span_bubble_fraction = metrics.devices.empty() ? 0 : span_bubble_sum / static_cast<double>(metrics.devices.size());
  return metrics;
}

}  // namespace pipegrid
