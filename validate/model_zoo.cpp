// The model zoo: layer definitions (LibTorch), data and loss, option checks.

#include "validate/model_zoo.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <random>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/platform_check.hpp"
#include "validate/detail/model.hpp"

namespace pipegrid::validate {
namespace {

struct OptionSpec {
  const char* key;
  int default_value;
};

// Options of every model with their defaults, in help order (0: a default
// that depends on another option, filled in by resolve_model: vgg16's
// hidden is 4096 x width / 64, gpt's ffn is 4 x hidden).
const std::map<std::string, std::vector<OptionSpec>>& option_specs() {
  static const std::map<std::string, std::vector<OptionSpec>> specs = {
      {"mlp", {{"layers", 8}, {"hidden", 256}, {"classes", 10}}},
      {"vgg16", {{"width", 64}, {"image", 224}, {"hidden", 0}, {"classes", 1000}}},
      {"gnmt", {{"layers", 4}, {"hidden", 256}, {"vocabulary", 1024}, {"sequence", 16}}},
      {"gpt", {{"layers", 4}, {"hidden", 256}, {"heads", 4}, {"ffn", 0}, {"sequence", 32}, {"vocabulary", 1024}}},
  };
  return specs;
}

// Old names (before the generators' vocabulary): model -> new model, and
// (model, option) -> new option. Each is an error that names the new one.
const std::map<std::string, std::string>& renamed_models() {
  static const std::map<std::string, std::string> renamed = {{"transformer", "gpt"}};
  return renamed;
}

const std::map<std::pair<std::string, std::string>, std::string>& renamed_options() {
  static const std::map<std::pair<std::string, std::string>, std::string> renamed = {
      {{"mlp", "width"}, "hidden"},     {{"mlp", "depth"}, "layers"},      {{"gnmt", "vocab"}, "vocabulary"},
      {{"gnmt", "seq"}, "sequence"},    {{"gpt", "vocab"}, "vocabulary"},  {{"gpt", "width"}, "hidden"},
      {{"gpt", "seq"}, "sequence"},
  };
  return renamed;
}

// VGG-16's feature extractor: output channels of each 3x3 conv at width 64,
// 0 for a 2x2 max-pool.
constexpr int kVggFeatures[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};

/** `key` (as a spec writes it) or `--key` (as a flag). */
std::string option_name(const std::string& key, OptionSpelling spelling) {
  return spelling == OptionSpelling::Flag ? "--" + key : "'" + key + "'";
}

/** `--key value` or `key=value`: the option as given, to quote in an error. */
std::string option_given(const std::string& key, int value, OptionSpelling spelling) {
  return spelling == OptionSpelling::Flag ? fmt::format("--{} {}", key, value) : fmt::format("{}={}", key, value);
}

/** Parses `key=value` (value a positive integer) into `config.options`. */
void add_spec_option(ModelConfig& config, const std::string& text) {
  const auto equals = text.find('=');
  int value = 0;
  bool ok = equals != std::string::npos && equals > 0;
  if (ok) {
    const char* first = text.data() + equals + 1;
    const char* last = text.data() + text.size();
    auto [end, error] = std::from_chars(first, last, value);
    ok = first != last && error == std::errc() && end == last && value > 0;
  }
  if (!ok) throw InputError(fmt::format("'{}': expected key=value with a positive integer value, e.g. hidden=256", printable(text)));
  config.options[text.substr(0, equals)] = value;
}

}  // namespace

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {"mlp", "vgg16", "gnmt", "gpt"};
  return names;
}

const std::vector<std::string>& option_names() {
  static const std::vector<std::string> names = {"layers",  "hidden",  "heads", "ffn",  "sequence",
                                                 "vocabulary", "classes", "image", "width"};
  return names;
}

std::string current_option_name(const std::string& model, const std::string& key) {
  const auto renamed_model = renamed_models().find(model);
  const auto renamed = renamed_options().find({renamed_model != renamed_models().end() ? renamed_model->second : model, key});
  return renamed != renamed_options().end() ? renamed->second : key;
}

