// libFuzzer target: profile JSON (parse_profile_json). What it reads must
// pass check_profile and survive profile_to_json unchanged.

#include <cstddef>
#include <cstdint>

#include "core/error.hpp"
#include "core/profile.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  Profile profile;
  try {
    profile = parse_profile_json(fuzz::text_of(data, size), "fuzz.json");
  } catch (const InputError&) {
    return 0;
  }
  try {
    check_profile(profile, "fuzz.json");
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "parse_profile_json returned a profile that check_profile rejects");
  }
  const std::string written = profile_to_json(profile);
  Profile again;
  try {
    again = parse_profile_json(written, "written.json");
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "profile_to_json wrote a profile that does not read back");
  }
  fuzz::fuzz_check(profile_to_json(again) == written, "profile_to_json round trip changed the profile");
  // Another size: interpolated, or refused with an InputError.
  for (const int size : profile_micro_batch_sizes(profile)) {
    try {
      profile_at_micro_batch_size(profile, size + 1);
    } catch (const InputError&) {
    }
  }
  return 0;
}
