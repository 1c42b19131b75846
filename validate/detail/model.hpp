#pragma once
// LibTorch side of the model zoo (validate/model_zoo.hpp): layer modules and
// data. Includes LibTorch: only the executor, the zoo and tests include it.

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "validate/model_zoo.hpp"

namespace pipegrid::validate::detail {

/** One layer of a zoo model: a module from one tensor to one tensor. */
class Layer : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor input) = 0;
};

using LayerList = std::vector<std::shared_ptr<Layer>>;

/** Builds every layer of the resolved model, parameters initialised from
 *  `seed` (the same seed gives the same weights, whatever the thread). Uses
 *  and restores nothing else: call it from one thread at a time. */
LayerList build_layers(const ModelConfig& config, std::uint64_t seed);

/** One use of parameters in a forward: a module's output and the
 *  parameters it was computed with (a Linear's weight and bias, say). */
struct WeightUse {
  torch::Tensor output;
  std::vector<torch::Tensor> parameters;
};

/** While one lives on a thread, every parameterised module the zoo's layers
 *  run on that thread appends its WeightUse, in forward order. A split
 *  backward (zero-bubble I and W) uses them: I takes the gradient of every
 *  use's output, W each use's parameter gradients from it alone (for a
 *  Linear, X^T dY), as zero-bubble implementations split per operator. */
class WeightTape {
 public:
  WeightTape();
  ~WeightTape();
  WeightTape(const WeightTape&) = delete;
  WeightTape& operator=(const WeightTape&) = delete;
  std::vector<WeightUse> uses;
};

/** Runs layers [first, last) of `layers` on `input`. */
torch::Tensor run_layers(const LayerList& layers, int first, int last, torch::Tensor input);

/** Parameters of layers [first, last), in layer order. */
std::vector<torch::Tensor> parameters_of(const LayerList& layers, int first, int last);

struct Batch {
  torch::Tensor input;   ///< float features or int64 token ids, batch first
  torch::Tensor target;  ///< int64 class ids (per sample, or per position)
};

/** Micro-batch `micro_batch` of mini-batch `mini_batch`: `size` samples that
 *  depend on (seed, mini_batch, micro_batch) only. */
Batch make_batch(const ModelConfig& config, std::uint64_t seed, int mini_batch, int micro_batch, int size);

/** Mean cross-entropy of the model's output against `target`. */
torch::Tensor loss_of(const ModelConfig& config, const torch::Tensor& output, const torch::Tensor& target);

}  // namespace pipegrid::validate::detail
