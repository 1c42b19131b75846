// Chakra execution traces (interchange/chakra_io.hpp): the round trip, the
// set written by the independent Python writer (tests/data/chakra-external),
// and the reader's errors on bad files.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "core/io.hpp"
#include "interchange/chakra_et.pb.h"
#include "interchange/chakra_io.hpp"
#include "tests/expect_input_error.hpp"
#include "tests/scratch_folder.hpp"

namespace pipegrid::interchange {
namespace {

using testutil::input_error_of;
using testutil::ScratchFolder;
namespace pb = ChakraProtoMsg;

void expect_same_node(const ExecutionNode& a, const ExecutionNode& b) {
  SCOPED_TRACE("node " + std::to_string(a.id));
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.ctrl_deps, b.ctrl_deps);
  EXPECT_EQ(a.data_deps, b.data_deps);
  EXPECT_EQ(a.duration_s, b.duration_s);  // exact, not near
  EXPECT_EQ(a.num_ops, b.num_ops);
  EXPECT_EQ(a.tensor_size, b.tensor_size);
  EXPECT_EQ(a.comm_size, b.comm_size);
  EXPECT_EQ(a.comm_src, b.comm_src);
  EXPECT_EQ(a.comm_dst, b.comm_dst);
  EXPECT_EQ(a.comm_tag, b.comm_tag);
  EXPECT_EQ(a.comm_type, b.comm_type);
  EXPECT_EQ(a.pg_name, b.pg_name);
  EXPECT_EQ(a.extra, b.extra);
}

void expect_same_set(const ExecutionTraceSet& a, const ExecutionTraceSet& b) {
  EXPECT_EQ(a.process_groups, b.process_groups);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    EXPECT_EQ(a.ranks[r].rank, b.ranks[r].rank);
    ASSERT_EQ(a.ranks[r].nodes.size(), b.ranks[r].nodes.size());
    for (std::size_t i = 0; i < a.ranks[r].nodes.size(); ++i) expect_same_node(a.ranks[r].nodes[i], b.ranks[r].nodes[i]);
  }
}

ExecutionNode node(std::uint64_t id, NodeType type, double duration_s) {
  ExecutionNode n;
  n.id = id;
  n.name = "node" + std::to_string(id);
  n.type = type;
  n.duration_s = duration_s;
  return n;
}

/// Two ranks using every field: every node type, every collective, sizes
/// that are whole numbers and ones that are not, durations that microseconds
/// cannot hold, extra attributes.
ExecutionTraceSet every_field_set() {
  ExecutionTraceSet set;
  set.process_groups = {{"0", {0, 1}}, {"tp", {1, 0}}};
  RankGraph first{0, {}};
  auto compute = node(10, NodeType::CompNode, 1.2345678901234567e-3);
  compute.num_ops = 3e9 + 0.25;  // not a whole number
  compute.tensor_size = 4194304;
  compute.extra = {{"pipegrid_stage", "0"}, {"pipegrid_action", "F0"}, {"note", "ünïcode, spaces"}};
  first.nodes.push_back(compute);
  auto send = node(11, NodeType::CommSendNode, 0);
  send.data_deps = {10};
  send.comm_src = 0;
  send.comm_dst = 1;
  send.comm_tag = 7;
  send.comm_size = 1024;
  first.nodes.push_back(send);
  auto recv = node(12, NodeType::CommRecvNode, 0);
  recv.ctrl_deps = {10};
  recv.comm_src = 1;
  recv.comm_tag = 8;
  recv.comm_size = 1000.5;
  recv.pg_name = "pp";  // a name on a point-to-point node need not be a group
  first.nodes.push_back(recv);
  const CollectiveType collectives[] = {CollectiveType::AllReduce, CollectiveType::AllToAll,
                                        CollectiveType::AllGather, CollectiveType::ReduceScatter,
                                        CollectiveType::Broadcast, CollectiveType::Barrier};
  std::uint64_t id = 13;
  for (const auto collective : collectives) {
    auto coll = node(id, NodeType::CommCollNode, 0);
    coll.ctrl_deps = {id - 1, 11};
    coll.data_deps = {12};
    coll.comm_type = collective;
    coll.comm_size = 1e6 * static_cast<double>(id);
    coll.pg_name = id % 2 ? "0" : "tp";
    first.nodes.push_back(coll);
    ++id;
  }
  first.nodes.push_back(node(0, NodeType::MetadataNode, 0));
  first.nodes.push_back(node(1, NodeType::MemLoadNode, 2.5e-6));
  auto store = node(2, NodeType::MemStoreNode, 0.1 + 1e-12);
  store.tensor_size = 0.5;
  store.ctrl_deps = {1};
  first.nodes.push_back(store);
  set.ranks.push_back(first);

  RankGraph second{1, {}};
  auto r = node(0, NodeType::CommRecvNode, 0);
  r.comm_src = 0;
  r.comm_dst = 1;
  r.comm_tag = 7;
  r.comm_size = 1024;
  second.nodes.push_back(r);
  auto c = node(1, NodeType::CompNode, 7.0);
  c.num_ops = 0;
  c.data_deps = {0};
  c.name = "";
  second.nodes.push_back(c);
  auto all_reduce = node(2, NodeType::CommCollNode, 0);
  all_reduce.comm_type = CollectiveType::AllReduce;
  all_reduce.data_deps = {1};
  all_reduce.pg_name = "0";
  second.nodes.push_back(all_reduce);
  auto world = node(3, NodeType::CommCollNode, 0);  // no pg_name: every rank
  world.comm_type = CollectiveType::Barrier;
  world.ctrl_deps = {2};
  second.nodes.push_back(world);
  set.ranks.push_back(second);
  return set;
}

