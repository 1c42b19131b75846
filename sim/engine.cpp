#include "sim/engine.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <simgrid/s4u.hpp>
#include <xbt/log.h>

#include "core/device_model.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/platform_check.hpp"
#include "core/progress.hpp"
#include "core/termination.hpp"
#include "core/timeline.hpp"
#include "sim/platform_xml.hpp"
#include "sim/engine_internal.hpp"
#include "sim/ring_network.hpp"

namespace sg = simgrid::s4u;

namespace pipegrid::sim {

const char* to_string(NetworkModel model) { return model == NetworkModel::Analytic ? "analytic" : "simgrid"; }

NetworkModel parse_network_model(const std::string& text) {
  if (text == "analytic") return NetworkModel::Analytic;
  if (text == "simgrid") return NetworkModel::SimGrid;
  throw InputError(fmt::format("--network: expected analytic or simgrid, found '{}'", text));
}

const char* to_string(TransferRule rule) { return rule == TransferRule::Share ? "share" : "fifo"; }

TransferRule parse_transfer_rule(const std::string& text) {
  if (text == "share") return TransferRule::Share;
  if (text == "fifo") return TransferRule::Fifo;
  throw InputError(fmt::format("--transfer-rule: expected share or fifo, found '{}'", printable(text)));
}

const char* to_string(CollectiveModel model) { return model == CollectiveModel::Flows ? "flows" : "rounds"; }

CollectiveModel parse_collective_model(const std::string& text) {
  if (text == "flows") return CollectiveModel::Flows;
  if (text == "rounds") return CollectiveModel::Rounds;
  throw InputError(fmt::format("--collective-model: expected flows or rounds, found '{}'", printable(text)));
}

namespace {

// An operation of t profile seconds on a host of speed factor f and SimGrid
// speed v is an execution of t / f x v flops: it takes t / f seconds alone and
// shares the host with concurrent executions as SimGrid does. SimGrid
// snaps remaining work below maxmin/precision to zero, so the engine sets that
// precision relative to the slowest host (kWorkPrecisionSeconds of its time).
constexpr double kWorkPrecisionSeconds = 1e-12;

// Seconds a stage's forward (profile_s = &LayerCost::forward_s, device_s =
// &DeviceLayerTimes::forward_s), backward or backward half takes on `host`: its layers with
// device times for the host's type (else its device model) take those; the rest of the stage's time
// is scaled by speed_factor (SimulationRequest::stages). Without device
// times: exactly stage_s / speed_factor.
// With `share`, each layer counts that share of its times (a recompute).
double stage_seconds_on(double stage_s, const std::vector<LayerCost>& layers, double LayerCost::*profile_s,
                        double DeviceLayerTimes::*device_s, const HostInfo& host,
                        const double LayerCost::*share = nullptr) {
  bool timed = false;
  double attributed = 0, others = 0, on_device = 0;
  for (const LayerCost& layer : layers) {
    const double part = share ? layer.*share : 1.0;
    attributed += part * (layer.*profile_s);
    // The host's device type first, then its device model (as layer_times_on).
    auto it = layer.device_times.end();
    for (const std::string* key : {&host.device_type, &host.device_model})
      if (it == layer.device_times.end() && !key->empty()) it = layer.device_times.find(*key);
    if (it == layer.device_times.end()) {
      others += part * (layer.*profile_s);
    } else {
      timed = true;
      on_device += part * (it->second.*device_s);
    }
  }
  if (!timed) return stage_s / host.speed_factor;
  // stage_s - attributed: time no layer accounts for (exactly 0 when stage_s
  // is the sum of the layers in order, as stage_costs() makes it).
  return std::max(0.0, others + (stage_s - attributed)) / host.speed_factor + on_device;
}

// Where each action of the Program is: a table over the box of (kind, stage,
// micro-batch, mini-batch) that the Program's actions span, when that box is
// at most a few times their number (schedules number their micro-batches
// and stages densely), else a hash map. An action listed twice: the last.
class ActionIndex {
 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  explicit ActionIndex(const std::vector<Action>& actions) {
    if (actions.empty()) return;
    lo_ = hi_ = {actions.front().stage, actions.front().micro_batch, actions.front().mini_batch};
    for (const Action& a : actions) {
      if (static_cast<std::size_t>(a.kind) >= kKinds) dense_ = false;
      const std::array<int, 3> fields{a.stage, a.micro_batch, a.mini_batch};
      for (std::size_t f = 0; f < 3; ++f) {
        lo_[f] = std::min(lo_[f], fields[f]);
        hi_[f] = std::max(hi_[f], fields[f]);
      }
    }
    std::size_t cells = kKinds;
    for (std::size_t f = 0; f < 3 && dense_; ++f) {
      span_[f] = static_cast<std::size_t>(static_cast<std::int64_t>(hi_[f]) - lo_[f] + 1);
      if (span_[f] > (kMaxCellsPerAction * actions.size() + 1024) / cells) dense_ = false;
      else cells *= span_[f];
    }
    if (dense_) table_.assign(cells, npos);
    else sparse_.reserve(actions.size());
    for (std::size_t i = 0; i < actions.size(); ++i) {
      if (dense_) table_[cell(actions[i])] = i;
      else sparse_[actions[i]] = i;
    }
  }

  /// The action's position, or npos when the Program does not schedule it.
  std::size_t find(const Action& a) const {
    if (!dense_) {
      const auto it = sparse_.find(a);
      return it == sparse_.end() ? npos : it->second;
    }
    const std::array<int, 3> fields{a.stage, a.micro_batch, a.mini_batch};
    for (std::size_t f = 0; f < 3; ++f)
      if (fields[f] < lo_[f] || fields[f] > hi_[f]) return npos;
    if (static_cast<std::size_t>(a.kind) >= kKinds) return npos;
    return table_[cell(a)];
  }

