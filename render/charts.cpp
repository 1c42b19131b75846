// Sweep report charts (render/charts.hpp): continuous x/y charts (line,
// bubble, pareto, scaling) share one panel renderer, the bar charts (bars,
// memory) one grouped-bar renderer; the heatmap is its own.
//
// Layout of every chart: the title centred on top, the plot area(s) below it,
// tick labels and axis labels around them, the legend in a column to the
// right of the plot, and the notes (what could not be drawn) under
// everything. Sizes are estimated from character counts (no font metrics),
// so text is given generous room.

#include "render/charts.hpp"
#include "render/svg_text.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace pipegrid::charts {

namespace {

// ---- constants ---------------------------------------------------------------

constexpr const char* kFont = "Helvetica, Arial, sans-serif";
constexpr std::array<const char*, 10> kPalette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                                  "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#d62728"};
constexpr const char* kText = "#111111";
constexpr const char* kMuted = "#555555";
constexpr const char* kGrid = "#e6e6e6";
constexpr const char* kFrame = "#888888";
constexpr const char* kReference = "#444444";  ///< capacity, baseline, front
constexpr const char* kOver = "#c00000";       ///< over-capacity outline
constexpr const char* kDash = "6 4";

constexpr double kTitleFont = 16;
constexpr double kPanelTitleFont = 13;
constexpr double kLabelFont = 12;
constexpr double kTickFont = 11;
constexpr double kNoteFont = 11;
constexpr double kCharWidth = 0.6;  ///< average glyph width / font size
constexpr double kMarker = 3.5;     ///< marker radius
constexpr std::size_t kMaxLegendChars = 48;
constexpr std::size_t kMaxTickLabelChars = 24;

// ---- text --------------------------------------------------------------------

std::string num(double value) { return svg_number(value); }

std::string escape(std::string_view text) { return escape_xml(text); }

std::size_t char_count(std::string_view text) {
  std::size_t chars = 0;
  for (char c : text)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++chars;
  return chars;
}

double text_width(std::string_view text, double font) {
  return static_cast<double>(char_count(text)) * font * kCharWidth;
}

/// The bold title runs about 12% wider than the average glyph.
double title_width(std::string_view text) { return 1.12 * text_width(text, kTitleFont); }

std::string shorten(const std::string& text, std::size_t max_chars) {
  if (char_count(text) <= max_chars) return text;
  std::size_t kept = 0, cut = 0;
  for (; cut < text.size(); ++cut) {
    if ((static_cast<unsigned char>(text[cut]) & 0xC0) != 0x80) {
      if (kept == max_chars - 3) break;
      ++kept;
    }
  }
  return text.substr(0, cut) + "...";
}

/// A value in tooltips and cells: up to 6 significant digits, plain notation
/// for ordinary magnitudes.
std::string format_value(double v) {
  if (!std::isfinite(v)) return "-";
  if (v == 0) return "0";
  return fmt::format("{:.6g}", v);
}

struct ByteUnit {
  double divisor = 1;
  const char* name = "B";
};

ByteUnit byte_unit_for(double max_abs) {
  static constexpr std::array<ByteUnit, 5> kUnits = {
      ByteUnit{1, "B"}, ByteUnit{1024.0, "KiB"}, ByteUnit{1024.0 * 1024, "MiB"},
      ByteUnit{1024.0 * 1024 * 1024, "GiB"}, ByteUnit{1024.0 * 1024 * 1024 * 1024, "TiB"}};
  ByteUnit unit = kUnits[0];
  for (const ByteUnit& u : kUnits)
    if (max_abs >= u.divisor) unit = u;
  return unit;
}

std::string format_bytes(double bytes) {
  const ByteUnit unit = byte_unit_for(std::fabs(bytes));
  return fmt::format("{:.3g} {}", bytes / unit.divisor, unit.name);
}

/// Decimals needed to print multiples of `step` exactly (at most 6).
int decimals_for(double step) {
  for (int d = 0; d < 6; ++d) {
    const double scaled = step * std::pow(10.0, d);
    if (std::fabs(scaled - std::round(scaled)) < 1e-6 * std::max(1.0, scaled)) return d;
  }
  return 6;
}

/// 3 significant digits, k/M/G suffixes from 10^4 on ("12.3k"), for cells.
std::string format_short(double v) {
  if (!std::isfinite(v)) return "-";
  const double a = std::fabs(v);
  const char* suffix = "";
  double shown = v;
  if (a >= 1e10) {
    shown = v / 1e9, suffix = "G";
  } else if (a >= 1e7) {
    shown = v / 1e6, suffix = "M";
  } else if (a >= 1e4) {
    shown = v / 1e3, suffix = "k";
  }
  const double sa = std::fabs(shown);
  const int digits = sa >= 100 ? 0 : sa >= 10 ? 1 : sa >= 1 ? 2 : 3;
  std::string text = fmt::format("{:.{}f}", shown, digits);
  if (text.find('.') != std::string::npos) {
    while (text.back() == '0') text.pop_back();
    if (text.back() == '.') text.pop_back();
  }
  if (text == "-0") text = "0";
  return text + suffix;
}

// ---- skipped values ------------------------------------------------------------

/// Counts what could not be drawn, by reason; rendered as notes.
class Skips {
 public:
  void add(const std::string& reason) { ++counts_[reason]; }
  std::vector<std::string> notes() const {
    std::vector<std::string> out;
    for (const auto& [reason, count] : counts_)
      out.push_back(fmt::format("{} {} not drawn: {}", count, count == 1 ? "value" : "values", reason));
    return out;
  }

 private:
  std::map<std::string, int> counts_;
};

// ---- axes ----------------------------------------------------------------------

double nice_step(double span, int target) {
  if (!(span > 0)) return 1;
  const double raw = span / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double n = raw / magnitude;
  const double nice = n <= 1 ? 1 : n <= 2 ? 2 : n <= 2.5 ? 2.5 : n <= 5 ? 5 : 10;
  return nice * magnitude;
}

/// A resolved axis: its range in data units and its ticks with labels.
struct Ticks {
  double lo = 0, hi = 1;
  bool log2 = false;
  std::vector<double> at;            ///< data values
  std::vector<std::string> labels;
  std::string title;                 ///< axis label, with the unit appended for bytes

  /// Position in [0, 1] of a data value.
  double frac(double v) const {
    if (log2) return (std::log2(v) - std::log2(lo)) / (std::log2(hi) - std::log2(lo));
    return (v - lo) / (hi - lo);
  }
};

std::string power_of_two_label(int e) {
  if (e >= 0 && e <= 20) return fmt::format("{}", static_cast<std::int64_t>(1) << e);
  if (e < 0 && e >= -4) return fmt::format("{}", std::ldexp(1.0, e));
  return fmt::format("2^{}", e);
}

