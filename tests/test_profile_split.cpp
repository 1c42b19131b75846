// The backward split of zero-bubble schedules (issue 14): a profile layer's
// backward_input_s (I) and backward_weight_s (W), their default, their
// checks, how sizes, scaling and intra-layer splits carry them, and the
// per-stage sums and weight-gradient stash of stage_costs.

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/partition.hpp"
#include "core/platform.hpp"
#include "core/profile.hpp"
#include "expect_input_error.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

/// A single-size profile at micro-batch size 4 with the given layer lines.
std::string profile_text(const std::string& layers) {
  return "{\n  \"name\": \"p\",\n  \"micro_batch_size\": 4,\n  \"input_bytes\": 8,\n  \"layers\": [" + layers +
         "\n  ]\n}\n";
}

const char* const kSplitLayer =
    "\n    {\"name\": \"conv\", \"forward_s\": 1, \"backward_s\": 2, \"backward_input_s\": 0.5, \"backward_weight_s\": 1.5, "
    "\"output_bytes\": 16, \"parameter_bytes\": 4}";
const char* const kPlainLayer =
    "\n    {\"name\": \"relu\", \"forward_s\": 0.25, \"backward_s\": 0.75, \"output_bytes\": 16, \"parameter_bytes\": 0}";

Layer layer_with(double backward_s, double parameter_bytes) {
  Layer layer;
  layer.name = "l";
  layer.forward_s = 1;
  layer.backward_s = backward_s;
  layer.output_bytes = 1;
  layer.parameter_bytes = parameter_bytes;
  return layer;
}

TEST(BackwardSplit, DefaultHalvesALayerWithParametersAndGivesAllToInputWithout) {
  EXPECT_EQ(backward_split(3, std::nullopt, std::nullopt, true).input_s, 1.5);
  EXPECT_EQ(backward_split(3, std::nullopt, std::nullopt, true).weight_s, 1.5);
  EXPECT_EQ(backward_split(3, std::nullopt, std::nullopt, false).input_s, 3);
  EXPECT_EQ(backward_split(3, std::nullopt, std::nullopt, false).weight_s, 0);
  const BackwardSplit with = backward_split(layer_with(2, 10));
  EXPECT_EQ(with.input_s, 1);
  EXPECT_EQ(with.weight_s, 1);
  const BackwardSplit without = backward_split(layer_with(2, 0));
  EXPECT_EQ(without.input_s, 2);
  EXPECT_EQ(without.weight_s, 0);
}

TEST(BackwardSplit, GivenPartsAreTakenAsGiven) {
  Layer layer = layer_with(2, 0);  // no parameters: the given split still applies
  layer.backward_input_s = 0.5;
  layer.backward_weight_s = 1.5;
  EXPECT_EQ(backward_split(layer).input_s, 0.5);
  EXPECT_EQ(backward_split(layer).weight_s, 1.5);
  // One part alone is not a split: the default (check_profile refuses it).
  EXPECT_EQ(backward_split(2, 0.5, std::nullopt, true).input_s, 1);
  EXPECT_EQ(backward_split(2, std::nullopt, 0.5, false).input_s, 2);
}

TEST(BackwardSplit, DeviceTimesAndHosts) {
  Layer layer = layer_with(2, 10);
  layer.backward_input_s = 0.5;
  layer.backward_weight_s = 1.5;
  layer.device_times["V100"] = {0.5, 1};               // no split: the default on 1
  layer.device_times["VCU129"] = {0.5, 1, 0.25, 0.75};  // its own split
  EXPECT_EQ(backward_split(layer, layer.device_times["V100"]).input_s, 0.5);
  EXPECT_EQ(backward_split(layer, layer.device_times["V100"]).weight_s, 0.5);
  EXPECT_EQ(backward_split(layer, layer.device_times["VCU129"]).input_s, 0.25);
  EXPECT_EQ(backward_split(layer, layer.device_times["VCU129"]).weight_s, 0.75);

  HostInfo listed;
  listed.name = "fpga0";
  listed.device_type = "VCU129";
  listed.speed_factor = 4;  // ignored: the device's times apply
  EXPECT_EQ(backward_split_on(layer, listed).input_s, 0.25);
  EXPECT_EQ(backward_split_on(layer, listed).weight_s, 0.75);
  HostInfo other;
  other.name = "gpu0";
  other.device_type = "A100";
  other.speed_factor = 2;
  EXPECT_EQ(backward_split_on(layer, other).input_s, 0.25);
  EXPECT_EQ(backward_split_on(layer, other).weight_s, 0.75);
  EXPECT_EQ(backward_split_on(layer, other).input_s + backward_split_on(layer, other).weight_s,
            layer_times_on(layer, other).backward_s);
}

