// The CUDA backend of the executor (validate/detail/backend.hpp): `cuda` (one
// GPU per device) and `cuda-partitioned:N` (GPU 0 split into N SM partitions
// with green contexts, validate/cuda/green_contexts.hpp). Built only against
// a CUDA LibTorch (the GPU machine); keeps to LibTorch's stable CUDA API
// (CUDAStream, CUDAEvent, caching-allocator statistics), which 1.13 and 2.x
// share.
//
// Streams: each device computes on its own stream, made current on its
// worker thread; each device sends on its own copy stream. A send orders the
// copy after the producing work with an event (the copy stream waits for the
// sender's compute stream), copies device to device (or device -> pinned
// host -> device), and hands the receiver the copy with the event that ends
// it; the receiver's compute stream waits for that event. The allocator is
// told which streams use a tensor (record_stream), so no buffer is reused
// while a copy or a consumer still reads it.
//
// All-reduce: each participant flattens its gradients into one fresh tensor
// on its compute stream and posts it with an event; once all have joined,
// each participant pulls every contribution to its own GPU in rank order
// (a peer's tensor is copied on that peer's copy stream, after the peer's
// event) and adds them up on its compute stream, so every replica computes
// the same sum with the same operations. The posted tensors are never
// written again and are freed once the last participant has read them
// (record_stream keeps the allocator from reusing them early).
//
// Time: every stamp is an event with timing, recorded on the stream the work
// runs on, read after the run relative to an epoch event recorded on the
// same GPU once all devices were idle. GPUs of a multi-GPU machine each have
// their own epoch, recorded back to back; their offsets are not measured (a
// copy between two GPUs starts on the sender's clock and ends on the
// receiver's).

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "core/error.hpp"
#include "validate/cuda/green_contexts.hpp"
#include "validate/detail/backend.hpp"
#include "validate/detail/rendezvous.hpp"

namespace pipegrid::validate::detail {
namespace {

/** A Stamp's event: timing enabled, on GPU `device_index`. */
struct EventStamp {
  at::cuda::CUDAEvent event{cudaEventDefault};
  int device_index = 0;
};

Stamp record_on(const c10::cuda::CUDAStream& stream) {
  auto handle = std::make_shared<EventStamp>();
  handle->device_index = stream.device_index();
  handle->event.record(stream);
  return {0, handle};
}

/** The worker device of the calling thread (set by enter_worker), so that a
 *  send finds its sender's copy stream. */
thread_local int current_worker = -1;

struct DeviceStreams {
  int gpu = 0;                     ///< CUDA device index
  std::string host;                ///< timeline host name
  c10::cuda::CUDAStream compute;   ///< made current on the worker thread
  c10::cuda::CUDAStream copy;      ///< the device's outgoing copies
  /// The destination side of copies from other GPUs (the barrier LibTorch
  /// makes on the destination's current stream, and the host-to-device half
  /// of a staged copy); unused between partitions of one GPU.
  c10::cuda::CUDAStream incoming;
};

class CudaTransport : public Transport {
 public:
  CudaTransport(const std::vector<DeviceStreams>& devices, bool through_host)
      : devices_(devices), through_host_(through_host), mailboxes_(static_cast<int>(devices.size())) {}

  CopyInterval send(int to, const MessageKey& key, const at::Tensor& tensor) override {
    if (current_worker < 0) throw std::logic_error("CudaTransport::send called outside a worker thread");
    const DeviceStreams& from = devices_.at(current_worker);
    const DeviceStreams& into = devices_.at(to);
    const bool same_gpu = from.gpu == into.gpu;
    const c10::Device destination(c10::kCUDA, static_cast<c10::DeviceIndex>(into.gpu));
    const at::Tensor source = tensor.detach();

    at::cuda::CUDAEvent produced;
    produced.record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(from.gpu)));
    produced.block(from.copy);
    CopyInterval interval;
    interval.start = record_on(from.copy);
    // LibTorch copies on the current stream of the source GPU (device to
    // device and device to host) and of the destination GPU (host to
    // device): make those the copy streams.
    const c10::cuda::CUDAStream& last = same_gpu ? from.copy : into.incoming;
    Message message;
    {
      c10::cuda::CUDAGuard on_source_gpu(static_cast<c10::DeviceIndex>(from.gpu));
      std::vector<c10::cuda::CUDAStream> streams{from.copy};
      if (!same_gpu) streams.push_back(into.incoming);
      c10::cuda::CUDAMultiStreamGuard on_copy_streams(streams);
      if (through_host_) {
        at::Tensor staged = at::empty(source.sizes(), source.options().device(c10::kCPU).pinned_memory(true));
        staged.copy_(source, /*non_blocking=*/true);
        if (!same_gpu) {
          at::cuda::CUDAEvent staged_ready;
          staged_ready.record(from.copy);
          staged_ready.block(into.incoming);
        }
        message.tensor = at::empty(source.sizes(), source.options().device(destination));
        message.tensor.copy_(staged, /*non_blocking=*/true);
      } else {
        message.tensor = source.to(destination, /*non_blocking=*/true, /*copy=*/true);
      }
      source.record_stream(from.copy);
    }
    interval.end = record_on(last);
    message.ready = std::static_pointer_cast<EventStamp>(interval.end.event);

