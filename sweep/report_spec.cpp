// parse_report_spec: the [[table]], [[expect]] and [report] sections.

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "core/error.hpp"
#include "sweep/csv.hpp"
#include "sweep/report.hpp"
#include "sweep/report_internal.hpp"
#include "core/suggest.hpp"

namespace pipegrid {

namespace {

std::string type_of(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return fmt::format("the string \"{}\"", *node.value<std::string>());
    case toml::node_type::integer: return fmt::format("the integer {}", *node.value<std::int64_t>());
    case toml::node_type::floating_point: return fmt::format("the number {}", format_number(*node.value<double>()));
    case toml::node_type::boolean: return *node.value<bool>() ? "true" : "false";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date or time";
  }
}

std::size_t line_of(const toml::node& node) { return node.source().begin.line; }

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(std::size_t line, std::string_view what) const {
    if (line == 0) throw InputError(fmt::format("{}: {}", file_, what));
    throw InputError(fmt::format("{}:{}: {}", file_, line, what));
  }

  /// Every key of `table` must be in `known`.
  void check_keys(const toml::table& table, const std::vector<std::string>& known, std::string_view where) const {
    for (auto&& [key, node] : table) {
      const std::string name(key.str());
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        const std::size_t line = key.source().begin.line ? key.source().begin.line : line_of(node);
        fail(line, fmt::format("unknown key '{}' in {}{}", name, where, did_you_mean(name, known)));
      }
    }
  }

  std::string string(const toml::node& node, std::string_view key, std::string_view where) const {
    if (const auto value = node.value_exact<std::string>()) return *value;
    fail(line_of(node), fmt::format("{}: '{}' must be a string, found {}", where, key, type_of(node)));
  }

  std::vector<std::string> strings(const toml::node& node, std::string_view key, std::string_view where,
                                   bool allow_single) const {
    if (allow_single && node.is_string()) return {*node.value<std::string>()};
    const toml::array* array = node.as_array();
    if (!array)
      fail(line_of(node), fmt::format("{}: '{}' must be an array of strings, found {}", where, key, type_of(node)));
    std::vector<std::string> out;
    for (const toml::node& element : *array) {
      if (!element.is_string())
        fail(line_of(element) ? line_of(element) : line_of(node),
             fmt::format("{}: '{}' must be an array of strings, found {} in it", where, key, type_of(element)));
      out.push_back(*element.value<std::string>());
    }
    return out;
  }

  /// A TOML scalar as runs.csv writes it (numbers in format_number's form).
  std::string cell_text(const toml::node& node, std::string_view key, std::string_view where) const {
    if (const auto s = node.value_exact<std::string>()) return *s;
    if (const auto i = node.value_exact<std::int64_t>()) return fmt::format("{}", *i);
    if (const auto d = node.value_exact<double>()) return format_number(*d);
    if (const auto b = node.value_exact<bool>()) return *b ? "true" : "false";
    fail(line_of(node), fmt::format("{}: '{}' must be a string, number or boolean, found {}", where, key, type_of(node)));
  }

  double number(const toml::node& node, std::string_view key, std::string_view where) const {
    if (const auto i = node.value_exact<std::int64_t>()) return static_cast<double>(*i);
    if (const auto d = node.value_exact<double>()) {
      if (!std::isfinite(*d)) fail(line_of(node), fmt::format("{}: '{}' must be a finite number", where, key));
      return *d;
    }
    fail(line_of(node), fmt::format("{}: '{}' must be a number, found {}", where, key, type_of(node)));
  }

  Expression expression(const toml::node& node, std::string_view key, std::string_view where) const {
    const std::string text = string(node, key, where);
    return Expression::parse(text, fmt::format("{}:{}", file_, line_of(node)));
  }

  /// "agg(column)" or "agg(EXPR)": the aggregate, and the column or the
  /// expression (evaluated per run). The aggregate's parentheses must enclose
  /// the whole rest of the text.
  struct Measure {
    std::string aggregate, column;
    std::optional<Expression> expression;
  };
  Measure aggregate(const toml::node& node, std::string_view where) const {
    const std::string text = string(node, "value", where);
    auto trim = [](const std::string& s) {
      const auto first = s.find_first_not_of(" \t\r\n");
      const auto last = s.find_last_not_of(" \t\r\n");
      return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
    };
    const std::string usage = fmt::format("'value' must read 'agg(column)' or 'agg(expression)' with agg one of {}",
                                          report_detail::aggregate_list());
    const std::size_t open = text.find('(');
    if (open == std::string::npos) fail(line_of(node), fmt::format("{}: {}, found \"{}\"", where, usage, text));
    // The parenthesis that closes `open`, skipping quoted strings and names.
    std::size_t depth = 0, close = std::string::npos;
    char quote = 0;
    for (std::size_t i = open; i < text.size() && close == std::string::npos; ++i) {
      const char c = text[i];
      if (quote) {
        if (c == quote) quote = 0;
      } else if (c == '\'' || c == '`') {
        quote = c;
      } else if (c == '(') {
        ++depth;
      } else if (c == ')' && --depth == 0) {
        close = i;
      }
    }
    const std::string agg = trim(text.substr(0, open));
    if (close == std::string::npos) fail(line_of(node), fmt::format("{}: {}, found \"{}\" (unbalanced parentheses)", where, usage, text));
    if (!trim(text.substr(close + 1)).empty())
      fail(line_of(node), fmt::format("{}: {}, found \"{}\": the aggregate must enclose the whole value (write {}(... {}))",
                                      where, usage, text, agg.empty() ? "agg" : agg, trim(text.substr(close + 1))));
    const auto& known = report_detail::aggregates();
    if (std::find(known.begin(), known.end(), agg) == known.end())
      fail(line_of(node), fmt::format("{}: unknown aggregate '{}' in \"{}\" (expected one of {}){}", where, agg, text,
                                      report_detail::aggregate_list(), did_you_mean(agg, known)));
    Measure measure;
    measure.aggregate = agg;
    const std::string inner = trim(text.substr(open + 1, close - open - 1));
    if (inner.empty()) fail(line_of(node), fmt::format("{}: {}(): a column or an expression is missing, in \"{}\"", where, agg, text));
    const bool identifier = (std::isalpha(static_cast<unsigned char>(inner[0])) || inner[0] == '_') &&
                            std::all_of(inner.begin(), inner.end(), [](char c) {
                              return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                            });
    const bool quoted = inner.size() >= 2 && inner.front() == '`' && inner.back() == '`' &&
                        inner.find('`', 1) == inner.size() - 1;
    if (identifier && inner != "true" && inner != "false") measure.column = inner;
    else if (quoted) measure.column = inner.substr(1, inner.size() - 2);
    else measure.expression = Expression::parse(inner, fmt::format("{}:{}", file_, line_of(node)));
    return measure;
  }

  std::string format(const toml::node& node, std::string_view where) const {
    const std::string text = string(node, "format", where);
    try {
      (void)fmt::format(fmt::runtime(text), 1.5);
    } catch (const fmt::format_error& error) {
      fail(line_of(node), fmt::format("{}: 'format' \"{}\" is no format of one number ({}); e.g. \"{{:.2f}}x\"", where,
                                      text, error.what()));
    }
    return text;
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

/// The array of tables at `root[key]`, or none.
std::vector<const toml::table*> tables_of(const Reader& reader, const toml::table& root, std::string_view key) {
  std::vector<const toml::table*> out;
  const toml::node* node = root.get(key);
  if (!node) return out;
  const toml::array* array = node->as_array();
  if (!array)
    reader.fail(line_of(*node), fmt::format("'{}' must be an array of tables ([[{}]]), found {}", key, key, type_of(*node)));
  for (const toml::node& element : *array) {
    const toml::table* table = element.as_table();
    if (!table)
      reader.fail(line_of(element) ? line_of(element) : line_of(*node),
                  fmt::format("'{}' must be an array of tables ([[{}]]), found {} in it", key, key, type_of(element)));
    out.push_back(table);
  }
  return out;
}

TableSpec parse_table(const Reader& reader, const toml::table& table) {
  TableSpec spec;
  spec.line = line_of(table);
  static const std::vector<std::string> keys = {"name",   "rows",     "cols",  "value", "relative_to",
                                                "format", "annotate", "paper", "where", "from"};
  const toml::node* name = table.get("name");
  if (!name) reader.fail(spec.line, "[[table]] needs a 'name' (its file name under tables/)");
  spec.name = reader.string(*name, "name", "[[table]]");
  const std::string where = fmt::format("[[table]] '{}'", spec.name);
  if (spec.name.empty() || spec.name.find_first_of("/\\") != std::string::npos || spec.name == "." ||
      spec.name == ".." || spec.name.find('\0') != std::string::npos)
    reader.fail(line_of(*name), fmt::format("{}: 'name' must be a file name without '/' (tables/<name>.md)", where));
  reader.check_keys(table, keys, where);

  if (const toml::node* rows = table.get("rows")) spec.rows = reader.strings(*rows, "rows", where, true);
  else reader.fail(spec.line, fmt::format("{} needs 'rows' (the columns whose values make its rows)", where));
  if (spec.rows.empty()) reader.fail(line_of(*table.get("rows")), fmt::format("{}: 'rows' is empty", where));
  if (const toml::node* cols = table.get("cols")) {
    spec.cols = reader.string(*cols, "cols", where);
    if (std::find(spec.rows.begin(), spec.rows.end(), spec.cols) != spec.rows.end())
      reader.fail(line_of(*cols), fmt::format("{}: '{}' is both in 'rows' and 'cols'", where, spec.cols));
  }
  const toml::node* value = table.get("value");
  if (!value) reader.fail(spec.line, fmt::format("{} needs 'value' (e.g. \"max(throughput_samples_per_s)\")", where));
  {
    auto measure = reader.aggregate(*value, where);
    spec.aggregate = std::move(measure.aggregate);
    spec.metric = std::move(measure.column);
    spec.metric_expression = std::move(measure.expression);
  }
  spec.value_text = *value->value<std::string>();
  if (const toml::node* condition = table.get("where")) spec.where = reader.expression(*condition, "where", where);
  if (const toml::node* from = table.get("from")) {
    spec.from = reader.string(*from, "from", where);
    if (spec.from != "runs" && spec.from != "devices")
      reader.fail(line_of(*from), fmt::format("{}: 'from' must be \"runs\" (runs.csv) or \"devices\" (devices.csv), found \"{}\"",
                                              where, spec.from));
  }

  if (const toml::node* relative = table.get("relative_to")) {
    const toml::table* inline_table = relative->as_table();
    if (!inline_table || inline_table->size() != 1)
      reader.fail(line_of(*relative), fmt::format("{}: 'relative_to' must be a table of one key, {{ {} = \"value\" }}, found {}",
                                                  where, spec.cols.empty() ? "column" : spec.cols, type_of(*relative)));
    for (auto&& [key, node] : *inline_table) {
      if (spec.cols.empty())
        reader.fail(line_of(*relative), fmt::format("{}: 'relative_to' needs 'cols' (it divides by the cell of one column)", where));
      if (key.str() != spec.cols)
        reader.fail(line_of(*relative), fmt::format("{}: 'relative_to' must name the 'cols' column '{}', found '{}'", where,
                                                    spec.cols, key.str()));
      spec.relative_to = reader.cell_text(node, "relative_to", where);
    }
  }
  if (const toml::node* format = table.get("format")) spec.format = reader.format(*format, where);
  if (const toml::node* annotate = table.get("annotate")) {
    spec.annotate = reader.strings(*annotate, "annotate", where, true);
    if (spec.aggregate != "max" && spec.aggregate != "min" && spec.aggregate != "first")
      reader.fail(line_of(*annotate), fmt::format("{}: 'annotate' shows the chosen run of each cell, which needs "
                                                  "max, min or first, not {}", where, spec.aggregate));
  }
  if (const toml::node* paper = table.get("paper")) {
    const toml::array* array = paper->as_array();
    if (!array)
      reader.fail(line_of(*paper), fmt::format("{}: 'paper' must be an array of inline tables, found {}", where, type_of(*paper)));
    std::vector<std::string> key_columns = spec.rows;
    if (!spec.cols.empty()) key_columns.push_back(spec.cols);
    std::vector<std::string> allowed = key_columns;
    allowed.push_back("value");
    for (const toml::node& element : *array) {
      const toml::table* entry = element.as_table();
      const std::size_t line = line_of(element) ? line_of(element) : line_of(*paper);
      if (!entry)
        reader.fail(line, fmt::format("{}: 'paper' must be an array of inline tables, found {} in it", where, type_of(element)));
      const std::string entry_where = fmt::format("{}: a 'paper' entry", where);
      reader.check_keys(*entry, allowed, entry_where);
      PaperValue paper_value;
      paper_value.line = line;
      for (const std::string& column : key_columns) {
        const toml::node* key_node = entry->get(column);
        if (!key_node) reader.fail(line, fmt::format("{} needs '{}' (the {} of its cell)", entry_where, column,
                                                     column == spec.cols ? "column" : "row"));
        paper_value.keys.emplace_back(column, reader.cell_text(*key_node, column, entry_where));
      }
      const toml::node* number = entry->get("value");
      if (!number) reader.fail(line, fmt::format("{} needs 'value' (the published number)", entry_where));
      paper_value.value = reader.number(*number, "value", entry_where);
      for (const PaperValue& other : spec.paper)
        if (other.keys == paper_value.keys)
          reader.fail(line, fmt::format("{}: two 'paper' entries for one cell (the other on line {})", where, other.line));
      spec.paper.push_back(std::move(paper_value));
    }
  }
  return spec;
}

ExpectSpec parse_expect(const Reader& reader, const toml::table& table, const std::vector<TableSpec>& tables) {
  ExpectSpec spec;
  spec.line = line_of(table);
  static const std::vector<std::string> keys = {"table", "where", "assert"};
  const std::string where = "[[expect]]";
  reader.check_keys(table, keys, where);
  if (const toml::node* name = table.get("table")) {
    spec.table = reader.string(*name, "table", where);
    std::vector<std::string> names;
    for (const TableSpec& t : tables) names.push_back(t.name);
    if (std::find(names.begin(), names.end(), spec.table) == names.end())
      reader.fail(line_of(*name), fmt::format("{}: no [[table]] named '{}'{}", where, spec.table, did_you_mean(spec.table, names)));
  }
  if (const toml::node* condition = table.get("where")) spec.where = reader.expression(*condition, "where", where);
  const toml::node* asserts = table.get("assert");
  if (!asserts) reader.fail(spec.line, "[[expect]] needs 'assert' (a list of expressions that must hold)");
  if (asserts->is_string()) {
    spec.asserts.push_back(reader.expression(*asserts, "assert", where));
  } else {
    const toml::array* array = asserts->as_array();
    if (!array)
      reader.fail(line_of(*asserts), fmt::format("{}: 'assert' must be an array of strings, found {}", where, type_of(*asserts)));
    for (const toml::node& element : *array) {
      if (!element.is_string())
        reader.fail(line_of(element) ? line_of(element) : line_of(*asserts),
                    fmt::format("{}: 'assert' must be an array of strings, found {} in it", where, type_of(element)));
      spec.asserts.push_back(Expression::parse(*element.value<std::string>(),
                                               fmt::format("{}:{}", reader.file(), line_of(element) ? line_of(element) : line_of(*asserts))));
    }
  }
  if (spec.asserts.empty()) reader.fail(line_of(*asserts), fmt::format("{}: 'assert' is empty", where));
  return spec;
}

PlotSpec parse_plot(const Reader& reader, const toml::table& table, std::size_t index, const std::vector<TableSpec>& tables) {
  PlotSpec spec;
  spec.line = line_of(table);
  const std::string where_any = fmt::format("plot {}", index);
  static const std::vector<std::string> all_keys = {"kind",    "name",    "title",  "x",     "y",     "series",
                                                    "facet_cols", "x_scale", "y_scale", "agg", "where", "table",
                                                    "value",   "format", "x_label", "y_label", "y_min", "y_max"};
  reader.check_keys(table, all_keys, where_any);
  const toml::node* kind = table.get("kind");
  if (!kind) reader.fail(spec.line, fmt::format("{} needs 'kind' (one of {})", where_any, report_detail::plot_kind_list()));
  spec.kind = reader.string(*kind, "kind", where_any);
  const auto& kinds = report_detail::plot_kinds();
  if (std::find(kinds.begin(), kinds.end(), spec.kind) == kinds.end())
    reader.fail(line_of(*kind), fmt::format("{}: unknown kind '{}' (expected one of {}){}", where_any, spec.kind,
                                            report_detail::plot_kind_list(), did_you_mean(spec.kind, kinds)));
  const std::string where = fmt::format("plot {} ({})", index, spec.kind);

  // Keys each kind takes; the rest are errors rather than silently ignored.
  std::vector<std::string> allowed = {"kind", "name", "title", "x_label", "y_label"};
  std::vector<std::string> required;
  if (spec.kind == "line") {
    allowed.insert(allowed.end(), {"x", "y", "series", "facet_cols", "x_scale", "y_scale", "agg", "where"});
    required = {"x", "y"};
  } else if (spec.kind == "bars") {
    allowed.insert(allowed.end(), {"table"});
    required = {"table"};
  } else if (spec.kind == "memory") {
    allowed.insert(allowed.end(), {"where"});
  } else if (spec.kind == "bubble") {
    allowed.insert(allowed.end(), {"x", "series", "x_scale", "agg", "where"});
  } else if (spec.kind == "heatmap") {  // no numeric y axis: no y range
    allowed.insert(allowed.end(), {"x", "y", "value", "format", "where"});
    required = {"x", "y", "value"};
  } else if (spec.kind == "pareto") {
    allowed.insert(allowed.end(), {"series", "where"});
  } else {  // scaling
    allowed.insert(allowed.end(), {"x", "y", "series", "x_scale", "y_scale", "agg", "where"});
  }
  if (spec.kind != "heatmap") allowed.insert(allowed.end(), {"y_min", "y_max"});
  for (auto&& [key, node] : table) {
    const std::string name(key.str());
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
      reader.fail(key.source().begin.line ? key.source().begin.line : spec.line,
                  fmt::format("{}: key '{}' does not apply to a {} plot (it takes {})", where, name, spec.kind,
                              fmt::join(allowed, ", ")));
  }
  for (const std::string& key : required)
    if (!table.get(key)) reader.fail(spec.line, fmt::format("{} needs '{}'", where, key));

  auto text = [&](const char* key, std::string& out) {
    if (const toml::node* node = table.get(key)) out = reader.string(*node, key, where);
  };
  text("name", spec.name);
  text("title", spec.title);
  text("x", spec.x);
  text("y", spec.y);
  text("series", spec.series);
  text("facet_cols", spec.facet_cols);
  text("x_scale", spec.x_scale);
  text("y_scale", spec.y_scale);
  text("agg", spec.agg);
  text("table", spec.table);
  for (const char* key : {"x_label", "y_label"})
    if (const toml::node* node = table.get(key))
      (std::string(key) == "x_label" ? spec.x_label : spec.y_label) = reader.string(*node, key, where);
  if (const toml::node* node = table.get("y_min")) spec.y_min = reader.number(*node, "y_min", where);
  if (const toml::node* node = table.get("y_max")) spec.y_max = reader.number(*node, "y_max", where);
  if (spec.y_min && spec.y_max && !(*spec.y_min < *spec.y_max))
    reader.fail(line_of(*table.get("y_max")), fmt::format("{}: 'y_min' ({}) must be below 'y_max' ({})", where,
                                                          format_number(*spec.y_min), format_number(*spec.y_max)));
  if (!spec.name.empty() && (spec.name.find_first_of("/\\") != std::string::npos || spec.name == "." || spec.name == ".."))
    reader.fail(line_of(*table.get("name")), fmt::format("{}: 'name' must be a file name without '/'", where));
  for (const char* key : {"x_scale", "y_scale"}) {
    const std::string& scale = std::string(key) == "x_scale" ? spec.x_scale : spec.y_scale;
    if (!scale.empty() && scale != "linear" && scale != "log2")
      reader.fail(line_of(*table.get(key)), fmt::format("{}: '{}' must be \"linear\" or \"log2\", found \"{}\"", where, key, scale));
  }
  const auto& aggregates = report_detail::aggregates();
  if (std::find(aggregates.begin(), aggregates.end(), spec.agg) == aggregates.end())
    reader.fail(line_of(*table.get("agg")), fmt::format("{}: unknown 'agg' \"{}\" (expected one of {}){}", where, spec.agg,
                                                        report_detail::aggregate_list(), did_you_mean(spec.agg, aggregates)));
  if (const toml::node* value = table.get("value")) {
    auto measure = reader.aggregate(*value, where);
    spec.aggregate = std::move(measure.aggregate);
    spec.metric = std::move(measure.column);
    spec.metric_expression = std::move(measure.expression);
    spec.value_text = *value->value<std::string>();
  }
  if (const toml::node* format = table.get("format")) spec.format = reader.format(*format, where);
  if (const toml::node* condition = table.get("where")) spec.where = reader.expression(*condition, "where", where);
  if (!spec.table.empty()) {
    std::vector<std::string> names;
    for (const TableSpec& t : tables) names.push_back(t.name);
    if (std::find(names.begin(), names.end(), spec.table) == names.end())
      reader.fail(line_of(*table.get("table")),
                  fmt::format("{}: no [[table]] named '{}'{}", where, spec.table, did_you_mean(spec.table, names)));
  }
  // Kind defaults.
  if (spec.kind == "bubble") {
    if (spec.x.empty()) spec.x = "micro_batches";
    spec.y = "bubble_fraction";
    if (spec.series.empty()) spec.series = "schedule";
    if (spec.x_scale.empty()) spec.x_scale = "log2";
  } else if (spec.kind == "scaling") {
    if (spec.x.empty()) spec.x = "devices";
    if (spec.y.empty()) spec.y = "throughput_samples_per_s";
    if (spec.x_scale.empty()) spec.x_scale = "log2";
  } else if (spec.kind == "pareto") {
    spec.x = "peak_memory_bytes";
    spec.y = "throughput_samples_per_s";
  }
  if (spec.x_scale.empty()) spec.x_scale = "linear";
  if (spec.y_scale.empty()) spec.y_scale = "linear";
  if (spec.y_scale == "log2")
    for (const char* key : {"y_min", "y_max"}) {
      const std::optional<double>& end = std::string(key) == "y_min" ? spec.y_min : spec.y_max;
      if (end && *end <= 0)
        reader.fail(line_of(*table.get(key)), fmt::format("{}: '{}' must be positive on a log2 y axis, found {}", where,
                                                          key, format_number(*end)));
    }
  return spec;
}

}  // namespace

