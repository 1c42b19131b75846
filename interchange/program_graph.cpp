#include "interchange/program_graph.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/partition.hpp"
#include "core/platform_check.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid::interchange {
namespace {

// The micro-batch of a tied-embedding all-reduce's records (sim/engine.cpp).
constexpr int kTiedEmbeddingLabel = -2;

struct NodeRef {
  int rank = -1;
  std::uint64_t id = 0;
  bool valid() const { return rank >= 0; }
};

// A dependency of an action's node, added when its stream is chained.
struct Need {
  NodeRef node;
  bool data = false;  ///< data dep (an input), else ctrl
};

struct ActionInfo {
  std::size_t device = 0, stream = 0, position = 0;
  std::size_t engine_index = 0;  ///< the engine's order: devices, streams, positions
  int overlap = 0;               ///< 1: first of an overlapped pair, 2: second, 0: alone
  NodeRef node;
  NodeRef step;                  ///< the optimizer step after it, if any
  bool step_on_lane = false;     ///< that step runs beside the streams (after a tied all-reduce)
  std::vector<Need> needs;
};

// A send and its receive, tagged once all are known.
struct Message {
  NodeRef send, recv;
  std::size_t order = 0;  ///< producer's engine index (data), or after all data messages
};

bool is_final_backward(ActionKind kind) { return kind == ActionKind::Backward || kind == ActionKind::BackwardWeight; }

class GraphBuilder {
 public:
  GraphBuilder(const Plan& plan, const api::RunResult& run) : plan_(plan), run_(run), program_(run.program) {}

  ExecutionTraceSet build() {
    for (std::size_t r = 0; r < run_.platform.hosts.size(); ++r) {
      rank_of_host_[run_.platform.hosts[r].name] = static_cast<int>(r);
      set_.ranks.push_back({static_cast<int>(r), {}});
    }
    index_records();
    costs_ = stage_costs(plan_.profile, plan_.partition);
    place_devices();
    add_compute_nodes();
    add_data_needs();
    add_extra_dependencies();
    add_collectives();
    add_step_needs_across_streams();
    chain_streams();
    tag_messages();
    return std::move(set_);
  }

 private:
  using RecordKey = std::tuple<std::string, std::string, int, int, int>;

  void index_records() {
    for (const TimelineRecord& record : run_.timeline.records) {
      if (TimelineRecord::is_collective(record.action)) {
        if (record.micro_batch == kTiedEmbeddingLabel) {
          tied_records_.insert({record.stage, record.mini_batch, record.host});
          tied_stages_.insert(record.stage);
        } else if (record.micro_batch != -1)
          throw InputError(fmt::format("execution graph: the run synchronises stage {}'s gradients per layer or per "
                                       "bucket (wait-free or bucketed all-reduces start inside a backward); execution "
                                       "graphs hold whole-stage collectives only",
                                       record.stage));
      }
      const RecordKey key{record.host, record.action, record.stage, record.micro_batch, record.mini_batch};
      records_.emplace(key, &record);
      if (record.action == kOptimizerStepAction) step_records_[key].push_back(&record);
    }
    for (auto& [key, steps] : step_records_)
      std::stable_sort(steps.begin(), steps.end(), [](const TimelineRecord* x, const TimelineRecord* y) { return x->start_s < y->start_s; });
  }

  // The next optimizer step record (U) of this key not yet taken, in time
  // order. One backward may be followed by several steps on one device (the
  // distributed optimizer's step per stage of an interleaved device, all
  // labelled with the device's ready backward): the engine runs them in
  // Program order, the order the graphs take them.
  const TimelineRecord* take_step_record(const std::string& host, int stage, int micro, int mini) {
    const auto found = step_records_.find(RecordKey{host, kOptimizerStepAction, stage, micro, mini});
    if (found == step_records_.end()) return nullptr;
    std::size_t& taken = steps_taken_[found->first];
    return taken < found->second.size() ? found->second[taken++] : nullptr;
  }