/// Ticks for data in [min, max] (finite; positive on a log2 axis). The ends
/// the axis fixes (Axis::min, max) replace the data's and are kept exactly.
Ticks make_ticks(const Axis& axis, double min, double max, bool have_data, int target = 6) {
  Ticks t;
  t.title = axis.label;
  const bool fixed_lo = axis.min.has_value(), fixed_hi = axis.max.has_value();
  if (axis.scale == Scale::Log2) {
    t.log2 = true;
    if (!have_data) min = 1, max = 16;
    if (fixed_lo) min = *axis.min;
    if (fixed_hi) max = *axis.max;
    if (fixed_lo && !fixed_hi && max <= min) max = min * 16;
    if (fixed_hi && !fixed_lo && min >= max) min = max / 16;
    int e0 = static_cast<int>(std::floor(std::log2(min) + 1e-9));
    int e1 = static_cast<int>(std::ceil(std::log2(max) - 1e-9));
    if (e1 <= e0) --e0, ++e1;
    const int every = std::max(1, (e1 - e0 + 9) / 10);
    t.lo = fixed_lo ? min : std::ldexp(1.0, e0);
    t.hi = fixed_hi ? max : std::ldexp(1.0, e1);
    for (int e = e0; e <= e1; e += every) {
      const double v = std::ldexp(1.0, e);
      if (v < t.lo * (1 - 1e-12) || v > t.hi * (1 + 1e-12)) continue;
      t.at.push_back(v);
      t.labels.push_back(power_of_two_label(e));
    }
    if (t.at.empty()) {  // a fixed range between two powers of 2: its ends
      for (const double v : {t.lo, t.hi}) {
        t.at.push_back(v);
        t.labels.push_back(format_value(v));
      }
    }
    return t;
  }
  double divisor = 1;
  if (!have_data) min = 0, max = 1;
  if (axis.from_zero) min = std::min(min, 0.0), max = std::max(max, 0.0);
  if (fixed_lo) min = *axis.min;
  if (fixed_hi) max = *axis.max;
  // One end fixed beyond all the data: a range on the data's side of it.
  if (fixed_lo && !fixed_hi && max <= min) max = min + std::max(std::fabs(min), 1.0);
  if (fixed_hi && !fixed_lo && min >= max) min = max - std::max(std::fabs(max), 1.0);
  if (axis.unit == Unit::Bytes) {
    const ByteUnit unit = byte_unit_for(std::max(std::fabs(min), std::fabs(max)));
    divisor = unit.divisor;
    t.title = axis.label.empty() ? unit.name : axis.label + " (" + unit.name + ")";
  }
  double lo = min / divisor, hi = max / divisor;
  if (!fixed_lo && !fixed_hi && hi - lo <= std::max(std::fabs(hi), std::fabs(lo)) * 1e-12) {
    // One value: a range around it (or up from zero).
    const double v = lo;
    if (v == 0) {
      lo = 0, hi = 1;
    } else {
      lo = v - std::fabs(v) * 0.5, hi = v + std::fabs(v) * 0.5;
      if (axis.from_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
      if (v > 0 && lo < 0 && axis.from_zero) lo = 0;
    }
  }
  const double step = nice_step(hi - lo, target);
  t.lo = fixed_lo ? lo : std::floor(lo / step + 1e-9) * step;
  t.hi = fixed_hi ? hi : std::ceil(hi / step - 1e-9) * step;
  if (t.hi <= t.lo) t.hi = t.lo + step;
  // Suffixes for large values keep tick labels short.
  double shown = 1;
  const char* suffix = "";
  const double big = std::max(std::fabs(t.lo), std::fabs(t.hi));
  if (big >= 1e9) {
    shown = 1e9, suffix = "G";
  } else if (big >= 1e6) {
    shown = 1e6, suffix = "M";
  } else if (big >= 1e5) {
    shown = 1e3, suffix = "k";
  }
  const int decimals = decimals_for(step / shown);
  // Ticks at the multiples of step inside [lo, hi] (all of them when no end is fixed).
  const double first = std::ceil(t.lo / step - 1e-9);
  const int count = static_cast<int>(std::llround(std::floor(t.hi / step + 1e-9) - first));
  for (int i = 0; i <= count; ++i) {
    double v = first * step + step * i;
    if (std::fabs(v) < step * 1e-9) v = 0;
    t.at.push_back(v * divisor);
    std::string label = fmt::format("{:.{}f}", v / shown, decimals);
    if (label.find_first_not_of("-0.") == std::string::npos) label = "0";
    t.labels.push_back(label + (label == "0" ? "" : suffix));
  }
  t.lo *= divisor;
  t.hi *= divisor;
  return t;
}

// ---- output --------------------------------------------------------------------

class Svg {
 public:
  void line(const std::string& text) {
    out_ += text;
    out_ += '\n';
  }
  std::string text(double x, double y, double font, const std::string& content, const char* anchor = "start",
                   const char* fill = kText, const std::string& extra = "") const {
    return fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"{}\" fill=\"{}\"{}>{}</text>", num(x),
                       num(y), num(font), anchor, fill, extra, escape(content));
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

/// FNV-1a of a text: a stable suffix for element ids, so that several charts
/// inlined in one HTML page do not share ids by accident.
std::string id_suffix(std::string_view text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return fmt::format("{:016x}", h);
}

/// Opens the document: <svg>, <title>, background, the visible title.
void open_document(Svg& svg, double width, double height, const std::string& title) {
  svg.line(fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"{}\">",
      num(width), num(height), num(width), num(height), kFont));
  svg.line(fmt::format("<title>{}</title>", escape(title)));
  svg.line(fmt::format("<rect class=\"background\" x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>",
                       num(width), num(height)));
  if (!title.empty())
    svg.line(svg.text(width / 2, 26, kTitleFont, title, "middle", kText, " class=\"title\" font-weight=\"bold\""));
}

void write_notes(Svg& svg, const std::vector<std::string>& notes, double x, double y) {
  if (notes.empty()) return;
  svg.line(fmt::format("<g class=\"notes\" font-size=\"{}\" fill=\"{}\">", num(kNoteFont), kMuted));
  for (std::size_t i = 0; i < notes.size(); ++i)
    svg.line(fmt::format("<text class=\"note\" x=\"{}\" y=\"{}\">{}</text>", num(x),
                         num(y + static_cast<double>(i) * (kNoteFont + 4)), escape(notes[i])));
  svg.line("</g>");
}

double notes_height(const std::vector<std::string>& notes) {
  return notes.empty() ? 0 : 8 + static_cast<double>(notes.size()) * (kNoteFont + 4);
}

double notes_width(const std::vector<std::string>& notes) {
  double w = 0;
  for (const std::string& n : notes) w = std::max(w, text_width(n, kNoteFont));
  return w;
}

// ---- legend --------------------------------------------------------------------

enum class Swatch { Line, DashedLine, Box, Tick, Marker, HollowMarker, OverBox, Hatch, Step, Triangle };

struct LegendEntry {
  std::string name;
  std::string colour;
  Swatch swatch = Swatch::Line;
  bool marker = true;  ///< a filled marker on a Line swatch
};

constexpr double kLegendRow = 18;
constexpr double kLegendSwatch = 26;

double legend_width(const std::vector<LegendEntry>& entries) {
  double w = 0;
  for (const LegendEntry& e : entries) w = std::max(w, text_width(shorten(e.name, kMaxLegendChars), kLabelFont));
  return entries.empty() ? 0 : kLegendSwatch + 8 + w + 12;
}

double legend_height(const std::vector<LegendEntry>& entries) {
  return static_cast<double>(entries.size()) * kLegendRow;
}

void write_legend(Svg& svg, const std::vector<LegendEntry>& entries, double x, double y,
                  const std::string& hatch_id = "") {
  if (entries.empty()) return;
  svg.line(fmt::format("<g class=\"legend\" font-size=\"{}\" fill=\"{}\">", num(kLabelFont), kText));
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const LegendEntry& e = entries[i];
    const double cy = y + static_cast<double>(i) * kLegendRow + kLegendRow / 2;
    const double x1 = x + kLegendSwatch;
    switch (e.swatch) {
      case Swatch::Line:
      case Swatch::DashedLine:
        svg.line(fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/>",
                             num(x), num(cy), num(x1), num(cy), e.colour,
                             e.swatch == Swatch::DashedLine ? fmt::format(" stroke-dasharray=\"{}\"", kDash) : ""));
        if (e.marker)
          svg.line(fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"/>", num((x + x1) / 2), num(cy),
                               num(kMarker), e.colour));
        break;
      case Swatch::Step:
        svg.line(fmt::format("<polyline points=\"{},{} {},{} {},{} {},{}\" fill=\"none\" stroke=\"{}\" "
                             "stroke-width=\"1.5\"/>",
                             num(x), num(cy + 5), num(x + 12), num(cy + 5), num(x + 12), num(cy - 5), num(x1),
                             num(cy - 5), e.colour));
        break;
      case Swatch::Box:
        svg.line(fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"12\" fill=\"{}\"/>", num(x + 5),
                             num(cy - 6), num(kLegendSwatch - 10), e.colour));
        break;
      case Swatch::OverBox:
        svg.line(fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"12\" fill=\"#ffffff\" stroke=\"{}\" "
                             "stroke-width=\"2.5\"/>",
                             num(x + 5), num(cy - 6), num(kLegendSwatch - 10), kOver));
        break;
      case Swatch::Tick:
        svg.line(fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\"/>",
                             num(x + 3), num(cy), num(x1 - 3), num(cy), e.colour));
        break;
      case Swatch::Marker:
        svg.line(fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"/>", num((x + x1) / 2), num(cy),
                             num(kMarker), e.colour));
        break;
      case Swatch::HollowMarker:
        svg.line(fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"#ffffff\" stroke=\"{}\" "
                             "stroke-width=\"1.5\"/>",
                             num((x + x1) / 2), num(cy), num(kMarker), e.colour));
        break;
      case Swatch::Hatch:
        svg.line(fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"12\" fill=\"url(#{})\" stroke=\"{}\" "
                             "stroke-width=\"0.6\"/>",
                             num(x + 5), num(cy - 6), num(kLegendSwatch - 10), hatch_id, kFrame));
        break;
      case Swatch::Triangle:
        svg.line(fmt::format("<polygon points=\"{},{} {},{} {},{}\" fill=\"{}\"/>", num((x + x1) / 2), num(cy - 5),
                             num((x + x1) / 2 - 5), num(cy + 4), num((x + x1) / 2 + 5), num(cy + 4), e.colour));
        break;
    }
    std::string shown = shorten(e.name, kMaxLegendChars);
    svg.line(fmt::format("<text x=\"{}\" y=\"{}\">{}</text>", num(x1 + 8), num(cy + kLabelFont * 0.35),
                         escape(shown)));
  }
  svg.line("</g>");
}

