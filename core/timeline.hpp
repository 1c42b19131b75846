#pragma once
// Timeline: what happened, one record per action. The simulator and the real
// executor write the same schema, so validation compares two timelines.

#include <map>
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
  /// per-layer (wait-free) all-reduces, -1 for the whole stage).
  std::string action;
  int micro_batch = 0;
  int mini_batch = 0;
  double start_s = 0;
  double end_s = 0;
  double bytes = 0;      ///< bytes moved (transfers), 0 for compute
  std::string peer;      ///< destination host of a transfer, empty for compute
  double memory_bytes = 0;  ///< device memory of `host` right after the record ends
  RecordKind kind() const {
    return action.rfind("SEND_", 0) == 0 || action == "ALLREDUCE" ? RecordKind::Transfer : RecordKind::Compute;
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

/** CSV with header host,stream,stage,action,micro_batch,mini_batch,start_s,end_s,bytes,peer,memory_bytes.
 *  Numbers are printed with 17 significant digits so a round trip is exact. */
std::string timeline_to_csv(const Timeline& timeline);
Timeline parse_timeline_csv(const std::string& text, const std::string& origin);

/** Chrome trace JSON (Perfetto): one process per device, compute and
 *  communication on separate tracks, memory as a counter track. */
std::string timeline_to_chrome_trace(const Timeline& timeline);

struct SvgOptions {
  std::string title;
  bool show_transfers = true;  ///< draw a communication lane under each device
  /// Draw a thin memory strip under each device (a step plot of memory_bytes
  /// over time, one scale for all devices, the device's peak as a label).
  /// Nothing is drawn when no record has a nonzero memory_bytes.
  bool show_memory = true;
  /// Device memory per host name, in bytes. A listed host's label reads
  /// "peak 21.7 GiB / 16.0 GiB" (in red when over), and its strip gets a
  /// dashed line at the capacity unless the capacity exceeds twice the
  /// largest peak (the strips would flatten). Empty: no capacities shown.
  std::map<std::string, double> memory_capacity_bytes = {};
  /// Text shown for a host instead of its name (stacked charts, whose rows
  /// come from two timelines that may use the same host names).
  std::map<std::string, std::string> host_labels = {};
  /// Headings, each drawn in a band above the row of the host it is keyed
  /// by ("simulated" above the first simulated device).
  std::map<std::string, std::string> row_headings = {};
};

/** SVG Gantt chart drawn like the papers' figures: a row per device, boxes
 *  labelled with the micro-batch number, forward and backward in two colours,
 *  bubbles as gaps, a time axis with units. Transfers (sends and all-reduce
 *  parts) are thin bars on communication lanes under the device's row and
 *  the device's memory a strip under those (see SvgOptions). */
std::string timeline_to_svg(const Timeline& timeline, const SvgOptions& options);

}  // namespace pipegrid
