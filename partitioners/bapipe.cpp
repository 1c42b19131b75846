// BaPipe's balanced partition: inter-layer dynamic programming toward T, the
// communication check with its coarse-grained fallback, intra-layer splits
// of boundary layers, and memory fine-tuning (contracts in bapipe.hpp).

#include "partitioners/bapipe.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
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
  double compute = 0;        ///< forward + backward on the stage's host
  double communication = 0;  ///< the larger of its output activation and input gradient transfers
  double memory = 0;         ///< bapipe_memory_demand
  double time() const { return std::max(compute, communication); }
};

/// Running sums over a stage's layers, in layer order (as stage_costs() and
/// report_stages() sum them, so figures here equal the final report's).
struct RangeSums {
  double compute = 0, weight = 0, outputs = 0;
};

/// The unsplit chain of layers on the platform: stage s on hosts[s].
class Chain {
 public:
  Chain(const Profile& profile, const PlatformSummary& platform, std::vector<int> stash_bound)
      : profile_(profile), platform_(platform), stash_bound_(std::move(stash_bound)) {
    const int stages = this->stages(), layers = this->layers();
    time_.assign(stages, std::vector<double>(layers));
    for (int s = 0; s < stages; ++s)
      for (int l = 0; l < layers; ++l) {
        const LayerTimes times = layer_times_on(profile.layers[l], platform.hosts[s]);
        time_[s][l] = times.forward_s + times.backward_s;
      }
  }
  int stages() const { return static_cast<int>(platform_.hosts.size()); }
  int layers() const { return static_cast<int>(profile_.layers.size()); }
  const Profile& profile() const { return profile_; }
  const PlatformSummary& platform() const { return platform_; }
  const std::vector<int>& stash_bound() const { return stash_bound_; }
  double layer_time(int s, int l) const { return time_[s][l]; }
  const std::string& host(int s) const { return platform_.hosts[s].name; }

  /// Bytes entering layer l (the previous layer's output, the model's input).
  double input_of(int l) const { return l == 0 ? profile_.input_bytes : profile_.layers[l - 1].output_bytes; }

  /// report_stages()'s transfer time from stage `from`'s host to stage `to`'s.
  double transfer(int from, int to, double bytes) const {
    if (bytes <= 0) return 0;
    const double bandwidth = platform_.route_bandwidth_Bps[from][to];
    if (bandwidth <= 0) throw InputError(fmt::format("{}: no route from {} to {}", platform_.file, host(from), host(to)));
    return platform_.route_latency_s[from][to] + bytes / bandwidth;
  }

  /// Whether a cut after layer l between stages s and s + 1 carries the
  /// activation forward and its gradient back within `limit` seconds each.
  bool cut_within(int s, int l, double limit) const {
    const double bytes = profile_.layers[l].output_bytes;
    return transfer(s, s + 1, bytes) <= limit && transfer(s + 1, s, bytes) <= limit;
  }

  void extend(RangeSums& sums, int s, int l) const {
    sums.compute += time_[s][l];
    sums.weight += profile_.layers[l].parameter_bytes;
    sums.outputs += profile_.layers[l].stashed_bytes();
  }

  /// Figures of stage s holding whole layers a..b, whose sums are `sums`.
  Figures figures(int s, int a, int b, const RangeSums& sums) const {
    const bool last_stage = s + 1 == stages();
    StageCost cost;
    cost.first_layer = a;
    cost.last_layer = b;
    cost.weight_bytes = sums.weight;
    cost.input_bytes = input_of(a);
    cost.output_bytes = last_stage ? 0 : profile_.layers[b].output_bytes;
    cost.stash_bytes = sums.outputs + cost.input_bytes;
    Figures figures;
    figures.compute = sums.compute;
    if (!last_stage) figures.communication = transfer(s, s + 1, cost.output_bytes);
    if (s > 0) figures.communication = std::max(figures.communication, transfer(s, s - 1, cost.input_bytes));
    figures.memory = bapipe_memory_demand(cost, s, stash_bound_);
    return figures;
  }

