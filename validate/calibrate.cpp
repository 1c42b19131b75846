#include "validate/calibrate.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/error.hpp"
#include "schedules/schedules.hpp"
#include "validate/detail/backend.hpp"
#include "validate/detail/c10d.hpp"
#include "validate/detail/model.hpp"
#include "validate/executor.hpp"
#include "validate/transport.hpp"

namespace pipegrid::validate {
namespace {

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// Runs `body` warmup times untimed, then `repeats` times timed; the median.
double median_seconds(int warmup, int repeats, const std::function<double()>& body) {
  for (int i = 0; i < warmup; ++i) body();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) times.push_back(body());
  return median_of(times);
}

// The plan whose real runs the per-action overhead is attributed from.
constexpr int kOverheadMicroBatches = 4;
constexpr int kOverheadMiniBatches = 2;

double tensor_bytes(const torch::Tensor& tensor) { return static_cast<double>(tensor.numel() * tensor.element_size()); }

}  // namespace

std::pair<double, double> fit_latency_bandwidth(const std::vector<CopySample>& samples) {
  // Weighted by 1 / seconds^2: relative residuals, so that the small messages
  // (which set the latency) count as much as the large ones.
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const CopySample& s : samples) {
    const double w = 1 / std::pow(std::max(s.seconds, 1e-12), 2);
    n += w;
    sx += w * s.bytes;
    sy += w * s.seconds;
    sxx += w * s.bytes * s.bytes;
    sxy += w * s.bytes * s.seconds;
  }
  const double denominator = n * sxx - sx * sx;
  if (samples.size() < 2 || denominator <= 1e-12 * n * sxx) throw InputError("copy fit: expected samples at two or more distinct sizes");
  const double slope = (n * sxy - sx * sy) / denominator;
  const double intercept = (sy - slope * sx) / n;
  return {std::max(intercept, 0.0), slope > 0 ? 1 / slope : std::numeric_limits<double>::infinity()};
}