std::string prefix_in(const ScratchFolder& folder, const std::string& name = "trace") {
  return (folder.path() / name).string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string delimited(const google::protobuf::MessageLite& message) {
  const std::string body = message.SerializeAsString();
  std::string out;
  std::uint64_t count = body.size();
  while (count >= 0x80) {
    out += static_cast<char>((count & 0x7F) | 0x80);
    count >>= 7;
  }
  out += static_cast<char>(count);
  return out + body;
}

/// The messages of a trace file's bytes (a test's own varint decoder).
std::vector<std::string> split_messages(const std::string& bytes) {
  std::vector<std::string> messages;
  std::size_t offset = 0;
  while (offset < bytes.size()) {
    std::uint64_t count = 0;
    for (int shift = 0;; shift += 7) {
      const auto byte = static_cast<unsigned char>(bytes.at(offset++));
      count |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) break;
    }
    messages.push_back(bytes.substr(offset, count));
    offset += count;
  }
  return messages;
}

std::string metadata_bytes() {
  pb::GlobalMetadata metadata;
  metadata.set_version("1.0.0");
  return delimited(metadata);
}

pb::Node proto_node(std::uint64_t id, pb::NodeType type) {
  pb::Node n;
  n.set_id(id);
  n.set_name("n" + std::to_string(id));
  n.set_type(type);
  n.set_duration_micros(5);
  return n;
}

pb::AttributeProto* add_attr(pb::Node& n, const std::string& name) {
  auto* a = n.add_attr();
  a->set_name(name);
  return a;
}

/// Writes one trace file per entry (rank r = position) and, when not empty,
/// the group JSON; returns the prefix.
std::string write_raw_set(const ScratchFolder& folder, const std::vector<std::string>& rank_bytes,
                          const std::string& groups_json = "") {
  const std::string prefix = prefix_in(folder);
  for (std::size_t r = 0; r < rank_bytes.size(); ++r) {
    write_bytes(chakra_trace_file(prefix, static_cast<int>(r)), rank_bytes[r]);
  }
  if (!groups_json.empty()) write_bytes(chakra_comm_groups_file(prefix), groups_json);
  return prefix;
}

std::string rank_bytes(const std::vector<pb::Node>& nodes) {
  std::string out = metadata_bytes();
  for (const auto& n : nodes) out += delimited(n);
  return out;
}

/// The reader's error on a one-rank set of `nodes`.
std::string read_error(const std::vector<pb::Node>& nodes, const std::string& groups_json = "") {
  ScratchFolder folder("chakra-bad");
  const std::string prefix = write_raw_set(folder, {rank_bytes(nodes)}, groups_json);
  return input_error_of([&] { read_chakra_trace_set(prefix); });
}

TEST(ChakraIo, RoundTripKeepsEveryField) {
  ScratchFolder folder("chakra-round-trip");
  const ExecutionTraceSet set = every_field_set();
  write_chakra_trace_set(set, prefix_in(folder));
  const ExecutionTraceSet again = read_chakra_trace_set(prefix_in(folder));
  expect_same_set(set, again);
  // Written again: the same bytes (deterministic, nothing drifts).
  const std::string first_bytes = read_text_file(chakra_trace_file(prefix_in(folder), 0));
  write_chakra_trace_set(again, prefix_in(folder, "again"));
  EXPECT_EQ(read_text_file(chakra_trace_file(prefix_in(folder, "again"), 0)), first_bytes);
  EXPECT_EQ(read_text_file(chakra_comm_groups_file(prefix_in(folder))),
            "{\n  \"0\": [\n    0,\n    1\n  ],\n  \"tp\": [\n    1,\n    0\n  ]\n}\n");
}

