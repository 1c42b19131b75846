// Profile JSON (parse, errors, exact round trip; per-device times; several
// micro-batch sizes and the interpolation between them) and PipeDream
// graph.txt (order, cut bytes, Input nodes, batch size, errors, the shipped
// profiles).

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "expect_input_error.hpp"
#include "core/partition.hpp"
#include "core/profile.hpp"

namespace pipegrid {
namespace {

const std::string kSourceDir = PIPEGRID_SOURCE_DIR;

using testutil::input_error_of;

/// A folder under the system temporary folder, removed with its content at
/// the end of the test.
class TemporaryFolder {
 public:
  TemporaryFolder() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("pipegrid-test-profile-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TemporaryFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;

  /// Writes `content` to `relative` (folders created) and returns its path.
  std::string write(const std::string& relative, const std::string& content) const {
    const std::filesystem::path file = path_ / relative;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << content;
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

/// One node line of graph.txt.
std::string node(const std::string& id, const std::string& description, double forward_ms, double backward_ms,
                 const std::string& activation, double parameters) {
  std::ostringstream line;
  line << id << " -- " << description << " -- forward_compute_time=" << forward_ms
       << ", backward_compute_time=" << backward_ms << ", activation_size=" << activation
       << ", parameter_size=" << parameters << "\n";
  return line.str();
}

std::string edge(const std::string& from, const std::string& to) { return "\t" + from + " -- " + to + "\n"; }

std::vector<std::string> layer_names(const Profile& profile) {
  std::vector<std::string> names;
  for (const Layer& layer : profile.layers) names.push_back(layer.name);
  return names;
}

// ---------------------------------------------------------------- JSON

const char* const kTinyText = R"({
  "name": "tiny",
  "micro_batch_size": 4,
  "input_bytes": 40,
  "layers": [
    {"name": "conv1", "forward_s": 0.5, "backward_s": 1.0, "output_bytes": 25, "parameter_bytes": 100},
    {"name": "fc", "forward_s": 0.25, "backward_s": 0.75, "output_bytes": 0, "parameter_bytes": 50}
  ]
})";

/// kTinyText's layers replaced by `layers` (the text inside the brackets).
std::string tiny_with_layers(const std::string& layers) {
  return R"({"name": "tiny", "micro_batch_size": 4, "layers": [)" + layers + "]}";
}

const char* const kGoodLayer = R"({"name": "a", "forward_s": 1, "backward_s": 2, "output_bytes": 3, "parameter_bytes": 4})";

TEST(ProfileJson, ParsesEveryField) {
  const Profile profile = parse_profile_json(kTinyText, "tiny.json");
  EXPECT_EQ(profile.name, "tiny");
  EXPECT_EQ(profile.micro_batch_size, 4);
  EXPECT_EQ(profile.input_bytes, 40);
  ASSERT_EQ(profile.layers.size(), 2u);
  EXPECT_EQ(profile.layers[0].name, "conv1");
  EXPECT_EQ(profile.layers[0].forward_s, 0.5);
  EXPECT_EQ(profile.layers[0].backward_s, 1.0);
  EXPECT_EQ(profile.layers[0].output_bytes, 25);
  EXPECT_EQ(profile.layers[0].parameter_bytes, 100);
  EXPECT_EQ(profile.layers[1].name, "fc");
  EXPECT_EQ(profile.layers[1].backward_s, 0.75);
}

TEST(ProfileJson, InputBytesDefaultsToZero) {
  const Profile profile = parse_profile_json(tiny_with_layers(kGoodLayer), "tiny.json");
  EXPECT_EQ(profile.input_bytes, 0);
  ASSERT_EQ(profile.layers.size(), 1u);
}

TEST(ProfileJson, ModelIsOptionalAndRoundTrips) {
  Profile profile = parse_profile_json(tiny_with_layers(kGoodLayer), "tiny.json");
  EXPECT_EQ(profile.model, "");
  EXPECT_EQ(profile_to_json(profile).find("\"model\""), std::string::npos);
  profile.model = "mlp depth=4 width=64";
  const std::string text = profile_to_json(profile);
  EXPECT_NE(text.find("\"model\": \"mlp depth=4 width=64\""), std::string::npos);
  EXPECT_EQ(parse_profile_json(text, "tiny.json").model, "mlp depth=4 width=64");
  std::string bad = text;
  bad.replace(bad.find("\"mlp depth=4 width=64\""), std::string("\"mlp depth=4 width=64\"").size(), "4");
  EXPECT_CONTAINS(input_error_of([&] { parse_profile_json(bad, "tiny.json"); }), "tiny.json: model: expected a string");
}

TEST(ProfileJson, RoundTripIsExactAndDeterministic) {
  Profile profile;
  profile.name = "odd \"name\" \\ with unicode \xC3\xA9";
  profile.micro_batch_size = 7;
  profile.input_bytes = 77070336;
  profile.layers.push_back({"a", 0.1, 1.0 / 3.0, 1644167168, 0, {}, {}});
  profile.layers.push_back({"b", 6.949e-3, 0.0069489999999999994, 1e-300, 123456789.123456789, {}, {}});
  profile.layers.push_back({"c", std::nextafter(1.0, 2.0), 5e-324, 9007199254740993.0, 1e18, {}, {}});  // 1e18: the byte limit
  profile.layers.push_back({"d", 0, 2.5, std::nextafter(1e18, 0.0), 4, {}, {}});  // the largest double below the limit

  const std::string text = profile_to_json(profile);
  const Profile back = parse_profile_json(text, "round-trip");
  EXPECT_EQ(back.name, profile.name);
  EXPECT_EQ(back.micro_batch_size, profile.micro_batch_size);
  EXPECT_EQ(back.input_bytes, profile.input_bytes);
  ASSERT_EQ(back.layers.size(), profile.layers.size());
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    EXPECT_EQ(back.layers[l].name, profile.layers[l].name);
    EXPECT_EQ(back.layers[l].forward_s, profile.layers[l].forward_s);
    EXPECT_EQ(back.layers[l].backward_s, profile.layers[l].backward_s);
    EXPECT_EQ(back.layers[l].output_bytes, profile.layers[l].output_bytes);
    EXPECT_EQ(back.layers[l].parameter_bytes, profile.layers[l].parameter_bytes);
  }
  EXPECT_EQ(profile_to_json(back), text);
  EXPECT_EQ(profile_to_json(profile), text);
}

TEST(ProfileJson, WritesIntegersAsIntegersAndOneLayerALine) {
  const std::string text = profile_to_json(parse_profile_json(kTinyText, "tiny.json"));
  EXPECT_EQ(text,
            "{\n"
            "  \"name\": \"tiny\",\n"
            "  \"micro_batch_size\": 4,\n"
            "  \"input_bytes\": 40,\n"
            "  \"layers\": [\n"
            "    {\"name\": \"conv1\", \"forward_s\": 0.5, \"backward_s\": 1, \"output_bytes\": 25, \"parameter_bytes\": 100},\n"
            "    {\"name\": \"fc\", \"forward_s\": 0.25, \"backward_s\": 0.75, \"output_bytes\": 0, \"parameter_bytes\": 50}\n"
            "  ]\n"
            "}\n");
}

TEST(ProfileJson, MissingFieldNamesFileAndPath) {
  const std::string layers = std::string(kGoodLayer) + R"(, {"name": "b", "forward_s": 1, "output_bytes": 1, "parameter_bytes": 1})";
  const std::string message = input_error_of([&] { parse_profile_json(tiny_with_layers(layers), "tiny.json"); });
  EXPECT_CONTAINS(message, "tiny.json: layers[1].backward_s: expected a non-negative number, found nothing");
}

TEST(ProfileJson, MissingTopLevelFields) {
  EXPECT_CONTAINS(input_error_of([] { parse_profile_json(R"({"micro_batch_size": 1, "layers": []})", "p.json"); }),
                  "p.json: name: expected a string, found nothing");
  EXPECT_CONTAINS(input_error_of([] { parse_profile_json(R"({"name": "x", "layers": []})", "p.json"); }),
                  "p.json: micro_batch_size: expected an integer >= 1, found nothing");
  EXPECT_CONTAINS(input_error_of([] { parse_profile_json(R"({"name": "x", "micro_batch_size": 1})", "p.json"); }),
                  "p.json: layers: expected a non-empty list of layers, found nothing");
}

TEST(ProfileJson, NegativeTimeIsAnError) {
  const std::string layers = std::string(kGoodLayer) + ", " + kGoodLayer +
                             R"(, {"name": "c", "forward_s": -1, "backward_s": 1, "output_bytes": 1, "parameter_bytes": 1})";
  const std::string message = input_error_of([&] { parse_profile_json(tiny_with_layers(layers), "tiny.json"); });
  EXPECT_CONTAINS(message, "tiny.json: layers[2].forward_s: expected a non-negative number, found -1");
}

TEST(ProfileJson, NegativeInputBytesIsAnError) {
  const std::string text = R"({"name": "x", "micro_batch_size": 1, "input_bytes": -8, "layers": [)" +
                           std::string(kGoodLayer) + "]}";
  EXPECT_CONTAINS(input_error_of([&] { parse_profile_json(text, "p.json"); }),
                  "p.json: input_bytes: expected a non-negative number, found -8");
}

TEST(ProfileJson, BadTypesAreErrors) {
  EXPECT_CONTAINS(input_error_of([] {
                    parse_profile_json(tiny_with_layers(
                                           R"({"name": "a", "forward_s": "fast", "backward_s": 1, "output_bytes": 1, "parameter_bytes": 1})"),
                                       "tiny.json");
                  }),
                  "tiny.json: layers[0].forward_s: expected a non-negative number, found \"fast\"");
  EXPECT_CONTAINS(input_error_of([] {
                    parse_profile_json(tiny_with_layers(
                                           R"({"name": 3, "forward_s": 1, "backward_s": 1, "output_bytes": 1, "parameter_bytes": 1})"),
                                       "tiny.json");
                  }),
                  "tiny.json: layers[0].name: expected a string, found 3");
  EXPECT_CONTAINS(input_error_of([] { parse_profile_json(tiny_with_layers("[1, 2]"), "tiny.json"); }),
                  "tiny.json: layers[0]: expected a layer object, found [1,2]");
  EXPECT_CONTAINS(input_error_of([] {
                    parse_profile_json(R"({"name": "x", "micro_batch_size": 2.5, "layers": []})", "tiny.json");
                  }),
                  "tiny.json: micro_batch_size: expected an integer >= 1, found 2.5");
  EXPECT_CONTAINS(input_error_of([] {
                    parse_profile_json(R"({"name": "x", "micro_batch_size": 0, "layers": []})", "tiny.json");
                  }),
                  "tiny.json: micro_batch_size: expected an integer >= 1, found 0");
  EXPECT_CONTAINS(input_error_of([] { parse_profile_json("[1]", "tiny.json"); }),
                  "tiny.json: expected a JSON object (a profile), found [1]");
}

TEST(ProfileJson, UnknownFieldIsAnError) {
  const std::string text = R"({"name": "x", "micro_batch_size": 1, "input_byte": 8, "layers": [)" +
                           std::string(kGoodLayer) + "]}";
  EXPECT_CONTAINS(input_error_of([&] { parse_profile_json(text, "p.json"); }), "p.json: expected only the fields name, model, "
                                                                               "micro_batch_size, micro_batch_sizes, "
                                                                               "input_bytes, dtype, sequence_length, layers, "
                                                                               "found 'input_byte'");
  EXPECT_CONTAINS(input_error_of([] {
                    parse_profile_json(tiny_with_layers(
                                           R"({"name": "a", "forward": 1, "forward_s": 1, "backward_s": 1, "output_bytes": 1, "parameter_bytes": 1})"),
                                       "p.json");
                  }),
                  "p.json: layers[0]: expected only the fields name, forward_s, backward_s, backward_input_s, "
                  "backward_weight_s, output_bytes, activation_bytes, parameter_bytes, op, forward_flops, "
                  "backward_input_flops, backward_weight_flops, bytes_read, bytes_written, attention_core_flops_share, "
                  "attention_core_stash_share, devices, vocabulary, "
                "replicated_parameter_bytes, replicated_activation_fraction, transformer_shape, expert_parameter_bytes, "
                          "moe_dispatch_bytes, found 'forward'");
}

TEST(ProfileJson, MalformedJsonReportsLineAndColumn) {
  const std::string text = "{\n  \"name\": \"x\",\n  \"micro_batch_size\": ,\n  \"layers\": []\n}\n";
  const std::string message = input_error_of([&] { parse_profile_json(text, "tiny.json"); });
  EXPECT_CONTAINS(message, "tiny.json: malformed JSON: parse error at line 3, column 23");
  EXPECT_EQ(message.find("[json.exception"), std::string::npos) << message;
}

TEST(ProfileJson, NumberTooLargeForADoubleIsAnError) {
  const std::string message = input_error_of([] {
    parse_profile_json(tiny_with_layers(
                           R"({"name": "a", "forward_s": 1e999, "backward_s": 1, "output_bytes": 1, "parameter_bytes": 1})"),
                       "tiny.json");
  });
  EXPECT_CONTAINS(message, "tiny.json: layers[0].forward_s: expected a finite number, found 1e999 (beyond the range of a double)");
  EXPECT_EQ(message.find("[json.exception"), std::string::npos) << message;
}

TEST(ProfileJson, EmptyLayersIsAnError) {
  EXPECT_CONTAINS(input_error_of([] { parse_profile_json(tiny_with_layers(""), "tiny.json"); }),
                  "tiny.json: layers: expected a non-empty list of layers, found []");
}

TEST(ProfileJson, CheckProfileRejectsNegativeNonFiniteAndEmpty) {
  Profile profile = parse_profile_json(kTinyText, "tiny.json");
  EXPECT_NO_THROW(check_profile(profile, "tiny.json"));
  profile.layers[1].backward_s = std::numeric_limits<double>::quiet_NaN();
  EXPECT_CONTAINS(input_error_of([&] { check_profile(profile, "tiny.json"); }),
                  "tiny.json: layers[1].backward_s: expected a non-negative number, found nan");
  profile.layers[1].backward_s = 1;
  profile.layers[0].parameter_bytes = -2;
  EXPECT_CONTAINS(input_error_of([&] { check_profile(profile, "tiny.json"); }),
                  "tiny.json: layers[0].parameter_bytes: expected a non-negative number, found -2");
  profile.layers[0].parameter_bytes = 2;
  profile.input_bytes = std::numeric_limits<double>::infinity();
  EXPECT_CONTAINS(input_error_of([&] { check_profile(profile, "tiny.json"); }), "tiny.json: input_bytes");
  profile.input_bytes = 0;
  profile.layers.clear();
  EXPECT_CONTAINS(input_error_of([&] { check_profile(profile, "tiny.json"); }),
                  "tiny.json: layers: expected at least one layer, found none");
}

TEST(ProfileJson, ReadProfileReadsJsonFilesAndNamesThemInErrors) {
  const std::string tiny = kSourceDir + "/tests/data/common/tiny.json";
  const Profile profile = read_profile(tiny, std::nullopt);
  EXPECT_EQ(profile.name, "tiny");
  EXPECT_EQ(profile.micro_batch_size, 4);
  EXPECT_EQ(profile.layers.size(), 4u);
  EXPECT_EQ(read_profile(tiny, 4).layers.size(), 4u);  // the profile's own batch size is accepted
  EXPECT_CONTAINS(input_error_of([&] { read_profile(tiny, 8); }), "tiny.json: batch size");

  TemporaryFolder folder;
  const std::string bad = folder.write("bad.json", tiny_with_layers(""));
  EXPECT_CONTAINS(input_error_of([&] { read_profile(bad, std::nullopt); }), bad + ": layers:");
  EXPECT_CONTAINS(input_error_of([&] { read_profile(folder.write("x", "") + "/missing.json", std::nullopt); }),
                  "missing.json");
}

// ---------------------------------------------------------------- per-device times

/// A layer with per-device times (single-size).
const char* const kDeviceLayer =
    R"({"name": "conv", "forward_s": 1, "backward_s": 2, "output_bytes": 3, "parameter_bytes": 4, )"
    R"("devices": {"VCU129": {"forward_s": 0.25, "backward_s": 0.5}, "V100": {"forward_s": 0.125, "backward_s": 0}}})";

TEST(ProfileDevices, ParsesPerDeviceTimes) {
  const Profile profile = parse_profile_json(tiny_with_layers(std::string(kDeviceLayer) + ", " + kGoodLayer), "p.json");
  ASSERT_EQ(profile.layers.size(), 2u);
  const Layer& conv = profile.layers[0];
  ASSERT_EQ(conv.device_times.size(), 2u);
  EXPECT_EQ(conv.device_times.at("VCU129").forward_s, 0.25);
  EXPECT_EQ(conv.device_times.at("VCU129").backward_s, 0.5);
  EXPECT_EQ(conv.device_times.at("V100").forward_s, 0.125);
  EXPECT_EQ(conv.device_times.at("V100").backward_s, 0);
  EXPECT_TRUE(profile.layers[1].device_times.empty());
  EXPECT_TRUE(profile.measured.empty());
  EXPECT_NO_THROW(check_profile(profile, "p.json"));

  // The times apply on a host of that type, speed_factor or not; others scale.
  HostInfo vcu129;
  vcu129.device_type = "VCU129";
  vcu129.speed_factor = 3;
  HostInfo other;
  other.device_type = "VCU118";
  other.speed_factor = 2;
  EXPECT_EQ(layer_times_on(conv, vcu129).forward_s, 0.25);
  EXPECT_EQ(layer_times_on(conv, vcu129).backward_s, 0.5);
  EXPECT_EQ(layer_times_on(conv, other).forward_s, 0.5);
  EXPECT_EQ(layer_times_on(conv, other).backward_s, 1);
}

TEST(ProfileDevices, WritesDevicesSortedOnlyWhereGivenAndReadsBackTheSame) {
  const Profile profile = parse_profile_json(tiny_with_layers(std::string(kDeviceLayer) + ", " + kGoodLayer), "p.json");
  const std::string text = profile_to_json(profile);
  EXPECT_EQ(text,
            "{\n"
            "  \"name\": \"tiny\",\n"
            "  \"micro_batch_size\": 4,\n"
            "  \"input_bytes\": 0,\n"
            "  \"layers\": [\n"
            "    {\"name\": \"conv\", \"forward_s\": 1, \"backward_s\": 2, \"output_bytes\": 3, \"parameter_bytes\": 4, "
            "\"devices\": {\"V100\": {\"forward_s\": 0.125, \"backward_s\": 0}, \"VCU129\": {\"forward_s\": 0.25, "
            "\"backward_s\": 0.5}}},\n"
            "    {\"name\": \"a\", \"forward_s\": 1, \"backward_s\": 2, \"output_bytes\": 3, \"parameter_bytes\": 4}\n"
            "  ]\n"
            "}\n");
  const Profile back = parse_profile_json(text, "round-trip");
  ASSERT_EQ(back.layers.size(), 2u);
  EXPECT_EQ(back.layers[0].device_times.size(), 2u);
  EXPECT_EQ(back.layers[0].device_times.at("VCU129").backward_s, 0.5);
  EXPECT_EQ(profile_to_json(back), text);
}

TEST(ProfileDevices, BadDeviceEntriesNameFileLayerAndField) {
  auto error_for = [](const std::string& devices) {
    return input_error_of([&] {
      parse_profile_json(tiny_with_layers(std::string(kGoodLayer) +
                                          R"(, {"name": "b", "forward_s": 1, "backward_s": 2, "output_bytes": 3, )"
                                          R"("parameter_bytes": 4, "devices": )" +
                                          devices + "}"),
                         "p.json");
    });
  };
  EXPECT_CONTAINS(error_for("[1, 2]"), "p.json: layers[1].devices: expected an object of per-device-type times");
  EXPECT_CONTAINS(error_for(R"({"VCU129": 0.5})"),
                  "p.json: layers[1].devices.VCU129: expected an object with forward_s and backward_s, found 0.5");
  EXPECT_CONTAINS(error_for(R"({"VCU129": [0.5, 1]})"),
                  "p.json: layers[1].devices.VCU129: expected an object with forward_s and backward_s, found [0.5,1]");
  EXPECT_CONTAINS(error_for(R"({"VCU129": {"forward_s": 1, "backward": 2}})"),
                  "p.json: layers[1].devices.VCU129: expected only the fields forward_s, backward_s, "
                  "backward_input_s, backward_weight_s, found 'backward'");
  EXPECT_CONTAINS(error_for(R"({"VCU129": {"forward_s": 1}})"),
                  "p.json: layers[1].devices.VCU129.backward_s: expected a non-negative number, found nothing");
  EXPECT_CONTAINS(error_for(R"({"VCU129": {"forward_s": -1, "backward_s": 1}})"),
                  "p.json: layers[1].devices.VCU129.forward_s: expected a non-negative number, found -1");
  EXPECT_CONTAINS(error_for(R"({"VCU129": {"forward_s": 1, "backward_s": "slow"}})"),
                  "p.json: layers[1].devices.VCU129.backward_s: expected a non-negative number, found \"slow\"");
  EXPECT_CONTAINS(error_for(R"({"VCU129": {"forward_s": [1, 2], "backward_s": 1}})"),
                  "p.json: layers[1].devices.VCU129.forward_s: expected a non-negative number, found [1,2]");
  EXPECT_CONTAINS(error_for(R"({"": {"forward_s": 1, "backward_s": 1}})"),
                  "p.json: layers[1].devices: expected a device type name without spaces (a host's `device` "
                  "property), found ''");
  EXPECT_CONTAINS(error_for(R"({"VCU 129": {"forward_s": 1, "backward_s": 1}})"),
                  "p.json: layers[1].devices: expected a device type name without spaces (a host's `device` "
                  "property), found 'VCU 129'");
}

TEST(ProfileDevices, CheckProfileChecksDeviceTimes) {
  Profile profile = parse_profile_json(tiny_with_layers(kDeviceLayer), "p.json");
  profile.layers[0].device_times["VCU129"].backward_s = -1;
  EXPECT_CONTAINS(input_error_of([&] { check_profile(profile, "p.json"); }),
                  "p.json: layers[0].devices.VCU129.backward_s: expected a non-negative number, found -1");
  profile.layers[0].device_times["VCU129"].backward_s = 1;
  profile.layers[0].device_times["has space"] = {1, 1};
  EXPECT_CONTAINS(input_error_of([&] { check_profile(profile, "p.json"); }),
                  "p.json: layers[0].devices: expected a device type name without spaces, found 'has space'");
}

// ---------------------------------------------------------------- several micro-batch sizes

/// Three layers at sizes 4, 8 and 16; conv2 has VCU129 times. conv1's
/// forward bends at 8 (slope 1/16, then 3/32).
const char* const kSizesText = R"({
  "name": "sizes",
  "micro_batch_sizes": [4, 8, 16],
  "input_bytes": [40, 80, 160],
  "layers": [
    {"name": "conv1", "forward_s": [0.5, 0.75, 1.5], "backward_s": [1, 1.5, 2.5], "output_bytes": [25, 50, 100], "parameter_bytes": 100},
    {"name": "conv2", "forward_s": [0.25, 0.5, 1], "backward_s": [0.5, 1, 2], "output_bytes": [10, 20, 40], "parameter_bytes": 60,
     "devices": {"VCU129": {"forward_s": [0.125, 0.2, 0.3], "backward_s": [0.25, 0.4, 0.7]}}},
    {"name": "fc", "forward_s": [0.25, 0.375, 0.625], "backward_s": [0.75, 1, 1.5], "output_bytes": [0, 0, 0], "parameter_bytes": 50}
  ]
})";

