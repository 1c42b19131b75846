// The pipedream partitioner's fast solver (pruned split search, rows solved
// again on expansion) against the dynamic program as it was
// (pipedream_reference.cpp) on seeded random chains and DAGs: the same
// objective bit for bit and the same stages and devices. And the bound on
// the antichain construction's states.

#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/limits.hpp"
#include "core/model_graph.hpp"
#include "partitioners/antichain.hpp"
#include "partitioners/pipedream.hpp"
#include "pipedream_reference.hpp"

namespace pipegrid {
namespace {

/// A number that is often a round one (ties between candidates are common
/// with round numbers, and ties decide which split a cell keeps) and
/// sometimes zero.
double random_value(std::mt19937& random, double scale) {
  const int kind = std::uniform_int_distribution<int>(0, 9)(random);
  if (kind == 0) return 0;
  if (kind < 5) return scale * std::uniform_int_distribution<int>(1, 4)(random);
  return scale * std::uniform_real_distribution<double>(0.1, 4)(random);
}

Layer random_layer(std::mt19937& random, int index) {
  Layer layer;
  layer.name = fmt::format("l{}", index);
  layer.forward_s = random_value(random, 1e-3);
  layer.backward_s = random_value(random, 2e-3);
  layer.output_bytes = random_value(random, 1e6);
  layer.parameter_bytes = random_value(random, 1e6);
  return layer;
}

Profile random_chain(std::mt19937& random, int layers) {
  Profile profile;
  profile.name = "random-chain";
  for (int l = 0; l < layers; ++l) profile.layers.push_back(random_layer(random, l));
  return profile;
}

/// A DAG over `layers` layers in topological order: every layer after the
/// first reads one or two earlier layers (so every layer is reachable from
/// layer 0), some layers are read by nobody (sinks kept to the end).
ModelGraph random_dag(std::mt19937& random, int layers) {
  ModelGraph graph;
  graph.profile.name = "random-dag";
  graph.consumers.resize(layers);
  for (int l = 0; l < layers; ++l) {
    graph.profile.layers.push_back(random_layer(random, l));
    graph.activation_bytes.push_back(graph.profile.layers.back().output_bytes);
    graph.descriptions.push_back(l == 0 ? "Conv2d" : "Add");
  }
  for (int l = 1; l < layers; ++l) {
    const int window = std::min(l, 4);
    const int first = l - std::uniform_int_distribution<int>(1, window)(random);
    graph.consumers[first].push_back(l);
    if (l >= 2 && std::uniform_int_distribution<int>(0, 2)(random) == 0) {
      const int second = l - std::uniform_int_distribution<int>(1, window)(random);
      if (second != first) graph.consumers[second].push_back(l);
    }
  }
  for (auto& list : graph.consumers) std::sort(list.begin(), list.end());
  return graph;
}

PipeDreamOptions random_options(std::mt19937& random) {
  PipeDreamOptions options;
  const int levels = std::uniform_int_distribution<int>(1, 3)(random);
  const double bandwidths[] = {1e10, 1.25e9, 1e9, 1e8};
  for (int l = 0; l < levels; ++l)
    options.levels.push_back(
        {std::uniform_int_distribution<int>(1, l == 0 ? 5 : 3)(random), bandwidths[std::uniform_int_distribution<int>(0, 3)(random)]});
  options.straight = std::uniform_int_distribution<int>(0, 5)(random) == 0;
  if (std::uniform_int_distribution<int>(0, 3)(random) == 0)
    options.memory_bytes = std::uniform_real_distribution<double>(5e6, 6e7)(random);
  if (std::uniform_int_distribution<int>(0, 3)(random) == 0) options.extra_state_per_weight_byte = 2;
  if (std::uniform_int_distribution<int>(0, 3)(random) == 0) options.cost_model = PipeDreamCostModel::Paper;
  return options;
}

std::optional<PipeDreamSolution> fast_solution(const StateChain& chain, const PipeDreamOptions& options) {
  try {
    return solve_pipedream(chain, options);
  } catch (const InfeasibleError&) {
    return std::nullopt;
  }
}

/// Bit-for-bit equality of two solutions (or both infeasible).
void expect_same(const std::optional<PipeDreamSolution>& actual, const std::optional<PipeDreamSolution>& expected,
                 const std::string& context) {
  ASSERT_EQ(actual.has_value(), expected.has_value()) << context;
  if (!expected) return;
  EXPECT_EQ(std::memcmp(&actual->time_per_stage_s, &expected->time_per_stage_s, sizeof(double)), 0)
      << context << ": " << actual->time_per_stage_s << " vs " << expected->time_per_stage_s;
  ASSERT_EQ(actual->stages.size(), expected->stages.size()) << context;
  for (std::size_t s = 0; s < expected->stages.size(); ++s) {
    EXPECT_EQ(actual->stages[s].after_state, expected->stages[s].after_state) << context << " stage " << s;
    EXPECT_EQ(actual->stages[s].last_state, expected->stages[s].last_state) << context << " stage " << s;
    EXPECT_EQ(actual->stages[s].replicas, expected->stages[s].replicas) << context << " stage " << s;
    EXPECT_EQ(actual->stages[s].devices, expected->stages[s].devices) << context << " stage " << s;
  }
}

void check_against_reference(const StateChain& chain, PipeDreamOptions options, const std::string& context) {
  const std::optional<PipeDreamSolution> expected = reference::solve_pipedream(chain, options);
  expect_same(fast_solution(chain, options), expected, context + " (pruned)");
  options.prune = false;
  expect_same(fast_solution(chain, options), expected, context + " (unpruned)");
}

TEST(PipeDreamFastSolver, SameSolutionsAsTheReferenceOnRandomChains) {
  std::mt19937 random(20171);
  int feasible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Profile profile = random_chain(random, std::uniform_int_distribution<int>(1, 24)(random));
    const StateChain chain = antichain_states(chain_graph(profile));
    const PipeDreamOptions options = random_options(random);
    check_against_reference(chain, options, fmt::format("chain trial {}", trial));
    feasible += reference::solve_pipedream(chain, options).has_value();
  }
  EXPECT_GT(feasible, 150);  // the comparison is mostly of solutions, not of refusals
}

TEST(PipeDreamFastSolver, SameSolutionsAsTheReferenceOnRandomGraphs) {
  std::mt19937 random(4242);
  int branching = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const ModelGraph graph = random_dag(random, std::uniform_int_distribution<int>(2, 12)(random));
    const StateChain chain = antichain_states(graph);
    branching += chain.states.size() > graph.profile.layers.size();
    check_against_reference(chain, random_options(random), fmt::format("graph trial {}", trial));
  }
  EXPECT_GT(branching, 50);  // most graphs branch: their states do not form a chain
}

