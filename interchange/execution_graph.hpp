#pragma once
// ExecutionGraph: one rank's work as a dependency graph of nodes, the plain
// data behind Chakra execution traces (MLCommons Chakra, schema
// schema/protobuf/et_def.proto: one trace per rank, `<prefix>.<rank>.et`).
// pipegrid writes it from a simulated Program (export), reads it back from
// Chakra files (simulate --chakra), and replays it on a platform
// (sim/graph_engine). Field names follow Chakra's so that the mapping to the
// protobuf is one to one; what Chakra has no field for is an attribute
// named `pipegrid_*` (ExecutionNode::extra).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pipegrid::interchange {

/// Chakra's NodeType values (et_def.proto numbers them in this order).
enum class NodeType {
  Invalid = 0,
  MetadataNode = 1,
  MemLoadNode = 2,
  MemStoreNode = 3,
  CompNode = 4,
  CommSendNode = 5,
  CommRecvNode = 6,
  CommCollNode = 7,
};

/// Chakra's CollectiveCommType values (et_def.proto's numbers).
enum class CollectiveType {
  AllReduce = 0,
  AllToAll = 1,
  AllGather = 2,
  ReduceScatter = 3,
  Broadcast = 4,
  Barrier = 5,
};

/** One node of a rank's graph. A node may start when every node it depends
 *  on (ctrl_deps and data_deps alike, ids on the same rank) has ended;
 *  graph_dispatch_rule() in sim/graph_engine.hpp states how a rank runs its
 *  ready nodes. */
struct ExecutionNode {
  std::uint64_t id = 0;
  std::string name;
  NodeType type = NodeType::CompNode;
  std::vector<std::uint64_t> ctrl_deps;
  std::vector<std::uint64_t> data_deps;
  /// The node's run time in seconds, exact (Chakra's duration_micros is an
  /// integer; the writer keeps these seconds in an attribute too). Compute
  /// nodes replay it; communication nodes' times come from the network.
  double duration_s = 0;
  /// Compute: floating-point operations (Chakra's num_ops) and the bytes of
  /// tensors the node produces (tensor_size); absent when unknown.
  std::optional<double> num_ops;
  std::optional<double> tensor_size;
  /// Communication: bytes moved (comm_size), the peer ranks (comm_src,
  /// comm_dst), the tag matching a send with its receive (comm_tag), the
  /// collective (comm_type) and its process group (pg_name: a key of
  /// ExecutionTraceSet::process_groups).
  std::optional<double> comm_size;
  std::optional<int> comm_src, comm_dst, comm_tag;
  std::optional<CollectiveType> comm_type;
  std::string pg_name;
  /// Attributes Chakra has no field for, by name (pipegrid_stage,
  /// pipegrid_micro_batch, pipegrid_mini_batch, pipegrid_action,
  /// pipegrid_stream, pipegrid_overlapped_with, ...), as text.
  std::map<std::string, std::string> extra;
};

struct RankGraph {
  int rank = 0;
  std::vector<ExecutionNode> nodes;
};

/** A trace set: one graph per rank (rank r runs on the platform's r-th
 *  host) and the ranks of every process group a collective names (Chakra's
 *  communicator-group JSON: {"<pg_name>": [ranks...]}). */
struct ExecutionTraceSet {
  std::vector<RankGraph> ranks;
  std::map<std::string, std::vector<int>> process_groups;
};

}  // namespace pipegrid::interchange
