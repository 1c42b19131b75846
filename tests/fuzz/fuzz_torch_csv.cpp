// libFuzzer target: PyTorch pipelining schedule CSV (parse_torch_csv, then
// validate_program). A schedule read must write (program_to_torch_csv) to a
// CSV that reads back as the same Program.

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/program.hpp"
#include "core/torch_schedule.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  Program program;
  try {
    program = parse_torch_csv(fuzz::text_of(data, size), "fuzz.csv").program;
  } catch (const InputError&) {
    return 0;
  }
  std::string written;
  try {
    written = program_to_torch_csv(program);
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "program_to_torch_csv refused a Program that parse_torch_csv returned");
  }
  try {
    fuzz::fuzz_check(parse_torch_csv(written, "written.csv").program == program,
                     "program_to_torch_csv round trip changed the program");
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "program_to_torch_csv wrote a CSV that does not read back");
  }
  try {
    validate_program(program);
  } catch (const ProgramError&) {
  }
  return 0;
}
