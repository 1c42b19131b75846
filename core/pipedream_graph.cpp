// PipeDream's graph.txt: a node graph turned into a chain of layers.
//
// Format (as written by PipeDream's profiler): one node a line,
//   nodeN -- Description -- forward_compute_time=MS, backward_compute_time=MS, activation_size=BYTES, parameter_size=BYTES
// (activation_size may be a list "[B1; B2; ...]" for a node with several
// outputs: its bytes are summed; a trailing stage_id=K is ignored), and one
// edge a line, indented by a tab: "\tnodeA -- nodeB" (A's output feeds B).
//
// Reading rules (docs/formats.md, "Profile"):
// - Order: Kahn's algorithm; among the nodes ready at a step, the one listed
//   first in the file comes first.
// - Input nodes (sources whose description starts with "Input") are zeroed as
//   PipeDream's optimizer does and dropped from the chain: their activation
//   bytes become Profile::input_bytes and count in no cut.
// - Layer i's output_bytes: the activation bytes of every node at position
//   <= i with a consumer at position > i, each such node counted once.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/json_input.hpp"
#include "core/limits.hpp"
#include "core/model_graph.hpp"
#include "core/profile.hpp"

namespace pipegrid {

namespace {

/// Bytes of one 3x224x224 float32 image: the input shape of the ImageNet
/// models PipeDream profiled.
constexpr double kImageSampleBytes = 3.0 * 224 * 224 * 4;

constexpr std::string_view kSeparator = " -- ";

struct GraphNode {
  std::string id;
  std::string description;
  double forward_s = 0, backward_s = 0;  ///< converted from the file's milliseconds
  double activation_bytes = 0, parameter_bytes = 0;
  std::vector<double> outputs;  ///< activation_size's entries (one for a plain number)
  int line = 0;
};

struct GraphEdge {
  int from = 0, to = 0;  ///< node indices (file order)
  int line = 0;
};

struct Graph {
  std::vector<GraphNode> nodes;  ///< in file order
  std::vector<GraphEdge> edges;  ///< in file order, duplicates removed
};

std::string_view trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

bool is_node_id(std::string_view text) {
  return !text.empty() && text.find_first_of(" \t") == std::string_view::npos;
}

/// A finite number >= 0 written in full (no trailing characters), or nothing.
std::optional<double> parse_non_negative(std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value < 0) return std::nullopt;
  return value;
}

/// Milliseconds written as a decimal, in seconds: the double nearest to the
/// decimal value / 1000 (the text is read with its exponent lowered by 3, so
/// "6.949" gives 0.006949 exactly as written, not 6.949 / 1000 rounded twice).
std::optional<double> parse_milliseconds_as_seconds(std::string_view text) {
  if (text.find_first_of("eEnN") != std::string_view::npos) {  // exponent, inf or nan: divide
    const auto milliseconds = parse_non_negative(text);
    if (!milliseconds) return std::nullopt;
    return *milliseconds / 1000;
  }
  return parse_non_negative(std::string(text) + "e-3");
}

/// A number, or "[a; b; ...]": the entries; nothing when malformed.
std::optional<std::vector<double>> parse_byte_list(std::string_view text) {
  if (text.empty() || text.front() != '[') {
    const auto value = parse_non_negative(text);
    if (!value) return std::nullopt;
    return std::vector<double>{*value};
  }
  if (text.back() != ']') return std::nullopt;
  text = text.substr(1, text.size() - 2);
  std::vector<double> values;
  while (true) {
    const auto semicolon = text.find(';');
    const auto value = parse_non_negative(trimmed(text.substr(0, semicolon)));
    if (!value) return std::nullopt;
    values.push_back(*value);
    if (semicolon == std::string_view::npos) return values;
    text.remove_prefix(semicolon + 1);
  }
}

GraphNode parse_node_line(std::string_view line, const std::string& where) {
  const auto first = line.find(kSeparator), last = line.rfind(kSeparator);
  if (first == std::string_view::npos || first == last)
    throw InputError(fmt::format(
        "{}: expected a node line 'nodeN -- description -- forward_compute_time=..., backward_compute_time=..., "
        "activation_size=..., parameter_size=...' or an edge line '<tab>nodeA -- nodeB', found '{}'",
        where, line));
  GraphNode node;
  node.id = std::string(trimmed(line.substr(0, first)));
  if (!is_node_id(node.id))
    throw InputError(fmt::format("{}: expected a node id without spaces before ' -- ', found '{}'", where, node.id));
  node.description = std::string(trimmed(line.substr(first + kSeparator.size(), last - first - kSeparator.size())));

  std::map<std::string, std::string_view> metadata;
  std::string_view rest = line.substr(last + kSeparator.size());
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view item = trimmed(rest.substr(0, comma));
    const auto equals = item.find('=');
    if (equals == std::string_view::npos)
      throw InputError(fmt::format("{}: expected 'key=value' in the node's measurements, found '{}'", where, item));
    const std::string key(trimmed(item.substr(0, equals)));
    if (!metadata.emplace(key, trimmed(item.substr(equals + 1))).second)
      throw InputError(fmt::format("{}: expected each measurement once, found '{}' twice", where, key));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  const std::pair<const char*, double*> fields[] = {{"forward_compute_time", &node.forward_s},
                                                    {"backward_compute_time", &node.backward_s},
                                                    {"activation_size", &node.activation_bytes},
                                                    {"parameter_size", &node.parameter_bytes}};
  for (const auto& [key, target] : fields) {
    const auto found = metadata.find(key);
    if (found == metadata.end())
      throw InputError(fmt::format("{}: {}: expected a non-negative number, found nothing", where, key));
    const std::string_view name = key;
    const bool is_time = name == "forward_compute_time" || name == "backward_compute_time";
    std::optional<double> value;
    if (name == "activation_size") {
      if (auto list = parse_byte_list(found->second)) {
        value = 0;
        for (const double bytes : *list) *value += bytes;
        node.outputs = std::move(*list);
      }
    } else {
      value = is_time ? parse_milliseconds_as_seconds(found->second) : parse_non_negative(found->second);
    }
    if (!value)
      throw InputError(fmt::format("{}: {}: expected a non-negative number{}, found '{}'", where, key,
                                   name == "activation_size" ? " or a list [a; b; ...] of them" : "",
                                   found->second));
    const double limit = is_time ? limits::kMaxSeconds : limits::kMaxBytes;
    if (*value > limit)
      throw InputError(fmt::format("{}: {}: expected at most {} (docs/formats.md, Limits), found '{}'", where, key,
                                   is_time ? fmt::format("{:g} ms", limit * 1000) : fmt::format("{:g} bytes", limit),
                                   found->second));
    *target = *value;
    metadata.erase(found);
  }
  metadata.erase("stage_id");  // written by PipeDream once a partition is chosen; not a measurement
  if (!metadata.empty())
    throw InputError(fmt::format(
        "{}: expected only forward_compute_time, backward_compute_time, activation_size, parameter_size (and "
        "stage_id), found '{}'",
        where, metadata.begin()->first));
  return node;
}

Graph parse_graph(const std::string& text, const std::string& path) {
  Graph graph;
  std::map<std::string, int, std::less<>> index_of;
  struct PendingEdge {
    std::string from, to;
    int line;
  };
  std::vector<PendingEdge> pending;
  std::string_view rest = text;
  for (int number = 1; !rest.empty(); ++number) {
    const auto newline = rest.find('\n');
    const std::string_view raw = rest.substr(0, newline);
    rest.remove_prefix(newline == std::string_view::npos ? rest.size() : newline + 1);
    const std::string_view line = trimmed(raw);
    if (line.empty()) continue;
    const std::string where = fmt::format("{}:{}", path, number);
    // Names reach JSON outputs (plans, partition --json), which hold UTF-8.
    if (const auto bad = first_invalid_utf8(raw))
      throw InputError(fmt::format("{}: expected UTF-8 text, found the byte 0x{:02X} at column {}", where,
                                   static_cast<unsigned char>(raw[*bad]), *bad + 1));
    if (raw.front() == '\t' || raw.front() == ' ') {
      const auto separator = line.find(kSeparator);
      const std::string_view from = separator == std::string_view::npos ? line : trimmed(line.substr(0, separator));
      const std::string_view to =
          separator == std::string_view::npos ? std::string_view() : trimmed(line.substr(separator + kSeparator.size()));
      if (!is_node_id(from) || !is_node_id(to))
        throw InputError(fmt::format("{}: expected an edge line '<tab>nodeA -- nodeB', found '{}'", where, line));
      pending.push_back({std::string(from), std::string(to), number});
      continue;
    }
    GraphNode node = parse_node_line(line, where);
    node.line = number;
    const auto [existing, inserted] = index_of.emplace(node.id, static_cast<int>(graph.nodes.size()));
    if (!inserted)
      throw InputError(fmt::format("{}: expected each node listed once, found '{}' again (first on line {})", where,
                                   node.id, graph.nodes[existing->second].line));
    graph.nodes.push_back(std::move(node));
  }
  if (graph.nodes.empty()) throw InputError(fmt::format("{}: expected node lines, found none", path));

  std::set<std::pair<int, int>> seen;
  for (const PendingEdge& edge : pending) {
    int ends[2] = {0, 0};
    const std::string* names[2] = {&edge.from, &edge.to};
    for (int side = 0; side < 2; ++side) {
      const auto found = index_of.find(*names[side]);
      if (found == index_of.end())
        throw InputError(fmt::format("{}:{}: edge '{} -- {}': expected a node listed in the file, found unknown '{}'",
                                     path, edge.line, edge.from, edge.to, *names[side]));
      ends[side] = found->second;
    }
    if (seen.emplace(ends[0], ends[1]).second) graph.edges.push_back({ends[0], ends[1], edge.line});
  }
  return graph;
}

/// Throws the InputError for a graph that Kahn's algorithm could not finish:
/// names one cycle among the nodes left unplaced and the line of its edge
/// listed last.
[[noreturn]] void throw_cycle(const Graph& graph, const std::vector<int>& unplaced_predecessors,
                              const std::string& path) {
  const int count = static_cast<int>(graph.nodes.size());
  // Every unplaced node has an unplaced predecessor, so walking backwards
  // through them (first-listed edge each time) must come back to a node.
  std::vector<const GraphEdge*> first_edge_into(count, nullptr);
  for (const GraphEdge& edge : graph.edges)
    if (unplaced_predecessors[edge.from] > 0 && unplaced_predecessors[edge.to] > 0 && !first_edge_into[edge.to])
      first_edge_into[edge.to] = &edge;
  int start = 0;
  while (unplaced_predecessors[start] == 0) ++start;
  std::vector<int> step_of(count, -1);
  std::vector<const GraphEdge*> walked;
  int node = start;
  while (step_of[node] < 0) {
    step_of[node] = static_cast<int>(walked.size());
    walked.push_back(first_edge_into[node]);
    node = first_edge_into[node]->from;
  }
  // The cycle is the walked edges from step_of[node] on, backwards.
  const std::vector<const GraphEdge*> cycle(walked.begin() + step_of[node], walked.end());
  const GraphEdge* closing = cycle.front();
  for (const GraphEdge* edge : cycle)
    if (edge->line > closing->line) closing = edge;
  std::string route = graph.nodes[cycle.back()->from].id;
  for (auto edge = cycle.rbegin(); edge != cycle.rend(); ++edge) route += " -> " + graph.nodes[(*edge)->to].id;
  throw InputError(fmt::format("{}:{}: edge '{} -- {}' closes the cycle {} (expected an acyclic graph)", path,
                               closing->line, graph.nodes[closing->from].id, graph.nodes[closing->to].id, route));
}

/// Node indices in the canonical topological order: Kahn's algorithm taking
/// the ready node listed first in the file.
std::vector<int> canonical_order(const Graph& graph, const std::string& path) {
  const int count = static_cast<int>(graph.nodes.size());
  std::vector<std::vector<int>> consumers(count);
  std::vector<int> waiting_for(count, 0);
  for (const GraphEdge& edge : graph.edges) {
    consumers[edge.from].push_back(edge.to);
    ++waiting_for[edge.to];
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int node = 0; node < count; ++node)
    if (waiting_for[node] == 0) ready.push(node);
  std::vector<int> order;
  order.reserve(count);
  while (!ready.empty()) {
    const int node = ready.top();
    ready.pop();
    order.push_back(node);
    for (const int consumer : consumers[node])
      if (--waiting_for[consumer] == 0) ready.push(consumer);
  }
  if (static_cast<int>(order.size()) != count) throw_cycle(graph, waiting_for, path);
  return order;
}

/// `text` with every byte that is not well-formed UTF-8 replaced by '?'.
std::string encodable(std::string text) {
  while (const auto bad = first_invalid_utf8(text)) text[*bad] = '?';
  return text;
}

std::string profile_name(const std::string& path) {
  const std::filesystem::path file(path);
  if (file.filename() == "graph.txt") {
    const std::string folder = std::filesystem::absolute(file).parent_path().filename().string();
    if (!folder.empty()) return encodable(folder);
  }
  return encodable(file.stem().string());
}

/// A batch size read from the tensors of the graph, and how.
struct InferredBatch {
  int size = 0;
  std::string how;  ///< for people: "the input: 77070336 bytes = 128 x 3x224x224 float32 images"
};

/// The batch from the input, when it is a whole number of 3x224x224 float32
/// images (the ImageNet models).
std::optional<InferredBatch> batch_from_images(double input_bytes) {
  const double samples = input_bytes / kImageSampleBytes;
  if (!(input_bytes > 0 && std::trunc(samples) == samples && samples <= std::numeric_limits<int>::max()))
    return std::nullopt;
  const int size = static_cast<int>(samples);
  return InferredBatch{size, fmt::format("the input: {} bytes = {} x 3x224x224 float32 images", format_exact(input_bytes),
                                         size)};
}

/// The hidden size H of a node described "LSTM(I, H...)"; nothing otherwise.
std::optional<int> lstm_hidden_size(const std::string& description) {
  constexpr std::string_view kPrefix = "LSTM(";
  if (description.rfind(kPrefix, 0) != 0) return std::nullopt;
  const auto comma = description.find(',');
  if (comma == std::string::npos) return std::nullopt;
  const std::string_view rest = trimmed(std::string_view(description).substr(comma + 1));
  int hidden = 0;
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), hidden);
  if (error != std::errc() || hidden < 1 || end == rest.data() || (end != rest.data() + rest.size() && *end != ')' && *end != ','))
    return std::nullopt;
  return hidden;
}

