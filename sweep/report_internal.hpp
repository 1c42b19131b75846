#pragma once
// Internals of sweep/report.cpp shared by its files (spec, tables, plots).
// Not part of the module's interface.

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "render/svg_text.hpp"
#include "sweep/csv.hpp"
#include "sweep/expression.hpp"
#include "sweep/report.hpp"

namespace pipegrid::report_detail {

const std::vector<std::string>& aggregates();  ///< max min mean sum count first
std::string aggregate_list();                  ///< "max, min, mean, sum, count, first"
const std::vector<std::string>& plot_kinds();
std::string plot_kind_list();
/** "plots/<name or 1-based index>-<kind>.svg". */
std::string plot_file(const PlotSpec& plot, std::size_t index0);

/** A cell as an expression sees it: empty -> absent, a number (`inf`,
 *  `-inf` and `nan` included: runs.csv's spellings of the non-finite ones)
 *  -> number, "true"/"false" -> boolean, else the string. */
Value infer_value(const std::string& cell);
/** A finite number when the whole cell reads as one. */
std::optional<double> parse_number(const std::string& cell);
/** A number when the whole cell reads as one, `inf`, `-inf` and `nan`
 *  included. */
std::optional<double> parse_any_number(const std::string& cell);

/** runs.csv (or devices.csv) with the lookups the report needs. */
class Results {
 public:
  Results(CsvTable csv, const ReportContext& context, std::string spec_file);
  std::size_t size() const { return csv_.rows.size(); }
  const CsvTable& csv() const { return csv_; }
  const std::string& cell(std::size_t run, std::size_t column) const { return csv_.rows[run][column]; }
  /** The finite number of a cell (what a plot draws). */
  std::optional<double> number(std::size_t run, std::size_t column) const { return parse_number(cell(run, column)); }
  /** The number of a cell, `inf`, `-inf` and `nan` included (what a table
   *  aggregates; `nan` counts as no value). */
  std::optional<double> any_number(std::size_t run, std::size_t column) const { return parse_any_number(cell(run, column)); }
  /** The column `name`; InputError "SPEC:LINE: WHAT: no column 'name' in
   *  FILE (did you mean ...?)" when runs.csv has none. */
  std::size_t column(const std::string& name, std::size_t line, std::string_view what) const;
  std::optional<std::size_t> find(const std::string& name) const { return csv_.column(name); }
  const std::string& status(std::size_t run) const;
  bool fits(std::size_t run) const { return status(run) == "ok"; }
  /** A value of `column` as printed: a path column's values shortened to
   *  their stems, with parent folders added where two stems collide. */
  const std::string& display(std::size_t column, const std::string& raw) const;
  const std::string& spec_file() const { return spec_file_; }

 private:
  CsvTable csv_;
  std::string spec_file_;
  std::optional<std::size_t> status_;
  std::vector<bool> is_path_;
  mutable std::map<std::size_t, std::map<std::string, std::string>> display_;
};

/** The result of an aggregate over some runs; `chosen` is the run whose
 *  value was taken (max, min, first). */
struct Aggregate {
  std::optional<double> value;
  std::optional<std::size_t> chosen;
};
/** A run's value, or none. */
using RunValue = std::function<std::optional<double>(std::size_t run)>;
/** agg over the finite values `value` gives among `runs` (in order). count
 *  counts them (0 when none); the others give no value when none. */
Aggregate aggregate(const std::string& agg, const std::vector<std::size_t>& runs, const RunValue& value);
/** aggregate() over the numbers of `column`. */
Aggregate aggregate(const std::string& agg, const Results& results, const std::vector<std::size_t>& runs,
                    std::size_t column);

/** The columns of one row of `results` as an expression reads them
 *  (infer_value); a name that is no column is an InputError with a
 *  suggestion. */
class ResultsScope : public Scope {
 public:
  ResultsScope(const Results& results, std::size_t run) : results_(results), run_(run) {}
  Value lookup(std::string_view name) const override;

 private:
  const Results& results_;
  std::size_t run_;
};

/** Every name `expression` reads must be a column of `results`
 *  (InputError "SPEC:LINE: WHAT: no column ..." otherwise). */
void check_columns(const Expression& expression, const Results& results, std::size_t line, std::string_view what);

/** The per-run value of agg(column) or agg(EXPR): the column's number (none
 *  when empty or not a number), or EXPR evaluated over the run's columns,
 *  which must give a number; none when it reads an empty cell. Any other
 *  evaluation error is an InputError naming the run. Names are checked up
 *  front against `results`. */
RunValue run_value(const Results& results, const std::string& column, const std::optional<Expression>& expression,
                   std::size_t line, std::string_view what);

/** devices.csv joined with runs.csv: one row per device row whose run_key is
 *  in runs.csv, devices.csv's columns first (they win where both files have
 *  one: peak_memory_bytes, bubble_fraction, stages, ...), then the run's
 *  other columns. The file name reads "DEVICES joined with RUNS". */
CsvTable join_devices(const CsvTable& devices, const CsvTable& runs);

/** Formats one number with a table's format (default: integers as integers,
 *  4 significant digits otherwise, no exponent from 1e-4 up). */
std::string format_value(const std::string& format, double value);

struct TableCell {
  std::optional<double> value;          ///< after relative_to
  std::optional<double> paper;          ///< the published value, as given (on the table's scale)
  std::vector<std::string> annotation;  ///< the chosen run's annotate values, as printed ("" when absent)
  std::string missing;                  ///< shown without a value: "" (no run), "oom", ...
};

struct ComputedTable {
  const TableSpec* spec = nullptr;
  std::string note;                                 ///< what a cell is, in words
  std::vector<std::string> row_columns;
  std::vector<std::vector<std::string>> row_raw, row_display;
  std::vector<std::string> col_raw, col_display;    ///< "value" when the table has no cols
  std::vector<std::vector<TableCell>> cells;        ///< [row][col]
  std::vector<std::string> warnings;                ///< paper values without a cell, and the like

  /** A cell's text: "1.21x", "1.21x (1.33x)", "oom". */
  std::string text(std::size_t row, std::size_t col) const;
  /** The annotation under a cell: "schedule=1f1b-so, micro_batches=16". */
  std::string annotation(std::size_t row, std::size_t col) const;
};

/** The table over `runs` (runs.csv, or join_devices' rows when
 *  `per_device`: the note then says so). */
ComputedTable compute_table(const TableSpec& spec, const Results& runs, bool per_device = false);
std::string table_markdown(const ComputedTable& table);
std::string table_csv(const ComputedTable& table);
std::string table_latex(const ComputedTable& table, const std::string& experiment);
std::string table_html(const ComputedTable& table);

/** The SVG of one plot. `devices` is devices.csv (nullptr when absent);
 *  `tables` the computed tables (bars). Adds notes (runs left out, say) to
 *  `notes`. */
std::string plot_svg(const PlotSpec& plot, std::size_t index0, const Results& runs, const Results* devices,
                     const std::vector<ComputedTable>& tables, std::vector<std::string>& notes);
/** Whether a plot reads devices.csv. */
bool plot_needs_devices(const PlotSpec& plot);

}  // namespace pipegrid::report_detail
