// PipeDream's dynamic program. Notation follows SEMANTICS.md: states are
// indexed in topological order; "row" r of a level's table is the range of
// states that starts after state r-1 (row 0: from the first state), so the
// range (r, j) holds the layers in down_set(j) minus down_set(r-1).

#include "partitioners/pipedream.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/precision.hpp"
#include "core/limits.hpp"

namespace pipegrid {

namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
constexpr double kInfinity = std::numeric_limits<double>::infinity();
/// Relative margin of the pruning tests that multiply instead of dividing
/// (far above the few roundings they differ by).
constexpr double kSlack = 1 + 1e-9;

/// How a cell of a row was reached: split after state `split_state`, the
/// prefix using `prefix_machines`+1 machines, the last stage `replicas`
/// machines; no split (`split_state` -1): one stage of `replicas` machines.
struct Cell {
  double time = kNone;
  int split_state = -1;
  int prefix_machines = -1;
  int replicas = 0;
};

/// One row of a level's table: the best time of the range (row, state) with
/// m+1 machines, for every state and m, stored machine count by machine
/// count (the split search reads one machine count across states).
static_assert(limits::kMaxMachines <= 32767, "RowCells stores machine counts in 16 bits");
struct RowCells {
  int states = 0;
  std::vector<double> time;  ///< [m * states + state]; NaN: no solution
  std::vector<int> split_state;
  /// Machine counts fit 16 bits (limits::kMaxMachines), keeping a cell,
  /// with the search's bound, at the 24 bytes the table limit assumes.
  std::vector<std::int16_t> prefix_machines, replicas;

  void reset(int state_count, int machines) {
    states = state_count;
    const std::size_t size = static_cast<std::size_t>(state_count) * machines;
    time.assign(size, kNone);
    split_state.assign(size, -1);
    prefix_machines.assign(size, -1);
    replicas.assign(size, 0);
  }
  std::size_t index(int state, int m) const { return static_cast<std::size_t>(m) * states + state; }
  Cell at(int state, int m) const {
    const std::size_t i = index(state, m);
    return {time[i], split_state[i], prefix_machines[i], replicas[i]};
  }
  void set(int state, int m, const Cell& cell) {
    const std::size_t i = index(state, m);
    time[i] = cell.time;
    split_state[i] = cell.split_state;
    prefix_machines[i] = static_cast<std::int16_t>(cell.prefix_machines);
    replicas[i] = static_cast<std::int16_t>(cell.replicas);
  }
};

struct Prefix {
  std::vector<double> compute, activation, parameter;
};

double difference(const std::vector<double>& prefix, int row, int state) {
  return row == 0 ? prefix[state] : prefix[state] - prefix[row - 1];
}

/// The dynamic program, level by level. A level's table has a row per range
/// start (every row below the top, row 0 at the top); the level above reads
/// only each range's time on all of a component's machines, so a level keeps
/// just those (`full_time`), and the rows a solution passes through are
/// solved again when it is expanded into stages (the same computation, so
/// the same cells).
///
/// The split search evaluates the candidates (replicas ascending, split
/// state descending) the released optimizer evaluates and keeps the first
/// strictly better one. Pruning skips only candidates whose time is provably
/// no better than the best found so far, so it never changes a cell (which
/// test_pipedream_fast.cpp checks against the solver as it was). It is on
/// when every state's compute and parameters are at least its ancestors'
/// (`costs_monotone_`: non-negative stage work and data-parallel terms):
///  - a candidate takes at least its head (the range up to the split, on
///    the remaining machines): splits after the last one whose head, or a
///    later split's head, can beat the best (a suffix minimum over states,
///    `head_bound`) are skipped;
///  - it takes at least its last stage's work over its replicas: splits
///    before the first one whose last stage, or an earlier split's, can beat
///    the best (a prefix minimum of the lower level's times, `last_work_`,
///    or the compute difference at the lowest level) are skipped;
///  - each remaining split is tested on its head, its transfers and its
///    last stage (with multiplications and a margin for rounding) before
///    its time is computed exactly as the released optimizer does.
/// Ties never replace the best (strictly better only), so skipping a
/// candidate that can at most tie is safe too.
class Solver {
 public:
  Solver(const StateChain& chain, const PipeDreamOptions& options) : chain_(chain), options_(options) {
    count_ = static_cast<int>(chain.states.size());
    for (const AntichainState& state : chain.states) {
      prefix_.compute.push_back(state.compute_s);
      prefix_.activation.push_back(state.activation_bytes);
      prefix_.parameter.push_back(state.parameter_bytes);
      output_bytes_.push_back(state.output_activation_bytes);
    }
    // States form a chain (each one's ancestors are all earlier states): the
    // split search can stop early (see below). Lower-level times are
    // monotone in the range only when the ranges nest, which a chain
    // guarantees.
    nested_ = true;
    for (int s = 0; s < count_ && nested_; ++s) nested_ = static_cast<int>(chain.states[s].ancestors.size()) == s;
    costs_monotone_ = true;
    for (int s = 0; s < count_ && costs_monotone_; ++s) {
      costs_monotone_ = prefix_.compute[s] >= 0 && prefix_.parameter[s] >= 0;
      for (const int a : chain.states[s].ancestors)
        costs_monotone_ = costs_monotone_ && prefix_.compute[s] >= prefix_.compute[a] && prefix_.parameter[s] >= prefix_.parameter[a];
    }
    if (!nested_) {
      words_ = (static_cast<std::size_t>(count_) + 63) / 64;
      precedes_.assign(words_ * count_, 0);
      for (int s = 0; s < count_; ++s)
        for (const int a : chain.states[s].ancestors) precedes_[a * words_ + s / 64] |= std::uint64_t{1} << (s % 64);
      // Level 0 of a branching graph: the last stage after split k works
      // compute(state) - compute(k), at least compute(state) minus the
      // largest compute of a state up to k.
      compute_max_.resize(count_);
      double largest = -kInfinity;
      for (int s = 0; s < count_; ++s) compute_max_[s] = largest = std::max(largest, prefix_.compute[s]);
    }
    const int levels = static_cast<int>(options.levels.size());
    full_time_.resize(levels);
    within_.resize(levels);
    for (int level = 0; level < levels; ++level) within_[level] = level == 0 ? 1 : options.levels[level - 1].machines;
  }

