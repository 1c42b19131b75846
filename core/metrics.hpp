#pragma once
// Metrics derived from a timeline. Memory follows SEMANTICS.md: weights +
// gradients, activation stashes (F start .. matching B end; with
// recomputation only the stage input, plus the full stash from R start to B
// end) and receive buffers (arrival .. end of the consuming operation).

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/partition.hpp"
#include "core/timeline.hpp"

namespace pipegrid {

struct MemoryModel {
  std::vector<StageCost> stages;
  bool recompute = false;
  /// device memory capacity per host; absent = unlimited
  std::map<std::string, double> capacity_bytes;
};

struct DeviceMetrics {
  std::string host;
  int stage = 0;
  double busy_s = 0;  ///< time the device computes (union over its streams)
  double bubble_fraction = 0;
  int peak_stashed_microbatches = 0;
  double peak_memory_bytes = 0;
  std::optional<double> memory_capacity_bytes;
  bool oom = false;
};

struct Metrics {
  double minibatch_time_s = 0;  ///< span of the run divided by the mini-batches
  double throughput_samples_per_s = 0;
  double bubble_fraction = 0;  ///< mean over devices
  double bytes_per_sample = 0;
  int samples_per_minibatch = 0;
  std::vector<DeviceMetrics> devices;
};

/** Fills TimelineRecord::memory_bytes (device memory after each record ends)
 *  and returns per-host peak memory and peak stashed micro-batches.
 *  `stage_of_host` maps each host to its stage. */
struct MemoryPeaks {
  std::map<std::string, double> peak_bytes;
  std::map<std::string, int> peak_stashed;
};
MemoryPeaks annotate_memory(Timeline& timeline, const MemoryModel& model,
                            const std::map<std::string, int>& stage_of_host);

Metrics compute_metrics(Timeline& timeline, const MemoryModel& model,
                        const std::map<std::string, int>& stage_of_host, int mini_batches,
                        int samples_per_minibatch);

}  // namespace pipegrid