/// A multi-size profile text with `top` as its fields before "layers" and
/// one layer `layer`.
std::string sizes_profile(const std::string& top, const std::string& layer) {
  return R"({"name": "s", )" + top + R"(, "layers": [)" + layer + "]}";
}

const char* const kTwoSizes = R"("micro_batch_sizes": [4, 8])";

TEST(ProfileSizes, ParsesEverySizeAndHoldsTheFirstInTheFields) {
  const Profile profile = parse_profile_json(kSizesText, "sizes.json");
  EXPECT_EQ(profile_micro_batch_sizes(profile), (std::vector<int>{4, 8, 16}));
  ASSERT_EQ(profile.measured.size(), 3u);
  EXPECT_EQ(profile.measured[2].micro_batch_size, 16);
  EXPECT_EQ(profile.measured[2].input_bytes, 160);
  ASSERT_EQ(profile.measured[2].layers.size(), 3u);
  EXPECT_EQ(profile.measured[2].layers[0].forward_s, 1.5);
  EXPECT_EQ(profile.measured[1].layers[1].device_times.at("VCU129").backward_s, 0.4);
  // The fields: the profile at its first size, what single-size code runs.
  EXPECT_EQ(profile.micro_batch_size, 4);
  EXPECT_EQ(profile.input_bytes, 40);
  EXPECT_EQ(profile.layers[0].forward_s, 0.5);
  EXPECT_EQ(profile.layers[0].parameter_bytes, 100);
  EXPECT_EQ(profile.layers[1].output_bytes, 10);
  EXPECT_EQ(profile.layers[1].device_times.at("VCU129").forward_s, 0.125);
  EXPECT_NO_THROW(check_profile(profile, "sizes.json"));
}

