// BaPipe's balanced partition: inter-layer dynamic programming toward T, the
// communication check with its coarse-grained fallback, intra-layer splits
// of boundary layers, and memory fine-tuning (contracts in bapipe.hpp).

#include "partitioners/bapipe.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/precision.hpp"
#include "core/program.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

std::string seconds_text(double seconds) { return fmt::format("{:.6g} s", seconds); }

/// "1.5 GiB"; with `exact`, "1.5 GiB (1610612736 B)".
std::string bytes_text(double bytes, bool exact = false) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = bytes;
  while (std::fabs(value) >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.6g} B", bytes);
  return exact ? fmt::format("{:.4g} {} ({:.0f} B)", value, units[unit], bytes) : fmt::format("{:.4g} {}", value, units[unit]);
}

/// Layer ranges of every stage, in the unsplit profile's numbering.
/// split[s] > 0: layer last[s] is shared with stage s + 1 (which starts at
/// it), stage s doing that fraction of it.
struct Layout {
  std::vector<int> last;
  std::vector<double> split;
  int first(int s) const { return s == 0 ? 0 : split[s - 1] > 0 ? last[s - 1] : last[s - 1] + 1; }
  bool any_split() const {
    return std::any_of(split.begin(), split.end(), [](double f) { return f > 0; });
  }
};

/// One stage's figures for a range of whole layers.
struct Figures {
  double compute = 0;  ///< forward + backward on the stage's host (as report_stages() sums it)
  double busy = 0;     ///< compute with the host's action overhead (once per forward and backward)
  double time = 0;     ///< the local bound on the time per micro-batch (Chain::figures); >= busy
  double memory = 0;   ///< bapipe_memory_demand
  bool hidden() const { return time <= busy; }
};

/// Running sums over a stage's layers, in layer order (as stage_costs() and
/// report_stages() sum them, so figures here equal the final report's).
struct RangeSums {
  double compute = 0, forward = 0, backward = 0, weight = 0, outputs = 0;
};

/// A transfer between two stages' hosts, once per micro-batch.
struct Transfer {
  int from = 0, to = 0;
  double bytes = 0;
};

/// The links of the route from host a to host b: indices into
/// platform.links, or, without link information, one link of the route's
/// own (numbered after platform.links).
std::vector<int> route_links(const PlatformSummary& platform, int a, int b) {
  if (!platform.route_links.empty()) return platform.route_links[a][b];
  const int n = static_cast<int>(platform.hosts.size());
  return {static_cast<int>(platform.links.size()) + a * n + b};
}

LinkInfo link_info(const PlatformSummary& platform, int link) {
  if (link < static_cast<int>(platform.links.size())) return platform.links[link];
  const int n = static_cast<int>(platform.hosts.size()), pair = link - static_cast<int>(platform.links.size());
  const int a = pair / n, b = pair % n;
  return {fmt::format("route {} -> {}", platform.hosts[a].name, platform.hosts[b].name), platform.route_bandwidth_Bps[a][b], true};
}

bool moves_bytes(const Transfer& transfer) { return transfer.bytes > 0 && transfer.from != transfer.to; }

/// Bytes per micro-batch on each link the transfers cross.
std::map<int, double> link_loads(const PlatformSummary& platform, const std::vector<Transfer>& transfers) {
  std::map<int, double> loads;
  for (const Transfer& transfer : transfers)
    if (moves_bytes(transfer))
      for (const int link : route_links(platform, transfer.from, transfer.to)) loads[link] += transfer.bytes;
  return loads;
}

/// A transfer's time: the route's latency + its bytes over each link's
/// bandwidth, a shared link carrying everything `loads` puts on it; the
/// slowest link counts.
double charged_time(const PlatformSummary& platform, const Transfer& transfer, const std::map<int, double>& loads) {
  if (!moves_bytes(transfer)) return 0;
  if (!(platform.route_bandwidth_Bps[transfer.from][transfer.to] > 0))
    throw InputError(fmt::format("{}: no route from {} to {}", platform.file, platform.hosts[transfer.from].name,
                                 platform.hosts[transfer.to].name));
  double slowest = 0;
  for (const int link : route_links(platform, transfer.from, transfer.to)) {
    const LinkInfo info = link_info(platform, link);
    const auto load = loads.find(link);
    const double bytes = info.shared && load != loads.end() ? std::max(load->second, transfer.bytes) : transfer.bytes;
    slowest = std::max(slowest, bytes / info.bandwidth_Bps);
  }
  return platform.route_latency_s[transfer.from][transfer.to] + slowest;
}

/// The largest load / bandwidth over the links the transfers cross.
double busiest_link(const PlatformSummary& platform, const std::vector<Transfer>& transfers, const std::map<int, double>& loads,
                    int* which = nullptr) {
  double busiest = 0;
  for (const Transfer& transfer : transfers)
    if (moves_bytes(transfer))
      for (const int link : route_links(platform, transfer.from, transfer.to)) {
        const LinkInfo info = link_info(platform, link);
        const double time = (info.shared ? loads.at(link) : transfer.bytes) / info.bandwidth_Bps;
        if (time > busiest) {
          busiest = time;
          if (which) *which = link;
        }
      }
  return busiest;
}

/// The unsplit chain of layers on the platform: stage s on hosts[s].
class Chain {
 public:
  /// `resident_weight_factor`: bytes kept per weight byte (core/precision.hpp).
  Chain(const Profile& profile, const PlatformSummary& platform, std::string schedule, int micro_batches, std::vector<int> stash_bound,
        double resident_weight_factor = 2)
      : profile_(profile),
        platform_(platform),
        schedule_(std::move(schedule)),
        micro_batches_(micro_batches),
        stash_bound_(std::move(stash_bound)),
        resident_weight_factor_(resident_weight_factor) {
    const int stages = this->stages(), layers = this->layers();
    forward_.assign(stages, std::vector<double>(layers));
    backward_.assign(stages, std::vector<double>(layers));
    for (int s = 0; s < stages; ++s)
      for (int l = 0; l < layers; ++l) {
        const LayerTimes times = layer_times_on(profile.layers[l], platform.hosts[s]);
        forward_[s][l] = times.forward_s;
        backward_[s][l] = times.backward_s;
      }
  }
  int stages() const { return static_cast<int>(platform_.hosts.size()); }
  int layers() const { return static_cast<int>(profile_.layers.size()); }
  const Profile& profile() const { return profile_; }
  const PlatformSummary& platform() const { return platform_; }
  const std::string& schedule() const { return schedule_; }
  const std::vector<int>& stash_bound() const { return stash_bound_; }
  double resident_weight_factor() const { return resident_weight_factor_; }
  double layer_time(int s, int l) const { return forward_[s][l] + backward_[s][l]; }
  const std::string& host(int s) const { return platform_.hosts[s].name; }

  /// Bytes entering layer l (the previous layer's output, the model's input).
  double input_of(int l) const { return l == 0 ? profile_.input_bytes : profile_.layers[l - 1].output_bytes; }

  void extend(RangeSums& sums, int s, int l) const {
    sums.compute += forward_[s][l] + backward_[s][l];
    sums.forward += forward_[s][l];
    sums.backward += backward_[s][l];
    sums.weight += profile_.layers[l].parameter_bytes;
    sums.outputs += profile_.layers[l].stashed_bytes();
  }

