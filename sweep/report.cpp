// write_report: tables, expects, dead axes, plots; report.md and report.html.

#include "sweep/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.hpp"
#include "core/io.hpp"
#include "sweep/report_internal.hpp"
#include "core/suggest.hpp"

namespace pipegrid {

using namespace report_detail;

namespace {

// ---------------------------------------------------------------- expects

/// Names and values of one row of a table (see report.hpp).
class RowScope : public Scope {
 public:
  std::vector<std::pair<std::string, Value>> names;  // first wins
  void add(const std::string& name, Value value) {
    for (const auto& [existing, unused] : names)
      if (existing == name) return;
    names.emplace_back(name, std::move(value));
  }
  Value lookup(std::string_view name) const override {
    for (const auto& [existing, value] : names)
      if (existing == name) return value;
    return {};
  }
};

RowScope row_scope(const ComputedTable& table, std::size_t row) {
  RowScope scope;
  for (std::size_t c = 0; c < table.col_raw.size(); ++c) {
    const TableCell& cell = table.cells[row][c];
    const Value value = cell.value ? Value(*cell.value) : Value();
    const Value paper = cell.paper ? Value(*cell.paper) : Value();
    for (const std::string* name : {&table.col_raw[c], &table.col_display[c]}) {
      scope.add(*name, value);
      scope.add(*name + " (paper)", paper);
    }
  }
  for (std::size_t i = 0; i < table.row_columns.size(); ++i) scope.add(table.row_columns[i], infer_value(table.row_raw[row][i]));
  return scope;
}

class CsvRunScope : public Scope {
 public:
  CsvRunScope(const Results& runs, std::size_t run) : runs_(runs), run_(run) {}
  Value lookup(std::string_view name) const override {
    const auto column = runs_.find(std::string(name));
    return column ? infer_value(runs_.cell(run_, *column)) : Value();
  }