  const TimelineRecord* find_record(const std::string& host, const std::string& action, int stage, int micro, int mini) const {
    const auto found = records_.find(RecordKey{host, action, stage, micro, mini});
    return found == records_.end() ? nullptr : found->second;
  }

  const TimelineRecord& record_of(const std::string& host, const std::string& action, int stage, int micro, int mini) const {
    if (const TimelineRecord* record = find_record(host, action, stage, micro, mini)) return *record;
    throw InputError(fmt::format("execution graph: the timeline has no {} record of stage {} micro-batch {} mini-batch {} "
                                 "on host '{}'",
                                 action, stage, micro, mini, printable(host)));
  }

  void place_devices() {
    for (std::size_t d = 0; d < program_.devices.size(); ++d) {
      const DeviceProgram& device = program_.devices[d];
      if (device.stages.empty()) throw InputError(fmt::format("execution graph: device {} holds no stage", d));
      const int stage = device.stages.front();
      if (stage < 0 || static_cast<std::size_t>(stage) >= plan_.partition.hosts.size() ||
          device.replica < 0 || static_cast<std::size_t>(device.replica) >= plan_.partition.hosts[stage].size())
        throw InputError(fmt::format("execution graph: no host for stage {} replica {}", stage, device.replica));
      const std::string& host = plan_.partition.hosts[stage][device.replica];
      const auto rank = rank_of_host_.find(host);
      if (rank == rank_of_host_.end())
        throw InputError(fmt::format("execution graph: device {} runs on '{}', which is not a host of the platform", d, printable(host)));
      device_host_.push_back(host);
      device_rank_.push_back(rank->second);
    }
  }

  NodeRef add_node(int rank, ExecutionNode node) {
    std::vector<ExecutionNode>& nodes = set_.ranks[static_cast<std::size_t>(rank)].nodes;
    node.id = nodes.size();
    nodes.push_back(std::move(node));
    return {rank, nodes.back().id};
  }

  ExecutionNode& node(NodeRef ref) { return set_.ranks[static_cast<std::size_t>(ref.rank)].nodes[ref.id]; }

  static void set_labels(ExecutionNode& node, int stage, int micro, int mini, const std::string& action) {
    node.extra["pipegrid_stage"] = std::to_string(stage);
    node.extra["pipegrid_micro_batch"] = std::to_string(micro);
    node.extra["pipegrid_mini_batch"] = std::to_string(mini);
    node.extra["pipegrid_action"] = action;
  }

  // The stage's FLOPs of one action when every layer of the stage gives them.
  std::optional<double> flops_of(const Action& action) const {
    double total = 0;
    for (std::size_t l = 0; l < plan_.profile.layers.size(); ++l) {
      if (plan_.partition.stage_of_layer[l] != action.stage) continue;
      const Layer& layer = plan_.profile.layers[l];
      std::optional<double> flops;
      switch (action.kind) {
        case ActionKind::Forward:
        case ActionKind::Recompute: flops = layer.forward_flops; break;
        case ActionKind::BackwardInput: flops = layer.backward_input_flops; break;
        case ActionKind::BackwardWeight: flops = layer.backward_weight_flops; break;
        case ActionKind::Backward:
          if (layer.backward_input_flops && layer.backward_weight_flops)
            flops = *layer.backward_input_flops + *layer.backward_weight_flops;
          break;
      }
      if (!flops) return std::nullopt;
      total += *flops;
    }
    return total;
  }