/// The batch from the LSTM nodes (GNMT): an LSTM(I, H) node's outputs end
/// with its hidden and cell states, (1, B, H) float32 each, so B = bytes /
/// (4 H). Every LSTM node that lists such outputs must give the same B.
std::optional<InferredBatch> batch_from_lstm_states(const std::vector<GraphNode>& nodes) {
  std::optional<int> size;
  double bytes = 0;
  int hidden = 0, agreeing = 0;
  for (const GraphNode& node : nodes) {
    const auto h = lstm_hidden_size(node.description);
    if (!h || node.outputs.size() < 3) continue;
    const double state = node.outputs.back();
    if (node.outputs[node.outputs.size() - 2] != state) return std::nullopt;
    const double samples = state / (4.0 * *h);
    if (!(samples >= 1 && std::trunc(samples) == samples && samples <= std::numeric_limits<int>::max()))
      return std::nullopt;
    if (size && *size != static_cast<int>(samples)) return std::nullopt;
    size = static_cast<int>(samples);
    bytes = state;
    hidden = *h;
    ++agreeing;
  }
  if (!size) return std::nullopt;
  return InferredBatch{*size, fmt::format("the LSTM hidden states: {} bytes = {} x {} float32 ({} LSTM node{})",
                                          format_exact(bytes), *size, hidden, agreeing, agreeing == 1 ? "" : "s")};
}

