// sweep/report.hpp: the report sections of experiment files and the report
// written from a hand-written runs.csv (tests/data/sweep-report-basic).
// Goldens: tests/data/sweep-report-basic/expected/ (report.md and tables/);
// regenerate with PIPEGRID_REGENERATE_GOLDEN=1 and review the diff.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/io.hpp"
#include "expect_input_error.hpp"
#include "sweep/report.hpp"
#include "sweep/report_internal.hpp"

namespace pipegrid {
namespace {

namespace fs = std::filesystem;
using testutil::input_error_of;

const fs::path fixture = fs::path(PIPEGRID_SOURCE_DIR) / "tests/data/sweep-report-basic";

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// A fresh output folder holding the fixture's runs.csv and devices.csv.
class TempOut {
 public:
  explicit TempOut(const std::string& name)
      : path_(fs::temp_directory_path() / ("pipegrid-test-report-" + std::to_string(::getpid()) + "-" + name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
    fs::copy_file(fixture / "runs.csv", path_ / "runs.csv");
    fs::copy_file(fixture / "devices.csv", path_ / "devices.csv");
  }
  ~TempOut() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

ReportContext fixture_context() {
  ReportContext context;
  context.name = "report-fixture";
  context.title = "GPipe vs BaPipe on 2 and 4 V100 (fixture)";
  context.axes = {{"platform", {}}, {"system", {"system", "schedule", "partitioner"}}, {"micro_batches", {}}, {"tag", {}}};
  return context;
}

ReportSpec spec_of(const std::string& text, const std::string& file = "exp.toml") {
  return parse_report_spec(toml::parse(text, file), file);
}

ReportSpec fixture_spec() {
  return parse_report_spec(toml::parse_file((fixture / "experiment.toml").string()), "experiment.toml");
}

TEST(SweepReport, GoldenTablesAndReport) {
  TempOut out("golden");
  const ReportResult result = write_report(fixture_spec(), fixture_context(), out.str());
  const std::vector<std::string> goldens = {"report.md",           "tables/speedup.md",    "tables/speedup.csv",
                                            "tables/speedup.tex",  "tables/throughput.md", "tables/throughput.csv",
                                            "tables/throughput.tex", "tables/fits.md",     "tables/fits.csv",
                                            "tables/fits.tex"};
  const bool regenerate = std::getenv("PIPEGRID_REGENERATE_GOLDEN") != nullptr;
  for (const std::string& name : goldens) {
    const fs::path expected = fixture / "expected" / name;
    const std::string produced = slurp(out.path() / name);
    if (regenerate) {
      fs::create_directories(expected.parent_path());
      std::ofstream(expected, std::ios::binary) << produced;
    }
    EXPECT_EQ(produced, slurp(expected)) << name;
  }
  const std::vector<std::string> files = {"plots/1-line.svg",   "plots/2-bars.svg",    "plots/4-bubble.svg",
                                          "plots/5-heatmap.svg", "plots/6-pareto.svg", "plots/7-scaling.svg",
                                          "plots/m16-memory.svg", "report.html",       "report.md",
                                          "tables/fits.csv",    "tables/fits.md",      "tables/fits.tex",
                                          "tables/speedup.csv", "tables/speedup.md",   "tables/speedup.tex",
                                          "tables/throughput.csv", "tables/throughput.md", "tables/throughput.tex"};
  EXPECT_EQ(result.files, files);
  for (const auto& file : files) EXPECT_TRUE(fs::exists(out.path() / file)) << file;
  EXPECT_EQ(result.runs, 24u);
}

TEST(SweepReport, ExpectsThatHold) {
  TempOut out("pass");
  const ReportResult result = write_report(fixture_spec(), fixture_context(), out.str());
  EXPECT_EQ(result.broken_expects, 0u) << (result.failures.empty() ? "" : result.failures.front());
  // 2 rows x 2 assertions, 1 row with a paper value, 2 x 4 GPipe runs that fit.
  EXPECT_EQ(result.checked_expects, 2u * 2 + 1 + 2 * 4);
  const std::string md = slurp(out.path() / "report.md");
  EXPECT_CONTAINS(md, "- PASS `BaPipe >= GPipe` on table 'speedup' (2 checked, 0 broken)");
}

TEST(SweepReport, ABrokenExpectNamesRowExpressionAndValues) {
  TempOut out("fail");
  const ReportSpec spec = spec_of(R"toml(
[[table]]
name = "speedup"
rows = ["platform"]
cols = "system"
value = "max(throughput_samples_per_s)"

[[expect]]
table = "speedup"
assert = ["GPipe > BaPipe"]

[[expect]]
where = "status != 'error'"
assert = ["peak_memory_bytes <= memory_capacity_bytes"]
)toml");
  const ReportResult result = write_report(spec, fixture_context(), out.str());
  EXPECT_EQ(result.broken_expects, 2u + 6u);  // 2 rows, 6 runs out of memory
  ASSERT_FALSE(result.failures.empty());
  EXPECT_EQ(result.failures[0],
            "exp.toml:8: expect broken: 'GPipe > BaPipe' on table 'speedup', row platform=bapipe-2xv100: GPipe = 80, BaPipe = 100");
  EXPECT_EQ(result.failures[2],
            "exp.toml:12: expect broken: 'peak_memory_bytes <= memory_capacity_bytes' on run 2 "
            "(bapipe-2xv100|GPipe|gpipe|M=16|x): peak_memory_bytes = 28000000000, memory_capacity_bytes = 16000000000");
  const std::string md = slurp(out.path() / "report.md");
  EXPECT_CONTAINS(md, "- FAIL `GPipe > BaPipe` on table 'speedup' (2 checked, 2 broken)");
  EXPECT_CONTAINS(slurp(out.path() / "report.html"), "<span class=\"fail\">FAIL</span>");
}

TEST(SweepReport, AnAssertionThatCannotBeEvaluatedIsBroken) {
  TempOut out("absent");
  const ReportSpec spec = spec_of(R"toml(
[[expect]]
assert = ["throughput_samples_per_s > 0"]
)toml");
  const ReportResult result = write_report(spec, fixture_context(), out.str());
  EXPECT_EQ(result.broken_expects, 2u);  // the two runs that ended in error have no metrics
  EXPECT_CONTAINS(result.failures.at(0), "on run 12 (bapipe-4xv100|GPipe|gpipe|M=4|x): cannot be evaluated: "
                                         "exp.toml:3: expression 'throughput_samples_per_s > 0': "
                                         "'throughput_samples_per_s' is absent here");
}

TEST(SweepReport, UnknownNamesInExpectsAreInputErrors) {
  TempOut out("names");
  const ReportSpec table_spec = spec_of(R"toml(
[[table]]
name = "t"
rows = "platform"
cols = "system"
value = "max(throughput_samples_per_s)"
[[expect]]
table = "t"
assert = ["BaPip > 1"]
)toml");
  EXPECT_EQ(input_error_of([&] { write_report(table_spec, fixture_context(), out.str()); }),
            "exp.toml:9: expression 'BaPip > 1': unknown name 'BaPip' (table 't' has the columns GPipe, BaPipe) "
            "(did you mean 'BaPipe'?)");
  const ReportSpec run_spec = spec_of("[[expect]]\nassert = ['bubble_fractoin < 1']\n");
  EXPECT_CONTAINS(input_error_of([&] { write_report(run_spec, fixture_context(), out.str()); }),
                  "exp.toml:2: expression 'bubble_fractoin < 1': unknown name 'bubble_fractoin' (runs.csv has no such "
                  "column) (did you mean 'bubble_fraction'?)");
  EXPECT_FALSE(fs::exists(out.path() / "report.md"));
}

TEST(SweepReport, DeadAxisWarning) {
  TempOut out("dead");
  const ReportResult result = write_report(spec_of(""), fixture_context(), out.str());
  ASSERT_EQ(result.warnings.size(), 1u);
  EXPECT_EQ(result.warnings[0],
            "axis 'tag' changes no result: runs that differ only in it have the same status and metrics (usually a "
            "mistake: a parameter this command ignores, say)");
  EXPECT_CONTAINS(slurp(out.path() / "report.md"), "## Warnings\n\n- axis 'tag' changes no result");
  // Without the tag axis in the context nothing is reported.
  ReportContext context = fixture_context();
  context.axes.pop_back();
  EXPECT_TRUE(write_report(spec_of(""), context, out.str()).warnings.empty());
}

TEST(SweepReport, HtmlIsSelfContained) {
  TempOut out("html");
  const ReportSpec spec = fixture_spec();
  write_report(spec, fixture_context(), out.str());
  const std::string html = slurp(out.path() / "report.html");
  EXPECT_EQ(html.find("http"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("url(http"), std::string::npos);
  std::size_t svgs = 0;
  for (std::size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) ++svgs;
  EXPECT_EQ(svgs, spec.plots.size());
  // Every run's label, and the tables.
  const auto runs = read_csv_file((fixture / "runs.csv").string());
  for (const auto& row : runs.rows) EXPECT_CONTAINS(html, "<td>" + row[*runs.column("label")] + "</td>");
  EXPECT_CONTAINS(html, "<h3>speedup</h3>");
  EXPECT_CONTAINS(html, "1.25x (1.33x)<br><small>schedule=1f1b-so, micro_batches=16</small>");
}

TEST(SweepReport, OutputsAllOrNone) {
  TempOut out("atomic");
  std::ofstream(out.path() / "plots") << "a file where the plots folder goes";
  EXPECT_CONTAINS(input_error_of([&] { write_report(fixture_spec(), fixture_context(), out.str()); }), "plots");
  EXPECT_FALSE(fs::exists(out.path() / "report.md"));
  EXPECT_FALSE(fs::exists(out.path() / "report.html"));
  EXPECT_FALSE(fs::exists(out.path() / "tables/speedup.md"));
}

TEST(SweepReport, MissingColumnsAndFiles) {
  TempOut out("columns");
  const ReportSpec spec = spec_of("[[table]]\nname = \"t\"\nrows = [\"platfrom\"]\nvalue = \"max(throughput_samples_per_s)\"\n");
  EXPECT_EQ(input_error_of([&] { write_report(spec, fixture_context(), out.str()); }),
            "exp.toml:1: [[table]] 't': no column 'platfrom' in " + (out.path() / "runs.csv").string() +
                " (did you mean 'platform'?)");
  fs::remove(out.path() / "runs.csv");
  EXPECT_CONTAINS(input_error_of([&] { write_report(spec, fixture_context(), out.str()); }), "runs.csv");
}

TEST(SweepReport, RelativeToMustNameAValue) {
  TempOut out("relative");
  const ReportSpec spec = spec_of(R"toml([[table]]
name = "t"
rows = ["platform"]
cols = "system"
value = "max(throughput_samples_per_s)"
relative_to = { system = "Gpipe" }
)toml");
  EXPECT_EQ(input_error_of([&] { write_report(spec, fixture_context(), out.str()); }),
            "exp.toml:1: [[table]] 't': relative_to system = \"Gpipe\" is no value of 'system' in runs.csv (its "
            "values: GPipe, BaPipe)");
}

// ---------------------------------------------------------------- spec errors

std::string spec_error(const std::string& text) { return input_error_of([&] { spec_of(text); }); }

TEST(SweepReportSpec, UnknownKeysWithLineAndSuggestion) {
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\ncolums = \"b\"\nvalue = \"max(x)\"\n"),
            "exp.toml:4: unknown key 'colums' in [[table]] 't' (did you mean 'cols'?)");
  EXPECT_EQ(spec_error("[[expect]]\nasert = [\"a > 1\"]\n"), "exp.toml:2: unknown key 'asert' in [[expect]] (did you mean 'assert'?)");
  EXPECT_EQ(spec_error("[report]\nplot = []\n"), "exp.toml:2: unknown key 'plot' in [report] (did you mean 'plots'?)");
  EXPECT_EQ(spec_error("[report]\nplots = [\n  { kind = \"line\", x = \"m\", y = \"t\", serie = \"s\" } ]\n"),
            "exp.toml:3: unknown key 'serie' in plot 1 (did you mean 'series'?)");
  EXPECT_EQ(spec_error("[report]\nplots = [ { kind = \"heatmap\", x = \"a\", y = \"b\", value = \"max(c)\", series = \"s\" } ]\n"),
            "exp.toml:2: plot 1 (heatmap): key 'series' does not apply to a heatmap plot (it takes kind, name, title, x, "
            "y, value, format, where)");
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"max(x)\"\npaper = [ { a = \"1\", vlaue = 2 } ]\n"),
            "exp.toml:5: unknown key 'vlaue' in [[table]] 't': a 'paper' entry (did you mean 'value'?)");
}

TEST(SweepReportSpec, WrongTypesAndValues) {
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = 3\nvalue = \"max(x)\"\n"),
            "exp.toml:3: [[table]] 't': 'rows' must be an array of strings, found the integer 3");
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\", 2]\nvalue = \"max(x)\"\n"),
            "exp.toml:3: [[table]] 't': 'rows' must be an array of strings, found the integer 2 in it");
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"maximum(x)\"\n"),
            "exp.toml:4: [[table]] 't': unknown aggregate 'maximum' in \"maximum(x)\" (expected one of max, min, mean, "
            "sum, count, first)");
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"throughput\"\n"),
            "exp.toml:4: [[table]] 't': 'value' must read 'agg(column)' or 'agg(expression)' with agg one of max, min, "
            "mean, sum, count, first, found \"throughput\"");
  EXPECT_CONTAINS(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"max(x)\"\nformat = \"{:.2q}\"\n"),
                  "exp.toml:5: [[table]] 't': 'format' \"{:.2q}\" is no format of one number");
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"mean(x)\"\nannotate = [\"b\"]\n"),
            "exp.toml:5: [[table]] 't': 'annotate' shows the chosen run of each cell, which needs max, min or first, "
            "not mean");
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\ncols = \"b\"\nvalue = \"max(x)\"\nrelative_to = { c = \"x\" }\n"),
            "exp.toml:6: [[table]] 't': 'relative_to' must name the 'cols' column 'b', found 'c'");
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\ncols = \"b\"\nvalue = \"max(x)\"\npaper = [ { a = \"1\", value = 2 } ]\n"),
            "exp.toml:6: [[table]] 't': a 'paper' entry needs 'b' (the column of its cell)");
  EXPECT_EQ(spec_error("[[table]]\nname = \"../t\"\nrows = [\"a\"]\nvalue = \"max(x)\"\n"),
            "exp.toml:2: [[table]] '../t': 'name' must be a file name without '/' (tables/<name>.md)");
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"max(x)\"\n[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"max(x)\"\n"),
            "exp.toml:5: two [[table]]s named 't' (the other on line 1)");
  EXPECT_EQ(spec_error("[[expect]]\ntable = \"speed\"\nassert = [\"a\"]\n"), "exp.toml:2: [[expect]]: no [[table]] named 'speed'");
  EXPECT_EQ(spec_error("[[expect]]\nassert = [\"a >\"]\n"),
            "exp.toml:2: expression 'a >': at column 4: expected a value, found the end of the expression");
  EXPECT_EQ(spec_error("table = 3\n"), "exp.toml:1: 'table' must be an array of tables ([[table]]), found the integer 3");
  EXPECT_EQ(spec_error("[report]\nplots = [ { kind = \"pie\" } ]\n"),
            "exp.toml:2: plot 1: unknown kind 'pie' (expected one of line, bars, memory, bubble, heatmap, pareto, scaling)");
  EXPECT_EQ(spec_error("[report]\nplots = [ { kind = \"line\", x = \"a\" } ]\n"), "exp.toml:2: plot 1 (line) needs 'y'");
  EXPECT_EQ(spec_error("[report]\nplots = [ { kind = \"line\", x = \"a\", y = \"b\", x_scale = \"log\" } ]\n"),
            "exp.toml:2: plot 1 (line): 'x_scale' must be \"linear\" or \"log2\", found \"log\"");
  EXPECT_EQ(spec_error("[report]\nplots = [ { kind = \"bubble\" }, { kind = \"bubble\" }, { kind = \"bubble\", name = \"1\" } ]\n"),
            "exp.toml:2: two plots write plots/1-bubble.svg (give them different names)");
}

