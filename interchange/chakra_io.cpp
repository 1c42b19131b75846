#include "interchange/chakra_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <system_error>
#include <unordered_map>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/platform_check.hpp"
#include "interchange/chakra_et.pb.h"

#include <google/protobuf/stubs/logging.h>

namespace pipegrid::interchange {

namespace {

namespace pb = ChakraProtoMsg;

// Attribute names with a meaning of their own (never ExecutionNode::extra).
constexpr std::string_view attr_num_ops = "num_ops";
constexpr std::string_view attr_tensor_size = "tensor_size";
constexpr std::string_view attr_comm_type = "comm_type";
constexpr std::string_view attr_comm_size = "comm_size";
constexpr std::string_view attr_comm_src = "comm_src";
constexpr std::string_view attr_comm_dst = "comm_dst";
constexpr std::string_view attr_comm_tag = "comm_tag";
constexpr std::string_view attr_pg_name = "pg_name";
constexpr std::string_view attr_exact_duration = "pipegrid_duration_s";
constexpr std::string_view attr_exact_num_ops = "pipegrid_num_ops";
constexpr std::string_view attr_exact_tensor_size = "pipegrid_tensor_size";
constexpr std::string_view attr_exact_comm_size = "pipegrid_comm_size";

constexpr std::string_view reserved_attributes[] = {
    attr_num_ops,  attr_tensor_size, attr_comm_type,      attr_comm_size,   attr_comm_src,
    attr_comm_dst, attr_comm_tag,    attr_pg_name,        attr_exact_duration, attr_exact_num_ops,
    attr_exact_tensor_size, attr_exact_comm_size,
};

bool is_reserved_attribute(std::string_view name) {
  return std::find(std::begin(reserved_attributes), std::end(reserved_attributes), name) !=
         std::end(reserved_attributes);
}

/// 2^63: the sizes and counts below it fit Chakra's int64 fields.
constexpr double integer_limit = 9223372036854775808.0;

std::string in_quotes(std::string_view text) { return "'" + printable(text) + "'"; }

std::string node_label(std::uint64_t id) { return fmt::format("node {}", id); }

/// Whether `text` is well-formed UTF-8 (protobuf strings must be).
bool is_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    int continuation = 0;
    std::uint32_t code = 0;
    if (byte < 0x80) {
      ++i;
      continue;
    } else if ((byte & 0xE0) == 0xC0) {
      continuation = 1;
      code = byte & 0x1F;
    } else if ((byte & 0xF0) == 0xE0) {
      continuation = 2;
      code = byte & 0x0F;
    } else if ((byte & 0xF8) == 0xF0) {
      continuation = 3;
      code = byte & 0x07;
    } else {
      return false;
    }
    if (i + continuation >= text.size()) return false;
    for (int k = 1; k <= continuation; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3F);
    }
    const std::uint32_t least[] = {0, 0x80, 0x800, 0x10000};
    if (code < least[continuation] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += continuation + 1;
  }
  return true;
}

// ---- node type and collective mapping (by name: the enums' numbers differ)

std::optional<pb::NodeType> to_proto(NodeType type) {
  switch (type) {
    case NodeType::MetadataNode: return pb::METADATA_NODE;
    case NodeType::MemLoadNode: return pb::MEM_LOAD_NODE;
    case NodeType::MemStoreNode: return pb::MEM_STORE_NODE;
    case NodeType::CompNode: return pb::COMP_NODE;
    case NodeType::CommSendNode: return pb::COMM_SEND_NODE;
    case NodeType::CommRecvNode: return pb::COMM_RECV_NODE;
    case NodeType::CommCollNode: return pb::COMM_COLL_NODE;
    case NodeType::Invalid: break;
  }
  return std::nullopt;
}

std::optional<NodeType> from_proto(int type) {
  switch (type) {
    case pb::METADATA_NODE: return NodeType::MetadataNode;
    case pb::MEM_LOAD_NODE: return NodeType::MemLoadNode;
    case pb::MEM_STORE_NODE: return NodeType::MemStoreNode;
    case pb::COMP_NODE: return NodeType::CompNode;
    case pb::COMM_SEND_NODE: return NodeType::CommSendNode;
    case pb::COMM_RECV_NODE: return NodeType::CommRecvNode;
    case pb::COMM_COLL_NODE: return NodeType::CommCollNode;
    default: break;
  }
  return std::nullopt;
}

