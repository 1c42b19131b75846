// libFuzzer target: Program text (parse_program_text, then validate_program).
// A program read must print (program_to_text) to a text that reads back the
// same.

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/program.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  Program program;
  try {
    program = parse_program_text(fuzz::text_of(data, size), "fuzz.txt");
  } catch (const InputError&) {
    return 0;
  }
  const std::string written = program_to_text(program);
  try {
    fuzz::fuzz_check(parse_program_text(written, "written.txt") == program, "program_to_text round trip changed the program");
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "program_to_text wrote a program that does not read back");
  }
  try {
    validate_program(program);
  } catch (const ProgramError&) {
  }
  return 0;
}