  /** Figures of stage s holding whole layers a..b, whose sums are `sums`.
   *  `time` bounds the stage's share of bapipe_pipeline_time from what the
   *  stage alone knows: its four transfers (activation in and out, gradient
   *  in and out), each link loaded by those only. 1F1B family, with d the
   *  difference of the warm-ups k across a boundary and e the boundary's
   *  extra time in the cycle (synchronous: activation + gradient transfer;
   *  asynchronous: what each exceeds the stage's forward, backward): the
   *  largest of the compute C, the busiest link, and per boundary e / (d - 1)
   *  when d >= 2, else C + e (only where the upper stage's k is below M:
   *  otherwise it runs every forward before its first backward and no cycle
   *  starts there). Summed over the stages of a cycle these bound
   *  it (exactly when each stage knows its links' whole load), so the
   *  largest `time` of a split is at least its predicted time. gpipe:
   *  max(F, forward link load) + max(B, backward link load). */
  Figures figures(int s, int a, int b, const RangeSums& sums) const {
    const int N = stages();
    const bool last_stage = s + 1 == N;
    StageCost cost;
    cost.first_layer = a;
    cost.last_layer = b;
    cost.weight_bytes = sums.weight;
    cost.input_bytes = input_of(a);
    cost.output_bytes = last_stage ? 0 : profile_.layers[b].output_bytes;
    cost.stash_bytes = sums.outputs + cost.input_bytes;
    Figures figures;
    figures.compute = sums.compute;
    const HostInfo& host = platform_.hosts[s];
    const double F = sums.forward + host.action_overhead_s, B = sums.backward + host.action_overhead_s;
    figures.busy = F + B;
    const double in = s > 0 ? cost.input_bytes : 0, out = cost.output_bytes;
    const Transfer in_forward{std::max(s - 1, 0), s, in}, in_backward{s, std::max(s - 1, 0), in};
    const Transfer out_forward{s, std::min(s + 1, N - 1), out}, out_backward{std::min(s + 1, N - 1), s, out};
    if (schedule_ == "gpipe") {
      const std::vector<Transfer> forwards{in_forward, out_forward}, backwards{in_backward, out_backward};
      figures.time = std::max(F, busiest_link(platform_, forwards, link_loads(platform_, forwards))) +
                     std::max(B, busiest_link(platform_, backwards, link_loads(platform_, backwards)));
    } else {
      const std::vector<Transfer> all{in_forward, in_backward, out_forward, out_backward};
      const std::map<int, double> loads = link_loads(platform_, all);
      const bool async = host.execution == Execution::Async;
      const auto extra = [&](const Transfer& forward, const Transfer& backward) {
        const double f = charged_time(platform_, forward, loads), g = charged_time(platform_, backward, loads);
        return async ? std::max(0.0, f - F) + std::max(0.0, g - B) : f + g;
      };
      const auto term = [&](double e, int d) { return e <= 0 ? 0.0 : d >= 2 ? e / (d - 1) : figures.busy + e; };
      figures.time = std::max(figures.busy, busiest_link(platform_, all, loads));
      // A cycle starting at stage s exists only when s runs a forward after
      // a backward (k_s < M).
      if (!last_stage && stash_bound_[s] < micro_batches_)
        figures.time = std::max(figures.time, term(extra(out_forward, out_backward), stash_bound_[s] - stash_bound_[s + 1]));
      if (s > 0 && stash_bound_[s - 1] < micro_batches_)
        figures.time = std::max(figures.time, term(extra(in_forward, in_backward), stash_bound_[s - 1] - stash_bound_[s]));
    }
    figures.memory = bapipe_memory_demand(cost, s, stash_bound_, resident_weight_factor_);
    return figures;
  }

 private:
  const Profile& profile_;
  const PlatformSummary& platform_;
  std::string schedule_;
  int micro_batches_ = 1;
  std::vector<int> stash_bound_;
  double resident_weight_factor_ = 2;
  std::vector<std::vector<double>> forward_, backward_;  ///< [s][l]: layer l on stage s's host
};

/// A stage's value for a min-max search: +infinity where the range is not
/// allowed.
using StageValue = std::function<double(int s, int a, int b, const Figures&)>;

/** The split into whole-layer stages (every stage non-empty) minimising the
 *  largest `value`; with `target`, then minimising the sum over stages of
 *  (value - target)^2 among those; then, among splits whose sums compare
 *  equal, each stage in turn as short as possible. Returns the last layer of
 *  each stage, or nothing when every split has a stage that is not allowed.
 *  Values and sums are compared exactly (sums are taken from the last stage
 *  backwards, always in the same order, so one input gives one answer). */
std::optional<std::vector<int>> min_max_split(const Chain& chain, const StageValue& value, std::optional<double> target) {
  const int N = chain.stages(), L = chain.layers();
  // Stage s may end at b in s..L-N+s (the later stages keep a layer each);
  // the last stage ends at L-1. `visit` walks stage s's ranges starting at a
  // in increasing b and calls back with each allowed one.
  const auto visit = [&](int s, int a, const std::function<void(int b, double v)>& each) {
    RangeSums sums;
    const int end = s + 1 == N ? L - 1 : L - N + s;
    for (int b = a; b <= end; ++b) {
      chain.extend(sums, s, b);
      if (s + 1 == N && b != L - 1) continue;
      const double v = value(s, a, b, chain.figures(s, a, b, sums));
      if (v < kInfinity) each(b, v);
    }
  };
  // best[s][b]: the smallest largest value of layers 0..b in stages 0..s.
  std::vector<std::vector<double>> best(N, std::vector<double>(L, kInfinity));
  for (int s = 0; s < N; ++s)
    for (int a = s; a <= L - N + s; ++a) {
      if (s == 0 && a != 0) break;
      const double before = s == 0 ? -kInfinity : best[s - 1][a - 1];
      if (before == kInfinity) continue;
      visit(s, a, [&](int b, double v) { best[s][b] = std::min(best[s][b], std::max(before, v)); });
    }
  const double optimum = best[N - 1][L - 1];
  if (optimum == kInfinity) return std::nullopt;

  // rest[s][a]: the smallest sum of squared distances to the target of
  // layers a..L-1 in stages s..N-1, every stage within the optimum; next[s][a]
  // the smallest last layer of stage s reaching it.
  std::vector<std::vector<double>> rest(N + 1, std::vector<double>(L + 1, kInfinity));
  std::vector<std::vector<int>> next(N, std::vector<int>(L, -1));
  rest[N][L] = 0;
  for (int s = N - 1; s >= 0; --s)
    for (int a = s; a <= L - N + s; ++a)
      visit(s, a, [&](int b, double v) {
        if (v > optimum || rest[s + 1][b + 1] == kInfinity) return;
        const double distance = target ? (v - *target) * (v - *target) : 0.0;
        const double sum = distance + rest[s + 1][b + 1];
        if (sum < rest[s][a]) {
          rest[s][a] = sum;
          next[s][a] = b;
        }
      });
  std::vector<int> last;
  for (int s = 0, a = 0; s < N; ++s) {
    last.push_back(next[s][a]);
    a = last.back() + 1;
  }
  return last;
}