std::optional<pb::CollectiveCommType> to_proto(CollectiveType type) {
  switch (type) {
    case CollectiveType::AllReduce: return pb::ALL_REDUCE;
    case CollectiveType::AllToAll: return pb::ALL_TO_ALL;
    case CollectiveType::AllGather: return pb::ALL_GATHER;
    case CollectiveType::ReduceScatter: return pb::REDUCE_SCATTER;
    case CollectiveType::Broadcast: return pb::BROADCAST;
    case CollectiveType::Barrier: return pb::BARRIER;
  }
  return std::nullopt;
}

std::optional<CollectiveType> collective_from_proto(std::int64_t type) {
  switch (type) {
    case pb::ALL_REDUCE: return CollectiveType::AllReduce;
    case pb::ALL_TO_ALL: return CollectiveType::AllToAll;
    case pb::ALL_GATHER: return CollectiveType::AllGather;
    case pb::REDUCE_SCATTER: return CollectiveType::ReduceScatter;
    case pb::BROADCAST: return CollectiveType::Broadcast;
    case pb::BARRIER: return CollectiveType::Barrier;
    default: break;
  }
  return std::nullopt;
}

const char* supported_collectives =
    "ALL_REDUCE (0), ALL_GATHER (2), BROADCAST (5), ALL_TO_ALL (6), REDUCE_SCATTER (7) or BARRIER (9)";

// ---- attribute values

/// The name of the value type an attribute holds ("int64_val", ...).
std::string value_type_name(const pb::AttributeProto& attribute) {
  if (attribute.value_case() == pb::AttributeProto::VALUE_NOT_SET) return "no value";
  const auto* field = pb::AttributeProto::descriptor()->FindFieldByNumber(attribute.value_case());
  return field ? std::string(field->name()) : fmt::format("value field {}", static_cast<int>(attribute.value_case()));
}

/// An integer-typed value, or nullopt for any other type. Values of
/// uint64/fixed64 above 2^63 - 1 come back as nullopt through `too_large`.
std::optional<std::int64_t> integer_value(const pb::AttributeProto& a, bool& too_large) {
  too_large = false;
  switch (a.value_case()) {
    case pb::AttributeProto::kInt32Val: return a.int32_val();
    case pb::AttributeProto::kInt64Val: return a.int64_val();
    case pb::AttributeProto::kUint32Val: return a.uint32_val();
    case pb::AttributeProto::kSint32Val: return a.sint32_val();
    case pb::AttributeProto::kSint64Val: return a.sint64_val();
    case pb::AttributeProto::kFixed32Val: return a.fixed32_val();
    case pb::AttributeProto::kSfixed32Val: return a.sfixed32_val();
    case pb::AttributeProto::kSfixed64Val: return a.sfixed64_val();
    case pb::AttributeProto::kUint64Val:
    case pb::AttributeProto::kFixed64Val: {
      const std::uint64_t value =
          a.value_case() == pb::AttributeProto::kUint64Val ? a.uint64_val() : a.fixed64_val();
      if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        too_large = true;
        return std::nullopt;
      }
      return static_cast<std::int64_t>(value);
    }
    default: return std::nullopt;
  }
}

/// A numeric value (any integer or floating-point type), or nullopt.
std::optional<double> number_value(const pb::AttributeProto& a) {
  switch (a.value_case()) {
    case pb::AttributeProto::kDoubleVal: return a.double_val();
    case pb::AttributeProto::kFloatVal: return a.float_val();
    case pb::AttributeProto::kUint64Val: return static_cast<double>(a.uint64_val());
    case pb::AttributeProto::kFixed64Val: return static_cast<double>(a.fixed64_val());
    default: break;
  }
  bool too_large = false;
  if (const auto integer = integer_value(a, too_large)) return static_cast<double>(*integer);
  return std::nullopt;
}

template <typename List, typename Format>
std::string list_text(const List& list, Format format) {
  std::string text = "[";
  for (int i = 0; i < list.values_size(); ++i) {
    if (i > 0) text += ", ";
    text += format(list.values(i));
  }
  return text + "]";
}

std::string hex_text(const std::string& bytes) {
  std::string text;
  for (const char c : bytes) text += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return text;
}