const char* palette(std::size_t i) { return kPalette[i % kPalette.size()]; }

/// Colours by series name, in order of first appearance.
class ColourMap {
 public:
  const char* of(const std::string& name) {
    auto [it, inserted] = index_.emplace(name, index_.size());
    if (inserted) order_.push_back(name);
    return palette(it->second);
  }
  const std::vector<std::string>& order() const { return order_; }

 private:
  std::map<std::string, std::size_t> index_;
  std::vector<std::string> order_;
};

// ---- x/y panels ----------------------------------------------------------------

/// One drawn thing on an x/y panel.
struct Layer {
  std::string series;  ///< for tooltips
  std::string colour;
  std::string cls = "series";  ///< class of the polyline
  bool dashed = false;
  bool markers = true;
  bool join = true;
  std::vector<Point> points;
};

struct XYPanel {
  std::string title;
  std::vector<Layer> layers;
};

struct XYSpec {
  std::string title;
  Axis x, y;
  std::vector<XYPanel> panels;
  std::vector<LegendEntry> legend;
  std::optional<double> vline;  ///< dashed vertical line (capacity) at this x
  std::string vline_label;
  std::vector<std::string> notes;  ///< notes from the caller (before the skip notes)
};

bool drawable(double v, const Axis& axis) { return std::isfinite(v) && (axis.scale != Scale::Log2 || v > 0); }

std::string skip_reason(double x, double y, const Axis& ax, const Axis& ay) {
  if (!std::isfinite(x) || !std::isfinite(y)) return "not a finite number";
  if (ax.scale == Scale::Log2 && x <= 0) return "x <= 0 on the log2 axis";
  if (ay.scale == Scale::Log2 && y <= 0) return "y <= 0 on the log2 axis";
  return "";
}

std::string point_tooltip(const std::string& series, const Point& p, const Axis& x, const Axis& y) {
  auto show = [](double v, const Axis& a) { return a.unit == Unit::Bytes ? format_bytes(v) : format_value(v); };
  std::string text = series.empty() ? "" : series + ": ";
  text += (x.label.empty() ? "x" : x.label) + " = " + show(p.x, x) + ", " + (y.label.empty() ? "y" : y.label) +
          " = " + show(p.y, y);
  if (p.oom) text += " (out of memory)";
  if (!p.label.empty()) text += "; " + p.label;
  return text;
}