/// A layout made concrete: the profile with its split layers' parts, the
/// partition over it, and what the partitioner reports.
struct Evaluation {
  Profile profile;
  Partition partition;
  std::vector<StageReport> stages;  ///< memory_bytes, communication_s (charged) and stage_time_s filled
  PipelineTime model;
  std::vector<double> times;  ///< per stage, model.stage_s
  double minibatch = 0;       ///< the objective: model.minibatch_s
  double bottleneck = 0;      ///< model.time_per_micro_batch_s
  int bottleneck_stage = 0;   ///< the first stage whose time is the largest
  bool fits = true;
  int fullest_stage = 0;  ///< the stage with the largest share of its capacity
};

/// Everything one run of the partitioner shares.
struct Context {
  const Chain& chain;
  std::vector<double> capacity;  ///< per stage; +infinity when unlimited
  double T = 0;
  int micro_batches = 1;
  /// may_split[s]: a layer may be split between stages s and s + 1 (both
  /// hosts asynchronous, or PartitionerInput::split_layers).
  std::vector<bool> may_split;
};

Evaluation evaluate(const Context& context, const Layout& layout) {
  const Chain& chain = context.chain;
  const int N = chain.stages();
  Evaluation result;
  std::vector<LayerSplit> splits;
  for (int s = 0; s < N; ++s)
    if (layout.split[s] > 0) splits.push_back({layout.last[s], layout.split[s]});
  result.profile = split_layers(chain.profile(), splits);
  for (int s = 0; s < N; ++s) {
    result.partition.stage_of_layer.insert(result.partition.stage_of_layer.end(), layout.last[s] - layout.first(s) + 1, s);
    result.partition.hosts.push_back({chain.host(s)});
  }
  if (layout.any_split()) result.partition.split_last = layout.split;
  result.stages = report_stages(result.profile, result.partition, chain.platform());
  result.model = bapipe_pipeline_time(pipeline_stages(result.profile, result.partition, chain.platform()), chain.platform(),
                                      chain.schedule(), context.micro_batches);
  result.times = result.model.stage_s;
  result.bottleneck = result.model.time_per_micro_batch_s;
  result.minibatch = result.model.minibatch_s;
  result.bottleneck_stage = static_cast<int>(std::max_element(result.times.begin(), result.times.end()) - result.times.begin());
  const std::vector<StageCost> costs = stage_costs(result.profile, result.partition);
  double fullest = -1;
  for (int s = 0; s < N; ++s) {
    StageReport& stage = result.stages[s];
    stage.memory_bytes = bapipe_memory_demand(costs[s], s, chain.stash_bound(), chain.resident_weight_factor());
    stage.communication_s = result.model.transfer_s[s];
    stage.stage_time_s = result.model.stage_s[s];
    const double share = context.capacity[s] == kInfinity ? 0 : stage.memory_bytes / context.capacity[s];
    if (stage.memory_bytes > context.capacity[s]) result.fits = false;
    if (share > fullest) {
      fullest = share;
      result.fullest_stage = s;
    }
  }
  return result;
}

Layout whole_layers(std::vector<int> last) {
  Layout layout;
  layout.split.assign(last.size(), 0);
  layout.last = std::move(last);
  return layout;
}

std::string stage_name(const Chain& chain, int s) { return fmt::format("stage {} ({})", s, chain.host(s)); }

/// "0-4 | 5-7 (0.4 of 7) | 7 (0.6 of it)-9": each stage's layers.
std::string layout_text(const Layout& layout) {
  std::string text;
  for (std::size_t s = 0; s < layout.last.size(); ++s) {
    const int first = layout.first(static_cast<int>(s)), last = layout.last[s];
    std::string from = std::to_string(first);
    if (s > 0 && layout.split[s - 1] > 0) from += fmt::format(" ({:.6g} of it)", 1 - layout.split[s - 1]);
    std::string range = first == last && !(s > 0 && layout.split[s - 1] > 0) ? from : from + "-" + std::to_string(last);
    if (layout.split[s] > 0) range += fmt::format(" ({:.6g} of {})", layout.split[s], last);
    text += (text.empty() ? "" : " | ") + range;
  }
  return text;
}

/// Lexicographic comparison of stage times sorted from the largest:
/// whether `candidate` is better than `current` by more than `tolerance` at
/// the first place they differ.
bool lower_times(std::vector<double> candidate, std::vector<double> current, double tolerance) {
  std::sort(candidate.rbegin(), candidate.rend());
  std::sort(current.rbegin(), current.rend());
  for (std::size_t i = 0; i < candidate.size(); ++i) {
    if (candidate[i] < current[i] - tolerance) return true;
    if (candidate[i] > current[i] + tolerance) return false;
  }
  return false;
}

// Relative tolerance under which a split's gain counts as none (rounding).
constexpr double kGainTolerance = 1e-9;

/** Step 3: splits boundary layers of `start`. Each round tries, at every
 *  boundary without a split, the last layer of the earlier stage and the
 *  first layer of the later one (a layer already shared is not split again),
 *  with the fraction f that equalises the two stages' compute:
 *    A + f x = B + (1 - f) y,  f = (B + y - A) / (x + y),
 *  A and B the stages' compute without the layer, x and y the layer's time
 *  on each host; only 0 < f < 1 is a split. It keeps the candidate whose
 *  stage times (PipelineTime::stage_s), sorted from the largest, are lexicographically smallest, if they beat the current ones;
 *  ties go to the lower boundary, then to the earlier stage's layer. Rounds
 *  stop when no candidate helps. The splits are kept only if together they
 *  lower the bottleneck. With `keep_fitting`, a candidate that overflows a
 *  host's memory is not taken. Boundaries where context.may_split is false
 *  are left whole. */