TEST(ProfileSizes, WritesListsAndReadsBackTheSame) {
  const Profile profile = parse_profile_json(kSizesText, "sizes.json");
  const std::string text = profile_to_json(profile);
  EXPECT_EQ(text,
            "{\n"
            "  \"name\": \"sizes\",\n"
            "  \"micro_batch_sizes\": [4, 8, 16],\n"
            "  \"input_bytes\": [40, 80, 160],\n"
            "  \"layers\": [\n"
            "    {\"name\": \"conv1\", \"forward_s\": [0.5, 0.75, 1.5], \"backward_s\": [1, 1.5, 2.5], \"output_bytes\": "
            "[25, 50, 100], \"parameter_bytes\": 100},\n"
            "    {\"name\": \"conv2\", \"forward_s\": [0.25, 0.5, 1], \"backward_s\": [0.5, 1, 2], \"output_bytes\": [10, "
            "20, 40], \"parameter_bytes\": 60, \"devices\": {\"VCU129\": {\"forward_s\": [0.125, 0.2, 0.3], "
            "\"backward_s\": [0.25, 0.4, 0.7]}}},\n"
            "    {\"name\": \"fc\", \"forward_s\": [0.25, 0.375, 0.625], \"backward_s\": [0.75, 1, 1.5], "
            "\"output_bytes\": [0, 0, 0], \"parameter_bytes\": 50}\n"
            "  ]\n"
            "}\n");
  const Profile back = parse_profile_json(text, "round-trip");
  EXPECT_EQ(profile_to_json(back), text);
  EXPECT_EQ(profile_micro_batch_sizes(back), (std::vector<int>{4, 8, 16}));
}