TEST(BackwardSplit, SumTolerance) {
  EXPECT_TRUE(backward_split_sums_to(2, 0.5, 1.5));
  EXPECT_TRUE(backward_split_sums_to(1, 0.5, 0.5 + 1e-10));
  EXPECT_FALSE(backward_split_sums_to(1, 0.5, 0.5 + 1e-8));
  EXPECT_TRUE(backward_split_sums_to(0, 0, 0));
  EXPECT_FALSE(backward_split_sums_to(0, 1e-300, 0));
}

TEST(BackwardSplitJson, ReadsTheSplitAndWritesItOnlyWhenGiven) {
  const std::string text = profile_text(std::string(kSplitLayer) + "," + kPlainLayer);
  const Profile profile = parse_profile_json(text, "p.json");
  ASSERT_EQ(profile.layers.size(), 2u);
  EXPECT_EQ(profile.layers[0].backward_input_s, 0.5);
  EXPECT_EQ(profile.layers[0].backward_weight_s, 1.5);
  EXPECT_FALSE(profile.layers[1].backward_input_s.has_value());
  EXPECT_FALSE(profile.layers[1].backward_weight_s.has_value());
  EXPECT_NO_THROW(check_profile(profile, "p.json"));
  EXPECT_EQ(profile_to_json(profile), text);  // the split written after backward_s, only where given
  const std::string plain = profile_to_json(parse_profile_json(profile_text(kPlainLayer), "p.json"));
  EXPECT_EQ(plain, profile_text(kPlainLayer));
  EXPECT_EQ(plain.find("backward_input_s"), std::string::npos);
}

TEST(BackwardSplitJson, DeviceSplitRoundTrip) {
  const std::string layer =
      "\n    {\"name\": \"conv\", \"forward_s\": 1, \"backward_s\": 2, \"output_bytes\": 16, \"parameter_bytes\": 4, "
      "\"devices\": {\"V100\": {\"forward_s\": 0.5, \"backward_s\": 1}, \"VCU129\": {\"forward_s\": 0.5, \"backward_s\": "
      "1, \"backward_input_s\": 0.25, \"backward_weight_s\": 0.75}}}";
  const std::string text = profile_text(layer);
  const Profile profile = parse_profile_json(text, "p.json");
  const LayerTimes& fpga = profile.layers[0].device_times.at("VCU129");
  EXPECT_EQ(fpga.backward_input_s, 0.25);
  EXPECT_EQ(fpga.backward_weight_s, 0.75);
  EXPECT_FALSE(profile.layers[0].device_times.at("V100").backward_input_s.has_value());
  EXPECT_FALSE(profile.layers[0].backward_input_s.has_value());
  EXPECT_EQ(profile_to_json(profile), text);
}

