#pragma once
// Calibration: measures a zoo model layer by layer on one device of the
// machine that will run it (a worker thread of cpu:N, a GPU of cuda, an SM
// partition of cuda-partitioned:N), the transport's copy cost between two of
// its devices, the optimizer step and the executor's per-action overhead,
// and turns the measurements into the simulator's inputs (a Profile and a
// SimGrid platform XML describing the machine that ran). LibTorch-free header; the measuring is in calibrate.cpp, the
// attribution of the overhead and the writing of the inputs in
// calibration_files.cpp.

#include <cstdint>
#include <string>
#include <vector>

#include "core/profile.hpp"
#include "core/timeline.hpp"
#include "validate/executor.hpp"
#include "validate/model_zoo.hpp"

namespace pipegrid::validate {

struct CalibrationRequest {
  ModelConfig model;  ///< resolved
  int micro_batch_size = 8;
  DeviceSpec device{"cpu", 2};  ///< the machine; count = hosts of the platform
  bool copy_through_host = false;  ///< GPUs: copies staged through pinned host memory
  int warmup = 2;       ///< runs before the timed ones
  int repeats = 5;      ///< timed runs; the median is kept
  std::uint64_t seed = 1;
  /// processes or env: the copies are measured between two ranks through
  /// c10d (Gloo on cpu), and the overhead runs use the launcher.
  Launcher launcher;
  /// cpu:N with N > 1: while device 0 is timed, devices 1..N-1 run forward
  /// and backward passes of the same model on worker threads of their own,
  /// as busy as a pipeline keeps them, so that the layer times hold their
  /// contention (shared cores, memory bandwidth, caches). False: they idle.
  bool busy_devices = true;
};

struct CopySample {
  double bytes = 0;
  double seconds = 0;  ///< median of the repeats
};

struct Calibration {
  /// False on the ranks of an env launch other than 0 (their copies and
  /// overhead are rank 0's to report); write nothing from them.
  bool primary = true;
  /// The devices as the executor names them (cpu0.., gpu0.., gpu0p0..), and
  /// the memory each may use where the backend knows it (0: unknown).
  std::vector<std::string> hosts;
  double memory_bytes = 0;
  /// How times were taken: "steady clock" (CPU) or "CUDA events".
  std::string clock;
  /// One per layer: forward and backward time (median of the repeats, one
  /// intra-op thread), output bytes (the tensor crossing the cut after the
  /// layer) and parameter bytes.
  Profile profile;
  /// Transport copies (send + receive of one float tensor) and the
  /// weighted least-squares fit seconds = latency + bytes / bandwidth (latency
  /// clamped at 0, bandwidth from the fitted slope).
  std::vector<CopySample> copies;
  /// The split backward as the executor runs it (zero-bubble I and W, per
  /// operator): the sum over layers of I + W, and of B. The profile keeps
  /// each layer's B and divides it between I and W in the measured ratio
  /// (docs/formats.md: I + W = B); this is what the split costs beyond B.
  double split_backward_s = 0;
  double whole_backward_s = 0;
  double latency_s = 0;
  double bandwidth_bytes_per_s = 0;
  /// The optimizer step as the executor takes it (SGD step + zero_grad),
  /// timed over the parameters of the model's layer prefixes 0..k (one
  /// sample per distinct size, median of the repeats), and the weighted fit
  /// seconds = step_overhead_s + bytes / step_rate_bytes_per_s
  /// (fit_latency_bandwidth; with a single size: overhead 0, rate
  /// bytes / seconds). No parameters: no samples, overhead 0, rate 0.
  std::vector<CopySample> steps;
  double step_overhead_s = 0;
  double step_rate_bytes_per_s = 0;
  /// The executor's per-action overhead, attributed from real runs of a
  /// small plan (attribute_overhead; what ran is in `plan`).
  struct Overhead {
    std::string plan;  ///< what ran, for the platform's comment
    double in_action_s = 0, dispatch_s = 0, send_s = 0, wakeup_s = 0;
    double action_overhead_s = 0;
    /// How much longer than their profiled layer sums the stage actions
    /// ran beyond in_action_s, as a factor (fit_stage_times): the workers'
    /// contention beyond what the profile holds (time-slicing on shared
    /// cores included), and the stage's one autograd call against the sum
    /// of per-layer ones. The platform's hosts get speed_factor =
    /// 1 / compute_factor.
    double compute_factor = 1;
    std::string fit_note;  ///< why the fit was bounded; empty when it was not
    int actions = 0;
  } overhead;
  /// Devices other than device 0 kept busy while device 0 was timed
  /// (CalibrationRequest::busy_devices); 0 when they were idle.
  int busy_devices = 0;
  /// Forward + backward passes of the whole model they ran meanwhile.
  long busy_passes = 0;
};

/// The quantile that stands for a measured time in the attribution (the
/// lower quartile): contention only ever lengthens a time, so the lower
/// quartile is the uncontended one as long as a quarter of the samples ran
/// without waiting for a core (a median needs half; on a 2-core machine
/// shared with other jobs fewer than half do).
inline constexpr double kTypicalQuantile = 0.25;

/// The compute actions of one (kind, stage) in measured runs: the stage's
/// profiled layer time for that kind, and each action's duration.
struct StageTimeGroup {
  double layers_s = 0;
  std::vector<double> durations_s;
};

/// Action duration = constant_s + factor x profiled layer time.
struct StageTimeFit {
  double constant_s = 0;
  double factor = 1;
  std::string note;  ///< why it was bounded, or fell back; empty otherwise
};

/// Profiled layer times of the groups must differ by this fraction for a
/// factor to be fitted (fit_stage_times).
inline constexpr double kDistinctLayerTimes = 0.25;
/// The fitted constant is at most this share of the shortest group's typical
/// duration (fit_stage_times).
inline constexpr double kMaxConstantShare = 0.75;

/** Separates what every compute action pays whatever its size (the
 *  constant: graph set-up, the loss, stashing) from what grows with its
 *  layers (the factor: contention of workers sharing cores, caches and
 *  memory, and the profile's error), so that contention is never taken for
 *  a per-action constant.
 *  - constant_s: the intercept of the least-squares line through the
 *    groups' typical durations (kTypicalQuantile) against their layer
 *    times, weighted by the groups' action counts (descheduled outliers move
 *    no quartile). With fewer than two layer times kDistinctLayerTimes
 *    apart nothing tells a factor from a constant: the count-weighted mean of (group typical -
 *    layer time), and `note` says so. Then bounded to [0, kMaxConstantShare
 *    x the shortest group typical]; `note` says when it was.
 *  - factor: (sum of all durations - actions x constant_s + stalled_s) /
 *    sum of the actions' layer times: every second the actions took beyond
 *    the constant, and `stalled_s` (time a worker with work to do waited for
 *    a core outside its actions; a negative one counts as 0), per profiled
 *    second. Descheduled time is included: a
 *    time-sliced worker pays it in the real run, in proportion to how long
 *    it has work. 1 when that is not positive.
 *  No group: constant 0, factor 1. */
StageTimeFit fit_stage_times(const std::vector<StageTimeGroup>& groups, double stalled_s = 0);

/** What the executor costs beyond the profiled layer times, attributed
 *  from measured timelines of one plan (each from validate::execute, one
 *  device per stage, stage s running layers ranges[s]). Per compute action
 *  (F, B, R), with `layers` its stage's profiled forward (F, R) or backward
 *  (B) sum:
 *  - in_action_s, compute_factor, fit_note: fit_stage_times over the
 *    groups (kind, stage) of (layers, duration) (the constant is
 *    in_action_s), stalled_s = what the dispatch gaps, the sends and the
 *    waits below took beyond their typical values (a worker with work to
 *    do waiting for a core);
 *  - dispatch_s: the typical (kTypicalQuantile) gap between an action's
 *    start and the end of the device's previous record, over the actions whose input was already
 *    there and that do not follow the device's last backward of a
 *    mini-batch (the optimizer step runs there, unrecorded). A remote input
 *    is there at its SEND record's start + the fitted copy time
 *    copy_latency_s + bytes / copy_bandwidth_Bps (not at the record's end:
 *    a sender descheduled after handing the message over ends it late);
 *  - send_s: the device time spent in SEND records (the executor's worker
 *    copies the tensor itself): the typical send duration x sends / compute
 *    actions;
 *  - action_overhead_s = max(0, in_action_s + dispatch_s + send_s);
 *  - wakeup_s: message delivery beyond the copy, max(0, the typical over the
 *    actions that waited for a remote input of (start - the time it was
 *    there) - dispatch_s), 0 without such actions.
 *  `actions`: compute actions seen. InputError when no timeline has a
 *  compute action, or a stage has no range. */
Calibration::Overhead attribute_overhead(const std::vector<Timeline>& measured, const Profile& profile,
                                         const LayerRanges& ranges, double copy_latency_s, double copy_bandwidth_Bps);

/** Measures the model on device 0 of `request.device`, from a thread of its
 *  own made a worker of that device (one intra-op thread; on a GPU its
 *  compute stream current), timed with the device's stamps (steady clock,
 *  or CUDA events on the stream the work runs on). Throws InputError for
 *  repeats < 1, warmup < 0, micro-batch size < 1, fewer than 1 device, or a
 *  device this build or machine lacks. */
Calibration calibrate(const CalibrationRequest& request);

/** Least-squares line seconds = a + b x bytes through the samples (at least
 *  two distinct sizes; InputError otherwise), weighted by 1 / seconds^2 (relative
 *  residuals): returns {max(a, 0), 1 / b}; bandwidth is infinite
 *  (std::numeric_limits<double>::infinity()) when b <= 0. */
std::pair<double, double> fit_latency_bandwidth(const std::vector<CopySample>& samples);

/** SimGrid platform XML (version 4.1) of `devices` hosts, named as
 *  calibration.hosts (cpu0 .. cpuN-1 when it does not list `devices`)
 *  (kind gpu: synchronous execution, one action at a time, as a worker
 *  thread runs them; properties action_overhead, speed_factor = 1 /
 *  overhead.compute_factor, and optimizer_step_rate
 *  and optimizer_step_overhead when a step was fitted; memory when known),
 *  one link per pair of
 *  hosts with the fitted bandwidth and latency + the measured wake-up, and
 *  a route between every pair. */
std::string calibration_platform_xml(const Calibration& calibration, int devices, const std::string& description);

}  // namespace pipegrid::validate
