#pragma once
// Orchestration shared by the CLI's subcommands: a Plan goes in; the
// Program, the simulated Timeline and its Metrics come out.

#include <optional>
#include <string>
#include <vector>

#include "core/io.hpp"
#include "core/metrics.hpp"
#include "core/plan.hpp"
#include "core/platform.hpp"
#include "core/program.hpp"
#include "core/timeline.hpp"

namespace pipegrid::cli {

struct PlanRequest {
  std::string platform_file;
  std::string profile_file;
  std::optional<int> batch_size;
  /// Run micro-batches of this many samples: the profile's times and
  /// activation bytes are taken at this size (profile_at_micro_batch_size).
  /// Absent: the profile's own micro_batch_size.
  std::optional<int> micro_batch_size;
  std::string schedule;
  int micro_batches = 1;
  /// Absent: 1 for flushed schedules, enough to reach the steady state for
  /// the others (max(32, 4 x devices)).
  std::optional<int> mini_batches;
  std::string partition = "uniform";  ///< "uniform" or a partition file
  std::string replicas;               ///< "3,1": replicated stages, layers balanced per replica
  std::string network = "simgrid";
  bool recompute = false;
  std::string optimizer = "sgd";
  bool vertical_sync = false;
  int update_interval = 0;
  double prediction_cost_s_per_byte = 0;
  bool wait_free = false;
  int pipeline_depth = 0;
};

/** Reads the inputs and pins them into a Plan. Throws InputError. */
Plan make_plan(const PlanRequest& request);

struct RunResult {
  PlatformSummary platform;
  Program program;
  Timeline timeline;  ///< memory annotated
  Metrics metrics;
  std::vector<std::string> warnings;
};

/** Generates the Program, validates it, simulates it and computes metrics. */
RunResult run_plan(const Plan& plan);

std::string metrics_to_json(const Plan& plan, const RunResult& result);
std::string metrics_to_table(const Plan& plan, const RunResult& result);

}  // namespace pipegrid::cli