TEST(ChakraIo, WritesChakraFieldsWithChakraTypes) {
  const ExecutionTraceSet set = every_field_set();
  const std::string bytes = encode_chakra_rank(set.ranks[0], "rank0.et", 2, set.process_groups);
  // First message: GlobalMetadata with the version; then the nodes.
  const std::vector<std::string> messages = split_messages(bytes);
  ASSERT_EQ(messages.size(), 1 + set.ranks[0].nodes.size());
  pb::GlobalMetadata metadata;
  ASSERT_TRUE(metadata.ParseFromString(messages[0]));
  EXPECT_EQ(metadata.version(), chakra_trace_version);
  pb::Node compute;
  ASSERT_TRUE(compute.ParseFromString(messages[1]));
  EXPECT_EQ(compute.id(), 10u);
  EXPECT_EQ(compute.type(), pb::COMP_NODE);
  EXPECT_EQ(compute.duration_micros(), 1235u);  // 1234.5678... microseconds, rounded
  std::map<std::string, const pb::AttributeProto*> attributes;
  for (const auto& a : compute.attr()) attributes[a.name()] = &a;
  ASSERT_TRUE(attributes.count("num_ops"));
  EXPECT_EQ(attributes["num_ops"]->value_case(), pb::AttributeProto::kInt64Val);
  EXPECT_EQ(attributes["num_ops"]->int64_val(), 3000000000);
  EXPECT_EQ(attributes["pipegrid_num_ops"]->double_val(), 3e9 + 0.25);
  EXPECT_EQ(attributes["tensor_size"]->value_case(), pb::AttributeProto::kUint64Val);
  EXPECT_EQ(attributes.count("pipegrid_tensor_size"), 0u);  // a whole number: no exact copy
  EXPECT_EQ(attributes["pipegrid_duration_s"]->double_val(), 1.2345678901234567e-3);
  EXPECT_EQ(attributes["pipegrid_stage"]->string_val(), "0");
}

TEST(ChakraIo, CollectiveTypesUseChakrasNumbers) {
  const ExecutionTraceSet set = every_field_set();
  const std::string bytes = encode_chakra_rank(set.ranks[0], "rank0.et", 2, set.process_groups);
  // Decoded node by node with the schema: comm_type values by name.
  std::vector<std::int64_t> comm_types;
  const std::vector<std::string> messages = split_messages(bytes);
  for (std::size_t i = 1; i < messages.size(); ++i) {
    pb::Node n;
    ASSERT_TRUE(n.ParseFromString(messages[i]));
    for (const auto& a : n.attr()) {
      if (a.name() == "comm_type") comm_types.push_back(a.int64_val());
    }
  }
  EXPECT_EQ(comm_types, (std::vector<std::int64_t>{pb::ALL_REDUCE, pb::ALL_TO_ALL, pb::ALL_GATHER,
                                                   pb::REDUCE_SCATTER, pb::BROADCAST, pb::BARRIER}));
}

TEST(ChakraIo, ExactSecondsSurviveAndMicrosecondsAreTheFallback) {
  ScratchFolder folder("chakra-seconds");
  ExecutionTraceSet set;
  RankGraph rank{0, {}};
  const double seconds[] = {1.0 / 3.0, 1e-9, 123456.789012345678, 0.0, 2.5e-7};
  for (std::uint64_t i = 0; i < std::size(seconds); ++i) rank.nodes.push_back(node(i, NodeType::CompNode, seconds[i]));
  set.ranks.push_back(rank);
  write_chakra_trace_set(set, prefix_in(folder));
  const auto again = read_chakra_trace_set(prefix_in(folder));
  for (std::size_t i = 0; i < std::size(seconds); ++i) EXPECT_EQ(again.ranks[0].nodes[i].duration_s, seconds[i]);

  // Without pipegrid_duration_s: duration_micros, in seconds.
  pb::Node n = proto_node(0, pb::COMP_NODE);
  n.set_duration_micros(1234567);
  const std::string prefix = write_raw_set(folder, {rank_bytes({n})});
  EXPECT_EQ(read_chakra_trace_set(prefix).ranks[0].nodes[0].duration_s, 1.234567);
}

