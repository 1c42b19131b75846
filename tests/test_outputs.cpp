// Output formats of a timeline: SVG Gantt chart, Chrome trace JSON, CSV.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/timeline.hpp"
#include "render/chrome_trace.hpp"
#include "render/svg_text.hpp"
#include "render/timeline_csv.hpp"
#include "render/timeline_svg.hpp"

namespace pipegrid {
namespace {

TimelineRecord compute(const std::string& host, int stage, const char* action, int micro, double start, double end,
                       int mini = 0, int stream = 0) {
  return {host, stream, stage, action, micro, mini, start, end, 0, "", 0};
}
TimelineRecord transfer(const std::string& from, const std::string& to, int stage, const char* action, int micro,
                        double start, double end, double bytes = 1000) {
  return {from, 0, stage, action, micro, 0, start, end, bytes, to, 0};
}

TimelineRecord allreduce(const std::string& from, const std::string& next, int stage, int layer, int round, double start,
                         double end, double bytes = 4096) {
  return {from, 0, stage, "ALLREDUCE", layer, round, start, end, bytes, next, 0};
}
TimelineRecord with_memory(TimelineRecord record, double bytes) {
  record.memory_bytes = bytes;
  return record;
}

/// GPipe on `hosts` devices with `micro` micro-batches, F = f, B = 2f,
/// transfers of f/4 after every forward and backward.
Timeline gpipe(int hosts, int micro, double f) {
  Timeline timeline;
  for (int h = 0; h < hosts; ++h) timeline.hosts.push_back("gpu" + std::to_string(h));
  const double s = f / 4;
  std::vector<double> busy(hosts, 0);
  std::vector<std::vector<double>> done(hosts, std::vector<double>(micro, 0));
  for (int m = 0; m < micro; ++m)
    for (int h = 0; h < hosts; ++h) {
      const double start = std::max(busy[h], h == 0 ? 0.0 : done[h - 1][m] + s);
      busy[h] = done[h][m] = start + f;
      timeline.records.push_back(compute(timeline.hosts[h], h, "F", m, start, start + f));
      if (h + 1 < hosts)
        timeline.records.push_back(transfer(timeline.hosts[h], timeline.hosts[h + 1], h, "SEND_F", m, start + f, start + f + s));
    }
  for (int m = 0; m < micro; ++m)
    for (int h = hosts - 1; h >= 0; --h) {
      const double start = std::max(busy[h], h == hosts - 1 ? 0.0 : done[h + 1][m] + s);
      busy[h] = done[h][m] = start + 2 * f;
      timeline.records.push_back(compute(timeline.hosts[h], h, "B", m, start, start + 2 * f));
      if (h > 0)
        timeline.records.push_back(transfer(timeline.hosts[h], timeline.hosts[h - 1], h, "SEND_B", m, start + 2 * f,
                                            start + 2 * f + s));
    }
  return timeline;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

/// Checks that every tag is closed in order, attribute values are quoted and
/// every '&' starts a known entity; returns "" when fine, else what is wrong.
std::string xml_problem(const std::string& text) {
  std::vector<std::string> open;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '&') {
      static const std::vector<std::string> entities = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
      bool known = false;
      for (const std::string& entity : entities) known = known || text.compare(i, entity.size(), entity) == 0;
      if (!known) return "bare & at " + std::to_string(i);
      ++i;
      continue;
    }
    if (text[i] == '>') return "stray > at " + std::to_string(i);
    if (text[i] != '<') {
      ++i;
      continue;
    }
    // A tag: find its end, skipping quoted attribute values.
    std::size_t j = i + 1;
    char quote = 0;
    for (; j < text.size(); ++j) {
      if (quote) {
        if (text[j] == quote) quote = 0;
        else if (text[j] == '<') return "< inside an attribute at " + std::to_string(j);
      } else if (text[j] == '"' || text[j] == '\'') {
        quote = text[j];
      } else if (text[j] == '>') {
        break;
      }
    }
    if (j == text.size()) return "unterminated tag at " + std::to_string(i);
    const std::string tag = text.substr(i + 1, j - i - 1);
    if (tag.empty()) return "empty tag at " + std::to_string(i);
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "unexpected </" + name + "> at " + std::to_string(i);
      open.pop_back();
    } else if (tag[0] != '?' && tag[0] != '!' && tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \t\n")));
    }
    i = j + 1;
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  return "";
}

/// Text contents of the <text> elements inside the first <g class="NAME"> group.
std::vector<std::string> group_texts(const std::string& svg, const std::string& name) {
  std::vector<std::string> texts;
  const std::size_t begin = svg.find("<g class=\"" + name + "\"");
  if (begin == std::string::npos) return texts;
  const std::size_t end = svg.find("</g>", begin);
  for (std::size_t at = svg.find("<text", begin); at != std::string::npos && at < end; at = svg.find("<text", at + 1)) {
    const std::size_t content = svg.find('>', at) + 1;
    texts.push_back(svg.substr(content, svg.find("</text>", content) - content));
  }
  return texts;
}

/// The value of attribute `name` in the first element containing `marker`.
std::string attribute_after(const std::string& svg, const std::string& marker, const std::string& name) {
  const std::size_t at = svg.find(marker);
  if (at == std::string::npos) return "";
  const std::size_t value = svg.find(name + "=\"", at);
  if (value == std::string::npos) return "";
  const std::size_t begin = value + name.size() + 2;
  return svg.substr(begin, svg.find('"', begin) - begin);
}

/// The value of attribute `name` in every element containing `marker`, in order.
std::vector<std::string> attributes_of(const std::string& svg, const std::string& marker, const std::string& name) {
  std::vector<std::string> values;
  for (std::size_t at = svg.find(marker); at != std::string::npos; at = svg.find(marker, at + 1)) {
    const std::size_t element_end = svg.find('>', at);
    const std::size_t value = svg.find(" " + name + "=\"", svg.rfind('<', at));
    if (value == std::string::npos || value > element_end) continue;
    const std::size_t begin = value + name.size() + 3;
    values.push_back(svg.substr(begin, svg.find('"', begin) - begin));
  }
  return values;
}

/// "x1,y1 x2,y2 ..." -> {{x1, y1}, {x2, y2}, ...}
std::vector<std::pair<double, double>> parse_points(const std::string& text) {
  std::vector<std::pair<double, double>> points;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t comma = text.find(',', at);
    std::size_t end = text.find(' ', comma);
    if (end == std::string::npos) end = text.size();
    points.push_back({std::stod(text.substr(at, comma - at)), std::stod(text.substr(comma + 1, end - comma - 1))});
    at = end + 1;
  }
  return points;
}

// ---------------------------------------------------------------------------
// SVG

TEST(Svg, IsWellFormedStandaloneSvg) {
  const std::string svg = timeline_to_svg(gpipe(4, 8, 1e-3), {"GPipe", true});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("version=\"1.1\""), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "<svg"), 1u);
  EXPECT_NE(svg.find(">GPipe</text>"), std::string::npos);
}

TEST(Svg, XmlCheckerRejectsBrokenDocuments) {
  // The checker used above must be able to fail.
  EXPECT_NE(xml_problem("<svg><g></svg>"), "");
  EXPECT_NE(xml_problem("<svg><text>a & b</text></svg>"), "");
  EXPECT_NE(xml_problem("<svg><text>a < b</text></svg>"), "");
  EXPECT_EQ(xml_problem("<svg><text x=\"1\">a &amp; b</text><rect/></svg>"), "");
}

