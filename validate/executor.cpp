// The real executor (see executor.hpp) and the in-process transport.

#include "validate/executor.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <condition_variable>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/metrics.hpp"
#include "validate/detail/backend.hpp"
#include "validate/detail/model.hpp"
#include "validate/detail/rendezvous.hpp"
#include "validate/detail/run_part.hpp"
#include "validate/transport.hpp"

namespace pipegrid::validate {

double detail::monotonic_seconds() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

namespace {

/** CLOCK_MONOTONIC in seconds (a CPU Stamp). */
double steady_seconds() { return detail::monotonic_seconds(); }

class InProcessTransport : public Transport {
 public:
  explicit InProcessTransport(int devices) : mailboxes_(devices) {}

  CopyInterval send(int to, const MessageKey& key, const at::Tensor& tensor) override {
    CopyInterval interval;
    interval.start.seconds = steady_seconds();
    torch::Tensor copy = tensor.detach().clone();
    interval.end.seconds = steady_seconds();
    mailboxes_.post(to, key, std::move(copy));
    return interval;
  }

  at::Tensor receive(int device, const MessageKey& key) override { return mailboxes_.take(device, key); }

  CopyInterval all_reduce(int, const AllReduceKey& key, int rank, int participants, const std::vector<at::Tensor>& tensors) override {
    CopyInterval interval;
    interval.start.seconds = steady_seconds();
    std::vector<torch::Tensor> flat;
    for (const torch::Tensor& tensor : tensors) flat.push_back(tensor.detach().reshape({-1}));
    const auto contributions = rendezvous_.join(key, rank, participants, torch::cat(flat));
    // Every participant adds the same tensors in the same order.
    torch::Tensor sum = (*contributions)[0].clone();
    for (int r = 1; r < participants; ++r) sum.add_((*contributions)[r]);
    std::int64_t offset = 0;
    {
      torch::NoGradGuard no_grad;
      for (const torch::Tensor& tensor : tensors) {
        tensor.copy_(sum.narrow(0, offset, tensor.numel()).view(tensor.sizes()));
        offset += tensor.numel();
      }
    }
    rendezvous_.leave(key);
    interval.end.seconds = steady_seconds();
    return interval;
  }

  void abort(const std::string& reason) override {
    mailboxes_.abort(reason);
    rendezvous_.abort(reason);
  }

 private:
  detail::Mailboxes<torch::Tensor> mailboxes_;
  detail::Rendezvous<torch::Tensor> rendezvous_;
};

/** CPU worker threads: device d is thread d with one intra-op thread; time
 *  is the steady clock. */
class CpuBackend : public detail::Backend {
 public:
  explicit CpuBackend(int devices) : devices_(devices) {}
  std::string host_name(int device) const override { return fmt::format("cpu{}", device); }
  torch::Device torch_device(int) const override { return torch::Device(torch::kCPU); }
  void enter_worker(int) override { at::set_num_threads(1); }
  void start_clock() override { epoch_ = steady_seconds(); }
  Stamp stamp(int) override { return {steady_seconds(), nullptr}; }
  void synchronize() override {}
  double seconds(const Stamp& stamp) const override { return stamp.seconds - epoch_; }
  std::unique_ptr<Transport> make_transport() override { return make_in_process_transport(devices_); }
  std::optional<std::int64_t> peak_memory_bytes(int) const override { return std::nullopt; }
  std::optional<std::int64_t> memory_capacity_bytes(int) const override { return std::nullopt; }

