#pragma once
// PipeDream's partitioner (SEMANTICS.md, "PipeDream's optimizer as released",
// and the SOSP'19 paper, section 3.1): a dynamic program over the model's
// chain of antichain states choosing stages and their replica counts to
// minimise the slowest stage's time, level by level of a machine hierarchy.

#include <vector>

#include "partitioners/antichain.hpp"
#include "partitioners/partitioners.hpp"

namespace pipegrid {

enum class PipeDreamCostModel {
  /// The released optimizer: a stage over states k+1..j with r replicas at
  /// bandwidth B takes (compute + 4(r-1)·params/(B·r)) / r (its data-parallel
  /// term also divided by the machines in one lower component when it is the
  /// whole range); a split adds 2·out(k)/(B·r) and 2·out(j)/(B·r) (unless j
  /// is last) to the max. Memory (both models): a stage stashes
  /// ceil(later machines / r) x (its activations + parameters), and its
  /// parameters alone must fit.
  Released,
  /// The paper: T = max(compute, 2(r-1)·params/B) / r (overlapped), a split
  /// adds 2·out(k)/B.
  Paper,
};

struct PipeDreamLevel {
  int machines = 1;          ///< components of the level below (GPUs at the lowest)
  double bandwidth_Bps = 0;  ///< between those components
};

/** A stage of the solution: states after `after_state` (-1: from the start)
 *  up to `last_state`, replicated `replicas` times in total (the product of
 *  its replica counts at every level). `components` lists, per level from
 *  the top, how many components of that level it spans. */
struct PipeDreamStage {
  int after_state = -1, last_state = 0;
  int replicas = 1;
  std::vector<int> devices;  ///< device indices (lowest level fastest), one per replica
};

struct PipeDreamSolution {
  double time_per_stage_s = 0;  ///< the optimizer's objective
  std::vector<PipeDreamStage> stages;
};

struct PipeDreamOptions {
  std::vector<PipeDreamLevel> levels;  ///< lowest first
  bool straight = false;
  std::optional<double> memory_bytes;
  /// State kept per weight byte beyond what the released memory check
  /// assumes (fp32 SGD): resident_weight_factor(dtype, optimizer) - 2
  /// (core/precision.hpp), 0 for fp32 SGD. Both memory checks add this many
  /// weight bytes of the stage (mixed precision's master weights, momentum
  /// and Adam state).
  double extra_state_per_weight_byte = 0;
  PipeDreamCostModel cost_model = PipeDreamCostModel::Released;
  /// Skip split candidates that provably cannot beat the best found so far
  /// (the solution is the same either way; false evaluates every candidate
  /// the released optimizer evaluates, for tests).
  bool prune = true;
};

/** The machines of a hierarchy: the product of `machines` (counts per
 *  level). Throws InputError naming --machines when a count is below 1 or
 *  the product exceeds limits::kMaxMachines (checked level by level, so it
 *  never overflows). */
int total_machines(const std::vector<int>& machines);

/** Solves the program. Throws InputError when no stage assignment exists
 *  (more machines than states allow in a straight pipeline, or a memory
 *  limit nothing fits), or when the machines or the tables exceed
 *  limits::kMaxMachines or limits::kMaxPipeDreamCells. */
PipeDreamSolution solve_pipedream(const StateChain& chain, const PipeDreamOptions& options);

/** The hierarchy of a platform from its routes: hosts grouped by the
 *  narrowest bandwidth between them, lowest level (fastest links) first.
 *  InputError when the groups are not equal and contiguous in host order. */
std::vector<PipeDreamLevel> hierarchy_of(const PlatformSummary& platform);

PartitionerOutput pipedream_partition(const PartitionerInput& input);

}  // namespace pipegrid