TEST(ProfileSizes, InputBytesDefaultToZeroAtEverySize) {
  const Profile profile = parse_profile_json(
      sizes_profile(kTwoSizes, R"({"name": "a", "forward_s": [1, 2], "backward_s": [1, 2], "output_bytes": [0, 0], )"
                               R"("parameter_bytes": 1})"),
      "s.json");
  ASSERT_EQ(profile.measured.size(), 2u);
  EXPECT_EQ(profile.measured[1].input_bytes, 0);
}

TEST(ProfileSizes, BadSizesAreErrors) {
  const std::string layer =
      R"({"name": "a", "forward_s": [1, 2], "backward_s": [1, 2], "output_bytes": [0, 0], "parameter_bytes": 1})";
  auto error_for = [&](const std::string& top) {
    return input_error_of([&] { parse_profile_json(sizes_profile(top, layer), "s.json"); });
  };
  EXPECT_CONTAINS(error_for(R"("micro_batch_size": 4, "micro_batch_sizes": [4, 8])"),
                  "s.json: micro_batch_sizes: expected either micro_batch_size (times at one size) or "
                  "micro_batch_sizes (times at several), found both");
  EXPECT_CONTAINS(error_for(R"("micro_batch_sizes": [8, 4])"),
                  "s.json: micro_batch_sizes[1]: expected a size larger than 8 (sizes in increasing order, each "
                  "once), found 4");
  EXPECT_CONTAINS(error_for(R"("micro_batch_sizes": [8, 8])"),
                  "s.json: micro_batch_sizes[1]: expected a size larger than 8 (sizes in increasing order, each "
                  "once), found 8");
  EXPECT_CONTAINS(error_for(R"("micro_batch_sizes": [4, 8.5])"),
                  "s.json: micro_batch_sizes[1]: expected an integer >= 1, found 8.5");
  EXPECT_CONTAINS(error_for(R"("micro_batch_sizes": [0, 8])"),
                  "s.json: micro_batch_sizes[0]: expected an integer >= 1, found 0");
  EXPECT_CONTAINS(error_for(R"("micro_batch_sizes": [8])"),
                  "s.json: micro_batch_sizes: expected a list of at least two micro-batch sizes in increasing order "
                  "(for one size, write micro_batch_size and plain numbers), found [8]");
  EXPECT_CONTAINS(error_for(R"("micro_batch_sizes": 8)"), "s.json: micro_batch_sizes: expected a list of at least two");
}

TEST(ProfileSizes, ListsMustHaveOneNonNegativeNumberPerSize) {
  auto error_for = [](const std::string& top, const std::string& layer) {
    return input_error_of([&] { parse_profile_json(sizes_profile(top, layer), "s.json"); });
  };
  EXPECT_CONTAINS(
      error_for(kTwoSizes, R"({"name": "a", "forward_s": [1, 2, 3], "backward_s": [1, 2], "output_bytes": [0, 0], )"
                           R"("parameter_bytes": 1})"),
      "s.json: layers[0].forward_s: expected a list of 2 non-negative numbers (one per micro_batch_sizes entry), "
      "found a list of 3");
  EXPECT_CONTAINS(
      error_for(kTwoSizes, R"({"name": "a", "forward_s": [1, 2], "backward_s": 0.5, "output_bytes": [0, 0], )"
                           R"("parameter_bytes": 1})"),
      "s.json: layers[0].backward_s: expected a list of 2 non-negative numbers (one per micro_batch_sizes entry), "
      "found 0.5");
  EXPECT_CONTAINS(
      error_for(kTwoSizes, R"({"name": "a", "forward_s": [1, 2], "backward_s": [1, 2], "output_bytes": [0, -8], )"
                           R"("parameter_bytes": 1})"),
      "s.json: layers[0].output_bytes[1]: expected a non-negative number, found -8");
  EXPECT_CONTAINS(
      error_for(kTwoSizes, R"({"name": "a", "forward_s": [1, 2], "backward_s": [1, 2], "output_bytes": [0, 0], )"
                           R"("parameter_bytes": [1, 1]})"),
      "s.json: layers[0].parameter_bytes: expected a non-negative number, found [1,1]");
  EXPECT_CONTAINS(
      error_for(kTwoSizes, R"({"name": "a", "forward_s": [1, 2], "backward_s": [1, 2], "output_bytes": [0, 0], )"
                           R"("parameter_bytes": 1, "devices": {"VCU129": {"forward_s": [1], "backward_s": [1, 2]}}})"),
      "s.json: layers[0].devices.VCU129.forward_s: expected a list of 2 non-negative numbers (one per "
      "micro_batch_sizes entry), found a list of 1");
  EXPECT_CONTAINS(
      error_for(kTwoSizes, R"({"name": "a", "forward_s": [1, 2], "backward_s": [1, 2], "output_bytes": [0, 0], )"
                           R"("parameter_bytes": 1, "devices": {"VCU129": {"forward_s": 1, "backward_s": 1}}})"),
      "s.json: layers[0].devices.VCU129.forward_s: expected a list of 2 non-negative numbers");
  EXPECT_CONTAINS(error_for(std::string(kTwoSizes) + R"(, "input_bytes": 40)",
                            R"({"name": "a", "forward_s": [1, 2], "backward_s": [1, 2], "output_bytes": [0, 0], )"
                            R"("parameter_bytes": 1})"),
                  "s.json: input_bytes: expected a list of 2 non-negative numbers (one per micro_batch_sizes entry), "
                  "found 40");
  // Lists in a single-size profile are just as wrong.
  EXPECT_CONTAINS(input_error_of([] {
                    parse_profile_json(tiny_with_layers(R"({"name": "a", "forward_s": [1, 2], "backward_s": 1, )"
                                                        R"("output_bytes": 0, "parameter_bytes": 1})"),
                                       "p.json");
                  }),
                  "p.json: layers[0].forward_s: expected a non-negative number, found [1,2]");
}

TEST(ProfileSizes, AtAMeasuredSizeTheValuesAreExactlyThatSizes) {
  const Profile profile = parse_profile_json(kSizesText, "sizes.json");
  const Profile at8 = profile_at_micro_batch_size(profile, 8);
  EXPECT_TRUE(at8.measured.empty());
  EXPECT_EQ(profile_micro_batch_sizes(at8), std::vector<int>{8});
  EXPECT_EQ(at8.micro_batch_size, 8);
  EXPECT_EQ(at8.input_bytes, 80);
  EXPECT_EQ(at8.layers[0].forward_s, 0.75);
  EXPECT_EQ(at8.layers[2].backward_s, 1);
  EXPECT_EQ(at8.layers[1].output_bytes, 20);
  EXPECT_EQ(at8.layers[1].device_times.at("VCU129").forward_s, 0.2);
  EXPECT_EQ(at8.layers[1].parameter_bytes, 60);
  EXPECT_EQ(at8.layers[1].name, "conv2");
  // The first size is the profile's fields, without the other sizes.
  const Profile at4 = profile_at_micro_batch_size(profile, 4);
  EXPECT_TRUE(at4.measured.empty());
  EXPECT_EQ(at4.layers[0].forward_s, profile.layers[0].forward_s);
  EXPECT_NO_THROW(check_profile(at4, "at4"));
}

/// The profile's values at one size, to compare with hand-computed ones.
struct Expected {
  double input;
  double conv1_forward, conv1_backward, conv1_output;
  double conv2_forward, conv2_device_forward, conv2_device_backward;
  double fc_forward;
};

void expect_at(const Profile& profile, int size, const Expected& e) {
  SCOPED_TRACE("micro-batch size " + std::to_string(size));
  const Profile p = profile_at_micro_batch_size(profile, size);
  constexpr double kTolerance = 1e-9;
  EXPECT_EQ(p.micro_batch_size, size);
  EXPECT_TRUE(p.measured.empty());
  EXPECT_NEAR(p.input_bytes, e.input, kTolerance);
  EXPECT_NEAR(p.layers[0].forward_s, e.conv1_forward, kTolerance);
  EXPECT_NEAR(p.layers[0].backward_s, e.conv1_backward, kTolerance);
  EXPECT_NEAR(p.layers[0].output_bytes, e.conv1_output, kTolerance);
  EXPECT_NEAR(p.layers[1].forward_s, e.conv2_forward, kTolerance);
  EXPECT_NEAR(p.layers[1].device_times.at("VCU129").forward_s, e.conv2_device_forward, kTolerance);
  EXPECT_NEAR(p.layers[1].device_times.at("VCU129").backward_s, e.conv2_device_backward, kTolerance);
  EXPECT_NEAR(p.layers[2].forward_s, e.fc_forward, kTolerance);
  EXPECT_EQ(p.layers[2].output_bytes, 0);
  // Parameters do not depend on the micro-batch size.
  EXPECT_EQ(p.layers[0].parameter_bytes, 100);
  EXPECT_EQ(p.layers[1].parameter_bytes, 60);
  EXPECT_EQ(p.layers[2].parameter_bytes, 50);
  EXPECT_NO_THROW(check_profile(p, "interpolated"));
}

