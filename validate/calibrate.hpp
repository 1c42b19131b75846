#pragma once
// Calibration: measures a zoo model layer by layer on one worker thread and
// the in-process transport's copy cost, and turns the measurements into the
// simulator's inputs (a Profile and a SimGrid platform XML describing the
// cpu:N machine that ran). LibTorch-free header; the measuring is in
// calibrate.cpp, the writing of the inputs in calibration_files.cpp.

#include <cstdint>
#include <string>
#include <vector>

#include "core/profile.hpp"
#include "validate/model_zoo.hpp"

namespace pipegrid::validate {

struct CalibrationRequest {
  ModelConfig model;  ///< resolved
  int micro_batch_size = 8;
  int devices = 2;      ///< hosts of the platform (cpu0 .. cpuN-1)
  int warmup = 2;       ///< runs before the timed ones
  int repeats = 5;      ///< timed runs; the median is kept
  std::uint64_t seed = 1;
};

struct CopySample {
  double bytes = 0;
  double seconds = 0;  ///< median of the repeats
};

struct Calibration {
  /// One per layer: forward and backward time (median of the repeats, one
  /// intra-op thread), output bytes (the tensor crossing the cut after the
  /// layer) and parameter bytes.
  Profile profile;
  /// Transport copies (send + receive of one float tensor) and the
  /// weighted least-squares fit seconds = latency + bytes / bandwidth (latency
  /// clamped at 0, bandwidth from the fitted slope).
  std::vector<CopySample> copies;
  double latency_s = 0;
  double bandwidth_bytes_per_s = 0;
  /// SGD step time per parameter byte (whole model, one thread).
  double optimizer_s_per_byte = 0;
};

/** Measures the model on the calling thread (at::set_num_threads(1) for the
 *  duration, restored after). Throws InputError for repeats < 1, warmup < 0,
 *  micro-batch size < 1 or devices < 1. */
Calibration calibrate(const CalibrationRequest& request);

/** Least-squares line seconds = a + b x bytes through the samples (at least
 *  two distinct sizes; InputError otherwise), weighted by 1 / seconds^2 (relative
 *  residuals): returns {max(a, 0), 1 / b}; bandwidth is infinite
 *  (std::numeric_limits<double>::infinity()) when b <= 0. */
std::pair<double, double> fit_latency_bandwidth(const std::vector<CopySample>& samples);

/** SimGrid platform XML (version 4.1) of `devices` hosts cpu0 .. cpuN-1
 *  (kind gpu: synchronous execution, one action at a time, as a worker
 *  thread runs them), one link per pair of hosts with the fitted bandwidth
 *  and latency, and a route between every pair. */
std::string calibration_platform_xml(const Calibration& calibration, int devices, const std::string& description);

}  // namespace pipegrid::validate