TEST(BackwardSplitJson, SumMismatchNamesTheFileLayerAndFields) {
  const std::string bad =
      "\n    {\"name\": \"fc\", \"forward_s\": 0.25, \"backward_s\": 0.75, \"backward_input_s\": 0.5, "
      "\"backward_weight_s\": 0.5, \"output_bytes\": 0, \"parameter_bytes\": 50}";
  EXPECT_EQ(input_error_of([&] { parse_profile_json(profile_text(std::string(kPlainLayer) + "," + bad), "p.json"); }),
            "p.json: layers[1] ('fc'): backward_input_s + backward_weight_s: expected their sum to be backward_s = 0.75 "
            "(within 1e-9 relative), found 0.5 + 0.5 = 1");
  // The same from check_profile, for a profile built elsewhere.
  Profile profile = parse_profile_json(profile_text(kSplitLayer), "p.json");
  profile.layers[0].backward_s = 3;
  EXPECT_EQ(input_error_of([&] { check_profile(profile, "built"); }),
            "built: layers[0] ('conv'): backward_input_s + backward_weight_s: expected their sum to be backward_s = 3 "
            "(within 1e-9 relative), found 0.5 + 1.5 = 2");
  // A device's split.
  const std::string device =
      "\n    {\"name\": \"conv\", \"forward_s\": 1, \"backward_s\": 2, \"output_bytes\": 16, \"parameter_bytes\": 4, "
      "\"devices\": {\"VCU129\": {\"forward_s\": 0.5, \"backward_s\": 1, \"backward_input_s\": 0.25, "
      "\"backward_weight_s\": 0.5}}}";
  EXPECT_EQ(input_error_of([&] { parse_profile_json(profile_text(device), "p.json"); }),
            "p.json: layers[0] ('conv').devices.VCU129: backward_input_s + backward_weight_s: expected their sum to be "
            "backward_s = 1 (within 1e-9 relative), found 0.25 + 0.5 = 0.75");
}

TEST(BackwardSplitJson, WithinTheToleranceIsAccepted) {
  Profile profile = parse_profile_json(profile_text(kSplitLayer), "p.json");
  profile.layers[0].backward_weight_s = 1.5 + 1e-10;
  EXPECT_NO_THROW(check_profile(profile, "built"));
  profile.layers[0].backward_weight_s = 1.5 + 1e-8;
  EXPECT_CONTAINS(input_error_of([&] { check_profile(profile, "built"); }),
                  "built: layers[0] ('conv'): backward_input_s + backward_weight_s: expected their sum");
}

TEST(BackwardSplitJson, OnePartAloneNegativeAndNonFiniteAreErrors) {
  const auto error_for = [](const std::string& split) {
    return input_error_of([&] {
      parse_profile_json(profile_text("\n    {\"name\": \"conv\", \"forward_s\": 1, \"backward_s\": 2" + split +
                                      ", \"output_bytes\": 16, \"parameter_bytes\": 4}"),
                         "p.json");
    });
  };
  EXPECT_EQ(error_for(", \"backward_input_s\": 1"),
            "p.json: layers[0] ('conv').backward_weight_s: expected a number >= 0 since backward_input_s is given (the "
            "backward's input-gradient and weight-gradient parts: both or neither), found nothing");
  EXPECT_EQ(error_for(", \"backward_weight_s\": 1"),
            "p.json: layers[0] ('conv').backward_input_s: expected a number >= 0 since backward_weight_s is given (the "
            "backward's input-gradient and weight-gradient parts: both or neither), found nothing");
  EXPECT_EQ(error_for(", \"backward_input_s\": -1, \"backward_weight_s\": 3"),
            "p.json: layers[0] ('conv').backward_input_s: expected a non-negative number, found -1");
  EXPECT_EQ(error_for(", \"backward_input_s\": 1, \"backward_weight_s\": \"half\""),
            "p.json: layers[0] ('conv').backward_weight_s: expected a non-negative number, found \"half\"");
  // Beyond a double: refused while parsing, with the line (before the names are known).
  EXPECT_CONTAINS(error_for(", \"backward_input_s\": 1e999, \"backward_weight_s\": 1"),
                  "p.json: layers[0].backward_input_s: expected a finite number, found 1e999");
  EXPECT_CONTAINS(error_for(", \"backward_input_s\": 2e9, \"backward_weight_s\": 1"),
                  "p.json: layers[0] ('conv').backward_input_s: expected at most 1e+09 seconds");
  // JSON has no NaN; a profile built elsewhere can.
  Profile profile = parse_profile_json(profile_text(kSplitLayer), "p.json");
  profile.layers[0].backward_input_s = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(input_error_of([&] { check_profile(profile, "built"); }),
            "built: layers[0] ('conv').backward_input_s: expected a non-negative number, found nan");
  profile.layers[0].backward_input_s.reset();
  EXPECT_EQ(input_error_of([&] { check_profile(profile, "built"); }),
            "built: layers[0] ('conv').backward_input_s: expected a number >= 0 since backward_weight_s is given (the "
            "backward's input-gradient and weight-gradient parts: both or neither), found nothing");
  profile.layers[0].backward_input_s = -0.5;
  profile.layers[0].backward_weight_s = 2.5;  // sums to 2, but a part is negative
  EXPECT_EQ(input_error_of([&] { check_profile(profile, "built"); }),
            "built: layers[0] ('conv').backward_input_s: expected a non-negative number, found -0.5");
  // A device's part alone.
  EXPECT_EQ(input_error_of([] {
              parse_profile_json(
                  profile_text("\n    {\"name\": \"conv\", \"forward_s\": 1, \"backward_s\": 2, \"output_bytes\": 16, "
                               "\"parameter_bytes\": 4, \"devices\": {\"V100\": {\"forward_s\": 1, \"backward_s\": 1, "
                               "\"backward_weight_s\": 1}}}"),
                  "p.json");
            }),
            "p.json: layers[0] ('conv').devices.V100.backward_input_s: expected a number >= 0 since backward_weight_s "
            "is given (the backward's input-gradient and weight-gradient parts: both or neither), found nothing");
}

