#pragma once
// A run split by process: each process runs some of the Program's devices
// (run_devices, all of them with the threads launcher, one with the c10d
// launchers) and yields a RunPart; the parts, put on one clock, make the
// ExecutionResult (assemble). Includes LibTorch (through backend.hpp).

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/timeline.hpp"
#include "validate/detail/backend.hpp"
#include "validate/executor.hpp"
#include "validate/transport.hpp"

namespace pipegrid::validate::detail {

/** What one device did. Times in seconds from its part's origin. */
struct DevicePart {
  int device = 0;
  std::string host;  ///< its timeline host name (cpu1, gpu1)
  /// Every record, warm-up included, its stream's records in order, stream 0 first.
  std::vector<TimelineRecord> records;
  std::vector<std::pair<int, double>> steps;  ///< (mini-batch, seconds) of each optimizer step
  std::int64_t peak_memory_bytes = -1;
  /// keep_state: (stage, its final state), the device's stages in order.
  std::vector<std::pair<int, ModelState>> stages;
};

struct RunPart {
  std::vector<DevicePart> devices;  ///< in device order
  /// The part's time zero on the run's common clock (CLOCK_MONOTONIC
  /// seconds of this host; across hosts, rank 0's, through the offset).
  double origin_s = 0;
  double clock_offset_residual_s = 0;
};

/** CLOCK_MONOTONIC, in seconds: the clock of CPU stamps, shared by the
 *  processes of one host. */
double monotonic_seconds();

/** The device that runs each action of `program`. */
std::map<Action, int> device_of_actions(const Program& program);

/** The checks of execute() (see execute()'s InputErrors). */
void check_request(const ExecutionRequest& request, int devices);

/** Runs the devices `local` of the request's Program (ascending) in this
 *  process, one worker thread per stream, with `backend` and `transport`
 *  (whose receives and all-reduces cover the other devices); calls `ready`
 *  once every local weight and micro-batch is in place, just before the
 *  clock starts (a barrier across processes). Throws as execute() does. */
RunPart run_devices(const ExecutionRequest& request, const std::vector<int>& local, Backend& backend, Transport& transport,
                    const std::function<void()>& ready);

/** The result from the parts that together ran every device once; the
 *  parts' origins put their times on one clock. */
ExecutionResult assemble(const ExecutionRequest& request, const std::vector<RunPart>& parts);

/** True when the NCCL transport is built (a CUDA LibTorch with NCCL). */
bool nccl_transport_built();

/** The processes launcher (validate/c10d.cpp): spawns the ranks, waits,
 *  merges. And the env launcher: this process's rank. */
ExecutionResult execute_in_processes(const ExecutionRequest& request);
ExecutionResult execute_from_env(const ExecutionRequest& request);

}  // namespace pipegrid::validate::detail