 private:
  int devices_;
  double epoch_ = 0;
};

std::vector<float> to_floats(const torch::Tensor& tensor) {
  const torch::Tensor values = tensor.detach().to(torch::kCPU, torch::kFloat32).contiguous().reshape({-1});
  return std::vector<float>(values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
}

using ItemId = std::pair<int, int>;  // (micro-batch, mini-batch)

/** An update after an action: with the all-reduce it follows, if any. */
struct UpdatePoint {
  const AllReduce* all_reduce = nullptr;
  int rank = 0;  ///< this device's place in the all-reduce's ring
};

/** What the weight rule means on one device, read off the Program. */
struct DevicePlan {
  /// (stream, action index) -> the update, of that action's stage, after it
  std::map<std::pair<int, std::size_t>, UpdatePoint> updates;
  // The rest only for the versioned rules and Prediction, whose devices hold one stage each (checked).
  std::map<ItemId, int> version;    ///< versioned rules: the weight version (updates done) F and B of an item use
  std::map<ItemId, int> staleness;  ///< Prediction: updates between an item's F and its B
  std::map<int, int> references;    ///< versioned rules: items of this device that use each version
};

bool versioned(WeightRule rule) { return rule == WeightRule::Stashing || rule == WeightRule::TwoBW || rule == WeightRule::VerticalSync; }

/** Update points and versions of every device (see WeightRule). */
std::vector<DevicePlan> plan_weights(const ExecutionRequest& request, const std::map<Action, int>& device_of) {
  const Program& program = request.program;
  std::vector<DevicePlan> plans(program.devices.size());
  std::map<Action, UpdatePoint> ready_of;
  for (const AllReduce& all_reduce : program.all_reduces)
    for (std::size_t p = 0; p < all_reduce.ready.size(); ++p) ready_of[all_reduce.ready[p]] = {&all_reduce, static_cast<int>(p)};
  std::vector<std::map<ItemId, int>> own_version(program.devices.size());
  for (std::size_t d = 0; d < program.devices.size(); ++d) {
    const DeviceProgram& device = program.devices[d];
    DevicePlan& plan = plans[d];
    bool replicated = false;
    for (const Stream& stream : device.streams)
      for (const Action& action : stream.actions) replicated = replicated || ready_of.count(action) > 0;
    // (stage, mini-batch) -> (stream, index) of the stage's last B or W of the mini-batch
    std::map<std::pair<int, int>, std::pair<int, std::size_t>> last_backward;
    int backwards = 0;
    for (std::size_t s = 0; s < device.streams.size(); ++s) {
      const auto& actions = device.streams[s].actions;
      for (std::size_t i = 0; i < actions.size(); ++i) {
        const Action& action = actions[i];
        if (action.kind != ActionKind::Backward && action.kind != ActionKind::BackwardWeight) continue;
        ++backwards;
        const std::pair<int, std::size_t> at{static_cast<int>(s), i};
        if (replicated) {
          if (auto found = ready_of.find(action); found != ready_of.end()) plan.updates[at] = found->second;
        } else if (request.weight_rule == WeightRule::Flush) {
          last_backward[{action.stage, action.mini_batch}] = at;
        } else if (request.weight_rule != WeightRule::TwoBW || backwards % request.update_interval == 0) {
          plan.updates[at] = {};
        }
      }
    }
    for (const auto& [stage_and_mini_batch, at] : last_backward) plan.updates[at] = {};
    if (request.weight_rule == WeightRule::Flush) continue;
    // One stream (checked): program order is the stream's order.
    const auto& actions = device.streams.at(0).actions;
    int updates = 0;
    std::map<ItemId, std::size_t> forward_at;
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const ItemId id{actions[i].micro_batch, actions[i].mini_batch};
      if (actions[i].kind == ActionKind::Forward) {
        own_version[d][id] = updates;
        forward_at[id] = i;
      } else if (actions[i].kind == ActionKind::Backward) {
        plan.staleness[id] = updates - own_version[d].at(id);
      }
      if (plan.updates.count({0, i})) ++updates;
    }
  }
  if (!versioned(request.weight_rule)) return plans;
  for (std::size_t d = 0; d < program.devices.size(); ++d) {
    DevicePlan& plan = plans[d];
    for (const auto& [id, own] : own_version[d]) {
      int version = own;
      if (request.weight_rule == WeightRule::VerticalSync)
        version = own_version[device_of.at({ActionKind::Forward, 0, id.first, id.second})].at(id);
      plan.version[id] = version;
      ++plan.references[version];
    }
  }
  return plans;
}

/** What a forward leaves for its backward. */
struct Stash {
  torch::Tensor input;   ///< the stage's input (requires grad past stage 0)
  torch::Tensor output;  ///< the stage's output, or the scaled loss on the last stage; undefined until recomputed
  torch::Tensor output_gradient;  ///< split backward: the gradient I ran with (its graph retained), for its W
  /// Split backward: every use of the stage's parameters in its forward
  /// (detail::WeightTape) and, after I, the gradient of each use's output,
  /// so that W runs each operator's weight gradient alone.
  std::vector<detail::WeightUse> weight_uses;
  std::vector<torch::Tensor> weight_use_gradients;
};

/** Ends of the actions that other actions wait for (the Program's extra
 *  dependencies), shared by every worker. */
class CompletionBoard {
 public:
  void mark(const Action& action) {
    {
      std::lock_guard lock(mutex_);
      ended_.insert(action);
    }
    changed_.notify_all();
  }
  void wait(const Action& action) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return aborted_ || ended_.count(action) > 0; });
    if (aborted_) throw std::runtime_error(reason_);
  }
  void abort(const std::string& reason) {
    {
      std::lock_guard lock(mutex_);
      aborted_ = true;
      reason_ = reason;
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::set<Action> ended_;
  bool aborted_ = false;
  std::string reason_;
};

/** A timeline record whose times are still stamps (GPU events are read
 *  after the run). */
struct StampedRecord {
  TimelineRecord record;
  Stamp start, end;
};

struct StampedStep {
  int mini_batch = 0;
  Stamp start, end;
};

struct WorkerOutput {
  std::vector<StampedRecord> records;
  std::vector<StampedStep> steps;
};

/** One stage held by a device: its weights, stashes and update state. */
struct StageState {
  int stage = 0;
  int first_layer = 0, last_layer = 0;
  std::vector<torch::Tensor> parameters;
  std::set<ItemId> recomputed;      ///< items whose R comes later: their F keeps no graph
  std::map<ItemId, Stash> stashes;  ///< guarded by DeviceState::mutex (the streams of one device share them)
  // Touched only by the stream that runs the backwards and updates:
  int updates = 0;                                   ///< updates done (the latest version's index)
  int accumulated = 0;                               ///< backwards (B or W) since the last update
  std::map<int, std::vector<torch::Tensor>> versions;  ///< older versions still referenced
  std::vector<torch::Tensor> last_direction;         ///< Prediction: the gradient of the latest update
  ModelState state;
};

/** A device: the stages it holds (the Program's order) and what its streams share. */
struct DeviceState {
  int device = 0;
  detail::LayerList* layers = nullptr;
  std::vector<StageState> stages;
  DevicePlan plan;
  std::mutex mutex;  ///< guards the stages' stashes
  StageState& of(int stage) {
    for (StageState& held : stages)
      if (held.stage == stage) return held;
    throw std::logic_error(fmt::format("executor: device {} does not hold stage {}", device, stage));
  }
};

struct RunShared {
  const ExecutionRequest* request = nullptr;
  std::map<Action, int> device_of;
  std::map<Action, std::vector<Action>> waits_for;  ///< extra dependencies: after -> befores
  std::set<Action> awaited;                         ///< actions some other action waits for
  Transport* transport = nullptr;
  detail::Backend* backend = nullptr;
  CompletionBoard board;
  /// Hand-offs between two stages of one device: the tensor itself (detached),
  /// no copy and no record.
  std::unique_ptr<detail::Mailboxes<torch::Tensor>> local;
  /// Every micro-batch's data, on the devices that use it, made before the
  /// clock starts.
  std::map<ItemId, detail::Batch> data;
};

std::vector<torch::Tensor> clone_all(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> copy;
  for (const torch::Tensor& tensor : tensors) copy.push_back(tensor.detach().clone());
  return copy;
}

/** Overwrites the parameters' values through Tensor::data(), which shares
 *  storage but not autograd's version counter: graphs of items in flight
 *  stay valid and read whatever values are swapped in. */
void assign(const std::vector<torch::Tensor>& parameters, const std::vector<torch::Tensor>& values) {
  torch::NoGradGuard no_grad;
  for (std::size_t p = 0; p < parameters.size(); ++p) parameters[p].data().copy_(values[p]);
}

WorkerOutput run_stream(RunShared& shared, DeviceState& device, int stream_index) {
  detail::Backend& backend = *shared.backend;
  backend.enter_worker(device.device);
  const auto now = [&] { return backend.stamp(device.device); };
  const ExecutionRequest& request = *shared.request;
  const Program& program = request.program;
  const int last_stage = program.num_stages - 1;
  const auto& actions = program.devices[device.device].streams.at(stream_index).actions;
  const double scale = 1.0 / program.micro_batches;
  const WeightRule rule = request.weight_rule;

  WorkerOutput output;
  const std::string host = backend.host_name(device.device);
  const auto record = [&](const std::string& action, const Action& a, const Stamp& start, const Stamp& end, double bytes,
                          const std::string& peer) {
    output.records.push_back({{host, stream_index, a.stage, action, a.micro_batch, a.mini_batch, 0, 0, bytes, peer, 0}, start, end});
  };
  // The device that runs `stage`'s work on item `a` (F, B, I, W and R of an
  // item run on one device).
  const auto device_running = [&](int stage, const Action& a) {
    return shared.device_of.at({ActionKind::Forward, stage, a.micro_batch, a.mini_batch});
  };
  const auto send = [&](MessageKey::Kind kind, int to_stage, const Action& a, const torch::Tensor& tensor) {
    const int to = device_running(to_stage, a);
    const MessageKey key{kind, to_stage, a.micro_batch, a.mini_batch};
    if (to == device.device) {
      shared.local->post(to, key, tensor.detach());
      return;
    }
    const CopyInterval copy = shared.transport->send(to, key, tensor);
    record(kind == MessageKey::Kind::Activation ? "SEND_F" : "SEND_B", a, copy.start, copy.end,
           static_cast<double>(tensor.numel() * tensor.element_size()), backend.host_name(to));
  };
  const auto receive = [&](MessageKey::Kind kind, int from_stage, const Action& a) {
    const MessageKey key{kind, a.stage, a.micro_batch, a.mini_batch};
    if (device_running(from_stage, a) == device.device) return shared.local->take(device.device, key);
    return shared.transport->receive(device.device, key);
  };
  // A Program with split backwards (I and W) records its weight uses.
  bool split_backward = false;
  for (const Stream& stream : program.devices[device.device].streams)
    for (const Action& action : stream.actions) split_backward = split_backward || action.kind == ActionKind::BackwardInput;
  const auto stage_forward = [&](StageState& stage, const torch::Tensor& input, const Action& a,
                                 std::vector<detail::WeightUse>& weight_uses) {
    torch::Tensor out;
    if (split_backward) {
      detail::WeightTape tape;
      out = detail::run_layers(*device.layers, stage.first_layer, stage.last_layer, input);
      weight_uses = std::move(tape.uses);
    } else {
      out = detail::run_layers(*device.layers, stage.first_layer, stage.last_layer, input);
    }
    if (stage.stage == last_stage)
      out = detail::loss_of(request.model, out, shared.data.at({a.micro_batch, a.mini_batch}).target) * scale;
    return out;
  };
  // Runs `work` with the parameters holding `values` (the latest weights
  // when empty), then puts the latest weights back.
  const auto with_weights = [&](StageState& stage, const std::vector<torch::Tensor>& values, const auto& work) {
    if (values.empty()) return work();
    const std::vector<torch::Tensor> latest = clone_all(stage.parameters);
    assign(stage.parameters, values);
    work();
    assign(stage.parameters, latest);
  };
  // The weights an item's F and B run with (empty: the latest ones).
  const auto stashed_weights = [&](StageState& stage, const ItemId& id) -> std::vector<torch::Tensor> {
    if (!versioned(rule)) return {};
    const int version = device.plan.version.at(id);
    if (version == stage.updates) return {};
    if (version > stage.updates)
      throw std::runtime_error(fmt::format("stage {} needs weight version {} for mini-batch {} but has made only {} updates",
                                           stage.stage, version, id.second, stage.updates));
    return stage.versions.at(version);
  };
  const auto gradients_of = [](const std::vector<torch::Tensor>& parameters) {
    std::vector<torch::Tensor> list;
    for (const torch::Tensor& parameter : parameters) {
      torch::Tensor& grad = parameter.mutable_grad();
      if (!grad.defined()) grad = torch::zeros_like(parameter);
      list.push_back(grad);
    }
    return list;
  };
  const auto update = [&](StageState& stage, const Action& a, const UpdatePoint& point) {
    int participants = 1;
    if (point.all_reduce != nullptr) {
      const AllReduce& all_reduce = *point.all_reduce;
      participants = static_cast<int>(all_reduce.ready.size());
      const int next = shared.device_of.at(all_reduce.ready[(point.rank + 1) % participants]);
      // Whole stage, or each layer with parameters in reverse layer order.
      std::vector<std::pair<int, std::vector<torch::Tensor>>> jobs;
      if (all_reduce.per_layer) {
        for (int layer = stage.last_layer - 1; layer >= stage.first_layer; --layer) {
          const std::vector<torch::Tensor> own = detail::parameters_of(*device.layers, layer, layer + 1);
          if (!own.empty()) jobs.push_back({layer - stage.first_layer, gradients_of(own)});
        }
      } else {
        jobs.push_back({-1, gradients_of(stage.parameters)});
      }
      for (const auto& [layer, grads] : jobs) {
        double bytes = 0;
        for (const torch::Tensor& grad : grads) bytes += static_cast<double>(grad.numel() * grad.element_size());
        const CopyInterval interval =
            shared.transport->all_reduce(device.device, {stage.stage, all_reduce.round, layer}, point.rank, participants, grads);
        output.records.push_back({{host, 0, stage.stage, "ALLREDUCE", layer, all_reduce.round, 0, 0,
                                   2.0 * (participants - 1) * bytes / participants, backend.host_name(next), 0},
                                  interval.start, interval.end});
      }
    }
    const Stamp start = now();
    std::vector<torch::Tensor> grads = gradients_of(stage.parameters);
    {
      torch::NoGradGuard no_grad;
      if (rule != WeightRule::Flush) {
        const double divisor = static_cast<double>(stage.accumulated) * participants;
        for (torch::Tensor& grad : grads) grad.div_(divisor);
      }
      // Keep the latest version while an item in flight still uses it.
      if (versioned(rule) && device.plan.references.count(stage.updates)) stage.versions[stage.updates] = clone_all(stage.parameters);
      if (request.keep_state) {
        stage.state.gradients.clear();
        for (const torch::Tensor& grad : grads) stage.state.gradients.push_back(to_floats(grad));
      }
      if (rule == WeightRule::Prediction) stage.last_direction = clone_all(grads);
      for (std::size_t p = 0; p < stage.parameters.size(); ++p) {
        stage.parameters[p].data().add_(grads[p], -request.learning_rate);
        grads[p].zero_();
      }
    }
    ++stage.updates;
    stage.accumulated = 0;
    const Stamp end = now();
    output.steps.push_back({a.mini_batch, start, end});
    record(kOptimizerStepAction, a, start, end, 0, "");
  };
  // Moves item `id`'s stash out of `stage` (its last use), or leaves it (an I: its W comes later).
  const auto stash_of = [&](StageState& stage, const ItemId& id, bool take) {
    std::lock_guard lock(device.mutex);
    auto found = stage.stashes.find(id);
    if (found == stage.stashes.end())
      throw std::logic_error(fmt::format("executor: stage {} has no stash of micro-batch {} mini-batch {}", stage.stage, id.first,
                                         id.second));
    if (!take) return found->second;
    Stash stash = std::move(found->second);
    stage.stashes.erase(found);
    return stash;
  };
  // A versioned rule's item is done with its weight version.
  const auto release_version = [&](StageState& stage, const ItemId& id) {
    if (!versioned(rule)) return;
    const int version = device.plan.version.at(id);
    if (--device.plan.references.at(version) == 0) {
      device.plan.references.erase(version);
      stage.versions.erase(version);
    }
  };

  // An overlapped F&B pair (Stream::overlapped) runs as its two actions one
  // after the other, in program order: the executor has no real overlap.
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    StageState& stage = device.of(a.stage);
    const ItemId id{a.micro_batch, a.mini_batch};
    if (auto waits = shared.waits_for.find(a); waits != shared.waits_for.end())
      for (const Action& before : waits->second) shared.board.wait(before);
    if (a.kind == ActionKind::Forward) {
      torch::Tensor input;
      if (a.stage == 0) {
        input = shared.data.at(id).input;
      } else {
        input = receive(MessageKey::Kind::Activation, a.stage - 1, a);
        if (input.is_floating_point()) input.requires_grad_(true);
      }
      const Stamp start = now();
      std::vector<torch::Tensor> weights = stashed_weights(stage, id);
      if (rule == WeightRule::Prediction && device.plan.staleness.at(id) > 0 && !stage.last_direction.empty()) {
        torch::NoGradGuard no_grad;
        const double step = request.learning_rate * device.plan.staleness.at(id);
        for (std::size_t p = 0; p < stage.parameters.size(); ++p)
          weights.push_back(stage.parameters[p].detach() - step * stage.last_direction[p]);
      }
      torch::Tensor out;
      with_weights(stage, weights, [&] {
        Stash stash{input, {}, {}, {}, {}};
        if (stage.recomputed.count(id)) {
          torch::NoGradGuard no_grad;
          out = detail::run_layers(*device.layers, stage.first_layer, stage.last_layer, input);
        } else {
          out = stage_forward(stage, input, a, stash.weight_uses);
          stash.output = out;
        }
        std::lock_guard lock(device.mutex);
        stage.stashes[id] = std::move(stash);
      });
      record("F", a, start, now(), 0, "");
      if (a.stage != last_stage) send(MessageKey::Kind::Activation, a.stage + 1, a, out);
    } else if (a.kind == ActionKind::Recompute) {
      const Stamp start = now();
      with_weights(stage, stashed_weights(stage, id), [&] {
        std::lock_guard lock(device.mutex);
        Stash& stash = stage.stashes.at(id);
        stash.output = stage_forward(stage, stash.input, a, stash.weight_uses);
      });
      record("R", a, start, now(), 0, "");
    } else if (a.kind == ActionKind::Backward) {
      torch::Tensor gradient;
      if (a.stage != last_stage) gradient = receive(MessageKey::Kind::Gradient, a.stage + 1, a);
      const Stamp start = now();
      Stash stash = stash_of(stage, id, true);
      with_weights(stage, stashed_weights(stage, id), [&] {
        if (a.stage == last_stage)
          stash.output.backward();
        else
          stash.output.backward(gradient);
      });
      ++stage.accumulated;
      release_version(stage, id);
      record("B", a, start, now(), 0, "");
      if (a.stage != 0) send(MessageKey::Kind::Gradient, a.stage - 1, a, stash.input.grad());
    } else if (a.kind == ActionKind::BackwardInput) {
      // The gradient of the stage input and of every weight use's output
      // (the chain passes through them); the graph is kept for the W.
      // (Flush only, checked: the latest weights.)
      torch::Tensor gradient;
      if (a.stage != last_stage) gradient = receive(MessageKey::Kind::Gradient, a.stage + 1, a);
      const Stamp start = now();
      torch::Tensor input_gradient;
      {
        Stash stash = stash_of(stage, id, false);  // shares the tensors with the stored stash
        if (!gradient.defined()) gradient = torch::ones_like(stash.output);
        // Wanted: the input's gradient (past stage 0) and each weight
        // use's output's, in one pass.
        std::vector<torch::Tensor> wanted;
        const bool wants_input = a.stage != 0 && stash.input.requires_grad();
        if (wants_input) wanted.push_back(stash.input);
        for (const detail::WeightUse& use : stash.weight_uses) wanted.push_back(use.output);
        std::vector<torch::Tensor> gradients;
        if (!wanted.empty() && stash.output.requires_grad())
          gradients = torch::autograd::grad({stash.output}, wanted, {gradient}, /*retain_graph=*/true, /*create_graph=*/false,
                                            /*allow_unused=*/true);
        if (wants_input && !gradients.empty()) input_gradient = gradients.front();
        if (!gradients.empty() && wants_input) gradients.erase(gradients.begin());
        std::lock_guard lock(device.mutex);
        Stash& stored = stage.stashes.at(id);
        stored.output_gradient = gradient;
        stored.weight_use_gradients = std::move(gradients);
      }
      record("I", a, start, now(), 0, "");
      if (a.stage != 0) send(MessageKey::Kind::Gradient, a.stage - 1, a, input_gradient);
    } else {
      // W: each weight use's parameter gradients from its output's gradient
      // (the graph its I retained; autograd walks only that operator),
      // added to .grad as a B adds them; then the graph and the stash are
      // freed.
      const Stamp start = now();
      {
        Stash stash = stash_of(stage, id, true);
        if (!stash.output_gradient.defined())
          throw std::logic_error(fmt::format("executor: {} runs before its I", to_string(a)));
        for (std::size_t u = 0; u < stash.weight_uses.size() && u < stash.weight_use_gradients.size(); ++u) {
          std::vector<torch::Tensor> trainable;
          for (const torch::Tensor& parameter : stash.weight_uses[u].parameters)
            if (parameter.requires_grad()) trainable.push_back(parameter);
          if (trainable.empty() || !stash.weight_use_gradients[u].defined()) continue;
          // The graph is kept: an operator's backward node may be shared
          // (two uses of one module); the stash's release frees it.
          const std::vector<torch::Tensor> grads =
              torch::autograd::grad({stash.weight_uses[u].output}, trainable, {stash.weight_use_gradients[u]},
                                    /*retain_graph=*/true, /*create_graph=*/false, /*allow_unused=*/true);
          torch::NoGradGuard no_grad;
          for (std::size_t p = 0; p < trainable.size(); ++p) {
            if (!grads[p].defined()) continue;
            torch::Tensor& grad = trainable[p].mutable_grad();
            if (grad.defined())
              grad.add_(grads[p]);
            else
              grad = grads[p];
          }
        }
      }
      ++stage.accumulated;
      record("W", a, start, now(), 0, "");
    }
    if (is_backward(a.kind) && a.kind != ActionKind::BackwardInput)
      if (auto point = device.plan.updates.find({stream_index, i}); point != device.plan.updates.end())
        update(stage, a, point->second);
    if (shared.awaited.count(a)) shared.board.mark(a);
  }
  return output;
}

