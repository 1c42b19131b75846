#pragma once
// Mixed precision and optimizer state: the bytes each parameter keeps in
// device memory during training (docs/semantics.md, Memory). One table, used
// by the simulator's memory model (core/metrics.hpp) and by every
// partitioner that checks memory, so that they agree.

#include <string>
#include <vector>

namespace pipegrid {

/** The number formats a profile may be in: "fp32", "fp16", "bf16". */
const std::vector<std::string>& dtype_names();

/** Bytes of one value: fp32 4, fp16 and bf16 2; "" (not stated) is fp32.
 *  InputError naming `what` and the known formats otherwise. */
int dtype_bytes(const std::string& dtype, const std::string& what = "dtype");

/** Bytes per parameter by (dtype, optimizer, gradient dtype), resident for
 *  the whole run:
 *    fp32:        weights 4 + gradients 4 + optimizer (sgd 0, momentum 4, adam 8)
 *    fp16, bf16:  weights 2 + gradients 2 + fp32 master weights 4 + optimizer
 *                 (sgd 0, momentum 4, adam 8; the optimizer state is fp32)
 *  so 8 / 12 / 16 bytes per parameter either way. `gradient_dtype` "fp32"
 *  with fp16 or bf16 weights: fp32 gradients (4 bytes; Megatron-LM's
 *  default with --bf16, --accumulate-allreduce-grads-in-fp32 with --fp16:
 *  adam 18 bytes, its distributed-optimizer table's non-distributed bf16
 *  line); "" or the dtype itself: gradients in the dtype. InputError for an
 *  unknown dtype or optimizer (optimizer_copies's message, naming
 *  --optimizer) and for a gradient dtype other than those (check_gradient_dtype). */
struct ParameterBytes {
  int weights = 4, gradients = 4, master_weights = 0, optimizer = 0;
  int total() const { return weights + gradients + master_weights + optimizer; }
};
ParameterBytes bytes_per_parameter(const std::string& dtype, const std::string& optimizer,
                                   const std::string& gradient_dtype = "");

/** Bytes per parameter resident under Megatron's distributed optimizer
 *  (ZeRO-1) over d data-parallel ranks: weights and gradients whole on
 *  every rank, the fp32 master weights and the optimizer state split d ways:
 *    weights + gradients + (master + optimizer) / d.
 *  With step_gradient_copy_bytes_per_parameter at the step, adam gives
 *  Megatron-LM's table (core_v0.14.0, docs/source/api-guide/
 *  dist_optimizer.md): fp16 parameters and gradients 4 + 16/d, bf16
 *  parameters with fp32 gradients 6 + 12/d, fp32 8 + 8/d. InputError as
 *  bytes_per_parameter, and for d < 1. */
double distributed_bytes_per_parameter(const std::string& dtype, const std::string& optimizer,
                                       const std::string& gradient_dtype, int data_parallel);

/** Bytes per parameter a mixed-precision optimizer step holds on top of the
 *  resident bytes while it runs: with 16-bit weights and 16-bit gradients,
 *  the fp32 copy of the gradients its update reads (Megatron-LM's
 *  MixedPrecisionOptimizer copies model gradients to fp32 main gradients
 *  for the step and frees them after: 4, or 4 / d for the shard of the
 *  distributed optimizer over d > 0); 0 otherwise (fp32 weights, or fp32
 *  gradients, which the step reads in place). Megatron's table counts it:
 *  fp16 parameters and gradients 16 + 4 = 20 non-distributed. */
double step_gradient_copy_bytes_per_parameter(const std::string& dtype, const std::string& gradient_dtype,
                                              int distributed_over = 0);

/** Bytes of device memory one optimizer step moves per parameter, as
 *  Megatron-LM (core_v0.14.0, megatron/core/optimizer/optimizer.py) steps
 *  with main gradients in fp32: the update reads the fp32 (main) weight, its
 *  gradient and the optimizer's `optimizer_copies` state values and writes
 *  the weight and the states, 4 (2 + copies) + 4 (1 + copies); the gradient
 *  norm (clip_grad) reads the gradients, 4; 16-bit weights: the main
 *  weights copied into the model's, 4 + 2; fp16 only: the unscale and
 *  inf check read and write the gradients, 8. Adam: fp32 32, bf16 38, fp16
 *  46; sgd fp32 16. InputError for an unknown dtype or optimizer. */
double optimizer_step_bytes_per_parameter(const std::string& dtype, const std::string& optimizer);

/** The gradient dtype a run may keep (simulate --gradient-dtype): "" (the
 *  run's dtype), that dtype, or fp32. InputError naming --gradient-dtype
 *  and the run's dtype otherwise (16-bit gradients of fp32 weights). */
void check_gradient_dtype(const std::string& dtype, const std::string& gradient_dtype);

/** The optimizer a run keeps state for when none is given: adam for fp16
 *  and bf16 (mixed-precision training is Adam's: Megatron-LM, NeMo and
 *  DeepSpeed train with it, 16 bytes per parameter), sgd otherwise (fp32:
 *  the papers' runs, PipeDream's and BaPipe's, count no optimizer state). */
std::string default_optimizer(const std::string& dtype);

/** The resident state per byte of weights (a profile's parameter_bytes are
 *  in its dtype): bytes_per_parameter(...).total() / dtype_bytes(dtype).
 *  fp32: sgd 2, momentum 3, adam 4 (weights + gradients + optimizer copies);
 *  fp16/bf16: sgd 4, momentum 6, adam 8 (with fp32 gradients 5, 7, 9).
 *  Extra weight versions that stashing
 *  schedules keep are one copy of the weight bytes each, on top. */
/// With `distributed_over` d > 0: distributed_bytes_per_parameter(..., d) / dtype_bytes(dtype).
double resident_weight_factor(const std::string& dtype, const std::string& optimizer,
                              const std::string& gradient_dtype = "", int distributed_over = 0);

/** The dtype a run uses: the profile's when it states one, else `requested`
 *  (simulate --dtype; "" when not given). Both stated and different: an
 *  InputError naming both and `profile_origin`. A requested name outside
 *  dtype_names(): an InputError naming --dtype. "" when neither states one
 *  (fp32). */
std::string run_dtype(const std::string& profile_dtype, const std::string& requested, const std::string& profile_origin);

}  // namespace pipegrid
