#include "sweep/experiment.hpp"

#include <glob.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <toml++/toml.h>

#include "generators/cluster_platform.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "sweep/expression.hpp"
#include "sweep/results.hpp"
#include "core/suggest.hpp"

namespace pipegrid::sweep {
using pipegrid::Expression;
using pipegrid::Scope;
using pipegrid::Value;
}  // namespace pipegrid::sweep

namespace pipegrid::sweep {

Scalar Scalar::of_bool(bool value) {
  Scalar s;
  s.kind = Kind::Bool;
  s.boolean = value;
  return s;
}
Scalar Scalar::of_int(long long value) {
  Scalar s;
  s.kind = Kind::Int;
  s.integer = value;
  return s;
}
Scalar Scalar::of_real(double value) {
  Scalar s;
  s.kind = Kind::Real;
  s.real = value;
  return s;
}
Scalar Scalar::of_text(std::string value) {
  Scalar s;
  s.kind = Kind::Text;
  s.text = std::move(value);
  return s;
}

std::string Scalar::to_text() const {
  switch (kind) {
    case Kind::Absent: return "";
    case Kind::Bool: return boolean ? "true" : "false";
    case Kind::Int: return std::to_string(integer);
    case Kind::Real: return fmt::format("{}", real);
    case Kind::Text: return text;
  }
  return "";
}

bool Scalar::operator==(const Scalar& other) const {
  if (numeric() && other.numeric()) return number() == other.number();
  return kind == other.kind && to_text() == other.to_text();
}

std::string SourcePlace::text() const { return line > 0 ? fmt::format("{}:{}", file, line) : file; }

namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTopLevelKeys = {"schema", "name",   "title", "include", "labels", "requires", "command",
                                                "defaults", "axis", "derive", "where", "table",  "expect",   "report"};
const std::vector<std::string> kBaseKeys = {"schema", "include", "labels", "defaults", "derive"};
const std::vector<std::string> kAxisKeys = {"name", "values", "range", "geom", "glob", "from_plan", "top", "when"};
const std::vector<std::string> kCommands = {"simulate", "partition", "model"};

int line_of(const toml::node& node) { return static_cast<int>(node.source().begin.line); }

SourcePlace place_of(const std::string& file, const toml::node& node) { return {file, line_of(node)}; }

[[noreturn]] void fail(const SourcePlace& place, const std::string& message) {
  throw InputError(fmt::format("{}: {}", place.text(), message));
}

std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    default: return "a date or time";
  }
}

void unknown_key(const SourcePlace& place, const std::string& key, const std::vector<std::string>& known) {
  fail(place, fmt::format("unknown key '{}'{}", key, did_you_mean(key, known)));
}

/// A table's entries in the order the file writes them (toml::table sorts).
std::vector<std::pair<std::string, const toml::node*>> in_file_order(const toml::table& table) {
  std::vector<std::pair<std::string, const toml::node*>> entries;
  for (const auto& [key, node] : table) entries.emplace_back(std::string(key.str()), &node);
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const auto pa = a.second->source().begin, pb = b.second->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return entries;
}

std::optional<Scalar> scalar_of(const toml::node& node) {
  if (const auto* v = node.as_boolean()) return Scalar::of_bool(v->get());
  if (const auto* v = node.as_integer()) return Scalar::of_int(v->get());
  if (const auto* v = node.as_floating_point()) return Scalar::of_real(v->get());
  if (const auto* v = node.as_string()) return Scalar::of_text(v->get());
  return std::nullopt;
}

/// Reading state shared by the main file and its bases.
struct Reader {
  std::vector<ParameterSpec> parameters;
  bool any_key = false;  ///< the command is missing from this build: keys are not checked
  ParametersOf parameters_of;
  const InputQueries& queries;
  std::string main_file;
  std::vector<std::string> labels;
  std::vector<std::string> includes;

  const ParameterSpec* parameter(const std::string& name) const {
    for (const ParameterSpec& spec : parameters)
      if (spec.name == name) return &spec;
    return nullptr;
  }
  bool is_label(const std::string& name) const { return std::find(labels.begin(), labels.end(), name) != labels.end(); }
  std::vector<std::string> known_names() const {
    std::vector<std::string> names = labels;
    for (const ParameterSpec& spec : parameters) names.push_back(spec.name);
    return names;
  }
  void check_key(const SourcePlace& place, const std::string& key) const {
    if (any_key || parameter(key) || is_label(key)) return;
    const std::string suggestion = did_you_mean(key, known_names());
    fail(place, suggestion.empty() ? fmt::format("unknown key '{}' (neither a parameter nor declared in labels)", key)
                                   : fmt::format("unknown key '{}'{}", key, suggestion));
  }
};

/// The largest magnitude below which every integer is a double.
constexpr double kLargestExactInteger = 9007199254740992.0;  // 2^53

/// A number where the parameter takes an integer: an integral float (2.0)
/// becomes the integer (as a derived value does); any other float is an
/// error at `place` that says it is a float.
Scalar integral_where_integer(const Scalar& value, const ParameterSpec* spec, const std::string& key, const SourcePlace& place) {
  if (!spec || spec->kind != ParameterSpec::Kind::Int || value.kind != Scalar::Kind::Real) return value;
  const double v = value.real;
  if (!std::isfinite(v) || v != std::floor(v))
    fail(place, fmt::format("{}: expected an integer, found the float {} (an integral float such as 2.0 is read as 2)", key,
                            value.to_text()));
  if (std::fabs(v) >= kLargestExactInteger)
    fail(place, fmt::format("{}: expected an integer, found the float {}, beyond 2^53 where floats no longer hold every integer",
                            key, value.to_text()));
  return Scalar::of_int(static_cast<long long>(v));
}

/// A value as an experiment file (or --set) gives it, with the folder its
/// paths are relative to.
Setting make_setting(const Reader& reader, const std::string& key, const toml::node& node, const SourcePlace& place,
                     const std::string& base_dir) {
  Setting setting;
  const ParameterSpec* spec = reader.parameter(key);
  if (const auto* table = node.as_table()) {
    if (key != "platform")
      fail(place, fmt::format("{}: expected a value, found a table (only platform takes an inline table of cluster options)", key));
    std::string compact;
    for (const auto& [option, value] : in_file_order(*table)) {
      const std::optional<Scalar> scalar = scalar_of(*value);
      if (!scalar) fail(place_of(place.file, *value), fmt::format("platform.{}: expected a value, found {}", option, type_name(*value)));
      setting.inline_platform[option] = scalar->to_text();
      compact += (compact.empty() ? "" : ",") + option + "=" + scalar->to_text();
    }
    setting.value = Scalar::of_text("cluster:" + compact);
    return setting;
  }
  const std::optional<Scalar> scalar = scalar_of(node);
  if (!scalar) fail(place, fmt::format("{}: expected a value, found {}", key, type_name(node)));
  setting.value = integral_where_integer(*scalar, spec, key, place);
  if (spec && spec->kind == ParameterSpec::Kind::Path) {
    if (setting.value.kind != Scalar::Kind::Text) fail(place, fmt::format("{}: expected a file name (a string), found {}", key, type_name(node)));
    if (std::find(spec->literals.begin(), spec->literals.end(), setting.value.text) == spec->literals.end())
      setting.resolved_path = (fs::path(base_dir) / setting.value.text).lexically_normal().string();
  }
  return setting;
}