TEST(Svg, OneBoxPerComputeRecordWithItsColourClass) {
  Timeline timeline = gpipe(3, 5, 1.0);
  timeline.records.push_back(compute("gpu1", 1, "R", 0, 40, 41));
  timeline.records.push_back(compute("gpu1", 1, "R", 1, 41, 42));
  const std::string svg = timeline_to_svg(timeline, {"t", true});
  EXPECT_EQ(count(svg, "class=\"box F\""), 15u);
  EXPECT_EQ(count(svg, "class=\"box B\""), 15u);
  EXPECT_EQ(count(svg, "class=\"box R\""), 2u);
  EXPECT_EQ(count(svg, "class=\"box "), 32u);
  EXPECT_EQ(count(svg, "class=\"bar SEND_F\""), 10u);
  EXPECT_EQ(count(svg, "class=\"bar SEND_B\""), 10u);
  const std::string forward = attribute_after(svg, "class=\"box F\"", "fill");
  const std::string backward = attribute_after(svg, "class=\"box B\"", "fill");
  const std::string recompute = attribute_after(svg, "class=\"box R\"", "fill");
  EXPECT_FALSE(forward.empty());
  EXPECT_NE(forward, backward);
  EXPECT_NE(forward, recompute);
  EXPECT_NE(backward, recompute);
  // Every F box has the same colour (mini-batch 0 only here).
  EXPECT_EQ(count(svg, "fill=\"" + forward + "\""), 15u + 1u /* legend swatch */);
  // The legend names the three kinds of compute and the transfers.
  EXPECT_NE(svg.find("forward (F)"), std::string::npos);
  EXPECT_NE(svg.find("backward (B)"), std::string::npos);
  EXPECT_NE(svg.find("recompute (R)"), std::string::npos);
  EXPECT_NE(svg.find("SEND_F"), std::string::npos);
}

TEST(Svg, NoTransferLaneWhenTransfersAreHidden) {
  const std::string svg = timeline_to_svg(gpipe(3, 4, 1.0), {"t", false});
  EXPECT_EQ(count(svg, "class=\"bar "), 0u);
  EXPECT_EQ(count(svg, "class=\"box "), 24u);
  EXPECT_EQ(xml_problem(svg), "");
}

TEST(Svg, BoxesLabelledWithMicroBatchNumbers) {
  Timeline timeline;
  timeline.hosts = {"a"};
  for (int m = 0; m < 4; ++m) timeline.records.push_back(compute("a", 0, "F", m, m, m + 1));
  timeline.records.push_back(compute("a", 0, "F", 7, 4, 5, 1));  // mini-batch 1
  timeline.records.push_back(compute("a", 0, "B", 9, 5, 5.0001));  // far too narrow for a label
  const std::string svg = timeline_to_svg(timeline, {"", false});
  const std::vector<std::string> labels = group_texts(svg, "labels");
  EXPECT_EQ(labels, (std::vector<std::string>{"0", "1", "2", "3", "7@1"}));
  // Mini-batch 1 gets its own shade.
  const std::size_t odd = svg.find("F7@1");
  ASSERT_NE(odd, std::string::npos);
  const std::size_t odd_box = svg.rfind("<rect", odd);
  EXPECT_NE(attribute_after(svg.substr(odd_box), "<rect", "fill"), attribute_after(svg, "class=\"box F\"", "fill"));
}

TEST(Svg, LabelsNeverOverlap) {
  // Boxes on one stream that overlap each other (a malformed timeline): the
  // second label would sit on the first one and must be left out.
  Timeline timeline;
  timeline.hosts = {"a"};
  timeline.records.push_back(compute("a", 0, "F", 11, 0, 10));
  timeline.records.push_back(compute("a", 0, "F", 12, 0.1, 10.1));
  const std::string svg = timeline_to_svg(timeline, {"", false});
  EXPECT_EQ(group_texts(svg, "labels"), (std::vector<std::string>{"11"}));
}