/// An attribute pipegrid has no field for, as ExecutionNode::extra's text:
/// strings as they are, numbers in decimal (doubles exact), bools as
/// true/false, bytes as hexadecimal digits, lists as "[a, b]".
std::string extra_text(const pb::AttributeProto& a) {
  const auto decimal = [](auto v) { return fmt::format("{}", v); };
  const auto exact = [](double v) { return format_exact(v); };
  const auto boolean = [](bool v) { return std::string(v ? "true" : "false"); };
  switch (a.value_case()) {
    case pb::AttributeProto::kStringVal: return a.string_val();
    case pb::AttributeProto::kBytesVal: return hex_text(a.bytes_val());
    case pb::AttributeProto::kBoolVal: return boolean(a.bool_val());
    case pb::AttributeProto::kDoubleVal: return exact(a.double_val());
    case pb::AttributeProto::kFloatVal: return exact(a.float_val());
    case pb::AttributeProto::kUint64Val: return decimal(a.uint64_val());
    case pb::AttributeProto::kFixed64Val: return decimal(a.fixed64_val());
    case pb::AttributeProto::kDoubleList: return list_text(a.double_list(), exact);
    case pb::AttributeProto::kFloatList: return list_text(a.float_list(), exact);
    case pb::AttributeProto::kInt32List: return list_text(a.int32_list(), decimal);
    case pb::AttributeProto::kInt64List: return list_text(a.int64_list(), decimal);
    case pb::AttributeProto::kUint32List: return list_text(a.uint32_list(), decimal);
    case pb::AttributeProto::kUint64List: return list_text(a.uint64_list(), decimal);
    case pb::AttributeProto::kSint32List: return list_text(a.sint32_list(), decimal);
    case pb::AttributeProto::kSint64List: return list_text(a.sint64_list(), decimal);
    case pb::AttributeProto::kFixed32List: return list_text(a.fixed32_list(), decimal);
    case pb::AttributeProto::kFixed64List: return list_text(a.fixed64_list(), decimal);
    case pb::AttributeProto::kSfixed32List: return list_text(a.sfixed32_list(), decimal);
    case pb::AttributeProto::kSfixed64List: return list_text(a.sfixed64_list(), decimal);
    case pb::AttributeProto::kBoolList: return list_text(a.bool_list(), boolean);
    case pb::AttributeProto::kStringList: return list_text(a.string_list(), [](const std::string& v) { return v; });
    case pb::AttributeProto::kBytesList: return list_text(a.bytes_list(), hex_text);
    case pb::AttributeProto::VALUE_NOT_SET: return "";
    default: break;
  }
  bool too_large = false;
  if (const auto integer = integer_value(a, too_large)) return decimal(*integer);
  return "";
}

// ---- length-delimited messages

/// Reads the varint byte count at `offset`; advances it.
std::uint64_t read_byte_count(std::string_view bytes, std::size_t& offset, const std::string& file_name,
                              int message_index, const std::string& after) {
  const std::size_t start = offset;
  std::uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (offset >= bytes.size()) {
      throw InputError(fmt::format(
          "{}: message {} (at byte {}{}): truncated byte count: the varint runs past the end of the file ({} bytes)",
          file_name, message_index, start, after, bytes.size()));
    }
    const auto byte = static_cast<unsigned char>(bytes[offset++]);
    value |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return value;
  }
  throw InputError(fmt::format("{}: message {} (at byte {}{}): byte count: expected a varint of at most 10 bytes, "
                               "found more",
                               file_name, message_index, start, after));
}

/// The next message's bytes; advances `offset` past them.
/// `after`: where the message stands, for messages (", after node 7").
std::string_view next_message(std::string_view bytes, std::size_t& offset, const std::string& file_name,
                              int message_index, const std::string& after) {
  const std::size_t start = offset;
  const std::uint64_t count = read_byte_count(bytes, offset, file_name, message_index, after);
  const std::size_t remaining = bytes.size() - offset;
  if (count > remaining) {
    throw InputError(fmt::format("{}: message {} (at byte {}{}): its byte count {} runs past the end of the file "
                                 "({} bytes remain)",
                                 file_name, message_index, start, after, count, remaining));
  }
  if (count > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
    throw InputError(fmt::format("{}: message {} (at byte {}{}): byte count: expected less than 2 GiB, found {}",
                                 file_name, message_index, start, after, count));
  }
  const std::string_view message = bytes.substr(offset, static_cast<std::size_t>(count));
  offset += static_cast<std::size_t>(count);
  return message;
}