struct AxisValue {
  std::vector<std::pair<std::string, Setting>> settings;
  std::vector<std::string> label_parts;
};

struct Axis {
  std::string name;
  SourcePlace place;
  std::vector<AxisValue> values;
  std::optional<std::string> when;
  std::vector<std::string> keys;  ///< parameters/labels it sets, first appearance order
};

struct DeriveRule {
  std::string key, expression;
  SourcePlace place;
};

struct Experiment {
  std::vector<std::pair<std::string, Setting>> defaults;  ///< later wins
  std::vector<std::string> default_order;
  std::vector<Axis> axes;
  std::vector<DeriveRule> derive;
  std::vector<WhereReport> where;
  std::string name, title, command = "simulate";
  std::vector<std::string> requires_capabilities;
};

std::string file_label(const std::string& written, const std::vector<std::string>& all_written) {
  // The file's stem, or its folder when stems collide (graph.txt).
  const auto stem = [](const std::string& p) { return fs::path(p).stem().string(); };
  const auto folder = [](const std::string& p) { return fs::path(p).parent_path().filename().string(); };
  std::set<std::string> stems, folders;
  for (const std::string& other : all_written) {
    stems.insert(stem(other));
    folders.insert(folder(other));
  }
  if (stems.size() == all_written.size()) return stem(written);
  if (folders.size() == all_written.size()) return folder(written);
  return fs::path(written).replace_extension().string();
}

std::string value_label(const std::string& key, const Scalar& value) {
  if (value.kind == Scalar::Kind::Text) return value.text;
  if (value.kind == Scalar::Kind::Bool) return value.boolean ? key : "no-" + key;
  if (key == "micro_batches") return "M=" + value.to_text();
  return key + "=" + value.to_text();
}

void read_labels(Reader& reader, const toml::table& root, const std::string& file) {
  const toml::node* labels = root.get("labels");
  if (!labels) return;
  const auto* array = labels->as_array();
  if (!array) fail(place_of(file, *labels), fmt::format("labels: expected an array of names, found {}", type_name(*labels)));
  std::set<std::string> in_this_list;
  for (const toml::node& item : *array) {
    const auto* name = item.as_string();
    if (!name) fail(place_of(file, item), fmt::format("labels: expected a name (a string), found {}", type_name(item)));
    const std::string& label = name->get();
    if (label.empty()) fail(place_of(file, item), "labels: an empty name (a label names a column of runs.csv)");
    if (!in_this_list.insert(label).second) fail(place_of(file, item), fmt::format("labels: '{}' is listed twice", label));
    if (reader.parameter(label))
      fail(place_of(file, item), fmt::format("labels: '{}' is a parameter; labels name columns that are not parameters", label));
    if (is_reserved_column(label))
      fail(place_of(file, item), fmt::format("labels: '{}' is a column of the results; a label may not be called {}", label,
                                             reserved_column_list()));
    if (!reader.is_label(label)) reader.labels.push_back(label);
  }
}

void read_defaults(const Reader& reader, const toml::table& root, const std::string& file, Experiment& experiment) {
  const toml::node* defaults = root.get("defaults");
  if (!defaults) return;
  const auto* table = defaults->as_table();
  if (!table) fail(place_of(file, *defaults), fmt::format("defaults: expected a table, found {}", type_name(*defaults)));
  const std::string base_dir = fs::path(file).parent_path().string();
  for (const auto& [key, node] : in_file_order(*table)) {
    const SourcePlace place = place_of(file, *node);
    reader.check_key(place, key);
    experiment.defaults.emplace_back(key, make_setting(reader, key, *node, place, base_dir));
    if (std::find(experiment.default_order.begin(), experiment.default_order.end(), key) == experiment.default_order.end())
      experiment.default_order.push_back(key);
  }
}

void read_derive(const Reader& reader, const toml::table& root, const std::string& file, Experiment& experiment) {
  const toml::node* derive = root.get("derive");
  if (!derive) return;
  const auto* table = derive->as_table();
  if (!table) fail(place_of(file, *derive), fmt::format("derive: expected a table, found {}", type_name(*derive)));
  for (const auto& [key, node] : in_file_order(*table)) {
    const SourcePlace place = place_of(file, *node);
    reader.check_key(place, key);
    const auto* text = node->as_string();
    if (!text) fail(place, fmt::format("derive.{}: expected an expression (a string), found {}", key, type_name(*node)));
    Expression::parse(text->get(), place.text());  // syntax errors now, with their line
    experiment.derive.push_back({key, text->get(), place});
  }
}

void read_file_into(Reader& reader, const std::string& file, bool is_base, Experiment& experiment,
                    std::vector<std::string>& stack, std::string* text_out);

void read_includes(Reader& reader, const toml::table& root, const std::string& file, Experiment& experiment,
                   std::vector<std::string>& stack) {
  const toml::node* include = root.get("include");
  if (!include) return;
  const auto* array = include->as_array();
  if (!array) fail(place_of(file, *include), fmt::format("include: expected an array of file names, found {}", type_name(*include)));
  for (const toml::node& item : *array) {
    const auto* name = item.as_string();
    if (!name) fail(place_of(file, item), fmt::format("include: expected a file name (a string), found {}", type_name(item)));
    const std::string path = (fs::path(file).parent_path() / name->get()).lexically_normal().string();
    if (std::find(stack.begin(), stack.end(), path) != stack.end())
      fail(place_of(file, item), fmt::format("include: '{}' includes itself (through {})", name->get(), stack.back()));
    // Not a device or a folder: /dev/zero would be read forever.
    std::error_code error;
    if (!fs::is_regular_file(path, error))
      fail(place_of(file, item), fmt::format("include: '{}' ({}): {}", name->get(), path, fs::exists(path, error) ? "not a regular file" : "no such file"));
    read_file_into(reader, path, true, experiment, stack, nullptr);
  }
}

toml::table parse_toml(const std::string& file, const std::string& text) {
  try {
    return toml::parse(text, file);
  } catch (const toml::parse_error& error) {
    throw InputError(fmt::format("{}:{}: not valid TOML: {}", file, error.source().begin.line, error.description()));
  }
}

