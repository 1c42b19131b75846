#pragma once
// Text shared by the SVG writers (and the HTML of sweep reports): escaping,
// coordinates and estimated text widths.

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

/** Estimated rendered width (px) of `text` at `font_size` px in the SVGs'
 *  font list ("Helvetica, Arial, sans-serif"): the sum of the characters'
 *  advances in DejaVu Sans (Bold when `bold`), the widest of the fonts that
 *  list resolves to on common systems, so the estimate errs on the wide side.
 *  A character outside ASCII (one UTF-8 sequence) counts 1 em, a control
 *  character as the '?' escape_xml writes for it. */
double estimated_text_width(std::string_view text, double font_size, bool bold = false);

}  // namespace pipegrid
