// The pipedream partitioner's dynamic program as it was before pruning and
// recomputed rows (every cell of every level kept, every candidate the
// released optimizer evaluates evaluated): the reference the fast solver
// must match bit for bit (test_pipedream_fast.cpp).

#include "pipedream_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace pipegrid::reference {

namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

/// One cell of a level's table: the best time for a range with m+1 machines,
/// and how it was reached (split after state `split_state`, the prefix using
/// `prefix_machines`+1 machines, the last stage `replicas` machines; no
/// split: one stage of `replicas` machines).
struct Cell {
  double time = kNone;
  int split_state = -1;
  int prefix_machines = -1;
  int replicas = 0;
};

/// A level's table over (row, last state, machines - 1), rows stored from
/// their first possible last state on (row r ends at states >= r).
class Table {
 public:
  Table(int states, int machines) : states_(states), machines_(machines), rows_(states + 1) {}
  void allocate_row(int row) { rows_[row].assign(static_cast<std::size_t>(states_ - first_state(row)) * machines_, Cell{}); }
  bool has_row(int row) const { return !rows_[row].empty(); }
  Cell& at(int row, int state, int m) { return rows_[row][index(row, state, m)]; }
  const Cell& at(int row, int state, int m) const { return rows_[row][index(row, state, m)]; }

 private:
  static int first_state(int row) { return row == 0 ? 0 : row; }
  std::size_t index(int row, int state, int m) const {
    return static_cast<std::size_t>(state - first_state(row)) * machines_ + m;
  }
  int states_, machines_;
  std::vector<std::vector<Cell>> rows_;
};

struct Prefix {
  std::vector<double> compute, activation, parameter;
};

/// The range (row, state) is a stage when state row-1 precedes `state`.
bool range_valid(const StateChain& chain, int row, int state) {
  return state >= row && (row == 0 || chain.states[state].is_ancestor[row - 1]);
}

double difference(const std::vector<double>& prefix, int row, int state) {
  return row == 0 ? prefix[state] : prefix[state] - prefix[row - 1];
}