std::vector<Scalar> range_values(const toml::table& spec, const SourcePlace& place, bool geometric) {
  const char* what = geometric ? "geom" : "range";
  const std::vector<std::string> keys = geometric ? std::vector<std::string>{"from", "to", "factor"}
                                                  : std::vector<std::string>{"from", "to", "step"};
  std::map<std::string, Scalar> numbers;
  for (const auto& [key, node] : in_file_order(spec)) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) unknown_key(place_of(place.file, *node), fmt::format("{}.{}", what, key), keys);
    const std::optional<Scalar> value = scalar_of(*node);
    if (!value || !value->numeric())
      fail(place_of(place.file, *node), fmt::format("{}.{}: expected a number, found {}", what, key, type_name(*node)));
    if (!std::isfinite(value->number()))
      fail(place_of(place.file, *node), fmt::format("{}.{}: expected a finite number, found {}", what, key, value->to_text()));
    numbers[key] = *value;
  }
  for (const char* required : {"from", "to"})
    if (!numbers.count(required)) fail(place, fmt::format("{}: '{}' is missing (expected {{from, to, {}}})", what, required, keys[2]));
  const Scalar from = numbers["from"], to = numbers["to"];
  const Scalar step = numbers.count(keys[2]) ? numbers[keys[2]] : Scalar::of_int(geometric ? 2 : 1);
  const bool integers = from.kind == Scalar::Kind::Int && to.kind == Scalar::Kind::Int && step.kind == Scalar::Kind::Int;
  std::vector<Scalar> values;
  constexpr std::size_t kMaxValues = 100000;
  if (geometric) {
    if (from.number() <= 0) fail(place, fmt::format("geom.from: expected a number > 0, found {}", from.to_text()));
    if (step.number() <= 1) fail(place, fmt::format("geom.factor: expected a number > 1, found {}", step.to_text()));
    if (integers) {
      for (long long v = from.integer; v <= to.integer; v *= step.integer) {
        values.push_back(Scalar::of_int(v));
        if (v > to.integer / step.integer) break;
      }
    } else {
      for (int k = 0;; ++k) {
        const double v = from.number() * std::pow(step.number(), k);
        if (v > to.number() * (1 + 1e-12) || values.size() > kMaxValues) break;
        values.push_back(Scalar::of_real(v));
      }
    }
  } else {
    if (step.number() <= 0) fail(place, fmt::format("range.step: expected a number > 0, found {}", step.to_text()));
    const double count = std::floor((to.number() - from.number()) / step.number() * (1 + 1e-12)) + 1;
    if (count > static_cast<double>(kMaxValues)) fail(place, fmt::format("range: {} values, more than {} per axis", count, kMaxValues));
    for (long long k = 0; k < static_cast<long long>(count); ++k) {
      long long offset = 0, value = 0;
      if (integers && (__builtin_mul_overflow(k, step.integer, &offset) || __builtin_add_overflow(from.integer, offset, &value)))
        fail(place, fmt::format("range: values beyond the 64-bit integers (from {} to {} by {})", from.to_text(), to.to_text(), step.to_text()));
      if (integers) values.push_back(Scalar::of_int(value));
      else values.push_back(Scalar::of_real(from.number() + static_cast<double>(k) * step.number()));
    }
  }
  if (values.size() > kMaxValues) fail(place, fmt::format("{}: more than {} values", what, kMaxValues));
  if (values.empty()) fail(place, fmt::format("{}: gives no value (from {} is beyond to {})", what, from.to_text(), to.to_text()));
  return values;
}

/// The files a glob pattern matches, written as the pattern is: relative to
/// the experiment's folder for a relative pattern, absolute for an absolute
/// one (the same values whatever path the experiment was given by). Folders
/// are not values.
std::vector<std::string> glob_values(const std::string& pattern, const std::string& file, const SourcePlace& place) {
  const std::string base_dir = fs::path(file).parent_path().string();
  const bool absolute = fs::path(pattern).is_absolute();
  const std::string full = absolute ? pattern : (fs::path(base_dir) / pattern).string();
  glob_t matches{};
  const int status = glob(full.c_str(), 0, nullptr, &matches);
  std::vector<std::string> values;
  std::size_t folders = 0;
  if (status == 0)
    for (std::size_t i = 0; i < matches.gl_pathc; ++i) {
      const fs::path match(matches.gl_pathv[i]);
      std::error_code error;
      if (fs::is_directory(match, error)) {
        ++folders;
        continue;
      }
      values.push_back(absolute ? match.lexically_normal().string()
                                : match.lexically_relative(base_dir.empty() ? "." : base_dir).string());
    }
  globfree(&matches);
  const std::string relative_to = absolute ? "" : fmt::format(" (relative to {})", base_dir.empty() ? "." : base_dir);
  if (values.empty() && folders > 0)
    fail(place, fmt::format("glob '{}'{}: matches only folders ({}), no file; a glob's values are files", pattern, relative_to, folders));
  if (values.empty()) fail(place, fmt::format("glob '{}'{}: matches no file", pattern, relative_to));
  std::sort(values.begin(), values.end());
  return values;
}