// Long chains on several levels, where the pruning skips most candidates.
TEST(PipeDreamFastSolver, SameSolutionsAsTheReferenceOnLongerChains) {
  std::mt19937 random(77);
  for (int trial = 0; trial < 6; ++trial) {
    const StateChain chain = antichain_states(chain_graph(random_chain(random, 120)));
    PipeDreamOptions options;
    options.levels = {{4, 1e10}, {3, 1.25e9}, {4, 1e9}};
    options.cost_model = trial % 2 ? PipeDreamCostModel::Paper : PipeDreamCostModel::Released;
    check_against_reference(chain, options, fmt::format("long chain trial {}", trial));
  }
}

TEST(PipeDreamFastSolver, SameSolutionsAsTheReferenceOnPipeDreamProfiles) {
  for (const char* model : {"vgg16", "alexnet", "resnet50", "gnmt"}) {
    const StateChain chain =
        antichain_states(read_model_graph(std::string(PIPEGRID_SOURCE_DIR) + "/models/pipedream/" + model + "/graph.txt", 1));
    PipeDreamOptions options;
    options.levels = {{4, 8e9}, {4, 1.25e9}};
    check_against_reference(chain, options, model);
  }
}

// ------------------------------------------------------ the antichain bound

/// `width` independent branches of `length` layers between a source and a
/// sink: the construction's states are the antichains of the branches,
/// about (length + 1)^width.
ModelGraph fan(int width, int length) {
  ModelGraph graph;
  graph.profile.name = "fan";
  const auto add = [&](const std::string& name) {
    Layer layer;
    layer.name = name;
    layer.forward_s = 1e-3;
    graph.profile.layers.push_back(layer);
    graph.consumers.emplace_back();
    graph.activation_bytes.push_back(1);
    graph.descriptions.push_back("Conv2d");
    return static_cast<int>(graph.profile.layers.size()) - 1;
  };
  const int source = add("source");
  std::vector<int> ends;
  for (int b = 0; b < width; ++b) {
    int previous = source;
    for (int l = 0; l < length; ++l) {
      const int layer = add(fmt::format("b{}_{}", b, l));
      graph.consumers[previous].push_back(layer);
      previous = layer;
    }
    ends.push_back(previous);
  }
  const int sink = add("sink");
  for (const int end : ends) graph.consumers[end].push_back(sink);
  return graph;
}

TEST(AntichainBound, ATightBoundRefusesNamingTheFileAndTheCount) {
  AntichainOptions options;
  options.file = "fan/graph.txt";
  options.max_states = 50;
  // The source, every position of the three branches but all at the source
  // (5^3 - 1), and the sink: 126 states.
  const ModelGraph graph = fan(3, 4);
  try {
    antichain_states(graph, options);
    FAIL() << "expected an InputError";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("fan/graph.txt"), std::string::npos) << message;
    EXPECT_NE(message.find("more than 50 states"), std::string::npos) << message;
    EXPECT_NE(message.find("14 layers"), std::string::npos) << message;
  }
  options.max_states = 200;
  EXPECT_EQ(antichain_states(graph, options).states.size(), 126u);
}

TEST(AntichainBound, AnExplodingGraphIsRefusedQuickly) {
  // 12 branches of 10 layers: 11^12 antichains. The default bound stops it
  // long before (the test would not finish otherwise).
  AntichainOptions options;
  options.file = "wide.txt";
  try {
    antichain_states(fan(12, 10), options);
    FAIL() << "expected an InputError";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("wide.txt"), std::string::npos) << message;
    EXPECT_NE(message.find(fmt::format("more than {} states", limits::kMaxAntichainStates)), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace pipegrid
