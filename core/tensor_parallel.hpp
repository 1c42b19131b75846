#pragma once
// Tensor parallelism (Megatron-style) as a pure transform of a profile: a
// stage runs split t ways over t consecutive hosts (Megatron's rank order), the
// pipeline and data-parallel dimensions run over those groups, and each
// group's first host (its leader) stands for it in the simulation
// (docs/semantics.md, Tensor parallelism). Nothing here touches SimGrid.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/platform.hpp"
#include "core/profile.hpp"

namespace pipegrid {

/** Most hosts a tensor-parallel group may have (--tensor-parallel). */
constexpr int kMaxTensorParallel = 64;

/** The link a group's ring all-reduce runs over: the slowest step of the
 *  ring (the largest latency and the narrowest bandwidth of the routes from
 *  each member to the next, the last back to the first), and what NCCL
 *  achieves over it (docs/semantics.md, NCCL efficiency and latency): the
 *  smallest `nccl_efficiency` and the largest `nccl_latency` of the links
 *  its routes cross. */
struct TensorParallelLink {
  double latency_s = 0;
  double bandwidth_Bps = 0;
  double nccl_efficiency = 1;  ///< in (0, 1]: each step's bytes go at nccl_efficiency x bandwidth
  double nccl_latency_s = 0;   ///< paid once per collective, before its ring steps
  /// 0 when no group spans servers; else the fewest channels a ring step
  /// between two servers runs over (tensor_parallel_link).
  int crossing_channels = 0;
};

/** Seconds of one ring all-reduce of `bytes` over `t` hosts:
 *  nccl_latency + 2 (t - 1) x (latency + bytes / (t x nccl_efficiency x
 *  bandwidth)); 0 when t == 1. */
double ring_all_reduce_s(double bytes, int t, const TensorParallelLink& link);

/** Seconds of one ring reduce-scatter of a tensor of `bytes` over `t` hosts
 *  (each ends with its 1 / t, reduced): nccl_latency + (t - 1) x (latency +
 *  bytes / (t x nccl_efficiency x bandwidth)); 0 when t == 1. A
 *  reduce-scatter and an all-gather together cost one ring_all_reduce_s of
 *  the same bytes, plus one more nccl_latency. */
double reduce_scatter_s(double bytes, int t, const TensorParallelLink& link);

/** Seconds of one ring all-gather of a tensor of `bytes` (whole, once
 *  gathered) over `t` hosts: as reduce_scatter_s. */
double all_gather_s(double bytes, int t, const TensorParallelLink& link);

/** How a run charges the tensor-parallel collectives (--tp-collectives):
 *  Compute adds their seconds (ring_all_reduce_s, reduce_scatter_s,
 *  all_gather_s over the TensorParallelLink) to the layers' times; Flows
 *  leaves the times alone and lets the engine run them as network flows
 *  over each group's hosts (docs/semantics.md, Tensor parallelism). */
enum class TensorParallelCollectives { Compute, Flows };
const char* to_string(TensorParallelCollectives mode);
/// InputError naming --tp-collectives unless `text` is compute or flows.
TensorParallelCollectives parse_tensor_parallel_collectives(const std::string& text);

/** One kind of ring collective of a tensor-parallel group. */
enum class RingCollectiveKind { AllReduce, ReduceScatter, AllGather };
/// "all_reduce", "reduce_scatter" or "all_gather" (plan files).
const char* to_string(RingCollectiveKind kind);
/// Ring steps over t hosts: 2 (t - 1) for an all-reduce, t - 1 otherwise
/// (each step moves bytes / t from every host to the next); 0 when t <= 1.
int ring_steps(RingCollectiveKind kind, int t);

/** `count` ring collectives of one kind, each of a tensor of `bytes` (whole:
 *  each ring step moves bytes / t). */
struct RingCollective {
  RingCollectiveKind kind = RingCollectiveKind::AllReduce;
  int count = 1;
  double bytes = 0;
  friend bool operator==(const RingCollective&, const RingCollective&) = default;
};

/** A layer's tensor-parallel collectives per pass: its forward's, and its
 *  backward's input-gradient part's (I, or B when not split). */
struct LayerCollectives {
  std::vector<RingCollective> forward, backward_input;
  bool empty() const { return forward.empty() && backward_input.empty(); }
  friend bool operator==(const LayerCollectives&, const LayerCollectives&) = default;
};

/** Seconds of `collectives` over t hosts as Compute charges them: the sum,
 *  in order, of count x ring_all_reduce_s, reduce_scatter_s or all_gather_s
 *  of their bytes. */
double collectives_s(const std::vector<RingCollective>& collectives, int t, const TensorParallelLink& link);

/** Whether tensor parallelism divides `layer`'s work (times, FLOPs, bytes)
 *  by t (tensor_parallel_profile below): op "transformer" with FLOPs (a
 *  whole Megatron-splittable block); a vocabulary-parallel head (op
 *  "linear") or loss (op "loss") with Layer::vocabulary; with sequence
 *  parallelism also op "norm". A vocabulary-parallel embedding is not: its
 *  word table is split, but each member looks up every token. */
bool tensor_parallel_splits(const Layer& layer, bool sequence_parallel = false, bool split_linear = false);

/** A fully connected layer that is no vocabulary-parallel head: op "linear"
 *  without `vocabulary`, or a layer of unknown op whose name is PyTorch's
 *  module text "Linear(...)", alone or after "nodeN: " (PipeDream's graph.txt
 *  layers). */
bool is_plain_linear(const Layer& layer);

/** A profile as each member of a group of t runs it, and what happened. */
struct TensorParallelProfile {
  Profile profile;
  std::vector<int> split;       ///< indices of the split transformer layers
  std::vector<int> vocabulary;  ///< indices of the layers split over the vocabulary
  std::vector<int> sequence;    ///< indices of the norms sequence parallelism splits
  std::vector<int> linear;      ///< indices of the plain linear layers split column-parallel (split_linear)
  std::vector<int> replicated;  ///< indices of the replicated layers
  /// Per layer of `profile`: its collectives (empty for a replicated layer
  /// or t == 1), whichever the mode; under Compute their seconds are in the
  /// layer's times, under Flows they are not.
  std::vector<LayerCollectives> collectives;
  /// For people: "tensor parallel 4: 24 transformer layers split; split
  /// over the vocabulary: embedding, head, loss; 1 layer replicated:
  /// final_norm", with the collectives, the link and the transfer rule.
  /// Empty when t == 1.
  std::string note;
};

/** The profile per group member (t >= 1; t == 1 returns `profile` as is),
 *  as Megatron-Core (core_v0.14.0) splits a GPT (docs/semantics.md, Tensor
 *  parallelism). Collectives are charged as compute time of the layer: those
 *  of the forward added to forward_s, those of the backward to its
 *  input-gradient part I; the backward's parts are then given explicitly
 *  (I' = I / w + collectives, W' = W / w, backward = I' + W', w the work's
 *  divisor, t or 1), on every device's times too. X is a layer's input:
 *  the output_bytes of the layer before it (input_bytes for the first).
 *  - a transformer layer (op "transformer" with FLOPs): times, FLOPs,
 *    bytes_read and bytes_written divided by t; plus, per pass (forward, and
 *    the backward's I), 2 ring_all_reduce_s of its output_bytes, or with
 *    `sequence_parallel` 2 reduce_scatter_s + 2 all_gather_s of them (the
 *    same seconds);
 *  - a vocabulary-parallel embedding (op "embedding" with `vocabulary`):
 *    times, FLOPs and bytes whole; forward plus 1 ring_all_reduce_s of its
 *    output_bytes (VocabParallelEmbedding's), with sequence parallelism
 *    plus 1 all_gather_s of them in the backward (the scatter to the
 *    sequence-parallel region is local; its backward gathers) or, when it has
 *    no replicated parameters (no position table), 1 reduce_scatter_s
 *    forward instead of the all-reduce;
 *  - a vocabulary-parallel head (op "linear" with `vocabulary`): work
 *    divided by t; the backward's I plus 1 ring_all_reduce_s of X (the
 *    input's gradient), or with sequence parallelism the forward plus 1
 *    all_gather_s of X and I plus 1 reduce_scatter_s of X;
 *  - a vocabulary-parallel loss (op "loss" with `vocabulary`): work divided
 *    by t; forward plus 3 ring_all_reduce_s of 4 x rows bytes (fp32 max,
 *    sum of exponentials and target logit per row), rows = X / (vocabulary
 *    x dtype_bytes(profile.dtype));
 *  - with sequence parallelism, a norm (op "norm"): work divided by t;
 *  - those four kinds (and the norms under sequence parallelism): parameter
 *    bytes R + (parameter_bytes - R) / t, R = replicated_parameter_bytes;
 *    stashed activation A x (f + (1 - f) / t), f =
 *    replicated_activation_fraction, or A / t with sequence parallelism
 *    (norms: parameters whole, stash A / t);
 *  - every other layer is replicated: its times, FLOPs, parameters and stash
 *    kept (activation_bytes set to what it stashed);
 *  - every layer's output_bytes (what crosses a cut to the next stage) is
 *    divided by t: the t members of a group send their shares to the next
 *    group's members in parallel, and the leader's transfer carries one.
 *  Layers without times (times_given false) are treated alike: a device
 *  model must fill their times before this transform (from the divided
 *  FLOPs they would miss the collectives). InputError when t < 1 or t >
 *  kMaxTensorParallel, or when the profile's dtype is unknown and a loss
 *  needs it. A split layer's attention_core_flops_share and _stash_share
 *  are re-expressed as shares of the member's FLOPs and stash (the core
 *  splits t ways by heads). With `comm_overlap` (needs `sequence_parallel`,
 *  as Megatron-LM asserts; InputError otherwise), a transformer layer's
 *  collectives add only overlapped_collectives_s of its pass (on every
 *  device's times too); a layer without attention_core_flops_share is
 *  taken as GEMMs throughout. With `mode` Flows nothing is added to any
 *  time (the backward's parts are still given explicitly): the collectives
 *  are only listed in TensorParallelProfile::collectives, for the engine
 *  to run; comm_overlap is then refused (InputError naming
 *  --tp-comm-overlap: the overlap is modelled as a bound on compute time
 *  only).
 *  With `split_linear` (the strategy search, search/; off for simulate's
 *  --tensor-parallel, whose results stay as they were), every plain linear
 *  layer (is_plain_linear) is split too, column-parallel with its output
 *  gathered (Megatron-Core core_v0.14.0 ColumnParallelLinear with
 *  gather_output=True, as FlexFlow splits AlexNet's fully connected layers
 *  over their output channels): work, FLOPs and parameter bytes divided by
 *  t as for the kinds above, stash A x (f + (1 - f) / t); per forward 1
 *  all_gather_s of its output_bytes (whole), per backward's I 1
 *  ring_all_reduce_s of X (the input's gradient, each member holding a
 *  partial sum).
 *  A mixture-of-experts block (a transformer layer with
 *  expert_parameter_bytes E > 0) is split as a block, except its routed
 *  experts' weights: the member keeps R + (parameter_bytes - R - E) / t +
 *  E / etp parameter bytes and expert_parameter_bytes E / etp, where etp =
 *  `expert_tensor_parallel` (0: t; Megatron-Core core_v0.14.0's
 *  --expert-tensor-parallel-size, whose default is the tensor-parallel
 *  size). Its work (FLOPs, bytes, times) is divided by t whatever etp is:
 *  at etp < t each member runs whole experts on its own tokens, at etp = t
 *  1 / t of each expert on the group's tokens. Its moe_dispatch_bytes are
 *  divided by t (each member dispatches its share of the tokens, in
 *  parallel, as output_bytes). */
TensorParallelProfile tensor_parallel_profile(const Profile& profile, int t, const TensorParallelLink& link,
                                              bool sequence_parallel = false, bool comm_overlap = false,
                                              TensorParallelCollectives mode = TensorParallelCollectives::Compute,
                                              bool split_linear = false, int expert_tensor_parallel = 0);

/** Megatron-LM's --tp-comm-overlap (Transformer Engine's userbuffers): a
 *  transformer layer's sequence-parallel all-gathers and reduce-scatters
 *  run pipelined with the GEMMs they feed or follow (the all-gathers before
 *  the QKV and FC1 GEMMs, the reduce-scatters after the projection and FC2
 *  GEMMs; in the backward, with the input-gradient GEMMs). Per pass, the
 *  seconds the collectives still add: max(0, collectives_s - gemm_s), where
 *  gemm_s is the pass's GEMM time, (1 - attention_core_flops_share) of the
 *  member's pass time (every FLOP of a block outside its attention core is
 *  in those four GEMMs). An upper bound on what the overlap hides: the four
 *  pairs are pooled (a collective longer than its own GEMM is hidden by
 *  another's slack), and the SMs the communication kernels take from the
 *  GEMMs are not charged. */
double overlapped_collectives_s(double collectives_s, double gemm_s);

/** The groups of t consecutive hosts (indices into platform.hosts): group g
 *  holds hosts g t .. g t + t - 1, as Megatron-LM's rank order makes its
 *  tensor-parallel groups (ranks g t .. g t + t - 1). A group may span
 *  servers (HostInfo::server, the innermost SimGrid zone that holds a host;
 *  `pipegrid platform cluster` makes one zone per server): its ring then
 *  crosses between them (tensor_parallel_link). InputError (naming
 *  --tensor-parallel) when t < 1 or t > kMaxTensorParallel, or when t does
 *  not divide the hosts. */
std::vector<std::vector<int>> tensor_parallel_groups(const PlatformSummary& platform, int t);

/** The host pairs whose routes tensor_parallel_link weighs, in the order it
 *  expects them: for each group with more than one host, each ring step
 *  (member m to member m + 1, the last to the first); for a step from one
 *  server to another, instead, NCCL's channels across that boundary: the
 *  k-th member the group has on the first server to its k-th member on the
 *  second, for k below the smaller of the two counts. */
std::vector<std::pair<std::size_t, std::size_t>> tensor_parallel_route_pairs(const PlatformSummary& platform,
                                                                             const std::vector<std::vector<int>>& groups);

/** The link a group's collectives run over, the slowest over every group
 *  (docs/semantics.md, Tensor parallelism): the smallest bandwidth and
 *  largest latency over the ring's steps. A step inside one server: its
 *  route (the narrowest link, the summed latency). A step between two
 *  servers is taken by c channels at once (NCCL runs one ring per channel
 *  and places the channels' crossings on distinct NICs when each GPU has
 *  its own), each carrying 1 / c of the bytes: c equal concurrent flows
 *  over the routes of tensor_parallel_route_pairs, each at the rate of its
 *  most loaded link (bandwidth / the flows that cross it; a FATPIPE link
 *  is not shared), the step's bandwidth c times the slowest flow's rate and
 *  its latency the largest route latency. `routes` holds the routes of
 *  tensor_parallel_route_pairs(platform, groups), in order. InputError when
 *  a needed route is missing. */
TensorParallelLink tensor_parallel_link(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups,
                                        const RouteTable& routes);

/** As above, the routes taken from the platform's route matrices
 *  (InputError when they are absent). */
TensorParallelLink tensor_parallel_link(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups);

/** Whether some group holds hosts of more than one server. */
bool tensor_parallel_spans_servers(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups);

/** The platform the pipeline and data-parallel dimensions see: the groups'
 *  leaders only, in order, with the routes between them (route matrices and
 *  route_links restricted; links kept). `groups` from tensor_parallel_groups. */
PlatformSummary leader_platform(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups);

}  // namespace pipegrid
