// Model generators: the layer lists of mlp, vgg16, resnet50, gnmt and gpt
// with their analytic costs (docs/formats.md, Analytic fields).
//
// Conventions (per micro-batch of B samples, e bytes per element):
// - FLOPs: a multiply-add is 2. Layers with matrix products (linear,
//   conv2d, lstm, attention, transformer) count their matrix products only;
//   the forward's products again for the input gradient (twice for products
//   of two activations, both of whose inputs need a gradient) and once more
//   for the weight gradient. Layers without any (embedding, norm, pool,
//   loss) count their element-wise operations at the rates documented.
// - bytes_read / bytes_written: the forward's device-memory traffic, each
//   kernel (matrix product, element-wise step) on its own (no fusion).
// - activation_bytes: what the layer's forward leaves for its backward that
//   the layer itself made (its input is stashed by the layer before it, or
//   is the stage's input), its own output included.
// - Token ids are 8-byte integers; labels (and GNMT's decoder input) are
//   read by the stage that needs them and never cross a cut.

#include "generators/model_generators.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/limits.hpp"
#include "core/platform_check.hpp"

namespace pipegrid {

namespace {

constexpr double kIdBytes = 8;           ///< an int64 token id or pooling index
constexpr double kLossBytes = 4;         ///< the loss: one fp32 scalar
constexpr double kLogSumExpBytes = 4;    ///< fused attention's log-sum-exp per query row and head: fp32
constexpr long long kMaxLayersOption = 100000;
constexpr long long kMaxMicroBatchSize = 1000000;

/// The analytic costs of one layer's kernels, summed.
class Cost {
 public:
  explicit Cost(double element_bytes) : e_(element_bytes) {}

  /// [rows x in] x [in x out] with a weight matrix (plus `bias` weights
  /// read): 2 rows in out FLOPs in the forward, the input gradient and the
  /// weight gradient each.
  void weight_product(double rows, double in, double out, double bias) {
    const double flops = 2 * rows * in * out;
    forward += flops;
    backward_input += flops;
    backward_weight += flops;
    read += e_ * (rows * in + in * out + bias);
    written += e_ * rows * out;
  }
  /// A grouped GEMM (mixture of experts): `rows` rows in all, spread over
  /// `groups` weight matrices of in x out: the FLOPs of weight_product,
  /// every group's weights read.
  void grouped_product(double rows, double in, double out, double groups, double bias) {
    const double flops = 2 * rows * in * out;
    forward += flops;
    backward_input += flops;
    backward_weight += flops;
    read += e_ * (rows * in + groups * (in * out + bias));
    written += e_ * rows * out;
  }
  /// `batch` products [m x k] x [k x n] of two activations: 2 batch m k n
  /// FLOPs forward, twice that for the two input gradients.
  void activation_product(double batch, double m, double k, double n) {
    const double flops = 2 * batch * m * k * n;
    forward += flops;
    backward_input += 2 * flops;
    read += e_ * batch * (m * k + k * n);
    written += e_ * batch * m * n;
  }
  /// A convolution (k x k kernel, `bias` weights) of `batch` images of
  /// cin x side x side into cout x out_side x out_side: 2 batch out_side^2
  /// cout cin k^2 FLOPs in each pass.
  void convolution(double batch, double cin, double side, double cout, double out_side, double k, double bias) {
    const double flops = 2 * batch * out_side * out_side * cout * cin * k * k;
    forward += flops;
    backward_input += flops;
    backward_weight += flops;
    read += e_ * (batch * cin * side * side + cout * cin * k * k + bias);
    written += e_ * batch * cout * out_side * out_side;
  }
  /// An element-wise kernel: reads `in` and writes `out` elements, plus
  /// `extra_written` bytes (dropout masks, pooling indices).
  void memory(double in, double out, double extra_written = 0, double extra_read = 0) {
    read += e_ * in + extra_read;
    written += e_ * out + extra_written;
  }
  /// FLOPs counted by hand: element-wise work (layers without matrix
  /// products), and the products inside a fused kernel.
  void flops(double forward_flops, double input_flops, double weight_flops) {
    forward += forward_flops;
    backward_input += input_flops;
    backward_weight += weight_flops;
  }

  double forward = 0, backward_input = 0, backward_weight = 0, read = 0, written = 0;

 private:
  double e_;
};

/// Collects the layers of one model.
class Builder {
 public:
  explicit Builder(double element_bytes) : e(element_bytes) {}

  /// Appends a layer; `output` and `activation` are element counts (times
  /// e), `extra_activation` bytes (indices, masks), `parameters` a count.
  void add(const std::string& name, const char* op, const Cost& cost, double output, double activation,
           double parameters, double extra_activation = 0) {
    Layer layer;
    layer.name = name;
    layer.op = op;
    layer.times_given = false;
    layer.forward_flops = cost.forward;
    layer.backward_input_flops = cost.backward_input;
    layer.backward_weight_flops = cost.backward_weight;
    layer.bytes_read = cost.read;
    layer.bytes_written = cost.written;
    layer.output_bytes = e * output;
    layer.activation_bytes = e * activation + extra_activation;
    layer.parameter_bytes = e * parameters;
    layers.push_back(std::move(layer));
  }
  /// The loss layer: softmax cross-entropy over `classes` for `rows`
  /// predictions: 4 FLOPs per logit forward (max, exp, sum, log-divide), 2
  /// backward (probability minus one-hot, scale); keeps the probabilities.
  void loss(double rows, double classes) {
    Cost cost(e);
    cost.flops(4 * rows * classes, 2 * rows * classes, 0);
    cost.memory(rows * classes, rows * classes, kLossBytes, kIdBytes * rows);
    add("loss", "loss", cost, kLossBytes / e, rows * classes, 0);
  }

  Cost cost() const { return Cost(e); }