std::string xy_svg(XYSpec spec) {
  Skips skips;
  // Keep only drawable points; count the rest (once per input point: layers
  // derived from data, such as the ideal, were built from drawable points).
  double xmin = 0, xmax = 0, ymin = 0, ymax = 0;
  bool any = false;
  auto extend = [&](double x, double y) {
    if (!any) {
      xmin = xmax = x, ymin = ymax = y, any = true;
    } else {
      xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
  };
  bool any_oom = false;
  for (XYPanel& panel : spec.panels)
    for (Layer& layer : panel.layers) {
      std::vector<Point> kept;
      for (const Point& p : layer.points) {
        const std::string reason = skip_reason(p.x, p.y, spec.x, spec.y);
        if (!reason.empty()) {
          skips.add(reason);
          continue;
        }
        kept.push_back(p);
        extend(p.x, p.y);
        if (p.oom && layer.markers) any_oom = true;
      }
      layer.points = std::move(kept);
    }
  bool vline_drawn = false;
  if (spec.vline) {
    if (drawable(*spec.vline, spec.x)) {
      vline_drawn = true;
      if (any) {
        xmin = std::min(xmin, *spec.vline), xmax = std::max(xmax, *spec.vline);
      } else {
        xmin = xmax = *spec.vline;
      }
    } else {
      skips.add("the capacity line is not drawable on this axis");
    }
  }
  const bool have_x = any || vline_drawn;
  Ticks tx = make_ticks(spec.x, xmin, xmax, have_x, 6);
  Ticks ty = make_ticks(spec.y, ymin, ymax, any, 6);

  // Points outside a fixed y range: triangles on the edge they cross.
  const bool y_fixed = spec.y.min.has_value() || spec.y.max.has_value();
  const double y_tolerance = (ty.hi - ty.lo) * 1e-9;
  auto side_of = [&](double y) { return !y_fixed ? 0 : y > ty.hi + y_tolerance ? 1 : y < ty.lo - y_tolerance ? -1 : 0; };
  std::size_t clipped = 0;
  for (const XYPanel& panel : spec.panels)
    for (const Layer& layer : panel.layers)
      if (layer.markers)
        for (const Point& p : layer.points)
          if (side_of(p.y) != 0) ++clipped;

  std::vector<LegendEntry> legend = spec.legend;
  if (any_oom) legend.push_back({"out of memory", kMuted, Swatch::HollowMarker, false});
  if (vline_drawn) legend.push_back({spec.vline_label.empty() ? "capacity" : spec.vline_label, kReference,
                                     Swatch::DashedLine, false});
  if (clipped) legend.push_back({"outside the y range", kMuted, Swatch::Triangle, false});

  std::vector<std::string> notes = spec.notes;
  if (!any) notes.push_back("no data");
  for (const std::string& n : skips.notes()) notes.push_back(n);
  if (clipped) {
    auto show = [&](double v) { return spec.y.unit == Unit::Bytes ? format_bytes(v) : format_value(v); };
    notes.push_back(fmt::format("{} {} outside the y range {} to {}: drawn as triangles on its edge", clipped,
                                clipped == 1 ? "value" : "values", show(ty.lo), show(ty.hi)));
  }

  // ---- geometry
  if (spec.panels.empty()) spec.panels.push_back({});
  const std::size_t n = spec.panels.size();
  const double panel_w = n == 1 ? 480 : n == 2 ? 400 : 340;
  const double panel_h = 300;
  const double panel_gap = 36;
  double tick_w = 0;
  for (const std::string& l : ty.labels) tick_w = std::max(tick_w, text_width(l, kTickFont));
  const bool has_panel_titles =
      std::any_of(spec.panels.begin(), spec.panels.end(), [](const XYPanel& p) { return !p.title.empty(); });
  const double left = 16 + (ty.title.empty() ? 0 : 22) + tick_w + 8;
  const double top = (spec.title.empty() ? 16 : 46) + (has_panel_titles ? 22 : 0);
  const double legend_w = legend_width(legend);
  const double legend_block = 24 + (legend.empty() ? 0 : legend_w) + 8;
  // Panels per row: as many as fit in max_chart_width, at least one.
  std::size_t per_row = n;
  while (per_row > 1 &&
         left + static_cast<double>(per_row) * panel_w + static_cast<double>(per_row - 1) * panel_gap + legend_block >
             max_chart_width)
    --per_row;
  const std::size_t rows = (n + per_row - 1) / per_row;
  per_row = (n + rows - 1) / rows;  // rows as even as they can be
  // A row below another: its panel titles and the x tick labels above it.
  const double row_stride = panel_h + 8 + kTickFont + 14 + (has_panel_titles ? 22 : 0);
  const double plots_h = static_cast<double>(rows - 1) * row_stride + panel_h;
  const double plots_w = static_cast<double>(per_row) * panel_w + static_cast<double>(per_row - 1) * panel_gap;
  const double legend_x = left + plots_w + 24;
  const double bottom_axis = 8 + kTickFont + 8 + (tx.title.empty() ? 0 : kLabelFont + 10);
  const double notes_y = top + plots_h + bottom_axis + 10 + kNoteFont;
  double width = legend_x + (legend.empty() ? 0 : legend_w) + 8;
  width = std::max({width, 24 + notes_width(notes), title_width(spec.title) + 32});
  const double height = std::max(top + plots_h + bottom_axis + notes_height(notes) + 12,
                                 top + legend_height(legend) + 12);

  Svg svg;
  open_document(svg, width, height, spec.title);
  const std::string clip_id =
      "pg-clip-" + id_suffix(fmt::format("{}|{}|{}|{}|{}", spec.title, tx.title, ty.title, num(ty.lo), num(ty.hi)));

  for (std::size_t pi = 0; pi < n; ++pi) {
    const XYPanel& panel = spec.panels[pi];
    const double px = left + static_cast<double>(pi % per_row) * (panel_w + panel_gap);
    const double py = top + static_cast<double>(pi / per_row) * row_stride;
    auto X = [&](double v) { return px + tx.frac(v) * panel_w; };
    auto Y = [&](double v) { return py + panel_h - ty.frac(v) * panel_h; };
    svg.line(fmt::format("<g class=\"panel\" data-index=\"{}\">", pi));
    if (y_fixed)
      svg.line(fmt::format("<clipPath id=\"{}-{}\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/></clipPath>",
                           clip_id, pi, num(px), num(py), num(panel_w), num(panel_h)));
    if (!panel.title.empty())
      svg.line(svg.text(px + panel_w / 2, py - 8, kPanelTitleFont,
                        shorten(panel.title, static_cast<std::size_t>(panel_w / (kPanelTitleFont * kCharWidth))),
                        "middle", kText, " class=\"panel-title\" font-weight=\"bold\""));
    // Grid and ticks.
    svg.line(fmt::format("<g class=\"grid\" stroke=\"{}\" stroke-width=\"1\">", kGrid));
    for (double v : ty.at)
      svg.line(fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", num(px), num(Y(v)), num(px + panel_w),
                           num(Y(v))));
    for (double v : tx.at)
      svg.line(fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", num(X(v)), num(py), num(X(v)),
                           num(py + panel_h)));
    svg.line("</g>");
    svg.line(fmt::format("<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
                         "stroke=\"{}\"/>",
                         num(px), num(py), num(panel_w), num(panel_h), kFrame));
    svg.line(fmt::format("<g class=\"axis x\" font-size=\"{}\" fill=\"{}\" text-anchor=\"middle\">", num(kTickFont),
                         kText));
    for (std::size_t i = 0; i < tx.at.size(); ++i)
      svg.line(fmt::format("<text x=\"{}\" y=\"{}\">{}</text>", num(X(tx.at[i])), num(py + panel_h + 8 + kTickFont),
                           escape(tx.labels[i])));
    svg.line("</g>");
    if (pi % per_row == 0) {
      svg.line(fmt::format("<g class=\"axis y\" font-size=\"{}\" fill=\"{}\" text-anchor=\"end\">", num(kTickFont),
                           kText));
      for (std::size_t i = 0; i < ty.at.size(); ++i)
        svg.line(fmt::format("<text x=\"{}\" y=\"{}\">{}</text>", num(px - 6), num(Y(ty.at[i]) + kTickFont * 0.35),
                             escape(ty.labels[i])));
      svg.line("</g>");
    }
    // The capacity line.
    if (vline_drawn)
      svg.line(fmt::format("<line class=\"capacity dashed\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" "
                           "stroke-width=\"1.5\" stroke-dasharray=\"{}\"><title>{}</title></line>",
                           num(X(*spec.vline)), num(py), num(X(*spec.vline)), num(py + panel_h), kReference, kDash,
                           escape((spec.vline_label.empty() ? std::string("capacity") : spec.vline_label) + " " +
                                  (spec.x.unit == Unit::Bytes ? format_bytes(*spec.vline)
                                                              : format_value(*spec.vline)))));
    // Lines first (cut at the border of a fixed y range), then markers on top.
    if (y_fixed) svg.line(fmt::format("<g class=\"clipped-lines\" clip-path=\"url(#{}-{})\">", clip_id, pi));
    for (const Layer& layer : panel.layers) {
      if (!layer.join || layer.points.size() < 2) continue;
      std::string pts;
      for (const Point& p : layer.points) {
        if (!pts.empty()) pts += ' ';
        pts += num(X(p.x)) + "," + num(Y(p.y));
      }
      svg.line(fmt::format("<polyline class=\"{}\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\"{}>"
                           "<title>{}</title></polyline>",
                           layer.cls, pts, layer.colour, layer.dashed ? "1.5" : "2",
                           layer.dashed ? fmt::format(" stroke-dasharray=\"{}\"", kDash) : "", escape(layer.series)));
    }
    if (y_fixed) svg.line("</g>");
    for (const Layer& layer : panel.layers) {
      if (!layer.markers) continue;
      for (const Point& p : layer.points) {
        const int side = side_of(p.y);
        if (side != 0) {
          // A triangle inside the plot area, its tip on the edge crossed.
          const double tip = side > 0 ? py : py + panel_h;
          const double base = side > 0 ? tip + 8 : tip - 8;
          svg.line(fmt::format("<polygon class=\"point{} clipped\" points=\"{},{} {},{} {},{}\" fill=\"{}\" "
                               "stroke=\"{}\" stroke-width=\"1.5\"><title>{}</title></polygon>",
                               p.oom ? " oom" : "", num(X(p.x)), num(tip), num(X(p.x) - 5), num(base),
                               num(X(p.x) + 5), num(base), p.oom ? "#ffffff" : layer.colour, layer.colour,
                               escape(point_tooltip(layer.series, p, spec.x, spec.y) + " (outside the y range)")));
        } else if (p.oom) {
          svg.line(fmt::format("<circle class=\"point oom\" cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"#ffffff\" "
                               "stroke=\"{}\" stroke-width=\"1.5\"><title>{}</title></circle>",
                               num(X(p.x)), num(Y(p.y)), num(kMarker), layer.colour,
                               escape(point_tooltip(layer.series, p, spec.x, spec.y))));
        } else {
          svg.line(fmt::format("<circle class=\"point\" cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"><title>{}</title>"
                               "</circle>",
                               num(X(p.x)), num(Y(p.y)), num(kMarker), layer.colour,
                               escape(point_tooltip(layer.series, p, spec.x, spec.y))));
        }
      }
    }
    svg.line("</g>");
  }
  // Axis labels: x under the last row, y along all rows.
  if (!tx.title.empty())
    svg.line(svg.text(left + plots_w / 2, top + plots_h + 8 + kTickFont + 8 + kLabelFont, kLabelFont, tx.title,
                      "middle", kText, " class=\"axis-label x\""));
  if (!ty.title.empty()) {
    const double lx = 16 + kLabelFont, ly = top + plots_h / 2;
    svg.line(svg.text(lx, ly, kLabelFont, ty.title, "middle", kText,
                      fmt::format(" class=\"axis-label y\" transform=\"rotate(-90 {} {})\"", num(lx), num(ly))));
  }
  write_legend(svg, legend, legend_x, top);
  write_notes(svg, notes, 16, notes_y);
  svg.line("</svg>");
  return svg.str();
}

