// The progress line of a long simulate (core/progress.hpp).
#include <gtest/gtest.h>

#include "core/progress.hpp"

namespace pipegrid {
namespace {

TEST(Progress, LineGroupsActivitiesAndRoundsTimes) {
  EXPECT_EQ(progress_line(12.5, 45678, 3.21), "simulating: 12.5 s simulated, 45,678 activities done, 3.2 s elapsed");
  EXPECT_EQ(progress_line(0, 0, 0), "simulating: 0 s simulated, 0 activities done, 0.0 s elapsed");
  EXPECT_EQ(progress_line(1234.5678912, 1234567, 61), "simulating: 1234.57 s simulated, 1,234,567 activities done, 61.0 s elapsed");
  EXPECT_EQ(progress_line(1, 999, 1), "simulating: 1 s simulated, 999 activities done, 1.0 s elapsed");
  EXPECT_EQ(progress_line(1, 1000, 1), "simulating: 1 s simulated, 1,000 activities done, 1.0 s elapsed");
}

TEST(Progress, UpdateReplacesTheLineAndEraseClearsIt) {
  EXPECT_EQ(progress_update("x"), "\rx\033[K");
  EXPECT_EQ(progress_erase(), "\r\033[K");
}

TEST(Progress, FirstLineAfterTheDelayThenAtMostFourASecond) {
  EXPECT_FALSE(progress_due(0.49, -1));
  EXPECT_TRUE(progress_due(0.5, -1));
  EXPECT_FALSE(progress_due(0.7, 0.5));
  EXPECT_TRUE(progress_due(0.75, 0.5));
}

}  // namespace
}  // namespace pipegrid