    mailboxes_.post(to, key, std::move(message));
    return interval;
  }

  at::Tensor receive(int device, const MessageKey& key) override {
    Message message = mailboxes_.take(device, key);
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(devices_.at(device).gpu));
    message.ready->event.block(compute);
    message.tensor.record_stream(compute);
    return message.tensor;
  }

  CopyInterval all_reduce(int device, const AllReduceKey& key, int rank, int participants,
                          const std::vector<at::Tensor>& tensors) override {
    const DeviceStreams& own = devices_.at(device);
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(own.gpu);
    CopyInterval interval;
    interval.start = record_on(compute);
    std::vector<at::Tensor> flat;
    for (const at::Tensor& tensor : tensors) flat.push_back(tensor.detach().reshape({-1}));
    Contribution mine{at::cat(flat), std::make_shared<EventStamp>(), device};
    mine.ready->device_index = own.gpu;
    mine.ready->event.record(compute);
    const auto contributions = rendezvous_.join(key, rank, participants, std::move(mine));
    const c10::Device destination(c10::kCUDA, static_cast<c10::DeviceIndex>(own.gpu));
    at::Tensor sum;
    for (const Contribution& contribution : *contributions) {
      const DeviceStreams& owner = devices_.at(contribution.device);
      at::Tensor part;
      if (owner.gpu == own.gpu) {
        contribution.ready->event.block(compute);
        contribution.tensor.record_stream(compute);
        part = contribution.tensor;
      } else {
        // On the owner's copy stream, after the owner's event; the copy's
        // end is ordered before this worker's compute stream (LibTorch's
        // cross-device copy barrier).
        contribution.ready->event.block(owner.copy);
        c10::cuda::CUDAStreamGuard on_owner_copy_stream(owner.copy);
        part = contribution.tensor.to(destination, /*non_blocking=*/true, /*copy=*/true);
        contribution.tensor.record_stream(owner.copy);
      }
      if (sum.defined())
        sum.add_(part);
      else
        sum = part.clone();
    }
    std::int64_t offset = 0;
    for (const at::Tensor& tensor : tensors) {
      tensor.copy_(sum.narrow(0, offset, tensor.numel()).view(tensor.sizes()));
      offset += tensor.numel();
    }
    rendezvous_.leave(key);
    interval.end = record_on(compute);
    return interval;
  }

  void abort(const std::string& reason) override {
    mailboxes_.abort(reason);
    rendezvous_.abort(reason);
  }

 private:
  struct Message {
    at::Tensor tensor;
    std::shared_ptr<EventStamp> ready;
  };
  /** A participant's flattened gradients, readable once `ready` is reached. */
  struct Contribution {
    at::Tensor tensor;
    std::shared_ptr<EventStamp> ready;
    int device = 0;
  };
  const std::vector<DeviceStreams>& devices_;
  bool through_host_;
  Mailboxes<Message> mailboxes_;
  Rendezvous<Contribution> rendezvous_;
};

