#pragma once
// `pipegrid sweep report`: tables, checks and plots from a sweep's results
// (docs/experiments-report.md). Reads only OUT/runs.csv and
// OUT/devices.csv; never simulates.
//
// The experiment file's report sections:
//
//   [[table]]                      a pivot of runs.csv
//   name  = "speedup"              file names: tables/<name>.{md,csv,tex}
//   rows  = ["platform"]           columns whose values make the rows (or one string)
//   cols  = "system"               optional: a column whose values make the columns
//   value = "max(throughput_samples_per_s)"   agg(column) or agg(EXPR), agg in max min mean sum
//                                  count first, over the runs of the cell with status "ok" (runs that
//                                  fit); EXPR is evaluated per run over that run's columns
//   where = "schedule != 'dp'"     optional: only the runs where this holds
//   from  = "devices"              optional: one entry per devices.csv row (with its run's columns);
//                                  default: devices when the table names a column only devices.csv has
//   relative_to = { system = "GPipe" }   optional: each row divided by its cell in that column
//   format = "{:.2f}x"             optional fmt format of one number (default: 4 significant digits)
//   annotate = ["schedule", "micro_batches"]  optional (max, min, first): the chosen run's values under each cell
//   paper = [ { platform = "...", system = "BaPipe", value = 1.33 } ]   published values: "pipegrid (paper)"
//
//   [[expect]]                     assertions; `report` exits 1 when one breaks
//   table  = "speedup"             optional: per row of that table; without it, per run of runs.csv
//   where  = "platform == '...'"   optional: only the rows (runs) where this holds
//   assert = ["BaPipe >= GPipe"]   expressions (sweep/expression.hpp) that must be true
//
//   [report]
//   plots = [ { kind = "line", x = "micro_batches", x_scale = "log2", y = "throughput_samples_per_s",
//               series = "system", facet_cols = "platform", y_min = 0, y_max = 300,
//               x_label = "micro-batches", y_label = "samples/s" } ]
//
// Names in a table expect: each column of the table by its value, raw as in
// runs.csv and as printed when that differs (a path's stem); `C (paper)`
// for a published value of column C; the row columns with their (string)
// values; `value` for a table without cols. A cell without a value is absent
// (guard with has()). Names that are no identifiers take backquotes:
// `1f1b-so`, `BaPipe (paper)`. Names in a run expect: the columns of
// runs.csv, each cell a number when it reads as one, true/false, a string,
// or absent when empty. An assertion that cannot be evaluated on a row (an
// absent value, say) counts as broken, with the reason; a name that is no
// column is an InputError.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "sweep/expression.hpp"