  void add_compute_nodes() {
    std::size_t engine_index = 0;
    for (std::size_t d = 0; d < program_.devices.size(); ++d) {
      const DeviceProgram& device = program_.devices[d];
      const std::string& host = device_host_[d];
      for (std::size_t s = 0; s < device.streams.size(); ++s) {
        const Stream& stream = device.streams[s];
        for (std::size_t k = 0; k < stream.actions.size(); ++k) {
          const Action& action = stream.actions[k];
          const std::string letter(1, action_letter(action.kind));
          const TimelineRecord& record = record_of(host, letter, action.stage, action.micro_batch, action.mini_batch);
          ExecutionNode compute;
          compute.name = pipegrid::to_string(action);
          compute.type = NodeType::CompNode;
          compute.duration_s = record.end_s - record.start_s;
          compute.num_ops = flops_of(action);
          const StageCost& cost = costs_.at(static_cast<std::size_t>(action.stage));
          if (action.kind == ActionKind::Forward) compute.tensor_size = cost.output_bytes;
          if (is_input_gradient(action.kind)) compute.tensor_size = cost.input_bytes;
          set_labels(compute, action.stage, action.micro_batch, action.mini_batch, letter);
          compute.extra["pipegrid_stream"] = std::to_string(s);
          ActionInfo info;
          info.device = d;
          info.stream = s;
          info.position = k;
          info.engine_index = engine_index++;
          if (std::binary_search(stream.overlapped.begin(), stream.overlapped.end(), k))
            info.overlap = 1;
          else if (k > 0 && std::binary_search(stream.overlapped.begin(), stream.overlapped.end(), k - 1))
            info.overlap = 2;
          info.node = add_node(device_rank_[d], std::move(compute));
          if (!actions_.emplace(action, std::move(info)).second)
            throw InputError(fmt::format("execution graph: {} is scheduled twice", pipegrid::to_string(action)));
        }
      }
    }
    for (auto& [action, info] : actions_) {
      if (info.overlap != 1) continue;
      const Action& partner = program_.devices[info.device].streams[info.stream].actions[info.position + 1];
      ActionInfo& second = actions_.at(partner);
      node(info.node).extra["pipegrid_overlapped_with"] = std::to_string(second.node.id);
      node(second.node).extra["pipegrid_overlapped_with"] = std::to_string(info.node.id);
    }
  }

  ActionInfo& info_of(const Action& action) {
    const auto found = actions_.find(action);
    if (found == actions_.end())
      throw InputError(fmt::format("execution graph: {} is needed but not scheduled", pipegrid::to_string(action)));
    return found->second;
  }

  // The node whose end is when `info`'s results are available: an
  // overlapped pair's results come at the pair's end (its second node).
  NodeRef result_node(const ActionInfo& info) {
    if (info.overlap != 1) return info.node;
    return info_of(program_.devices[info.device].streams[info.stream].actions[info.position + 1]).node;
  }

  // The node a consumer on `consumer_rank` waits for to have `producer`'s
  // result: the producer on its own host, else the receive of its message
  // (one message per producer, sent once its result is available).
  NodeRef input_from(const Action& producer, int consumer_rank) {
    ActionInfo& source = info_of(producer);
    if (source.node.rank == consumer_rank) return source.node;
    if (const auto known = messages_.find(producer); known != messages_.end()) return known->second.recv;
    const std::string action = producer.kind == ActionKind::Forward ? "SEND_F" : "SEND_B";
    const std::string& host = device_host_[source.device];
    const TimelineRecord& record = record_of(host, action, producer.stage, producer.micro_batch, producer.mini_batch);
    ExecutionNode send;
    send.name = fmt::format("{} {}", action, pipegrid::to_string(producer));
    send.type = NodeType::CommSendNode;
    send.data_deps.push_back(result_node(source).id);
    send.duration_s = record.end_s - record.start_s;
    send.comm_size = record.bytes;
    send.comm_src = source.node.rank;
    send.comm_dst = consumer_rank;
    set_labels(send, producer.stage, producer.micro_batch, producer.mini_batch, action);
    if (run_.platform.host(host).execution == Execution::Async) send.extra["pipegrid_cut_through"] = "1";
    ExecutionNode receive = send;
    receive.type = NodeType::CommRecvNode;
    receive.data_deps.clear();
    receive.extra.erase("pipegrid_cut_through");
    Message message;
    message.send = add_node(source.node.rank, std::move(send));
    message.recv = add_node(consumer_rank, std::move(receive));
    message.order = source.engine_index;
    messages_.emplace(producer, message);
    return message.recv;
  }

