#pragma once
// PipeDream's chain of states for a branching model (SEMANTICS.md,
// "PipeDream's optimizer as released"). A state is an antichain of the layer
// graph: the layers computed so far form its down-set (the antichain and all
// its ancestors); a stage is the difference of two nested down-sets, so
// every partition into stages over states respects the graph's edges.

#include <string>
#include <vector>

#include "core/limits.hpp"
#include "core/model_graph.hpp"

namespace pipegrid {

struct AntichainState {
  /// The augmented antichain: the antichain plus every ancestor of one of its
  /// layers that also feeds a layer outside that layer's ancestors (layer
  /// indices, ascending). Its activations are what leaves the down-set.
  std::vector<int> augmented;
  std::vector<char> in_down_set;  ///< per layer: 1 when computed by this state
  double compute_s = 0;           ///< forward + backward of the down-set
  double activation_bytes = 0;    ///< activations of the down-set (what a stage stashes)
  double parameter_bytes = 0;
  double output_activation_bytes = 0;  ///< activations of the augmented antichain
  std::vector<int> ancestors;          ///< indices of ancestor states (ascending, excludes itself)
  std::vector<char> is_ancestor;       ///< per state index: 1 when an ancestor of this one
};

struct StateChain {
  /// Topologically sorted: ancestors first. The last state's down-set holds
  /// every layer the construction reaches.
  std::vector<AntichainState> states;
  /// Layers left out of the construction: zero-cost `__getitem__` sinks
  /// (PipeDream removes them); they join their producer's stage.
  std::vector<int> detached_sinks;
};

struct AntichainOptions {
  /// The graph's file, named in messages (empty: the profile's name).
  std::string file;
  /// The most states the construction may reach before it gives up.
  int max_states = limits::kMaxAntichainStates;
};

/** Builds the states as PipeDream's optimizer does: start from the antichain
 *  holding the first source; the successors of an antichain replace one
 *  layer of its augmented antichain by one of that layer's consumers (when no
 *  descendant of the consumer is in the augmented antichain), then drop every
 *  member with a descendant among them; states are the distinct antichains
 *  reached, their edges the replacements. Throws InputError when the last
 *  state misses a layer (a graph the construction cannot cover), or when
 *  the graph has more than limits::kMaxAntichainLayers layers or the
 *  construction reaches more than options.max_states states (a graph with
 *  many branches open at once: the states are its antichains; the message
 *  names the file, its layers and the bound). */
StateChain antichain_states(const ModelGraph& graph, const AntichainOptions& options = {});

}  // namespace pipegrid