  /// Solves every level; returns the top level's row 0.
  const RowCells& solve() {
    const int levels = static_cast<int>(options_.levels.size());
    for (int level = 0; level < levels; ++level) {
      const int machines = options_.levels[level].machines;
      if (level > 0) build_last_work(level);
      if (level + 1 == levels) {
        solve_row(level, 0, top_);
        break;
      }
      std::vector<double>& full = full_time_[level];
      full.assign(stride() * count_, kNone);
      RowCells cells;
      for (int row = 0; row <= count_; ++row) {
        solve_row(level, row, cells);
        for (int state = row; state < count_; ++state)
          full[static_cast<std::size_t>(state) * stride() + row] = cells.time[cells.index(state, machines - 1)];
      }
    }
    return top_;
  }

  /// The row's cells again (below the top; the top's row 0 is kept).
  const RowCells& row_cells(int level, int row) {
    if (level + 1 == static_cast<int>(options_.levels.size())) return top_;
    const auto key = std::make_pair(level, row);
    auto found = expanded_rows_.find(key);
    if (found == expanded_rows_.end()) {
      found = expanded_rows_.emplace(key, RowCells{}).first;
      if (level > 0) build_last_work(level);
      solve_row(level, row, found->second);
    }
    return found->second;
  }

 private:
  /// The range (row, state) is a stage when state row-1 precedes `state`
  /// (always, for states that form a chain).
  bool range_valid(int row, int state) const {
    return state >= row && (row == 0 || nested_ || (precedes_[(row - 1) * words_ + state / 64] >> (state % 64) & 1));
  }

  std::size_t stride() const { return static_cast<std::size_t>(count_) + 1; }

  /// The time of the range (row, state) on one component of `level`.
  double range_time(int level, int row, int state) const {
    if (level == 0) return difference(prefix_.compute, row, state);
    return full_time_[level - 1][static_cast<std::size_t>(state) * stride() + row];
  }