/// Series whose points are sorted by x (for lines); stable for equal x.
std::vector<Point> sorted_by_x(std::vector<Point> points) {
  std::stable_sort(points.begin(), points.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  return points;
}

// ---- grouped bars --------------------------------------------------------------

struct GBar {
  std::optional<double> value;
  std::optional<double> paper;
  std::string label;
  std::optional<double> capacity;  ///< a dashed mark across the bar's slot
  bool over = false;
  std::string tooltip;
};

struct GSpec {
  std::string title, x_label;
  Axis y;
  std::vector<std::string> groups, series;
  std::vector<std::vector<GBar>> bars;  ///< [group][series]
  std::optional<double> hline;          ///< dashed horizontal reference
  std::string hline_label, hline_cls;
  std::vector<LegendEntry> extra_legend;
  std::vector<std::string> notes;
};

std::string grouped_bars_svg(const GSpec& spec) {
  Skips skips;
  const std::size_t groups = spec.groups.size();
  const std::size_t series = std::max<std::size_t>(spec.series.size(), 1);
  double ymax = 0;
  bool any = false;
  bool any_paper = false;
  // Drawable bars (value finite and >= 0) and ticks.
  std::vector<std::vector<GBar>> bars(groups, std::vector<GBar>(series));
  for (std::size_t g = 0; g < groups && g < spec.bars.size(); ++g)
    for (std::size_t s = 0; s < series && s < spec.bars[g].size(); ++s) {
      GBar b = spec.bars[g][s];
      if (b.value && (!std::isfinite(*b.value) || *b.value < 0)) {
        skips.add(std::isfinite(*b.value) ? "negative bar value" : "not a finite number");
        b.value.reset();
      }
      if (b.paper && (!std::isfinite(*b.paper) || *b.paper < 0)) {
        skips.add(std::isfinite(*b.paper) ? "negative paper value" : "not a finite number");
        b.paper.reset();
      }
      if (b.capacity && (!std::isfinite(*b.capacity) || *b.capacity <= 0)) b.capacity.reset();
      if (b.value) ymax = std::max(ymax, *b.value), any = true;
      if (b.paper) ymax = std::max(ymax, *b.paper), any = true, any_paper = true;
      if (b.capacity) ymax = std::max(ymax, *b.capacity);
      bars[g][s] = std::move(b);
    }
  // A plain double and a flag: GCC's -Wmaybe-uninitialized misreads an optional here.
  bool has_hline = spec.hline.has_value();
  const double hline = spec.hline.value_or(0);
  if (has_hline && !std::isfinite(hline)) {
    skips.add("not a finite number");
    has_hline = false;
  }
  if (has_hline) ymax = std::max(ymax, hline);
  Axis yaxis = spec.y;
  yaxis.scale = Scale::Linear;
  yaxis.from_zero = true;
  const bool any_labels = std::any_of(bars.begin(), bars.end(), [](const std::vector<GBar>& row) {
    return std::any_of(row.begin(), row.end(), [](const GBar& b) { return b.value && !b.label.empty(); });
  });
  // Leave room above the tallest bar for its label.
  const Ticks ty = make_ticks(yaxis, 0, any_labels ? ymax * 1.08 : ymax, any || has_hline, 6);

  // A fixed y range: bars beyond it are cut (and marked), references beyond it left out.
  const bool y_fixed = yaxis.min.has_value() || yaxis.max.has_value();
  const double y_tolerance = (ty.hi - ty.lo) * 1e-9;
  auto outside = [&](double v) { return y_fixed && (v > ty.hi + y_tolerance || v < ty.lo - y_tolerance); };
  std::size_t bars_above = 0, bars_below = 0, references_out = 0;
  for (auto& row : bars)
    for (GBar& b : row) {
      if (b.value && outside(*b.value)) ++(*b.value > ty.hi ? bars_above : bars_below);
      if (b.paper && outside(*b.paper)) ++references_out, b.paper.reset();
      if (b.capacity && outside(*b.capacity)) ++references_out, b.capacity.reset();
    }
  if (has_hline && outside(hline)) ++references_out, has_hline = false;

  std::vector<LegendEntry> legend;
  for (std::size_t s = 0; s < spec.series.size(); ++s) legend.push_back({spec.series[s], palette(s), Swatch::Box});
  if (legend.size() == 1 && spec.series[0].empty()) legend.clear();
  if (any_paper) legend.push_back({"paper", kText, Swatch::Tick});
  for (const LegendEntry& e : spec.extra_legend) legend.push_back(e);
  if (has_hline) legend.push_back({spec.hline_label, kReference, Swatch::DashedLine, false});
  if (bars_above + bars_below) legend.push_back({"outside the y range", kMuted, Swatch::Triangle, false});

  std::vector<std::string> notes = spec.notes;
  if (!any) notes.push_back("no data");
  for (const std::string& n : skips.notes()) notes.push_back(n);
  auto show = [&](double v) { return spec.y.unit == Unit::Bytes ? format_bytes(v) : format_value(v); };
  if (bars_above + bars_below) {
    const std::size_t count = bars_above + bars_below;
    notes.push_back(fmt::format("{} {} outside the y range {} to {}: cut at its edge and marked with a triangle",
                                count, count == 1 ? "bar" : "bars", show(ty.lo), show(ty.hi)));
  }
  if (references_out)
    notes.push_back(fmt::format("{} reference {} (paper, capacity, baseline) outside the y range {} to {}: not drawn",
                                references_out, references_out == 1 ? "value" : "values", show(ty.lo), show(ty.hi)));

  // ---- geometry
  double max_label = 0;
  for (const auto& row : bars)
    for (const GBar& b : row)
      if (b.value && !b.label.empty()) max_label = std::max(max_label, text_width(b.label, 10));
  const double slot = std::clamp(max_label + 4, 24.0, 48.0);
  const double group_gap = 18;
  const double group_w = slot * static_cast<double>(series) + group_gap;
  double group_label_w = 0;
  for (const std::string& g : spec.groups)
    group_label_w = std::max(group_label_w, text_width(shorten(g, kMaxTickLabelChars), kTickFont));
  const bool rotate = group_label_w > group_w - 4;
  const double group_label_h = rotate ? group_label_w * 0.5 + kTickFont : kTickFont;
  double tick_w = 0;
  for (const std::string& l : ty.labels) tick_w = std::max(tick_w, text_width(l, kTickFont));
  const double legend_block = 24 + (legend.empty() ? 0 : legend_width(legend)) + 8;
  const double min_left = 16 + (ty.title.empty() ? 0 : 22) + tick_w + 8;
  // Groups per row: as many as fit in max_chart_width, at least one.
  std::size_t per_row = std::max<std::size_t>(groups, 1);
  while (per_row > 1 && min_left + group_w * static_cast<double>(per_row) + legend_block > max_chart_width) --per_row;
  const std::size_t rows = (groups + per_row - 1) / per_row;
  if (rows > 0) per_row = (groups + rows - 1) / rows;  // rows as even as they can be
  const double plot_w = std::max(160.0, group_w * static_cast<double>(per_row));
  const double x_in_plot = (plot_w - group_w * static_cast<double>(per_row)) / 2;  ///< left of the first group
  // A rotated first group label reaches left of the plot by about cos(30 deg) of its width.
  const double first_center = x_in_plot + group_gap / 2 + slot * static_cast<double>(series) / 2;
  double left = min_left;
  for (std::size_t g = 0; rotate && g < groups; g += per_row)
    left = std::max(left, 12 + 0.87 * text_width(shorten(spec.groups[g], kMaxTickLabelChars), kTickFont) - first_center);
  const double top = spec.title.empty() ? 16 : 46;
  const double plot_h = 300;
  const double row_stride = plot_h + 8 + group_label_h + 30;
  const double plots_h = static_cast<double>(std::max<std::size_t>(rows, 1) - 1) * row_stride + plot_h;
  const double legend_x = left + plot_w + 24;
  const double bottom_axis = 8 + group_label_h + 8 + (spec.x_label.empty() ? 0 : kLabelFont + 10);
  const double notes_y = top + plots_h + bottom_axis + 10 + kNoteFont;
  double width = legend_x + (legend.empty() ? 0 : legend_width(legend)) + 8;
  width = std::max({width, 24 + notes_width(notes), title_width(spec.title) + 32});
  const double height =
      std::max(top + plots_h + bottom_axis + notes_height(notes) + 12, top + legend_height(legend) + 12);
  const double x0 = left + x_in_plot;

  Svg svg;
  open_document(svg, width, height, spec.title);
  for (std::size_t row = 0; row < std::max<std::size_t>(rows, 1); ++row) {
    const double py = top + static_cast<double>(row) * row_stride;
    auto Y = [&](double v) { return py + plot_h - ty.frac(std::clamp(v, ty.lo, ty.hi)) * plot_h; };
    svg.line(fmt::format("<g class=\"grid\" stroke=\"{}\" stroke-width=\"1\">", kGrid));
    for (double v : ty.at)
      svg.line(fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", num(left), num(Y(v)),
                           num(left + plot_w), num(Y(v))));
    svg.line("</g>");
    svg.line(fmt::format("<g class=\"axis y\" font-size=\"{}\" fill=\"{}\" text-anchor=\"end\">", num(kTickFont),
                         kText));
    for (std::size_t i = 0; i < ty.at.size(); ++i)
      svg.line(fmt::format("<text x=\"{}\" y=\"{}\">{}</text>", num(left - 6), num(Y(ty.at[i]) + kTickFont * 0.35),
                           escape(ty.labels[i])));
    svg.line("</g>");
    // The reference line: a baseline behind the bars, a capacity in front
    // (where it crosses a bar over it, it shows by how much).
    auto draw_hline = [&] {
      const double hv = hline;
      svg.line(fmt::format("<line class=\"{} dashed\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" "
                           "stroke-width=\"1.5\" stroke-dasharray=\"{}\"><title>{}</title></line>",
                           spec.hline_cls, num(left), num(Y(hv)), num(left + plot_w), num(Y(hv)), kReference, kDash,
                           escape(spec.hline_label + " " + show(hv))));
    };
    const bool hline_in_front = spec.hline_cls == "capacity";
    if (has_hline && !hline_in_front) draw_hline();
    // Bars.
    for (std::size_t g = row * per_row; g < groups && g < (row + 1) * per_row; ++g) {
      const double gx = x0 + group_w * static_cast<double>(g - row * per_row) + group_gap / 2;
      svg.line(fmt::format("<g class=\"group\" data-index=\"{}\">", g));
      for (std::size_t s = 0; s < series; ++s) {
        const GBar& b = bars[g][s];
        const double sx = gx + slot * static_cast<double>(s);
        const std::string name = s < spec.series.size() ? spec.series[s] : "";
        if (b.value) {
          const double yv = Y(*b.value);
          const double base = Y(0);
          const bool above = outside(*b.value) && *b.value > ty.hi;
          const bool below = outside(*b.value) && *b.value < ty.lo;
          std::string tooltip =
              b.tooltip.empty() ? (name.empty() ? "" : name + ", ") + spec.groups[g] + ": " + show(*b.value) : b.tooltip;
          if (above || below) tooltip += " (outside the y range)";
          const std::string cls = std::string(b.over ? "bar over" : "bar") + (above || below ? " clipped" : "");
          if (b.over)
            svg.line(fmt::format("<rect class=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" "
                                 "stroke=\"{}\" stroke-width=\"2.5\"><title>{}</title></rect>",
                                 cls, num(sx + 2.25), num(yv), num(slot - 4.5), num(base - yv), palette(s), kOver,
                                 escape(tooltip)));
          else
            svg.line(fmt::format("<rect class=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\">"
                                 "<title>{}</title></rect>",
                                 cls, num(sx + 1), num(yv), num(slot - 2), num(base - yv), palette(s), escape(tooltip)));
          if (above || below) {
            // A triangle inside the plot, its tip on the edge the value is beyond.
            const double tip = above ? py : py + plot_h;
            const double tri_base = above ? tip + 8 : tip - 8;
            const double cx = sx + slot / 2;
            svg.line(fmt::format("<polygon class=\"clip-mark\" points=\"{},{} {},{} {},{}\" fill=\"{}\" "
                                 "stroke=\"#ffffff\" stroke-width=\"1\"/>",
                                 num(cx), num(tip), num(cx - 5), num(tri_base), num(cx + 5), num(tri_base), kMuted));
          }
          std::string text = b.label;
          if (b.over) text = text.empty() ? "!" : "! " + text;
          // Above the bar, and above its paper tick when the tick would cross
          // the text; inside the plot under the edge for a cut bar.
          double label_y = yv - 4;
          if (b.paper && Y(*b.paper) < yv + 4 && Y(*b.paper) > label_y - 14) label_y = Y(*b.paper) - 5;
          if (above) label_y = py + 8 + 12;
          if (!text.empty() && !below)
            svg.line(svg.text(sx + slot / 2, label_y, b.over ? 12 : 10, text, "middle", b.over ? kOver : kText,
                              std::string(" class=\"bar-label\" stroke=\"#ffffff\" stroke-width=\"3\" "
                                          "paint-order=\"stroke\"") +
                                  (b.over ? " font-weight=\"bold\"" : "")));
        }
        if (b.capacity)
          svg.line(fmt::format("<line class=\"capacity dashed\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" "
                               "stroke-width=\"1.5\" stroke-dasharray=\"3 2\"><title>{}</title></line>",
                               num(sx - 1), num(Y(*b.capacity)), num(sx + slot + 1), num(Y(*b.capacity)), kReference,
                               escape("capacity " + show(*b.capacity))));
        if (b.paper)
          svg.line(fmt::format("<line class=\"paper\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" "
                               "stroke-width=\"3\"><title>{}</title></line>",
                               num(sx - 1), num(Y(*b.paper)), num(sx + slot + 1), num(Y(*b.paper)), kText,
                               escape("paper: " + format_value(*b.paper))));
      }
      // Group label.
      const double cx = gx + slot * static_cast<double>(series) / 2;
      const std::string label = shorten(spec.groups[g], kMaxTickLabelChars);
      if (rotate) {
        const double ly = py + plot_h + 8 + kTickFont * 0.7;
        svg.line(svg.text(cx, ly, kTickFont, label, "end", kText,
                          fmt::format(" class=\"group-label\" transform=\"rotate(-30 {} {})\"", num(cx), num(ly))));
      } else {
        svg.line(svg.text(cx, py + plot_h + 8 + kTickFont, kTickFont, label, "middle", kText,
                          " class=\"group-label\""));
      }
      svg.line("</g>");
    }
    if (has_hline && hline_in_front) draw_hline();
    svg.line(fmt::format("<line class=\"axis-line\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\"/>", num(left),
                         num(py + plot_h), num(left + plot_w), num(py + plot_h), kFrame));
    svg.line(fmt::format("<line class=\"axis-line\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\"/>", num(left),
                         num(py), num(left), num(py + plot_h), kFrame));
  }
  if (!spec.x_label.empty())
    svg.line(svg.text(left + plot_w / 2, top + plots_h + 8 + group_label_h + 8 + kLabelFont, kLabelFont, spec.x_label,
                      "middle", kText, " class=\"axis-label x\""));
  if (!ty.title.empty()) {
    const double lx = 16 + kLabelFont, ly = top + plots_h / 2;
    svg.line(svg.text(lx, ly, kLabelFont, ty.title, "middle", kText,
                      fmt::format(" class=\"axis-label y\" transform=\"rotate(-90 {} {})\"", num(lx), num(ly))));
  }
  write_legend(svg, legend, legend_x, top);
  write_notes(svg, notes, 16, notes_y);
  svg.line("</svg>");
  return svg.str();
}

