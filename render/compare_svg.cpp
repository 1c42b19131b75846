// Simulated and measured timelines stacked in one SVG: both are shifted to
// start at 0 and merged into one timeline whose hosts are renamed apart
// ("simulated/gpu0", "measured/cpu0") and labelled with their own names, so
// timeline_to_svg draws them with one legend, the same colours and one time
// axis, under the headings "simulated" and "measured".

#include <algorithm>
#include <string>

#include "render/timeline_svg.hpp"

namespace pipegrid {

namespace {

/// Appends `timeline`, shifted to start at 0, with hosts prefixed by `side`.
void append_side(const Timeline& timeline, const std::string& side, Timeline& merged, SvgOptions& options) {
  double first = 0;
  bool any = false;
  for (const TimelineRecord& record : timeline.records) {
    first = any ? std::min(first, record.start_s) : record.start_s;
    any = true;
  }
  std::vector<std::string> hosts = timeline.hosts;
  for (const TimelineRecord& record : timeline.records)
    if (std::find(hosts.begin(), hosts.end(), record.host) == hosts.end()) hosts.push_back(record.host);
  for (const std::string& host : hosts) {
    const std::string key = side + "/" + host;
    merged.hosts.push_back(key);
    options.host_labels[key] = host;
  }
  if (!hosts.empty()) options.row_headings[side + "/" + hosts.front()] = side;
  for (TimelineRecord record : timeline.records) {
    record.host = side + "/" + record.host;
    if (!record.peer.empty()) record.peer = side + "/" + record.peer;
    record.start_s -= first;
    record.end_s -= first;
    merged.records.push_back(std::move(record));
  }
  for (const auto& [host, series] : timeline.memory_series) {
    auto& shifted = merged.memory_series[side + "/" + host];
    for (const auto& [time, bytes] : series) shifted.push_back({time - first, bytes});
  }
}

}  // namespace

std::string comparison_to_svg(const Timeline& simulated, const Timeline& measured, const std::string& title) {
  Timeline merged;
  SvgOptions options;
  options.title = title;
  append_side(simulated, "simulated", merged, options);
  append_side(measured, "measured", merged, options);
  return timeline_to_svg(merged, options);
}

}  // namespace pipegrid