TEST(Svg, EscapesXmlInHostNamesAndTitle) {
  Timeline timeline;
  timeline.hosts = {"a<b>&\"c\""};
  timeline.records.push_back(compute("a<b>&\"c\"", 0, "F", 0, 0, 1));
  timeline.records.push_back(transfer("a<b>&\"c\"", "d&e", 0, "SEND_F", 0, 1, 2));
  const std::string svg = timeline_to_svg(timeline, {"x & y <z> \"q\"", true});
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("a&lt;b&gt;&amp;&quot;c&quot;"), std::string::npos);
  EXPECT_NE(svg.find("x &amp; y &lt;z&gt; &quot;q&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("a<b>"), std::string::npos);
  EXPECT_EQ(svg.find("<z>"), std::string::npos);
}

TEST(Svg, TimeUnitFollowsTheSpan) {
  auto unit_for = [](double end) {
    Timeline timeline;
    timeline.hosts = {"a"};
    timeline.records.push_back(compute("a", 0, "F", 0, 0, end / 2));
    timeline.records.push_back(compute("a", 0, "B", 0, end / 2, end));
    const std::string svg = timeline_to_svg(timeline, {"", false});
    const std::size_t at = svg.find("time (");
    return at == std::string::npos ? std::string() : svg.substr(at, svg.find(')', at) + 1 - at);
  };
  // The ticks are numbers in that unit: the last one is near the end of the span.
  auto last_tick = [](double end) {
    Timeline timeline;
    timeline.hosts = {"a"};
    timeline.records.push_back(compute("a", 0, "F", 0, 0, end));
    std::vector<std::string> ticks = group_texts(timeline_to_svg(timeline, {"", false}), "axis");
    return ticks.size() < 2 ? -1.0 : std::stod(ticks[ticks.size() - 2]);
  };
  EXPECT_GE(last_tick(0.034), 0.034e3 * 0.6);
  EXPECT_LE(last_tick(0.034), 0.034e3 * 1.02);
  EXPECT_GE(last_tick(50e-6), 50 * 0.6);
  EXPECT_LE(last_tick(50e-6), 50 * 1.02);
  EXPECT_GE(last_tick(40), 40 * 0.6);
  EXPECT_LE(last_tick(40), 40 * 1.02);
  EXPECT_EQ(unit_for(40), "time (s)");
  EXPECT_EQ(unit_for(3.5), "time (s)");
  EXPECT_EQ(unit_for(0.034), "time (ms)");
  EXPECT_EQ(unit_for(0.0025), "time (ms)");
  EXPECT_EQ(unit_for(50e-6), "time (us)");
}

TEST(Svg, AxisTicksAreRoundAndEvenlySpaced) {
  for (double end : {0.0346, 7.0, 123.0, 2.2e-5}) {
    Timeline timeline;
    timeline.hosts = {"a"};
    timeline.records.push_back(compute("a", 0, "F", 0, 0, end));
    const std::string svg = timeline_to_svg(timeline, {"", false});
    std::vector<std::string> ticks = group_texts(svg, "axis");
    ASSERT_FALSE(ticks.empty());
    ticks.pop_back();  // the axis title
    ASSERT_GE(ticks.size(), 3u) << end;
    EXPECT_EQ(std::stod(ticks[0]), 0.0) << end;
    const double step = std::stod(ticks[1]) - std::stod(ticks[0]);
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    EXPECT_TRUE(std::fabs(mantissa - 1) < 1e-6 || std::fabs(mantissa - 2) < 1e-6 || std::fabs(mantissa - 5) < 1e-6)
        << "step " << step << " for span " << end;
    for (std::size_t i = 1; i < ticks.size(); ++i)
      EXPECT_NEAR(std::stod(ticks[i]) - std::stod(ticks[i - 1]), step, step * 1e-6) << ticks[i];
    EXPECT_LE(ticks.size(), 30u);
  }
}

TEST(Svg, RowsFollowHostOrderThenStrayHosts) {
  Timeline timeline;
  timeline.hosts = {"zeta", "alpha", "idle"};
  timeline.records.push_back(compute("stray", 5, "F", 0, 0, 1));
  timeline.records.push_back(compute("alpha", 1, "F", 0, 1, 2));
  timeline.records.push_back(compute("zeta", 0, "F", 0, 2, 3));
  const std::string svg = timeline_to_svg(timeline, {"", true});
  std::vector<std::string> hosts;
  for (std::size_t at = svg.find("class=\"host\""); at != std::string::npos; at = svg.find("class=\"host\"", at + 1)) {
    const std::size_t content = svg.find('>', at) + 1;
    hosts.push_back(svg.substr(content, svg.find('<', content) - content));
  }
  EXPECT_EQ(hosts, (std::vector<std::string>{"zeta", "alpha", "idle", "stray"}));
  EXPECT_NE(svg.find(">stage 5</text>"), std::string::npos);
  EXPECT_NE(svg.find(">stage 1</text>"), std::string::npos);
}

TEST(Svg, StreamsOfOneHostAreSubRows) {
  Timeline timeline;
  timeline.hosts = {"a"};
  timeline.records.push_back(compute("a", 0, "F", 0, 0, 1, 0, 0));
  timeline.records.push_back(compute("a", 0, "B", 0, 0, 1, 0, 1));
  const std::string svg = timeline_to_svg(timeline, {"", false});
  const std::string y_forward = attribute_after(svg, "class=\"box F\"", "y");
  const std::string y_backward = attribute_after(svg, "class=\"box B\"", "y");
  ASSERT_FALSE(y_forward.empty());
  EXPECT_LT(std::stod(y_forward), std::stod(y_backward));
}

TEST(Svg, IsDeterministic) {
  const Timeline timeline = gpipe(4, 8, 1e-3);
  const Timeline copy = timeline;
  EXPECT_EQ(timeline_to_svg(timeline, {"same", true}), timeline_to_svg(copy, {"same", true}));
  EXPECT_NE(timeline_to_svg(timeline, {"same", true}), timeline_to_svg(timeline, {"other", true}));
}

TEST(Svg, EmptyTimelineGivesAFrameAndANote) {
  const std::string svg = timeline_to_svg(Timeline{}, {"nothing", true});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("no records"), std::string::npos);
  EXPECT_NE(svg.find("class=\"frame\""), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"box "), 0u);

  Timeline hosts_only;
  hosts_only.hosts = {"a", "b"};
  const std::string rows = timeline_to_svg(hosts_only, {"", false});
  EXPECT_EQ(xml_problem(rows), "");
  EXPECT_NE(rows.find("no records"), std::string::npos);
  EXPECT_NE(rows.find(">b</text>"), std::string::npos);
}

TEST(Svg, HugeTimelineStillDrawsEveryBoxButFewLabels) {
  Timeline timeline;
  for (int h = 0; h < 8; ++h) timeline.hosts.push_back(std::string(1, 'h') += std::to_string(h));  // not "h" + ...: GCC 12 -Wrestrict
  for (int h = 0; h < 8; ++h)
    for (int m = 0; m < 1000; ++m) {
      const double start = h * 1e-6 + m * 3e-6;
      timeline.records.push_back(compute(timeline.hosts[h], h, "F", m, start, start + 1e-6));
      timeline.records.push_back(compute(timeline.hosts[h], h, "B", m, start + 1e-6, start + 3e-6));
    }
  const std::string svg = timeline_to_svg(timeline, {"huge", false});
  EXPECT_EQ(count(svg, "class=\"box "), 16000u);
  EXPECT_EQ(group_texts(svg, "labels").size(), 0u);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("time (ms)"), std::string::npos);
}

TEST(Svg, NonFiniteTimesAreSkippedNotFatal) {
  Timeline timeline;
  timeline.hosts = {"a"};
  timeline.records.push_back(compute("a", 0, "F", 0, 0, 1));
  timeline.records.push_back(compute("a", 0, "F", 1, 1, std::nan("")));
  const std::string svg = timeline_to_svg(timeline, {"", false});
  EXPECT_EQ(count(svg, "class=\"box F\""), 1u);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(xml_problem(svg), "");
}

TEST(Svg, AllReduceBarsHaveTheirClassColourLegendAndTooltip) {
  Timeline timeline = gpipe(3, 2, 1.0);
  const auto sends = static_cast<std::size_t>(std::count_if(timeline.records.begin(), timeline.records.end(),
                                                            [](const TimelineRecord& r) { return r.kind() == RecordKind::Transfer; }));
  ASSERT_EQ(sends, 8u);
  // Whole-stage all-reduce parts overlapping the last sends, and per-layer
  // parts of round 3 on gpu1.
  for (int h = 0; h < 3; ++h)
    timeline.records.push_back(allreduce("gpu" + std::to_string(h), "gpu" + std::to_string((h + 1) % 3), h, -1, 0, 8, 14));
  timeline.records.push_back(allreduce("gpu1", "gpu2", 1, 12, 3, 9, 10, 3 * 1048576.0));
  timeline.records.push_back(allreduce("gpu1", "gpu2", 1, 11, 3, 10, 11));
  const std::string svg = timeline_to_svg(timeline, {"t", true});
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "class=\"bar ALLREDUCE\""), 5u);
  EXPECT_EQ(count(svg, "class=\"bar "), sends + 5);
  const std::string colour = attribute_after(svg, "class=\"bar ALLREDUCE\"", "fill");
  EXPECT_NE(colour, attribute_after(svg, "class=\"bar SEND_F\"", "fill"));
  EXPECT_NE(colour, attribute_after(svg, "class=\"bar SEND_B\"", "fill"));
  // The legend names it with a swatch of its colour.
  const std::vector<std::string> legend = group_texts(svg, "legend");
  EXPECT_NE(std::find(legend.begin(), legend.end(), "gradient all-reduce (ALLREDUCE)"), legend.end());
  EXPECT_EQ(count(svg, "fill=\"" + colour + "\""), 5u + 1u);
  // Tooltips name the round, the layer (or the whole stage) and the bytes.
  EXPECT_NE(svg.find("gpu1 all-reduce round 3, layer or bucket 12, stage 1: 9 - 10 s, sends 3.0 MiB (3.14573e+06 bytes) "
                     "to gpu2"),
            std::string::npos);
  EXPECT_NE(svg.find("gpu0 all-reduce round 0, whole stage, stage 0: 8 - 14 s, sends 4.0 KiB (4096 bytes) to gpu1"),
            std::string::npos);

  // Without all-reduce records the legend has no such item.
  const std::vector<std::string> plain = group_texts(timeline_to_svg(gpipe(3, 2, 1.0), {"t", true}), "legend");
  EXPECT_EQ(std::find(plain.begin(), plain.end(), "gradient all-reduce (ALLREDUCE)"), plain.end());

  // The distributed optimizer's reduce-scatter and all-gather: colours of
  // their own, a legend item each, their kind in the tooltip; the tied
  // embedding's all-reduce (micro-batch -2) named.
  Timeline zero1 = gpipe(3, 2, 1.0);
  TimelineRecord scatter = allreduce("gpu0", "gpu1", 0, -1, 0, 8, 9);
  scatter.action = "REDUCE_SCATTER";
  TimelineRecord gather = allreduce("gpu0", "gpu1", 0, -1, 0, 9, 10);
  gather.action = "ALLGATHER";
  zero1.records.push_back(scatter);
  zero1.records.push_back(gather);
  zero1.records.push_back(allreduce("gpu0", "gpu2", 0, -2, 0, 10, 11));
  const std::string both = timeline_to_svg(zero1, {"t", true});
  EXPECT_EQ(xml_problem(both), "");
  const std::vector<std::string> items = group_texts(both, "legend");
  for (const char* item : {"gradient reduce-scatter (REDUCE_SCATTER)", "parameter all-gather (ALLGATHER)",
                           "gradient all-reduce (ALLREDUCE)"})
    EXPECT_NE(std::find(items.begin(), items.end(), item), items.end()) << item;
  const std::string scatter_colour = attribute_after(both, "class=\"bar REDUCE_SCATTER\"", "fill");
  const std::string gather_colour = attribute_after(both, "class=\"bar ALLGATHER\"", "fill");
  EXPECT_NE(scatter_colour, gather_colour);
  EXPECT_NE(scatter_colour, attribute_after(both, "class=\"bar ALLREDUCE\"", "fill"));
  EXPECT_NE(both.find("gpu0 reduce-scatter round 0, whole stage, stage 0: 8 - 9 s"), std::string::npos);
  EXPECT_NE(both.find("gpu0 all-gather round 0, whole stage, stage 0: 9 - 10 s"), std::string::npos);
  EXPECT_NE(both.find("gpu0 all-reduce round 0, tied word embedding, stage 0: 10 - 11 s"), std::string::npos);
}