  // `after` may not start before `before` has ended: a dep on one rank, a
  // zero-byte dependency pair (delivered at once) across ranks.
  void depend(NodeRef after, NodeRef before, bool data) {
    if (after.rank == before.rank) {
      std::vector<std::uint64_t>& deps = data ? node(after).data_deps : node(after).ctrl_deps;
      if (std::find(deps.begin(), deps.end(), before.id) == deps.end()) deps.push_back(before.id);
      return;
    }
    const auto key = std::make_tuple(before.rank, before.id, after.rank);
    auto found = dependency_pairs_.find(key);
    if (found == dependency_pairs_.end()) {
      ExecutionNode send;
      send.name = fmt::format("DEPENDENCY {}", node(before).name);
      send.type = NodeType::CommSendNode;
      send.data_deps.push_back(before.id);
      send.comm_size = 0;
      send.comm_src = before.rank;
      send.comm_dst = after.rank;
      send.extra["pipegrid_dependency"] = "1";
      ExecutionNode receive = send;
      receive.type = NodeType::CommRecvNode;
      receive.data_deps.clear();
      Message message;
      message.send = add_node(before.rank, std::move(send));
      message.recv = add_node(after.rank, std::move(receive));
      dependency_messages_.push_back(message);
      found = dependency_pairs_.emplace(key, message.recv).first;
    }
    depend(after, found->second, false);
  }

  void add_data_needs() {
    const int last_stage = program_.num_stages - 1;
    const bool recompute_waits = plan_.layer_recompute.enabled();
    for (auto& entry : actions_) {
      // Named references, not a structured binding: the lambdas below
      // capture them (clang 14 cannot capture structured bindings).
      const Action& a = entry.first;
      ActionInfo& info = entry.second;
      const int rank = info.node.rank;
      auto gradient_producer = [&]() {
        const Action whole{ActionKind::Backward, a.stage + 1, a.micro_batch, a.mini_batch};
        return actions_.count(whole) ? whole : Action{ActionKind::BackwardInput, a.stage + 1, a.micro_batch, a.mini_batch};
      };
      auto local = [&](const Action& producer) { info.needs.push_back({result_node(info_of(producer)), true}); };
      switch (a.kind) {
        case ActionKind::Forward:
          if (a.stage > 0) info.needs.push_back({input_from({ActionKind::Forward, a.stage - 1, a.micro_batch, a.mini_batch}, rank), true});
          break;
        case ActionKind::Recompute:
          local({ActionKind::Forward, a.stage, a.micro_batch, a.mini_batch});
          if (recompute_waits && a.stage < last_stage) info.needs.push_back({input_from(gradient_producer(), rank), true});
          break;
        case ActionKind::Backward:
        case ActionKind::BackwardInput:
          local({ActionKind::Forward, a.stage, a.micro_batch, a.mini_batch});
          if (actions_.count({ActionKind::Recompute, a.stage, a.micro_batch, a.mini_batch}))
            local({ActionKind::Recompute, a.stage, a.micro_batch, a.mini_batch});
          if (a.stage < last_stage) info.needs.push_back({input_from(gradient_producer(), rank), true});
          break;
        case ActionKind::BackwardWeight: local({ActionKind::BackwardInput, a.stage, a.micro_batch, a.mini_batch}); break;
      }
    }
  }

  void add_extra_dependencies() {
    for (const Dependency& dependency : program_.extra_dependencies)
      info_of(dependency.after).needs.push_back({info_of(dependency.before).node, false});
  }

