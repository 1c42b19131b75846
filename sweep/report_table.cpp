// Report tables: pivots of runs.csv and their Markdown, CSV, LaTeX and HTML.

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <variant>

#include "core/error.hpp"
#include "sweep/report_internal.hpp"
#include "core/suggest.hpp"

namespace pipegrid::report_detail {

const std::vector<std::string>& aggregates() {
  static const std::vector<std::string> names = {"max", "min", "mean", "sum", "count", "first"};
  return names;
}
std::string aggregate_list() { return fmt::format("{}", fmt::join(aggregates(), ", ")); }
const std::vector<std::string>& plot_kinds() {
  static const std::vector<std::string> names = {"line", "bars", "memory", "bubble", "heatmap", "pareto", "scaling"};
  return names;
}
std::string plot_kind_list() { return fmt::format("{}", fmt::join(plot_kinds(), ", ")); }
std::string plot_file(const PlotSpec& plot, std::size_t index0) {
  return fmt::format("plots/{}-{}.svg", plot.name.empty() ? fmt::format("{}", index0 + 1) : plot.name, plot.kind);
}

std::optional<double> parse_number(const std::string& cell) {
  if (cell.empty()) return std::nullopt;
  double value = 0;
  const char* begin = cell.data();
  const char* end = begin + cell.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<double> parse_any_number(const std::string& cell) {
  if (cell == "inf") return std::numeric_limits<double>::infinity();
  if (cell == "-inf") return -std::numeric_limits<double>::infinity();
  if (cell == "nan") return std::numeric_limits<double>::quiet_NaN();
  return parse_number(cell);
}

Value infer_value(const std::string& cell) {
  if (cell.empty()) return {};
  if (const auto number = parse_any_number(cell)) return *number;
  if (cell == "true") return true;
  if (cell == "false") return false;
  return cell;
}

// ---------------------------------------------------------------- Results

Results::Results(CsvTable csv, const ReportContext& context, std::string spec_file)
    : csv_(std::move(csv)), spec_file_(std::move(spec_file)) {
  status_ = csv_.column("status");
  is_path_.resize(csv_.header.size(), false);
  for (const std::string& name : context.path_columns)
    if (const auto index = csv_.column(name)) is_path_[*index] = true;
}

std::size_t Results::column(const std::string& name, std::size_t line, std::string_view what) const {
  if (const auto index = csv_.column(name)) return *index;
  throw InputError(fmt::format("{}:{}: {}: no column '{}' in {}{}", spec_file_, line, what, name, csv_.file,
                               did_you_mean(name, csv_.header)));
}

const std::string& Results::status(std::size_t run) const {
  static const std::string none;
  return status_ ? cell(run, *status_) : none;
}

namespace {

/// Path components of `raw`, the last one without its extension.
std::vector<std::string> stem_parts(const std::string& raw) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t slash = raw.find('/', start);
    const std::string part = raw.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (!part.empty() && part != "." && part != "..") parts.push_back(part);
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (!parts.empty()) {
    std::string& last = parts.back();
    const std::size_t dot = last.rfind('.');
    if (dot != std::string::npos && dot > 0) last.resize(dot);
  }
  return parts;
}

std::string suffix_of(const std::vector<std::string>& parts, std::size_t count) {
  std::string out;
  for (std::size_t i = parts.size() - std::min(count, parts.size()); i < parts.size(); ++i) {
    if (!out.empty()) out += '/';
    out += parts[i];
  }
  return out;
}

}  // namespace

const std::string& Results::display(std::size_t column, const std::string& raw) const {
  if (column >= is_path_.size() || !is_path_[column] || raw.empty()) return raw;
  auto [entry, inserted] = display_.try_emplace(column);
  std::map<std::string, std::string>& names = entry->second;
  if (inserted) {
    // Shortest suffix of path components, the same length for every value,
    // that keeps the column's distinct values distinct.
    std::vector<std::string> values;
    for (const auto& row : csv_.rows)
      if (!row[column].empty() && std::find(values.begin(), values.end(), row[column]) == values.end())
        values.push_back(row[column]);
    std::size_t longest = 1;
    std::vector<std::vector<std::string>> parts;
    for (const auto& value : values) {
      parts.push_back(stem_parts(value));
      longest = std::max(longest, parts.back().size());
    }
    for (std::size_t count = 1; count <= longest; ++count) {
      std::set<std::string> seen;
      bool distinct = true;
      for (const auto& p : parts) distinct = seen.insert(suffix_of(p, count)).second && distinct;
      if (distinct || count == longest) {
        for (std::size_t i = 0; i < values.size(); ++i) {
          std::string shown = suffix_of(parts[i], count);
          names[values[i]] = shown.empty() || !distinct ? values[i] : shown;
        }
        break;
      }
    }
  }
  const auto found = names.find(raw);
  return found == names.end() ? raw : found->second;
}

// ---------------------------------------------------------------- aggregate

Aggregate aggregate(const std::string& agg, const std::vector<std::size_t>& runs, const RunValue& get) {
  Aggregate out;
  double sum = 0;
  std::size_t count = 0;
  for (const std::size_t run : runs) {
    const auto value = get(run);
    if (!value || std::isnan(*value)) continue;
    ++count;
    sum += *value;
    if (agg == "first") {
      if (!out.value) out = {*value, run};
    } else if (agg == "max") {
      if (!out.value || *value > *out.value) out = {*value, run};
    } else if (agg == "min") {
      if (!out.value || *value < *out.value) out = {*value, run};
    }
  }
  if (agg == "count") return {static_cast<double>(count), std::nullopt};
  if (count == 0) return {};
  if (agg == "sum") return {sum, std::nullopt};
  if (agg == "mean") return {sum / static_cast<double>(count), std::nullopt};
  return out;
}

Aggregate aggregate(const std::string& agg, const Results& results, const std::vector<std::size_t>& runs,
                    std::size_t column) {
  return aggregate(agg, runs, [&](std::size_t run) { return results.any_number(run, column); });
}

Value ResultsScope::lookup(std::string_view name) const {
  const auto column = results_.find(std::string(name));
  if (!column)
    throw InputError(fmt::format("no column '{}' in {}{}", name, results_.csv().file,
                                 did_you_mean(std::string(name), results_.csv().header)));
  return infer_value(results_.cell(run_, *column));
}

void check_columns(const Expression& expression, const Results& results, std::size_t line, std::string_view what) {
  for (const std::string& name : expression.names()) (void)results.column(name, line, what);
}

RunValue run_value(const Results& results, const std::string& column, const std::optional<Expression>& expression,
                   std::size_t line, std::string_view what) {
  if (!expression) {
    const std::size_t index = results.column(column, line, what);
    return [&results, index](std::size_t run) { return results.any_number(run, index); };
  }
  check_columns(*expression, results, line, what);
  std::vector<std::size_t> read;
  for (const std::string& name : expression->names()) read.push_back(*results.find(name));
  return [&results, expression = *expression, read, what = std::string(what)](std::size_t run) -> std::optional<double> {
    auto run_name = [&] {
      const auto index = results.find("run_index");
      const auto label = results.find("label");
      return fmt::format("run {}{}", index ? results.cell(run, *index) : std::to_string(run),
                         label ? fmt::format(" ({})", results.cell(run, *label)) : "");
    };
    Value value;
    try {
      value = expression.evaluate(ResultsScope(results, run));
    } catch (const InputError& error) {
      // An empty cell read makes the run's value absent, as an empty cell of
      // a plain column does; any other error is the expression's.
      for (const std::size_t column : read)
        if (results.cell(run, column).empty()) return std::nullopt;
      throw InputError(fmt::format("{} ({}, on {})", error.what(), what, run_name()));
    }
    if (std::holds_alternative<std::monostate>(value)) return std::nullopt;
    if (const double* number = std::get_if<double>(&value)) return *number;
    throw InputError(expression.message(fmt::format("gives {} on {}, where {} needs a number", describe(value), run_name(), what)));
  };
}

CsvTable join_devices(const CsvTable& devices, const CsvTable& runs) {
  CsvTable joined;
  joined.file = fmt::format("{} joined with {}", devices.file, runs.file);
  const std::size_t device_key = devices.require_column("run_key");
  const std::size_t run_key = runs.require_column("run_key");
  joined.header = devices.header;
  std::vector<std::size_t> run_columns;
  for (std::size_t c = 0; c < runs.header.size(); ++c)
    if (!devices.column(runs.header[c])) {
      joined.header.push_back(runs.header[c]);
      run_columns.push_back(c);
    }
  std::map<std::string, std::size_t> run_of;
  for (std::size_t r = 0; r < runs.rows.size(); ++r) run_of.try_emplace(runs.rows[r][run_key], r);
  for (std::size_t d = 0; d < devices.rows.size(); ++d) {
    const auto found = run_of.find(devices.rows[d][device_key]);
    if (found == run_of.end()) continue;  // a run of another plan
    std::vector<std::string> row = devices.rows[d];
    for (const std::size_t c : run_columns) row.push_back(runs.rows[found->second][c]);
    joined.rows.push_back(std::move(row));
    joined.row_lines.push_back(d < devices.row_lines.size() ? devices.row_lines[d] : 0);
  }
  return joined;
}

std::string format_value(const std::string& format, double value) {
  if (!format.empty()) {
    try {
      return fmt::format(fmt::runtime(format), value);
    } catch (const fmt::format_error&) {
      // parse_report_spec checked the format; fall through to the default.
    }
  }
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (std::trunc(value) == value && std::fabs(value) < 1e15) return fmt::format("{:.0f}", value);
  if (std::fabs(value) >= 1e4) return fmt::format("{:.0f}", value);
  if (std::fabs(value) >= 1e-4) {
    // 4 significant digits, fixed notation, trailing zeros dropped.
    const int digits = std::max(0, 3 - static_cast<int>(std::floor(std::log10(std::fabs(value)))));
    std::string text = fmt::format("{:.{}f}", value, digits);
    if (text.find('.') != std::string::npos) {
      while (text.back() == '0') text.pop_back();
      if (text.back() == '.') text.pop_back();
    }
    return text;
  }
  return fmt::format("{:.4g}", value);
}

// ---------------------------------------------------------------- compute

std::string ComputedTable::annotation(std::size_t row, std::size_t col) const {
  const TableCell& cell = cells[row][col];
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < cell.annotation.size() && i < spec->annotate.size(); ++i)
    parts.push_back(fmt::format("{}={}", spec->annotate[i], cell.annotation[i].empty() ? "-" : cell.annotation[i]));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string ComputedTable::text(std::size_t row, std::size_t col) const {
  const TableCell& cell = cells[row][col];
  std::string out = cell.value ? format_value(spec->format, *cell.value) : cell.missing;
  if (cell.paper) out += fmt::format(" ({})", format_value(spec->format, *cell.paper));
  return out;
}

namespace {

/// Index of `key` in `keys` (appended when new), through `index` (a map of
/// the same keys) so that large sweeps stay linear.
template <typename Key>
std::size_t index_of(std::vector<Key>& keys, std::map<Key, std::size_t>& index, const Key& key) {
  const auto [found, inserted] = index.try_emplace(key, keys.size());
  if (inserted) keys.push_back(key);
  return found->second;
}

}  // namespace

ComputedTable compute_table(const TableSpec& spec, const Results& runs, bool per_device) {
  ComputedTable table;
  table.spec = &spec;
  table.row_columns = spec.rows;
  const std::string what = fmt::format("[[table]] '{}'", spec.name);
  std::vector<std::size_t> row_cols;
  for (const std::string& name : spec.rows) row_cols.push_back(runs.column(name, spec.line, what));
  constexpr std::size_t no_column = static_cast<std::size_t>(-1);
  const std::size_t col_col = spec.cols.empty() ? no_column : runs.column(spec.cols, spec.line, what);
  const bool has_cols = col_col != no_column;
  const RunValue metric = run_value(runs, spec.metric, spec.metric_expression, spec.line, what);
  if (spec.where) check_columns(*spec.where, runs, spec.line, what);
  std::vector<std::size_t> annotate_cols;
  for (const std::string& name : spec.annotate) annotate_cols.push_back(runs.column(name, spec.line, what));

  // Rows and columns in order of first appearance (plan order); each cell's
  // runs, and those that fit.
  std::vector<std::vector<std::vector<std::size_t>>> all, fit;  // [row][col] -> runs
  std::map<std::vector<std::string>, std::size_t> row_index;
  std::map<std::string, std::size_t> col_index;
  for (std::size_t run = 0; run < runs.size(); ++run) {
    if (spec.where && !spec.where->evaluate_bool(ResultsScope(runs, run))) continue;
    std::vector<std::string> key;
    for (const std::size_t c : row_cols) key.push_back(runs.cell(run, c));
    const std::size_t r = index_of(table.row_raw, row_index, key);
    const std::size_t c = index_of(table.col_raw, col_index, has_cols ? runs.cell(run, col_col) : std::string("value"));
    if (all.size() <= r) all.resize(r + 1), fit.resize(r + 1);
    if (all[r].size() <= c) all[r].resize(c + 1), fit[r].resize(c + 1);
    all[r][c].push_back(run);
    if (runs.fits(run)) fit[r][c].push_back(run);
  }
  if (table.col_raw.empty() && !has_cols) table.col_raw.push_back("value");
  for (const auto& key : table.row_raw) {
    std::vector<std::string> shown;
    for (std::size_t i = 0; i < key.size(); ++i) shown.push_back(runs.display(row_cols[i], key[i]));
    table.row_display.push_back(std::move(shown));
  }
  for (const auto& key : table.col_raw) table.col_display.push_back(has_cols ? runs.display(col_col, key) : key);

  table.cells.assign(table.row_raw.size(), std::vector<TableCell>(table.col_raw.size()));
  for (std::size_t r = 0; r < table.row_raw.size(); ++r)
    for (std::size_t c = 0; c < table.col_raw.size(); ++c) {
      TableCell& cell = table.cells[r][c];
      const std::vector<std::size_t> none;
      const auto& cell_all = c < all[r].size() ? all[r][c] : none;
      const auto& cell_fit = c < fit[r].size() ? fit[r][c] : none;
      const Aggregate result = aggregate(spec.aggregate, cell_fit, metric);
      cell.value = result.value;
      if (result.chosen)
        for (std::size_t i = 0; i < annotate_cols.size(); ++i) {
          const std::string& raw = runs.cell(*result.chosen, annotate_cols[i]);
          cell.annotation.push_back(runs.display(annotate_cols[i], raw));
        }
      if (!cell.value && !cell_all.empty()) {
        // No run of the cell fits: its statuses, in order of first appearance.
        std::vector<std::string> statuses;
        for (const std::size_t run : cell_all) {
          const std::string status = runs.fits(run) ? "no value" : runs.status(run).empty() ? "?" : runs.status(run);
          if (std::find(statuses.begin(), statuses.end(), status) == statuses.end()) statuses.push_back(status);
        }
        cell.missing = fmt::format("{}", fmt::join(statuses, "/"));
      }
    }

  if (spec.relative_to) {
    const auto base = std::find(table.col_raw.begin(), table.col_raw.end(), *spec.relative_to);
    const auto base_shown = std::find(table.col_display.begin(), table.col_display.end(), *spec.relative_to);
    std::size_t b = 0;
    if (base != table.col_raw.end()) b = static_cast<std::size_t>(base - table.col_raw.begin());
    else if (base_shown != table.col_display.end()) b = static_cast<std::size_t>(base_shown - table.col_display.begin());
    else
      throw InputError(fmt::format("{}:{}: {}: relative_to {} = \"{}\" is no value of '{}' in runs.csv (its values: {})",
                                   runs.spec_file(), spec.line, what, spec.cols, *spec.relative_to, spec.cols,
                                   fmt::join(table.col_raw, ", ")));
    for (auto& row : table.cells) {
      const std::optional<double> denominator = row[b].value;
      for (auto& cell : row) {
        if (!cell.value) continue;
        if (!denominator || *denominator == 0) {
          cell.value.reset();
          cell.missing = fmt::format("no {}", table.col_display[b]);
          continue;
        }
        cell.value = *cell.value / *denominator;
      }
    }
  }

  for (const PaperValue& paper : spec.paper) {
    // Match each key against the raw value, or the printed one.
    auto matches = [&](const std::string& wanted, std::size_t column, const std::string& raw) {
      return wanted == raw || wanted == runs.display(column, raw);
    };
    std::optional<std::size_t> row, col;
    for (std::size_t r = 0; r < table.row_raw.size() && !row; ++r) {
      bool all_match = true;
      for (std::size_t i = 0; i < row_cols.size(); ++i) all_match = all_match && matches(paper.keys[i].second, row_cols[i], table.row_raw[r][i]);
      if (all_match) row = r;
    }
    if (has_cols) {
      for (std::size_t c = 0; c < table.col_raw.size() && !col; ++c)
        if (matches(paper.keys.back().second, col_col, table.col_raw[c])) col = c;
    } else {
      col = 0;
    }
    if (!row || !col) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : paper.keys) keys.push_back(fmt::format("{} = \"{}\"", k, v));
      table.warnings.push_back(fmt::format("{}:{}: {}: the paper value for {} matches no cell of the table",
                                           runs.spec_file(), paper.line, what, fmt::join(keys, ", ")));
      continue;
    }
    table.cells[*row][*col].paper = paper.value;
  }

  std::string note = fmt::format("Each cell: {} over the {} of the cell that fit (status ok)", spec.value_text,
                                 per_device ? "devices (devices.csv rows) of the runs" : "runs");
  if (spec.where) note += fmt::format(", where {}", spec.where->text());
  if (spec.relative_to) note += fmt::format(", divided by the row's {} = {} cell", spec.cols, runs.display(col_col, *spec.relative_to));
  note += ".";
  if (!spec.annotate.empty())
    note += fmt::format(" Under each value: the {} run's {}.", spec.aggregate == "first" ? "first" : "chosen",
                        fmt::join(spec.annotate, ", "));
  if (!spec.paper.empty()) note += " \"pipegrid (paper)\": the published value in parentheses.";
  note += " A cell without a value shows the statuses of its runs (oom: out of memory); an empty cell had no run.";
  table.note = std::move(note);
  return table;
}