class CudaBackend : public Backend {
 public:
  CudaBackend(const DeviceSpec& spec, int devices, bool copy_through_host) : copy_through_host_(copy_through_host) {
    const int gpus = static_cast<int>(c10::cuda::device_count());
    if (gpus == 0) throw InputError(fmt::format("--device {}: no CUDA GPU is visible", spec.kind));
    if (spec.kind == "cuda") {
      if (devices > gpus)
        throw InputError(fmt::format("--device cuda: the Program has {} devices (one GPU each); this machine has {} GPU(s) "
                                     "(cuda-partitioned:N splits one GPU into N devices)",
                                     devices, gpus));
      for (int d = 0; d < devices; ++d) {
        const auto index = static_cast<c10::DeviceIndex>(d);
        devices_.push_back({d, fmt::format("gpu{}", d), c10::cuda::getStreamFromPool(false, index),
                            c10::cuda::getStreamFromPool(false, index), c10::cuda::getStreamFromPool(false, index)});
      }
    } else if (spec.kind == "cuda-partitioned") {
      try {
        partitions_ = std::make_unique<cuda::GreenContextPartitions>(0, devices);
      } catch (const cuda::DeviceError& error) {
        throw InputError(fmt::format("--device cuda-partitioned:{}: {}", devices, error.what()));
      }
      for (const cuda::SmPartition& partition : partitions_->partitions()) {
        devices_.push_back({0, fmt::format("gpu0p{}", partition.index),
                            c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(partition.stream), 0),
                            c10::cuda::getStreamFromPool(false, 0), c10::cuda::getStreamFromPool(false, 0)});
      }
    } else {
      throw InputError(fmt::format("--device {}: not a CUDA device kind", spec.kind));
    }
  }

  std::string host_name(int device) const override { return devices_.at(device).host; }

  torch::Device torch_device(int device) const override {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(devices_.at(device).gpu));
  }

  void enter_worker(int device) override {
    at::set_num_threads(1);
    current_worker = device;
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(devices_.at(device).gpu));
    c10::cuda::setCurrentCUDAStream(devices_.at(device).compute);
  }

  void start_clock() override {
    synchronize();
    epochs_.clear();
    for (const DeviceStreams& device : devices_) {
      if (epochs_.count(device.gpu)) continue;
      c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device.gpu));
      epochs_.emplace(device.gpu, record_on(device.compute));
    }
    synchronize();
  }

  Stamp stamp(int device) override { return record_on(devices_.at(device).compute); }

  void hold(int device, double seconds) override {
    // A spin kernel on the compute stream; about 2 GHz (an H100's or
    // H200's SM clock under load): only a lower bound on the time matters.
    c10::cuda::CUDAStreamGuard on_compute(devices_.at(device).compute);
    at::cuda::sleep(static_cast<std::int64_t>(seconds * 2e9));
  }

  void synchronize() override {
    for (const DeviceStreams& device : devices_) {
      device.compute.synchronize();
      device.copy.synchronize();
      device.incoming.synchronize();
    }
  }

  double seconds(const Stamp& stamp) const override {
    const auto& event = *std::static_pointer_cast<EventStamp>(stamp.event);
    const auto& epoch = *std::static_pointer_cast<EventStamp>(epochs_.at(event.device_index).event);
    return static_cast<double>(epoch.event.elapsed_time(event.event)) / 1e3;
  }

  std::unique_ptr<Transport> make_transport() override { return std::make_unique<CudaTransport>(devices_, copy_through_host_); }

  std::optional<std::int64_t> peak_memory_bytes(int device) const override {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(devices_.at(device).gpu));
    return static_cast<std::int64_t>(stats.allocated_bytes[0].peak);  // [0]: the aggregate over pool kinds
  }

  std::optional<std::int64_t> memory_capacity_bytes(int device) const override {
    const int gpu = devices_.at(device).gpu;
    c10::cuda::CUDAGuard on_gpu(static_cast<c10::DeviceIndex>(gpu));
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return std::nullopt;
    std::int64_t sharing = 0;
    for (const DeviceStreams& other : devices_) sharing += other.gpu == gpu ? 1 : 0;
    return static_cast<std::int64_t>(total) / sharing;
  }

 private:
  bool copy_through_host_;
  std::unique_ptr<cuda::GreenContextPartitions> partitions_;  ///< outlives the streams made from it
  std::vector<DeviceStreams> devices_;
  std::map<int, Stamp> epochs_;  ///< GPU index -> its epoch event
};

}  // namespace

bool cuda_backend_built() { return true; }

std::unique_ptr<Backend> make_cuda_backend(const DeviceSpec& spec, int devices, bool copy_through_host) {
  return std::make_unique<CudaBackend>(spec, devices, copy_through_host);
}

}  // namespace pipegrid::validate::detail
