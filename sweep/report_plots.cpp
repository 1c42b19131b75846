// Report plots: runs.csv and devices.csv mapped onto render/charts.hpp.
//
// line, bubble, scaling: one point per (facet, series, x); the point's value
// is `agg` (default max) of y over the point's runs that fit (status ok).
// Where none fits but some ran out of memory, the same aggregate over those
// is drawn hollow. bubble: y is bubble_fraction, x micro_batches, series
// schedule (defaults); GPipe's closed form (N-1)/(M+N-1), N = the stages of
// the runs drawn, M on the x axis, is drawn dashed, one curve per distinct
// N. scaling: x "devices" is the number of devices.csv rows of the run (the
// hosts it used) unless runs.csv has a column of that name; the ideal is
// linear from each series' smallest x. heatmap: value = agg(column) per (x,
// y) cell as in tables; hatched where no run fits but one ran out of memory.
// pareto: every run that fit or ran out of memory is a point (peak memory,
// throughput); the capacity line when all runs share one. memory: the peak
// per device of each selected run (at most 12, in plan order), from
// devices.csv, hosts in pipeline order (hosts_in_stage_order). Axis labels
// default to column_label (the documented name with its unit); y_min and
// y_max fix the y range (render/charts.hpp clips what lies beyond it). bars: a [[table]], one group per row, one bar per column,
// the paper values as ticks, a dashed 1 when the table is relative_to.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.hpp"
#include "render/charts.hpp"
#include "sweep/report_internal.hpp"
#include "core/suggest.hpp"

namespace pipegrid::report_detail {

namespace {

/// The documented columns (docs/semantics.md's metrics, docs/sweeps.md's
/// results) and common parameters: name and unit ("" for none and for bytes,
/// whose unit the chart picks from the range).
struct ColumnLabel {
  const char* column;
  const char* name;
  const char* unit;
};
constexpr ColumnLabel column_labels[] = {
    {"minibatch_time_s", "mini-batch time", "s"},
    {"steady_period_s", "steady-state period", "s"},
    {"mean_minibatch_span_s", "mean mini-batch span", "s"},
    {"throughput_samples_per_s", "throughput", "samples/s"},
    {"bubble_fraction", "bubble fraction", ""},
    {"span_bubble_fraction", "span bubble fraction", ""},
    {"bytes_per_sample", "bytes sent per sample", ""},
    {"peak_memory_bytes", "peak memory", ""},
    {"memory_capacity_bytes", "memory capacity", ""},
    {"memory_reserve_bytes", "memory reserve", ""},
    {"tflops_per_gpu", "achieved TFLOP/s per GPU", "TFLOP/s"},
    {"mfu", "model FLOPs utilisation (MFU)", ""},
    {"hfu", "hardware FLOPs utilisation (HFU)", ""},
    {"time_per_stage_s", "time per stage", "s"},
    {"parameters", "parameters", ""},
    {"sim_wall_s", "simulation wall time", "s"},
    {"busy_s", "busy time", "s"},
    {"peak_stashed", "peak stashed micro-batches", ""},
    {"weight_versions", "weight versions", ""},
    {"stages", "pipeline stages", ""},
    {"micro_batches", "micro-batches per mini-batch", "M"},
    {"micro_batch_size", "micro-batch size", "samples"},
    {"devices", "devices", ""},
    {"gpus", "GPUs", ""},
    {"layers", "layers", ""},
};

const ColumnLabel* find_label(const std::string& column) {
  for (const ColumnLabel& label : column_labels)
    if (column == label.column) return &label;
  return nullptr;
}

constexpr std::size_t max_memory_runs = 12;
constexpr std::size_t no_column = static_cast<std::size_t>(-1);

class RunScope : public Scope {
 public:
  RunScope(const Results& results, std::size_t run) : results_(results), run_(run) {}
  Value lookup(std::string_view name) const override {
    const auto column = results_.find(std::string(name));
    if (!column)
      throw InputError(fmt::format("no column '{}' in {}{}", name, results_.csv().file, did_you_mean(name, results_.csv().header)));
    return infer_value(results_.cell(run_, *column));
  }

