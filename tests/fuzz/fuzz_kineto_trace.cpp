// libFuzzer target: PyTorch profiler (Kineto) traces (parse_kineto_trace,
// import_traces with the default mapping). The input is one rank's trace,
// or two ranks' separated by a line "----": whatever parses must import or
// be refused with an InputError, never crash or hang, and every record it
// imports has finite times that do not run backwards.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "interchange/kineto_import.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  const std::string text = fuzz::text_of(data, size);
  std::vector<std::string> parts;
  const std::size_t separator = text.find("\n----\n");
  if (separator == std::string::npos) {
    parts = {text};
  } else {
    parts = {text.substr(0, separator), text.substr(separator + 6)};
  }
  try {
    std::vector<kineto::RankTrace> ranks;
    for (std::size_t r = 0; r < parts.size(); ++r) ranks.push_back(kineto::parse_kineto_trace(parts[r], "rank" + std::to_string(r) + ".json"));
    kineto::ImportOptions options;
    options.micro_batch_size = 2;
    const kineto::ImportResult result = kineto::import_traces(ranks, options);
    for (const TimelineRecord& record : result.timeline.records)
      fuzz::fuzz_check(std::isfinite(record.start_s) && std::isfinite(record.end_s) && record.end_s >= record.start_s,
                       "an imported record with a time that is not finite or ends before it starts");
  } catch (const InputError&) {
  }
  return 0;
}
