#pragma once
// The real executor: runs a Program's per-device action lists with LibTorch,
// one worker thread per device, and records what happened as a Timeline in
// the simulator's schema (hosts cpu0, cpu1, ... or gpu0, gpu1, ... or gpu0p0,
// gpu0p1, ...; F/B/R compute records, SEND_F/SEND_B transfer records with
// bytes). LibTorch-free header.
//
// Time: on CPUs the steady clock around each action on its worker thread; on
// GPUs CUDA events recorded on the worker's compute stream around each
// action and on the sender's copy stream around each copy, read once the run
// is over, so the timeline is the GPU's, not the launching thread's.
//
// Semantics (flushed schedules: gpipe, 1f1b-sno, 1f1b-so, with or without
// recomputation): each micro-batch's loss is scaled by 1/M, gradients
// accumulate over the mini-batch's backwards on a device, and after its last
// backward of a mini-batch the device takes one SGD step on its stage and
// clears the gradients. This equals one SGD step on the whole mini-batch.
//
// Weight stashing (pipedream: one micro-batch per mini-batch, several
// mini-batches in flight): a forward uses the stage's latest weights and
// stashes a copy of them; its backward computes the gradients at that
// stashed version, and every backward is followed by an SGD step on the
// latest weights. This is PipeDream's delayed-weights update (section 3.3):
// w(t+1) = w(t) - lr * grad f(w_1(t-n+1), ..., w_n(t)) on a straight pipeline.

#include <cstdint>
#include <string>
#include <vector>

#include "core/program.hpp"
#include "core/timeline.hpp"
#include "validate/model_zoo.hpp"

namespace pipegrid::validate {

/** Where the devices are. `cpu:N`: N worker threads, one intra-op thread
 *  each; `cpu`: one worker per device of the Program. `cuda`: one GPU per
 *  device (cuda:0, cuda:1, ...); `cuda:N`: the same, checked to be N.
 *  `cuda-partitioned:N`: GPU 0 split into N SM partitions with CUDA green
 *  contexts, each partition one device with its own compute stream. The
 *  cuda kinds run only in a build against a CUDA LibTorch. */
struct DeviceSpec {
  std::string kind = "cpu";  ///< cpu, cuda or cuda-partitioned
  int count = 0;             ///< 0: one per Program device
};

/** Parses `cpu`, `cpu:N`, `cuda`, `cuda:N` or `cuda-partitioned:N` (N >= 1);
 *  InputError otherwise. */
DeviceSpec parse_device_spec(const std::string& text);

/** True when this build can run the cuda kinds (built against a CUDA
 *  LibTorch); whether a GPU is present is found out when one is asked for. */
bool cuda_devices_built();

struct ExecutionRequest {
  ModelConfig model;
  LayerRanges stages;   ///< layer range of each stage (one per Program stage)
  Program program;      ///< one device per stage, one stream each, no all-reduces
  int micro_batch_size = 8;
  /// The Program's first mini-batches that are run but left out of the
  /// timeline and the times (warm-up: allocator, caches, thread start).
  int warmup_mini_batches = 0;
  double learning_rate = 0.01;
  std::uint64_t seed = 1;  ///< weights and data
  DeviceSpec device;
  /// Record each stage's final weights and last mini-batch's gradients.
  bool keep_state = false;
  /// Weight stashing (see above), for Programs without a flush (pipedream);
  /// the Program must have one micro-batch per mini-batch.
  bool weight_stashing = false;
  /// GPUs: stage every copy through pinned host memory (device to host,
  /// then host to device, on the sender's copy stream), as over PCIe
  /// without peer access; default: one device-to-device copy.
  bool copy_through_host = false;
};

/** Parameters of a stage (or of the whole model), each flattened, in layer
 *  order (the order of LibTorch's Module::parameters()). */
struct ModelState {
  std::vector<std::vector<float>> weights;    ///< after the last update
  std::vector<std::vector<float>> gradients;  ///< accumulated over the last mini-batch, before its update
};

struct DeviceSummary {
  std::string host;
  int stage = 0;
  double busy_s = 0;  ///< F, B and R time over the measured mini-batches
  double step_s = 0;  ///< optimizer steps over the measured mini-batches
  /// Peak bytes allocated on the device over the whole run (warm-up
  /// included), where measured (GPUs; partitions of one GPU each report the
  /// whole GPU's); -1 when not measured (CPU).
  std::int64_t peak_memory_bytes = -1;
};

struct ExecutionResult {
  /// Measured mini-batches only, renumbered from 0, times in seconds from the
  /// start of the first measured action.
  Timeline timeline;
  int measured_mini_batches = 0;
  /// Span of the measured part divided by the measured mini-batches.
  double minibatch_time_s = 0;
  std::vector<DeviceSummary> devices;
  std::vector<ModelState> stages;  ///< with keep_state, one per stage
};

/** Runs the request. Throws InputError for a request it cannot run (unknown
 *  device or one this build or machine lacks, device count or stage ranges that do not match the Program,
 *  several streams per device, replicated stages) and ProgramError for an
 *  invalid Program; std::runtime_error when LibTorch fails in a worker. */
ExecutionResult execute(const ExecutionRequest& request);

/** The single-device reference: the whole model on the calling thread; for
 *  each of `mini_batches` mini-batches, the M micro-batches (the same data as
 *  execute() uses) concatenated into one batch, one backward of the mean
 *  loss and one SGD step. Returns the whole model's state (keep_state's
 *  layout: the stages' lists concatenated). */
ModelState run_reference(const ModelConfig& model, int micro_batches, int mini_batches, int micro_batch_size,
                         double learning_rate, std::uint64_t seed);

}  // namespace pipegrid::validate