  double e;
  std::vector<Layer> layers;
};

// ---------------------------------------------------------------- options

const std::vector<ModelInfo>& registry() {
  static const std::vector<ModelInfo> models = {
      {"mlp",
       "multi-layer perceptron: layers-1 x (Linear hidden->hidden, ReLU), Linear hidden->classes, loss",
       {{"layers", 8, "linear layers (>= 1)", 1, kMaxLayersOption},
        {"hidden", 256, "width of the input and the hidden layers"},
        {"classes", 10, "output classes"}},
       32},
      {"vgg16",
       "VGG-16 (Simonyan & Zisserman): 13 x (3x3 conv, ReLU), 5 max-pools, fc6, fc7, fc8, loss; 138,357,544 "
       "parameters at the defaults",
       {{"width", 64, "channels of the first block (VGG-16's 64 scales every block)"},
        {"image", 224, "square input side, a multiple of 32"},
        {"hidden", std::nullopt, "classifier width (default 4096 x width / 64)"},
        {"classes", 1000, "output classes"}},
       128},
      {"resnet50",
       "ResNet-50 (He et al., torchvision v1.5): conv1, max-pool, 16 bottleneck blocks (one layer each), average "
       "pool, fc, loss; 25,557,032 parameters at the defaults",
       {{"width", 64, "channels of conv1 (64 scales every block)"},
        {"image", 224, "square input side, a multiple of 32"},
        {"classes", 1000, "output classes"}},
       128},
      {"gnmt",
       "GNMT-L (Wu et al.; PipeDream's gnmt = GNMT-8, gnmt_large = GNMT-16): embeddings, L/2 encoder LSTMs (the "
       "first bidirectional), decoder embedding, attention LSTM, L/2-1 decoder LSTMs, classifier, loss",
       {{"layers", 8, "L: LSTM layers, even, >= 4 (L/2 encoder, L/2 decoder)", 1, kMaxLayersOption},
        {"hidden", 1024, "LSTM hidden size and embedding width"},
        {"vocabulary", 32320, "vocabulary size"},
        {"sequence", 48, "tokens per sentence (source and target)"}},
       32},
      {"gpt",
       "GPT-style decoder (GPT-2 small at the defaults): token + position embedding, `layers` pre-norm transformer "
       "blocks (one layer each, op transformer), final norm, head to the vocabulary (not tied), loss",
       {{"layers", 12, "transformer blocks", 1, kMaxLayersOption},
        {"hidden", 768, "model width, a multiple of heads"},
        {"heads", 12, "attention heads"},
        {"ffn", std::nullopt,
         "feed-forward width (default 4 x hidden; with --swiglu 1 int(8 x hidden / 3 / 64) x 64, Megatron-LM's rule)"},
        {"sequence", 1024, "tokens per sample"},
        {"vocabulary", 50257, "vocabulary size"},
        {"query_groups", std::nullopt,
         "key/value heads of grouped-query attention, dividing heads (default heads: multi-head attention)", 1,
         kModelOptionCap, false},
        {"swiglu", 0, "1: SwiGLU MLP (up projection to 2 x ffn: gate and value); 0: GeLU", 0, 1, false},
        {"linear_bias", 1, "0: no biases in the blocks' linear layers (Megatron's --disable-bias-linear)", 0, 1, false},
        {"rmsnorm", 0, "1: RMSNorm (hidden parameters per norm); 0: LayerNorm (2 x hidden)", 0, 1, false},
        {"rotary", 0, "1: rotary position embedding (no position table); 0: a learned position table", 0, 1, false},
        {"positions", std::nullopt,
         "rows of the learned position table, >= sequence (default sequence; none with --rotary 1)", 1,
         kModelOptionCap, false},
        {"tied_embeddings", 0,
         "1: the head uses the embedding's word table (no parameters of its own; under pipeline parallelism "
         "simulate adds Megatron's copy on the last stage and the all-reduce of its gradients); 0: its own",
         0, 1, false},
        {"flash_attention", 0,
         "1: fused attention (FlashAttention, cuDNN): the s x s scores neither stored nor kept, recomputed in the "
         "backward; 0: unfused",
         0, 1, false},
        // Mixture of experts, multi-head latent attention and multi-token
        // prediction: Megatron-LM core_v0.14.0's arguments and defaults
        // (megatron/training/arguments.py: --num-experts, --moe-router-topk 2,
        // --moe-ffn-hidden-size (ffn), --moe-shared-expert-intermediate-size,
        // --moe-layer-freq 1, --multi-latent-attention, --q-lora-rank (None),
        // --kv-lora-rank 32, --qk-head-dim 128, --qk-pos-emb-head-dim 64,
        // --v-head-dim 128, --mtp-num-layers); docs/semantics.md, Mixture of experts.
        {"num_experts", 0, "routed experts of an MoE block (0: dense, no MoE blocks)", 0, kModelOptionCap, false},
        {"moe_topk", 2, "experts each token is routed to (Megatron's --moe-router-topk), <= num_experts", 1,
         kModelOptionCap, false},
        {"moe_ffn", std::nullopt, "hidden width of one routed expert (default ffn; --moe-ffn-hidden-size)", 1,
         kModelOptionCap, false},
        {"moe_shared_ffn", 0,
         "intermediate width of the shared expert (0: none; --moe-shared-expert-intermediate-size)", 0,
         kModelOptionCap, false},
        {"moe_dense_first", 0, "the first N blocks are dense (--moe-layer-freq \"[0]*N+[1]*...\")", 0,
         kMaxLayersOption, false},
        {"moe_layer_freq", 1,
         "after the dense first blocks, every N-th block is MoE, starting with the first (--moe-layer-freq N)", 1,
         kMaxLayersOption, false},
        {"moe_imbalance", 100,
         "routing imbalance, percent >= 100: the busiest expert-parallel rank's routed tokens over the mean (100: "
         "uniform)",
         100, 100000, false},
        {"mla", 0, "1: multi-head latent attention (--multi-latent-attention); 0: MHA/GQA", 0, 1, false},
        {"q_lora_rank", 0, "MLA: rank of the query's down projection (0: none, a direct h -> heads x qk projection)",
         0, kModelOptionCap, false},
        {"kv_lora_rank", 32, "MLA: rank of the key/value down projection (--kv-lora-rank)", 1, kModelOptionCap, false},
        {"qk_head_dim", 128, "MLA: query/key head width without the rotary part (--qk-head-dim)", 1, kModelOptionCap,
         false},
        {"qk_pos_emb_head_dim", 64, "MLA: rotary part of the query/key head width (--qk-pos-emb-head-dim)", 0,
         kModelOptionCap, false},
        {"v_head_dim", 128, "MLA: value head width (--v-head-dim)", 1, kModelOptionCap, false},
        {"mtp_layers", 0,
         "multi-token prediction modules (--mtp-num-layers), after the final norm on the last stage: norms, a 2h -> h "
         "projection and one block each; the head and the loss then run over 1 + mtp_layers predictions",
         0, 100, false}},
       8},
  };
  return models;
}

std::string flag_of(const std::string& option) {
  std::string flag = "--" + option;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::string option_list(const ModelInfo& info) {
  std::string list;
  for (const ModelOptionInfo& option : info.options) list += (list.empty() ? "" : ", ") + flag_of(option.name);
  return list;
}

// ---------------------------------------------------------------- models

/// One LSTM direction over `steps` time steps of `rows` = B x steps tokens
/// of `in` features into `hidden`: input and recurrent products (8 rows
/// hidden (in + hidden) FLOPs per pass), the recurrent weights read at
/// every step, the cell update reading both pre-activations and the
/// previous cell state and writing the activated gates, cell and output.
void lstm(Cost& cost, double rows, double steps, double in, double hidden) {
  cost.weight_product(rows, in, 4 * hidden, 4 * hidden);              // input projection, all steps at once
  cost.weight_product(rows, hidden, 4 * hidden, 4 * hidden);          // recurrent projection, step by step
  cost.memory((steps - 1) * (4 * hidden * hidden + 4 * hidden), 0);   // its weights read again at every step
  cost.memory(2 * 4 * hidden * rows + hidden * rows, 6 * hidden * rows);  // cell update
}

/// LSTM parameters (PyTorch: two bias vectors): 4h(in + h) + 8h.
double lstm_parameters(double in, double hidden) { return 4 * hidden * (in + hidden) + 8 * hidden; }

void build_mlp(Builder& b, const ResolvedModel& m, Profile& profile) {
  const double rows = m.micro_batch_size;
  const double hidden = static_cast<double>(m.options.at("hidden")), classes = static_cast<double>(m.options.at("classes"));
  const long long layers = m.options.at("layers");
  profile.input_bytes = b.e * rows * hidden;
  for (long long l = 1; l <= layers; ++l) {
    const bool last = l == layers;
    const double out = last ? classes : hidden;
    Cost cost = b.cost();
    cost.weight_product(rows, hidden, out, out);
    if (!last) cost.memory(rows * out, rows * out);  // ReLU, in place
    b.add(fmt::format("fc{}", l), "linear", cost, rows * out, rows * out, hidden * out + out);
  }
  b.loss(rows, classes);
}

/// VGG-16's feature extractor at width 64: output channels of each 3x3
/// conv, 0 for a 2x2 max-pool.
constexpr int kVggFeatures[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};

/// A k x k max-pool with stride `stride` of `batch` x channels x side
/// images into out_side: k^2 comparisons per output forward, 1 per output
/// backward (the scatter); keeps its output and the 8-byte argmax indices.
void max_pool(Builder& b, const std::string& name, double batch, double channels, double side, double out_side,
              double k) {
  const double outputs = batch * channels * out_side * out_side;
  Cost cost = b.cost();
  cost.flops(k * k * outputs, outputs, 0);
  cost.memory(batch * channels * side * side, outputs, kIdBytes * outputs);
  b.add(name, "pool", cost, outputs, outputs, 0, kIdBytes * outputs);
}

void build_vgg16(Builder& b, const ResolvedModel& m, Profile& profile) {
  const double batch = m.micro_batch_size;
  const long long width = m.options.at("width");
  const double image = static_cast<double>(m.options.at("image"));
  profile.input_bytes = b.e * batch * 3 * image * image;
  double channels = 3, side = image;
  int block = 1, conv = 1;
  for (int features : kVggFeatures) {
    if (features == 0) {
      max_pool(b, fmt::format("pool{}", block), batch, channels, side, side / 2, 2);
      side /= 2;
      ++block;
      conv = 1;
      continue;
    }
    const double out = static_cast<double>(std::max<long long>(1, features * width / 64));
    Cost cost = b.cost();
    cost.convolution(batch, channels, side, out, side, 3, out);
    const double outputs = batch * out * side * side;
    cost.memory(outputs, outputs);  // ReLU, in place
    b.add(fmt::format("conv{}_{}", block, conv), "conv2d", cost, outputs, outputs, out * channels * 9 + out);
    channels = out;
    ++conv;
  }
  const double hidden = static_cast<double>(m.options.at("hidden")), classes = static_cast<double>(m.options.at("classes"));
  const double features = channels * side * side;
  const std::pair<const char*, std::pair<double, double>> fcs[] = {
      {"fc6", {features, hidden}}, {"fc7", {hidden, hidden}}, {"fc8", {hidden, classes}}};
  for (const auto& [name, shape] : fcs) {
    const auto [in, out] = shape;
    Cost cost = b.cost();
    cost.weight_product(batch, in, out, out);
    if (std::string(name) != "fc8") cost.memory(batch * out, batch * out);  // ReLU
    b.add(name, "linear", cost, batch * out, batch * out, in * out + out);
  }
  b.loss(batch, classes);
}

/// Output side of a convolution or pool: (side + 2 pad - k) / stride + 1.
double out_side_of(double side, double k, double stride, double pad) {
  return std::floor((side + 2 * pad - k) / stride) + 1;
}

void build_resnet50(Builder& b, const ResolvedModel& m, Profile& profile) {
  const double batch = m.micro_batch_size;
  const double width = static_cast<double>(m.options.at("width"));
  const double image = static_cast<double>(m.options.at("image"));
  const double classes = static_cast<double>(m.options.at("classes"));
  profile.input_bytes = b.e * batch * 3 * image * image;
  // conv1: 7x7 stride 2, BN, ReLU; keeps the convolution's output (BN's
  // input) and the ReLU's.
  double side = out_side_of(image, 7, 2, 3);
  {
    Cost cost = b.cost();
    cost.convolution(batch, 3, image, width, side, 7, 0);
    const double outputs = batch * width * side * side;
    cost.memory(outputs, outputs, 0, b.e * 2 * width);  // BN
    cost.memory(outputs, outputs);                       // ReLU
    b.add("conv1", "conv2d", cost, outputs, 2 * outputs, 3 * 49 * width + 2 * width);
  }
  const double pooled = out_side_of(side, 3, 2, 1);
  max_pool(b, "pool1", batch, width, side, pooled, 3);
  side = pooled;
  // Bottleneck blocks (torchvision v1.5: the stride on the 3x3 conv; a
  // 1x1 projection with BN on the first block of each stage).
  const int blocks[] = {3, 4, 6, 3};
  double channels = width;
  for (int stage = 0; stage < 4; ++stage) {
    const double mid = width * std::pow(2.0, stage), out = 4 * mid;
    for (int j = 0; j < blocks[stage]; ++j) {
      const double stride = stage > 0 && j == 0 ? 2 : 1;
      const double out_side = out_side_of(side, 3, stride, 1);
      const bool projection = j == 0;
      const double mid_in = batch * mid * side * side, mid_out = batch * mid * out_side * out_side;
      const double outputs = batch * out * out_side * out_side;
      Cost cost = b.cost();
      cost.convolution(batch, channels, side, mid, side, 1, 0);
      cost.memory(mid_in, mid_in, 0, b.e * 2 * mid);  // BN
      cost.memory(mid_in, mid_in);                     // ReLU
      cost.convolution(batch, mid, side, mid, out_side, 3, 0);
      cost.memory(mid_out, mid_out, 0, b.e * 2 * mid);
      cost.memory(mid_out, mid_out);
      cost.convolution(batch, mid, out_side, out, out_side, 1, 0);
      cost.memory(outputs, outputs, 0, b.e * 2 * out);
      double parameters = channels * mid + 2 * mid + 9 * mid * mid + 2 * mid + mid * out + 2 * out;
      double activation = 2 * mid_in + 2 * mid_out + outputs + outputs;  // conv and ReLU outputs, conv3, block output
      if (projection) {
        cost.convolution(batch, channels, side, out, out_side, 1, 0);
        cost.memory(outputs, outputs, 0, b.e * 2 * out);
        parameters += channels * out + 2 * out;
        activation += outputs;
      }
      cost.memory(2 * outputs, outputs);  // residual add
      cost.memory(outputs, outputs);      // ReLU
      b.add(fmt::format("conv{}_{}", stage + 2, j + 1), "conv2d", cost, outputs, activation, parameters);
      channels = out;
      side = out_side;
    }
  }
  // Global average pool: 1 FLOP per input element forward and backward.
  {
    const double inputs = batch * channels * side * side, outputs = batch * channels;
    Cost cost = b.cost();
    cost.flops(inputs, inputs, 0);
    cost.memory(inputs, outputs);
    b.add("pool5", "pool", cost, outputs, outputs, 0);
  }
  Cost fc = b.cost();
  fc.weight_product(batch, channels, classes, classes);
  b.add("fc", "linear", fc, batch * classes, batch * classes, channels * classes + classes);
  b.loss(batch, classes);
}

/// An embedding of `rows` token ids into `hidden`-wide rows of `tables`
/// tables (gpt: token and position): a gather (forward: tables - 1 adds per
/// element), no input gradient, a scatter-add per table for the weights.
void embedding(Builder& b, const std::string& name, double rows, double hidden, double tables, double parameters,
               double output) {
  Cost cost = b.cost();
  cost.flops((tables - 1) * rows * hidden, 0, tables * rows * hidden);
  cost.memory(tables * rows * hidden, rows * hidden, 0, kIdBytes * rows);
  b.add(name, "embedding", cost, output, rows * hidden, parameters);
}

void build_gnmt(Builder& b, const ResolvedModel& m, Profile& profile) {
  const double batch = m.micro_batch_size;
  const long long layers = m.options.at("layers");
  const double h = static_cast<double>(m.options.at("hidden"));
  const double vocabulary = static_cast<double>(m.options.at("vocabulary"));
  const double steps = static_cast<double>(m.options.at("sequence"));
  const double rows = batch * steps;  // tokens of the source, and of the target
  const long long half = layers / 2;
  profile.input_bytes = kIdBytes * rows;
  profile.sequence_length = static_cast<int>(steps);

  embedding(b, "embedding_enc", rows, h, 1, vocabulary * h, rows * h);
  {  // bidirectional first layer: two directions, outputs concatenated
    Cost cost = b.cost();
    lstm(cost, rows, steps, h, h);
    lstm(cost, rows, steps, h, h);
    cost.memory(2 * rows * h, 2 * rows * h);
    b.add("lstm_enc1", "lstm", cost, 2 * rows * h, 14 * rows * h, 2 * lstm_parameters(h, h));
  }
  for (long long l = 2; l <= half; ++l) {
    const bool residual = l >= 3;
    const double in = l == 2 ? 2 * h : h;
    Cost cost = b.cost();
    lstm(cost, rows, steps, in, h);
    if (residual) cost.memory(2 * rows * h, rows * h);
    b.add(fmt::format("lstm_enc{}", l), "lstm", cost, rows * h, (residual ? 7 : 6) * rows * h, lstm_parameters(in, h));
  }
  // The cut after the decoder embedding carries the encoder's output too.
  embedding(b, "embedding_dec", rows, h, 1, vocabulary * h, 2 * rows * h);
  {  // attention: an LSTM, then Bahdanau attention over the encoder's output
    const double pairs = batch * steps * steps;  // (target, source) positions
    Cost cost = b.cost();
    lstm(cost, rows, steps, h, h);
    cost.weight_product(rows, h, h, 0);                                  // query projection
    cost.weight_product(rows, h, h, 0);                                  // key projection
    cost.memory(pairs * h + 2 * rows * h, pairs * h);                    // q + k, broadcast
    cost.memory(pairs * h, pairs * h);                                   // tanh
    cost.weight_product(pairs, h, 1, 0);                                 // scores: v . tanh(q + k)
    cost.memory(pairs, pairs);                                           // softmax
    cost.activation_product(batch, steps, steps, h);                     // context
    const double activation = 6 * rows * h + 2 * rows * h + pairs * h + pairs + rows * h;
    b.add("attention", "attention", cost, 2 * rows * h, activation, lstm_parameters(h, h) + 2 * h * h + h);
  }
  for (long long l = 2; l <= half; ++l) {
    const bool residual = l >= 3, last = l == half;
    Cost cost = b.cost();
    cost.memory(2 * rows * h, 2 * rows * h);  // concatenate with the attention context
    lstm(cost, rows, steps, 2 * h, h);
    if (residual) cost.memory(2 * rows * h, rows * h);
    b.add(fmt::format("lstm_dec{}", l), "lstm", cost, (last ? 1 : 2) * rows * h, (residual ? 9 : 8) * rows * h,
          lstm_parameters(2 * h, h));
  }
  Cost classifier = b.cost();
  classifier.weight_product(rows, h, vocabulary, vocabulary);
  b.add("classifier", "linear", classifier, rows * vocabulary, rows * vocabulary, h * vocabulary + vocabulary);
  b.loss(rows, vocabulary);
}

/// The architecture of a gpt model: the options as numbers.
struct GptShape {
  double h = 0, heads = 0, kv = 0, f = 0, s = 0, vocabulary = 0, positions = 0;
  bool swiglu = false, linear_bias = true, rmsnorm = false, rotary = false, tied_embeddings = false;
  bool flash_attention = false;

  explicit GptShape(const ResolvedModel& m) {
    const auto option = [&](const char* name) { return static_cast<double>(m.options.at(name)); };
    h = option("hidden");
    heads = option("heads");
    kv = option("query_groups") * (h / heads);  // K's (and V's) columns: query_groups x head width
    f = option("ffn");
    s = option("sequence");
    vocabulary = option("vocabulary");
    positions = option("positions");
    swiglu = m.options.at("swiglu") == 1;
    linear_bias = m.options.at("linear_bias") == 1;
    rmsnorm = m.options.at("rmsnorm") == 1;
    rotary = m.options.at("rotary") == 1;
    tied_embeddings = m.options.at("tied_embeddings") == 1;
    flash_attention = m.options.at("flash_attention") == 1;
    experts = option("num_experts");
    topk = option("moe_topk");
    expert_ffn = option("moe_ffn");
    shared_ffn = option("moe_shared_ffn");
    dense_first = m.options.at("moe_dense_first");
    layer_freq = m.options.at("moe_layer_freq");
    imbalance = option("moe_imbalance") / 100;
    mla = m.options.at("mla") == 1;
    q_rank = option("q_lora_rank");
    kv_rank = option("kv_lora_rank");
    qk_nope = option("qk_head_dim");
    qk_rope = option("qk_pos_emb_head_dim");
    v_head = option("v_head_dim");
    mtp_layers = m.options.at("mtp_layers");
  }
  /// Whether block `index` (0-based) is a mixture-of-experts block: with
  /// experts, past the dense first blocks, every layer_freq-th from there.
  bool moe_block(long long index) const {
    return experts > 0 && index >= dense_first && (index - dense_first) % layer_freq == 0;
  }
  /// The shape of a block, MoE or dense (MLA either way).
  TransformerShape block_shape(double batch, bool moe) const {
    TransformerShape shape = layer_shape(batch);
    if (moe) {
      shape.experts = experts;
      shape.topk = topk;
      shape.expert_ffn = expert_ffn;
      shape.shared_ffn = shared_ffn;
      shape.imbalance = imbalance;
    }
    if (mla) {
      shape.q_lora_rank = q_rank;
      shape.kv_lora_rank = kv_rank;
      shape.qk_head_dim = qk_nope;
      shape.qk_pos_head_dim = qk_rope;
      shape.v_head_dim = v_head;
    }
    return shape;
  }
  double experts = 0, topk = 0, expert_ffn = 0, shared_ffn = 0, imbalance = 1;
  long long dense_first = 0, layer_freq = 1, mtp_layers = 0;
  bool mla = false;
  double q_rank = 0, kv_rank = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
  /// The layers' TransformerShape for `batch` sequences (core/gpu_kernels.hpp).
  TransformerShape layer_shape(double batch) const {
    TransformerShape shape;
    shape.batch = batch;
    shape.sequence = s;
    shape.hidden = h;
    shape.heads = heads;
    shape.kv_columns = kv;
    shape.ffn = f;
    shape.vocabulary = vocabulary;
    shape.swiglu = swiglu;
    shape.linear_bias = linear_bias;
    shape.rmsnorm = rmsnorm;
    shape.rotary = rotary;
    shape.flash_attention = flash_attention;
    shape.position_table = !rotary;
    return shape;
  }
  /// Parameter vectors of a norm: LayerNorm's scale and shift, RMSNorm's scale.
  double norm_vectors() const { return rmsnorm ? 1 : 2; }
  /// Columns of the MLP's up projection: f, or 2 f for SwiGLU's gate and value.
  double up() const { return swiglu ? 2 * f : f; }
};

/// One pre-norm transformer block (see the file's conventions), N = B s
/// tokens, d = h / a, kv = query_groups x d, u = f (GeLU) or 2 f (SwiGLU).
/// FLOPs forward: 2 N h (h + 2 kv) (Q, K, V) + 4 B s^2 h (Q K^T and
/// attention x V: every query head, a key/value head shared by its group)
/// + 2 N h^2 (output) + 2 N h u + 2 N f h (MLP); 8 N h^2 + 4 N h f + 4 B s^2 h
/// at kv = h with GeLU; fused attention's backward adds 2 B s^2 h (it
/// recomputes Q K^T). Parameters: 2 h^2 + 2 h kv + h u + f h weights,
/// h + 2 kv + h + u + h biases (linear_bias), two norms.
void transformer_block(Builder& b, const std::string& name, double batch, const GptShape& g) {
  const double h = g.h, s = g.s, f = g.f, kv = g.kv, up = g.up();
  const double rows = batch * s, d = h / g.heads, scores = batch * g.heads * s * s, qkv = h + 2 * kv;
  const double bias = g.linear_bias ? 1 : 0;
  const double norm_read = b.e * g.norm_vectors() * h;  // the norm's scale (and shift)
  Cost cost = b.cost();
  cost.memory(rows * h, rows * h, 0, norm_read);      // norm 1
  cost.weight_product(rows, h, qkv, bias * qkv);      // Q, K, V
  if (g.rotary)                                       // rotate Q and K (reads the cos and sin tables)
    cost.memory(rows * (h + kv) + 2 * s * d, rows * (h + kv));
  const double before_core = cost.forward;  // the attention core's FLOPs follow (selective recomputation's share)
  if (g.flash_attention) {
    // One kernel (FlashAttention, cuDNN): Q K^T, softmax, dropout and
    // attention x V on chip, 4 B s^2 h FLOPs forward; it reads Q, K, V and
    // writes the output and the softmax's log-sum-exp (fp32, one per query
    // row and head). Its backward recomputes Q K^T (2 B s^2 h) besides the
    // four products of the input gradients (8 B s^2 h).
    const double products = 4 * batch * s * s * h;
    cost.flops(products, 2 * products + products / 2, 0);
    cost.memory(rows * qkv, rows * h, kLogSumExpBytes * batch * g.heads * s);
  } else {
    cost.activation_product(batch * g.heads, s, d, s);  // Q K^T
    cost.memory(scores, scores);                        // scale, mask, softmax
    cost.memory(scores, scores, scores);                // dropout (1-byte mask)
    cost.activation_product(batch * g.heads, s, s, d);  // attention x V
  }
  const double core_flops = cost.forward - before_core;
  cost.weight_product(rows, h, h, bias * h);          // output projection
  cost.memory(2 * rows * h, rows * h, rows * h);      // dropout, residual add
  cost.memory(rows * h, rows * h, 0, norm_read);      // norm 2
  cost.weight_product(rows, h, up, bias * up);        // MLP up (SwiGLU: gate and value)
  cost.memory(rows * f, rows * f);                    // GeLU, or SwiGLU's SiLU of the gate
  if (g.swiglu) cost.memory(2 * rows * f, rows * f);  // SwiGLU: SiLU(gate) x value
  cost.weight_product(rows, f, h, bias * h);          // MLP down
  cost.memory(2 * rows * h, rows * h, rows * h);      // dropout, residual add
  // Kept for the backward, per tensor (Korthikanti et al. 2022, Table 2,
  // generalised): the two norms' inputs (2 N h); norm 1's output, the Q, K,
  // V projections' input (N h); Q (N h), K and V (N kv each) for Q K^T and
  // attention x V; the softmax output and its dropout's output (2 B a s^2);
  // attention x V's output, the output projection's input (N h); norm 2's
  // output, the MLP's input (N h); the activation's input (N f for GeLU; 2
  // N f for SwiGLU, gate and value, as Megatron-LM's fused SwiGLU keeps
  // them) and its output, the down projection's input (N f). In all 6 N h +
  // 2 N kv + 2 N f (GeLU) or 3 N f (SwiGLU) + 2 B a s^2 elements: s b h (34 +
  // 5 a s / h) bytes at 2 bytes, kv = h and f = 4h (Korthikanti's 8 N h + 2
  // N f + 2 B a s^2, the form computed below), plus 1-byte dropout masks of
  // the scores (B a s^2) and of the two residual branches (2 N h). Fused
  // attention keeps none of the scores, their mask (its backward draws the
  // same random numbers again) nor the softmax output; it keeps the
  // log-sum-exp, 4 bytes per query row and head (B a s).
  const double elements = 8 * rows * h + 2 * rows * f + 2 * scores - 2 * rows * (h - kv) +
                          (g.swiglu ? rows * f : 0) - (g.flash_attention ? 2 * scores : 0);
  const double masks = 2 * rows * h + (g.flash_attention ? 0 : scores);
  const double log_sum_exp = g.flash_attention ? kLogSumExpBytes * batch * g.heads * s : 0;
  const double weights = 2 * h * h + 2 * h * kv + h * up + f * h;
  const double biases = bias * (qkv + h + up + h);
  b.add(name, "transformer", cost, rows * h, elements, weights + biases + 2 * g.norm_vectors() * h, masks + log_sum_exp);
  // What Megatron's tensor parallelism keeps whole on every member and its
  // sequence parallelism splits (Korthikanti et al. 2022, section 4.2.1: 10
  // s b h of the 34 s b h at 2 bytes): the two norms' inputs and outputs (4
  // N h elements) and the residual branches' dropout masks (2 N h bytes).
  Layer& block = b.layers.back();
  block.replicated_activation_fraction = (b.e * 4 * rows * h + 2 * rows * h) / *block.activation_bytes;
  // The attention core (what Megatron-LM's selective recomputation
  // recomputes): its FLOPs, and what it alone keeps: the softmax output and
  // the dropout's output (e bytes each) and mask (1 byte) over the scores,
  // 5 B a s^2 bytes at 2 bytes, or fused attention's log-sum-exp.
  Layer& layer = b.layers.back();
  const double core_stash = g.flash_attention ? log_sum_exp : (2 * b.e + 1) * scores;
  layer.attention_core_flops_share = core_flops / cost.forward;
  layer.attention_core_stash_share = core_stash / *layer.activation_bytes;
}

/// A block with multi-head latent attention or a mixture-of-experts MLP
/// (or both), or a multi-token prediction module (`mtp_depth` >= 1: its
/// embedding lookup, two norms, the 2h -> h projection before the block and
/// its own final norm after; its output carries the hidden states of the
/// main model and of the modules 1..mtp_depth, which the head reads). The
/// dense MHA/GQA block is transformer_block's (kept as it was, bit for
/// bit). Conventions as transformer_block's; docs/semantics.md, Mixture of
/// experts, gives the terms and their sources.
void general_block(Builder& b, const std::string& name, double batch, const GptShape& g, bool moe, long long mtp_depth) {
  const double h = g.h, s = g.s, a = g.heads, e = b.e;
  const double rows = batch * s, bias = g.linear_bias ? 1 : 0, nv = g.norm_vectors();
  const double norm_read = e * nv * h;
  Cost cost = b.cost();
  double weights = 0, biases = 0, norms = 2 * nv * h;
  double elements = 0, masks = 0;
  if (mtp_depth > 0) {
    // Megatron-Core MultiTokenPredictionLayer (core_v0.14.0,
    // transformer/multi_token_prediction.py): the next tokens' embedding
    // (the model's word table, shared), enorm and hnorm, their
    // concatenation projected 2h -> h (eh_proj), then the block.
    cost.memory(rows * h, rows * h, 0, kIdBytes * rows);  // embedding lookup
    cost.memory(rows * h, rows * h, 0, norm_read);          // enorm
    cost.memory(rows * h, rows * h, 0, norm_read);          // hnorm
    cost.memory(2 * rows * h, 2 * rows * h);                // concatenate
    cost.weight_product(rows, 2 * h, h, 0);                 // eh_proj
    weights += 2 * h * h;
    norms += 3 * nv * h;                    // enorm, hnorm, the module's final norm
    elements += 2 * rows * h + 2 * rows * h;  // the two norms' inputs, the projection's input
  }
  cost.memory(rows * h, rows * h, 0, norm_read);  // norm 1
  elements += 2 * rows * h + rows * h;            // the two norms' inputs, norm 1's output
  double qk_width = h / a, v_width = h / a;       // per head
  if (!g.mla) {
    const double qkv = h + 2 * g.kv;
    cost.weight_product(rows, h, qkv, bias * qkv);
    if (g.rotary) cost.memory(rows * (h + g.kv) + 2 * s * (h / a), rows * (h + g.kv));
    weights += h * qkv;
    biases += bias * qkv;
    elements += rows * qkv;  // Q, K, V
  } else {
    // Megatron-Core MLASelfAttention (core_v0.14.0,
    // transformer/multi_latent_attention.py): linear_q_down_proj,
    // q_layernorm, linear_q_up_proj (or linear_q_proj without a q rank);
    // linear_kv_down_proj to kv_lora_rank + the rotary key part,
    // kv_layernorm, linear_kv_up_proj to heads x (qk_head_dim +
    // v_head_dim); linear_proj from heads x v_head_dim.
    qk_width = g.qk_nope + g.qk_rope;
    v_width = g.v_head;
    const double q_columns = a * qk_width, kv_columns = a * (g.qk_nope + g.v_head);
    if (g.q_rank > 0) {
      cost.weight_product(rows, h, g.q_rank, bias * g.q_rank);
      cost.memory(rows * g.q_rank, rows * g.q_rank, 0, e * nv * g.q_rank);  // q_layernorm
      cost.weight_product(rows, g.q_rank, q_columns, bias * q_columns);
      weights += h * g.q_rank + g.q_rank * q_columns;
      biases += bias * (g.q_rank + q_columns);
      norms += nv * g.q_rank;
      elements += 2 * rows * g.q_rank;  // the down projection's output (the norm's input), the norm's output
    } else {
      cost.weight_product(rows, h, q_columns, bias * q_columns);
      weights += h * q_columns;
      biases += bias * q_columns;
    }
    const double down = g.kv_rank + g.qk_rope;
    cost.weight_product(rows, h, down, bias * down);
    cost.memory(rows * g.kv_rank, rows * g.kv_rank, 0, e * nv * g.kv_rank);  // kv_layernorm
    cost.weight_product(rows, g.kv_rank, kv_columns, bias * kv_columns);
    weights += h * down + g.kv_rank * kv_columns;
    biases += bias * (down + kv_columns);
    norms += nv * g.kv_rank;
    elements += rows * down + rows * g.kv_rank;  // the down projection's output, the norm's output
    // Rotary on the queries' and the shared key's rotary parts; the keys
    // assembled (their own part and the shared rotary part, per head).
    const double rotated = rows * (a * g.qk_rope + g.qk_rope);
    cost.memory(rotated + 2 * s * g.qk_rope, rotated);
    cost.memory(rows * (a * g.qk_nope + g.qk_rope), rows * q_columns);
    elements += rows * (2 * q_columns + a * g.v_head);  // Q, K, V
  }
  const double scores = batch * a * s * s;
  const double before_core = cost.forward;
  double log_sum_exp = 0;
  if (g.flash_attention) {
    const double qk_products = 2 * batch * s * s * a * qk_width, v_products = 2 * batch * s * s * a * v_width;
    cost.flops(qk_products + v_products, 2 * (qk_products + v_products) + qk_products, 0);
    cost.memory(rows * a * (2 * qk_width + v_width), rows * a * v_width, kLogSumExpBytes * batch * a * s);
    log_sum_exp = kLogSumExpBytes * batch * a * s;
  } else {
    cost.activation_product(batch * a, s, qk_width, s);  // Q K^T
    cost.memory(scores, scores);                         // scale, mask, softmax
    cost.memory(scores, scores, scores);                 // dropout (1-byte mask)
    cost.activation_product(batch * a, s, s, v_width);   // attention x V
    elements += 2 * scores;
    masks += scores;
  }
  const double core_flops = cost.forward - before_core;
  const double attention_out = a * v_width;
  cost.weight_product(rows, attention_out, h, bias * h);  // output projection
  weights += attention_out * h;
  biases += bias * h;
  elements += rows * attention_out;
  cost.memory(2 * rows * h, rows * h, rows * h);  // dropout, residual add
  cost.memory(rows * h, rows * h, 0, norm_read);  // norm 2
  elements += rows * h;                           // norm 2's output
  masks += 2 * rows * h;                          // the two residual dropouts' masks
  double expert_weights = 0;
  // An MLP of width `width` on `tokens` rows (a dense MLP, the shared expert).
  const auto mlp = [&](double tokens, double width) {
    const double up = g.swiglu ? 2 * width : width;
    cost.weight_product(tokens, h, up, bias * up);
    cost.memory(tokens * width, tokens * width);
    if (g.swiglu) cost.memory(2 * tokens * width, tokens * width);
    cost.weight_product(tokens, width, h, bias * h);
    weights += h * up + width * h;
    biases += bias * (up + h);
    elements += tokens * up + tokens * width;  // the activation's input and output
  };
  if (!moe) {
    mlp(rows, g.f);
  } else {
    // Megatron-Core MoELayer (core_v0.14.0, transformer/moe/): the router
    // (router.py TopKRouter: a GEMM to E logits, no bias; score and top-k),
    // the token permutation (moe_utils.py permute), the experts as grouped
    // GEMMs (experts.py GroupedMLP / TEGroupedMLP) over the N k routed
    // rows, the unpermutation weighting each expert's output by its
    // probability, and the shared expert (shared_experts.py) on every token.
    const double experts = g.experts, routed = rows * g.topk, fe = g.expert_ffn;
    const double up = g.swiglu ? 2 * fe : fe;
    cost.weight_product(rows, h, experts, 0);             // router logits
    cost.memory(rows * experts, rows * experts + routed);  // score function and top-k (probabilities, indices)
    cost.memory(rows * h, routed * h);                     // permute
    cost.grouped_product(routed, h, up, experts, bias * up);
    cost.memory(routed * fe, routed * fe);
    if (g.swiglu) cost.memory(2 * routed * fe, routed * fe);
    cost.grouped_product(routed, fe, h, experts, bias * h);
    cost.memory(routed * h + routed, rows * h);  // unpermute, weighted by the probabilities
    weights += h * experts;
    expert_weights = experts * (h * up + fe * h + bias * (up + h));
    // Kept: the router's probabilities (N E), the permuted tokens (the
    // first grouped GEMM's input), the activation's input and output, the
    // experts' outputs (for the probabilities' gradient).
    elements += rows * experts + routed * h + routed * up + routed * fe + routed * h;
    if (g.shared_ffn > 0) {
      mlp(rows, g.shared_ffn);
      cost.memory(2 * rows * h, rows * h);  // shared + routed
    }
  }
  cost.memory(2 * rows * h, rows * h, rows * h);  // dropout, residual add
  if (mtp_depth > 0) {
    cost.memory(rows * h, rows * h, 0, norm_read);  // the module's final norm
    elements += rows * h;
  }
  const double output = (mtp_depth > 0 ? 1 + static_cast<double>(mtp_depth) : 1) * rows * h;
  b.add(name, "transformer", cost, output, elements, weights + biases + expert_weights + norms, masks + log_sum_exp);
  Layer& layer = b.layers.back();
  layer.replicated_activation_fraction = (e * 4 * rows * h + 2 * rows * h) / *layer.activation_bytes;
  const double core_stash = g.flash_attention ? log_sum_exp : (2 * e + 1) * scores;
  layer.attention_core_flops_share = core_flops / cost.forward;
  layer.attention_core_stash_share = core_stash / *layer.activation_bytes;
  if (moe) {
    layer.expert_parameter_bytes = e * expert_weights;
    layer.moe_dispatch_bytes = e * rows * g.topk * h * g.imbalance;
  }
}

void build_gpt(Builder& b, const ResolvedModel& m, Profile& profile) {
  const GptShape g(m);
  const double batch = m.micro_batch_size;
  const long long layers = m.options.at("layers");
  const double h = g.h, vocabulary = g.vocabulary;
  const double rows = batch * g.s;
  profile.input_bytes = kIdBytes * rows;
  profile.sequence_length = static_cast<int>(g.s);
  if (g.rotary) embedding(b, "embedding", rows, h, 1, vocabulary * h, rows * h);
  else embedding(b, "embedding", rows, h, 2, vocabulary * h + g.positions * h, rows * h);
  // Megatron-Core (core_v0.14.0) splits the word embedding, the head and the
  // loss over the vocabulary under tensor parallelism (megatron/core/
  // tensor_parallel/layers.py VocabParallelEmbedding and ColumnParallelLinear,
  // cross_entropy.py); the learned position table is a torch.nn.Embedding
  // on every member (models/common/embeddings/language_model_embedding.py),
  // and so is the embedding's output until sequence parallelism splits it.
  Layer& embedding_layer = b.layers.back();
  // What the embedding keeps for its backward is Megatron's: the word
  // lookup needs only the token ids (the stage input) and the position
  // table nothing, so only the embedding dropout's mask stays, 1 byte per
  // element (s b h; Korthikanti et al. 2022, section 4.3, "Input embeddings
  // dropout"; Megatron-LM core_v0.14.0, models/common/embeddings/
  // language_model_embedding.py, embedding_dropout). Its output, the first
  // block's input, is kept by that block's first norm (in its 34 s b h).
  embedding_layer.activation_bytes = rows * h;
  embedding_layer.vocabulary = static_cast<long long>(vocabulary);
  embedding_layer.replicated_parameter_bytes = g.rotary ? 0 : b.e * g.positions * h;
  embedding_layer.replicated_activation_fraction = 1;
  std::vector<std::pair<std::size_t, TransformerShape>> block_shapes;  // blocks whose shape is not the model's
  for (long long l = 1; l <= layers; ++l) {
    const bool moe = g.moe_block(l - 1);
    if (!moe && !g.mla) {
      transformer_block(b, fmt::format("block{}", l), batch, g);
      continue;
    }
    general_block(b, fmt::format("block{}", l), batch, g, moe, 0);
    block_shapes.emplace_back(b.layers.size() - 1, g.block_shape(batch, moe));
  }
  {  // LayerNorm (and RMSNorm, at the same rates): 5 FLOPs per element forward, 8 for the input gradient, 2 for the weights
    Cost cost = b.cost();
    cost.flops(5 * rows * h, 8 * rows * h, 2 * rows * h);
    cost.memory(rows * h, rows * h, 0, b.e * g.norm_vectors() * h);
    b.add("final_norm", "norm", cost, rows * h, rows * h, g.norm_vectors() * h);
  }
  // Multi-token prediction (Megatron-Core core_v0.14.0: the modules run on
  // the last stage after the decoder; each module's block takes the
  // decoder's last layer's spec, MoE or dense).
  const bool mtp_moe = g.moe_block(layers - 1);
  for (long long depth = 1; depth <= g.mtp_layers; ++depth) {
    general_block(b, fmt::format("mtp{}", depth), batch, g, mtp_moe, depth);
    block_shapes.emplace_back(b.layers.size() - 1, g.block_shape(batch, mtp_moe));
  }
  // The head and the loss run over the main model's hidden states and each
  // MTP module's (Megatron concatenates them): 1 + mtp_layers times the rows.
  const double predictions = 1 + static_cast<double>(g.mtp_layers);
  const double head_rows = predictions * rows;
  // Tied: the product with the embedding's word table, whose gradient it
  // adds to; the weights are counted once, in the embedding.
  Cost head = b.cost();
  head.weight_product(head_rows, h, vocabulary, 0);
  b.add("head", "linear", head, head_rows * vocabulary, head_rows * vocabulary, g.tied_embeddings ? 0 : h * vocabulary);
  b.layers.back().vocabulary = static_cast<long long>(vocabulary);
  b.loss(head_rows, vocabulary);
  b.layers.back().vocabulary = static_cast<long long>(vocabulary);
  for (Layer& layer : b.layers) layer.transformer_shape = g.layer_shape(batch);
  for (const auto& [index, shape] : block_shapes) b.layers[index].transformer_shape = shape;
  if (g.mtp_layers > 0)  // the head and the loss time 1 + mtp_layers sequences per sample
    for (std::size_t l = b.layers.size() - 2; l < b.layers.size(); ++l)
      b.layers[l].transformer_shape->batch = batch * predictions;
}

}  // namespace

const std::vector<ModelInfo>& model_generators() { return registry(); }

const ModelInfo& model_generator(const std::string& name) {
  for (const ModelInfo& info : registry())
    if (info.name == name) return info;
  std::string names;
  for (const ModelInfo& info : registry()) names += (names.empty() ? "" : ", ") + info.name;
  throw InputError(fmt::format("model: expected one of {}, found '{}'", names, printable(name)));
}

const std::vector<std::string>& model_option_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const ModelInfo& info : registry())
      for (const ModelOptionInfo& option : info.options)
        if (std::find(all.begin(), all.end(), option.name) == all.end()) all.push_back(option.name);
    return all;
  }();
  return names;
}

