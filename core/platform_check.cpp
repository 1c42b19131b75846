#include "core/platform_check.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/platform.hpp"

namespace pipegrid {

// Length of the UTF-8 sequence starting at text[at], 0 when invalid there.
static std::size_t utf8_sequence_length(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) length = 2;
  else if (lead == 0xE0) length = 3, low = 0xA0;
  else if (lead >= 0xE1 && lead <= 0xEC) length = 3;
  else if (lead == 0xED) length = 3, high = 0x9F;  // no surrogates
  else if (lead >= 0xEE && lead <= 0xEF) length = 3;
  else if (lead == 0xF0) length = 4, low = 0x90;
  else if (lead >= 0xF1 && lead <= 0xF3) length = 4;
  else if (lead == 0xF4) length = 4, high = 0x8F;
  else return 0;
  if (at + length > text.size()) return 0;
  if (byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i)
    if (byte(at + i) < 0x80 || byte(at + i) > 0xBF) return 0;
  return length;
}

bool valid_utf8(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = utf8_sequence_length(text, at);
    if (length == 0) return false;
    at += length;
  }
  return true;
}

std::string printable(std::string_view text, bool keep_line_breaks) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = utf8_sequence_length(text, at);
    const auto byte = static_cast<unsigned char>(text[at]);
    const bool line_break = keep_line_breaks && (byte == '\n' || byte == '\t');
    if (length == 0 || ((byte < 0x20 || byte == 0x7F) && !line_break)) {
      out += fmt::format("\\x{:02X}", byte);
      ++at;
    } else {
      out.append(text.substr(at, length));
      at += length;
    }
  }
  return out;
}

std::string host_id_problem(std::string_view id) {
  if (id.empty()) return "a host id cannot be empty";
  for (std::size_t at = 0; at < id.size();) {
    const std::size_t length = utf8_sequence_length(id, at);
    const auto byte = static_cast<unsigned char>(id[at]);
    if (length == 0) return fmt::format("byte \\x{:02X} is not valid UTF-8", byte);
    if (byte == ' ') return "it contains a space";
    if (byte == ',') return "it contains a comma";
    if (byte == '"') return "it contains a double quote";
    if (byte < 0x20 || byte == 0x7F) return fmt::format("it contains the control character \\x{:02X}", byte);
    // Non-ASCII white space (no-break space, line separators, ...).
    if (length > 1) {
      const std::string_view sequence = id.substr(at, length);
      for (const char* space : {"\u00A0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
                                "\u2007", "\u2008", "\u2009", "\u200A", "\u2028", "\u2029", "\u202F", "\u205F", "\u3000",
                                "\u0085", "\uFEFF"})
        if (sequence == space) return fmt::format("it contains the white space character {}", printable(sequence));
    }
    at += length;
  }
  return "";
}

const std::vector<std::string>& known_host_properties() {
  static const std::vector<std::string> names = {"kind",         "execution",          "memory",
                                                 "speed_factor", "device",             "action_overhead",
                                                 "optimizer_step_rate", "optimizer_step_overhead",
                                                 "device_model", "memory_reserve"};
  return names;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: Levenshtein plus transpositions of neighbours.
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1, 0));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::optional<std::string> near_miss_property(std::string_view name) {
  const std::vector<std::string>& known = known_host_properties();
  if (std::find(known.begin(), known.end(), name) != known.end()) return std::nullopt;
  auto lower = [](std::string_view text) {
    std::string out(text);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  const std::string folded = lower(name);
  for (const std::string& candidate : known)
    if (folded == candidate) return candidate;
  // Longer names than any known one plus 2 cannot be 2 edits away; skip the
  // distance for them (a property name may be long).
  std::optional<std::string> best;
  std::size_t best_distance = 3;
  if (name.size() >= 3 && name.size() <= 32)
    for (const std::string& candidate : known) {
      const std::size_t distance = edit_distance(folded, candidate);
      if (distance < best_distance) best = candidate, best_distance = distance;
    }
  if (best) return best;
  if (name.size() >= 3)
    for (const std::string& candidate : known)
      if (candidate.compare(0, folded.size(), folded) == 0) return candidate;
  return std::nullopt;
}

void check_one_device_per_host(const std::vector<std::vector<std::string>>& hosts, const std::string& what) {
  std::map<std::string, std::pair<std::size_t, std::size_t>> placed;  // host -> (stage, replica)
  for (std::size_t stage = 0; stage < hosts.size(); ++stage)
    for (std::size_t replica = 0; replica < hosts[stage].size(); ++replica) {
      const auto [it, added] = placed.emplace(hosts[stage][replica], std::pair{stage, replica});
      if (added) continue;
      const std::size_t other = it->second.first;
      if (other == stage)
        throw InputError(fmt::format("{}: stage {} lists host '{}' twice; each replica needs its own host", what, stage,
                                     printable(hosts[stage][replica])));
      // Several stages on one device (interleaved and V schedules): the
      // device is the same replica of each (whole pipelines replicated).
      if (hosts[stage].size() == hosts[other].size() && replica == it->second.second) continue;
      throw InputError(fmt::format("{}: stages {} and {} are both placed on host '{}', as replica {} of {} and replica {} "
                                   "of {}; a host holds several stages only as the same replica of each, among equally "
                                   "many: give each replica its own host",
                                   what, other, stage, printable(hosts[stage][replica]), it->second.second,
                                   hosts[other].size(), replica, hosts[stage].size()));
    }
}

}  // namespace pipegrid