void read_axes(const Reader& reader, const toml::table& root, const std::string& file, Experiment& experiment) {
  const toml::node* axes = root.get("axis");
  if (!axes) return;
  const auto* array = axes->as_array();
  if (!array) fail(place_of(file, *axes), fmt::format("axis: expected an array of tables ([[axis]]), found {}", type_name(*axes)));
  const std::string base_dir = fs::path(file).parent_path().string();
  std::map<std::string, std::string> set_by;  // parameter -> axis
  for (const toml::node& axis_node : *array) {
    const auto* table = axis_node.as_table();
    const SourcePlace axis_place = place_of(file, axis_node);
    if (!table) fail(axis_place, fmt::format("axis: expected a table, found {}", type_name(axis_node)));
    Axis axis;
    axis.place = axis_place;
    int generators = 0;
    for (const auto& [key, node] : in_file_order(*table)) {
      if (std::find(kAxisKeys.begin(), kAxisKeys.end(), key) == kAxisKeys.end())
        unknown_key(place_of(file, *node), key, kAxisKeys);
      if (key == "values" || key == "range" || key == "geom" || key == "glob" || key == "from_plan") ++generators;
    }
    const toml::node* name = table->get("name");
    if (!name || !name->as_string()) fail(axis_place, "axis: 'name' is missing (expected a string)");
    axis.name = name->as_string()->get();
    axis.place = place_of(file, *name);
    if (generators != 1)
      fail(axis_place, fmt::format("axis '{}': expected exactly one of values, range, geom, glob or from_plan, found {}", axis.name, generators));
    if (table->get("top") && !table->get("from_plan"))
      fail(place_of(file, *table->get("top")), fmt::format("axis '{}': top: only with from_plan", axis.name));
    if (const toml::node* when = table->get("when")) {
      if (!when->as_string()) fail(place_of(file, *when), fmt::format("axis '{}': when: expected an expression (a string), found {}", axis.name, type_name(*when)));
      Expression::parse(when->as_string()->get(), place_of(file, *when).text());
      axis.when = when->as_string()->get();
    }
    const auto add_key = [&](const std::string& key, const SourcePlace& place) {
      if (std::find(axis.keys.begin(), axis.keys.end(), key) != axis.keys.end()) return;
      if (const auto found = set_by.find(key); found != set_by.end())
        fail(place, fmt::format("axis '{}' sets '{}', which axis '{}' sets already: one axis per parameter", axis.name, key, found->second));
      set_by[key] = axis.name;
      axis.keys.push_back(key);
    };
    if (const toml::node* plan = table->get("from_plan")) {
      // A `pipegrid plan --output-json` result: its first `top` fitting
      // layouts (all of them by default), each a bundle of megatron_args
      // and, under the axis's name (a label), the layout's name.
      const SourcePlace place = place_of(file, *plan);
      if (!plan->as_string()) fail(place, fmt::format("axis '{}': from_plan: expected a file name (a string), found {}", axis.name, type_name(*plan)));
      long long top = std::numeric_limits<long long>::max();
      if (const toml::node* top_node = table->get("top")) {
        if (!top_node->as_integer() || top_node->as_integer()->get() < 1)
          fail(place_of(file, *top_node), fmt::format("axis '{}': top: expected an integer >= 1", axis.name));
        top = top_node->as_integer()->get();
      }
      const std::string path = (fs::path(base_dir) / plan->as_string()->get()).lexically_normal().string();
      nlohmann::json result;
      try {
        result = nlohmann::json::parse(read_text_file(path));
      } catch (const nlohmann::json::exception& error) {
        fail(place, fmt::format("axis '{}': from_plan '{}': not JSON ({})", axis.name, path, error.what()));
      }
      if (!result.is_object() || !result.contains("ranking") || !result.at("ranking").is_array())
        fail(place, fmt::format("axis '{}': from_plan '{}': expected the JSON of `pipegrid plan --output-json` (a \"ranking\" array)", axis.name, path));
      reader.check_key(axis.place, axis.name);
      reader.check_key(place, "megatron_args");
      add_key(axis.name, place);
      add_key("megatron_args", place);
      for (const nlohmann::json& layout : result.at("ranking")) {
        if (static_cast<long long>(axis.values.size()) >= top) break;
        if (!layout.is_object() || !layout.value("fits", false)) continue;
        if (!layout.contains("layout") || !layout.at("layout").is_string() || !layout.contains("megatron_args") ||
            !layout.at("megatron_args").is_string())
          fail(place, fmt::format("axis '{}': from_plan '{}': a ranking entry without a \"layout\" and \"megatron_args\" string", axis.name, path));
        AxisValue value;
        Setting name_setting, arguments_setting;
        name_setting.value = Scalar::of_text(layout.at("layout").get<std::string>() + " " + layout.value("schedule", std::string()));
        arguments_setting.value = Scalar::of_text(layout.at("megatron_args").get<std::string>());
        value.settings.emplace_back(axis.name, name_setting);
        value.settings.emplace_back("megatron_args", arguments_setting);
        axis.values.push_back(std::move(value));
      }
      if (axis.values.empty()) fail(place, fmt::format("axis '{}': from_plan '{}': no layout that fits", axis.name, path));
    } else if (const toml::node* values = table->get("values")) {
      const auto* list = values->as_array();
      if (!list || list->empty()) fail(place_of(file, *values), fmt::format("axis '{}': values: expected a non-empty array", axis.name));
      for (const toml::node& item : *list) {
        const SourcePlace place = place_of(file, item);
        const auto* bundle = item.as_table();
        // On the platform axis, a table of `platform cluster` options is a
        // platform, not a bundle.
        const bool inline_platform = bundle && axis.name == "platform" && !bundle->empty() &&
                                     std::all_of(bundle->begin(), bundle->end(), [&](const auto& entry) {
                                       std::string key(entry.first.str());
                                       std::replace(key.begin(), key.end(), '-', '_');
                                       const auto& names = cluster_option_names();
                                       return std::find(names.begin(), names.end(), key) != names.end();
                                     });
        if (!bundle || inline_platform) {
          reader.check_key(axis.place, axis.name);
          if (item.as_array()) fail(place, fmt::format("axis '{}': expected a value or a bundle (an inline table), found an array", axis.name));
          add_key(axis.name, place);
          AxisValue value;
          value.settings.emplace_back(axis.name, make_setting(reader, axis.name, item, place, base_dir));
          axis.values.push_back(std::move(value));
          continue;
        }
        // A bundle: one value sets several keys; a list inside expands.
        if (bundle->empty()) fail(place, fmt::format("axis '{}': an empty bundle {{}} sets nothing", axis.name));
        std::vector<AxisValue> expanded(1);
        for (const auto& [key, node] : in_file_order(*bundle)) {
          const SourcePlace key_place = place_of(file, *node);
          reader.check_key(key_place, key);
          add_key(key, key_place);
          if (const auto* options = node->as_array()) {
            if (options->empty()) fail(key_place, fmt::format("axis '{}': {}: an empty list gives no run", axis.name, key));
            std::vector<AxisValue> next;
            for (const AxisValue& partial : expanded)
              for (const toml::node& option : *options) {
                AxisValue more = partial;
                more.settings.emplace_back(key, make_setting(reader, key, option, place_of(file, option), base_dir));
                more.label_parts.push_back(key);
                next.push_back(std::move(more));
              }
            expanded = std::move(next);
          } else {
            for (AxisValue& partial : expanded) partial.settings.emplace_back(key, make_setting(reader, key, *node, key_place, base_dir));
          }
        }
        for (AxisValue& value : expanded) axis.values.push_back(std::move(value));
      }
    } else {
      reader.check_key(axis.place, axis.name);
      add_key(axis.name, axis.place);
      std::vector<Scalar> scalars;
      if (const toml::node* range = table->get("range")) {
        if (!range->as_table()) fail(place_of(file, *range), fmt::format("axis '{}': range: expected {{from, to, step}}", axis.name));
        scalars = range_values(*range->as_table(), place_of(file, *range), false);
      } else if (const toml::node* geom = table->get("geom")) {
        if (!geom->as_table()) fail(place_of(file, *geom), fmt::format("axis '{}': geom: expected {{from, to, factor}}", axis.name));
        scalars = range_values(*geom->as_table(), place_of(file, *geom), true);
      } else {
        const toml::node* pattern = table->get("glob");
        if (!pattern->as_string()) fail(place_of(file, *pattern), fmt::format("axis '{}': glob: expected a pattern (a string)", axis.name));
        for (const std::string& path : glob_values(pattern->as_string()->get(), file, place_of(file, *pattern)))
          scalars.push_back(Scalar::of_text(path));
      }
      const toml::node* generator = table->get("range") ? table->get("range") : table->get("geom") ? table->get("geom") : table->get("glob");
      for (const Scalar& scalar : scalars) {
        AxisValue value;
        Setting setting;
        const ParameterSpec* spec = reader.parameter(axis.name);
        setting.value = integral_where_integer(scalar, spec, axis.name, place_of(file, *generator));
        if (spec && spec->kind == ParameterSpec::Kind::Path && scalar.kind == Scalar::Kind::Text)
          setting.resolved_path = (fs::path(base_dir) / scalar.text).lexically_normal().string();
        value.settings.emplace_back(axis.name, setting);
        axis.values.push_back(std::move(value));
      }
    }
    experiment.axes.push_back(std::move(axis));
  }
}