TEST(SweepReportSpec, ReadsTheFixture) {
  const ReportSpec spec = fixture_spec();
  ASSERT_EQ(spec.tables.size(), 3u);
  EXPECT_EQ(spec.tables[0].rows, std::vector<std::string>{"platform"});
  EXPECT_EQ(spec.tables[0].relative_to, "GPipe");
  EXPECT_EQ(spec.tables[0].paper.at(0).keys.at(1), (std::pair<std::string, std::string>{"system", "BaPipe"}));
  EXPECT_EQ(spec.tables[2].rows, std::vector<std::string>{"system"});  // a string for one column
  EXPECT_EQ(spec.expects.size(), 3u);
  ASSERT_EQ(spec.plots.size(), 7u);
  EXPECT_EQ(spec.plots[3].x, "micro_batches");  // bubble defaults
  EXPECT_EQ(spec.plots[3].x_scale, "log2");
  EXPECT_EQ(spec.plots[6].x, "devices");
}

// ---------------------------------------------------------------- agg(EXPR), where, devices tables

/// tables/NAME.csv of a report over the fixture with `text` as its sections.
std::string table_csv_of(const std::string& text, const std::string& name, const std::string& out_name) {
  TempOut out(out_name);
  write_report(spec_of(text), fixture_context(), out.str());
  return slurp(out.path() / "tables" / (name + ".csv"));
}

