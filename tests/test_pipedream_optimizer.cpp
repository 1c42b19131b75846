// PipeDream's optimizer: the antichain chain of states and the dynamic
// program, checked against the released optimizer's objectives on its own
// profiles (SEMANTICS.md) and against hand-derived cases.

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/model_graph.hpp"
#include "partitioners/antichain.hpp"
#include "partitioners/pipedream.hpp"

namespace pipegrid {
namespace {

std::string profile_path(const std::string& model) {
  return std::string(PIPEGRID_SOURCE_DIR) + "/models/pipedream/" + model + "/graph.txt";
}

StateChain states_of(const std::string& model) { return antichain_states(read_model_graph(profile_path(model), 1)); }

double objective(const StateChain& chain, std::vector<int> machines, std::vector<double> bandwidths, bool straight = false) {
  PipeDreamOptions options;
  for (std::size_t l = 0; l < machines.size(); ++l) options.levels.push_back({machines[l], bandwidths[l]});
  options.straight = straight;
  return solve_pipedream(chain, options).time_per_stage_s;
}

void expect_relative(double actual, double expected) { EXPECT_NEAR(actual, expected, 1e-9 * expected); }

TEST(AntichainStates, CountsMatchPipeDream) {
  EXPECT_EQ(states_of("vgg16").states.size(), 40u);
  EXPECT_EQ(states_of("alexnet").states.size(), 22u);
  EXPECT_EQ(states_of("resnet50").states.size(), 240u);
}

TEST(PipeDreamOptimizer, ReleasedObjectivesOnPipeDreamProfiles) {
  const StateChain vgg16 = states_of("vgg16");
  expect_relative(objective(vgg16, {4}, {1.25e9}), 0.17634916586666669);
  expect_relative(objective(vgg16, {16}, {1.25e9}), 0.05479489083076921);
  expect_relative(objective(vgg16, {4}, {1.25e9}, true), 0.381063);
  expect_relative(objective(states_of("alexnet"), {4}, {1.25e9}), 0.032460913066666666);
  expect_relative(objective(states_of("resnet50"), {8}, {1.25e9}), 0.0822083584);
}

// More objectives of the released optimizer (optimizer_graph_hierarchical.py
// run with --activation_compression_ratio 1 on the same graph.txt files).
TEST(PipeDreamOptimizer, ReleasedObjectivesHierarchicalAndStraight) {
  const StateChain vgg16 = states_of("vgg16");
  expect_relative(objective(vgg16, {4, 4}, {8e9, 1.25e9}), 0.06724155413333334);
  expect_relative(objective(vgg16, {4, 2}, {8e9, 1.25e9}, true), 0.23559000000000002);
  expect_relative(objective(states_of("alexnet"), {4, 4}, {8e9, 1.25e9}), 0.0150994944);
  expect_relative(objective(states_of("gnmt"), {8}, {1.25e9}), 0.019284999999999997);
}

TEST(PipeDreamOptimizer, ReleasedMemoryConstraint) {
  PipeDreamOptions options;
  options.levels = {{4, 1.25e9}};
  options.memory_bytes = 4e9;
  expect_relative(solve_pipedream(states_of("vgg16"), options).time_per_stage_s, 0.5001918556);
}

}  // namespace
}  // namespace pipegrid
