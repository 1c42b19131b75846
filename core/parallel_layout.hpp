#pragma once
// Megatron-Core's rank layout (core_v0.14.0, megatron/core/parallel_state.py,
// RankGenerator and generate_masked_orthogonal_rank_groups) as pure
// functions: which global rank holds which coordinate of tensor, context,
// expert, data and pipeline parallelism, and the process groups Megatron
// builds from them. Dense ranks follow the order "tp-cp-ep-dp-pp" with ep 1
// (tensor fastest, then context, data, pipeline); expert ranks follow the
// same order with cp 1 over the expert tensor size etp, ep and the expert
// data size edp = world / (etp x ep x pp), i.e. "tp-ep-dp-pp"
// (docs/semantics.md, Context parallelism). Nothing here touches SimGrid.

#include <string>
#include <vector>

namespace pipegrid {

/** The sizes of a layout: tensor (tp), context (cp), expert (ep), expert
 *  tensor (etp; 0 = follows tp, as Megatron-LM's
 *  --expert-tensor-parallel-size defaults to the tensor size), data (dp) and
 *  pipeline (pp). world() = tp x cp x dp x pp (expert parallelism is carved
 *  out of the dense ranks, not a factor of the world). */
struct ParallelSizes {
  int tp = 1, cp = 1, ep = 1, etp = 0, dp = 1, pp = 1;
  int expert_tensor() const { return etp == 0 ? tp : etp; }
  long long world() const { return static_cast<long long>(tp) * cp * dp * pp; }
  /// Megatron's expert data-parallel size: world / (etp x ep x pp).
  long long expert_data() const { return world() / (static_cast<long long>(expert_tensor()) * ep * pp); }
  friend bool operator==(const ParallelSizes&, const ParallelSizes&) = default;
};

/** Checks `sizes` as Megatron-Core's initialize_model_parallel does:
 *  every size >= 1 (etp >= 0), and etp x ep divides tp x cp x dp (the
 *  expert generator's world / pp); when `world` > 0, also tp x cp x dp x
 *  pp == world. InputError naming the flag (--tensor-parallel,
 *  --context-parallel, --expert-parallel, --expert-tensor-parallel,
 *  --data-parallel, --pipeline-parallel), what was expected and what was
 *  found. */
void check_parallel_sizes(const ParallelSizes& sizes, long long world = 0);

/** A rank's coordinate in each dimension (dense and expert generators). */
struct RankCoordinates {
  int tensor = 0, context = 0, data = 0, pipeline = 0;
  /// The expert generator's coordinates of the same rank.
  int expert_tensor = 0, expert = 0, expert_data = 0;
  friend bool operator==(const RankCoordinates&, const RankCoordinates&) = default;
};

/** `rank`'s coordinates (0 <= rank < world(); InputError otherwise, and
 *  for sizes check_parallel_sizes refuses). Dense: rank = tensor + tp x
 *  (context + cp x (data + dp x pipeline)); expert: rank = expert_tensor +
 *  etp x (expert + ep x (expert_data + edp x pipeline)). */
RankCoordinates rank_coordinates(const ParallelSizes& sizes, long long rank);

/** The global rank at dense coordinates (tensor, context, data, pipeline). */
long long dense_rank(const ParallelSizes& sizes, int tensor, int context, int data, int pipeline);

/** Megatron-Core's process groups, each named as parallel_state names its
 *  getter. */
enum class GroupKind {
  Tensor,             ///< "tp": the tensor-parallel group
  Context,            ///< "cp": ring attention's group
  Data,               ///< "dp": data parallelism without context
  DataWithContext,    ///< "dp-cp": where dense gradients are reduced
  Pipeline,           ///< "pp"
  ModelParallel,      ///< "tp-pp"
  TensorAndContext,   ///< "tp-cp"
  Expert,             ///< expert generator "ep": the all-to-all group
  ExpertTensor,       ///< expert generator "tp" (over etp)
  ExpertData,         ///< expert generator "dp" (over edp): where expert gradients are reduced
  ExpertTensorAndExpert,  ///< expert generator "tp-ep"
};
/// parallel_state's token of the kind ("tp", "dp-cp", "ep", "etp", "edp", ...).
const char* to_string(GroupKind kind);

/** The groups of `kind`, each a list of global ranks in group order, the
 *  groups in the order RankGenerator.get_ranks yields them. InputError for
 *  sizes check_parallel_sizes refuses. */
std::vector<std::vector<long long>> parallel_groups(const ParallelSizes& sizes, GroupKind kind);

/** generate_masked_orthogonal_rank_groups: over dimensions of
 *  `dimension_sizes` (the first fastest: rank = sum of coordinate x
 *  stride, stride the product of the sizes before it), the groups of ranks
 *  that differ only in the dimensions `in_group` marks: group g's unmasked
 *  coordinates are g decomposed over the unmasked sizes (first fastest);
 *  member m's masked coordinates are m decomposed over the masked sizes.
 *  `world` must be the product of the sizes (InputError otherwise, or when
 *  the two lists differ in length). */
std::vector<std::vector<long long>> masked_orthogonal_rank_groups(long long world, const std::vector<int>& dimension_sizes,
                                                                  const std::vector<bool>& in_group);

}  // namespace pipegrid
