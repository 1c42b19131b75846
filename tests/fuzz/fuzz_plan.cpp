// libFuzzer target: plan files (parse_plan_json). A plan read must write
// back (plan_to_json) to a plan that reads back to the same text.

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/plan.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  Plan plan;
  try {
    plan = parse_plan_json(fuzz::text_of(data, size), "fuzz.plan.json");
  } catch (const InputError&) {
    return 0;
  }
  const std::string written = plan_to_json(plan);
  try {
    fuzz::fuzz_check(plan_to_json(parse_plan_json(written, "written.plan.json")) == written,
                     "plan_to_json round trip changed the plan");
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "plan_to_json wrote a plan that does not read back");
  }
  return 0;
}
