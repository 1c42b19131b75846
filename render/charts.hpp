#pragma once
// Charts for sweep reports: pure functions from plain data to SVG text.
//
// Common contract of every *_svg function below:
// - Deterministic: the same input gives the same bytes (fixed number
//   formatting, no locale, no clock, no randomness).
// - Self-contained SVG 1.1 text: one <svg> element, no XML declaration, so
//   it can be written to a .svg file or inlined in HTML as is. Every
//   caller-given string is XML-escaped; a title, labelled axes with "nice"
//   ticks (1, 2, 2.5, 5 x 10^k, k/M/G suffixes for large values; powers of 2
//   on a log2 axis), a legend in a column right of the plot (one entry per
//   named series, plus entries for what else is drawn: out of memory,
//   capacity, ideal, closed form, paper, front), colours from one fixed
//   palette (series i gets palette colour i mod its size, in the order given;
//   line charts: in order of first appearance of the name).
// - Never throws on data: values that cannot be drawn (NaN, infinities, x <= 0
//   on a log2 axis, y <= 0 where the chart needs positive values) are skipped
//   and counted in a note under the chart ("2 points not drawn: x <= 0 on
//   the log2 axis"); empty input gives a chart with its title, empty axes and
//   the note "no data". The text "nan" or "inf" never appears in the output.
// - Element classes, for tests and styling: every drawn data point is a
//   <circle class="point"> (class "point oom" when hollow), every bar a
//   <rect class="bar"> ("bar over" when above capacity), every line of
//   measured values a <polyline class="series">, every dashed reference
//   (closed form, ideal, capacity, baseline) carries the class "dashed" and
//   a stroke-dasharray, every heatmap cell a <rect class="cell"> ("cell oom"
//   when hatched, "cell missing" when blank), every paper tick a
//   <line class="paper">, every Pareto front a <polyline class="front">.
//   Each data element carries a <title> child (a tooltip) naming its series
//   and values, plus the point's `label` when given.
// - A y range fixed by Axis::min/max holds exactly: nothing is drawn outside
//   the plot area. A point outside it is a triangle on the edge it crossed
//   (<polygon class="point clipped">, pointing out of the range), lines are
//   cut at the border (a clipPath), a bar above it is cut at the top with a
//   zigzag (<rect class="bar clipped">), references outside it are left out;
//   a note counts them ("3 values outside the y range 0 to 100: drawn as
//   triangles on its edge") and the legend shows the triangle.
// - No chart is wider than max_chart_width unless one panel (or one group of
//   bars) alone is: line panels wrap into rows, bar groups too.

#include <optional>
#include <string>
#include <vector>

