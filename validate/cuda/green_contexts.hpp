#pragma once
// One GPU split into SM partitions with CUDA green contexts, each partition
// with its own stream: the `cuda-partitioned:N` device of `pipegrid
// execute`, so that a single-GPU machine runs an N-stage pipeline on N
// isolated devices (two 64-SM halves of an H100 each ran an 8192^3 fp32
// matmul in 43 ms alone and 43 ms concurrently).
//
// Only the CUDA driver API, loaded at run time (dlopen of libcuda.so.1): this
// file compiles against the toolkit's cuda.h wherever it is installed and
// links without a driver; a machine without one gets a DeviceError when it
// asks for partitions. The LibTorch glue (wrapping a partition's stream with
// c10::cuda::getStreamFromExternal) lives with the CUDA backend, built only
// where a CUDA LibTorch is found.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipegrid::cuda {

/** The CUDA driver or device cannot give what was asked (no driver, too
 *  old a driver, no such device, too few SMs for the split). */
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/** The driver and a device, as the driver reports them. */
struct DeviceDescription {
  int driver_version = 0;  ///< 13000 for CUDA 13.0
  int ordinal = 0;
  std::string name;
  int sm_count = 0;
  int min_partition_sms = 0;  ///< smallest SM group the device can split off
  int partition_alignment = 0;  ///< SMs co-scheduled together; partition sizes are multiples of it
};

/** Describes device `ordinal`. Throws DeviceError. */
DeviceDescription describe_device(int ordinal);

/** One SM partition: a green context and the stream created in it. The
 *  handles are the driver's CUgreenCtx and CUstream, kept opaque here so that
 *  users of this header need no CUDA headers. */
struct SmPartition {
  int index = 0;
  int sm_count = 0;
  void* green_context = nullptr;  ///< CUgreenCtx
  void* stream = nullptr;         ///< CUstream (a cudaStream_t in the runtime API)
};

/** The SM plan of a split, without a GPU: `count` equal partitions of
 *  `sm_count` SMs, each a multiple of `alignment` and at least `minimum`
 *  SMs, as large as those allow; leftover SMs stay unused. Throws
 *  std::invalid_argument when count < 1, and DeviceError when the device is
 *  too small for `count` partitions. */
int partition_sm_count(int sm_count, int count, int minimum, int alignment);

/** Splits device `ordinal` into `count` partitions of equal SM count
 *  (partition_sm_count), each with a green context and a non-blocking
 *  stream. Destroys them on destruction. Not copyable. */
class GreenContextPartitions {
 public:
  GreenContextPartitions(int ordinal, int count);
  ~GreenContextPartitions();
  GreenContextPartitions(const GreenContextPartitions&) = delete;
  GreenContextPartitions& operator=(const GreenContextPartitions&) = delete;

  const DeviceDescription& device() const { return device_; }
  const std::vector<SmPartition>& partitions() const { return partitions_; }

 private:
  void release() noexcept;  ///< destroys every stream and context made so far

  DeviceDescription device_;
  std::vector<SmPartition> partitions_;
};

}  // namespace pipegrid::cuda