/// A multi-size profile (sizes 2 and 6) whose layer has a split and a
/// device type with a split.
const std::string kSizes =
    "{\n  \"name\": \"sizes\",\n  \"micro_batch_sizes\": [2, 6],\n  \"input_bytes\": [8, 24],\n  \"layers\": [\n"
    "    {\"name\": \"conv\", \"forward_s\": [1, 2], \"backward_s\": [2, 4], \"backward_input_s\": [1, 3], "
    "\"backward_weight_s\": [1, 1], \"output_bytes\": [16, 48], \"parameter_bytes\": 4, \"devices\": {\"VCU129\": "
    "{\"forward_s\": [0.5, 1], \"backward_s\": [1, 3], \"backward_input_s\": [0.25, 1.25], \"backward_weight_s\": [0.75, "
    "1.75]}}},\n"
    "    {\"name\": \"relu\", \"forward_s\": [0.5, 1.5], \"backward_s\": [0.5, 1.5], \"output_bytes\": [16, 48], "
    "\"parameter_bytes\": 0}\n  ]\n}\n";

TEST(BackwardSplitSizes, ReadWriteAndInterpolate) {
  const Profile profile = parse_profile_json(kSizes, "sizes.json");
  EXPECT_NO_THROW(check_profile(profile, "sizes.json"));
  EXPECT_EQ(profile_to_json(profile), kSizes);
  EXPECT_EQ(profile.layers[0].backward_input_s, 1);  // the fields hold the first size
  EXPECT_EQ(profile.measured[1].layers[0].backward_input_s, 3);
  EXPECT_EQ(profile.measured[1].layers[0].device_times.at("VCU129").backward_weight_s, 1.75);

  const Profile at4 = profile_at_micro_batch_size(profile, 4);
  EXPECT_EQ(at4.layers[0].backward_s, 3);
  EXPECT_EQ(at4.layers[0].backward_input_s, 2);
  EXPECT_EQ(at4.layers[0].backward_weight_s, 1);
  const LayerTimes& fpga = at4.layers[0].device_times.at("VCU129");
  EXPECT_EQ(fpga.backward_s, 2);
  EXPECT_EQ(fpga.backward_input_s, 0.75);
  EXPECT_EQ(fpga.backward_weight_s, 1.25);
  EXPECT_FALSE(at4.layers[1].backward_input_s.has_value());
  EXPECT_EQ(backward_split(at4.layers[1]).input_s, 1);  // no parameters: I = B
  EXPECT_EQ(profile_at_micro_batch_size(profile, 6).layers[0].backward_input_s, 3);  // measured: as measured

  // Extrapolated (rule none) past the largest size: still summing to B.
  const Profile at9 = profile_at_micro_batch_size(profile, 9);
  EXPECT_EQ(at9.layers[0].backward_s, 5.5);
  EXPECT_EQ(*at9.layers[0].backward_input_s, 4.5);
  EXPECT_EQ(*at9.layers[0].backward_weight_s, 1);
  EXPECT_EQ(at9.layers[0].device_times.at("VCU129").backward_input_s, 2);
  EXPECT_EQ(at9.layers[0].device_times.at("VCU129").backward_weight_s, 2.5);
  EXPECT_NO_THROW(check_profile(at9, "at9"));
}