/// Parses `bytes` into `message`; protobuf's own log lines (invalid UTF-8
/// in a string field) are silenced: the caller's InputError says it.
bool parse_quietly(google::protobuf::MessageLite& message, std::string_view bytes) {
  const google::protobuf::LogSilencer quiet;
  return message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

void append_message(std::string& out, const google::protobuf::MessageLite& message) {
  const std::string body = message.SerializeAsString();
  std::uint64_t count = body.size();
  while (count >= 0x80) {
    out += static_cast<char>((count & 0x7F) | 0x80);
    count >>= 7;
  }
  out += static_cast<char>(count);
  out += body;
}

// ---- writing one node

void add_attribute(pb::Node& node, std::string_view name, auto set) {
  pb::AttributeProto* attribute = node.add_attr();
  attribute->set_name(std::string(name));
  set(*attribute);
}

/// A size or count: Chakra's integer, plus the exact value where it differs.
void add_whole_number(pb::Node& node, std::string_view name, std::string_view exact_name, double value,
                      bool as_unsigned) {
  const auto whole = static_cast<std::int64_t>(std::llround(value));
  add_attribute(node, name, [&](pb::AttributeProto& a) {
    if (as_unsigned) {
      a.set_uint64_val(static_cast<std::uint64_t>(whole));
    } else {
      a.set_int64_val(whole);
    }
  });
  if (static_cast<double>(whole) != value) {
    add_attribute(node, exact_name, [&](pb::AttributeProto& a) { a.set_double_val(value); });
  }
}

pb::Node node_to_proto(const ExecutionNode& node) {
  pb::Node out;
  out.set_id(node.id);
  out.set_name(node.name);
  out.set_type(*to_proto(node.type));
  for (const auto dep : node.ctrl_deps) out.add_ctrl_deps(dep);
  for (const auto dep : node.data_deps) out.add_data_deps(dep);
  out.set_duration_micros(static_cast<std::uint64_t>(std::llround(node.duration_s * 1e6)));
  add_attribute(out, attr_exact_duration, [&](pb::AttributeProto& a) { a.set_double_val(node.duration_s); });
  if (node.num_ops) add_whole_number(out, attr_num_ops, attr_exact_num_ops, *node.num_ops, false);
  if (node.tensor_size) add_whole_number(out, attr_tensor_size, attr_exact_tensor_size, *node.tensor_size, true);
  if (node.comm_type) {
    add_attribute(out, attr_comm_type, [&](pb::AttributeProto& a) { a.set_int64_val(*to_proto(*node.comm_type)); });
  }
  if (node.comm_size) add_whole_number(out, attr_comm_size, attr_exact_comm_size, *node.comm_size, false);
  const auto add_int32 = [&](std::string_view name, const std::optional<int>& value) {
    if (value) add_attribute(out, name, [&](pb::AttributeProto& a) { a.set_int32_val(*value); });
  };
  add_int32(attr_comm_src, node.comm_src);
  add_int32(attr_comm_dst, node.comm_dst);
  add_int32(attr_comm_tag, node.comm_tag);
  if (!node.pg_name.empty()) {
    add_attribute(out, attr_pg_name, [&](pb::AttributeProto& a) { a.set_string_val(node.pg_name); });
  }
  for (const auto& entry : node.extra) {
    add_attribute(out, entry.first, [&](pb::AttributeProto& a) { a.set_string_val(entry.second); });
  }
  return out;
}

// ---- reading one node

struct NodeContext {
  const std::string& file_name;
  std::uint64_t id;
};

[[noreturn]] void node_error(const NodeContext& at, std::string_view what) {
  throw InputError(fmt::format("{}: {}: {}", at.file_name, node_label(at.id), what));
}

double read_number(const NodeContext& at, const pb::AttributeProto& a) {
  if (const auto value = number_value(a)) return *value;
  node_error(at, fmt::format("attribute {}: expected a number (an integer or floating-point value), found {}",
                             a.name(), value_type_name(a)));
}

std::int64_t read_integer(const NodeContext& at, const pb::AttributeProto& a) {
  bool too_large = false;
  if (const auto value = integer_value(a, too_large)) return *value;
  if (too_large) {
    node_error(at, fmt::format("attribute {}: expected an integer below 2^63, found {} {}", a.name(),
                               value_type_name(a), extra_text(a)));
  }
  node_error(at, fmt::format("attribute {}: expected an integer value (int32_val, int64_val, uint64_val, ...), "
                             "found {}",
                             a.name(), value_type_name(a)));
}

int read_rank_number(const NodeContext& at, const pb::AttributeProto& a) {
  const std::int64_t value = read_integer(at, a);
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    node_error(at, fmt::format("attribute {}: expected a 32-bit integer, found {}", a.name(), value));
  }
  return static_cast<int>(value);
}

