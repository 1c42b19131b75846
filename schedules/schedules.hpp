#pragma once
// Schedule generators: pure functions from a pipeline shape to a Program.
// No SimGrid, no LibTorch: a schedule is data, the engines interpret it.

#include <string>
#include <vector>

#include "core/platform.hpp"
#include "core/program.hpp"

namespace pipegrid {

struct ScheduleOptions {
  int num_stages = 1;
  int micro_batches = 1;
  int mini_batches = 1;
  /// Activation recomputation (flushed schedules): an R is run right before
  /// each B, and only stage inputs stay stashed between F and R.
  bool recompute = false;
};

struct ScheduleInfo {
  std::string name;
  std::string summary;
  DeviceKind intended_kind;  ///< the device kind the schedule was designed for
  bool needs_async;          ///< rejected on synchronous hosts (fbp-as)
  bool flushed;              ///< flush and synchronous update per mini-batch
};

/** Every schedule pipegrid knows, in a stable order. */
const std::vector<ScheduleInfo>& schedule_catalog();

/** The catalog entry for `name`; InputError listing the known names otherwise. */
const ScheduleInfo& schedule_info(const std::string& name);

/** Generates the Program of schedule `name`. Throws InputError on an unknown
 *  name or bad options (stages or micro-batches < 1). */
Program generate_schedule(const std::string& name, const ScheduleOptions& options);

/** Warm-up forwards of 0-based stage `stage` in a flushed 1F1B schedule:
 *  min(N - stage, M) for SNO/AS, min(2(N - stage), M) for SO. */
int warmup_forwards(const std::string& name, int num_stages, int stage, int micro_batches);

/** Errors and warnings for running schedule `name` on these hosts: throws
 *  InputError when an async-only schedule meets a synchronous host (BaPipe:
 *  GPUs cannot run forward and backward in parallel); returns one warning line
 *  per host whose kind differs from the schedule's intended kind. */
std::vector<std::string> check_schedule_for_hosts(const std::string& name,
                                                  const std::vector<HostInfo>& hosts);

}  // namespace pipegrid