TEST(BackwardSplitSizes, InterpolationKeepsTheSumWhenTheFileIsOffByTheTolerance) {
  // Off by 1e-10 relative at size 10, exact at 11: extrapolating down to 5
  // or 1 magnifies the difference beyond 1e-9 relative (1.2e-9, 1e-8); the
  // parts are scaled back to B.
  const std::string text =
      "{\"name\": \"s\", \"micro_batch_sizes\": [10, 11], \"layers\": [{\"name\": \"a\", \"forward_s\": [1, 1], "
      "\"backward_s\": [10, 11], \"backward_input_s\": [5, 5.5], \"backward_weight_s\": [5.000000001, 5.5], "
      "\"output_bytes\": [1, 1], \"parameter_bytes\": 1}]}";
  const Profile profile = parse_profile_json(text, "s.json");
  for (const int size : {1, 5, 12, 1000}) {
    const Profile at = profile_at_micro_batch_size(profile, size);
    const Layer& layer = at.layers[0];
    EXPECT_NEAR(*layer.backward_input_s + *layer.backward_weight_s, layer.backward_s, 1e-13 * layer.backward_s) << size;
    EXPECT_NO_THROW(check_profile(at, "at"));
  }
}

TEST(BackwardSplitSizes, NegativeExtrapolationNamesThePart) {
  // W grows faster than B: extrapolating down to 1 makes it negative.
  const std::string text =
      "{\"name\": \"s\", \"micro_batch_sizes\": [4, 8], \"layers\": [{\"name\": \"a\", \"forward_s\": [1, 1], "
      "\"backward_s\": [4, 8], \"backward_input_s\": [2, 1], \"backward_weight_s\": [2, 7], "
      "\"output_bytes\": [1, 1], \"parameter_bytes\": 1}]}";
  const Profile profile = parse_profile_json(text, "s.json");
  EXPECT_CONTAINS(input_error_of([&] { profile_at_micro_batch_size(profile, 1); }),
                  "profile s: layers[0].backward_weight_s: extrapolating to micro-batch size 1");
}

TEST(BackwardSplitSizes, SplitAtSomeSizesOnlyIsAnError) {
  Profile profile = parse_profile_json(kSizes, "sizes.json");
  profile.measured[1].layers[0].backward_input_s.reset();
  profile.measured[1].layers[0].backward_weight_s.reset();
  EXPECT_EQ(input_error_of([&] { check_profile(profile, "sizes.json"); }),
            "sizes.json: layers[0] ('conv').backward_input_s and backward_weight_s (at micro-batch size 6): expected "
            "them at every size or at none");
  profile = parse_profile_json(kSizes, "sizes.json");
  profile.measured[1].layers[0].backward_weight_s = 2;  // 3 + 2 != 4
  EXPECT_EQ(input_error_of([&] { check_profile(profile, "sizes.json"); }),
            "sizes.json: layers[0] ('conv') (at micro-batch size 6): backward_input_s[1] + backward_weight_s[1]: "
            "expected their sum to be backward_s[1] = 4 (within 1e-9 relative), found 3 + 2 = 5");
  profile = parse_profile_json(kSizes, "sizes.json");
  profile.layers[0].backward_input_s = 1.5;  // the fields no longer hold the first size
  profile.layers[0].backward_weight_s = 0.5;
  EXPECT_CONTAINS(input_error_of([&] { check_profile(profile, "sizes.json"); }),
                  "sizes.json: expected the profile's fields to hold its first measured size (2)");
}

