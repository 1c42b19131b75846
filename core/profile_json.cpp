// Profile JSON: reading (with field-level error messages), writing, checking,
// and the format dispatch of read_profile.

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/json_input.hpp"
#include "core/limits.hpp"
#include "core/platform_check.hpp"
#include "core/profile.hpp"

namespace pipegrid {

namespace {

std::string shown(const nlohmann::json& value) { return shown_json(value); }

void reject_unknown_fields(const nlohmann::json& object, const std::string& where,
                           std::initializer_list<std::string_view> known) {
  reject_unknown_json_fields(object, where, known);
}

/// The largest value a field may hold: a time (its name ends in "_s") at
/// most limits::kMaxSeconds, FLOPs (ends in "_flops") limits::kMaxFlops,
/// anything else (bytes) limits::kMaxBytes.
double limit_of(std::string_view path) {
  const auto field_end = path.find_first_of("[ ", path.rfind('.') == std::string_view::npos ? 0 : path.rfind('.'));
  const std::string_view field = path.substr(0, field_end);
  const auto ends_with = [&](std::string_view suffix) {
    return field.size() >= suffix.size() && field.substr(field.size() - suffix.size()) == suffix;
  };
  if (ends_with("_s")) return limits::kMaxSeconds;
  if (ends_with("_flops")) return limits::kMaxFlops;
  return limits::kMaxBytes;
}

/// The unit of a limit_of value, for messages.
const char* unit_of(double limit) {
  if (limit == limits::kMaxSeconds) return "seconds";
  if (limit == limits::kMaxFlops) return "floating-point operations";
  return "bytes";
}

/// The values a layer's "op" may take (docs/formats.md, Analytic fields).
const std::vector<std::string>& layer_ops() {
  static const std::vector<std::string> ops = {"embedding", "linear",      "conv2d", "lstm", "attention",
                                               "transformer", "norm", "pool", "elementwise", "loss"};
  return ops;
}

/// The dtypes a profile may state.
const std::vector<std::string>& profile_dtypes() {
  static const std::vector<std::string> dtypes = {"fp32", "fp16", "bf16"};
  return dtypes;
}

/// The message for a value that is not a number in 0..limit_of(path).
std::string bad_value(const std::string& origin, const std::string& path, const std::string& found, bool too_large) {
  const double limit = limit_of(path);
  if (too_large)
    return fmt::format("{}: {}: expected at most {:g} {} (docs/formats.md, Limits), found {}", origin, path, limit,
                       unit_of(limit), found);
  return fmt::format("{}: {}: expected a non-negative number, found {}", origin, path, found);
}

/// `value` as a finite number in 0..limit_of(path), or the InputError.
double checked_number(const nlohmann::json& value, const std::string& origin, const std::string& path) {
  if (const auto number = json_number_in(value, 0, limit_of(path))) return *number;
  throw InputError(bad_value(origin, path, shown(value), value.is_number() && value.get<double>() > 0));
}

/// The field `name` of `object` as a finite number in 0..limit_of(path);
/// `path` is its JSON path in messages.
double non_negative_number(const nlohmann::json& object, const char* name, const std::string& origin,
                           const std::string& path) {
  const auto field = object.find(name);
  if (field == object.end()) throw InputError(bad_value(origin, path, "nothing", false));
  return checked_number(*field, origin, path);
}

/// How a profile states its sizes: one (plain numbers) or several (a list
/// per value, one entry per size).
struct SizeShape {
  std::size_t sizes = 1;
  bool multi = false;
};

/// The field `name` of `object`: a non-negative number for a single-size
/// profile, a list of `shape.sizes` of them for a multi-size one.
std::vector<double> values_per_size(const nlohmann::json& object, const char* name, const SizeShape& shape,
                                    const std::string& origin, const std::string& path) {
  if (!shape.multi) return {non_negative_number(object, name, origin, path)};
  const auto field = object.find(name);
  if (field == object.end() || !field->is_array() || field->size() != shape.sizes)
    throw InputError(fmt::format(
        "{}: {}: expected a list of {} non-negative numbers (one per micro_batch_sizes entry), found {}", origin, path,
        shape.sizes,
        field == object.end() ? "nothing"
        : field->is_array()   ? fmt::format("a list of {}", field->size())
                              : shown(*field)));
  std::vector<double> values;
  for (std::size_t k = 0; k < field->size(); ++k)
    values.push_back(checked_number((*field)[k], origin, fmt::format("{}[{}]", path, k)));
  return values;
}

/// Whether `name` can be a host's `device` property (platform.cpp's rule).
bool valid_device_type(const std::string& name) {
  return !name.empty() && name.find_first_of(" \t") == std::string::npos;
}

/// How a layer is named in the messages about its backward split: its
/// index and its name, "layers[1] ('fc')".
std::string split_owner(std::size_t layer, const std::string& name) {
  return fmt::format("layers[{}] ('{}')", layer, printable(name));
}

/// The message for a backward split with one part only: `owner` (see
/// split_owner, with ".devices.TYPE" for a device's times) gives `given`
/// and lacks `missing`; `at` is empty or " (at micro-batch size N)".
std::string one_part_only(const std::string& origin, const std::string& owner, const std::string& at,
                          const char* given, const char* missing) {
  return fmt::format("{}: {}.{}{}: expected a number >= 0 since {} is given (the backward's input-gradient and "
                     "weight-gradient parts: both or neither), found nothing",
                     origin, owner, missing, at, given);
}

/// The object's optional backward split ("backward_input_s",
/// "backward_weight_s"), per size of `shape`: empty lists when neither is
/// given, an InputError when one is.
std::pair<std::vector<std::optional<double>>, std::vector<std::optional<double>>> split_per_size(
    const nlohmann::json& object, const SizeShape& shape, const std::string& origin, const std::string& owner) {
  const bool input = object.contains("backward_input_s"), weight = object.contains("backward_weight_s");
  std::vector<std::optional<double>> inputs(shape.sizes), weights(shape.sizes);
  if (!input && !weight) return {inputs, weights};
  if (!weight) throw InputError(one_part_only(origin, owner, "", "backward_input_s", "backward_weight_s"));
  if (!input) throw InputError(one_part_only(origin, owner, "", "backward_weight_s", "backward_input_s"));
  const std::vector<double> i = values_per_size(object, "backward_input_s", shape, origin, owner + ".backward_input_s");
  const std::vector<double> w = values_per_size(object, "backward_weight_s", shape, origin, owner + ".backward_weight_s");
  for (std::size_t k = 0; k < shape.sizes; ++k) {
    inputs[k] = i[k];
    weights[k] = w[k];
  }
  return {inputs, weights};
}

/// A layer's "devices" object: per device type, forward and backward times
/// (and the backward's split where given) per size (one entry per size of
/// `shape`). `owner`: the layer as split_owner names it.
std::map<std::string, std::vector<LayerTimes>> device_times_per_size(const nlohmann::json& devices,
                                                                     const SizeShape& shape, const std::string& origin,
                                                                     const std::string& path, const std::string& owner) {
  if (!devices.is_object())
    throw InputError(fmt::format(
        "{}: {}: expected an object of per-device-type times ({{\"VCU129\": {{\"forward_s\": ..., \"backward_s\": "
        "...}}}}), found {}",
        origin, path, shown(devices)));
  std::map<std::string, std::vector<LayerTimes>> result;
  for (const auto& item : devices.items()) {
    const std::string entry_path = fmt::format("{}.{}", path, item.key());
    if (!valid_device_type(item.key()))
      throw InputError(fmt::format("{}: {}: expected a device type name without spaces (a host's `device` property), "
                                   "found '{}'",
                                   origin, path, item.key()));
    const nlohmann::json& entry = item.value();
    if (!entry.is_object())
      throw InputError(fmt::format("{}: {}: expected an object with forward_s and backward_s, found {}", origin,
                                   entry_path, shown(entry)));
    reject_unknown_fields(entry, fmt::format("{}: {}", origin, entry_path),
                          {"forward_s", "backward_s", "backward_input_s", "backward_weight_s"});
    const std::vector<double> forward = values_per_size(entry, "forward_s", shape, origin, entry_path + ".forward_s");
    const std::vector<double> backward = values_per_size(entry, "backward_s", shape, origin, entry_path + ".backward_s");
    const auto [inputs, weights] =
        split_per_size(entry, shape, origin, fmt::format("{}.devices.{}", owner, item.key()));
    std::vector<LayerTimes>& times = result[item.key()];
    for (std::size_t k = 0; k < forward.size(); ++k) times.push_back({forward[k], backward[k], inputs[k], weights[k]});
  }
  return result;
}

/// A double as JSON: an integer when it is one (byte counts stay integers),
/// otherwise nlohmann's shortest text that reads back to the same double.
std::string number_text(double value) {
  constexpr double kExactIntegerLimit = 9007199254740992.0;  // 2^53
  if (std::trunc(value) == value && std::fabs(value) < kExactIntegerLimit)
    return nlohmann::ordered_json(static_cast<long long>(value)).dump();
  return nlohmann::ordered_json(value).dump();
}

/// `values` as a JSON list of numbers_text.
std::string list_text(const std::vector<double>& values) {
  std::string text = "[";
  for (std::size_t k = 0; k < values.size(); ++k) text += fmt::format("{}{}", k == 0 ? "" : ", ", number_text(values[k]));
  return text + "]";
}

/// The text of a backward split's fields after backward_s (", \"backward_input_s\": I,
/// \"backward_weight_s\": W"), empty when `input` (the parts' text) is.
std::string split_text(const std::string& input, const std::string& weight) {
  if (input.empty()) return "";
  return fmt::format(", \"backward_input_s\": {}, \"backward_weight_s\": {}", input, weight);
}

/// The text of one device type's times: forward, backward and the
/// backward's split (empty strings when absent).
struct TimesText {
  std::string forward, backward, input, weight;
};

/// A layer's "devices" object: per device type (sorted), its times per size
/// as `times_text` writes them.
std::string devices_text(const std::vector<std::string>& types,
                         const std::function<TimesText(const std::string&)>& times_text) {
  std::string text = "{";
  for (std::size_t d = 0; d < types.size(); ++d) {
    const TimesText times = times_text(types[d]);
    text += fmt::format("{}{}: {{\"forward_s\": {}, \"backward_s\": {}{}}}", d == 0 ? "" : ", ",
                        nlohmann::ordered_json(types[d]).dump(), times.forward, times.backward,
                        split_text(times.input, times.weight));
  }
  return text + "}";
}

/// Throws unless `value` is finite, >= 0 and within limit_of(path).
void check_non_negative(double value, const std::string& origin, const std::string& path) {
  if (!std::isfinite(value) || value < 0 || value > limit_of(path))
    throw InputError(bad_value(origin, path, format_exact(value), value > 0));
}

/// Checks a layer's device times: type names a host can have, times >= 0.
/// (Their backward splits: check_split.)
void check_device_times(const std::map<std::string, LayerTimes>& device_times, const std::string& origin,
                        const std::string& path) {
  for (const auto& [device, times] : device_times) {
    if (!valid_device_type(device))
      throw InputError(fmt::format("{}: {}.devices: expected a device type name without spaces, found '{}'", origin,
                                   path, device));
    check_non_negative(times.forward_s, origin, fmt::format("{}.devices.{}.forward_s", path, device));
    check_non_negative(times.backward_s, origin, fmt::format("{}.devices.{}.backward_s", path, device));
  }
}

/// Checks one backward split of `owner` (split_owner, with ".devices.TYPE"
/// for a device's times): both parts or neither, each a time >= 0 within
/// the limits, summing to `backward` (backward_split_sums_to). `index` ("" or
/// "[k]") and `at` ("" or " (at micro-batch size N)") place a multi-size
/// profile's value.
void check_split(const std::optional<double>& input, const std::optional<double>& weight, double backward,
                 const std::string& origin, const std::string& owner, const std::string& index, const std::string& at) {
  if (!input && !weight) return;
  if (!weight) throw InputError(one_part_only(origin, owner, at, "backward_input_s", "backward_weight_s"));
  if (!input) throw InputError(one_part_only(origin, owner, at, "backward_weight_s", "backward_input_s"));
  check_non_negative(*input, origin, fmt::format("{}.backward_input_s{}{}", owner, index, at));
  check_non_negative(*weight, origin, fmt::format("{}.backward_weight_s{}{}", owner, index, at));
  if (!backward_split_sums_to(backward, *input, *weight))
    throw InputError(fmt::format("{}: {}{}: backward_input_s{} + backward_weight_s{}: expected their sum to be "
                                 "backward_s{} = {} (within 1e-9 relative), found {} + {} = {}",
                                 origin, owner, at, index, index, index, format_exact(backward), format_exact(*input),
                                 format_exact(*weight), format_exact(*input + *weight)));
}

/// Checks every backward split of the profile (the layers' and their device
/// times'): a single-size profile's layers, a multi-size one's every measured
/// size, each split given at every size or at none.
void check_backward_splits(const Profile& profile, const std::string& origin) {
  if (profile.measured.empty()) {
    for (std::size_t l = 0; l < profile.layers.size(); ++l) {
      const Layer& layer = profile.layers[l];
      const std::string owner = split_owner(l, layer.name);
      check_split(layer.backward_input_s, layer.backward_weight_s, layer.backward_s, origin, owner, "", "");
      for (const auto& [device, times] : layer.device_times)
        check_split(times.backward_input_s, times.backward_weight_s, times.backward_s, origin,
                    fmt::format("{}.devices.{}", owner, device), "", "");
    }
    return;
  }
  const std::vector<MeasuredSize>& measured = profile.measured;
  auto given = [](const std::optional<double>& input, const std::optional<double>& weight) {
    return input.has_value() || weight.has_value();
  };
  for (std::size_t k = 0; k < measured.size(); ++k) {
    const std::string index = fmt::format("[{}]", k);
    const std::string at = fmt::format(" (at micro-batch size {})", measured[k].micro_batch_size);
    for (std::size_t l = 0; l < measured[k].layers.size() && l < profile.layers.size(); ++l) {
      const LayerAtSize& layer = measured[k].layers[l];
      const LayerAtSize& first = measured.front().layers[l];
      const std::string owner = split_owner(l, profile.layers[l].name);
      if (given(layer.backward_input_s, layer.backward_weight_s) != given(first.backward_input_s, first.backward_weight_s))
        throw InputError(fmt::format("{}: {}.backward_input_s and backward_weight_s{}: expected them at every size or at "
                                     "none",
                                     origin, owner, at));
      check_split(layer.backward_input_s, layer.backward_weight_s, layer.backward_s, origin, owner, index, at);
      for (const auto& [device, times] : layer.device_times) {
        const std::string device_owner = fmt::format("{}.devices.{}", owner, device);
        const auto other = first.device_times.find(device);
        if (other != first.device_times.end() &&
            given(times.backward_input_s, times.backward_weight_s) !=
                given(other->second.backward_input_s, other->second.backward_weight_s))
          throw InputError(fmt::format("{}: {}.backward_input_s and backward_weight_s{}: expected them at every size or "
                                       "at none",
                                       origin, device_owner, at));
        check_split(times.backward_input_s, times.backward_weight_s, times.backward_s, origin, device_owner, index, at);
      }
    }
  }
}

/// The device types of a map, in order.
template <typename Map>
std::vector<std::string> keys_of(const Map& map) {
  std::vector<std::string> keys;
  for (const auto& item : map) keys.push_back(item.first);
  return keys;
}

/// The ops a layer with `vocabulary` may have (Layer::vocabulary).
bool vocabulary_op(const std::string& op) { return op == "embedding" || op == "linear" || op == "loss"; }

/// The message for `vocabulary` on a layer whose op cannot take it.
std::string vocabulary_op_message(const std::string& origin, const std::string& path, const std::string& op) {
  return fmt::format("{}: {}.vocabulary: applies to a layer with op embedding, linear or loss (the word embedding, "
                     "the head and the loss Megatron splits over the vocabulary), found {}",
                     origin, path, op.empty() ? std::string("no op") : fmt::format("op '{}'", printable(op)));
}

/// The largest vocabulary a profile may state.
constexpr long long kMaxVocabulary = 1000000000;

/// Reads a layer's tensor-parallel fields (Layer::vocabulary,
/// replicated_parameter_bytes, replicated_activation_fraction) after its
/// op and parameter_bytes; InputError naming the field otherwise.
void read_tensor_parallel_fields(const nlohmann::json& entry, Layer& layer, const std::string& origin,
                                 const std::string& path) {
  if (const auto field = entry.find("vocabulary"); field != entry.end()) {
    const auto value = json_integer_in(*field, 1, kMaxVocabulary);
    if (!value)
      throw InputError(fmt::format("{}: {}.vocabulary: expected an integer from 1 to {} (the vocabulary size), found {}",
                                   origin, path, kMaxVocabulary, shown(*field)));
    if (!vocabulary_op(layer.op)) throw InputError(vocabulary_op_message(origin, path, layer.op));
    layer.vocabulary = *value;
  }
  if (entry.contains("replicated_parameter_bytes")) {
    layer.replicated_parameter_bytes =
        non_negative_number(entry, "replicated_parameter_bytes", origin, path + ".replicated_parameter_bytes");
    if (layer.replicated_parameter_bytes > layer.parameter_bytes)
      throw InputError(fmt::format("{}: {}.replicated_parameter_bytes: expected at most parameter_bytes ({}), found {}",
                                   origin, path, format_exact(layer.parameter_bytes),
                                   format_exact(layer.replicated_parameter_bytes)));
  }
  // Mixture of experts (Layer::expert_parameter_bytes, moe_dispatch_bytes).
  if (entry.contains("expert_parameter_bytes")) {
    layer.expert_parameter_bytes =
        non_negative_number(entry, "expert_parameter_bytes", origin, path + ".expert_parameter_bytes");
    if (layer.expert_parameter_bytes > layer.parameter_bytes)
      throw InputError(fmt::format("{}: {}.expert_parameter_bytes: expected at most parameter_bytes ({}), found {}",
                                   origin, path, format_exact(layer.parameter_bytes),
                                   format_exact(layer.expert_parameter_bytes)));
  }
  if (entry.contains("moe_dispatch_bytes")) {
    layer.moe_dispatch_bytes = non_negative_number(entry, "moe_dispatch_bytes", origin, path + ".moe_dispatch_bytes");
    if (layer.moe_dispatch_bytes > 0 && !(layer.expert_parameter_bytes > 0))
      throw InputError(fmt::format("{}: {}.moe_dispatch_bytes: a dispatch needs routed experts; expected "
                                   "expert_parameter_bytes > 0, found {}",
                                   origin, path, format_exact(layer.expert_parameter_bytes)));
  }
  if (const auto field = entry.find("replicated_activation_fraction"); field != entry.end()) {
    const auto value = json_number_in(*field, 0, 1);
    if (!value)
      throw InputError(fmt::format("{}: {}.replicated_activation_fraction: expected a number from 0 to 1, found {}", origin,
                                   path, shown(*field)));
    layer.replicated_activation_fraction = *value;
  }
}

/// A layer's transformer_shape (docs/formats.md): an object of the numbers
/// batch, sequence, hidden, heads, kv_columns, ffn and vocabulary (> 0;
/// vocabulary >= 0) and the flags swiglu, linear_bias, rmsnorm, rotary,
/// flash_attention, position_table and causal (true or false, each
/// optional with the TransformerShape defaults).
void read_transformer_shape(const nlohmann::json& entry, Layer& layer, const std::string& origin, const std::string& path) {
  const auto field = entry.find("transformer_shape");
  if (field == entry.end()) return;
  const std::string where = path + ".transformer_shape";
  if (!field->is_object())
    throw InputError(fmt::format("{}: {}: expected an object (the model shape the layer comes from), found {}", origin,
                                 where, shown(*field)));
  reject_unknown_fields(*field, fmt::format("{}: {}", origin, where),
                        {"batch", "sequence", "hidden", "heads", "kv_columns", "ffn", "vocabulary", "swiglu",
                         "linear_bias", "rmsnorm", "rotary", "flash_attention", "position_table", "causal", "experts",
                         "topk", "expert_ffn", "shared_ffn", "imbalance", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
                         "qk_pos_head_dim", "v_head_dim"});
  TransformerShape shape;
  const std::pair<const char*, double TransformerShape::*> numbers[] = {
      {"batch", &TransformerShape::batch},   {"sequence", &TransformerShape::sequence},
      {"hidden", &TransformerShape::hidden}, {"heads", &TransformerShape::heads},
      {"kv_columns", &TransformerShape::kv_columns}, {"ffn", &TransformerShape::ffn},
      {"vocabulary", &TransformerShape::vocabulary}};
  for (const auto& [name, member] : numbers) {
    const auto value = field->find(name);
    const bool may_be_zero = std::string(name) == "vocabulary";
    if (value == field->end() || !value->is_number() || !std::isfinite(value->get<double>()) ||
        !(may_be_zero ? value->get<double>() >= 0 : value->get<double>() > 0) || value->get<double>() > 1e12)
      throw InputError(fmt::format("{}: {}.{}: expected a number {} (at most 1e12), found {}", origin, where, name,
                                   may_be_zero ? ">= 0" : "> 0", value == field->end() ? "nothing" : shown(*value)));
    shape.*member = value->get<double>();
  }
  const std::pair<const char*, bool TransformerShape::*> flags[] = {
      {"swiglu", &TransformerShape::swiglu},   {"linear_bias", &TransformerShape::linear_bias},
      {"rmsnorm", &TransformerShape::rmsnorm}, {"rotary", &TransformerShape::rotary},
      {"flash_attention", &TransformerShape::flash_attention}, {"position_table", &TransformerShape::position_table},
      {"causal", &TransformerShape::causal}};
  for (const auto& [name, member] : flags) {
    const auto value = field->find(name);
    if (value == field->end()) continue;
    if (!value->is_boolean())
      throw InputError(fmt::format("{}: {}.{}: expected true or false, found {}", origin, where, name, shown(*value)));
    shape.*member = value->get<bool>();
  }
  // Mixture of experts and multi-head latent attention: optional, >= 0
  // (imbalance >= 1); experts > 0 needs topk from 1 to experts and
  // expert_ffn > 0, kv_lora_rank > 0 qk_head_dim and v_head_dim > 0.
  const std::pair<const char*, double TransformerShape::*> optional_numbers[] = {
      {"experts", &TransformerShape::experts},         {"topk", &TransformerShape::topk},
      {"expert_ffn", &TransformerShape::expert_ffn},   {"shared_ffn", &TransformerShape::shared_ffn},
      {"imbalance", &TransformerShape::imbalance},     {"q_lora_rank", &TransformerShape::q_lora_rank},
      {"kv_lora_rank", &TransformerShape::kv_lora_rank}, {"qk_head_dim", &TransformerShape::qk_head_dim},
      {"qk_pos_head_dim", &TransformerShape::qk_pos_head_dim}, {"v_head_dim", &TransformerShape::v_head_dim}};
  for (const auto& [name, member] : optional_numbers) {
    const auto value = field->find(name);
    if (value == field->end()) continue;
    const double least = std::string(name) == "imbalance" ? 1 : 0;
    if (!value->is_number() || !std::isfinite(value->get<double>()) || value->get<double>() < least ||
        value->get<double>() > 1e12)
      throw InputError(fmt::format("{}: {}.{}: expected a number >= {} (at most 1e12), found {}", origin, where, name,
                                   least, shown(*value)));
    shape.*member = value->get<double>();
  }
  if (shape.experts > 0 && !(shape.topk >= 1 && shape.topk <= shape.experts && shape.expert_ffn > 0))
    throw InputError(fmt::format("{}: {}: with experts ({}) expected topk from 1 to experts and expert_ffn > 0, found "
                                 "topk {} and expert_ffn {}",
                                 origin, where, shape.experts, shape.topk, shape.expert_ffn));
  if (shape.kv_lora_rank > 0 && !(shape.qk_head_dim > 0 && shape.v_head_dim > 0))
    throw InputError(fmt::format("{}: {}: with kv_lora_rank (multi-head latent attention) expected qk_head_dim and "
                                 "v_head_dim > 0, found {} and {}",
                                 origin, where, shape.qk_head_dim, shape.v_head_dim));
  const char* const ops[] = {"embedding", "transformer", "norm", "linear", "loss"};
  if (std::find(std::begin(ops), std::end(ops), layer.op) == std::end(ops))
    throw InputError(fmt::format("{}: {}: a transformer_shape needs op embedding, transformer, norm, linear or loss, found "
                                 "op '{}'",
                                 origin, where, printable(layer.op)));
  layer.transformer_shape = shape;
}

/// The MoE and MLA numbers of a transformer_shape (none for a dense
/// MHA/GQA layer's, whose text stays as it was).
std::string moe_and_mla_text(const TransformerShape& shape) {
  std::string text;
  if (shape.moe())
    text += fmt::format(", \"experts\": {}, \"topk\": {}, \"expert_ffn\": {}, \"shared_ffn\": {}, \"imbalance\": {}",
                        number_text(shape.experts), number_text(shape.topk), number_text(shape.expert_ffn),
                        number_text(shape.shared_ffn), number_text(shape.imbalance));
  if (shape.mla())
    text += fmt::format(", \"q_lora_rank\": {}, \"kv_lora_rank\": {}, \"qk_head_dim\": {}, \"qk_pos_head_dim\": {}, "
                        "\"v_head_dim\": {}",
                        number_text(shape.q_lora_rank), number_text(shape.kv_lora_rank), number_text(shape.qk_head_dim),
                        number_text(shape.qk_pos_head_dim), number_text(shape.v_head_dim));
  return text;
}

/// The transformer_shape's text, in read_transformer_shape's order.
std::string transformer_shape_text(const TransformerShape& shape) {
  auto flag = [](bool value) { return value ? "true" : "false"; };
  return fmt::format(", \"transformer_shape\": {{\"batch\": {}, \"sequence\": {}, \"hidden\": {}, \"heads\": {}, "
                     "\"kv_columns\": {}, \"ffn\": {}, \"vocabulary\": {}, \"swiglu\": {}, \"linear_bias\": {}, "
                     "\"rmsnorm\": {}, \"rotary\": {}, \"flash_attention\": {}, \"position_table\": {}, \"causal\": {}{}}}",
                     number_text(shape.batch), number_text(shape.sequence), number_text(shape.hidden),
                     number_text(shape.heads), number_text(shape.kv_columns), number_text(shape.ffn),
                     number_text(shape.vocabulary), flag(shape.swiglu), flag(shape.linear_bias), flag(shape.rmsnorm),
                     flag(shape.rotary), flag(shape.flash_attention), flag(shape.position_table), flag(shape.causal),
                     moe_and_mla_text(shape));
}

}  // namespace

Profile parse_profile_json(const std::string& text, const std::string& origin) {
  return parse_profile_json_document(parse_json_input(text, origin), origin);
}

Profile parse_profile_json_document(const nlohmann::json& document, const std::string& origin) {
  if (!document.is_object())
    throw InputError(fmt::format("{}: expected a JSON object (a profile), found {}", origin, shown(document)));
  reject_unknown_fields(document, origin,
                        {"name", "model", "micro_batch_size", "micro_batch_sizes", "input_bytes", "dtype", "sequence_length",
                         "layers"});

  Profile profile;
  const auto name = document.find("name");
  if (name == document.end() || !name->is_string())
    throw InputError(fmt::format("{}: name: expected a string, found {}", origin,
                                 name == document.end() ? "nothing" : shown(*name)));
  profile.name = name->get<std::string>();
  if (const auto model = document.find("model"); model != document.end()) {
    if (!model->is_string())
      throw InputError(fmt::format("{}: model: expected a string (\"NAME key=value ...\"), found {}", origin, shown(*model)));
    profile.model = model->get<std::string>();
  }
  if (const auto dtype = document.find("dtype"); dtype != document.end()) {
    const auto& dtypes = profile_dtypes();
    if (!dtype->is_string() || std::find(dtypes.begin(), dtypes.end(), dtype->get<std::string>()) == dtypes.end())
      throw InputError(fmt::format("{}: dtype: expected \"fp32\", \"fp16\" or \"bf16\", found {}", origin, shown(*dtype)));
    profile.dtype = dtype->get<std::string>();
  }
  if (const auto sequence = document.find("sequence_length"); sequence != document.end()) {
    const auto value = json_integer_in(*sequence, 0, std::numeric_limits<int>::max());
    if (!value)
      throw InputError(fmt::format("{}: sequence_length: expected an integer >= 0 (tokens per sample), found {}", origin,
                                   shown(*sequence)));
    profile.sequence_length = static_cast<int>(*value);
  }

  // One size (micro_batch_size, plain numbers) or several (micro_batch_sizes,
  // a list per value).
  const auto batch = document.find("micro_batch_size");
  const auto batches = document.find("micro_batch_sizes");
  if (batch != document.end() && batches != document.end())
    throw InputError(fmt::format("{}: micro_batch_sizes: expected either micro_batch_size (times at one size) or "
                                 "micro_batch_sizes (times at several), found both",
                                 origin));
  auto is_size = [](const nlohmann::json& value) {
    return value.is_number_integer() && value.get<long long>() >= 1 &&
           value.get<long long>() <= std::numeric_limits<int>::max();
  };
  SizeShape shape;
  std::vector<int> sizes;
  if (batches != document.end()) {
    if (!batches->is_array() || batches->size() < 2)
      throw InputError(fmt::format(
          "{}: micro_batch_sizes: expected a list of at least two micro-batch sizes in increasing order (for one size, "
          "write micro_batch_size and plain numbers), found {}",
          origin, shown(*batches)));
    for (std::size_t k = 0; k < batches->size(); ++k) {
      const nlohmann::json& value = (*batches)[k];
      if (!is_size(value))
        throw InputError(
            fmt::format("{}: micro_batch_sizes[{}]: expected an integer >= 1, found {}", origin, k, shown(value)));
      if (!sizes.empty() && value.get<int>() <= sizes.back())
        throw InputError(fmt::format(
            "{}: micro_batch_sizes[{}]: expected a size larger than {} (sizes in increasing order, each once), found {}",
            origin, k, sizes.back(), shown(value)));
      sizes.push_back(value.get<int>());
    }
    shape = {sizes.size(), true};
  } else {
    if (batch == document.end() || !is_size(*batch))
      throw InputError(fmt::format("{}: micro_batch_size: expected an integer >= 1, found {}", origin,
                                   batch == document.end() ? "nothing" : shown(*batch)));
    sizes.push_back(batch->get<int>());
  }

  std::vector<double> input_bytes(shape.sizes, 0.0);
  if (document.contains("input_bytes")) input_bytes = values_per_size(document, "input_bytes", shape, origin, "input_bytes");

  const auto layers = document.find("layers");
  if (layers == document.end() || !layers->is_array() || layers->empty())
    throw InputError(fmt::format("{}: layers: expected a non-empty list of layers, found {}", origin,
                                 layers == document.end() ? "nothing" : shown(*layers)));
  std::vector<MeasuredSize> measured(shape.sizes);
  for (std::size_t k = 0; k < shape.sizes; ++k) measured[k] = {sizes[k], input_bytes[k], {}};
  for (std::size_t l = 0; l < layers->size(); ++l) {
    const nlohmann::json& entry = (*layers)[l];
    const std::string path = fmt::format("layers[{}]", l);
    if (!entry.is_object())
      throw InputError(fmt::format("{}: {}: expected a layer object, found {}", origin, path, shown(entry)));
    reject_unknown_fields(entry, fmt::format("{}: {}", origin, path),
                          {"name", "forward_s", "backward_s", "backward_input_s", "backward_weight_s", "output_bytes",
                           "activation_bytes", "parameter_bytes", "op", "forward_flops", "backward_input_flops",
                           "backward_weight_flops", "bytes_read", "bytes_written", "attention_core_flops_share", "attention_core_stash_share", "devices", "vocabulary",
                           "replicated_parameter_bytes", "replicated_activation_fraction", "transformer_shape",
                           "expert_parameter_bytes", "moe_dispatch_bytes"});
    Layer layer;
    const auto layer_name = entry.find("name");
    if (layer_name == entry.end() || !layer_name->is_string())
      throw InputError(fmt::format("{}: {}.name: expected a string, found {}", origin, path,
                                   layer_name == entry.end() ? "nothing" : shown(*layer_name)));
    layer.name = layer_name->get<std::string>();
    const std::string owner = split_owner(l, layer.name);
    // Measured times, or analytic costs whose times a device model supplies.
    const bool times_given = entry.contains("forward_s") || entry.contains("backward_s");
    if (!times_given) {
      if (!entry.contains("forward_flops"))
        throw InputError(fmt::format("{}: {}: expected forward_s and backward_s (measured times) or forward_flops "
                                     "(analytic costs; a device model gives the times), found neither",
                                     origin, owner));
      for (const char* split : {"backward_input_s", "backward_weight_s"})
        if (entry.contains(split))
          throw InputError(fmt::format("{}: {}.{}: a part of backward_s, which the layer does not give (give "
                                       "forward_s and backward_s too, or neither part)",
                                       origin, owner, split));
    }
    const std::vector<double> forward = times_given ? values_per_size(entry, "forward_s", shape, origin, path + ".forward_s")
                                                    : std::vector<double>(shape.sizes, 0.0);
    const std::vector<double> backward = times_given
                                             ? values_per_size(entry, "backward_s", shape, origin, path + ".backward_s")
                                             : std::vector<double>(shape.sizes, 0.0);
    const auto [inputs, weights] = split_per_size(entry, shape, origin, owner);
    // The analytic fields: the three FLOPs all or none; the bytes each alone.
    const char* const flops_fields[] = {"forward_flops", "backward_input_flops", "backward_weight_flops"};
    for (const char* field : flops_fields)
      if (entry.contains(field))
        for (const char* other : flops_fields)
          if (!entry.contains(other))
            throw InputError(fmt::format("{}: {}.{}: expected a number >= 0 since {} is given (FLOPs of the forward, the "
                                         "input gradient and the weight gradient: all three or none), found nothing",
                                         origin, owner, other, field));
    auto optional_per_size = [&](const char* field) {
      std::vector<std::optional<double>> values(shape.sizes);
      if (!entry.contains(field)) return values;
      const std::vector<double> given = values_per_size(entry, field, shape, origin, path + "." + field);
      for (std::size_t k = 0; k < shape.sizes; ++k) values[k] = given[k];
      return values;
    };
    const auto forward_flops = optional_per_size("forward_flops");
    const auto input_flops = optional_per_size("backward_input_flops");
    const auto weight_flops = optional_per_size("backward_weight_flops");
    const auto bytes_read = optional_per_size("bytes_read");
    const auto bytes_written = optional_per_size("bytes_written");
    if (const auto op = entry.find("op"); op != entry.end()) {
      const auto& ops = layer_ops();
      if (!op->is_string() || std::find(ops.begin(), ops.end(), op->get<std::string>()) == ops.end())
        throw InputError(fmt::format("{}: {}.op: expected one of {}, found {}", origin, path, fmt::join(ops, ", "),
                                     shown(*op)));
      layer.op = op->get<std::string>();
    }
    // The attention core's shares: one value each (not per size), both or neither.
    for (const auto& [field, other] : {std::pair{"attention_core_flops_share", "attention_core_stash_share"},
                                       std::pair{"attention_core_stash_share", "attention_core_flops_share"}})
      if (entry.contains(field) && !entry.contains(other))
        throw InputError(fmt::format("{}: {}.{}: expected a number in [0, 1] since {} is given (the attention core's "
                                     "shares: both or neither), found nothing",
                                     origin, path, other, field));
    for (auto [field, share] : {std::pair{"attention_core_flops_share", &layer.attention_core_flops_share},
                                std::pair{"attention_core_stash_share", &layer.attention_core_stash_share}}) {
      const auto value = entry.find(field);
      if (value == entry.end()) continue;
      if (!value->is_number() || !(value->get<double>() >= 0 && value->get<double>() <= 1))
        throw InputError(fmt::format("{}: {}.{}: expected a number in [0, 1] (one value at every micro-batch size), "
                                     "found {}",
                                     origin, path, field, shown(*value)));
      *share = value->get<double>();
    }
    const std::vector<double> output = values_per_size(entry, "output_bytes", shape, origin, path + ".output_bytes");
    std::optional<std::vector<double>> activation;
    if (entry.contains("activation_bytes"))
      activation = values_per_size(entry, "activation_bytes", shape, origin, path + ".activation_bytes");
    layer.parameter_bytes = non_negative_number(entry, "parameter_bytes", origin, path + ".parameter_bytes");
    read_tensor_parallel_fields(entry, layer, origin, path);
    read_transformer_shape(entry, layer, origin, path);
    if (layer.transformer_shape && shape.sizes > 1)
      throw InputError(fmt::format("{}: {}.transformer_shape: a profile measured at several micro-batch sizes gives "
                                   "every layer's times; drop the shape",
                                   origin, path));
    std::map<std::string, std::vector<LayerTimes>> devices;
    if (const auto field = entry.find("devices"); field != entry.end())
      devices = device_times_per_size(*field, shape, origin, path + ".devices", owner);
    for (std::size_t k = 0; k < shape.sizes; ++k) {
      LayerAtSize at{forward[k], backward[k], output[k], {}, {}, inputs[k], weights[k],
                     forward_flops[k], input_flops[k], weight_flops[k], bytes_read[k], bytes_written[k], times_given};
      if (activation) at.activation_bytes = (*activation)[k];
      for (const auto& [device, times] : devices) at.device_times[device] = times[k];
      measured[k].layers.push_back(std::move(at));
    }
    profile.layers.push_back(std::move(layer));
  }

  // The fields hold the first size; a multi-size profile keeps them all.
  const MeasuredSize& first = measured.front();
  profile.micro_batch_size = first.micro_batch_size;
  profile.input_bytes = first.input_bytes;
  for (std::size_t l = 0; l < profile.layers.size(); ++l) take_values_at_size(profile.layers[l], first.layers[l]);
  if (shape.multi) profile.measured = std::move(measured);
  check_backward_splits(profile, origin);
  return profile;
}

Profile read_profile_json(const std::string& path) { return parse_profile_json(read_text_file(path), path); }

std::string profile_to_json(const Profile& profile) {
  // One layer a line, fields in a fixed order, device types sorted:
  // diffable and deterministic.
  const bool multi = !profile.measured.empty();
  // Every per-size value of the multi-size form as its list.
  auto per_size = [&](const std::function<double(const MeasuredSize&)>& value) {
    std::vector<double> values;
    for (const MeasuredSize& m : profile.measured) values.push_back(value(m));
    return list_text(values);
  };
  std::string text = "{\n";
  text += fmt::format("  \"name\": {},\n", nlohmann::ordered_json(profile.name).dump());
  if (!profile.model.empty()) text += fmt::format("  \"model\": {},\n", nlohmann::ordered_json(profile.model).dump());
  if (multi) {
    std::string sizes;
    for (const MeasuredSize& m : profile.measured) sizes += fmt::format("{}{}", sizes.empty() ? "" : ", ", m.micro_batch_size);
    text += fmt::format("  \"micro_batch_sizes\": [{}],\n", sizes);
    text += fmt::format("  \"input_bytes\": {},\n", per_size([](const MeasuredSize& m) { return m.input_bytes; }));
  } else {
    text += fmt::format("  \"micro_batch_size\": {},\n", profile.micro_batch_size);
    text += fmt::format("  \"input_bytes\": {},\n", number_text(profile.input_bytes));
  }
  if (!profile.dtype.empty()) text += fmt::format("  \"dtype\": {},\n", nlohmann::ordered_json(profile.dtype).dump());
  if (profile.sequence_length > 0) text += fmt::format("  \"sequence_length\": {},\n", profile.sequence_length);
  text += "  \"layers\": [";
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& layer = profile.layers[l];
    std::string forward, backward, input, weight, output, activation, devices;
    // The analytic fields' text (", \"op\": ..., \"forward_flops\": ..."), in a fixed order.
    std::string analytic;
    if (!layer.op.empty()) analytic += fmt::format(", \"op\": {}", nlohmann::ordered_json(layer.op).dump());
    using AnalyticField = std::optional<double> LayerAtSize::*;
    const std::pair<const char*, AnalyticField> analytic_fields[] = {
        {"forward_flops", &LayerAtSize::forward_flops},
        {"backward_input_flops", &LayerAtSize::backward_input_flops},
        {"backward_weight_flops", &LayerAtSize::backward_weight_flops},
        {"bytes_read", &LayerAtSize::bytes_read},
        {"bytes_written", &LayerAtSize::bytes_written}};
    const std::optional<double>* own_fields[] = {&layer.forward_flops, &layer.backward_input_flops,
                                                 &layer.backward_weight_flops, &layer.bytes_read, &layer.bytes_written};
    for (std::size_t f = 0; f < std::size(analytic_fields); ++f) {
      // Not a structured binding: clang 14 cannot capture one in the lambda below.
      const char* key = analytic_fields[f].first;
      const AnalyticField field = analytic_fields[f].second;
      if (multi && (profile.measured.front().layers[l].*field))  // at every size or none (check_profile)
        analytic += fmt::format(", \"{}\": {}", key,
                                per_size([l, field](const MeasuredSize& m) { return (m.layers[l].*field).value_or(0.0); }));
      else if (!multi && own_fields[f]->has_value())
        analytic += fmt::format(", \"{}\": {}", key, number_text(**own_fields[f]));
    }
    if (layer.attention_core_flops_share && layer.attention_core_stash_share)
      analytic += fmt::format(", \"attention_core_flops_share\": {}, \"attention_core_stash_share\": {}",
                              number_text(*layer.attention_core_flops_share),
                              number_text(*layer.attention_core_stash_share));
    if (layer.transformer_shape) analytic += transformer_shape_text(*layer.transformer_shape);
    if (multi) {
      forward = per_size([l](const MeasuredSize& m) { return m.layers[l].forward_s; });
      backward = per_size([l](const MeasuredSize& m) { return m.layers[l].backward_s; });
      if (profile.measured.front().layers[l].backward_input_s) {  // at every size or none (check_profile)
        input = per_size([l](const MeasuredSize& m) { return m.layers[l].backward_input_s.value_or(0.0); });
        weight = per_size([l](const MeasuredSize& m) { return m.layers[l].backward_weight_s.value_or(0.0); });
      }
      output = per_size([l](const MeasuredSize& m) { return m.layers[l].output_bytes; });
      if (profile.measured.front().layers[l].activation_bytes)
        activation = per_size([l](const MeasuredSize& m) { return m.layers[l].activation_bytes.value_or(0.0); });
      const std::vector<std::string> types = keys_of(profile.measured.front().layers[l].device_times);
      if (!types.empty())
        devices = devices_text(types, [&](const std::string& type) {
          auto times_of = [&](double LayerTimes::*field) {
            return per_size([&](const MeasuredSize& m) { return m.layers[l].device_times.at(type).*field; });
          };
          auto part_of = [&](std::optional<double> LayerTimes::*field) {
            return per_size([&](const MeasuredSize& m) { return (m.layers[l].device_times.at(type).*field).value_or(0.0); });
          };
          TimesText text{times_of(&LayerTimes::forward_s), times_of(&LayerTimes::backward_s), "", ""};
          if (profile.measured.front().layers[l].device_times.at(type).backward_input_s) {
            text.input = part_of(&LayerTimes::backward_input_s);
            text.weight = part_of(&LayerTimes::backward_weight_s);
          }
          return text;
        });
    } else {
      forward = number_text(layer.forward_s);
      backward = number_text(layer.backward_s);
      if (layer.backward_input_s && layer.backward_weight_s) {
        input = number_text(*layer.backward_input_s);
        weight = number_text(*layer.backward_weight_s);
      }
      output = number_text(layer.output_bytes);
      if (layer.activation_bytes) activation = number_text(*layer.activation_bytes);
      if (!layer.device_times.empty())
        devices = devices_text(keys_of(layer.device_times), [&](const std::string& type) {
          const LayerTimes& times = layer.device_times.at(type);
          TimesText text{number_text(times.forward_s), number_text(times.backward_s), "", ""};
          if (times.backward_input_s && times.backward_weight_s) {
            text.input = number_text(*times.backward_input_s);
            text.weight = number_text(*times.backward_weight_s);
          }
          return text;
        });
    }
    // A layer without times (analytic costs only) writes none.
    const std::string times =
        layer.times_given
            ? fmt::format(", \"forward_s\": {}, \"backward_s\": {}{}", forward, backward, split_text(input, weight))
            : "";
    if (layer.vocabulary) analytic += fmt::format(", \"vocabulary\": {}", *layer.vocabulary);
    if (layer.replicated_parameter_bytes > 0)
      analytic += fmt::format(", \"replicated_parameter_bytes\": {}", number_text(layer.replicated_parameter_bytes));
    if (layer.replicated_activation_fraction > 0)
      analytic += fmt::format(", \"replicated_activation_fraction\": {}", number_text(layer.replicated_activation_fraction));
    if (layer.expert_parameter_bytes > 0)
      analytic += fmt::format(", \"expert_parameter_bytes\": {}", number_text(layer.expert_parameter_bytes));
    if (layer.moe_dispatch_bytes > 0)
      analytic += fmt::format(", \"moe_dispatch_bytes\": {}", number_text(layer.moe_dispatch_bytes));
    text += fmt::format("{}\n    {{\"name\": {}{}, \"output_bytes\": {}{}, \"parameter_bytes\": {}{}{}}}",
                        l == 0 ? "" : ",", nlohmann::ordered_json(layer.name).dump(), times, output,
                        activation.empty() ? "" : ", \"activation_bytes\": " + activation,
                        number_text(layer.parameter_bytes), analytic, devices.empty() ? "" : ", \"devices\": " + devices);
  }
  text += profile.layers.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return text;
}

