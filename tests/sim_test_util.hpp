#pragma once
// Helpers for tests that run the SimGrid engine: generated latency-only chain
// platforms in temporary files, balanced stage costs, and one call that runs
// generate_schedule + simulate + compute_metrics for a pipeline shape.

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/metrics.hpp"
#include "core/partition.hpp"
#include "core/platform.hpp"
#include "core/timeline.hpp"
#include "sim/engine.hpp"

namespace pipegrid::testutil {

/** A file in the system's temporary directory holding `contents`, removed
 *  when the object goes. The name starts with `stem` and ends with `suffix`. */
class TempFile {
 public:
  TempFile(const std::string& stem, const std::string& suffix, const std::string& contents);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/** Name of host `index` of a generated chain: "d0", "d1", ... */
std::string chain_host(int index);

/** SimGrid platform XML: a chain of `num_hosts` one-core hosts d0..d{n-1} of
 *  speed 1 flop/s (so an operation of t profile seconds is t flops and takes
 *  exactly t seconds alone), each with property kind = gpu or fpga, and one
 *  SPLITDUPLEX link between neighbours with latency `hop_s` seconds. The
 *  tests send 0-byte messages, so a message takes exactly `hop_s` per hop
 *  whatever the bandwidth (a large one is declared anyway). `hop_s` may be 0. */
std::string chain_platform_xml(int num_hosts, DeviceKind kind, double hop_s);

/** A star: hosts h0..h{n-1} (1 flop/s), each with its own SPLITDUPLEX link
 *  l<h> to a switch (latency `latency_s`, bandwidth `bandwidth_Bps`); a route
 *  crosses the sender's link up and the receiver's link down. */
std::string star_platform_xml(int num_hosts, double latency_s, double bandwidth_Bps);

/** Stage costs of a balanced pipeline: every stage takes `forward_s` and
 *  `backward_s`; messages carry 0 bytes (latency-only timing); stage s (from 0)
 *  has stash_bytes = stash_unit(s) and weight_bytes = weight_unit(s), distinct
 *  per stage so memory accounting is testable. */
std::vector<StageCost> balanced_stages(int num_stages, double forward_s, double backward_s);
double stash_unit(int stage);
double weight_unit(int stage);

/** One simulated mini-batch of a flushed schedule on a balanced chain. */
struct SimCase {
  std::string schedule;
  int stages = 2;
  int micro_batches = 1;
  double forward_s = 1, backward_s = 1;
  double hop_s = 0;  ///< SR: message time per hop (link latency)
  sim::TransferRule transfer_rule = sim::TransferRule::Share;
};
std::string describe(const SimCase& sim_case);

struct SimOutcome {
  double minibatch_time_s = 0;
  double bubble_fraction = 0;            ///< pipeline bubble (mean over devices)
  std::vector<double> busy_s;            ///< per stage
  std::vector<int> peak_stashed;         ///< per stage, peak stashed micro-batches
  std::vector<double> peak_memory_bytes; ///< per stage
  Timeline timeline;                     ///< as simulate() returned it, memory annotated
};

/** Keeps one generated platform file per (hosts, kind, hop time). */
class PlatformCache {
 public:
  const std::string& get(int num_hosts, DeviceKind kind, double hop_s);

 private:
  std::map<std::tuple<int, int, double>, std::unique_ptr<TempFile>> files_;
};

/** Runs `sim_case` on `platform_file` (a chain with at least `stages` hosts
 *  named as chain_host gives): the schedule's Program, simulate (analytic
 *  network model) and compute_metrics. Throws what they throw. */
SimOutcome run_case(const SimCase& sim_case, const std::string& platform_file);

/** Same, on a chain platform from `cache` whose kind is the schedule's
 *  intended kind (GPUs for gpipe and 1f1b-sno/so, FPGAs for 1f1b-as and fbp-as). */
SimOutcome run_case(const SimCase& sim_case, PlatformCache& cache);

/// One mini-batch of the dp schedule over r replicas of one stage (one
/// micro-batch each, forward and backward `compute_s` each), gradients of
/// `weight_bytes`, on the platform file `platform_path`, over the hosts
/// `hosts` in ring order (empty: h0 ... h(r-1)); analytic network.
sim::SimulationResult simulate_dp_ring(const std::string& platform_path, int r, double weight_bytes, double compute_s,
                                       sim::CollectiveModel model, bool distributed = false,
                                       double gradient_bytes_per_weight_byte = 1,
                                       const std::vector<std::string>& hosts = {});

/// Per host: (start, end) of its record of `action` in `result`'s timeline.
std::map<std::string, std::pair<double, double>> action_spans(const sim::SimulationResult& result,
                                                             const std::string& action);

}  // namespace pipegrid::testutil
