#pragma once
// A model as a graph of layers: the chain Profile plus the edges between its
// layers, for partitioners that respect branches (PipeDream's antichains).

#include <optional>
#include <string>
#include <vector>

#include "core/profile.hpp"

namespace pipegrid {

struct ModelGraph {
  /// The chain of layers exactly as read_profile() returns it.
  Profile profile;
  /// consumers[l]: the layers that read layer l's output (indices into
  /// profile.layers, ascending). A chain profile has consumers[l] = {l + 1}.
  std::vector<std::vector<int>> consumers;
  /// activation_bytes[l]: bytes of layer l's own output (what a cut carries
  /// for each producer it separates from a consumer).
  std::vector<double> activation_bytes;
  /// descriptions[l]: the operator as the source names it ("Conv2d", "__getitem__").
  std::vector<std::string> descriptions;
};

/** Whether the caller's result depends on the micro-batch size. */
enum class BatchSizeUse {
  Required,  ///< a graph.txt whose batch size cannot be inferred is an InputError (read_pipedream_graph)
  Optional,  ///< it is read anyway: Profile::micro_batch_size_known false, micro_batch_size 1
};

/** Reads a profile JSON (a chain) or a PipeDream graph.txt (its node graph,
 *  Input nodes dropped as read_pipedream_graph drops them) with its edges.
 *  `use`: what to do when a graph.txt's batch size is neither given nor
 *  inferable (a profile JSON always states it). */
ModelGraph read_model_graph(const std::string& path, std::optional<int> batch_size,
                            BatchSizeUse use = BatchSizeUse::Required);

/** The chain of a plain profile: each layer feeds the next; a layer's own
 *  activation is its output_bytes. */
ModelGraph chain_graph(const Profile& profile);

/** The profile with its layers in `order` (a permutation of layer indices
 *  that is a topological order of `graph`): layer data moves with the layer
 *  and every cut's output_bytes is recomputed from the edges. Throws
 *  InputError when `order` is not a topological permutation. */
Profile reorder_layers(const ModelGraph& graph, const std::vector<int>& order);

}  // namespace pipegrid
