#include "core/suggest.hpp"

#include <algorithm>

#include "core/platform_check.hpp"

namespace pipegrid {

std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  if (word.size() > 64) return best;
  for (const auto& candidate : candidates) {
    const std::size_t longer = std::max(word.size(), candidate.size());
    const std::size_t allowed = std::max<std::size_t>(1, std::min<std::size_t>(3, longer / 3));
    const std::size_t gap = word.size() > candidate.size() ? word.size() - candidate.size() : candidate.size() - word.size();
    if (gap > allowed || candidate.size() > 64) continue;
    const std::size_t distance = edit_distance(word, candidate);
    if (distance == 0 || distance > allowed) continue;
    if (!best || distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const auto match = closest_match(word, candidates);
  return match ? " (did you mean '" + *match + "'?)" : std::string();
}

}  // namespace pipegrid