void read_where(const toml::table& root, const std::string& file, Experiment& experiment) {
  const toml::node* where = root.get("where");
  if (!where) return;
  const auto* array = where->as_array();
  if (!array) fail(place_of(file, *where), fmt::format("where: expected an array of tables ([[where]]), found {}", type_name(*where)));
  for (const toml::node& item : *array) {
    const auto* table = item.as_table();
    if (!table) fail(place_of(file, item), fmt::format("where: expected a table with rule and why, found {}", type_name(item)));
    WhereReport rule;
    rule.place = place_of(file, item);
    for (const auto& [key, node] : in_file_order(*table)) {
      if (key != "rule" && key != "why") unknown_key(place_of(file, *node), key, {"rule", "why"});
      if (!node->as_string()) fail(place_of(file, *node), fmt::format("where.{}: expected a string, found {}", key, type_name(*node)));
      (key == "rule" ? rule.rule : rule.why) = node->as_string()->get();
      if (key == "rule") rule.place = place_of(file, *node);
    }
    if (rule.rule.empty()) fail(rule.place, "where: 'rule' is missing (an expression that keeps a run when true)");
    Expression::parse(rule.rule, rule.place.text());
    experiment.where.push_back(rule);
  }
}

std::string read_string_key(const toml::table& root, const std::string& file, const char* key) {
  const toml::node* node = root.get(key);
  if (!node) return "";
  if (!node->as_string()) fail(place_of(file, *node), fmt::format("{}: expected a string, found {}", key, type_name(*node)));
  return node->as_string()->get();
}

void read_file_into(Reader& reader, const std::string& file, bool is_base, Experiment& experiment,
                    std::vector<std::string>& stack, std::string* text_out) {
  const std::string text = read_text_file(file);
  if (text_out) *text_out = text;
  const toml::table root = parse_toml(file, text);
  const std::vector<std::string>& allowed = is_base ? kBaseKeys : kTopLevelKeys;
  for (const auto& [key, node] : in_file_order(root))
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      if (is_base && std::find(kTopLevelKeys.begin(), kTopLevelKeys.end(), key) != kTopLevelKeys.end())
        fail(place_of(file, *node), fmt::format("'{}' is not allowed in an included base (bases hold schema, include, labels, defaults, derive)", key));
      unknown_key(place_of(file, *node), key, allowed);
    }
  if (!is_base) {
    if (const toml::node* command = root.get("command")) {
      experiment.command = read_string_key(root, file, "command");
      if (std::find(kCommands.begin(), kCommands.end(), experiment.command) == kCommands.end())
        fail(place_of(file, *command), fmt::format("command: expected simulate, partition or model, found '{}'", experiment.command));
    }
    if (std::optional<std::vector<ParameterSpec>> parameters = reader.parameters_of(experiment.command)) {
      reader.parameters = std::move(*parameters);
    } else {
      reader.any_key = true;
      experiment.requires_capabilities.push_back(experiment.command + "-command");
    }
  }
  if (const toml::node* schema = root.get("schema")) {
    if (!schema->as_integer() || schema->as_integer()->get() != 1)
      fail(place_of(file, *schema), "schema: expected 1, the only version of the experiment format");
  } else if (!is_base) {
    fail({file, 1}, "schema: missing (expected `schema = 1` at the top)");
  }
  stack.push_back(file);
  if (is_base) reader.includes.push_back(file);
  // Labels first: a base's defaults may set a label the including file declares.
  read_labels(reader, root, file);
  read_includes(reader, root, file, experiment, stack);
  read_defaults(reader, root, file, experiment);
  read_derive(reader, root, file, experiment);
  if (!is_base) {
    experiment.name = read_string_key(root, file, "name");
    if (experiment.name.empty()) experiment.name = fs::path(file).stem().string();
    experiment.title = read_string_key(root, file, "title");
    if (const toml::node* requires_node = root.get("requires")) {
      const auto* array = requires_node->as_array();
      if (!array) fail(place_of(file, *requires_node), "requires: expected an array of capability names");
      for (const toml::node& item : *array) {
        if (!item.as_string()) fail(place_of(file, item), "requires: expected a capability name (a string)");
        experiment.requires_capabilities.push_back(item.as_string()->get());
      }
    }
    read_axes(reader, root, file, experiment);
    read_where(root, file, experiment);
  }
  stack.pop_back();
}

/// The parameters and labels of one run while it is being expanded.
using Env = std::map<std::string, Setting>;

/// Looks names up in a run's settings; hosts() and layers() read inputs.
class EnvScope : public Scope {
 public:
  EnvScope(const Env& env, const InputQueries& queries, const std::string& experiment_dir)
      : env_(env), queries_(queries), experiment_dir_(experiment_dir) {}
  Value lookup(std::string_view name) const override {
    const auto found = env_.find(std::string(name));
    if (found == env_.end()) return std::monostate{};
    const Scalar& s = found->second.value;
    switch (s.kind) {
      case Scalar::Kind::Bool: return s.boolean;
      case Scalar::Kind::Int: return static_cast<double>(s.integer);
      case Scalar::Kind::Real: return s.real;
      case Scalar::Kind::Text: return s.text;
      default: return std::monostate{};
    }
  }
  Value call(std::string_view function, const std::vector<Value>& arguments) const override {
    if (function != "hosts" && function != "layers") return Scope::call(function, arguments);
    const std::string parameter = function == "hosts" ? "platform" : "profile";
    if (arguments.size() != 1 || !std::holds_alternative<std::string>(arguments[0]))
      throw InputError(fmt::format("{}(): expected one argument, the {}", function, parameter));
    const std::string& text = std::get<std::string>(arguments[0]);
    Setting setting;
    if (const auto found = env_.find(parameter); found != env_.end() && found->second.value.text == text) {
      setting = found->second;
    } else {
      setting.value = Scalar::of_text(text);
      setting.resolved_path = (fs::path(experiment_dir_) / text).lexically_normal().string();
    }
    const auto& query = function == "hosts" ? queries_.hosts : queries_.layers;
    if (!query) throw InputError(fmt::format("{}(): not available for this command", function));
    return static_cast<double>(query(setting));
  }

 private:
  const Env& env_;
  const InputQueries& queries_;
  std::string experiment_dir_;
};

Scalar to_scalar(const Value& value) {
  if (std::holds_alternative<bool>(value)) return Scalar::of_bool(std::get<bool>(value));
  if (std::holds_alternative<double>(value)) return Scalar::of_real(std::get<double>(value));
  if (std::holds_alternative<std::string>(value)) return Scalar::of_text(std::get<std::string>(value));
  return Scalar{};
}