void check_request(const ExecutionRequest& request, int devices) {
  const Program& program = request.program;
  validate_program(program);
  if (static_cast<int>(request.stages.size()) != program.num_stages)
    throw InputError(fmt::format("executor: {} layer ranges for a Program of {} stages", request.stages.size(), program.num_stages));
  const int layers = num_layers(request.model);
  int next = 0;
  for (const auto& [first, last] : request.stages) {
    if (first != next || last <= first || last > layers)
      throw InputError(fmt::format("executor: stage layer ranges must be contiguous, non-empty and cover the model's {} layers", layers));
    next = last;
  }
  if (next != layers) throw InputError(fmt::format("executor: the stages cover {} of the model's {} layers", next, layers));
  if (request.device.kind != "cpu" && !detail::cuda_backend_built())
    throw InputError(fmt::format("--device {}: this build has no CUDA LibTorch; it runs on cpu or cpu:N only (build on a "
                                 "machine with a CUDA LibTorch: docs/validation.md)",
                                 request.device.kind));
  if (request.device.count != 0 && request.device.count != devices)
    throw InputError(fmt::format("--device {}:{}: the Program has {} devices (one per stage replica); expected {}:{}",
                                 request.device.kind, request.device.count, devices, request.device.kind, devices));
  if (request.copy_through_host && request.device.kind == "cpu")
    throw InputError("--copy-through host: only for cuda devices (CPU workers share one memory)");
  std::map<int, std::set<int>> replicas;  // stage -> devices
  for (int d = 0; d < devices; ++d)
    for (const int stage : program.devices[d].stages) replicas[stage].insert(d);
  const std::map<Action, int> device_of = detail::device_of_actions(program);
  for (const AllReduce& all_reduce : program.all_reduces) {
    std::set<int> participants;
    for (const Action& ready : all_reduce.ready) participants.insert(device_of.at(ready));
    if (participants != replicas[all_reduce.stage])
      throw InputError(fmt::format("executor: the all-reduce of stage {} round {} joins {} of the stage's {} replicas; every "
                                   "replica must take part in every update, or they would drift apart (flushed schedules: give "
                                   "at least as many micro-batches as replicas; the others: mini-batches a multiple of the replicas)",
                                   all_reduce.stage, all_reduce.round, participants.size(), replicas[all_reduce.stage].size()));
    for (const Action& released : all_reduce.release)
      if (!participants.count(device_of.at(released)))
        throw InputError(fmt::format("executor: the all-reduce of stage {} round {} releases {} on a device that takes no part; "
                                     "the executor runs an all-reduce inline on its participants only",
                                     all_reduce.stage, all_reduce.round, to_string(released)));
  }
  if (request.weight_rule == WeightRule::VerticalSync)
    for (const auto& [stage, devices_of_stage] : replicas)
      if (devices_of_stage.size() != replicas[0].size())
        throw InputError(fmt::format(
            "--vertical-sync: stage {} has {} replicas and the input stage {}; every stage takes the input stage's weight "
            "version, which counts the input stage's updates, and a stage with other replicas counts other updates "
            "(give every stage the same number of replicas)",
            stage, devices_of_stage.size(), replicas[0].size()));
  for (const auto& [stage, devices_of_stage] : replicas) {
    if (devices_of_stage.size() < 2) continue;
    bool any = false;
    for (const AllReduce& all_reduce : program.all_reduces) any = any || all_reduce.stage == stage;
    if (!any && program.mini_batches > 1)
      throw InputError(fmt::format("executor: stage {} has {} replicas but the Program never all-reduces them", stage,
                                   devices_of_stage.size()));
  }
  for (const DeviceProgram& device : program.devices) {
    // Versions and predictions are per device (PipeDream's one stage per device, whole backwards).
    if (request.weight_rule != WeightRule::Flush) {
      if (device.stages.size() != 1)
        throw InputError(fmt::format("executor: weight rule {} runs one stage per device; a device holds stages {}",
                                     to_string(request.weight_rule), fmt::join(device.stages, ",")));
      for (const Stream& stream : device.streams)
        for (const Action& action : stream.actions)
          if (action.kind == ActionKind::BackwardInput || action.kind == ActionKind::BackwardWeight)
            throw InputError(fmt::format("executor: weight rule {} runs whole backwards; {} is a split backward (I/W)",
                                         to_string(request.weight_rule), to_string(action)));
    }
    if (device.streams.size() > 2 || device.streams.empty())
      throw InputError(fmt::format("executor: device of stages {} has {} streams; expected 1, or 2 (fbp-as: forward and backward)",
                                   fmt::join(device.stages, ","), device.streams.size()));
    if (device.streams.size() == 2 && request.device.kind != "cpu")
      throw InputError(fmt::format("--device {}: a Program with two streams per device (fbp-as) runs on cpu devices only (two "
                                   "worker threads share the stage); BaPipe: GPUs do not run a forward and a backward in parallel",
                                   request.device.kind));
    if (device.streams.size() == 2 && request.weight_rule != WeightRule::Flush)
      throw InputError(fmt::format("executor: weight rule {} needs one stream per device (program order decides the versions)",
                                   to_string(request.weight_rule)));
    if (device.streams.size() == 2)
      for (std::size_t s = 0; s < 2; ++s)
        for (const Action& action : device.streams[s].actions)
          if ((action.kind == ActionKind::Forward) != (s == 0))
            throw InputError(fmt::format("executor: a two-stream device runs forwards on stream 0 and recomputations and backwards "
                                         "on stream 1; found {} on stream {}",
                                         to_string(action), s));
  }
  if (request.weight_rule != WeightRule::Flush && program.micro_batches != 1)
    throw InputError(fmt::format("executor: weight rule {} runs one micro-batch per mini-batch; the Program has {}",
                                 to_string(request.weight_rule), program.micro_batches));
  if (request.weight_rule == WeightRule::TwoBW && request.update_interval < 1)
    throw InputError(fmt::format("--update-interval: expected at least 1, found {}", request.update_interval));
  if (request.micro_batch_size < 1)
    throw InputError(fmt::format("--micro-batch-size: expected at least 1, found {}", request.micro_batch_size));
  if (request.warmup_mini_batches < 0 || request.warmup_mini_batches >= program.mini_batches)
    throw InputError(fmt::format("--warmup {}: expected 0 to {} (fewer than the {} mini-batches run)", request.warmup_mini_batches,
                                 program.mini_batches - 1, program.mini_batches));
  if (!(request.learning_rate > 0)) throw InputError(fmt::format("--learning-rate: expected > 0, found {}", request.learning_rate));
  if (request.launcher.kind != Launcher::Kind::Threads) {
    // One process per device: the ranks share no memory.
    const std::string launcher = to_string(request.launcher.kind);
    for (const Dependency& dependency : program.extra_dependencies)
      if (device_of.at(dependency.before) != device_of.at(dependency.after))
        throw InputError(fmt::format("--launcher {}: the Program makes {} wait for {} on another device; the executor keeps such "
                                     "dependencies within a process (--launcher threads)",
                                     launcher, to_string(dependency.after), to_string(dependency.before)));
    if (request.device.kind == "cuda-partitioned")
      throw InputError(fmt::format("--launcher {}: the partitions of cuda-partitioned:N share one GPU in one process; use "
                                   "--launcher threads, or cuda:N (one GPU per rank)",
                                   launcher));
    if (request.device.kind == "cuda" && !detail::nccl_transport_built())
      throw InputError(fmt::format("--launcher {} --device {}: this build has no NCCL process group (a CUDA LibTorch "
                                   "with NCCL)",
                                   launcher, request.device.kind));
    if (!(request.launcher.timeout_s > 0))
      throw InputError(fmt::format("launcher timeout: expected > 0 seconds, found {}", request.launcher.timeout_s));
  }
}

}  // namespace