  /// last_work_[state * stride() + k]: the lower level's time of the range
  /// (k+1, state), and the smallest such time over k' <= k (infinity when
  /// none has one).
  void build_last_work(int level) {
    if (last_work_level_ == level) return;
    last_work_level_ = level;
    last_work_.assign(stride() * count_, LastWork{kNone, kInfinity});
    const std::vector<double>& lower = full_time_[level - 1];
    for (int state = 0; state < count_; ++state) {
      const std::size_t base = static_cast<std::size_t>(state) * stride();
      double smallest = kInfinity;
      for (int k = 0; k < state; ++k) {
        const double work = lower[base + k + 1];
        if (work < smallest) smallest = work;  // NaN (no range) never is
        last_work_[base + k] = {work, smallest};
      }
    }
  }

  void solve_row(int level, int row, RowCells& cells) const {
    const int count = count_;
    const int machines = options_.levels[level].machines;
    const double bandwidth = options_.levels[level].bandwidth_Bps;
    const int machines_within = within_[level];
    const bool released = options_.cost_model == PipeDreamCostModel::Released;
    // At the lowest level a range's time is its compute, which only grows
    // as the range grows; above it, a range's time is the level below's
    // optimum, which need not.
    const bool monotone = nested_ && level == 0;
    // Pruning needs costs that grow along the state graph; without them the
    // released optimizer's early stop (`monotone`) is taken as it is.
    const bool prune = options_.prune && costs_monotone_;
    const auto stage_time = [&](double work, double parameters, int replicas, bool divide_by_within) {
      if (released) {
        double all_reduce = 4.0 * (replicas - 1) * parameters / (bandwidth * replicas);
        if (divide_by_within) all_reduce /= machines_within;
        return (work + all_reduce) / replicas;
      }
      return std::max(work, 2.0 * (replicas - 1) * parameters / bandwidth) / replicas;
    };
    // The released optimizer's memory check, plus one it lacks: a stage's
    // weights must fit even when nothing is stashed (its formula charges the
    // last stage, and pure data parallelism, nothing).
    const auto stashed_fits = [&](double activation, double parameters, int later_machines, int replicas) {
      if (!options_.memory_bytes) return true;
      const double state = options_.extra_state_per_weight_byte * parameters;
      if (parameters + state > *options_.memory_bytes) return false;
      const double in_flight = std::ceil(static_cast<double>(later_machines) / replicas);
      return in_flight * (activation + parameters) + state <= *options_.memory_bytes;
    };

    std::vector<double> sync_per_byte(machines + 1, 0.0);
    for (int replicas = 1; replicas <= machines; ++replicas)
      sync_per_byte[replicas] =
          released ? 4.0 * (replicas - 1) / (bandwidth * replicas) : 2.0 * (replicas - 1) / bandwidth;
    cells.reset(count, machines);
    for (int state = std::max(row, 0); state < count; ++state) {
      if (!range_valid(row, state)) continue;
      const double work = range_time(level, row, state);
      if (std::isnan(work)) continue;
      const double activation = difference(prefix_.activation, row, state);
      const double parameters = difference(prefix_.parameter, row, state);
      const int max_m = options_.straight ? 1 : machines;
      for (int m = 0; m < max_m; ++m) {
        if (!stashed_fits(activation, parameters, machines - (m + 1), m + 1)) continue;
        const std::size_t i = cells.index(state, m);
        cells.time[i] = stage_time(work, parameters, m + 1, true);
        cells.replicas[i] = static_cast<std::int16_t>(m + 1);
      }
    }
    // head_bound[k * machines + m]: the fastest head (row, k') with m+1
    // machines over k' >= k (infinity when none has one); machine counts
    // side by side, as the search over replicas reads them.
    std::vector<double> head_bound;
    if (prune) head_bound.assign(static_cast<std::size_t>(count) * machines, kInfinity);
    const std::size_t full_stride = stride();
    for (int m = 1; m < machines; ++m) {
      if (prune) {
        const double* times = &cells.time[cells.index(0, m - 1)];
        double* bound = &head_bound[static_cast<std::size_t>(m - 1)];
        double fastest = kInfinity;
        for (int k = count - 1; k >= row; --k) {
          if (times[k] < fastest) fastest = times[k];
          bound[static_cast<std::size_t>(k) * machines] = fastest;
        }
      }
      for (int state = row + 1; state < count; ++state) {
        if (!range_valid(row, state)) continue;
        Cell best = cells.at(state, m);
        // Candidate splits: the state's ancestors from position `first` on
        // (k = position for states that form a chain).
        const std::vector<int>& ancestors = chain_.states[state].ancestors;
        const int first = nested_ ? row
                                  : static_cast<int>(std::lower_bound(ancestors.begin(), ancestors.end(), row) - ancestors.begin());
        const LastWork* last_work = level > 0 ? &last_work_[static_cast<std::size_t>(state) * full_stride] : nullptr;
        // A lower bound on the work of the last stage after split k and
        // after every earlier split (non-increasing in k).
        const auto last_work_bound = [&](int k) {
          if (level > 0) return last_work[k].bound;
          return nested_ ? difference(prefix_.compute, k + 1, state) : prefix_.compute[state] - compute_max_[k];
        };
        // The smallest k whose last_work_bound fits the current limit
        // (`state` when none does), followed as the replicas grow.
        int k_low = state;
        const int max_replicas = options_.straight ? 1 : m;
        for (int replicas = 1; replicas <= max_replicas; ++replicas) {
          const double* head_times = &cells.time[cells.index(0, m - replicas)];
          // Thresholds for the tests below, from the best found (NaN while
          // there is none: no test passes): a last stage whose work exceeds
          // `work_limit` takes longer than the best (work / replicas, with
          // a margin for rounding), as does a transfer of more than
          // `bytes_limit` bytes.
          double work_limit = kNone, bytes_limit = kNone;
          const auto set_limits = [&] {
            work_limit = best.time * replicas * kSlack;
            bytes_limit = best.time * (released ? bandwidth * replicas : bandwidth) * (0.5 * kSlack);
          };
          if (prune) set_limits();
          // The last stage's data-parallel term per byte of its parameters,
          // times `replicas` (the tests compare work before the division).
          const double all_reduce_per_byte = prune ? sync_per_byte[replicas] : 0;
          // Every split sends the state's output on (released model).
          if (prune && released && state < count - 1 && output_bytes_[state] > bytes_limit) continue;
          // Latest split first: positions [first, end) of `ancestors`.
          int end = nested_ ? state : static_cast<int>(ancestors.size());
          if (prune && !std::isnan(best.time)) {
            // Splits before k_low leave too slow a last stage; splits after
            // the last k whose heads from k on can still beat the best
            // (head_bound, non-decreasing in k) too slow a head.
            while (k_low < state && last_work_bound(k_low) > work_limit) ++k_low;
            if (k_low > row && last_work_bound(k_low - 1) <= work_limit) {
              // Galloping down, then bisecting: the k sought is in [low, k_low - 1].
              int low = row, high = k_low - 1;  // last_work_bound(high) <= limit
              for (int step = 1; high > low; step *= 2) {
                const int next = std::max(high - step, low);
                if (last_work_bound(next) > work_limit) {
                  low = next + 1;
                  break;
                }
                high = next;
              }
              while (low < high) {  // last_work_bound(high) <= limit; the k sought is in [low, high]
                const int mid = low + (high - low) / 2;
                if (last_work_bound(mid) <= work_limit) high = mid;
                else low = mid + 1;
              }
              k_low = high;
            }
            if (k_low >= state) continue;
            const double* column = &head_bound[static_cast<std::size_t>(m - replicas)];
            const auto bound = [&](int k) { return column[static_cast<std::size_t>(k) * machines]; };
            if (bound(k_low) > best.time) continue;
            // The last k in [k_low, state-1] with bound(k) <= best:
            // galloping up from k_low, then bisecting.
            int low = k_low, high = state - 1;  // bound(low) <= best; the k sought is in [low, high]
            if (bound(high) <= best.time) {
              low = high;
            } else {
              high -= 1;  // bound(state-1) > best
              for (int step = 1; low < high; step *= 2) {
                const int next = std::min(low + step, high);
                if (bound(next) > best.time) {
                  high = next - 1;
                  break;
                }
                low = next;
              }
              while (low < high) {
                const int mid = low + (high - low + 1) / 2;
                if (bound(mid) <= best.time) low = mid;
                else high = mid - 1;
              }
            }
            end = nested_ ? low + 1
                          : static_cast<int>(std::upper_bound(ancestors.begin() + first, ancestors.end(), low) - ancestors.begin());
          }
          for (int position = end - 1; position >= first; --position) {
            const int k = nested_ ? position : ancestors[position];
            if (!range_valid(row, k)) continue;
            if (prune) {
              // Every split from here on leaves a last stage at least this slow.
              if (last_work_bound(k) > work_limit) break;
              // This split alone: its head, its transfer, its last stage.
              if (head_times[k] > best.time || output_bytes_[k] > bytes_limit) continue;
              const double work = level > 0 ? last_work[k].work : difference(prefix_.compute, k + 1, state);
              const double parameters = difference(prefix_.parameter, k + 1, state);
              const double synchronise = parameters * all_reduce_per_byte;
              if ((released ? work + synchronise : std::max(work, synchronise)) > work_limit) {
                if (monotone) break;  // and every earlier split's
                continue;
              }
            }
            const double head_time = head_times[k];
            const double work = level > 0 ? last_work[k].work : difference(prefix_.compute, k + 1, state);
            if (std::isnan(work)) continue;
            const double last_parameters = difference(prefix_.parameter, k + 1, state);
            const double last_time = stage_time(work, last_parameters, replicas, false);
            // Where the last stage only grows as the split moves earlier
            // (`monotone`), the search stops once the last stage alone is no
            // faster than the best found.
            if (monotone && !std::isnan(best.time) && last_time >= best.time) break;
            if (std::isnan(head_time)) continue;
            if (!stashed_fits(difference(prefix_.activation, k + 1, state), last_parameters, machines - (m + 1), replicas))
              continue;
            double time = std::max(head_time, last_time);
            if (released) {
              time = std::max(time, 2.0 * output_bytes_[k] / (bandwidth * replicas));
              if (state < count - 1) time = std::max(time, 2.0 * output_bytes_[state] / (bandwidth * replicas));
            } else {
              time = std::max(time, 2.0 * output_bytes_[k] / bandwidth);
            }
            if (std::isnan(best.time) || time < best.time) {
              best = {time, k, m - replicas, replicas};
              if (prune) set_limits();
            }
          }
        }
        cells.set(state, m, best);
      }
    }
  }

