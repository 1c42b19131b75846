#pragma once
// Partition: a stage number for every layer (never decreasing along the
// chain) and the hosts of each stage (one host per replica).

#include <string>
#include <vector>

#include "core/platform.hpp"
#include "core/profile.hpp"

namespace pipegrid {

struct Partition {
  std::vector<int> stage_of_layer;               ///< size = number of layers
  std::vector<std::vector<std::string>> hosts;  ///< hosts[stage] = replica hosts
  int num_stages() const { return static_cast<int>(hosts.size()); }
};

/** Per-stage costs derived from a profile and a partition, in profile units
 *  (seconds at speed factor 1, bytes). */
struct StageCost {
  int first_layer = 0, last_layer = 0;  ///< inclusive layer range
  double forward_s = 0, backward_s = 0;
  double input_bytes = 0;   ///< activation received from the previous stage (model input for stage 0)
  double output_bytes = 0;  ///< activation sent to the next stage (0 for the last stage)
  double weight_bytes = 0;
  /// What one micro-batch's backward needs kept from its forward: the stage's
  /// input + the sum of output_bytes over its layers (SEMANTICS.md).
  double stash_bytes = 0;
};

/** The uniform partition: `num_stages` stages, layers split as evenly as
 *  their count allows (the first stages take one more layer when it does not
 *  divide), stage s on hosts[s]. Throws InputError when there are more stages
 *  than layers or fewer hosts than stages. */
Partition uniform_partition(const Profile& profile, const std::vector<std::string>& hosts, int num_stages);

/** Parses the `--replicas` shorthand: replica counts per stage separated by
 *  commas, such as "3,1" or "4,2,1,1" (spaces around a count are allowed).
 *  Throws InputError naming `--replicas` when the text is empty or a count is
 *  missing, not a whole number, or below 1. */
std::vector<int> parse_replicas(const std::string& text);

/** The replicated partition: one stage per entry of `replicas`, stage s run
 *  by replicas[s] hosts taken in platform order (stage 0 the first
 *  replicas[0] hosts, and so on; hosts beyond sum(replicas) stay unused).
 *  Layers are split into contiguous, non-empty stages minimising the slowest
 *  stage's time per replica,
 *    max over s of (forward_s + backward_s of its layers)
 *                  / (replicas[s] * the lowest speed_factor of its hosts),
 *  by exact dynamic programming (O(S·L²)). Stage sums are taken in layer
 *  order, forward and backward apart, as stage_costs() does, and compared
 *  exactly: no tolerance. Ties: among the optimal splits, the one whose cut
 *  positions (first layer of stages 1..S-1) are lexicographically smallest,
 *  i.e. each stage in turn as short as the optimum allows.
 *  Throws InputError when a count is below 1, the platform has fewer hosts
 *  than sum(replicas), or there are more stages than layers. */
Partition replicated_partition(const Profile& profile, const std::vector<HostInfo>& hosts,
                               const std::vector<int>& replicas);

/** Checks the partition against the profile: one stage per layer, stages
 *  never decreasing and none empty, every stage with at least one host.
 *  `origin` names the source in errors. */
void check_partition(const Partition& partition, const Profile& profile, const std::string& origin);

std::vector<StageCost> stage_costs(const Profile& profile, const Partition& partition);

/** Partition file (JSON):
 *  {"stages": [{"layers": [first, last], "hosts": ["gpu0", ...]}, ...]}
 *  Layer indices are 0-based and inclusive. */
Partition read_partition_file(const std::string& path, const Profile& profile);
Partition parse_partition_json(const std::string& text, const std::string& origin, const Profile& profile);
std::string partition_to_json(const Partition& partition);

}  // namespace pipegrid