 private:
  const Results& runs_;
  std::size_t run_;
};

/// Every name an expression reads must be among `known`.
void check_names(const Expression& expression, const std::vector<std::string>& known, std::string_view where) {
  for (const std::string& name : expression.names())
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw InputError(expression.message(fmt::format("unknown name '{}' ({}){}", name, where, did_you_mean(name, known))));
}

std::string values_of(const Expression& expression, const Scope& scope) {
  std::vector<std::string> parts;
  for (const std::string& name : expression.names()) {
    Value value;
    try {
      value = scope.lookup(name);
    } catch (const InputError&) {
    }
    const bool plain = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
    parts.push_back(fmt::format("{} = {}", plain ? name : "`" + name + "`", describe(value)));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

struct AssertOutcome {
  std::string text;        // the assertion
  std::string subject;     // "table 'speedup'" or "runs"
  std::size_t checked = 0;
  std::vector<std::string> broken;  // messages
};

/// Evaluates `assertion` where `where` holds; returns true when it holds.
/// Evaluation errors break it, with their message.
bool holds(const Expression& assertion, const Scope& scope, std::string& why) {
  try {
    if (assertion.evaluate_bool(scope)) return true;
    why = values_of(assertion, scope);
  } catch (const InputError& error) {
    why = fmt::format("cannot be evaluated: {}", error.what());
  }
  return false;
}

bool selected(const std::optional<Expression>& where, const Scope& scope, std::string& why) {
  if (!where) return true;
  try {
    return where->evaluate_bool(scope);
  } catch (const InputError& error) {
    why = fmt::format("its 'where' cannot be evaluated: {}", error.what());
    return true;  // reported as broken
  }
}

std::vector<AssertOutcome> run_expects(const ReportSpec& spec, const Results& runs, const std::vector<ComputedTable>& tables) {
  std::vector<AssertOutcome> outcomes;
  for (const ExpectSpec& expect : spec.expects) {
    const std::string context = fmt::format("{}:{}", spec.file, expect.line);
    if (!expect.table.empty()) {
      const auto found = std::find_if(tables.begin(), tables.end(),
                                      [&](const ComputedTable& t) { return t.spec->name == expect.table; });
      if (found == tables.end()) throw InputError(fmt::format("{}: [[expect]]: no [[table]] named '{}'", context, expect.table));
      const ComputedTable& table = *found;
      std::vector<std::string> known;
      for (std::size_t c = 0; c < table.col_raw.size(); ++c)
        for (const std::string* name : {&table.col_raw[c], &table.col_display[c]})
          for (const std::string& n : {*name, *name + " (paper)"})
            if (std::find(known.begin(), known.end(), n) == known.end()) known.push_back(n);
      for (const std::string& name : table.row_columns)
        if (std::find(known.begin(), known.end(), name) == known.end()) known.push_back(name);
      const std::string where_text = fmt::format("table '{}' has the columns {}", table.spec->name,
                                                 fmt::join(table.col_display, ", "));
      if (expect.where) check_names(*expect.where, known, where_text);
      for (const Expression& assertion : expect.asserts) check_names(assertion, known, where_text);
      for (const Expression& assertion : expect.asserts) {
        AssertOutcome outcome{assertion.text(), fmt::format("table '{}'", table.spec->name), 0, {}};
        for (std::size_t r = 0; r < table.row_raw.size(); ++r) {
          const RowScope scope = row_scope(table, r);
          std::string why;
          if (!selected(expect.where, scope, why)) continue;
          ++outcome.checked;
          if (why.empty() && holds(assertion, scope, why)) continue;
          std::vector<std::string> key;
          for (std::size_t i = 0; i < table.row_columns.size(); ++i)
            key.push_back(fmt::format("{}={}", table.row_columns[i], table.row_display[r][i]));
          outcome.broken.push_back(fmt::format("{}: expect broken: '{}' on table '{}', row {}: {}", context, assertion.text(),
                                               table.spec->name, fmt::join(key, ", "), why));
        }
        outcomes.push_back(std::move(outcome));
      }
    } else {
      const auto& header = runs.csv().header;
      const std::string where_text = fmt::format("runs.csv has no such column");
      if (expect.where) check_names(*expect.where, header, where_text);
      for (const Expression& assertion : expect.asserts) check_names(assertion, header, where_text);
      const auto label = runs.find("label");
      const auto index = runs.find("run_index");
      for (const Expression& assertion : expect.asserts) {
        AssertOutcome outcome{assertion.text(), "runs", 0, {}};
        for (std::size_t run = 0; run < runs.size(); ++run) {
          const CsvRunScope scope(runs, run);
          std::string why;
          if (!selected(expect.where, scope, why)) continue;
          ++outcome.checked;
          if (why.empty() && holds(assertion, scope, why)) continue;
          outcome.broken.push_back(fmt::format("{}: expect broken: '{}' on run {} ({}): {}", context, assertion.text(),
                                               index ? runs.cell(run, *index) : std::to_string(run),
                                               label ? runs.cell(run, *label) : "", why));
        }
        outcomes.push_back(std::move(outcome));
      }
    }
  }
  return outcomes;
}

// ---------------------------------------------------------------- dead axes

std::vector<std::string> dead_axes(const ReportContext& context, const Results& runs) {
  std::vector<std::string> warnings;
  auto columns_of = [&](const ReportAxis& axis) {
    std::vector<std::size_t> out;
    const std::vector<std::string> names = axis.columns.empty() ? std::vector<std::string>{axis.name} : axis.columns;
    for (const std::string& name : names)
      if (const auto index = runs.find(name)) out.push_back(*index);
    return out;
  };
  std::vector<std::size_t> compared;
  if (const auto status = runs.find("status")) compared.push_back(*status);
  for (const std::string& name : context.metric_columns)
    if (const auto index = runs.find(name)) compared.push_back(*index);
  for (std::size_t a = 0; a < context.axes.size(); ++a) {
    const std::vector<std::size_t> own = columns_of(context.axes[a]);
    if (own.empty()) continue;
    std::vector<std::size_t> others;
    for (std::size_t b = 0; b < context.axes.size(); ++b)
      if (b != a)
        for (const std::size_t c : columns_of(context.axes[b]))
          if (std::find(own.begin(), own.end(), c) == own.end()) others.push_back(c);
    std::map<std::vector<std::string>, std::vector<std::size_t>> groups;
    for (std::size_t run = 0; run < runs.size(); ++run) {
      std::vector<std::string> key;
      for (const std::size_t c : others) key.push_back(runs.cell(run, c));
      groups[key].push_back(run);
    }
    bool varied = false, changes = false;
    for (const auto& [key, group] : groups) {
      auto values = [&](std::size_t run, const std::vector<std::size_t>& cols) {
        std::vector<std::string> out;
        for (const std::size_t c : cols) out.push_back(runs.cell(run, c));
        return out;
      };
      for (const std::size_t run : group) {
        if (values(run, own) == values(group.front(), own)) continue;
        varied = true;
        if (values(run, compared) != values(group.front(), compared)) changes = true;
      }
      if (changes) break;
    }
    if (varied && !changes)
      warnings.push_back(fmt::format("axis '{}' changes no result: runs that differ only in it have the same status and "
                                     "metrics (usually a mistake: a parameter this command ignores, say)",
                                     context.axes[a].name));
  }
  return warnings;
}

// ---------------------------------------------------------------- documents

std::string inline_svg(std::string svg) {
  // An XML declaration is not allowed inside HTML.
  if (svg.rfind("<?xml", 0) == 0) {
    const std::size_t end = svg.find("?>");
    svg.erase(0, end == std::string::npos ? svg.size() : svg.find_first_not_of("\r\n", end + 2));
  }
  // HTML parses <svg> into the SVG namespace by itself; drop the namespace
  // declarations so that the page names no external address at all.
  for (const std::string attribute : {" xmlns=\"http://www.w3.org/2000/svg\"", " xmlns:xlink=\"http://www.w3.org/1999/xlink\""}) {
    for (std::size_t at = svg.find(attribute); at != std::string::npos; at = svg.find(attribute, at)) svg.erase(at, attribute.size());
  }
  return svg;
}

std::string status_summary(const Results& runs) {
  std::vector<std::pair<std::string, std::size_t>> counts;
  for (std::size_t run = 0; run < runs.size(); ++run) {
    const std::string status = runs.status(run).empty() ? "no status" : runs.status(run);
    auto found = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == status; });
    if (found == counts.end()) counts.emplace_back(status, 1);
    else ++found->second;
  }
  std::vector<std::string> parts;
  for (const auto& [status, count] : counts) parts.push_back(fmt::format("{} {}", count, status));
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, ", "));
}