TEST(ChakraIo, ReadsTheIndependentWritersSet) {
  const std::string prefix = std::string(PIPEGRID_SOURCE_DIR) + "/tests/data/chakra-external/gpipe";
  const ExecutionTraceSet set = read_chakra_trace_set(prefix);
  ASSERT_EQ(set.ranks.size(), 2u);
  EXPECT_EQ(set.process_groups, (std::map<std::string, std::vector<int>>{{"0", {0, 1}}}));
  const auto& first = set.ranks[0].nodes;
  const auto& last = set.ranks[1].nodes;
  ASSERT_EQ(first.size(), 10u);
  ASSERT_EQ(last.size(), 10u);
  EXPECT_EQ(set.ranks[1].rank, 1);

  EXPECT_EQ(first[0].name, "stage0.forward.mb0");
  EXPECT_EQ(first[0].type, NodeType::CompNode);
  EXPECT_EQ(first[0].duration_s, 1.5e-3);
  EXPECT_EQ(first[0].num_ops, 3e9);
  EXPECT_EQ(first[0].tensor_size, 4194304.0);
  EXPECT_EQ(first[0].extra, (std::map<std::string, std::string>{{"is_cpu_op", "false"}}));

  EXPECT_EQ(first[1].type, NodeType::CommSendNode);
  EXPECT_EQ(first[1].data_deps, std::vector<std::uint64_t>{0});
  EXPECT_EQ(first[1].comm_src, 0);
  EXPECT_EQ(first[1].comm_dst, 1);
  EXPECT_EQ(first[1].comm_tag, 0);
  EXPECT_EQ(first[1].comm_size, 4194304.0);
  EXPECT_EQ(first[1].duration_s, 0.0);

  // comm_size written as uint64 there.
  EXPECT_EQ(first[6].name, "stage0.recv_gradient.mb1");
  EXPECT_EQ(first[6].type, NodeType::CommRecvNode);
  EXPECT_EQ(first[6].comm_src, 1);
  EXPECT_EQ(first[6].comm_tag, 3);
  EXPECT_EQ(first[6].comm_size, 4194304.0);
  EXPECT_EQ(first[6].ctrl_deps, std::vector<std::uint64_t>{2});

  EXPECT_EQ(first[7].data_deps, std::vector<std::uint64_t>{6});
  EXPECT_EQ(first[7].ctrl_deps, std::vector<std::uint64_t>{5});
  EXPECT_EQ(first[7].duration_s, 3e-3);

  EXPECT_EQ(first[8].type, NodeType::CommCollNode);
  EXPECT_EQ(first[8].comm_type, CollectiveType::AllReduce);
  EXPECT_EQ(first[8].pg_name, "0");
  EXPECT_EQ(first[8].comm_size, 64.0 * 1024 * 1024);
  EXPECT_EQ(first[9].name, "stage0.optimizer_step");
  EXPECT_EQ(first[9].data_deps, std::vector<std::uint64_t>{8});

  EXPECT_EQ(last[0].type, NodeType::CommRecvNode);
  EXPECT_EQ(last[0].comm_src, 0);
  EXPECT_EQ(last[0].comm_tag, 0);
  EXPECT_EQ(last[1].duration_s, 1.75e-3);
  EXPECT_EQ(last[1].num_ops, 3.5e9);
  EXPECT_EQ(last[5].name, "stage1.send_gradient.mb0");
  EXPECT_EQ(last[5].comm_dst, 0);
  EXPECT_EQ(last[5].comm_tag, 2);
  EXPECT_EQ(last[8].comm_type, CollectiveType::AllReduce);

  // pipegrid writes it back and reads the same.
  ScratchFolder folder("chakra-external");
  write_chakra_trace_set(set, prefix_in(folder));
  expect_same_set(set, read_chakra_trace_set(prefix_in(folder)));
}

TEST(ChakraIo, AcceptsEveryNumericValueType) {
  pb::Node n = proto_node(0, pb::COMM_SEND_NODE);
  add_attr(n, "comm_dst")->set_uint64_val(0);
  add_attr(n, "comm_src")->set_sint32_val(0);
  add_attr(n, "comm_tag")->set_sfixed64_val(-3);
  add_attr(n, "comm_size")->set_uint64_val(12345678901ull);
  add_attr(n, "num_ops")->set_double_val(2.5);
  add_attr(n, "tensor_size")->set_fixed32_val(17);
  add_attr(n, "rf_id")->set_int64_val(-42);
  add_attr(n, "ids")->mutable_int64_list()->add_values(1);
  n.mutable_attr()->rbegin()->mutable_int64_list()->add_values(2);
  add_attr(n, "weight")->set_float_val(0.5f);
  add_attr(n, "raw")->set_bytes_val(std::string("\x01\xff", 2));
  pb::Node c = proto_node(1, pb::COMM_COLL_NODE);
  add_attr(c, "comm_type")->set_int32_val(pb::ALL_GATHER);
  add_attr(c, "comm_size")->set_float_val(64.0f);
  ScratchFolder folder("chakra-types");
  const auto set = read_chakra_trace_set(write_raw_set(folder, {rank_bytes({n, c})}));
  const auto& send = set.ranks[0].nodes[0];
  EXPECT_EQ(send.comm_dst, 0);
  EXPECT_EQ(send.comm_tag, -3);
  EXPECT_EQ(send.comm_size, 12345678901.0);
  EXPECT_EQ(send.num_ops, 2.5);
  EXPECT_EQ(send.tensor_size, 17.0);
  EXPECT_EQ(send.duration_s, 5e-6);
  EXPECT_EQ(send.extra, (std::map<std::string, std::string>{
                            {"rf_id", "-42"}, {"ids", "[1, 2]"}, {"weight", "0.5"}, {"raw", "01ff"}}));
  EXPECT_EQ(set.ranks[0].nodes[1].comm_type, CollectiveType::AllGather);
  EXPECT_EQ(set.ranks[0].nodes[1].comm_size, 64.0);
  EXPECT_TRUE(set.process_groups.empty());
}

