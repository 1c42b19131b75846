// The split backward's building block (validate/detail/model.hpp,
// WeightTape): the zoo's parameterised operators record their outputs; I
// takes the gradients of the input and of every use's output in one pass,
// W each use's parameter gradients alone. W must give the whole backward's
// parameter gradients and must not walk the graph between the operators
// again (a sentinel between two layers runs its backward once, in I).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "validate/detail/model.hpp"
#include "validate/model_zoo.hpp"

namespace pipegrid::validate::detail {
namespace {

ModelConfig small(const std::string& name) {
  ModelConfig model;
  model.name = name;
  if (name == "mlp") model.options = {{"layers", 4}, {"hidden", 32}, {"classes", 5}};
  if (name == "gpt") model.options = {{"layers", 2}, {"hidden", 32}, {"heads", 4}, {"sequence", 8}, {"vocabulary", 50}};
  return model;
}

/** Identity whose backward counts its runs: a sentinel between two layers. */
struct CountingIdentity : public torch::autograd::Function<CountingIdentity> {
  static inline int backward_runs = 0;
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& input) { return input.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list grads) {
    ++backward_runs;
    return grads;
  }
};

/** Layers 1.. of the model on `input`, the sentinel after layer 1. */
torch::Tensor stage_forward(const LayerList& layers, const torch::Tensor& input) {
  const torch::Tensor first = run_layers(layers, 1, 2, input);
  return run_layers(layers, 2, static_cast<int>(layers.size()), CountingIdentity::apply(first));
}

class WeightTapeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(WeightTapeTest, SplitGradientsEqualTheWholeBackwardAndWWalksOnlyTheOperators) {
  torch::manual_seed(3);
  const ModelConfig model = small(GetParam());
  const LayerList layers = build_layers(model, 7);
  const int count = static_cast<int>(layers.size());
  // The stage under test: every layer after the first, fed the first's output.
  const Batch batch = make_batch(model, 7, 0, 0, 3);
  const torch::Tensor stage_input = run_layers(layers, 0, 1, batch.input).detach().requires_grad_(true);
  const std::vector<torch::Tensor> parameters = parameters_of(layers, 1, count);

  // Reference: one whole backward.
  ASSERT_GE(count, 4);
  torch::Tensor output = stage_forward(layers, stage_input);
  const torch::Tensor gradient = torch::randn_like(output);
  std::vector<torch::Tensor> wanted{stage_input};
  for (const torch::Tensor& parameter : parameters) wanted.push_back(parameter);
  const std::vector<torch::Tensor> reference = torch::autograd::grad({output}, wanted, {gradient});

  // Split: a tape over the forward, I in one pass, W per use.
  std::vector<WeightUse> uses;
  {
    WeightTape tape;
    output = stage_forward(layers, stage_input);
    uses = std::move(tape.uses);
  }
  ASSERT_FALSE(uses.empty());
  std::size_t taped_parameters = 0;
  for (const WeightUse& use : uses) taped_parameters += use.parameters.size();
  EXPECT_EQ(taped_parameters, parameters.size()) << "every parameter is recorded by exactly one use";
  CountingIdentity::backward_runs = 0;
  std::vector<torch::Tensor> split_wanted{stage_input};
  for (const WeightUse& use : uses) split_wanted.push_back(use.output);
  const std::vector<torch::Tensor> split = torch::autograd::grad({output}, split_wanted, {gradient}, true, false, true);
  EXPECT_EQ(CountingIdentity::backward_runs, 1);
  EXPECT_TRUE(torch::allclose(split[0], reference[0], 1e-5, 1e-6));
  // W per use, each gradient matched to its parameter (the tape follows the
  // forward's order, not the modules' registration order).
  std::size_t compared = 0;
  for (std::size_t u = 0; u < uses.size(); ++u) {
    const auto grads = torch::autograd::grad({uses[u].output}, uses[u].parameters, {split[u + 1]}, true, false, true);
    for (std::size_t q = 0; q < grads.size(); ++q)
      for (std::size_t p = 0; p < parameters.size(); ++p)
        if (parameters[p].is_same(uses[u].parameters[q])) {
          EXPECT_TRUE(torch::allclose(grads[q], reference[p + 1], 1e-5, 1e-6)) << "parameter " << p;
          ++compared;
        }
  }
  EXPECT_EQ(CountingIdentity::backward_runs, 1) << "W walked the backward of later layers again";
  EXPECT_EQ(compared, parameters.size());
}

INSTANTIATE_TEST_SUITE_P(Zoo, WeightTapeTest, ::testing::Values("mlp", "gpt"));

TEST(WeightTape, OnePerThread) {
  WeightTape tape;
  EXPECT_THROW(WeightTape second, std::logic_error);
}

}  // namespace
}  // namespace pipegrid::validate::detail
