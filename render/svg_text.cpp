#include "render/svg_text.hpp"

#include <array>
#include <cmath>

#include <fmt/format.h>

namespace pipegrid {

namespace {

// Advances of the printable ASCII characters ' ' (32) to '~' (126) in
// thousandths of an em, measured from DejaVu Sans and DejaVu Sans Bold as
// librsvg renders them.
constexpr std::array<int, 95> kRegularAdvance = {
    318, 401, 460, 838, 637, 951, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337,
    637, 637, 637, 637, 637, 637, 637, 637, 637, 637, 337, 337, 838, 838, 838, 531,
    1000, 711, 686, 699, 770, 632, 576, 775, 752, 295, 295, 656, 557, 863, 748, 787,
    603, 787, 695, 635, 594, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838, 500,
    500, 613, 635, 550, 635, 616, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612,
    635, 635, 395, 521, 392, 634, 592, 818, 592, 592, 525, 637, 337, 637, 838,
};
constexpr std::array<int, 95> kBoldAdvance = {
    348, 456, 521, 838, 696, 1002, 872, 306, 457, 457, 523, 838, 380, 415, 380, 365,
    696, 696, 696, 696, 696, 696, 696, 696, 696, 696, 400, 400, 838, 838, 838, 580,
    1000, 774, 762, 734, 830, 683, 683, 821, 837, 372, 372, 775, 637, 995, 837, 850,
    733, 850, 770, 678, 704, 812, 774, 1103, 771, 724, 725, 457, 365, 457, 838, 500,
    500, 675, 716, 593, 716, 678, 435, 716, 712, 343, 343, 665, 343, 1042, 712, 687,
    716, 716, 493, 595, 478, 712, 652, 924, 645, 652, 582, 712, 365, 712, 838,
};

}  // namespace

std::string escape_xml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')
          out += '?';
        else
          out += c;
    }
  }
  return out;
}

std::string svg_number(double value) {
  if (!std::isfinite(value)) value = 0;
  if (std::fabs(value) < 0.005) value = 0;
  return fmt::format("{:.2f}", value);
}

double estimated_text_width(std::string_view text, double font_size, bool bold) {
  const std::array<int, 95>& advance = bold ? kBoldAdvance : kRegularAdvance;
  double thousandths = 0;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x80) {
      if ((byte & 0xC0) != 0x80) thousandths += 1000;  // the lead byte of a UTF-8 sequence
    } else if (byte < 0x20 || byte == 0x7F) {
      thousandths += advance['?' - 0x20];
    } else {
      thousandths += advance[byte - 0x20];
    }
  }
  return thousandths * font_size / 1000;
}

}  // namespace pipegrid