TEST(ProfileSizes, InterpolatesLinearlyBetweenTheTwoSizesAround) {
  const Profile profile = parse_profile_json(kSizesText, "sizes.json");
  // 6: halfway between 4 and 8.
  expect_at(profile, 6, {60, 0.625, 1.25, 37.5, 0.375, 0.1625, 0.325, 0.3125});
  // 12: halfway between 8 and 16 (conv1's forward on its second slope).
  expect_at(profile, 12, {120, 1.125, 2, 75, 0.75, 0.25, 0.55, 0.5});
  // 10: a quarter of the way from 8 to 16.
  expect_at(profile, 10, {100, 0.9375, 1.75, 62.5, 0.625, 0.225, 0.475, 0.4375});
}

TEST(ProfileSizes, ExtrapolatesFromTheTwoNearestSizes) {
  const Profile profile = parse_profile_json(kSizesText, "sizes.json");
  // Below 4: the line through 4 and 8.
  expect_at(profile, 2, {20, 0.375, 0.75, 12.5, 0.125, 0.0875, 0.175, 0.1875});
  expect_at(profile, 1, {10, 0.3125, 0.625, 6.25, 0.0625, 0.06875, 0.1375, 0.15625});
  // Above 16: the line through 8 and 16.
  expect_at(profile, 32, {320, 3, 4.5, 200, 2, 0.5, 1.3, 1.125});
}

TEST(ProfileSizes, NegativeExtrapolationIsAnErrorAndZeroIsNot) {
  const Profile rising = parse_profile_json(
      sizes_profile(kTwoSizes, R"({"name": "a", "forward_s": [0.25, 0.75], "backward_s": [1, 2], )"
                               R"("output_bytes": [0, 0], "parameter_bytes": 1})"),
      "s.json");
  EXPECT_CONTAINS(input_error_of([&] { profile_at_micro_batch_size(rising, 1); }),
                  "profile s: layers[0].forward_s: extrapolating to micro-batch size 1 along the line through sizes 4 "
                  "(0.25) and 8 (0.75) gives -0.125 (expected a non-negative value): measure the profile at a size "
                  "nearer 1");
  EXPECT_NEAR(profile_at_micro_batch_size(rising, 2).layers[0].forward_s, 0, 0);  // exactly 0 is fine
  const Profile device = parse_profile_json(
      sizes_profile(kTwoSizes, R"({"name": "a", "forward_s": [1, 2], "backward_s": [1, 2], "output_bytes": [0, 0], )"
                               R"("parameter_bytes": 1, "devices": {"V100": {"forward_s": [1, 1], )"
                               R"("backward_s": [0.5, 2]}}})"),
      "s.json");
  EXPECT_CONTAINS(input_error_of([&] { profile_at_micro_batch_size(device, 2); }),
                  "profile s: layers[0].devices.V100.backward_s: extrapolating to micro-batch size 2");
  const Profile shrinking_input = parse_profile_json(
      sizes_profile(std::string(kTwoSizes) + R"(, "input_bytes": [10, 90])",
                    R"({"name": "a", "forward_s": [1, 2], "backward_s": [1, 2], "output_bytes": [0, 0], )"
                    R"("parameter_bytes": 1})"),
      "s.json");
  EXPECT_CONTAINS(input_error_of([&] { profile_at_micro_batch_size(shrinking_input, 3); }),
                  "profile s: input_bytes: extrapolating to micro-batch size 3");
}

TEST(ProfileSizes, SingleSizeProfilesDoNotScale) {
  const Profile tiny = parse_profile_json(kTinyText, "tiny.json");
  EXPECT_EQ(profile_micro_batch_sizes(tiny), std::vector<int>{4});
  EXPECT_EQ(profile_to_json(profile_at_micro_batch_size(tiny, 4)), profile_to_json(tiny));
  EXPECT_CONTAINS(input_error_of([&] { profile_at_micro_batch_size(tiny, 8); }),
                  "profile tiny: measured at micro-batch size 4 only, so it has no times at size 8");
  EXPECT_CONTAINS(input_error_of([&] { profile_at_micro_batch_size(tiny, 0); }),
                  "profile tiny: micro-batch size: expected an integer >= 1, found 0");
  const Profile sizes = parse_profile_json(kSizesText, "sizes.json");
  EXPECT_CONTAINS(input_error_of([&] { profile_at_micro_batch_size(sizes, -4); }),
                  "profile sizes: micro-batch size: expected an integer >= 1, found -4");
}

TEST(ProfileSizes, CheckProfileChecksTheMeasuredSizes) {
  const Profile good = parse_profile_json(kSizesText, "sizes.json");
  auto error_after = [&](const std::function<void(Profile&)>& change) {
    Profile profile = good;
    change(profile);
    return input_error_of([&] { check_profile(profile, "sizes.json"); });
  };
  EXPECT_CONTAINS(error_after([](Profile& p) { p.measured[2].micro_batch_size = 8; }),
                  "sizes.json: micro_batch_sizes[2]: expected an integer >= 1 larger than the size before it, found 8");
  EXPECT_CONTAINS(error_after([](Profile& p) { p.measured.pop_back(), p.measured.pop_back(); }),
                  "sizes.json: micro_batch_sizes: expected at least two sizes, found 1");
  EXPECT_CONTAINS(error_after([](Profile& p) { p.measured[1].layers.pop_back(); }),
                  "sizes.json: layers (at micro-batch size 8): expected 3 layers, found 2");
  EXPECT_CONTAINS(error_after([](Profile& p) { p.measured[1].layers[0].backward_s = -1; }),
                  "sizes.json: layers[0].backward_s[1] (at micro-batch size 8): expected a non-negative number, "
                  "found -1");
  EXPECT_CONTAINS(error_after([](Profile& p) { p.measured[2].layers[1].device_times.clear(); }),
                  "sizes.json: layers[1].devices (at micro-batch size 16): expected the device types [VCU129] of the "
                  "first size, found []");
  EXPECT_CONTAINS(error_after([](Profile& p) { p.layers[2].forward_s = 7; }),
                  "sizes.json: expected the profile's fields to hold its first measured size (4)");
  EXPECT_CONTAINS(error_after([](Profile& p) { p.micro_batch_size = 8; }),
                  "sizes.json: expected the profile's fields to hold its first measured size (4), found other values "
                  "(micro_batch_size 8)");
}

TEST(ProfileSizes, ActivationBytesArePerSizeToo) {
  const std::string layers =
      R"({"name": "a", "forward_s": [1, 2], "backward_s": [1, 2], "output_bytes": [24, 48], "activation_bytes": [8, 16], )"
      R"("parameter_bytes": 1}, )"
      R"({"name": "b", "forward_s": [1, 2], "backward_s": [1, 2], "output_bytes": [0, 0], "parameter_bytes": 1})";
  const Profile profile = parse_profile_json(sizes_profile(kTwoSizes, layers), "s.json");
  EXPECT_EQ(profile.layers[0].activation_bytes, 8);
  EXPECT_FALSE(profile.layers[1].activation_bytes);
  EXPECT_EQ(profile.measured[1].layers[0].activation_bytes, 16);
  const Profile at6 = profile_at_micro_batch_size(profile, 6);
  EXPECT_EQ(at6.layers[0].activation_bytes, 12);
  EXPECT_EQ(at6.layers[0].output_bytes, 36);
  EXPECT_FALSE(at6.layers[1].activation_bytes);
  EXPECT_EQ(profile_at_micro_batch_size(profile, 2).layers[0].activation_bytes, 4);
  const std::string text = profile_to_json(profile);
  EXPECT_CONTAINS(text, R"("output_bytes": [24, 48], "activation_bytes": [8, 16], "parameter_bytes": 1})");
  EXPECT_EQ(profile_to_json(parse_profile_json(text, "round-trip")), text);
  EXPECT_CONTAINS(input_error_of([] {
                    parse_profile_json(sizes_profile(kTwoSizes, R"({"name": "a", "forward_s": [1, 2], "backward_s": [1, 2], )"
                                                                R"("output_bytes": [0, 0], "activation_bytes": 8, )"
                                                                R"("parameter_bytes": 1})"),
                                       "s.json");
                  }),
                  "s.json: layers[0].activation_bytes: expected a list of 2 non-negative numbers (one per "
                  "micro_batch_sizes entry), found 8");
  Profile broken = profile;
  broken.measured[1].layers[0].activation_bytes.reset();
  EXPECT_CONTAINS(input_error_of([&] { check_profile(broken, "s.json"); }),
                  "s.json: layers[0].activation_bytes (at micro-batch size 8): expected it at every size or at none");
}

