// PipeDream's partitioner (partitioners/antichain, partitioners/pipedream)
// against its anchors (docs/performance.md, "Partitioners"):
//  - PipeDream's own Python optimizer (optimizer_graph_hierarchical.py) on
//    ResNet-101 took 219 s on 4x4 machines and 570 s on 8x2 (issue 17), and
//    about 110 s on ResNet-50 8x2; the aim is 1000x faster;
//  - a synthetic 1000-layer chain on 1024 devices in 4 levels took 144 s in
//    pipegrid before pruning (issue 17; aim: under 10 s);
//  - a 2040-layer chain took 111 s and 10.9 GB (robustness findings, before
//    the table limits; here on 1024 devices as 4 x 2 x 128);
//  - ResNet-50 with a few edges removed took 5.5 s (robustness findings).
// Prints seconds, peak memory and ratios; nothing is asserted. Run it twice on
// a loaded machine.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/model_graph.hpp"
#include "partitioners/antichain.hpp"
#include "partitioners/pipedream.hpp"

namespace {

using namespace pipegrid;

template <typename Work>
double seconds_of(Work&& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Resets the process's peak resident memory (Linux: clear_refs 5); false
/// where that is not possible.
bool reset_peak_memory() {
  std::ofstream clear("/proc/self/clear_refs");
  if (!clear) return false;
  clear << "5";
  return static_cast<bool>(clear.flush());
}

/// Peak resident memory since the last reset, in MB (VmHWM); -1 unknown.
double peak_memory_mb() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      double kb = 0;
      status >> kb;
      return kb / 1024;
    }
    std::string rest;
    std::getline(status, rest);
  }
  return -1;
}

std::string model_path(const std::string& model) {
  return std::string(PIPEGRID_SOURCE_DIR) + "/models/pipedream/" + model + "/graph.txt";
}

PipeDreamOptions levels(std::vector<PipeDreamLevel> list) {
  PipeDreamOptions options;
  options.levels = std::move(list);
  return options;
}

/// A chain of `count` layers with times and sizes varying deterministically.
Profile synthetic_chain(int count) {
  Profile chain;
  chain.name = "synthetic-" + std::to_string(count);
  for (int l = 0; l < count; ++l) {
    Layer layer;
    layer.name = "l" + std::to_string(l);
    layer.forward_s = 1e-3 * (1 + (l * 7919) % 13);
    layer.backward_s = 2 * layer.forward_s;
    layer.output_bytes = 1e6 * (1 + (l * 104729) % 17);
    layer.parameter_bytes = 1e5 * (1 + (l * 1299709) % 11);
    chain.layers.push_back(layer);
  }
  return chain;
}

/// Builds the states and solves; prints one line, with the ratio against
/// `anchor_s` (0: none).
/// Cases whose label contains this run (argv[1]; empty: all).
std::string only;

void run_case(const std::string& label, const ModelGraph& graph, const PipeDreamOptions& options, double anchor_s,
              const std::string& anchor) {
  if (label.find(only) == std::string::npos) return;
  const bool memory = reset_peak_memory();
  StateChain states;
  double objective = 0;
  std::size_t stages = 0;
  double states_s = 0, solve_s = 0;
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  try {
    states_s = seconds_of([&] { states = antichain_states(graph); });
    solve_s = seconds_of([&] {
      const PipeDreamSolution solution = solve_pipedream(states, options);
      objective = solution.time_per_stage_s;
      stages = solution.stages.size();
    });
  } catch (const std::exception& error) {
    const double refused_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s: refused in %.3f s: %s\n", label.c_str(), refused_s, error.what());
    std::fflush(stdout);
    return;
  }
  const double cpu_s = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  const double total_s = states_s + solve_s;
  std::printf("%s: %zu states in %.3f s, solved in %.3f s (objective %.9g s, %zu stages); %.3f s in all (%.3f s CPU)",
              label.c_str(), states.states.size(), states_s, solve_s, objective, stages, total_s, cpu_s);
  if (memory) std::printf(", peak %.0f MB", peak_memory_mb());
  if (anchor_s > 0) std::printf("; %s: %.0fx faster", anchor.c_str(), anchor_s / total_s);
  std::printf("\n");
  std::fflush(stdout);
}

/// ResNet-50 with the residual branch of every `every`-th block cut from its
/// `Add` (the edge from the branch's last layer, the Add's latest producer):
/// the branch then dangles to the end of the graph, and the antichain states
/// multiply with every branch left open.
ModelGraph without_branch_merges(ModelGraph graph, int every) {
  const int count = static_cast<int>(graph.consumers.size());
  int adds = 0;
  for (int consumer = 0; consumer < count; ++consumer) {
    if (graph.descriptions[consumer].rfind("Add", 0) != 0) continue;
    if (adds++ % every != 0) continue;
    for (int producer = consumer - 1; producer >= 0; --producer) {
      auto& list = graph.consumers[producer];
      const auto it = std::find(list.begin(), list.end(), consumer);
      if (it == list.end()) continue;
      list.erase(it);
      break;
    }
  }
  return graph;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) only = argv[1];
  const ModelGraph resnet101 = read_model_graph(model_path("resnet101"), 64);
  run_case("resnet101 --machines 4 4 --bandwidth 8e9 1.25e9", resnet101, levels({{4, 8e9}, {4, 1.25e9}}), 219,
           "PipeDream's Python optimizer 219 s");
  run_case("resnet101 --machines 8 2 --bandwidth 8e9 1.25e9", resnet101, levels({{8, 8e9}, {2, 1.25e9}}), 570,
           "PipeDream's Python optimizer 570 s");
  const ModelGraph resnet50 = read_model_graph(model_path("resnet50"), 128);
  run_case("resnet50 --machines 8 2 --bandwidth 8e9 1.25e9", resnet50, levels({{8, 8e9}, {2, 1.25e9}}), 110,
           "PipeDream's Python optimizer about 110 s");
  for (const int every : {16, 8, 4})
    run_case("resnet50 with every " + std::to_string(every) + "th residual branch cut from its Add, --machines 8 2",
             without_branch_merges(resnet50, every), levels({{8, 8e9}, {2, 1.25e9}}), 5.5, "5.5 s before (findings)");
  run_case("1000-layer chain, 1024 devices in 4 levels (8 x 4 x 8 x 4)", chain_graph(synthetic_chain(1000)),
           levels({{8, 100e9}, {4, 25e9}, {8, 12.5e9}, {4, 1.25e9}}), 144, "144 s before");
  run_case("1000-layer chain, 1024 devices in 1 level", chain_graph(synthetic_chain(1000)), levels({{1024, 12.5e9}}), 0,
           "");
  run_case("2040-layer chain, 1024 devices in 3 levels (4 x 2 x 128)", chain_graph(synthetic_chain(2040)),
           levels({{4, 100e9}, {2, 25e9}, {128, 1.25e9}}), 111, "111 s and 10.9 GB before (findings)");
  return 0;
}