  // The stream steps: a device without all-reduces runs an optimizer step
  // (a U record of the final backward it follows) on that backward's stream.
  void add_stream_steps() {
    for (auto& [a, info] : actions_) {
      if (!is_final_backward(a.kind) || devices_with_collectives_.count(info.device) || info.step.valid()) continue;
      const TimelineRecord* record = take_step_record(device_host_[info.device], a.stage, a.micro_batch, a.mini_batch);
      if (record == nullptr) continue;
      info.step = add_node(info.node.rank, step_node(a, info.stream, *record));
    }
  }

  ExecutionNode step_node(const Action& after, std::size_t stream, const TimelineRecord& record) const {
    ExecutionNode step;
    step.name = fmt::format("U({})", pipegrid::to_string(after));
    step.type = NodeType::CompNode;
    step.duration_s = record.end_s - record.start_s;
    set_labels(step, after.stage, after.micro_batch, after.mini_batch, kOptimizerStepAction);
    step.extra["pipegrid_stream"] = std::to_string(stream);
    return step;
  }

  const char* collective_name(CollectiveType type) const {
    return type == CollectiveType::AllReduce ? "ALLREDUCE" : type == CollectiveType::ReduceScatter ? "REDUCE_SCATTER" : "ALLGATHER";
  }

  std::string process_group(const std::vector<int>& ranks) {
    for (const auto& [name, members] : set_.process_groups)
      if (members == ranks) return name;
    // Decimal names from 1: ASTRA-sim reads a group key with stoi (0: no group).
    std::string name = std::to_string(set_.process_groups.size() + 1);
    set_.process_groups.emplace(name, ranks);
    return name;
  }

  // A collective node of participant `participant` (ranks: the ring) with
  // the bytes its record implies: the record's bytes are what the
  // participant sends, steps x S / r.
  NodeRef add_collective(int stage, int label, int round, std::size_t participant, const std::vector<int>& ranks,
                         CollectiveType type, const std::string& host) {
    const std::string action = collective_name(type);
    const TimelineRecord& record = record_of(host, action, stage, label, round);
    const std::size_t r = ranks.size();
    const double steps = type == CollectiveType::AllReduce ? 2.0 * static_cast<double>(r - 1) : static_cast<double>(r - 1);
    ExecutionNode collective;
    collective.name = label == kTiedEmbeddingLabel ? fmt::format("{} tied embedding stage {} round {}", action, stage, round)
                                                   : fmt::format("{} stage {} round {}", action, stage, round);
    collective.type = NodeType::CommCollNode;
    collective.duration_s = record.end_s - record.start_s;
    collective.comm_size = steps > 0 ? record.bytes * static_cast<double>(r) / steps : 0.0;
    collective.comm_type = type;
    collective.pg_name = process_group(ranks);
    set_labels(collective, stage, label, round, action);
    return add_node(ranks[participant], std::move(collective));
  }