namespace pipegrid::charts {

enum class Scale {
  Linear,
  Log2,  ///< ticks at powers of 2; values <= 0 are skipped with a note
};

/// How axis values are shown.
enum class Unit {
  Plain,  ///< numbers as given
  Bytes,  ///< values are bytes; the axis shows KiB/MiB/GiB/TiB chosen from the range (ticks nice in that unit)
};

/// The widest chart, in px (a screen): wider charts wrap their panels or
/// groups into rows.
inline constexpr double max_chart_width = 1600;

struct Axis {
  std::string label;  ///< with its unit; on a Unit::Bytes axis the unit chosen (" (GiB)") is appended
  Scale scale = Scale::Linear;
  Unit unit = Unit::Plain;
  /// Linear axes only: include 0 in the range (usual for throughput, memory).
  bool from_zero = true;
  /// A fixed end of the range (y axes; in data units, bytes on a bytes axis):
  /// the axis ends exactly there and values beyond it are clipped (see the
  /// contract above). Callers give finite values, min < max, > 0 on log2.
  std::optional<double> min, max;
};

struct Point {
  double x = 0, y = 0;
  bool oom = false;   ///< out of memory: drawn as a hollow marker
  std::string label;  ///< optional extra tooltip text (the configuration, say)
};

struct Series {
  std::string name;  ///< legend text
  std::vector<Point> points;  ///< drawn in the order given (sort by x for a line)
};

// ---------------------------------------------------------------- line

/// One panel of a line chart (one facet value).
struct LinePanel {
  std::string title;  ///< the facet value; may be empty for an unfaceted chart
  std::vector<Series> series;
};

/** Metric vs a parameter, one line per series, markers at the points (hollow
 *  where oom). Several panels are drawn side by side, in rows of as many as fit
 *  in max_chart_width (at least one), each with its own title and axes on one
 *  shared y range and one shared x range; a series
 *  keeps its colour across panels (matched by name, colour in order of first
 *  appearance) and the legend is shared. */
struct LineChart {
  std::string title;
  Axis x, y;
  std::vector<LinePanel> panels;
};
std::string line_chart_svg(const LineChart& chart);

// ---------------------------------------------------------------- bars

struct Bar {
  std::optional<double> value;  ///< no value: no bar (the slot stays empty)
  std::optional<double> paper;  ///< a published value: a short horizontal tick across the bar's slot
  std::string label;            ///< text above the bar (e.g. "1.33x"); empty: none
};

/** Grouped bars: one group per row of a table, one bar per column (series)
 *  in each group. Values must be >= 0 to be drawn (negative: skipped with a
 *  note). Groups wrap into rows of bars when one row would make the chart
 *  wider than max_chart_width. */
struct BarChart {
  std::string title;
  std::string x_label;  ///< names the groups (the table's row parameter)
  Axis y;               ///< scale is ignored (always linear from 0, or from y.min)
  std::vector<std::string> groups;  ///< group names, left to right
  std::vector<std::string> series;  ///< bar names within a group (legend)
  std::vector<std::vector<Bar>> bars;  ///< [group][series]; missing entries: no bar; entries beyond groups/series: ignored
  /// A dashed horizontal reference line (1.0 for a speed-up table, say).
  std::optional<double> baseline;
};
std::string bar_chart_svg(const BarChart& chart);

// ---------------------------------------------------------------- memory

struct DeviceMemory {
  std::string host;
  double peak_bytes = 0;
  double capacity_bytes = 0;  ///< 0: unknown (no capacity mark)
};

struct MemoryRun {
  std::string name;  ///< legend text (the run's label)
  std::vector<DeviceMemory> devices;
};

/** Peak memory per device: the x axis groups bars by host (the hosts of
 *  `host_order` first, in that order, then the others in order of first
 *  appearance over the runs), one bar per run in each group (colour =
 *  run). Capacities: one dashed horizontal line across the plot when every
 *  known capacity is equal, otherwise a dashed mark across each bar at its
 *  own capacity. A bar whose peak exceeds its capacity has a red outline
 *  (class "bar over") and a "!" above it. The y axis is in bytes (Unit::Bytes). */
struct MemoryChart {
  std::string title;
  std::string x_label = "device";
  std::string y_label = "peak memory";
  std::optional<double> y_min, y_max;  ///< a fixed y range in bytes (Axis::min, max)
  std::vector<std::string> host_order;
  std::vector<MemoryRun> runs;
};
std::string memory_chart_svg(const MemoryChart& chart);

// ---------------------------------------------------------------- bubble

/** Bubble fraction vs number of micro-batches: the measured points of each
 *  series as markers (joined by a solid line unless a closed form of the same
 *  name is given, which would hide the dashed curve), and each closed-form curve (points
 *  sampled by the caller) as a dashed line without markers. A closed-form
 *  series whose name equals a measured series' name takes its colour (legend
 *  "<name> (closed form)"); others take the next palette colours. */
struct BubbleChart {
  std::string title;
  Axis x{"micro-batches M", Scale::Log2, Unit::Plain, false, {}, {}};
  Axis y{"bubble fraction", Scale::Linear, Unit::Plain, true, {}, {}};
  std::vector<Series> measured;
  std::vector<Series> closed_form;
};
std::string bubble_chart_svg(const BubbleChart& chart);

// ---------------------------------------------------------------- heatmap

struct HeatCell {
  std::optional<double> value;  ///< no value and not oom: a blank cell
  bool oom = false;             ///< hatched (an SVG pattern); the value, if any, is still printed
  std::string text;             ///< printed in the cell instead of the formatted value; empty: the value (3 significant digits)
};

/** Two parameters: x values as columns, y values as rows (first row on top),
 *  each cell coloured by its value on one sequential colour scale (shown as
 *  a colour bar with the min and max) with the value printed in it. */
struct Heatmap {
  std::string title;
  std::string x_label, y_label;
  std::string value_label;  ///< names the colour scale
  std::vector<std::string> x_values;  ///< column headers
  std::vector<std::string> y_values;  ///< row headers
  std::vector<std::vector<HeatCell>> cells;  ///< [row][column]; missing entries: blank; entries beyond the headers: ignored
};
std::string heatmap_svg(const Heatmap& chart);

// ---------------------------------------------------------------- pareto

/** Peak memory (x, bytes) vs throughput (y) scatter, one colour per series,
 *  oom points hollow. The Pareto front over every drawn non-oom point of all
 *  series (the points that no other point beats with less or equal memory
 *  and more or equal throughput, one of them strictly) is drawn as a step
 *  line (class "front"); the capacity, when given, as a dashed vertical line. */
struct ParetoChart {
  std::string title;
  Axis x{"peak memory", Scale::Linear, Unit::Bytes, true, {}, {}};
  Axis y{"throughput (samples/s)", Scale::Linear, Unit::Plain, true, {}, {}};
  std::vector<Series> series;  ///< Point::x = peak memory bytes, Point::y = throughput
  std::optional<double> capacity_bytes;
};
std::string pareto_chart_svg(const ParetoChart& chart);

// ---------------------------------------------------------------- scaling

/** Metric vs number of devices, one solid line with markers per series, and
 *  per series the ideal (linear from the series' point with the smallest x:
 *  y0 * x / x0) as a dashed line of the same colour over the series' x
 *  range. No ideal for a series with fewer than 2 drawable points. */
struct ScalingChart {
  std::string title;
  Axis x{"devices", Scale::Log2, Unit::Plain, false, {}, {}};
  Axis y{"throughput (samples/s)", Scale::Linear, Unit::Plain, true, {}, {}};
  std::vector<Series> series;
  bool ideal = true;
};
std::string scaling_chart_svg(const ScalingChart& chart);

}  // namespace pipegrid::charts
