#pragma once
// Where the executor's devices are and how their time is read: the one
// interface between the executor (validate/executor.cpp), which knows
// schedules, weights and data, and the hardware. The CPU backend lives in
// executor.cpp; the CUDA backend (cuda, cuda-partitioned:N) in
// validate/cuda/cuda_backend.cpp, built only against a CUDA LibTorch.
//
// Contract of a run: the executor calls enter_worker(d) on each thread of
// device d before anything else there (one thread per stream of the device's
// Program; two only on CPU devices), start_clock() once every weight and
// every micro-batch is in place on its device and before any worker starts,
// then stamp(d) from device d's threads only; after the workers have joined
// it calls synchronize() and only then seconds(). Collectives (the
// all-reduce of replicated stages) go through the transport, like
// activations and gradients, so a c10d transport can replace the in-process
// one without touching the executor.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "validate/executor.hpp"
#include "validate/transport.hpp"

namespace pipegrid::validate::detail {

class Backend {
 public:
  virtual ~Backend() = default;
  /** The timeline's host name of device `device` (cpu0, gpu1, gpu0p2, ...). */
  virtual std::string host_name(int device) const = 0;
  /** Where device `device`'s stage weights and tensors live. */
  virtual torch::Device torch_device(int device) const = 0;
  /** Prepares the calling thread to be worker `device`: one intra-op thread,
   *  and on a GPU the device and its compute stream made current. */
  virtual void enter_worker(int device) = 0;
  /** Time zero of the run, on every device. */
  virtual void start_clock() = 0;
  /** Now, on worker `device`'s compute stream (its thread only). */
  virtual Stamp stamp(int device) = 0;
  /** Keeps device `device` busy for about `seconds` ahead of the work issued
   *  next from its worker, so that work runs back to back as it does in a
   *  pipeline, without the gap of issuing it to an idle device (a GPU's
   *  launch latency). Nothing where work runs as it is issued (CPU). */
  virtual void hold(int device, double seconds) {
    (void)device;
    (void)seconds;
  }
  /** Waits until every device has finished all its queued work. */
  virtual void synchronize() = 0;
  /** Seconds from start_clock() to `stamp` (after synchronize()). */
  virtual double seconds(const Stamp& stamp) const = 0;
  /** The transport between this backend's devices. */
  virtual std::unique_ptr<Transport> make_transport() = 0;
  /** Peak bytes allocated on device `device` since start_clock(), where the
   *  backend can measure it (not on a CPU). Partitions of one GPU share one
   *  allocator: each reports the whole GPU's peak. */
  virtual std::optional<std::int64_t> peak_memory_bytes(int device) const = 0;
  /** The memory device `device` may use, where known (a GPU's total memory;
   *  partitions of one GPU each get an equal share); none on a CPU. */
  virtual std::optional<std::int64_t> memory_capacity_bytes(int device) const = 0;
};

/** The CPU backend: `devices` worker threads, steady clock. */
std::unique_ptr<Backend> make_cpu_backend(int devices);

/** True in a build against a CUDA LibTorch (the cuda backend is linked). */
bool cuda_backend_built();

/** The CUDA backend for `spec` (kind cuda or cuda-partitioned) with
 *  `devices` devices; `copy_through_host` stages every copy through pinned
 *  host memory. Throws InputError when the machine cannot provide them, and
 *  in a build without CUDA. */
std::unique_ptr<Backend> make_cuda_backend(const DeviceSpec& spec, int devices, bool copy_through_host);

}  // namespace pipegrid::validate::detail