// ---- heatmap colours -------------------------------------------------------------

struct Rgb {
  double r, g, b;
};

/// A sequential scale (viridis-like stops) at t in [0, 1].
Rgb scale_colour(double t) {
  static constexpr std::array<Rgb, 5> kStops = {Rgb{68, 1, 84}, Rgb{59, 82, 139}, Rgb{33, 145, 140},
                                                Rgb{94, 201, 98}, Rgb{253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0);
  const double pos = t * static_cast<double>(kStops.size() - 1);
  const std::size_t i = std::min(static_cast<std::size_t>(pos), kStops.size() - 2);
  const double f = pos - static_cast<double>(i);
  const Rgb& a = kStops[i];
  const Rgb& b = kStops[i + 1];
  return {a.r + (b.r - a.r) * f, a.g + (b.g - a.g) * f, a.b + (b.b - a.b) * f};
}

std::string hex(const Rgb& c) {
  auto byte = [](double v) { return static_cast<int>(std::lround(std::clamp(v, 0.0, 255.0))); };
  return fmt::format("#{:02x}{:02x}{:02x}", byte(c.r), byte(c.g), byte(c.b));
}

bool dark(const Rgb& c) { return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b < 140; }

}  // namespace

// ---- public ----------------------------------------------------------------------

std::string line_chart_svg(const LineChart& chart) {
  XYSpec spec;
  spec.title = chart.title;
  spec.x = chart.x;
  spec.y = chart.y;
  ColourMap colours;
  for (const LinePanel& panel : chart.panels) {
    XYPanel p;
    p.title = panel.title;
    for (const Series& s : panel.series) {
      Layer layer;
      layer.series = s.name;
      layer.colour = colours.of(s.name);
      layer.points = sorted_by_x(s.points);
      p.layers.push_back(std::move(layer));
    }
    spec.panels.push_back(std::move(p));
  }
  for (const std::string& name : colours.order())
    if (!name.empty()) spec.legend.push_back({name, colours.of(name), Swatch::Line});
  return xy_svg(std::move(spec));
}

std::string bubble_chart_svg(const BubbleChart& chart) {
  XYSpec spec;
  spec.title = chart.title;
  spec.x = chart.x;
  spec.y = chart.y;
  ColourMap colours;
  XYPanel panel;
  std::set<std::string> with_closed_form;
  for (const Series& s : chart.closed_form) with_closed_form.insert(s.name);
  for (const Series& s : chart.measured) {
    Layer layer;
    layer.series = s.name;
    layer.colour = colours.of(s.name);
    layer.points = sorted_by_x(s.points);
    layer.join = with_closed_form.count(s.name) == 0;  // the dashed curve stays visible under the markers
    if (!s.name.empty()) spec.legend.push_back({s.name, layer.colour, layer.join ? Swatch::Line : Swatch::Marker});
    panel.layers.push_back(std::move(layer));
  }
  for (const Series& s : chart.closed_form) {
    Layer layer;
    layer.series = s.name + " (closed form)";
    layer.colour = colours.of(s.name);
    layer.cls = "closed-form dashed";
    layer.dashed = true;
    layer.markers = false;
    layer.points = sorted_by_x(s.points);
    for (Point& p : layer.points) p.oom = false;
    spec.legend.push_back({layer.series, layer.colour, Swatch::DashedLine, false});
    panel.layers.push_back(std::move(layer));
  }
  spec.panels.push_back(std::move(panel));
  return xy_svg(std::move(spec));
}