  const StateChain& chain_;
  const PipeDreamOptions& options_;
  int count_ = 0;
  Prefix prefix_;
  bool nested_ = true, costs_monotone_ = true;
  /// Branching graphs: bit s of the words from a * words_ on is set when
  /// state a precedes state s.
  std::vector<std::uint64_t> precedes_;
  std::size_t words_ = 0;
  std::vector<int> within_;                         ///< machines of one lower component, per level
  std::vector<std::vector<double>> full_time_;      ///< per level below the top: [state * stride + row]
  struct LastWork {
    double work, bound;
  };
  std::vector<LastWork> last_work_;  ///< for level last_work_level_ (see build_last_work)
  int last_work_level_ = -1;
  std::vector<double> output_bytes_;  ///< per state: its output_activation_bytes
  /// Branching graphs: the largest compute of a state up to each state.
  std::vector<double> compute_max_;
  RowCells top_;
  std::map<std::pair<int, int>, RowCells> expanded_rows_;
};

/// Expands the cell (row, state, machines-1) of `level` into stages, then
/// each of those into the level below, appending final stages.
void expand(Solver& solver, const std::vector<PipeDreamLevel>& levels, int level, int row, int state,
            std::vector<int> devices, std::vector<PipeDreamStage>& out) {
  const int machines = levels[level].machines;
  const RowCells& cells = solver.row_cells(level, row);
  // The stages of this range at this level, last first.
  struct Piece {
    int row, state, replicas;
  };
  std::vector<Piece> pieces;
  int m = machines - 1;
  int current_state = state;
  while (true) {
    const Cell cell = cells.at(current_state, m);
    if (cell.split_state < 0) {
      pieces.push_back({row, current_state, cell.replicas});
      break;
    }
    pieces.push_back({cell.split_state + 1, current_state, cell.replicas});
    current_state = cell.split_state;
    m = cell.prefix_machines;
  }
  std::reverse(pieces.begin(), pieces.end());
  // `devices` lists this range's devices, component by component (each
  // component of this level holds devices.size() / machines of them).
  const std::size_t per_component = devices.size() / machines;
  std::size_t next_component = 0;
  for (const Piece& piece : pieces) {
    if (level == 0) {
      PipeDreamStage stage;
      stage.after_state = piece.row - 1;
      stage.last_state = piece.state;
      stage.replicas = piece.replicas;
      stage.devices.assign(devices.begin() + next_component, devices.begin() + next_component + piece.replicas);
      out.push_back(stage);
      next_component += piece.replicas;
      continue;
    }
    // Each of the piece's components runs the level below on the range; the
    // final stages span the same sub-stage in every component.
    std::vector<std::vector<PipeDreamStage>> per_replica(piece.replicas);
    for (int replica = 0; replica < piece.replicas; ++replica) {
      const auto first = devices.begin() + static_cast<std::ptrdiff_t>((next_component + replica) * per_component);
      expand(solver, levels, level - 1, piece.row, piece.state, std::vector<int>(first, first + per_component),
             per_replica[replica]);
    }
    for (std::size_t s = 0; s < per_replica[0].size(); ++s) {
      PipeDreamStage stage = per_replica[0][s];
      stage.replicas = 0;
      stage.devices.clear();
      for (const auto& replica_stages : per_replica) {
        stage.replicas += replica_stages[s].replicas;
        stage.devices.insert(stage.devices.end(), replica_stages[s].devices.begin(), replica_stages[s].devices.end());
      }
      out.push_back(stage);
    }
    next_component += piece.replicas;
  }
}

}  // namespace