ModelConfig resolve_model(const ModelConfig& config, OptionSpelling spelling) {
  const bool flags = spelling == OptionSpelling::Flag;
  const std::string model_prefix = flags ? "--model: " : "";
  const auto spec = option_specs().find(config.name);
  if (spec == option_specs().end()) {
    if (const auto renamed = renamed_models().find(config.name); renamed != renamed_models().end())
      throw InputError(fmt::format("{}unknown model '{}'; did you mean '{}'?", model_prefix, config.name, renamed->second));
    throw InputError(fmt::format("{}unknown model '{}'; expected one of: {}", model_prefix, printable(config.name),
                                 fmt::join(model_names(), ", ")));
  }
  std::vector<std::string> keys;
  for (const OptionSpec& option : spec->second) keys.push_back(option_name(option.key, spelling));
  ModelConfig resolved{config.name, {}};
  for (const auto& [key, value] : config.options) {
    bool known = false;
    for (const OptionSpec& option : spec->second) known = known || key == option.key;
    if (!known) {
      const std::string prefix = flags ? "--" + key + ": " : "";
      if (const auto renamed = renamed_options().find({config.name, key}); renamed != renamed_options().end())
        throw InputError(fmt::format("{}{} has no option '{}'; did you mean {}?", prefix, config.name, key,
                                     option_name(renamed->second, spelling)));
      throw InputError(fmt::format("{}{} has no option '{}'; expected one of: {}", prefix, config.name, printable(key), fmt::join(keys, ", ")));
    }
    if (value < 1) throw InputError(fmt::format("{}: expected a positive integer", option_given(key, value, spelling)));
  }
  for (const OptionSpec& option : spec->second) {
    const auto given = config.options.find(option.key);
    resolved.options[option.key] = given != config.options.end() ? given->second : option.default_value;
  }
  auto& o = resolved.options;
  if (config.name == "vgg16") {
    if (o["image"] % 32 != 0)
      throw InputError(fmt::format("{}: vgg16 halves the image 5 times; expected a multiple of 32", option_given("image", o["image"], spelling)));
    if (o["hidden"] == 0) o["hidden"] = std::max(1, 4096 * o["width"] / 64);
  }
  if (config.name == "gpt") {
    if (o["hidden"] % o["heads"] != 0)
      throw InputError(fmt::format("{}: expected a multiple of heads ({})", option_given("hidden", o["hidden"], spelling), o["heads"]));
    if (o["ffn"] == 0) o["ffn"] = 4 * o["hidden"];
  }
  return resolved;
}

std::string model_to_spec(const ModelConfig& config) {
  std::string text = config.name;
  for (const auto& [key, value] : config.options) text += fmt::format(" {}={}", key, value);
  return text;
}

ModelConfig model_from_spec(const std::string& text, const std::string& origin) {
  std::vector<std::string> words;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find(' ', start), text.size());
    if (end > start) words.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (words.empty()) throw InputError(fmt::format("{}: model: expected \"NAME key=value ...\", found an empty text", origin));
  ModelConfig config{words.front(), {}};
  try {
    for (std::size_t w = 1; w < words.size(); ++w) add_spec_option(config, words[w]);
    return resolve_model(config, OptionSpelling::Spec);
  } catch (const InputError& error) {
    throw InputError(fmt::format("{}: model '{}': {}", origin, printable(text), error.what()));
  }
}

int num_layers(const ModelConfig& config) {
  const ModelConfig model = resolve_model(config);
  const auto& o = model.options;
  if (model.name == "mlp") return o.at("layers");
  if (model.name == "vgg16") return static_cast<int>(std::size(kVggFeatures)) + 3;
  return o.at("layers") + 2;  // gnmt and gpt: embedding, blocks, head
}

LayerRanges uniform_ranges(int layers, int num_stages) {
  if (num_stages < 1) throw InputError(fmt::format("--stages: expected at least 1, found {}", num_stages));
  if (layers < num_stages)
    throw InputError(fmt::format("--stages {}: the model has only {} layers; expected at most one stage per layer", num_stages, layers));
  LayerRanges ranges;
  int first = 0;
  for (int stage = 0; stage < num_stages; ++stage) {
    const int count = layers / num_stages + (stage < layers % num_stages ? 1 : 0);
    ranges.emplace_back(first, first + count);
    first += count;
  }
  return ranges;
}

LayerRanges ranges_from_counts(const std::vector<int>& counts, int layers) {
  LayerRanges ranges;
  int first = 0;
  for (int count : counts) {
    if (count < 1) throw InputError(fmt::format("--layers-per-stage: expected at least 1 layer per stage, found {}", count));
    ranges.emplace_back(first, first + count);
    first += count;
  }
  if (first != layers)
    throw InputError(fmt::format("--layers-per-stage: the counts add up to {} layers; the model has {}", first, layers));
  return ranges;
}

namespace detail {
namespace {

thread_local WeightTape* active_tape = nullptr;

/** `output` of `module`, recorded on the thread's WeightTape when one is active. */
template <typename Module>
torch::Tensor taped(const Module& module, torch::Tensor output) {
  if (active_tape && output.requires_grad()) active_tape->uses.push_back({output, module->parameters()});
  return output;
}

namespace nn = torch::nn;

class LinearLayer : public Layer {
 public:
  LinearLayer(int in, int out, bool relu) : linear_(register_module("linear", nn::Linear(in, out))), relu_(relu) {}
  torch::Tensor forward(torch::Tensor input) override {
    // Flattens image features before a classifier.
    if (input.dim() > 2) input = input.flatten(1);
    auto output = taped(linear_, linear_->forward(input));
    return relu_ ? torch::relu(output) : output;
  }