  // A tied word embedding's all-reduces when neither of its stages has a
  // gradient synchronisation (the engine's place_lone_tied_syncs): per
  // mini-batch, between the two stages' devices, each joining once the
  // stage's final backwards of the mini-batch have ended; the step of the
  // stage's last backward runs after it; the stage's forwards of the next
  // mini-batch wait for both.
  void add_lone_tied_syncs() {
    if (tied_stages_.size() != 2) return;
    const int first = *tied_stages_.begin(), last = *tied_stages_.rbegin();
    for (const AllReduce& spec : program_.all_reduces)
      if (spec.stage == first || spec.stage == last) return;  // paired with those (add_collectives)
    // (stage, mini-batch) -> host of its record.
    std::map<std::pair<int, int>, std::string> host_of;
    for (const auto& [stage, mini, host] : tied_records_) host_of[{stage, mini}] = host;
    std::map<std::size_t, NodeRef> lane;  // per device: its last node
    for (const auto& [key, host] : host_of) {
      const auto& [stage, mini] = key;
      if (stage != first) continue;
      const auto partner = host_of.find({last, mini});
      if (partner == host_of.end()) continue;
      const std::vector<int> ranks{rank_of_host_.at(host), rank_of_host_.at(partner->second)};
      for (std::size_t p = 0; p < 2; ++p) {
        const int own_stage = p == 0 ? first : last;
        const std::string& own_host = p == 0 ? host : partner->second;
        // The stage's final backwards of the mini-batch (engine order), its forwards of the next.
        std::vector<std::pair<std::size_t, Action>> backwards, forwards;
        for (const auto& [a, info] : actions_) {
          if (a.stage != own_stage || device_host_[info.device] != own_host) continue;
          if (is_final_backward(a.kind) && a.mini_batch == mini) backwards.push_back({info.engine_index, a});
          if (a.kind == ActionKind::Forward && a.mini_batch == mini + 1) forwards.push_back({info.engine_index, a});
        }
        if (backwards.empty()) continue;
        std::sort(backwards.begin(), backwards.end());
        const std::size_t device = info_of(backwards.front().second).device;
        const NodeRef sync = add_collective(own_stage, kTiedEmbeddingLabel, mini, p, ranks, CollectiveType::AllReduce, own_host);
        for (const auto& [order, backward] : backwards) depend(sync, info_of(backward).node, true);
        if (const auto previous = lane.find(device); previous != lane.end()) depend(sync, previous->second, false);
        NodeRef end = sync;
        // The step that follows the stage's last backward with one runs after the all-reduce.
        for (auto backward = backwards.rbegin(); backward != backwards.rend(); ++backward) {
          const Action& a = backward->second;
          const TimelineRecord* record = take_step_record(own_host, a.stage, a.micro_batch, a.mini_batch);
          if (record == nullptr) continue;
          ActionInfo& info = info_of(a);
          ExecutionNode step = step_node(a, info.stream, *record);
          step.extra["pipegrid_lane"] = "collectives";
          info.step = add_node(info.node.rank, std::move(step));
          info.step_on_lane = true;
          depend(info.step, sync, false);
          end = info.step;
          break;
        }
        lane[device] = end;
        for (const auto& [order, forward] : forwards) info_of(forward).needs.push_back({end, false});
      }
    }
  }

