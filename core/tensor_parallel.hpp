#pragma once
// Tensor parallelism (Megatron-style) as a pure transform of a profile: a
// stage runs split t ways over t consecutive hosts of one server, the
// pipeline and data-parallel dimensions run over those groups, and each
// group's first host (its leader) stands for it in the simulation
// (docs/semantics.md, Tensor parallelism). Nothing here touches SimGrid.

#include <string>
#include <vector>

#include "core/platform.hpp"
#include "core/profile.hpp"

namespace pipegrid {

/** Most hosts a tensor-parallel group may have (--tensor-parallel). */
constexpr int kMaxTensorParallel = 64;

/** The link a group's ring all-reduce runs over: the slowest step of the
 *  ring (the largest latency and the narrowest bandwidth of the routes from
 *  each member to the next, the last back to the first). */
struct TensorParallelLink {
  double latency_s = 0;
  double bandwidth_Bps = 0;
};

/** Seconds of one ring all-reduce of `bytes` over `t` hosts:
 *  2 (t - 1) x (latency + bytes / (t x bandwidth)); 0 when t == 1. */
double ring_all_reduce_s(double bytes, int t, const TensorParallelLink& link);

/** Whether tensor parallelism splits `layer`: op "transformer" (a whole
 *  Megatron-splittable block) with FLOPs. Every other layer is replicated. */
bool tensor_parallel_splits(const Layer& layer);

/** A profile as each member of a group of t runs it, and what happened. */
struct TensorParallelProfile {
  Profile profile;
  std::vector<int> split;       ///< indices of the split layers
  std::vector<int> replicated;  ///< indices of the replicated layers
  /// For people: "tensor parallel 4: 24 transformer layers split; 3 layers
  /// replicated: embedding, ...", with the all-reduce link and the transfer
  /// rule. Empty when t == 1.
  std::string note;
};

/** The profile per group member (t >= 1; t == 1 returns `profile` as is):
 *  - a split layer (tensor_parallel_splits): forward, backward (its I and W
 *    parts, and every device's times) divided by t; FLOPs, bytes_read,
 *    bytes_written, parameter_bytes and the stashed activation divided by t;
 *    plus Megatron's all-reduces of the layer's (undivided) output_bytes,
 *    each ring_all_reduce_s(output_bytes, t, link): 2 added to the forward,
 *    2 to the backward's input-gradient part (I); the backward's parts are
 *    then given explicitly (I' = I / t + 2 AR, W' = W / t, backward = I' + W');
 *  - a replicated layer keeps its times, FLOPs, parameters and stashed
 *    activation (activation_bytes set to what it stashed);
 *  - every layer's output_bytes (what crosses a cut to the next stage) is
 *    divided by t: the t members of a group send their shares to the next
 *    group's members in parallel, and the leader's transfer carries one.
 *  Layers without times (times_given false) are treated alike: their times
 *  are 0 / t plus the all-reduces, so a device model must fill their times
 *  before this transform (from the divided FLOPs they would miss the
 *  all-reduces). InputError when t < 1 or t > kMaxTensorParallel. */
TensorParallelProfile tensor_parallel_profile(const Profile& profile, int t, const TensorParallelLink& link);

/** The groups of t consecutive hosts (indices into platform.hosts): group g
 *  holds hosts g t .. g t + t - 1. InputError (naming --tensor-parallel)
 *  when t < 1 or t > kMaxTensorParallel, when t does not divide the hosts,
 *  or when a group spans two servers: hosts of one server are those whose
 *  HostInfo::server (the innermost SimGrid zone that holds them; `pipegrid
 *  platform cluster` makes one zone per server) is the same. */
std::vector<std::vector<int>> tensor_parallel_groups(const PlatformSummary& platform, int t);

/** The slowest ring step over every group (the platform's route matrices are
 *  needed: InputError when absent or when a ring step has no route). */
TensorParallelLink tensor_parallel_link(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups);

/** The platform the pipeline and data-parallel dimensions see: the groups'
 *  leaders only, in order, with the routes between them (route matrices and
 *  route_links restricted; links kept). `groups` from tensor_parallel_groups. */
PlatformSummary leader_platform(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups);

}  // namespace pipegrid