TEST(SweepReport, AggregateOfAnExpressionPerRun) {
  // Throughput per micro-batch, then the largest per cell: GPipe on 2 GPUs
  // 80 / 4; BaPipe on 4 GPUs 128.5714 / 4 (SO, M = 4) of SNO and SO, M 4 and 16.
  const std::string csv = table_csv_of(R"toml(
[[table]]
name = "t"
rows = ["platform"]
cols = "system"
value = "max(throughput_samples_per_s / micro_batches)"
)toml", "t", "expr");
  EXPECT_EQ(csv, "platform,GPipe,BaPipe\nbapipe-2xv100,20,25\nbapipe-4xv100,9.47368125,32.14285\n");
  // The outer call is the aggregate; inner max/min are the expression's.
  const std::string nested = table_csv_of(R"toml(
[[table]]
name = "t"
rows = ["platform"]
value = "max(min(micro_batches, 8) * 2)"
)toml", "t", "nested");
  EXPECT_EQ(nested, "platform,value\nbapipe-2xv100,8\nbapipe-4xv100,16\n");
}

TEST(SweepReport, AggregateOfAColumnIsUnchanged) {
  const std::string column = table_csv_of(R"toml(
[[table]]
name = "t"
rows = ["platform"]
cols = "system"
value = "max(throughput_samples_per_s)"
)toml", "t", "column");
  const std::string expression = table_csv_of(R"toml(
[[table]]
name = "t"
rows = ["platform"]
cols = "system"
value = "max(throughput_samples_per_s * 1)"
)toml", "t", "column-expr");
  EXPECT_EQ(column, expression);
  EXPECT_EQ(column, "platform,GPipe,BaPipe\nbapipe-2xv100,80,100\nbapipe-4xv100,151.5789,189.4737\n");
}

