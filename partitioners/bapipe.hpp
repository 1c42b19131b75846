#pragma once
// BaPipe's balanced partition (SEMANTICS.md, "BaPipe's balanced partition").

#include "partitioners/partitioners.hpp"

namespace pipegrid {

PartitionerOutput bapipe_partition(const PartitionerInput& input);

}  // namespace pipegrid
