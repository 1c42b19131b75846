// Timeline -> SVG Gantt chart, drawn like the pipeline figures of the
// GPipe / PipeDream / BaPipe papers.
//
// Layout, top to bottom:
//   - the title (options.title), centred, in bold; the picture is at least
//     as wide as its estimated width (estimated_text_width, which errs on the
//     wide side), so it is never clipped;
//   - when options.tensor_parallel > 1, a note that each row is a
//     tensor-parallel group drawn as its first device;
//   - a legend (forward, backward, recompute when present, other compute
//     actions when present, transfers, all-reduce when present, memory when
//     drawn) above the plot, so it never covers a box; it wraps onto further
//     lines rather than widening the picture;
//   - one row per host, in timeline.hosts order, then hosts that only appear
//     in records in order of first appearance. A row holds one sub-row per
//     compute stream of the host (stream numbers in increasing order) and,
//     when options.show_transfers, a thin communication lane under it where
//     transfers are thin bars; overlapping transfers of one host are stacked
//     on further lanes (greedy, by start time), at most kMaxTransferLanes,
//     beyond which they share the last lane, drawn semi-transparent. Sends
//     (SEND_*) and all-reduce parts (ALLREDUCE) never share a lane: the
//     all-reduce lanes come under the send lanes, so a long all-reduce that
//     overlaps sends leaves both readable;
//   - when options.show_memory and some record has a nonzero memory_bytes, a
//     memory strip at the bottom of every row (left empty for a host whose
//     memory is 0 throughout, such as a measured timeline's): a step plot of the host's
//     memory_bytes (records by end time, the value changing at each end,
//     starting at the first end and held to the end of the run), on one scale
//     for all hosts so rows compare; the left column shows the host's peak in
//     binary units, with its capacity when options.memory_capacity_bytes
//     names the host. The capacity is a dashed line when it lies within
//     kCapacityRange times the largest peak, and the scale then reaches it;
//     a capacity far above every peak would flatten the strips and is only
//     written in the label;
//   - the time axis: nicely rounded ticks (1, 2, 5 x 10^k) in s, ms or us
//     chosen from the span, with light grid lines behind the boxes.
// The plot spans the picture from the label column to the right edge (less
// room for the last tick label): as wide as its busiest sub-row asks, or
// wider when the title, the note or a legend item needs the room, so no
// empty margin is left on the right.
// The label column on the left shows the host name and the stage(s) of its
// compute records. Compute boxes carry one kind of label on every device:
// the micro-batch number ("3", or "3@1" for mini-batch 1 when it fits; a
// smaller font for the bare number in narrow boxes; "U3" for an action
// without a colour of its own), only when the estimated text width fits
// inside the box and does not run into the previous label of the same
// sub-row. The action is told by the box's colour, and on a device of
// several stages (interleaved and V schedules: chunks) the chunk by its
// shade, light (the device's lowest stage) to dark (its highest); on other
// devices odd mini-batches are darker. The legend shows the shades it uses.
// Bubbles are the white gaps.
//
// Every number is printed with a fixed format, and nothing depends on the
// clock or on addresses: the same timeline always gives the same bytes.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "render/timeline_svg.hpp"
#include "render/svg_text.hpp"