bool truth_of(const Value& value, const std::string& expression, const SourcePlace& place) {
  if (!std::holds_alternative<bool>(value))
    throw InputError(fmt::format("{}: '{}': expected a condition (true or false), found {}", place.text(), expression, describe(value)));
  return std::get<bool>(value);
}

Value evaluate_at(const std::string& expression, const SourcePlace& place, const EnvScope& scope, const std::string& run) {
  try {
    return Expression::parse(expression, place.text()).evaluate(scope);
  } catch (const InputError& error) {
    throw InputError(fmt::format("{} (run {})", error.what(), run));
  }
}

/// A derived or --set value as the parameter's kind wants it.
Scalar coerce(const Scalar& value, const ParameterSpec* spec, const std::string& key, const std::string& where) {
  if (!spec || !value.numeric()) return value;
  if (spec->kind == ParameterSpec::Kind::Int) {
    const double v = value.number();
    if (v != std::floor(v) || std::fabs(v) >= kLargestExactInteger)
      throw InputError(fmt::format("{}: {} must be an integer, and comes out {}", where, key, value.to_text()));
    return Scalar::of_int(static_cast<long long>(v));
  }
  if (spec->kind == ParameterSpec::Kind::Real) return Scalar::of_real(value.number());
  return value;
}

Scalar parse_set_value(const std::string& text) {
  if (text == "true") return Scalar::of_bool(true);
  if (text == "false") return Scalar::of_bool(false);
  char* end = nullptr;
  errno = 0;
  const long long integer = std::strtoll(text.c_str(), &end, 10);
  if (!text.empty() && end && *end == '\0' && errno == 0) return Scalar::of_int(integer);
  const double real = std::strtod(text.c_str(), &end);
  if (!text.empty() && end && *end == '\0' && std::isfinite(real)) return Scalar::of_real(real);
  return Scalar::of_text(text);
}

/// Checks each parameter's value against its kind; returns the first problem.
void check_kinds(const Env& env, const std::vector<ParameterSpec>& parameters, const std::string& run) {
  for (const ParameterSpec& spec : parameters) {
    const auto found = env.find(spec.name);
    if (found == env.end() || found->second.value.absent()) continue;
    const Scalar& value = found->second.value;
    const char* expected = nullptr;
    switch (spec.kind) {
      case ParameterSpec::Kind::Flag: if (value.kind != Scalar::Kind::Bool) expected = "true or false"; break;
      case ParameterSpec::Kind::Int: if (value.kind != Scalar::Kind::Int) expected = "an integer"; break;
      case ParameterSpec::Kind::Real: if (!value.numeric()) expected = "a number"; break;
      case ParameterSpec::Kind::Path:
      case ParameterSpec::Kind::Text: if (value.kind == Scalar::Kind::Bool) expected = "a value (not true/false)"; break;
    }
    if (expected)
      throw InputError(fmt::format("run {}: {}: expected {}, found {}", run, spec.name, expected,
                                   value.kind == Scalar::Kind::Text ? "'" + value.text + "'" : value.to_text()));
  }
}

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &length, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("OpenSSL: SHA-256 failed");
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

std::string run_key_of(const std::string& canonical_text) { return sha256_hex(canonical_text).substr(0, 16); }

std::string canonical_run_text(const std::string& command, const std::map<std::string, Setting>& settings,
                               const std::vector<ParameterSpec>& parameters, const InputQueries& queries) {
  std::string text = fmt::format("pipegrid-run\ncommand={}\nresults_version={}\n", command, kResultsVersion);
  for (const auto& entry : settings) {  // std::map: sorted by name
    const std::string& name = entry.first;
    const Setting& setting = entry.second;
    const bool is_parameter = std::any_of(parameters.begin(), parameters.end(), [&](const ParameterSpec& p) { return p.name == name; });
    if (!is_parameter || setting.value.absent()) continue;
    if (!setting.resolved_path.empty() || !setting.inline_platform.empty())
      text += fmt::format("{}=sha256:{}\n", name, queries.content_hash(setting));
    else
      // Numbers by value (16 and 16.0 are one run), text and booleans tagged.
      text += fmt::format("{}={}\n", name,
                          setting.value.numeric() ? "n:" + fmt::format("{}", setting.value.number())
                                                  : (setting.value.kind == Scalar::Kind::Bool ? "b:" : "s:") + setting.value.to_text());
  }
  return text;
}

