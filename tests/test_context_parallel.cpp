// Megatron-Core's rank generator (core/parallel_layout.hpp) and context
// parallelism's profile transform (core/context_parallel.hpp).

#include <gtest/gtest.h>

#include "core/context_parallel.hpp"
#include "core/gpu_kernels.hpp"
#include "core/parallel_layout.hpp"
#include "expect_input_error.hpp"

namespace pipegrid {
namespace {

using Groups = std::vector<std::vector<long long>>;
using testutil::input_error_of;

ParallelSizes sizes_of(int tp, int cp, int dp, int pp, int ep = 1, int etp = 0) {
  ParallelSizes s;
  s.tp = tp;
  s.cp = cp;
  s.dp = dp;
  s.pp = pp;
  s.ep = ep;
  s.etp = etp;
  return s;
}

// initialize_model_parallel's docstring (megatron/core/parallel_state.py,
// core_v0.14.0): 16 GPUs, tensor 2, pipeline 4 (data 2).
TEST(ParallelLayout, MegatronDocstringGroups) {
  const ParallelSizes s = sizes_of(2, 1, 2, 4);
  EXPECT_EQ(parallel_groups(s, GroupKind::Tensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(parallel_groups(s, GroupKind::Pipeline), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(parallel_groups(s, GroupKind::Data),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  // Without context parallelism, dp-cp is dp and cp groups are single ranks.
  EXPECT_EQ(parallel_groups(s, GroupKind::DataWithContext), parallel_groups(s, GroupKind::Data));
  EXPECT_EQ(parallel_groups(s, GroupKind::Context).size(), 16u);
}

// generate_masked_orthogonal_rank_groups by hand: sizes [2, 3, 4] (first
// fastest, strides 1, 2, 6), the middle dimension masked: group g's
// unmasked coordinates (g mod 2, g / 2), members at stride 2.
TEST(ParallelLayout, MaskedOrthogonalGroupsByHand) {
  const Groups groups = masked_orthogonal_rank_groups(24, {2, 3, 4}, {false, true, false});
  ASSERT_EQ(groups.size(), 8u);
  EXPECT_EQ(groups[0], (std::vector<long long>{0, 2, 4}));
  EXPECT_EQ(groups[1], (std::vector<long long>{1, 3, 5}));
  EXPECT_EQ(groups[2], (std::vector<long long>{6, 8, 10}));
  EXPECT_EQ(groups[7], (std::vector<long long>{19, 21, 23}));
  EXPECT_CONTAINS(input_error_of([] { masked_orthogonal_rank_groups(25, {2, 3, 4}, {false, true, false}); }),
                  "expected the world size 25");
}

// tp 2, cp 2, dp 2, pp 2: rank = tensor + 2 (context + 2 (data + 2 pipeline)).
TEST(ParallelLayout, ContextGroupsFollowTheTensorRanks) {
  const ParallelSizes s = sizes_of(2, 2, 2, 2);
  EXPECT_EQ(parallel_groups(s, GroupKind::Context),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(parallel_groups(s, GroupKind::Data),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  // Megatron reduces dense gradients over dp x cp.
  EXPECT_EQ(parallel_groups(s, GroupKind::DataWithContext),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(parallel_groups(s, GroupKind::TensorAndContext), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(parallel_groups(s, GroupKind::Pipeline)[0], (std::vector<long long>{0, 8}));
  const RankCoordinates r13 = rank_coordinates(s, 13);  // 13 = 1 + 2 (0 + 2 (1 + 2 x 1))
  EXPECT_EQ(r13.tensor, 1);
  EXPECT_EQ(r13.context, 0);
  EXPECT_EQ(r13.data, 1);
  EXPECT_EQ(r13.pipeline, 1);
  EXPECT_EQ(dense_rank(s, 1, 0, 1, 1), 13);
  for (long long rank = 0; rank < s.world(); ++rank) {
    const RankCoordinates c = rank_coordinates(s, rank);
    EXPECT_EQ(dense_rank(s, c.tensor, c.context, c.data, c.pipeline), rank);
  }
}

// The expert generator: order tp-ep-dp-pp over etp, ep and edp = world /
// (etp x ep x pp).
TEST(ParallelLayout, ExpertGroupsFromTheExpertGenerator) {
  // tp 2, cp 2, dp 2 (8 ranks), ep 4 with expert tensor 1: edp 2, rank = ep + 4 edp.
  const ParallelSizes flat = sizes_of(2, 2, 2, 1, 4, 1);
  EXPECT_EQ(flat.expert_data(), 2);
  EXPECT_EQ(parallel_groups(flat, GroupKind::Expert), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(parallel_groups(flat, GroupKind::ExpertData), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(parallel_groups(flat, GroupKind::ExpertTensor).size(), 8u);
  // Expert tensor following tp (2), ep 2: edp 2, rank = etp + 2 (ep + 2 edp).
  const ParallelSizes follows = sizes_of(2, 2, 2, 1, 2);
  EXPECT_EQ(follows.expert_tensor(), 2);
  EXPECT_EQ(parallel_groups(follows, GroupKind::Expert), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(parallel_groups(follows, GroupKind::ExpertTensor), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(parallel_groups(follows, GroupKind::ExpertData), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(parallel_groups(follows, GroupKind::ExpertTensorAndExpert), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  const RankCoordinates r6 = rank_coordinates(follows, 6);  // 6 = 0 + 2 (1 + 2 x 1)
  EXPECT_EQ(r6.expert_tensor, 0);
  EXPECT_EQ(r6.expert, 1);
  EXPECT_EQ(r6.expert_data, 1);
}

TEST(ParallelLayout, SizesAreCheckedNamingTheFlag) {
  EXPECT_EQ(input_error_of([] { check_parallel_sizes(sizes_of(2, 0, 1, 1)); }),
            "--context-parallel: expected a size from 1 to 1048576, found 0");
  EXPECT_CONTAINS(input_error_of([] { check_parallel_sizes(sizes_of(2, 2, 2, 2), 8); }), "= 16: expected the world size 8");
  EXPECT_CONTAINS(input_error_of([] { check_parallel_sizes(sizes_of(2, 1, 3, 1, 4)); }),
                  "--expert-parallel 4 x --expert-tensor-parallel 2 = 8: expected a divisor of tensor x context x "
                  "data = 2 x 1 x 3 = 6");
  EXPECT_CONTAINS(input_error_of([] { rank_coordinates(sizes_of(2, 1, 1, 1), 2); }), "rank 2: expected 0 to 1");
  EXPECT_NO_THROW(check_parallel_sizes(sizes_of(2, 2, 2, 2, 8, 1), 16));
}

TransformerShape tiny_shape() {
  TransformerShape shape;
  shape.batch = 1;
  shape.sequence = 8;
  shape.hidden = 4;
  shape.heads = 1;
  shape.kv_columns = 4;
  shape.ffn = 16;
  shape.flash_attention = true;
  return shape;
}

Profile one_block() {
  Profile profile;
  profile.name = "block";
  profile.dtype = "bf16";
  profile.input_bytes = 32;
  Layer layer;
  layer.name = "block0";
  layer.op = "transformer";
  layer.forward_s = 8;
  layer.backward_s = 16;
  layer.backward_input_s = 10;
  layer.backward_weight_s = 6;
  layer.forward_flops = 800;
  layer.parameter_bytes = 100;
  layer.output_bytes = 64;
  layer.activation_bytes = 128;
  layer.attention_core_flops_share = 0.5;
  layer.attention_core_stash_share = 0;
  layer.transformer_shape = tiny_shape();
  profile.layers.push_back(layer);
  return profile;
}

TEST(ContextParallel, RingAttentionClosedForms) {
  // c = 8 / 4 = 2, x = 3: forward 3 max(2, 3) + 2; backward 2 max(2, 3) + 2 max(2, 6).
  EXPECT_DOUBLE_EQ(ring_attention_s(8, 3, 4, false), 11);
  EXPECT_DOUBLE_EQ(ring_attention_s(8, 3, 4, true), 18);
  EXPECT_DOUBLE_EQ(ring_attention_exposed_s(8, 3, 4, true), 10);
  // Transfers shorter than the blocks are hidden.
  EXPECT_DOUBLE_EQ(ring_attention_exposed_s(8, 0.5, 4, false), 0);
  EXPECT_DOUBLE_EQ(ring_attention_exposed_s(8, 0.5, 4, true), 0);
  EXPECT_DOUBLE_EQ(ring_attention_s(8, 3, 1, true), 8);
  // 2 x (s / cp) x kv / t x batch x element bytes.
  EXPECT_DOUBLE_EQ(kv_block_bytes(tiny_shape(), 2, 1, 2), 64);
  EXPECT_DOUBLE_EQ(kv_block_bytes(tiny_shape(), 2, 2, 2), 32);
  // Gradients over d x cp, the ring over d: ((n - 1) / n) / ((d - 1) / d).
  EXPECT_DOUBLE_EQ(data_context_gradient_factor(2, 2), 1.5);
  EXPECT_DOUBLE_EQ(data_context_gradient_factor(1, 4), 1);
  EXPECT_DOUBLE_EQ(data_context_gradient_factor(4, 1), 1);
}

// By hand: cp 2, K,V block 2 x 4 x 4 x 1 x 2 = 64 B over 10 B/s and 1 ms:
// x = 6.401 s. Divided: forward 4, I 5, W 3; attention A = 0.5 x 4 = 2.
// Forward: max(1, x) + 1 - 2 = 5.401 more; backward: 2 max(2.5, x) - 5 =
// 7.802 more on I.
TEST(ContextParallel, ProfileTransformByHand) {
  TensorParallelLink link;
  link.latency_s = 1e-3;
  link.bandwidth_Bps = 10;
  const ContextParallelProfile split = context_parallel_profile(one_block(), 2, 1, link);
  const Layer& layer = split.profile.layers.front();
  EXPECT_NEAR(layer.forward_s, 4 + 5.401, 1e-9);
  EXPECT_NEAR(*layer.backward_input_s, 5 + 7.802, 1e-9);
  EXPECT_NEAR(*layer.backward_weight_s, 3, 1e-9);
  EXPECT_NEAR(layer.backward_s, 5 + 7.802 + 3, 1e-9);
  // Activations and transfers / cp, parameters whole, work / cp.
  EXPECT_DOUBLE_EQ(layer.stashed_bytes(), 64);
  EXPECT_DOUBLE_EQ(layer.output_bytes, 32);
  EXPECT_DOUBLE_EQ(split.profile.input_bytes, 16);
  EXPECT_DOUBLE_EQ(layer.parameter_bytes, 100);
  EXPECT_DOUBLE_EQ(*layer.forward_flops, 400);
  EXPECT_CONTAINS(split.note, "context parallel 2: each rank holds 4 of every sequence's tokens");
  // cp 1: the profile as is.
  EXPECT_DOUBLE_EQ(context_parallel_profile(one_block(), 1, 1, link).profile.layers.front().forward_s, 8);
}

TEST(ContextParallel, RefusesWhatRingAttentionCannotRun) {
  const TensorParallelLink link{1e-6, 1e9, 1, 0, 0};
  EXPECT_EQ(input_error_of([&] { context_parallel_profile(one_block(), 3, 1, link); }),
            "--context-parallel 3: sequence 8 does not split into 2 x 3 = 6 equal chunks (Megatron-Core's "
            "get_batch_on_this_cp_rank, megatron/core/utils.py, core_v0.14.0, cuts each sequence into 2 cp chunks for "
            "the causal load balance): expected a multiple of 6");
  Profile unfused = one_block();
  unfused.layers.front().transformer_shape->flash_attention = false;
  EXPECT_CONTAINS(input_error_of([&] { context_parallel_profile(unfused, 2, 1, link); }), "expected --flash-attention 1");
  Profile dense = one_block();
  dense.layers.front().op = "linear";
  EXPECT_CONTAINS(input_error_of([&] { context_parallel_profile(dense, 2, 1, link); }), "has no transformer layer");
  Profile shapeless = one_block();
  shapeless.layers.front().transformer_shape.reset();
  EXPECT_CONTAINS(input_error_of([&] { context_parallel_profile(shapeless, 2, 1, link); }), "without a transformer_shape");
  EXPECT_EQ(input_error_of([&] { context_parallel_profile(one_block(), 0, 1, link); }),
            "--context-parallel: expected ranks per sequence from 1 to 64, found 0");
  EXPECT_CONTAINS(input_error_of([] { context_parallel_rings(12, 2, 4); }),
                  "tensor parallel 2 x context parallel 4 = 8 hosts per group, but the platform declares 12 hosts");
  EXPECT_EQ(context_parallel_rings(16, 2, 4), (std::vector<std::vector<int>>{{0, 2, 4, 6}, {8, 10, 12, 14}}));
}

// The tensor-core model of a context-parallel rank: N / cp tokens, 1 / cp
// of the causal flash attention in cp kernels.
TEST(ContextParallel, KernelModelTimesTheRanksShare) {
  Layer layer = one_block().layers.front();
  layer.transformer_shape->sequence = 4096;
  layer.transformer_shape->hidden = 1024;
  layer.transformer_shape->heads = 8;
  layer.transformer_shape->kv_columns = 1024;
  layer.transformer_shape->ffn = 4096;
  TensorCoreModel model;
  model.sms = 132;
  model.gemm_efficiency = model.attention_forward_efficiency = model.attention_backward_efficiency = 0.5;
  model.memory_efficiency = 0.5;
  const LayerKernels whole = layer_kernels(layer, model, 1e15, 2, TensorParallelShare{});
  const LayerKernels rank = layer_kernels(layer, model, 1e15, 2, TensorParallelShare{1, false, 4});
  EXPECT_NEAR(rank.attention_core.attention_forward_s, whole.attention_core.attention_forward_s / 4, 1e-15);
  EXPECT_NEAR(rank.input.attention_backward_s, whole.input.attention_backward_s / 4, 1e-15);
  EXPECT_DOUBLE_EQ(rank.attention_core.kernels, 4);
  EXPECT_NEAR(rank.forward.memory_bytes, whole.forward.memory_bytes / 4, 1e-6);
  // 1024 of 4096 token rows: no faster than a quarter of the whole's GEMMs
  // (wave quantisation only adds), no slower than the whole's.
  EXPECT_GE(rank.forward.gemm_s, whole.forward.gemm_s / 4 * (1 - 1e-12));
  EXPECT_LT(rank.forward.gemm_s, whole.forward.gemm_s);
}

}  // namespace
}  // namespace pipegrid
