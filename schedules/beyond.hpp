#pragma once
// Schedules of issue 14 whose devices hold several stages or split the
// backward (/work/shared/SCHEDULES-BEYOND.md; docs/schedules.md): per-rank
// compute orders of ONE mini-batch over p ranks (devices), v stages per rank,
// m micro-batches. Each function returns one Stream per rank r = 0..p-1:
// actions with mini_batch 0 and global stage ids, `overlapped` filled only
// by dualpipev. No idle steps: the engines wait for dependencies.
// Preconditions p >= 1, v >= 1, m >= 1; schedule-specific rules throw
// InputError naming the flag. generate_beyond_schedule assembles a Program.

#include <string>
#include <vector>

#include "core/program.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid {

/** PyTorch's micro-batch rule of its interleaved schedules: rounds =
 *  max(1, m / p) (integer division) and mpr = m / rounds micro-batches per
 *  round; InputError naming --micro-batches and the rule unless m % rounds
 *  == 0. Returns mpr. `name` is quoted in the message. */
int micro_batches_per_round(const std::string& name, int p, int m);

// interleaved.cpp
/** Megatron / torch Interleaved1F1B, loop map (rank r holds r, r+p, ...). */
std::vector<Stream> interleaved_1f1b_orders(int p, int v, int m);
/** torch LoopedBFS: all forwards chunk by chunk, then backwards reversed. */
std::vector<Stream> looped_bfs_orders(int p, int v, int m);

// zero_bubble.cpp
/** torch InterleavedZeroBubble (ZB1P), loop map, I and W. */
std::vector<Stream> zb1p_orders(int p, int v, int m);
/** ZB-H1: zb1p_orders(p, 1, m). */
std::vector<Stream> zb_h1_orders(int p, int m);
/** ZB-H2: 2p-1 in-flight micro-batches, one stage per rank. */
std::vector<Stream> zb_h2_orders(int p, int m);
/** ZB-V (torch ZBVZeroBubble), V map: rank r holds r and 2p-1-r. */
std::vector<Stream> zb_v_orders(int p, int m);

// dualpipev.cpp
/** DualPipeV (torch ScheduleDualPipeV), V map, overlapped F&B pairs;
 *  InputError naming --micro-batches unless m >= 2p. */
std::vector<Stream> dualpipev_orders(int p, int m);

// dualpipe.cpp
/** DualPipe (DeepSeek-V3, deepseek-ai/DualPipe dualpipe.py), two copies:
 *  rank r runs stage r of the copy fed at rank 0 (micro-batches 0..m/2-1)
 *  and stage p-1-r of the copy fed at rank p-1 (micro-batches m/2..m-1),
 *  overlapped F&B pairs, split backwards. InputError unless p is even
 *  (naming --schedule) and m is even and >= 2p (naming --micro-batches). */
std::vector<Stream> dualpipe_orders(int p, int m);

/** True for the schedules above (their catalog names). */
bool is_beyond_schedule(const std::string& name);

/** The Program of one of the schedules above: options.num_stages = S =
 *  p * options.virtual_stages global stages on p devices (device r holds its
 *  stages in ascending order, replica 0, one stream), the per-mini-batch
 *  order repeated for mini-batches k = 0..K-1 (mini_batch = k). A
 *  two-copy schedule (ScheduleInfo::two_copies: dualpipe) has S = p stages,
 *  device r holds stages min(r, p-1-r) and max(r, p-1-r) as replica 0 (r <
 *  p/2) or 1, and per mini-batch k and stage s (ascending) one all-reduce of
 *  the stage's gradients over its two devices, each ready at its device's
 *  last backward (B or W) of k and releasing both devices' first action of
 *  k + 1 (the reference sums the copies' gradients after the step). With
 *  options.recompute an R precedes each B or I (an overlapped pair holding
 *  one: the R precedes the pair). InputError: --virtual-stages not dividing
 *  S or not the schedule's fixed count, --replicas other than 1 (two-copy: other than 2, the mirrored placement). The caller
 *  (generate_schedule) has checked the generic options. */
Program generate_beyond_schedule(const std::string& name, const ScheduleOptions& options);

}  // namespace pipegrid