// ---- bad files: each error names the file, the node and the field

TEST(ChakraIoErrors, NoTraceFiles) {
  ScratchFolder folder("chakra-none");
  const std::string message = input_error_of([&] { read_chakra_trace_set(prefix_in(folder)); });
  EXPECT_CONTAINS(message, "trace.0.et");
  EXPECT_CONTAINS(message, "found no");
}

TEST(ChakraIoErrors, GapInRanks) {
  ScratchFolder folder("chakra-gap");
  const std::string one = rank_bytes({proto_node(0, pb::COMP_NODE)});
  const std::string prefix = write_raw_set(folder, {one});
  write_bytes(chakra_trace_file(prefix, 2), one);
  const std::string message = input_error_of([&] { read_chakra_trace_set(prefix); });
  EXPECT_CONTAINS(message, "trace.2.et");
  EXPECT_CONTAINS(message, "no " + chakra_trace_file(prefix, 1));
}

TEST(ChakraIoErrors, EmptyFile) {
  ScratchFolder folder("chakra-empty");
  const std::string prefix = write_raw_set(folder, {""});
  const std::string message = input_error_of([&] { read_chakra_trace_set(prefix); });
  EXPECT_CONTAINS(message, "trace.0.et: expected a GlobalMetadata message first, found an empty file");
}

TEST(ChakraIoErrors, TruncatedVarint) {
  ScratchFolder folder("chakra-varint");
  const std::string prefix = write_raw_set(folder, {metadata_bytes() + "\x85"});
  const std::string message = input_error_of([&] { read_chakra_trace_set(prefix); });
  EXPECT_CONTAINS(message, "trace.0.et: message 1");
  EXPECT_CONTAINS(message, "truncated byte count");
}

TEST(ChakraIoErrors, OverlongVarint) {
  ScratchFolder folder("chakra-varint-long");
  const std::string prefix = write_raw_set(folder, {metadata_bytes() + std::string(11, '\xff') + "\x01"});
  EXPECT_CONTAINS(input_error_of([&] { read_chakra_trace_set(prefix); }), "at most 10 bytes");
}

TEST(ChakraIoErrors, LengthPastTheEnd) {
  ScratchFolder folder("chakra-length");
  const std::string prefix = write_raw_set(folder, {metadata_bytes() + "\x10" + "abc"});
  const std::string message = input_error_of([&] { read_chakra_trace_set(prefix); });
  EXPECT_CONTAINS(message, "trace.0.et: message 1");
  EXPECT_CONTAINS(message, "byte count 16 runs past the end of the file (3 bytes remain)");
}

TEST(ChakraIoErrors, MessageThatDoesNotParse) {
  ScratchFolder folder("chakra-parse");
  const std::string garbage = "\x0a\x7f";  // field 1 as a string of 127 bytes, in 2 bytes
  const std::string node0 = delimited(proto_node(4, pb::COMP_NODE));
  const std::string prefix = write_raw_set(folder, {metadata_bytes() + node0 + "\x02" + garbage});
  const std::string message = input_error_of([&] { read_chakra_trace_set(prefix); });
  EXPECT_CONTAINS(message, "trace.0.et: message 2");
  EXPECT_CONTAINS(message, "after node 4");
  EXPECT_CONTAINS(message, "expected a Node message");
}

TEST(ChakraIoErrors, NameThatIsNotUtf8) {
  ScratchFolder folder("chakra-utf8");
  const std::string node_with_bad_name("\x12\x01\xff", 3);  // field 2 (name), 1 byte: 0xff
  const std::string prefix = write_raw_set(folder, {metadata_bytes() + "\x03" + node_with_bad_name});
  const std::string message = input_error_of([&] { read_chakra_trace_set(prefix); });
  EXPECT_CONTAINS(message, "trace.0.et: message 1 (at byte 8, the first node): expected a Node message");
  EXPECT_CONTAINS(message, "not UTF-8");
}

