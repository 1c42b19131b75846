// The real executor (see executor.hpp) and the in-process transport.

#include "validate/executor.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"
#include "validate/detail/backend.hpp"
#include "validate/detail/model.hpp"
#include "validate/transport.hpp"

namespace pipegrid::validate {
namespace {

/** std::chrono::steady_clock's time since its epoch, in seconds (a CPU Stamp). */
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class InProcessTransport : public Transport {
 public:
  explicit InProcessTransport(int devices) {
    for (int d = 0; d < devices; ++d) mailboxes_.push_back(std::make_unique<Mailbox>());
  }

  CopyInterval send(int to, const MessageKey& key, const at::Tensor& tensor) override {
    Mailbox& box = *mailboxes_.at(to);
    CopyInterval interval;
    interval.start.seconds = steady_seconds();
    torch::Tensor copy = tensor.detach().clone();
    interval.end.seconds = steady_seconds();
    {
      std::lock_guard lock(box.mutex);
      box.messages[key] = std::move(copy);
    }
    box.arrived.notify_all();
    return interval;
  }

  at::Tensor receive(int device, const MessageKey& key) override {
    Mailbox& box = *mailboxes_.at(device);
    std::unique_lock lock(box.mutex);
    box.arrived.wait(lock, [&] { return box.aborted || box.messages.count(key) > 0; });
    if (box.aborted) throw std::runtime_error(box.reason);
    auto found = box.messages.find(key);
    torch::Tensor tensor = std::move(found->second);
    box.messages.erase(found);
    return tensor;
  }

  void abort(const std::string& reason) override {
    for (auto& box : mailboxes_) {
      {
        std::lock_guard lock(box->mutex);
        box->aborted = true;
        box->reason = reason;
      }
      box->arrived.notify_all();
    }
  }

 private:
  struct Mailbox {
    std::mutex mutex;
    std::condition_variable arrived;
    std::map<MessageKey, torch::Tensor> messages;
    bool aborted = false;
    std::string reason;
  };
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;
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

 private:
  int devices_;
  double epoch_ = 0;
};

std::vector<float> to_floats(const torch::Tensor& tensor) {
  const torch::Tensor values = tensor.detach().to(torch::kCPU, torch::kFloat32).contiguous().reshape({-1});
  return std::vector<float>(values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
}

/** What a forward leaves for its backward. */
struct Stash {
  torch::Tensor input;   ///< the stage's input (requires grad past stage 0)
  torch::Tensor output;  ///< the stage's output, or the scaled loss on the last stage; undefined until recomputed
};

struct WorkerContext {
  const ExecutionRequest* request = nullptr;
  int device = 0;
  const DeviceProgram* program = nullptr;
  std::vector<int> device_of_stage;
  detail::LayerList* layers = nullptr;
  Transport* transport = nullptr;
  detail::Backend* backend = nullptr;
  /// Every micro-batch's data, on the devices that use it, made before the
  /// clock starts: key (micro-batch, mini-batch).
  const std::map<std::pair<int, int>, detail::Batch>* data = nullptr;
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
  ModelState state;
};

WorkerOutput run_worker(const WorkerContext& context) {
  detail::Backend& backend = *context.backend;
  backend.enter_worker(context.device);
  const auto now = [&] { return backend.stamp(context.device); };
  const ExecutionRequest& request = *context.request;
  const int stage = context.program->stage;
  const int last_stage = request.program.num_stages - 1;
  const auto [first_layer, last_layer] = request.stages[stage];
  const auto& actions = context.program->streams.at(0).actions;
  const double scale = 1.0 / request.program.micro_batches;

  std::vector<torch::Tensor> parameters = detail::parameters_of(*context.layers, first_layer, last_layer);
  torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(request.learning_rate));
  optimizer.zero_grad();

  // The optimizer step follows the device's last backward of each mini-batch;
  // forwards whose recomputation comes later on this device keep no graph.
  std::map<int, std::size_t> last_backward;
  std::set<std::pair<int, int>> recomputed;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].kind == ActionKind::Backward) last_backward[actions[i].mini_batch] = i;
    if (actions[i].kind == ActionKind::Recompute) recomputed.insert({actions[i].micro_batch, actions[i].mini_batch});
  }

  // Weight stashing: the version each in-flight mini-batch's forward used,
  // and a copy of every version still referenced. The weights are changed
  // through Tensor::data() so that autograd's version counters stay put: the
  // graphs of the mini-batches in flight see the stashed values swapped in.
  int version = 0;
  std::map<std::pair<int, int>, int> version_of;
  std::map<int, std::vector<torch::Tensor>> versions;
  const auto copy_weights = [&](const std::vector<torch::Tensor>& from) {
    torch::NoGradGuard no_grad;
    for (std::size_t p = 0; p < parameters.size(); ++p) parameters[p].data().copy_(from[p]);
  };
  const auto clone_weights = [&] {
    std::vector<torch::Tensor> copy;
    for (const torch::Tensor& parameter : parameters) copy.push_back(parameter.detach().clone());
    return copy;
  };

  WorkerOutput output;
  const std::string host = backend.host_name(context.device);
  std::map<std::pair<int, int>, Stash> stashes;
  const auto record = [&](const std::string& action, const Action& a, const Stamp& start, const Stamp& end, double bytes,
                          const std::string& peer) {
    output.records.push_back({{host, 0, stage, action, a.micro_batch, a.mini_batch, 0, 0, bytes, peer, 0}, start, end});
  };
  const auto send = [&](MessageKey::Kind kind, int to_stage, const Action& a, const torch::Tensor& tensor) {
    const int to = context.device_of_stage.at(to_stage);
    const CopyInterval copy = context.transport->send(to, {kind, to_stage, a.micro_batch, a.mini_batch}, tensor);
    record(kind == MessageKey::Kind::Activation ? "SEND_F" : "SEND_B", a, copy.start, copy.end,
           static_cast<double>(tensor.numel() * tensor.element_size()), backend.host_name(to));
  };
  const auto stage_forward = [&](const torch::Tensor& input, const Action& a) {
    torch::Tensor out = detail::run_layers(*context.layers, first_layer, last_layer, input);
    if (stage == last_stage) {
      out = detail::loss_of(request.model, out, context.data->at({a.micro_batch, a.mini_batch}).target) * scale;
    }
    return out;
  };

  for (std::size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const std::pair<int, int> id{a.micro_batch, a.mini_batch};
    if (a.kind == ActionKind::Forward) {
      torch::Tensor input;
      if (stage == 0) {
        input = context.data->at(id).input;
      } else {
        input = context.transport->receive(context.device, {MessageKey::Kind::Activation, stage, a.micro_batch, a.mini_batch});
        if (input.is_floating_point()) input.requires_grad_(true);
      }
      const Stamp start = now();
      if (request.weight_stashing) {
        if (versions.count(version) == 0) versions[version] = clone_weights();
        version_of[id] = version;
      }
      torch::Tensor out;
      if (recomputed.count(id)) {
        torch::NoGradGuard no_grad;
        out = detail::run_layers(*context.layers, first_layer, last_layer, input);
        stashes[id] = {input, {}};
      } else {
        out = stage_forward(input, a);
        stashes[id] = {input, out};
      }
      record("F", a, start, now(), 0, "");
      if (stage != last_stage) send(MessageKey::Kind::Activation, stage + 1, a, out);
    } else if (a.kind == ActionKind::Recompute) {
      Stash& stash = stashes.at(id);
      const Stamp start = now();
      stash.output = stage_forward(stash.input, a);
      record("R", a, start, now(), 0, "");
    } else {
      torch::Tensor gradient;
      if (stage != last_stage)
        gradient = context.transport->receive(context.device, {MessageKey::Kind::Gradient, stage, a.micro_batch, a.mini_batch});
      const Stamp start = now();
      Stash stash = std::move(stashes.at(id));
      stashes.erase(id);
      std::vector<torch::Tensor> latest;
      if (request.weight_stashing && version_of.at(id) != version) {
        latest = clone_weights();
        copy_weights(versions.at(version_of.at(id)));
      }
      if (stage == last_stage)
        stash.output.backward();
      else
        stash.output.backward(gradient);
      if (!latest.empty()) copy_weights(latest);
      if (request.weight_stashing) {
        const int used = version_of.at(id);
        version_of.erase(id);
        bool referenced = false;
        for (const auto& [other, v] : version_of) referenced = referenced || v == used;
        if (!referenced) versions.erase(used);
      }
      record("B", a, start, now(), 0, "");
      if (stage != 0) send(MessageKey::Kind::Gradient, stage - 1, a, stash.input.grad());
      if (request.weight_stashing) {
        if (request.keep_state && a.mini_batch == request.program.mini_batches - 1) {
          output.state.gradients.clear();
          for (const torch::Tensor& parameter : parameters) output.state.gradients.push_back(to_floats(parameter.grad()));
        }
        const Stamp step_start = now();
        {
          torch::NoGradGuard no_grad;
          for (torch::Tensor& parameter : parameters) {
            parameter.data().add_(parameter.grad(), -request.learning_rate);
            parameter.mutable_grad().zero_();
          }
        }
        ++version;
        output.steps.push_back({a.mini_batch, step_start, now()});
      } else if (last_backward.at(a.mini_batch) == i) {
        if (request.keep_state && a.mini_batch == request.program.mini_batches - 1) {
          output.state.gradients.clear();
          for (const torch::Tensor& parameter : parameters)
            output.state.gradients.push_back(parameter.grad().defined() ? to_floats(parameter.grad())
                                                                        : std::vector<float>(parameter.numel(), 0.0f));
        }
        const Stamp step_start = now();
        optimizer.step();
        optimizer.zero_grad();
        output.steps.push_back({a.mini_batch, step_start, now()});
      }
    }
  }
  if (request.keep_state)
    for (const torch::Tensor& parameter : parameters) output.state.weights.push_back(to_floats(parameter));
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
    throw InputError(fmt::format("--device {}:{}: the Program has {} devices (one per stage); expected {}:{}", request.device.kind,
                                 request.device.count, devices, request.device.kind, devices));
  if (request.copy_through_host && request.device.kind == "cpu")
    throw InputError("--copy-through host: only for cuda devices (CPU workers share one memory)");
  if (!program.all_reduces.empty() || devices != program.num_stages)
    throw InputError("executor: replicated stages (all-reduces) are not supported yet; expected one device per stage");
  for (const DeviceProgram& device : program.devices)
    if (device.streams.size() != 1)
      throw InputError(fmt::format("executor: device of stage {} has {} streams; a device runs one stream (fbp-as is not supported)",
                                   device.stage, device.streams.size()));
  if (request.weight_stashing && program.micro_batches != 1)
    throw InputError(fmt::format("executor: weight stashing runs one micro-batch per mini-batch; the Program has {}", program.micro_batches));
  if (request.micro_batch_size < 1)
    throw InputError(fmt::format("--micro-batch-size: expected at least 1, found {}", request.micro_batch_size));
  if (request.warmup_mini_batches < 0 || request.warmup_mini_batches >= program.mini_batches)
    throw InputError(fmt::format("--warmup {}: expected 0 to {} (fewer than the {} mini-batches run)", request.warmup_mini_batches,
                                 program.mini_batches - 1, program.mini_batches));
  if (!(request.learning_rate > 0)) throw InputError(fmt::format("--learning-rate: expected > 0, found {}", request.learning_rate));
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

