// Schedule generators: exact action orders, warm-up counts, FBP's stash cap,
// recomputation, and that every generated Program validates.

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.hpp"
#include "expect_input_error.hpp"
#include "schedules/beyond.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid {
namespace {

std::string stream_text(const Stream& stream) {
  std::string text;
  for (const Action& action : stream.actions) text += (text.empty() ? "" : " ") + to_string(action);
  return text;
}

Program make(const std::string& name, int stages, int micro_batches, int mini_batches = 1, bool recompute = false) {
  ScheduleOptions options;
  options.num_stages = stages;
  options.micro_batches = micro_batches;
  options.mini_batches = mini_batches;
  options.recompute = recompute;
  return generate_schedule(name, options);
}

// Forwards run before the first backward of a stream.
int leading_forwards(const Stream& stream) {
  const auto first_backward = std::find_if(stream.actions.begin(), stream.actions.end(),
                                           [](const Action& a) { return a.kind != ActionKind::Forward; });
  return static_cast<int>(first_backward - stream.actions.begin());
}

TEST(Schedules, GPipeRunsAllForwardsThenAllBackwards) {
  const Program program = make("gpipe", 2, 3);
  ASSERT_EQ(program.devices.size(), 2u);
  EXPECT_EQ(stream_text(program.devices[0].streams[0]), "0F0 0F1 0F2 0B0 0B1 0B2");
  EXPECT_EQ(stream_text(program.devices[1].streams[0]), "1F0 1F1 1F2 1B0 1B1 1B2");
}

TEST(Schedules, OneFOneBSnoOrderMatchesBaPipe) {
  const Program program = make("1f1b-sno", 3, 5);
  EXPECT_EQ(stream_text(program.devices[0].streams[0]), "0F0 0F1 0F2 0B0 0F3 0B1 0F4 0B2 0B3 0B4");
  EXPECT_EQ(stream_text(program.devices[1].streams[0]), "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1F4 1B3 1B4");
  EXPECT_EQ(stream_text(program.devices[2].streams[0]), "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3 2F4 2B4");
}

TEST(Schedules, WarmUpCountsFollowSemantics) {
  for (int N = 1; N <= 8; ++N)
    for (int M = 1; M <= 20; ++M) {
      const Program sno = make("1f1b-sno", N, M), so = make("1f1b-so", N, M), as = make("1f1b-as", N, M);
      for (int s = 0; s < N; ++s) {
        EXPECT_EQ(leading_forwards(sno.devices[s].streams[0]), std::min(N - s, M)) << "N=" << N << " M=" << M << " s=" << s;
        EXPECT_EQ(leading_forwards(as.devices[s].streams[0]), std::min(N - s, M));
        EXPECT_EQ(leading_forwards(so.devices[s].streams[0]), std::min(2 * (N - s), M));
        EXPECT_EQ(warmup_forwards("1f1b-so", std::vector<int>(N, 1), s, M), std::min(2 * (N - s), M));
      }
    }
}

TEST(Schedules, FbpHasTwoStreamsAndTheStashCapAsDependencies) {
  const Program program = make("fbp-as", 2, 6);
  ASSERT_EQ(program.devices[0].streams.size(), 2u);
  EXPECT_EQ(stream_text(program.devices[0].streams[0]), "0F0 0F1 0F2 0F3 0F4 0F5");
  EXPECT_EQ(stream_text(program.devices[0].streams[1]), "0B0 0B1 0B2 0B3 0B4 0B5");
  // Stage 0 of 2: cap 4, so F4 waits for B0 and F5 for B1; stage 1: cap 2.
  const std::vector<Dependency> expected = {
      {parse_action("0B0"), parse_action("0F4")}, {parse_action("0B1"), parse_action("0F5")},
      {parse_action("1B0"), parse_action("1F2")}, {parse_action("1B1"), parse_action("1F3")},
      {parse_action("1B2"), parse_action("1F4")}, {parse_action("1B3"), parse_action("1F5")},
  };
  EXPECT_EQ(program.extra_dependencies, expected);
}

TEST(Schedules, RecomputeRunsAForwardRightBeforeEachBackward) {
  const Program program = make("1f1b-sno", 2, 3, 1, true);
  EXPECT_EQ(stream_text(program.devices[0].streams[0]), "0F0 0F1 0R0 0B0 0F2 0R1 0B1 0R2 0B2");
}

// The PipeDream family recomputes as the flushed schedules do: an R right
// before each backward, the 1F1B order across mini-batches unchanged.
TEST(Schedules, PipeDreamFamilyRecomputesBeforeEachBackward) {
  for (const std::string name : {"pipedream", "pipedream-2bw", "pipeoptim"}) {
    const Program program = make(name, 2, 1, 4, true);
    EXPECT_EQ(stream_text(program.devices[0].streams[0]), "0F0 0F0@1 0R0 0B0 0F0@2 0R0@1 0B0@1 0F0@3 0R0@2 0B0@2 0R0@3 0B0@3")
        << name;
    EXPECT_EQ(stream_text(program.devices[1].streams[0]), "1F0 1R0 1B0 1F0@1 1R0@1 1B0@1 1F0@2 1R0@2 1B0@2 1F0@3 1R0@3 1B0@3")
        << name;
    validate_program(program);
  }
  // Replicated stages (1F1B-RR) and the all-reduces name the same backwards.
  ScheduleOptions options;
  options.num_stages = 2;
  options.mini_batches = 4;
  options.replicas = {2, 1};
  const Program plain = generate_schedule("pipedream", options);
  options.recompute = true;
  const Program recomputed = generate_schedule("pipedream", options);
  EXPECT_EQ(stream_text(recomputed.devices[0].streams[0]), "0F0 0F0@2 0R0 0B0 0R0@2 0B0@2");
  EXPECT_EQ(recomputed.all_reduces, plain.all_reduces);
  validate_program(recomputed);
}

TEST(Schedules, DataParallelRecomputesBeforeEachBackward) {
  ScheduleOptions options;
  options.micro_batches = 3;
  options.mini_batches = 2;
  options.replicas = {2};
  options.recompute = true;
  const Program program = generate_schedule("dp", options);
  EXPECT_EQ(stream_text(program.devices[0].streams[0]), "0F0 0R0 0B0 0F2 0R2 0B2 0F0@1 0R0@1 0B0@1 0F2@1 0R2@1 0B2@1");
  EXPECT_EQ(stream_text(program.devices[1].streams[0]), "0F1 0R1 0B1 0F1@1 0R1@1 0B1@1");
  validate_program(program);
  // Without --recompute, dp is as before: F then B.
  options.recompute = false;
  EXPECT_EQ(stream_text(generate_schedule("dp", options).devices[1].streams[0]), "0F1 0B1 0F1@1 0B1@1");
}

TEST(Schedules, UpdateIntervalAppliesToPipeDream2BwOnly) {
  for (const ScheduleInfo& info : schedule_catalog()) {
    ScheduleOptions options;
    options.num_stages = info.single_stage ? 1 : 2 * std::max(info.fixed_virtual_stages, 1);
    options.virtual_stages = std::max(info.fixed_virtual_stages, 1);
    options.micro_batches = info.flushed ? 4 : 1;
    options.update_interval = 2;
    if (info.name == "pipedream-2bw") {
      EXPECT_NO_THROW(generate_schedule(info.name, options));
    } else {
      const std::string error = testutil::input_error_of([&] { generate_schedule(info.name, options); });
      EXPECT_CONTAINS(error, "--update-interval: applies to pipedream-2bw, not " + info.name);
    }
  }
}

TEST(Schedules, MiniBatchesFollowEachOtherOnEveryDevice) {
  const Program program = make("gpipe", 1, 2, 2);
  EXPECT_EQ(stream_text(program.devices[0].streams[0]), "0F0 0F1 0B0 0B1 0F0@1 0F1@1 0B0@1 0B1@1");
}

TEST(Schedules, EveryGeneratedProgramValidates) {
  for (const ScheduleInfo& info : schedule_catalog())
    for (int N = 1; N <= 6; ++N)
      for (int M : {1, 2, 3, 5, 8, 13})
        for (int K : {1, 2, 7})
          for (bool recompute : {false, true}) {
            if ((info.single_stage && N != 1) || (!info.flushed && M != 1)) continue;
            if (is_beyond_schedule(info.name)) continue;  // test_schedules_beyond.cpp
            EXPECT_NO_THROW(validate_program(make(info.name, N, M, K, recompute)))
                << info.name << " N=" << N << " M=" << M << " K=" << K << " recompute=" << recompute;
          }
}

TEST(Schedules, EveryReplicatedProgramValidates) {
  const std::vector<std::vector<int>> configurations = {{2, 1}, {2, 1, 1}, {3, 1}, {4, 2, 1, 1}, {1, 3}, {2, 2}, {1, 2, 3}};
  for (const ScheduleInfo& info : schedule_catalog())
    for (const auto& replicas : configurations)
      for (int M : {1, 2, 5, 8})
        for (int K : {1, 2, 3, 10}) {
          if (info.single_stage || (!info.flushed && M != 1)) continue;
          if (is_beyond_schedule(info.name)) continue;  // one replica per stage; test_schedules_beyond.cpp
          ScheduleOptions options;
          options.num_stages = static_cast<int>(replicas.size());
          options.micro_batches = M;
          options.mini_batches = K;
          options.replicas = replicas;
          EXPECT_NO_THROW(validate_program(generate_schedule(info.name, options)))
              << info.name << " replicas=" << replicas.size() << " M=" << M << " K=" << K;
        }
  for (int r = 1; r <= 5; ++r)
    for (int M : {1, 3, 8})
      for (bool wait_free : {false, true}) {
        ScheduleOptions options;
        options.micro_batches = M;
        options.mini_batches = 3;
        options.replicas = {r};
        options.wait_free = wait_free;
        EXPECT_NO_THROW(validate_program(generate_schedule("dp", options))) << "dp r=" << r << " M=" << M;
      }
}

TEST(Schedules, UnknownNameListsTheKnownOnes) {
  try {
    make("zero-bubble-v", 2, 2);
    FAIL() << "expected an InputError";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("zero-bubble-v"), std::string::npos) << message;
    EXPECT_NE(message.find("1f1b-sno"), std::string::npos) << message;
  }
}

