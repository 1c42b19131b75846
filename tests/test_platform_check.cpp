// Pure platform checks (core/platform_check.hpp) and the strict reading of
// host property values (core/platform.hpp).

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/platform.hpp"
#include "core/platform_check.hpp"
#include "expect_input_error.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

TEST(NearMissProperty, CaseTyposAndPrefixesSuggestTheKnownName) {
  EXPECT_EQ(near_miss_property("mem"), "memory");          // prefix of 3 letters
  EXPECT_EQ(near_miss_property("Memory"), "memory");       // case
  EXPECT_EQ(near_miss_property("MEMORY"), "memory");
  EXPECT_EQ(near_miss_property("memroy"), "memory");       // transposition
  EXPECT_EQ(near_miss_property("memry"), "memory");        // deletion
  EXPECT_EQ(near_miss_property("speedfactor"), "speed_factor");
  EXPECT_EQ(near_miss_property("speed"), "speed_factor");  // prefix
  EXPECT_EQ(near_miss_property("kidn"), "kind");
  EXPECT_EQ(near_miss_property("exec"), "execution");
  EXPECT_EQ(near_miss_property("action_overheads"), "action_overhead");
  EXPECT_EQ(near_miss_property("optimizer_step_rates"), "optimizer_step_rate");
  EXPECT_EQ(near_miss_property("devices"), "device");
}

TEST(NearMissProperty, KnownAndUnrelatedNamesAreNoMiss) {
  for (const std::string& known : known_host_properties()) EXPECT_EQ(near_miss_property(known), std::nullopt) << known;
  for (const char* other : {"wattage_per_state", "wattage_off", "colour", "id", "me", "ki", "rack", "owner", ""})
    EXPECT_EQ(near_miss_property(other), std::nullopt) << other;
  // A very long name is no near miss (and costs no quadratic distance).
  EXPECT_EQ(near_miss_property(std::string(100000, 'x')), std::nullopt);
}