ExecutionResult execute(const ExecutionRequest& request) {
  const Program& program = request.program;
  const int devices = static_cast<int>(program.devices.size());
  check_request(request, devices);

  std::unique_ptr<detail::Backend> backend = request.device.kind == "cpu"
                                                  ? detail::make_cpu_backend(devices)
                                                  : detail::make_cuda_backend(request.device, devices, request.copy_through_host);
  detail::LayerList layers = detail::build_layers(request.model, request.seed);
  std::unique_ptr<Transport> transport = backend->make_transport();
  std::vector<int> device_of_stage(program.num_stages, 0);
  for (int d = 0; d < devices; ++d) device_of_stage[program.devices[d].stage] = d;
  // Each stage's layers on its device; the inputs where stage 0 runs, the
  // targets where the last stage runs.
  for (int d = 0; d < devices; ++d) {
    const auto [first, last] = request.stages[program.devices[d].stage];
    for (int layer = first; layer < last; ++layer) layers[layer]->to(backend->torch_device(d));
  }
  const torch::Device input_device = backend->torch_device(device_of_stage.front());
  const torch::Device target_device = backend->torch_device(device_of_stage.back());

  std::vector<WorkerOutput> outputs(devices);
  std::vector<std::exception_ptr> errors(devices);
  std::map<std::pair<int, int>, detail::Batch> data;
  for (int k = 0; k < program.mini_batches; ++k)
    for (int m = 0; m < program.micro_batches; ++m) {
      detail::Batch batch = detail::make_batch(request.model, request.seed, k, m, request.micro_batch_size);
      data[{m, k}] = {batch.input.to(input_device), batch.target.to(target_device)};
    }
  backend->start_clock();
  {
    std::vector<std::thread> workers;
    for (int d = 0; d < devices; ++d) {
      WorkerContext context{&request, d, &program.devices[d], device_of_stage, &layers, transport.get(), backend.get(), &data};
      workers.emplace_back([context, d, &outputs, &errors, &transport, &backend] {
        try {
          outputs[d] = run_worker(context);
        } catch (const std::exception& error) {
          errors[d] = std::make_exception_ptr(std::runtime_error(fmt::format("{}: {}", backend->host_name(d), error.what())));
          transport->abort(fmt::format("{} failed", backend->host_name(d)));
        }
      });
    }
    for (std::thread& worker : workers) worker.join();
  }
  backend->synchronize();
  // Report the first failure that is not just another worker being woken.
  for (int d = 0; d < devices; ++d)
    if (errors[d]) {
      try {
        std::rethrow_exception(errors[d]);
      } catch (const std::runtime_error& error) {
        if (std::string(error.what()).find(" failed") == std::string::npos) throw;
      }
    }
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);

  ExecutionResult result;
  const int warmup = request.warmup_mini_batches;
  result.measured_mini_batches = program.mini_batches - warmup;
  double t0 = std::numeric_limits<double>::infinity(), t1 = 0;
  for (int d = 0; d < devices; ++d) {
    result.timeline.hosts.push_back(backend->host_name(d));
    DeviceSummary summary{backend->host_name(d), program.devices[d].stage, 0, 0, backend->peak_memory_bytes(d).value_or(-1)};
    for (const StampedRecord& stamped : outputs[d].records) {
      if (stamped.record.mini_batch < warmup) continue;
      TimelineRecord record = stamped.record;
      record.start_s = backend->seconds(stamped.start);
      record.end_s = std::max(record.start_s, backend->seconds(stamped.end));
      result.timeline.records.push_back(record);
      if (record.kind() == RecordKind::Compute) summary.busy_s += record.end_s - record.start_s;
      t0 = std::min(t0, record.start_s);
      t1 = std::max(t1, record.end_s);
    }
    for (const StampedStep& step : outputs[d].steps)
      if (step.mini_batch >= warmup) summary.step_s += backend->seconds(step.end) - backend->seconds(step.start);
    result.devices.push_back(summary);
    if (request.keep_state) result.stages.push_back(std::move(outputs[d].state));
  }
  for (TimelineRecord& record : result.timeline.records) {
    record.mini_batch -= warmup;
    record.start_s -= t0;
    record.end_s -= t0;
  }
  std::stable_sort(result.timeline.records.begin(), result.timeline.records.end(),
                   [](const TimelineRecord& a, const TimelineRecord& b) { return a.start_s < b.start_s; });
  result.minibatch_time_s = (t1 - t0) / result.measured_mini_batches;
  if (request.keep_state) {
    // One state per stage, in stage order.
    std::vector<ModelState> by_stage(program.num_stages);
    for (int d = 0; d < devices; ++d) by_stage[program.devices[d].stage] = std::move(result.stages[d]);
    result.stages = std::move(by_stage);
  }
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