std::string scaling_chart_svg(const ScalingChart& chart) {
  XYSpec spec;
  spec.title = chart.title;
  spec.x = chart.x;
  spec.y = chart.y;
  XYPanel panel;
  bool any_ideal = false;
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    Layer layer;
    layer.series = s.name;
    layer.colour = palette(i);
    layer.points = sorted_by_x(s.points);
    if (!s.name.empty()) spec.legend.push_back({s.name, layer.colour, Swatch::Line});
    if (chart.ideal) {
      // The ideal from the drawable point with the smallest x (x > 0 needed
      // for a ratio), over the series' drawable x values.
      std::vector<Point> usable;
      for (const Point& p : layer.points)
        if (skip_reason(p.x, p.y, spec.x, spec.y).empty() && p.x > 0) usable.push_back(p);
      if (usable.size() >= 2) {
        Layer ideal;
        ideal.series = s.name + " (ideal)";
        ideal.colour = layer.colour;
        ideal.cls = "ideal dashed";
        ideal.dashed = true;
        ideal.markers = false;
        const Point& first = usable.front();
        for (const Point& p : usable) ideal.points.push_back({p.x, first.y * p.x / first.x, false, ""});
        panel.layers.push_back(std::move(ideal));
        any_ideal = true;
      }
    }
    panel.layers.push_back(std::move(layer));
  }
  if (any_ideal) spec.legend.push_back({"ideal (linear)", kMuted, Swatch::DashedLine, false});
  spec.panels.push_back(std::move(panel));
  return xy_svg(std::move(spec));
}

std::string pareto_chart_svg(const ParetoChart& chart) {
  XYSpec spec;
  spec.title = chart.title;
  spec.x = chart.x;
  spec.y = chart.y;
  XYPanel panel;
  std::vector<Point> candidates;
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    Layer layer;
    layer.series = s.name;
    layer.colour = palette(i);
    layer.join = false;
    layer.points = s.points;
    for (const Point& p : s.points)
      if (!p.oom && skip_reason(p.x, p.y, spec.x, spec.y).empty()) candidates.push_back(p);
    if (!s.name.empty()) spec.legend.push_back({s.name, layer.colour, Swatch::Line});
    panel.layers.push_back(std::move(layer));
  }
  for (LegendEntry& e : spec.legend) e.swatch = Swatch::Marker;
  // The front: by memory ascending (throughput descending on ties), each
  // point that beats every point before it in throughput.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Point& a, const Point& b) { return a.x < b.x || (a.x == b.x && a.y > b.y); });
  std::vector<Point> front;
  for (const Point& p : candidates)
    if (front.empty() || p.y > front.back().y) front.push_back(p);
  if (!front.empty()) {
    Layer steps;
    steps.series = "Pareto front";
    steps.colour = kReference;
    steps.cls = "front";
    steps.markers = false;
    for (std::size_t i = 0; i < front.size(); ++i) {
      if (i > 0) steps.points.push_back({front[i].x, front[i - 1].y, false, ""});
      steps.points.push_back({front[i].x, front[i].y, false, ""});
    }
    if (steps.points.size() == 1) steps.points.push_back(steps.points.front());  // one point: a dot of a line
    panel.layers.insert(panel.layers.begin(), std::move(steps));
    spec.legend.push_back({"Pareto front", kReference, Swatch::Step, false});
  }
  spec.panels.push_back(std::move(panel));
  spec.vline = chart.capacity_bytes;
  spec.vline_label = "capacity";
  std::string svg = xy_svg(std::move(spec));
  return svg;
}

std::string bar_chart_svg(const BarChart& chart) {
  GSpec spec;
  spec.title = chart.title;
  spec.x_label = chart.x_label;
  spec.y = chart.y;
  spec.groups = chart.groups;
  spec.series = chart.series;
  for (std::size_t g = 0; g < chart.groups.size(); ++g) {
    std::vector<GBar> row;
    for (std::size_t s = 0; s < chart.series.size(); ++s) {
      GBar b;
      if (g < chart.bars.size() && s < chart.bars[g].size()) {
        const Bar& in = chart.bars[g][s];
        b.value = in.value;
        b.paper = in.paper;
        b.label = in.label;
        if (in.value) {
          b.tooltip = chart.series[s] + ", " + chart.groups[g] + ": " +
                      (in.label.empty() ? format_value(*in.value) : in.label);
          if (in.paper) b.tooltip += " (paper: " + format_value(*in.paper) + ")";
        }
      }
      row.push_back(std::move(b));
    }
    spec.bars.push_back(std::move(row));
  }
  spec.hline = chart.baseline;
  spec.hline_label = "baseline";
  spec.hline_cls = "baseline";
  return grouped_bars_svg(spec);
}

std::string memory_chart_svg(const MemoryChart& chart) {
  GSpec spec;
  spec.title = chart.title;
  spec.x_label = chart.x_label;
  spec.y = Axis{chart.y_label, Scale::Linear, Unit::Bytes, true, chart.y_min, chart.y_max};
  std::map<std::string, std::size_t> host_index;
  std::set<std::string> drawn;
  for (const MemoryRun& run : chart.runs)
    for (const DeviceMemory& d : run.devices) drawn.insert(d.host);
  for (const std::string& host : chart.host_order)
    if (drawn.count(host) && host_index.emplace(host, spec.groups.size()).second) spec.groups.push_back(host);
  for (const MemoryRun& run : chart.runs)
    for (const DeviceMemory& d : run.devices)
      if (host_index.emplace(d.host, spec.groups.size()).second) spec.groups.push_back(d.host);
  for (const MemoryRun& run : chart.runs) spec.series.push_back(run.name);
  spec.bars.assign(spec.groups.size(), std::vector<GBar>(chart.runs.size()));
  std::set<double> capacities;
  bool any_over = false;
  for (std::size_t r = 0; r < chart.runs.size(); ++r)
    for (const DeviceMemory& d : chart.runs[r].devices) {
      GBar& b = spec.bars[host_index.at(d.host)][r];
      b.value = d.peak_bytes;
      if (std::isfinite(d.capacity_bytes) && d.capacity_bytes > 0) {
        b.capacity = d.capacity_bytes;
        capacities.insert(d.capacity_bytes);
        b.over = std::isfinite(d.peak_bytes) && d.peak_bytes > d.capacity_bytes;
        any_over = any_over || b.over;
      }
      b.tooltip = (chart.runs[r].name.empty() ? "" : chart.runs[r].name + ", ") + d.host + ": peak " +
                  format_bytes(d.peak_bytes);
      if (b.capacity) b.tooltip += " of " + format_bytes(d.capacity_bytes) + (b.over ? " (over capacity)" : "");
    }
  if (capacities.size() == 1) {
    // One capacity for all: one line across the plot instead of a mark per bar.
    spec.hline = *capacities.begin();
    spec.hline_label = "capacity";
    spec.hline_cls = "capacity";
    for (auto& row : spec.bars)
      for (GBar& b : row) b.capacity.reset();
  } else if (!capacities.empty()) {
    spec.extra_legend.push_back({"capacity (per device)", kReference, Swatch::DashedLine, false});
  }
  if (any_over) spec.extra_legend.push_back({"over capacity", kOver, Swatch::OverBox, false});
  if (chart.runs.size() == 1 && chart.runs[0].name.empty()) spec.series = {""};
  return grouped_bars_svg(spec);
}

