#pragma once
// Shared by the libFuzzer targets (tests/fuzz/README.md). A target feeds the
// bytes to one reader and catches only the errors that reader documents
// (InputError, ProgramError where it throws one): any other exception
// escapes, std::terminate aborts, and libFuzzer reports the input. An
// invariant that does not hold (a round trip that changes the data) is
// reported the same way, through fuzz_check.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace pipegrid::fuzz {

inline std::string text_of(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

/// Aborts with `what` on stderr unless `condition` holds.
inline void fuzz_check(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

}  // namespace pipegrid::fuzz