const std::vector<std::string>& model_dtypes() {
  static const std::vector<std::string> dtypes = {"fp32", "fp16", "bf16"};
  return dtypes;
}

double dtype_bytes(const std::string& dtype) {
  if (dtype == "fp32" || dtype.empty()) return 4;
  if (dtype == "fp16" || dtype == "bf16") return 2;
  throw InputError(fmt::format("--dtype: expected fp32, fp16 or bf16, found '{}'", printable(dtype)));
}

namespace {

/// The first option named `name` of any model (options of one name share
/// their range; tests/test_model_generators.cpp checks it).
const ModelOptionInfo& option_named(const std::string& name) {
  for (const ModelInfo& info : registry())
    for (const ModelOptionInfo& option : info.options)
      if (option.name == name) return option;
  throw InputError(fmt::format("{}: no model has such an option", flag_of(name)));
}

/// Megatron-LM's feed-forward width for SwiGLU when --ffn-hidden-size is not
/// given: int((4 * hidden * 2 / 3) / 64) * 64 (megatron/training/arguments.py,
/// validate_args, release core_v0.14.0), in the same double arithmetic.
long long swiglu_default_ffn(long long hidden) {
  return static_cast<long long>(4.0 * static_cast<double>(hidden) * 2 / 3 / 64) * 64;
}

/// The value `option` of model `info` takes when not given, from the other
/// options in `o` (the non-derived ones filled in).
long long default_of(const ModelInfo& info, const ModelOptionInfo& option, const std::map<std::string, long long>& o) {
  if (option.default_value) return *option.default_value;
  if (info.name == "vgg16" && option.name == "hidden") return std::max<long long>(1, 4096 * o.at("width") / 64);
  if (info.name == "gpt" && option.name == "ffn")
    return o.at("swiglu") == 1 ? swiglu_default_ffn(o.at("hidden")) : 4 * o.at("hidden");
  if (info.name == "gpt" && option.name == "query_groups") return o.at("heads");
  if (info.name == "gpt" && option.name == "positions") return o.at("rotary") == 1 ? 0 : o.at("sequence");
  if (info.name == "gpt" && option.name == "moe_ffn") return o.at("ffn");
  throw std::logic_error("model " + info.name + ": option " + option.name + " has no default");
}

}  // namespace