std::unique_ptr<Transport> make_in_process_transport(int devices) { return std::make_unique<InProcessTransport>(devices); }

DeviceSpec parse_device_spec(const std::string& text) {
  DeviceSpec spec;
  const auto colon = text.find(':');
  spec.kind = text.substr(0, colon);
  bool ok = spec.kind == "cpu" || spec.kind == "cuda" || spec.kind == "cuda-partitioned";
  if (ok && colon != std::string::npos) {
    const std::string count = text.substr(colon + 1);
    ok = !count.empty() && count.size() < 6 && std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (ok) spec.count = std::stoi(count);
    ok = ok && spec.count >= 1;
  }
  if (ok && spec.kind == "cuda-partitioned" && colon == std::string::npos) ok = false;
  if (!ok)
    throw InputError(fmt::format("--device '{}': expected cpu, cpu:N (N worker threads), cuda, cuda:N (one GPU per stage) or "
                                 "cuda-partitioned:N (GPU 0 split into N SM partitions), N >= 1",
                                 text));
  return spec;
}

bool cuda_devices_built() { return detail::cuda_backend_built(); }

Launcher::Kind parse_launcher_kind(const std::string& text) {
  if (text == "threads") return Launcher::Kind::Threads;
  if (text == "processes") return Launcher::Kind::Processes;
  if (text == "env") return Launcher::Kind::Env;
  throw InputError(fmt::format("--launcher '{}': expected threads (one process, a thread per device), processes (one process "
                               "per device on this machine, over c10d) or env (a rank of a job started elsewhere: RANK, "
                               "WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK)",
                               text));
}