Layout split_boundary_layers(const Context& context, const Layout& start, bool keep_fitting, std::vector<std::string>& notes) {
  const Chain& chain = context.chain;
  const int N = chain.stages();
  Layout layout = start;
  Evaluation current = evaluate(context, layout);
  const double initial_minibatch = current.minibatch;
  std::vector<std::string> made;
  for (;;) {
    std::optional<Layout> best_layout;
    std::optional<Evaluation> best;
    int best_layer = 0;
    for (int s = 0; s + 1 < N; ++s) {
      if (layout.split[s] > 0 || !context.may_split[s]) continue;
      for (const bool earlier : {true, false}) {
        const int l = earlier ? layout.last[s] : layout.last[s] + 1;
        // A layer already shared with another neighbour is not split again.
        if (earlier && s > 0 && layout.split[s - 1] > 0 && layout.first(s) == l) continue;
        if (!earlier && layout.split[s + 1] > 0 && layout.last[s + 1] == l) continue;
        const double x = chain.layer_time(s, l), y = chain.layer_time(s + 1, l);
        if (!(x + y > 0)) continue;
        const double A = current.stages[s].compute_s - (earlier ? x : 0);
        const double B = current.stages[s + 1].compute_s - (earlier ? 0 : y);
        const double f = (B + y - A) / (x + y);
        if (!(f > 0 && f < 1)) continue;
        Layout candidate = layout;
        candidate.last[s] = l;
        candidate.split[s] = f;
        Evaluation evaluation = evaluate(context, candidate);
        if (keep_fitting && !evaluation.fits) continue;
        if (best ? lower_times(evaluation.times, best->times, 0)
                 : lower_times(evaluation.times, current.times, kGainTolerance * current.bottleneck)) {
          best_layout = candidate;
          best = std::move(evaluation);
          best_layer = l;
        }
      }
    }
    if (!best) break;
    const int s = [&] {
      for (int b = 0; b + 1 < N; ++b)
        if (best_layout->split[b] != layout.split[b]) return b;
      return 0;
    }();
    const double f = best_layout->split[s];
    made.push_back(fmt::format("layer {} '{}' split {:.6g} / {:.6g} between {} and {}: compute {} and {}", best_layer,
                               chain.profile().layers[best_layer].name, f, 1 - f, stage_name(chain, s),
                               stage_name(chain, s + 1), seconds_text(best->stages[s].compute_s),
                               seconds_text(best->stages[s + 1].compute_s)));
    layout = *best_layout;
    current = std::move(*best);
  }
  if (made.empty()) {
    notes.push_back("intra-layer: no split of a boundary layer lowers the stage times once its communication is counted");
    return start;
  }
  if (!(current.minibatch < initial_minibatch - kGainTolerance * initial_minibatch)) {
    notes.push_back(fmt::format("intra-layer: splits would even out stages but not shorten the predicted mini-batch ({}): none made",
                                seconds_text(initial_minibatch)));
    return start;
  }
  for (const std::string& line : made) notes.push_back("intra-layer: " + line);
  notes.push_back(fmt::format("intra-layer: predicted mini-batch {} -> {}", seconds_text(initial_minibatch), seconds_text(current.minibatch)));
  return layout;
}

std::string memory_summary(const Context& context, const Evaluation& evaluation) {
  std::string text;
  for (std::size_t s = 0; s < evaluation.stages.size(); ++s)
    text += fmt::format("{}{} {}{}", text.empty() ? "" : ", ", context.chain.host(static_cast<int>(s)),
                        bytes_text(evaluation.stages[s].memory_bytes),
                        context.capacity[s] == kInfinity ? " (no limit)" : " of " + bytes_text(context.capacity[s]));
  return text;
}

/// Sentences saying which whole layers moved between `before` and `after`.
std::vector<std::string> moves(const Chain& chain, const Layout& before, const Layout& after) {
  std::vector<std::string> lines;
  for (int s = 0; s + 1 < chain.stages(); ++s) {
    const int from = before.last[s], to = after.last[s];
    if (before.split[s] > 0 && after.split[s] == 0)
      lines.push_back(fmt::format("the split of layer {} between {} and {} is undone{}", from, stage_name(chain, s),
                                  stage_name(chain, s + 1),
                                  to == from ? fmt::format(": layer {} is whole on {}", from, stage_name(chain, s)) : ""));
    const auto layers = [](int a, int b) {
      return a == b ? fmt::format("layer {} moves", a) : fmt::format("layers {}-{} move", a, b);
    };
    if (to < from)
      lines.push_back(fmt::format("{} from {} to {}", layers(to + 1, from), stage_name(chain, s), stage_name(chain, s + 1)));
    else if (to > from)
      lines.push_back(fmt::format("{} from {} to {}", layers(from + 1, to), stage_name(chain, s + 1), stage_name(chain, s)));
  }
  return lines;
}

void check_one_stage_per_host(const Profile& profile, const PlatformSummary& platform) {
  if (profile.layers.size() < platform.hosts.size())
    throw InfeasibleError(fmt::format("partitioner bapipe: profile '{}' has {} layers, fewer than the {} hosts of {} (one stage per host)",
                                 profile.name, profile.layers.size(), platform.hosts.size(), platform.file));
}

/** Moves one boundary of a whole-layer `start` by one layer at a time, the
 *  move that lowers the predicted mini-batch time most (ties: the lower
 *  boundary, then the move to the earlier layer) while it lowers it by more
 *  than rounding; with `keep_fitting`, only to splits that fit memory. */
Layout improve(const Context& context, const Layout& start, bool keep_fitting) {
  const int N = context.chain.stages(), L = context.chain.layers();
  Layout layout = start;
  double current = evaluate(context, layout).minibatch;
  for (;;) {
    std::optional<Layout> best;
    double best_time = current * (1 - kGainTolerance);
    for (int s = 0; s + 1 < N; ++s)
      for (const int step : {-1, 1}) {
        Layout candidate = layout;
        candidate.last[s] += step;
        const int low = s == 0 ? 0 : candidate.last[s - 1] + 1, high = s + 2 == N ? L - 2 : candidate.last[s + 1] - 1;
        if (candidate.last[s] < low || candidate.last[s] > high) continue;
        const Evaluation evaluation = evaluate(context, candidate);
        if (keep_fitting && !evaluation.fits) continue;
        if (evaluation.minibatch < best_time) {
          best_time = evaluation.minibatch;
          best = candidate;
        }
      }
    if (!best) return layout;
    layout = *best;
    current = best_time;
  }
}

/** The shortest predicted mini-batch found among whole-layer splits (with
 *  `keep_fitting`, among those that fit memory). Starts: the split whose
 *  largest local bound (Chain::figures' time) is smallest; the one with the
 *  smallest largest compute among those whose every stage hides its
 *  transfers; for each activation size a (BaPipe's a_th), the one with the
 *  smallest largest compute cutting only where the activation is at most a;
 *  and `start` when given; each as close to T as its criterion allows. The
 *  three with the shortest predicted mini-batch (ties: the earlier start)
 *  are improve()d and the shortest result returned (ties: the earlier);
 *  nothing when no split fits. */
std::optional<Layout> search(const Context& context, const std::optional<Layout>& start, bool keep_fitting) {
  const Chain& chain = context.chain;
  const int N = chain.stages();
  const auto allowed = [&](int s, const Figures& f) { return !keep_fitting || f.memory <= context.capacity[s]; };
  std::vector<Layout> starts;
  const auto add = [&](const std::optional<std::vector<int>>& cuts) {
    if (cuts) starts.push_back(whole_layers(*cuts));
  };
  add(min_max_split(chain, [&](int s, int, int, const Figures& f) { return allowed(s, f) ? f.time : kInfinity; }, context.T));
  add(min_max_split(chain, [&](int s, int, int, const Figures& f) { return allowed(s, f) && f.hidden() ? f.compute : kInfinity; },
                    context.T));
  std::vector<double> sizes;
  for (const Layer& layer : chain.profile().layers) sizes.push_back(layer.output_bytes);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (const double a_th : sizes)
    add(min_max_split(
        chain,
        [&](int s, int, int b, const Figures& f) {
          return !allowed(s, f) || (s + 1 < N && chain.profile().layers[b].output_bytes > a_th) ? kInfinity : f.compute;
        },
        context.T));
  if (start && (!keep_fitting || evaluate(context, *start).fits)) starts.push_back(*start);
  if (starts.empty()) return std::nullopt;
  std::vector<std::pair<double, std::size_t>> ranked;
  for (std::size_t i = 0; i < starts.size(); ++i) ranked.push_back({evaluate(context, starts[i]).minibatch, i});
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::optional<Layout> best;
  double best_time = kInfinity;
  for (std::size_t k = 0; k < std::min<std::size_t>(3, ranked.size()); ++k) {
    const Layout layout = improve(context, starts[ranked[k].second], keep_fitting);
    const double time = evaluate(context, layout).minibatch;
    if (time < best_time) {
      best = layout;
      best_time = time;
    }
  }
  return best;
}