/// Expands the cell (row, state, machines-1) of `tables[level]` into stages,
/// then each of those into the level below, appending final stages.
void expand(const std::vector<Table>& tables, const std::vector<PipeDreamLevel>& levels, int level, int row, int state,
            std::vector<int> devices, std::vector<PipeDreamStage>& out) {
  const int machines = levels[level].machines;
  // The stages of this range at this level, last first.
  struct Piece {
    int row, state, replicas;
  };
  std::vector<Piece> pieces;
  int m = machines - 1;
  int current_state = state;
  while (true) {
    const Cell& cell = tables[level].at(row, current_state, m);
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
      expand(tables, levels, level - 1, piece.row, piece.state, std::vector<int>(first, first + per_component),
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

std::optional<PipeDreamSolution> solve_pipedream(const StateChain& chain, const PipeDreamOptions& options) {
  const int count = static_cast<int>(chain.states.size());
  Prefix prefix;
  for (const AntichainState& state : chain.states) {
    prefix.compute.push_back(state.compute_s);
    prefix.activation.push_back(state.activation_bytes);
    prefix.parameter.push_back(state.parameter_bytes);
  }
  const bool released = options.cost_model == PipeDreamCostModel::Released;
  // States form a chain (each one's ancestors are all earlier states): the
  // split search can stop early (see below). Lower-level times are monotone
  // in the range only when the ranges nest, which a chain guarantees.
  bool nested = true;
  for (int s = 0; s < count && nested; ++s) nested = static_cast<int>(chain.states[s].ancestors.size()) == s;

  std::vector<Table> tables;
  int machines_within = 1;
  for (std::size_t level = 0; level < options.levels.size(); ++level) {
    const int machines = options.levels[level].machines;
    const double bandwidth = options.levels[level].bandwidth_Bps;
    const bool final_level = level + 1 == options.levels.size();
    const Table* lower = level == 0 ? nullptr : &tables.back();
    const int lower_machines = level == 0 ? 1 : options.levels[level - 1].machines;
    Table table(count, machines);
    const int rows = final_level ? 1 : count + 1;
    // At the lowest level a range's time is its compute, which only grows
    // as the range grows; above it, a range's time is the level below's
    // optimum, which need not.
    const bool monotone = nested && level == 0;
    // The time of the range (row, state) on one component of this level.
    const auto compute = [&](int row, int state) {
      if (level == 0) return difference(prefix.compute, row, state);
      return lower->at(row, state, lower_machines - 1).time;
    };
    // A stage's time with `replicas` machines; `divide_by_within`: the
    // released optimizer divides the data-parallel term by the machines in
    // one lower component only for a range's single-stage start value.
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
      if (!options.memory_bytes) return true;
      const double state = options.extra_state_per_weight_byte * parameters;
      if (parameters + state > *options.memory_bytes) return false;
      const double in_flight = std::ceil(static_cast<double>(later_machines) / replicas);
      return in_flight * (activation + parameters) + state <= *options.memory_bytes;
    };
    for (int row = 0; row < rows; ++row) {
      if (row > count - 1 + 1) break;
      table.allocate_row(row);
      for (int state = std::max(row, 0); state < count; ++state) {
        if (!range_valid(chain, row, state)) continue;
        const double work = compute(row, state);
        if (std::isnan(work)) continue;
        const double activation = difference(prefix.activation, row, state);
        const double parameters = difference(prefix.parameter, row, state);
        const int max_m = options.straight ? 1 : machines;
        for (int m = 0; m < max_m; ++m) {
          if (!stashed_fits(activation, parameters, machines - (m + 1), m + 1)) continue;
          Cell& cell = table.at(row, state, m);
          cell.time = stage_time(work, parameters, m + 1, true);
          cell.replicas = m + 1;
        }
      }
      for (int m = 1; m < machines; ++m)
        for (int state = row + 1; state < count; ++state) {
          if (!range_valid(chain, row, state)) continue;
          Cell best = table.at(row, state, m);
          const std::vector<int>& ancestors = chain.states[state].ancestors;
          const auto first = std::lower_bound(ancestors.begin(), ancestors.end(), row);
          const int max_replicas = options.straight ? 1 : m;
          for (int replicas = 1; replicas <= max_replicas; ++replicas) {
            // Latest split first: where the last stage only grows as the
            // split moves earlier (`monotone`), the search stops once the
            // last stage alone is no faster than the best found.
            for (auto k_it = ancestors.end(); k_it != first;) {
              const int k = *--k_it;
              if (!range_valid(chain, row, k)) continue;
              const double last_work = compute(k + 1, state);
              if (std::isnan(last_work)) continue;
              const double last_parameters = difference(prefix.parameter, k + 1, state);
              const double last_time = stage_time(last_work, last_parameters, replicas, false);
              if (monotone && !std::isnan(best.time) && last_time >= best.time) break;
              const Cell& head = table.at(row, k, m - replicas);
              if (std::isnan(head.time)) continue;
              if (!stashed_fits(difference(prefix.activation, k + 1, state), last_parameters, machines - (m + 1), replicas))
                continue;
              double time = std::max(head.time, last_time);
              if (released) {
                time = std::max(time, 2.0 * chain.states[k].output_activation_bytes / (bandwidth * replicas));
                if (state < count - 1)
                  time = std::max(time, 2.0 * chain.states[state].output_activation_bytes / (bandwidth * replicas));
              } else {
                time = std::max(time, 2.0 * chain.states[k].output_activation_bytes / bandwidth);
              }
              if (std::isnan(best.time) || time < best.time) best = {time, k, m - replicas, replicas};
            }
          }
          table.at(row, state, m) = best;
        }
    }
    tables.push_back(std::move(table));
    machines_within = machines;
  }

  const int top_machines = options.levels.back().machines;
  const Cell& goal = tables.back().at(0, count - 1, top_machines - 1);
  if (std::isnan(goal.time)) return std::nullopt;
  PipeDreamSolution solution;
  solution.time_per_stage_s = goal.time;
  int total = 1;
  for (const PipeDreamLevel& level : options.levels) total *= level.machines;
  std::vector<int> devices(total);
  for (int d = 0; d < total; ++d) devices[d] = d;
  expand(tables, options.levels, static_cast<int>(options.levels.size()) - 1, 0, count - 1, devices, solution.stages);
  return solution;
}


}  // namespace pipegrid::reference
