#pragma once
// Internal to sim/: the parts of engine.cpp that the graph replay
// (graph_engine.cpp) runs its own SimGrid engine with, so that both start,
// configure and isolate SimGrid the same way. Not part of the library's
// interface.

#include <functional>
#include <string>

#include <nlohmann/json.hpp>
#include <simgrid/s4u.hpp>

#include "core/platform.hpp"
#include "sim/engine.hpp"

namespace pipegrid::sim::internal {

/// Reads and checks a platform file before SimGrid sees it (as simulate()
/// does); InputError naming the file otherwise.
void check_platform(const std::string& file);

/** Loads the platform into `engine` with the network configuration of
 *  `network` (Analytic: CM02 without TCP corrections) and the engine's
 *  precision; summarises its hosts in declaration order. */
PlatformSummary load_platform_into(simgrid::s4u::Engine& engine, const std::string& file, NetworkModel network);

/// What a run_engine's work hands back: JSON and raw bytes.
struct EngineOutput {
  nlohmann::json json;
  std::string bytes;
};

/** Runs `work` (which starts one SimGrid engine) in a forked child, as
 *  simulate() does (SimGrid allows one engine per process), and returns
 *  the JSON it returned and the bytes it left in its second argument.
 *  InputErrors come back as InputErrors, SimGrid aborts as InputErrors
 *  naming `what`. */
EngineOutput run_engine(const std::string& what,
                        const std::function<nlohmann::json(simgrid::s4u::Engine&, std::string&)>& work);

}  // namespace pipegrid::sim::internal
