#include "partitioners/antichain.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/limits.hpp"

namespace pipegrid {

namespace {

/// Reachability over the layer graph as byte masks (models have at most a
/// few thousand layers; masks keep membership tests O(1)).
struct Reach {
  std::vector<std::vector<char>> ancestors, descendants;  ///< strict
};

Reach reachability(const std::vector<std::vector<int>>& consumers, const std::vector<char>& active) {
  const int count = static_cast<int>(consumers.size());
  Reach reach;
  reach.ancestors.assign(count, std::vector<char>(count, 0));
  reach.descendants.assign(count, std::vector<char>(count, 0));
  // Layer indices are a topological order (profiles list producers first).
  for (int layer = 0; layer < count; ++layer) {
    if (!active[layer]) continue;
    for (const int consumer : consumers[layer]) {
      if (!active[consumer]) continue;
      auto& target = reach.ancestors[consumer];
      target[layer] = 1;
      for (int a = 0; a < count; ++a) target[a] |= reach.ancestors[layer][a];
    }
  }
  for (int layer = 0; layer < count; ++layer)
    for (int a = 0; a < count; ++a)
      if (reach.ancestors[layer][a]) reach.descendants[a][layer] = 1;
  return reach;
}

}  // namespace

StateChain antichain_states(const ModelGraph& graph, const AntichainOptions& options) {
  const Profile& profile = graph.profile;
  const std::string& source = options.file.empty() ? profile.name : options.file;
  const int count = static_cast<int>(profile.layers.size());
  if (count > limits::kMaxAntichainLayers)
    throw InputError(fmt::format("{}: expected at most {} layers for PipeDream's antichain construction (docs/formats.md, "
                                 "Limits), found {}",
                                 source, limits::kMaxAntichainLayers, count));
  for (int layer = 0; layer < count; ++layer)
    for (const int consumer : graph.consumers[layer])
      if (consumer <= layer)
        throw InputError(fmt::format("{}: layer '{}' feeds '{}', listed before it: expected producers first",
                                     source, profile.layers[layer].name, profile.layers[consumer].name));

  StateChain chain;
  std::vector<char> active(count, 1);
  std::vector<std::vector<int>> producers(count);
  for (int layer = 0; layer < count; ++layer)
    for (const int consumer : graph.consumers[layer]) producers[consumer].push_back(layer);
  for (int layer = 0; layer < count; ++layer)
    if (graph.consumers[layer].empty() && graph.descriptions[layer].rfind("__getitem__", 0) == 0 && count > 1) {
      active[layer] = 0;
      chain.detached_sinks.push_back(layer);
    }
  std::vector<std::vector<int>> consumers(count);
  for (int layer = 0; layer < count; ++layer)
    if (active[layer])
      for (const int consumer : graph.consumers[layer])
        if (active[consumer]) consumers[layer].push_back(consumer);
  const Reach reach = reachability(consumers, active);

  const auto augment = [&](const std::vector<int>& antichain) {
    std::vector<char> member(count, 0);
    for (const int a : antichain) member[a] = 1;
    for (const int a : antichain)
      for (int p = 0; p < count; ++p) {
        if (!reach.ancestors[a][p] || member[p]) continue;
        for (const int out : consumers[p])
          if (!reach.ancestors[a][out] && out != a) {
            member[p] = 1;
            break;
          }
      }
    std::vector<int> augmented;
    for (int layer = 0; layer < count; ++layer)
      if (member[layer]) augmented.push_back(layer);
    return augmented;
  };
  const auto deaugment = [&](const std::vector<int>& members) {
    std::vector<int> antichain;
    for (const int a : members) {
      bool has_descendant = false;
      for (const int b : members) has_descendant = has_descendant || reach.descendants[a][b];
      if (!has_descendant) antichain.push_back(a);
    }
    std::sort(antichain.begin(), antichain.end());
    antichain.erase(std::unique(antichain.begin(), antichain.end()), antichain.end());
    return antichain;
  };

  int first_source = -1;
  for (int layer = 0; layer < count && first_source < 0; ++layer)
    if (active[layer] && producers[layer].end() ==
                             std::find_if(producers[layer].begin(), producers[layer].end(), [&](int p) { return active[p] != 0; }))
      first_source = layer;

  // Discovery order: breadth first from the source; a state's successors in
  // the order their replacements are found (augmented layers ascending, then
  // consumers ascending).
  std::map<std::vector<int>, int> index_of;
  std::vector<std::vector<int>> antichains, augmented_of, successors;
  const auto state_of = [&](const std::vector<int>& antichain) {
    const auto [it, inserted] = index_of.emplace(antichain, static_cast<int>(antichains.size()));
    if (inserted && static_cast<int>(antichains.size()) >= options.max_states)
      throw InputError(fmt::format("{}: PipeDream's antichain construction over its {} layers reaches more than {} states "
                                   "(docs/formats.md, Limits): the graph branches too widely; partition it as a chain "
                                   "(a profile JSON) or with another partitioner",
                                   source, count, options.max_states));
    if (inserted) {
      antichains.push_back(antichain);
      augmented_of.push_back(augment(antichain));
      successors.emplace_back();
    }
    return it->second;
  };
  std::deque<int> queue{state_of({first_source})};
  std::vector<char> expanded;
  while (!queue.empty()) {
    const int state = queue.front();
    queue.pop_front();
    if (state < static_cast<int>(expanded.size()) && expanded[state]) continue;
    if (static_cast<int>(expanded.size()) <= state) expanded.resize(state + 1, 0);
    expanded[state] = 1;
    const std::vector<int> augmented = augmented_of[state];
    const std::vector<int> antichain = antichains[state];
    std::vector<char> in_augmented(count, 0);
    for (const int a : augmented) in_augmented[a] = 1;
    for (const int old_layer : augmented)
      for (const int next : consumers[old_layer]) {
        if (std::binary_search(antichain.begin(), antichain.end(), next)) continue;
        bool blocked = false;
        for (const int a : augmented) blocked = blocked || reach.descendants[next][a];
        if (blocked) continue;
        std::vector<int> replaced = augmented;
        for (int& member : replaced)
          if (member == old_layer) member = next;
        const int successor = state_of(deaugment(replaced));
        if (std::find(successors[state].begin(), successors[state].end(), successor) == successors[state].end())
          successors[state].push_back(successor);
        queue.push_back(successor);
      }
  }

  // Topological order of the state graph (Kahn, smallest discovery index first).
  const int states = static_cast<int>(antichains.size());
  std::vector<int> waiting(states, 0);
  for (const auto& list : successors)
    for (const int s : list) ++waiting[s];
  std::vector<int> order, ready;
  for (int s = 0; s < states; ++s)
    if (waiting[s] == 0) ready.push_back(s);
  while (!ready.empty()) {
    std::sort(ready.begin(), ready.end(), std::greater<int>());
    const int s = ready.back();
    ready.pop_back();
    order.push_back(s);
    for (const int next : successors[s])
      if (--waiting[next] == 0) ready.push_back(next);
  }
  std::vector<int> position(states);
  for (int p = 0; p < states; ++p) position[order[p]] = p;

  chain.states.resize(states);
  for (int p = 0; p < states; ++p) {
    AntichainState& state = chain.states[p];
    const int id = order[p];
    state.augmented = augmented_of[id];
    state.in_down_set.assign(count, 0);
    for (const int a : state.augmented) {
      state.in_down_set[a] = 1;
      for (int layer = 0; layer < count; ++layer)
        if (reach.ancestors[a][layer]) state.in_down_set[layer] = 1;
      state.output_activation_bytes += graph.activation_bytes[a];
    }
    for (int layer = 0; layer < count; ++layer)
      if (state.in_down_set[layer]) {
        state.compute_s += profile.layers[layer].forward_s + profile.layers[layer].backward_s;
        state.activation_bytes += graph.activation_bytes[layer];
        state.parameter_bytes += profile.layers[layer].parameter_bytes;
      }
  }
  // Ancestors in the state graph, in topological order.
  for (int p = 0; p < states; ++p) chain.states[p].is_ancestor.assign(states, 0);
  for (int p = 0; p < states; ++p)
    for (const int next : successors[order[p]]) {
      AntichainState& target = chain.states[position[next]];
      target.is_ancestor[p] = 1;
      for (int a = 0; a < states; ++a) target.is_ancestor[a] |= chain.states[p].is_ancestor[a];
    }
  for (AntichainState& state : chain.states)
    for (int a = 0; a < states; ++a)
      if (state.is_ancestor[a]) state.ancestors.push_back(a);

  const AntichainState& last = chain.states.back();
  for (int layer = 0; layer < count; ++layer)
    if (active[layer] && !last.in_down_set[layer])
      throw InputError(fmt::format("{}: layer '{}' is in no state of the antichain construction (is it reachable from '{}'?)",
                                   source, profile.layers[layer].name, profile.layers[first_source].name));
  return chain;
}

}  // namespace pipegrid
