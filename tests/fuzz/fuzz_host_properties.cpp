// libFuzzer target: a host's platform properties (host_info_from_properties).
// Input: the host's name on the first line, then one `key=value` a line
// (the properties a platform XML would give). A HostInfo returned must hold
// usable values: a positive finite speed factor, finite non-negative memory
// and overheads, a positive finite optimizer step rate.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "core/platform.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  std::istringstream lines(fuzz::text_of(data, size));
  std::string host, line;
  std::getline(lines, host);
  std::map<std::string, std::string> properties;
  while (std::getline(lines, line)) {
    const auto equals = line.find('=');
    if (equals == std::string::npos) continue;
    properties[line.substr(0, equals)] = line.substr(equals + 1);
  }
  HostInfo info;
  try {
    info = host_info_from_properties("fuzz.xml", host, properties);
  } catch (const InputError&) {
    return 0;
  }
  fuzz::fuzz_check(std::isfinite(info.speed_factor) && info.speed_factor > 0, "speed_factor not positive and finite");
  fuzz::fuzz_check(!info.memory_bytes || (std::isfinite(*info.memory_bytes) && *info.memory_bytes >= 0),
                   "memory not finite and non-negative");
  fuzz::fuzz_check(std::isfinite(info.action_overhead_s) && info.action_overhead_s >= 0,
                   "action_overhead not finite and non-negative");
  fuzz::fuzz_check(!info.optimizer_step_rate_Bps || (std::isfinite(*info.optimizer_step_rate_Bps) && *info.optimizer_step_rate_Bps > 0),
                   "optimizer_step_rate not positive and finite");
  fuzz::fuzz_check(!info.optimizer_step_overhead_s ||
                       (std::isfinite(*info.optimizer_step_overhead_s) && *info.optimizer_step_overhead_s >= 0),
                   "optimizer_step_overhead not finite and non-negative");
  return 0;
}