TEST(ProfileSizes, ReadProfileRejectsBatchSizeForAMultiSizeProfile) {
  TemporaryFolder folder;
  const std::string path = folder.write("sizes.json", kSizesText);
  EXPECT_EQ(read_profile(path, std::nullopt).measured.size(), 3u);
  EXPECT_CONTAINS(input_error_of([&] { read_profile(path, 4); }),
                  "sizes.json: batch size: the profile gives times at micro_batch_sizes [4, 8, 16], found "
                  "--batch-size 4");
}

TEST(ProfileSizes, SplittingALayerKeepsOnlyTheCurrentSize) {
  const Profile profile = parse_profile_json(kSizesText, "sizes.json");
  const Profile split = split_layers(profile, {{1, 0.5}});
  EXPECT_TRUE(split.measured.empty());
  ASSERT_EQ(split.layers.size(), 4u);
  EXPECT_EQ(split.micro_batch_size, 4);
  EXPECT_EQ(split.layers[1].device_times.at("VCU129").forward_s, 0.0625);
  EXPECT_NO_THROW(check_profile(split, "split"));
  // To split another size, take it first.
  const Profile split8 = split_layers(profile_at_micro_batch_size(profile, 8), {{1, 0.5}});
  EXPECT_EQ(split8.micro_batch_size, 8);
  EXPECT_EQ(split8.layers[2].forward_s, 0.25);
}

// ---------------------------------------------------------------- graph.txt

TEST(PipeDreamGraph, BranchCutsCountEachProducerOnceAndInputNodesNever) {
  // Input -> A; A -> B, A -> C, A -> D (skip connection); B -> D; C -> D;
  // Input -> D (a later consumer of the input, as GNMT has).
  TemporaryFolder folder;
  const std::string path = folder.write("branch/graph.txt", node("node1", "Input", 5, 0, "600.0", 0) +
                                                                node("node2", "A", 1, 2, "100.0", 10) +
                                                                node("node3", "B", 3, 4, "20.0", 0) +
                                                                node("node4", "C", 5, 6, "30.0", 0) +
                                                                node("node5", "D", 7, 8, "7.0", 40) +
                                                                edge("node1", "node2") + edge("node2", "node3") +
                                                                edge("node2", "node4") + edge("node2", "node5") +
                                                                edge("node3", "node5") + edge("node4", "node5") +
                                                                edge("node1", "node5"));
  const Profile profile = read_pipedream_graph(path, 4);
  EXPECT_EQ(profile.name, "branch");
  EXPECT_EQ(profile.micro_batch_size, 4);
  EXPECT_EQ(profile.input_bytes, 600);
  ASSERT_EQ(layer_names(profile), (std::vector<std::string>{"node2: A", "node3: B", "node4: C", "node5: D"}));
  EXPECT_EQ(profile.layers[0].output_bytes, 100);            // A
  EXPECT_EQ(profile.layers[1].output_bytes, 100 + 20);       // A (for C, D), B (for D)
  EXPECT_EQ(profile.layers[2].output_bytes, 100 + 20 + 30);  // A, B, C all for D
  EXPECT_EQ(profile.layers[3].output_bytes, 0);              // nothing after the last layer
  EXPECT_DOUBLE_EQ(profile.layers[0].forward_s, 0.001);
  EXPECT_DOUBLE_EQ(profile.layers[0].backward_s, 0.002);
  EXPECT_DOUBLE_EQ(profile.layers[3].backward_s, 0.008);
  EXPECT_EQ(profile.layers[0].parameter_bytes, 10);
  EXPECT_EQ(profile.layers[3].parameter_bytes, 40);
  double forward = 0;
  for (const Layer& layer : profile.layers) forward += layer.forward_s;
  EXPECT_DOUBLE_EQ(forward, (1 + 3 + 5 + 7) / 1000.0);  // the Input's 5 ms are not counted
  // Each layer's own output is what it stashes; where the cut after it
  // carries more (A skipping over B and C), it is kept apart.
  EXPECT_FALSE(profile.layers[0].activation_bytes.has_value());  // the cut carries exactly A
  EXPECT_EQ(profile.layers[1].activation_bytes, 20.0);
  EXPECT_EQ(profile.layers[2].activation_bytes, 30.0);
  EXPECT_FALSE(profile.layers[3].activation_bytes.has_value());  // the last layer's output crosses no cut
  EXPECT_EQ(profile.layers[1].stashed_bytes(), 20);
  // One stage holding every layer stashes its input and each tensor once.
  Partition whole;
  whole.stage_of_layer = {0, 0, 0, 0};
  whole.hosts = {{"h"}};
  EXPECT_EQ(stage_costs(profile, whole)[0].stash_bytes, 600 + 100 + 20 + 30);
  // Two stages (A, B | C, D): the second receives and stashes the cut after
  // B (A and B, for C and D), then C.
  Partition two;
  two.stage_of_layer = {0, 0, 1, 1};
  two.hosts = {{"h0"}, {"h1"}};
  const std::vector<StageCost> costs = stage_costs(profile, two);
  EXPECT_EQ(costs[0].stash_bytes, 600 + 100 + 20);
  EXPECT_EQ(costs[1].stash_bytes, (100 + 20) + 30);
  // The field survives the profile JSON (plans embed their profile).
  const Profile again = parse_profile_json(profile_to_json(profile), "export");
  EXPECT_EQ(again.layers[1].activation_bytes, 20.0);
  EXPECT_FALSE(again.layers[0].activation_bytes.has_value());
}

TEST(PipeDreamGraph, ReadyNodesAreTakenInFileOrder) {
  // Listed: d, c, a, b. Edges a -> d, b -> d. Ready at the start: c, a, b
  // (file order), d last. Ids are not numbers on purpose.
  TemporaryFolder folder;
  const std::string path = folder.write(
      "order.txt", node("d", "D", 1, 1, "1", 0) + node("c", "C", 1, 1, "1", 0) + node("a", "A", 1, 1, "1", 0) +
                       node("b", "B", 1, 1, "1", 0) + edge("a", "d") + edge("b", "d"));
  const Profile profile = read_pipedream_graph(path, 1);
  EXPECT_EQ(profile.name, "order");
  EXPECT_EQ(layer_names(profile), (std::vector<std::string>{"c: C", "a: A", "b: B", "d: D"}));
}

TEST(PipeDreamGraph, ANewlyReadyNodeListedEarlierGoesFirst) {
  // Listed: x, y, z; x -> y. After x, both y (listed 2nd) and z (3rd) are
  // ready: y first (a first-in first-out queue would take z).
  TemporaryFolder folder;
  const std::string path = folder.write(
      "fifo.txt", node("x", "X", 1, 1, "1", 0) + node("y", "Y", 1, 1, "1", 0) + node("z", "Z", 1, 1, "1", 0) +
                      edge("x", "y"));
  EXPECT_EQ(layer_names(read_pipedream_graph(path, 1)), (std::vector<std::string>{"x: X", "y: Y", "z: Z"}));
}

TEST(PipeDreamGraph, BatchSizeIsInferredFromImageInputBytes) {
  TemporaryFolder folder;
  // Two 3x224x224 float32 images.
  const std::string two = folder.write("two.txt", node("node1", "Input", 9, 0, "1204224.000", 0) +
                                                      node("node2", "Conv", 1, 1, "8", 1) + edge("node1", "node2"));
  const Profile profile = read_pipedream_graph(two, std::nullopt);
  EXPECT_EQ(profile.micro_batch_size, 2);
  EXPECT_EQ(profile.input_bytes, 1204224);
  EXPECT_EQ(read_pipedream_graph(two, 16).micro_batch_size, 16);  // an explicit size wins

  const std::string odd = folder.write("odd.txt", node("node1", "Input", 0, 0, "1000", 0) +
                                                      node("node2", "Conv", 1, 1, "8", 1) + edge("node1", "node2"));
  const std::string message = input_error_of([&] { read_pipedream_graph(odd, std::nullopt); });
  EXPECT_CONTAINS(message, odd + ": cannot infer the batch size");
  EXPECT_CONTAINS(message, "found that the Input nodes hold 1000 bytes");
  EXPECT_CONTAINS(message, "--batch-size");

  const std::string no_input = folder.write("none.txt", node("node2", "Conv", 1, 1, "8", 1));
  EXPECT_CONTAINS(input_error_of([&] { read_pipedream_graph(no_input, std::nullopt); }), "the graph has no Input node");
  EXPECT_EQ(read_pipedream_graph(no_input, 3).input_bytes, 0);

  EXPECT_CONTAINS(input_error_of([&] { read_pipedream_graph(two, 0); }),
                  two + ": batch size: expected an integer >= 1, found 0");
}

TEST(PipeDreamGraph, ActivationListsAreSummed) {
  TemporaryFolder folder;
  const std::string path = folder.write(
      "list.txt", node("n1", "LSTM", 1, 1, "[6.0; 2.0; 1.5]", 0) + node("n2", "Out", 1, 1, "3", 0) + edge("n1", "n2"));
  EXPECT_EQ(read_pipedream_graph(path, 1).layers[0].output_bytes, 9.5);
}