TEST(ChakraIoErrors, MetadataThatDoesNotParse) {
  ScratchFolder folder("chakra-metadata");
  const std::string prefix = write_raw_set(folder, {std::string("\x02\x0a\x7f", 3)});
  EXPECT_CONTAINS(input_error_of([&] { read_chakra_trace_set(prefix); }),
                  "trace.0.et: message 0: expected a GlobalMetadata message");
}

TEST(ChakraIoErrors, UnknownNodeType) {
  pb::Node n = proto_node(3, pb::COMP_NODE);
  n.set_type(static_cast<pb::NodeType>(42));
  const std::string message = read_error({n});
  EXPECT_CONTAINS(message, "trace.0.et: node 3: type: expected");
  EXPECT_CONTAINS(message, "found unknown value 42");
  EXPECT_CONTAINS(read_error({proto_node(5, pb::INVALID_NODE)}), "node 5: type: expected METADATA_NODE (1)");
  EXPECT_CONTAINS(read_error({proto_node(5, pb::INVALID_NODE)}), "found INVALID_NODE (0)");
}

TEST(ChakraIoErrors, DependencyOnAMissingId) {
  pb::Node a = proto_node(0, pb::COMP_NODE);
  pb::Node b = proto_node(1, pb::COMP_NODE);
  b.add_data_deps(0);
  b.add_data_deps(7);
  const std::string message = read_error({a, b});
  EXPECT_CONTAINS(message, "trace.0.et: node 1: data_deps: expected ids of nodes of this rank, found 7");
  pb::Node c = proto_node(2, pb::COMP_NODE);
  c.add_ctrl_deps(9);
  EXPECT_CONTAINS(read_error({c}), "node 2: ctrl_deps: expected ids of nodes of this rank, found 9");
}

TEST(ChakraIoErrors, SelfDependencyAndCycle) {
  pb::Node a = proto_node(0, pb::COMP_NODE);
  a.add_ctrl_deps(0);
  EXPECT_CONTAINS(read_error({a}), "node 0: ctrl_deps: the node depends on itself");
  pb::Node b = proto_node(1, pb::COMP_NODE);
  pb::Node c = proto_node(2, pb::COMP_NODE);
  b.add_data_deps(2);
  c.add_ctrl_deps(1);
  const std::string message = read_error({proto_node(0, pb::COMP_NODE), b, c});
  EXPECT_CONTAINS(message, "trace.0.et: node 1");
  EXPECT_CONTAINS(message, "cycle");
}

TEST(ChakraIoErrors, DuplicateIds) {
  const std::string message = read_error({proto_node(6, pb::COMP_NODE), proto_node(6, pb::COMP_NODE)});
  EXPECT_CONTAINS(message, "trace.0.et: node 6: id: expected ids unique on the rank, found it twice");
}

TEST(ChakraIoErrors, CollectiveNamesAnUnknownGroup) {
  pb::Node n = proto_node(2, pb::COMM_COLL_NODE);
  add_attr(n, "comm_type")->set_int64_val(pb::ALL_REDUCE);
  add_attr(n, "pg_name")->set_string_val("dp");
  const std::string message = read_error({n}, R"({"0": [0]})");
  EXPECT_CONTAINS(message, "trace.0.et: node 2: attribute pg_name: expected a group of");
  EXPECT_CONTAINS(message, "trace.json, found 'dp'");
  EXPECT_CONTAINS(read_error({n}), "names process group 'dp', but the set has no communicator-group file");
}

TEST(ChakraIoErrors, CollectiveGroupWithoutThisRank) {
  ScratchFolder folder("chakra-group-rank");
  pb::Node n = proto_node(2, pb::COMM_COLL_NODE);
  add_attr(n, "comm_type")->set_int64_val(pb::ALL_REDUCE);
  add_attr(n, "pg_name")->set_string_val("1");
  const std::string prefix = write_raw_set(folder, {rank_bytes({n}), rank_bytes({})}, R"({"1": [1]})");
  EXPECT_CONTAINS(input_error_of([&] { read_chakra_trace_set(prefix); }),
                  "trace.0.et: node 2: attribute pg_name: process group '1' does not hold this rank (0)");
}

