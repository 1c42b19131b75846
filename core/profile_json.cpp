// Profile JSON: reading (with field-level error messages), writing, checking,
// and the format dispatch of read_profile.

#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/profile.hpp"

namespace pipegrid {

namespace {

/// A JSON value as shown after "found" in a message, cut short when long.
std::string shown(const nlohmann::json& value) {
  constexpr std::size_t kMaxShown = 60;
  std::string text = value.dump();
  if (text.size() > kMaxShown) text = text.substr(0, kMaxShown) + "...";
  return text;
}

/// Throws unless `object` has only fields named in `known`; `where` prefixes
/// the message (the file, and the object's path when nested).
void reject_unknown_fields(const nlohmann::json& object, const std::string& where,
                           std::initializer_list<std::string_view> known) {
  for (const auto& item : object.items()) {
    bool is_known = false;
    for (const std::string_view name : known) is_known = is_known || item.key() == name;
    if (!is_known) {
      std::string expected;
      for (const std::string_view name : known) expected += fmt::format("{}{}", expected.empty() ? "" : ", ", name);
      throw InputError(fmt::format("{}: expected only the fields {}, found '{}'", where, expected, item.key()));
    }
  }
}

/// The field `name` of `object` as a finite number >= 0; `path` is its JSON
/// path in messages.
double non_negative_number(const nlohmann::json& object, const char* name, const std::string& origin,
                           const std::string& path) {
  const auto field = object.find(name);
  if (field == object.end() || !field->is_number() || !std::isfinite(field->get<double>()) ||
      field->get<double>() < 0)
    throw InputError(fmt::format("{}: {}: expected a non-negative number, found {}", origin, path,
                                 field == object.end() ? "nothing" : shown(*field)));
  return field->get<double>();
}

/// A double as JSON: an integer when it is one (byte counts stay integers),
/// otherwise nlohmann's shortest text that reads back to the same double.
std::string number_text(double value) {
  constexpr double kExactIntegerLimit = 9007199254740992.0;  // 2^53
  if (std::trunc(value) == value && std::fabs(value) < kExactIntegerLimit)
    return nlohmann::ordered_json(static_cast<long long>(value)).dump();
  return nlohmann::ordered_json(value).dump();
}

}  // namespace

Profile parse_profile_json(const std::string& text, const std::string& origin) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    // what() is "[json.exception.parse_error.N] parse error at line L, column C: ..."
    // (or, for a number too large for a double, "[json.exception.out_of_range.406] ...").
    std::string message = error.what();
    if (const auto tag_end = message.find("] "); message.rfind("[json.exception.", 0) == 0 && tag_end != std::string::npos)
      message.erase(0, tag_end + 2);
    throw InputError(fmt::format("{}: malformed JSON: {}", origin, message));
  }
  if (!document.is_object())
    throw InputError(fmt::format("{}: expected a JSON object (a profile), found {}", origin, shown(document)));
  reject_unknown_fields(document, origin, {"name", "micro_batch_size", "input_bytes", "layers"});

  Profile profile;
  const auto name = document.find("name");
  if (name == document.end() || !name->is_string())
    throw InputError(fmt::format("{}: name: expected a string, found {}", origin,
                                 name == document.end() ? "nothing" : shown(*name)));
  profile.name = name->get<std::string>();

  const auto batch = document.find("micro_batch_size");
  if (batch == document.end() || !batch->is_number_integer() || batch->get<long long>() < 1 ||
      batch->get<long long>() > std::numeric_limits<int>::max())
    throw InputError(fmt::format("{}: micro_batch_size: expected an integer >= 1, found {}", origin,
                                 batch == document.end() ? "nothing" : shown(*batch)));
  profile.micro_batch_size = batch->get<int>();

  if (document.contains("input_bytes"))
    profile.input_bytes = non_negative_number(document, "input_bytes", origin, "input_bytes");

  const auto layers = document.find("layers");
  if (layers == document.end() || !layers->is_array() || layers->empty())
    throw InputError(fmt::format("{}: layers: expected a non-empty list of layers, found {}", origin,
                                 layers == document.end() ? "nothing" : shown(*layers)));
  for (std::size_t l = 0; l < layers->size(); ++l) {
    const nlohmann::json& entry = (*layers)[l];
    const std::string path = fmt::format("layers[{}]", l);
    if (!entry.is_object())
      throw InputError(fmt::format("{}: {}: expected a layer object, found {}", origin, path, shown(entry)));
    reject_unknown_fields(entry, fmt::format("{}: {}", origin, path),
                          {"name", "forward_s", "backward_s", "output_bytes", "activation_bytes", "parameter_bytes"});
    Layer layer;
    const auto layer_name = entry.find("name");
    if (layer_name == entry.end() || !layer_name->is_string())
      throw InputError(fmt::format("{}: {}.name: expected a string, found {}", origin, path,
                                   layer_name == entry.end() ? "nothing" : shown(*layer_name)));
    layer.name = layer_name->get<std::string>();
    layer.forward_s = non_negative_number(entry, "forward_s", origin, path + ".forward_s");
    layer.backward_s = non_negative_number(entry, "backward_s", origin, path + ".backward_s");
    layer.output_bytes = non_negative_number(entry, "output_bytes", origin, path + ".output_bytes");
    if (entry.contains("activation_bytes"))
      layer.activation_bytes = non_negative_number(entry, "activation_bytes", origin, path + ".activation_bytes");
    layer.parameter_bytes = non_negative_number(entry, "parameter_bytes", origin, path + ".parameter_bytes");
    profile.layers.push_back(std::move(layer));
  }
  return profile;
}

