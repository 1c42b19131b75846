#pragma once
// PipeDream's partitioner (SEMANTICS.md, "PipeDream's optimizer as released").

#include "partitioners/partitioners.hpp"

namespace pipegrid {

PartitionerOutput pipedream_partition(const PartitionerInput& input);

}  // namespace pipegrid