TEST(Svg, AllReduceHasLanesUnderTheSendsAndOverlapsStack) {
  Timeline timeline;
  timeline.hosts = {"a"};
  timeline.records.push_back(compute("a", 0, "B", 0, 0, 1));
  timeline.records.push_back(transfer("a", "b", 0, "SEND_B", 0, 1, 3));
  timeline.records.push_back(allreduce("a", "b", 0, 3, 0, 1, 4));   // overlaps the send
  timeline.records.push_back(allreduce("a", "b", 0, 2, 0, 2, 5));   // overlaps the first part too
  timeline.records.push_back(allreduce("a", "b", 0, 1, 0, 4.5, 6)); // after the first: its lane again
  const std::string svg = timeline_to_svg(timeline, {"", true});
  const std::vector<std::string> send_y = attributes_of(svg, "class=\"bar SEND_B\"", "y");
  const std::vector<std::string> allreduce_y = attributes_of(svg, "class=\"bar ALLREDUCE\"", "y");
  ASSERT_EQ(send_y.size(), 1u);
  ASSERT_EQ(allreduce_y.size(), 3u);
  EXPECT_LT(std::stod(send_y[0]), std::stod(allreduce_y[0]));
  EXPECT_LT(std::stod(allreduce_y[0]), std::stod(allreduce_y[1]));
  EXPECT_EQ(allreduce_y[2], allreduce_y[0]);
  // All bars lie inside the host's row, above the memory strip (none here).
  const double plot_bottom = std::stod(attribute_after(svg, "class=\"frame\"", "y")) +
                             std::stod(attribute_after(svg, "class=\"frame\"", "height"));
  EXPECT_LT(std::stod(allreduce_y[1]) + 5, plot_bottom);
}

TEST(Svg, MemoryStripPerDeviceWithPeakOnOneScale) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  Timeline timeline;
  timeline.hosts = {"a", "b", "idle"};
  // Out of time order on purpose; a's peak is on its all-reduce record.
  timeline.records.push_back(with_memory(compute("a", 0, "B", 0, 2, 3), 10.85 * kGiB));
  timeline.records.push_back(with_memory(compute("a", 0, "F", 0, 0, 1), 5.425 * kGiB));
  timeline.records.push_back(with_memory(allreduce("a", "b", 0, -1, 0, 1, 2), 16.275 * kGiB));
  timeline.records.push_back(with_memory(compute("b", 1, "F", 0, 1, 2), 21.7 * kGiB));
  timeline.records.push_back(with_memory(transfer("b", "a", 1, "SEND_B", 0, 2, 4), 512 * 1024.0 * 1024.0));
  const std::string svg = timeline_to_svg(timeline, {"", true});
  EXPECT_EQ(xml_problem(svg), "");
  // One line and one area per device with records; none for the idle one.
  EXPECT_EQ(count(svg, "class=\"memory-line\""), 2u);
  EXPECT_EQ(count(svg, "class=\"memory-area\""), 2u);
  EXPECT_EQ(group_texts(svg, "memory-peaks"), (std::vector<std::string>{"peak 16.3 GiB", "peak 21.7 GiB"}));
  const std::vector<std::string> legend = group_texts(svg, "legend");
  EXPECT_NE(std::find(legend.begin(), legend.end(), "memory (strip top 21.7 GiB)"), legend.end());

  // a: a step at each end time, in time order, held to the end of the run.
  const std::vector<std::string> lines = attributes_of(svg, "class=\"memory-line\"", "points");
  const std::vector<std::string> areas = attributes_of(svg, "class=\"memory-area\"", "d");
  ASSERT_EQ(lines.size(), 2u);
  ASSERT_EQ(areas.size(), 2u);
  const auto a = parse_points(lines[0]);
  const auto b = parse_points(lines[1]);
  ASSERT_EQ(a.size(), 6u) << lines[0];
  ASSERT_EQ(b.size(), 3u) << lines[1];
  auto base_of = [](const std::string& area) { return std::stod(area.substr(area.find(',') + 1)); };
  const double base_a = base_of(areas[0]), base_b = base_of(areas[1]);
  EXPECT_GT(base_b, base_a);  // b's strip is in the row below
  // Heights above the strip's zero are proportional to the bytes, with one
  // scale for every device: b's 21.7 GiB at the top, a's values below.
  const double top = base_b - b[0].second;  // 21.7 GiB
  EXPECT_GT(top, 10);
  EXPECT_NEAR(base_a - a[0].second, top * 5.425 / 21.7, 0.02);
  EXPECT_NEAR(base_a - a[2].second, top * 16.275 / 21.7, 0.02);
  EXPECT_NEAR(base_a - a[4].second, top * 10.85 / 21.7, 0.02);
  EXPECT_EQ(b[0].second, b[1].second);
  EXPECT_NEAR(base_b - b[2].second, top * 0.5 / 21.7, 0.02);
  // Steps: vertical at each end time, horizontal between.
  EXPECT_EQ(a[1].first, a[2].first);
  EXPECT_EQ(a[0].second, a[1].second);
  EXPECT_EQ(a[3].first, a[4].first);
  EXPECT_LT(a[0].first, a[1].first);
  EXPECT_LT(a[2].first, a[3].first);
  EXPECT_LT(a[4].first, a[5].first);
  // One time axis: both step at t = 2; a's last step (t = 3) is held to the
  // end of the run (t = 4), where b steps down.
  EXPECT_EQ(a[1].first, b[0].first);
  EXPECT_EQ(a[5].first, b[1].first);
  EXPECT_EQ(b[1].first, b[2].first);
}

