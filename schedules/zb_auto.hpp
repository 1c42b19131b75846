#pragma once
// Zero Bubble's automatic schedule (Qi et al., "Zero Bubble Pipeline
// Parallelism", ICLR 2024, arXiv 2401.10241, section 3; docs/schedules.md,
// zb-auto): one stage per device, the backward split into I and W, built by
// the paper's heuristic from per-stage pass times T_F, T_I (the paper's
// T_B), T_W, a transfer time T_comm and an activation memory limit, with
// the search over its choices that the authors' implementation makes
// (sail-sg/zero-bubble-pipeline-parallelism, zerobubble/scheduler/zb.py,
// initial_solution: eight variants, the least iteration time kept).
// Pure functions over plain data.

#include <vector>

#include "core/program.hpp"

namespace pipegrid {

/** The pass times and memory rule the heuristic plans with, per stage s.
 *  Empty vectors: the defaults (every time 1, fraction 1). */
struct ZbStageTimes {
  std::vector<double> forward_s;          ///< T_F of stage s
  std::vector<double> backward_input_s;   ///< T_B of the paper (the I)
  std::vector<double> backward_weight_s;  ///< T_W (the W)
  /// M_W / M_B of stage s, in [0, 1]: a micro-batch's F takes M_B of
  /// activation memory, its I frees M_B - M_W, its W frees M_W (the
  /// paper's Table 1; the authors' estimate is M_B = 34sbh + 5as^2b per
  /// layer and M_W = 32sbh). 1: the activations are held from F to W.
  std::vector<double> weight_memory_fraction;
  /// T_comm: from the end of an F (I) to the earliest start of the next
  /// (previous) stage's F (I) of that micro-batch.
  double transfer_s = 0;
};

/** The times of `stages` stages: `times` with empty vectors replaced by the
 *  defaults. InputError naming the field when a vector has another size, a
 *  time is negative or not finite, or a fraction is outside [0, 1]. */
ZbStageTimes resolved_stage_times(const ZbStageTimes& times, int stages);

/** The smallest activation limit K (in p micro-batches' activations, the
 *  paper's M_limit = K p M_B) zb-auto accepts on p stages: 1/p, one
 *  micro-batch's activations. */
double min_activation_limit(int stages);

/** The per-stage orders (stage s on device s) of zb-auto over p = `stages`
 *  stages and m micro-batches at limit K: the least iteration time of the
 *  heuristic's eight variants under `times` (resolved_stage_times), ties to
 *  the first. InputError naming --activation-limit when K is not finite or
 *  below min_activation_limit. Deterministic. */
std::vector<Stream> zb_auto_orders(int stages, int micro_batches, double activation_limit, const ZbStageTimes& times);

/** Timing of one mini-batch of a one-stage-per-device Program whose devices
 *  run one stream each (device d holds stage d; any schedule): each action
 *  starts when its device's previous action has ended and its data is
 *  there (an F: F of the previous stage + transfer_s; a B or I: the B or I
 *  of the next stage + transfer_s, on the last stage its F; a W: its I;
 *  an R: its F), and takes its stage's time (F and R: T_F, I: T_I, W: T_W,
 *  B: T_I + T_W). Returns the iteration time as the paper counts it: the
 *  largest, over the stages, of (end of the stage's last action - start of
 *  its first). InputError when the Program does not fit that shape or
 *  deadlocks. */
double one_stage_per_device_iteration_s(const Program& program, const ZbStageTimes& times);

}  // namespace pipegrid