int total_machines(const std::vector<int>& machines) {
  for (std::size_t l = 0; l < machines.size(); ++l)
    if (machines[l] < 1) throw InputError(fmt::format("--machines: expected counts >= 1, found {} at level {}", machines[l], l + 1));
  long long total = 1;
  for (const int count : machines) {
    total *= count;  // total <= kMaxMachines before, count < 2^31: no overflow
    if (total > limits::kMaxMachines)
      throw InputError(fmt::format("--machines: expected at most {} machines in all (the product of the counts per level; "
                                   "docs/formats.md, Limits), found {}",
                                   limits::kMaxMachines, fmt::join(machines, " x ")));
  }
  return static_cast<int>(total);
}

PipeDreamSolution solve_pipedream(const StateChain& chain, const PipeDreamOptions& options) {
  const int count = static_cast<int>(chain.states.size());
  if (options.levels.empty()) throw InputError("pipedream: expected at least one level of machines");
  std::vector<int> counts;
  for (const PipeDreamLevel& level : options.levels) counts.push_back(level.machines);
  total_machines(counts);
  // The tables hold (rows x states x machines) cells: every row at the
  // levels below the top, one row at the top.
  double cells = 0;
  for (std::size_t l = 0; l < options.levels.size(); ++l)
    cells += (l + 1 == options.levels.size() ? 1.0 : count + 1.0) * count * options.levels[l].machines;
  if (cells > limits::kMaxPipeDreamCells)
    throw InputError(fmt::format("pipedream: {} states over the machines {} need tables of {:.3g} cells, more than the "
                                 "limit of {:.3g} (docs/formats.md, Limits): use fewer machines or fewer levels",
                                 count, fmt::join(counts, " x "), cells, limits::kMaxPipeDreamCells));
  for (std::size_t l = 0; l < options.levels.size(); ++l) {
    if (!(options.levels[l].bandwidth_Bps > 0) || !std::isfinite(options.levels[l].bandwidth_Bps))
      throw InputError(fmt::format("--bandwidth: expected a positive bandwidth, found {} at level {}",
                                   options.levels[l].bandwidth_Bps, l + 1));
  }
  Solver solver(chain, options);
  const RowCells& top = solver.solve();

  const int top_machines = options.levels.back().machines;
  const Cell goal = top.at(count - 1, top_machines - 1);
  if (std::isnan(goal.time)) {
    int total = 1;
    for (const PipeDreamLevel& level : options.levels) total *= level.machines;
    if (options.memory_bytes)
      throw InfeasibleError(fmt::format("pipedream: no partition of {} states over {} machines keeps every stage's stash within "
                                   "--memory {} bytes",
                                   count, total, *options.memory_bytes));
    if (options.straight && total > count)
      throw InfeasibleError(fmt::format("pipedream: a straight pipeline over {} machines needs at least {} states (one per "
                                   "stage), found {}: use fewer machines or drop --straight",
                                   total, total, count));
    throw InfeasibleError(fmt::format("pipedream: no partition of {} states over {} machines", count, total));
  }
  PipeDreamSolution solution;
  solution.time_per_stage_s = goal.time;
  int total = 1;
  for (const PipeDreamLevel& level : options.levels) total *= level.machines;
  std::vector<int> devices(total);
  for (int d = 0; d < total; ++d) devices[d] = d;
  expand(solver, options.levels, static_cast<int>(options.levels.size()) - 1, 0, count - 1, devices, solution.stages);
  return solution;
}