namespace pipegrid {

namespace {

// ---- geometry (px) -------------------------------------------------------
constexpr double kMargin = 16;             // around the whole picture
constexpr double kTitleFont = 16;
constexpr double kLabelFont = 12;          // host names, legend, axis
constexpr double kSmallFont = 10;          // "stage s", stream tags
constexpr double kBoxFont = 11;            // micro-batch numbers in boxes
constexpr double kTinyBoxFont = 8;         // fallback for the plain number in narrow boxes
constexpr double kSubRowHeight = 24;       // one compute stream
constexpr double kBoxHeight = 18;
constexpr double kLaneHeight = 7;          // one communication lane
constexpr double kBarHeight = 5;
constexpr double kLanePadding = 3;         // above the first lane and below the last one
constexpr int kMaxTransferLanes = 3;     // per kind: sends, all-reduce
constexpr double kMemoryStripHeight = 24;  // one memory strip
constexpr double kMemoryPadTop = 4;        // the strip's top value sits this far below the strip's top
constexpr double kMemoryPadBottom = 2;     // zero sits this far above the strip's bottom
constexpr double kCapacityRange = 2;       // draw a capacity up to this times the largest peak
constexpr double kMinPlotWidth = 960;
constexpr double kMaxPlotWidth = 2400;
constexpr double kPixelsPerBox = 30;       // plot width grows with the busiest sub-row
constexpr double kAxisHeight = 44;
constexpr double kHeadingHeight = 22;      // a band with a heading above a row (stacked charts)
constexpr double kTickSpacing = 90;        // wanted px between ticks
constexpr std::size_t kMaxHostLabelChars = 32;
constexpr std::size_t kTooltipRecordLimit = 20000;  // tooltips make big files bigger

// ---- colours --------------------------------------------------------------
struct Palette {
  const char* fill;      ///< even mini-batches
  const char* fill_alt;  ///< odd mini-batches
};
constexpr Palette kForward{"#8db8e8", "#5d92d0"};
constexpr Palette kBackward{"#93cc7c", "#5ea84b"};
constexpr Palette kRecompute{"#f4b870", "#e0913a"};
constexpr Palette kBackwardInput{"#7fd1c7", "#3fa89c"};   ///< I: the input-gradient half
constexpr Palette kBackwardWeight{"#e6d36e", "#c4ad35"};  ///< W: the weight-gradient half
constexpr Palette kOtherCompute{"#cfcfcf", "#a9a9a9"};
constexpr const char* kSendForward = "#2f5f9e";
constexpr const char* kSendBackward = "#3c7f2e";
constexpr const char* kSendOther = "#6b6b6b";
constexpr const char* kAllReduce = "#9b4fb8";
constexpr const char* kReduceScatter = "#c0509b";  ///< the distributed optimizer's gradient reduce-scatter
constexpr const char* kAllGather = "#6a51a3";      ///< its parameter all-gather
constexpr const char* kMemoryLine = "#34495e";
constexpr const char* kMemoryFill = "#d5dde6";
constexpr const char* kCapacity = "#d62728";
constexpr const char* kOverCapacityText = "#c0392b";
constexpr const char* kBoxStroke = "#333333";
constexpr const char* kText = "#111111";
constexpr const char* kMutedText = "#555555";
constexpr const char* kGrid = "#e4e4e4";
constexpr const char* kSeparator = "#c8c8c8";
constexpr const char* kHeadingBand = "#f0f0f0";
constexpr const char* kFont = "Helvetica, Arial, sans-serif";

std::string num(double value) { return svg_number(value); }


double text_width(std::string_view text, double font_size) { return estimated_text_width(text, font_size); }

std::string shorten(const std::string& text, std::size_t max_chars) {
  if (text.size() <= max_chars) return text;
  std::size_t cut = max_chars - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
  return text.substr(0, cut) + "...";
}

/// "#rrggbb" of one of `count` shades running from palette.fill (index 0) to
/// palette.fill_alt (index count - 1), mixed channel by channel.
std::string shade(const Palette& palette, int index, int count) {
  if (count <= 1 || index <= 0) return palette.fill;
  if (index >= count - 1) return palette.fill_alt;
  const double t = static_cast<double>(index) / (count - 1);
  auto channel = [](const char* hex, int k) { return std::stoi(std::string(hex + 1 + 2 * k, 2), nullptr, 16); };
  std::string colour = "#";
  for (int k = 0; k < 3; ++k) {
    const double mixed = channel(palette.fill, k) + t * (channel(palette.fill_alt, k) - channel(palette.fill, k));
    colour += fmt::format("{:02x}", static_cast<int>(std::lround(mixed)));
  }
  return colour;
}

bool usable(const TimelineRecord& record) { return std::isfinite(record.start_s) && std::isfinite(record.end_s); }

const Palette& compute_palette(const std::string& action) {
  if (action == "F") return kForward;
  if (action == "B") return kBackward;
  if (action == "R") return kRecompute;
  if (action == "I") return kBackwardInput;
  if (action == "W") return kBackwardWeight;
  return kOtherCompute;
}

const char* transfer_colour(const std::string& action) {
  if (action == "SEND_F") return kSendForward;
  if (action == "SEND_B") return kSendBackward;
  if (action == "REDUCE_SCATTER") return kReduceScatter;
  if (action == "ALLGATHER") return kAllGather;
  if (TimelineRecord::is_collective(action)) return kAllReduce;
  return kSendOther;
}

bool is_allreduce(const TimelineRecord& record) { return TimelineRecord::is_collective(record.action); }

/// Bytes in binary units: "512 B", "1.5 KiB", "21.7 GiB".
std::string binary_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t unit = 0;
  double value = bytes;
  while (std::fabs(value) >= 1023.95 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.0f} B", value);
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

/// CSS-class-like token for an action: "F", "B", "R", "SEND_F", ... and
/// "other" for anything with characters that do not belong in an attribute.
std::string action_class(const std::string& action) {
  if (action.empty()) return "other";
  for (char c : action)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return "other";
  return action;
}

/// What one host's row holds.
struct HostRow {
  std::string name;
  std::vector<int> streams;                 ///< compute streams, increasing; {0} when none
  std::set<int> stages;                     ///< stages of the compute records
  std::vector<std::size_t> compute;         ///< record indices, input order
  std::vector<std::size_t> transfers;       ///< record indices, input order
  std::vector<std::size_t> memory;          ///< records with a finite memory_bytes, by end time then input order
  std::vector<std::pair<double, double>> memory_samples;  ///< (time, bytes from then on), time order
  std::map<std::size_t, int> lane;          ///< transfer index -> lane
  int lanes = 0;
  double peak = 0;                          ///< largest memory_bytes (when memory is not empty)
  double peak_time = 0;                     ///< first end time at the peak
  std::string label;                        ///< shown in the label column (options.host_labels, else the name)
  std::string heading;                      ///< options.row_headings: a band above the row
  double heading_top = 0;                   ///< y of the band's top edge
  double top = 0;                           ///< y of the row's top edge
  double height = 0;
  int sub_row(int stream) const {
    return static_cast<int>(std::lower_bound(streams.begin(), streams.end(), stream) - streams.begin());
  }
};

std::string stage_label(const std::set<int>& stages) {
  if (stages.empty()) return "";
  if (stages.size() == 1) return fmt::format("stage {}", *stages.begin());
  std::string text = "stages ";
  int shown = 0;
  for (int stage : stages) {
    if (shown == 4) {
      text += ",...";
      break;
    }
    text += shown == 0 ? fmt::format("{}", stage) : fmt::format(",{}", stage);
    ++shown;
  }
  return text;
}

/// Greedy lanes for some transfers of a host (`order`, input order): by start
/// time (then input order), first lane free at the start; past
/// kMaxTransferLanes the last lane is shared. Lanes are numbered from
/// `first_lane` in row.lane; returns how many were used.
int assign_lanes(const Timeline& timeline, std::vector<std::size_t> order, int first_lane, HostRow& row) {
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return timeline.records[a].start_s < timeline.records[b].start_s;
  });
  std::vector<double> lane_end;
  for (std::size_t index : order) {
    const TimelineRecord& record = timeline.records[index];
    std::size_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > record.start_s) ++lane;
    if (lane == lane_end.size()) {
      if (lane_end.size() < static_cast<std::size_t>(kMaxTransferLanes))
        lane_end.push_back(record.end_s);
      else
        lane = lane_end.size() - 1;
    }
    lane_end[lane] = std::max(lane_end[lane], std::max(record.end_s, record.start_s));
    row.lane[index] = first_lane + static_cast<int>(lane);
  }
  return static_cast<int>(lane_end.size());
}