TEST(Svg, MemoryCapacityLineAndLabel) {
  Timeline timeline;
  timeline.hosts = {"a", "b", "c"};
  timeline.records.push_back(with_memory(compute("a", 0, "F", 0, 0, 1), 3000));
  timeline.records.push_back(with_memory(compute("b", 1, "F", 0, 1, 2), 2048));
  timeline.records.push_back(with_memory(compute("c", 2, "F", 0, 2, 3), 1000));
  SvgOptions options;
  options.memory_capacity_bytes = {{"a", 2048}, {"b", 4096}, {"c", 1e9}, {"nobody", 10}};
  const std::string svg = timeline_to_svg(timeline, options);
  EXPECT_EQ(xml_problem(svg), "");
  // a and b get a line; c's capacity is far above every peak (it would
  // flatten the strips): in its label only.
  EXPECT_EQ(count(svg, "class=\"memory-capacity\""), 2u);
  EXPECT_EQ(group_texts(svg, "memory-peaks"),
            (std::vector<std::string>{"peak 2.9 KiB / 2.0 KiB", "peak 2.0 KiB / 4.0 KiB", "peak 1000 B / 953.7 MiB"}));
  EXPECT_EQ(count(svg, "class=\"memory-peak over-capacity\""), 1u);  // a only
  const std::vector<std::string> legend = group_texts(svg, "legend");
  EXPECT_NE(std::find(legend.begin(), legend.end(), "memory capacity"), legend.end());
  // The scale reaches b's capacity (the strip's top); a's capacity and b's
  // peak are at half of it.
  EXPECT_NE(std::find(legend.begin(), legend.end(), "memory (strip top 4.0 KiB)"), legend.end());
  const std::vector<std::string> y = attributes_of(svg, "class=\"memory-capacity\"", "y1");
  const std::vector<std::string> areas = attributes_of(svg, "class=\"memory-area\"", "d");
  ASSERT_EQ(y.size(), 2u);
  ASSERT_EQ(areas.size(), 3u);
  auto height_above_zero = [&](std::size_t row, const std::string& line_y) {
    return std::stod(areas[row].substr(areas[row].find(',') + 1)) - std::stod(line_y);
  };
  EXPECT_NEAR(height_above_zero(0, y[0]), height_above_zero(1, y[1]) / 2, 0.02);
  const auto b = parse_points(attributes_of(svg, "class=\"memory-line\"", "points")[1]);
  EXPECT_NEAR(b[0].second, std::stod(y[1]) + height_above_zero(1, y[1]) / 2, 0.02);

  // Without capacities: no line, no legend item, labels with the peak only.
  const std::string plain = timeline_to_svg(timeline, {"", true});
  EXPECT_EQ(count(plain, "memory-capacity"), 0u);
  EXPECT_EQ(group_texts(plain, "memory-peaks"), (std::vector<std::string>{"peak 2.9 KiB", "peak 2.0 KiB", "peak 1000 B"}));
  const std::vector<std::string> plain_legend = group_texts(plain, "legend");
  EXPECT_EQ(std::find(plain_legend.begin(), plain_legend.end(), "memory capacity"), plain_legend.end());
}

TEST(Svg, AReserveMakesTheLineAndTheLabelTheUsableMemory) {
  // b peaks at 2048 B: under its 4096 B capacity, over its usable 4096 -
  // 2560 = 1536 B (the out-of-memory verdict's limit), so its label is red.
  Timeline timeline;
  timeline.hosts = {"a", "b"};
  timeline.records.push_back(with_memory(compute("a", 0, "F", 0, 0, 1), 1000));
  timeline.records.push_back(with_memory(compute("b", 1, "F", 0, 1, 2), 2048));
  SvgOptions options;
  options.memory_capacity_bytes = {{"a", 2048}, {"b", 4096}};
  options.memory_reserve_bytes = {{"a", 0}, {"b", 2560}};
  const std::string svg = timeline_to_svg(timeline, options);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(group_texts(svg, "memory-peaks"), (std::vector<std::string>{"peak 1000 B / 2.0 KiB", "peak 2.0 KiB / 1.5 KiB usable"}));
  EXPECT_EQ(count(svg, "class=\"memory-peak over-capacity\""), 1u);
  const std::vector<std::string> legend = group_texts(svg, "legend");
  EXPECT_NE(std::find(legend.begin(), legend.end(), "usable memory (capacity - reserve)"), legend.end());
  EXPECT_EQ(std::find(legend.begin(), legend.end(), "memory capacity"), legend.end());
}

TEST(Svg, NoMemoryStripWhenHiddenOrAllZero) {
  Timeline timeline = gpipe(3, 2, 1.0);
  const std::string zero = timeline_to_svg(timeline, {"t", true});
  double bytes = 0;
  for (TimelineRecord& record : timeline.records) record.memory_bytes = bytes += 1e6;
  SvgOptions hidden{"t", true};
  hidden.show_memory = false;
  SvgOptions shown{"t", true};
  const std::string off = timeline_to_svg(timeline, hidden);
  const std::string on = timeline_to_svg(timeline, shown);
  for (const std::string* svg : {&zero, &off}) {
    EXPECT_EQ(count(*svg, "memory-line"), 0u);
    EXPECT_EQ(count(*svg, "memory-area"), 0u);
    EXPECT_EQ(count(*svg, "memory-peaks"), 0u);
    EXPECT_EQ(count(*svg, "memory (strip top"), 0u);
  }
  // No strip takes no room: the same picture as with no memory at all.
  EXPECT_EQ(off, zero);
  EXPECT_EQ(count(on, "class=\"memory-line\""), 3u);
  EXPECT_EQ(xml_problem(on), "");
  EXPECT_EQ(on, timeline_to_svg(Timeline(timeline), shown));  // deterministic
  EXPECT_GT(std::stod(attribute_after(on, "<svg", "height")), std::stod(attribute_after(off, "<svg", "height")) + 3 * 20);
}

/// The picture's width and the right edge of its plot frame (px).
double svg_width(const std::string& svg) { return std::stod(attribute_after(svg, "<svg", "width")); }
double frame_right(const std::string& svg) {
  return std::stod(attribute_after(svg, "class=\"frame\"", "x")) + std::stod(attribute_after(svg, "class=\"frame\"", "width"));
}
/// The right edge of the rightmost rect or line, the background excepted.
double rightmost_drawn(const std::string& svg) {
  double right = 0;
  for (std::size_t at = svg.find('<'); at != std::string::npos; at = svg.find('<', at + 1)) {
    const std::string tag = svg.substr(at, svg.find('>', at) - at);
    if (tag.rfind("<rect", 0) == 0 && tag.find("background") == std::string::npos)
      right = std::max(right, std::stod(attribute_after(tag, "<rect", "x")) + std::stod(attribute_after(tag, "<rect", "width")));
    else if (tag.rfind("<line", 0) == 0)
      right = std::max({right, std::stod(attribute_after(tag, "<line", "x1")), std::stod(attribute_after(tag, "<line", "x2"))});
  }
  return right;
}