TEST(SweepReport, AnExpressionReadingAnEmptyCellGivesNoValue) {
  // `reason` is empty on every run that fits: no value, so count is 0 and
  // max shows the cell's status ("no value").
  EXPECT_EQ(table_csv_of(R"toml(
[[table]]
name = "t"
rows = ["platform"]
value = "count(if(reason == 'x', 1, 0))"
)toml", "t", "empty"),
            "platform,value\nbapipe-2xv100,0\nbapipe-4xv100,0\n");
}

TEST(SweepReport, AnExpressionThatIsNoNumberIsAnErrorNamingTheRun) {
  TempOut out("bool");
  const ReportSpec spec = spec_of(R"toml(
[[table]]
name = "t"
rows = ["platform"]
value = "max(micro_batches > 4)"
)toml");
  EXPECT_EQ(input_error_of([&] { write_report(spec, fixture_context(), out.str()); }),
            "exp.toml:5: expression 'micro_batches > 4': gives false on run 0 (bapipe-2xv100|GPipe|gpipe|M=4|x), where "
            "[[table]] 't' needs a number");
  const ReportSpec unknown = spec_of(R"toml(
[[table]]
name = "t"
rows = ["platform"]
value = "max(throughput_samples_per_s / micro_batchs)"
)toml");
  EXPECT_CONTAINS(input_error_of([&] { write_report(unknown, fixture_context(), out.str()); }),
                  "exp.toml:2: [[table]] 't': no column 'micro_batchs' in ");
  EXPECT_FALSE(fs::exists(out.path() / "report.md"));  // all or none
}