  void add_collectives() {
    // Per device: (all-reduce, participant) in Program order.
    std::map<std::size_t, std::vector<std::pair<std::size_t, std::size_t>>> device_parts;
    std::vector<std::vector<int>> ring_ranks(program_.all_reduces.size());
    for (std::size_t c = 0; c < program_.all_reduces.size(); ++c) {
      const AllReduce& spec = program_.all_reduces[c];
      if (spec.per_layer || spec.bucketed) {
        // A bucketed one of one bucket runs as a whole stage (the records say).
      }
      for (std::size_t p = 0; p < spec.ready.size(); ++p) {
        const ActionInfo& ready = info_of(spec.ready[p]);
        device_parts[ready.device].push_back({c, p});
        ring_ranks[c].push_back(ready.node.rank);
        devices_with_collectives_.insert(ready.device);
      }
    }
    add_lone_tied_syncs();
    add_stream_steps();
    const bool sharded = plan_.distributed_optimizer;
    const bool gather_overlapped = sharded && plan_.overlap_param_gather;
    // Per all-reduce and participant: the node what it releases waits for.
    std::vector<std::vector<NodeRef>> release_point(program_.all_reduces.size());
    std::vector<std::vector<NodeRef>> ended(program_.all_reduces.size());
    for (std::size_t c = 0; c < program_.all_reduces.size(); ++c) {
      release_point[c].resize(program_.all_reduces[c].ready.size());
      ended[c].resize(program_.all_reduces[c].ready.size());
    }
    for (const auto& [device, parts] : device_parts) {
      NodeRef previous;
      auto chain = [&](NodeRef next) {
        if (previous.valid()) depend(next, previous, false);
        previous = next;
      };
      for (const auto& [c, p] : parts) {
        const AllReduce& spec = program_.all_reduces[c];
        const Action& ready_action = spec.ready[p];
        const ActionInfo& ready = info_of(ready_action);
        const std::string& host = device_host_[device];
        const NodeRef reduce = add_collective(spec.stage, -1, spec.round, p, ring_ranks[c],
                                              sharded ? CollectiveType::ReduceScatter : CollectiveType::AllReduce, host);
        depend(reduce, ready.node, true);
        chain(reduce);
        // The tied word embedding's all-reduce between replica p of its two
        // stages (the engine's pair_tied_embeddings), before the step.
        if (find_record(host, "ALLREDUCE", spec.stage, kTiedEmbeddingLabel, spec.round) && tied_stages_.size() == 2) {
          const int first = *tied_stages_.begin(), last = *tied_stages_.rbegin();
          const int other = spec.stage == first ? last : first;
          std::optional<std::size_t> partner;
          for (std::size_t o = 0; o < program_.all_reduces.size(); ++o)
            if (program_.all_reduces[o].stage == other && program_.all_reduces[o].round == spec.round) partner = o;
          if (!partner || ring_ranks[*partner].size() != ring_ranks[c].size())
            throw InputError(fmt::format("execution graph: the tied embedding's all-reduce of stage {} round {} has no "
                                         "partner of stage {}",
                                         spec.stage, spec.round, other));
          const bool own_first = spec.stage == first;
          const std::vector<int> pair = own_first ? std::vector<int>{ring_ranks[c][p], ring_ranks[*partner][p]}
                                                  : std::vector<int>{ring_ranks[*partner][p], ring_ranks[c][p]};
          chain(add_collective(spec.stage, kTiedEmbeddingLabel, spec.round, own_first ? 0 : 1, pair,
                               CollectiveType::AllReduce, host));
        }
        if (const TimelineRecord* record = take_step_record(host, ready_action.stage, ready_action.micro_batch, ready_action.mini_batch)) {
          ExecutionNode step = step_node(ready_action, ready.stream, *record);
          step.extra["pipegrid_lane"] = "collectives";
          chain(add_node(ready.node.rank, std::move(step)));
        }
        const NodeRef stepped = previous;
        if (sharded) chain(add_collective(spec.stage, -1, spec.round, p, ring_ranks[c], CollectiveType::AllGather, host));
        ended[c][p] = previous;
        release_point[c][p] = gather_overlapped ? stepped : previous;
      }
    }
    for (std::size_t c = 0; c < program_.all_reduces.size(); ++c) {
      const AllReduce& spec = program_.all_reduces[c];
      for (const Action& released : spec.release) {
        ActionInfo& state = info_of(released);
        bool own = false;
        for (std::size_t p = 0; p < spec.ready.size(); ++p)
          if (info_of(spec.ready[p]).device == state.device) {
            state.needs.push_back({release_point[c][p], false});
            own = true;
          }
        if (!own)
          for (std::size_t p = 0; p < spec.ready.size(); ++p) state.needs.push_back({release_point[c][p], false});
      }
      if (!gather_overlapped) continue;
      // The stage's first forward of the next mini-batch on each participant waits for its all-gathers.
      for (std::size_t p = 0; p < spec.ready.size(); ++p) {
        const ActionInfo& ready = info_of(spec.ready[p]);
        std::optional<std::size_t> first;
        Action first_action;
        for (const auto& [a, info] : actions_)
          if (a.kind == ActionKind::Forward && info.device == ready.device && a.stage == spec.stage &&
              a.mini_batch == spec.ready[p].mini_batch + 1 && (!first || info.engine_index < *first)) {
            first = info.engine_index;
            first_action = a;
          }
        if (first) info_of(first_action).needs.push_back({ended[c][p], false});
      }
    }
  }

