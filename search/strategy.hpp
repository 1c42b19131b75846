#pragma once
// A parallelization strategy as FlexFlow's search sees it (docs/search.md):
// the model's layers cut into pipeline stages, each stage run by d_s data
// replicas, each replica a tensor-parallel group of t_s hosts. Plain data;
// nothing here simulates.

#include <string>
#include <vector>

#include "core/platform.hpp"

namespace pipegrid::search {

/** One stage: layers first_layer..last_layer (inclusive), `data` replicas
 *  (micro-batch m on replica m mod data, as replicated stages run in
 *  pipegrid), each replica a group of `tensor` hosts. `groups[r]` is the
 *  index of replica r's group: hosts groups[r] x tensor .. groups[r] x
 *  tensor + tensor - 1 of the platform (aligned, consecutive, as
 *  tensor_parallel_groups makes them), the first of them the replica's
 *  leader. */
struct StageConfig {
  int first_layer = 0, last_layer = 0;
  int tensor = 1;
  int data = 1;
  std::vector<int> groups;  ///< size data
  friend bool operator==(const StageConfig&, const StageConfig&) = default;
  /// Host index of replica r's member k.
  int host(int replica, int member = 0) const { return groups[static_cast<std::size_t>(replica)] * tensor + member; }
};

struct Strategy {
  std::vector<StageConfig> stages;
  friend bool operator==(const Strategy&, const Strategy&) = default;
  int num_stages() const { return static_cast<int>(stages.size()); }
};

/** Why `strategy` cannot run over `layers` layers on `platform`, or "" when
 *  it can: stages non-empty, contiguous and covering every layer in order;
 *  tensor and data degrees >= 1; tensor a divisor of the platform's hosts
 *  whose groups stay inside one server (HostInfo::server); one group per
 *  replica, within the platform, no host used twice. */
std::string strategy_problem(const Strategy& strategy, int layers, const PlatformSummary& platform);

/** For people: "[0-7] t1 d16 (gpu0..gpu15) | [8-12] t4 d1 (gpu0)". */
std::string strategy_text(const Strategy& strategy, const PlatformSummary& platform);

/** Data parallelism: one stage of every layer, t 1, a replica on every host. */
Strategy data_parallel_strategy(int layers, const PlatformSummary& platform);

/** Hosts the strategy uses (every member of every replica). */
int strategy_hosts(const Strategy& strategy);

}  // namespace pipegrid::search
