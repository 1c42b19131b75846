// libFuzzer target: the report sections of experiment files
// (parse_report_spec). Text that toml++ reads either gives a spec or throws
// InputError.

#include <cstddef>
#include <cstdint>
#include <string>

#include <toml++/toml.h>

#include "core/error.hpp"
#include "sweep/report.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  toml::table root;
  try {
    root = toml::parse(std::string_view(fuzz::text_of(data, size)), std::string_view("fuzz.toml"));
  } catch (const toml::parse_error&) {
    return 0;
  }
  try {
    const ReportSpec spec = parse_report_spec(root, "fuzz.toml");
    for (const PlotSpec& plot : spec.plots) fuzz::fuzz_check(!plot.kind.empty(), "a plot without a kind");
  } catch (const InputError&) {
  }
  return 0;
}