 private:
  static constexpr std::size_t kKinds = 5, kMaxCellsPerAction = 8;
  struct Hash {
    std::size_t operator()(const Action& a) const {
      std::uint64_t h = static_cast<std::uint64_t>(a.kind);
      for (const int field : {a.stage, a.micro_batch, a.mini_batch})
        h = (h ^ static_cast<std::uint32_t>(field)) * 0x9E3779B97F4A7C15ull;
      return static_cast<std::size_t>(h ^ (h >> 29));
    }
  };
  std::size_t cell(const Action& a) const {
    return ((static_cast<std::size_t>(a.kind) * span_[2] + static_cast<std::size_t>(a.mini_batch - lo_[2])) * span_[0] +
            static_cast<std::size_t>(a.stage - lo_[0])) * span_[1] +
           static_cast<std::size_t>(a.micro_batch - lo_[1]);
  }
  bool dense_ = true;
  std::array<int, 3> lo_{}, hi_{};  ///< stage, micro-batch, mini-batch
  std::array<std::size_t, 3> span_{};
  std::vector<std::size_t> table_;
  std::unordered_map<Action, std::size_t, Hash> sparse_;
};

// Everything the engine tracks about one action of the Program.
struct ActionState {
  Action action;
  std::size_t device = 0, stream = 0;
  /// Position in its stream's overlapped pairs: 1 for the first action of a
  /// pair, 2 for the second, 0 alone.
  int overlap = 0;
  sg::Host* host = nullptr;
  bool async = false;       ///< results stream out while computing (cut-through)
  double work = 0;          ///< in kWorkPerSecond units
  // The message carrying this action's result to its consumer on another
  // host (activation for F, gradient for B); absent when local or none.
  sg::Host* message_to = nullptr;
  double message_bytes = 0;
  /// Released once each action that waits for it has recorded it (its
  /// `message_readers`), so that finished communications do not pile up.
  sg::CommPtr message;
  std::size_t message_readers = 0;
  /// TransferRule::Fifo: the message's channel (Simulation::channels_) and
  /// when it became ready. `arrived`: whether the message has arrived (and,
  /// from an asynchronous producer, the producer has ended), set by the
  /// channel under Fifo and by the sender under blocking transfers (Share);
  /// unused otherwise.
  std::size_t channel = 0;
  double ready_at = 0;
  bool arrived = false;
  bool ended = false;
  double start = 0, end = 0;
  /// Signalled when the action ends; created when a first actor waits. (Not
  /// actor suspension: a suspended actor's communications stall with it.)
  sg::ConditionVariablePtr ended_signal;
  /// Work of the backward split by layer in reverse order, when a per-layer
  /// all-reduce starts each layer's reduction as soon as its part has run.
  std::vector<double> segment_work;
  std::size_t segments_done = 0;
  /// A forward whose parameters arrive bucket by bucket (overlapped
  /// all-gathers): its work by bucket in forward order, segment k running
  /// once participant `gate_participant` of all-reduce `gate_all_reduce` has
  /// finished k + 1 all-gathers.
  std::vector<double> gated_work;
  std::size_t gate_all_reduce = 0, gate_participant = 0;
  /// Its tensor-parallel collectives (SimulationRequest::tensor_parallel_members):
  /// the group (index in Simulation::groups_; -1: none), the summed ring
  /// steps and the bytes each member sends to the next.
  std::int32_t group = -1;
  int group_steps = 0;
  int group_collectives = 0;  ///< how many collectives: each pays the ring's NCCL latency once
  double group_flow_bytes = 0;
  /// Its all-to-alls (SimulationRequest::expert_parallel_ranks): the
  /// leader's ranks (index in Simulation::expert_ranks_; -1: none), how many
  /// all-to-alls and the bytes each delivers summed.
  std::int32_t experts = -1;
  int all_to_alls = 0;
  double all_to_all_bytes = 0;
  /// The optimizer step the device runs right after this action (a weight
  /// update of a device without all-reduces), in work units; absent: none.
  std::optional<double> step_work;
  bool step_ended = false;
  struct Need {
    /// Step: the end of the optimizer step that follows `index`.
    /// Arrival: the producer's message has arrived (a recompute that
    /// waits for its backward's gradient; the backward records it).
    /// AllReduce: the participant is done with gradient synchronisation
    /// `index`; Reduced: its gradients are reduced and its step has ended.
    /// Tied: the participant is done with tied-embedding all-reduce `index`
    /// of a run without data-parallel synchronisation (its step included).
    enum class What { End, Message, Arrival, AllReduce, Reduced, Step, Tied } what;
    std::size_t index;            ///< producer action, all-reduce or tied all-reduce
    std::size_t participant = 0;  ///< for AllReduce and Tied: whose end to wait for
  };
  std::vector<Need> needs;
};

// The backward after which a micro-batch's weight gradients are complete:
// B, or W when the backward is split.
bool is_final_backward(ActionKind kind) { return kind == ActionKind::Backward || kind == ActionKind::BackwardWeight; }

using internal::CollectiveKind;
using internal::link_nccl;
using internal::RingNetwork;
using RingProgress = RingNetwork::Progress;

// One gradient synchronisation of the Program (an AllReduce: all-reduces,
// or reduce-scatters and all-gathers under the distributed optimizer) and
// its progress.
struct AllReduceState {
  const AllReduce* spec = nullptr;
  std::vector<std::size_t> ready;  ///< ready action per participant, ring order
  std::vector<sg::Host*> hosts;    ///< per participant
  struct Job {
    int label = -1;                ///< the records' micro-batch: -1 the whole stage, else the layer or bucket
    double bytes = 0;              ///< gradient bytes reduced
    std::size_t after_segments = 0;  ///< segments of the ready backward that must have run (0: its end)
  };
  std::vector<Job> jobs;
  /// Per collective the participants run (in the order each runs them):
  /// rounds[o][p]: rounds of collective o whose transfer from participant p
  /// has arrived (CollectiveModel::Rounds); joined[o] and left[o]: the
  /// participants that have joined it and that are done with it (Flows).
  std::vector<std::vector<int>> rounds;
  std::vector<std::size_t> joined, left;
  std::vector<bool> stepped;  ///< per participant: its optimizer step (if any) has ended
  std::vector<std::size_t> gathered;  ///< per participant: all-gathers done
  /// Per participant: its tied-embedding all-reduce (Simulation::tied_) and
  /// its place in it (0 the first stage's device, 1 the last's); absent: none.
  std::vector<std::optional<std::pair<std::size_t, std::size_t>>> tied;
  std::vector<bool> ended;    ///< per participant (after its optimizer step and all-gathers)
  /// Per participant: the optimizer step it runs once its gradients are
  /// reduced, in work units; absent when its host declares no step.
  std::vector<std::optional<double>> step_work;
  /// The ring's NCCL values (Simulation::ring_nccl), once known.
  std::optional<LinkNccl> nccl;
  sg::ConditionVariablePtr signal = sg::ConditionVariable::create();
};

// A timeline record as the engine keeps it and hands it to the parent
// (records hold no strings until the parent builds the Timeline): hosts as
// indices into Simulation::hosts_ (the display order), the action as its
// letter or one of the transfer codes below.
struct PackedRecord {
  double start_s = 0, end_s = 0, bytes = 0;
  std::int32_t host = 0, stream = 0, stage = 0, micro_batch = 0, mini_batch = 0;
  std::int32_t peer = -1;  ///< -1: none
  std::uint8_t action = 0;
};
static_assert(std::is_trivially_copyable_v<PackedRecord>, "records cross to the parent as bytes");
constexpr std::uint8_t kSendForward = 1, kSendBackward = 2, kAllReduce = 3, kReduceScatter = 4, kAllGather = 5;
// The micro-batch of a tied-embedding all-reduce's records.
constexpr int kTiedEmbeddingLabel = -2;

std::string packed_action_name(std::uint8_t action) {
  switch (action) {
    case kSendForward: return "SEND_F";
    case kSendBackward: return "SEND_B";
    case kAllReduce: return "ALLREDUCE";
    case kReduceScatter: return "REDUCE_SCATTER";
    case kAllGather: return "ALLGATHER";
    default: return std::string(1, static_cast<char>(action));
  }
}

class Simulation {
 public:
  Simulation(const SimulationRequest& request, const PlatformSummary& platform)
      : request_(request), rings_(request.platform_file, request.collective_model) {
    const Program& program = request.program;
    const std::vector<LayerCost> no_layers;
    std::size_t total_actions = 0;
    for (const DeviceProgram& device : program.devices)
      for (const Stream& stream : device.streams) total_actions += stream.actions.size();
    actions_.reserve(total_actions);
    std::map<std::string, std::size_t> device_of_host;
    for (std::size_t d = 0; d < program.devices.size(); ++d) {
      const DeviceProgram& device = program.devices[d];
      std::string host_name;
      for (const int stage : device.stages) {
        if (stage < 0 || stage >= static_cast<int>(request.hosts.size()) ||
            device.replica >= static_cast<int>(request.hosts[stage].size()))
          throw InputError(fmt::format("partition: no host for stage {} replica {}", stage, device.replica));
        const std::string& stage_host = request.hosts[stage][device.replica];
        if (!host_name.empty() && stage_host != host_name)
          throw InputError(fmt::format("partition: device {} holds stages {} and {}, which the partition places on hosts "
                                       "'{}' and '{}': the stages of one device need one host",
                                       d, device.stages.front(), stage, printable(host_name), printable(stage_host)));
        host_name = stage_host;
      }
      if (host_name.empty()) throw InputError(fmt::format("program: device {} holds no stage", d));
      if (const auto [it, added] = device_of_host.emplace(host_name, d); !added)
        throw InputError(fmt::format("partition: host '{}' runs devices {} and {} of the program (stages {} and {}); a host "
                                     "runs one device: the schedule's stage map and the partition's disagree",
                                     printable(host_name), it->second, d, program.devices[it->second].stages.front(),
                                     device.stages.front()));
      sg::Host* host = sg::Host::by_name_or_null(host_name);
      if (host == nullptr) throw InputError(fmt::format("{}: no host named '{}' (partition)", request.platform_file, host_name));
      const HostInfo& info = platform.host(host_name);
      if (host_index_.emplace(host, static_cast<std::int32_t>(hosts_.size())).second) hosts_.push_back(host_name);
      for (std::size_t s = 0; s < device.streams.size(); ++s) {
        const Stream& stream = device.streams[s];
        for (std::size_t k = 0; k < stream.actions.size(); ++k) {
          const Action& action = stream.actions[k];
          if (action.stage >= static_cast<int>(request.stages.size()))
            throw InputError(fmt::format("program: action {} names a stage beyond the {} stages", pipegrid::to_string(action), request.stages.size()));
          const StageCost& cost = request.stages[action.stage];
          const std::vector<LayerCost>& layers = action.stage < static_cast<int>(request.stage_layers.size())
                                                     ? request.stage_layers[action.stage]
                                                     : no_layers;
          ActionState& state = actions_.emplace_back();
          state.action = action;
          state.device = d;
          state.stream = s;
          state.host = host;
          state.async = info.execution == Execution::Async;
          if (std::binary_search(stream.overlapped.begin(), stream.overlapped.end(), k))
            state.overlap = 1;
          else if (k > 0 && std::binary_search(stream.overlapped.begin(), stream.overlapped.end(), k - 1))
            state.overlap = 2;
          double seconds = 0;
          switch (action.kind) {
            case ActionKind::Recompute:
              if (cost.recompute_s) {
                seconds = stage_seconds_on(*cost.recompute_s, layers, &LayerCost::forward_s, &DeviceLayerTimes::forward_s,
                                           info, &LayerCost::recompute_share);
                break;
              }
              [[fallthrough]];
            case ActionKind::Forward:
              seconds = stage_seconds_on(cost.forward_s, layers, &LayerCost::forward_s, &DeviceLayerTimes::forward_s, info);
              break;
            case ActionKind::Backward:
              seconds = stage_seconds_on(cost.backward_s, layers, &LayerCost::backward_s, &DeviceLayerTimes::backward_s, info);
              break;
            case ActionKind::BackwardInput:
              seconds = stage_seconds_on(cost.backward_input_s, layers, &LayerCost::backward_input_s,
                                         &DeviceLayerTimes::backward_input_s, info);
              break;
            case ActionKind::BackwardWeight:
              seconds = stage_seconds_on(cost.backward_weight_s, layers, &LayerCost::backward_weight_s,
                                         &DeviceLayerTimes::backward_weight_s, info);
              break;
          }
          state.work = seconds * host->get_speed();
          if (info.action_overhead_s > 0) state.work += info.action_overhead_s * host->get_speed();
          place_group_collectives(state, host_name, cost, layers);
          place_all_to_alls(state, host_name, cost, layers);
        }
      }
    }
    std::vector<Action> scheduled;
    scheduled.reserve(actions_.size());
    for (const ActionState& state : actions_) scheduled.push_back(state.action);
    const ActionIndex index(scheduled);
    auto find = [&](const Action& action) -> std::size_t {
      const std::size_t at = index.find(action);
      if (at == ActionIndex::npos) throw InputError(fmt::format("program: {} is needed but not scheduled", pipegrid::to_string(action)));
      return at;
    };
    const int last_stage = program.num_stages - 1;
    for (ActionState& state : actions_) {
      const Action& a = state.action;
      auto data_input = [&](const Action& producer_action, double bytes) {
        const std::size_t producer = find(producer_action);
        ActionState& source = actions_[producer];
        const bool remote = source.host != state.host;
        if (remote) {
          source.message_to = state.host;
          source.message_bytes = bytes;
        }
        state.needs.push_back({remote ? ActionState::Need::What::Message : ActionState::Need::What::End, producer});
        if (remote) ++source.message_readers;
      };
      switch (a.kind) {
        case ActionKind::Forward:
          if (a.stage > 0) data_input({ActionKind::Forward, a.stage - 1, a.micro_batch, a.mini_batch}, request.stages[a.stage].input_bytes);
          break;
        case ActionKind::Recompute:
          state.needs.push_back({ActionState::Need::What::End, find({ActionKind::Forward, a.stage, a.micro_batch, a.mini_batch})});
          if (request.recompute_waits_for_gradient && a.stage < last_stage) {
            // The gradient its backward consumes (that backward records the transfer).
            const Action whole{ActionKind::Backward, a.stage + 1, a.micro_batch, a.mini_batch};
            const std::size_t producer =
                find(index.find(whole) != ActionIndex::npos ? whole
                                                            : Action{ActionKind::BackwardInput, a.stage + 1, a.micro_batch, a.mini_batch});
            ActionState& source = actions_[producer];
            const bool remote = source.host != state.host;
            state.needs.push_back({remote ? ActionState::Need::What::Arrival : ActionState::Need::What::End, producer});
            if (remote) ++source.message_readers;
          }
          break;
        case ActionKind::Backward:
        case ActionKind::BackwardInput:
          state.needs.push_back({ActionState::Need::What::End, find({ActionKind::Forward, a.stage, a.micro_batch, a.mini_batch})});
          if (const std::size_t r = index.find({ActionKind::Recompute, a.stage, a.micro_batch, a.mini_batch}); r != ActionIndex::npos)
            state.needs.push_back({ActionState::Need::What::End, r});
          if (a.stage < last_stage) {
            // The gradient of the next stage: its B, or its I when split.
            const Action whole{ActionKind::Backward, a.stage + 1, a.micro_batch, a.mini_batch};
            data_input(index.find(whole) != ActionIndex::npos ? whole : Action{ActionKind::BackwardInput, a.stage + 1, a.micro_batch, a.mini_batch},
                       request.stages[a.stage].output_bytes);
          }
          break;
        case ActionKind::BackwardWeight:
          state.needs.push_back({ActionState::Need::What::End, find({ActionKind::BackwardInput, a.stage, a.micro_batch, a.mini_batch})});
          break;
      }
    }
    for (const Dependency& dependency : program.extra_dependencies)
      actions_[find(dependency.after)].needs.push_back({ActionState::Need::What::End, find(dependency.before)});
    if (request.transfer_rule == TransferRule::Fifo) {
      std::map<std::pair<sg::Host*, sg::Host*>, std::size_t> channel_of;
      for (ActionState& state : actions_) {
        if (state.message_to == nullptr) continue;
        const auto [it, added] = channel_of.emplace(std::make_pair(state.host, state.message_to), channels_.size());
        if (added) {
          channels_.emplace_back();
          channels_.back().from = state.host;
          channels_.back().to = state.message_to;
        }
        state.channel = it->second;
        ++channels_[it->second].messages;
      }
    }

    // (device, stage, mini-batch) -> the device's first forward of them, in program order.
    std::map<std::tuple<std::size_t, int, int>, std::size_t> first_forward;
    for (const AllReduce& spec : program.all_reduces) {
      AllReduceState all_reduce;
      all_reduce.spec = &spec;
      for (const Action& ready : spec.ready) {
        all_reduce.ready.push_back(find(ready));
        all_reduce.hosts.push_back(actions_[all_reduce.ready.back()].host);
      }
      const std::size_t r = all_reduce.ready.size();
      if (spec.stage < 0 || spec.stage >= static_cast<int>(request.stages.size()))
        throw InputError(fmt::format("program: allreduce names stage {} beyond the {} stages", spec.stage, request.stages.size()));
      std::vector<LayerCost> layers;
      if (spec.stage < static_cast<int>(request.stage_layers.size())) layers = request.stage_layers[spec.stage];
      if (layers.empty()) layers = {{request.stages[spec.stage].backward_s, request.stages[spec.stage].weight_bytes}};
      // Reverse layer order: the ready backward's segment k is layer L-1-k.
      if (spec.per_layer) {
        for (std::size_t k = 0; k < layers.size(); ++k) {
          const LayerCost& layer = layers[layers.size() - 1 - k];
          if (layer.weight_bytes > 0)
            all_reduce.jobs.push_back({static_cast<int>(layers.size() - 1 - k), layer.weight_bytes, k + 1});
        }
      } else if (spec.bucketed && request.bucket_bytes > 0) {
        double bucket = 0;
        std::size_t last = 0;
        for (std::size_t k = 0; k < layers.size(); ++k) {
          const double bytes = layers[layers.size() - 1 - k].weight_bytes;
          if (!(bytes > 0)) continue;
          bucket += bytes;
          last = k;
          if (bucket >= request.bucket_bytes) {
            all_reduce.jobs.push_back({static_cast<int>(all_reduce.jobs.size()), bucket, k + 1});
            bucket = 0;
          }
        }
        if (bucket > 0) all_reduce.jobs.push_back({static_cast<int>(all_reduce.jobs.size()), bucket, last + 1});
        if (all_reduce.jobs.size() < 2) all_reduce.jobs.clear();  // one bucket: the whole stage, as unbucketed
      }
      if (!all_reduce.jobs.empty()) {
        for (std::size_t ready : all_reduce.ready) {
          ActionState& backward = actions_[ready];
          const HostInfo& info = platform.host(backward.host->get_name());
          if (!backward.segment_work.empty())
            throw InputError(fmt::format("program: {} starts two per-layer or bucketed all-reduces", pipegrid::to_string(backward.action)));
          const bool weight_half = backward.action.kind == ActionKind::BackwardWeight;
          for (std::size_t k = 0; k < layers.size(); ++k) {
            const LayerCost& layer = layers[layers.size() - 1 - k];
            backward.segment_work.push_back(
                (weight_half ? stage_seconds_on(layer.backward_weight_s, {layer}, &LayerCost::backward_weight_s,
                                                &DeviceLayerTimes::backward_weight_s, info)
                             : stage_seconds_on(layer.backward_s, {layer}, &LayerCost::backward_s,
                                                &DeviceLayerTimes::backward_s, info)) *
                backward.host->get_speed());
          }
          // The action's overhead comes before its first layer.
          if (info.action_overhead_s > 0 && !backward.segment_work.empty())
            backward.segment_work.front() += info.action_overhead_s * backward.host->get_speed();
        }
      } else {
        all_reduce.jobs.push_back({-1, request.stages[spec.stage].weight_bytes, 0});
      }
      const std::size_t collectives = all_reduce.jobs.size() * (request.distributed_optimizer ? 2 : 1);
      all_reduce.rounds.assign(collectives, std::vector<int>(r, 0));
      all_reduce.joined.assign(collectives, 0);
      all_reduce.left.assign(collectives, 0);
      all_reduce.stepped.assign(r, false);
      all_reduce.gathered.assign(r, 0);
      all_reduce.ended.assign(r, false);
      // Under the distributed optimizer each participant updates its 1/r shard.
      const double step_bytes = request.stages[spec.stage].weight_bytes / (request.distributed_optimizer ? static_cast<double>(r) : 1.0);
      for (std::size_t p = 0; p < r; ++p) {
        const HostInfo& info = platform.host(all_reduce.hosts[p]->get_name());
        all_reduce.step_work.push_back(info.has_optimizer_step()
                                           ? std::optional<double>(info.optimizer_step_s(step_bytes) * all_reduce.hosts[p]->get_speed())
                                           : std::nullopt);
      }
      const std::size_t c = all_reduces_.size();
      for (std::size_t p = 0; p < r; ++p) device_all_reduces_[actions_[all_reduce.ready[p]].device].push_back({c, p});
      // With the parameters' all-gathers overlapped, what the synchronisation
      // releases waits for the optimizer step; the stage's next forward on
      // each participant waits for that participant's all-gathers.
      const bool gather_overlapped = request.distributed_optimizer && request.overlap_param_gather;
      const ActionState::Need::What release_on = gather_overlapped ? ActionState::Need::What::Reduced : ActionState::Need::What::AllReduce;
      for (const Action& released : spec.release) {
        ActionState& state = actions_[find(released)];
        bool own = false;
        for (std::size_t p = 0; p < r; ++p)
          if (actions_[all_reduce.ready[p]].device == state.device) {
            state.needs.push_back({release_on, c, p});
            own = true;
          }
        if (!own)
          for (std::size_t p = 0; p < r; ++p) state.needs.push_back({release_on, c, p});
      }
      if (gather_overlapped) {
        if (first_forward.empty())
          for (std::size_t i = 0; i < actions_.size(); ++i)
            if (actions_[i].action.kind == ActionKind::Forward)
              first_forward.emplace(std::tuple{actions_[i].device, actions_[i].action.stage, actions_[i].action.mini_batch}, i);
        for (std::size_t p = 0; p < r; ++p) {
          const ActionState& ready = actions_[all_reduce.ready[p]];
          const auto next = first_forward.find(std::tuple{ready.device, spec.stage, ready.action.mini_batch + 1});
          if (next == first_forward.end()) continue;
          ActionState& forward = actions_[next->second];
          if (all_reduce.jobs.size() < 2) {
            forward.needs.push_back({ActionState::Need::What::AllReduce, c, p});
            continue;
          }
          if (!forward.gated_work.empty() || forward.overlap != 0)
            throw InputError(fmt::format("program: {} waits for two bucketed all-gathers, or runs overlapped",
                                         pipegrid::to_string(forward.action)));
          // Bucket j holds the layers at reverse positions [after_(j-1), after_j)
          // (the last bucket also the first layers without parameters); its
          // segment of the forward runs once its all-gather (the (J-j)-th) is done.
          const HostInfo& info = platform.host(forward.host->get_name());
          const std::size_t buckets = all_reduce.jobs.size();
          for (std::size_t k = 0; k < buckets; ++k) {
            const std::size_t j = buckets - 1 - k;
            const std::size_t from = j == 0 ? 0 : all_reduce.jobs[j - 1].after_segments;
            const std::size_t to = j + 1 == buckets ? layers.size() : all_reduce.jobs[j].after_segments;
            double work = 0;
            for (std::size_t position = from; position < to; ++position) {
              const LayerCost& layer = layers[layers.size() - 1 - position];
              work += stage_seconds_on(layer.forward_s, {layer}, &LayerCost::forward_s, &DeviceLayerTimes::forward_s, info) *
                      forward.host->get_speed();
            }
            forward.gated_work.push_back(work);
          }
          if (info.action_overhead_s > 0) forward.gated_work.front() += info.action_overhead_s * forward.host->get_speed();
          forward.gate_all_reduce = c;
          forward.gate_participant = p;
        }
      }
      all_reduces_.push_back(std::move(all_reduce));
    }
    pair_tied_embeddings();
    place_optimizer_steps(platform);
    place_lone_tied_syncs();
  }