void check_profile(const Profile& profile, const std::string& origin) {
  if (profile.micro_batch_size < 1)
    throw InputError(
        fmt::format("{}: micro_batch_size: expected an integer >= 1, found {}", origin, profile.micro_batch_size));
  check_non_negative(profile.input_bytes, origin, "input_bytes");
  if (profile.layers.empty()) throw InputError(fmt::format("{}: layers: expected at least one layer, found none", origin));
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& layer = profile.layers[l];
    const std::string path = fmt::format("layers[{}]", l);
    const std::pair<const char*, double> fields[] = {{"forward_s", layer.forward_s},
                                                     {"backward_s", layer.backward_s},
                                                     {"output_bytes", layer.output_bytes},
                                                     {"activation_bytes", layer.activation_bytes.value_or(0.0)},
                                                     {"parameter_bytes", layer.parameter_bytes}};
    for (const auto& [field, value] : fields) check_non_negative(value, origin, fmt::format("{}.{}", path, field));
    const std::pair<const char*, std::optional<double>> analytic[] = {{"forward_flops", layer.forward_flops},
                                                                      {"backward_input_flops", layer.backward_input_flops},
                                                                      {"backward_weight_flops", layer.backward_weight_flops},
                                                                      {"bytes_read", layer.bytes_read},
                                                                      {"bytes_written", layer.bytes_written}};
    for (const auto& [field, value] : analytic)
      if (value) check_non_negative(*value, origin, fmt::format("{}.{}", path, field));
    if (layer.attention_core_flops_share.has_value() != layer.attention_core_stash_share.has_value())
      throw InputError(fmt::format("{}: {}: attention_core_flops_share and attention_core_stash_share: expected both or "
                                   "neither",
                                   origin, path));
    for (const auto& [field, share] : {std::pair{"attention_core_flops_share", layer.attention_core_flops_share},
                                       std::pair{"attention_core_stash_share", layer.attention_core_stash_share}})
      if (share && !(*share >= 0 && *share <= 1))
        throw InputError(fmt::format("{}: {}.{}: expected a number in [0, 1], found {}", origin, path, field, *share));
    if (!layer.times_given && !layer.has_flops())
      throw InputError(fmt::format("{}: {}: expected forward_s and backward_s (measured times) or forward_flops (analytic "
                                   "costs), found neither",
                                   origin, split_owner(l, layer.name)));
    if (!layer.times_given && (layer.backward_input_s || layer.backward_weight_s))
      throw InputError(fmt::format("{}: {}.backward_input_s: a part of backward_s, which the layer does not give", origin,
                                   split_owner(l, layer.name)));
    check_device_times(layer.device_times, origin, path);
    if (layer.vocabulary && (*layer.vocabulary < 1 || *layer.vocabulary > kMaxVocabulary))
      throw InputError(fmt::format("{}: {}.vocabulary: expected an integer from 1 to {}, found {}", origin, path,
                                   kMaxVocabulary, *layer.vocabulary));
    if (layer.vocabulary && !vocabulary_op(layer.op)) throw InputError(vocabulary_op_message(origin, path, layer.op));
    if (!(layer.replicated_parameter_bytes >= 0 && layer.replicated_parameter_bytes <= layer.parameter_bytes))
      throw InputError(fmt::format("{}: {}.replicated_parameter_bytes: expected from 0 to parameter_bytes ({}), found {}",
                                   origin, path, format_exact(layer.parameter_bytes),
                                   format_exact(layer.replicated_parameter_bytes)));
    if (!(layer.expert_parameter_bytes >= 0 && layer.expert_parameter_bytes <= layer.parameter_bytes))
      throw InputError(fmt::format("{}: {}.expert_parameter_bytes: expected from 0 to parameter_bytes ({}), found {}",
                                   origin, path, format_exact(layer.parameter_bytes),
                                   format_exact(layer.expert_parameter_bytes)));
    check_non_negative(layer.moe_dispatch_bytes, origin, path + ".moe_dispatch_bytes");
    if (layer.moe_dispatch_bytes > 0 && layer.expert_parameter_bytes <= 0)
      throw InputError(fmt::format("{}: {}.moe_dispatch_bytes: a dispatch needs routed experts; expected "
                                   "expert_parameter_bytes > 0, found {}",
                                   origin, path, format_exact(layer.expert_parameter_bytes)));
    if (!(layer.replicated_activation_fraction >= 0 && layer.replicated_activation_fraction <= 1))
      throw InputError(fmt::format("{}: {}.replicated_activation_fraction: expected a number from 0 to 1, found {}", origin,
                                   path, format_exact(layer.replicated_activation_fraction)));
  }
  if (profile.measured.empty()) {
    check_backward_splits(profile, origin);
    return;
  }

  // A multi-size profile: its sizes, and its first size held in the fields.
  const std::vector<MeasuredSize>& measured = profile.measured;
  if (measured.size() < 2)
    throw InputError(fmt::format("{}: micro_batch_sizes: expected at least two sizes, found {}", origin, measured.size()));
  for (std::size_t k = 0; k < measured.size(); ++k) {
    const MeasuredSize& m = measured[k];
    const std::string at = fmt::format("at micro-batch size {}", m.micro_batch_size);
    if (m.micro_batch_size < 1 || (k > 0 && m.micro_batch_size <= measured[k - 1].micro_batch_size))
      throw InputError(fmt::format("{}: micro_batch_sizes[{}]: expected an integer >= 1 larger than the size before it, "
                                   "found {}",
                                   origin, k, m.micro_batch_size));
    check_non_negative(m.input_bytes, origin, fmt::format("input_bytes[{}] ({})", k, at));
    if (m.layers.size() != profile.layers.size())
      throw InputError(fmt::format("{}: layers ({}): expected {} layers, found {}", origin, at, profile.layers.size(),
                                   m.layers.size()));
    for (std::size_t l = 0; l < m.layers.size(); ++l) {
      const LayerAtSize& layer = m.layers[l];
      const std::string path = fmt::format("layers[{}]", l);
      check_non_negative(layer.forward_s, origin, fmt::format("{}.forward_s[{}] ({})", path, k, at));
      check_non_negative(layer.backward_s, origin, fmt::format("{}.backward_s[{}] ({})", path, k, at));
      check_non_negative(layer.output_bytes, origin, fmt::format("{}.output_bytes[{}] ({})", path, k, at));
      if (layer.activation_bytes.has_value() != measured.front().layers[l].activation_bytes.has_value())
        throw InputError(fmt::format("{}: {}.activation_bytes ({}): expected it at every size or at none", origin, path, at));
      check_non_negative(layer.activation_bytes.value_or(0.0), origin,
                         fmt::format("{}.activation_bytes[{}] ({})", path, k, at));
      using AnalyticField = std::optional<double> LayerAtSize::*;
      const std::pair<const char*, AnalyticField> analytic[] = {
          {"forward_flops", &LayerAtSize::forward_flops},
          {"backward_input_flops", &LayerAtSize::backward_input_flops},
          {"backward_weight_flops", &LayerAtSize::backward_weight_flops},
          {"bytes_read", &LayerAtSize::bytes_read},
          {"bytes_written", &LayerAtSize::bytes_written}};
      for (const auto& [field, member] : analytic) {
        if ((layer.*member).has_value() != (measured.front().layers[l].*member).has_value())
          throw InputError(fmt::format("{}: {}.{} ({}): expected it at every size or at none", origin, path, field, at));
        if (layer.*member) check_non_negative(*(layer.*member), origin, fmt::format("{}.{}[{}] ({})", path, field, k, at));
      }
      if (layer.times_given != measured.front().layers[l].times_given)
        throw InputError(fmt::format("{}: {}.forward_s ({}): expected times at every size or at none", origin, path, at));
      check_device_times(layer.device_times, origin, fmt::format("{} ({})", path, at));
      if (keys_of(layer.device_times) != keys_of(measured.front().layers[l].device_times))
        throw InputError(fmt::format("{}: {}.devices ({}): expected the device types [{}] of the first size, found [{}]",
                                     origin, path, at, fmt::join(keys_of(measured.front().layers[l].device_times), ", "),
                                     fmt::join(keys_of(layer.device_times), ", ")));
    }
  }
  check_backward_splits(profile, origin);
  const MeasuredSize& first = measured.front();
  bool same = profile.micro_batch_size == first.micro_batch_size && profile.input_bytes == first.input_bytes;
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& layer = profile.layers[l];
    const LayerAtSize& at = first.layers[l];
    same = same && layer.forward_s == at.forward_s && layer.backward_s == at.backward_s &&
           layer.output_bytes == at.output_bytes && layer.activation_bytes == at.activation_bytes &&
           layer.backward_input_s == at.backward_input_s && layer.backward_weight_s == at.backward_weight_s &&
           layer.forward_flops == at.forward_flops && layer.backward_input_flops == at.backward_input_flops &&
           layer.backward_weight_flops == at.backward_weight_flops && layer.bytes_read == at.bytes_read &&
           layer.bytes_written == at.bytes_written && layer.times_given == at.times_given &&
           keys_of(layer.device_times) == keys_of(at.device_times);
    for (const auto& [device, times] : at.device_times)
      same = same && layer.device_times.count(device) > 0 && layer.device_times.at(device).forward_s == times.forward_s &&
             layer.device_times.at(device).backward_s == times.backward_s &&
             layer.device_times.at(device).backward_input_s == times.backward_input_s &&
             layer.device_times.at(device).backward_weight_s == times.backward_weight_s;
  }
  if (!same)
    throw InputError(fmt::format("{}: expected the profile's fields to hold its first measured size ({}), found other "
                                 "values (micro_batch_size {})",
                                 origin, first.micro_batch_size, profile.micro_batch_size));
}