ExecutionNode node_from_proto(const pb::Node& in, const std::string& file_name) {
  const NodeContext at{file_name, in.id()};
  ExecutionNode node;
  node.id = in.id();
  node.name = in.name();
  const auto type = from_proto(in.type());
  if (!type) {
    const auto* value = pb::NodeType_descriptor()->FindValueByNumber(in.type());
    node_error(at, fmt::format("type: expected METADATA_NODE (1), MEM_LOAD_NODE (2), MEM_STORE_NODE (3), "
                               "COMP_NODE (4), COMM_SEND_NODE (5), COMM_RECV_NODE (6) or COMM_COLL_NODE (7), "
                               "found {}",
                               value ? fmt::format("{} ({})", value->name(), in.type())
                                     : fmt::format("unknown value {}", in.type())));
  }
  node.type = *type;
  node.ctrl_deps.assign(in.ctrl_deps().begin(), in.ctrl_deps().end());
  node.data_deps.assign(in.data_deps().begin(), in.data_deps().end());

  std::optional<double> exact_duration, exact_num_ops, exact_tensor_size, exact_comm_size;
  std::set<std::string> seen;
  for (const auto& a : in.attr()) {
    if (!seen.insert(a.name()).second) {
      node_error(at, fmt::format("attribute {}: given twice", in_quotes(a.name())));
    }
    const std::string_view name = a.name();
    if (name == attr_num_ops) {
      node.num_ops = read_number(at, a);
    } else if (name == attr_tensor_size) {
      node.tensor_size = read_number(at, a);
    } else if (name == attr_comm_size) {
      node.comm_size = read_number(at, a);
    } else if (name == attr_exact_duration) {
      exact_duration = read_number(at, a);
    } else if (name == attr_exact_num_ops) {
      exact_num_ops = read_number(at, a);
    } else if (name == attr_exact_tensor_size) {
      exact_tensor_size = read_number(at, a);
    } else if (name == attr_exact_comm_size) {
      exact_comm_size = read_number(at, a);
    } else if (name == attr_comm_type) {
      const std::int64_t value = read_integer(at, a);
      const auto collective = collective_from_proto(value);
      if (!collective) {
        const auto* known = pb::CollectiveCommType_descriptor()->FindValueByNumber(
            static_cast<int>(std::clamp<std::int64_t>(value, -1, 1000)));
        node_error(at, fmt::format("attribute comm_type: expected {}, found {}", supported_collectives,
                                   known ? fmt::format("{} ({}), which pipegrid does not simulate", known->name(), value)
                                         : fmt::format("unknown value {}", value)));
      }
      node.comm_type = *collective;
    } else if (name == attr_comm_src) {
      node.comm_src = read_rank_number(at, a);
    } else if (name == attr_comm_dst) {
      node.comm_dst = read_rank_number(at, a);
    } else if (name == attr_comm_tag) {
      node.comm_tag = read_rank_number(at, a);
    } else if (name == attr_pg_name) {
      if (a.value_case() != pb::AttributeProto::kStringVal) {
        node_error(at, fmt::format("attribute pg_name: expected string_val, found {}", value_type_name(a)));
      }
      node.pg_name = a.string_val();
    } else {
      node.extra[a.name()] = extra_text(a);
    }
  }
  node.duration_s = exact_duration ? *exact_duration : static_cast<double>(in.duration_micros()) / 1e6;
  if (exact_num_ops) node.num_ops = exact_num_ops;
  if (exact_tensor_size) node.tensor_size = exact_tensor_size;
  if (exact_comm_size) node.comm_size = exact_comm_size;
  return node;
}

void check_quantity(const NodeContext& at, std::string_view field, double value) {
  if (!std::isfinite(value) || value < 0 || value >= integer_limit) {
    node_error(at, fmt::format("{}: expected a finite number at least 0 and below 2^63, found {}", field,
                               format_exact(value)));
  }
}

/// Seconds whose microseconds fit duration_micros.
void check_duration(const NodeContext& at, double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds * 1e6 >= integer_limit) {
    node_error(at, fmt::format("duration: expected a finite number of seconds at least 0 and below 2^63 "
                               "microseconds, found {}",
                               format_exact(seconds)));
  }
}

