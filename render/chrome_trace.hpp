#pragma once
// Timeline -> Chrome trace event JSON (Perfetto, chrome://tracing).

#include <string>

#include "core/timeline.hpp"

namespace pipegrid {

/** Chrome trace JSON (Perfetto): one process per device, compute and
 *  communication on separate tracks, memory as a counter track. */
std::string timeline_to_chrome_trace(const Timeline& timeline);

}  // namespace pipegrid
