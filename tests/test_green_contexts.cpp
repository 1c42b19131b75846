// SM partitions with CUDA green contexts. The split arithmetic is pure and
// tested everywhere; the driver part runs for real only where a GPU is
// present, and elsewhere must fail with a DeviceError that says why.

#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "validate/cuda/green_contexts.hpp"

namespace pipegrid::cuda {
namespace {

TEST(SmPartitionPlan, AnH100SplitsIntoEqualAlignedHalves) {
  // H100 SXM: 132 SMs, groups of at least 8 in multiples of 8 (the fact
  // sheet's two 64-SM partitions).
  EXPECT_EQ(partition_sm_count(132, 1, 8, 8), 128);
  EXPECT_EQ(partition_sm_count(132, 2, 8, 8), 64);
  EXPECT_EQ(partition_sm_count(132, 3, 8, 8), 40);
  EXPECT_EQ(partition_sm_count(132, 4, 8, 8), 32);
  EXPECT_EQ(partition_sm_count(132, 16, 8, 8), 8);
}

TEST(SmPartitionPlan, TooManyPartitionsOrNoneAreErrors) {
  EXPECT_THROW(partition_sm_count(132, 17, 8, 8), DeviceError);
  EXPECT_THROW(partition_sm_count(132, 0, 8, 8), std::invalid_argument);
  try {
    partition_sm_count(132, 17, 8, 8);
  } catch (const DeviceError& error) {
    EXPECT_EQ(std::string(error.what()),
              "a device of 132 SMs cannot give 17 partitions of at least 8 SMs in multiples of 8 (at most 16)");
  }
  EXPECT_EQ(partition_sm_count(10, 3, 0, 0), 3);  // no alignment: SMs one by one
}

TEST(GreenContexts, SplitTheGpuWhenThereIsOneElseSayWhyNot) {
  EXPECT_THROW(GreenContextPartitions(0, 0), std::invalid_argument);  // checked before the driver is touched
  try {
    const DeviceDescription device = describe_device(0);
    GreenContextPartitions partitions(0, 2);
    ASSERT_EQ(partitions.partitions().size(), 2u);
    for (const SmPartition& partition : partitions.partitions()) {
      EXPECT_GE(partition.sm_count, device.min_partition_sms);
      EXPECT_LE(2 * partition.sm_count, device.sm_count);
      EXPECT_NE(partition.stream, nullptr);
      EXPECT_NE(partition.green_context, nullptr);
    }
  } catch (const DeviceError& error) {
    // No driver, no device or an old driver: the message names the cause.
    const std::string message = error.what();
    EXPECT_TRUE(message.find("CUDA") != std::string::npos) << message;
    GTEST_SKIP() << "no usable CUDA device: " << message;
  }
}

}  // namespace
}  // namespace pipegrid::cuda