void check_text(const NodeContext& at, std::string_view field, std::string_view text) {
  if (!is_utf8(text)) node_error(at, fmt::format("{}: expected UTF-8 text, found {}", field, in_quotes(text)));
}

}  // namespace

std::string chakra_trace_file(const std::string& prefix, int rank) { return fmt::format("{}.{}.et", prefix, rank); }

std::string chakra_comm_groups_file(const std::string& prefix) { return prefix + ".json"; }

void check_rank_graph(const RankGraph& graph, const std::string& file_name, int rank_count,
                      const std::map<std::string, std::vector<int>>& process_groups,
                      const std::string& groups_file) {
  std::unordered_map<std::uint64_t, std::size_t> index_of;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!index_of.emplace(graph.nodes[i].id, i).second) {
      throw InputError(fmt::format("{}: node {}: id: expected ids unique on the rank, found it twice", file_name,
                                   graph.nodes[i].id));
    }
  }
  std::vector<int> waiting(graph.nodes.size(), 0);
  std::vector<std::vector<std::size_t>> dependants(graph.nodes.size());
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    const ExecutionNode& node = graph.nodes[i];
    const NodeContext at{file_name, node.id};
    if (!to_proto(node.type)) node_error(at, "type: expected a node type, found Invalid");
    check_text(at, "name", node.name);
    for (const auto& [deps, field] : {std::pair{&node.ctrl_deps, "ctrl_deps"}, std::pair{&node.data_deps, "data_deps"}}) {
      for (const std::uint64_t dep : *deps) {
        const auto found = index_of.find(dep);
        if (found == index_of.end()) {
          node_error(at, fmt::format("{}: expected ids of nodes of this rank, found {}, which no node has", field, dep));
        }
        if (dep == node.id) node_error(at, fmt::format("{}: the node depends on itself", field));
        ++waiting[i];
        dependants[found->second].push_back(i);
      }
    }
    check_duration(at, node.duration_s);
    if (node.num_ops) check_quantity(at, attr_num_ops, *node.num_ops);
    if (node.tensor_size) check_quantity(at, attr_tensor_size, *node.tensor_size);
    if (node.comm_size) check_quantity(at, attr_comm_size, *node.comm_size);
    if (node.comm_type && !to_proto(*node.comm_type)) {
      node_error(at, fmt::format("comm_type: expected a collective, found value {}", static_cast<int>(*node.comm_type)));
    }
    for (const auto& [peer, field] : {std::pair{&node.comm_src, "comm_src"}, std::pair{&node.comm_dst, "comm_dst"}}) {
      if (*peer && (**peer < 0 || **peer >= rank_count)) {
        node_error(at, fmt::format("attribute {}: expected a rank from 0 to {} (the set has {} ranks), found {}",
                                   field, rank_count - 1, rank_count, **peer));
      }
    }
    if (node.type == NodeType::CommSendNode && !node.comm_dst) {
      node_error(at, "COMM_SEND_NODE without a comm_dst attribute: expected the receiving rank");
    }
    if (node.type == NodeType::CommRecvNode && !node.comm_src) {
      node_error(at, "COMM_RECV_NODE without a comm_src attribute: expected the sending rank");
    }
    if (node.type == NodeType::CommCollNode) {
      if (!node.comm_type) node_error(at, "COMM_COLL_NODE without a comm_type attribute: expected the collective");
      if (!node.pg_name.empty()) {
        const auto group = process_groups.find(node.pg_name);
        if (group == process_groups.end()) {
          node_error(at, groups_file.empty()
                             ? fmt::format("attribute pg_name: names process group {}, but the set has no "
                                           "communicator-group file",
                                           in_quotes(node.pg_name))
                             : fmt::format("attribute pg_name: expected a group of {}, found {}", groups_file,
                                           in_quotes(node.pg_name)));
        }
        if (std::find(group->second.begin(), group->second.end(), graph.rank) == group->second.end()) {
          node_error(at, fmt::format("attribute pg_name: process group {} does not hold this rank ({})",
                                     in_quotes(node.pg_name), graph.rank));
        }
      }
    }
    check_text(at, "attribute pg_name", node.pg_name);
    for (const auto& [name, value] : node.extra) {
      if (name.empty()) node_error(at, "extra attribute: expected a name, found an empty one");
      if (is_reserved_attribute(name)) {
        node_error(at, fmt::format("extra attribute {}: the name is one of pipegrid's Chakra attributes",
                                   in_quotes(name)));
      }
      check_text(at, "extra attribute name", name);
      check_text(at, fmt::format("attribute {}", name), value);
    }
  }
  // A cycle: what remains after every node without waits is taken away.
  std::vector<std::size_t> ready;
  for (std::size_t i = 0; i < waiting.size(); ++i) {
    if (waiting[i] == 0) ready.push_back(i);
  }
  std::size_t done = 0;
  while (!ready.empty()) {
    const std::size_t i = ready.back();
    ready.pop_back();
    ++done;
    for (const std::size_t next : dependants[i]) {
      if (--waiting[next] == 0) ready.push_back(next);
    }
  }
  if (done != graph.nodes.size()) {
    for (std::size_t i = 0; i < waiting.size(); ++i) {
      if (waiting[i] > 0) {
        node_error(NodeContext{file_name, graph.nodes[i].id},
                   "ctrl_deps/data_deps: expected a graph without cycles, found the node on or after a cycle of "
                   "dependencies");
      }
    }
  }
}

