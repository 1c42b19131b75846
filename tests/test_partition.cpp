// Uniform partition, stage costs and the partition file.

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/partition.hpp"

namespace pipegrid {
namespace {

Profile chain(int layers) {
  Profile profile;
  profile.name = "chain";
  profile.input_bytes = 1000;
  for (int l = 0; l < layers; ++l)
    profile.layers.push_back({"l" + std::to_string(l), 1.0 + l, 2.0 + l, 100.0 * (l + 1), 10.0 * (l + 1)});
  return profile;
}

TEST(Partition, UniformSplitsAsEvenlyAsTheCountAllows) {
  const Partition partition = uniform_partition(chain(10), {"a", "b", "c", "d"}, 4);
  EXPECT_EQ(partition.stage_of_layer, (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(partition.hosts, (std::vector<std::vector<std::string>>{{"a"}, {"b"}, {"c"}, {"d"}}));
}

TEST(Partition, MoreStagesThanLayersIsAnError) {
  try {
    uniform_partition(chain(3), {"a", "b", "c", "d"}, 4);
    FAIL();
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("4 stages need at least 4 layers, found 3"), std::string::npos) << error.what();
  }
  EXPECT_THROW(uniform_partition(chain(8), {"a", "b"}, 4), InputError);
}

TEST(Partition, StageCostsSumLayersAndFollowTheStashRule) {
  const Profile profile = chain(4);
  const Partition partition = uniform_partition(profile, {"a", "b"}, 2);
  const auto stages = stage_costs(profile, partition);
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].first_layer, 0);
  EXPECT_EQ(stages[0].last_layer, 1);
  EXPECT_EQ(stages[1].first_layer, 2);
  EXPECT_DOUBLE_EQ(stages[0].forward_s, 1 + 2);
  EXPECT_DOUBLE_EQ(stages[1].backward_s, 4 + 5);
  EXPECT_DOUBLE_EQ(stages[0].input_bytes, 1000);
  EXPECT_DOUBLE_EQ(stages[0].output_bytes, 200);  // the cut after layer 1
  EXPECT_DOUBLE_EQ(stages[1].input_bytes, 200);
  EXPECT_DOUBLE_EQ(stages[1].output_bytes, 0);
  EXPECT_DOUBLE_EQ(stages[0].stash_bytes, 1000 + 100 + 200);
  EXPECT_DOUBLE_EQ(stages[1].stash_bytes, 200 + 300 + 400);
  EXPECT_DOUBLE_EQ(stages[1].weight_bytes, 30 + 40);
}

TEST(Partition, FileRoundTrips) {
  const Profile profile = chain(5);
  Partition partition;
  partition.stage_of_layer = {0, 1, 1, 1, 2};
  partition.hosts = {{"a"}, {"b", "c"}, {"d"}};
  EXPECT_EQ(partition_to_json(parse_partition_json(partition_to_json(partition), "p.json", profile)),
            partition_to_json(partition));
  EXPECT_EQ(parse_partition_json(partition_to_json(partition), "p.json", profile).stage_of_layer, partition.stage_of_layer);
}

TEST(Partition, BadFilesNameTheField) {
  const Profile profile = chain(4);
  auto message = [&](const std::string& text) {
    try {
      parse_partition_json(text, "p.json", profile);
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  EXPECT_NE(message("{").find("p.json: malformed JSON"), std::string::npos);
  EXPECT_NE(message(R"({"stages": [{"layers": [0, 1], "hosts": ["a"]}, {"layers": [3, 3], "hosts": ["b"]}]})")
                .find("stages[1].layers: expected a range starting at layer 2"),
            std::string::npos);
  EXPECT_NE(message(R"({"stages": [{"layers": [0, 3], "hosts": []}]})").find("stages[0].hosts"), std::string::npos);
  EXPECT_NE(message(R"({"stages": [{"layers": [0, 2], "hosts": ["a"]}]})").find("expected a stage for each of the 4 layers"),
            std::string::npos);
  EXPECT_NE(message(R"({"stages": [{"layers": "all", "hosts": ["a"]}]})").find("stages[0].layers"), std::string::npos);
}

}  // namespace
}  // namespace pipegrid