  // update_interval 0: a device's other streams start no action of a later
  // mini-batch before the step has ended.
  void add_step_needs_across_streams() {
    const int interval = plan_.program_text.empty()
                             ? update_interval(plan_.schedule, api::plan_schedule_options(plan_, plan_.mini_batches))
                             : 0;
    if (interval != 0) return;
    for (auto& [a, info] : actions_) {
      if (!info.step.valid()) continue;
      const DeviceProgram& device = program_.devices[info.device];
      for (std::size_t s = 0; s < device.streams.size(); ++s) {
        if (s == info.stream) continue;
        for (const Action& other : device.streams[s].actions)
          if (other.mini_batch > a.mini_batch) {
            info_of(other).needs.push_back({info.step, false});
            break;
          }
      }
    }
  }

  std::optional<NodeRef> send_of(const Action& producer) const {
    const auto found = messages_.find(producer);
    if (found == messages_.end()) return std::nullopt;
    return found->second.send;
  }

  void chain_streams() {
    const bool blocking = plan_.blocking_transfers;
    for (const DeviceProgram& device : program_.devices)
      for (const Stream& stream : device.streams) {
        std::optional<NodeRef> previous;
        std::vector<NodeRef> holds;
        auto start_after_previous = [&](NodeRef next) {
          if (previous) depend(next, *previous, false);
          for (const NodeRef hold : holds) depend(next, hold, false);
        };
        for (std::size_t k = 0; k < stream.actions.size(); ++k) {
          std::vector<Action> members{stream.actions[k]};
          if (info_of(members.front()).overlap == 1 && k + 1 < stream.actions.size()) members.push_back(stream.actions[++k]);
          const NodeRef first = info_of(members.front()).node;
          start_after_previous(first);
          // An overlapped pair starts when both of its actions can.
          for (const Action& member : members)
            for (const Need& need : info_of(member).needs) depend(first, need.node, need.data);
          if (members.size() == 2) depend(info_of(members.back()).node, first, false);
          previous = info_of(members.back()).node;
          holds.clear();
          if (blocking)
            for (const Action& member : members)
              if (const auto send = send_of(member)) holds.push_back(*send);
          for (const Action& member : members) {
            const NodeRef step = info_of(member).step;
            if (!step.valid() || info_of(member).step_on_lane) continue;
            start_after_previous(step);
            holds.clear();
            previous = step;
          }
        }
      }
  }

  // Tags number each (src, dst) pair's messages: data messages in the
  // engine's order of their producers, then the dependency pairs.
  void tag_messages() {
    std::vector<Message> all;
    for (const auto& [producer, message] : messages_) all.push_back(message);
    std::stable_sort(all.begin(), all.end(), [](const Message& x, const Message& y) { return x.order < y.order; });
    all.insert(all.end(), dependency_messages_.begin(), dependency_messages_.end());
    std::map<std::pair<int, int>, int> next_tag;
    for (const Message& message : all) {
      const int tag = next_tag[{message.send.rank, message.recv.rank}]++;
      node(message.send).comm_tag = tag;
      node(message.recv).comm_tag = tag;
    }
  }

  const Plan& plan_;
  const api::RunResult& run_;
  const Program& program_;
  ExecutionTraceSet set_;
  std::map<std::string, int> rank_of_host_;
  std::map<RecordKey, const TimelineRecord*> records_;
  std::map<RecordKey, std::vector<const TimelineRecord*>> step_records_;
  std::map<RecordKey, std::size_t> steps_taken_;
  std::vector<StageCost> costs_;
  std::vector<std::string> device_host_;
  std::vector<int> device_rank_;
  std::map<Action, ActionInfo> actions_;
  std::map<Action, Message> messages_;
  std::vector<Message> dependency_messages_;
  std::map<std::tuple<int, std::uint64_t, int>, NodeRef> dependency_pairs_;
  std::set<std::size_t> devices_with_collectives_;
  /// A tied word embedding's all-reduce records: (stage, round or
  /// mini-batch, host), and the two stages.
  std::set<std::tuple<int, int, std::string>> tied_records_;
  std::set<int> tied_stages_;
};

}  // namespace

ExecutionTraceSet trace_set_of_run(const Plan& plan, const api::RunResult& run) { return GraphBuilder(plan, run).build(); }

}  // namespace pipegrid::interchange