TEST(Schedules, BadShapesAreRejected) {
  EXPECT_THROW(make("gpipe", 0, 2), InputError);
  EXPECT_THROW(make("gpipe", 2, 0), InputError);
  EXPECT_THROW(make("gpipe", 2, 2, 0), InputError);
}

TEST(Schedules, FbpIsRejectedOnSynchronousHostsWithBaPipesReason) {
  HostInfo gpu;
  gpu.name = "gpu0";
  try {
    check_schedule_for_hosts("fbp-as", {gpu});
    FAIL() << "expected an InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("GPUs cannot"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("gpu0"), std::string::npos) << error.what();
  }
}

TEST(Schedules, ScheduleForTheOtherDeviceKindWarns) {
  HostInfo gpu, fpga;
  gpu.name = "gpu0";
  fpga.name = "fpga0";
  fpga.kind = DeviceKind::Fpga;
  fpga.execution = Execution::Async;
  EXPECT_EQ(check_schedule_for_hosts("1f1b-as", {gpu}).size(), 1u);
  EXPECT_EQ(check_schedule_for_hosts("1f1b-sno", {fpga}).size(), 1u);
  EXPECT_TRUE(check_schedule_for_hosts("1f1b-sno", {gpu}).empty());
  EXPECT_TRUE(check_schedule_for_hosts("fbp-as", {fpga}).empty());
}

}  // namespace
}  // namespace pipegrid