TEST(SvgText, EstimatedWidthFollowsTheGlyphs) {
  EXPECT_DOUBLE_EQ(estimated_text_width("", 12), 0);
  // Wide glyphs count more than narrow ones, bold more than regular.
  EXPECT_GT(estimated_text_width("WWWW", 10), 2 * estimated_text_width("iiii", 10));
  EXPECT_GT(estimated_text_width("pipegrid", 16, true), estimated_text_width("pipegrid", 16));
  // DejaVu Sans Bold's W is wider than an em: no flat 0.6 em per character.
  EXPECT_GT(estimated_text_width("W", 100, true), 100);
  // Proportional to the font size; a UTF-8 sequence is one 1 em character.
  EXPECT_DOUBLE_EQ(estimated_text_width("abc", 20), 2 * estimated_text_width("abc", 10));
  EXPECT_DOUBLE_EQ(estimated_text_width("\xC3\xA9", 10), 10);
  EXPECT_DOUBLE_EQ(estimated_text_width("\x01", 10), estimated_text_width("?", 10));
}

TEST(Svg, CanvasFitsALongBoldTitleAndThePlotSpansIt) {
  // A title of wide capitals far wider than the plot would be with its boxes.
  std::string title = "WIDE MODEL NAME ON A VERY LONG PLATFORM PATH /SOME/DIRECTORY/";
  for (int k = 0; k < 3; ++k) title += title;
  const std::string svg = timeline_to_svg(gpipe(3, 2, 1.0), {title, true});
  const double width = svg_width(svg);
  EXPECT_GE(width, estimated_text_width(title, 16, true) + 2 * 16);
  // The title is centred, so it lies inside the picture on both sides.
  EXPECT_DOUBLE_EQ(std::stod(attribute_after(svg, "class=\"title\"", "x")), width / 2);
  // No empty margin on the right: the plot reaches the picture's right edge
  // (less room for the last tick label) and nothing is drawn beyond it.
  EXPECT_LE(width - frame_right(svg), 25);
  EXPECT_LE(rightmost_drawn(svg), width);
  EXPECT_LE(width - rightmost_drawn(svg), 25);
  EXPECT_EQ(xml_problem(svg), "");
}

TEST(Svg, RightMarginIsSmallForEveryKindOfPicture) {
  Timeline chunked;
  chunked.hosts = {"a"};
  for (int m = 0; m < 3; ++m) {
    chunked.records.push_back(compute("a", 0, "F", m, 2 * m, 2 * m + 1));
    chunked.records.push_back(compute("a", 2, "F", m, 2 * m + 1, 2 * m + 2));
  }
  SvgOptions grouped{"tp", true};
  grouped.tensor_parallel = 8;
  for (const std::string& svg : {timeline_to_svg(gpipe(4, 8, 1e-3), {"GPipe", true}),
                                 timeline_to_svg(gpipe(2, 200, 1e-3), {"", true}), timeline_to_svg(chunked, {"c", false}),
                                 timeline_to_svg(chunked, grouped)}) {
    EXPECT_LE(svg_width(svg) - frame_right(svg), 25);
    EXPECT_LE(rightmost_drawn(svg), svg_width(svg));
  }
}

TEST(Svg, ChunksOfADeviceAreShadedNotRelabelled) {
  // One device of stages 0 and 2 (two chunks), another of stages 1, 3 and 5.
  Timeline timeline;
  timeline.hosts = {"a", "b"};
  for (int m = 0; m < 2; ++m) {
    timeline.records.push_back(compute("a", 0, "F", m, 10 * m, 10 * m + 1));
    timeline.records.push_back(compute("a", 2, "F", m, 10 * m + 2, 10 * m + 3));
    timeline.records.push_back(compute("a", 2, "W", m, 10 * m + 4, 10 * m + 5));
    for (int stage : {1, 3, 5}) timeline.records.push_back(compute("b", stage, "F", m, 10 * m + stage, 10 * m + stage + 1));
  }
  const std::string svg = timeline_to_svg(timeline, {"", false});
  // Every box carries its micro-batch only, whichever its chunk and action.
  const std::vector<std::string> labels = group_texts(svg, "labels");
  EXPECT_EQ(labels.size(), 12u);
  for (const std::string& label : labels) EXPECT_TRUE(label == "0" || label == "1") << label;
  // The chunks differ by shade: 2 on a, 3 on b, and one shade per chunk.
  auto fills_of = [&](const std::string& host, int stage) {
    std::set<std::string> fills;
    const std::string tooltip = fmt::format("<title>{} F", host);
    for (std::size_t at = svg.find(tooltip); at != std::string::npos; at = svg.find(tooltip, at + 1)) {
      const std::size_t end = svg.find("</title>", at);
      if (svg.substr(at, end - at).find(fmt::format(" stage {}:", stage)) == std::string::npos) continue;
      fills.insert(attribute_after(svg.substr(svg.rfind("<rect", at)), "<rect", "fill"));
    }
    return fills;
  };
  EXPECT_EQ(fills_of("a", 0).size(), 1u);
  EXPECT_NE(fills_of("a", 0), fills_of("a", 2));
  std::set<std::string> b_fills;
  for (int stage : {1, 3, 5}) {
    EXPECT_EQ(fills_of("b", stage).size(), 1u);
    b_fills.insert(*fills_of("b", stage).begin());
  }
  EXPECT_EQ(b_fills.size(), 3u);
  // The legend says what the shades mean, with a swatch per chunk.
  const std::vector<std::string> legend = group_texts(svg, "legend");
  EXPECT_NE(std::find(legend.begin(), legend.end(), "chunk 0 to 2 of a device: its stages, lowest first"), legend.end());
  const std::vector<std::string> two_chunks = group_texts(timeline_to_svg(gpipe(2, 2, 1.0), {"", false}), "legend");
  EXPECT_EQ(std::count_if(two_chunks.begin(), two_chunks.end(), [](const std::string& t) { return t.find("chunk") != std::string::npos; }), 0);
  timeline.records.erase(std::remove_if(timeline.records.begin(), timeline.records.end(),
                                        [](const TimelineRecord& r) { return r.host == "b"; }),
                         timeline.records.end());
  timeline.hosts = {"a"};
  const std::vector<std::string> pair = group_texts(timeline_to_svg(timeline, {"", false}), "legend");
  EXPECT_NE(std::find(pair.begin(), pair.end(), "chunk 0, 1 of a device: its lower, higher stage"), pair.end());
  EXPECT_EQ(xml_problem(svg), "");
}

TEST(Svg, OddMiniBatchShadeIsInTheLegend) {
  Timeline timeline;
  timeline.hosts = {"a"};
  timeline.records.push_back(compute("a", 0, "F", 0, 0, 1, 0));
  const auto mentions = [](const std::string& svg) {
    const std::vector<std::string> legend = group_texts(svg, "legend");
    return std::find(legend.begin(), legend.end(), "even, odd mini-batch") != legend.end();
  };
  EXPECT_FALSE(mentions(timeline_to_svg(timeline, {"", false})));
  timeline.records.push_back(compute("a", 0, "F", 0, 1, 2, 1));
  EXPECT_TRUE(mentions(timeline_to_svg(timeline, {"", false})));
}