ExperimentPlan plan_experiment(const std::string& file, const ParametersOf& parameters_of,
                               const std::vector<std::string>& capabilities, const PlanOptions& options,
                               const InputQueries& queries) {
  Reader reader{{}, false, parameters_of, queries, file, {}, {}};
  Experiment experiment;
  ExperimentPlan plan;
  plan.file = file;
  std::vector<std::string> stack;
  read_file_into(reader, file, false, experiment, stack, &plan.experiment_text);
  plan.name = experiment.name;
  plan.title = experiment.title;
  plan.command = experiment.command;
  plan.includes = reader.includes;
  plan.requires_capabilities = experiment.requires_capabilities;
  plan.parameters = reader.parameters;
  plan.sets = options.sets;
  plan.where = options.where;
  const std::vector<ParameterSpec>& parameters = reader.parameters;
  for (const std::string& capability : experiment.requires_capabilities)
    if (std::find(capabilities.begin(), capabilities.end(), capability) == capabilities.end() &&
        std::find(plan.missing_capabilities.begin(), plan.missing_capabilities.end(), capability) == plan.missing_capabilities.end())
      plan.missing_capabilities.push_back(capability);
  const std::string experiment_dir = fs::path(file).parent_path().string();

  // A key is set by an axis or derived, not both.
  for (const DeriveRule& rule : experiment.derive)
    for (const Axis& axis : experiment.axes)
      if (std::find(axis.keys.begin(), axis.keys.end(), rule.key) != axis.keys.end())
        fail(rule.place, fmt::format("derive.{}: axis '{}' ({}) sets '{}' too; a key is either an axis's or derived, not both",
                                     rule.key, axis.name, axis.place.text(), rule.key));

  // --set: replaces an axis that sets the key, a derived key, or a default.
  for (const std::string& assignment : options.sets) {
    const std::size_t equals = assignment.find('=');
    if (equals == std::string::npos || equals == 0)
      throw InputError(fmt::format("--set '{}': expected KEY=VALUE", assignment));
    const std::string key = assignment.substr(0, equals);
    reader.check_key({"--set", 0}, key);
    Setting setting;
    setting.value = coerce(parse_set_value(assignment.substr(equals + 1)), reader.parameter(key), key, "--set " + assignment);
    if (const ParameterSpec* spec = reader.parameter(key); spec && spec->kind == ParameterSpec::Kind::Path &&
        std::find(spec->literals.begin(), spec->literals.end(), setting.value.text) == spec->literals.end())
      setting.resolved_path = (fs::path(options.working_dir) / setting.value.text).lexically_normal().string();
    bool replaced = false;
    for (Axis& axis : experiment.axes) {
      if (std::find(axis.keys.begin(), axis.keys.end(), key) == axis.keys.end()) continue;
      replaced = true;
      if (axis.keys.size() == 1) {
        AxisValue value;
        value.settings.emplace_back(key, setting);
        const std::size_t replaced_values = axis.values.size();
        axis.values = {value};
        plan.notes.push_back(fmt::format("--set {} replaces axis '{}' ({} value{} -> 1)", assignment, axis.name,
                                         replaced_values, replaced_values == 1 ? "" : "s"));
      } else {
        for (AxisValue& value : axis.values)
          for (auto& [name, existing] : value.settings)
            if (name == key) existing = setting;
        plan.notes.push_back(fmt::format("--set {} replaces '{}' in every value of axis '{}'", assignment, key, axis.name));
      }
    }
    for (auto rule = experiment.derive.begin(); rule != experiment.derive.end();)
      if (rule->key == key) {
        plan.notes.push_back(fmt::format("--set {} replaces derive.{} = '{}' ({})", assignment, key, rule->expression, rule->place.text()));
        rule = experiment.derive.erase(rule);
      } else {
        ++rule;
      }
    if (!replaced) {
      experiment.defaults.emplace_back(key, setting);
      if (std::find(experiment.default_order.begin(), experiment.default_order.end(), key) == experiment.default_order.end())
        experiment.default_order.push_back(key);
    }
  }

  // Columns: axes' keys in file order, then defaults and derived keys.
  for (const Axis& axis : experiment.axes) {
    plan.axis_names.push_back(axis.name);
    for (const std::string& key : axis.keys)
      if (std::find(plan.columns.begin(), plan.columns.end(), key) == plan.columns.end()) plan.columns.push_back(key);
  }
  for (const std::string& key : experiment.default_order)
    if (std::find(plan.columns.begin(), plan.columns.end(), key) == plan.columns.end()) plan.columns.push_back(key);
  for (const DeriveRule& rule : experiment.derive)
    if (std::find(plan.columns.begin(), plan.columns.end(), rule.key) == plan.columns.end()) plan.columns.push_back(rule.key);

  // Per-axis value labels (file stems for paths).
  std::vector<std::vector<std::string>> value_labels(experiment.axes.size());
  for (std::size_t a = 0; a < experiment.axes.size(); ++a) {
    const Axis& axis = experiment.axes[a];
    std::vector<std::string> written;
    const ParameterSpec* spec = reader.parameter(axis.name);
    const bool paths = spec && spec->kind == ParameterSpec::Kind::Path;
    for (const AxisValue& value : axis.values) written.push_back(value.settings.front().second.value.to_text());
    AxisReport report{axis.name, axis.keys, {}, axis.when};
    for (const AxisValue& value : axis.values) {
      std::vector<std::string> parts;
      if (value.settings.size() == 1 && value.settings.front().first == axis.name) {
        const Setting& setting = value.settings.front().second;
        if (!setting.inline_platform.empty()) {
          const auto get = [&](const char* k) { const auto f = setting.inline_platform.find(k); return f == setting.inline_platform.end() ? std::string("?") : f->second; };
          parts.push_back(fmt::format("{}x{}-{}", get("servers"), get("gpus_per_server"), get("device")));
        } else if (paths && !setting.resolved_path.empty()) {
          parts.push_back(file_label(setting.value.text, written));
        } else {
          parts.push_back(value_label(axis.name, setting.value));
        }
      } else {
        for (const auto& [key, setting] : value.settings)
          if (key == axis.name) parts.push_back(value_label(key, setting.value));
        for (const std::string& key : value.label_parts)
          for (const auto& [name, setting] : value.settings)
            if (name == key && key != axis.name) parts.push_back(value_label(key, setting.value));
        if (parts.empty())
          for (const auto& [key, setting] : value.settings) parts.push_back(value_label(key, setting.value));
      }
      std::string label;
      for (const std::string& part : parts) label += (label.empty() ? "" : "|") + part;
      value_labels[a].push_back(label);
      report.values.push_back(label);
    }
    plan.axes.push_back(report);
  }

  Env defaults;
  for (const auto& [key, setting] : experiment.defaults) defaults[key] = setting;

  // The product of the axes, the first outermost; a `when` that is false
  // leaves its axis out of the run (one branch, its keys absent).
  std::vector<std::pair<Env, std::string>> expanded;
  constexpr std::size_t kMaxRuns = 1000000;
  std::function<void(std::size_t, Env&, std::string&)> expand = [&](std::size_t a, Env& env, std::string& label) {
    if (expanded.size() > kMaxRuns) throw InputError(fmt::format("{}: the axes give more than {} runs", file, kMaxRuns));
    if (a == experiment.axes.size()) {
      expanded.emplace_back(env, label);
      return;
    }
    const Axis& axis = experiment.axes[a];
    if (axis.when) {
      const EnvScope scope(env, queries, experiment_dir);
      const SourcePlace place = axis.place;
      if (!truth_of(evaluate_at(*axis.when, place, scope, label.empty() ? "(first axes)" : label), *axis.when, place)) {
        Env without = env;
        for (const std::string& key : axis.keys) without.erase(key);
        expand(a + 1, without, label);
        return;
      }
    }
    for (std::size_t v = 0; v < axis.values.size(); ++v) {
      Env next = env;
      for (const auto& [key, setting] : axis.values[v].settings) next[key] = setting;
      std::string next_label = label.empty() ? value_labels[a][v] : label + "|" + value_labels[a][v];
      expand(a + 1, next, next_label);
    }
  };
  Env start = defaults;
  std::string start_label;
  expand(0, start, start_label);
  plan.runs_before_where = static_cast<int>(expanded.size());

  plan.where_rules = experiment.where;
  std::optional<Expression> user_where;
  if (!options.where.empty()) user_where = Expression::parse(options.where, "--where");
  std::set<std::string> labels_seen;
  std::vector<PlannedRun> kept;
  for (auto& [env, label] : expanded) {
    const std::string run_name = label.empty() ? plan.name : label;
    for (const DeriveRule& rule : experiment.derive) {
      const EnvScope scope(env, queries, experiment_dir);
      const Value value = evaluate_at(rule.expression, rule.place, scope, run_name);
      Setting setting;
      setting.value = coerce(to_scalar(value), reader.parameter(rule.key), rule.key,
                             fmt::format("{}: derive.{} = '{}' for run {}", rule.place.text(), rule.key, rule.expression, run_name));
      env[rule.key] = setting;
    }
    bool keep = true;
    for (WhereReport& rule : plan.where_rules) {
      const EnvScope scope(env, queries, experiment_dir);
      if (!truth_of(evaluate_at(rule.rule, rule.place, scope, run_name), rule.rule, rule.place)) {
        ++rule.dropped;
        keep = false;
        break;
      }
    }
    if (!keep) continue;
    PlannedRun run;
    run.run_index = static_cast<int>(kept.size());
    run.label = run_name;
    run.settings = std::move(env);
    kept.push_back(std::move(run));
  }
  plan.runs_after_file_where = static_cast<int>(kept.size());
  // Labels unique within the plan: repeated ones get their run index.
  std::map<std::string, int> label_count;
  for (const PlannedRun& run : kept) ++label_count[run.label];
  std::set<std::string> input_files;
  for (PlannedRun& run : kept)
    if (label_count[run.label] > 1) run.label += fmt::format("#{}", run.run_index);
  // A suffixed label may meet a label written that way ('a#1'): suffix again.
  std::set<std::string> unique_labels;
  for (PlannedRun& run : kept)
    while (!unique_labels.insert(run.label).second) run.label += fmt::format("#{}", run.run_index);
  for (PlannedRun& run : kept) {
    check_kinds(run.settings, parameters, run.label);
    for (const auto& [name, setting] : run.settings)
      if (!setting.resolved_path.empty()) input_files.insert(setting.resolved_path);
    if (user_where) {
      const EnvScope scope(run.settings, queries, experiment_dir);
      if (!truth_of(evaluate_at(options.where, {"--where", 0}, scope, run.label), options.where, {"--where", 0})) continue;
    }
    run.key = run_key_of(canonical_run_text(plan.command, run.settings, parameters, queries));
    plan.runs.push_back(std::move(run));
  }
  plan.input_files.assign(input_files.begin(), input_files.end());
  return plan;
}

