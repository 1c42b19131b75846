#pragma once
// Pure checks on platform data that pipegrid needs before SimGrid sees it
// (sim/platform_xml.hpp checks the XML text with them): printable messages
// whatever the bytes, host ids that pipegrid's outputs can carry, near
// misses of host property names, one device per host.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipegrid {

/** Whether `text` is well-formed UTF-8 (no overlong forms, no surrogates). */
bool valid_utf8(std::string_view text);

/** `text` made safe to print and to encode as JSON: valid UTF-8 passes
 *  unchanged except ASCII control characters, and every byte of an invalid
 *  sequence, which become \xNN. With `keep_line_breaks`, '\n' and '\t'
 *  pass too (whole messages). */
std::string printable(std::string_view text, bool keep_line_breaks = false);

/** Why `id` cannot name a host ("" when it can). pipegrid's outputs (the
 *  timeline CSV and its "# hosts:" line, tables) cannot carry an empty id,
 *  bytes that are not UTF-8, whitespace, control characters, commas or
 *  double quotes. */
std::string host_id_problem(std::string_view id);

/** The host properties pipegrid reads (core/platform.hpp), in the order
 *  docs/platforms.md lists them. */
const std::vector<std::string>& known_host_properties();

/** The known host property that `name` is a near miss of: equal ignoring
 *  case; at most 2 edits away (insertions, deletions, substitutions,
 *  transpositions of neighbours) for a name of 3 or more characters; or a
 *  prefix of 3 or more characters. Empty for a known name and for names
 *  near none. */
std::optional<std::string> near_miss_property(std::string_view name);

/** Optimal-string-alignment distance between `a` and `b` (edits as above). */
std::size_t edit_distance(std::string_view a, std::string_view b);

/** Refuses a placement that puts two devices on one host: a host listed
 *  for several stages is one device holding them all (interleaved and V
 *  schedules), which requires it to be the same replica of each, of stages
 *  with equally many replicas (whole pipelines replicated); a stage lists a
 *  host once.
 *  InputError naming `what` (the partition's origin), both stages and the
 *  host. */
void check_one_device_per_host(const std::vector<std::vector<std::string>>& hosts, const std::string& what);

}  // namespace pipegrid
