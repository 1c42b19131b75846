#pragma once
// Replays execution graphs (interchange/execution_graph.hpp: one graph per
// rank, as MLCommons Chakra traces hold them) on a SimGrid platform. Compute
// nodes take their recorded durations; sends, receives and collectives run
// on the platform's routes the way sim/engine.hpp runs a Program's
// transfers and ring collectives (the same code: sim/ring_network.hpp), so
// the graphs of a run (interchange/program_graph.hpp) replay to its
// timeline. docs/semantics.md, "Replaying an execution graph".

#include <string>

#include "core/timeline.hpp"
#include "interchange/execution_graph.hpp"
#include "sim/engine.hpp"

namespace pipegrid::sim {

struct GraphReplayOptions {
  NetworkModel network = NetworkModel::Analytic;
  /// How sends between hosts share the network (as SimulationRequest::transfer_rule;
  /// under Fifo a channel's messages go in the order they became ready,
  /// ties by comm_tag).
  TransferRule transfer_rule = TransferRule::Share;
  CollectiveModel collective_model = CollectiveModel::Flows;
};

/** The dispatch rule (docs/semantics.md states the same):
 *  - Rank r runs on the platform's r-th host (the order the file declares
 *    them).
 *  - A node is ready when every node it depends on (ctrl_deps and
 *    data_deps alike) has ended.
 *  - Compute nodes run on streams: a node's stream is its pipegrid_stream
 *    attribute (0 without one). A rank runs at most one compute node per
 *    stream at a time: when a stream is free, it starts the ready node with
 *    the smallest id. A compute node with pipegrid_lane "collectives" runs
 *    beside the streams, as soon as it is ready. A compute node lasts
 *    duration_s (replayed, not recomputed from the host's speed).
 *  - A send (COMM_SEND) starts its message as soon as it is ready (with
 *    pipegrid_cut_through "1": as soon as every node it depends on has
 *    started), comm_size bytes from its rank's host to comm_dst's along
 *    the platform's route, eagerly (it never waits for the receiver); it
 *    ends when the message has arrived (its last byte plus the route's
 *    NCCL start latency) and every node it depends on has ended. Under
 *    TransferRule::Fifo a (source, destination) pair carries one message
 *    at a time. A send with pipegrid_dependency "1" moves nothing and ends
 *    at once (a cross-rank dependency).
 *  - A receive (COMM_RECV) matches the send of the same (comm_src,
 *    comm_dst, comm_tag); it ends once it is ready and that send has ended.
 *  - Collectives (COMM_COLL_NODE: all-reduce, reduce-scatter, all-gather)
 *    run as the engine's ring collectives over the ranks of their process
 *    group (pg_name; none: all ranks) in the group's order, comm_size bytes; the k-th
 *    collective node of a group on each member rank (by id) are one
 *    collective. A participant joins when its node is ready.
 *  Communication nodes run concurrently, as soon as they may.
 *  - Memory: a compute node's tensor_size bytes are held on its rank from
 *    the node's start until the last node of that rank listing it in
 *    data_deps has ended (its own end when none does). Nothing else is
 *    counted (no weights, no workspace): with no tensor_size in the
 *    graphs, memory is 0. */
const char* graph_dispatch_rule();

/** Replays `traces` on the platform of `platform_file` with SimGrid (in a
 *  forked child, as simulate()) and returns the timeline: a record per
 *  compute node (host of its rank; stream, stage, micro-batch, mini-batch
 *  and action from the pipegrid_* attributes, the node's name as the
 *  action without pipegrid_action (',', '"' and control characters
 *  replaced by '_'); 0 and -1 for missing numbers: stage 0,
 *  micro-batch 0, mini-batch 0), per send that moves data (a transfer
 *  record from its message's start to the send's end: action
 *  pipegrid_action or "SEND_<name>", bytes comm_size, peer the receiver's
 *  host) and per collective participant (ALLREDUCE, REDUCE_SCATTER or
 *  ALLGATHER; bytes what it sends, peer its successor in the ring; micro
 *  -1 without the attribute). Receives and dependency sends make no record.
 *  Records sorted by (start, host, stream, end); memory_bytes the
 *  rank's tensor memory right after the record ends and memory_series
 *  every rank's at each change, by the memory rule above (none when no
 *  node states a tensor_size). Throws InputError naming the
 *  rank and node for a malformed graph (an unknown dependency or process
 *  group, a receive without its send, more ranks than hosts, a collective
 *  type other than these three) and for nodes that never become ready (a
 *  cycle). */
Timeline simulate_graph(const interchange::ExecutionTraceSet& traces, const std::string& platform_file,
                        const GraphReplayOptions& options = {});

}  // namespace pipegrid::sim