// ---------------------------------------------------------------- writers

namespace {

std::string markdown_cell(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

std::string latex_escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': case '%': case '$': case '#': case '_': case '{': case '}': out += '\\'; out += c; break;
      case '~': out += "\\textasciitilde{}"; break;
      case '^': out += "\\textasciicircum{}"; break;
      case '\\': out += "\\textbackslash{}"; break;
      case '\n': case '\r': out += ' '; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace


std::string table_markdown(const ComputedTable& table) {
  std::string out = "|";
  for (const auto& name : table.row_columns) out += " " + markdown_cell(name) + " |";
  for (const auto& name : table.col_display) out += " " + markdown_cell(name) + " |";
  out += "\n|";
  for (std::size_t i = 0; i < table.row_columns.size(); ++i) out += "---|";
  for (std::size_t i = 0; i < table.col_display.size(); ++i) out += "---:|";
  out += "\n";
  for (std::size_t r = 0; r < table.row_raw.size(); ++r) {
    out += "|";
    for (const auto& value : table.row_display[r]) out += " " + markdown_cell(value) + " |";
    for (std::size_t c = 0; c < table.col_raw.size(); ++c) {
      std::string text = markdown_cell(table.text(r, c));
      if (!table.cells[r][c].annotation.empty()) text += "<br>" + markdown_cell(table.annotation(r, c));
      out += " " + text + " |";
    }
    out += "\n";
  }
  return out;
}

std::string table_csv(const ComputedTable& table) {
  const TableSpec& spec = *table.spec;
  std::vector<bool> has_paper(table.col_raw.size(), false);
  for (const auto& row : table.cells)
    for (std::size_t c = 0; c < row.size(); ++c) has_paper[c] = has_paper[c] || row[c].paper.has_value();
  std::vector<std::string> header = table.row_columns;
  for (std::size_t c = 0; c < table.col_raw.size(); ++c) {
    header.push_back(table.col_display[c]);
    for (const auto& name : spec.annotate) header.push_back(fmt::format("{} {}", table.col_display[c], name));
    if (has_paper[c]) header.push_back(fmt::format("{} (paper)", table.col_display[c]));
  }
  std::string out = csv_record(header);
  for (std::size_t r = 0; r < table.row_raw.size(); ++r) {
    std::vector<std::string> fields = table.row_display[r];
    for (std::size_t c = 0; c < table.col_raw.size(); ++c) {
      const TableCell& cell = table.cells[r][c];
      fields.push_back(cell.value ? format_number(*cell.value) : cell.missing);
      for (std::size_t i = 0; i < spec.annotate.size(); ++i) {
        fields.push_back(i < cell.annotation.size() ? cell.annotation[i] : "");
      }
      if (has_paper[c]) fields.push_back(cell.paper ? format_number(*cell.paper) : "");
    }
    out += csv_record(fields);
  }
  return out;
}

std::string table_latex(const ComputedTable& table, const std::string& experiment) {
  std::string out = fmt::format("% Table '{}' of the experiment '{}' (pipegrid sweep report).\n",
                                latex_escape(table.spec->name), latex_escape(experiment));
  out += "% " + latex_escape(table.note) + "\n";
  out += "\\begin{tabular}{" + std::string(table.row_columns.size(), 'l') + std::string(table.col_raw.size(), 'r') + "}\n\\hline\n";
  std::vector<std::string> header;
  for (const auto& name : table.row_columns) header.push_back(latex_escape(name));
  for (const auto& name : table.col_display) header.push_back(latex_escape(name));
  out += fmt::format("{} \\\\\n\\hline\n", fmt::join(header, " & "));
  for (std::size_t r = 0; r < table.row_raw.size(); ++r) {
    std::vector<std::string> fields;
    for (const auto& value : table.row_display[r]) fields.push_back(latex_escape(value));
    for (std::size_t c = 0; c < table.col_raw.size(); ++c) {
      std::string text = latex_escape(table.text(r, c));
      if (!table.cells[r][c].annotation.empty())
        text = fmt::format("\\shortstack[r]{{{}\\\\\\scriptsize {}}}", text, latex_escape(table.annotation(r, c)));
      fields.push_back(text);
    }
    out += fmt::format("{} \\\\\n", fmt::join(fields, " & "));
  }
  out += "\\hline\n\\end{tabular}\n";
  return out;
}

std::string table_html(const ComputedTable& table) {
  std::string out = "<table>\n<thead><tr>";
  for (const auto& name : table.row_columns) out += "<th>" + escape_xml(name) + "</th>";
  for (const auto& name : table.col_display) out += "<th class=\"num\">" + escape_xml(name) + "</th>";
  out += "</tr></thead>\n<tbody>\n";
  for (std::size_t r = 0; r < table.row_raw.size(); ++r) {
    out += "<tr>";
    for (std::size_t i = 0; i < table.row_display[r].size(); ++i)
      out += "<td title=\"" + escape_xml(table.row_raw[r][i]) + "\">" + escape_xml(table.row_display[r][i]) + "</td>";
    for (std::size_t c = 0; c < table.col_raw.size(); ++c) {
      const TableCell& cell = table.cells[r][c];
      out += std::string("<td class=\"num") + (cell.value ? "" : " missing") + "\">" + escape_xml(table.text(r, c));
      if (!cell.annotation.empty()) out += "<br><small>" + escape_xml(table.annotation(r, c)) + "</small>";
      out += "</td>";
    }
    out += "</tr>\n";
  }
  out += "</tbody>\n</table>\n";
  return out;
}

}  // namespace pipegrid::report_detail