/** Step 2's coarse-grained partition, transfers counted: search()'s split
 *  from `start`; nothing when it is not shorter than `start`'s. */
std::optional<Layout> coarse_grained(const Context& context, const Layout& start, std::vector<std::string>& notes) {
  const double before = evaluate(context, start).minibatch;
  const std::optional<Layout> best = search(context, start, false);
  const double after = evaluate(context, *best).minibatch;
  if (!(after < before * (1 - kGainTolerance))) return std::nullopt;
  notes.push_back(fmt::format("coarse-grained: the shortest predicted mini-batch with transfers counted: {} ({} -> {})",
                              layout_text(*best), seconds_text(before), seconds_text(after)));
  return best;
}

/** Step 4's fine-tuning: search()'s split among those where every host's
 *  demand fits its capacity. Nothing when no whole-layer split fits. */
std::optional<Layout> fine_tune(const Context& context, std::vector<std::string>& notes) {
  const std::optional<Layout> layout = search(context, std::nullopt, true);
  if (layout)
    notes.push_back(fmt::format("fine-tuning: the shortest predicted mini-batch that fits: {} ({})", layout_text(*layout),
                                seconds_text(evaluate(context, *layout).minibatch)));
  return layout;
}

/// The InputError for a platform on which no whole-layer split fits: the
/// split with the smallest largest share of a host's capacity, and its
/// fullest host.
InfeasibleError nothing_fits(const Context& context, const std::string& bound_text) {
  const Chain& chain = context.chain;
  const auto share = [&](int s, int, int, const Figures& f) {
    return context.capacity[s] == kInfinity ? 0.0 : f.memory / context.capacity[s];
  };
  const Layout closest = whole_layers(*min_max_split(chain, share, std::nullopt));
  const Evaluation best = evaluate(context, closest);
  const int worst = best.fullest_stage;
  return InfeasibleError(fmt::format(
      "partitioner bapipe: no partition of profile '{}' into whole layers fits the memory of {} ({}): the best found, "
      "layers {}, needs {} on {} (stage {}), which has {}",
      chain.profile().name, chain.platform().file, bound_text, layout_text(closest),
      bytes_text(best.stages[worst].memory_bytes, true), chain.host(worst), worst, bytes_text(context.capacity[worst], true)));
}

}  // namespace

double bapipe_ideal_stage_time(const Profile& profile, const PlatformSummary& platform) {
  if (platform.hosts.empty()) throw InputError(fmt::format("{}: expected at least one host, found none", platform.file));
  double rate = 0;
  for (const HostInfo& host : platform.hosts) {
    double whole = 0;
    for (const Layer& layer : profile.layers) {
      const LayerTimes times = layer_times_on(layer, host);
      whole += times.forward_s + times.backward_s;
    }
    if (whole <= 0) return 0;
    rate += 1 / whole;
  }
  return 1 / rate;
}

std::vector<int> bapipe_stash_bound(const std::string& schedule, int stages, int micro_batches) {
  const ScheduleInfo& info = schedule_info(schedule);
  if (!info.flushed || info.single_stage)
    throw InputError(fmt::format("partitioner bapipe: plans pipelines that flush every mini-batch (gpipe, 1f1b-sno, 1f1b-so, "
                                 "1f1b-as, fbp-as); found schedule '{}'",
                                 schedule));
  std::vector<int> bound(stages);
  const std::vector<int> replicas(stages, 1);
  for (int s = 0; s < stages; ++s)
    bound[s] = schedule == "fbp-as" ? std::min(2 * warmup_forwards("1f1b-sno", replicas, s, micro_batches), micro_batches)
                                    : warmup_forwards(schedule, replicas, s, micro_batches);
  return bound;
}

double bapipe_memory_demand(const StageCost& stage, int stage_index, const std::vector<int>& stash_bound,
                            double resident_weight_factor) {
  const double k = stash_bound[stage_index];
  const double weights = resident_weight_factor * stage.weight_bytes, a = stage.stash_bytes, o = stage.output_bytes;
  if (stage_index == 0) return weights + k * (a + o);
  const double i = stage.input_bytes, previous = stash_bound[stage_index - 1];
  const double S = std::min(k, previous);
  if (i >= o) return weights + S * a + (previous - S + 1) * i + (S - 1) * o;
  return weights + S * a + (previous - S) * i + S * o;
}

std::vector<int> bapipe_inter_layer(const Profile& profile, const PlatformSummary& platform) {
  const double T = bapipe_ideal_stage_time(profile, platform);
  check_one_stage_per_host(profile, platform);
  const Chain chain(profile, platform, "1f1b-sno", 1, std::vector<int>(platform.hosts.size(), 1));
  return *min_max_split(chain, [](int, int, int, const Figures& f) { return f.compute; }, T);
}

std::vector<PipelineStage> pipeline_stages(const Profile& profile, const Partition& partition, const PlatformSummary& platform) {
  const std::vector<StageCost> costs = stage_costs(profile, partition);
  std::vector<PipelineStage> stages(partition.num_stages());
  for (int s = 0; s < partition.num_stages(); ++s) {
    PipelineStage& stage = stages[s];
    stage.host = platform.host_index(partition.hosts[s].front());
    const HostInfo& host = platform.hosts[stage.host];
    for (int l = costs[s].first_layer; l <= costs[s].last_layer; ++l) {
      const LayerTimes times = layer_times_on(profile.layers[l], host);
      stage.forward_s += times.forward_s;
      stage.backward_s += times.backward_s;
    }
    stage.forward_s += host.action_overhead_s;
    stage.backward_s += host.action_overhead_s;
    stage.output_bytes = s + 1 < partition.num_stages() ? costs[s].output_bytes : 0;
  }
  return stages;
}