TEST(SweepReport, TableWhereSelectsRuns) {
  EXPECT_EQ(table_csv_of(R"toml(
[[table]]
name = "t"
rows = ["platform"]
cols = "system"
value = "max(throughput_samples_per_s)"
where = "micro_batches == 4 and schedule != '1f1b-so'"
)toml", "t", "where"),
            "platform,GPipe,BaPipe\nbapipe-2xv100,80,88\nbapipe-4xv100,error,113.1429\n");
}

TEST(SweepReport, DevicesTableJoinsTheRunColumns) {
  // peak_stashed is only in devices.csv: one entry per device, with its
  // run's columns (system, platform); cols = host gives a column per device.
  const std::string text = R"toml(
[[table]]
name = "stash"
rows = ["platform"]
cols = "host"
value = "max(peak_stashed)"
where = "system == 'BaPipe'"

[[table]]
name = "memory"
rows = ["platform"]
cols = "host"
value = "max(peak_memory_bytes / 1e9)"
from = "devices"

[[expect]]
table = "stash"
assert = ["gpu0 >= gpu1", "not has(gpu2) or gpu2 == 2"]
)toml";
  TempOut out("devices");
  const ReportResult result = write_report(spec_of(text), fixture_context(), out.str());
  EXPECT_EQ(result.broken_expects, 0u) << (result.failures.empty() ? "" : result.failures.front());
  EXPECT_EQ(result.checked_expects, 4u);
  EXPECT_EQ(slurp(out.path() / "tables/stash.csv"),
            "platform,gpu0,gpu1,gpu2,gpu3\nbapipe-2xv100,2,1,,\nbapipe-4xv100,4,3,2,1\n");
  // devices.csv's own peak_memory_bytes (per device), not the run's maximum.
  const std::string memory = slurp(out.path() / "tables/memory.csv");
  EXPECT_CONTAINS(memory, "platform,gpu0,gpu1,gpu2,gpu3\nbapipe-2xv100,16,14.4,,\n");
  EXPECT_CONTAINS(slurp(out.path() / "tables/stash.md"), "over the devices (devices.csv rows) of the runs");
}