TEST(Svg, TensorParallelGroupsAreNotedUnderTheTitle) {
  SvgOptions options{"t", true};
  EXPECT_EQ(count(timeline_to_svg(gpipe(2, 2, 1.0), options), "tensor-parallel"), 0u);
  options.tensor_parallel = 4;
  const std::string svg = timeline_to_svg(gpipe(2, 2, 1.0), options);
  EXPECT_NE(svg.find(">each row is a tensor-parallel group of 4 devices, drawn as its first device; times and memory "
                     "are per member</text>"),
            std::string::npos);
  // Under the title, above the legend.
  const double note_y = std::stod(attribute_after(svg, "class=\"note tensor-parallel\"", "y"));
  EXPECT_GT(note_y, std::stod(attribute_after(svg, "class=\"title\"", "y")));
  EXPECT_LT(note_y, std::stod(attribute_after(svg, "<g class=\"legend\"", "y")));
  EXPECT_EQ(xml_problem(svg), "");
}

// ---------------------------------------------------------------------------
// Chrome trace

using Json = nlohmann::json;

TEST(ChromeTrace, OneProcessPerHostWithName) {
  Timeline timeline = gpipe(3, 2, 1e-3);
  timeline.records.push_back(compute("stray", 3, "F", 0, 0, 1e-3));
  const Json trace = Json::parse(timeline_to_chrome_trace(timeline));
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::map<int, std::string> names;
  for (const Json& event : trace["traceEvents"])
    if (event["ph"] == "M" && event["name"] == "process_name") {
      EXPECT_EQ(names.count(event["pid"].get<int>()), 0u);
      names[event["pid"].get<int>()] = event["args"]["name"].get<std::string>();
    }
  EXPECT_EQ(names, (std::map<int, std::string>{{1, "gpu0"}, {2, "gpu1"}, {3, "gpu2"}, {4, "stray"}}));
}

TEST(ChromeTrace, CompleteEventsInMicroseconds) {
  const Timeline timeline = gpipe(2, 3, 0.37e-3);
  const Json trace = Json::parse(timeline_to_chrome_trace(timeline));
  std::vector<Json> slices;
  for (const Json& event : trace["traceEvents"])
    if (event["ph"] == "X") slices.push_back(event);
  ASSERT_EQ(slices.size(), timeline.records.size());
  // Events come grouped by host; match each record to its event by name and host.
  std::map<std::string, int> pid_of = {{"gpu0", 1}, {"gpu1", 2}};
  for (const TimelineRecord& record : timeline.records) {
    const std::string name = record.action + std::to_string(record.micro_batch);
    auto match = std::find_if(slices.begin(), slices.end(), [&](const Json& event) {
      return event["name"] == name && event["pid"] == pid_of[record.host];
    });
    ASSERT_NE(match, slices.end()) << name;
    EXPECT_DOUBLE_EQ((*match)["ts"].get<double>(), record.start_s * 1e6) << name;
    EXPECT_DOUBLE_EQ((*match)["dur"].get<double>(), (record.end_s - record.start_s) * 1e6) << name;
    EXPECT_EQ((*match)["args"]["stage"].get<int>(), record.stage);
  }
}

TEST(ChromeTrace, OverlappingTransfersGoToDifferentCommunicationThreads) {
  Timeline timeline;
  timeline.hosts = {"mid"};
  timeline.records.push_back(compute("mid", 1, "F", 0, 0, 1));
  timeline.records.push_back(transfer("mid", "next", 1, "SEND_F", 0, 1, 3));
  timeline.records.push_back(transfer("mid", "prev", 1, "SEND_B", 0, 2, 4));
  timeline.records.push_back(transfer("mid", "next", 1, "SEND_F", 1, 5, 6));  // after both: first lane again
  const Json trace = Json::parse(timeline_to_chrome_trace(timeline));
  std::map<std::string, int> tid;
  std::map<int, std::string> thread_name;
  for (const Json& event : trace["traceEvents"]) {
    if (event["ph"] == "X") tid[event["name"].get<std::string>()] = event["tid"].get<int>();
    if (event["ph"] == "M" && event["name"] == "thread_name")
      thread_name[event["tid"].get<int>()] = event["args"]["name"].get<std::string>();
  }
  EXPECT_NE(tid["SEND_F0"], tid["SEND_B0"]);
  EXPECT_EQ(tid["SEND_F1"], tid["SEND_F0"]);
  EXPECT_NE(tid["F0"], tid["SEND_F0"]);
  EXPECT_EQ(thread_name[tid["F0"]], "compute");
  EXPECT_EQ(thread_name[tid["SEND_F0"]].rfind("communication", 0), 0u);
  EXPECT_EQ(thread_name[tid["SEND_B0"]].rfind("communication", 0), 0u);
}

TEST(ChromeTrace, MemoryCountersInTimeOrder) {
  Timeline timeline;
  timeline.hosts = {"a"};
  // Records out of time order on purpose.
  TimelineRecord late = compute("a", 0, "B", 0, 2, 3);
  late.memory_bytes = 10;
  TimelineRecord early = compute("a", 0, "F", 0, 0, 1);
  early.memory_bytes = 30;
  TimelineRecord middle = compute("a", 0, "F", 1, 1, 2);
  middle.memory_bytes = 50;
  timeline.records = {late, early, middle};
  const Json trace = Json::parse(timeline_to_chrome_trace(timeline));
  std::vector<double> times, bytes;
  for (const Json& event : trace["traceEvents"])
    if (event["ph"] == "C") {
      EXPECT_EQ(event["name"], "memory");
      times.push_back(event["ts"].get<double>());
      bytes.push_back(event["args"]["bytes"].get<double>());
    }
  EXPECT_EQ(times, (std::vector<double>{1e6, 2e6, 3e6}));
  EXPECT_EQ(bytes, (std::vector<double>{30, 50, 10}));
}

TEST(ChromeTrace, IsDeterministicAndEmptyIsValid) {
  const Timeline timeline = gpipe(3, 4, 1e-3);
  EXPECT_EQ(timeline_to_chrome_trace(timeline), timeline_to_chrome_trace(Timeline(timeline)));
  const Json empty = Json::parse(timeline_to_chrome_trace(Timeline{}));
  EXPECT_TRUE(empty["traceEvents"].is_array());
  EXPECT_TRUE(empty["traceEvents"].empty());
}