TEST(NearMissProperty, EditDistanceCountsTranspositionsAsOne) {
  EXPECT_EQ(edit_distance("memory", "memory"), 0u);
  EXPECT_EQ(edit_distance("memroy", "memory"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(HostPropertiesStrict, NearMissIsAnErrorNamingFileHostPropertyAndSuggestion) {
  const std::string message =
      input_error_of([] { host_info_from_properties("plat.xml", "gpu0", {{"mem", "16GiB"}, {"kind", "gpu"}}); });
  EXPECT_CONTAINS(message, "plat.xml: host 'gpu0': unknown property 'mem': did you mean 'memory'?");
  // Unrelated properties are left to the platform check's warning.
  EXPECT_NO_THROW(host_info_from_properties("plat.xml", "gpu0", {{"wattage_per_state", "100:200"}}));
}

TEST(HostPropertiesStrict, NumbersAreReadWholeFiniteAndInRange) {
  const struct {
    const char* property;
    const char* value;
    const char* expected;
  } bad[] = {
      {"memory", "1e999", "non-negative size"},       {"memory", "1e300TiB", "non-negative size"},
      {"memory", "0x10", "non-negative size"},        {"memory", " 16GiB", "non-negative size"},
      {"memory", "nan", "non-negative size"},         {"memory", "-1GiB", "non-negative size"},
      {"memory", "16 GiBs", "non-negative size"},     {"speed_factor", "0", "positive number"},
      {"speed_factor", "2x", "positive number"},      {"speed_factor", "1e-400", "positive number"},
      {"speed_factor", "inf", "positive number"},     {"speed_factor", "1e7", "positive number"},
      {"speed_factor", "", "positive number"},        {"action_overhead", "1e999s", "non-negative duration"},
      {"action_overhead", "2e9", "at most"},          {"optimizer_step_overhead", "1e-400", "non-negative duration"},
      {"optimizer_step_rate", "1e-5", "at least 1 byte per second"},
      {"optimizer_step_rate", "1e999GBps", "positive bandwidth"},
      {"device", "V 100", "device type name"},        {"kind", "GPU", "gpu or fpga"},
  };
  for (const auto& c : bad) {
    const std::string message = input_error_of([&] { host_info_from_properties("plat.xml", "gpu0", {{c.property, c.value}}); });
    EXPECT_CONTAINS(message, c.expected);
    EXPECT_CONTAINS(message, fmt::format("property '{}'", c.property));
  }
  const HostInfo good = host_info_from_properties(
      "plat.xml", "gpu0", {{"memory", "1.5 GiB"}, {"speed_factor", "+1.7965"}, {"action_overhead", ".5ms"}});
  EXPECT_DOUBLE_EQ(*good.memory_bytes, 1.5 * 1073741824.0);
  EXPECT_DOUBLE_EQ(good.speed_factor, 1.7965);
  EXPECT_DOUBLE_EQ(good.action_overhead_s, 5e-4);
}

TEST(HostPropertiesStrict, MessagesEscapeBytesThatAreNotUtf8) {
  const std::string message = input_error_of([] { host_info_from_properties("plat.xml", "gpu\xE9", {{"kind", "g\xFFu"}}); });
  EXPECT_CONTAINS(message, "host 'gpu\\xE9'");
  EXPECT_CONTAINS(message, "found 'g\\xFFu'");
  EXPECT_TRUE(valid_utf8(message));
}

TEST(ScanNumber, ReadsDecimalPrefixesOnly) {
  std::size_t length = 0;
  EXPECT_EQ(scan_number("12.5GBps", &length), 12.5);
  EXPECT_EQ(length, 4u);
  EXPECT_EQ(scan_number("-3e2s", &length), -300);
  EXPECT_EQ(length, 4u);
  EXPECT_EQ(scan_number("1EBps", &length), 1);  // E is a unit prefix here, no exponent
  EXPECT_EQ(length, 1u);
  EXPECT_EQ(scan_number(".5", &length), 0.5);
  EXPECT_EQ(scan_number("0", &length), 0);
  for (const char* bad : {"", " 1", "inf", "nan", "e5", ".", "-", "1e999", "1e-400", "4.9e-324"})
    EXPECT_EQ(scan_number(bad, &length), std::nullopt) << bad;
}

TEST(Printable, EscapesInvalidUtf8AndControlCharacters) {
  EXPECT_EQ(printable("gpu0"), "gpu0");
  EXPECT_EQ(printable("gpü"), "gpü");
  EXPECT_EQ(printable("a\xE9" "d"), "a\\xE9d");           // lead byte without continuation
  EXPECT_EQ(printable("\xC0\xAF"), "\\xC0\\xAF");          // overlong
  EXPECT_EQ(printable("\xED\xA0\x80"), "\\xED\\xA0\\x80");  // surrogate
  EXPECT_EQ(printable("a\nb\x7F"), "a\\x0Ab\\x7F");
  EXPECT_EQ(printable("a\nb", true), "a\nb");
  EXPECT_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // beyond U+10FFFF
  EXPECT_TRUE(valid_utf8("\xF4\x8F\xBF\xBF"));
}

TEST(HostIds, RefusesWhatTheOutputsCannotCarry) {
  EXPECT_EQ(host_id_problem("s0-gpu0"), "");
  EXPECT_EQ(host_id_problem("node-1.example.org"), "");
  EXPECT_EQ(host_id_problem("gpü"), "");
  EXPECT_CONTAINS(host_id_problem(""), "empty");
  EXPECT_CONTAINS(host_id_problem("gpu,1"), "comma");
  EXPECT_CONTAINS(host_id_problem("gpu 1"), "space");
  EXPECT_CONTAINS(host_id_problem("gpu\t1"), "control character \\x09");
  EXPECT_CONTAINS(host_id_problem("gpu\"1"), "double quote");
  EXPECT_CONTAINS(host_id_problem("gpu\xE9"), "byte \\xE9 is not valid UTF-8");
  EXPECT_CONTAINS(host_id_problem("gpu\u00A01"), "white space");
}

TEST(Placement, OneDevicePerHost) {
  EXPECT_NO_THROW(check_one_device_per_host({{"a", "b"}, {"c"}}, "p.json"));
  EXPECT_NO_THROW(check_one_device_per_host({{"a"}, {"b"}, {"a"}, {"b"}}, "p.json"));  // interleaved
  EXPECT_CONTAINS(input_error_of([] { check_one_device_per_host({{"a", "b"}, {"c"}, {"a"}}, "p.json"); }),
                  "p.json: stages 0 and 2 are both placed on host 'a'");
  EXPECT_CONTAINS(input_error_of([] { check_one_device_per_host({{"a", "a"}}, "p.json"); }),
                  "p.json: stage 0 lists host 'a' twice");
}

}  // namespace
}  // namespace pipegrid