  /** Creates one actor per device stream; call before Engine::run(). */
  void start() {
    records_.reserve(2 * actions_.size());
    const Program& program = request_.program;
    std::size_t next = 0;
    for (std::size_t d = 0; d < program.devices.size(); ++d)
      for (std::size_t s = 0; s < program.devices[d].streams.size(); ++s) {
        const std::size_t first = next, count = program.devices[d].streams[s].actions.size();
        next += count;
        if (count == 0) continue;
        sg::Host* host = actions_[first].host;
        sg::Actor::create(fmt::format("device{}-stream{}", d, s), host, [this, first, count] { run_stream(first, count); });
      }
    for (std::size_t c = 0; c < channels_.size(); ++c)
      sg::Actor::create(fmt::format("channel{}", c), channels_[c].from, [this, c] { run_channel(c); });
    for (const auto& [device, parts] : device_all_reduces_) {
      sg::Host* host = all_reduces_[parts.front().first].hosts[parts.front().second];
      sg::Actor::create(fmt::format("device{}-allreduce", device), host, [this, device = device] { run_all_reduces(device); });
    }
    for (const auto& [device, parts] : device_tied_) {
      sg::Host* host = tied_[parts.front().first].hosts[parts.front().second];
      sg::Actor::create(fmt::format("device{}-tied", device), host, [this, device = device] { run_lone_tied_syncs(device); });
    }
  }

  struct NeededRoute {
    sg::Host* from = nullptr;
    sg::Host* to = nullptr;
    std::string reason;  ///< who sends what along it
  };

  /** Every pair of hosts the run sends data between, in Program order, once
   *  each with the first reason found: a stage to the next (activations) and
   *  back (gradients), and each replica to the next in its all-reduce ring
   *  (when the ring moves data). */
  std::vector<NeededRoute> needed_routes() const {
    std::vector<NeededRoute> needed;
    std::set<std::pair<sg::Host*, sg::Host*>> seen;
    // `reason` formats the reason, only for a pair not yet seen.
    auto add = [&](sg::Host* from, sg::Host* to, auto reason) {
      if (from != to && seen.emplace(from, to).second) needed.push_back({from, to, reason()});
    };
    for (const ActionState& state : actions_) {
      if (state.message_to == nullptr) continue;
      const bool forward = state.action.kind == ActionKind::Forward;  // else B or I: a gradient
      add(state.host, state.message_to, [&] { return fmt::format("stage {} on '{}' sends {} to stage {} on '{}'", state.action.stage, printable(state.host->get_name()),
                      forward ? "activations" : "gradients", state.action.stage + (forward ? 1 : -1),
                      printable(state.message_to->get_name())); });
    }
    for (const auto& entry : group_of_host_) {
      const auto& leader = entry.first;
      const std::vector<sg::Host*>& members = groups_[static_cast<std::size_t>(entry.second)];
      for (std::size_t m = 0; m < members.size(); ++m)
        add(members[m], members[(m + 1) % members.size()], [&] {
          return fmt::format("the tensor-parallel ring of '{}' sends from '{}' to '{}'", printable(leader),
                             printable(members[m]->get_name()), printable(members[(m + 1) % members.size()]->get_name()));
        });
    }
    for (const auto& entry : experts_of_host_)
      for (const ExpertRank& rank : expert_ranks_[static_cast<std::size_t>(entry.second)])
        for (sg::Host* peer : {rank.intra_peer, rank.inter_peer})
          if (peer != nullptr)
            add(rank.host, peer, [&] {
              return fmt::format("the expert-parallel all-to-all of '{}' sends from '{}' to '{}'", printable(entry.first),
                                 printable(rank.host->get_name()), printable(peer->get_name()));
            });
    for (const TiedSync& tied : tied_)
      for (std::size_t p = 0; p < 2; ++p)
        add(tied.hosts[p], tied.hosts[1 - p], [&] { return fmt::format("the tied embedding's all-reduce sends from '{}' to '{}'",
                                                                     printable(tied.hosts[p]->get_name()), printable(tied.hosts[1 - p]->get_name())); });
    for (const AllReduceState& all_reduce : all_reduces_) {
      const std::size_t r = all_reduce.hosts.size();
      if (all_reduce.jobs.empty() || r < 2) continue;
      for (std::size_t p = 0; p < r; ++p)
        add(all_reduce.hosts[p], all_reduce.hosts[(p + 1) % r], [&] { return fmt::format("the all-reduce ring of stage {} ({} replicas) sends from '{}' to '{}'", all_reduce.spec->stage, r,
                        printable(all_reduce.hosts[p]->get_name()), printable(all_reduce.hosts[(p + 1) % r]->get_name())); });
    }
    return needed;
  }

  /// SimulationResult::collective_communications.
  std::size_t collective_communications() const { return rings_.collective_communications(); }
  /// SimulationResult's all-to-all sums.
  nlohmann::json all_to_all_sums() const {
    return {{"pair_span_s", pair_span_s_}, {"pair_serial_s", pair_serial_s_}, {"all_to_all_s", all_to_all_s_},
            {"all_to_all_exposed_s", all_to_all_exposed_s_}};
  }

  /// Timeline records so far (progress).
  std::size_t records_done() const { return records_.size(); }

  /** The hosts of the timeline in display order (the order the Program's
   *  devices first name them). */
  const std::vector<std::string>& hosts() const { return hosts_; }

  /** The records sorted by (start, host in display order, stream, end),
   *  ties in the order they happened; call after Engine::run(). */
  std::vector<PackedRecord> sorted_records() {
    std::stable_sort(records_.begin(), records_.end(), [](const PackedRecord& x, const PackedRecord& y) {
      return std::tie(x.start_s, x.host, x.stream, x.end_s) < std::tie(y.start_s, y.host, y.stream, y.end_s);
    });
    return std::move(records_);
  }

 private:
  // Optimizer steps of the devices without all-reduces whose host declares
  // one: after the device's last backward of each mini-batch
  // (update_interval 0) or after every update_interval-th backward in program
  // order. With update_interval 0, the device's other streams do not start
  // an action of a later mini-batch before the step has ended.
  // SimulationRequest::tied_embedding: pairs replica q of the first stage's
  // all-reduce of each round with replica q of the last stage's.
  void pair_tied_embeddings() {
    for (AllReduceState& all_reduce : all_reduces_) all_reduce.tied.assign(all_reduce.hosts.size(), std::nullopt);
    if (!request_.tied_embedding) return;
    const auto& tied = *request_.tied_embedding;
    std::map<int, std::size_t> first_of_round, last_of_round;
    for (std::size_t c = 0; c < all_reduces_.size(); ++c) {
      if (all_reduces_[c].spec->stage == tied.first_stage) first_of_round[all_reduces_[c].spec->round] = c;
      if (all_reduces_[c].spec->stage == tied.last_stage) last_of_round[all_reduces_[c].spec->round] = c;
    }
    for (const auto& [round, c_first] : first_of_round) {
      const auto c_last = last_of_round.find(round);
      if (c_last == last_of_round.end()) continue;
      AllReduceState& first = all_reduces_[c_first];
      AllReduceState& last = all_reduces_[c_last->second];
      if (first.hosts.size() != last.hosts.size())
        throw InputError(fmt::format("program: the tied embedding's stages {} and {} have {} and {} replicas in round {}",
                                     tied.first_stage, tied.last_stage, first.hosts.size(), last.hosts.size(), round));
      for (std::size_t q = 0; q < first.hosts.size(); ++q) {
        TiedSync& sync = tied_.emplace_back();
        sync.hosts = {first.hosts[q], last.hosts[q]};
        first.tied[q] = std::pair{tied_.size() - 1, std::size_t{0}};
        last.tied[q] = std::pair{tied_.size() - 1, std::size_t{1}};
      }
    }
  }

  // SimulationRequest::tensor_parallel_members: the group of `host_name`
  // (created at its first action) and the ring steps and flow bytes of the
  // collectives `state` runs after its compute.
  void place_group_collectives(ActionState& state, const std::string& host_name, const StageCost& cost,
                               const std::vector<LayerCost>& layers) {
    const auto members = request_.tensor_parallel_members.find(host_name);
    if (members == request_.tensor_parallel_members.end() || members->second.size() < 2) return;
    const auto [group, added] = group_of_host_.emplace(host_name, static_cast<std::int32_t>(groups_.size()));
    if (added) {
      if (members->second.front() != host_name)
        throw InputError(fmt::format("tensor parallelism: the group of '{}' lists '{}' first; expected the group's first "
                                     "host (its leader)",
                                     printable(host_name), printable(members->second.front())));
      std::vector<sg::Host*>& hosts = groups_.emplace_back();
      group_nccl_.emplace_back();
      for (const std::string& name : members->second) {
        sg::Host* member = sg::Host::by_name_or_null(name);
        if (member == nullptr)
          throw InputError(fmt::format("{}: no host named '{}' (a member of the tensor-parallel group of '{}')",
                                       printable(request_.platform_file), printable(name), printable(host_name)));
        if (std::find(hosts.begin(), hosts.end(), member) != hosts.end())
          throw InputError(fmt::format("tensor parallelism: the group of '{}' lists '{}' twice", printable(host_name),
                                       printable(name)));
        hosts.push_back(member);
      }
    }
    const int t = static_cast<int>(groups_[static_cast<std::size_t>(group->second)].size());
    int steps = 0, collectives = 0;
    double bytes = 0;
    const bool partial_recompute = state.action.kind == ActionKind::Recompute && cost.recompute_s.has_value();
    for (const LayerCost& layer : layers) {
      const std::vector<RingCollective>* pass = nullptr;
      switch (state.action.kind) {
        case ActionKind::Forward: pass = &layer.tensor_parallel.forward; break;
        case ActionKind::Recompute:
          if (!partial_recompute || layer.recompute_share >= 1) pass = &layer.tensor_parallel.forward;
          break;
        case ActionKind::Backward:
        case ActionKind::BackwardInput: pass = &layer.tensor_parallel.backward_input; break;
        case ActionKind::BackwardWeight: break;
      }
      if (pass == nullptr) continue;
      for (const RingCollective& c : *pass) {
        const int k = c.count * ring_steps(c.kind, t);
        steps += k;
        if (k > 0) collectives += c.count;
        bytes += k * (c.bytes / t);
      }
    }
    if (steps == 0) return;
    state.group = group->second;
    state.group_steps = steps;
    state.group_collectives = collectives;
    state.group_flow_bytes = bytes;
  }

