#pragma once
// MLCommons Chakra execution traces (ET) <-> ExecutionTraceSet
// (docs/formats.md, "Chakra execution traces"). The protobuf schema is our
// own interchange/chakra_et.proto, wire-compatible with Chakra's
// schema/protobuf/et_def.proto.
//
// A trace set with prefix P is one file per rank, `P.<rank>.et` (ranks 0, 1,
// ... without gaps), and the communicator groups, `P.json` (ASTRA-sim's
// --comm-group-configuration file: {"<pg_name>": [ranks...]}). A trace file
// is a sequence of messages, each a varint byte count then the message's
// bytes (Chakra's protolib encodeMessage/decodeMessage): one GlobalMetadata,
// then one Node per ExecutionNode.
//
// Node fields and attributes, with the value types Chakra's feeder
// (src/feeder/et_feeder_node.cpp) reads:
//   id, name, type, ctrl_deps, data_deps    the node's own fields
//   duration_micros                         duration_s rounded to microseconds
//   num_ops (int64), tensor_size (uint64), comm_size (int64),
//   comm_type (int64, a CollectiveCommType), comm_src, comm_dst,
//   comm_tag (int32), pg_name (string)      ExecutionNode's fields of those names
//   pipegrid_duration_s (double)            duration_s, exact
//   pipegrid_num_ops, pipegrid_tensor_size,
//   pipegrid_comm_size (double)             the exact value, written only where
//                                           it is not a whole number
//   any other name                          ExecutionNode::extra (text)
// The reader accepts a numeric attribute in any of the protobuf's integer or
// floating-point value types (comm_size as int64, uint64, ...), and the
// integer ones (comm_type, comm_src, comm_dst, comm_tag) in any integer type.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "interchange/execution_graph.hpp"

namespace pipegrid::interchange {

/// GlobalMetadata.version that the writer puts first in every file (the
/// value Chakra's own trace generator, src/generator/generator.py, writes).
inline constexpr std::string_view chakra_trace_version = "1.0.0";

/// `<prefix>.<rank>.et`.
std::string chakra_trace_file(const std::string& prefix, int rank);
/// `<prefix>.json`: the communicator groups.
std::string chakra_comm_groups_file(const std::string& prefix);

/** The bytes of rank `graph`'s trace file. Throws InputError naming
 *  `file_name`, the node and the field when the graph cannot be written
 *  faithfully (see check_rank_graph). */
std::string encode_chakra_rank(const RankGraph& graph, const std::string& file_name, int rank_count,
                               const std::map<std::string, std::vector<int>>& process_groups);

/** Rank `rank`'s graph from the bytes of its trace file, of a set of
 *  `rank_count` ranks whose communicator groups are `process_groups`
 *  (read from `groups_file`; empty when the set has none). Throws
 *  InputError naming `file_name`, the node (id) and the field: a truncated
 *  byte count, a count past the end, a message that does not parse, no
 *  GlobalMetadata, a node type outside NodeType or INVALID_NODE, an
 *  attribute of a type its name does not allow or given twice, and
 *  whatever check_rank_graph refuses. */
RankGraph decode_chakra_rank(std::string_view bytes, const std::string& file_name, int rank, int rank_count,
                             const std::map<std::string, std::vector<int>>& process_groups,
                             const std::string& groups_file);

/** The checks a graph passes before it is written and after it is read:
 *  unique ids; dependencies on ids of the same graph, never the node
 *  itself, without a cycle; durations and sizes finite, non-negative and
 *  below 2^63; sends with comm_dst, receives with comm_src, ranks in
 *  [0, rank_count); collectives with comm_type, and a pg_name (when not
 *  empty) that names a group of `process_groups` holding this rank; no
 *  extra attribute with an empty name or the name of a field above. Throws
 *  InputError naming `file_name`, the node (id) and the field. */
void check_rank_graph(const RankGraph& graph, const std::string& file_name, int rank_count,
                      const std::map<std::string, std::vector<int>>& process_groups,
                      const std::string& groups_file);

/** The communicator-group JSON, {"<pg_name>": [ranks...]} (keys sorted). */
std::string encode_comm_groups(const std::map<std::string, std::vector<int>>& process_groups);
/** Reads it; every group is a non-empty array of distinct ranks in
 *  [0, rank_count). InputError naming `file_name` and the group otherwise. */
std::map<std::string, std::vector<int>> decode_comm_groups(std::string_view text, const std::string& file_name,
                                                           int rank_count);

/** Writes every rank's file and the communicator groups (`{}` when there
 *  are none), all or none (OutputFileSet). Refuses (InputError), before
 *  writing anything, a graph that check_rank_graph refuses, a rank number
 *  that is not its position in `set.ranks`, no ranks, and a file
 *  `<prefix>.<n>.et` for a rank n past the set's last: it would be read as
 *  part of the set. */
void write_chakra_trace_set(const ExecutionTraceSet& set, const std::string& prefix);

/** Reads `<prefix>.0.et`, `<prefix>.1.et`, ... up to the first rank without
 *  a file, and `<prefix>.json` when it exists. InputError when there is no
 *  `<prefix>.0.et`, when a later rank's file exists beyond a gap, and for
 *  anything decode_chakra_rank or decode_comm_groups refuses. */
ExecutionTraceSet read_chakra_trace_set(const std::string& prefix);

}  // namespace pipegrid::interchange