TEST(BackwardSplitScaling, LinearScalesBothParts) {
  const std::string layer =
      "\n    {\"name\": \"conv\", \"forward_s\": 1, \"backward_s\": 2, \"backward_input_s\": 0.5, \"backward_weight_s\": "
      "1.5, \"output_bytes\": 16, \"parameter_bytes\": 4, \"devices\": {\"VCU129\": {\"forward_s\": 0.5, "
      "\"backward_s\": 1, \"backward_input_s\": 0.25, \"backward_weight_s\": 0.75}}}";
  const Profile profile = parse_profile_json(profile_text(layer + "," + kPlainLayer), "p.json");
  const ProfileAtSize at12 = profile_at_micro_batch_size(profile, 12, micro_batch_scaling("linear"));
  const Layer& conv = at12.profile.layers[0];
  EXPECT_EQ(conv.backward_s, 6);
  EXPECT_EQ(conv.backward_input_s, 1.5);
  EXPECT_EQ(conv.backward_weight_s, 4.5);
  EXPECT_EQ(conv.device_times.at("VCU129").backward_s, 3);
  EXPECT_EQ(conv.device_times.at("VCU129").backward_input_s, 0.75);
  EXPECT_EQ(conv.device_times.at("VCU129").backward_weight_s, 2.25);
  EXPECT_FALSE(at12.profile.layers[1].backward_input_s.has_value());

  // A multi-size profile beyond its largest size: the largest size scaled.
  const Profile sizes = parse_profile_json(kSizes, "sizes.json");
  const Layer at12s = profile_at_micro_batch_size(sizes, 12, micro_batch_scaling("linear")).profile.layers[0];
  EXPECT_EQ(at12s.backward_s, 8);
  EXPECT_EQ(at12s.backward_input_s, 6);
  EXPECT_EQ(at12s.backward_weight_s, 2);
  EXPECT_EQ(at12s.device_times.at("VCU129").backward_input_s, 2.5);
  EXPECT_EQ(at12s.device_times.at("VCU129").backward_weight_s, 3.5);
}

TEST(BackwardSplitPartition, SplitLayersKeepsTheFraction) {
  const std::string layer =
      "\n    {\"name\": \"conv\", \"forward_s\": 1, \"backward_s\": 4, \"backward_input_s\": 1, \"backward_weight_s\": "
      "3, \"output_bytes\": 16, \"parameter_bytes\": 4, \"devices\": {\"VCU129\": {\"forward_s\": 0.5, "
      "\"backward_s\": 2, \"backward_input_s\": 0.5, \"backward_weight_s\": 1.5}}}";
  const Profile profile = parse_profile_json(profile_text(layer + "," + kPlainLayer), "p.json");
  const Profile split = split_layers(profile, {{0, 0.25}, {1, 0.5}});
  ASSERT_EQ(split.layers.size(), 4u);
  EXPECT_EQ(split.layers[0].backward_s, 1);
  EXPECT_EQ(split.layers[0].backward_input_s, 0.25);
  EXPECT_EQ(split.layers[0].backward_weight_s, 0.75);
  EXPECT_EQ(split.layers[1].backward_input_s, 0.75);
  EXPECT_EQ(split.layers[1].backward_weight_s, 2.25);
  EXPECT_EQ(split.layers[0].device_times.at("VCU129").backward_input_s, 0.125);
  EXPECT_EQ(split.layers[0].device_times.at("VCU129").backward_weight_s, 0.375);
  EXPECT_EQ(split.layers[1].device_times.at("VCU129").backward_input_s, 0.375);
  EXPECT_EQ(split.layers[1].device_times.at("VCU129").backward_weight_s, 1.125);
  // The default stays a default, applied to each part's own backward.
  EXPECT_FALSE(split.layers[2].backward_input_s.has_value());
  EXPECT_EQ(backward_split(split.layers[2]).input_s, 0.375);
  EXPECT_EQ(backward_split(split.layers[3]).weight_s, 0);
  EXPECT_NO_THROW(check_profile(split, "split"));
}