std::string markdown_text(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '|' ) out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

/// An inline code span that may itself hold backquotes.
std::string markdown_code(std::string_view text) {
  std::string body(text);
  std::replace(body.begin(), body.end(), '\n', ' ');
  std::replace(body.begin(), body.end(), '\r', ' ');
  if (body.find('`') == std::string::npos) return "`" + body + "`";
  return "`` " + body + " ``";
}

struct PlotOutput {
  std::string file, title, svg;
  std::vector<std::string> notes;
};

std::string plot_heading(const PlotSpec& plot, std::size_t index0) {
  if (!plot.title.empty()) return plot.title;
  std::string what = plot.kind;
  if (plot.kind == "bars") what += ": table " + plot.table;
  else if (plot.kind == "memory") what += ": peak memory per device";
  else if (plot.kind == "heatmap") what += ": " + plot.value_text + " by " + plot.x + " and " + plot.y;
  else if (!plot.y.empty() && !plot.x.empty()) what += ": " + plot.y + " vs " + plot.x;
  return fmt::format("{}. {}", index0 + 1, what);
}

/// InputError naming the file, the run and both lines when two rows of
/// runs.csv have one run_index or one label: each run of the plan has one
/// row (runs equal but for their labels share a run_key, so keys may repeat).
void check_one_row_per_run(const CsvTable& runs) {
  const auto key = runs.column("run_key");
  for (const char* name : {"run_index", "label"}) {
    const auto column = runs.column(name);
    if (!column) continue;
    std::map<std::string, std::size_t> first_row;
    for (std::size_t r = 0; r < runs.rows.size(); ++r) {
      const auto [found, inserted] = first_row.try_emplace(runs.rows[r][*column], r);
      if (inserted) continue;
      throw InputError(fmt::format("{}:{}: {} {} (run_key {}) has a row already, at line {}: each run of the plan has one "
                                   "row (`pipegrid sweep merge DIR` writes runs.csv again from the journals)",
                                   runs.file, runs.row_lines[r], name, runs.rows[r][*column], key ? runs.rows[r][*key] : "?",
                                   runs.row_lines[found->second]));
    }
  }
}

}  // namespace