std::string heatmap_svg(const Heatmap& chart) {
  Skips skips;
  const std::size_t cols = chart.x_values.size(), rows = chart.y_values.size();
  auto cell_at = [&](std::size_t r, std::size_t c) -> HeatCell {
    if (r < chart.cells.size() && c < chart.cells[r].size()) return chart.cells[r][c];
    return {};
  };
  double vmin = 0, vmax = 0;
  bool any = false, any_oom = false;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const HeatCell cell = cell_at(r, c);
      any_oom = any_oom || cell.oom;
      if (!cell.value) continue;
      if (!std::isfinite(*cell.value)) {
        skips.add("not a finite number");
        continue;
      }
      vmin = any ? std::min(vmin, *cell.value) : *cell.value;
      vmax = any ? std::max(vmax, *cell.value) : *cell.value;
      any = true;
    }
  std::vector<std::string> notes;
  if (!any && !any_oom) notes.push_back("no data");
  for (const std::string& n : skips.notes()) notes.push_back(n);

  // Texts first: they size the cells.
  std::vector<std::vector<std::string>> texts(rows, std::vector<std::string>(cols));
  double text_w = 0;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const HeatCell cell = cell_at(r, c);
      std::string t = cell.text;
      if (t.empty() && cell.value && std::isfinite(*cell.value)) t = format_short(*cell.value);
      if (t.empty() && cell.oom) t = "OOM";
      texts[r][c] = t;
      text_w = std::max(text_w, text_width(t, kTickFont));
    }
  double col_label_w = 0;
  for (const std::string& x : chart.x_values)
    col_label_w = std::max(col_label_w, text_width(shorten(x, kMaxTickLabelChars), kTickFont));
  // Wide enough for the values and, up to a limit, for the column headers
  // (longer headers are rotated).
  const double cell_w = std::clamp(std::max({text_w + 12, col_label_w + 10, 48.0}), 48.0, 160.0);
  const bool rotate = col_label_w > cell_w - 4;
  const double cell_h = 28;
  double row_label_w = 0;
  for (const std::string& y : chart.y_values)
    row_label_w = std::max(row_label_w, text_width(shorten(y, kMaxTickLabelChars), kTickFont));
  // A rotated first header reaches left of the grid by about cos(30 deg) of its width.
  const double left = std::max(16 + (chart.y_label.empty() ? 0 : 22) + row_label_w + 8,
                               rotate && cols > 0
                                   ? 12 + 0.87 * text_width(shorten(chart.x_values[0], kMaxTickLabelChars), kTickFont) -
                                         cell_w / 2
                                   : 0.0);
  const double top = chart.title.empty() ? 16 : 46;
  const double grid_w = std::max(cell_w * static_cast<double>(cols), 120.0);
  const double grid_h = std::max(cell_h * static_cast<double>(rows), 60.0);
  const double col_label_h = rotate ? col_label_w * 0.5 + kTickFont : kTickFont;
  const double bottom_axis = 8 + col_label_h + 8 + (chart.x_label.empty() ? 0 : kLabelFont + 10);
  // Colour bar on the right.
  const double bar_x = left + grid_w + 28;
  const double bar_w = 16, bar_h = std::max(grid_h, 120.0);
  const std::string lo_text = any ? format_short(vmin) : "", hi_text = any ? format_short(vmax) : "";
  const double bar_text_w = std::max({text_width(lo_text, kTickFont), text_width(hi_text, kTickFont),
                                      text_width(chart.value_label, kLabelFont) - bar_w - 6, 0.0});
  const std::string hatch_id = "pg-hatch-" + id_suffix(chart.title + "|" + std::to_string(rows) + "x" +
                                                       std::to_string(cols));
  std::vector<LegendEntry> legend;
  if (any_oom) legend.push_back({"out of memory", kFrame, Swatch::Hatch});
  const double legend_y = top + bar_h + 28;
  double width = bar_x + bar_w + 6 + bar_text_w + 12;
  if (!legend.empty()) width = std::max(width, bar_x + legend_width(legend) + 8);
  width = std::max({width, 24 + notes_width(notes), title_width(chart.title) + 32});
  const double body_h = std::max(top + grid_h + bottom_axis, legend_y + legend_height(legend));
  const double notes_y = body_h + 10 + kNoteFont;
  const double height = body_h + notes_height(notes) + 12;

  Svg svg;
  open_document(svg, width, height, chart.title);
  svg.line("<defs>");
  svg.line(fmt::format("<pattern id=\"{}\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\" "
                       "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#ffffff\" "
                       "fill-opacity=\"0.35\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#333333\" "
                       "stroke-width=\"1.6\"/></pattern>",
                       hatch_id));
  svg.line("</defs>");
  for (std::size_t r = 0; r < rows; ++r) {
    const double y = top + cell_h * static_cast<double>(r);
    svg.line(fmt::format("<g class=\"row\" data-index=\"{}\">", r));
    for (std::size_t c = 0; c < cols; ++c) {
      const double x = left + cell_w * static_cast<double>(c);
      const HeatCell cell = cell_at(r, c);
      const bool has_value = cell.value && std::isfinite(*cell.value);
      std::string tooltip = chart.y_values[r] + ", " + chart.x_values[c] + ": ";
      tooltip += has_value ? format_value(*cell.value) : "no value";
      if (cell.oom) tooltip += " (out of memory)";
      if (!has_value && !cell.oom) {
        svg.line(fmt::format("<rect class=\"cell missing\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" "
                             "fill=\"#ffffff\" stroke=\"{}\" stroke-width=\"0.6\"><title>{}</title></rect>",
                             num(x), num(y), num(cell_w), num(cell_h), kGrid, escape(tooltip)));
        continue;
      }
      const Rgb colour = has_value ? scale_colour(vmax > vmin ? (*cell.value - vmin) / (vmax - vmin) : 0.5)
                                   : Rgb{235, 235, 235};
      svg.line(fmt::format("<rect class=\"cell{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" "
                           "stroke=\"#ffffff\" stroke-width=\"1\"><title>{}</title></rect>",
                           cell.oom ? " oom" : "", num(x), num(y), num(cell_w), num(cell_h), hex(colour),
                           escape(tooltip)));
      if (cell.oom)
        svg.line(fmt::format("<rect class=\"hatch\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"url(#{})\" "
                             "pointer-events=\"none\"/>",
                             num(x + 0.5), num(y + 0.5), num(cell_w - 1), num(cell_h - 1), hatch_id));
      if (!texts[r][c].empty()) {
        const bool on_dark = has_value && dark(colour);
        // Text on a hatched cell gets a light halo so it stays readable.
        const std::string halo =
            cell.oom ? fmt::format(" stroke=\"{}\" stroke-width=\"3\" paint-order=\"stroke\"",
                                   on_dark ? "#000000" : "#ffffff")
                     : "";
        svg.line(svg.text(x + cell_w / 2, y + cell_h / 2 + kTickFont * 0.35, kTickFont, texts[r][c], "middle",
                          on_dark ? "#ffffff" : kText, " class=\"cell-text\"" + halo));
      }
    }
    svg.line(svg.text(left - 6, y + cell_h / 2 + kTickFont * 0.35, kTickFont,
                      shorten(chart.y_values[r], kMaxTickLabelChars), "end", kText, " class=\"row-label\""));
    svg.line("</g>");
  }
  for (std::size_t c = 0; c < cols; ++c) {
    const double cx = left + cell_w * (static_cast<double>(c) + 0.5);
    const std::string label = shorten(chart.x_values[c], kMaxTickLabelChars);
    if (rotate) {
      const double ly = top + grid_h + 8 + kTickFont * 0.7;
      svg.line(svg.text(cx, ly, kTickFont, label, "end", kText,
                        fmt::format(" class=\"col-label\" transform=\"rotate(-30 {} {})\"", num(cx), num(ly))));
    } else {
      svg.line(svg.text(cx, top + grid_h + 8 + kTickFont, kTickFont, label, "middle", kText, " class=\"col-label\""));
    }
  }
  if (!chart.x_label.empty())
    svg.line(svg.text(left + grid_w / 2, top + grid_h + 8 + col_label_h + 8 + kLabelFont, kLabelFont, chart.x_label,
                      "middle", kText, " class=\"axis-label x\""));
  if (!chart.y_label.empty()) {
    const double lx = 16 + kLabelFont, ly = top + grid_h / 2;
    svg.line(svg.text(lx, ly, kLabelFont, chart.y_label, "middle", kText,
                      fmt::format(" class=\"axis-label y\" transform=\"rotate(-90 {} {})\"", num(lx), num(ly))));
  }
  // Colour bar: high values on top.
  if (any) {
    svg.line("<g class=\"colour-scale\">");
    constexpr int kSteps = 24;
    for (int i = 0; i < kSteps; ++i) {
      const double t = 1.0 - (i + 0.5) / kSteps;
      svg.line(fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", num(bar_x),
                           num(top + bar_h * i / kSteps), num(bar_w), num(bar_h / kSteps + 0.3),
                           hex(scale_colour(t))));
    }
    svg.line(svg.text(bar_x + bar_w + 6, top + kTickFont * 0.8, kTickFont, hi_text));
    svg.line(svg.text(bar_x + bar_w + 6, top + bar_h, kTickFont, lo_text));
    if (!chart.value_label.empty()) svg.line(svg.text(bar_x, top + bar_h + 16, kLabelFont, chart.value_label));
    svg.line("</g>");
  }
  write_legend(svg, legend, bar_x, legend_y, hatch_id);
  write_notes(svg, notes, 16, notes_y);
  svg.line("</svg>");
  return svg.str();
}

}  // namespace pipegrid::charts
