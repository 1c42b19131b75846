#pragma once
// What a run's time implies about the hardware: achieved FLOP/s per GPU,
// model FLOPs utilisation (MFU) and hardware FLOPs utilisation (HFU), with
// Megatron-LM's definitions (Narayanan et al. 2021, "Efficient Large-Scale
// Language Model Training on GPU Clusters Using Megatron-LM", section 5.1;
// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models", section 6.3): model FLOPs are those of one forward
// and one backward of every sample, from the model's shape; hardware FLOPs
// add the forwards that recomputation repeats. Pure functions over plain
// data (docs/semantics.md, Utilisation).

#include <optional>
#include <string>
#include <vector>

#include "core/device_model.hpp"
#include "core/platform.hpp"
#include "core/profile.hpp"

namespace pipegrid {

/** FLOPs of one mini-batch, and what they imply over its time. */
struct FlopsUtilisation {
  /// Model FLOPs of one mini-batch: micro-batches x the sum over layers of
  /// forward + backward_input + backward_weight FLOPs of one micro-batch
  /// (absent parts count 0), a tensor-parallel split layer counted whole
  /// (its per-member FLOPs x t). Absent when a layer has no forward_flops
  /// (a measured profile): `unavailable` says which.
  std::optional<double> model_flops;
  /// model_flops plus the forwards recomputed (with GPipe's recomputation
  /// every micro-batch's forward runs twice on every stage; with Megatron's,
  /// each layer's recomputed share of it).
  std::optional<double> hardware_flops;
  /// GPUs (or boards) the run occupies: the hosts holding stages, times the
  /// tensor-parallel group size.
  int gpus = 0;
  /// The sum over those GPUs of their peak FLOP/s for the run's dtype
  /// (DeviceModel::peak_flops; an FPGA board's is 2 x DSP slices x clock,
  /// without the model's assumed DSP efficiency); absent when a host has no device model or
  /// its model lacks the dtype: `unavailable` says which.
  std::optional<double> peak_flops;
  std::optional<double> tflops_per_gpu;  ///< model FLOPs / time / gpus, in TFLOP/s
  std::optional<double> mfu;             ///< model FLOPs / time / peak_flops
  std::optional<double> hfu;             ///< hardware FLOPs / time / peak_flops
  /// Under the FP8 recipe (`fp8`): the sum of the GPUs' dense FP8 peaks
  /// (DeviceModel::peak_fp8_flops), and model FLOPs / time / that. `mfu`
  /// stays against the dtype's (bf16's) peak, the convention of NVIDIA's
  /// Megatron-LM and NeMo figures for FP8 runs (docs/semantics.md, FP8).
  std::optional<double> peak_fp8_flops;
  std::optional<double> mfu_of_fp8_peak;
  /// Why a figure is absent, for people ("" when all are present).
  std::string unavailable;
};

/** The utilisation of a run of `profile` (the profile the devices run: per
 *  tensor-parallel member when `tensor_parallel` > 1, split layers being
 *  those tensor_parallel_splits accepts, with `sequence_parallel` as the
 *  run's) over `minibatch_time_s`, with
 *  `micro_batches` micro-batches of the profile per mini-batch, on the hosts
 *  `hosts` of `platform` (each standing for `tensor_parallel` GPUs of its
 *  model), at `dtype` ("" is fp32). */
/// `recomputed_share`, when not empty: per layer of the profile, the share
/// of its forward recomputed (StageRecompute::layer_share), in place of
/// `recompute`'s whole forward.
FlopsUtilisation flops_utilisation(const Profile& profile, int tensor_parallel, bool recompute, int micro_batches,
                                   double minibatch_time_s, const std::vector<std::string>& hosts,
                                   const PlatformSummary& platform, const std::string& dtype,
                                   bool sequence_parallel = false,
                                   const std::vector<double>& recomputed_share = {}, bool fp8 = false);

/** Layers whose analytic times (times_given false; measured times are
 *  left alone: cuDNN's Winograd convolutions legitimately beat the direct
 *  convolution's FLOP count) run a pass faster than `device` allows at
 *  `dtype`: above its peak FLOP/s, or moving bytes above its memory
 *  bandwidth. One line per pass, for a warning; empty when none does. */
/// `fp8`: the run uses the FP8 recipe; the bound is the device's FP8 peak.
std::vector<std::string> passes_above_hardware(const Profile& profile, const DeviceModel& device,
                                               const std::string& dtype, bool fp8 = false);

}  // namespace pipegrid