/// input_bytes 1000; stage 0: embed; stage 1: relu (no parameters), conv
/// (activation_bytes 50 below its output_bytes 300), fc.
Profile three_layer_stage_profile() {
  const std::string layers =
      "\n    {\"name\": \"embed\", \"forward_s\": 1, \"backward_s\": 2, \"output_bytes\": 100, \"parameter_bytes\": 10},"
      "\n    {\"name\": \"relu\", \"forward_s\": 0.5, \"backward_s\": 0.5, \"output_bytes\": 200, \"parameter_bytes\": 0},"
      "\n    {\"name\": \"conv\", \"forward_s\": 1, \"backward_s\": 3, \"backward_input_s\": 1, \"backward_weight_s\": 2, "
      "\"output_bytes\": 300, \"activation_bytes\": 50, \"parameter_bytes\": 5},"
      "\n    {\"name\": \"fc\", \"forward_s\": 1, \"backward_s\": 1.5, \"output_bytes\": 500, \"parameter_bytes\": 7}";
  std::string text = profile_text(layers);
  text.replace(text.find("\"input_bytes\": 8"), 16, "\"input_bytes\": 1000");
  return parse_profile_json(text, "p.json");
}

TEST(BackwardSplitStageCosts, SumsAndWeightGradientStash) {
  const Profile profile = three_layer_stage_profile();
  Partition partition;
  partition.stage_of_layer = {0, 1, 1, 1};
  partition.hosts = {{"h0"}, {"h1"}};
  const std::vector<StageCost> costs = stage_costs(profile, partition);
  ASSERT_EQ(costs.size(), 2u);
  // Stage 0: embed, default halves of 2.
  EXPECT_EQ(costs[0].backward_input_s, 1);
  EXPECT_EQ(costs[0].backward_weight_s, 1);
  // Stage 1: relu (I 0.5, W 0) + conv (1, 2) + fc (0.75, 0.75).
  EXPECT_EQ(costs[1].backward_s, 5);
  EXPECT_EQ(costs[1].backward_input_s, 2.25);
  EXPECT_EQ(costs[1].backward_weight_s, 2.75);
  // Stage 0: embed keeps the model input (1000) and its output gradient (100).
  EXPECT_EQ(costs[0].weight_gradient_stash_bytes, 1100);
  // Stage 1: relu has no parameters; conv keeps relu's stash (200) + its
  // output gradient (300); fc keeps conv's stash (activation_bytes 50) + 500.
  EXPECT_EQ(costs[1].weight_gradient_stash_bytes, 1050);
  EXPECT_EQ(costs[1].stash_bytes, 100 + 200 + 50 + 500);  // unchanged rule, for contrast
}

TEST(BackwardSplitStageCosts, StageFirstLayerWithParametersKeepsTheStageInput) {
  const Profile profile = three_layer_stage_profile();
  Partition partition;
  partition.stage_of_layer = {0, 0, 1, 1};
  partition.hosts = {{"h0"}, {"h1"}};
  const std::vector<StageCost> costs = stage_costs(profile, partition);
  // Stage 0: embed (1000 + 100); relu none.
  EXPECT_EQ(costs[0].weight_gradient_stash_bytes, 1100);
  // Stage 1: conv keeps the stage input (relu's output_bytes, 200) + 300; fc 50 + 500.
  EXPECT_EQ(costs[1].weight_gradient_stash_bytes, 1050);
  EXPECT_EQ(costs[1].input_bytes, 200);
}

}  // namespace
}  // namespace pipegrid