std::string encode_chakra_rank(const RankGraph& graph, const std::string& file_name, int rank_count,
                               const std::map<std::string, std::vector<int>>& process_groups) {
  check_rank_graph(graph, file_name, rank_count, process_groups, "the trace set's process groups");
  std::string out;
  pb::GlobalMetadata metadata;
  metadata.set_version(std::string(chakra_trace_version));
  append_message(out, metadata);
  for (const ExecutionNode& node : graph.nodes) append_message(out, node_to_proto(node));
  return out;
}

RankGraph decode_chakra_rank(std::string_view bytes, const std::string& file_name, int rank, int rank_count,
                             const std::map<std::string, std::vector<int>>& process_groups,
                             const std::string& groups_file) {
  RankGraph graph;
  graph.rank = rank;
  if (bytes.empty()) {
    throw InputError(fmt::format("{}: expected a GlobalMetadata message first, found an empty file", file_name));
  }
  std::size_t offset = 0;
  const std::string_view first = next_message(bytes, offset, file_name, 0, ", the GlobalMetadata");
  pb::GlobalMetadata metadata;
  if (!parse_quietly(metadata, first)) {
    throw InputError(fmt::format("{}: message 0: expected a GlobalMetadata message, found bytes that do not parse "
                                 "as one (malformed, or a string that is not UTF-8)",
                                 file_name));
  }
  for (int index = 1; offset < bytes.size(); ++index) {
    const std::size_t start = offset;
    const std::string after =
        graph.nodes.empty() ? ", the first node" : fmt::format(", after node {}", graph.nodes.back().id);
    const std::string_view message = next_message(bytes, offset, file_name, index, after);
    pb::Node node;
    if (!parse_quietly(node, message)) {
      throw InputError(fmt::format("{}: message {} (at byte {}{}): expected a Node message, found {} bytes that do "
                                   "not parse as one (malformed, or a string that is not UTF-8)",
                                   file_name, index, start, after, message.size()));
    }
    graph.nodes.push_back(node_from_proto(node, file_name));
  }
  check_rank_graph(graph, file_name, rank_count, process_groups, groups_file);
  return graph;
}

std::string encode_comm_groups(const std::map<std::string, std::vector<int>>& process_groups) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const auto& [name, ranks] : process_groups) json[name] = ranks;
  return json.dump(2) + "\n";
}

std::map<std::string, std::vector<int>> decode_comm_groups(std::string_view text, const std::string& file_name,
                                                           int rank_count) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    throw InputError(fmt::format("{}: expected JSON ({{\"<pg_name>\": [ranks...]}}), found: {}", file_name,
                                 error.what()));
  }
  if (!json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object ({{\"<pg_name>\": [ranks...]}}), found {}", file_name,
                                 json.type_name()));
  }
  std::map<std::string, std::vector<int>> groups;
  for (const auto& [name, value] : json.items()) {
    const std::string where = fmt::format("{}: group {}", file_name, in_quotes(name));
    if (!value.is_array() || value.empty()) {
      throw InputError(fmt::format("{}: expected a non-empty array of ranks, found {}", where,
                                   value.is_array() ? "an empty array" : value.type_name()));
    }
    std::vector<int> ranks;
    for (const auto& element : value) {
      if (!element.is_number_integer() || element.get<std::int64_t>() < 0 ||
          element.get<std::int64_t>() >= rank_count) {
        throw InputError(fmt::format("{}: expected ranks from 0 to {} (the set has {} trace files), found {}", where,
                                     rank_count - 1, rank_count, printable(element.dump())));
      }
      const int rank = element.get<int>();
      if (std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) {
        throw InputError(fmt::format("{}: expected distinct ranks, found rank {} twice", where, rank));
      }
      ranks.push_back(rank);
    }
    groups.emplace(name, std::move(ranks));
  }
  return groups;
}

