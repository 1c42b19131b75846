// FLOPs and bytes of PipeDream graph.txt nodes, and the efficiency fit
// (core/pipedream_flops.hpp).

#include "core/pipedream_flops.hpp"

#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/model_graph.hpp"

namespace pipegrid {

namespace {

constexpr double kFloatBytes = 4;  // PipeDream's profiles are fp32

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

/// The text between the first '(' after `from` and its matching ')'.
std::optional<std::string_view> arguments(std::string_view text, std::size_t from = 0) {
  const std::size_t open = text.find('(', from);
  if (open == std::string_view::npos) return std::nullopt;
  int depth = 0;
  for (std::size_t i = open; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')' && --depth == 0) return text.substr(open + 1, i - open - 1);
  }
  return std::nullopt;
}

std::optional<double> number(std::string_view text) {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  const std::string copy(text);
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

/// Splits an argument list at its top-level commas.
std::vector<std::string_view> split_arguments(std::string_view args) {
  std::vector<std::string_view> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= args.size(); ++i) {
    if (i == args.size() || (args[i] == ',' && depth == 0)) {
      out.push_back(trim(args.substr(start, i - start)));
      start = i + 1;
    } else if (args[i] == '(') {
      ++depth;
    } else if (args[i] == ')') {
      --depth;
    }
  }
  return out;
}

/// Parsed operator arguments: positional numbers and keyword values.
struct Arguments {
  std::vector<double> positional;
  std::map<std::string, std::string, std::less<>> keywords;
};

Arguments parse_arguments(std::string_view args) {
  Arguments out;
  for (std::string_view item : split_arguments(args)) {
    const std::size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      if (const auto value = number(item)) out.positional.push_back(*value);
    } else {
      out.keywords.emplace(std::string(trim(item.substr(0, equals))), std::string(trim(item.substr(equals + 1))));
    }
  }
  return out;
}

/// A keyword's value as a pair: "(3, 3)" or "3" (then both).
std::optional<std::pair<double, double>> pair_of(const Arguments& args, std::string_view key) {
  const auto it = args.keywords.find(key);
  if (it == args.keywords.end()) return std::nullopt;
  std::string_view text = trim(it->second);
  if (!text.empty() && text.front() == '(') {
    const auto inner = arguments(text);
    if (!inner) return std::nullopt;
    const auto parts = split_arguments(*inner);
    if (parts.size() != 2) return std::nullopt;
    const auto a = number(parts[0]), b = number(parts[1]);
    if (!a || !b) return std::nullopt;
    return std::make_pair(*a, *b);
  }
  const auto value = number(text);
  if (!value) return std::nullopt;
  return std::make_pair(*value, *value);
}

std::optional<double> keyword_number(const Arguments& args, std::string_view key) {
  const auto it = args.keywords.find(key);
  return it == args.keywords.end() ? std::nullopt : number(it->second);
}

}  // namespace

