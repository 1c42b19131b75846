#pragma once
// "Did you mean ...?" for unknown keys and names.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipegrid {

/** The candidate closest to `word` when it is close enough to be a likely
 *  typo: edit_distance (core/platform_check.hpp) at most max(1, min(3, size/3)) of the longer of the two;
 *  ties go to the earliest candidate. nullopt when none is close, and for
 *  words longer than 64 characters (no typo of a key). */
std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates);

/** " (did you mean 'x'?)" when closest_match finds x, else "". Meant to be
 *  appended to "unknown key 'word'". */
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace pipegrid