TEST(SweepReport, FromRunsKeepsRunsCsv) {
  TempOut out("from-runs");
  const ReportSpec spec = spec_of(R"toml(
[[table]]
name = "t"
rows = ["platform"]
value = "max(peak_stashed)"
from = "runs"
)toml");
  EXPECT_CONTAINS(input_error_of([&] { write_report(spec, fixture_context(), out.str()); }),
                  "exp.toml:2: [[table]] 't': no column 'peak_stashed' in ");
}

TEST(SweepReportSpec, AggregateOfAnExpressionIsParsed) {
  const ReportSpec spec = spec_of(
      "[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"max(max(x / y - 1, 1 - x / y))\"\n"
      "[[table]]\nname = \"u\"\nrows = [\"a\"]\nvalue = \" sum( `odd name` ) \"\n"
      "[[table]]\nname = \"v\"\nrows = [\"a\"]\nvalue = \"first(if(s == ')', 1, 0))\"\n");
  ASSERT_EQ(spec.tables.size(), 3u);
  EXPECT_EQ(spec.tables[0].aggregate, "max");
  EXPECT_TRUE(spec.tables[0].metric.empty());
  ASSERT_TRUE(spec.tables[0].metric_expression.has_value());
  EXPECT_EQ(spec.tables[0].metric_expression->text(), "max(x / y - 1, 1 - x / y)");
  EXPECT_EQ(spec.tables[1].metric, "odd name");  // a backquoted column
  EXPECT_FALSE(spec.tables[1].metric_expression.has_value());
  ASSERT_TRUE(spec.tables[2].metric_expression.has_value());  // a ')' inside a string
  EXPECT_EQ(spec.tables[2].metric_expression->names(), std::vector<std::string>{"s"});
}