  // SimulationRequest::expert_parallel_ranks: the ranks of `host_name`
  // (resolved at its first action) and the all-to-alls `state` runs after
  // its compute.
  void place_all_to_alls(ActionState& state, const std::string& host_name, const StageCost& cost,
                         const std::vector<LayerCost>& layers) {
    const auto ranks = request_.expert_parallel_ranks.find(host_name);
    if (ranks == request_.expert_parallel_ranks.end() || ranks->second.empty()) return;
    int count = 0;
    double bytes = 0;
    const bool partial_recompute = state.action.kind == ActionKind::Recompute && cost.recompute_s.has_value();
    for (const LayerCost& layer : layers) {
      if (layer.moe_dispatch_bytes <= 0) continue;
      bool runs = false;
      switch (state.action.kind) {
        case ActionKind::Forward:
        case ActionKind::Backward:
        case ActionKind::BackwardInput: runs = true; break;
        case ActionKind::Recompute: runs = !partial_recompute || layer.recompute_share >= 1; break;
        case ActionKind::BackwardWeight: break;
      }
      if (!runs) continue;
      count += 2;  // the dispatch and the combine (or their gradients)
      bytes += 2 * layer.moe_dispatch_bytes;
    }
    if (count == 0) return;
    const auto [index, added] = experts_of_host_.emplace(host_name, static_cast<std::int32_t>(expert_ranks_.size()));
    if (added) expert_ranks_.push_back(resolve_expert_ranks(host_name, ranks->second));
    state.experts = index->second;
    state.all_to_alls = count;
    state.all_to_all_bytes = bytes;
  }

  struct ExpertRank {
    sg::Host* host = nullptr;
    /// The flows of its all-to-alls: to the next group rank in its server,
    /// and to the first group rank after it in another server, with the
    /// shares of the delivered bytes each carries (none: nullptr, 0).
    sg::Host* intra_peer = nullptr;
    sg::Host* inter_peer = nullptr;
    double intra_share = 0, inter_share = 0;
  };

  std::vector<ExpertRank> resolve_expert_ranks(const std::string& leader,
                                               const std::vector<SimulationRequest::ExpertParallelRank>& ranks) {
    const auto host_named = [&](const std::string& name) {
      sg::Host* host = sg::Host::by_name_or_null(name);
      if (host == nullptr)
        throw InputError(fmt::format("{}: no host named '{}' (an expert-parallel rank of '{}')",
                                     printable(request_.platform_file), printable(name), printable(leader)));
      return host;
    };
    std::vector<ExpertRank> resolved;
    for (const SimulationRequest::ExpertParallelRank& rank : ranks) {
      ExpertRank& out = resolved.emplace_back();
      out.host = host_named(rank.host);
      std::vector<sg::Host*> group;
      for (const std::string& name : rank.group) group.push_back(host_named(name));
      const auto self = std::find(group.begin(), group.end(), out.host);
      if (self == group.end())
        throw InputError(fmt::format("expert parallelism: the expert-parallel group of '{}' does not hold it",
                                     printable(rank.host)));
      const std::size_t ep = group.size(), i = static_cast<std::size_t>(self - group.begin());
      const sg::NetZone* zone = out.host->get_englobing_zone();
      std::size_t same = 0;
      for (std::size_t k = 1; k < ep; ++k) {
        sg::Host* peer = group[(i + k) % ep];
        if (peer->get_englobing_zone() != zone) continue;
        ++same;
        if (out.intra_peer == nullptr) out.intra_peer = peer;
      }
      // The inter-server flow goes to the first rank in another server from
      // (same + 1) ranks on: with the group's servers holding equal blocks
      // of it, the same offset in the next block, so that every rank
      // receives one such flow.
      for (std::size_t k = same + 1; k < same + ep && out.inter_peer == nullptr; ++k) {
        sg::Host* peer = group[(i + k) % ep];
        if (peer != out.host && peer->get_englobing_zone() != zone) out.inter_peer = peer;
      }
      out.intra_share = static_cast<double>(same) / static_cast<double>(ep);
      out.inter_share = static_cast<double>(ep - 1 - same) / static_cast<double>(ep);
    }
    return resolved;
  }

  /// The all-to-alls of `actions` (one action, or an overlapped pair on one
  /// host), their flows started now; done() waits for them.
  struct AllToAlls {
    std::vector<sg::CommPtr> flows;
    double latency_s = 0;  ///< paid after the last flow: each all-to-all's NCCL start latency, and its route latency beyond the one the flow carries
    double start_s = 0;
    bool any() const { return !flows.empty() || latency_s > 0; }
  };
  AllToAlls start_all_to_alls(std::initializer_list<const ActionState*> actions) {
    AllToAlls out;
    out.start_s = sg::Engine::get_clock();
    std::int32_t index = -1;
    int count = 0;
    double bytes = 0;
    for (const ActionState* state : actions) {
      if (state->experts < 0) continue;
      index = state->experts;
      count += state->all_to_alls;
      bytes += state->all_to_all_bytes;
    }
    if (index < 0 || count == 0) return out;
    // Every flow (and its route's latency probe) starts now; the routes'
    // latencies are read once all have started. A flow carries its route's
    // latency once: the count all-to-alls pay count NCCL start latencies and
    // count - 1 more route latencies after it.
    struct Route {
      sg::Host* from;
      sg::Host* to;
      sg::CommPtr probe;
      double nccl_latency_s;
    };
    std::vector<Route> routes;
    for (const ExpertRank& rank : expert_ranks_[static_cast<std::size_t>(index)])
      for (const auto& [peer, share] : {std::pair{rank.intra_peer, rank.intra_share}, std::pair{rank.inter_peer, rank.inter_share}}) {
        if (peer == nullptr || share <= 0) continue;
        const LinkNccl nccl = route_nccl(rank.host, peer);
        out.flows.push_back(rings_.start_collective_message(rank.host, peer, bytes * share / nccl.efficiency));
        routes.push_back({rank.host, peer, start_latency_probe(rank.host, peer), nccl.latency_s});
      }
    double latency = 0;
    for (const Route& route : routes)
      latency = std::max(latency, count * route.nccl_latency_s +
                                      (count - 1) * route_latency(route.from, route.to, route.probe));
    out.latency_s = latency;
    return out;
  }
  /// Waits for `a2a`'s flows and latencies and returns their end: the last
  /// flow's end plus the latencies, whenever the caller waits (an
  /// overlapped pair's compute may end after the flows).
  static double finish_all_to_alls(const AllToAlls& a2a) {
    double end = a2a.start_s;
    for (const sg::CommPtr& flow : a2a.flows) {
      flow->wait();
      end = std::max(end, flow->get_finish_time());
    }
    if (a2a.any()) end += a2a.latency_s;
    if (end > sg::Engine::get_clock()) sg::this_actor::sleep_until(end);
    return end;
  }
  /// A plain action's all-to-alls, after its compute: all exposed.
  void run_all_to_alls(const ActionState& state) {
    if (state.experts < 0) return;
    const AllToAlls a2a = start_all_to_alls({&state});
    finish_all_to_alls(a2a);
    const double span = sg::Engine::get_clock() - a2a.start_s;
    all_to_all_s_ += span;
    all_to_all_exposed_s_ += span;
  }

  // The ring collectives' network (sim/ring_network.hpp).
  LinkNccl route_nccl(sg::Host* from, sg::Host* to) { return rings_.route_nccl(from, to); }
  LinkNccl ring_nccl(const std::vector<sg::Host*>& hosts, std::optional<LinkNccl>& known) { return rings_.ring_nccl(hosts, known); }
  sg::CommPtr start_latency_probe(sg::Host* from, sg::Host* to) { return rings_.start_latency_probe(from, to); }
  double route_latency(sg::Host* from, sg::Host* to, const sg::CommPtr& probe) { return rings_.route_latency(from, to, probe); }
  std::vector<sg::CommPtr> start_ring_step(const std::vector<sg::Host*>& hosts, std::size_t p, double bytes) {
    return rings_.start_ring_step(hosts, p, bytes);
  }

  // The tensor-parallel collectives of `actions` (one action, or an
  // overlapped pair on one host) as one ring over their group's members:
  // one flow per member to the next, then the remaining latencies; returns
  // when the last member is done.
  void run_group_collectives(std::initializer_list<const ActionState*> actions) {
    std::int32_t group = -1;
    int steps = 0, collectives = 0;
    double bytes = 0;
    for (const ActionState* state : actions) {
      if (state->group < 0) continue;
      group = state->group;
      steps += state->group_steps;
      collectives += state->group_collectives;
      bytes += state->group_flow_bytes;
    }
    if (group < 0 || steps == 0) return;
    const std::vector<sg::Host*>& members = groups_[static_cast<std::size_t>(group)];
    const std::size_t t = members.size();
    // NCCL: each collective's start latency, then the flows' bytes / efficiency.
    const LinkNccl nccl = ring_nccl(members, group_nccl_[static_cast<std::size_t>(group)]);
    if (nccl.latency_s > 0) sg::this_actor::sleep_for(collectives * nccl.latency_s);
    bytes /= nccl.efficiency;
    // Per member, its step's flows: one inside a server, one per rail into
    // another (crossing_rails).
    std::vector<std::vector<sg::CommPtr>> flows(t);
    std::vector<sg::CommPtr> probes;
    for (std::size_t m = 0; m < t; ++m) flows[m] = start_ring_step(members, m, bytes);
    for (std::size_t m = 0; m < t; ++m) probes.push_back(start_latency_probe(members[m], members[(m + 1) % t]));
    double end = sg::Engine::get_clock();
    for (std::size_t m = 0; m < t; ++m) {
      const double latency = route_latency(members[m], members[(m + 1) % t], probes[m]);
      for (const sg::CommPtr& flow : flows[m]) {
        flow->wait();
        end = std::max(end, flow->get_finish_time() + (steps - 1) * latency);
      }
    }
    if (end > sg::Engine::get_clock()) sg::this_actor::sleep_until(end);
  }

  // SimulationRequest::tied_embedding when neither of its stages has a
  // data-parallel synchronisation (d = 1): one all-reduce per mini-batch
  // between the two stages' devices, each joining once its stage's final
  // backwards of the mini-batch have ended; the optimizer step that follows
  // the stage's last backward (place_optimizer_steps) runs after it, and the
  // stage's forwards of the next mini-batch wait for both. Only where the
  // weights are updated per mini-batch (update_interval 0) and every stream
  // runs its mini-batches in order (a flushed schedule): elsewhere the
  // all-reduce has no iteration to follow and is not simulated.
  void place_lone_tied_syncs() {
    if (!request_.tied_embedding || !tied_.empty() || request_.update_interval != 0) return;
    const auto& tied = *request_.tied_embedding;
    for (const AllReduceState& all_reduce : all_reduces_)
      if (all_reduce.spec->stage == tied.first_stage || all_reduce.spec->stage == tied.last_stage) return;
    const std::array<int, 2> stages{tied.first_stage, tied.last_stage};
    std::array<std::optional<std::size_t>, 2> device;
    // Per participant: mini-batch -> its stage's final backwards, and its forwards.
    std::array<std::map<int, std::vector<std::size_t>>, 2> backwards, forwards;
    for (std::size_t i = 0; i < actions_.size(); ++i) {
      const ActionState& state = actions_[i];
      if (i > 0 && actions_[i - 1].device == state.device && actions_[i - 1].stream == state.stream &&
          actions_[i - 1].action.mini_batch > state.action.mini_batch)
        return;  // a stream goes back to an earlier mini-batch: no flush
      for (std::size_t p = 0; p < 2; ++p) {
        if (state.action.stage != stages[p]) continue;
        if (device[p] && *device[p] != state.device) return;  // replicated without a synchronisation
        device[p] = state.device;
        if (is_final_backward(state.action.kind)) backwards[p][state.action.mini_batch].push_back(i);
        if (state.action.kind == ActionKind::Forward) forwards[p][state.action.mini_batch].push_back(i);
      }
    }
    if (!device[0] || !device[1] || *device[0] == *device[1]) return;
    for (const auto& [mini_batch, first_ready] : backwards[0]) {
      const auto last_ready = backwards[1].find(mini_batch);
      if (last_ready == backwards[1].end()) continue;
      const std::size_t sync = tied_.size();
      TiedSync& tied_sync = tied_.emplace_back();
      tied_sync.mini_batch = mini_batch;
      tied_sync.ready = {first_ready, last_ready->second};
      for (std::size_t p = 0; p < 2; ++p) {
        tied_sync.hosts.push_back(actions_[tied_sync.ready[p].front()].host);
        tied_sync.stages[p] = stages[p];
        // The step the device runs after the stage's last backward: after the all-reduce instead.
        for (const std::size_t i : tied_sync.ready[p])
          if (actions_[i].step_work) {
            tied_sync.step_after[p] = i;
            tied_sync.step_work[p] = *actions_[i].step_work;
            actions_[i].step_work.reset();
          }
        if (const auto next = forwards[p].find(mini_batch + 1); next != forwards[p].end())
          for (const std::size_t i : next->second) actions_[i].needs.push_back({ActionState::Need::What::Tied, sync, p});
        device_tied_[*device[p]].push_back({sync, p});
      }
    }
  }