ReportResult write_report(const ReportSpec& spec, const ReportContext& context, const std::string& out_dir) {
  namespace fs = std::filesystem;
  const std::string runs_path = (fs::path(out_dir) / "runs.csv").string();
  CsvTable runs_csv = read_csv_file(runs_path);
  check_one_row_per_run(runs_csv);
  const Results runs(std::move(runs_csv), context, spec.file);
  const std::string devices_path = (fs::path(out_dir) / "devices.csv").string();
  std::optional<CsvTable> devices_csv;
  auto read_devices = [&]() -> const CsvTable& {
    if (!devices_csv) devices_csv = read_csv_file(devices_path);
    return *devices_csv;
  };
  std::optional<Results> devices;
  if (std::any_of(spec.plots.begin(), spec.plots.end(), plot_needs_devices)) devices.emplace(read_devices(), context, spec.file);

  ReportResult result;
  result.runs = runs.size();

  // A table reads devices.csv (joined with runs.csv) when it says so, or when
  // it names a column that runs.csv lacks and devices.csv has.
  std::optional<Results> joined;
  auto per_device = [&](const TableSpec& table) {
    if (!table.from.empty()) return table.from == "devices";
    std::vector<std::string> names = table.rows;
    if (!table.cols.empty()) names.push_back(table.cols);
    if (!table.metric.empty()) names.push_back(table.metric);
    if (table.metric_expression) names.insert(names.end(), table.metric_expression->names().begin(), table.metric_expression->names().end());
    if (table.where) names.insert(names.end(), table.where->names().begin(), table.where->names().end());
    names.insert(names.end(), table.annotate.begin(), table.annotate.end());
    for (const std::string& name : names) {
      if (runs.find(name)) continue;
      std::error_code error;
      if (!fs::exists(devices_path, error)) return false;  // runs.csv's message names the missing column
      if (read_devices().column(name)) return true;
    }
    return false;
  };
  std::vector<ComputedTable> tables;
  for (const TableSpec& table : spec.tables) {
    if (per_device(table)) {
      if (!joined) joined.emplace(join_devices(read_devices(), runs.csv()), context, spec.file);
      tables.push_back(compute_table(table, *joined, true));
    } else {
      tables.push_back(compute_table(table, runs));
    }
  }
  const std::vector<AssertOutcome> outcomes = run_expects(spec, runs, tables);
  for (const AssertOutcome& outcome : outcomes) {
    result.checked_expects += outcome.checked;
    result.broken_expects += outcome.broken.size();
    result.failures.insert(result.failures.end(), outcome.broken.begin(), outcome.broken.end());
  }
  for (const ComputedTable& table : tables) result.warnings.insert(result.warnings.end(), table.warnings.begin(), table.warnings.end());
  for (std::string& warning : dead_axes(context, runs)) result.warnings.push_back(std::move(warning));

  std::vector<PlotOutput> plots;
  for (std::size_t i = 0; i < spec.plots.size(); ++i) {
    PlotOutput plot;
    plot.file = plot_file(spec.plots[i], i);
    plot.title = plot_heading(spec.plots[i], i);
    plot.svg = plot_svg(spec.plots[i], i, runs, devices ? &*devices : nullptr, tables, plot.notes);
    plots.push_back(std::move(plot));
  }

  const std::string title = context.title.empty() ? context.name : context.title;
  const auto label = runs.find("label");
  const auto run_index = runs.find("run_index");
  const auto reason = runs.find("reason");
  const std::string fit_note = "Tables take the runs that fit (status ok) only.";

  // ---- report.md
  std::string md = fmt::format("# {}\n\n", markdown_text(title));
  md += fmt::format("Experiment `{}` ({}): {} run{} in runs.csv: {}. {}\n", context.name, spec.file, runs.size(),
                    runs.size() == 1 ? "" : "s", status_summary(runs), fit_note);
  if (!result.warnings.empty()) {
    md += "\n## Warnings\n\n";
    for (const auto& warning : result.warnings) md += "- " + markdown_text(warning) + "\n";
  }
  if (!tables.empty()) {
    md += "\n## Tables\n";
    for (const ComputedTable& table : tables) {
      md += fmt::format("\n### {0}\n\n{1}\n{2}\n\nFiles: [tables/{0}.md](tables/{0}.md), [csv](tables/{0}.csv), [tex](tables/{0}.tex).\n",
                        table.spec->name, table_markdown(table), table.note);
    }
  }
  if (!outcomes.empty()) {
    md += fmt::format("\n## Checks\n\n{} check{} of {} assertion{}: {} broken.\n\n", result.checked_expects,
                      result.checked_expects == 1 ? "" : "s", outcomes.size(), outcomes.size() == 1 ? "" : "s",
                      result.broken_expects);
    for (const AssertOutcome& outcome : outcomes) {
      md += fmt::format("- {} {} on {} ({} checked, {} broken)\n", outcome.broken.empty() ? "PASS" : "FAIL",
                        markdown_code(outcome.text), outcome.subject, outcome.checked, outcome.broken.size());
      for (const auto& message : outcome.broken) md += "  - " + markdown_text(message) + "\n";
    }
  }
  if (!plots.empty()) {
    md += "\n## Plots\n";
    for (const PlotOutput& plot : plots) {
      md += fmt::format("\n### {}\n\n![{}]({})\n", markdown_text(plot.title), markdown_text(plot.title), plot.file);
      for (const auto& note : plot.notes) md += "\nNote: " + markdown_text(note) + "\n";
    }
  }
  md += "\n## Runs\n\n| run | label | status | reason |\n|---:|---|---|---|\n";
  for (std::size_t run = 0; run < runs.size(); ++run)
    md += fmt::format("| {} | {} | {} | {} |\n", run_index ? runs.cell(run, *run_index) : std::to_string(run),
                      markdown_text(label ? runs.cell(run, *label) : ""), markdown_text(runs.status(run)),
                      markdown_text(reason ? runs.cell(run, *reason) : ""));

  // ---- report.html
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + escape_xml(title) +
      "</title>\n<style>\n"
      "body{font-family:sans-serif;max-width:1400px;margin:1em auto;padding:0 1em;color:#222}\n"
      "table{border-collapse:collapse;margin:.5em 0}\n"
      "th,td{border:1px solid #ccc;padding:.25em .6em;vertical-align:top}\n"
      "th{background:#f3f3f3}\n"
      "td.num,th.num{text-align:right}\n"
      "td.missing{color:#999}\n"
      "small{color:#666}\n"
      ".note{color:#555;font-size:.9em}\n"
      ".warning{color:#a60}\n"
      ".fail{color:#b00;font-weight:bold}\n"
      ".pass{color:#070}\n"
      ".plot{margin:1em 0;overflow-x:auto}\n"
      "</style>\n</head>\n<body>\n";
  html += "<h1>" + escape_xml(title) + "</h1>\n";
  html += fmt::format("<p>Experiment <code>{}</code> ({}): {} run{} in runs.csv: {}. {}</p>\n", escape_xml(context.name),
                      escape_xml(spec.file), runs.size(), runs.size() == 1 ? "" : "s", escape_xml(status_summary(runs)),
                      escape_xml(fit_note));
  if (!result.warnings.empty()) {
    html += "<h2>Warnings</h2>\n<ul>\n";
    for (const auto& warning : result.warnings) html += "<li class=\"warning\">" + escape_xml(warning) + "</li>\n";
    html += "</ul>\n";
  }
  if (!tables.empty()) {
    html += "<h2>Tables</h2>\n";
    for (const ComputedTable& table : tables)
      html += "<h3>" + escape_xml(table.spec->name) + "</h3>\n" + table_html(table) + "<p class=\"note\">" +
              escape_xml(table.note) + "</p>\n";
  }
  if (!outcomes.empty()) {
    html += fmt::format("<h2>Checks</h2>\n<p>{} checks of {} assertions: {} broken.</p>\n<ul>\n", result.checked_expects,
                        outcomes.size(), result.broken_expects);
    for (const AssertOutcome& outcome : outcomes) {
      html += fmt::format("<li><span class=\"{}\">{}</span> <code>{}</code> on {} ({} checked, {} broken)",
                          outcome.broken.empty() ? "pass" : "fail", outcome.broken.empty() ? "PASS" : "FAIL",
                          escape_xml(outcome.text), escape_xml(outcome.subject), outcome.checked, outcome.broken.size());
      if (!outcome.broken.empty()) {
        html += "<ul>\n";
        for (const auto& message : outcome.broken) html += "<li>" + escape_xml(message) + "</li>\n";
        html += "</ul>";
      }
      html += "</li>\n";
    }
    html += "</ul>\n";
  }
  if (!plots.empty()) {
    html += "<h2>Plots</h2>\n";
    for (const PlotOutput& plot : plots) {
      html += "<h3>" + escape_xml(plot.title) + "</h3>\n<div class=\"plot\">\n" + inline_svg(plot.svg) + "\n</div>\n";
      for (const auto& note : plot.notes) html += "<p class=\"note\">Note: " + escape_xml(note) + "</p>\n";
    }
  }
  html += "<h2>Runs</h2>\n<table>\n<thead><tr><th class=\"num\">run</th><th>label</th><th>status</th><th>reason</th></tr></thead>\n<tbody>\n";
  for (std::size_t run = 0; run < runs.size(); ++run)
    html += fmt::format("<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                        escape_xml(run_index ? runs.cell(run, *run_index) : std::to_string(run)),
                        escape_xml(label ? runs.cell(run, *label) : ""), escape_xml(runs.status(run)),
                        escape_xml(reason ? runs.cell(run, *reason) : ""));
  html += "</tbody>\n</table>\n</body>\n</html>\n";

  // ---- files, all or none
  std::vector<std::pair<std::string, std::string>> files;
  files.emplace_back("report.md", md);
  files.emplace_back("report.html", html);
  for (const ComputedTable& table : tables) {
    files.emplace_back("tables/" + table.spec->name + ".md",
                       fmt::format("{}\n{}\n", table_markdown(table), table.note));
    files.emplace_back("tables/" + table.spec->name + ".csv", table_csv(table));
    files.emplace_back("tables/" + table.spec->name + ".tex", table_latex(table, context.name));
  }
  for (const PlotOutput& plot : plots) files.emplace_back(plot.file, plot.svg);
  std::error_code error;
  for (const char* folder : {"tables", "plots"}) {
    const bool needed = std::any_of(files.begin(), files.end(), [&](const auto& f) { return f.first.rfind(std::string(folder) + "/", 0) == 0; });
    if (!needed) continue;
    fs::create_directories(fs::path(out_dir) / folder, error);
    if (error) throw InputError(fmt::format("{}: cannot create the folder: {}", (fs::path(out_dir) / folder).string(), error.message()));
  }
  OutputFileSet outputs;
  for (const auto& [name, content] : files) outputs.add((fs::path(out_dir) / name).string(), content);
  outputs.commit();
  for (const auto& [name, content] : files) result.files.push_back(name);
  std::sort(result.files.begin(), result.files.end());
  return result;
}

}  // namespace pipegrid