long long model_option_min(const std::string& name) {
  return name == "micro_batch_size" ? 1 : option_named(name).min_value;
}

long long model_option_max(const std::string& name) {
  return name == "micro_batch_size" ? kMaxMicroBatchSize : option_named(name).max_value;
}

ResolvedModel resolve_model_spec(const ModelSpec& spec) {
  const ModelInfo& info = model_generator(spec.name);
  ResolvedModel model;
  model.name = info.name;
  for (const auto& entry : spec.options) {
    // Named copies, not a structured binding: clang 14 cannot capture one in a lambda.
    const std::string& name = entry.first;
    const long long value = entry.second;
    const auto known = std::find_if(info.options.begin(), info.options.end(),
                                    [&](const ModelOptionInfo& option) { return option.name == name; });
    if (known == info.options.end())
      throw InputError(fmt::format("{}: model {} has no such option; its options are {}, --micro-batch-size and --dtype",
                                   flag_of(name), info.name, option_list(info)));
    if (value < known->min_value || value > known->max_value)
      throw InputError(fmt::format("{}: expected an integer from {} to {}, found {}", flag_of(name), known->min_value,
                                   known->max_value, value));
  }
  for (const bool derived : {false, true})
    for (const ModelOptionInfo& option : info.options) {
      if (option.default_value.has_value() == derived) continue;
      const auto given = spec.options.find(option.name);
      model.options[option.name] = given != spec.options.end() ? given->second : default_of(info, option, model.options);
    }
  const long long size = spec.micro_batch_size.value_or(info.default_micro_batch_size);
  if (size < 1 || size > model_option_max("micro_batch_size"))
    throw InputError(fmt::format("--micro-batch-size: expected an integer from 1 to {}, found {}",
                                 model_option_max("micro_batch_size"), size));
  model.micro_batch_size = static_cast<int>(size);
  model.dtype = spec.dtype.empty() ? "fp32" : spec.dtype;
  dtype_bytes(model.dtype);
  auto& o = model.options;
  if (info.name == "gnmt" && (o["layers"] < 4 || o["layers"] % 2 != 0))
    throw InputError(fmt::format("--layers: gnmt stacks L/2 encoder and L/2 decoder LSTM layers; expected an even L >= 4, "
                                 "found {}",
                                 o["layers"]));
  if (info.name == "gpt") {
    if (o["hidden"] % o["heads"] != 0)
      throw InputError(fmt::format("--hidden: expected a multiple of --heads ({}), found {}", o["heads"], o["hidden"]));
    if (o["heads"] % o["query_groups"] != 0)
      throw InputError(fmt::format("--query-groups: expected a divisor of --heads ({}), found {}", o["heads"],
                                   o["query_groups"]));
    if (o["ffn"] < 1)
      throw InputError(fmt::format("--ffn: with --swiglu 1 the default int(8 x hidden / 3 / 64) x 64 is {} at --hidden "
                                   "{}; give --ffn",
                                   o["ffn"], o["hidden"]));
    if (o["rotary"] == 1 && spec.options.count("positions"))
      throw InputError(fmt::format("--positions: rotary position embedding (--rotary 1) has no position table; expected "
                                   "no --positions, found {}",
                                   o["positions"]));
    if (o["num_experts"] > 0 && o["moe_topk"] > o["num_experts"])
      throw InputError(fmt::format("--moe-topk: expected at most --num-experts ({}) experts per token, found {}",
                                   o["num_experts"], o["moe_topk"]));
    if (o["mla"] == 1 && o["query_groups"] != o["heads"])
      throw InputError(fmt::format("--query-groups: multi-head latent attention (--mla 1) has a key and a value per "
                                   "head; expected no --query-groups, found {}",
                                   o["query_groups"]));
    if (o["rotary"] == 0 && o["positions"] < o["sequence"])
      throw InputError(fmt::format("--positions: expected at least --sequence ({}) rows, found {}", o["sequence"],
                                   o["positions"]));
  }
  if ((info.name == "vgg16" || info.name == "resnet50") && o["image"] % 32 != 0)
    throw InputError(fmt::format("--image: {} halves the image 5 times; expected a multiple of 32, found {}", info.name,
                                 o["image"]));
  return model;
}