  // Runs the device's part in its tied-embedding all-reduces of
  // place_lone_tied_syncs, in mini-batch order: once the stage's final
  // backwards of the mini-batch have ended, the all-reduce, then the
  // optimizer step that follows them.
  void run_lone_tied_syncs(std::size_t device) {
    for (const auto& [sync, p] : device_tied_[device]) {
      TiedSync& tied = tied_[sync];
      for (const std::size_t i : tied.ready[p]) wait_until_ended(actions_[i]);
      RingProgress ring{tied.hosts, tied.rounds, tied.joined, tied.left, tied.signal, tied.nccl};
      run_ring(ring, p, CollectiveKind::AllReduce, request_.tied_embedding->bytes * request_.gradient_bytes_per_weight_byte,
               tied.stages[p], kTiedEmbeddingLabel, tied.mini_batch);
      if (tied.step_after[p]) {
        ActionState& after = actions_[*tied.step_after[p]];
        run_step(tied.step_work[p], after, after.stream);
        after.step_ended = true;
        if (after.ended_signal) after.ended_signal->notify_all();
      }
      tied.done[p] = true;
      tied.signal->notify_all();
    }
  }

  void place_optimizer_steps(const PlatformSummary& platform) {
    const int interval = request_.update_interval;
    if (interval < 0) throw InputError(fmt::format("simulation: update interval {} is negative", interval));
    if (std::none_of(hosts_.begin(), hosts_.end(), [&](const std::string& host) { return platform.host(host).has_optimizer_step(); }))
      return;
    // Per device, per stream: the indices of its actions, in program order.
    std::map<std::size_t, std::map<std::size_t, std::vector<std::size_t>>> streams;
    for (std::size_t i = 0; i < actions_.size(); ++i) streams[actions_[i].device][actions_[i].stream].push_back(i);
    for (const auto& [device, lists] : streams) {
      if (device_all_reduces_.count(device)) continue;  // steps follow its all-reduces
      const ActionState& any = actions_[lists.begin()->second.front()];
      const HostInfo& info = platform.host(any.host->get_name());
      if (!info.has_optimizer_step()) continue;
      std::vector<std::size_t> updates;
      if (interval == 0) {
        // Each stage the device holds updates its own weights after its last
        // backward of the mini-batch.
        std::map<std::pair<int, int>, std::size_t> last_backward;  // (mini-batch, stage) -> action
        for (const auto& [stream, list] : lists)
          for (std::size_t i : list)
            if (is_final_backward(actions_[i].action.kind))
              last_backward[{actions_[i].action.mini_batch, actions_[i].action.stage}] = i;
        for (const auto& [key, i] : last_backward) updates.push_back(i);
      } else {
        int backwards = 0;
        for (const auto& [stream, list] : lists)
          for (std::size_t i : list)
            if (is_final_backward(actions_[i].action.kind) && ++backwards % interval == 0) updates.push_back(i);
      }
      for (std::size_t u : updates) {
        ActionState& update = actions_[u];
        update.step_work = info.optimizer_step_s(request_.stages[update.action.stage].weight_bytes) * update.host->get_speed();
        if (interval != 0) continue;
        for (const auto& [stream, list] : lists) {
          if (stream == update.stream) continue;
          for (std::size_t i : list)
            if (actions_[i].action.mini_batch > update.action.mini_batch) {
              actions_[i].needs.push_back({ActionState::Need::What::Step, u});
              break;
            }
        }
      }
    }
  }

  void record(double start, double end, double bytes, sg::Host* host, int stream, int stage, std::uint8_t action,
              int micro_batch, int mini_batch, sg::Host* peer) {
    PackedRecord& r = records_.emplace_back();
    r.start_s = start;
    r.end_s = end;
    r.bytes = bytes;
    r.host = host_index_.at(host);
    r.stream = stream;
    r.stage = stage;
    r.action = action;
    r.micro_batch = micro_batch;
    r.mini_batch = mini_batch;
    r.peer = peer ? host_index_.at(peer) : -1;
  }

  // Runs an optimizer step of `work` on the calling actor's host and records
  // it as a "U" compute record of the action `after` it follows.
  void run_step(double work, const ActionState& after, std::size_t stream) {
    const double start = sg::Engine::get_clock();
    if (work > 0) sg::this_actor::execute(work);
    record(start, sg::Engine::get_clock(), 0, after.host, static_cast<int>(stream), after.action.stage,
           static_cast<std::uint8_t>(kOptimizerStepAction[0]), after.action.micro_batch, after.action.mini_batch, nullptr);
  }

  void wait_until_step_ended(ActionState& state) {
    if (state.step_ended) return;
    if (!state.ended_signal) state.ended_signal = sg::ConditionVariable::create();
    std::unique_lock lock(*mutex_);
    while (!state.step_ended) state.ended_signal->wait(lock);
  }

  void wait_until_ended(ActionState& state) {
    if (state.ended) return;
    if (!state.ended_signal) state.ended_signal = sg::ConditionVariable::create();
    std::unique_lock lock(*mutex_);
    while (!state.ended) state.ended_signal->wait(lock);
  }

  void wait_until_segments(ActionState& state, std::size_t segments) {
    if (state.ended || state.segments_done >= segments) return;
    if (!state.ended_signal) state.ended_signal = sg::ConditionVariable::create();
    std::unique_lock lock(*mutex_);
    while (!state.ended && state.segments_done < segments) state.ended_signal->wait(lock);
  }

  // Runs the device's part in its gradient synchronisations, in Program
  // order: per job (the stage, a layer or a bucket) an all-reduce, or under
  // the distributed optimizer a reduce-scatter, once the ready backward has
  // passed the job's layers; then the optimizer step; then, under the
  // distributed optimizer, an all-gather per job in the reverse order.
  void run_all_reduces(std::size_t device) {
    const bool sharded = request_.distributed_optimizer;
    for (const auto& [c, p] : device_all_reduces_[device]) {
      AllReduceState& all_reduce = all_reduces_[c];
      ActionState& ready = actions_[all_reduce.ready[p]];
      std::size_t collective = 0;
      for (const AllReduceState::Job& job : all_reduce.jobs) {
        if (job.after_segments == 0)
          wait_until_ended(ready);
        else
          wait_until_segments(ready, job.after_segments);
        run_collective(all_reduce, p, collective++, sharded ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, job);
      }
      if (all_reduce.tied[p]) {
        TiedSync& tied = tied_[all_reduce.tied[p]->first];
        RingProgress ring{tied.hosts, tied.rounds, tied.joined, tied.left, tied.signal, tied.nccl};
        run_ring(ring, all_reduce.tied[p]->second, CollectiveKind::AllReduce,
                 request_.tied_embedding->bytes * request_.gradient_bytes_per_weight_byte,
                 all_reduce.spec->stage, kTiedEmbeddingLabel, all_reduce.spec->round);
      }
      // The update follows the reduction; what it releases waits for both.
      if (all_reduce.step_work[p]) run_step(*all_reduce.step_work[p], ready, ready.stream);
      all_reduce.stepped[p] = true;
      all_reduce.signal->notify_all();
      if (sharded)
        for (auto job = all_reduce.jobs.rbegin(); job != all_reduce.jobs.rend(); ++job) {
          run_collective(all_reduce, p, collective++, CollectiveKind::AllGather, *job);
          ++all_reduce.gathered[p];
          all_reduce.signal->notify_all();
        }
      all_reduce.ended[p] = true;
      all_reduce.signal->notify_all();
    }
  }

  // Participant p's part in collective number `collective` of `all_reduce`
  // (the participants run the same collectives in the same order), as
  // request_.collective_model says; one record from its start to its end.
  void run_collective(AllReduceState& all_reduce, std::size_t p, std::size_t collective, CollectiveKind kind,
                      const AllReduceState::Job& job) {
    RingProgress ring{all_reduce.hosts, all_reduce.rounds[collective], all_reduce.joined[collective],
                      all_reduce.left[collective], all_reduce.signal, all_reduce.nccl};
    const double bytes = kind == CollectiveKind::AllGather ? job.bytes : job.bytes * request_.gradient_bytes_per_weight_byte;
    run_ring(ring, p, kind, bytes, all_reduce.spec->stage, job.label, all_reduce.spec->round);
  }

  // Participant p's part in one ring collective of `bytes`
  // (RingNetwork::run_ring); its record names `stage`, `label`
  // (micro-batch) and `round` (mini-batch).
  void run_ring(RingProgress& ring, std::size_t p, CollectiveKind kind, double bytes, int stage, int label, int round_id) {
    const RingNetwork::Part part = rings_.run_ring(ring, p, kind, bytes);
    const std::uint8_t action = kind == CollectiveKind::AllReduce ? kAllReduce : kind == CollectiveKind::ReduceScatter ? kReduceScatter : kAllGather;
    record(part.start_s, part.end_s, part.bytes, ring.hosts[p], 0, stage, action, label, round_id, ring.hosts[part.next]);
  }

  // The message of `state` is ready: under Share it starts now; under Fifo
  // it joins its channel's queue.
  void send_message(ActionState& state) {
    if (state.message_to == nullptr) return;
    if (request_.transfer_rule == TransferRule::Fifo) {
      enqueue_message(static_cast<std::size_t>(&state - actions_.data()));
      return;
    }
    start_message(state);
  }

  void start_message(ActionState& state) {
    // init + start rather than sendto_async: in SimGrid 3.32 a zero-byte
    // sendto_async only starts when somebody waits for it.
    state.message = sg::Comm::sendto_init(state.host, state.message_to);
    // NCCL: bytes / efficiency on the wire (its start latency: arrival_time).
    state.message->set_payload_size(static_cast<uint64_t>(state.message_bytes / route_nccl(state.host, state.message_to).efficiency));
    state.message->start();
  }

  // When the message of `producer` (started, and done) has arrived: its last
  // byte, plus its route's NCCL start latency (a transfer pays it once;
  // docs/semantics.md, NCCL efficiency and latency).
  double arrival_time(const ActionState& producer) {
    return producer.message->get_finish_time() + route_nccl(producer.host, producer.message_to).latency_s;
  }

  // Waits until the message of `producer` has arrived (arrival_time). Under
  // blocking transfers (Share) only the sender waits on the communication
  // (hold_until_arrived); readers wait for its `arrived` flag.
  void wait_for_message(ActionState& producer) {
    if (request_.transfer_rule == TransferRule::Fifo || request_.blocking_transfers) {
      wait_until_arrived(producer);
      return;
    }
    producer.message->wait();
    if (const double at = arrival_time(producer); at > sg::Engine::get_clock()) sg::this_actor::sleep_until(at);
  }

  // Fifo: queues the message of action `index` on its channel, ordered by
  // (ready time, program index). Ready times never decrease, so only the
  // queue's tail of messages ready at this instant can follow it: O(1)
  // amortised.
  void enqueue_message(std::size_t index) {
    ActionState& state = actions_[index];
    Channel& channel = channels_[state.channel];
    state.ready_at = sg::Engine::get_clock();
    auto at = channel.queue.end();
    while (at != channel.queue.begin() && *(at - 1) > index && actions_[*(at - 1)].ready_at == state.ready_at) --at;
    channel.queue.insert(at, index);
    channel.signal->notify_all();
  }

  // Fifo: the actor of one channel. Starts its messages one at a time, each
  // when the previous one has arrived; an asynchronous (cut-through)
  // producer's message holds the channel until the producer has ended too.
  void run_channel(std::size_t c) {
    Channel& channel = channels_[c];
    for (std::size_t sent = 0; sent < channel.messages; ++sent) {
      {
        std::unique_lock lock(*mutex_);
        while (channel.queue.empty()) channel.signal->wait(lock);
      }
      // Let the actors that run at this instant queue their messages before
      // the channel picks one (ties go in program order). A message that a
      // chain of zero-time actions makes ready later in the same instant,
      // after the channel has started another, waits for that one.
      sg::this_actor::yield();
      ActionState& state = actions_[channel.queue.front()];
      channel.queue.pop_front();
      start_message(state);
      state.message->wait();
      if (const double at = arrival_time(state); at > sg::Engine::get_clock()) sg::this_actor::sleep_until(at);
      if (state.async) wait_until_ended(state);
      state.arrived = true;
      if (state.ended_signal) state.ended_signal->notify_all();
    }
  }

  // Blocking transfers: the sender of `state`'s message (sent, ended) waits
  // until it has arrived. Under Share the sender is the one actor that waits
  // on the communication and signals its arrival; under Fifo the channel does.
  void hold_until_arrived(ActionState& state) {
    if (!request_.blocking_transfers || state.message_to == nullptr) return;
    if (request_.transfer_rule == TransferRule::Fifo) {
      wait_until_arrived(state);
      return;
    }
    state.message->wait();
    if (const double at = arrival_time(state); at > sg::Engine::get_clock()) sg::this_actor::sleep_until(at);
    state.arrived = true;
    if (state.ended_signal) state.ended_signal->notify_all();
  }

  void wait_until_arrived(ActionState& state) {
    if (state.arrived) return;
    if (!state.ended_signal) state.ended_signal = sg::ConditionVariable::create();
    std::unique_lock lock(*mutex_);
    while (!state.arrived) state.ended_signal->wait(lock);
  }