std::string to_string(Launcher::Kind kind) {
  switch (kind) {
    case Launcher::Kind::Threads: return "threads";
    case Launcher::Kind::Processes: return "processes";
    case Launcher::Kind::Env: return "env";
  }
  return "unknown";
}

WeightRule weight_rule_of(const ScheduleInfo& info, bool vertical_sync) {
  switch (info.weights) {
    case WeightVersions::Latest: return WeightRule::Flush;
    case WeightVersions::Stashing: return vertical_sync ? WeightRule::VerticalSync : WeightRule::Stashing;
    case WeightVersions::TwoBuffered: return WeightRule::TwoBW;
    case WeightVersions::Predicted: return WeightRule::Prediction;
  }
  return WeightRule::Flush;
}

std::string to_string(WeightRule rule) {
  switch (rule) {
    case WeightRule::Flush: return "flush";
    case WeightRule::Stashing: return "stashing";
    case WeightRule::TwoBW: return "2bw";
    case WeightRule::VerticalSync: return "vertical-sync";
    case WeightRule::Prediction: return "prediction";
  }
  return "unknown";
}

namespace detail {
std::unique_ptr<Backend> make_cpu_backend(int devices) { return std::make_unique<CpuBackend>(devices); }

#ifndef PIPEGRID_CUDA_BACKEND
// A build against a CPU-only LibTorch (Debian's): the cuda kinds are refused.
bool cuda_backend_built() { return false; }

std::unique_ptr<Backend> make_cuda_backend(const DeviceSpec& spec, int, bool) {
  throw InputError(fmt::format("--device {}: this build has no CUDA LibTorch", spec.kind));
}
#endif
}  // namespace detail

