#pragma once
// The tensor-core kernel model of a GPU (docs/devices.md, "Tensor-core
// model"): a GPT-style layer (Layer::transformer_shape) timed kernel by
// kernel as today's frameworks run it (Megatron-LM core_v0.14.0): its GEMMs
// from their (M, N, K) shapes with tile and wave quantisation, its attention
// as one flash kernel or as the unfused products and s x s element-wise
// passes, its element-wise and normalisation kernels memory-bound, and a
// fixed cost per kernel launched. One member of a tensor-parallel group of t
// is timed (its share of the columns or rows of each GEMM, of the heads,
// and of the element-wise work where sequence parallelism splits it). Pure
// functions over plain data.

#include <string>
#include <vector>

#include "core/profile.hpp"

namespace pipegrid {

/// A GPU's tensor-core model constants (DeviceModel::tensor_cores). Every
/// efficiency is in (0, kMaxComputeEfficiency] (compute) or (0,
/// kMaxMemoryEfficiency] (memory) of the datasheet's peak, so no modelled
/// kernel runs above the hardware.
struct TensorCoreModel {
  int sms = 0;                             ///< streaming multiprocessors (the wave size of one CTA per SM)
  double gemm_efficiency = 0;              ///< a GEMM's tiles at this fraction of the dtype's dense tensor peak
  double attention_forward_efficiency = 0;   ///< a flash-attention forward kernel, of the dense peak
  double attention_backward_efficiency = 0;  ///< its backward (counted at 2.5 x the forward's FLOPs)
  double memory_efficiency = 0;            ///< element-wise kernels, of the HBM bandwidth
  double kernel_overhead_s = 0;            ///< added once per kernel launched
  bool present() const { return sms > 0; }
};

/// The member of a tensor-parallel group a layer is timed for: t members,
/// sequence parallelism on or off (t = 1: the whole layer); and its rank of
/// a context-parallel group of `context_parallel`, which runs N / cp tokens
/// and, causal attention load-balanced (core/context_parallel.hpp), 1 / cp
/// of the attention as cp kernels (one per ring step).
struct TensorParallelShare {
  int t = 1;
  bool sequence_parallel = false;
  int context_parallel = 1;
  /// A mixture-of-experts block's expert parallelism: the routed experts
  /// spread over `expert_parallel` ranks (E / ep local experts each), each
  /// expert's columns over `expert_tensor_parallel` members (0: t, as
  /// Megatron-Core's --expert-tensor-parallel-size defaults to the tensor
  /// parallel size).
  int expert_parallel = 1;
  int expert_tensor_parallel = 0;
};

/// One GEMM of (M x K) by (K x N), `batch` times (a batched GEMM).
struct GemmShape {
  double m = 0, n = 0, k = 0, batch = 1;
};

/** Seconds of one GEMM kernel at `peak_flops` (the dtype's dense tensor
 *  peak) on `sms` SMs, at GEMM efficiency 1 and without the kernel overhead
 *  (KernelSums::seconds applies both; the tile choice does not depend on
 *  them): the fastest over the CTA tiles 256x128, 128x256, 128x128,
 *  128x64, 64x128 and 64x64 of
 *    waves x 2 mt nt K' / (peak / slots x intensity_factor),
 *  where tiles = batch ceil(M / mt) ceil(N / nt), slots = sms x 32768 /
 *  (mt nt) CTAs per wave (as many tiles as 108 or 132 tiles of 256 x 128,
 *  one per SM), waves = ceil(tiles / slots), K' = K rounded up to 32, and
 *  intensity_factor = min(1, mt nt / (mt + nt) / 64) (a tile below 128 x
 *  128 reuses its operands less). 0 when any dimension is <= 0. */
double gemm_unit_time_s(const GemmShape& gemm, int sms, double peak_flops);

/// The kernels of one pass, summed (for the fit and the error bench).
struct KernelSums {
  double gemm_s = 0;                ///< GEMM seconds at gemm_efficiency 1 (quantisation included)
  double attention_forward_s = 0;   ///< flash-attention forward seconds at efficiency 1
  double attention_backward_s = 0;  ///< flash-attention backward seconds at efficiency 1
  double memory_bytes = 0;  ///< bytes the element-wise kernels move
  double kernels = 0;       ///< kernels launched
  /// The pass's seconds under `model`'s constants (peak and bandwidth given).
  double seconds(const TensorCoreModel& model, double bandwidth_Bps) const;
};

/// A layer's three passes as kernel sums, with the forward's attention core
/// (Q K^T, softmax, dropout, attention x V: what selective recomputation
/// redoes) also on its own.
struct LayerKernels {
  KernelSums forward, input, weight, attention_core;
  bool runs_input = true;  ///< the layer has an input gradient (an embedding has none)
};

/** The kernels one member (`share`) runs for `layer`, which has a
 *  transformer_shape and an op among embedding, transformer, norm, linear
 *  (the head) and loss; element size `element_bytes`. GEMM and attention
 *  terms are seconds at efficiency 1 on a device of `peak_flops` and
 *  model.sms; InputError for another op. The kernels (docs/devices.md):
 *  - transformer: norm; Q, K, V GEMM (N tokens x (h + 2 kv) / t x h);
 *    rotary; attention (flash: one kernel, 4 B s^2 h / t FLOPs, halved when
 *    causal; unfused: Q K^T and attention x V as batched GEMMs, the
 *    scale-mask-softmax and the dropout over the s x s scores); output
 *    projection (N x h x h / t); bias-dropout-add; norm; MLP up (N x u / t x
 *    h) with its fused bias-GeLU or SwiGLU; down (N x h x f / t);
 *    bias-dropout-add. With context parallelism cp, N is the rank's N / cp
 *    tokens and the flash attention its s / cp queries against all s keys
 *    (causal: 1 / cp of the causal FLOPs) in cp kernels forward and cp
 *    backward. I: each GEMM's input gradient (M x K x N), the
 *    attention's backward (flash: 2.5 x its forward FLOPs), each
 *    element-wise kernel's backward. W: each GEMM's weight gradient (K x N
 *    x M), the bias gradients. Norms and dropout-adds run on N / t tokens
 *    under sequence parallelism, on all N otherwise.
 *  - transformer with multi-head latent attention (shape.mla()): norm;
 *    the query's down projection (N x q_lora_rank x h, whole on every
 *    member as Megatron-Core's duplicated linear), its norm and up
 *    projection (N x heads (qk + pos) / t x q_lora_rank), or one query
 *    projection without a q rank; the key/value down projection (N x
 *    (kv_lora_rank + pos) x h, whole), its norm, the up projection (N x
 *    heads (qk + v) / t x kv_lora_rank); rotary over the rotary parts;
 *    attention over query/key heads qk + pos wide and value heads v wide
 *    (flash: 2 B s^2 heads (qk + pos + v) / t FLOPs, halved when causal,
 *    the backward twice that plus the Q K^T recomputed); the output
 *    projection N x h x heads v / t.
 *  - transformer with experts (shape.moe()): the attention half as above
 *    (MHA/GQA or MLA), then the router GEMM (R x E x h, R the member's
 *    tokens: N / t under sequence parallelism), its score and top-k pass
 *    and the permutation (memory passes); the routed experts as grouped
 *    GEMMs of E / ep local experts with M = N x topk x ep / E x imbalance
 *    rows each (the busiest expert-parallel rank), columns split etp ways:
 *    up (M x u_e / etp x h), activation, down (M x h x f_e / etp); the
 *    unpermutation; the shared expert's two GEMMs split t ways as a dense
 *    MLP's. Dense blocks' kernels are as above, unchanged.
 *  - embedding: word lookup, position add and dropout; W the table's gradient.
 *  - norm: a norm forward and backward.
 *  - linear (head): N x V / t x h, its input and weight gradients (V
 *    whole when the layer gives no `vocabulary`: tensor parallelism then
 *    replicates it).
 *  - loss: cross-entropy over N x V / t logits (Megatron's vocab-parallel
 *    form, V / t when the layer gives `vocabulary`: max, exp and sum, log;
 *    backward softmax minus one-hot). */
/** With `fp8_peak_flops` > 0 (the FP8 recipe, core/fp8.hpp), a transformer
 *  layer's four linear GEMMs (Q K V, output projection, MLP up and down:
 *  forward, input and weight gradients) run at `fp8_peak_flops` instead of
 *  `peak_flops` (so their GEMM seconds are peak_flops / fp8_peak_flops of
 *  the dtype's), and Transformer Engine's scaling kernels come with them,
 *  element-wise (docs/semantics.md, FP8): in the forward, each GEMM's input
 *  (M x K) cast to FP8 with its transpose and amax fused (reads e, writes
 *  1 + 1 per value; one kernel); in the input gradient, each GEMM's output
 *  gradient (M x N) likewise. The attention core, the norms and
 *  element-wise kernels, and the embedding, head and loss layers are as
 *  without FP8; so is every layer when fp8_peak_flops is 0. The weights'
 *  own cast runs once per mini-batch and is not in these passes
 *  (fp8_weight_cast_bytes_per_parameter, core/fp8.hpp). */
LayerKernels layer_kernels(const Layer& layer, const TensorCoreModel& model, double peak_flops, double element_bytes,
                           const TensorParallelShare& share, double fp8_peak_flops = 0);

}  // namespace pipegrid

namespace pipegrid {

/// One measured pass for fit_tensor_cores: its kernels (at efficiency 1)
/// and the seconds measured.
struct TensorCoreSample {
  KernelSums kernels;
  double measured_s = 0;
};

/** Fits a tensor-core model's GEMM efficiency, memory efficiency and kernel
 *  overhead to `samples` (the flash-attention efficiencies and sms are
 *  taken from `given`, as is the bandwidth): least squares, with Eigen, on
 *  relative errors (each sample's equation divided by its measured time)
 *  of
 *    measured - attention terms = gemm_s x a + memory_bytes / bandwidth x b + kernels x c,
 *  a = 1 / gemm_efficiency, b = 1 / memory_efficiency, c = the overhead,
 *  with a >= 1 / kMaxComputeEfficiency, b >= 1 / kMaxMemoryEfficiency and
 *  c >= 0: a coefficient past its bound is held there and the others
 *  refitted. Throws InputError with fewer than 3 samples or a non-positive
 *  measured time. */
TensorCoreModel fit_tensor_cores(const std::vector<TensorCoreSample>& samples, const TensorCoreModel& given,
                                 double bandwidth_Bps);

}  // namespace pipegrid