ReportSpec parse_report_spec(const toml::table& root, const std::string& file) {
  const Reader reader(file);
  ReportSpec spec;
  spec.file = file;
  for (const toml::table* table : tables_of(reader, root, "table")) {
    TableSpec parsed = parse_table(reader, *table);
    for (const TableSpec& other : spec.tables)
      if (other.name == parsed.name)
        reader.fail(parsed.line, fmt::format("two [[table]]s named '{}' (the other on line {})", parsed.name, other.line));
    spec.tables.push_back(std::move(parsed));
  }
  for (const toml::table* table : tables_of(reader, root, "expect"))
    spec.expects.push_back(parse_expect(reader, *table, spec.tables));
  if (const toml::node* report = root.get("report")) {
    const toml::table* table = report->as_table();
    if (!table) reader.fail(line_of(*report), fmt::format("'report' must be a table ([report]), found {}", type_of(*report)));
    reader.check_keys(*table, {"plots"}, "[report]");
    if (const toml::node* plots = table->get("plots")) {
      const toml::array* array = plots->as_array();
      if (!array)
        reader.fail(line_of(*plots), fmt::format("[report]: 'plots' must be an array of inline tables, found {}", type_of(*plots)));
      std::set<std::string> files;
      for (const toml::node& element : *array) {
        const toml::table* plot = element.as_table();
        if (!plot)
          reader.fail(line_of(element) ? line_of(element) : line_of(*plots),
                      fmt::format("[report]: 'plots' must be an array of inline tables, found {} in it", type_of(element)));
        PlotSpec parsed = parse_plot(reader, *plot, spec.plots.size() + 1, spec.tables);
        if (parsed.line == 0) parsed.line = line_of(*plots);
        const std::string name = report_detail::plot_file(parsed, spec.plots.size());
        if (!files.insert(name).second)
          reader.fail(parsed.line, fmt::format("two plots write {} (give them different names)", name));
        spec.plots.push_back(std::move(parsed));
      }
    }
  }
  return spec;
}

}  // namespace pipegrid