 private:
  nn::Linear linear_;
  bool relu_;
};

class ConvLayer : public Layer {
 public:
  ConvLayer(int in, int out) : conv_(register_module("conv", nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1)))) {}
  torch::Tensor forward(torch::Tensor input) override { return torch::relu(taped(conv_, conv_->forward(input))); }

 private:
  nn::Conv2d conv_;
};

class MaxPoolLayer : public Layer {
 public:
  torch::Tensor forward(torch::Tensor input) override { return torch::max_pool2d(input, {2, 2}); }
};

class EmbeddingLayer : public Layer {
 public:
  /** Token embedding, plus a learned position embedding when `positions` > 0. */
  EmbeddingLayer(int vocab, int width, int positions) : tokens_(register_module("tokens", nn::Embedding(vocab, width))) {
    if (positions > 0) positions_ = register_module("positions", nn::Embedding(positions, width));
  }
  torch::Tensor forward(torch::Tensor input) override {
    auto output = taped(tokens_, tokens_->forward(input));
    if (positions_) output = output + taped(positions_, positions_->forward(torch::arange(input.size(1), input.options())));
    return output;
  }

 private:
  nn::Embedding tokens_;
  nn::Embedding positions_{nullptr};
};

class LstmLayer : public Layer {
 public:
  explicit LstmLayer(int hidden) : lstm_(register_module("lstm", nn::LSTM(nn::LSTMOptions(hidden, hidden).batch_first(true)))) {}
  torch::Tensor forward(torch::Tensor input) override { return taped(lstm_, std::get<0>(lstm_->forward(input))); }

 private:
  nn::LSTM lstm_;
};

/** A pre-norm GPT decoder block: x + attention(ln(x)), then x + mlp(ln(x)),
 *  the mlp width -> ffn -> width. */
class DecoderBlock : public Layer {
 public:
  DecoderBlock(int width, int heads, int ffn)
      : heads_(heads),
        norm1_(register_module("norm1", nn::LayerNorm(nn::LayerNormOptions({width})))),
        qkv_(register_module("qkv", nn::Linear(width, 3 * width))),
        projection_(register_module("projection", nn::Linear(width, width))),
        norm2_(register_module("norm2", nn::LayerNorm(nn::LayerNormOptions({width})))),
        up_(register_module("up", nn::Linear(width, ffn))),
        down_(register_module("down", nn::Linear(ffn, width))) {}

  torch::Tensor forward(torch::Tensor x) override {
    const int64_t batch = x.size(0), length = x.size(1), width = x.size(2), head_width = width / heads_;
    auto qkv = taped(qkv_, qkv_->forward(taped(norm1_, norm1_->forward(x)))).view({batch, length, 3, heads_, head_width}).permute({2, 0, 3, 1, 4});
    auto q = qkv[0], k = qkv[1], v = qkv[2];  // batch x heads x length x head_width
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_width));
    auto future = torch::ones({length, length}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
    auto attention = torch::softmax(scores.masked_fill(future, -std::numeric_limits<float>::infinity()), -1);
    auto mixed = torch::matmul(attention, v).transpose(1, 2).reshape({batch, length, width});
    x = x + taped(projection_, projection_->forward(mixed));
    auto hidden = taped(up_, up_->forward(taped(norm2_, norm2_->forward(x))));
    return x + taped(down_, down_->forward(torch::gelu(hidden)));
  }

 private:
  int64_t heads_;
  nn::LayerNorm norm1_;
  nn::Linear qkv_, projection_;
  nn::LayerNorm norm2_;
  nn::Linear up_, down_;
};

class HeadLayer : public Layer {
 public:
  HeadLayer(int width, int vocab, bool norm) : linear_(register_module("linear", nn::Linear(width, vocab))) {
    if (norm) norm_ = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({width})));
  }
  torch::Tensor forward(torch::Tensor input) override {
    return taped(linear_, linear_->forward(norm_ ? taped(norm_, norm_->forward(input)) : input));
  }

 private:
  nn::Linear linear_;
  nn::LayerNorm norm_{nullptr};
};

std::uint64_t mix(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  // splitmix64 over the three values: independent streams per micro-batch.
  std::uint64_t x = seed;
  for (std::uint64_t v : {a, b}) {
    x ^= v + 0x9e3779b97f4a7c15ULL + (x << 6) + (x >> 2);
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
  }
  return x;
}

torch::Tensor random_floats(std::mt19937_64& random, std::vector<int64_t> shape) {
  int64_t count = 1;
  for (int64_t n : shape) count *= n;
  std::vector<float> values(count);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& value : values) value = normal(random);
  return torch::from_blob(values.data(), shape, torch::kFloat32).clone();
}

