// Data parallelism over whole pipelines (ScheduleOptions::data_parallel,
// replicate_pipelines): Megatron-LM's counting (micro-batches per pipeline),
// any flushed schedule, one all-reduce per stage after each device's last
// backward, and the placement rules that let a replicated device hold
// several stages.

#include <gtest/gtest.h>

#include <algorithm>

#include "core/platform_check.hpp"
#include "core/program.hpp"
#include "expect_input_error.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

ScheduleOptions options_of(int stages, int micro_batches, int data_parallel, int virtual_stages = 1, int mini_batches = 1) {
  ScheduleOptions options;
  options.num_stages = stages;
  options.micro_batches = micro_batches;
  options.mini_batches = mini_batches;
  options.data_parallel = data_parallel;
  options.virtual_stages = virtual_stages;
  return options;
}

// 1F1B over d pipelines of m micro-batches each is PipeDream's per-stage
// replication with d replicas per stage and m d micro-batches (micro-batch
// j runs on replica j mod d): the same devices, orders and all-reduces.
// (The replicas' all-reduces are listed stage by stage, the pipelines' mini-
// batch by mini-batch: the same set.)
TEST(DataParallelPipelines, OneFOneBEqualsPerStageReplicasWithMicroBatchesCountedPerPipeline) {
  const auto by_stage = [](Program program) {
    std::stable_sort(program.all_reduces.begin(), program.all_reduces.end(),
                     [](const AllReduce& a, const AllReduce& b) { return a.stage < b.stage; });
    return program;
  };
  for (const std::string name : {"gpipe", "1f1b-sno", "1f1b-so"}) {
    ScheduleOptions replicated = options_of(3, 8, 1, 1, 2);
    replicated.replicas = {2, 2, 2};
    const Program pipelines = generate_schedule(name, options_of(3, 4, 2, 1, 2));
    EXPECT_EQ(pipelines.all_reduces.size(), 6u) << name;
    EXPECT_EQ(by_stage(pipelines), generate_schedule(name, replicated)) << name;
  }
}

TEST(DataParallelPipelines, ReplicaQRunsMicroBatchesQModDInThePipelinesOrder) {
  const Program one = generate_schedule("interleaved-1f1b", options_of(4, 4, 1, 2));
  const Program two = generate_schedule("interleaved-1f1b", options_of(4, 4, 2, 2));
  ASSERT_EQ(one.devices.size(), 2u);
  ASSERT_EQ(two.devices.size(), 4u);
  EXPECT_EQ(two.micro_batches, 8);
  for (std::size_t i = 0; i < one.devices.size(); ++i)
    for (int q = 0; q < 2; ++q) {
      const DeviceProgram& device = two.devices[i * 2 + static_cast<std::size_t>(q)];
      EXPECT_EQ(device.stages, one.devices[i].stages);
      EXPECT_EQ(device.replica, q);
      ASSERT_EQ(device.streams.size(), 1u);
      const std::vector<Action>& mine = device.streams[0].actions;
      const std::vector<Action>& theirs = one.devices[i].streams[0].actions;
      ASSERT_EQ(mine.size(), theirs.size());
      for (std::size_t k = 0; k < mine.size(); ++k) {
        EXPECT_EQ(mine[k].kind, theirs[k].kind);
        EXPECT_EQ(mine[k].stage, theirs[k].stage);
        EXPECT_EQ(mine[k].micro_batch, theirs[k].micro_batch * 2 + q);
      }
    }
  EXPECT_NO_THROW(validate_program(two));
}