namespace pipegrid {

/** One published value of a table cell. */
struct PaperValue {
  std::vector<std::pair<std::string, std::string>> keys;  ///< column -> value, as runs.csv writes it
  double value = 0;
  std::size_t line = 0;
};

struct TableSpec {
  std::string name;
  std::size_t line = 0;                 ///< of the [[table]] header
  std::vector<std::string> rows;
  std::string cols;                     ///< empty: one column, "value"
  std::string aggregate;                ///< max, min, mean, sum, count, first
  std::string metric;                   ///< the column aggregated; empty when metric_expression is set
  std::optional<Expression> metric_expression;  ///< agg(EXPR): evaluated per run, over its columns
  std::string value_text;               ///< as written: "max(throughput_samples_per_s)"
  std::optional<Expression> where;      ///< only the runs (device rows) where this holds
  std::string from;                     ///< "runs", "devices", or empty: devices when a name is only there
  std::optional<std::string> relative_to;  ///< the cols value whose cell divides each row
  std::string format;                   ///< empty: the default number format
  std::vector<std::string> annotate;
  std::vector<PaperValue> paper;
};

struct ExpectSpec {
  std::size_t line = 0;
  std::string table;                    ///< empty: over runs
  std::optional<Expression> where;
  std::vector<Expression> asserts;
};

/** One plot of [report] plots. Which keys a kind takes is in
 *  docs/experiments-report.md; a key a kind does not take is an InputError. */
struct PlotSpec {
  std::size_t line = 0;
  std::string kind;        ///< line bars memory bubble heatmap pareto scaling
  std::string name;        ///< file name part; empty: the 1-based index
  std::string title;       ///< empty: made from the keys
  std::string x, y, series, facet_cols;
  std::string x_scale, y_scale;  ///< linear or log2; empty: the kind's default
  std::string agg = "max"; ///< how runs that share a point are combined (max min mean sum count first)
  std::string table;       ///< bars: the table drawn
  std::string value_text;  ///< heatmap: "agg(column)" or "agg(EXPR)", as in a table
  std::string aggregate, metric;  ///< heatmap: value_text's parts (metric empty for an EXPR)
  std::optional<Expression> metric_expression;  ///< heatmap: agg(EXPR)
  std::string format;      ///< heatmap: the cell text format
  std::optional<Expression> where;  ///< only the runs where this holds
  std::optional<double> y_min, y_max;  ///< a fixed y range (finite, y_min < y_max; > 0 on log2); not heatmap
  std::optional<std::string> x_label, y_label;  ///< axis labels; none: the columns' (report_detail::column_label)
};

struct ReportSpec {
  std::string file;        ///< the experiment file, for messages
  std::vector<TableSpec> tables;
  std::vector<ExpectSpec> expects;
  std::vector<PlotSpec> plots;
};

/** Reads the [[table]], [[expect]] and [report] sections of an experiment
 *  file (other keys of `root` are not looked at). Unknown keys, wrong types,
 *  unknown aggregates or plot kinds, a bad format, two tables of one name, an
 *  expect naming no table: InputError "FILE:LINE: ...". Column names are
 *  checked later, against runs.csv, by write_report. */
ReportSpec parse_report_spec(const toml::table& root, const std::string& file);

/** One axis of the experiment, as the report sees it. */
struct ReportAxis {
  std::string name;
  /// The runs.csv columns the axis sets (a bundle sets several); empty: the
  /// column named `name`.
  std::vector<std::string> columns;
};

/** What only the expansion of the experiment knows. Plain data. */
struct ReportContext {
  std::string name;                            ///< the experiment's name
  std::string title;                           ///< its title; empty: the name
  std::vector<ReportAxis> axes;                ///< in file order
  /// Columns holding file paths: tables and plots print them shortened to
  /// their stems (with parent folders where stems collide).
  std::vector<std::string> path_columns = {"platform", "profile", "partition", "plan"};
  /// The non-volatile result columns the dead-axis check compares (status
  /// is always compared); those missing from runs.csv are skipped.
  std::vector<std::string> metric_columns = {"minibatch_time_s",  "steady_period_s",   "throughput_samples_per_s",
                                             "bubble_fraction",   "bytes_per_sample",  "peak_memory_bytes",
                                             "peak_memory_host",  "memory_capacity_bytes", "stages",
                                             "partition",         "tflops_per_gpu",    "mfu",
                                             "hfu"};
};

struct ReportResult {
  std::size_t runs = 0;
  std::size_t broken_expects = 0;       ///< assertions broken (per row); the CLI exits 1 when > 0
  std::size_t checked_expects = 0;      ///< assertions evaluated (per row)
  std::vector<std::string> failures;    ///< one message per broken assertion, for stderr
  std::vector<std::string> warnings;    ///< dead axes and the like, for stderr (also in report.md)
  std::vector<std::string> files;       ///< every file written, relative to out_dir, sorted
};

/** Reads OUT/runs.csv and OUT/devices.csv (devices.csv only when a memory or
 *  scaling plot or a devices table needs it) and writes, all or none (OutputFileSet), into
 *  `out_dir`: report.md, report.html (self-contained: tables, plots inline,
 *  every run's label and status), tables/<name>.{md,csv,tex} and
 *  plots/<name or index>-<kind>.svg. A column named by the spec that
 *  runs.csv lacks, or a malformed CSV: InputError. Broken expects are not
 *  errors: they are counted and described in the result and in the report. */
ReportResult write_report(const ReportSpec& spec, const ReportContext& context, const std::string& out_dir);

}  // namespace pipegrid