 private:
  const Results& results_;
  std::size_t run_;
};

/// The runs a plot draws: those where `where` holds (all without one).
std::vector<std::size_t> selected_runs(const PlotSpec& plot, const Results& runs) {
  std::vector<std::size_t> out;
  for (std::size_t run = 0; run < runs.size(); ++run)
    if (!plot.where || plot.where->evaluate_bool(RunScope(runs, run))) out.push_back(run);
  return out;
}

charts::Scale scale_of(const std::string& name) { return name == "log2" ? charts::Scale::Log2 : charts::Scale::Linear; }

/// The axis of `column`: the plot's label, else the column's; bytes for a
/// `_bytes` column.
charts::Axis axis_of(const std::string& column, const std::string& scale, const std::optional<std::string>& label) {
  charts::Axis axis;
  axis.label = label ? *label : column_label(column);
  axis.scale = scale_of(scale);
  axis.unit = is_bytes_column(column) ? charts::Unit::Bytes : charts::Unit::Plain;
  return axis;
}

/// The y axis of `plot` (its column, scale, label and range).
charts::Axis y_axis_of(const PlotSpec& plot) {
  charts::Axis axis = axis_of(plot.y, plot.y_scale, plot.y_label);
  axis.min = plot.y_min;
  axis.max = plot.y_max;
  return axis;
}

std::size_t index_of(std::vector<std::string>& keys, const std::string& key) {
  const auto found = std::find(keys.begin(), keys.end(), key);
  if (found != keys.end()) return static_cast<std::size_t>(found - keys.begin());
  keys.push_back(key);
  return keys.size() - 1;
}

/// Devices used by each run: devices.csv rows per run_key.
std::map<std::string, double> device_counts(const Results& devices) {
  std::map<std::string, double> counts;
  const auto key = devices.find("run_key");
  if (!key) return counts;
  for (std::size_t row = 0; row < devices.size(); ++row) counts[devices.cell(row, *key)] += 1;
  return counts;
}

/// Points of line, bubble and scaling plots: [facet][series] -> points by x.
struct Grouped {
  std::vector<std::string> facets, series;
  std::vector<std::vector<std::vector<charts::Point>>> points;  // [facet][series]
  std::size_t skipped = 0;  // runs without a numeric x
};

Grouped group_points(const PlotSpec& plot, const Results& runs, const Results* devices, std::size_t index0) {
  const std::string what = fmt::format("plot {} ({})", index0 + 1, plot.kind);
  const std::size_t y = runs.column(plot.y, plot.line, what);
  std::optional<std::size_t> x;
  std::map<std::string, double> devices_of;
  if (plot.kind == "scaling" && plot.x == "devices" && !runs.find("devices")) {
    if (!devices) throw InputError(fmt::format("{}:{}: {}: x = devices needs devices.csv", runs.spec_file(), plot.line, what));
    devices_of = device_counts(*devices);
  } else {
    x = runs.column(plot.x, plot.line, what);
  }
  const std::size_t series = plot.series.empty() ? no_column : runs.column(plot.series, plot.line, what);
  const std::size_t facet = plot.facet_cols.empty() ? no_column : runs.column(plot.facet_cols, plot.line, what);
  const auto label = runs.find("label");
  const auto run_key = runs.find("run_key");

  Grouped grouped;
  // (facet, series, x) -> runs, in order of first appearance.
  struct Key {
    std::size_t facet, series;
    double x;
    bool operator<(const Key& o) const { return std::tie(facet, series, x) < std::tie(o.facet, o.series, o.x); }
  };
  std::map<Key, std::vector<std::size_t>> members;
  for (const std::size_t run : selected_runs(plot, runs)) {
    if (!runs.fits(run) && runs.status(run) != "oom") continue;  // no metrics to draw
    std::optional<double> x_value;
    if (x) x_value = runs.number(run, *x);
    else if (run_key) {
      const auto found = devices_of.find(runs.cell(run, *run_key));
      if (found != devices_of.end()) x_value = found->second;
    }
    if (!x_value) {
      ++grouped.skipped;
      continue;
    }
    const std::size_t f = index_of(grouped.facets, facet == no_column ? "" : runs.display(facet, runs.cell(run, facet)));
    const std::size_t s = index_of(grouped.series, series == no_column ? plot.y : runs.display(series, runs.cell(run, series)));
    members[Key{f, s, *x_value}].push_back(run);
  }
  grouped.points.assign(grouped.facets.size(), std::vector<std::vector<charts::Point>>(grouped.series.size()));
  for (const auto& [key, group] : members) {
    std::vector<std::size_t> fit, oom;
    for (const std::size_t run : group) {
      if (runs.fits(run)) fit.push_back(run);
      else if (runs.status(run) == "oom") oom.push_back(run);
    }
    Aggregate value = aggregate(plot.agg, runs, fit, y);
    bool hollow = false;
    if (!value.value || fit.empty()) {
      value = aggregate(plot.agg, runs, oom, y);
      hollow = true;
      if (oom.empty()) continue;
    }
    if (!value.value) continue;
    charts::Point point;
    point.x = key.x;
    point.y = *value.value;
    point.oom = hollow;
    if (value.chosen && label) point.label = runs.cell(*value.chosen, *label);
    else point.label = fmt::format("{} of {} run{}", plot.agg, hollow ? oom.size() : fit.size(),
                                   (hollow ? oom.size() : fit.size()) == 1 ? "" : "s");
    grouped.points[key.facet][key.series].push_back(std::move(point));
  }
  return grouped;
}

std::string skipped_note(std::size_t skipped, const std::string& x) {
  return fmt::format("{} run{} without a number in '{}' not drawn", skipped, skipped == 1 ? "" : "s", x);
}

std::string line_svg(const PlotSpec& plot, std::size_t index0, const Results& runs, std::vector<std::string>& notes) {
  const Grouped grouped = group_points(plot, runs, nullptr, index0);
  if (grouped.skipped) notes.push_back(skipped_note(grouped.skipped, plot.x));
  charts::LineChart chart;
  chart.title = plot.title.empty() ? fmt::format("{} vs {}", column_title(plot.y), column_title(plot.x)) : plot.title;
  chart.x = axis_of(plot.x, plot.x_scale, plot.x_label);
  chart.x.from_zero = false;
  chart.y = y_axis_of(plot);
  for (std::size_t f = 0; f < grouped.facets.size(); ++f) {
    charts::LinePanel panel;
    panel.title = plot.facet_cols.empty() ? "" : fmt::format("{} = {}", plot.facet_cols, grouped.facets[f]);
    for (std::size_t s = 0; s < grouped.series.size(); ++s)
      if (!grouped.points[f][s].empty()) panel.series.push_back({grouped.series[s], grouped.points[f][s]});
    chart.panels.push_back(std::move(panel));
  }
  return charts::line_chart_svg(chart);
}

std::string bubble_svg(const PlotSpec& plot, std::size_t index0, const Results& runs, std::vector<std::string>& notes) {
  const Grouped grouped = group_points(plot, runs, nullptr, index0);
  if (grouped.skipped) notes.push_back(skipped_note(grouped.skipped, plot.x));
  charts::BubbleChart chart;
  chart.title = plot.title.empty() ? fmt::format("bubble fraction vs {}", column_title(plot.x)) : plot.title;
  chart.x.label = plot.x_label ? *plot.x_label : column_label(plot.x);
  chart.x.scale = scale_of(plot.x_scale);
  chart.y.label = plot.y_label ? *plot.y_label : column_label(plot.y);
  chart.y.min = plot.y_min;
  chart.y.max = plot.y_max;
  double low = 0, high = 0;
  bool any = false;
  for (std::size_t s = 0; s < grouped.series.size(); ++s) {
    charts::Series series{grouped.series[s], {}};
    for (const auto& facet : grouped.points)
      for (const auto& point : facet[s]) {
        series.points.push_back(point);
        if (point.x >= 1) {
          low = any ? std::min(low, point.x) : point.x;
          high = any ? std::max(high, point.x) : point.x;
          any = true;
        }
      }
    if (!series.points.empty()) chart.measured.push_back(std::move(series));
  }
  // Distinct stage counts N among the drawn runs that fit.
  std::vector<double> stages;
  if (const auto column = runs.find("stages"))
    for (const std::size_t run : selected_runs(plot, runs))
      if (const auto n = runs.number(run, *column); n && runs.fits(run) && *n >= 1 &&
                                                     std::find(stages.begin(), stages.end(), *n) == stages.end())
        stages.push_back(*n);
  std::sort(stages.begin(), stages.end());
  if (any) {
    const bool named_gpipe = std::any_of(chart.measured.begin(), chart.measured.end(),
                                         [](const charts::Series& s) { return s.name == "gpipe"; });
    for (const double n : stages) {
      charts::Series curve;
      if (stages.size() == 1 && named_gpipe) curve.name = "gpipe";
      else curve.name = fmt::format("GPipe (N-1)/(M+N-1), N={}", format_number(n));
      // 8 samples per doubling of M over the drawn range, plus its ends.
      const int steps = std::max(1, static_cast<int>(std::ceil(std::log2(high / low) * 8)));
      for (int i = 0; i <= steps; ++i) {
        const double m = low * std::pow(high / low, static_cast<double>(i) / steps);
        curve.points.push_back({m, (n - 1) / (m + n - 1), false, {}});
      }
      chart.closed_form.push_back(std::move(curve));
    }
  }
  return charts::bubble_chart_svg(chart);
}

std::string scaling_svg(const PlotSpec& plot, std::size_t index0, const Results& runs, const Results* devices,
                        std::vector<std::string>& notes) {
  const Grouped grouped = group_points(plot, runs, devices, index0);
  if (grouped.skipped) notes.push_back(skipped_note(grouped.skipped, plot.x));
  charts::ScalingChart chart;
  chart.title = plot.title.empty() ? fmt::format("{} vs {}", column_title(plot.y), column_title(plot.x)) : plot.title;
  chart.x = axis_of(plot.x, plot.x_scale, plot.x_label);
  chart.x.from_zero = false;
  chart.y = y_axis_of(plot);
  for (std::size_t s = 0; s < grouped.series.size(); ++s) {
    charts::Series series{grouped.series[s], {}};
    for (const auto& facet : grouped.points)
      series.points.insert(series.points.end(), facet[s].begin(), facet[s].end());
    std::stable_sort(series.points.begin(), series.points.end(),
                     [](const charts::Point& a, const charts::Point& b) { return a.x < b.x; });
    if (!series.points.empty()) chart.series.push_back(std::move(series));
  }
  return charts::scaling_chart_svg(chart);
}

std::string heatmap_svg(const PlotSpec& plot, std::size_t index0, const Results& runs) {
  const std::string what = fmt::format("plot {} (heatmap)", index0 + 1);
  const std::size_t x = runs.column(plot.x, plot.line, what);
  const std::size_t y = runs.column(plot.y, plot.line, what);
  const RunValue metric = run_value(runs, plot.metric, plot.metric_expression, plot.line, what);
  charts::Heatmap chart;
  chart.title = plot.title.empty() ? fmt::format("{} by {} and {}", plot.value_text, plot.x, plot.y) : plot.title;
  chart.x_label = plot.x_label ? *plot.x_label : column_label(plot.x);
  chart.y_label = plot.y_label ? *plot.y_label : column_label(plot.y);
  chart.value_label = plot.value_text;
  std::vector<std::string> xs, ys;
  std::map<std::pair<std::size_t, std::size_t>, std::vector<std::size_t>> members;
  for (const std::size_t run : selected_runs(plot, runs)) {
    const std::size_t c = index_of(xs, runs.cell(run, x));
    const std::size_t r = index_of(ys, runs.cell(run, y));
    members[{r, c}].push_back(run);
  }
  for (const auto& v : xs) chart.x_values.push_back(runs.display(x, v));
  for (const auto& v : ys) chart.y_values.push_back(runs.display(y, v));
  chart.cells.assign(ys.size(), std::vector<charts::HeatCell>(xs.size()));
  for (const auto& [key, group] : members) {
    std::vector<std::size_t> fit, oom;
    for (const std::size_t run : group) {
      if (runs.fits(run)) fit.push_back(run);
      else if (runs.status(run) == "oom") oom.push_back(run);
    }
    charts::HeatCell& cell = chart.cells[key.first][key.second];
    cell.value = aggregate(plot.aggregate, fit, metric).value;
    if (fit.empty() && !oom.empty()) cell.oom = true;
    if (cell.value && !plot.format.empty()) cell.text = format_value(plot.format, *cell.value);
    if (!cell.value && cell.oom) cell.text = "oom";
  }
  return charts::heatmap_svg(chart);
}

std::string pareto_svg(const PlotSpec& plot, std::size_t index0, const Results& runs) {
  const std::string what = fmt::format("plot {} (pareto)", index0 + 1);
  const std::size_t x = runs.column(plot.x, plot.line, what);
  const std::size_t y = runs.column(plot.y, plot.line, what);
  const std::size_t series = plot.series.empty() ? no_column : runs.column(plot.series, plot.line, what);
  const auto capacity = runs.find("memory_capacity_bytes");
  const auto label = runs.find("label");
  charts::ParetoChart chart;
  chart.title = plot.title.empty() ? "throughput vs peak memory" : plot.title;
  chart.x = axis_of(plot.x, "linear", plot.x_label);
  chart.y = y_axis_of(plot);
  std::vector<std::string> names;
  std::optional<double> shared_capacity;
  bool capacities_equal = true;
  for (const std::size_t run : selected_runs(plot, runs)) {
    const bool oom = runs.status(run) == "oom";
    if (!runs.fits(run) && !oom) continue;
    const auto px = runs.number(run, x), py = runs.number(run, y);
    if (!px || !py) continue;
    const std::size_t s = index_of(names, series == no_column ? "runs" : runs.display(series, runs.cell(run, series)));
    if (chart.series.size() <= s) chart.series.push_back({names[s], {}});
    chart.series[s].points.push_back({*px, *py, oom, label ? runs.cell(run, *label) : std::string()});
    if (capacity)
      if (const auto c = runs.number(run, *capacity)) {
        if (shared_capacity && *shared_capacity != *c) capacities_equal = false;
        shared_capacity = c;
      }
  }
  if (capacities_equal) chart.capacity_bytes = shared_capacity;
  return charts::pareto_chart_svg(chart);
}

std::string memory_svg(const PlotSpec& plot, std::size_t index0, const Results& runs, const Results& devices,
                       std::vector<std::string>& notes) {
  const std::string what = fmt::format("plot {} (memory)", index0 + 1);
  const std::size_t key = runs.column("run_key", plot.line, what);
  const auto label = runs.find("label");
  const std::size_t device_key = devices.column("run_key", plot.line, what);
  const std::size_t host = devices.column("host", plot.line, what);
  const std::size_t peak = devices.column("peak_memory_bytes", plot.line, what);
  const auto capacity = devices.find("memory_capacity_bytes");
  charts::MemoryChart chart;
  chart.title = plot.title.empty() ? "peak memory per device" : plot.title;
  chart.x_label = plot.x_label ? *plot.x_label : "host (in pipeline order)";
  chart.y_label = plot.y_label ? *plot.y_label : column_label("peak_memory_bytes");
  chart.y_min = plot.y_min;
  chart.y_max = plot.y_max;
  std::vector<std::size_t> chosen;
  for (const std::size_t run : selected_runs(plot, runs))
    if (runs.fits(run) || runs.status(run) == "oom") chosen.push_back(run);
  if (chosen.size() > max_memory_runs) {
    notes.push_back(fmt::format("{} runs selected; the first {} drawn (narrow the plot with 'where')", chosen.size(),
                                max_memory_runs));
    chosen.resize(max_memory_runs);
  }
  std::map<std::string, std::vector<std::size_t>> rows_of;
  for (std::size_t row = 0; row < devices.size(); ++row) rows_of[devices.cell(row, device_key)].push_back(row);
  std::vector<std::size_t> drawn_rows;
  for (const std::size_t run : chosen)
    for (const std::size_t row : rows_of[runs.cell(run, key)]) drawn_rows.push_back(row);
  chart.host_order = hosts_in_stage_order(devices, drawn_rows);
  for (const std::size_t run : chosen) {
    charts::MemoryRun entry;
    entry.name = label ? runs.cell(run, *label) : runs.cell(run, key);
    for (const std::size_t row : rows_of[runs.cell(run, key)]) {
      charts::DeviceMemory device;
      device.host = devices.cell(row, host);
      device.peak_bytes = devices.number(row, peak).value_or(0);
      device.capacity_bytes = capacity ? devices.number(row, *capacity).value_or(0) : 0;
      entry.devices.push_back(std::move(device));
    }
    chart.runs.push_back(std::move(entry));
  }
  return charts::memory_chart_svg(chart);
}

std::string bars_svg(const PlotSpec& plot, const std::vector<ComputedTable>& tables) {
  const auto table = std::find_if(tables.begin(), tables.end(), [&](const ComputedTable& t) { return t.spec->name == plot.table; });
  charts::BarChart chart;
  if (table == tables.end()) return charts::bar_chart_svg(chart);  // parse_report_spec checked the name
  const TableSpec& spec = *table->spec;
  chart.title = plot.title.empty() ? fmt::format("{}: {}", spec.name, spec.value_text) : plot.title;
  if (plot.x_label) {
    chart.x_label = *plot.x_label;
  } else {
    std::vector<std::string> names;
    for (const std::string& column : table->row_columns) names.push_back(column_label(column));
    chart.x_label = fmt::format("{}", fmt::join(names, " / "));
  }
  // agg(column): the column's label (its name alone for a ratio); agg(EXPR): the value as written.
  const std::string measured = spec.metric.empty() ? spec.value_text
                               : spec.relative_to  ? column_title(spec.metric)
                                                   : column_label(spec.metric);
  chart.y.label = plot.y_label                ? *plot.y_label
                  : spec.relative_to          ? fmt::format("{} relative to {}", measured, *spec.relative_to)
                                              : measured;
  chart.y.unit = !spec.relative_to && is_bytes_column(spec.metric) ? charts::Unit::Bytes : charts::Unit::Plain;
  chart.y.min = plot.y_min;
  chart.y.max = plot.y_max;
  for (const auto& row : table->row_display) chart.groups.push_back(fmt::format("{}", fmt::join(row, " / ")));
  chart.series = table->col_display;
  for (std::size_t r = 0; r < table->cells.size(); ++r) {
    std::vector<charts::Bar> bars;
    for (std::size_t c = 0; c < table->cells[r].size(); ++c) {
      const TableCell& cell = table->cells[r][c];
      bars.push_back({cell.value, cell.paper, cell.value ? format_value(spec.format, *cell.value) : cell.missing});
    }
    chart.bars.push_back(std::move(bars));
  }
  if (spec.relative_to) chart.baseline = 1.0;
  return charts::bar_chart_svg(chart);
}

}  // namespace

std::string column_label(const std::string& column) {
  const ColumnLabel* label = find_label(column);
  if (!label) return column;
  if (*label->unit == '\0') return label->name;
  return fmt::format("{} ({})", label->name, label->unit);
}

std::string column_title(const std::string& column) {
  const ColumnLabel* label = find_label(column);
  return label ? label->name : column;
}

bool is_bytes_column(const std::string& column) {
  return column.size() >= 6 && column.compare(column.size() - 6, 6, "_bytes") == 0;
}

bool natural_less(const std::string& a, const std::string& b) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      std::size_t i_end = i, j_end = j;
      while (i_end < a.size() && digit(a[i_end])) ++i_end;
      while (j_end < b.size() && digit(b[j_end])) ++j_end;
      // Leading zeros aside, a longer run of digits is a larger number.
      std::size_t i0 = i, j0 = j;
      while (i0 + 1 < i_end && a[i0] == '0') ++i0;
      while (j0 + 1 < j_end && b[j0] == '0') ++j0;
      if (i_end - i0 != j_end - j0) return i_end - i0 < j_end - j0;
      const int order = a.compare(i0, i_end - i0, b, j0, j_end - j0);
      if (order != 0) return order < 0;
      if (i_end - i != j_end - j) return i_end - i < j_end - j;  // 7 before 07
      i = i_end, j = j_end;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::vector<std::string> hosts_in_stage_order(const Results& devices, const std::vector<std::size_t>& rows) {
  const auto host = devices.find("host");
  if (!host) return {};
  const auto stages = devices.find("stages");
  const auto replica = devices.find("replica");
  constexpr double none = std::numeric_limits<double>::infinity();
  struct Place {
    double stage = none, replica = none;
  };
  std::map<std::string, Place> places;
  for (const std::size_t row : rows) {
    Place& place = places[devices.cell(row, *host)];
    if (stages) {
      // "2" or "0;3" (interleaved and V schedules): the smallest stage.
      const std::string& cell = devices.cell(row, *stages);
      std::size_t start = 0;
      while (start <= cell.size()) {
        const std::size_t end = std::min(cell.find(';', start), cell.size());
        if (const auto stage = parse_number(cell.substr(start, end - start))) place.stage = std::min(place.stage, *stage);
        start = end + 1;
      }
    }
    if (replica)
      if (const auto r = devices.number(row, *replica)) place.replica = std::min(place.replica, *r);
  }
  std::vector<std::string> order;
  for (const auto& [name, place] : places) order.push_back(name);
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    const Place& pa = places.at(a);
    const Place& pb = places.at(b);
    if (pa.stage != pb.stage) return pa.stage < pb.stage;
    if (pa.replica != pb.replica) return pa.replica < pb.replica;
    return natural_less(a, b);
  });
  return order;
}

bool plot_needs_devices(const PlotSpec& plot) {
  return plot.kind == "memory" || (plot.kind == "scaling" && plot.x == "devices");
}

std::string plot_svg(const PlotSpec& plot, std::size_t index0, const Results& runs, const Results* devices,
                     const std::vector<ComputedTable>& tables, std::vector<std::string>& notes) {
  if (plot.kind == "line") return line_svg(plot, index0, runs, notes);
  if (plot.kind == "bubble") return bubble_svg(plot, index0, runs, notes);
  if (plot.kind == "scaling") return scaling_svg(plot, index0, runs, devices, notes);
  if (plot.kind == "heatmap") return heatmap_svg(plot, index0, runs);
  if (plot.kind == "pareto") return pareto_svg(plot, index0, runs);
  if (plot.kind == "memory") {
    if (!devices) throw InputError(fmt::format("{}:{}: a memory plot needs devices.csv", runs.spec_file(), plot.line));
    return memory_svg(plot, index0, runs, *devices, notes);
  }
  return bars_svg(plot, tables);
}

}  // namespace pipegrid::report_detail