 private:
  const Profile& profile_;
  const PlatformSummary& platform_;
  std::vector<int> stash_bound_;
  std::vector<std::vector<double>> time_;  ///< time_[s][l]: forward + backward of layer l on stage s's host
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
  std::vector<StageReport> stages;  ///< memory_bytes filled
  std::vector<double> times;        ///< per stage, max(compute, communication)
  double bottleneck = 0;
  int bottleneck_stage = 0;
  bool fits = true;
  int fullest_stage = 0;  ///< the stage with the largest share of its capacity
};

/// Everything one run of the partitioner shares.
struct Context {
  const Chain& chain;
  std::vector<double> capacity;  ///< per stage; +infinity when unlimited
  double T = 0;
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
  const std::vector<StageCost> costs = stage_costs(result.profile, result.partition);
  double fullest = -1;
  for (int s = 0; s < N; ++s) {
    StageReport& stage = result.stages[s];
    stage.memory_bytes = bapipe_memory_demand(costs[s], s, chain.stash_bound());
    const double time = std::max(stage.compute_s, stage.communication_s);
    result.times.push_back(time);
    if (time > result.bottleneck) {
      result.bottleneck = time;
      result.bottleneck_stage = s;
    }
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
 *  stage times (compute or transfer, whichever is larger), sorted from the
 *  largest, are lexicographically smallest, if they beat the current ones;
 *  ties go to the lower boundary, then to the earlier stage's layer. Rounds
 *  stop when no candidate helps. The splits are kept only if together they
 *  lower the bottleneck. With `keep_fitting`, a candidate that overflows a
 *  host's memory is not taken. */
Layout split_boundary_layers(const Context& context, const Layout& start, bool keep_fitting, std::vector<std::string>& notes) {
  const Chain& chain = context.chain;
  const int N = chain.stages();
  Layout layout = start;
  Evaluation current = evaluate(context, layout);
  const double initial_bottleneck = current.bottleneck;
  std::vector<std::string> made;
  for (;;) {
    std::optional<Layout> best_layout;
    std::optional<Evaluation> best;
    int best_layer = 0;
    for (int s = 0; s + 1 < N; ++s) {
      if (layout.split[s] > 0) continue;
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
    notes.push_back("intra-layer: no split of a boundary layer lowers the bottleneck once its communication is counted");
    return start;
  }
  if (!(current.bottleneck < initial_bottleneck - kGainTolerance * initial_bottleneck)) {
    notes.push_back(fmt::format("intra-layer: splits would even out stages but not lower the bottleneck ({}): none made",
                                seconds_text(initial_bottleneck)));
    return start;
  }
  for (const std::string& line : made) notes.push_back("intra-layer: " + line);
  notes.push_back(fmt::format("intra-layer: bottleneck {} -> {}", seconds_text(initial_bottleneck), seconds_text(current.bottleneck)));
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
    throw InputError(fmt::format("partitioner bapipe: profile '{}' has {} layers, fewer than the {} hosts of {} (one stage per host)",
                                 profile.name, profile.layers.size(), platform.hosts.size(), platform.file));
}

/** Step 2's coarse-grained partition: cuts only where the activation and
 *  its gradient each cross the link within T (a_th = (T - latency) x
 *  bandwidth bytes), re-balanced as in step 1; when no split into N stages
 *  has such cuts only, the smallest bottleneck counting transfers. */
Layout coarse_grained(const Context& context, std::vector<std::string>& notes) {
  const Chain& chain = context.chain;
  const PlatformSummary& platform = chain.platform();
  const int N = chain.stages();
  const double T = context.T;
  std::string thresholds;
  for (int s = 0; s + 1 < N; ++s) {
    const double bandwidth = std::min(platform.route_bandwidth_Bps[s][s + 1], platform.route_bandwidth_Bps[s + 1][s]);
    const double latency = std::max(platform.route_latency_s[s][s + 1], platform.route_latency_s[s + 1][s]);
    thresholds += fmt::format("{}{} | {} {}", thresholds.empty() ? "" : ", ", chain.host(s), chain.host(s + 1),
                              bytes_text(std::max(0.0, (T - latency) * bandwidth)));
  }
  if (thresholds.empty()) thresholds = "no cut";
  const auto compute_between_thresholds = [&](int s, int, int b, const Figures& f) {
    return s + 1 < N && !chain.cut_within(s, b, T) ? kInfinity : f.compute;
  };
  if (const auto cuts = min_max_split(chain, compute_between_thresholds, T)) {
    const Layout layout = whole_layers(*cuts);
    notes.push_back(fmt::format("coarse-grained: cuts only where the activation and its gradient cross within T (a_th: {}): {}",
                                thresholds, layout_text(layout)));
    return layout;
  }
  const Layout layout = whole_layers(*min_max_split(chain, [](int, int, int, const Figures& f) { return f.time(); }, T));
  notes.push_back(fmt::format("coarse-grained: no {} stages cut only where the activation crosses within T (a_th: {}); "
                              "instead the smallest bottleneck counting transfers: {}",
                              N, thresholds, layout_text(layout)));
  return layout;
}

/** Step 4's fine-tuning: the whole-layer split with the smallest bottleneck
 *  (compute or transfer, whichever is larger) among those where every host's
 *  demand fits its capacity, tried first with every transfer within its
 *  stage's compute (and, after a coarse-grained partition, cuts within
 *  a_th), then without. Nothing when no whole-layer split fits. */
std::optional<Layout> fine_tune(const Context& context, bool coarse, std::vector<std::string>& notes) {
  const Chain& chain = context.chain;
  const int N = chain.stages();
  struct Attempt {
    bool thresholds, hidden;
    const char* what;
  };
  std::vector<Attempt> attempts;
  if (coarse) attempts.push_back({true, true, "cuts within a_th, every transfer within its stage's compute"});
  if (coarse) attempts.push_back({true, false, "cuts within a_th"});
  attempts.push_back({false, true, "every transfer within its stage's compute"});
  attempts.push_back({false, false, "transfers counted in the stage time"});
  for (const Attempt& attempt : attempts) {
    const auto fitting = [&](int s, int, int b, const Figures& f) {
      if (f.memory > context.capacity[s]) return kInfinity;
      if (attempt.hidden && f.communication > f.compute) return kInfinity;
      if (attempt.thresholds && s + 1 < N && !chain.cut_within(s, b, context.T)) return kInfinity;
      return f.time();
    };
    if (const auto cuts = min_max_split(chain, fitting, context.T)) {
      const Layout layout = whole_layers(*cuts);
      notes.push_back(fmt::format("fine-tuning: the smallest bottleneck that fits with {}: {}", attempt.what, layout_text(layout)));
      return layout;
    }
  }
  return std::nullopt;
}

/// The InputError for a platform on which no whole-layer split fits: the
/// split with the smallest largest share of a host's capacity, and its
/// fullest host.
InputError nothing_fits(const Context& context, const std::string& bound_text) {
  const Chain& chain = context.chain;
  const auto share = [&](int s, int, int, const Figures& f) {
    return context.capacity[s] == kInfinity ? 0.0 : f.memory / context.capacity[s];
  };
  const Layout closest = whole_layers(*min_max_split(chain, share, std::nullopt));
  const Evaluation best = evaluate(context, closest);
  const int worst = best.fullest_stage;
  return InputError(fmt::format(
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

double bapipe_memory_demand(const StageCost& stage, int stage_index, const std::vector<int>& stash_bound) {
  const double k = stash_bound[stage_index];
  const double weights = 2 * stage.weight_bytes, a = stage.stash_bytes, o = stage.output_bytes;
  if (stage_index == 0) return weights + k * (a + o);
  const double i = stage.input_bytes, previous = stash_bound[stage_index - 1];
  const double S = std::min(k, previous);
  if (i >= o) return weights + S * a + (previous - S + 1) * i + (S - 1) * o;
  return weights + S * a + (previous - S) * i + S * o;
}

std::vector<int> bapipe_inter_layer(const Profile& profile, const PlatformSummary& platform) {
  const double T = bapipe_ideal_stage_time(profile, platform);
  check_one_stage_per_host(profile, platform);
  const Chain chain(profile, platform, std::vector<int>(platform.hosts.size(), 1));
  return *min_max_split(chain, [](int, int, int, const Figures& f) { return f.compute; }, T);
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

  const Chain chain(profile, platform, stash_bound);
  Context context{chain, std::vector<double>(N, kInfinity), T};
  for (int s = 0; s < N; ++s) {
    if (input.memory_limit_bytes)
      context.capacity[s] = *input.memory_limit_bytes;
    else if (platform.hosts[s].memory_bytes)
      context.capacity[s] = *platform.hosts[s].memory_bytes;
  }
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

  // Step 2: communication is the bottleneck when a stage's transfer exceeds
  // its compute; then coarse-grained (step 3 skipped).
  int congested = -1;
  for (int s = 0; s < N && congested < 0; ++s)
    if (inter_eval.stages[s].communication_s > inter_eval.stages[s].compute_s) congested = s;
  const bool coarse = congested >= 0;
  Layout layout = inter;
  if (coarse) {
    notes.push_back(fmt::format("communication is the bottleneck: {} transfers {} per micro-batch, more than its compute {}",
                                stage_name(chain, congested), seconds_text(inter_eval.stages[congested].communication_s),
                                seconds_text(inter_eval.stages[congested].compute_s)));
    layout = coarse_grained(context, notes);
  } else {
    int widest = 0;
    for (int s = 1; s < N; ++s)
      if (inter_eval.stages[s].communication_s > inter_eval.stages[widest].communication_s) widest = s;
    notes.push_back(fmt::format("communication is hidden: every stage's transfer is within its compute (largest {} on {})",
                                seconds_text(inter_eval.stages[widest].communication_s), stage_name(chain, widest)));
    // Step 3: intra-layer; a plan that fits is kept fitting.
    layout = split_boundary_layers(context, inter, inter_eval.fits, notes);
  }

  // Step 4: memory.
  Evaluation result = evaluate(context, layout);
  std::string stashes;
  for (const int k : stash_bound) stashes += fmt::format("{}{}", stashes.empty() ? "" : "/", k);
  const std::string bound_text = fmt::format("{} with M = {} (bound: weights + gradients, up to {} stashed micro-batches, receive "
                                             "buffers; SGD)",
                                             schedule, M, stashes);
  if (!result.fits) {
    const int s = result.fullest_stage;
    notes.push_back(fmt::format("memory, {}: {} needs {}, more than its {}: fine-tuning", bound_text, chain.host(s),
                                bytes_text(result.stages[s].memory_bytes, true), bytes_text(context.capacity[s], true)));
    const std::optional<Layout> tuned = fine_tune(context, coarse, notes);
    if (!tuned) throw nothing_fits(context, bound_text);
    for (const std::string& line : moves(chain, layout, *tuned)) notes.push_back("fine-tuning: " + line);
    layout = coarse ? *tuned : split_boundary_layers(context, *tuned, true, notes);
    result = evaluate(context, layout);
  }
  notes.push_back(fmt::format("memory, {}: fits: {}", bound_text, memory_summary(context, result)));

  PartitionerOutput output;
  output.profile = std::move(result.profile);
  output.partition = std::move(result.partition);
  output.stages = std::move(result.stages);
  output.time_per_stage_s = result.bottleneck;
  output.bottleneck_stage = result.bottleneck_stage;
  const StageReport& bottleneck = output.stages[result.bottleneck_stage];
  notes.push_back(fmt::format("bottleneck: {}, {} {}", stage_name(chain, result.bottleneck_stage),
                              bottleneck.communication_s > bottleneck.compute_s ? "transfer" : "compute",
                              seconds_text(result.bottleneck)));
  output.notes = std::move(notes);
  return output;
}

}  // namespace pipegrid