/// Sends on the first lanes, all-reduce parts on the lanes under them.
void assign_transfer_lanes(const Timeline& timeline, HostRow& row) {
  std::vector<std::size_t> sends, allreduces;
  for (std::size_t index : row.transfers) (is_allreduce(timeline.records[index]) ? allreduces : sends).push_back(index);
  const int send_lanes = assign_lanes(timeline, sends, 0, row);
  row.lanes = send_lanes + assign_lanes(timeline, allreduces, send_lanes, row);
}

/// Time axis: range, unit and ticks.
struct TimeAxis {
  double t0 = 0, t1 = 1;      ///< seconds
  const char* unit = "s";
  double factor = 1;          ///< seconds -> unit
  double step = 1;            ///< tick step in the unit
  int decimals = 0;
};

TimeAxis choose_axis(double t0, double t1, double plot_width) {
  TimeAxis axis;
  if (!(t1 > t0)) t1 = t0 + (t0 != 0 ? std::fabs(t0) * 1e-3 : 1.0);
  axis.t0 = t0;
  axis.t1 = t1;
  const double span = t1 - t0;
  if (span >= 1) {
    axis.unit = "s";
    axis.factor = 1;
  } else if (span >= 1e-3) {
    axis.unit = "ms";
    axis.factor = 1e3;
  } else {
    axis.unit = "us";
    axis.factor = 1e6;
  }
  const double wanted = std::max(2.0, std::floor(plot_width / kTickSpacing));
  const double raw = span * axis.factor / wanted;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double normalised = raw / magnitude;
  const double nice = normalised <= 1 ? 1 : normalised <= 2 ? 2 : normalised <= 5 ? 5 : 10;
  axis.step = nice * magnitude;
  axis.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(axis.step) + 1e-9)));
  return axis;
}

/// Ends the start tag in `element`: with `children` and the end tag, or as an
/// empty element when there are none. (Appending piece by piece also keeps
/// GCC 12's -Wrestrict false positive on `"literal" + std::string` away.)
void close_element(std::string& element, const std::string& children, const char* tag) {
  if (children.empty()) {
    element += "/>";
    return;
  }
  element += '>';
  element += children;
  element += "</";
  element += tag;
  element += '>';
}

class SvgWriter {
 public:
  void line(const std::string& text) {
    out_ += text;
    out_ += '\n';
  }
  std::string& text() { return out_; }

 private:
  std::string out_;
};

}  // namespace