NodeCost pipedream_node_cost(const std::string& description, const std::vector<double>& outputs, double input_bytes,
                             double parameter_bytes, int batch_size, bool input_needs_grad, const std::string& origin) {
  const std::string_view text = trim(description);
  const std::string_view op_name = text.substr(0, std::min(text.find('('), text.size()));
  double output_bytes = 0;
  for (const double bytes : outputs) output_bytes += bytes;
  const double batch = batch_size;
  auto bad = [&](std::string_view what) {
    return InputError(fmt::format("{}: operator '{}': {}", origin, description, what));
  };
  NodeCost cost;
  for (const std::string_view untimed : {"Add", "Concat", "__getitem__", "View", "Size", "hidden", "Input"})
    if (op_name == untimed || (op_name.substr(0, 5) == "Input" && untimed == "Input")) return cost;
  cost.timed = true;
  cost.bytes_read = input_bytes + parameter_bytes;
  cost.bytes_written = output_bytes;
  auto matmul = [&](double macs, bool weights) {
    cost.forward_flops = 2 * macs;
    cost.backward_input_flops = input_needs_grad ? 2 * macs : 0;
    cost.backward_weight_flops = weights ? 2 * macs : 0;
  };
  auto elementwise = [&](double forward_per_element, double backward_per_element) {
    const double elements = output_bytes / kFloatBytes;
    cost.forward_flops = forward_per_element * elements;
    cost.backward_input_flops = input_needs_grad ? backward_per_element * elements : 0;
  };
  // An LSTM(i, h) over `steps` x batch rows: multiply-adds of the four gates.
  auto lstm_macs = [&](double in, double hidden, double steps) { return steps * batch * 4 * hidden * (in + hidden); };
  auto lstm_shape = [&](std::string_view inner) -> std::pair<double, double> {
    const Arguments args = parse_arguments(inner);
    if (args.positional.size() < 2 || args.positional[0] <= 0 || args.positional[1] <= 0)
      throw bad("expected LSTM(input_size, hidden_size)");
    return {args.positional[0], args.positional[1]};
  };
  const std::optional<std::string_view> own = arguments(text);
  if (op_name == "Conv2d") {
    const Arguments args = parse_arguments(own.value_or(""));
    const auto kernel = pair_of(args, "kernel_size");
    const double groups = keyword_number(args, "groups").value_or(1);
    if (args.positional.size() < 2 || !kernel || args.positional[1] <= 0 || groups <= 0)
      throw bad("expected Conv2d(in_channels, out_channels, kernel_size=...)");
    const double cin = args.positional[0], cout = args.positional[1];
    const double positions = output_bytes / (kFloatBytes * cout);
    cost.op = "conv2d";
    matmul(positions * cout * (cin / groups) * kernel->first * kernel->second, parameter_bytes > 0);
  } else if (op_name == "Linear" || op_name == "Classifier") {
    const std::size_t at = op_name == "Linear" ? 0 : text.find("Linear(");
    if (at == std::string_view::npos) throw bad("expected a Linear(in_features=..., out_features=...) inside");
    const Arguments args = parse_arguments(arguments(text, at).value_or(""));
    const auto in = keyword_number(args, "in_features"), out = keyword_number(args, "out_features");
    if (!in || !out || *in <= 0 || *out <= 0) throw bad("expected Linear(in_features=..., out_features=...)");
    cost.op = "linear";
    matmul(output_bytes / (kFloatBytes * *out) * *in * *out, parameter_bytes > 0);
  } else if (op_name == "LSTM") {
    const auto [in, hidden] = lstm_shape(own.value_or(""));
    const double directions = text.find("bidirectional=True") != std::string_view::npos ? 2 : 1;
    if (outputs.empty() || batch <= 0) throw bad("expected the LSTM's outputs and a batch size");
    cost.steps = static_cast<int>(std::lround(outputs[0] / (kFloatBytes * batch * hidden * directions)));
    cost.op = "lstm";
    matmul(directions * lstm_macs(in, hidden, cost.steps), parameter_bytes > 0);
  } else if (op_name == "EmuBidirLSTM") {
    const std::size_t at = text.find("(layer1): LSTM(");
    if (at == std::string_view::npos) throw bad("expected a (layer1): LSTM(...) inside");
    const auto [in, hidden] = lstm_shape(arguments(text, at + 9).value_or(""));
    const double steps = std::round(output_bytes / (kFloatBytes * batch * 2 * hidden));
    cost.steps = static_cast<int>(2 * steps);  // the two directions run one after the other
    cost.op = "lstm";
    matmul(2 * lstm_macs(in, hidden, steps), parameter_bytes > 0);
  } else if (op_name == "RecurrentAttention") {
    const std::size_t at = text.find("(rnn): LSTM(");
    if (at == std::string_view::npos || outputs.size() < 5) throw bad("expected (rnn): LSTM(...) and five outputs");
    const auto [in, hidden] = lstm_shape(arguments(text, at + 6).value_or(""));
    const double decoder = std::round(outputs[0] / (kFloatBytes * batch * hidden));
    const double encoder = std::round(outputs[4] / (kFloatBytes * batch * decoder));
    cost.steps = static_cast<int>(decoder);
    cost.op = "lstm";
    matmul(lstm_macs(in, hidden, decoder) + batch * hidden * hidden * (decoder + encoder) +
               2 * batch * decoder * encoder * hidden,
           parameter_bytes > 0);
  } else if (op_name == "BatchNorm2d") {
    cost.op = "norm";
    cost.bytes_read = 2 * input_bytes + parameter_bytes;
    elementwise(4, 4);
    cost.backward_weight_flops = 2 * output_bytes / kFloatBytes;
  } else if (op_name == "ReLU" || op_name == "Dropout") {
    cost.op = "elementwise";
    elementwise(1, 1);
  } else if (op_name == "MaxPool2d" || op_name == "AvgPool2d") {
    cost.op = "pool";
    cost.forward_flops = input_bytes / kFloatBytes;
    cost.backward_input_flops = input_needs_grad ? input_bytes / kFloatBytes : 0;
  } else if (op_name == "Embedding") {
    cost.op = "embedding";
    cost.bytes_read = input_bytes + output_bytes;  // the rows it gathers, not the whole table
  } else {
    cost.op = "elementwise";
    elementwise(1, 1);
  }
  if (cost.steps < 1 || !std::isfinite(cost.forward_flops)) throw bad("sizes inconsistent with the operator");
  return cost;
}

