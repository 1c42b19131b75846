// Sweep report charts (render/charts.hpp): structure of the SVG of each kind,
// checked on the parsed XML (Boost.PropertyTree), not on exact bytes.

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>
#include <gtest/gtest.h>

#include "render/charts.hpp"

namespace pipegrid::charts {
namespace {

namespace pt = boost::property_tree;

pt::ptree parse(const std::string& svg) {
  std::istringstream in(svg);
  pt::ptree tree;
  pt::read_xml(in, tree);  // throws on malformed XML (unbalanced tags, bad escapes)
  return tree;
}

std::string attr(const pt::ptree& node, const std::string& name) {
  return node.get<std::string>("<xmlattr>." + name, "");
}

bool has_class(const pt::ptree& node, const std::string& cls) {
  std::istringstream words(attr(node, "class"));
  std::string word;
  while (words >> word)
    if (word == cls) return true;
  return false;
}

/// Visits every element (tag, node) under `tree`, depth first, in order.
void visit(const pt::ptree& tree, const std::function<void(const std::string&, const pt::ptree&)>& f) {
  for (const auto& [tag, child] : tree) {
    if (tag == "<xmlattr>" || tag == "<xmlcomment>") continue;
    f(tag, child);
    visit(child, f);
  }
}

/// Elements with this tag whose class list holds every class in `classes`.
std::vector<pt::ptree> find(const std::string& svg, const std::string& tag, const std::vector<std::string>& classes) {
  std::vector<pt::ptree> out;
  visit(parse(svg), [&](const std::string& t, const pt::ptree& node) {
    if (t != tag) return;
    for (const std::string& c : classes)
      if (!has_class(node, c)) return;
    out.push_back(node);
  });
  return out;
}

std::size_t count(const std::string& svg, const std::string& tag, const std::vector<std::string>& classes) {
  return find(svg, tag, classes).size();
}

/// Texts of the <text> elements under the first <g> with class `group`.
std::vector<std::string> texts_in(const std::string& svg, const std::string& group) {
  std::vector<std::string> out;
  bool done = false;
  visit(parse(svg), [&](const std::string& tag, const pt::ptree& node) {
    if (done || tag != "g" || !has_class(node, group)) return;
    done = true;
    visit(node, [&](const std::string& t, const pt::ptree& n) {
      if (t == "text") out.push_back(n.data());
    });
  });
  return out;
}

std::vector<std::string> all_texts(const std::string& svg) {
  std::vector<std::string> out;
  visit(parse(svg), [&](const std::string& tag, const pt::ptree& n) {
    if (tag == "text") out.push_back(n.data());
  });
  return out;
}

bool contains_text(const std::string& svg, const std::string& needle) {
  for (const std::string& t : all_texts(svg))
    if (t.find(needle) != std::string::npos) return true;
  return false;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// Well-formed, and no "nan"/"inf" anywhere.
void expect_clean(const std::string& svg) {
  EXPECT_NO_THROW(parse(svg));
  EXPECT_EQ(lower(svg).find("nan"), std::string::npos) << svg;
  EXPECT_EQ(lower(svg).find("inf"), std::string::npos) << svg;
}

std::size_t polyline_points(const pt::ptree& polyline) {
  std::istringstream in(attr(polyline, "points"));
  std::string pair;
  std::size_t n = 0;
  while (in >> pair) ++n;
  return n;
}

Series series(const std::string& name, std::vector<double> xs, std::vector<double> ys, std::vector<bool> oom = {}) {
  Series s;
  s.name = name;
  for (std::size_t i = 0; i < xs.size(); ++i) s.points.push_back({xs[i], ys[i], i < oom.size() && oom[i], ""});
  return s;
}

LineChart throughput_chart() {
  LineChart c;
  c.title = "Throughput vs M";
  c.x = {"micro-batches", Scale::Log2, Unit::Plain, false, {}, {}};
  c.y = {"throughput (samples/s)", Scale::Linear, Unit::Plain, true, {}, {}};
  LinePanel p;
  p.series.push_back(series("gpipe", {1, 2, 4, 8}, {100, 180, 260, 300}, {false, false, false, true}));
  p.series.push_back(series("1f1b-so", {1, 2, 4, 8}, {100, 190, 290, 340}));
  c.panels.push_back(p);
  return c;
}

// ---- line ----------------------------------------------------------------------

TEST(LineChart, SeriesPointsAndHollowOom) {
  const std::string svg = line_chart_svg(throughput_chart());
  expect_clean(svg);
  EXPECT_EQ(count(svg, "polyline", {"series"}), 2u);
  EXPECT_EQ(count(svg, "circle", {"point"}), 8u);
  const std::vector<pt::ptree> oom = find(svg, "circle", {"point", "oom"});
  ASSERT_EQ(oom.size(), 1u);
  EXPECT_EQ(attr(oom[0], "fill"), "#ffffff");  // hollow
  const std::vector<std::string> legend = texts_in(svg, "legend");
  EXPECT_NE(std::find(legend.begin(), legend.end(), "gpipe"), legend.end());
  EXPECT_NE(std::find(legend.begin(), legend.end(), "1f1b-so"), legend.end());
  EXPECT_NE(std::find(legend.begin(), legend.end(), "out of memory"), legend.end());
  EXPECT_TRUE(contains_text(svg, "Throughput vs M"));
  EXPECT_TRUE(contains_text(svg, "micro-batches"));
  // A series keeps one colour: its markers and its line.
  const auto lines = find(svg, "polyline", {"series"});
  EXPECT_NE(attr(lines[0], "stroke"), attr(lines[1], "stroke"));
}

TEST(LineChart, Log2TicksArePowersOfTwo) {
  LineChart c = throughput_chart();
  c.panels[0].series[0] = series("gpipe", {1, 2, 4, 8, 16, 32, 64}, {1, 2, 3, 4, 5, 6, 7});
  const std::vector<std::string> ticks = texts_in(line_chart_svg(c), "x");
  EXPECT_EQ(ticks, (std::vector<std::string>{"1", "2", "4", "8", "16", "32", "64"}));
}

TEST(LineChart, LinearTicksAreNice) {
  LineChart c = throughput_chart();
  c.x.scale = Scale::Linear;
  c.panels[0].series = {series("a", {0, 10}, {0, 0.93})};
  const std::string svg = line_chart_svg(c);
  const std::vector<std::string> y = texts_in(svg, "y");
  EXPECT_EQ(y, (std::vector<std::string>{"0", "0.2", "0.4", "0.6", "0.8", "1.0"}));
  c.panels[0].series = {series("a", {0, 10}, {0, 2.4e6})};
  EXPECT_EQ(texts_in(line_chart_svg(c), "y"), (std::vector<std::string>{"0", "0.5M", "1.0M", "1.5M", "2.0M", "2.5M"}));
}

TEST(LineChart, FacetsShareOneLegendAndColours) {
  LineChart c = throughput_chart();
  LinePanel second;
  second.title = "8 x V100";
  second.series.push_back(series("1f1b-so", {1, 2}, {10, 20}));  // first here, second in panel 1
  second.series.push_back(series("gpipe", {1, 2}, {5, 10}));
  c.panels[0].title = "4 x V100";
  c.panels.push_back(second);
  const std::string svg = line_chart_svg(c);
  expect_clean(svg);
  EXPECT_EQ(count(svg, "g", {"panel"}), 2u);
  EXPECT_EQ(count(svg, "g", {"legend"}), 1u);
  EXPECT_EQ(count(svg, "text", {"panel-title"}), 2u);
  EXPECT_EQ(count(svg, "circle", {"point"}), 12u);
  // Colour by name across panels.
  std::map<std::string, std::string> colour;
  for (const pt::ptree& line : find(svg, "polyline", {"series"})) {
    const std::string name = line.get<std::string>("title");
    if (colour.count(name)) {
      EXPECT_EQ(colour[name], attr(line, "stroke")) << name;
    }
    colour[name] = attr(line, "stroke");
  }
  EXPECT_EQ(colour.size(), 2u);
}

TEST(LineChart, NonPositiveOnLog2AxisIsSkippedWithANote) {
  LineChart c = throughput_chart();
  c.panels[0].series = {series("a", {0, -1, 2, 4}, {1, 2, 3, 4})};
  const std::string svg = line_chart_svg(c);
  expect_clean(svg);
  EXPECT_EQ(count(svg, "circle", {"point"}), 2u);
  EXPECT_TRUE(contains_text(svg, "2 values not drawn: x <= 0 on the log2 axis"));
}

TEST(LineChart, NonFiniteValuesNeverReachTheSvg) {
  LineChart c = throughput_chart();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  c.panels[0].series = {series("a", {1, 2, 4, 8}, {nan, inf, -inf, 3})};
  const std::string svg = line_chart_svg(c);
  expect_clean(svg);
  EXPECT_EQ(count(svg, "circle", {"point"}), 1u);
  EXPECT_TRUE(contains_text(svg, "3 values not drawn: not a finite number"));
}

TEST(LineChart, EdgeCases) {
  LineChart empty;
  const std::string none = line_chart_svg(empty);
  expect_clean(none);
  EXPECT_TRUE(contains_text(none, "no data"));

  LineChart c = throughput_chart();
  c.panels[0].series = {series("one", {4}, {7})};
  const std::string single = line_chart_svg(c);
  expect_clean(single);
  EXPECT_EQ(count(single, "circle", {"point"}), 1u);
  EXPECT_EQ(count(single, "polyline", {"series"}), 0u);  // no line through one point

  c.panels[0].series = {series("flat", {1, 2, 4}, {5, 5, 5}), Series{"empty", {}}};
  c.y.from_zero = false;
  const std::string flat = line_chart_svg(c);
  expect_clean(flat);
  EXPECT_EQ(count(flat, "circle", {"point"}), 3u);
  EXPECT_GE(texts_in(flat, "y").size(), 2u);

  c.panels[0].series = {series("zeros", {1, 2}, {0, 0})};
  expect_clean(line_chart_svg(c));
}

TEST(LineChart, EscapesText) {
  LineChart c = throughput_chart();
  c.title = "a<b & \"c\" 'd'";
  c.panels[0].series[0].name = "x<y>&";
  c.panels[0].series[0].points[0].label = "M=<1>";
  const std::string svg = line_chart_svg(c);
  expect_clean(svg);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
  EXPECT_TRUE(contains_text(svg, "a<b & \"c\" 'd'"));  // parsed back
  const std::vector<std::string> legend = texts_in(svg, "legend");
  EXPECT_NE(std::find(legend.begin(), legend.end(), "x<y>&"), legend.end());
}


// ---- bars ----------------------------------------------------------------------

BarChart speedup_chart() {
  BarChart c;
  c.title = "Speed-up over GPipe";
  c.x_label = "platform";
  c.y.label = "speed-up";
  c.groups = {"4 x V100", "8 x V100", "16 x V100"};
  c.series = {"GPipe", "BaPipe"};
  c.bars = {{{1.0, {}, "1.00x"}, {1.33, 3.90, "1.33x"}},
            {{1.0, {}, "1.00x"}, {1.8, 2.93, "1.80x"}},
            {{1.0, {}, "1.00x"}, {{}, {}, ""}}};
  c.baseline = 1.0;
  return c;
}

TEST(BarChart, GroupsBarsPaperTicksAndLabels) {
  const std::string svg = bar_chart_svg(speedup_chart());
  expect_clean(svg);
  EXPECT_EQ(count(svg, "g", {"group"}), 3u);
  EXPECT_EQ(count(svg, "rect", {"bar"}), 5u);  // one missing
  EXPECT_EQ(count(svg, "line", {"paper"}), 2u);
  EXPECT_EQ(count(svg, "text", {"bar-label"}), 5u);
  EXPECT_TRUE(contains_text(svg, "1.33x"));
  EXPECT_EQ(count(svg, "line", {"baseline", "dashed"}), 1u);
  const std::vector<std::string> legend = texts_in(svg, "legend");
  EXPECT_NE(std::find(legend.begin(), legend.end(), "paper"), legend.end());
  // The y range reaches the highest paper value.
  const std::vector<std::string> y = texts_in(svg, "y");
  EXPECT_GE(std::stod(y.back()), 3.9);
}

TEST(BarChart, EdgeCases) {
  BarChart c;
  expect_clean(bar_chart_svg(c));
  EXPECT_TRUE(contains_text(bar_chart_svg(c), "no data"));
  c = speedup_chart();
  c.bars[0][0].value = -1;
  c.bars[1][0].value = std::numeric_limits<double>::quiet_NaN();
  const std::string svg = bar_chart_svg(c);
  expect_clean(svg);
  EXPECT_EQ(count(svg, "rect", {"bar"}), 3u);
  EXPECT_TRUE(contains_text(svg, "1 value not drawn: negative bar value"));
  // Ragged rows are tolerated (missing entries: no bar).
  c = speedup_chart();
  c.bars.resize(1);
  expect_clean(bar_chart_svg(c));
  // Long group names are rotated, still well-formed.
  c = speedup_chart();
  c.groups[0] = "a very long platform name & more";
  expect_clean(bar_chart_svg(c));
}

// ---- memory --------------------------------------------------------------------

constexpr double GiB = 1024.0 * 1024 * 1024;

MemoryChart memory_chart(double cap2) {
  MemoryChart c;
  c.title = "Peak memory";
  c.runs.push_back({"gpipe M=8", {{"gpu0", 10 * GiB, 16 * GiB}, {"gpu1", 17 * GiB, 16 * GiB}}});
  c.runs.push_back({"1f1b M=8", {{"gpu0", 8 * GiB, 16 * GiB}, {"gpu1", 6 * GiB, cap2}}});
  return c;
}

TEST(MemoryChart, OneCapacityLineWhenEqual) {
  const std::string svg = memory_chart_svg(memory_chart(16 * GiB));
  expect_clean(svg);
  EXPECT_EQ(count(svg, "rect", {"bar"}), 4u);
  EXPECT_EQ(count(svg, "rect", {"bar", "over"}), 1u);
  EXPECT_EQ(count(svg, "line", {"capacity", "dashed"}), 1u);
  const auto cap = find(svg, "line", {"capacity"});
  EXPECT_FALSE(attr(cap[0], "stroke-dasharray").empty());
  EXPECT_EQ(count(svg, "g", {"group"}), 2u);  // grouped by host
  EXPECT_TRUE(contains_text(svg, "peak memory (GiB)"));
  const std::vector<std::string> legend = texts_in(svg, "legend");
  EXPECT_NE(std::find(legend.begin(), legend.end(), "over capacity"), legend.end());
}

TEST(MemoryChart, CapacityMarkPerBarWhenTheyDiffer) {
  const std::string svg = memory_chart_svg(memory_chart(32 * GiB));
  expect_clean(svg);
  EXPECT_EQ(count(svg, "line", {"capacity", "dashed"}), 4u);
  // Unknown capacity: no mark, never over.
  // (the known ones are equal: one line).
  MemoryChart c = memory_chart(0);
  const std::string unknown = memory_chart_svg(c);
  EXPECT_EQ(count(unknown, "line", {"capacity"}), 1u);
  EXPECT_EQ(count(unknown, "rect", {"bar", "over"}), 1u);
  c.runs[0].devices[0].capacity_bytes = 0;
  c.runs[0].devices[1].capacity_bytes = 0;
  c.runs[1].devices[0].capacity_bytes = 0;
  const std::string none = memory_chart_svg(c);
  expect_clean(none);
  EXPECT_EQ(count(none, "line", {"capacity"}), 0u);
  EXPECT_EQ(count(none, "rect", {"bar", "over"}), 0u);
  expect_clean(memory_chart_svg(MemoryChart{}));
}

// ---- bubble --------------------------------------------------------------------

TEST(BubbleChart, ClosedFormDashed) {
  BubbleChart c;
  c.title = "Bubble fraction";
  c.measured.push_back(series("gpipe", {1, 2, 4, 8}, {0.75, 0.6, 0.43, 0.27}));
  Series closed{"gpipe", {}};
  for (double m = 1; m <= 8; m *= 1.25) closed.points.push_back({m, 3 / (m + 3), false, ""});
  c.closed_form.push_back(closed);
  const std::string svg = bubble_chart_svg(c);
  expect_clean(svg);
  EXPECT_EQ(count(svg, "circle", {"point"}), 4u);  // closed form has no markers
  const auto dashed = find(svg, "polyline", {"closed-form", "dashed"});
  ASSERT_EQ(dashed.size(), 1u);
  EXPECT_FALSE(attr(dashed[0], "stroke-dasharray").empty());
  EXPECT_EQ(polyline_points(dashed[0]), closed.points.size());
  EXPECT_EQ(attr(dashed[0], "stroke"), attr(find(svg, "circle", {"point"})[0], "fill"));  // same colour
  // Measured points of a series with a closed form are not joined (the
  // dashed curve would hide under the line); others are.
  EXPECT_EQ(count(svg, "polyline", {"series"}), 0u);
  c.measured.push_back(series("1f1b", {1, 2}, {0.5, 0.4}));
  EXPECT_EQ(count(bubble_chart_svg(c), "polyline", {"series"}), 1u);
  const std::vector<std::string> legend = texts_in(svg, "legend");
  EXPECT_NE(std::find(legend.begin(), legend.end(), "gpipe (closed form)"), legend.end());
}

// ---- heatmap -------------------------------------------------------------------

TEST(Heatmap, CellsValuesHatchAndBlank) {
  Heatmap h;
  h.title = "Throughput";
  h.x_label = "micro-batches";
  h.y_label = "schedule";
  h.value_label = "samples/s";
  h.x_values = {"1", "2", "4"};
  h.y_values = {"gpipe", "1f1b-so"};
  h.cells = {{{100.0, false, ""}, {180.0, false, ""}, {260.0, true, ""}},
             {{100.0, false, ""}, {{}, false, ""}, {{}, true, ""}}};
  const std::string svg = heatmap_svg(h);
  expect_clean(svg);
  EXPECT_EQ(count(svg, "rect", {"cell"}), 6u);
  EXPECT_EQ(count(svg, "rect", {"cell", "oom"}), 2u);
  EXPECT_EQ(count(svg, "rect", {"cell", "missing"}), 1u);
  EXPECT_EQ(count(svg, "pattern", {}), 1u);
  const auto hatches = find(svg, "rect", {"hatch"});
  ASSERT_EQ(hatches.size(), 2u);
  const std::string id = attr(find(svg, "pattern", {})[0], "id");
  EXPECT_EQ(attr(hatches[0], "fill"), "url(#" + id + ")");
  EXPECT_TRUE(contains_text(svg, "180"));
  EXPECT_TRUE(contains_text(svg, "260"));  // an OOM cell keeps its value
  EXPECT_TRUE(contains_text(svg, "OOM"));  // no value: says why it is hatched
  // Low and high values get different colours.
  const auto cells = find(svg, "rect", {"cell"});
  EXPECT_NE(attr(cells[0], "fill"), attr(cells[1], "fill"));
}

TEST(Heatmap, EdgeCases) {
  expect_clean(heatmap_svg(Heatmap{}));
  Heatmap h;
  h.x_values = {"a"};
  h.y_values = {"b", "c"};
  h.cells = {{{5.0, false, ""}}};  // ragged: row c missing
  const std::string svg = heatmap_svg(h);
  expect_clean(svg);
  EXPECT_EQ(count(svg, "rect", {"cell", "missing"}), 1u);
  h.cells = {{{std::numeric_limits<double>::infinity(), false, ""}}, {{5.0, false, "five & <x>"}}};
  const std::string odd = heatmap_svg(h);
  expect_clean(odd);
  EXPECT_TRUE(contains_text(odd, "five & <x>"));
}

// ---- pareto --------------------------------------------------------------------

TEST(ParetoChart, FrontCapacityAndOom) {
  ParetoChart c;
  c.title = "Memory vs throughput";
  Series a{"gpipe", {}};
  a.points = {{4 * GiB, 100, false, ""}, {6 * GiB, 90, false, ""}, {8 * GiB, 150, false, ""},
              {20 * GiB, 400, true, ""}};
  Series b{"1f1b", {}};
  b.points = {{3 * GiB, 80, false, ""}, {10 * GiB, 200, false, ""}};
  c.series = {a, b};
  c.capacity_bytes = 16 * GiB;
  const std::string svg = pareto_chart_svg(c);
  expect_clean(svg);
  EXPECT_EQ(count(svg, "circle", {"point"}), 6u);
  EXPECT_EQ(count(svg, "circle", {"point", "oom"}), 1u);
  EXPECT_EQ(count(svg, "polyline", {"series"}), 0u);  // a scatter
  const auto front = find(svg, "polyline", {"front"});
  ASSERT_EQ(front.size(), 1u);
  // Front: 3 GiB/80, 4/100, 8/150, 10/200 (the OOM point and 6/90 are not on
  // it): 4 points, 3 steps -> 7 vertices.
  EXPECT_EQ(polyline_points(front[0]), 7u);
  const auto cap = find(svg, "line", {"capacity", "dashed"});
  ASSERT_EQ(cap.size(), 1u);
  EXPECT_EQ(attr(cap[0], "x1"), attr(cap[0], "x2"));  // vertical
}

TEST(ParetoChart, EdgeCases) {
  expect_clean(pareto_chart_svg(ParetoChart{}));
  ParetoChart c;
  c.series = {Series{"a", {{GiB, 5, false, ""}}}};
  const std::string one = pareto_chart_svg(c);
  expect_clean(one);
  EXPECT_EQ(count(one, "polyline", {"front"}), 1u);
  c.series = {Series{"a", {{GiB, 5, true, ""}}}};
  EXPECT_EQ(count(pareto_chart_svg(c), "polyline", {"front"}), 0u);  // only OOM: no front
  c.capacity_bytes = std::numeric_limits<double>::quiet_NaN();
  expect_clean(pareto_chart_svg(c));
}

// ---- scaling -------------------------------------------------------------------

TEST(ScalingChart, IdealDashedFromFirstPoint) {
  ScalingChart c;
  c.title = "Weak scaling";
  c.series.push_back(series("pipedream", {2, 4, 8, 16}, {100, 190, 350, 600}));
  c.series.push_back(series("dp", {2, 4, 8}, {90, 150, 200}));
  c.series.push_back(series("single", {2}, {50}));
  const std::string svg = scaling_chart_svg(c);
  expect_clean(svg);
  EXPECT_EQ(count(svg, "polyline", {"series"}), 2u);  // "single" has one point: no line
  const auto ideal = find(svg, "polyline", {"ideal", "dashed"});
  ASSERT_EQ(ideal.size(), 2u);
  EXPECT_EQ(polyline_points(ideal[0]), 4u);
  EXPECT_FALSE(attr(ideal[0], "stroke-dasharray").empty());
  // The ideal reaches 100 * 16 / 2 = 800: the y axis covers it.
  EXPECT_GE(std::stod(texts_in(svg, "y").back()), 800);
  c.ideal = false;
  EXPECT_EQ(count(scaling_chart_svg(c), "polyline", {"ideal"}), 0u);
  expect_clean(scaling_chart_svg(ScalingChart{}));
}

// ---- issue 26: fixed y ranges, wrapping ----------------------------------------

double svg_width(const std::string& svg) { return parse(svg).get<double>("svg.<xmlattr>.width"); }

/// The y extent [top, bottom] of every frame (x/y panels) of a chart.
std::vector<std::pair<double, double>> frames(const std::string& svg) {
  std::vector<std::pair<double, double>> out;
  for (const pt::ptree& frame : find(svg, "rect", {"frame"})) {
    const double y = std::stod(attr(frame, "y"));
    out.push_back({y, y + std::stod(attr(frame, "height"))});
  }
  return out;
}

/// Every y of a polygon's points.
std::vector<double> polygon_ys(const pt::ptree& polygon) {
  std::istringstream in(attr(polygon, "points"));
  std::string pair;
  std::vector<double> ys;
  while (in >> pair) ys.push_back(std::stod(pair.substr(pair.find(',') + 1)));
  return ys;
}

TEST(LineChart, FixedYRangeClipsPointsOntoItsEdge) {
  LineChart c = throughput_chart();  // gpipe 100, 180, 260, 300 (oom); 1f1b-so ...
  c.y.min = 150;
  c.y.max = 200;
  const std::string svg = line_chart_svg(c);
  expect_clean(svg);
  const auto frame = frames(svg).at(0);
  // Points outside [150, 200]: triangles, inside the plot area, tips on its edges.
  const auto clipped = find(svg, "polygon", {"point", "clipped"});
  ASSERT_FALSE(clipped.empty());
  for (const pt::ptree& p : clipped)
    for (const double y : polygon_ys(p)) {
      EXPECT_GE(y, frame.first - 1e-9);
      EXPECT_LE(y, frame.second + 1e-9);
    }
  for (const pt::ptree& point : find(svg, "circle", {"point"})) {
    const double cy = std::stod(attr(point, "cy"));
    EXPECT_GE(cy, frame.first - 1e-9);
    EXPECT_LE(cy, frame.second + 1e-9);
  }
  EXPECT_EQ(count(svg, "circle", {"point"}) + clipped.size(), 8u);  // every point drawn, as one or the other
  EXPECT_EQ(count(svg, "clipPath", {}), 1u);                         // lines cut at the border
  EXPECT_TRUE(contains_text(svg, "outside the y range 150 to 200"));
  const std::vector<std::string> ticks = texts_in(svg, "y");
  ASSERT_FALSE(ticks.empty());
  EXPECT_EQ(ticks.front(), "150");
  EXPECT_EQ(ticks.back(), "200");
  const std::vector<std::string> legend = texts_in(svg, "legend");
  EXPECT_NE(std::find(legend.begin(), legend.end(), "outside the y range"), legend.end());
}

TEST(LineChart, NoFixedRangeNoClipping) {
  const std::string svg = line_chart_svg(throughput_chart());
  EXPECT_EQ(count(svg, "polygon", {"clipped"}), 0u);
  EXPECT_EQ(count(svg, "clipPath", {}), 0u);
  EXPECT_FALSE(contains_text(svg, "outside the y range"));
}

TEST(LineChart, ManyFacetsWrapIntoRowsNoWiderThanAScreen) {
  LineChart c = throughput_chart();
  c.panels.clear();
  for (int i = 0; i < 9; ++i) {
    LinePanel p;
    p.title = "facet " + std::to_string(i);
    p.series.push_back(series("gpipe", {1, 2, 4}, {10, 20, 30.0 + i}));
    c.panels.push_back(p);
  }
  const std::string svg = line_chart_svg(c);
  expect_clean(svg);
  EXPECT_LE(svg_width(svg), max_chart_width);
  EXPECT_EQ(count(svg, "g", {"panel"}), 9u);
  std::set<double> rows;
  for (const auto& f : frames(svg)) rows.insert(f.first);
  EXPECT_GE(rows.size(), 2u);
  EXPECT_EQ(count(svg, "circle", {"point"}), 27u);
  // Three facets stay in one row.
  c.panels.resize(3);
  std::set<double> one_row;
  for (const auto& f : frames(line_chart_svg(c))) one_row.insert(f.first);
  EXPECT_EQ(one_row.size(), 1u);
}

TEST(BarChart, FixedYRangeCutsBarsAndMarksThem) {
  BarChart c = speedup_chart();  // BaPipe 1.33 (paper 3.90), 1.8 (paper 2.93)
  c.y.max = 1.5;
  const std::string svg = bar_chart_svg(c);
  expect_clean(svg);
  const auto cut = find(svg, "rect", {"bar", "clipped"});
  ASSERT_EQ(cut.size(), 1u);  // 1.8
  const auto axis = find(svg, "line", {"axis-line"});
  const double plot_top = std::stod(attr(axis.at(1), "y1"));
  for (const pt::ptree& bar : find(svg, "rect", {"bar"})) EXPECT_GE(std::stod(attr(bar, "y")), plot_top - 1e-9);
  EXPECT_DOUBLE_EQ(std::stod(attr(cut[0], "y")), plot_top);
  EXPECT_EQ(count(svg, "polygon", {"clip-mark"}), 1u);
  EXPECT_EQ(count(svg, "line", {"paper"}), 0u);  // both paper values above 1.5: left out, and said so
  EXPECT_TRUE(contains_text(svg, "1 bar outside the y range 0 to 1.5"));
  EXPECT_TRUE(contains_text(svg, "2 reference values"));
}

TEST(MemoryChart, HostOrderGivenFirstThenFirstAppearance) {
  MemoryChart c = memory_chart(16 * GiB);
  c.runs[1].devices.push_back({"gpu2", 1 * GiB, 16 * GiB});
  c.host_order = {"gpu1", "gpu0", "not-drawn"};
  const std::string svg = memory_chart_svg(c);
  std::vector<std::string> labels;
  for (const pt::ptree& t : find(svg, "text", {"group-label"})) labels.push_back(t.data());
  EXPECT_EQ(labels, (std::vector<std::string>{"gpu1", "gpu0", "gpu2"}));
}

TEST(MemoryChart, ManyHostsWrapIntoRowsNoWiderThanAScreen) {
  MemoryChart c;
  c.title = "Peak memory";
  for (int r = 0; r < 3; ++r) {
    MemoryRun run{"run " + std::to_string(r), {}};
    for (int h = 0; h < 32; ++h) run.devices.push_back({"s0-gpu" + std::to_string(h), (1 + h % 5) * GiB, 16 * GiB});
    c.runs.push_back(run);
  }
  c.y_max = 4 * GiB;
  const std::string svg = memory_chart_svg(c);
  expect_clean(svg);
  EXPECT_LE(svg_width(svg), max_chart_width);
  EXPECT_EQ(count(svg, "g", {"group"}), 32u);
  EXPECT_EQ(count(svg, "rect", {"bar"}), 96u);
  EXPECT_EQ(count(svg, "rect", {"bar", "clipped"}), 3u * 6);  // 5 GiB hosts: h % 5 == 4, 6 of 32
  EXPECT_EQ(count(svg, "line", {"capacity"}), 0u);            // 16 GiB: above the range
  EXPECT_GE(count(svg, "line", {"axis-line"}), 4u);           // two rows or more
}

TEST(Charts, EveryKindDeterministicAndClean) {
  EXPECT_EQ(line_chart_svg(throughput_chart()), line_chart_svg(throughput_chart()));
  LineChart other = throughput_chart();
  other.panels[0].series[0].points[1].y += 1;
  EXPECT_NE(line_chart_svg(throughput_chart()), line_chart_svg(other));

  const std::vector<std::function<std::string()>> kinds = {
      [] { return bar_chart_svg(speedup_chart()); },
      [] { return memory_chart_svg(memory_chart(32 * GiB)); },
      [] {
        BubbleChart c;
        c.measured.push_back(series("a", {1, 2}, {0.5, 0.3}));
        c.closed_form.push_back(series("a", {1, 2}, {0.5, 0.3}));
        return bubble_chart_svg(c);
      },
      [] {
        Heatmap h;
        h.x_values = {"1", "2"};
        h.y_values = {"a"};
        h.cells = {{{1.0, false, ""}, {2.0, true, ""}}};
        return heatmap_svg(h);
      },
      [] {
        ParetoChart c;
        c.series = {Series{"a", {{GiB, 5, false, ""}, {2 * GiB, 6, true, ""}}}};
        c.capacity_bytes = 1.5 * GiB;
        return pareto_chart_svg(c);
      },
      [] {
        ScalingChart c;
        c.series.push_back(series("a", {1, 2, 4}, {1, 1.8, 3}));
        return scaling_chart_svg(c);
      },
  };
  for (const auto& kind : kinds) {
    const std::string svg = kind();
    expect_clean(svg);
    EXPECT_EQ(svg, kind());
    EXPECT_EQ(svg.rfind("<svg ", 0), 0u);  // no XML declaration: inlines in HTML
  }
}

}  // namespace
}  // namespace pipegrid::charts