/// Why no batch size could be inferred, for messages.
std::string no_batch_reason(double input_bytes, bool has_input_node) {
  const std::string found = has_input_node ? fmt::format("the Input nodes hold {} bytes", format_exact(input_bytes))
                                           : std::string("the graph has no Input node");
  return fmt::format(
      "expected the input to be a whole number of 3x224x224 float32 images ({} bytes each), or LSTM(I, H) nodes whose "
      "hidden and cell states (their last two outputs) are a whole number of H float32 values, found that {} and no "
      "such LSTM nodes",
      format_exact(kImageSampleBytes), found);
}

}  // namespace

ModelGraph read_pipedream_model_graph(const std::string& path, std::optional<int> batch_size, BatchSizeUse use) {
  if (batch_size && *batch_size < 1)
    throw InputError(fmt::format("{}: batch size: expected an integer >= 1, found {}", path, *batch_size));
  const Graph graph = parse_graph(read_text_file(path), path);
  const std::vector<int> order = canonical_order(graph, path);

  const int count = static_cast<int>(graph.nodes.size());
  std::vector<bool> has_producer(count, false);
  std::vector<std::vector<int>> consumers(count);
  for (const GraphEdge& edge : graph.edges) {
    has_producer[edge.to] = true;
    consumers[edge.from].push_back(edge.to);
  }

  ModelGraph model;
  Profile& profile = model.profile;
  profile.name = profile_name(path);
  std::vector<int> layer_of(count, -1);  // -1: an Input node, not in the chain
  bool has_input_node = false;
  for (const int node : order) {
    const GraphNode& entry = graph.nodes[node];
    if (!has_producer[node] && entry.description.rfind("Input", 0) == 0) {
      profile.input_bytes += entry.activation_bytes;
      has_input_node = true;
      continue;
    }
    layer_of[node] = static_cast<int>(profile.layers.size());
    Layer layer;
    layer.name = entry.description.empty() ? entry.id : fmt::format("{}: {}", entry.id, entry.description);
    layer.forward_s = entry.forward_s;
    layer.backward_s = entry.backward_s;
    layer.parameter_bytes = entry.parameter_bytes;
    profile.layers.push_back(std::move(layer));
    model.activation_bytes.push_back(entry.activation_bytes);
    model.descriptions.push_back(entry.description);
  }
  if (profile.layers.empty())
    throw InputError(fmt::format("{}: expected at least one node besides the Input nodes, found none", path));
  model.consumers.resize(profile.layers.size());
  for (const GraphEdge& edge : graph.edges)
    if (layer_of[edge.from] >= 0) model.consumers[layer_of[edge.from]].push_back(layer_of[edge.to]);
  for (auto& list : model.consumers) std::sort(list.begin(), list.end());

  // The cut after layer i carries the bytes of every chain node at layer <= i
  // whose last consumer is at a layer > i; summed in chain order.
  std::vector<int> last_consumer_layer(count, -1);
  for (int node = 0; node < count; ++node)
    for (const int consumer : consumers[node])
      last_consumer_layer[node] = std::max(last_consumer_layer[node], layer_of[consumer]);
  for (std::size_t cut = 0; cut < profile.layers.size(); ++cut)
    for (const int node : order)
      if (layer_of[node] >= 0 && layer_of[node] <= static_cast<int>(cut) &&
          last_consumer_layer[node] > static_cast<int>(cut))
        profile.layers[cut].output_bytes += graph.nodes[node].activation_bytes;
  // A layer's own output, where the cut after it carries more (tensors that
  // skip over it). The last layer's output crosses no cut and, as in
  // PipeDream's optimizer, is not counted.
  for (int node = 0; node < count; ++node)
    if (const int layer = layer_of[node]; layer >= 0 && layer + 1 < static_cast<int>(profile.layers.size()) &&
                                          graph.nodes[node].activation_bytes != profile.layers[layer].output_bytes)
      profile.layers[layer].activation_bytes = graph.nodes[node].activation_bytes;

  if (batch_size) {
    profile.micro_batch_size = *batch_size;
  } else if (auto inferred = batch_from_images(profile.input_bytes); inferred || (inferred = batch_from_lstm_states(graph.nodes))) {
    profile.micro_batch_size = inferred->size;
    profile.micro_batch_size_note = "inferred from " + inferred->how;
  } else if (use == BatchSizeUse::Optional) {
    profile.micro_batch_size = 1;
    profile.micro_batch_size_known = false;
    profile.micro_batch_size_note = "unknown: " + no_batch_reason(profile.input_bytes, has_input_node);
  } else {
    throw InputError(fmt::format("{}: cannot infer the batch size: {}; pass --batch-size with the micro-batch size the "
                                 "profile was measured at",
                                 path, no_batch_reason(profile.input_bytes, has_input_node)));
  }
  check_profile(profile, path);
  return model;
}