PipeDreamModel read_pipedream_model(const std::string& path, std::optional<int> batch_size) {
  const ModelGraph graph = read_model_graph(path, batch_size);
  // Per-output sizes of the nodes with several outputs ("activation_size=[a; b]"),
  // which the model graph keeps only as their sum.
  std::map<std::string, std::vector<double>> lists;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const std::size_t key = line.find("activation_size=[");
      if (line.rfind("node", 0) != 0 || key == std::string::npos) continue;
      const std::size_t close = line.find(']', key);
      if (close == std::string::npos) continue;
      std::vector<double> values;
      std::stringstream items(line.substr(key + 17, close - key - 17));
      std::string item;
      while (std::getline(items, item, ';'))
        if (const auto value = number(item)) values.push_back(*value);
      lists[line.substr(0, line.find(' '))] = values;
    }
  }
  const Profile& profile = graph.profile;
  PipeDreamModel model;
  model.name = profile.name;
  model.batch_size = profile.micro_batch_size;
  std::vector<double> input_bytes(profile.layers.size(), 0);
  std::vector<bool> has_producer(profile.layers.size(), false);
  for (std::size_t l = 0; l < graph.consumers.size(); ++l)
    for (const int consumer : graph.consumers[l]) {
      input_bytes[static_cast<std::size_t>(consumer)] += graph.activation_bytes[l];
      has_producer[static_cast<std::size_t>(consumer)] = true;
    }
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& layer = profile.layers[l];
    const std::size_t colon = layer.name.find(": ");
    const std::string id = layer.name.substr(0, colon);
    const std::string description = colon == std::string::npos ? std::string() : layer.name.substr(colon + 2);
    std::vector<double> outputs = {graph.activation_bytes[l]};
    if (const auto it = lists.find(id); it != lists.end() && !it->second.empty()) outputs = it->second;
    PipeDreamNode node;
    node.name = layer.name;
    node.forward_s = layer.forward_s;
    node.backward_s = layer.backward_s;
    node.parameter_bytes = layer.parameter_bytes;
    // A node fed by no other layer reads the model's input (an image; GNMT's token ids).
    node.cost = pipedream_node_cost(description, outputs, has_producer[l] ? input_bytes[l] : profile.input_bytes,
                                    layer.parameter_bytes, model.batch_size, has_producer[l],
                                    fmt::format("{}: {}", path, id));
    node.measured = node.cost.timed && (node.forward_s > 0 || node.backward_s > 0);
    model.nodes.push_back(std::move(node));
  }
  return model;
}

Layer node_layer(const PipeDreamNode& node) {
  Layer layer;
  layer.name = node.name;
  layer.parameter_bytes = node.parameter_bytes;
  layer.op = node.cost.op;
  layer.forward_flops = node.cost.forward_flops;
  layer.backward_input_flops = node.cost.backward_input_flops;
  layer.backward_weight_flops = node.cost.backward_weight_flops;
  layer.bytes_read = node.cost.bytes_read;
  layer.bytes_written = node.cost.bytes_written;
  layer.times_given = false;
  return layer;
}

void fit_efficiency(const std::vector<PipeDreamModel>& models, double peak_flops, double bandwidth_Bps,
                    ClassEfficiency (&out)[kOpClassCount]) {
  std::vector<FitSample> forward[kOpClassCount], backward[kOpClassCount];
  for (const PipeDreamModel& model : models)
    for (const PipeDreamNode& node : model.nodes) {
      if (!node.measured) continue;
      const NodeCost& cost = node.cost;
      const int c = static_cast<int>(op_class(cost.op));
      const bool memory = c == static_cast<int>(OpClass::Memory);
      const double bytes = cost.bytes_read + cost.bytes_written;
      const double parts = (cost.backward_input_flops > 0 ? 1 : 0) + (node.parameter_bytes > 0 ? 1 : 0);
      const double steps = cost.steps;
      if (memory) {
        forward[c].push_back({bytes, 1, node.forward_s});
        if (parts > 0) backward[c].push_back({bytes * parts, parts, node.backward_s});
      } else {
        forward[c].push_back({cost.forward_flops, steps, node.forward_s});
        if (parts > 0)
          backward[c].push_back(
              {cost.backward_input_flops + cost.backward_weight_flops, steps * parts, node.backward_s});
      }
    }
  const int m = static_cast<int>(OpClass::Memory);
  // Slopes bounded by the caps: no fitted curve runs faster than them.
  const double memory_min_slope = 1.0 / (kMaxMemoryEfficiency * bandwidth_Bps);
  const double compute_min_slope = 1.0 / (kMaxComputeEfficiency * peak_flops);
  const EfficiencyCurve memory_forward = curve_from_fit(fit_time_line(forward[m], memory_min_slope), bandwidth_Bps);
  const EfficiencyCurve memory_backward = curve_from_fit(fit_time_line(backward[m], memory_min_slope), bandwidth_Bps);
  for (int c = 0; c < kOpClassCount; ++c) {
    ClassEfficiency& efficiency = out[c];
    efficiency.forward.memory = memory_forward;
    efficiency.backward.memory = memory_backward;
    if (c == m) {
      efficiency.forward.compute = efficiency.backward.compute = EfficiencyCurve{kMaxComputeEfficiency, 0};
    } else {
      efficiency.forward.compute = curve_from_fit(fit_time_line(forward[c], compute_min_slope), peak_flops);
      efficiency.backward.compute = curve_from_fit(fit_time_line(backward[c], compute_min_slope), peak_flops);
    }
  }
}

}  // namespace pipegrid