namespace {

/** The end of the last action of one mini-batch of `program` on a straight
 *  pipeline, by discrete events: a stream starts its next action as soon as
 *  its inputs have arrived (F(s,m): the output of F(s-1,m); B(s,m): F(s,m),
 *  R(s,m) when the program has it, and the gradient of B(s+1,m)) and its
 *  extra dependencies have ended. A transfer is requested when its action
 *  ends (synchronous host) or starts (asynchronous: it then arrives at
 *  max(end, start + its time)); each link of its route serves requests in
 *  order, one at a time, for bytes / bandwidth (a FATPIPE link, or a route
 *  without link information, in parallel), and it arrives the route's
 *  latency after. With `transfers` false every transfer takes 0. */
double minibatch_makespan(const Program& program, const std::vector<PipelineStage>& stages, const PlatformSummary& platform,
                          bool transfers) {
  const int N = static_cast<int>(stages.size()), M = program.micro_batches;
  const auto slot = [&](ActionKind kind, int stage, int micro_batch) {
    return (static_cast<int>(kind) * N + stage) * M + micro_batch;
  };
  const double unset = std::numeric_limits<double>::quiet_NaN();
  // end[] of actions; arrived[] of their outputs at the consumer (the
  // activation of F(s,m) at s+1, the gradient of B(s,m) at s-1).
  std::vector<double> end(3 * N * M, unset), arrived(3 * N * M, unset);
  std::vector<bool> present(3 * N * M, false);
  for (const DeviceProgram& device : program.devices)
    for (const Stream& stream : device.streams)
      for (const Action& action : stream.actions) present[slot(action.kind, action.stage, action.micro_batch)] = true;
  std::map<int, std::vector<int>> extra;
  for (const Dependency& dependency : program.extra_dependencies)
    extra[slot(dependency.after.kind, dependency.after.stage, dependency.after.micro_batch)].push_back(
        slot(dependency.before.kind, dependency.before.stage, dependency.before.micro_batch));
  const auto done = [&](std::vector<double>& times, int at, double now) { return !std::isnan(times[at]) && times[at] <= now; };
  const auto ready = [&](const Action& action, double now) {
    const int s = action.stage, m = action.micro_batch;
    if (action.kind == ActionKind::Forward) {
      if (s > 0 && !done(arrived, slot(ActionKind::Forward, s - 1, m), now)) return false;
    } else {
      if (!done(end, slot(ActionKind::Forward, s, m), now)) return false;
      if (action.kind == ActionKind::Backward) {
        const int r = slot(ActionKind::Recompute, s, m);
        if (present[r] && !done(end, r, now)) return false;
        if (s + 1 < N && !done(arrived, slot(ActionKind::Backward, s + 1, m), now)) return false;
      }
    }
    if (const auto befores = extra.find(slot(action.kind, s, m)); befores != extra.end())
      for (const int before : befores->second)
        if (!done(end, before, now)) return false;
    return true;
  };
  std::map<int, double> link_free;
  // The arrival of `bytes` sent from stage `from` to `to`, requested at `now`.
  const auto send = [&](int from, int to, double bytes, double now) {
    const Transfer transfer{stages[from].host, stages[to].host, bytes};
    if (!transfers || !moves_bytes(transfer)) return now;
    if (!(platform.route_bandwidth_Bps[transfer.from][transfer.to] > 0))
      throw InputError(fmt::format("{}: no route from {} to {}", platform.file, platform.hosts[transfer.from].name,
                                   platform.hosts[transfer.to].name));
    const std::vector<int> links = route_links(platform, transfer.from, transfer.to);
    double start = now, busy = 0;
    for (const int link : links) {
      const LinkInfo info = link_info(platform, link);
      busy = std::max(busy, bytes / info.bandwidth_Bps);
      if (info.shared && !platform.route_links.empty()) start = std::max(start, link_free[link]);
    }
    for (const int link : links)
      if (link_info(platform, link).shared && !platform.route_links.empty()) link_free[link] = start + busy;
    return start + busy + platform.route_latency_s[transfer.from][transfer.to];
  };
  struct Running {
    std::size_t stream;
    int slot;
    double start;
  };
  std::vector<std::pair<const Stream*, int>> streams;
  for (const DeviceProgram& device : program.devices)
    for (const Stream& stream : device.streams) streams.push_back({&stream, device.stages.front()});
  std::vector<std::size_t> next(streams.size(), 0);
  std::vector<bool> busy(streams.size(), false);
  // Events: (time, sequence) -> what ends then; arrivals only wake streams.
  std::map<std::pair<double, long>, std::optional<Running>> events;
  long sequence = 0;
  double now = 0, makespan = 0;
  for (;;) {
    for (std::size_t i = 0; i < streams.size(); ++i) {
      if (busy[i] || next[i] >= streams[i].first->actions.size()) continue;
      const Action& action = streams[i].first->actions[next[i]];
      if (!ready(action, now)) continue;
      const PipelineStage& stage = stages[action.stage];
      const double duration = action.kind == ActionKind::Backward ? stage.backward_s : stage.forward_s;
      const int here = slot(action.kind, action.stage, action.micro_batch);
      busy[i] = true;
      ++next[i];
      events.emplace(std::make_pair(now + duration, sequence++), Running{i, here, now});
      if (platform.hosts[stage.host].execution == Execution::Async) {
        // Cut-through: the output streams out from the start.
        const int s = action.stage;
        if (action.kind == ActionKind::Forward && s + 1 < N)
          arrived[here] = std::max(now + duration, send(s, s + 1, stage.output_bytes, now));
        if (action.kind == ActionKind::Backward && s > 0)
          arrived[here] = std::max(now + duration, send(s, s - 1, stages[s - 1].output_bytes, now));
        if (!std::isnan(arrived[here])) events.emplace(std::make_pair(arrived[here], sequence++), std::nullopt);
      }
    }
    if (events.empty()) break;
    const auto first = events.begin();
    now = first->first.first;
    const std::optional<Running> ended = first->second;
    events.erase(first);
    if (!ended) continue;
    busy[ended->stream] = false;
    end[ended->slot] = now;
    makespan = std::max(makespan, now);
    const Action& action = streams[ended->stream].first->actions[next[ended->stream] - 1];
    const int s = action.stage;
    if (platform.hosts[stages[s].host].execution == Execution::Sync) {
      if (action.kind == ActionKind::Forward && s + 1 < N) arrived[ended->slot] = send(s, s + 1, stages[s].output_bytes, now);
      if (action.kind == ActionKind::Backward && s > 0) arrived[ended->slot] = send(s, s - 1, stages[s - 1].output_bytes, now);
      if (!std::isnan(arrived[ended->slot]) && arrived[ended->slot] > now)
        events.emplace(std::make_pair(arrived[ended->slot], sequence++), std::nullopt);
    }
  }
  for (std::size_t i = 0; i < streams.size(); ++i)
    if (next[i] < streams[i].first->actions.size() || busy[i])
      throw std::logic_error("bapipe cost model: the schedule's program deadlocks");
  return makespan;
}

}  // namespace

