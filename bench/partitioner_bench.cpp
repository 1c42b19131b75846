// Times PipeDream's partitioner where PipeDream's own Python optimizer is
// slow: ResNet-50 (240 states) on 8 GPUs per server x 2 servers (about 110 s
// in the released optimizer), and a synthetic 1000-layer chain on 1024
// devices in 4 levels. Prints seconds per solve; nothing is asserted.

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/model_graph.hpp"
#include "partitioners/antichain.hpp"
#include "partitioners/pipedream.hpp"

namespace {

template <typename Work>
double seconds_of(Work&& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main() {
  using namespace pipegrid;
  const ModelGraph resnet = read_model_graph(std::string(PIPEGRID_SOURCE_DIR) + "/models/pipedream/resnet50/graph.txt", 128);
  StateChain resnet_states;
  const double states_s = seconds_of([&] { resnet_states = antichain_states(resnet); });
  PipeDreamOptions options;
  options.levels = {{8, 8e9}, {2, 1.25e9}};
  double objective = 0;
  const double solve_s = seconds_of([&] { objective = solve_pipedream(resnet_states, options).time_per_stage_s; });
  std::printf("resnet50 --machines 8 2 --bandwidth 8e9 1.25e9: %zu states in %.3f s, solved in %.3f s (objective %.6g s)\n",
              resnet_states.states.size(), states_s, solve_s, objective);

  // A chain of 1000 layers with times and sizes varying deterministically.
  Profile chain;
  chain.name = "synthetic-1000";
  for (int l = 0; l < 1000; ++l) {
    Layer layer;
    layer.name = "l" + std::to_string(l);
    layer.forward_s = 1e-3 * (1 + (l * 7919) % 13);
    layer.backward_s = 2 * layer.forward_s;
    layer.output_bytes = 1e6 * (1 + (l * 104729) % 17);
    layer.parameter_bytes = 1e5 * (1 + (l * 1299709) % 11);
    chain.layers.push_back(layer);
  }
  StateChain chain_states;
  const double chain_states_s = seconds_of([&] { chain_states = antichain_states(chain_graph(chain)); });
  options.levels = {{8, 100e9}, {4, 25e9}, {8, 12.5e9}, {4, 1.25e9}};
  const double chain_solve_s = seconds_of([&] { objective = solve_pipedream(chain_states, options).time_per_stage_s; });
  std::printf("1000-layer chain, 1024 devices in 4 levels (8 x 4 x 8 x 4): states in %.3f s, solved in %.3f s (objective %.6g s)\n",
              chain_states_s, chain_solve_s, objective);
  return 0;
}