namespace {

/** The measurements of calibrate() on device 0 of `backend`, on the calling
 *  thread, which must be that device's worker (Backend::enter_worker). */
void measure_on_device(const CalibrationRequest& request, detail::Backend& backend, Calibration& result) {
  torch::manual_seed(static_cast<std::uint64_t>(request.seed));
  const ModelConfig& model = request.model;
  const torch::Device device = backend.torch_device(0);
  const detail::LayerList layers = detail::build_layers(model, request.seed);
  for (const auto& layer : layers) layer->to(device);
  detail::Batch batch = detail::make_batch(model, request.seed, 0, 0, request.micro_batch_size);
  batch.input = batch.input.to(device);
  backend.start_clock();
  // Seconds that `work` takes on the device: stamps on the device's
  // compute stream around it, read once the device is idle. The device is
  // held busy first, so the work runs back to back as in a pipeline (on a
  // GPU: no launch latency in the time).
  const auto timed = [&](const std::function<void()>& work) {
    backend.hold(0, 5e-3);
    const Stamp start = backend.stamp(0);
    work();
    const Stamp end = backend.stamp(0);
    backend.synchronize();
    return backend.seconds(end) - backend.seconds(start);
  };

  result.profile.name = model.name;
  result.profile.model = model_to_spec(model);
  result.profile.micro_batch_size = request.micro_batch_size;
  result.profile.input_bytes = tensor_bytes(batch.input);

  // Each layer on the output of the previous one (the real input it sees in a run).
  torch::Tensor input = batch.input;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const int index = static_cast<int>(l);
    torch::Tensor layer_input = input.detach();
    // The model's input is data: no run computes its gradient (stage 0's
    // B stops at the first layer's weights), so neither does this one.
    if (layer_input.is_floating_point() && l > 0) layer_input.requires_grad_(true);
    const double forward_s = median_seconds(request.warmup, request.repeats, [&] {
      return timed([&] { torch::Tensor out = detail::run_layers(layers, index, index + 1, layer_input); });
    });
    const torch::Tensor output = detail::run_layers(layers, index, index + 1, layer_input);
    const torch::Tensor gradient = torch::ones_like(output);
    const double backward_s = !output.requires_grad() ? 0.0 : median_seconds(request.warmup, request.repeats, [&] {
      torch::Tensor out = detail::run_layers(layers, index, index + 1, layer_input);
      return timed([&] { out.backward(gradient); });
    });
    // The split backward as the executor runs it: I takes the gradients of
    // the layer input and of every weight use's output (one pass, graph
    // kept), W each use's parameter gradients from its output's.
    double input_s = 0, weight_s = 0;
    if (output.requires_grad()) {
      struct Split {
        torch::Tensor out;
        std::vector<detail::WeightUse> uses;
        std::vector<torch::Tensor> wanted, gradients;
      };
      const auto forward_with_tape = [&] {
        Split split;
        detail::WeightTape tape;
        split.out = detail::run_layers(layers, index, index + 1, layer_input);
        split.uses = std::move(tape.uses);
        if (layer_input.requires_grad()) split.wanted.push_back(layer_input);
        for (const detail::WeightUse& use : split.uses) split.wanted.push_back(use.output);
        return split;
      };
      const auto input_half = [&](Split& split) {
        split.gradients = torch::autograd::grad({split.out}, split.wanted, {gradient}, /*retain_graph=*/true,
                                                /*create_graph=*/false, /*allow_unused=*/true);
      };
      const auto weight_half = [&](Split& split) {
        const std::size_t first_use = layer_input.requires_grad() ? 1 : 0;
        for (std::size_t u = 0; u < split.uses.size(); ++u) {
          const torch::Tensor& use_gradient = split.gradients.at(first_use + u);
          if (!use_gradient.defined()) continue;
          torch::autograd::grad({split.uses[u].output}, split.uses[u].parameters, {use_gradient}, /*retain_graph=*/true,
                                /*create_graph=*/false, /*allow_unused=*/true);
        }
      };
      input_s = median_seconds(request.warmup, request.repeats, [&] {
        Split split = forward_with_tape();
        return timed([&] { input_half(split); });
      });
      weight_s = median_seconds(request.warmup, request.repeats, [&] {
        Split split = forward_with_tape();
        input_half(split);
        return timed([&] { weight_half(split); });
      });
    }
    result.split_backward_s += input_s + weight_s;
    result.whole_backward_s += backward_s;
    Layer layer;
    layer.name = fmt::format("layer{}", l);
    layer.forward_s = forward_s;
    layer.backward_s = backward_s;
    if (input_s + weight_s > 0 && backward_s > 0) {
      layer.backward_input_s = backward_s * input_s / (input_s + weight_s);
      layer.backward_weight_s = backward_s - *layer.backward_input_s;
    }
    layer.output_bytes = tensor_bytes(output);
    for (const torch::Tensor& parameter : detail::parameters_of(layers, index, index + 1))
      layer.parameter_bytes += tensor_bytes(parameter);
    result.profile.layers.push_back(layer);
    input = output.detach();
  }

  // The transport's copy from device 0 to device 1 (to itself on one
  // device), at sizes from 1 KiB to 4 MiB. CPU: the send and the receive;
  // GPU: the copy on the sender's copy stream.
  std::unique_ptr<Transport> transport = backend.make_transport();
  const int receiver = request.device.count > 1 ? 1 : 0;
  const bool on_cpu = request.device.kind == "cpu";
  int message = 0;
  for (std::int64_t floats = 256; floats <= (std::int64_t{1} << 20); floats *= 4) {
    const torch::Tensor tensor = torch::rand({floats}).to(device);
    const double seconds = median_seconds(request.warmup, request.repeats, [&] {
      const MessageKey key{MessageKey::Kind::Activation, 1, message++, 0};
      const Stamp start = backend.stamp(0);
      const CopyInterval copy = transport->send(receiver, key, tensor);
      const torch::Tensor received = transport->receive(receiver, key);
      const Stamp end = backend.stamp(0);
      backend.synchronize();
      return on_cpu ? backend.seconds(end) - backend.seconds(start) : backend.seconds(copy.end) - backend.seconds(copy.start);
    });
    result.copies.push_back({tensor_bytes(tensor), seconds});
  }
  std::tie(result.latency_s, result.bandwidth_bytes_per_s) = fit_latency_bandwidth(result.copies);