  // Waits until everything `state` needs has happened (its producers'
  // ends, their messages' arrival, all-reduces, optimizer steps).
  void wait_for_needs(ActionState& state) {
    for (const ActionState::Need& need : state.needs) {
      if (need.what == ActionState::Need::What::Step) {
        wait_until_step_ended(actions_[need.index]);
        continue;
      }
      if (need.what == ActionState::Need::What::Tied) {
        TiedSync& tied = tied_[need.index];
        std::unique_lock lock(*mutex_);
        while (!tied.done[need.participant]) tied.signal->wait(lock);
        continue;
      }
      if (need.what == ActionState::Need::What::AllReduce || need.what == ActionState::Need::What::Reduced) {
        AllReduceState& all_reduce = all_reduces_[need.index];
        const std::vector<bool>& done = need.what == ActionState::Need::What::AllReduce ? all_reduce.ended : all_reduce.stepped;
        std::unique_lock lock(*mutex_);
        while (!done[need.participant]) all_reduce.signal->wait(lock);
        continue;
      }
      ActionState& producer = actions_[need.index];
      wait_until_ended(producer);
      if (need.what == ActionState::Need::What::Arrival) {
        wait_for_message(producer);
        if (--producer.message_readers == 0) producer.message = nullptr;
        continue;
      }
      if (need.what == ActionState::Need::What::Message) {
        wait_for_message(producer);
        const bool forward = producer.action.kind == ActionKind::Forward;
        record(producer.message->get_start_time(), std::max(producer.end, arrival_time(producer)),
               producer.message_bytes, producer.host, 0, producer.action.stage, forward ? kSendForward : kSendBackward,
               producer.action.micro_batch, producer.action.mini_batch, state.host);
        if (--producer.message_readers == 0) producer.message = nullptr;
      }
    }
  }

  // After `state` has ended: its compute record from `record_start` to
  // `record_end`, the signal to those waiting, the wait for its message
  // under blocking transfers, and the optimizer step that follows it, if any.
  void finish(ActionState& state, double record_start, double record_end) {
    end_compute(state, record_start, record_end);
    hold_until_arrived(state);
    run_step_after(state);
  }

  // `state` has ended: its compute record and the signal to those waiting.
  void end_compute(ActionState& state, double record_start, double record_end) {
    record(record_start, record_end, 0, state.host, static_cast<int>(state.stream), state.action.stage,
           static_cast<std::uint8_t>(action_letter(state.action.kind)), state.action.micro_batch, state.action.mini_batch,
           nullptr);
    state.ended = true;
    if (state.ended_signal) state.ended_signal->notify_all();
  }

  // The optimizer step that follows `state` (ended), if any.
  void run_step_after(ActionState& state) {
    if (state.step_work) {
      run_step(*state.step_work, state, state.stream);
      state.step_ended = true;
      if (state.ended_signal) state.ended_signal->notify_all();
    }
  }

  // An overlapped F&B pair: both start when both can, run for fb_overlap x
  // their summed work, and both results are available at the end. The
  // records show the pair's span split in proportion to the two works.
  void run_pair(ActionState& first, ActionState& second) {
    wait_for_needs(first);
    wait_for_needs(second);
    const double start = sg::Engine::get_clock();
    first.start = second.start = start;
    if (first.async) {
      send_message(first);
      send_message(second);
    }
    const double work = request_.fb_overlap * (first.work + second.work);
    // DualPipe's overlap: the pair's all-to-alls run while it computes.
    const AllToAlls a2a = start_all_to_alls({&first, &second});
    if (work > 0) sg::this_actor::execute(work);
    const double computed = sg::Engine::get_clock();
    if (a2a.any()) {
      const double a2a_end = finish_all_to_alls(a2a);
      const double a2a_s = a2a_end - start, compute_s = computed - start;
      all_to_all_s_ += a2a_s;
      all_to_all_exposed_s_ += std::max(0.0, a2a_end - computed);
      pair_span_s_ += std::max(a2a_s, compute_s);
      pair_serial_s_ += a2a_s + compute_s;
    }
    run_group_collectives({&first, &second});
    const double end = sg::Engine::get_clock();
    first.end = second.end = end;
    if (!first.async) {
      send_message(first);
      send_message(second);
    }
    const double total = first.work + second.work;
    const double split = total > 0 ? start + (end - start) * (first.work / total) : start;
    end_compute(first, start, split);
    end_compute(second, split, end);
    hold_until_arrived(first);
    hold_until_arrived(second);
    run_step_after(first);
    run_step_after(second);
  }

  void run_stream(std::size_t first, std::size_t count) {
    for (std::size_t i = first; i < first + count; ++i) {
      ActionState& state = actions_[i];
      if (state.overlap == 1 && i + 1 < first + count) {
        run_pair(state, actions_[i + 1]);
        ++i;
        continue;
      }
      wait_for_needs(state);
      state.start = sg::Engine::get_clock();
      if (state.async) send_message(state);
      if (!state.gated_work.empty()) {
        AllReduceState& gate = all_reduces_[state.gate_all_reduce];
        for (std::size_t k = 0; k < state.gated_work.size(); ++k) {
          {
            std::unique_lock lock(*mutex_);
            while (gate.gathered[state.gate_participant] < k + 1) gate.signal->wait(lock);
          }
          // The record starts with the first bucket's compute; later waits count in it.
          if (k == 0) state.start = sg::Engine::get_clock();
          if (state.gated_work[k] > 0) sg::this_actor::execute(state.gated_work[k]);
        }
      } else if (!state.segment_work.empty()) {
        for (double work : state.segment_work) {
          if (work > 0) sg::this_actor::execute(work);
          ++state.segments_done;
          if (state.ended_signal) state.ended_signal->notify_all();
        }
      } else if (state.work > 0) {
        sg::this_actor::execute(state.work);
      }
      run_group_collectives({&state});
      run_all_to_alls(state);
      state.end = sg::Engine::get_clock();
      if (!state.async) send_message(state);
      finish(state, state.start, state.end);
    }
  }

  const SimulationRequest& request_;
  /// NCCL values of routes, route latencies, ring collectives.
  RingNetwork rings_;
  std::vector<ActionState> actions_;
  std::vector<std::string> hosts_;
  std::unordered_map<const sg::Host*, std::int32_t> host_index_;  ///< index in hosts_
  std::vector<PackedRecord> records_;
  std::vector<AllReduceState> all_reduces_;
  /// The tied-embedding all-reduces (SimulationRequest::tied_embedding): one
  /// per round and replica, between the first and the last stage's devices.
  struct TiedSync {
    std::vector<sg::Host*> hosts;  ///< the first stage's device's host, the last's
    std::vector<int> rounds = std::vector<int>(2, 0);
    std::size_t joined = 0, left = 0;
    sg::ConditionVariablePtr signal = sg::ConditionVariable::create();
    /// Without data-parallel synchronisation (place_lone_tied_syncs): the
    /// mini-batch, and per participant its stage, the final backwards it
    /// waits for, the action whose optimizer step (of step_work) it runs
    /// after the all-reduce, and whether it is done.
    int mini_batch = 0;
    std::array<int, 2> stages{};
    std::array<std::vector<std::size_t>, 2> ready;
    std::array<std::optional<std::size_t>, 2> step_after;
    std::array<double, 2> step_work{};
    std::array<bool, 2> done{};
    std::optional<LinkNccl> nccl;  ///< the ring's NCCL values, once known
  };
  std::deque<TiedSync> tied_;
  /// Per device: (tied all-reduce, participant) of place_lone_tied_syncs, in mini-batch order.
  std::map<std::size_t, std::vector<std::pair<std::size_t, std::size_t>>> device_tied_;
  /// SimulationRequest::tensor_parallel_members of the leaders that run
  /// collectives: the groups' hosts in ring order, and each leader's group.
  std::vector<std::vector<sg::Host*>> groups_;
  /// SimulationRequest::expert_parallel_ranks resolved, per leader with all-to-alls.
  std::map<std::string, std::int32_t> experts_of_host_;
  std::vector<std::vector<ExpertRank>> expert_ranks_;
  double pair_span_s_ = 0, pair_serial_s_ = 0, all_to_all_s_ = 0, all_to_all_exposed_s_ = 0;
  std::vector<std::optional<LinkNccl>> group_nccl_;  ///< per group: its ring's NCCL values, once known
  std::map<std::string, std::int32_t> group_of_host_;
  /// Per device: (all-reduce, participant) in Program order.
  std::map<std::size_t, std::vector<std::pair<std::size_t, std::size_t>>> device_all_reduces_;
  /// TransferRule::Fifo: one per (source host, destination host) pair that
  /// messages travel between, in Program order of their first message.
  struct Channel {
    sg::Host* from = nullptr;
    sg::Host* to = nullptr;
    std::size_t messages = 0;        ///< messages it carries in the whole run
    std::deque<std::size_t> queue;   ///< ready, not yet started: action indices
    sg::ConditionVariablePtr signal = sg::ConditionVariable::create();
  };
  std::vector<Channel> channels_;
  sg::MutexPtr mutex_ = rings_.mutex();
};

// Progress (set_progress): whether simulate() shows it, and in the child,
// its copy of the terminal stderr was before the child captured stderr.
bool progress_enabled = false;
int progress_fd = -1;

// Shows the progress line on progress_fd, at most every
// kProgressIntervalSeconds; call finish() after the run (erases it).
class ProgressHook {
 public:
  explicit ProgressHook(const Simulation& simulation) : simulation_(simulation) {
    if (progress_fd < 0) return;
    sg::Engine::on_time_advance_cb([this](double) {
      if (++calls_ % 16 != 0) return;
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      if (!progress_due(elapsed, last_shown_)) return;
      last_shown_ = elapsed;
      show(progress_update(progress_line(sg::Engine::get_clock(), simulation_.records_done(), elapsed)));
    });
  }
  void finish() {
    if (last_shown_ >= 0) show(progress_erase());
  }

