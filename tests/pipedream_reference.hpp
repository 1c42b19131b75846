#pragma once
// The pipedream partitioner's dynamic program before pruning, for tests.

#include <optional>

#include "partitioners/pipedream.hpp"

namespace pipegrid::reference {

/** The solution solve_pipedream must give, or nullopt where it throws
 *  InfeasibleError. No limits are checked. */
std::optional<PipeDreamSolution> solve_pipedream(const StateChain& chain, const PipeDreamOptions& options);

}  // namespace pipegrid::reference
