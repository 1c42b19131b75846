#pragma once
// BaPipe's balanced partition (SEMANTICS.md, "BaPipe's balanced partition";
// BaPipe section 3.3) for a straight pipeline: one stage per host of the
// platform, in the order the platform declares them, no replicas.

#include <string>
#include <vector>

#include "core/partition.hpp"
#include "core/platform.hpp"
#include "core/profile.hpp"
#include "partitioners/partitioners.hpp"

namespace pipegrid {

/** BaPipe's four steps, over the hosts of input.platform in order, for
 *  input.schedule and input.micro_batches (default 1f1b-so, or 1f1b-as when
 *  every host is asynchronous, with M = the number of stages), judged by
 *  bapipe_pipeline_time's predicted mini-batch time:
 *  1. inter-layer: contiguous whole layers per host, minimising the slowest
 *     stage's compute, then keeping every stage as close to T as that allows
 *     (bapipe_inter_layer);
 *  2. when transfers lengthen the predicted mini-batch: coarse-grained, the
 *     whole-layer split with the shortest predicted mini-batch found
 *     (several starts, among them BaPipe's cuts under a_th, each improved a
 *     boundary move at a time), kept when shorter than step 1's; then step
 *     4, and stop;
 *  3. otherwise intra-layer: split boundary layers between neighbours that
 *     may split (two asynchronous hosts, or input.split_layers), at most one
 *     per boundary, each by the fraction that equalises the two stages'
 *     compute, kept only when together they shorten the predicted mini-batch;
 *  4. memory: when a host's demand (bapipe_memory_demand) exceeds its
 *     capacity (input.memory_limit_bytes, else the host's `memory`), the
 *     same search among whole-layer splits that fit, then split again where
 *     allowed and that still fits.
 *  The output's profile holds any split layers' parts (split_layers()) and
 *  its partition records them (Partition::split_last); time_per_stage_s is
 *  the steady-state time per micro-batch and predicted_minibatch_s the
 *  objective. Deterministic.
 *  Throws InputError when the platform has no hosts or fewer layers than
 *  hosts, for a schedule without a flush per mini-batch (bapipe plans gpipe,
 *  1f1b-sno, 1f1b-so, 1f1b-as and fbp-as), for fbp-as on a synchronous host,
 *  and when no partition into whole layers fits memory: the message names
 *  the host of the best partition found (the smallest largest share of
 *  capacity), what it needs and what it has. */
PartitionerOutput bapipe_partition(const PartitionerInput& input);

/** One stage of a straight pipeline as bapipe_pipeline_time sees it. */
struct PipelineStage {
  int host = 0;                          ///< index into the platform's hosts
  double forward_s = 0, backward_s = 0;  ///< one micro-batch on that host, its action_overhead included
  double output_bytes = 0;               ///< the activation sent to the next stage, and its gradient back (0 for the last)
};

/** BaPipe's cost model of a straight pipeline under a flushed schedule: the
 *  predicted steady-state time per micro-batch (docs/semantics.md, "BaPipe's
 *  cost model"). Transfers: latency + bytes / bandwidth over the route's
 *  links, a shared link charged as if every transfer of one micro-batch that
 *  crosses it (gpipe: of the same phase) ran at once; a route without link
 *  information is a link of its own.
 *  1f1b-sno, 1f1b-so, 1f1b-as, fbp-as: the largest of the links' load per
 *  micro-batch and, over every range of stages s..t, the steady-state cycle
 *    (sum_{u<t} f_u + F_t + sum_{u>s} b_u + B_s) / (k_s - k_t + 1),
 *  f_u = F_u + SR (synchronous host) or max(F_u, SR) (asynchronous: results
 *  stream out) with SR stage u's activation transfer, b_u likewise with B_u
 *  and its gradient transfer to stage u-1, and k_s the micro-batches stage s
 *  takes in before its first backward (bapipe_stash_bound); s = t is the
 *  stage's compute F_s + B_s; s < t only where k_s < M (a stage with k_s = M
 *  runs every forward before its first backward: no steady state there,
 *  and the mini-batch is mostly fill and drain). gpipe: max(slowest F, forward link load) +
 *  max(slowest B, backward link load). It leaves out the flush, the
 *  optimizer step, the fill and drain of a mini-batch (about the pipeline's
 *  latency on top of (M - 1) x the time), and SimGrid's default network
 *  model's corrections (a few percent slower than bytes / bandwidth).
 *  InputError for a route of zero bandwidth, a schedule bapipe does not plan,
 *  or no stages. */
struct PipelineTime {
  /// One mini-batch of M micro-batches run by the schedule's Program with
  /// the transfers charged as above (synchronous host: an output leaves
  /// when its action ends; asynchronous: it arrives at max(end, start +
  /// transfer)): the end of the last action. fbp-as's two streams are taken
  /// as independent (their sharing of the device is left out).
  double minibatch_s = 0;
  double minibatch_without_transfers_s = 0;  ///< the same with every transfer taking 0
  double time_per_micro_batch_s = 0;
  double compute_s = 0;  ///< the slowest stage's forward + backward
  int compute_stage = 0;
  /// Per stage: the largest bound above through it (its compute, the load
  /// of a link its transfers cross, a cycle over stages including it;
  /// gpipe: its forward and backward, each at least its transfers' link
  /// load). The largest equals time_per_micro_batch_s except for gpipe,
  /// whose phases are paced by different stages.
  std::vector<double> stage_s;
  std::vector<double> transfer_s;  ///< per stage: its longest transfer, charged as above
  std::string bound;               ///< what sets time_per_micro_batch_s, for people
  /// Whether the time is the slowest stage's compute (1e-9 relative).
  bool communication_hidden() const { return time_per_micro_batch_s <= compute_s * (1 + 1e-9); }
};

PipelineTime bapipe_pipeline_time(const std::vector<PipelineStage>& stages, const PlatformSummary& platform,
                                  const std::string& schedule, int micro_batches);

/** The PipelineStages of a straight partition (one host per stage; the
 *  first host of a replicated stage). */
std::vector<PipelineStage> pipeline_stages(const Profile& profile, const Partition& partition, const PlatformSummary& platform);

/** T = 1 / sum_n (1 / T_n), T_n the forward + backward time of the whole
 *  model for one micro-batch on host n (layer_times_on). 0 when some T_n is
 *  0. InputError when the platform has no hosts. */
double bapipe_ideal_stage_time(const Profile& profile, const PlatformSummary& platform);

/** Step 1 alone: the last layer of each stage (one stage per host, whole
 *  layers). The rule, exactly: (a) minimise the largest stage compute
 *  (forward + backward of its layers on its host, summed in layer order as
 *  report_stages() sums them) over every split into non-empty contiguous
 *  stages; (b) among the splits reaching that minimum, minimise the sum over
 *  stages of (stage compute - T)^2, each stage as close to T as the
 *  bottleneck allows; (c) among splits whose sums compare equal, each stage
 *  in turn as short as possible. Exact dynamic programming, O(N L^2), no
 *  tolerance (the sums are always taken in the same order). InputError with fewer layers than
 *  hosts. */
std::vector<int> bapipe_inter_layer(const Profile& profile, const PlatformSummary& platform);

/** Micro-batches stage `stage` (0-based) of `stages` keeps stashed at most
 *  under `schedule` with M = `micro_batches`: gpipe M; 1f1b-sno and 1f1b-as
 *  min(N - stage, M); 1f1b-so min(2 (N - stage), M); fbp-as min(2 (N -
 *  stage), M) (its stash cap). InputError for other schedules. */
std::vector<int> bapipe_stash_bound(const std::string& schedule, int stages, int micro_batches);

/** An upper bound on the peak memory the simulator reports for stage `stage`
 *  (SEMANTICS.md, memory rules; one weight version), with f =
 *  `resident_weight_factor` (bytes kept per weight byte: weights, gradients,
 *  master weights and optimizer state, core/precision.hpp; 2 for fp32 SGD),
 *  k = stash_bound[stage], w its weight bytes, a its stash
 *  per micro-batch, i its input message (0 for stage 0: the model's input is
 *  not received), o its output message (0 for the last stage):
 *    stage 0:  f w + k (a + o)
 *    later:    f w + S a + p_i i + p_o o,  S = min(k, k') with k' =
 *              stash_bound[stage - 1], and (p_i, p_o) = (k' - S + 1, S - 1)
 *              when i >= o, else (k' - S, S).
 *  Why it holds: a stashed micro-batch or a received activation not yet
 *  consumed is still stashed on the previous stage (at most k' of them, and
 *  only the one forward running is both); a gradient waiting is for a
 *  micro-batch stashed here, not the one whose forward runs. Stage 0's bound
 *  is reached when the next stages are fast: after its last forward they
 *  return all k gradients while it runs the first backward. */
double bapipe_memory_demand(const StageCost& stage, int stage_index, const std::vector<int>& stash_bound,
                            double resident_weight_factor = 2);

}  // namespace pipegrid
