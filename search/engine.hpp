#pragma once
// The search's own task-graph simulator (docs/search.md, "The task-graph
// engine"), with FlexFlow's assumptions (Jia et al., MLSys 2019, section 5):
// task times are known and deterministic; each device runs its tasks in FIFO
// (program) order; each channel (an ordered pair of hosts, FlexFlow's
// "connection between devices") carries its transfers one at a time in the
// order they become ready; a transfer takes latency + bytes / bandwidth over
// its route. A strategy (search/strategy.hpp) runs GPipe's flushed schedule
// for one mini-batch of M micro-batches: replica r of stage s runs the
// forwards of micro-batches m = r, r + d_s, ... then their backwards in the
// same order (pipegrid's `gpipe` with replicated stages), then the stage's
// gradients are all-reduced over its d_s replicas.
//
// Full simulation builds every task and times it; delta simulation keeps the
// graph and the times of the previous strategy, updates the tasks whose
// stages changed, and re-times only those and what their new end times
// reach (FlexFlow's Algorithm 2: a Bellman-Ford-like propagation from the
// changed tasks). Both compute each task's times with the same expression
// from the same inputs, so their results are equal exactly.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/platform.hpp"
#include "core/profile.hpp"
#include "search/strategy.hpp"

namespace pipegrid::search {

/** The costs a strategy is timed with: the profile at the run's micro-batch
 *  size, per tensor degree the per-member profile (tensor_parallel_profile
 *  with split_linear, collectives charged as compute over the degree's
 *  TensorParallelLink), and the platform's routes. */
class CostModel {
 public:
  /** `platform` with its route matrices (sim::read_platform with routes).
   *  `tensor_degrees`: the degrees a stage may take (1 first); each must
   *  divide the hosts with no group spanning servers (InputError naming
   *  --max-tensor-parallel otherwise). `memory_bytes` replaces every host's
   *  capacity when given. */
  CostModel(const Profile& profile, const PlatformSummary& platform, int micro_batches, std::vector<int> tensor_degrees,
            std::optional<double> memory_bytes, const std::string& optimizer);

  struct StageSums {
    double forward_s = 0, backward_s = 0;  ///< per member, at speed factor 1
    double weight_bytes = 0;               ///< per member
    double stash_bytes = 0;                ///< one micro-batch's, per member
    double output_bytes = 0;               ///< what crosses the cut after the stage, per member
  };
  /** Sums over layers first..last of the per-member profile of degree t
   *  (prefix sums: O(1)). */
  StageSums stage_sums(int first, int last, int t) const;

  /** Seconds of a compute action of `profile_s` on host h: profile_s /
   *  speed_factor + action_overhead. */
  double compute_s(int host, double profile_s) const;
  /** Seconds of a transfer of `bytes` from host a to host b: route latency
   *  + NCCL latency + bytes / (NCCL efficiency x bottleneck bandwidth);
   *  infinity without a route. */
  double transfer_s(int from, int to, double bytes) const;
  /** Seconds of a stage's ring all-reduce of `bytes` (per member) over its
   *  replicas' leaders in replica order (docs/semantics.md, Collectives,
   *  flows on uncontended links): k = 2 (d - 1) steps; each hop takes k
   *  (latency + bytes / (d x efficiency x bandwidth)), the collective the
   *  slowest hop plus the largest NCCL latency; 0 when d == 1. */
  double all_reduce_s(const StageConfig& stage, double bytes) const;
  /** Whether every member of the stage holds its weights (x the resident
   *  factor of dtype and optimizer) and the stashes of the micro-batches
   *  its replica runs (GPipe keeps them all: ceil(M / d)); true where the
   *  capacity is unknown. */
  bool fits_memory(const StageConfig& stage) const;
  /// Why a stage does not fit, for people ("" when it does).
  std::string memory_problem(const StageConfig& stage) const;

  const Profile& profile() const { return profile_; }
  /// The per-member profile of degree t (one of tensor_degrees()).
  const Profile& member_profile(int t) const;
  const std::string& member_note(int t) const;
  const PlatformSummary& platform() const { return platform_; }
  int micro_batches() const { return micro_batches_; }
  int layers() const { return static_cast<int>(profile_.layers.size()); }
  const std::vector<int>& tensor_degrees() const { return tensor_degrees_; }
  const std::string& optimizer() const { return optimizer_; }
  std::optional<double> memory_override() const { return memory_bytes_; }

 private:
  struct Degree {
    int t = 1;
    Profile profile;
    std::string note;
    std::vector<double> forward, backward, weights, stash;  ///< prefix sums, size layers + 1
  };
  const Degree& degree(int t) const;
  Profile profile_;
  PlatformSummary platform_;
  int micro_batches_ = 1;
  std::vector<int> tensor_degrees_;
  std::vector<Degree> degrees_;
  std::optional<double> memory_bytes_;
  std::string optimizer_;
  double resident_factor_ = 2;
  std::vector<double> latency_s_, rate_Bps_, nccl_latency_s_;  ///< per ordered host pair, row-major
};

/** The task-graph engine over one CostModel. Not thread-safe. */
class TaskGraphEngine {
 public:
  explicit TaskGraphEngine(const CostModel& model) : model_(&model) {}
  /** Builds the graph of `strategy` from nothing and times every task;
   *  returns the mini-batch time (the last all-reduce's end, or the last
   *  backward's). `strategy` must be valid (strategy_problem == "") with
   *  data degrees <= the micro-batches. */
  double full(const Strategy& strategy);
  /** Times `strategy` from the graph and times of the last strategy this
   *  engine timed (by full or delta): when both have the same stage count,
   *  only the tasks of stages whose configuration or layers changed (and
   *  the transfers into and out of them) are rebuilt, and only the tasks
   *  whose inputs' times changed are re-timed; otherwise it runs full().
   *  Returns what full(strategy) returns, exactly. */
  double delta(const Strategy& strategy);

  /// Tasks re-timed by the last call (all of them for full).
  std::int64_t last_retimed() const { return last_retimed_; }
  std::int64_t task_count() const { return static_cast<std::int64_t>(duration_.size()); }
  const Strategy& strategy() const { return strategy_; }
  /// Start and end of every task, in the engine's task order (for tests).
  const std::vector<double>& ends() const { return end_; }

 private:
  enum class Kind { Forward, Backward, Activation, Gradient, AllReduce };
  int id(Kind kind, int stage, int micro_batch) const;
  void allocate(int stages);
  void assign_stage(int s, bool track);
  /// The activation (Kind::Activation, to stage neighbour = s + 1) or gradient (to s - 1) transfers of stage s.
  void assign_transfers(Kind kind, int s, int neighbour, bool track);
  void assign_activations(int s, bool track);
  void assign_gradients(int s, bool track);
  void set(int task, double duration, int previous, bool track);
  double ready(int task) const;
  void mark_successors(int task);
  void mark(int task);
  double makespan() const;

  const CostModel* model_;
  Strategy strategy_;
  int stages_ = 0, micro_batches_ = 0;
  std::vector<double> duration_, start_, end_;
  std::vector<int> previous_, next_;  ///< resource order: the task before / after on its device or channel
  std::vector<int> order_, position_;  ///< a topological order of every strategy of this shape
  std::vector<std::vector<int>> all_reduce_inputs_;  ///< per stage: each replica's last backward
  std::vector<std::uint8_t> dirty_;
  int pending_ = 0, first_dirty_ = 0;
  std::int64_t last_retimed_ = 0;
};

}  // namespace pipegrid::search
