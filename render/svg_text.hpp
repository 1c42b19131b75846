#pragma once
// Text shared by the SVG writers (and the HTML of sweep reports): escaping
// and coordinates.

#include <string>
#include <string_view>

namespace pipegrid {

/** `text` safe inside XML/HTML text and attribute values: & < > " ' as
 *  entities; control characters other than tab and line breaks, which XML
 *  1.0 does not allow, as '?'. */
std::string escape_xml(std::string_view text);

/** A coordinate with two decimals, never "-0.00"; a non-finite value as 0
 *  (keeps "nan" out of a drawing). */
std::string svg_number(double value);

}  // namespace pipegrid