  // The optimizer step as the executor takes it (SGD step + zero_grad) over
  // the parameters of each layer prefix 0..k of a new size, gradients set
  // (untimed) before every run.
  double fitted_bytes = 0;
  for (std::size_t k = 1; k <= layers.size(); ++k) {
    std::vector<torch::Tensor> parameters = detail::parameters_of(layers, 0, static_cast<int>(k));
    double bytes = 0;
    for (const torch::Tensor& parameter : parameters) bytes += tensor_bytes(parameter);
    if (bytes <= fitted_bytes) continue;
    fitted_bytes = bytes;
    torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(0.01));
    const double seconds = median_seconds(request.warmup, request.repeats, [&] {
      for (torch::Tensor& parameter : parameters) parameter.mutable_grad() = torch::full_like(parameter, 1e-3);
      return timed([&] {
        optimizer.step();
        optimizer.zero_grad();
      });
    });
    result.steps.push_back({bytes, seconds});
  }
  if (result.steps.size() >= 2) {
    std::tie(result.step_overhead_s, result.step_rate_bytes_per_s) = fit_latency_bandwidth(result.steps);
  } else if (result.steps.size() == 1) {
    result.step_rate_bytes_per_s = result.steps.front().bytes / std::max(result.steps.front().seconds, 1e-12);
  }
}

/** Devices 1..count-1 of `backend` running forward and backward passes of
 *  the whole model (a copy each, built from the request's seed; gradients
 *  accumulate, no step) back to back on worker threads of their own, from
 *  construction to stop(). The first error of a thread stops them all and
 *  is rethrown by stop(). */
class BusyDevices {
 public:
  BusyDevices(const CalibrationRequest& request, detail::Backend& backend, int count) {
    for (int d = 1; d < count; ++d) threads_.emplace_back([this, &request, &backend, d] { keep_busy(request, backend, d); });
  }
  ~BusyDevices() { join(); }
  BusyDevices(const BusyDevices&) = delete;
  BusyDevices& operator=(const BusyDevices&) = delete;

  /// Stops the threads; the passes they ran. Rethrows a thread's error.
  long stop() {
    join();
    if (error_) std::rethrow_exception(error_);
    return passes_;
  }