PipelineTime bapipe_pipeline_time(const std::vector<PipelineStage>& stages, const PlatformSummary& platform,
                                  const std::string& schedule, int micro_batches) {
  const int N = static_cast<int>(stages.size());
  if (N == 0) throw InputError("bapipe cost model: no stages");
  const std::vector<int> k = bapipe_stash_bound(schedule, N, micro_batches);
  const auto host_name = [&](int s) { return platform.hosts[stages[s].host].name; };
  const auto stage_text = [&](int s) { return fmt::format("stage {} ({})", s, host_name(s)); };
  // Boundary b: the activation from stage b to b + 1 and its gradient back.
  std::vector<Transfer> forwards, backwards;
  for (int b = 0; b + 1 < N; ++b) {
    forwards.push_back({stages[b].host, stages[b + 1].host, stages[b].output_bytes});
    backwards.push_back({stages[b + 1].host, stages[b].host, stages[b].output_bytes});
  }
  std::vector<Transfer> all = forwards;
  all.insert(all.end(), backwards.begin(), backwards.end());
  const bool gpipe = schedule == "gpipe";
  const std::map<int, double> forward_loads = link_loads(platform, forwards), backward_loads = link_loads(platform, backwards),
                              loads = link_loads(platform, all);
  std::vector<double> forward_time(N, 0), backward_time(N, 0);  // per boundary
  for (int b = 0; b + 1 < N; ++b) {
    forward_time[b] = charged_time(platform, forwards[b], gpipe ? forward_loads : loads);
    backward_time[b] = charged_time(platform, backwards[b], gpipe ? backward_loads : loads);
  }
  ScheduleOptions options;
  options.num_stages = N;
  options.micro_batches = micro_batches;
  const Program program = generate_schedule(schedule, options);
  const double minibatch = minibatch_makespan(program, stages, platform, true);
  const double without = minibatch_makespan(program, stages, platform, false);
  // The transfers with stage s at one end.
  const auto touching = [&](int s, const std::vector<Transfer>& of) {
    std::vector<Transfer> mine;
    for (int b = 0; b + 1 < N; ++b)
      if (b == s || b + 1 == s) mine.push_back(of[b]);
    return mine;
  };

  PipelineTime result;
  result.minibatch_s = minibatch;
  result.minibatch_without_transfers_s = without;
  result.stage_s.assign(N, 0);
  result.transfer_s.assign(N, 0);
  for (int s = 0; s < N; ++s) {
    const double compute = stages[s].forward_s + stages[s].backward_s;
    if (compute > result.compute_s) {
      result.compute_s = compute;
      result.compute_stage = s;
    }
    if (s + 1 < N) result.transfer_s[s] = std::max(forward_time[s], backward_time[s]);
    if (s > 0) result.transfer_s[s] = std::max({result.transfer_s[s], forward_time[s - 1], backward_time[s - 1]});
  }
  // A bound replaces the current one only when larger beyond rounding, so
  // that equal bounds name the compute.
  const auto larger = [](double candidate, double current) { return candidate > current * (1 + 1e-9) + 1e-300; };
  result.time_per_micro_batch_s = result.compute_s;
  result.bound = fmt::format("the compute of {}, {}", stage_text(result.compute_stage), seconds_text(result.compute_s));

  if (gpipe) {
    // Each phase paced by its slowest stage or its busiest link.
    const auto phase = [&](bool forward) {
      double pace = 0;
      std::string what;
      for (int s = 0; s < N; ++s) {
        const double t = forward ? stages[s].forward_s : stages[s].backward_s;
        if (larger(t, pace) || what.empty()) {
          pace = std::max(pace, t);
          what = fmt::format("{} {}", stage_text(s), forward ? "forward" : "backward");
        }
      }
      int link = -1;
      const double busiest = busiest_link(platform, forward ? forwards : backwards, forward ? forward_loads : backward_loads, &link);
      if (larger(busiest, pace)) {
        pace = busiest;
        what = fmt::format("link {}", link_info(platform, link).name);
      }
      return std::make_pair(pace, what);
    };
    const auto [forward_pace, forward_what] = phase(true);
    const auto [backward_pace, backward_what] = phase(false);
    const double time = forward_pace + backward_pace;
    if (larger(time, result.compute_s)) {
      result.time_per_micro_batch_s = time;
      result.bound = fmt::format("gpipe's phases: forwards paced by {} ({}), backwards by {} ({})", forward_what,
                                 seconds_text(forward_pace), backward_what, seconds_text(backward_pace));
    }
    for (int s = 0; s < N; ++s) {
      const std::vector<Transfer> mine_forward = touching(s, forwards), mine_backward = touching(s, backwards);
      result.stage_s[s] = std::max(stages[s].forward_s, busiest_link(platform, mine_forward, forward_loads)) +
                          std::max(stages[s].backward_s, busiest_link(platform, mine_backward, backward_loads));
    }
    return result;
  }

  // 1F1B family: links, then every cycle s..t.
  for (int s = 0; s < N; ++s) {
    int link = -1;
    const std::vector<Transfer> mine = touching(s, all);
    const double busiest = busiest_link(platform, mine, loads, &link);
    result.stage_s[s] = busiest;
    if (larger(busiest, result.time_per_micro_batch_s)) {
      result.time_per_micro_batch_s = busiest;
      result.bound = fmt::format("link {}, which carries {} of transfers per micro-batch", link_info(platform, link).name,
                                 seconds_text(busiest));
    }
  }
  // f[u]: stage u's forward with its activation's way to u + 1; g[u]: its
  // backward with its gradient's way to u - 1.
  std::vector<double> f(N), g(N);
  for (int u = 0; u < N; ++u) {
    const bool async = platform.hosts[stages[u].host].execution == Execution::Async;
    const auto with = [&](double compute, double transfer) { return async ? std::max(compute, transfer) : compute + transfer; };
    f[u] = u + 1 < N ? with(stages[u].forward_s, forward_time[u]) : stages[u].forward_s;
    g[u] = u > 0 ? with(stages[u].backward_s, backward_time[u - 1]) : stages[u].backward_s;
  }
  for (int s = 0; s < N; ++s) {
    double path = 0;  // sum_{u=s}^{t-1} f[u] + sum_{u=s+1}^{t} g[u]
    // Stage s runs a forward after a backward only when k_s < M: otherwise
    // no cycle starts there.
    for (int t = s; t < (k[s] < micro_batches ? N : s + 1); ++t) {
      if (t > s) path += f[t - 1] + g[t];
      const double weight = path + stages[t].forward_s + stages[s].backward_s;
      const int in_flight = k[s] - k[t] + 1;
      const double cycle = weight / in_flight;
      for (int u = s; u <= t; ++u) result.stage_s[u] = std::max(result.stage_s[u], cycle);
      if (t > s && larger(cycle, result.time_per_micro_batch_s)) {
        result.time_per_micro_batch_s = cycle;
        result.bound = fmt::format("the cycle through stages {}-{} ({}-{}): forwards, backwards and transfers {} over {} "
                                   "micro-batch{} in flight",
                                   s, t, host_name(s), host_name(t), seconds_text(weight), in_flight, in_flight == 1 ? "" : "es");
      }
    }
  }
  return result;
}

