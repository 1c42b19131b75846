#pragma once
// BaPipe's automatic exploration, the pure part: which schedules and
// micro-batch shapes to try on a platform, and how the simulated candidates
// rank. Running the candidates (one simulation each) is the caller's work;
// nothing here touches SimGrid.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/platform.hpp"

namespace pipegrid {

/** A schedule the explorer tries, and whether it computes with stale weights
 *  (the PipeDream family: more throughput, less statistical efficiency). */
struct ExploredSchedule {
  std::string name;
  bool stale_weights = false;
};

/** The schedules valid on `hosts`: gpipe and dp everywhere; 1f1b-sno and
 *  1f1b-so when some host is synchronous (GPU); 1f1b-as when some host is
 *  asynchronous (FPGA); fbp-as only when every host is asynchronous (it runs
 *  forward and backward at once); then the stale-weight pipedream,
 *  pipedream-2bw and pipeoptim. `requested` (non-empty) restricts the list to
 *  those names, in catalog order; a requested schedule that cannot run on
 *  these hosts is an InputError naming it and the reason. Two-copy
 *  schedules (ScheduleInfo::two_copies: dualpipe) are not explored: left out
 *  of the list, an InputError when requested. */
std::vector<ExploredSchedule> exploration_schedules(const std::vector<HostInfo>& hosts,
                                                    const std::vector<std::string>& requested);

/** One way to cut a mini-batch: M micro-batches of `micro_batch_size` samples. */
struct MicroBatchShape {
  int micro_batches = 1;
  int micro_batch_size = 1;
};

struct MicroBatchChoices {
  std::vector<MicroBatchShape> shapes;  ///< ascending M
  std::string note;                     ///< how they were chosen, for people
};

/** The shapes of a mini-batch of `mini_batch_size` samples (SEMANTICS.md,
 *  Batch size). With several measured sizes: every divisor M of the
 *  mini-batch whose micro-batch size lies within the measured range (no
 *  extrapolation). With one measured size b the tool invents no scaling: the
 *  micro-batch size stays b and M runs over the divisors of
 *  mini_batch_size / b (mini-batch = M x b), which must be a whole number.
 *  `requested_counts` (non-empty) keeps only those M. InputError when no
 *  shape remains. */
MicroBatchChoices micro_batch_choices(int mini_batch_size, const std::vector<int>& measured_sizes,
                                      const std::vector<int>& requested_counts);

/** A device whose simulated peak memory exceeds what it may use. */
struct MemoryOverflow {
  std::string host;
  double peak_bytes = 0;
  double capacity_bytes = 0;
};

/** What one simulated (or failed) candidate came to. */
struct CandidateOutcome {
  std::string schedule;
  int micro_batches = 1;
  int micro_batch_size = 1;
  std::string partitioner;  ///< "whole model" for dp; "uniform=bapipe" when they chose the same partition
  std::string replicas;     ///< replicas per stage, "1-1-1-1", "3-1"; dp: the hosts
  bool stale_weights = false;
  /// Hosts per tensor-parallel group: each stage on t hosts of one server
  /// (Plan::tensor_parallel); the partition places stages on the groups' leaders.
  int tensor_parallel = 1;
  /// The parallel layout t x p x d it was enumerated under (Megatron-LM's
  /// sizes, t x p x d = the hosts): p pipeline ranks (1 for dp, the tensor
  /// groups for one pipeline over every group, PipeDream's replicated stages
  /// included) and d whole pipelines, each running M micro-batches.
  int pipeline_parallel = 1;
  int data_parallel = 1;
  /// Samples per mini-batch: micro_batch_size x micro_batches x d (dp: its
  /// M micro-batches are spread over its replicas, so M x micro_batch_size).
  long long global_batch_size = 0;
  std::optional<std::string> error;  ///< could not be partitioned or simulated
  double throughput_samples_per_s = 0;
  double minibatch_time_s = 0;
  double bubble_fraction = 0;
  /// What the time implies (FlopsUtilisation, core/utilisation.hpp): model
  /// TFLOP/s per GPU and MFU; absent without FLOPs or device models.
  std::optional<double> tflops_per_gpu, mfu;
  double peak_memory_bytes = 0;  ///< largest over the devices
  std::string peak_memory_host;
  std::vector<MemoryOverflow> overflows;
  int devices = 0;               ///< hosts the partition uses (t per stage replica under tensor parallelism)
  std::vector<int> idle_stages;  ///< stages that do no compute (idle_stages())
  /// The label of the same partition with its idle stages merged away
  /// (merge_idle_stages()), run as a candidate of its own; empty when none.
  std::string merged_as;
  bool fits() const { return !error && overflows.empty(); }
};

/** A candidate's place in its ranking. */
struct RankedCandidate {
  std::size_t index = 0;  ///< into the outcomes
  int rank = 0;           ///< 1 = the winner; 0 = out of the running (OOM or error)
  std::string verdict;    ///< "winner", or why it lost, for people
};

/** A candidate with idle stages ranks right after the same partition
 *  without them (its `merged_as`, same schedule, shape and layout) when that fits
 *  and reaches at least this share of its throughput. */
constexpr double kFewerDevicesShare = 0.99;

/** The tensor-parallel group sizes explore tries on a platform: of
 *  `requested` (empty: 1, 2, 4, 8), those t for which `why_not(t)` is empty
 *  (the caller's rule: t divides the hosts, and for the default sizes no
 *  group spans two servers), and t > 1 only when `splits` (the profile has a transformer layer with FLOPs). A
 *  requested t that does not fit, or t > 1 requested for a profile without
 *  such layers, is an InputError naming --tensor-parallel and why (via
 *  `why_not(t)`, the groups' own message). */
std::vector<int> exploration_tensor_parallel(const std::vector<int>& requested, bool splits,
                                             const std::function<std::string(int)>& why_not);

/** Ranks outcomes[i] for i in `members`: candidates that fit first, by
 *  throughput (higher first; throughputs within 1e-9 relative tie), ties to
 *  the lower peak memory, then to the earlier index; a candidate with idle
 *  stages whose merged partition fits at kFewerDevicesShare of its
 *  throughput or more ranks right after it, its verdict saying so; then the ones out of
 *  memory (smallest largest overflow first), then the failed ones. Each
 *  loser's verdict says why: slower than the winner by what fraction, as fast
 *  with more memory, out of memory on which device by how much, or the error. */
std::vector<RankedCandidate> rank_candidates(const std::vector<CandidateOutcome>& outcomes,
                                             const std::vector<std::size_t>& members);

}  // namespace pipegrid