TEST(SweepReportSpec, AggregateMustEncloseTheValue) {
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"min(bytes_per_sample) / 1e6\"\n"),
            "exp.toml:4: [[table]] 't': 'value' must read 'agg(column)' or 'agg(expression)' with agg one of max, min, "
            "mean, sum, count, first, found \"min(bytes_per_sample) / 1e6\": the aggregate must enclose the whole value "
            "(write min(... / 1e6))");
  EXPECT_CONTAINS(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"max((x)\"\n"), "(unbalanced parentheses)");
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"max()\"\n"),
            "exp.toml:4: [[table]] 't': max(): a column or an expression is missing, in \"max()\"");
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"max(x +)\"\n"),
            "exp.toml:4: expression 'x +': at column 4: expected a value, found the end of the expression");
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"max(x)\"\nfrom = \"device\"\n"),
            "exp.toml:5: [[table]] 't': 'from' must be \"runs\" (runs.csv) or \"devices\" (devices.csv), found \"device\"");
  EXPECT_EQ(spec_error("[[table]]\nname = \"t\"\nrows = [\"a\"]\nvalue = \"max(x)\"\nwhere = \"a ==\"\n"),
            "exp.toml:5: expression 'a ==': at column 5: expected a value, found the end of the expression");
}

// ---------------------------------------------------------------- details

TEST(SweepReport, ARepeatedRowIsRefusedNamingBothLines) {
  TempOut out("repeated");
  const std::string runs = slurp(out.path() / "runs.csv");
  const std::size_t second = runs.find('\n') + 1;
  const std::string row = runs.substr(second, runs.find('\n', second) + 1 - second);
  std::ofstream(out.path() / "runs.csv", std::ios::app) << row;
  const std::string error = input_error_of([&] { write_report(spec_of("[[expect]]\nassert = [\"true\"]\n"), fixture_context(), out.str()); });
  EXPECT_CONTAINS(error, out.str() + "/runs.csv:26: run_index 0 (run_key ac26faebecf448de) has a row already, at line 2");
  EXPECT_FALSE(fs::exists(out.path() / "report.md"));
  // The same label under another run_index: refused too.
  std::string relabelled = runs + row;
  relabelled.replace(relabelled.rfind("ac26faebecf448de,0,"), 19, "ac26faebecf448de,99,");
  std::ofstream(out.path() / "runs.csv", std::ios::trunc) << relabelled;
  const std::string label = input_error_of([&] { write_report(spec_of("[[expect]]\nassert = [\"true\"]\n"), fixture_context(), out.str()); });
  EXPECT_CONTAINS(label, "/runs.csv:26: label bapipe-2xv100|GPipe|gpipe|M=4|x (run_key ac26faebecf448de) has a row already, at line 2");
}