TEST(ChakraIoErrors, PointToPointWithoutPeer) {
  pb::Node send = proto_node(1, pb::COMM_SEND_NODE);
  add_attr(send, "comm_src")->set_int32_val(0);
  EXPECT_CONTAINS(read_error({send}), "trace.0.et: node 1: COMM_SEND_NODE without a comm_dst attribute");
  pb::Node recv = proto_node(4, pb::COMM_RECV_NODE);
  add_attr(recv, "comm_dst")->set_int32_val(0);
  EXPECT_CONTAINS(read_error({recv}), "trace.0.et: node 4: COMM_RECV_NODE without a comm_src attribute");
  pb::Node far = proto_node(5, pb::COMM_SEND_NODE);
  add_attr(far, "comm_dst")->set_int32_val(3);
  EXPECT_CONTAINS(read_error({far}),
                  "trace.0.et: node 5: attribute comm_dst: expected a rank from 0 to 0 (the set has 1 ranks), found 3");
}

TEST(ChakraIoErrors, CollectiveWithoutOrWithAnUnsupportedType) {
  EXPECT_CONTAINS(read_error({proto_node(8, pb::COMM_COLL_NODE)}),
                  "trace.0.et: node 8: COMM_COLL_NODE without a comm_type attribute");
  pb::Node reduce = proto_node(8, pb::COMM_COLL_NODE);
  add_attr(reduce, "comm_type")->set_int64_val(pb::REDUCE);
  EXPECT_CONTAINS(read_error({reduce}), "node 8: attribute comm_type: expected ALL_REDUCE (0)");
  EXPECT_CONTAINS(read_error({reduce}), "found REDUCE (1), which pipegrid does not simulate");
  pb::Node unknown = proto_node(8, pb::COMM_COLL_NODE);
  add_attr(unknown, "comm_type")->set_int64_val(77);
  EXPECT_CONTAINS(read_error({unknown}), "found unknown value 77");
}

TEST(ChakraIoErrors, AttributeOfTheWrongType) {
  pb::Node n = proto_node(1, pb::COMM_SEND_NODE);
  add_attr(n, "comm_dst")->set_string_val("0");
  EXPECT_CONTAINS(read_error({n}), "trace.0.et: node 1: attribute comm_dst: expected an integer value");
  EXPECT_CONTAINS(read_error({n}), "found string_val");
  pb::Node m = proto_node(1, pb::COMP_NODE);
  add_attr(m, "num_ops")->set_bool_val(true);
  EXPECT_CONTAINS(read_error({m}), "node 1: attribute num_ops: expected a number");
  EXPECT_CONTAINS(read_error({m}), "found bool_val");
  pb::Node p = proto_node(1, pb::COMM_COLL_NODE);
  add_attr(p, "comm_type")->set_int64_val(0);
  add_attr(p, "pg_name")->set_int64_val(0);
  EXPECT_CONTAINS(read_error({p}), "node 1: attribute pg_name: expected string_val, found int64_val");
  pb::Node q = proto_node(1, pb::COMP_NODE);
  add_attr(q, "num_ops");
  EXPECT_CONTAINS(read_error({q}), "attribute num_ops: expected a number (an integer or floating-point value), found no value");
  pb::Node wide = proto_node(1, pb::COMM_SEND_NODE);
  add_attr(wide, "comm_dst")->set_int64_val(1ll << 40);
  EXPECT_CONTAINS(read_error({wide}), "attribute comm_dst: expected a 32-bit integer, found 1099511627776");
}

TEST(ChakraIoErrors, AttributeTwiceOrOutOfRange) {
  pb::Node n = proto_node(1, pb::COMP_NODE);
  add_attr(n, "num_ops")->set_int64_val(1);
  add_attr(n, "num_ops")->set_int64_val(2);
  EXPECT_CONTAINS(read_error({n}), "trace.0.et: node 1: attribute 'num_ops': given twice");
  pb::Node negative = proto_node(1, pb::COMP_NODE);
  add_attr(negative, "num_ops")->set_int64_val(-5);
  EXPECT_CONTAINS(read_error({negative}), "node 1: num_ops: expected a finite number at least 0 and below 2^63, found -5");
  pb::Node huge = proto_node(1, pb::COMM_COLL_NODE);
  add_attr(huge, "comm_type")->set_uint64_val(1ull << 63);
  EXPECT_CONTAINS(read_error({huge}), "attribute comm_type: expected an integer below 2^63, found uint64_val 9223372036854775808");
  pb::Node not_finite = proto_node(1, pb::COMP_NODE);
  add_attr(not_finite, "pipegrid_duration_s")->set_double_val(std::nan(""));
  EXPECT_CONTAINS(read_error({not_finite}), "node 1: duration: expected a finite number");
}

