#include "partitioners/pipedream.hpp"

#include "core/error.hpp"

namespace pipegrid {

// Being written in this session (issue 4).
PartitionerOutput pipedream_partition(const PartitionerInput&) { throw InputError("partitioner pipedream: not built yet"); }

}  // namespace pipegrid