 private:
  static void show(const std::string& text) {
    if (write(progress_fd, text.data(), text.size()) < 0) progress_fd = -1;
  }
  const Simulation& simulation_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::size_t calls_ = 0;
  double last_shown_ = -1;
};

// Reads `file` and checks it (check_platform_xml) before SimGrid sees it;
// prints its warnings on stderr, once per file in this process.
void check_platform_file(const std::string& file) {
  struct stat status {};
  if (stat(file.c_str(), &status) != 0)
    throw InputError(fmt::format("{}: cannot read platform file: {}", printable(file), std::strerror(errno)));
  if (!S_ISREG(status.st_mode)) throw InputError(fmt::format("{}: cannot read platform file: not a regular file", printable(file)));
  if (static_cast<std::size_t>(status.st_size) > kMaxPlatformFileBytes)
    throw InputError(fmt::format("{}: the file has {} bytes; pipegrid reads platform files of at most {} MiB",
                                 printable(file), status.st_size, kMaxPlatformFileBytes >> 20));
  std::string text = read_text_file(file);
  static std::mutex mutex;
  // The last file that passed, with its text: a command reads one platform
  // several times (plan, run, simulation); the same text passes again.
  static std::string passed_file, passed_text;
  {
    const std::lock_guard lock(mutex);
    if (file == passed_file && text == passed_text) return;
  }
  const PlatformCheck check = check_platform_xml(printable(file), text);
  static std::set<std::string> warned;
  const std::lock_guard lock(mutex);
  if (warned.insert(file).second)
    for (const std::string& warning : check.warnings) std::cerr << "warning: " << warning << "\n";
  passed_file = file;
  passed_text = std::move(text);
}

// The route SimGrid computes from `from` to `to`: found false when it finds
// none (a hierarchy without the zone route); its links indexed into `links`
// (each link once, by name, in first-seen order).
HostRoute route_between(sg::Host* from, sg::Host* to, std::vector<LinkInfo>& links, std::map<std::string, int>& index) {
  HostRoute route;
  std::vector<sg::Link*> crossed;
  try {
    from->route_to(to, crossed, &route.latency_s);
  } catch (const std::exception&) {
    return route;
  }
  route.found = true;
  for (const sg::Link* link : crossed) {
    const auto [entry, added] = index.emplace(link->get_name(), static_cast<int>(links.size()));
    if (added) {
      const LinkNccl nccl = link_nccl(*link, "");  // checked by load_platform
      links.push_back({link->get_name(), link->get_bandwidth(), link->get_sharing_policy() != sg::Link::SharingPolicy::FATPIPE,
                       nccl.efficiency, nccl.latency_s});
    }
    route.links.push_back(entry->second);
  }
  return route;
}

// Loads the platform into a fresh engine and summarises its hosts in the
// order the file declares them, with the all-pairs route matrices when
// `with_routes`. Checks again, on what SimGrid built, what
// check_platform_xml checked on the text (a second line of defence):
// positive speeds and bandwidths, host ids pipegrid's outputs can carry.
PlatformSummary load_platform(sg::Engine& engine, const std::string& file, NetworkModel network, bool with_routes) {
  const std::string name = printable(file);
  if (network == NetworkModel::Analytic) {
    sg::Engine::set_config("network/model:CM02");
    sg::Engine::set_config("network/TCP-gamma:0");
    sg::Engine::set_config("network/crosstraffic:0");
  }
  if (access(file.c_str(), R_OK) != 0)
    throw InputError(fmt::format("{}: cannot read platform file: {}", name, std::strerror(errno)));
  // Hosts in creation order, once each (SimGrid signals a host's creation
  // again when the platform is sealed).
  std::vector<sg::Host*> declared;
  std::set<sg::Host*> seen;
  bool loading = true;
  sg::Host::on_creation_cb([&](sg::Host& host) {
    if (loading && seen.insert(&host).second) declared.push_back(&host);
  });
  try {
    engine.load_platform(file);
  } catch (const std::exception& error) {
    throw InputError(fmt::format("{}: not a valid SimGrid platform: {}", name, printable(error.what(), true)));
  }
  loading = false;
  if (declared.empty()) throw InputError(fmt::format("{}: the platform declares no host", name));
  if (declared.size() > kMaxPlatformHosts)
    throw InputError(fmt::format("{}: {} hosts; pipegrid reads platforms of at most {} hosts", name, declared.size(),
                                 kMaxPlatformHosts));
  PlatformSummary summary;
  summary.file = file;
  for (sg::Host* host : declared) {
    const std::string& id = host->get_name();
    if (const std::string problem = host_id_problem(id); !problem.empty())
      throw InputError(fmt::format("{}: host '{}': {}; pipegrid refuses host ids that its outputs (timeline CSV, tables) "
                                   "cannot carry: rename it",
                                   name, printable(id), problem));
    for (unsigned long pstate = 0; pstate < host->get_pstate_count(); ++pstate) {
      const double speed = host->get_pstate_speed(pstate);
      if (!(speed >= kMinHostSpeed && speed <= kMaxHostSpeed))
        throw InputError(fmt::format("{}: host '{}': speed {} flop/s: expected a positive speed from {:g} to {:g}", name,
                                     printable(id), speed, kMinHostSpeed, kMaxHostSpeed));
    }
    if (host->get_core_count() < 1)
      throw InputError(fmt::format("{}: host '{}': {} cores: expected at least 1", name, printable(id), host->get_core_count()));
    std::map<std::string, std::string> properties;
    if (const auto* all = host->get_properties()) properties.insert(all->begin(), all->end());
    summary.hosts.push_back(host_info_from_properties(name, id, properties));
    if (const sg::NetZone* zone = host->get_englobing_zone()) summary.hosts.back().server = zone->get_name();
  }
  for (const sg::Link* link : engine.get_all_links()) {
    const double bandwidth = link->get_bandwidth(), latency = link->get_latency();
    if (!(bandwidth >= kMinBandwidth) || !std::isfinite(bandwidth))
      throw InputError(fmt::format("{}: link '{}': bandwidth {} B/s: expected a positive bandwidth of at least {:g} B/s",
                                   name, printable(link->get_name()), bandwidth, kMinBandwidth));
    if (!(latency >= 0 && latency <= kMaxLatencySeconds))
      throw InputError(fmt::format("{}: link '{}': latency {} s: expected a non-negative latency of at most {:g} s", name,
                                   printable(link->get_name()), latency, kMaxLatencySeconds));
    link_nccl(*link, file);
  }
  double slowest = declared.front()->get_speed();
  for (sg::Host* host : declared) slowest = std::min(slowest, host->get_speed());
  sg::Engine::set_config("maxmin/precision", std::min(1e-5, slowest * kWorkPrecisionSeconds));
  engine.seal_platform();
  if (!with_routes) return summary;
  const std::size_t count = declared.size();
  if (count > kMaxRouteMatrixHosts)
    throw InputError(fmt::format("{}: {} hosts; partitioners need the route between every pair of hosts, which pipegrid "
                                 "computes for platforms of at most {} hosts",
                                 name, count, kMaxRouteMatrixHosts));
  summary.route_bandwidth_Bps.assign(count, std::vector<double>(count, 0.0));
  summary.route_latency_s.assign(count, std::vector<double>(count, 0.0));
  summary.route_links.assign(count, std::vector<std::vector<int>>(count));
  std::map<std::string, int> link_index;
  for (std::size_t a = 0; a < count; ++a)
    for (std::size_t b = 0; b < count; ++b) {
      if (a == b) continue;
      HostRoute route = route_between(declared[a], declared[b], summary.links, link_index);
      if (!route.found || route.links.empty()) continue;  // no route, or none with a link: 0
      double narrowest = summary.links[static_cast<std::size_t>(route.links.front())].bandwidth_Bps;
      for (const int l : route.links) narrowest = std::min(narrowest, summary.links[static_cast<std::size_t>(l)].bandwidth_Bps);
      summary.route_bandwidth_Bps[a][b] = narrowest;
      summary.route_latency_s[a][b] = route.latency_s;
      summary.route_links[a][b] = std::move(route.links);
    }
  return summary;
}

// Checks that SimGrid finds a route for every pair of hosts the run sends
// data between: InputError listing the missing ones and who needs them.
// With `acknowledgements` (the simgrid network model, whose TCP
// acknowledgements load the reverse route), also that SimGrid can compute
// each reverse route: it may be absent (SimGrid then loads no link with the
// acknowledgements) but not broken (a hierarchy without the zone route back,
// which SimGrid would throw on in mid-simulation). Before each pair, a line
// on stderr names it, so that a SimGrid abort while computing a route
// (run_in_child) says which pair it was.
void check_routes(const std::string& file, const std::vector<Simulation::NeededRoute>& needed, bool acknowledgements) {
  std::vector<std::string> missing;
  std::set<std::pair<sg::Host*, sg::Host*>> checked;
  auto check = [&](sg::Host* from, sg::Host* to, const std::string& reason, bool must_exist) {
    if (!checked.emplace(from, to).second) return;
    const std::string pair = fmt::format("from '{}' to '{}'", printable(from->get_name()), printable(to->get_name()));
    std::fprintf(stderr, "pipegrid-route-check: %s\n", pair.c_str());
    std::fflush(stderr);
    std::vector<sg::Link*> links;
    double latency = 0;
    std::string problem;
    try {
      from->route_to(to, links, &latency);
      if (must_exist && links.empty() && !(latency > 0)) problem = "none declared";
    } catch (const std::exception& error) {
      problem = fmt::format("SimGrid: {}", printable(error.what()));
    }
    if (!problem.empty()) missing.push_back(fmt::format("{} ({}): {}", pair, problem, reason));
  };
  for (const Simulation::NeededRoute& route : needed) check(route.from, route.to, route.reason, true);
  if (acknowledgements)
    for (const Simulation::NeededRoute& route : needed)
      check(route.to, route.from, fmt::format("--network simgrid sends acknowledgements back when {}", route.reason), false);
  if (missing.empty()) return;
  constexpr std::size_t kShown = 8;
  std::string lines;
  for (std::size_t i = 0; i < missing.size() && i < kShown; ++i) lines += "\n  no route " + missing[i];
  if (missing.size() > kShown) lines += fmt::format("\n  and {} more", missing.size() - kShown);
  throw InputError(fmt::format("{}: the platform lacks {} route{} that the run needs:{}\ndeclare them (a <route>, or a "
                               "<zoneRoute> between zones; one per direction, or symmetrical), or place the stages on hosts "
                               "that have them",
                               printable(file), missing.size(), missing.size() == 1 ? "" : "s", lines));
}

// A byte vector holding `matrix` (count x count doubles, row by row).
nlohmann::json::binary_t matrix_bytes(const std::vector<std::vector<double>>& matrix) {
  nlohmann::json::binary_t bytes;
  for (const std::vector<double>& row : matrix) {
    const auto* begin = reinterpret_cast<const std::uint8_t*>(row.data());
    bytes.insert(bytes.end(), begin, begin + row.size() * sizeof(double));
  }
  return bytes;
}

std::vector<std::vector<double>> matrix_from_bytes(const nlohmann::json::binary_t& bytes, std::size_t count) {
  if (bytes.size() != count * count * sizeof(double))
    throw std::runtime_error(fmt::format("route matrix of {} bytes for {} hosts", bytes.size(), count));
  std::vector<std::vector<double>> matrix(count, std::vector<double>(count));
  for (std::size_t a = 0; a < count; ++a) std::memcpy(matrix[a].data(), bytes.data() + a * count * sizeof(double), count * sizeof(double));
  return matrix;
}

// The links of a summary or a route table as the child hands them over.
nlohmann::json links_to_json(const std::vector<LinkInfo>& links) {
  nlohmann::json json = nlohmann::json::array();
  for (const LinkInfo& link : links)
    json.push_back({{"name", link.name},
                    {"bandwidth_Bps", link.bandwidth_Bps},
                    {"shared", link.shared},
                    {"nccl_efficiency", link.nccl_efficiency},
                    {"nccl_latency_s", link.nccl_latency_s}});
  return json;
}

std::vector<LinkInfo> links_from_json(const nlohmann::json& json) {
  std::vector<LinkInfo> links;
  for (const auto& link : json)
    links.push_back({link.at("name").get<std::string>(), link.at("bandwidth_Bps").get<double>(), link.at("shared").get<bool>(),
                     link.at("nccl_efficiency").get<double>(), link.at("nccl_latency_s").get<double>()});
  return links;
}

nlohmann::json summary_to_json(const PlatformSummary& summary) {
  nlohmann::json hosts = nlohmann::json::array();
  for (const HostInfo& host : summary.hosts) {
    nlohmann::json entry{{"name", host.name}, {"kind", to_string(host.kind)}, {"execution", to_string(host.execution)},
                         {"speed_factor", host.speed_factor}, {"device", host.device_type},
                         {"device_model", host.device_model}, {"server", host.server}};
    if (host.memory_bytes) entry["memory_bytes"] = *host.memory_bytes;
    if (host.memory_reserve_bytes) entry["memory_reserve_bytes"] = *host.memory_reserve_bytes;
    if (host.memory_reserve_fraction) entry["memory_reserve_fraction"] = *host.memory_reserve_fraction;
    if (host.action_overhead_s > 0) entry["action_overhead_s"] = host.action_overhead_s;
    if (host.optimizer_step_rate_Bps) entry["optimizer_step_rate_Bps"] = *host.optimizer_step_rate_Bps;
    if (host.optimizer_step_overhead_s) entry["optimizer_step_overhead_s"] = *host.optimizer_step_overhead_s;
    hosts.push_back(entry);
  }
  nlohmann::json json{{"hosts", hosts}};
  if (!summary.route_bandwidth_Bps.empty()) {
    json["route_bandwidth_Bps"] = matrix_bytes(summary.route_bandwidth_Bps);
    json["route_latency_s"] = matrix_bytes(summary.route_latency_s);
    json["links"] = links_to_json(summary.links);
    json["route_links"] = summary.route_links;
  }
  return json;
}

PlatformSummary summary_from_json(const nlohmann::json& json, const std::string& file) {
  PlatformSummary summary;
  summary.file = file;
  for (const auto& entry : json.at("hosts")) {
    HostInfo host;
    host.name = entry.at("name");
    host.kind = entry.at("kind") == "gpu" ? DeviceKind::Gpu : DeviceKind::Fpga;
    host.execution = entry.at("execution") == "sync" ? Execution::Sync : Execution::Async;
    host.speed_factor = entry.at("speed_factor");
    host.device_type = entry.at("device");
    host.device_model = entry.at("device_model");
    host.server = entry.at("server");
    if (entry.contains("memory_bytes")) host.memory_bytes = entry.at("memory_bytes").get<double>();
    if (entry.contains("memory_reserve_bytes")) host.memory_reserve_bytes = entry.at("memory_reserve_bytes").get<double>();
    if (entry.contains("memory_reserve_fraction"))
      host.memory_reserve_fraction = entry.at("memory_reserve_fraction").get<double>();
    if (entry.contains("action_overhead_s")) host.action_overhead_s = entry.at("action_overhead_s").get<double>();
    if (entry.contains("optimizer_step_rate_Bps")) host.optimizer_step_rate_Bps = entry.at("optimizer_step_rate_Bps").get<double>();
    if (entry.contains("optimizer_step_overhead_s"))
      host.optimizer_step_overhead_s = entry.at("optimizer_step_overhead_s").get<double>();
    summary.hosts.push_back(host);
  }
  if (json.contains("route_bandwidth_Bps")) {
    summary.route_bandwidth_Bps = matrix_from_bytes(json.at("route_bandwidth_Bps").get_binary(), summary.hosts.size());
    summary.route_latency_s = matrix_from_bytes(json.at("route_latency_s").get_binary(), summary.hosts.size());
    if (json.contains("links") && json.contains("route_links")) {
      summary.links = links_from_json(json.at("links"));
      summary.route_links = json.at("route_links").get<std::vector<std::vector<std::vector<int>>>>();
    }
  }
  return summary;
}

// The records as the child hands them to the parent: the bytes of the
// PackedRecords (exact doubles; the parent is a fork of the same program,
// so the layout is the same).
std::string records_to_bytes(const std::vector<PackedRecord>& records) {
  return std::string(reinterpret_cast<const char*>(records.data()), records.size() * sizeof(PackedRecord));
}

Timeline timeline_from_child(const nlohmann::json& hosts, std::string_view bytes) {
  Timeline timeline;
  timeline.hosts = hosts.get<std::vector<std::string>>();
  if (bytes.size() % sizeof(PackedRecord) != 0) throw std::runtime_error(fmt::format("timeline of {} bytes", bytes.size()));
  const std::size_t count = bytes.size() / sizeof(PackedRecord);
  auto host = [&](std::int32_t index) -> const std::string& {
    if (index < 0 || static_cast<std::size_t>(index) >= timeline.hosts.size())
      throw std::runtime_error(fmt::format("timeline record names host {} of {}", index, timeline.hosts.size()));
    return timeline.hosts[static_cast<std::size_t>(index)];
  };
  static const std::string none;
  timeline.records.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    PackedRecord r;
    std::memcpy(&r, bytes.data() + i * sizeof(PackedRecord), sizeof(PackedRecord));
    timeline.records.push_back({host(r.host), r.stream, r.stage, packed_action_name(r.action), r.micro_batch, r.mini_batch,
                                r.start_s, r.end_s, r.bytes, r.peer < 0 ? none : host(r.peer), 0});
  }
  return timeline;
}

// What a child hands back: JSON (as CBOR) and raw bytes.
struct ChildResult {
  nlohmann::json json;
  std::string payload;         ///< the whole result file
  std::size_t bytes_at = 0;    ///< where the raw bytes start in it
  std::string_view bytes() const { return std::string_view(payload).substr(bytes_at); }
};

// SimGrid's command line for every engine of pipegrid: warnings only, and
// in sanitizer builds threads as contexts (AddressSanitizer follows
// threads, not SimGrid's hand-made stack switches).
struct EngineArguments {
  std::vector<std::string> words{"pipegrid", "--log=root.thres:warning", "--log=xbt_cfg.thres:warning"
#ifdef PIPEGRID_SIMGRID_CONTEXT_FACTORY
                                 ,
                                 "--cfg=contexts/factory:" PIPEGRID_SIMGRID_CONTEXT_FACTORY
#endif
  };
  std::vector<char*> argv;
  int argc = static_cast<int>(words.size());
  EngineArguments() {
    for (std::string& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
  }
};

// run_next_engine_in_process(): the next engine runs in this process.
enum class InProcess { Off, Armed, Used };
InProcess in_process = InProcess::Off;
void (*on_second_engine)() = nullptr;

// run_in_child's `work` in this process: the same result and exceptions
// (the child's messages, made printable as they cross), SimGrid's messages
// on a scratch stderr as in the child. A SimGrid abort ends this process.
ChildResult run_in_this_process(const std::function<nlohmann::json(sg::Engine&, std::string&)>& work, const char* hold_point) {
  if (hold_point) hold_if_injected(hold_point);
  std::fflush(nullptr);
  const int log_fd = memfd_create("pipegrid-log", 0);
  const int saved_stderr = dup(STDERR_FILENO);
  if (log_fd < 0 || saved_stderr < 0) throw std::runtime_error("memfd_create or dup failed");
  if (progress_enabled) progress_fd = dup(STDERR_FILENO);
  dup2(log_fd, STDERR_FILENO);
  struct RestoreStderr {
    int saved, log;
    ~RestoreStderr() {
      std::fflush(stderr);
      dup2(saved, STDERR_FILENO);
      close(saved);
      close(log);
    }
  } restore{saved_stderr, log_fd};
  try {
    EngineArguments arguments;
    ChildResult result;
    {
      sg::Engine engine(&arguments.argc, arguments.argv.data());
      result.json = work(engine, result.payload);  // the bytes: the whole payload
    }
    return result;
  } catch (const InputError& error) {
    throw InputError(printable(error.what(), true));
  } catch (const std::exception& error) {
    throw std::runtime_error(printable(error.what(), true));
  }
}

// Runs `work` (which starts one SimGrid engine) in a forked child and returns
// the JSON it produced (handed over as CBOR) and the bytes it left in its
// second argument. The child's InputErrors come
// back as InputErrors; SimGrid aborts come back as InputErrors quoting
// SimGrid's last message. Messages are made printable (invalid UTF-8 bytes
// as \xNN) before they cross. The child dies with its parent
// (core/termination.hpp). `hold_point`: the test hook the child stops at
// before simulating (hold_if_injected). After run_next_engine_in_process(),
// the next call runs `work` in this process instead, and a call after that
// calls its `second_engine` callback.
ChildResult run_in_child(const std::string& what, const std::function<nlohmann::json(sg::Engine&, std::string&)>& work,
                            const char* hold_point = nullptr) {
  if (in_process == InProcess::Used) {
    on_second_engine();
    throw std::logic_error("a second SimGrid engine in a process that ran one");
  }
  if (in_process == InProcess::Armed) {
    in_process = InProcess::Used;
    return run_in_this_process(work, hold_point);
  }
  const int result_fd = memfd_create("pipegrid-result", 0);
  const int log_fd = memfd_create("pipegrid-log", 0);
  if (result_fd < 0 || log_fd < 0) throw std::runtime_error("memfd_create failed");
  std::fflush(nullptr);
  const pid_t child = fork_child(ChildStop::Kill);
  if (child == 0) {
    if (hold_point) hold_if_injected(hold_point);
    if (progress_enabled) progress_fd = dup(STDERR_FILENO);
    dup2(log_fd, STDERR_FILENO);
    std::vector<std::uint8_t> payload;
    std::string bytes;
    int code = 0;
    try {
      EngineArguments arguments;
      sg::Engine engine(&arguments.argc, arguments.argv.data());
      payload = nlohmann::json::to_cbor(nlohmann::json{{"ok", work(engine, bytes)}});
    } catch (const InputError& error) {
      payload = nlohmann::json::to_cbor(nlohmann::json{{"input_error", printable(error.what(), true)}});
      code = 1;
    } catch (const std::exception& error) {
      payload = nlohmann::json::to_cbor(nlohmann::json{{"error", printable(error.what(), true)}});
      code = 2;
    } catch (...) {
      // Nothing may leave the child but through _exit (the caller may be
      // an interpreter: the Python module).
      payload = nlohmann::json::to_cbor(nlohmann::json{{"error", "an exception of a type that is not std::exception"}});
      code = 2;
    }
    // The result file: the CBOR's size (8 bytes), the CBOR, the bytes.
    const std::uint64_t cbor_size = payload.size();
    auto put = [&](const void* data, std::size_t size) {
      for (std::size_t written = 0; written < size;) {
        const ssize_t n = write(result_fd, static_cast<const char*>(data) + written, size - written);
        if (n <= 0) _exit(3);
        written += static_cast<std::size_t>(n);
      }
    };
    put(&cbor_size, sizeof cbor_size);
    put(payload.data(), payload.size());
    put(bytes.data(), bytes.size());
    _exit(code);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  forget_child(child);
  auto slurp = [](int fd) {
    std::string text;
    struct stat file {};
    if (fstat(fd, &file) == 0 && file.st_size > 0) text.reserve(static_cast<std::size_t>(file.st_size));
    lseek(fd, 0, SEEK_SET);
    char buffer[65536];
    for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
    close(fd);
    return text;
  };
  std::string payload = slurp(result_fd);
  const std::string log = slurp(log_fd);
#ifdef PIPEGRID_SANITIZE
  // A sanitizer report in the child goes to its captured stderr: show it.
  if (WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) > 3)) std::fputs(log.c_str(), stderr);
#endif
  if (payload.empty()) {
    // SimGrid died (xbt_die / abort): quote its critical message, and the
    // route being checked if it died computing one (check_routes).
    std::string reason, route;
    for (std::size_t at = 0; at < log.size();) {
      std::size_t end = log.find('\n', at);
      if (end == std::string::npos) end = log.size();
      const std::string line = log.substr(at, end - at);
      constexpr std::string_view kRouteCheck = "pipegrid-route-check: ";
      if (line.rfind(kRouteCheck, 0) == 0) route = line.substr(kRouteCheck.size());
      if (reason.empty() && (line.find("CRITICAL") != std::string::npos || line.find("rror") != std::string::npos)) reason = line;
      at = end + 1;
    }
    if (reason.empty()) reason = WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status)) : "no result";
    if (auto cut = reason.find("] "); cut != std::string::npos && reason.front() == '[') reason = reason.substr(cut + 2);
    throw InputError(fmt::format("{}: SimGrid rejected it: {}{}", printable(what), printable(reason),
                                 route.empty() ? "" : fmt::format(" (while finding the route {})", printable(route))));
  }
  std::uint64_t cbor_size = 0;
  if (payload.size() >= sizeof cbor_size) std::memcpy(&cbor_size, payload.data(), sizeof cbor_size);
  if (payload.size() < sizeof cbor_size || payload.size() - sizeof cbor_size < cbor_size)
    throw std::runtime_error(fmt::format("{}: a result of {} bytes", printable(what), payload.size()));
  nlohmann::json result = nlohmann::json::from_cbor(payload.begin() + sizeof cbor_size, payload.begin() + static_cast<std::ptrdiff_t>(sizeof cbor_size + cbor_size));
  if (result.contains("input_error")) throw InputError(result["input_error"].get<std::string>());
  if (result.contains("error")) throw std::runtime_error(result["error"].get<std::string>());
  return {std::move(result["ok"]), std::move(payload), sizeof cbor_size + cbor_size};
}

}  // namespace