Profile read_pipedream_graph(const std::string& path, std::optional<int> batch_size) {
  return read_pipedream_model_graph(path, batch_size, BatchSizeUse::Required).profile;
}

ModelGraph chain_graph(const Profile& profile) {
  ModelGraph model;
  model.profile = profile;
  const std::size_t count = profile.layers.size();
  model.consumers.resize(count);
  for (std::size_t l = 0; l + 1 < count; ++l) model.consumers[l] = {static_cast<int>(l + 1)};
  for (const Layer& layer : profile.layers) {
    model.activation_bytes.push_back(layer.stashed_bytes());
    model.descriptions.push_back(layer.name);
  }
  return model;
}

ModelGraph read_model_graph(const std::string& path, std::optional<int> batch_size, BatchSizeUse use) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) return chain_graph(read_profile(path, batch_size));
  return read_pipedream_model_graph(path, batch_size, use);
}

Profile reorder_layers(const ModelGraph& graph, const std::vector<int>& order) {
  const int count = static_cast<int>(graph.profile.layers.size());
  std::vector<int> position(count, -1);
  if (static_cast<int>(order.size()) != count)
    throw InputError(fmt::format("layer order: expected {} layers, found {}", count, order.size()));
  for (int p = 0; p < count; ++p) {
    const int layer = order[p];
    if (layer < 0 || layer >= count || position[layer] >= 0)
      throw InputError(fmt::format("layer order: expected each layer 0..{} once, found {} at position {}", count - 1, layer, p));
    position[layer] = p;
  }
  for (int layer = 0; layer < count; ++layer)
    for (const int consumer : graph.consumers[layer])
      if (position[consumer] < position[layer])
        throw InputError(fmt::format("layer order: '{}' comes before '{}', which feeds it", graph.profile.layers[consumer].name,
                                     graph.profile.layers[layer].name));
  Profile profile = graph.profile;
  profile.layers.clear();
  profile.measured.clear();  // the reordered chain is at the graph's micro-batch size only
  for (const int layer : order) {
    profile.layers.push_back(graph.profile.layers[layer]);
    profile.layers.back().output_bytes = 0;
    profile.layers.back().activation_bytes.reset();
  }
  // A producer's bytes cross every cut from its own position up to (not
  // including) its last consumer's.
  for (int layer = 0; layer < count; ++layer) {
    int last = -1;
    for (const int consumer : graph.consumers[layer]) last = std::max(last, position[consumer]);
    for (int cut = position[layer]; cut < last; ++cut) profile.layers[cut].output_bytes += graph.activation_bytes[layer];
  }
  for (int layer = 0; layer < count; ++layer)
    if (Layer& moved = profile.layers[position[layer]]; position[layer] + 1 < count && graph.activation_bytes[layer] != moved.output_bytes)
      moved.activation_bytes = graph.activation_bytes[layer];
  return profile;
}

}  // namespace pipegrid