namespace detail {

std::map<Action, int> device_of_actions(const Program& program) {
  std::map<Action, int> device_of;
  for (std::size_t d = 0; d < program.devices.size(); ++d)
    for (const Stream& stream : program.devices[d].streams)
      for (const Action& action : stream.actions) device_of[action] = static_cast<int>(d);
  return device_of;
}

void check_request(const ExecutionRequest& request, int devices) { pipegrid::validate::check_request(request, devices); }

RunPart run_devices(const ExecutionRequest& request, const std::vector<int>& local, Backend& backend, Transport& transport,
                    const std::function<void()>& ready) {
  const Program& program = request.program;
  const int devices = static_cast<int>(program.devices.size());
  RunShared shared;
  shared.request = &request;
  shared.device_of = detail::device_of_actions(program);
  shared.backend = &backend;
  for (const Dependency& dependency : program.extra_dependencies) {
    shared.waits_for[dependency.after].push_back(dependency.before);
    shared.awaited.insert(dependency.before);
  }
  // On a device with two streams, an item's R and B (backward stream) wait
  // for its F (forward stream), which a single stream's order guarantees.
  for (const DeviceProgram& device : program.devices)
    for (std::size_t s = 1; s < device.streams.size(); ++s)
      for (const Action& action : device.streams[s].actions) {
        const Action forward{ActionKind::Forward, action.stage, action.micro_batch, action.mini_batch};
        shared.waits_for[action].push_back(forward);
        shared.awaited.insert(forward);
      }
  const std::vector<DevicePlan> plans = plan_weights(request, shared.device_of);
  const std::set<int> here(local.begin(), local.end());
  // Replica q of every stage uses model copy q, built from the same seed, so
  // the replicas of a stage start from the same weights.
  std::map<int, detail::LayerList> models;
  for (const int d : local) {
    const int q = program.devices.at(d).replica;
    if (!models.count(q)) models[q] = detail::build_layers(request.model, request.seed);
  }
  shared.transport = &transport;
  shared.local = std::make_unique<detail::Mailboxes<torch::Tensor>>(devices);
  std::map<int, std::unique_ptr<DeviceState>> states;
  for (const int d : local) {
    const DeviceProgram& device = program.devices[d];
    auto state = std::make_unique<DeviceState>();
    state->device = d;
    state->layers = &models.at(device.replica);
    for (const int held : device.stages) {
      StageState stage;
      stage.stage = held;
      std::tie(stage.first_layer, stage.last_layer) = request.stages[held];
      for (int layer = stage.first_layer; layer < stage.last_layer; ++layer) (*state->layers)[layer]->to(backend.torch_device(d));
      stage.parameters = detail::parameters_of(*state->layers, stage.first_layer, stage.last_layer);
      for (const Stream& stream : device.streams)
        for (const Action& action : stream.actions)
          if (action.kind == ActionKind::Recompute && action.stage == held) stage.recomputed.insert({action.micro_batch, action.mini_batch});
      state->stages.push_back(std::move(stage));
    }
    state->plan = plans[d];
    states[d] = std::move(state);
  }
  // The inputs where their stage-0 forward runs, the targets where their
  // last-stage forward runs (of the local devices).
  for (int k = 0; k < program.mini_batches; ++k)
    for (int m = 0; m < program.micro_batches; ++m) {
      const int first = shared.device_of.at({ActionKind::Forward, 0, m, k});
      const int last = shared.device_of.at({ActionKind::Forward, program.num_stages - 1, m, k});
      if (!here.count(first) && !here.count(last)) continue;
      detail::Batch batch = detail::make_batch(request.model, request.seed, k, m, request.micro_batch_size);
      detail::Batch& placed = shared.data[{m, k}];
      if (here.count(first)) placed.input = batch.input.to(backend.torch_device(first));
      if (here.count(last)) placed.target = batch.target.to(backend.torch_device(last));
    }

  // One worker thread per device stream.
  std::vector<std::pair<int, int>> workers;  // (device, stream)
  for (const int d : local)
    for (int s = 0; s < static_cast<int>(program.devices[d].streams.size()); ++s) workers.push_back({d, s});
  std::vector<WorkerOutput> outputs(workers.size());
  std::vector<std::exception_ptr> errors(workers.size());
  ready();
  backend.start_clock();
  RunPart part;
  part.origin_s = monotonic_seconds();
  {
    std::vector<std::thread> threads;
    for (std::size_t w = 0; w < workers.size(); ++w) {
      threads.emplace_back([&, w] {
        const auto [d, s] = workers[w];
        try {
          outputs[w] = run_stream(shared, *states.at(d), s);
        } catch (const std::exception& error) {
          errors[w] = std::make_exception_ptr(std::runtime_error(fmt::format("{}: {}", backend.host_name(d), error.what())));
          const std::string reason = fmt::format("{} failed", backend.host_name(d));
          transport.abort(reason);
          shared.local->abort(reason);
          shared.board.abort(reason);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  // Report the first failure that is not just another worker being woken.
  for (const std::exception_ptr& error : errors)
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::runtime_error& failure) {
        if (std::string(failure.what()).find(" failed") == std::string::npos) throw;
      }
    }
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
  transport.finish();
  backend.synchronize();

  for (const int d : local) {
    DevicePart device;
    device.device = d;
    device.host = backend.host_name(d);
    device.peak_memory_bytes = backend.peak_memory_bytes(d).value_or(-1);
    part.devices.push_back(std::move(device));
  }
  const auto part_of = [&](int d) -> DevicePart& {
    return part.devices[std::distance(local.begin(), std::find(local.begin(), local.end(), d))];
  };
  for (std::size_t w = 0; w < workers.size(); ++w) {
    DevicePart& device = part_of(workers[w].first);
    for (const StampedRecord& stamped : outputs[w].records) {
      TimelineRecord record = stamped.record;
      record.start_s = backend.seconds(stamped.start);
      record.end_s = std::max(record.start_s, backend.seconds(stamped.end));
      device.records.push_back(record);
    }
    for (const StampedStep& step : outputs[w].steps)
      device.steps.push_back({step.mini_batch, backend.seconds(step.end) - backend.seconds(step.start)});
  }
  if (request.keep_state)
    for (const int d : local)
      for (StageState& stage : states.at(d)->stages) {
        for (const torch::Tensor& parameter : stage.parameters) stage.state.weights.push_back(to_floats(parameter));
        if (stage.state.gradients.empty())
          for (const torch::Tensor& parameter : stage.parameters)
            stage.state.gradients.push_back(std::vector<float>(parameter.numel(), 0.0f));
        part_of(d).stages.push_back({stage.stage, std::move(stage.state)});
      }
  return part;
}

ExecutionResult assemble(const ExecutionRequest& request, const std::vector<RunPart>& parts) {
  const Program& program = request.program;
  const int devices = static_cast<int>(program.devices.size());
  std::vector<const DevicePart*> device_parts(devices, nullptr);
  std::vector<double> origin(devices, 0);
  ExecutionResult result;
  result.clock_offset_residual_s.assign(devices, 0);
  for (const RunPart& part : parts)
    for (const DevicePart& device : part.devices) {
      if (device.device < 0 || device.device >= devices || device_parts[device.device])
        throw std::logic_error(fmt::format("executor: device {} reported by no part or twice", device.device));
      device_parts[device.device] = &device;
      origin[device.device] = part.origin_s;
      result.clock_offset_residual_s[device.device] = part.clock_offset_residual_s;
    }
  for (int d = 0; d < devices; ++d)
    if (!device_parts[d]) throw std::logic_error(fmt::format("executor: no part reports device {}", d));
  // Times from the earliest origin, so that they stay small.
  const double base = *std::min_element(origin.begin(), origin.end());

  const int warmup = request.warmup_mini_batches;
  result.measured_mini_batches = program.mini_batches - warmup;
  // All-reduces: measured when every backward they follow is; rounds
  // renumbered as mini-batches are (see all_reduce_rounds_to_skip).
  std::map<std::pair<int, int>, const AllReduce*> all_reduce_of;
  for (const AllReduce& all_reduce : program.all_reduces) all_reduce_of[{all_reduce.stage, all_reduce.round}] = &all_reduce;
  const auto measured_all_reduce = [&](const TimelineRecord& record) {
    for (const Action& ready : all_reduce_of.at({record.stage, record.mini_batch})->ready)
      if (ready.mini_batch < warmup) return false;
    return true;
  };
  std::map<int, int> skipped_rounds;  // stage -> rounds of the warm-up
  for (int stage = 0; stage < program.num_stages; ++stage) {
    std::set<int> early;
    for (const DeviceProgram& device : program.devices)
      if (device.holds(stage) && device.replica == 0)
        for (const Stream& stream : device.streams)
          for (const Action& action : stream.actions)
            if (action.stage == stage && (action.kind == ActionKind::Backward || action.kind == ActionKind::BackwardWeight) &&
                action.mini_batch < warmup)
              early.insert(action.mini_batch);
    skipped_rounds[stage] = static_cast<int>(early.size());
  }
  double t0 = std::numeric_limits<double>::infinity(), t1 = 0;
  std::vector<DeviceSummary> summaries;
  for (int d = 0; d < devices; ++d) {
    result.timeline.hosts.push_back(device_parts[d]->host);
    summaries.push_back({device_parts[d]->host, program.devices[d].stages.front(), program.devices[d].stages, 0, 0,
                         device_parts[d]->peak_memory_bytes});
  }
  for (int d = 0; d < devices; ++d) {
    DeviceSummary& summary = summaries[d];
    const double shift = origin[d] - base;
    for (TimelineRecord record : device_parts[d]->records) {
      if (record.action == "ALLREDUCE") {
        if (!measured_all_reduce(record)) continue;
        record.mini_batch -= skipped_rounds.at(record.stage) - warmup;  // the common shift below subtracts warmup
      } else if (record.mini_batch < warmup) {
        continue;
      }
      record.start_s += shift;
      record.end_s += shift;
      result.timeline.records.push_back(record);
      if (record.kind() == RecordKind::Compute && record.action != kOptimizerStepAction) summary.busy_s += record.end_s - record.start_s;
      t0 = std::min(t0, record.start_s);
      t1 = std::max(t1, record.end_s);
    }
    for (const auto& [mini_batch, seconds] : device_parts[d]->steps)
      if (mini_batch >= warmup) summary.step_s += seconds;
  }
  result.devices = std::move(summaries);
  for (TimelineRecord& record : result.timeline.records) {
    record.mini_batch -= warmup;
    record.start_s -= t0;
    record.end_s -= t0;
  }
  std::stable_sort(result.timeline.records.begin(), result.timeline.records.end(),
                   [](const TimelineRecord& a, const TimelineRecord& b) { return a.start_s < b.start_s; });
  result.mean_minibatch_span_s = (t1 - t0) / result.measured_mini_batches;
  result.minibatch_time_s = result.mean_minibatch_span_s;
  if (minibatches_overlap(result.timeline)) result.minibatch_time_s = minibatch_time_of(result.timeline, true).minibatch_time_s;
  if (request.keep_state) {
    // One state per stage, in stage order, from replica 0; every replica
    // must hold the same weights.
    result.stages.resize(program.num_stages);
    for (int d = 0; d < devices; ++d)
      if (program.devices[d].replica == 0)
        for (const auto& [stage, state] : device_parts[d]->stages) result.stages.at(stage) = state;
    for (int d = 0; d < devices; ++d)
      for (const auto& [stage, state] : device_parts[d]->stages)
        if (state.weights != result.stages.at(stage).weights)
          throw std::logic_error(fmt::format("executor: replica {} of stage {} ends with weights that differ from replica 0's",
                                             program.devices[d].replica, stage));
  }
  return result;
}

}  // namespace detail

ExecutionResult execute(const ExecutionRequest& request) {
  const Program& program = request.program;
  const int devices = static_cast<int>(program.devices.size());
  check_request(request, devices);
  if (request.launcher.kind == Launcher::Kind::Processes) return detail::execute_in_processes(request);
  if (request.launcher.kind == Launcher::Kind::Env) return detail::execute_from_env(request);

  std::unique_ptr<detail::Backend> backend = request.device.kind == "cpu"
                                                  ? detail::make_cpu_backend(devices)
                                                  : detail::make_cuda_backend(request.device, devices, request.copy_through_host);
  std::unique_ptr<Transport> transport = backend->make_transport();
  std::vector<int> all(devices);
  for (int d = 0; d < devices; ++d) all[d] = d;
  std::vector<detail::RunPart> parts;
  parts.push_back(detail::run_devices(request, all, *backend, *transport, [] {}));
  ExecutionResult result = detail::assemble(request, parts);
  result.clock = "one process";
  return result;
}

ModelState run_reference(const ModelConfig& model, int micro_batches, int mini_batches, int micro_batch_size,
                         double learning_rate, std::uint64_t seed) {
  at::set_num_threads(1);
  detail::LayerList layers = detail::build_layers(model, seed);
  const int count = static_cast<int>(layers.size());
  std::vector<torch::Tensor> parameters = detail::parameters_of(layers, 0, count);
  torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(learning_rate));
  ModelState state;
  for (int k = 0; k < mini_batches; ++k) {
    std::vector<torch::Tensor> inputs, targets;
    for (int m = 0; m < micro_batches; ++m) {
      detail::Batch batch = detail::make_batch(model, seed, k, m, micro_batch_size);
      inputs.push_back(batch.input);
      targets.push_back(batch.target);
    }
    optimizer.zero_grad();
    const torch::Tensor output = detail::run_layers(layers, 0, count, torch::cat(inputs));
    detail::loss_of(model, output, torch::cat(targets)).backward();
    if (k == mini_batches - 1)
      for (const torch::Tensor& parameter : parameters)
        state.gradients.push_back(parameter.grad().defined() ? to_floats(parameter.grad()) : std::vector<float>(parameter.numel(), 0.0f));
    optimizer.step();
  }
  for (const torch::Tensor& parameter : parameters) state.weights.push_back(to_floats(parameter));
  return state;
}

}  // namespace pipegrid::validate