TEST(DataParallelPipelines, EachStageIsAllReducedAfterTheDevicesLastBackwardAndReleasesTheNextMiniBatch) {
  // zb-v: device 0 holds stages 0 and 3 (a V over p = 2); its last backward
  // is a W of stage 0, and both of its stages' all-reduces wait for it.
  const Program program = generate_schedule("zb-v", options_of(4, 4, 2, 2, 2));
  ASSERT_EQ(program.all_reduces.size(), 8u);  // 4 stages x 2 mini-batches
  for (const AllReduce& all_reduce : program.all_reduces) {
    ASSERT_EQ(all_reduce.ready.size(), 2u);
    for (std::size_t q = 0; q < 2; ++q) {
      const Action& ready = all_reduce.ready[q];
      const DeviceProgram* holder = nullptr;
      for (const DeviceProgram& device : program.devices)
        if (device.replica == static_cast<int>(q) && device.holds(all_reduce.stage)) holder = &device;
      ASSERT_NE(holder, nullptr);
      // The device's last backward of that mini-batch.
      const Action* last = nullptr;
      for (const Action& action : holder->streams[0].actions)
        if (action.mini_batch == all_reduce.round && (action.kind == ActionKind::Backward || action.kind == ActionKind::BackwardWeight))
          last = &action;
      ASSERT_NE(last, nullptr);
      EXPECT_EQ(ready, *last) << "stage " << all_reduce.stage << " round " << all_reduce.round;
      EXPECT_EQ(ready.micro_batch % 2, static_cast<int>(q));
    }
    if (all_reduce.round == 0) EXPECT_EQ(all_reduce.release.size(), 2u);
    else EXPECT_TRUE(all_reduce.release.empty());
    for (const Action& released : all_reduce.release) EXPECT_EQ(released.mini_batch, 1);
  }
  EXPECT_NO_THROW(validate_program(program));
}

TEST(DataParallelPipelines, EverySplitAndMultiStageScheduleValidates) {
  for (const std::string name : {"interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb1p", "zb-v", "dualpipev"}) {
    const int v = default_virtual_stages(name);
    const Program program = generate_schedule(name, options_of(4 * v, 8, 3, v));
    EXPECT_EQ(program.devices.size(), 12u) << name;
    EXPECT_EQ(program.micro_batches, 24) << name;
    EXPECT_EQ(program.all_reduces.size(), static_cast<std::size_t>(4 * v)) << name;
    EXPECT_NO_THROW(validate_program(program)) << name;
  }
}

TEST(DataParallelPipelines, RefusedWhereStagesAreReplicatedAnotherWay) {
  EXPECT_CONTAINS(input_error_of([] { generate_schedule("pipedream", options_of(2, 1, 2)); }), "--replicas");
  EXPECT_CONTAINS(input_error_of([] { generate_schedule("dp", options_of(1, 4, 2)); }),
                  "already runs the whole model on every host");
  ScheduleOptions both = options_of(2, 4, 2);
  both.replicas = {2, 2};
  EXPECT_CONTAINS(input_error_of([&] { generate_schedule("1f1b-sno", both); }), "give one");
  EXPECT_CONTAINS(input_error_of([] { generate_schedule("1f1b-sno", options_of(2, 4, 0)); }),
                  "--data-parallel: expected pipelines from 1");
}

TEST(DataParallelPipelines, TheWorkItemLimitCountsEveryPipeline) {
  // 100 stages x 1000 micro-batches = 100,000 items per pipeline (within
  // 250,000); x d 12 = 1.2 million over the replicas (above 1,048,576).
  EXPECT_NO_THROW(generate_schedule("1f1b-sno", options_of(100, 1000, 4)));
  EXPECT_CONTAINS(input_error_of([] { generate_schedule("1f1b-sno", options_of(100, 1000, 12)); }),
                  "--micro-batches 1000 x --data-parallel 12 x --mini-batches 1 x 100 stages: expected at most 1048576 work "
                  "items over the replicas");
}

TEST(DataParallelPipelines, AReplicaOfAMultiStageDeviceMustHoldTheSameStages) {
  Program program = generate_schedule("interleaved-1f1b", options_of(4, 2, 2, 2));
  ASSERT_NO_THROW(validate_program(program));
  // Replica 1 of pipeline device 0 (stages 0 and 2) split over two devices.
  program.devices[1].stages = {0};
  program.devices.push_back({{2}, 1, {}});
  try {
    validate_program(program);
    ADD_FAILURE() << "expected a ProgramError";
  } catch (const ProgramError& error) {
    EXPECT_CONTAINS(std::string(error.what()), "every replica of them must hold the same stages");
  }
}

TEST(DataParallelPipelines, AHostMayHoldSeveralStagesAsTheSameReplicaOfEach) {
  EXPECT_NO_THROW(check_one_device_per_host({{"a", "b"}, {"c", "d"}, {"a", "b"}}, "partition"));
  EXPECT_CONTAINS(input_error_of([] { check_one_device_per_host({{"a", "b"}, {"b", "a"}}, "partition"); }),
                  "as replica 1 of 2 and replica 0 of 2");
  EXPECT_CONTAINS(input_error_of([] { check_one_device_per_host({{"a", "b"}, {"a"}}, "partition"); }),
                  "the same replica of each, among equally many");
}

}  // namespace
}  // namespace pipegrid
