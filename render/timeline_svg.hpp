#pragma once
// Timelines drawn for people: the SVG Gantt chart of one timeline and the
// simulated-vs-measured comparison of two, stacked.

#include <map>
#include <string>

#include "core/timeline.hpp"

namespace pipegrid {

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
  /// Memory a listed host holds back from its capacity (the platform's
  /// memory_reserve): its strip's line and its label are then the usable
  /// memory, capacity - reserve ("peak 21.7 GiB / 76.0 GiB usable"), the
  /// limit the out-of-memory verdict checks. Absent: no reserve.
  std::map<std::string, double> memory_reserve_bytes = {};
  /// Text shown for a host instead of its name (stacked charts, whose rows
  /// come from two timelines that may use the same host names).
  std::map<std::string, std::string> host_labels = {};
  /// Headings, each drawn in a band above the row of the host it is keyed
  /// by ("simulated" above the first simulated device).
  std::map<std::string, std::string> row_headings = {};
  /// Devices per tensor-parallel group (Plan::tensor_parallel). Above 1,
  /// every row stands for a group drawn as its first device, and a note
  /// under the title says so.
  int tensor_parallel = 1;
  /// Context-parallel ranks per group (Plan::context_parallel). Above 1,
  /// the note says a row is a group of tensor_parallel x context_parallel.
  int context_parallel = 1;
};

/** SVG Gantt chart drawn like the papers' figures: a row per device, boxes
 *  labelled with the micro-batch number, forward and backward in two colours
 *  (a device's chunks, or else odd mini-batches, in darker shades, as the
 *  legend says), bubbles as gaps, a time axis with units. The picture is as
 *  wide as its widest part (the plot, the title, a legend item) and the plot
 *  spans it. Transfers (sends and all-reduce
 *  parts) are thin bars on communication lanes under the device's row and
 *  the device's memory a strip under those (see SvgOptions). */
std::string timeline_to_svg(const Timeline& timeline, const SvgOptions& options);


/** The two timelines stacked on one time axis (each shifted to start at 0):
 *  the simulated devices under a "simulated" heading on top, the measured
 *  ones under "measured" below, drawn by timeline_to_svg. */
std::string comparison_to_svg(const Timeline& simulated, const Timeline& measured, const std::string& title);

}  // namespace pipegrid
