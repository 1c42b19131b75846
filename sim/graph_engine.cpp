#include "sim/graph_engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <simgrid/s4u.hpp>

#include "core/error.hpp"
#include "core/platform_check.hpp"
#include "sim/engine_internal.hpp"
#include "sim/ring_network.hpp"

namespace pipegrid::sim {

const char* graph_dispatch_rule() {
  return "rank r runs on the platform's r-th host; a node is ready when every node it depends on has ended; a rank "
         "runs at most one compute node per stream (pipegrid_stream, 0 without it) at a time, the ready one with the "
         "smallest id first, for its duration_s; compute nodes with pipegrid_lane \"collectives\" run beside the "
         "streams; sends start their message when ready (eager), receives end once ready and their send has ended, "
         "collectives run as ring collectives over their process group; communication nodes run concurrently; a compute "
         "node's tensor_size bytes are held on its rank from its start until the last node of the rank listing it in "
         "data_deps has ended";
}

namespace {

namespace sg = simgrid::s4u;
using interchange::CollectiveType;
using interchange::ExecutionNode;
using interchange::ExecutionTraceSet;
using interchange::NodeType;
using internal::CollectiveKind;
using internal::RingNetwork;

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

std::string node_label(int rank, const ExecutionNode& node) {
  return fmt::format("rank {} node {} ('{}')", rank, node.id, printable(node.name));
}

// A node's name as a record's action: ',', '"' and control characters
// become '_' (the timeline's CSV holds its cells unquoted).
std::string csv_safe(std::string text) {
  for (char& c : text)
    if (c == ',' || c == '"' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '_';
  return text;
}

// An integer attribute of `node`, or `otherwise` when absent.
int int_attribute(int rank, const ExecutionNode& node, const std::string& name, int otherwise) {
  const auto found = node.extra.find(name);
  if (found == node.extra.end()) return otherwise;
  const std::string& text = found->second;
  std::size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw InputError(fmt::format("execution graph: {}: attribute {}: expected an integer, found '{}'", node_label(rank, node),
                                 name, printable(text)));
  return value;
}

bool flag_attribute(const ExecutionNode& node, const std::string& name) {
  const auto found = node.extra.find(name);
  return found != node.extra.end() && found->second == "1";
}

// The graphs as one list of nodes (rank by rank, in their order), with
// their dependents, matched sends and receives, and collectives.
struct GraphIndex {
  struct Node {
    const ExecutionNode* spec = nullptr;
    int rank = 0;
    std::vector<std::size_t> dependents;        ///< nodes that wait for its end
    std::vector<std::size_t> start_dependents;  ///< cut-through sends that wait for its start
    std::size_t deps = 0;                       ///< distinct nodes it waits for
    int stream = 0;
    bool lane = false;           ///< a compute node beside the streams
    bool cut_through = false;    ///< a send that starts when its deps have started
    bool dependency = false;     ///< a send that moves nothing (a cross-rank dependency)
    std::size_t partner = kNone; ///< send <-> receive
    std::size_t collective = kNone, participant = 0;
  };
  struct Collective {
    std::vector<int> ranks;  ///< ring order
    std::vector<std::size_t> members;  ///< node per participant
    CollectiveKind kind = CollectiveKind::AllReduce;
    double bytes = 0;
  };
  std::vector<Node> nodes;
  std::vector<Collective> collectives;
  /// (source rank, destination rank) -> data sends between them.
  std::map<std::pair<int, int>, std::size_t> channel_messages;
};

CollectiveKind collective_kind(int rank, const ExecutionNode& node) {
  if (!node.comm_type) throw InputError(fmt::format("execution graph: {}: a collective without comm_type", node_label(rank, node)));
  switch (*node.comm_type) {
    case CollectiveType::AllReduce: return CollectiveKind::AllReduce;
    case CollectiveType::ReduceScatter: return CollectiveKind::ReduceScatter;
    case CollectiveType::AllGather: return CollectiveKind::AllGather;
    default: break;
  }
  const char* name = *node.comm_type == CollectiveType::AllToAll    ? "ALL_TO_ALL"
                     : *node.comm_type == CollectiveType::Broadcast ? "BROADCAST"
                     : *node.comm_type == CollectiveType::Barrier   ? "BARRIER"
                                                                    : "unknown";
  throw InputError(fmt::format("execution graph: {}: collective {}: the replay runs all-reduces, reduce-scatters "
                               "and all-gathers",
                               node_label(rank, node), name));
}

GraphIndex index_graphs(const ExecutionTraceSet& traces) {
  GraphIndex index;
  std::map<std::pair<int, std::uint64_t>, std::size_t> at;  // (rank, id) -> node
  for (std::size_t r = 0; r < traces.ranks.size(); ++r) {
    const interchange::RankGraph& graph = traces.ranks[r];
    if (graph.rank != static_cast<int>(r))
      throw InputError(fmt::format("execution graph: the graph at position {} is of rank {}; expected rank {}", r, graph.rank, r));
    for (const ExecutionNode& node : graph.nodes) {
      if (!at.emplace(std::make_pair(static_cast<int>(r), node.id), index.nodes.size()).second)
        throw InputError(fmt::format("execution graph: rank {} has two nodes of id {}", r, node.id));
      GraphIndex::Node& entry = index.nodes.emplace_back();
      entry.spec = &node;
      entry.rank = static_cast<int>(r);
    }
  }
  std::map<std::tuple<int, int, int>, std::size_t> sends, receives;
  std::map<std::string, std::vector<std::vector<std::size_t>>> group_nodes;  // pg -> per member rank position: its nodes
  std::optional<std::vector<int>> all_ranks_group;
  for (std::size_t i = 0; i < index.nodes.size(); ++i) {
    GraphIndex::Node& entry = index.nodes[i];
    const ExecutionNode& node = *entry.spec;
    std::set<std::size_t> deps;
    for (const auto* list : {&node.ctrl_deps, &node.data_deps})
      for (const std::uint64_t dep : *list) {
        const auto found = at.find({entry.rank, dep});
        if (found == at.end())
          throw InputError(fmt::format("execution graph: {} depends on node {}, which rank {} does not have",
                                       node_label(entry.rank, node), dep, entry.rank));
        if (found->second == i) throw InputError(fmt::format("execution graph: {} depends on itself", node_label(entry.rank, node)));
        deps.insert(found->second);
      }
    entry.deps = deps.size();
    entry.stream = int_attribute(entry.rank, node, "pipegrid_stream", 0);
    // The record labels, read again by the replay: refused here, before the
    // engine runs, when they are not integers.
    for (const char* label : {"pipegrid_stage", "pipegrid_micro_batch", "pipegrid_mini_batch"}) int_attribute(entry.rank, node, label, 0);
    for (const std::size_t dep : deps) index.nodes[dep].dependents.push_back(i);
    switch (node.type) {
      case NodeType::CompNode: {
        const auto lane = node.extra.find("pipegrid_lane");
        entry.lane = lane != node.extra.end() && lane->second == "collectives";
        if (!(node.duration_s >= 0))
          throw InputError(fmt::format("execution graph: {}: duration {} s: expected a non-negative duration",
                                       node_label(entry.rank, node), node.duration_s));
        break;
      }
      case NodeType::CommSendNode:
      case NodeType::CommRecvNode: {
        if (!node.comm_src || !node.comm_dst || !node.comm_tag)
          throw InputError(fmt::format("execution graph: {}: a send or receive needs comm_src, comm_dst and comm_tag",
                                       node_label(entry.rank, node)));
        const bool send = node.type == NodeType::CommSendNode;
        if ((send ? *node.comm_src : *node.comm_dst) != entry.rank)
          throw InputError(fmt::format("execution graph: {}: a {} of rank {} names comm_{} {}", node_label(entry.rank, node),
                                       send ? "send" : "receive", entry.rank, send ? "src" : "dst",
                                       send ? *node.comm_src : *node.comm_dst));
        const double bytes = node.comm_size.value_or(0);
        if (!(bytes >= 0))
          throw InputError(fmt::format("execution graph: {}: comm_size {}: expected non-negative bytes", node_label(entry.rank, node), bytes));
        const auto key = std::make_tuple(*node.comm_src, *node.comm_dst, *node.comm_tag);
        if (!(send ? sends : receives).emplace(key, i).second)
          throw InputError(fmt::format("execution graph: {}: a second {} from rank {} to rank {} with tag {}",
                                       node_label(entry.rank, node), send ? "send" : "receive", *node.comm_src,
                                       *node.comm_dst, *node.comm_tag));
        if (send) {
          entry.cut_through = flag_attribute(node, "pipegrid_cut_through");
          entry.dependency = flag_attribute(node, "pipegrid_dependency");
          if (entry.cut_through)
            for (const std::size_t dep : deps) index.nodes[dep].start_dependents.push_back(i);
          if (!entry.dependency) ++index.channel_messages[{*node.comm_src, *node.comm_dst}];
        }
        break;
      }
      case NodeType::CommCollNode: {
        // No pg_name: the group of all ranks (as Chakra's readers take it).
        if (node.pg_name.empty() && !all_ranks_group) {
          all_ranks_group.emplace();
          for (std::size_t member = 0; member < traces.ranks.size(); ++member) all_ranks_group->push_back(static_cast<int>(member));
        }
        const auto declared = traces.process_groups.find(node.pg_name);
        const std::vector<int>* members = node.pg_name.empty() ? &*all_ranks_group
                                          : declared == traces.process_groups.end() ? nullptr
                                                                                    : &declared->second;
        if (members == nullptr)
          throw InputError(fmt::format("execution graph: {}: process group '{}' is not declared", node_label(entry.rank, node),
                                       printable(node.pg_name)));
        const auto member = std::find(members->begin(), members->end(), entry.rank);
        if (member == members->end())
          throw InputError(fmt::format("execution graph: {}: rank {} is not in its process group '{}'",
                                       node_label(entry.rank, node), entry.rank, printable(node.pg_name)));
        auto& per_member = group_nodes[node.pg_name];
        per_member.resize(members->size());
        per_member[static_cast<std::size_t>(member - members->begin())].push_back(i);
        break;
      }
      default:
        throw InputError(fmt::format("execution graph: {}: node type {}: the replay runs compute, send, receive and "
                                     "collective nodes",
                                     node_label(entry.rank, node), static_cast<int>(node.type)));
    }
  }
  for (const auto& [key, receive] : receives) {
    const auto send = sends.find(key);
    if (send == sends.end())
      throw InputError(fmt::format("execution graph: {}: no send from rank {} to rank {} with tag {}",
                                   node_label(index.nodes[receive].rank, *index.nodes[receive].spec), std::get<0>(key),
                                   std::get<1>(key), std::get<2>(key)));
    index.nodes[receive].partner = send->second;
    index.nodes[send->second].partner = receive;
  }
  for (const auto& [key, send] : sends)
    if (index.nodes[send].partner == kNone)
      throw InputError(fmt::format("execution graph: {}: no receive on rank {} with tag {}",
                                   node_label(index.nodes[send].rank, *index.nodes[send].spec), std::get<1>(key), std::get<2>(key)));
  for (auto& [name, per_member] : group_nodes) {
    const std::vector<int>& ranks = name.empty() ? *all_ranks_group : traces.process_groups.at(name);
    // The k-th collective node of the group on each member, by id, are one collective.
    for (std::vector<std::size_t>& nodes : per_member)
      std::stable_sort(nodes.begin(), nodes.end(), [&](std::size_t x, std::size_t y) { return index.nodes[x].spec->id < index.nodes[y].spec->id; });
    for (std::size_t m = 0; m < per_member.size(); ++m)
      if (per_member[m].size() != per_member.front().size())
        throw InputError(fmt::format("execution graph: process group '{}': rank {} has {} collective nodes of it, rank {} "
                                     "has {}; every member runs the group's collectives",
                                     printable(name), ranks.front(), per_member.front().size(), ranks[m], per_member[m].size()));
    for (std::size_t k = 0; k < per_member.front().size(); ++k) {
      GraphIndex::Collective& collective = index.collectives.emplace_back();
      collective.ranks = ranks;
      for (std::size_t m = 0; m < per_member.size(); ++m) {
        const std::size_t i = per_member[m][k];
        const ExecutionNode& node = *index.nodes[i].spec;
        const CollectiveKind kind = collective_kind(index.nodes[i].rank, node);
        const double bytes = node.comm_size.value_or(0);
        if (m == 0) {
          collective.kind = kind;
          collective.bytes = bytes;
        } else if (kind != collective.kind || bytes != collective.bytes) {
          throw InputError(fmt::format("execution graph: {}: collective {} of process group '{}' differs from rank {}'s "
                                       "(type or comm_size)",
                                       node_label(index.nodes[i].rank, node), k, printable(name), ranks.front()));
        }
        if (!(bytes >= 0)) throw InputError(fmt::format("execution graph: {}: comm_size {}", node_label(index.nodes[i].rank, node), bytes));
        collective.members.push_back(i);
        index.nodes[i].collective = index.collectives.size() - 1;
        index.nodes[i].participant = m;
      }
    }
  }
  return index;
}

// Nodes that can never end (a cycle of dependencies through sends and
// collectives): InputError naming a few.
void check_acyclic(const GraphIndex& index) {
  std::vector<std::size_t> waiting(index.nodes.size());
  std::vector<std::size_t> joined(index.collectives.size(), 0);
  std::vector<std::size_t> ready;
  std::vector<bool> done(index.nodes.size(), false);
  // A receive also waits for its send; a collective's nodes for each other.
  for (std::size_t i = 0; i < index.nodes.size(); ++i) {
    waiting[i] = index.nodes[i].deps + (index.nodes[i].spec->type == NodeType::CommRecvNode ? 1 : 0);
  }
  auto release = [&](std::size_t i) {
    const GraphIndex::Node& node = index.nodes[i];
    if (node.collective == kNone) {
      ready.push_back(i);
      return;
    }
    const GraphIndex::Collective& collective = index.collectives[node.collective];
    if (++joined[node.collective] == collective.members.size())
      for (const std::size_t member : collective.members) ready.push_back(member);
  };
  for (std::size_t i = 0; i < index.nodes.size(); ++i)
    if (waiting[i] == 0) release(i);
  std::size_t ended = 0;
  while (!ready.empty()) {
    const std::size_t i = ready.back();
    ready.pop_back();
    done[i] = true;
    ++ended;
    const GraphIndex::Node& node = index.nodes[i];
    for (const std::size_t next : node.dependents)
      if (--waiting[next] == 0) release(next);
    if (node.spec->type == NodeType::CommSendNode && --waiting[node.partner] == 0) release(node.partner);
  }
  if (ended == index.nodes.size()) return;
  std::vector<std::string> stuck;
  for (std::size_t i = 0; i < index.nodes.size() && stuck.size() < 5; ++i)
    if (!done[i]) stuck.push_back(node_label(index.nodes[i].rank, *index.nodes[i].spec));
  throw InputError(fmt::format("execution graph: {} nodes never become ready (a cycle of dependencies, through sends and "
                               "collectives too), among them {}",
                               index.nodes.size() - ended, fmt::join(stuck, ", ")));
}

// One replay inside a SimGrid engine.
class Replay {
 public:
  Replay(const GraphIndex& index, const std::vector<sg::Host*>& hosts, const std::string& platform_file,
         const GraphReplayOptions& options)
      : index_(index), hosts_(hosts), options_(options), rings_(platform_file, options.collective_model),
        state_(index.nodes.size()) {
    for (std::size_t i = 0; i < index.nodes.size(); ++i) state_[i].waiting = index.nodes[i].deps;
    for (std::size_t i = 0; i < index.nodes.size(); ++i)
      for (const std::size_t next : index.nodes[i].start_dependents) ++state_[next].waiting_starts;
    for (const GraphIndex::Collective& collective : index.collectives) {
      CollectiveState& state = collectives_.emplace_back();
      for (const int rank : collective.ranks) state.hosts.push_back(hosts_[static_cast<std::size_t>(rank)]);
      state.rounds.assign(collective.ranks.size(), 0);
    }
    if (options_.transfer_rule == TransferRule::Fifo)
      for (const auto& [pair, count] : index.channel_messages) {
        Channel& channel = channels_[pair];
        channel.messages = count;
      }
  }

  void start() {
    for (auto& [pair, channel] : channels_) {
      const auto key = pair;
      sg::Actor::create(fmt::format("channel{}-{}", key.first, key.second), hosts_[static_cast<std::size_t>(key.first)],
                        [this, key] { run_channel(key); });
    }
    // The nodes that wait for nothing, chosen before any runs.
    std::vector<std::size_t> initial;
    for (std::size_t i = 0; i < state_.size(); ++i)
      if (state_[i].waiting == 0) initial.push_back(i);
    sg::Actor::create("graph-start", hosts_.front(), [this, initial] {
      for (const std::size_t i : initial) {
        if (index_.nodes[i].cut_through) launch_send(i);
        make_ready(i);
      }
    });
  }

  /** The tensor memory rule (graph_dispatch_rule): per rank, a compute
   *  node's tensor_size bytes are held from its start until the last node
   *  of its rank that lists it in data_deps has ended (its own end when
   *  none does). Returns each rank's memory at every change, as (time,
   *  bytes from then on), and sets every record's memory_bytes (its rank's
   *  memory right after it ends); empty, and memory 0, when no node states
   *  a tensor_size. */
  std::map<int, std::vector<std::pair<double, double>>> annotate_tensor_memory() {
    std::map<std::pair<int, std::uint64_t>, std::size_t> node_of;
    bool sized = false;
    for (std::size_t i = 0; i < index_.nodes.size(); ++i) {
      node_of[{index_.nodes[i].rank, index_.nodes[i].spec->id}] = i;
      sized = sized || (index_.nodes[i].spec->type == NodeType::CompNode && index_.nodes[i].spec->tensor_size.value_or(0) > 0);
    }
    std::map<int, std::vector<std::pair<double, double>>> series;
    if (!sized) return series;
    std::vector<double> released(index_.nodes.size());
    for (std::size_t i = 0; i < index_.nodes.size(); ++i) released[i] = state_[i].end;
    for (std::size_t j = 0; j < index_.nodes.size(); ++j)
      for (const std::uint64_t dep : index_.nodes[j].spec->data_deps) {
        const std::size_t i = node_of.at({index_.nodes[j].rank, dep});
        released[i] = std::max(released[i], state_[j].end);
      }
    // Per rank: +bytes at a start, -bytes at a release, in time order (a
    // release before a start at one instant).
    std::map<int, std::vector<std::tuple<double, int, double>>> changes;
    for (std::size_t i = 0; i < index_.nodes.size(); ++i) {
      const ExecutionNode& node = *index_.nodes[i].spec;
      if (node.type != NodeType::CompNode || node.tensor_size.value_or(0) <= 0) continue;
      changes[index_.nodes[i].rank].emplace_back(state_[i].start, 1, *node.tensor_size);
      changes[index_.nodes[i].rank].emplace_back(released[i], 0, -*node.tensor_size);
    }
    for (auto& [rank, list] : changes) {
      std::sort(list.begin(), list.end());
      double bytes = 0;
      std::vector<std::pair<double, double>>& steps = series[rank];
      for (const auto& [time, order, delta] : list) {
        (void)order;
        bytes += delta;
        if (std::abs(bytes) < 1e-6) bytes = 0;
        if (!steps.empty() && steps.back().first == time) steps.back().second = bytes;
        else steps.emplace_back(time, bytes);
      }
    }
    for (Record& record : records_) {
      const auto found = series.find(record.rank);
      if (found == series.end()) continue;
      const auto& steps = found->second;
      const auto after = std::upper_bound(steps.begin(), steps.end(), std::make_pair(record.record.end_s, std::numeric_limits<double>::infinity()));
      record.record.memory_bytes = after == steps.begin() ? 0 : std::prev(after)->second;
    }
    return series;
  }

  std::vector<TimelineRecord> sorted_records() {
    std::stable_sort(records_.begin(), records_.end(), [](const Record& x, const Record& y) {
      return std::tie(x.record.start_s, x.rank, x.record.stream, x.record.end_s) <
             std::tie(y.record.start_s, y.rank, y.record.stream, y.record.end_s);
    });
    std::vector<TimelineRecord> out;
    for (Record& record : records_) out.push_back(std::move(record.record));
    return out;
  }

 private:
  struct NodeState {
    std::size_t waiting = 0, waiting_starts = 0;
    bool ready = false, ended = false;
    double start = 0, end = 0;
    sg::ConditionVariablePtr signal;
  };
  struct CollectiveState {
    std::vector<sg::Host*> hosts;
    std::vector<int> rounds;
    std::size_t joined = 0, left = 0;
    sg::ConditionVariablePtr signal = sg::ConditionVariable::create();
    std::optional<LinkNccl> nccl;
  };
  struct StreamState {
    std::set<std::pair<std::uint64_t, std::size_t>> ready;  ///< (id, node)
    bool busy = false;
  };
  struct Channel {
    std::size_t messages = 0;
    std::deque<std::size_t> queue;
    std::map<std::size_t, double> ready_at;
    sg::ConditionVariablePtr signal = sg::ConditionVariable::create();
  };
  struct Record {
    int rank = 0;
    TimelineRecord record;
  };

  const ExecutionNode& spec(std::size_t i) const { return *index_.nodes[i].spec; }
  sg::Host* host_of(std::size_t i) const { return hosts_[static_cast<std::size_t>(index_.nodes[i].rank)]; }

  void add_record(std::size_t i, double start, double end, const std::string& action, int stream, double bytes,
                  const std::string& peer, int micro_default) {
    const GraphIndex::Node& node = index_.nodes[i];
    Record& record = records_.emplace_back();
    record.rank = node.rank;
    TimelineRecord& r = record.record;
    r.host = host_of(i)->get_name();
    r.stream = stream;
    r.stage = int_attribute(node.rank, *node.spec, "pipegrid_stage", 0);
    r.action = csv_safe(action);
    r.micro_batch = int_attribute(node.rank, *node.spec, "pipegrid_micro_batch", micro_default);
    r.mini_batch = int_attribute(node.rank, *node.spec, "pipegrid_mini_batch", 0);
    r.start_s = start;
    r.end_s = end;
    r.bytes = bytes;
    r.peer = peer;
  }

  std::string action_of(std::size_t i, const std::string& otherwise) const {
    const auto found = spec(i).extra.find("pipegrid_action");
    return found != spec(i).extra.end() ? found->second : otherwise;
  }

  void make_ready(std::size_t i) {
    NodeState& state = state_[i];
    state.ready = true;
    const GraphIndex::Node& node = index_.nodes[i];
    switch (node.spec->type) {
      case NodeType::CompNode:
        if (node.lane) {
          launch_compute(i);
        } else {
          StreamState& stream = streams_[{node.rank, node.stream}];
          stream.ready.emplace(node.spec->id, i);
          try_start_stream(node.rank, node.stream);
        }
        break;
      case NodeType::CommSendNode:
        start_node(i);
        if (node.dependency)
          end_node(i);
        else if (node.cut_through)
          notify(i);  // its actor waits for this
        else
          launch_send(i);
        break;
      case NodeType::CommRecvNode:
        start_node(i);
        if (state_[node.partner].ended) end_node(i);
        break;
      case NodeType::CommCollNode: launch_collective(i); break;
      default: break;
    }
  }

  void notify(std::size_t i) {
    if (state_[i].signal) state_[i].signal->notify_all();
  }

  void start_node(std::size_t i) {
    state_[i].start = sg::Engine::get_clock();
    for (const std::size_t next : index_.nodes[i].start_dependents)
      if (--state_[next].waiting_starts == 0) launch_send(next);
  }

  void end_node(std::size_t i) {
    NodeState& state = state_[i];
    state.ended = true;
    state.end = sg::Engine::get_clock();
    notify(i);
    const GraphIndex::Node& node = index_.nodes[i];
    for (const std::size_t next : node.dependents)
      if (--state_[next].waiting == 0) make_ready(next);
    if (node.spec->type == NodeType::CommSendNode && state_[node.partner].ready && !state_[node.partner].ended)
      end_node(node.partner);
    if (node.spec->type == NodeType::CompNode && !node.lane) {
      streams_[{node.rank, node.stream}].busy = false;
      try_start_stream(node.rank, node.stream);
    }
  }

  void try_start_stream(int rank, int stream_id) {
    StreamState& stream = streams_[{rank, stream_id}];
    if (stream.busy || stream.ready.empty()) return;
    const std::size_t i = stream.ready.begin()->second;
    stream.ready.erase(stream.ready.begin());
    stream.busy = true;
    launch_compute(i);
  }

  void launch_compute(std::size_t i) {
    sg::Actor::create(fmt::format("node{}", i), host_of(i), [this, i] {
      start_node(i);
      const double duration = spec(i).duration_s;
      if (duration > 0) sg::this_actor::sleep_for(duration);
      const GraphIndex::Node& node = index_.nodes[i];
      add_record(i, state_[i].start, sg::Engine::get_clock(), action_of(i, spec(i).name), node.stream, 0, "", 0);
      end_node(i);
    });
  }

  sg::Host* destination(std::size_t i) const { return hosts_[static_cast<std::size_t>(*spec(i).comm_dst)]; }

  // The message of send `i`, started now (as the engine's start_message:
  // bytes / the route's NCCL efficiency on the wire).
  sg::CommPtr start_message(std::size_t i) {
    sg::CommPtr comm = sg::Comm::sendto_init(host_of(i), destination(i));
    comm->set_payload_size(static_cast<uint64_t>(spec(i).comm_size.value_or(0) / rings_.route_nccl(host_of(i), destination(i)).efficiency));
    comm->start();
    return comm;
  }

  // Waits for `comm` to arrive (its last byte plus the route's NCCL start
  // latency), then for send `i`'s deps to have ended; ends it.
  void finish_send(std::size_t i, const sg::CommPtr& comm) {
    comm->wait();
    const double arrival = comm->get_finish_time() + rings_.route_nccl(host_of(i), destination(i)).latency_s;
    if (arrival > sg::Engine::get_clock()) sg::this_actor::sleep_until(arrival);
    wait_until_ready(i);
    add_record(i, comm->get_start_time(), sg::Engine::get_clock(), action_of(i, "SEND_" + spec(i).name), 0,
               spec(i).comm_size.value_or(0), destination(i)->get_name(), 0);
    end_node(i);
  }

  void wait_until_ready(std::size_t i) {
    NodeState& state = state_[i];
    if (state.ready) return;
    if (!state.signal) state.signal = sg::ConditionVariable::create();
    std::unique_lock lock(*mutex_);
    while (!state.ready) state.signal->wait(lock);
  }

  void launch_send(std::size_t i) {
    if (options_.transfer_rule == TransferRule::Fifo) {
      enqueue(i);
      return;
    }
    sg::Actor::create(fmt::format("node{}", i), host_of(i), [this, i] { finish_send(i, start_message(i)); });
  }

  // Fifo: the channel's queue in (ready time, comm_tag) order.
  void enqueue(std::size_t i) {
    Channel& channel = channels_.at({*spec(i).comm_src, *spec(i).comm_dst});
    const double now = sg::Engine::get_clock();
    channel.ready_at[i] = now;
    auto at = channel.queue.end();
    while (at != channel.queue.begin() && *spec(*(at - 1)).comm_tag > *spec(i).comm_tag && channel.ready_at.at(*(at - 1)) == now) --at;
    channel.queue.insert(at, i);
    channel.signal->notify_all();
  }

  void run_channel(std::pair<int, int> key) {
    Channel& channel = channels_.at(key);
    for (std::size_t sent = 0; sent < channel.messages; ++sent) {
      {
        std::unique_lock lock(*mutex_);
        while (channel.queue.empty()) channel.signal->wait(lock);
      }
      // As the engine's channels: the actors of this instant queue their messages first.
      sg::this_actor::yield();
      const std::size_t i = channel.queue.front();
      channel.queue.pop_front();
      finish_send(i, start_message(i));
    }
  }

  void launch_collective(std::size_t i) {
    sg::Actor::create(fmt::format("node{}", i), host_of(i), [this, i] {
      start_node(i);
      const GraphIndex::Node& node = index_.nodes[i];
      const GraphIndex::Collective& collective = index_.collectives[node.collective];
      CollectiveState& state = collectives_[node.collective];
      RingNetwork::Progress progress{state.hosts, state.rounds, state.joined, state.left, state.signal, state.nccl};
      const RingNetwork::Part part = rings_.run_ring(progress, node.participant, collective.kind, collective.bytes);
      const char* name = collective.kind == CollectiveKind::AllReduce       ? "ALLREDUCE"
                         : collective.kind == CollectiveKind::ReduceScatter ? "REDUCE_SCATTER"
                                                                            : "ALLGATHER";
      add_record(i, part.start_s, part.end_s, action_of(i, name), 0, part.bytes, state.hosts[part.next]->get_name(), -1);
      end_node(i);
    });
  }

  const GraphIndex& index_;
  const std::vector<sg::Host*>& hosts_;
  const GraphReplayOptions& options_;
  RingNetwork rings_;
  std::vector<NodeState> state_;
  std::deque<CollectiveState> collectives_;
  std::map<std::pair<int, int>, StreamState> streams_;
  std::map<std::pair<int, int>, Channel> channels_;
  std::vector<Record> records_;
  sg::MutexPtr mutex_ = rings_.mutex();
};

nlohmann::json record_to_json(const TimelineRecord& r) {
  return nlohmann::json::array(
      {r.host, r.stream, r.stage, r.action, r.micro_batch, r.mini_batch, r.start_s, r.end_s, r.bytes, r.peer, r.memory_bytes});
}

TimelineRecord record_from_json(const nlohmann::json& j) {
  TimelineRecord r;
  r.host = j.at(0).get<std::string>();
  r.stream = j.at(1).get<int>();
  r.stage = j.at(2).get<int>();
  r.action = j.at(3).get<std::string>();
  r.micro_batch = j.at(4).get<int>();
  r.mini_batch = j.at(5).get<int>();
  r.start_s = j.at(6).get<double>();
  r.end_s = j.at(7).get<double>();
  r.bytes = j.at(8).get<double>();
  r.peer = j.at(9).get<std::string>();
  r.memory_bytes = j.at(10).get<double>();
  return r;
}

}  // namespace

Timeline simulate_graph(const ExecutionTraceSet& traces, const std::string& platform_file, const GraphReplayOptions& options) {
  const GraphIndex index = index_graphs(traces);
  check_acyclic(index);
  internal::check_platform(platform_file);
  const internal::EngineOutput output = internal::run_engine(platform_file, [&](sg::Engine& engine, std::string&) {
    const PlatformSummary platform = internal::load_platform_into(engine, platform_file, options.network);
    if (traces.ranks.size() > platform.hosts.size())
      throw InputError(fmt::format("{}: the execution graphs have {} ranks, the platform {} hosts: rank r runs on the "
                                   "platform's r-th host",
                                   printable(platform_file), traces.ranks.size(), platform.hosts.size()));
    std::vector<sg::Host*> hosts;
    for (const HostInfo& host : platform.hosts) hosts.push_back(sg::Host::by_name(host.name));
    Replay& replay = *new Replay(index, hosts, platform_file, options);  // never destroyed: the child exits
    replay.start();
    engine.run();
    nlohmann::json memory = nlohmann::json::object();
    for (const auto& [rank, steps] : replay.annotate_tensor_memory()) memory[platform.hosts[static_cast<std::size_t>(rank)].name] = steps;
    nlohmann::json records = nlohmann::json::array();
    for (const TimelineRecord& record : replay.sorted_records()) records.push_back(record_to_json(record));
    nlohmann::json used = nlohmann::json::array();
    for (std::size_t r = 0; r < traces.ranks.size(); ++r)
      if (!traces.ranks[r].nodes.empty()) used.push_back(platform.hosts[r].name);
    return nlohmann::json{{"hosts", used}, {"records", records}, {"memory", memory}};
  });
  Timeline timeline;
  timeline.hosts = output.json.at("hosts").get<std::vector<std::string>>();
  for (const nlohmann::json& record : output.json.at("records")) timeline.records.push_back(record_from_json(record));
  for (const auto& [host, steps] : output.json.at("memory").items())
    timeline.memory_series[host] = steps.get<std::vector<std::pair<double, double>>>();
  return timeline;
}

}  // namespace pipegrid::sim
