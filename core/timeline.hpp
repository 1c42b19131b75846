#pragma once
// Timeline: what happened, one record per action. The simulator and the real
// executor write the same schema, so validation compares two timelines.
// Its CSV form, Chrome trace and SVG Gantt chart are in render/.

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace pipegrid {

enum class RecordKind {
  Compute,   ///< forward, backward, recompute, ... on a device
  Transfer,  ///< an activation or gradient moving between devices
};

/// The action name of an optimizer-step record.
inline constexpr const char* kOptimizerStepAction = "U";

struct TimelineRecord {
  std::string host;      ///< device that ran it (source device for transfers)
  int stream = 0;        ///< stream index on the host (0 for transfers)
  int stage = 0;         ///< stage of the action (producer stage for transfers)
  /// "F", "B", "R" for compute; "U" for an optimizer step (compute: the
  /// weight update of `stage` after the backward of `micro_batch`,
  /// `mini_batch` that triggered it); "SEND_F", "SEND_B" for activation and gradient
  /// transfers; "ALLREDUCE" for a device's part in a ring all-reduce of its
  /// stage's gradients (bytes = what it sends, peer = next device in the ring,
  /// mini_batch = the all-reduce's round, micro_batch = the layer for
  /// per-layer (wait-free) all-reduces or the bucket of bucketed ones, -1
  /// for the whole stage); "REDUCE_SCATTER" and "ALLGATHER" alike for the
  /// distributed optimizer's collectives (is_collective).
  std::string action;
  int micro_batch = 0;
  int mini_batch = 0;
  double start_s = 0;
  double end_s = 0;
  double bytes = 0;      ///< bytes moved (transfers), 0 for compute
  std::string peer;      ///< destination host of a transfer, empty for compute
  double memory_bytes = 0;  ///< device memory of `host` right after the record ends
  RecordKind kind() const {
    return action.rfind("SEND_", 0) == 0 || is_collective(action) ? RecordKind::Transfer : RecordKind::Compute;
  }
  /// ALLREDUCE, REDUCE_SCATTER, ALLGATHER: a device's part in a collective
  /// of its stage's gradients or parameters.
  static bool is_collective(const std::string& action) {
    return action == "ALLREDUCE" || action == "REDUCE_SCATTER" || action == "ALLGATHER";
  }
};

struct Timeline {
  /// Hosts in display order (one row per host in plots).
  std::vector<std::string> hosts;
  std::vector<TimelineRecord> records;
  /// Optional, not serialised: each host's memory at every change, as
  /// (time, bytes from then on), in time order (annotate_memory fills it).
  /// Plots prefer it to memory_bytes, which is only sampled at record ends.
  std::map<std::string, std::vector<std::pair<double, double>>> memory_series;
};

}  // namespace pipegrid
