// libFuzzer target: Megatron-LM launch arguments (read_megatron_args). A
// launch read must describe a gpt model the generator accepts: its profile
// builds, or the generator's limits refuse it with an InputError.

#include <cstddef>
#include <cstdint>

#include "core/error.hpp"
#include "generators/model_generators.hpp"
#include "layout/megatron_args.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  MegatronLaunch launch;
  try {
    launch = read_megatron_args(fuzz::text_of(data, size), "fuzz.sh");
  } catch (const InputError&) {
    return 0;
  }
  fuzz::fuzz_check(launch.virtual_stages >= 1 && launch.tensor_parallel >= 1 && launch.pipeline_parallel >= 1,
                   "a launch read with a size below 1");
  fuzz::fuzz_check(launch.schedule == (launch.virtual_stages > 1 ? "interleaved-1f1b" : "1f1b-sno"),
                   "the schedule does not follow the virtual stages");
  try {
    resolve_model_spec(launch.model);
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "a launch read describes a model the generator refuses");
  }
  return 0;
}