 private:
  void keep_busy(const CalibrationRequest& request, detail::Backend& backend, int device) {
    try {
      backend.enter_worker(device);
      const detail::LayerList layers = detail::build_layers(request.model, request.seed);
      for (const auto& layer : layers) layer->to(backend.torch_device(device));
      detail::Batch batch = detail::make_batch(request.model, request.seed, 0, device, request.micro_batch_size);
      batch.input = batch.input.to(backend.torch_device(device));
      const int count = static_cast<int>(layers.size());
      while (!stopping_.load()) {
        const torch::Tensor output = detail::run_layers(layers, 0, count, batch.input);
        if (output.requires_grad()) output.backward(torch::ones_like(output));
        passes_.fetch_add(1);
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      stopping_.store(true);
    }
  }
  void join() {
    stopping_.store(true);
    for (std::thread& thread : threads_)
      if (thread.joinable()) thread.join();
  }

  std::atomic<bool> stopping_{false};
  std::atomic<long> passes_{0};
  std::mutex mutex_;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace

Calibration calibrate(const CalibrationRequest& request) {
  if (request.repeats < 1) throw InputError(fmt::format("--repeats: expected at least 1, found {}", request.repeats));
  if (request.warmup < 0) throw InputError(fmt::format("--warmup: expected 0 or more, found {}", request.warmup));
  if (request.micro_batch_size < 1)
    throw InputError(fmt::format("--micro-batch-size: expected at least 1, found {}", request.micro_batch_size));
  if (request.device.count < 1)
    throw InputError(fmt::format("--device: expected at least 1 device, found {}", request.device.count));
  if (request.copy_through_host && request.device.kind == "cpu")
    throw InputError("--copy-through host: only for cuda devices (CPU workers share one memory)");
  const ModelConfig& model = request.model;
  const int devices = request.device.count;

  Calibration result;
  {
    std::unique_ptr<detail::Backend> backend =
        request.device.kind == "cpu" ? detail::make_cpu_backend(devices)
                                     : detail::make_cuda_backend(request.device, devices, request.copy_through_host);
    for (int d = 0; d < devices; ++d) result.hosts.push_back(backend->host_name(d));
    result.memory_bytes = static_cast<double>(backend->memory_capacity_bytes(0).value_or(0));
    result.clock = request.device.kind == "cpu" ? "steady clock" : "CUDA events";
    // A thread of its own: a worker's settings (intra-op threads, the
    // current stream) end with it.
    // The other devices busy as a pipeline keeps them (CPU workers only:
    // on GPUs the partitions' interference is not measured yet).
    const int busy = request.busy_devices && request.device.kind == "cpu" ? devices - 1 : 0;
    BusyDevices others(request, *backend, busy + 1);
    std::exception_ptr error;
    std::thread worker([&] {
      try {
        backend->enter_worker(0);
        measure_on_device(request, *backend, result);
      } catch (...) {
        error = std::current_exception();
      }
    });
    worker.join();
    result.busy_devices = busy;
    result.busy_passes = others.stop();
    if (error) std::rethrow_exception(error);
  }
  // Between processes the plan's copies go through c10d: measure those.
  if (request.launcher.kind != Launcher::Kind::Threads && devices > 1) {
    const std::optional<std::vector<CopySample>> copies = detail::measure_copies_between_ranks(request);
    if (copies) {
      result.copies = *copies;
      std::tie(result.latency_s, result.bandwidth_bytes_per_s) = fit_latency_bandwidth(result.copies);
    } else {
      result.primary = false;
    }
  }
  const int layer_count = static_cast<int>(result.profile.layers.size());

  // The executor's per-action overhead: gpipe on min(devices, layers)
  // stages, execute's default split, kOverheadMicroBatches micro-batches,
  // kOverheadMiniBatches measured mini-batches after the warm-up, `repeats`
  // runs; attributed by attribute_overhead against this profile.
  const int stages = std::min(devices, layer_count);
  ExecutionRequest run;
  run.model = model;
  run.stages = uniform_ranges(layer_count, stages);
  ScheduleOptions schedule;
  schedule.num_stages = stages;
  schedule.micro_batches = kOverheadMicroBatches;
  schedule.mini_batches = std::max(1, request.warmup) + kOverheadMiniBatches;
  run.program = generate_schedule("gpipe", schedule);
  run.micro_batch_size = request.micro_batch_size;
  run.warmup_mini_batches = std::max(1, request.warmup);
  run.seed = request.seed;
  run.device = {request.device.kind, stages};
  run.copy_through_host = request.copy_through_host;
  run.launcher = request.launcher;
  std::vector<Timeline> measured;
  for (int r = 0; r < request.repeats; ++r) {
    ExecutionResult executed = execute(run);
    if (!executed.primary) result.primary = false;
    measured.push_back(std::move(executed.timeline));
  }
  if (!result.primary) return result;
  result.overhead = attribute_overhead(measured, result.profile, run.stages, result.latency_s, result.bandwidth_bytes_per_s);
  result.overhead.plan = fmt::format("{} run{} of gpipe, {} stage{} on {}:{}, M={}, {} measured mini-batches each",
                                     request.repeats, request.repeats == 1 ? "" : "s", stages, stages == 1 ? "" : "s",
                                     request.device.kind, stages, kOverheadMicroBatches, kOverheadMiniBatches);
  return result;
}

}  // namespace pipegrid::validate
