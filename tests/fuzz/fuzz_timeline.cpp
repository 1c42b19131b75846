// libFuzzer target: timeline CSV (parse_timeline_csv). A timeline read must
// write (timeline_to_csv) to a CSV that reads back to the same text.

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/timeline.hpp"
#include "render/timeline_csv.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  Timeline timeline;
  try {
    timeline = parse_timeline_csv(fuzz::text_of(data, size), "fuzz.csv");
  } catch (const InputError&) {
    return 0;
  }
  const std::string written = timeline_to_csv(timeline);
  try {
    fuzz::fuzz_check(timeline_to_csv(parse_timeline_csv(written, "written.csv")) == written,
                     "timeline_to_csv round trip changed the timeline");
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "timeline_to_csv wrote a timeline that does not read back");
  }
  return 0;
}