TEST(PipeDreamGraph, CycleIsAnErrorNamingTheClosingEdge) {
  TemporaryFolder folder;
  const std::string path = folder.write("cycle.txt", node("a", "A", 1, 1, "1", 0) + node("b", "B", 1, 1, "1", 0) +
                                                         node("c", "C", 1, 1, "1", 0) + edge("a", "b") +
                                                         edge("b", "c") + edge("c", "b"));
  EXPECT_CONTAINS(input_error_of([&] { read_pipedream_graph(path, 1); }),
                  path + ":6: edge 'c -- b' closes the cycle b -> c -> b (expected an acyclic graph)");
  const std::string loop = folder.write("loop.txt", node("a", "A", 1, 1, "1", 0) + edge("a", "a"));
  EXPECT_CONTAINS(input_error_of([&] { read_pipedream_graph(loop, 1); }),
                  loop + ":2: edge 'a -- a' closes the cycle a -> a");
}

TEST(PipeDreamGraph, MalformedLinesNameFileAndLine) {
  TemporaryFolder folder;
  const std::string good = node("a", "A", 1, 1, "1", 0);
  struct Case {
    std::string line, expected;
  };
  const std::vector<Case> cases = {
      {"a -- A\n", ":2: expected a node line"},
      {"b -- B -- forward_compute_time=abc, backward_compute_time=1, activation_size=1, parameter_size=1\n",
       ":2: forward_compute_time: expected a non-negative number, found 'abc'"},
      {"b -- B -- forward_compute_time=-1.5, backward_compute_time=1, activation_size=1, parameter_size=1\n",
       ":2: forward_compute_time: expected a non-negative number, found '-1.5'"},
      {"b -- B -- forward_compute_time=1, activation_size=1, parameter_size=1\n",
       ":2: backward_compute_time: expected a non-negative number, found nothing"},
      {"b -- B -- forward_compute_time=1, backward_compute_time=1, activation_size=[1; x], parameter_size=1\n",
       ":2: activation_size: expected a non-negative number or a list [a; b; ...] of them, found '[1; x]'"},
      {"b -- B -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=1, speed=3\n",
       ":2: expected only forward_compute_time"},
      {"a -- A2 -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=1\n",
       ":2: expected each node listed once, found 'a' again (first on line 1)"},
      {"\ta -> b\n", ":2: expected an edge line"},
      {"\ta -- zz\n", ":2: edge 'a -- zz': expected a node listed in the file, found unknown 'zz'"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string path = folder.write("bad" + std::to_string(i) + ".txt", good + cases[i].line);
    EXPECT_CONTAINS(input_error_of([&] { read_pipedream_graph(path, 1); }), path + cases[i].expected);
  }
  const std::string empty = folder.write("empty.txt", "\n\n");
  EXPECT_CONTAINS(input_error_of([&] { read_pipedream_graph(empty, 1); }), empty + ": expected node lines, found none");
  const std::string only_input = folder.write("input.txt", node("a", "Input0", 0, 0, "0", 0));
  EXPECT_CONTAINS(input_error_of([&] { read_pipedream_graph(only_input, 1); }),
                  "expected at least one node besides the Input nodes");
  EXPECT_CONTAINS(input_error_of([&] { read_pipedream_graph(folder.write("x", "") + "/missing.txt", 1); }),
                  "missing.txt");
}

TEST(PipeDreamGraph, StageIdAndWindowsLineEndsAreAccepted) {
  TemporaryFolder folder;
  const std::string path = folder.write(
      "crlf.txt",
      "a -- A -- forward_compute_time=2.5, backward_compute_time=1, activation_size=8, parameter_size=4, stage_id=0\r\n"
      "b -- B -- forward_compute_time=1, backward_compute_time=1, activation_size=8, parameter_size=4\r\n"
      "\ta -- b\r\n");
  const Profile profile = read_pipedream_graph(path, 1);
  ASSERT_EQ(layer_names(profile), (std::vector<std::string>{"a: A", "b: B"}));
  EXPECT_EQ(profile.layers[0].forward_s, 0.0025);
  EXPECT_EQ(profile.layers[0].output_bytes, 8);
}

// ---------------------------------------------------------------- shipped profiles

std::string shipped(const std::string& model) { return kSourceDir + "/models/pipedream/" + model + "/graph.txt"; }

/// Sums of a graph.txt's measurements over its non-Input nodes, read with a
/// regular expression (independently of the reader under test).
struct FileSums {
  int nodes = 0;
  double forward_ms = 0, backward_ms = 0, parameter_bytes = 0, input_activation_bytes = 0;
};

FileSums sums_of(const std::string& path) {
  std::ifstream in(path);
  const std::regex line_pattern(
      R"(^(\S+) -- (.*) -- forward_compute_time=([0-9.]+), backward_compute_time=([0-9.]+), activation_size=([^,]+), parameter_size=([0-9.]+)$)");
  FileSums sums;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch match;
    if (!std::regex_match(line, match, line_pattern)) continue;
    if (match[2].str().rfind("Input", 0) == 0) {
      sums.input_activation_bytes += std::stod(match[5].str());
      continue;
    }
    ++sums.nodes;
    sums.forward_ms += std::stod(match[3].str());
    sums.backward_ms += std::stod(match[4].str());
    sums.parameter_bytes += std::stod(match[6].str());
  }
  return sums;
}

/// The activation_size graph.txt lists for the node a layer was read from
/// (its name starts with the node id), read with a regular expression.
double own_activation_bytes(const std::string& path, const std::string& layer_name) {
  const std::string id = layer_name.substr(0, layer_name.find(':'));
  std::ifstream in(path);
  // activation_size is a number or a list of numbers (summed).
  const std::regex line_pattern(R"(^(\S+) -- .* activation_size=(.*), parameter_size=[0-9.]+$)");
  const std::regex number(R"([0-9]+(\.[0-9]*)?)");
  std::string line;
  double total = 0;
  while (std::getline(in, line)) {
    std::smatch match;
    if (!std::regex_match(line, match, line_pattern) || match[1].str() != id) continue;
    const std::string sizes = match[2].str();
    for (auto it = std::sregex_iterator(sizes.begin(), sizes.end(), number); it != std::sregex_iterator(); ++it)
      total += std::stod(it->str());
  }
  return total;
}

TEST(ShippedPipeDreamProfiles, Vgg16) {
  const Profile profile = read_profile(shipped("vgg16"), std::nullopt);
  const FileSums sums = sums_of(shipped("vgg16"));
  EXPECT_EQ(profile.name, "vgg16");
  // 77070336 = 128 x 3 x 224 x 224 x 4 bytes: PipeDream's profiler writes
  // 4 bytes per element of the output tensor, batch dimension included.
  EXPECT_EQ(profile.input_bytes, 77070336);
  EXPECT_EQ(profile.micro_batch_size, 128);
  ASSERT_EQ(sums.nodes, 40);
  ASSERT_EQ(profile.layers.size(), 40u);
  double forward = 0, backward = 0, parameters = 0;
  for (const Layer& layer : profile.layers) {
    forward += layer.forward_s;
    backward += layer.backward_s;
    parameters += layer.parameter_bytes;
  }
  EXPECT_NEAR(forward, sums.forward_ms / 1000, 1e-12);
  EXPECT_NEAR(backward, sums.backward_ms / 1000, 1e-12);
  EXPECT_EQ(parameters, sums.parameter_bytes);
  EXPECT_EQ(profile.layers.front().name,
            "node2: Conv2d(3, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))");
  EXPECT_EQ(profile.layers.front().forward_s, 0.022307);
  EXPECT_EQ(profile.layers.front().output_bytes, 1644167168);  // a chain: a layer's own activation
  EXPECT_EQ(profile.layers.back().output_bytes, 0);
}

TEST(ShippedPipeDreamProfiles, AllSixParse) {
  struct Expected {
    const char* model;
    std::optional<int> batch_size;
    std::size_t layers;
    int micro_batch_size;
  };
  for (const Expected& expected : {Expected{"alexnet", std::nullopt, 22, 256}, Expected{"vgg16", std::nullopt, 40, 128},
                                   Expected{"resnet50", std::nullopt, 176, 128}, Expected{"gnmt", 64, 45, 64},
                                   Expected{"gnmt_large", std::nullopt, 93, 128}, Expected{"resnet101", std::nullopt, 346, 64}}) {
    SCOPED_TRACE(expected.model);
    const Profile profile = read_profile(shipped(expected.model), expected.batch_size);
    EXPECT_EQ(profile.name, expected.model);
    EXPECT_EQ(profile.layers.size(), expected.layers);
    EXPECT_EQ(static_cast<int>(profile.layers.size()), sums_of(shipped(expected.model)).nodes);
    EXPECT_EQ(profile.micro_batch_size, expected.micro_batch_size);
    EXPECT_EQ(profile.input_bytes, sums_of(shipped(expected.model)).input_activation_bytes);
    EXPECT_NO_THROW(check_profile(profile, expected.model));
    // A stage holding the whole model stashes the input and every node's
    // output once (not the linearised cuts, which repeat skip tensors), the
    // last layer's excepted.
    Partition whole;
    whole.stage_of_layer.assign(profile.layers.size(), 0);
    whole.hosts = {{"h"}};
    double once = profile.input_bytes;
    for (std::size_t l = 0; l + 1 < profile.layers.size(); ++l) once += own_activation_bytes(shipped(expected.model), profile.layers[l].name);
    EXPECT_DOUBLE_EQ(stage_costs(profile, whole)[0].stash_bytes, once);
    // Exported and read back, the profile is the same.
    EXPECT_EQ(profile_to_json(parse_profile_json(profile_to_json(profile), "export")), profile_to_json(profile));
  }
}