SimulationResult simulate(const SimulationRequest& request) {
  check_platform_file(request.platform_file);
  check_one_device_per_host(request.hosts, "partition");
  const ChildResult result = run_in_child(request.platform_file, [&](sg::Engine& engine, std::string& bytes) {
    PlatformSummary platform = load_platform(engine, request.platform_file, request.network, false);
    give_device_optimizer_steps(platform, request.device_step_bytes_per_weight_byte);
    // Never destroyed: the child exits right after (destroying every
    // action's communication would cost a tenth of the run).
    Simulation& simulation = *new Simulation(request, platform);
    check_routes(request.platform_file, simulation.needed_routes(), request.network == NetworkModel::SimGrid);
    simulation.start();
    ProgressHook progress(simulation);
    engine.run();
    progress.finish();
    bytes = records_to_bytes(simulation.sorted_records());
    return nlohmann::json{{"platform", summary_to_json(platform)}, {"hosts", simulation.hosts()},
                          {"collective_communications", simulation.collective_communications()},
                          {"all_to_alls", simulation.all_to_all_sums()}};
  }, "hold-simulation");
  SimulationResult out;
  out.platform = summary_from_json(result.json.at("platform"), request.platform_file);
  out.timeline = timeline_from_child(result.json.at("hosts"), result.bytes());
  out.collective_communications = result.json.at("collective_communications").get<std::size_t>();
  const nlohmann::json& a2a = result.json.at("all_to_alls");
  out.overlapped_pair_span_s = a2a.at("pair_span_s").get<double>();
  out.overlapped_pair_serial_s = a2a.at("pair_serial_s").get<double>();
  out.all_to_all_s = a2a.at("all_to_all_s").get<double>();
  out.all_to_all_exposed_s = a2a.at("all_to_all_exposed_s").get<double>();
  return out;
}

void set_progress(bool enabled) { progress_enabled = enabled; }

void run_next_engine_in_process(void (*second_engine)()) {
  in_process = InProcess::Armed;
  on_second_engine = second_engine;
}

PlatformSummary read_platform(const std::string& platform_file, PlatformRoutes routes) {
  check_platform_file(platform_file);
  return summary_from_json(run_in_child(platform_file,
                                        [&](sg::Engine& engine, std::string&) {
                                          return summary_to_json(load_platform(engine, platform_file, NetworkModel::Analytic,
                                                                               routes == PlatformRoutes::All));
                                        }).json,
                           platform_file);
}

RouteTable read_routes(const std::string& platform_file, const std::vector<std::pair<std::size_t, std::size_t>>& pairs) {
  check_platform_file(platform_file);
  const ChildResult result = run_in_child(platform_file, [&](sg::Engine& engine, std::string&) {
    const PlatformSummary summary = load_platform(engine, platform_file, NetworkModel::Analytic, false);
    std::vector<sg::Host*> hosts;
    for (const HostInfo& host : summary.hosts) hosts.push_back(sg::Host::by_name(host.name));
    std::vector<LinkInfo> links;
    std::map<std::string, int> link_index;
    nlohmann::json routes = nlohmann::json::array();
    for (const auto& [a, b] : pairs) {
      if (a >= hosts.size() || b >= hosts.size())
        throw InputError(fmt::format("{}: a route from host {} to host {} is needed, but the platform has {} hosts",
                                     printable(platform_file), a, b, hosts.size()));
      const HostRoute route = route_between(hosts[a], hosts[b], links, link_index);
      // A route of no link and no latency is none.
      const bool found = route.found && (!route.links.empty() || route.latency_s > 0);
      routes.push_back({{"found", found}, {"latency_s", route.latency_s}, {"links", route.links}});
    }
    return nlohmann::json{{"links", links_to_json(links)}, {"routes", routes}};
  });
  RouteTable table;
  table.links = links_from_json(result.json.at("links"));
  for (const auto& route : result.json.at("routes"))
    table.routes.push_back({route.at("found").get<bool>(), route.at("latency_s").get<double>(), route.at("links").get<std::vector<int>>()});
  return table;
}

namespace internal {

void check_platform(const std::string& file) { sim::check_platform_file(file); }

PlatformSummary load_platform_into(sg::Engine& engine, const std::string& file, NetworkModel network) {
  return sim::load_platform(engine, file, network, false);
}

EngineOutput run_engine(const std::string& what, const std::function<nlohmann::json(sg::Engine&, std::string&)>& work) {
  ChildResult result = sim::run_in_child(what, work);
  return {std::move(result.json), std::string(result.bytes())};
}

}  // namespace internal

}  // namespace pipegrid::sim