std::string model_spec_text(const ResolvedModel& model) {
  const ModelInfo& info = model_generator(model.name);
  std::string text = model.name;
  for (const ModelOptionInfo& option : info.options) {
    const long long value = model.options.at(option.name);
    if (option.named_at_default || value != default_of(info, option, model.options))
      text += fmt::format(" {}={}", option.name, value);
  }
  return text + fmt::format(" micro_batch_size={} dtype={}", model.micro_batch_size, model.dtype);
}

Profile generate_model_profile(const ModelSpec& spec) {
  const ResolvedModel model = resolve_model_spec(spec);
  Profile profile;
  profile.name = model_spec_text(model);
  profile.micro_batch_size = model.micro_batch_size;
  profile.dtype = model.dtype;
  Builder builder(dtype_bytes(model.dtype));
  if (model.name == "mlp") build_mlp(builder, model, profile);
  else if (model.name == "vgg16") build_vgg16(builder, model, profile);
  else if (model.name == "resnet50") build_resnet50(builder, model, profile);
  else if (model.name == "gnmt") build_gnmt(builder, model, profile);
  else build_gpt(builder, model, profile);
  profile.layers = std::move(builder.layers);
  check_profile(profile, fmt::format("model {}", profile.name));
  return profile;
}

double profile_parameter_count(const Profile& profile) {
  double bytes = 0;
  for (const Layer& layer : profile.layers) bytes += layer.parameter_bytes;
  return bytes / dtype_bytes(profile.dtype);
}

double profile_total_flops(const Profile& profile) {
  double total = 0;
  for (const Layer& layer : profile.layers)
    total += layer.forward_flops.value_or(0) + layer.backward_input_flops.value_or(0) +
             layer.backward_weight_flops.value_or(0);
  return total;
}

}  // namespace pipegrid
