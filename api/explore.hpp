#pragma once
// The library facade of `pipegrid explore` (BaPipe's automatic exploration):
// an ExploreRequest (plain data) in, an ExploreResult (plain data) out.
// explore() enumerates parallel layout x schedule x micro-batch shape x
// partition, simulates each candidate in its own forked process, several at
// once, and ranks them by throughput among those that fit in memory. It
// never parses arguments or prints; cli/ does.
//
// Layouts t x p x d (Megatron-LM's sizes, t x p x d = the platform's hosts):
// for each tensor-parallel group size t tried, every d dividing the hosts / t
// groups, p = groups / d. d = 1: one pipeline over every group, every
// schedule, PipeDream's per-stage replication included; p = 1: the dp
// schedule (the whole model on every group); 1 < d < groups: d whole
// pipelines (Megatron-Core's rank order, make_plan's layout) of every
// flushed multi-stage schedule, each over its own M micro-batches
// (global batch = micro-batch size x M x d = the mini-batch), partitioned
// uniformly, by pipedream-straight and bapipe over the pipeline of replica 0,
// and by Megatron's stage layout (megatron_partition) when the profile has
// transformer layers.

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/partition.hpp"
#include "core/plan.hpp"
#include "core/platform.hpp"
#include "core/profile.hpp"
#include "partitioners/explorer.hpp"

namespace pipegrid::api {

struct ExploreRequest {
  std::string platform_file;
  std::string profile_file;
  /// The micro-batch size the profile was measured at, for PipeDream
  /// graph.txt profiles (read_model_graph).
  std::optional<int> batch_size;
  int mini_batch_size = 0;  ///< samples per mini-batch, split into M micro-batches
  /// Replaces every host's memory capacity (units as parse_bytes takes
  /// them); "": each host's own `memory`.
  std::string memory;
  /// Only these schedules (exploration_schedules); empty: every one valid on the hosts.
  std::vector<std::string> schedules;
  /// Only these of partitioner_names() and "megatron"; empty: all of them
  /// (megatron only for a profile with transformer layers).
  std::vector<std::string> partitioners;
  /// Only these micro-batch counts M (micro_batch_choices; per pipeline under
  /// a layout of d > 1 pipelines); empty: every divisor.
  std::vector<int> micro_batches;
  /// Only layouts with these data-parallel sizes d (1: one pipeline over
  /// every group; hosts / t: dp); empty: every divisor of the groups.
  std::vector<int> data_parallel;
  /// "exact": stale-weight schedules ranked apart; "all": one ranking for every schedule.
  std::string semantics = "exact";
  int jobs = 0;  ///< simulations at once (forked processes); 0: the number of online cores
  std::string network = "simgrid";  ///< simgrid or analytic (sim::parse_network_model)
  std::string transfer_rule = "share";  ///< share or fifo (sim::parse_transfer_rule)
  std::string optimizer;  ///< sgd, momentum or adam; "": default_optimizer of the dtype
  bool split_layers = false;  ///< bapipe: split boundary layers between GPUs too
  /// Tensor-parallel group sizes to try (exploration_tensor_parallel); empty:
  /// 1, 2, 4, 8 where they apply.
  std::vector<int> tensor_parallel;
  /// Megatron's sequence parallelism in every candidate with t > 1
  /// (PlanRequest::sequence_parallel).
  bool sequence_parallel = false;
  std::string dtype;  ///< fp32, fp16 or bf16: the profile's number format when it states none; "": none
};

/** A parallel layout t x p x d explore tried, and how many candidates ran on it. */
struct ExploredLayout {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int data_parallel = 1;
  std::size_t candidates = 0;
};

/** "t2 p4 d2": how outputs name a layout. */
std::string layout_label(int tensor_parallel, int pipeline_parallel, int data_parallel);

/** Told (candidates simulated so far, candidates in all): once before the
 *  first simulation starts and once after each one ends, in the calling
 *  process. */
using ExploreProgress = std::function<void(std::size_t simulated, std::size_t total)>;

struct ExploreResult {
  /// The platform as read; its `file` is the file's base name (partitioners
  /// name it so in their messages).
  PlatformSummary platform;
  /// The profile at its own micro-batch size, layers given by FLOPs only
  /// timed by the hosts' device models.
  Profile profile;
  std::optional<double> memory_limit_bytes;  ///< request.memory, parsed
  MicroBatchChoices micro_batch_choices;     ///< the shapes tried, and how they were chosen
  std::vector<std::string> device_model_notes;  ///< how layers given by FLOPs were timed
  std::vector<int> tensor_parallel_tried = {1};  ///< {1}: no tensor parallelism tried
  std::map<int, std::string> tensor_parallel_notes;  ///< per group size t: Plan::tensor_parallel_note
  /// The layouts with at least one candidate, by t, then d ascending.
  std::vector<ExploredLayout> layouts;
  /// Why a layout, or a partition on one, was not tried (a global batch that
  /// does not split over its pipelines, Megatron's layout that does not
  /// divide), for people; each once.
  std::vector<std::string> layout_notes;
  int jobs = 1;  ///< simulations run at once
  /// One per candidate, in the order they were enumerated.
  std::vector<CandidateOutcome> outcomes;
  /// Per outcome (same index): the partition it ran on; absent when none
  /// could be made (its outcome's error says why).
  std::vector<std::optional<Partition>> partitions;
  /// Indices into outcomes. With semantics "exact": the weight-exact
  /// candidates, and apart the stale-weight ones; with "all": every
  /// candidate, and stale_weight_ranking is empty.
  std::vector<RankedCandidate> ranking, stale_weight_ranking;
  /// The winner's (ranking's rank 1) plan, as `pipegrid simulate --plan`
  /// re-runs it; absent when no candidate fits.
  std::optional<Plan> best_plan;

  bool has_winner() const { return !ranking.empty() && ranking.front().rank == 1; }
  /// Whether a tensor-parallel group size t > 1 was tried (outputs show it
  /// only then, and otherwise read as before tensor parallelism existed).
  bool shows_tensor_parallel() const { return tensor_parallel_tried != std::vector<int>{1}; }
  /// Whether a layout of several pipelines of several stages (p > 1 and
  /// d > 1) was tried (outputs show layouts only then, and otherwise read as
  /// before layouts existed).
  bool shows_layouts() const {
    for (const ExploredLayout& layout : layouts)
      if (layout.pipeline_parallel > 1 && layout.data_parallel > 1) return true;
    return false;
  }
};

/** Runs the exploration `request` describes. Each candidate is simulated in
 *  a child process forked through fork_child (at most request.jobs at
 *  once); the outcomes come back in enumeration order whatever order they
 *  finish in, so the result does not depend on jobs. Flushes stdout and
 *  stderr before forking. A partition no partitioner can make, or a
 *  simulation that fails, is a failed candidate (its outcome's error).
 *  Throws InputError for bad input (its message names the flag or file:
 *  a --data-parallel size that divides no group count, filters that leave
 *  no candidate, megatron asked of a profile without transformer layers),
 *  and std::runtime_error when a candidate hits an internal error or the
 *  processes cannot be run. */
ExploreResult explore(const ExploreRequest& request, const ExploreProgress& progress = {});

}  // namespace pipegrid::api