Profile read_profile_json(const std::string& path) { return parse_profile_json(read_text_file(path), path); }

std::string profile_to_json(const Profile& profile) {
  // One layer a line, fields in a fixed order: diffable and deterministic.
  std::string text = "{\n";
  text += fmt::format("  \"name\": {},\n", nlohmann::ordered_json(profile.name).dump());
  text += fmt::format("  \"micro_batch_size\": {},\n", profile.micro_batch_size);
  text += fmt::format("  \"input_bytes\": {},\n", number_text(profile.input_bytes));
  text += "  \"layers\": [";
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& layer = profile.layers[l];
    const std::string activation =
        layer.activation_bytes ? fmt::format(", \"activation_bytes\": {}", number_text(*layer.activation_bytes)) : "";
    text += fmt::format(
        "{}\n    {{\"name\": {}, \"forward_s\": {}, \"backward_s\": {}, \"output_bytes\": {}{}, \"parameter_bytes\": {}}}",
        l == 0 ? "" : ",", nlohmann::ordered_json(layer.name).dump(), number_text(layer.forward_s),
        number_text(layer.backward_s), number_text(layer.output_bytes), activation, number_text(layer.parameter_bytes));
  }
  text += profile.layers.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return text;
}

void check_profile(const Profile& profile, const std::string& origin) {
  if (profile.micro_batch_size < 1)
    throw InputError(
        fmt::format("{}: micro_batch_size: expected an integer >= 1, found {}", origin, profile.micro_batch_size));
  if (!std::isfinite(profile.input_bytes) || profile.input_bytes < 0)
    throw InputError(fmt::format("{}: input_bytes: expected a non-negative number, found {}", origin,
                                 format_exact(profile.input_bytes)));
  if (profile.layers.empty()) throw InputError(fmt::format("{}: layers: expected at least one layer, found none", origin));
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& layer = profile.layers[l];
    const std::pair<const char*, double> fields[] = {{"forward_s", layer.forward_s},
                                                     {"backward_s", layer.backward_s},
                                                     {"output_bytes", layer.output_bytes},
                                                     {"activation_bytes", layer.activation_bytes.value_or(0.0)},
                                                     {"parameter_bytes", layer.parameter_bytes}};
    for (const auto& [field, value] : fields)
      if (!std::isfinite(value) || value < 0)
        throw InputError(fmt::format("{}: layers[{}].{}: expected a non-negative number, found {}", origin, l, field,
                                     format_exact(value)));
  }
}

Profile read_profile(const std::string& path, std::optional<int> batch_size) {
  constexpr std::string_view kJsonSuffix = ".json";
  const bool is_json =
      path.size() >= kJsonSuffix.size() && path.compare(path.size() - kJsonSuffix.size(), kJsonSuffix.size(), kJsonSuffix) == 0;
  if (!is_json) return read_pipedream_graph(path, batch_size);
  Profile profile = read_profile_json(path);
  // A JSON profile states its own batch size; a different one would need a
  // scaling of the times that the tool does not invent (SEMANTICS.md).
  if (batch_size && *batch_size != profile.micro_batch_size)
    throw InputError(fmt::format(
        "{}: batch size: the profile was measured at micro_batch_size {}, found --batch-size {} (it only applies to "
        "PipeDream graph.txt files)",
        path, profile.micro_batch_size, *batch_size));
  check_profile(profile, path);
  return profile;
}

}  // namespace pipegrid