TEST(ShippedPipeDreamProfiles, GnmtBatchSizeComesFromItsLstmStates) {
  // Its Input nodes carry no bytes; the LSTM hidden states, (1, B, 1024)
  // float32, give B = 32 (test_limits.cpp has the details).
  EXPECT_EQ(read_profile(shipped("gnmt"), std::nullopt).micro_batch_size, 32);
  const Profile profile = read_profile(shipped("gnmt"), 128);
  EXPECT_EQ(profile.micro_batch_size, 128);
  EXPECT_EQ(profile.input_bytes, 0);  // its Input nodes carry no bytes
}


// Micro-batch scaling rules (simulate --micro-batch-scaling).

TEST(MicroBatchScaling, RegistryListsNoneAndLinear) {
  EXPECT_EQ(micro_batch_scaling_names(), (std::vector<std::string>{"none", "linear"}));
  EXPECT_EQ(micro_batch_scaling("none").name(), "none");
  EXPECT_EQ(micro_batch_scaling("linear").name(), "linear");
  EXPECT_EQ(input_error_of([] { micro_batch_scaling("cubic"); }),
            "--micro-batch-scaling: expected none or linear, found 'cubic'");
}

TEST(MicroBatchScaling, NoneRefusesASizeASingleSizeProfileLacksAndNamesLinear) {
  const Profile tiny = parse_profile_json(kTinyText, "tiny.json");
  EXPECT_EQ(input_error_of([&] { profile_at_micro_batch_size(tiny, 8, micro_batch_scaling("none")); }),
            "profile tiny: measured at micro-batch size 4 only, so it has no times at size 8 (give times at several "
            "sizes, \"micro_batch_sizes\", to interpolate, or derive them from size 4 with --micro-batch-scaling linear: "
            "times and activation bytes proportional to the samples)");
  // Its own size needs no rule.
  const ProfileAtSize own = profile_at_micro_batch_size(tiny, 4, micro_batch_scaling("none"));
  EXPECT_EQ(profile_to_json(own.profile), profile_to_json(tiny));
  EXPECT_EQ(own.note, "");
}

TEST(MicroBatchScaling, LinearScalesASingleSizeProfileExactly) {
  const Profile tiny = parse_profile_json(kTinyText, "tiny.json");
  const MicroBatchScaling& linear = micro_batch_scaling("linear");
  const ProfileAtSize at8 = profile_at_micro_batch_size(tiny, 8, linear);
  const Profile& p = at8.profile;
  EXPECT_EQ(p.micro_batch_size, 8);
  EXPECT_TRUE(p.measured.empty());
  EXPECT_EQ(p.input_bytes, 80);
  EXPECT_EQ(p.layers[0].forward_s, 1.0);
  EXPECT_EQ(p.layers[0].backward_s, 2.0);
  EXPECT_EQ(p.layers[0].output_bytes, 50);
  EXPECT_EQ(p.layers[0].parameter_bytes, 100);  // unchanged
  EXPECT_EQ(p.layers[1].forward_s, 0.5);
  EXPECT_EQ(p.layers[1].backward_s, 1.5);
  EXPECT_EQ(p.layers[1].output_bytes, 0);
  EXPECT_EQ(p.layers[1].parameter_bytes, 50);
  EXPECT_EQ(p.layers[1].name, "fc");
  EXPECT_EQ(at8.note,
            "8 samples derived from the measured 4 by linear scaling: times, activation and input bytes x 8/4, "
            "parameter bytes unchanged");
  // Down, and to a size that is no multiple: v x size / measured.
  const Profile p6 = profile_at_micro_batch_size(tiny, 6, linear).profile;
  EXPECT_EQ(p6.input_bytes, 60);
  EXPECT_EQ(p6.layers[0].forward_s, 0.75);
  EXPECT_EQ(p6.layers[0].output_bytes, 37.5);
  EXPECT_EQ(p6.layers[1].backward_s, 1.125);
  const Profile p1 = profile_at_micro_batch_size(tiny, 1, linear).profile;
  EXPECT_EQ(p1.input_bytes, 10);
  EXPECT_EQ(p1.layers[0].forward_s, 0.125);
  EXPECT_EQ(p1.layers[0].output_bytes, 6.25);
  // Its own size: as measured, no note.
  EXPECT_EQ(profile_at_micro_batch_size(tiny, 4, linear).note, "");
}

TEST(MicroBatchScaling, LinearScalesActivationAndDeviceTimes) {
  const Profile profile = parse_profile_json(
      tiny_with_layers(R"({"name": "a", "forward_s": 1, "backward_s": 2, "output_bytes": 8, "activation_bytes": 12, )"
                       R"("parameter_bytes": 7, "devices": {"V100": {"forward_s": 0.5, "backward_s": 0.25}}})"),
      "a.json");
  const Profile p = profile_at_micro_batch_size(profile, 12, micro_batch_scaling("linear")).profile;
  EXPECT_EQ(p.layers[0].forward_s, 3);
  EXPECT_EQ(p.layers[0].backward_s, 6);
  EXPECT_EQ(p.layers[0].output_bytes, 24);
  ASSERT_TRUE(p.layers[0].activation_bytes.has_value());
  EXPECT_EQ(*p.layers[0].activation_bytes, 36);
  EXPECT_EQ(p.layers[0].parameter_bytes, 7);
  EXPECT_EQ(p.layers[0].device_times.at("V100").forward_s, 1.5);
  EXPECT_EQ(p.layers[0].device_times.at("V100").backward_s, 0.75);
}

TEST(MicroBatchScaling, LinearScalesAMultiSizeProfileFromTheNearestEndOnly) {
  const Profile profile = parse_profile_json(kSizesText, "sizes.json");
  const MicroBatchScaling& linear = micro_batch_scaling("linear");
  // Above 16: the values at 16, x 32/16.
  const ProfileAtSize at32 = profile_at_micro_batch_size(profile, 32, linear);
  const Profile& p = at32.profile;
  EXPECT_EQ(p.input_bytes, 320);
  EXPECT_EQ(p.layers[0].forward_s, 3);
  EXPECT_EQ(p.layers[0].backward_s, 5);
  EXPECT_EQ(p.layers[0].output_bytes, 200);
  EXPECT_EQ(p.layers[1].forward_s, 2);
  EXPECT_EQ(p.layers[1].device_times.at("VCU129").forward_s, 0.6);
  EXPECT_EQ(p.layers[1].device_times.at("VCU129").backward_s, 1.4);
  EXPECT_EQ(p.layers[2].forward_s, 1.25);
  EXPECT_EQ(p.layers[2].parameter_bytes, 50);
  EXPECT_EQ(at32.note,
            "32 samples derived from the measured 16 by linear scaling: times, activation and input bytes x 32/16, "
            "parameter bytes unchanged");
  // Below 4: the values at 4, x 2/4 (rule none extrapolates along the line
  // through 4 and 8 instead: conv1's forward 0.375, not 0.25).
  const Profile p2 = profile_at_micro_batch_size(profile, 2, linear).profile;
  EXPECT_EQ(p2.input_bytes, 20);
  EXPECT_EQ(p2.layers[0].forward_s, 0.25);
  EXPECT_EQ(p2.layers[1].device_times.at("VCU129").backward_s, 0.125);
  EXPECT_EQ(profile_at_micro_batch_size(profile, 2, micro_batch_scaling("none")).profile.layers[0].forward_s, 0.375);
  // Measured and in-between sizes do not depend on the rule.
  for (const int size : {4, 6, 8, 12, 16}) {
    const ProfileAtSize scaled = profile_at_micro_batch_size(profile, size, linear);
    EXPECT_EQ(profile_to_json(scaled.profile), profile_to_json(profile_at_micro_batch_size(profile, size))) << size;
    EXPECT_EQ(scaled.note, "") << size;
  }
}

TEST(MicroBatchScaling, LinearKeepsTheProfileLimits) {
  const Profile profile = parse_profile_json(
      R"({"name": "big", "micro_batch_size": 1, "layers": [{"name": "a", "forward_s": 1e6, "backward_s": 1, )"
      R"("output_bytes": 0, "parameter_bytes": 0}]})",
      "big.json");
  EXPECT_CONTAINS(input_error_of([&] { profile_at_micro_batch_size(profile, 10000, micro_batch_scaling("linear")); }),
                  "profile big scaled linearly to micro-batch size 10000");
}

}  // namespace
}  // namespace pipegrid