torch::Tensor random_ids(std::mt19937_64& random, std::vector<int64_t> shape, int limit) {
  int64_t count = 1;
  for (int64_t n : shape) count *= n;
  std::vector<int64_t> values(count);
  std::uniform_int_distribution<int64_t> uniform(0, limit - 1);
  for (int64_t& value : values) value = uniform(random);
  return torch::from_blob(values.data(), shape, torch::kInt64).clone();
}

}  // namespace

LayerList build_layers(const ModelConfig& config, std::uint64_t seed) {
  const ModelConfig model = resolve_model(config);
  const auto& o = model.options;
  torch::manual_seed(seed);
  LayerList layers;
  if (model.name == "mlp") {
    const int hidden = o.at("hidden"), depth = o.at("layers");
    for (int i = 0; i + 1 < depth; ++i) layers.push_back(std::make_shared<LinearLayer>(hidden, hidden, true));
    layers.push_back(std::make_shared<LinearLayer>(hidden, o.at("classes"), false));
  } else if (model.name == "vgg16") {
    const int width = o.at("width"), hidden = o.at("hidden");
    int channels = 3;
    for (int features : kVggFeatures) {
      if (features == 0) {
        layers.push_back(std::make_shared<MaxPoolLayer>());
      } else {
        const int out = std::max(1, features * width / 64);
        layers.push_back(std::make_shared<ConvLayer>(channels, out));
        channels = out;
      }
    }
    const int side = o.at("image") / 32;
    layers.push_back(std::make_shared<LinearLayer>(channels * side * side, hidden, true));
    layers.push_back(std::make_shared<LinearLayer>(hidden, hidden, true));
    layers.push_back(std::make_shared<LinearLayer>(hidden, o.at("classes"), false));
  } else if (model.name == "gnmt") {
    const int hidden = o.at("hidden"), vocab = o.at("vocabulary");
    layers.push_back(std::make_shared<EmbeddingLayer>(vocab, hidden, 0));
    for (int i = 0; i < o.at("layers"); ++i) layers.push_back(std::make_shared<LstmLayer>(hidden));
    layers.push_back(std::make_shared<HeadLayer>(hidden, vocab, false));
  } else {
    const int width = o.at("hidden"), vocab = o.at("vocabulary");
    layers.push_back(std::make_shared<EmbeddingLayer>(vocab, width, o.at("sequence")));
    for (int i = 0; i < o.at("layers"); ++i) layers.push_back(std::make_shared<DecoderBlock>(width, o.at("heads"), o.at("ffn")));
    layers.push_back(std::make_shared<HeadLayer>(width, vocab, true));
  }
  return layers;
}

WeightTape::WeightTape() {
  if (active_tape) throw std::logic_error("WeightTape: one is already active on this thread");
  active_tape = this;
}

WeightTape::~WeightTape() { active_tape = nullptr; }

torch::Tensor run_layers(const LayerList& layers, int first, int last, torch::Tensor input) {
  for (int i = first; i < last; ++i) input = layers[i]->forward(input);
  return input;
}

std::vector<torch::Tensor> parameters_of(const LayerList& layers, int first, int last) {
  std::vector<torch::Tensor> parameters;
  for (int i = first; i < last; ++i)
    for (const torch::Tensor& parameter : layers[i]->parameters()) parameters.push_back(parameter);
  return parameters;
}

Batch make_batch(const ModelConfig& config, std::uint64_t seed, int mini_batch, int micro_batch, int size) {
  const ModelConfig model = resolve_model(config);
  const auto& o = model.options;
  std::mt19937_64 random(mix(seed, static_cast<std::uint64_t>(mini_batch), static_cast<std::uint64_t>(micro_batch)));
  Batch batch;
  if (model.name == "mlp") {
    batch.input = random_floats(random, {size, o.at("hidden")});
    batch.target = random_ids(random, {size}, o.at("classes"));
  } else if (model.name == "vgg16") {
    batch.input = random_floats(random, {size, 3, o.at("image"), o.at("image")});
    batch.target = random_ids(random, {size}, o.at("classes"));
  } else {
    batch.input = random_ids(random, {size, o.at("sequence")}, o.at("vocabulary"));
    batch.target = random_ids(random, {size, o.at("sequence")}, o.at("vocabulary"));
  }
  return batch;
}

torch::Tensor loss_of(const ModelConfig& config, const torch::Tensor& output, const torch::Tensor& target) {
  (void)config;
  // Sequence models: one class per position.
  return torch::nn::functional::cross_entropy(output.reshape({-1, output.size(-1)}), target.reshape({-1}));
}

}  // namespace detail
}  // namespace pipegrid::validate