std::string timeline_to_svg(const Timeline& timeline, const SvgOptions& options) {
  // ---- rows ---------------------------------------------------------------
  std::vector<HostRow> rows;
  std::map<std::string, std::size_t> row_of;
  auto add_host = [&](const std::string& host) {
    if (row_of.count(host)) return;
    row_of[host] = rows.size();
    rows.emplace_back();
    rows.back().name = host;
    const auto label = options.host_labels.find(host);
    rows.back().label = label == options.host_labels.end() ? host : label->second;
    if (const auto heading = options.row_headings.find(host); heading != options.row_headings.end())
      rows.back().heading = heading->second;
  };
  for (const std::string& host : timeline.hosts) add_host(host);

  bool any_record = false, any_transfer = false, any_allreduce = false, any_recompute = false, any_other = false;
  bool any_reduce_scatter = false, any_all_gather = false;
  bool any_input_gradient = false, any_weight_gradient = false;
  bool any_memory = false;
  double min_start = std::numeric_limits<double>::infinity();
  double max_end = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < timeline.records.size(); ++i) {
    const TimelineRecord& record = timeline.records[i];
    if (!usable(record)) continue;
    add_host(record.host);
    HostRow& row = rows[row_of[record.host]];
    any_record = true;
    min_start = std::min(min_start, record.start_s);
    max_end = std::max({max_end, record.end_s, record.start_s});
    if (std::isfinite(record.memory_bytes)) {
      row.memory.push_back(i);
      any_memory = any_memory || record.memory_bytes != 0;
    }
    if (record.kind() == RecordKind::Transfer) {
      row.transfers.push_back(i);
      any_transfer = true;
      any_allreduce = any_allreduce || record.action == "ALLREDUCE";
      any_reduce_scatter = any_reduce_scatter || record.action == "REDUCE_SCATTER";
      any_all_gather = any_all_gather || record.action == "ALLGATHER";
    } else {
      row.compute.push_back(i);
      row.stages.insert(record.stage);
      if (std::find(row.streams.begin(), row.streams.end(), record.stream) == row.streams.end())
        row.streams.push_back(record.stream);
      if (record.action == "R") any_recompute = true;
      else if (record.action == "I") any_input_gradient = true;
      else if (record.action == "W") any_weight_gradient = true;
      else if (record.action != "F" && record.action != "B") any_other = true;
    }
  }
  const bool draw_transfers = options.show_transfers && any_transfer;
  const bool draw_memory = options.show_memory && any_memory;
  // A row without any memory (a measured timeline drawn beside a simulated
  // one) gets an empty strip, not a flat line at 0 B.
  for (HostRow& row : rows)
    if (std::all_of(row.memory.begin(), row.memory.end(), [&](std::size_t i) { return timeline.records[i].memory_bytes == 0; }) &&
        timeline.memory_series.count(row.name) == 0)
      row.memory.clear();
  std::size_t busiest_sub_row = 0;
  for (HostRow& row : rows) {
    std::sort(row.streams.begin(), row.streams.end());
    if (row.streams.empty()) row.streams.push_back(0);
    if (draw_transfers) {
      assign_transfer_lanes(timeline, row);
      row.lanes = std::max(row.lanes, 1);
    }
    std::vector<std::size_t> per_stream(row.streams.size(), 0);
    for (std::size_t index : row.compute)
      busiest_sub_row = std::max(busiest_sub_row, ++per_stream[row.sub_row(timeline.records[index].stream)]);
  }
  // Shading: a device of several stages (interleaved, V) shades its boxes by
  // chunk (the position of the box's stage among the device's stages, light
  // to dark); any other device by mini-batch (odd ones darker).
  int most_chunks = 1;
  bool any_odd_mini_batch = false;
  for (const HostRow& row : rows) {
    most_chunks = std::max(most_chunks, static_cast<int>(row.stages.size()));
    if (row.stages.size() <= 1)
      for (std::size_t index : row.compute) any_odd_mini_batch = any_odd_mini_batch || timeline.records[index].mini_batch % 2 != 0;
  }

  // ---- memory: steps, peaks, one scale for every row -----------------------
  auto reserve_of = [&](const std::string& host) {
    auto found = options.memory_reserve_bytes.find(host);
    return found != options.memory_reserve_bytes.end() && std::isfinite(found->second) && found->second > 0 ? found->second
                                                                                                             : 0.0;
  };
  // The usable memory: the capacity less the host's reserve.
  auto capacity_of = [&](const std::string& host) {
    auto found = options.memory_capacity_bytes.find(host);
    const bool known = found != options.memory_capacity_bytes.end() && std::isfinite(found->second) && found->second > 0;
    return known && found->second > reserve_of(host) ? found->second - reserve_of(host) : 0.0;
  };
  double largest_peak = 0;
  for (HostRow& row : rows) {
    std::stable_sort(row.memory.begin(), row.memory.end(), [&](std::size_t a, std::size_t b) {
      return timeline.records[a].end_s < timeline.records[b].end_s;
    });
    // The exact series when the timeline has one, else the record ends.
    if (auto series = timeline.memory_series.find(row.name); series != timeline.memory_series.end() && !series->second.empty()) {
      for (const auto& [time, bytes] : series->second)
        if (std::isfinite(time) && std::isfinite(bytes)) row.memory_samples.push_back({time, bytes});
    } else {
      for (std::size_t index : row.memory) row.memory_samples.push_back({timeline.records[index].end_s, timeline.records[index].memory_bytes});
    }
    for (std::size_t k = 0; k < row.memory_samples.size(); ++k)
      if (k == 0 || row.memory_samples[k].second > row.peak) {
        row.peak = row.memory_samples[k].second;
        row.peak_time = row.memory_samples[k].first;
      }
    if (!row.memory_samples.empty()) largest_peak = std::max(largest_peak, row.peak);
  }
  double memory_top = largest_peak;  // bytes at the top of a strip
  for (const HostRow& row : rows)
    if (const double capacity = capacity_of(row.name); capacity > 0 && capacity <= kCapacityRange * largest_peak)
      memory_top = std::max(memory_top, capacity);
  if (!(memory_top > 0)) memory_top = 1;
  auto peak_label = [&](const HostRow& row) {
    std::string text = fmt::format("peak {}", binary_bytes(row.peak));
    if (const double capacity = capacity_of(row.name); capacity > 0)
      text += fmt::format(" / {}{}", binary_bytes(capacity), reserve_of(row.name) > 0 ? " usable" : "");
    return text;
  };

  // ---- horizontal layout ----------------------------------------------------
  bool multi_stream = false;
  double label_width = 40;
  for (const HostRow& row : rows) {
    label_width = std::max(label_width, text_width(shorten(row.label, kMaxHostLabelChars), kLabelFont));
    label_width = std::max(label_width, text_width(stage_label(row.stages), kSmallFont));
    if (draw_memory && !row.memory_samples.empty()) label_width = std::max(label_width, text_width(peak_label(row), kSmallFont));
    if (row.streams.size() > 1) multi_stream = true;
  }
  const double stream_tag_width = multi_stream ? 22 : 0;  // room for the "s1" tags
  const double plot_left = kMargin + label_width + 10 + stream_tag_width;
  // The plot reaches the right edge of the picture (less room for the last
  // tick label): it is as wide as its boxes ask, or wider when the title, the
  // note or a legend item needs more room, so nothing is clipped and no empty
  // margin is left on the right.
  const double plot_right_pad = kMargin + 8;
  double width = plot_left +
                 std::clamp(static_cast<double>(busiest_sub_row) * kPixelsPerBox, kMinPlotWidth, kMaxPlotWidth) +
                 plot_right_pad;
  const std::string note = options.context_parallel > 1
                               ? fmt::format("each row is a model-parallel group of tensor {} x context {} devices, "
                                             "drawn as its first device; times and memory are per member",
                                             options.tensor_parallel, options.context_parallel)
                           : options.tensor_parallel > 1
                               ? fmt::format("each row is a tensor-parallel group of {} devices, drawn as its first "
                                             "device; times and memory are per member",
                                             options.tensor_parallel)
                               : std::string();

  // ---- legend items -------------------------------------------------------
  enum class Swatch { Box, Bar, Area, DashedLine, Shades };
  struct LegendItem {
    std::string label;
    const char* colour;
    Swatch swatch;
    int shades = 0;  ///< Swatch::Shades: forward boxes in this many shades, light to dark
  };
  bool any_capacity_line = false;
  if (draw_memory)
    for (const HostRow& row : rows)
      any_capacity_line = any_capacity_line || (capacity_of(row.name) > 0 && capacity_of(row.name) <= memory_top);
  std::vector<LegendItem> legend = {{"forward (F)", kForward.fill, Swatch::Box},
                                    {"backward (B)", kBackward.fill, Swatch::Box}};
  if (any_input_gradient) legend.push_back({"input gradient (I)", kBackwardInput.fill, Swatch::Box});
  if (any_weight_gradient) legend.push_back({"weight gradient (W)", kBackwardWeight.fill, Swatch::Box});
  if (any_recompute) legend.push_back({"recompute (R)", kRecompute.fill, Swatch::Box});
  if (any_other) legend.push_back({"other compute", kOtherCompute.fill, Swatch::Box});
  if (most_chunks > 1)
    legend.push_back({most_chunks == 2 ? std::string("chunk 0, 1 of a device: its lower, higher stage")
                                       : fmt::format("chunk 0 to {} of a device: its stages, lowest first", most_chunks - 1),
                      kForward.fill, Swatch::Shades, most_chunks});
  if (any_odd_mini_batch) legend.push_back({"even, odd mini-batch", kForward.fill, Swatch::Shades, 2});
  if (options.show_transfers) {
    legend.push_back({"send activations (SEND_F)", kSendForward, Swatch::Bar});
    legend.push_back({"send gradients (SEND_B)", kSendBackward, Swatch::Bar});
    if (any_allreduce) legend.push_back({"gradient all-reduce (ALLREDUCE)", kAllReduce, Swatch::Bar});
    if (any_reduce_scatter) legend.push_back({"gradient reduce-scatter (REDUCE_SCATTER)", kReduceScatter, Swatch::Bar});
    if (any_all_gather) legend.push_back({"parameter all-gather (ALLGATHER)", kAllGather, Swatch::Bar});
  }
  if (draw_memory) legend.push_back({fmt::format("memory (strip top {})", binary_bytes(memory_top)), kMemoryLine, Swatch::Area});
  const bool any_reserve = std::any_of(rows.begin(), rows.end(), [&](const HostRow& row) { return reserve_of(row.name) > 0; });
  if (any_capacity_line)
    legend.push_back({any_reserve ? "usable memory (capacity - reserve)" : "memory capacity", kCapacity, Swatch::DashedLine});
  constexpr double kSwatch = 16, kSwatchGap = 5, kItemGap = 18, kLegendLine = 20;
  constexpr double kShadeSwatch = 10;
  auto swatch_width = [&](const LegendItem& item) {
    return item.swatch == Swatch::Shades ? kShadeSwatch * item.shades : kSwatch;
  };
  auto item_width = [&](const LegendItem& item) {
    return swatch_width(item) + kSwatchGap + text_width(item.label, kLabelFont);
  };
  // The legend wraps at the plot's right edge; only an item wider than the
  // whole plot widens the picture.
  for (const LegendItem& item : legend) width = std::max(width, plot_left + item_width(item) + plot_right_pad);
  width = std::max(width, estimated_text_width(options.title, kTitleFont, true) + 2 * kMargin);
  width = std::max(width, text_width(note, kLabelFont) + 2 * kMargin);
  width = std::ceil(width);
  const double plot_right = width - plot_right_pad;
  const double plot_width = plot_right - plot_left;
  std::vector<double> legend_x(legend.size());
  std::vector<int> legend_line(legend.size());
  {
    const double right = plot_right;
    double x = plot_left;
    int line = 0;
    for (std::size_t i = 0; i < legend.size(); ++i) {
      if (x > plot_left && x + item_width(legend[i]) > right) {
        x = plot_left;
        ++line;
      }
      legend_x[i] = x;
      legend_line[i] = line;
      x += item_width(legend[i]) + kItemGap;
    }
  }
  const int legend_lines = legend.empty() ? 1 : legend_line.back() + 1;

  // ---- vertical layout ----------------------------------------------------
  double y = kMargin;
  const bool has_title = !options.title.empty();
  const double title_baseline = y + kTitleFont;
  if (has_title) y += kTitleFont + 10;
  const double note_baseline = y + kLabelFont - 2;
  if (!note.empty()) y += kLabelFont + 8;
  const double legend_center = y + 8;
  y += 16 + 12 + (legend_lines - 1) * kLegendLine;
  const double plot_top = y;
  for (HostRow& row : rows) {
    row.heading_top = y;
    if (!row.heading.empty()) y += kHeadingHeight;
    row.top = y;
    row.height = static_cast<double>(row.streams.size()) * kSubRowHeight;
    if (draw_transfers) row.height += kLanePadding * 2 + row.lanes * kLaneHeight;
    if (draw_memory) row.height += kMemoryStripHeight;
    y += row.height;
  }
  if (rows.empty()) y += 2 * kSubRowHeight;  // an empty frame still has room for its note
  const double plot_bottom = y;
  const double height = std::ceil(plot_bottom + kAxisHeight + kMargin - 4);

  // ---- time axis ------------------------------------------------------------
  double t0 = 0, t1 = 1;
  if (any_record) {
    t0 = min_start < 0 ? min_start : (min_start <= 0.25 * max_end ? 0.0 : min_start);
    t1 = max_end;
    if (t1 > t0) t1 += (t1 - t0) * 0.01;  // a little air after the last record
  }
  const TimeAxis axis = choose_axis(t0, t1, plot_width);
  const double scale = plot_width / (axis.t1 - axis.t0);
  auto x_of = [&](double t) { return plot_left + (t - axis.t0) * scale; };

  // ---- output ---------------------------------------------------------------
  SvgWriter svg;
  svg.line(fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"{}\">",
      num(width), num(height), num(width), num(height), kFont));
  if (has_title) svg.line(fmt::format("<title>{}</title>", escape_xml(options.title)));
  svg.line(fmt::format("<rect class=\"background\" x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>",
                       num(width), num(height)));
  if (has_title)
    svg.line(fmt::format(
        "<text class=\"title\" x=\"{}\" y=\"{}\" font-size=\"{}\" font-weight=\"bold\" text-anchor=\"middle\" "
        "fill=\"{}\">{}</text>",
        num(width / 2), num(title_baseline), num(kTitleFont), kText, escape_xml(options.title)));
  if (!note.empty())
    svg.line(fmt::format(
        "<text class=\"note tensor-parallel\" x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"middle\" fill=\"{}\">{}</text>",
        num(width / 2), num(note_baseline), num(kLabelFont), kMutedText, escape_xml(note)));

  // Legend.
  {
    svg.line(fmt::format("<g class=\"legend\" font-size=\"{}\" fill=\"{}\">", num(kLabelFont), kText));
    for (std::size_t i = 0; i < legend.size(); ++i) {
      const LegendItem& item = legend[i];
      const double x = legend_x[i];
      const double center = legend_center + legend_line[i] * kLegendLine;
      switch (item.swatch) {
        case Swatch::Box:
          svg.line(fmt::format(
              "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"{}\" stroke-width=\"0.6\"/>",
              num(x), num(center - 6), num(kSwatch), num(12), item.colour, kBoxStroke));
          break;
        case Swatch::Bar:
          svg.line(fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", num(x),
                               num(center - kBarHeight / 2), num(kSwatch), num(kBarHeight), item.colour));
          break;
        case Swatch::Area:  // a small step, like the strips
          svg.line(fmt::format("<path d=\"M{0},{1} L{0},{2} L{3},{2} L{3},{4} L{5},{4} L{5},{1} Z\" fill=\"{6}\"/>",
                               num(x), num(center + 6), num(center + 1), num(x + kSwatch / 2), num(center - 5),
                               num(x + kSwatch), kMemoryFill));
          svg.line(fmt::format(
              "<polyline points=\"{0},{1} {2},{1} {2},{3} {4},{3}\" fill=\"none\" stroke=\"{5}\" stroke-width=\"1.2\"/>",
              num(x), num(center + 1), num(x + kSwatch / 2), num(center - 5), num(x + kSwatch), item.colour));
          break;
        case Swatch::Shades:
          for (int k = 0; k < item.shades; ++k)
            svg.line(fmt::format(
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"{}\" stroke-width=\"0.6\"/>",
                num(x + k * kShadeSwatch), num(center - 6), num(kShadeSwatch), num(12), shade(kForward, k, item.shades),
                kBoxStroke));
          break;
        case Swatch::DashedLine:
          svg.line(fmt::format(
              "<line x1=\"{0}\" y1=\"{2}\" x2=\"{1}\" y2=\"{2}\" stroke=\"{3}\" stroke-width=\"1\" "
              "stroke-dasharray=\"4,3\"/>",
              num(x), num(x + kSwatch), num(center), item.colour));
          break;
      }
      svg.line(fmt::format("<text x=\"{}\" y=\"{}\">{}</text>", num(x + swatch_width(item) + kSwatchGap),
                           num(center + kLabelFont * 0.35), escape_xml(item.label)));
    }
    svg.line("</g>");
  }

  // Grid lines and tick marks (behind the boxes).
  struct Tick {
    double x;
    std::string label;
  };
  std::vector<Tick> ticks;
  if (any_record) {
    const double first = std::ceil(axis.t0 * axis.factor / axis.step - 1e-9);
    const double last = std::floor(axis.t1 * axis.factor / axis.step + 1e-9);
    for (double k = first; k <= last; k += 1) {
      const double value = k * axis.step;  // in the unit
      std::string label = fmt::format("{:.{}f}", value, axis.decimals);
      if (label.find_first_not_of("-0.") == std::string::npos) label = fmt::format("{:.{}f}", 0.0, axis.decimals);
      ticks.push_back({x_of(value / axis.factor), label});
    }
    svg.line(fmt::format("<g class=\"grid\" stroke=\"{}\" stroke-width=\"1\">", kGrid));
    for (const Tick& tick : ticks)
      svg.line(fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>", num(tick.x), num(plot_top),
                           num(plot_bottom)));
    svg.line("</g>");
  }

  // Row labels and separators.
  svg.line(fmt::format("<g class=\"rows\" fill=\"{}\">", kText));
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const HostRow& row = rows[r];
    const double compute_height = static_cast<double>(row.streams.size()) * kSubRowHeight;
    const std::string stages = stage_label(row.stages);
    const double center = row.top + compute_height / 2;
    const double label_x = plot_left - 8 - stream_tag_width;
    const double name_y = stages.empty() ? center + kLabelFont * 0.35 : center - 1;
    svg.line(fmt::format("<text class=\"host\" x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"end\">{}</text>",
                         num(label_x), num(name_y), num(kLabelFont), escape_xml(shorten(row.label, kMaxHostLabelChars))));
    if (!stages.empty())
      svg.line(fmt::format(
          "<text class=\"stage\" x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"end\" fill=\"{}\">{}</text>",
          num(label_x), num(center + kSmallFont + 1), num(kSmallFont), kMutedText, escape_xml(stages)));
    if (row.streams.size() > 1)
      for (std::size_t s = 0; s < row.streams.size(); ++s)
        svg.line(fmt::format(
            "<text class=\"stream\" x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"end\" fill=\"{}\">s{}</text>",
            num(plot_left - 4), num(row.top + (static_cast<double>(s) + 0.5) * kSubRowHeight + kSmallFont * 0.35),
            num(kSmallFont), kMutedText, row.streams[s]));
    if (draw_transfers)
      svg.line(fmt::format(
          "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"0.5\" "
          "stroke-dasharray=\"2,2\"/>",
          num(plot_left), num(row.top + compute_height), num(plot_right), kSeparator));
    if (draw_memory)
      svg.line(fmt::format(
          "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"0.5\" "
          "stroke-dasharray=\"2,2\"/>",
          num(plot_left), num(row.top + row.height - kMemoryStripHeight), num(plot_right), kSeparator));
    if (r > 0)
      svg.line(fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"1\"/>",
                           num(kMargin), num(row.heading_top), num(plot_right), kSeparator));
    if (!row.heading.empty()) {
      svg.line(fmt::format("<rect class=\"heading\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>",
                           num(kMargin), num(row.heading_top), num(plot_right - kMargin), num(kHeadingHeight), kHeadingBand));
      svg.line(fmt::format("<text class=\"heading\" x=\"{}\" y=\"{}\" font-size=\"{}\" font-weight=\"bold\">{}</text>",
                           num(kMargin + 4), num(row.heading_top + kHeadingHeight / 2 + kLabelFont * 0.35), num(kLabelFont),
                           escape_xml(row.heading)));
    }
  }
  svg.line("</g>");

  const bool tooltips = timeline.records.size() <= kTooltipRecordLimit;
  auto tooltip = [&](const TimelineRecord& record) {
    if (is_allreduce(record)) {
      const char* kind = record.action == "REDUCE_SCATTER" ? "reduce-scatter"
                         : record.action == "ALLGATHER"    ? "all-gather"
                                                           : "all-reduce";
      std::string text = fmt::format("{} {} round {}", record.host, kind, record.mini_batch);
      text += record.micro_batch >= 0    ? fmt::format(", layer or bucket {}", record.micro_batch)
              : record.micro_batch == -2 ? std::string(", tied word embedding")
                                         : std::string(", whole stage");
      text += fmt::format(", stage {}: {:.6g} - {:.6g} s, sends {} ({:.6g} bytes) to {}", record.stage, record.start_s,
                          record.end_s, binary_bytes(record.bytes), record.bytes, record.peer);
      return fmt::format("<title>{}</title>", escape_xml(text));
    }
    std::string text = fmt::format("{} {}{}", record.host, record.action, record.micro_batch);
    if (record.mini_batch > 0) text += fmt::format("@{}", record.mini_batch);
    text += fmt::format(" stage {}: {:.6g} - {:.6g} s", record.stage, record.start_s, record.end_s);
    if (record.kind() == RecordKind::Transfer) text += fmt::format(" to {}, {:.6g} bytes", record.peer, record.bytes);
    return fmt::format("<title>{}</title>", escape_xml(text));
  };

  // Compute boxes, then their labels (so no box covers a label).
  struct Label {
    double x, y;
    double font;
    std::string text;
  };
  std::vector<Label> labels;
  svg.line(fmt::format("<g class=\"compute\" stroke=\"{}\" stroke-width=\"0.6\">", kBoxStroke));
  for (const HostRow& row : rows) {
    std::vector<double> last_label_right(row.streams.size(), -std::numeric_limits<double>::infinity());
    // Boxes in time order per sub-row so label collisions are judged left to right.
    std::vector<std::size_t> order = row.compute;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return timeline.records[a].start_s < timeline.records[b].start_s;
    });
    for (std::size_t index : order) {
      const TimelineRecord& record = timeline.records[index];
      const int sub = row.sub_row(record.stream);
      const double x = x_of(record.start_s);
      const double w_true = std::max(0.0, (record.end_s - record.start_s) * scale);
      const double w = std::max(w_true, 0.5);
      const double box_top = row.top + sub * kSubRowHeight + (kSubRowHeight - kBoxHeight) / 2;
      const Palette& palette = compute_palette(record.action);
      // Shaded by chunk on a device of several stages, else by mini-batch
      // (the legend says which).
      const int chunk = static_cast<int>(std::distance(row.stages.begin(), row.stages.find(record.stage)));
      const int chunks = static_cast<int>(row.stages.size());
      const std::string fill =
          chunks > 1 ? shade(palette, chunk, chunks) : shade(palette, record.mini_batch % 2 != 0 ? 1 : 0, 2);
      const std::string stroke = w < 4 ? " stroke=\"none\"" : "";
      std::string element = fmt::format("<rect class=\"box {}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"{}",
                                        action_class(record.action), num(x), num(box_top), num(w), num(kBoxHeight),
                                        fill, stroke);
      close_element(element, tooltips ? tooltip(record) : std::string(), "rect");
      svg.line(element);

      // Label, first that fits, the same on every device: the micro-batch
      // "m" (with "@k" for mini-batch k > 0 when it fits; a smaller font
      // when only that fits), the action being told by the box's colour and
      // the chunk by its shade; an action without a colour of its own (other
      // compute) prefixes its name ("Um") or goes unlabelled.
      struct Candidate {
        std::string text;
        double font;
      };
      const std::string number = (&palette == &kOtherCompute ? record.action : std::string()) +
                                 fmt::format("{}", record.micro_batch);
      std::vector<Candidate> candidates;
      if (record.mini_batch > 0) candidates.push_back({fmt::format("{}@{}", number, record.mini_batch), kBoxFont});
      candidates.push_back({number, kBoxFont});
      candidates.push_back({number, kTinyBoxFont});
      for (const Candidate& candidate : candidates) {
        const double needed = text_width(candidate.text, candidate.font) + (candidate.font < kBoxFont ? 2 : 4);
        const double center = x + w / 2;
        if (needed > w_true || center - needed / 2 < last_label_right[sub]) continue;
        labels.push_back({center, box_top + kBoxHeight / 2 + candidate.font * 0.36, candidate.font, candidate.text});
        last_label_right[sub] = center + needed / 2;
        break;
      }
    }
  }
  svg.line("</g>");
  if (!labels.empty()) {
    svg.line(fmt::format("<g class=\"labels\" font-size=\"{}\" text-anchor=\"middle\" fill=\"{}\">", num(kBoxFont), kText));
    for (const Label& label : labels)
      svg.line(fmt::format("<text x=\"{}\" y=\"{}\"{}>{}</text>", num(label.x), num(label.y),
                           label.font == kBoxFont ? std::string() : fmt::format(" font-size=\"{}\"", num(label.font)),
                           escape_xml(label.text)));
    svg.line("</g>");
  }

  // Transfers.
  if (draw_transfers) {
    svg.line("<g class=\"transfers\" fill-opacity=\"0.75\">");
    for (const HostRow& row : rows) {
      const double lanes_top = row.top + static_cast<double>(row.streams.size()) * kSubRowHeight + kLanePadding;
      for (std::size_t index : row.transfers) {
        const TimelineRecord& record = timeline.records[index];
        const double x = x_of(record.start_s);
        const double w = std::max(0.5, (record.end_s - record.start_s) * scale);
        const double bar_top = lanes_top + row.lane.at(index) * kLaneHeight + (kLaneHeight - kBarHeight) / 2;
        std::string element = fmt::format("<rect class=\"bar {}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"",
                                          action_class(record.action), num(x), num(bar_top), num(w), num(kBarHeight),
                                          transfer_colour(record.action));
        close_element(element, tooltips ? tooltip(record) : std::string(), "rect");
        svg.line(element);
      }
    }
    svg.line("</g>");
  }

  // Memory strips: the area under the step, the step itself, the capacity;
  // the peaks in the label column.
  if (draw_memory) {
    const double usable_height = kMemoryStripHeight - kMemoryPadTop - kMemoryPadBottom;
    svg.line("<g class=\"memory\">");
    for (const HostRow& row : rows) {
      const double base = row.top + row.height - kMemoryPadBottom;
      auto y_of = [&](double bytes) { return base - std::clamp(bytes / memory_top, 0.0, 1.0) * usable_height; };
      if (!row.memory_samples.empty()) {
        // Corners of the step plot, in px; a corner that prints like the
        // previous one is left out.
        std::vector<std::string> corners;
        auto corner = [&](double t, double bytes) {
          std::string point = num(x_of(t)) + "," + num(y_of(bytes));
          if (corners.empty() || corners.back() != point) corners.push_back(std::move(point));
        };
        const auto& samples = row.memory_samples;
        double current = samples.front().second;
        corner(samples.front().first, current);
        for (std::size_t k = 1; k < samples.size(); ++k) {
          if (samples[k].second == current) continue;
          corner(samples[k].first, current);
          current = samples[k].second;
          corner(samples[k].first, current);
        }
        const double last = std::max(max_end, samples.back().first);
        corner(last, current);
        std::string points, area = fmt::format("M{},{}", num(x_of(samples.front().first)), num(base));
        for (const std::string& point : corners) {
          points += (points.empty() ? "" : " ") + point;
          area += " L" + point;
        }
        area += fmt::format(" L{},{} Z", num(x_of(last)), num(base));
        svg.line(fmt::format("<path class=\"memory-area\" d=\"{}\" fill=\"{}\"/>", area, kMemoryFill));
        svg.line(fmt::format(
            "<polyline class=\"memory-line\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.2\" "
            "stroke-linejoin=\"round\"><title>{}</title></polyline>",
            points, kMemoryLine,
            escape_xml(fmt::format("{} memory: peak {} ({:.6g} bytes) at {:.6g} s", row.name, binary_bytes(row.peak),
                                   row.peak, row.peak_time))));
      }
      if (const double capacity = capacity_of(row.name); capacity > 0 && capacity <= memory_top)
        svg.line(fmt::format(
            "<line class=\"memory-capacity\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" "
            "stroke-width=\"1\" stroke-dasharray=\"4,3\"><title>{4}</title></line>",
            num(plot_left), num(y_of(capacity)), num(plot_right), kCapacity,
            escape_xml(fmt::format("{} memory capacity {} ({:.6g} bytes)", row.name, binary_bytes(capacity), capacity))));
    }
    svg.line("</g>");
    svg.line(fmt::format("<g class=\"memory-peaks\" font-size=\"{}\" text-anchor=\"end\" fill=\"{}\">",
                         num(kSmallFont), kMutedText));
    for (const HostRow& row : rows) {
      if (row.memory_samples.empty()) continue;
      const double capacity = capacity_of(row.name);
      const bool over = capacity > 0 && row.peak > capacity;
      svg.line(fmt::format("<text class=\"memory-peak{}\" x=\"{}\" y=\"{}\"{}>{}</text>", over ? " over-capacity" : "",
                           num(plot_left - 8 - stream_tag_width),
                           num(row.top + row.height - kMemoryStripHeight / 2 + kSmallFont * 0.35),
                           over ? fmt::format(" fill=\"{}\" font-weight=\"bold\"", kOverCapacityText) : std::string(),
                           escape_xml(peak_label(row))));
    }
    svg.line("</g>");
  }

  // Frame, note, axis.
  svg.line(fmt::format(
      "<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#666666\" "
      "stroke-width=\"1\"/>",
      num(plot_left), num(plot_top), num(plot_width), num(plot_bottom - plot_top)));
  if (!any_record)
    svg.line(fmt::format(
        "<text class=\"note\" x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"middle\" fill=\"{}\">no records</text>",
        num(plot_left + plot_width / 2), num((plot_top + plot_bottom) / 2 + kLabelFont * 0.35), num(kLabelFont),
        kMutedText));

  svg.line(fmt::format("<g class=\"axis\" font-size=\"{}\" fill=\"{}\" text-anchor=\"middle\">", num(kLabelFont), kText));
  double last_tick_label_right = -std::numeric_limits<double>::infinity();
  for (const Tick& tick : ticks) {
    svg.line(fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#666666\" stroke-width=\"1\"/>",
                         num(tick.x), num(plot_bottom), num(plot_bottom + 5)));
    const double half = text_width(tick.label, kLabelFont) / 2;
    if (tick.x - half < last_tick_label_right + 4) continue;  // never overlap tick labels
    svg.line(fmt::format("<text x=\"{}\" y=\"{}\">{}</text>", num(tick.x), num(plot_bottom + 5 + kLabelFont + 2),
                         escape_xml(tick.label)));
    last_tick_label_right = tick.x + half;
  }
  if (any_record)
    svg.line(fmt::format("<text class=\"axis-title\" x=\"{}\" y=\"{}\">time ({})</text>",
                         num(plot_left + plot_width / 2), num(plot_bottom + 5 + 2 * kLabelFont + 10), axis.unit));
  svg.line("</g>");
  svg.line("</svg>");
  return std::move(svg.text());
}

}  // namespace pipegrid
