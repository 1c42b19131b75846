#pragma once
// The FP8 recipe (simulate --fp8-format; Megatron-LM core_v0.14.0
// --fp8-format with --bf16 or --fp16): Transformer Engine runs the GEMMs of
// the transformer blocks' linear layers (Q K V, output projection, MLP up
// and down) in FP8, with the scaling kernels around them, and keeps what
// docs/semantics.md ("FP8") lists in memory. The attention core, the
// embedding, the norms, the output layer (head) and the loss stay in the
// run's dtype. Pure functions over plain data.

#include <string>
#include <vector>

#include "core/profile.hpp"

namespace pipegrid {

/// The formats --fp8-format takes (Megatron-LM core_v0.14.0,
/// megatron/training/arguments.py): "e4m3" (E4M3 everywhere) and "hybrid"
/// (E4M3 forward, E5M2 gradients). Both run at the same tensor-core rate and
/// keep the same bytes (one per value), so pipegrid models them alike.
const std::vector<std::string>& fp8_format_names();

/** Checks an FP8 recipe against the run's dtype: "" (no FP8) passes;
 *  otherwise the format must be one of fp8_format_names() and the weights
 *  bf16 or fp16 (FP8 is a recipe on top of 16-bit mixed precision, as
 *  Megatron runs it). InputError naming `flag` (e.g. "--fp8-format") with
 *  what was expected and what was found. */
void check_fp8_recipe(const std::string& format, const std::string& dtype, const std::string& flag = "--fp8-format");

/// Parameters (elements, the whole layer before tensor parallelism) whose
/// GEMMs run in FP8: a "transformer" layer with a transformer_shape, its
/// Q K V (h x (h + 2 kv)), output projection (h x h), MLP up (h x u, u = f
/// or 2 f with SwiGLU) and down (f x h) weights; 0 for any other layer
/// (the embedding, norms, head and loss stay in the run's dtype; biases and
/// the norms' scales too).
double fp8_gemm_parameters(const Layer& layer);

/// Bytes per FP8-GEMM parameter that Transformer Engine keeps for the whole
/// run (docs/semantics.md, FP8): the weight's FP8 copy (1) and its FP8
/// transpose (1), which Hopper's FP8 GEMMs need for the input gradient
/// (TN layouts only), cached across micro-batches.
constexpr double kFp8WeightCacheBytesPerParameter = 2;

/// Bytes per FP8-GEMM parameter moved by the weights' cast, once per
/// mini-batch (TE's weight cache: Megatron marks the first micro-batch of
/// each step): reads the weight (`element_bytes`), writes the FP8 copy and
/// its transpose (1 + 1).
double fp8_weight_cast_bytes_per_parameter(double element_bytes);

/** The stash of the FP8 recipe for each "transformer" layer of `profile`
 *  with a transformer_shape (element bytes `element_bytes`, the run's
 *  dtype): the inputs Transformer Engine's FP8 GEMMs save for their weight
 *  gradients are kept in FP8, one byte per value, in place of the dtype's:
 *  - the Q K V and MLP up inputs (the norms' outputs, N h each): e -> 1;
 *  - the MLP down input (the activation's output, N f): e -> 1;
 *  - the output projection's input (the attention's output, N h): e -> 1
 *    with unfused attention; with flash attention the attention kernel
 *    keeps its output in the dtype for its own backward, and the
 *    projection's FP8 copy (N h bytes) comes on top.
 *  activation_bytes, replicated_activation_fraction (the norms' outputs
 *  are among what tensor parallelism keeps whole) and
 *  attention_core_stash_share (the core's own bytes unchanged) are updated
 *  to match. Other layers are untouched. */
void apply_fp8_activations(Profile& profile, double element_bytes);

}  // namespace pipegrid
