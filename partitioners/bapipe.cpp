#include "partitioners/bapipe.hpp"

#include "core/error.hpp"

namespace pipegrid {

// Being written in this session (issue 4).
PartitionerOutput bapipe_partition(const PartitionerInput&) { throw InputError("partitioner bapipe: not built yet"); }

}  // namespace pipegrid