TEST(ChakraIoErrors, BadGroupFile) {
  const std::vector<pb::Node> one = {proto_node(0, pb::COMP_NODE)};
  EXPECT_CONTAINS(read_error(one, "[1]"), "trace.json: expected a JSON object");
  EXPECT_CONTAINS(read_error(one, "{"), "trace.json: expected JSON");
  EXPECT_CONTAINS(read_error(one, R"({"0": [0, 1]})"),
                  "trace.json: group '0': expected ranks from 0 to 0 (the set has 1 trace files), found 1");
  EXPECT_CONTAINS(read_error(one, R"({"0": []})"), "group '0': expected a non-empty array of ranks, found an empty array");
  EXPECT_CONTAINS(read_error(one, R"({"0": [0, 0]})"), "group '0': expected distinct ranks, found rank 0 twice");
  EXPECT_CONTAINS(read_error(one, R"({"0": ["0"]})"), "expected ranks from 0 to 0");
}

// ---- the writer refuses what it cannot write faithfully, and writes nothing then

TEST(ChakraIoWriter, RefusesBadGraphsAndWritesNothing) {
  ScratchFolder folder("chakra-writer");
  const std::string prefix = prefix_in(folder);
  write_bytes(folder.path() / "unrelated.et", "keep");
  ExecutionTraceSet set = every_field_set();
  set.ranks[1].nodes[1].extra["num_ops"] = "7";  // rank 1's file fails after rank 0's is encoded
  EXPECT_CONTAINS(input_error_of([&] { write_chakra_trace_set(set, prefix); }),
                  "trace.1.et: node 1: extra attribute 'num_ops': the name is one of pipegrid's Chakra attributes");
  EXPECT_FALSE(std::filesystem::exists(chakra_trace_file(prefix, 0)));
  EXPECT_FALSE(std::filesystem::exists(chakra_comm_groups_file(prefix)));
  EXPECT_EQ(read_text_file((folder.path() / "unrelated.et").string()), "keep");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(folder.path()), {}), 1);

  set = every_field_set();
  set.ranks[1].rank = 5;
  EXPECT_CONTAINS(input_error_of([&] { write_chakra_trace_set(set, prefix); }),
                  "trace.1.et: rank: expected 1 (the graph's position in the set), found 5");
  set = every_field_set();
  set.ranks[0].nodes[0].type = NodeType::Invalid;
  EXPECT_CONTAINS(input_error_of([&] { write_chakra_trace_set(set, prefix); }),
                  "trace.0.et: node 10: type: expected a node type, found Invalid");
  set = every_field_set();
  set.ranks[0].nodes[0].duration_s = -1;
  EXPECT_CONTAINS(input_error_of([&] { write_chakra_trace_set(set, prefix); }), "node 10: duration: expected");
  set = every_field_set();
  set.ranks[0].nodes[0].name = "\xff";
  EXPECT_CONTAINS(input_error_of([&] { write_chakra_trace_set(set, prefix); }), "node 10: name: expected UTF-8 text");
  set = every_field_set();
  set.process_groups["0"] = {0, 2};
  EXPECT_CONTAINS(input_error_of([&] { write_chakra_trace_set(set, prefix); }),
                  "trace.json: group '0': expected ranks from 0 to 1");
  set = every_field_set();
  set.process_groups["\xc3"] = {0};
  EXPECT_CONTAINS(input_error_of([&] { write_chakra_trace_set(set, prefix); }),
                  "trace.json: group name: expected UTF-8 text");
  EXPECT_CONTAINS(input_error_of([&] { write_chakra_trace_set(ExecutionTraceSet{}, prefix); }),
                  "needs at least one rank");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(folder.path()), {}), 1);
}

TEST(ChakraIoWriter, ReplacesASetButRefusesToLeaveAStaleRank) {
  ScratchFolder folder("chakra-replace");
  const std::string prefix = prefix_in(folder);
  ExecutionTraceSet three;
  for (int r = 0; r < 3; ++r) three.ranks.push_back(RankGraph{r, {node(0, NodeType::CompNode, 1.0)}});
  write_chakra_trace_set(three, prefix);
  ExecutionTraceSet one;
  one.ranks.push_back(RankGraph{0, {node(0, NodeType::CompNode, 2.0)}});
  const std::string message = input_error_of([&] { write_chakra_trace_set(one, prefix); });
  EXPECT_CONTAINS(message, "trace.1.et: exists, and would be read as rank 1 of this 1-rank trace set");
  EXPECT_EQ(read_chakra_trace_set(prefix).ranks.size(), 3u);  // untouched
  EXPECT_EQ(read_chakra_trace_set(prefix).ranks[0].nodes[0].duration_s, 1.0);
  three.ranks[0].nodes[0].duration_s = 4.0;
  write_chakra_trace_set(three, prefix);  // same ranks: replaced
  EXPECT_EQ(read_chakra_trace_set(prefix).ranks[0].nodes[0].duration_s, 4.0);
}

}  // namespace
}  // namespace pipegrid::interchange