std::vector<PipeDreamLevel> hierarchy_of(const PlatformSummary& platform) {
  const int count = static_cast<int>(platform.hosts.size());
  if (count == 1) return {{1, 1}};
  // Pair bandwidth: the narrower direction of the two routes.
  const auto bandwidth = [&](int a, int b) {
    return std::min(platform.route_bandwidth_Bps[a][b], platform.route_bandwidth_Bps[b][a]);
  };
  std::vector<double> distinct;
  for (int a = 0; a < count; ++a)
    for (int b = a + 1; b < count; ++b) {
      if (bandwidth(a, b) <= 0)
        throw InputError(fmt::format("{}: no route between {} and {}: expected every pair of hosts connected",
                                     platform.file, platform.hosts[a].name, platform.hosts[b].name));
      distinct.push_back(bandwidth(a, b));
    }
  std::sort(distinct.begin(), distinct.end(), std::greater<double>());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  // Level t groups hosts joined by routes of at least distinct[t]; each level
  // must split the platform into equal, contiguous groups nested in the next.
  std::vector<PipeDreamLevel> levels;
  int group = 1;
  for (const double threshold : distinct) {
    // The group of host 0 at this threshold decides the size; then check.
    int size = 1;
    while (size < count && bandwidth(0, size) >= threshold) ++size;
    bool clean = count % size == 0;
    for (int a = 0; a < count && clean; ++a)
      for (int b = 0; b < count && clean; ++b)
        if (a != b) clean = (a / size == b / size) == (bandwidth(a, b) >= threshold);
    if (!clean || size % group != 0)
      throw InputError(fmt::format(
          "{}: the routes do not form a hierarchy of equal, contiguous groups (at {} B/s, hosts {}..{} are not a group "
          "like the others): give --machines and --bandwidth instead",
          platform.file, threshold, platform.hosts[0].name, platform.hosts[size - 1].name));
    if (size / group > 1) levels.push_back({size / group, threshold});
    group = size;
  }
  return levels;
}

