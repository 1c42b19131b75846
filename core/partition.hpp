#pragma once
// Partition: a stage number for every layer (never decreasing along the
// chain) and the hosts of each stage (one host per replica).

#include <string>
#include <vector>

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