namespace {

/// The most shards --shard I/N and --shard auto accept.
constexpr long long kMaxShards = 1000000;

/// A non-negative decimal integer (digits only, no sign or space); nullopt
/// otherwise. Values past 10^18 read as 10^18: beyond every limit checked.
std::optional<long long> non_negative_integer(const std::string& text) {
  if (text.empty()) return std::nullopt;
  constexpr long long kSaturated = 1000000000000000000LL;
  long long value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value >= kSaturated / 10 ? kSaturated : value * 10 + (c - '0');
  }
  return value;
}

}  // namespace

Shard parse_shard(const std::string& text) {
  const std::size_t slash = text.find('/');
  const std::optional<long long> index = slash == std::string::npos ? std::nullopt : non_negative_integer(text.substr(0, slash));
  const std::optional<long long> count = slash == std::string::npos ? std::nullopt : non_negative_integer(text.substr(slash + 1));
  if (!index || !count)
    throw InputError(fmt::format("--shard: expected I/N (integers, 0 <= I < N <= {}) or auto, found '{}'", kMaxShards, text));
  if (*count > kMaxShards) throw InputError(fmt::format("--shard: expected at most {} shards (N), found '{}'", kMaxShards, text));
  if (*count < 1 || *index >= *count) throw InputError(fmt::format("--shard: expected I/N with 0 <= I < N, found '{}'", text));
  return {static_cast<int>(*index), static_cast<int>(*count)};
}

Shard shard_from_environment(const std::function<const char*(const char*)>& environment) {
  // NAME='VALUE' as the environment gives it (messages show what was set,
  // not a value read into a narrower type).
  const auto setting = [&](const char* name) { return fmt::format("{}='{}'", name, environment(name)); };
  // nullopt when unset or empty; else a non-negative integer or an error.
  const auto read = [&](const char* name) -> std::optional<long long> {
    const char* value = environment(name);
    if (!value || !*value) return std::nullopt;
    const std::optional<long long> number = non_negative_integer(value);
    if (!number) throw InputError(fmt::format("--shard auto: {}: expected a non-negative integer", setting(name)));
    return number;
  };
  const auto check_count = [&](const char* name, long long count) {
    if (count > kMaxShards) throw InputError(fmt::format("--shard auto: {}: expected at most {} shards", setting(name), kMaxShards));
    if (count < 1) throw InputError(fmt::format("--shard auto: {}: expected at least 1 shard", setting(name)));
  };
  const auto from_rank = [&](const char* rank_name, const char* count_name) -> std::optional<Shard> {
    const std::optional<long long> rank = read(rank_name), count = read(count_name);
    if (!rank || !count) return std::nullopt;
    check_count(count_name, *count);
    if (*rank >= *count)
      throw InputError(fmt::format("--shard auto: {}: expected a rank below {} ({})", setting(rank_name), *count, setting(count_name)));
    return Shard{static_cast<int>(*rank), static_cast<int>(*count)};
  };
  if (const std::optional<long long> task = read("SLURM_ARRAY_TASK_ID")) {
    // A task's shard is its position in the array MIN, MIN+STEP, ..., MAX.
    const auto required = [&](const char* name) {
      const std::optional<long long> value = read(name);
      if (!value)
        throw InputError(fmt::format("--shard auto: SLURM_ARRAY_TASK_ID is set but {} is not (sbatch --array sets "
                                     "SLURM_ARRAY_TASK_MIN, _MAX, _STEP and _COUNT)",
                                     name));
      return *value;
    };
    const long long count = required("SLURM_ARRAY_TASK_COUNT"), min = required("SLURM_ARRAY_TASK_MIN"),
                    max = required("SLURM_ARRAY_TASK_MAX"), step = required("SLURM_ARRAY_TASK_STEP");
    check_count("SLURM_ARRAY_TASK_COUNT", count);
    if (step < 1 || max < min || (max - min) % step != 0 || (max - min) / step + 1 != count)
      throw InputError(fmt::format("--shard auto: the Slurm array is not one range MIN-MAX:STEP of COUNT tasks ({}, {}, {}, {}; "
                                   "a list such as --array=1,5,9?): give the shard explicitly, --shard \"$SLURM_ARRAY_TASK_ID/N\"",
                                   setting("SLURM_ARRAY_TASK_MIN"), setting("SLURM_ARRAY_TASK_MAX"),
                                   setting("SLURM_ARRAY_TASK_STEP"), setting("SLURM_ARRAY_TASK_COUNT")));
    if (*task < min || *task > max || (*task - min) % step != 0)
      throw InputError(fmt::format("--shard auto: {}: not a task of the array {}-{}:{}", setting("SLURM_ARRAY_TASK_ID"), min, max, step));
    return {static_cast<int>((*task - min) / step), static_cast<int>(count)};
  }
  for (const auto& [rank_name, count_name] : {std::pair{"SLURM_PROCID", "SLURM_NTASKS"}, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                             {"PMI_RANK", "PMI_SIZE"}})
    if (const std::optional<Shard> shard = from_rank(rank_name, count_name)) return *shard;
  throw InputError("--shard auto: no launcher variables found (SLURM_ARRAY_TASK_ID, SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK)");
}

std::vector<PlannedRun> runs_of_shard(const std::vector<PlannedRun>& runs, const Shard& shard) {
  std::vector<PlannedRun> selected;
  for (const PlannedRun& run : runs)
    if (run.run_index % shard.count == shard.index) selected.push_back(run);
  return selected;
}

}  // namespace pipegrid::sweep
