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

/** How a schedule keeps weight versions (SEMANTICS.md, Weight versions). A
 *  new version appears at every update: at the end of a device's all-reduce
 *  when it has ALLREDUCE records, else after every `update_interval`-th
 *  backward on the device. A device keeps the latest version and every older
 *  one still referenced. */
enum class WeightVersioning {
  Single,        ///< flushed schedules and dp: one version, updated at the flush
  Stashing,      ///< pipedream, 2bw: a forward takes the latest version and keeps it until its backward ends
  VerticalSync,  ///< pipedream --vertical-sync: a mini-batch uses, on every stage, the version the input stage gave it
  Prediction,    ///< pipeoptim: the latest version, plus a predicted one while a forward runs
};

struct MemoryModel {
  std::vector<StageCost> stages;
  bool recompute = false;
  WeightVersioning versioning = WeightVersioning::Single;
  int update_interval = 1;   ///< backwards per update on a device without all-reduces
  int optimizer_copies = 0;  ///< optimizer state in weight copies: sgd 0, momentum 1, adam 2
  /// device memory capacity per host; absent = unlimited
  std::map<std::string, double> capacity_bytes;
};

struct DeviceMetrics {
  std::string host;
  int stage = 0;
  double busy_s = 0;  ///< time the device computes (union over its streams), whole run
  /// Flushed: 1 - busy / run span. Otherwise 1 - busy / (mini-batches x
  /// steady-state period): the idle share of the device in steady state.
  double bubble_fraction = 0;
  int peak_stashed_microbatches = 0;
  int peak_weight_versions = 1;
  double peak_memory_bytes = 0;
  std::optional<double> memory_capacity_bytes;
  bool oom = false;
};

/** Steady state of a schedule that does not flush: mini-batch completions
 *  (the end of a mini-batch's last operation) settle into gaps that repeat
 *  in cycles of `cycle_minibatches`. */
struct SteadyState {
  bool periodic = false;       ///< false: no exact cycle found; period = mean gap over the middle half of the run
  double period_s = 0;         ///< mean gap between completions over whole cycles
  int cycle_minibatches = 0;   ///< completions per cycle (0 when not periodic)
  int warmup_minibatches = 0;  ///< completions before the periodic regime
  double warmup_s = 0;         ///< from the first operation to the first periodic completion
  double window_start_s = 0, window_end_s = 0;  ///< the completions the period is measured between
};

/** Finds the steady state of mini-batch completion times (any order). */
SteadyState steady_state_of(std::vector<double> completions, double run_start_s);

struct Metrics {
  /// Flushed schedules: span of the run divided by the mini-batches; others:
  /// the steady-state period.
  double minibatch_time_s = 0;
  double throughput_samples_per_s = 0;
  double bubble_fraction = 0;  ///< mean over devices
  double bytes_per_sample = 0;
  int samples_per_minibatch = 0;
  std::optional<SteadyState> steady_state;  ///< for schedules that do not flush
  std::vector<DeviceMetrics> devices;
};

/** Fills TimelineRecord::memory_bytes (device memory after each record ends)
 *  and returns per-host peak memory and peak stashed micro-batches.
 *  `stage_of_host` maps each host to its stage. */
struct MemoryPeaks {
  std::map<std::string, double> peak_bytes;
  std::map<std::string, int> peak_stashed;
  std::map<std::string, int> peak_versions;
};
MemoryPeaks annotate_memory(Timeline& timeline, const MemoryModel& model,
                            const std::map<std::string, int>& stage_of_host);

/** With `steady_state` (schedules that do not flush) the mini-batch time is
 *  the steady-state period and bubbles are measured inside its window. */
Metrics compute_metrics(Timeline& timeline, const MemoryModel& model,
                        const std::map<std::string, int>& stage_of_host, int mini_batches,
                        int samples_per_minibatch, bool steady_state = false);

}  // namespace pipegrid
