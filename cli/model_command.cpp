#include "cli/model_command.hpp"

#include <charconv>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/platform_check.hpp"
#include "core/profile.hpp"

namespace pipegrid::cli {
namespace {

struct ModelCommandOptions {
  ModelSpec spec;
  std::string output;
  bool json = false, list = false;
};

ModelCommandOptions options;

std::string flag_of(std::string name) {
  for (char& c : name)
    if (c == '_') c = '-';
  return "--" + name;
}

/// A number as JSON: an integer when it is one (counts stay integers).
nlohmann::ordered_json json_number(double value) {
  if (std::trunc(value) == value && std::fabs(value) < 9007199254740992.0) return static_cast<long long>(value);
  return value;
}

/// 1234567 -> "1,234,567" (a non-negative integer value).
std::string grouped(double value) {
  std::string digits = fmt::format("{:.0f}", value);
  for (int at = static_cast<int>(digits.size()) - 3; at > 0; at -= 3) digits.insert(static_cast<std::size_t>(at), ",");
  return digits;
}

// `model --list --json`: one array, a model per entry, its options as the
// text list gives them (default null: derived from the others).
int list_models_json() {
  nlohmann::ordered_json models = nlohmann::ordered_json::array();
  for (const ModelInfo& info : model_generators()) {
    nlohmann::ordered_json entry;
    entry["model"] = info.name;
    entry["description"] = info.description;
    nlohmann::ordered_json flags = nlohmann::ordered_json::array();
    for (const ModelOptionInfo& option : info.options)
      flags.push_back({{"option", flag_of(option.name)},
                       {"default", option.default_value ? nlohmann::ordered_json(*option.default_value) : nlohmann::ordered_json()},
                       {"description", option.description}});
    flags.push_back({{"option", "--micro-batch-size"}, {"default", info.default_micro_batch_size}, {"description", "samples per micro-batch"}});
    flags.push_back({{"option", "--dtype"}, {"default", "fp32"}, {"description", "fp32, fp16 or bf16 (parameters and activations)"}});
    entry["options"] = flags;
    models.push_back(entry);
  }
  std::cout << models.dump(2) << "\n";
  return 0;
}

int list_models() {
  for (const ModelInfo& info : model_generators()) {
    std::cout << fmt::format("{}: {}\n", info.name, info.description);
    for (const ModelOptionInfo& option : info.options)
      std::cout << fmt::format("  {:<20} {:>7}  {}\n", flag_of(option.name),
                               option.default_value ? std::to_string(*option.default_value) : "derived",
                               option.description);
    std::cout << fmt::format("  {:<20} {:>7}  {}\n", "--micro-batch-size", info.default_micro_batch_size,
                             "samples per micro-batch");
    std::cout << fmt::format("  {:<20} {:>7}  {}\n", "--dtype", "fp32", "fp32, fp16 or bf16 (parameters and activations)");
  }
  return 0;
}

// The value of model option `name` typed as `text`: a decimal integer.
// Otherwise (a fraction, an exponent, an integer beyond 64 bits) InputError
// naming the flag and its range, quoting the text as typed. The range itself
// is checked by resolve_model_spec.
long long model_option_value(const std::string& name, const std::string& text) {
  long long value = 0;
  const char* end = text.data() + text.size();
  const char* digits = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
  const auto [stop, status] = std::from_chars(digits, end, value);
  if (status != std::errc() || stop != end || digits == end)
    throw InputError(fmt::format("{}: expected an integer from {} to {}, found '{}'", flag_of(name), model_option_min(name),
                                 model_option_max(name), printable(text)));
  return value;
}

}  // namespace

void add_model_options(CLI::App& command, ModelSpec& spec, bool with_micro_batch_size) {
  for (const std::string& name : model_option_names()) {
    std::string help;
    for (const ModelInfo& info : model_generators())
      for (const ModelOptionInfo& option : info.options)
        if (option.name == name) help += fmt::format("{}{}: {}", help.empty() ? "" : "; ", info.name, option.description);
    command
        .add_option_function<std::string>(
            flag_of(name), [&spec, name](const std::string& text) { spec.options[name] = model_option_value(name, text); },
            "model option: " + help)
        ->type_name("INT");
  }
  if (with_micro_batch_size)
    command
        .add_option_function<std::string>(
            "--micro-batch-size",
            [&spec](const std::string& text) { spec.micro_batch_size = model_option_value("micro_batch_size", text); },
            "samples per micro-batch (default: the model's, see --list)")
        ->type_name("INT");
  if (command.get_option_no_throw("--dtype") == nullptr)
    command.add_option("--dtype", spec.dtype, "fp32 (default), fp16 or bf16: bytes of the parameters and activations");
}

CLI::App* add_model_command(CLI::App& app) {
  options = {};
  auto* command = app.add_subcommand("model", "a model's profile from its architecture: layers, parameters, FLOPs, bytes");
  command->add_option("model", options.spec.name, "mlp, vgg16, resnet50, gnmt or gpt (see --list)");
  add_model_options(*command, options.spec);
  command->add_option("--output", options.output, "write the profile (JSON) to this file");
  command->add_flag("--json", options.json, "print one JSON object instead of the table");
  command->add_flag("--list", options.list, "list the models, their options and defaults");
  return command;
}

int run_model_command() {
  if (options.list) {
    if (!options.spec.name.empty() || !options.spec.options.empty() || options.spec.micro_batch_size ||
        !options.spec.dtype.empty() || !options.output.empty())
      throw InputError("--list: lists every model with its options and defaults; give no model, option or --output with it");
    return options.json ? list_models_json() : list_models();
  }
  if (options.spec.name.empty()) {
    std::string names;
    for (const ModelInfo& info : model_generators()) names += (names.empty() ? "" : ", ") + info.name;
    throw InputError(fmt::format("model: expected a model name ({}), or --list", names));
  }
  const ResolvedModel model = resolve_model_spec(options.spec);
  const Profile profile = generate_model_profile(options.spec);
  if (!options.output.empty()) write_file_atomically(options.output, profile_to_json(profile));

  const double parameters = profile_parameter_count(profile);
  double parameter_bytes = 0, forward = 0, backward = 0, activation = 0;
  for (const Layer& layer : profile.layers) {
    parameter_bytes += layer.parameter_bytes;
    forward += layer.forward_flops.value_or(0);
    backward += layer.backward_input_flops.value_or(0) + layer.backward_weight_flops.value_or(0);
    activation += layer.stashed_bytes();
  }
  const double element_bytes = dtype_bytes(profile.dtype);
  if (options.json) {
    nlohmann::ordered_json document;
    document["model"] = model.name;
    nlohmann::ordered_json values;
    for (const ModelOptionInfo& option : model_generator(model.name).options) values[option.name] = model.options.at(option.name);
    values["micro_batch_size"] = model.micro_batch_size;
    values["dtype"] = model.dtype;
    document["options"] = values;
    document["parameters"] = json_number(parameters);
    document["parameter_bytes"] = json_number(parameter_bytes);
    document["total_flops"] = json_number(forward + backward);
    document["forward_flops"] = json_number(forward);
    document["backward_flops"] = json_number(backward);
    document["activation_bytes"] = json_number(activation);
    document["input_bytes"] = json_number(profile.input_bytes);
    if (!options.output.empty()) document["output"] = options.output;
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const Layer& layer : profile.layers) {
      nlohmann::ordered_json entry;
      entry["name"] = layer.name;
      entry["op"] = layer.op;
      entry["parameters"] = json_number(layer.parameter_bytes / element_bytes);
      entry["forward_flops"] = json_number(layer.forward_flops.value_or(0));
      entry["backward_input_flops"] = json_number(layer.backward_input_flops.value_or(0));
      entry["backward_weight_flops"] = json_number(layer.backward_weight_flops.value_or(0));
      entry["bytes_read"] = json_number(layer.bytes_read.value_or(0));
      entry["bytes_written"] = json_number(layer.bytes_written.value_or(0));
      entry["output_bytes"] = json_number(layer.output_bytes);
      entry["activation_bytes"] = json_number(layer.stashed_bytes());
      entry["parameter_bytes"] = json_number(layer.parameter_bytes);
      layers.push_back(entry);
    }
    document["layers"] = layers;
    std::cout << document.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{}\n", profile.name);
  std::size_t width = 5;
  for (const Layer& layer : profile.layers) width = std::max(width, layer.name.size());
  std::cout << fmt::format("{:>4}  {:<{}}  {:<11} {:>15} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "#", "layer", width, "op",
                           "parameters", "fwd FLOPs", "bwd FLOPs", "read", "output", "activation");
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& layer = profile.layers[l];
    std::cout << fmt::format("{:>4}  {:<{}}  {:<11} {:>15} {:>12.4g} {:>12.4g} {:>12} {:>12} {:>12}\n", l, layer.name, width,
                             layer.op, grouped(layer.parameter_bytes / element_bytes), layer.forward_flops.value_or(0),
                             layer.backward_input_flops.value_or(0) + layer.backward_weight_flops.value_or(0),
                             human_bytes(layer.bytes_read.value_or(0)), human_bytes(layer.output_bytes),
                             human_bytes(layer.stashed_bytes()));
  }
  std::cout << fmt::format("layers       {}\n", profile.layers.size());
  std::cout << fmt::format("parameters   {} ({} bytes in {})\n", grouped(parameters), grouped(parameter_bytes), profile.dtype);
  std::cout << fmt::format("FLOPs        {:.6g} per micro-batch of {} (forward {:.6g}, backward {:.6g})\n",
                           forward + backward, profile.micro_batch_size, forward, backward);
  // Mixture of experts: the routed experts' share and what one token activates.
  double expert_bytes = 0, activated_bytes = 0;
  std::size_t moe_blocks = 0, blocks = 0;
  for (const Layer& layer : profile.layers) {
    if (layer.op == "transformer") ++blocks;
    double inactive = 0;
    if (layer.expert_parameter_bytes > 0 && layer.transformer_shape && layer.transformer_shape->moe()) {
      ++moe_blocks;
      expert_bytes += layer.expert_parameter_bytes;
      const TransformerShape& shape = *layer.transformer_shape;
      inactive = layer.expert_parameter_bytes * (1 - shape.topk / shape.experts);
    }
    activated_bytes += layer.parameter_bytes - inactive;
  }
  if (moe_blocks > 0) {
    const double tokens = static_cast<double>(profile.micro_batch_size) * profile.sequence_length;
    std::cout << fmt::format("experts      {} of {} blocks MoE; routed experts' parameters {}; activated per token {}{}\n",
                             moe_blocks, blocks, grouped(expert_bytes / element_bytes),
                             grouped(activated_bytes / element_bytes),
                             tokens > 0 ? fmt::format("; FLOPs per token {:.6g}", (forward + backward) / tokens) : "");
  }
  std::cout << fmt::format("activations  {} per micro-batch (input {})\n", human_bytes(activation),
                           human_bytes(profile.input_bytes));
  std::cout << "times        none: the device model of the host that runs a layer gives them (docs/formats.md, Analytic "
               "fields)\n";
  if (!options.output.empty()) std::cout << fmt::format("wrote {}\n", options.output);
  return 0;
}

}  // namespace pipegrid::cli