void write_chakra_trace_set(const ExecutionTraceSet& set, const std::string& prefix) {
  if (set.ranks.empty()) throw InputError(fmt::format("{}: a Chakra trace set needs at least one rank", prefix));
  const int rank_count = static_cast<int>(set.ranks.size());
  const std::string groups_file = chakra_comm_groups_file(prefix);
  for (const auto& group : set.process_groups) {
    if (!is_utf8(group.first)) {
      throw InputError(fmt::format("{}: group name: expected UTF-8 text, found {}", groups_file,
                                   in_quotes(group.first)));
    }
  }
  // The groups go through the reader's checks too (ranks in range, distinct).
  decode_comm_groups(encode_comm_groups(set.process_groups), groups_file, rank_count);
  std::vector<std::pair<std::string, std::string>> files;
  for (int rank = 0; rank < rank_count; ++rank) {
    const RankGraph& graph = set.ranks[static_cast<std::size_t>(rank)];
    const std::string file = chakra_trace_file(prefix, rank);
    if (graph.rank != rank) {
      throw InputError(fmt::format("{}: rank: expected {} (the graph's position in the set), found {}", file, rank,
                                   graph.rank));
    }
    files.emplace_back(file, encode_chakra_rank(graph, file, rank_count, set.process_groups));
  }
  const std::string next = chakra_trace_file(prefix, rank_count);
  std::error_code error;
  if (std::filesystem::exists(std::filesystem::symlink_status(next, error))) {
    throw InputError(fmt::format("{}: exists, and would be read as rank {} of this {}-rank trace set: remove it or "
                                 "write to another prefix",
                                 next, rank_count, rank_count));
  }
  OutputFileSet outputs;
  for (const auto& [file, content] : files) outputs.add(file, content);
  outputs.add(groups_file, encode_comm_groups(set.process_groups));
  outputs.commit();
}

ExecutionTraceSet read_chakra_trace_set(const std::string& prefix) {
  namespace fs = std::filesystem;
  std::error_code error;
  int rank_count = 0;
  while (fs::exists(chakra_trace_file(prefix, rank_count), error)) ++rank_count;
  if (rank_count == 0) {
    throw InputError(fmt::format("{}: expected Chakra trace files {} (and {}, ...), found no {}", prefix,
                                 chakra_trace_file(prefix, 0), chakra_trace_file(prefix, 1),
                                 chakra_trace_file(prefix, 0)));
  }
  // A file past a gap would be silently left out.
  const fs::path prefix_path(prefix);
  const fs::path folder = prefix_path.has_parent_path() ? prefix_path.parent_path() : fs::path(".");
  const std::string stem = prefix_path.filename().string() + ".";
  for (fs::directory_iterator entry(folder, error), end; !error && entry != end; entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    if (name.size() <= stem.size() + 3 || name.compare(0, stem.size(), stem) != 0 ||
        name.compare(name.size() - 3, 3, ".et") != 0) {
      continue;
    }
    const std::string_view digits(name.data() + stem.size(), name.size() - stem.size() - 3);
    int rank = 0;
    const auto [end_of_number, status] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
    if (status != std::errc() || end_of_number != digits.data() + digits.size()) continue;
    if (digits.size() > 1 && digits.front() == '0') continue;  // not a name the writer gives
    if (rank > rank_count) {
      throw InputError(fmt::format("{}: expected trace files for consecutive ranks from 0, found {} but no {}",
                                   prefix, (folder / name).string(), chakra_trace_file(prefix, rank_count)));
    }
  }

  ExecutionTraceSet set;
  const std::string groups_file = chakra_comm_groups_file(prefix);
  std::string groups_file_read;
  if (fs::exists(groups_file, error)) {
    set.process_groups = decode_comm_groups(read_text_file(groups_file), groups_file, rank_count);
    groups_file_read = groups_file;
  }
  for (int rank = 0; rank < rank_count; ++rank) {
    const std::string file = chakra_trace_file(prefix, rank);
    set.ranks.push_back(
        decode_chakra_rank(read_text_file(file), file, rank, rank_count, set.process_groups, groups_file_read));
  }
  return set;
}

}  // namespace pipegrid::interchange
