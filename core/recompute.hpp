#pragma once
// Megatron-LM's activation recomputation, layer by layer (Megatron-LM
// core_v0.14.0: megatron/core/transformer/transformer_config.py,
// recompute_granularity / recompute_method / recompute_num_layers and their
// checks; megatron/core/transformer/transformer_block.py,
// _checkpointed_forward; megatron/training/arguments.py, validate_args),
// next to GPipe's stage recomputation (Plan::recompute). What a stage
// recomputes before each backward, how long that takes, and what each
// micro-batch keeps meanwhile (docs/semantics.md, Memory). Pure functions.

#include <string>
#include <vector>

#include "core/partition.hpp"
#include "core/profile.hpp"

namespace pipegrid {

/// The largest --recompute-num-layers (the gpt model's largest layer count).
inline constexpr int kMaxRecomputeLayers = 100000;

/** The recomputation a run asks for (simulate --recompute-granularity,
 *  --recompute-method, --recompute-num-layers; Megatron-LM's arguments). */
struct LayerRecompute {
  std::string granularity;  ///< "" (none), "full" or "selective"
  std::string method;       ///< "uniform" or "block" with full; "" otherwise
  /// full: uniform, the transformer layers of each checkpoint group; block,
  /// the transformer layers checkpointed at the start of each stage. 0
  /// otherwise.
  int num_layers = 0;
  bool enabled() const { return !granularity.empty(); }
};

/** Megatron's rules, as TransformerConfig.__post_init__ and validate_args
 *  apply them: granularity full or selective; full takes a method (uniform
 *  or block) and a layer count >= 1; selective takes neither; without a
 *  granularity neither applies. InputError naming the flag otherwise. */
void check_layer_recompute(const LayerRecompute& recompute);

/** "full recomputation, uniform, 1 transformer layer per checkpoint",
 *  "full recomputation, block, the first 2 transformer layers of each
 *  stage", "selective recomputation (the attention core)". "" when none. */
std::string layer_recompute_text(const LayerRecompute& recompute);

/** Checks that `profile` can be recomputed so: full needs a layer of op
 *  "transformer" (Megatron checkpoints the transformer layers, never the
 *  embedding, the head or the loss), selective also each transformer layer's
 *  attention core (Layer::attention_core_flops_share, the gpt generator's).
 *  InputError naming the flag and `profile_label` otherwise. */
void check_layer_recompute_profile(const LayerRecompute& recompute, const Profile& profile,
                                   const std::string& profile_label);

/** What the recomputation does on one stage (the layers of one model chunk,
 *  Megatron's TransformerBlock, plus the embedding, head and loss it holds,
 *  which are never recomputed). */
struct StageRecompute {
  /// Per layer of the stage, in order: the share of its forward recomputed
  /// before the backward. full: 1 for a checkpointed transformer layer
  /// (uniform: every one; block: the stage's first num_layers), else 0;
  /// selective: a transformer layer's attention_core_flops_share, else 0.
  std::vector<double> layer_share;
  /// The recompute (R) action's time, profile units: the sum over the
  /// stage's layers, in order, of share x forward_s.
  double recompute_s = 0;
  /// What one micro-batch keeps from the start of its forward to the end of
  /// its backward: the stage's input (input_bytes) + the stash of every layer
  /// not recomputed + full: each checkpoint's input, a checkpoint group's
  /// first layer's input (the previous layer's output_bytes, times
  /// `checkpoint_input_factor`; for a group that starts the stage, its input
  /// is the stage's, held at checkpoint_input_factor x input_bytes);
  /// selective: each transformer layer's stash less its attention core's
  /// (stashed_bytes x (1 - attention_core_stash_share)).
  double kept_bytes = 0;
  /// What the backward holds besides, from the start of the micro-batch's
  /// recompute to the end of its backward (its I when split): full, one
  /// checkpoint group's recomputed activations (the largest group's stash,
  /// sum of stashed_bytes over its layers); selective, one attention core's
  /// (the largest over the transformer layers).
  double recompute_bytes = 0;
};

/** Per stage of `partition`. A checkpoint group (uniform) is num_layers
 *  consecutive transformer layers of the stage, the last one shorter when
 *  they do not divide (Megatron's `custom(l, l + n)`); block checkpoints
 *  each of the stage's first num_layers transformer layers alone.
 *  `checkpoint_input_factor`: bytes a group member keeps per byte of the
 *  profile's output_bytes of a checkpoint's input (t under tensor
 *  parallelism without sequence parallelism: each member keeps the whole
 *  input, the profile's output_bytes being a member's share; 1 otherwise).
 *  `recompute` must be enabled and checked (check_layer_recompute). */
std::vector<StageRecompute> stage_recompute(const Profile& profile, const Partition& partition,
                                            const LayerRecompute& recompute, double checkpoint_input_factor = 1);

/// The options of Megatron-LM's recomputation, as simulate spells them.
inline constexpr const char* kLayerRecomputeFlags[] = {"--recompute-granularity", "--recompute-method",
                                                       "--recompute-num-layers"};

/** The refusal of `flag` (one of kLayerRecomputeFlags, or a plan's
 *  recompute_granularity) by `command` (execute, validate), whose real
 *  executor (validate/executor.hpp) recomputes whole stages only
 *  (--recompute: an F keeps its stage input, an R re-runs the stage's
 *  forward) and not layer by layer: the message names the flag, says why,
 *  and what to give instead. */
/// `simulate_instead`: what to give `pipegrid simulate` instead (empty:
/// `flag` itself).
std::string executor_layer_recompute_refusal(const std::string& flag, const std::string& command,
                                             const std::string& simulate_instead = "");

}  // namespace pipegrid
