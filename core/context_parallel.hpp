#pragma once
// Context parallelism (Megatron-LM's --context-parallel-size with
// Transformer Engine's ring attention, --cp-comm-type p2p) as a pure
// transform of a profile, applied after the tensor-parallel one: each of the
// cp ranks holds s / cp tokens of every sequence (load-balanced: the sequence
// cut into 2 cp chunks, rank r holding chunks r and 2 cp - 1 - r), so every
// kernel works on N / cp tokens and each rank does 1 / cp of the causal
// attention; the keys and values go round the cp ranks point to point,
// overlapped with the attention's blocks (docs/semantics.md, Context
// parallelism). Nothing here touches SimGrid.

#include <string>

#include "core/profile.hpp"
#include "core/tensor_parallel.hpp"

namespace pipegrid {

/** Most ranks a context-parallel group may have (--context-parallel). */
constexpr int kMaxContextParallel = 64;

/** InputError naming `flag` unless 1 <= cp <= kMaxContextParallel. */
void check_context_parallel_size(int cp, const std::string& flag = "--context-parallel");

/** Seconds of one point-to-point send of `bytes` over `link`: nccl_latency
 *  + latency + bytes / (nccl_efficiency x bandwidth); 0 for no bytes. */
double point_to_point_s(double bytes, const TensorParallelLink& link);

/** Seconds of the attention of one pass on one rank under ring attention
 *  over cp ranks (Transformer Engine, AttnFuncWithCPAndKVP2P): cp steps,
 *  each the local queries against one K,V block, taking `attention_s` / cp
 *  of compute (c); the transfers overlap the step they start with (per step
 *  max(c, transfer)).
 *  - forward: steps 0 .. cp - 2 each send the K,V block to the next rank
 *    (x = kv_transfer_s): (cp - 1) max(c, x) + c;
 *  - backward (`backward` true): step 0 sends K,V, steps 1 .. cp - 2 send
 *    K,V and the dK,dV accumulated so far (2 x), step cp - 1 sends dK,dV:
 *    max(c, x) + (cp - 2) max(c, 2 x) + max(c, x).
 *  cp == 1: attention_s. */
double ring_attention_s(double attention_s, double kv_transfer_s, int cp, bool backward);

/** What a context-parallel rank adds to a transformer layer's pass:
 *  ring_attention_s - attention_s (>= 0). */
double ring_attention_exposed_s(double attention_s, double kv_transfer_s, int cp, bool backward);

/** Bytes of one K,V block a rank passes on: 2 (keys and values) x (s / cp)
 *  tokens x kv_columns / t (a tensor-parallel member's heads) x batch x
 *  element bytes, from `shape` (TransformerShape: sequence, kv_columns,
 *  batch). */
double kv_block_bytes(const TransformerShape& shape, int cp, int t, double element_bytes);

/** The FlashAttention-2 backward's work over its forward's (it recomputes
 *  the scores: 2.5 x the forward's FLOPs; FlashAttention-2, section 4.1),
 *  the ratio the ring's backward blocks are timed at. */
constexpr double kAttentionBackwardRatio = 2.5;

/** A profile as each rank of a context-parallel group of cp runs it. */
struct ContextParallelProfile {
  Profile profile;
  /// For people: "context parallel 4: s 32768 -> 8192 tokens per rank; 32
  /// transformer layers' K,V blocks of 16.8 MB passed round the ring (...)".
  /// Empty when cp == 1.
  std::string note;
};

/** The profile per context-parallel rank (cp >= 1; cp == 1 returns
 *  `profile` as is), given the per-tensor-parallel-member profile and t:
 *  - every layer: times (forward, backward and its parts, on every device),
 *    FLOPs, bytes_read and bytes_written divided by cp (each rank runs N /
 *    cp tokens and, causal attention load-balanced, 1 / cp of the
 *    attention); stash (stashed_bytes) and output_bytes divided by cp, as is
 *    the profile's input_bytes; parameters whole (each rank holds the
 *    member's weights);
 *  - a transformer layer (op "transformer"): plus, on the forward,
 *    ring_attention_exposed_s(A, x, cp, false) and on the backward's input
 *    part I ring_attention_exposed_s(2.5 A, x, cp, true), with A the rank's
 *    attention core time (attention_core_time_share, else
 *    attention_core_flops_share, of its divided forward time on that
 *    device) and x = point_to_point_s(kv_block_bytes(shape, cp, t, e),
 *    link), e the element bytes of the profile's dtype (fp32 when empty).
 *    The backward's parts are then given explicitly.
 *  Layers timed by the tensor-core model were timed for N / cp tokens and
 *  stored cp x (fill_analytic_times), so the division leaves the rank's
 *  own. InputError when cp is out of range; when the profile has no
 *  transformer layer; when a transformer layer has no
 *  transformer_shape, or its attention is not flash (Megatron-Core's ring
 *  attention is Transformer Engine's: --flash-attention 1); or when the
 *  sequence does not split into 2 cp chunks (naming --context-parallel,
 *  the sequence and 2 cp: Megatron-Core's get_batch_on_this_cp_rank cuts
 *  it into 2 cp equal chunks, megatron/core/utils.py, core_v0.14.0). */
ContextParallelProfile context_parallel_profile(const Profile& profile, int cp, int t, const TensorParallelLink& link);

/** The context-parallel rings of a platform laid out as groups of t x cp
 *  consecutive hosts (tensor fastest, then context, Megatron-Core's order):
 *  for each group, its tensor rank 0's cp ranks, hosts g t cp + c t for c =
 *  0 .. cp - 1, in ring order. InputError naming --context-parallel when t
 *  x cp does not divide `hosts`. */
std::vector<std::vector<int>> context_parallel_rings(std::size_t hosts, int t, int cp);

/** Megatron reduces dense gradients over the d x cp ranks of a stage
 *  (parallel_state's "dp-cp" group); the simulation runs the ring over the
 *  d leaders. The factor by which that ring's bytes are scaled so that each
 *  leader sends what a rank of the d cp ring sends: ((n - 1) / n) / ((d -
 *  1) / d), n = d cp; 1 when cp == 1 or d == 1 (no ring to scale). */
double data_context_gradient_factor(int d, int cp);

}  // namespace pipegrid