PartitionerOutput bapipe_partition(const PartitionerInput& input) {
  const Profile& profile = input.profile;
  const PlatformSummary& platform = input.platform;
  const int N = static_cast<int>(platform.hosts.size());
  const double T = bapipe_ideal_stage_time(profile, platform);
  check_one_stage_per_host(profile, platform);
  // BaPipe's default for the devices at hand: 1F1B-SO on GPUs, 1F1B-AS when
  // every host computes asynchronously (FPGAs).
  const bool all_async = std::all_of(platform.hosts.begin(), platform.hosts.end(),
                                     [](const HostInfo& host) { return host.execution == Execution::Async; });
  const std::string schedule = !input.schedule.empty() ? input.schedule : all_async ? "1f1b-as" : "1f1b-so";
  if (input.micro_batches < 0)
    throw InputError(fmt::format("partitioner bapipe: micro-batches: expected an integer >= 1, found {}", input.micro_batches));
  const int M = input.micro_batches > 0 ? input.micro_batches : N;
  const std::vector<int> stash_bound = bapipe_stash_bound(schedule, N, M);
  std::vector<std::string> notes = check_schedule_for_hosts(schedule, platform.hosts);
  if (input.memory_limit_bytes && !(*input.memory_limit_bytes > 0))
    throw InputError(fmt::format("partitioner bapipe: memory limit: expected bytes > 0, found {}", *input.memory_limit_bytes));

  const Chain chain(profile, platform, schedule, M, stash_bound, resident_weight_factor(input.dtype, input.optimizer, input.gradient_dtype));
  Context context{chain, std::vector<double>(N, kInfinity), T, M, std::vector<bool>(N > 0 ? N - 1 : 0, false)};
  for (int s = 0; s < N; ++s) {
    // What the stage may use: the capacity less the host's reserve.
    if (input.memory_limit_bytes)
      context.capacity[s] = *input.memory_limit_bytes - platform.hosts[s].memory_reserve_of(*input.memory_limit_bytes);
    else if (platform.hosts[s].memory_bytes)
      context.capacity[s] = *platform.hosts[s].memory_bytes - platform.hosts[s].memory_reserve_of(*platform.hosts[s].memory_bytes);
  }
  for (int s = 0; s + 1 < N; ++s)
    context.may_split[s] = input.split_layers || (platform.hosts[s].execution == Execution::Async &&
                                                  platform.hosts[s + 1].execution == Execution::Async);
  std::string whole_model;
  for (int s = 0; s < N; ++s) {
    double whole = 0;
    for (int l = 0; l < chain.layers(); ++l) whole += chain.layer_time(s, l);
    whole_model += fmt::format("{}{} {}", whole_model.empty() ? "" : ", ", chain.host(s), seconds_text(whole));
  }
  notes.push_back(fmt::format("T = 1 / sum(1 / T_n) = {}, T_n the whole model's forward + backward per micro-batch: {}",
                              seconds_text(T), whole_model));

  // Step 1: inter-layer.
  const Layout inter = whole_layers(*min_max_split(chain, [](int, int, int, const Figures& f) { return f.compute; }, T));
  const Evaluation inter_eval = evaluate(context, inter);
  double inter_bottleneck = 0;
  for (const StageReport& stage : inter_eval.stages) inter_bottleneck = std::max(inter_bottleneck, stage.compute_s);
  notes.push_back(fmt::format("inter-layer: {} (the smallest largest compute, {}, then every stage as close to T as that allows)",
                              layout_text(inter), seconds_text(inter_bottleneck)));

  // Step 2: transfers counted. The coarse-grained split replaces the
  // inter-layer one when its predicted mini-batch is shorter (step 3
  // skipped); otherwise the inter-layer one stays and may be split.
  const auto transfers_text = [&](const Evaluation& evaluation) {
    const PipelineTime& model = evaluation.model;
    return fmt::format("predicted mini-batch {} ({} without transfers); steady state {} per micro-batch, {}", seconds_text(model.minibatch_s),
                       seconds_text(model.minibatch_without_transfers_s), seconds_text(model.time_per_micro_batch_s),
                       model.communication_hidden() ? "the slowest compute (communication hidden)"
                                                    : "set by " + model.bound + ", above the slowest compute (" +
                                                          seconds_text(model.compute_s) + ")");
  };
  notes.push_back(fmt::format("transfers, {} with M = {}: inter-layer: {}", schedule, M, transfers_text(inter_eval)));
  Layout layout = inter;
  // Only transfers trigger it: without them the inter-layer split stays.
  const bool transfers_cost = !inter_eval.model.communication_hidden() ||
                              inter_eval.minibatch > inter_eval.model.minibatch_without_transfers_s * (1 + kGainTolerance);
  const std::optional<Layout> coarse_layout = transfers_cost ? coarse_grained(context, inter, notes) : std::nullopt;
  const bool coarse = coarse_layout.has_value();
  if (coarse) {
    layout = *coarse_layout;
  } else {
    notes.push_back(transfers_cost ? "coarse-grained: no whole-layer split predicts a shorter mini-batch: the inter-layer split stays"
                                   : "coarse-grained: not needed: transfers add nothing to the predicted mini-batch");
    // Step 3: intra-layer, where allowed; a plan that fits is kept fitting.
    if (std::find(context.may_split.begin(), context.may_split.end(), true) != context.may_split.end())
      layout = split_boundary_layers(context, inter, inter_eval.fits, notes);
    else if (N > 1)
      notes.push_back("intra-layer: not tried: layers stay whole between synchronous hosts (GPUs); --split-layers allows splits");
  }

  // Step 4: memory.
  Evaluation result = evaluate(context, layout);
  std::string stashes;
  for (const int k : stash_bound) stashes += fmt::format("{}{}", stashes.empty() ? "" : "/", k);
  // fp32 SGD keeps weights and gradients; any other state says its bytes per parameter.
  const std::string state = chain.resident_weight_factor() == 2 && (input.dtype.empty() || input.dtype == "fp32")
                                ? "SGD"
                                : fmt::format("{} {}, {} bytes per parameter", input.dtype.empty() ? "fp32" : input.dtype,
                                              input.optimizer, bytes_per_parameter(input.dtype, input.optimizer, input.gradient_dtype).total());
  const std::string bound_text = fmt::format("{} with M = {} (bound: weights + gradients{}, up to {} stashed micro-batches, "
                                             "receive buffers; {})",
                                             schedule, M, state == "SGD" ? "" : " + optimizer state", stashes, state);
  if (!result.fits) {
    const int s = result.fullest_stage;
    notes.push_back(fmt::format("memory, {}: {} needs {}, more than its {}: fine-tuning", bound_text, chain.host(s),
                                bytes_text(result.stages[s].memory_bytes, true), bytes_text(context.capacity[s], true)));
    const std::optional<Layout> tuned = fine_tune(context, notes);
    if (!tuned) throw nothing_fits(context, bound_text);
    for (const std::string& line : moves(chain, layout, *tuned)) notes.push_back("fine-tuning: " + line);
    layout = *tuned;
    if (!coarse && std::find(context.may_split.begin(), context.may_split.end(), true) != context.may_split.end())
      layout = split_boundary_layers(context, *tuned, true, notes);
    result = evaluate(context, layout);
  }
  notes.push_back(fmt::format("memory, {}: fits: {}", bound_text, memory_summary(context, result)));

  PartitionerOutput output;
  notes.push_back(fmt::format("chosen: {}", transfers_text(result)));
  notes.push_back(fmt::format(
      "cost model: each transfer takes latency + bytes / bandwidth with every transfer of a micro-batch that shares a link "
      "with it{}; left out: the flush's optimizer step and SimGrid's default network model's corrections (a few percent "
      "slower than --network analytic)",
      platform.route_links.empty() ? " (no link information: each route a link of its own)" : ""));
  output.predicted_minibatch_s = result.minibatch;
  output.predicted_for = fmt::format("{} with M = {}", schedule, M);
  output.profile = std::move(result.profile);
  output.partition = std::move(result.partition);
  output.stages = std::move(result.stages);
  output.time_per_stage_s = result.bottleneck;
  output.bottleneck_stage = result.bottleneck_stage;
  output.notes = std::move(notes);
  return output;
}

}  // namespace pipegrid