PartitionerOutput pipedream_partition(const PartitionerInput& input) {
  const ModelGraph graph = input.graph ? *input.graph : chain_graph(input.profile);
  AntichainOptions antichain;
  antichain.file = input.profile_file;
  const StateChain chain = antichain_states(graph, antichain);
  PipeDreamOptions options;
  options.straight = input.straight;
  options.memory_bytes = input.memory_limit_bytes;
  options.extra_state_per_weight_byte = resident_weight_factor(input.dtype, input.optimizer, input.gradient_dtype) - 2;
  if (input.cost_model == "paper") options.cost_model = PipeDreamCostModel::Paper;
  else if (input.cost_model != "released")
    throw InputError(fmt::format("--cost-model: expected released or paper, found '{}'", input.cost_model));
  if (!input.machines.empty()) {
    if (input.machines.size() != input.bandwidths_Bps.size())
      throw InputError(fmt::format("--machines gives {} levels but --bandwidth {}: expected one bandwidth per level",
                                   input.machines.size(), input.bandwidths_Bps.size()));
    for (std::size_t l = 0; l < input.machines.size(); ++l) options.levels.push_back({input.machines[l], input.bandwidths_Bps[l]});
  } else {
    options.levels = hierarchy_of(input.platform);
  }
  std::vector<int> counts;
  for (const PipeDreamLevel& level : options.levels) counts.push_back(level.machines);
  const int devices = total_machines(counts);
  if (devices > static_cast<int>(input.platform.hosts.size()))
    throw InputError(fmt::format("pipedream: the hierarchy has {} machines but {} declares {} hosts", devices,
                                 input.platform.file, input.platform.hosts.size()));
  const PipeDreamSolution solution = solve_pipedream(chain, options);

  // States to layers: a stage holds the layers its last state's down-set
  // adds to the previous stage's; detached sinks follow their producer.
  const int layers = static_cast<int>(graph.profile.layers.size());
  std::vector<int> stage_of(layers, -1);
  for (std::size_t s = 0; s < solution.stages.size(); ++s) {
    const AntichainState& last = chain.states[solution.stages[s].last_state];
    for (int l = 0; l < layers; ++l)
      if (stage_of[l] < 0 && last.in_down_set[l]) stage_of[l] = static_cast<int>(s);
  }
  for (const int sink : chain.detached_sinks)
    for (int producer = 0; producer < layers; ++producer)
      for (const int consumer : graph.consumers[producer])
        if (consumer == sink) stage_of[sink] = std::max(stage_of[sink], stage_of[producer]);
  for (int l = 0; l < layers; ++l)
    if (stage_of[l] < 0) stage_of[l] = static_cast<int>(solution.stages.size()) - 1;

  PartitionerOutput output;
  std::vector<int> order(layers);
  for (int l = 0; l < layers; ++l) order[l] = l;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return stage_of[a] < stage_of[b]; });
  const bool reordered = !std::is_sorted(stage_of.begin(), stage_of.end());
  output.profile = reordered ? reorder_layers(graph, order) : graph.profile;
  output.layer_order = reordered ? order : std::vector<int>{};
  for (const int layer : order) output.partition.stage_of_layer.push_back(stage_of[layer]);
  for (const PipeDreamStage& stage : solution.stages) {
    std::vector<std::string> hosts;
    for (const int device : stage.devices) hosts.push_back(input.platform.hosts[device].name);
    output.partition.hosts.push_back(hosts);
  }
  output.time_per_stage_s = solution.time_per_stage_s;
  output.stages = report_stages(output.profile, output.partition, input.platform);
  for (std::size_t s = 0; s < solution.stages.size(); ++s) {
    if (output.stages[s].compute_s > output.stages[output.bottleneck_stage].compute_s) output.bottleneck_stage = static_cast<int>(s);
    const PipeDreamStage& stage = solution.stages[s];
    const AntichainState& last = chain.states[stage.last_state];
    double stash = last.activation_bytes + last.parameter_bytes;
    if (stage.after_state >= 0)
      stash -= chain.states[stage.after_state].activation_bytes + chain.states[stage.after_state].parameter_bytes;
    int later = 0;
    for (std::size_t t = s + 1; t < solution.stages.size(); ++t) later += solution.stages[t].replicas;
    const double parameters = last.parameter_bytes - (stage.after_state >= 0 ? chain.states[stage.after_state].parameter_bytes : 0);
    output.stages[s].memory_bytes =
        std::ceil(static_cast<double>(later) / stage.replicas) * stash + options.extra_state_per_weight_byte * parameters;
  }
  std::string shape;
  for (const PipeDreamLevel& level : options.levels)
    shape += fmt::format("{}{} at {:.4g} GB/s", shape.empty() ? "" : ", then ", level.machines, level.bandwidth_Bps / 1e9);
  output.notes.push_back(fmt::format("pipedream ({} cost model{}): {} states over {} machines ({})",
                                     input.cost_model, input.straight ? ", straight pipeline" : "", chain.states.size(),
                                     devices, shape));
  if (reordered)
    output.notes.push_back("the stages cut the graph's branches away from the file's layer order: layers are listed in stage "
                           "order (the partition file records the order)");
  if (devices < static_cast<int>(input.platform.hosts.size()))
    output.notes.push_back(fmt::format("{} hosts unused", input.platform.hosts.size() - devices));
  return output;
}

}  // namespace pipegrid