TEST(SweepReport, InfAndNanAreNumbersInExpectsAndTables) {
  TempOut out("inf");
  std::string runs = slurp(out.path() / "runs.csv");
  // Run 0's throughput (80) becomes inf, run 1's nan.
  runs.replace(runs.find(",3.2,2.88,80,"), 13, ",3.2,2.88,inf,");
  runs.replace(runs.find(",3.2,2.88,80,"), 13, ",3.2,2.88,nan,");
  std::ofstream(out.path() / "runs.csv", std::ios::trunc) << runs;
  const ReportSpec spec = spec_of(R"toml(
[[table]]
name = "t"
rows = ["platform"]
cols = "system"
value = "max(throughput_samples_per_s)"

[[expect]]
where = "run_index == 0"
assert = ["throughput_samples_per_s > 0", "throughput_samples_per_s > 1e308"]

[[expect]]
where = "run_index == 1"
assert = ["throughput_samples_per_s > 0"]
)toml");
  const ReportResult result = write_report(spec, fixture_context(), out.str());
  ASSERT_EQ(result.failures.size(), 1u);  // nan > 0 is false; no type error
  EXPECT_CONTAINS(result.failures[0], "'throughput_samples_per_s > 0' on run 1");
  EXPECT_CONTAINS(result.failures[0], "throughput_samples_per_s = nan");
  EXPECT_CONTAINS(slurp(out.path() / "tables/t.csv"), "inf");
}

TEST(SweepReportDetail, CellsReadAsNumbers) {
  using report_detail::infer_value;
  EXPECT_TRUE(std::isinf(std::get<double>(infer_value("inf"))));
  EXPECT_LT(std::get<double>(infer_value("-inf")), 0);
  EXPECT_TRUE(std::isnan(std::get<double>(infer_value("nan"))));
  EXPECT_EQ(std::get<double>(infer_value("1.5e-05")), 1.5e-05);
  EXPECT_EQ(std::get<std::string>(infer_value("infinity")), "infinity");
  EXPECT_FALSE(report_detail::parse_number("inf"));
}

TEST(SweepReportDetail, PathStemsStayDistinct) {
  CsvTable csv = parse_csv("profile,platform\n../models/a/graph.txt,p/x.xml\n../models/b/graph.txt,q/y.xml\n", "r.csv");
  const report_detail::Results results(csv, ReportContext{}, "exp.toml");
  EXPECT_EQ(results.display(0, "../models/a/graph.txt"), "a/graph");
  EXPECT_EQ(results.display(0, "../models/b/graph.txt"), "b/graph");
  EXPECT_EQ(results.display(1, "p/x.xml"), "x");
}

TEST(SweepReportDetail, DefaultNumberFormat) {
  using report_detail::format_value;
  EXPECT_EQ(format_value("", 16), "16");
  EXPECT_EQ(format_value("", 151.578947), "151.6");
  EXPECT_EQ(format_value("", 1.25), "1.25");
  EXPECT_EQ(format_value("", 0.0588235), "0.05882");
  EXPECT_EQ(format_value("", 123456.7), "123457");
  EXPECT_EQ(format_value("", 1.5e-5), "1.5e-05");
  EXPECT_EQ(format_value("{:.2f}x", 1.254), "1.25x");
}

}  // namespace
}  // namespace pipegrid