Profile read_profile(const std::string& path, std::optional<int> batch_size) {
  constexpr std::string_view kJsonSuffix = ".json";
  const bool is_json =
      path.size() >= kJsonSuffix.size() && path.compare(path.size() - kJsonSuffix.size(), kJsonSuffix.size(), kJsonSuffix) == 0;
  if (!is_json) return read_pipedream_graph(path, batch_size);
  Profile profile = read_profile_json(path);
  // A JSON profile states its own batch size; a different one would need a
  // scaling of the times that the tool does not invent (SEMANTICS.md).
  if (batch_size && !profile.measured.empty())
    throw InputError(fmt::format(
        "{}: batch size: the profile gives times at micro_batch_sizes [{}], found --batch-size {} (it only applies to "
        "PipeDream graph.txt files; --micro-batch-size picks the size to run)",
        path, fmt::join(profile_micro_batch_sizes(profile), ", "), *batch_size));
  if (batch_size && *batch_size != profile.micro_batch_size)
    throw InputError(fmt::format(
        "{}: batch size: the profile was measured at micro_batch_size {}, found --batch-size {} (it only applies to "
        "PipeDream graph.txt files)",
        path, profile.micro_batch_size, *batch_size));
  check_profile(profile, path);
  return profile;
}

}  // namespace pipegrid
