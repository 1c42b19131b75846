#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/json_input.hpp"
#include "core/limits.hpp"
#include "render/timeline_csv.hpp"

namespace pipegrid {

namespace {
constexpr const char* kHeader = "host,stream,stage,action,micro_batch,mini_batch,start_s,end_s,bytes,peer,memory_bytes";
constexpr const char* kHostsPrefix = "# hosts:";
}  // namespace

std::string timeline_to_csv(const Timeline& timeline) {
  std::string text = kHostsPrefix;
  for (const std::string& host : timeline.hosts) text += " " + host;
  text += "\n";
  text += kHeader;
  text += "\n";
  for (const TimelineRecord& r : timeline.records)
    text += fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", r.host, r.stream, r.stage, r.action, r.micro_batch,
                        r.mini_batch, format_exact(r.start_s), format_exact(r.end_s), format_exact(r.bytes), r.peer,
                        format_exact(r.memory_bytes));
  return text;
}

Timeline parse_timeline_csv(const std::string& text, const std::string& origin) {
  Timeline timeline;
  std::istringstream lines(text);
  std::string line;
  int line_number = 0;
  bool header_seen = false;
  while (std::getline(lines, line)) {
    ++line_number;
    if (line.empty()) continue;
    // Host ids and actions reach JSON outputs (compare --json, Chrome traces).
    if (const auto bad = first_invalid_utf8(line))
      throw InputError(fmt::format("{}:{}: expected UTF-8 text, found the byte 0x{:02X} at column {}", origin, line_number,
                                   static_cast<unsigned char>(line[*bad]), *bad + 1));
    if (line.rfind(kHostsPrefix, 0) == 0) {
      std::istringstream names(line.substr(std::string(kHostsPrefix).size()));
      std::string name;
      while (names >> name) timeline.hosts.push_back(name);
      continue;
    }
    if (!header_seen) {
      if (line != kHeader)
        throw InputError(fmt::format("{}:{}: expected the header '{}', found '{}'", origin, line_number, kHeader, line));
      header_seen = true;
      continue;
    }
    std::vector<std::string> fields;
    std::string field;
    std::istringstream cells(line);
    while (std::getline(cells, field, ',')) fields.push_back(field);
    if (!line.empty() && line.back() == ',') fields.emplace_back();
    if (fields.size() != 11)
      throw InputError(fmt::format("{}:{}: expected 11 comma-separated fields, found {}", origin, line_number, fields.size()));
    // Numbers as the writer writes them: decimal, finite, at most
    // limits::kMaxMagnitude in magnitude; integers in the range of an int.
    auto number = [&](int index, const char* name) {
      const std::string& text = fields[index];
      double value = 0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) ||
          std::fabs(value) > limits::kMaxMagnitude)
        throw InputError(fmt::format("{}:{}: field '{}': expected a number, found '{}' (finite, at most {:g} in magnitude)",
                                     origin, line_number, name, text, limits::kMaxMagnitude));
      return value;
    };
    auto integer = [&](int index, const char* name) {
      const std::string& text = fields[index];
      int value = 0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || error != std::errc() || end != text.data() + text.size())
        throw InputError(fmt::format("{}:{}: field '{}': expected an integer in {}..{}, found '{}'", origin, line_number,
                                     name, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), text));
      return value;
    };
    // Host ids as the "# hosts:" line lists them: separated by spaces.
    for (const int index : {0, 9})
      if (fields[index].find_first_of(" \t\r") != std::string::npos)
        throw InputError(fmt::format("{}:{}: field '{}': expected a host id without spaces, found '{}'", origin, line_number,
                                     index == 0 ? "host" : "peer", fields[index]));
    TimelineRecord record;
    record.host = fields[0];
    record.stream = integer(1, "stream");
    record.stage = integer(2, "stage");
    record.action = fields[3];
    record.micro_batch = integer(4, "micro_batch");
    record.mini_batch = integer(5, "mini_batch");
    record.start_s = number(6, "start_s");
    record.end_s = number(7, "end_s");
    record.bytes = number(8, "bytes");
    record.peer = fields[9];
    record.memory_bytes = number(10, "memory_bytes");
    if (record.end_s < record.start_s)
      throw InputError(fmt::format("{}:{}: end_s {} is before start_s {}", origin, line_number, fields[7], fields[6]));
    timeline.records.push_back(std::move(record));
  }
  if (!header_seen) throw InputError(fmt::format("{}: expected the header '{}'", origin, kHeader));
  if (timeline.hosts.empty())
    for (const TimelineRecord& record : timeline.records)
      if (std::find(timeline.hosts.begin(), timeline.hosts.end(), record.host) == timeline.hosts.end())
        timeline.hosts.push_back(record.host);
  return timeline;
}

}  // namespace pipegrid
