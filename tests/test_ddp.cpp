// Megatron-Core DDP (docs/semantics.md, "Gradient synchronisation"): the
// distributed optimizer's bytes per parameter, bucketed all-reduces in the
// Program text, and replicate_pipelines with --overlap-grad-reduce.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/plan.hpp"
#include "core/precision.hpp"
#include "core/program.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid {
namespace {

TEST(DistributedOptimizer, BytesPerParameterAreMegatronsTable) {
  // Megatron-LM core_v0.14.0, docs/source/api-guide/dist_optimizer.md (adam).
  for (const int d : {1, 2, 3, 8, 64}) {
    // fp16 gradients: resident 4 + 12/d, and during the step the shard of
    // fp32 gradient copies (4/d): the table's 4 + 16/d.
    EXPECT_NEAR(distributed_bytes_per_parameter("fp16", "adam", "", d), 4 + 12.0 / d, 1e-9) << d;
    EXPECT_NEAR(distributed_bytes_per_parameter("fp16", "adam", "", d) + step_gradient_copy_bytes_per_parameter("fp16", "", d),
                4 + 16.0 / d, 1e-9)
        << d;
    EXPECT_EQ(step_gradient_copy_bytes_per_parameter("bf16", "fp32", d), 0) << d;
    EXPECT_EQ(step_gradient_copy_bytes_per_parameter("fp32", "", d), 0) << d;
    EXPECT_NEAR(distributed_bytes_per_parameter("bf16", "adam", "fp32", d), 6 + 12.0 / d, 1e-9) << d;
    EXPECT_NEAR(distributed_bytes_per_parameter("fp32", "adam", "", d), 8 + 8.0 / d, 1e-9) << d;
    // Per byte of weights (the profile's parameter bytes are in the dtype).
    EXPECT_NEAR(resident_weight_factor("bf16", "adam", "fp32", d), (6 + 12.0 / d) / 2, 1e-9) << d;
    EXPECT_NEAR(resident_weight_factor("fp32", "adam", "", d), (8 + 8.0 / d) / 4, 1e-9) << d;
  }
  // The non-distributed lines: bf16 with fp32 gradients 18 and fp32 16,
  // bytes_per_parameter's; fp16 gradients 16 resident + 4 during the step.
  EXPECT_EQ(bytes_per_parameter("bf16", "adam", "fp32").total(), 18);
  EXPECT_EQ(bytes_per_parameter("fp32", "adam").total(), 16);
  EXPECT_EQ(bytes_per_parameter("fp16", "adam").total() + step_gradient_copy_bytes_per_parameter("fp16", ""), 20);
  EXPECT_EQ(step_gradient_copy_bytes_per_parameter("bf16", "bf16"), 4);
  // Without optimizer state only the master weights are split.
  EXPECT_NEAR(distributed_bytes_per_parameter("bf16", "sgd", "fp32", 4), 6 + 4.0 / 4, 1e-9);
  EXPECT_NEAR(distributed_bytes_per_parameter("fp32", "sgd", "", 4), 8, 1e-9);
  EXPECT_THROW(distributed_bytes_per_parameter("bf16", "adam", "", 0), InputError);
}

TEST(DistributedOptimizer, MegatronsDefaultBucketIsFortyMillionParametersOrAMillionPerReplica) {
  const auto plan = std::make_unique<Plan>();
  plan->data_parallel = 8;
  EXPECT_EQ(plan->ddp_bucket_parameters(), 40000000);
  plan->data_parallel = 64;
  EXPECT_EQ(plan->ddp_bucket_parameters(), 64000000);
  plan->ddp_bucket_size = 1000;
  EXPECT_EQ(plan->ddp_bucket_parameters(), 1000);
}

TEST(BucketedAllReduce, TextFormRoundTripsAndExcludesPerLayer) {
  const std::string text =
      "# pipegrid program: 1 stages, 2 micro-batches, 1 mini-batches\n"
      "device 0 stage 0 replica 0 stream 0: 0F0 0B0\n"
      "device 1 stage 0 replica 1 stream 0: 0F1 0B1\n"
      "allreduce stage 0 round 0 bucketed: ready 0B0 0B1\n";
  const Program program = parse_program_text(text, "test");
  ASSERT_EQ(program.all_reduces.size(), 1u);
  EXPECT_TRUE(program.all_reduces[0].bucketed);
  EXPECT_FALSE(program.all_reduces[0].per_layer);
  EXPECT_EQ(program_to_text(program), text);
  validate_program(program);
  Program both = program;
  both.all_reduces[0].per_layer = true;
  EXPECT_THROW(validate_program(both), ProgramError);
}

TEST(BucketedAllReduce, OverlapReadiesEachStageAtItsOwnLastBackwardAndBucketsOnlyTheFirstStage) {
  ScheduleOptions options;
  options.num_stages = 4;
  options.virtual_stages = 2;
  options.micro_batches = 4;
  options.data_parallel = 2;
  const Program after = generate_schedule("interleaved-1f1b", options);
  options.overlap_grad_reduce = true;
  const Program overlapped = generate_schedule("interleaved-1f1b", options);
  validate_program(overlapped);
  EXPECT_EQ(after.devices, overlapped.devices);
  ASSERT_EQ(overlapped.all_reduces.size(), 4u);
  for (const AllReduce& all_reduce : after.all_reduces) EXPECT_FALSE(all_reduce.bucketed);
  // Device 0 (replica 0) holds stages 0 and 2: stage 2's last backward runs first.
  std::vector<int> device0_order;
  for (const AllReduce& all_reduce : overlapped.all_reduces) {
    EXPECT_EQ(all_reduce.bucketed, all_reduce.stage == 0) << all_reduce.stage;
    for (const Action& ready : all_reduce.ready) {
      EXPECT_EQ(ready.stage, all_reduce.stage);
      // The stage's last backward of the mini-batch: replica q's micro-batch 3 d + q.
      EXPECT_EQ(ready.micro_batch / 2, 3) << to_string(ready);
    }
    if (all_reduce.stage % 2 == 0) device0_order.push_back(all_reduce.stage);
  }
  EXPECT_EQ(device0_order, (std::vector<int>{2, 0}));
  // Without overlap: the device's last backward (stage 0's) readies both.
  for (const AllReduce& all_reduce : after.all_reduces)
    if (all_reduce.stage == 2) {
      EXPECT_EQ(all_reduce.ready[0].stage, 0);
    }
}

}  // namespace
}  // namespace pipegrid