TEST(ChromeTrace, AllReduceEventsOnCommunicationThreads) {
  Timeline timeline;
  timeline.hosts = {"a", "b"};
  timeline.records.push_back(compute("a", 0, "B", 0, 0, 1));
  timeline.records.push_back(transfer("a", "prev", 0, "SEND_B", 0, 1, 3));
  timeline.records.push_back(allreduce("a", "b", 0, -1, 3, 2, 4, 5000));  // overlaps the send
  timeline.records.push_back(allreduce("b", "a", 1, 12, 3, 2, 4));
  const Json trace = Json::parse(timeline_to_chrome_trace(timeline));
  std::map<std::pair<int, int>, std::string> thread_name;
  std::map<std::string, Json> slice;
  for (const Json& event : trace["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "thread_name")
      thread_name[{event["pid"].get<int>(), event["tid"].get<int>()}] = event["args"]["name"].get<std::string>();
    if (event["ph"] == "X") slice[event["name"].get<std::string>()] = event;
  }
  ASSERT_EQ(slice.count("allreduce r3"), 1u);
  ASSERT_EQ(slice.count("allreduce layer 12 r3"), 1u);
  const Json& whole = slice["allreduce r3"];
  const Json& layer = slice["allreduce layer 12 r3"];
  EXPECT_EQ(whole["cat"], "ALLREDUCE");
  EXPECT_EQ(whole["pid"], 1);
  EXPECT_EQ(layer["pid"], 2);
  EXPECT_EQ(whole["args"]["round"], 3);
  EXPECT_TRUE(whole["args"]["layer"].is_null());
  EXPECT_EQ(layer["args"]["layer"], 12);
  EXPECT_EQ(whole["args"]["bytes"], 5000.0);
  EXPECT_EQ(whole["args"]["peer"], "b");
  EXPECT_DOUBLE_EQ(whole["ts"].get<double>(), 2e6);
  EXPECT_DOUBLE_EQ(whole["dur"].get<double>(), 2e6);
  auto thread_of = [&](const Json& event) { return thread_name[{event["pid"].get<int>(), event["tid"].get<int>()}]; };
  EXPECT_EQ(thread_of(whole).rfind("communication", 0), 0u) << thread_of(whole);
  EXPECT_EQ(thread_of(layer).rfind("communication", 0), 0u) << thread_of(layer);
  EXPECT_EQ(thread_of(slice["SEND_B0"]).rfind("communication", 0), 0u);
  EXPECT_NE(whole["tid"], slice["SEND_B0"]["tid"]);  // overlapping: another thread
  EXPECT_NE(whole["tid"], slice["B0"]["tid"]);
}

TEST(ChromeTrace, MemoryCountersOfEveryHostIncludeAllReduce) {
  Timeline timeline;
  timeline.hosts = {"a", "b"};
  timeline.records.push_back(with_memory(compute("b", 1, "B", 0, 0, 2), 7));
  timeline.records.push_back(with_memory(allreduce("a", "b", 0, -1, 0, 3, 5), 40));
  timeline.records.push_back(with_memory(compute("a", 0, "B", 0, 0, 3), 30));
  timeline.records.push_back(with_memory(allreduce("b", "a", 1, -1, 0, 2, 4), 9));
  timeline.records.push_back(with_memory(transfer("a", "b", 0, "SEND_F", 0, 3, 3.5), 35));
  const Json trace = Json::parse(timeline_to_chrome_trace(timeline));
  std::map<int, std::vector<std::pair<double, double>>> samples;  // pid -> (ts, bytes)
  for (const Json& event : trace["traceEvents"])
    if (event["ph"] == "C")
      samples[event["pid"].get<int>()].push_back({event["ts"].get<double>(), event["args"]["bytes"].get<double>()});
  using Samples = std::vector<std::pair<double, double>>;
  EXPECT_EQ(samples[1], (Samples{{3e6, 30}, {3.5e6, 35}, {5e6, 40}}));
  EXPECT_EQ(samples[2], (Samples{{2e6, 7}, {4e6, 9}}));
}

// ---------------------------------------------------------------------------
// CSV

TEST(TimelineCsv, RoundTripIsExact) {
  Timeline timeline;
  timeline.hosts = {"b", "a"};
  TimelineRecord first = compute("a", 1, "F", 3, 0.1 + 0.2, 1.0 / 3.0, 2, 1);
  first.memory_bytes = 123456789.125;
  TimelineRecord second = transfer("a", "b", 1, "SEND_B", 3, 1.0 / 3.0, 0.7 + 1e-17, 0.1 * 3);
  second.memory_bytes = 1e-300;
  timeline.records = {first, second};
  const Timeline back = parse_timeline_csv(timeline_to_csv(timeline), "mem.csv");
  EXPECT_EQ(back.hosts, timeline.hosts);
  ASSERT_EQ(back.records.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const TimelineRecord& want = timeline.records[i];
    const TimelineRecord& got = back.records[i];
    EXPECT_EQ(got.host, want.host);
    EXPECT_EQ(got.stream, want.stream);
    EXPECT_EQ(got.stage, want.stage);
    EXPECT_EQ(got.action, want.action);
    EXPECT_EQ(got.micro_batch, want.micro_batch);
    EXPECT_EQ(got.mini_batch, want.mini_batch);
    EXPECT_EQ(got.start_s, want.start_s);  // exact, not approximately
    EXPECT_EQ(got.end_s, want.end_s);
    EXPECT_EQ(got.bytes, want.bytes);
    EXPECT_EQ(got.peer, want.peer);
    EXPECT_EQ(got.memory_bytes, want.memory_bytes);
  }
  EXPECT_EQ(back.records[0].start_s, 0.1 + 0.2);
  EXPECT_NE(back.records[0].start_s, 0.3);
  // And the text itself is stable through a second round trip.
  EXPECT_EQ(timeline_to_csv(back), timeline_to_csv(timeline));
}

TEST(TimelineCsv, MalformedLineNamesItsLineNumber) {
  std::string text = timeline_to_csv(gpipe(2, 1, 1.0));
  // Line 1 is "# hosts:", line 2 the header; break the second record (line 4).
  std::size_t at = 0;
  for (int line = 1; line < 4; ++line) at = text.find('\n', at) + 1;
  const std::size_t end = text.find('\n', at);
  const std::string broken = text.substr(0, at) + "gpu0,0,0,F,0,0,zero,1,0,,0" + text.substr(end);
  try {
    parse_timeline_csv(broken, "run.csv");
    FAIL() << "no error for a malformed line";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("run.csv:4:"), std::string::npos) << message;
    EXPECT_NE(message.find("zero"), std::string::npos) << message;
  }
  const std::string short_line = text.substr(0, at) + "gpu0,0,0,F" + text.substr(end);
  try {
    parse_timeline_csv(short_line, "run.csv");
    FAIL() << "no error for a line with too few fields";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("run.csv:4:"), std::string::npos) << error.what();
  }
}

TEST(TimelineCsv, MissingHeaderIsAnError) {
  EXPECT_THROW(parse_timeline_csv("a,0,0,F,0,0,0,1,0,,0\n", "x.csv"), InputError);
}

TEST(ChromeTrace, MemoryCounterFollowsTheExactSeriesWhenPresent) {
  Timeline timeline;
  timeline.hosts = {"g"};
  timeline.records = {{"g", 0, 0, "F", 0, 0, 0, 1, 0, "", 5}};
  timeline.memory_series["g"] = {{0, 7}, {0.5, 9}, {1, 5}};
  const std::string trace = timeline_to_chrome_trace(timeline);
  // Three samples from the series (at 0, 500000 and 1000000 us), not one at the record's end.
  std::size_t counters = 0;
  for (std::size_t at = trace.find("\"ph\":\"C\""); at != std::string::npos; at = trace.find("\"ph\":\"C\"", at + 1)) ++counters;
  EXPECT_EQ(counters, 3u);
  EXPECT_NE(trace.find("\"bytes\":9.0"), std::string::npos) << trace;
}

}  // namespace
}  // namespace pipegrid
