#pragma once
// The SimGrid engine. One S4U actor per device stream interprets its action
// list; activations and gradients travel as SimGrid communications along the
// platform's routes (eager: a send never waits for the receiver). A device
// that takes part in all-reduces has one more actor that runs them in
// Program order, each as the 2(r-1) rounds of a ring, every round a
// point-to-point transfer of 1/r of the gradients to the next replica over
// the real route, so they contend with pipeline traffic as SimGrid shares
// links. The engine knows actions, never schedule names.

#include <string>
#include <vector>

#include "core/partition.hpp"
#include "core/platform.hpp"
#include "core/program.hpp"
#include "core/timeline.hpp"

namespace pipegrid::sim {

enum class NetworkModel {
  Analytic,  ///< exactly latency + bytes / bandwidth per transfer (CM02, no TCP corrections)
  SimGrid,   ///< SimGrid's default realistic model
};
const char* to_string(NetworkModel model);
NetworkModel parse_network_model(const std::string& text);

/** One layer's share of a stage, for per-layer (wait-free) all-reduces. */
struct LayerCost {
  double backward_s = 0;  ///< profile units (speed factor 1)
  double weight_bytes = 0;
};

struct SimulationRequest {
  std::string platform_file;
  Program program;
  std::vector<StageCost> stages;  ///< per stage, profile units (speed factor 1)
  /// hosts[stage][replica]: the host running each device of the Program.
  std::vector<std::vector<std::string>> hosts;
  /// stage_layers[stage]: the stage's layers in order; needed when the
  /// Program has per-layer all-reduces (a whole-stage layer is assumed if empty).
  std::vector<std::vector<LayerCost>> stage_layers;
  NetworkModel network = NetworkModel::Analytic;
};

struct SimulationResult {
  PlatformSummary platform;
  Timeline timeline;  ///< records sorted by (start, host, stream, ...); memory not yet annotated
};

/** Runs the simulation in a forked child process (SimGrid allows one engine
 *  per process) and returns its result. Throws InputError with the child's
 *  message when the platform or the request is rejected, including SimGrid
 *  aborts. */
SimulationResult simulate(const SimulationRequest& request);

/** Reads the platform's hosts and their properties (in a forked child). */
PlatformSummary read_platform(const std::string& platform_file);

}  // namespace pipegrid::sim
