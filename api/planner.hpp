#pragma once
// The library facade of `pipegrid plan` (issue 30): which Megatron-LM layout
// to run. Given a model as a Megatron-LM launch without its parallel
// layout, a platform of identical GPUs and a global batch, plan() enumerates
// every layout (tensor size t, pipeline size p, data size d = GPUs / (t p),
// model chunks per pipeline rank v, micro-batch size, schedule,
// recomputation, sequence parallelism, distributed optimizer) that Megatron-LM
// accepts, discards those that cannot fit by a memory lower bound, orders the
// rest by a lower bound on the iteration time, and simulates them in that
// order (each in a forked process: SimGrid runs one engine per process)
// until no remaining bound can beat the fastest fitting layout simulated.
// The bounds are proven from the simulator's own rules (docs/planner.md);
// every simulated layout is checked against its bounds, and a bound above
// the simulated value is an internal error, not a result.
//
// It never parses arguments or prints; cli/plan_command.cpp does.

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace pipegrid::api {

/// One layout of the search: Megatron-LM's sizes and switches.
struct PlannedLayout {
  int tensor_parallel = 1;    ///< t (--tensor-model-parallel-size)
  int pipeline_parallel = 1;  ///< p (--pipeline-model-parallel-size)
  int data_parallel = 1;      ///< d = GPUs / (t p)
  int virtual_stages = 1;     ///< v: model chunks per pipeline rank (interleaved schedule), else 1
  int micro_batch_size = 1;   ///< --micro-batch-size
  int micro_batches = 1;      ///< per pipeline: global batch / (micro-batch size x d)
  std::string schedule;       ///< pipegrid's name: 1f1b-sno (Megatron's 1F1B) or interleaved-1f1b
  std::string recompute;      ///< none, selective (--recompute-activations) or full (uniform, 1 layer)
  bool sequence_parallel = false;
  bool distributed_optimizer = false;
  /// "t8 p2 d64 v6 mbs4 selective sp distopt": how outputs name the layout.
  std::string label() const;
};

struct PlannerRequest {
  std::string platform_file;
  /// The model and its training (precision, sequence, vocabulary, optimizer,
  /// attention backend) as Megatron-LM arguments, without what plan chooses
  /// (the layout, the micro-batch size, recomputation, sequence parallelism,
  /// the distributed optimizer and its overlaps): InputError naming such an
  /// argument. `origin` names them in messages.
  std::string megatron_args;
  std::string origin = "--megatron-args";
  /// Samples per iteration; absent: the arguments' --global-batch-size.
  std::optional<long long> global_batch_size;
  /// Replaces every GPU's memory capacity (parse_bytes units); "": the platform's.
  std::string memory;
  /// Restrict the search (empty: every value that applies). Tensor sizes by
  /// default stay within one server, as Megatron-LM keeps them.
  std::vector<int> tensor_parallel, pipeline_parallel, data_parallel, virtual_stages, micro_batch_sizes;
  int max_micro_batch_size = 16;  ///< micro-batch sizes tried: the divisors of global / d up to this
  /// Among Megatron-LM's schedules (megatron_schedules(), layout/: 1F1B,
  /// and interleaved at v > 1); empty: both.
  std::vector<std::string> schedules;
  /// Among none, selective and full.
  std::vector<std::string> recompute = {"none", "selective", "full"};
  std::vector<bool> sequence_parallel = {false, true};
  std::vector<bool> distributed_optimizer = {false, true};
  /// Megatron-Core DDP's --overlap-grad-reduce (and --overlap-param-gather
  /// with the distributed optimizer) in every layout of d > 1.
  bool overlap_grad_reduce = true;
  /// Simulate every layout the memory bound keeps, not only until the time
  /// bound proves the best found (tests, studies of the bound's tightness).
  bool exhaustive = false;
  int top = 10;  ///< layouts in the result's table
  int jobs = 0;  ///< simulations at once (forked processes); 0: online cores
};

/// What simulating one layout gave.
struct SimulatedLayout {
  PlannedLayout layout;
  std::string megatron_args;  ///< the whole launch: the request's arguments + the layout's
  double bound_time_s = 0;        ///< the lower bound it was ranked by
  double bound_memory_bytes = 0;  ///< the memory lower bound it passed
  std::string error;              ///< not empty: the simulation refused it (why)
  double iteration_time_s = 0;
  double throughput_samples_per_s = 0;
  double peak_memory_bytes = 0;
  std::string peak_memory_host;
  bool fits = false;  ///< peak within the usable memory of every GPU
  double bubble_fraction = 0;
  std::optional<double> tflops_per_gpu, mfu;
  int order = 0;  ///< 1 for the first layout simulated, ...
};

/// Told (simulated so far, simulations started or due so far, best time so
/// far or 0): before the first simulation and after each one ends.
using PlannerProgress = std::function<void(std::size_t simulated, std::size_t due, double best_s)>;

struct PlannerResult {
  int gpus = 0, gpus_per_server = 0;
  std::string device;            ///< the GPUs' device model
  double usable_memory_bytes = 0;  ///< capacity less the reserve, per GPU
  long long global_batch_size = 0;
  std::string base_arguments;  ///< the request's arguments, as given
  /// Counts: layouts enumerated (every combination whose sizes divide),
  /// refused by Megatron-LM's rules (and why, by reason), discarded by the
  /// memory bound, never simulated because their time bound could not beat
  /// the best, and simulated (fitting or not).
  std::size_t enumerated = 0, refused = 0, memory_bounded = 0, time_bounded = 0, simulated = 0;
  std::vector<std::pair<std::string, std::size_t>> refusals;  ///< reason, count (first seen order)
  /// Every simulated layout, fastest fitting first, then the ones that do
  /// not fit or failed.
  std::vector<SimulatedLayout> ranking;
  /// The simulated fitting layouts that no other beats with less or equal
  /// peak memory and more or equal throughput, by peak memory ascending.
  std::vector<std::size_t> pareto;  ///< indices into ranking
  /// The least time bound among the layouts never simulated (absent: none
  /// left): the proof that the winner is the fastest of the search space.
  std::optional<double> best_unsimulated_bound_s;
  /// The least memory bound among the layouts it discarded, and that
  /// layout's name: what the smallest of them needs at the least (absent
  /// when the bound discarded none).
  std::optional<double> least_discarded_memory_bytes;
  std::string least_discarded_memory_layout;
  /// Per simulated layout: simulated / bound (how tight the bound is).
  double mean_bound_ratio = 0, max_bound_ratio = 0;
  double elapsed_s = 0;  ///< wall-clock seconds of the search (informative, never in goldens)
  int jobs = 1;
  std::vector<std::string> notes;
  bool has_winner() const { return !ranking.empty() && ranking.front().fits; }
};

/** Runs the search `request` describes. InputError for bad input (naming the
 *  flag or the argument); std::runtime_error when a simulation breaks an
 *  invariant (a bound above its simulated value included). */
PlannerResult plan(const PlannerRequest& request, const PlannerProgress& progress = {});

/** The result as JSON (elapsed time excluded: same inputs, same bytes):
 *  the counts, the ranking with every layout's arguments, the Pareto front.
 *  sweep's `from_plan` axis reads its "ranking". */
std::string planner_result_to_json(const PlannerResult& result);

}  // namespace pipegrid::api
