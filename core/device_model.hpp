#pragma once
// Device models: a catalogue of GPUs and FPGA boards, a roofline time per
// layer pass with a size-dependent efficiency, and the fill-in of analytic
// times for profile layers that have FLOPs but no measured times
// (docs/devices.md gives every number's source, the rules and their error).
// Pure functions over plain data.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/gpu_kernels.hpp"
#include "core/partition.hpp"
#include "core/platform.hpp"
#include "core/profile.hpp"

namespace pipegrid {

/// Efficiency as a function of an operation's size s (FLOPs for compute,
/// bytes for memory traffic): e(s) = e_max * s / (s + half). The time of an
/// operation of size s at peak rate P is then s / (P e(s)) = (s + half) /
/// (P e_max): linear in s, which is what makes the fit a linear least
/// squares problem (fit_efficiency).
struct EfficiencyCurve {
  double e_max = 1;  ///< efficiency of a very large operation, in (0, 1]: at most the caps below in the catalogue
  double half = 0;   ///< the size at which the efficiency is e_max / 2 (>= 0)
  double at(double size) const { return size <= 0 ? 0 : e_max * size / (size + half); }
};

/// The highest efficiency a modelled GPU pass reaches, against the peak
/// compute of its dtype and against the memory bandwidth (docs/devices.md,
/// "Caps"): the largest GEMMs cuBLAS runs reach about nine tenths of a
/// datasheet's dense peak, and streaming kernels about nine tenths of its
/// bandwidth, so no modelled pass runs faster than that. Every curve of the
/// catalogue's GPUs has e_max at most these (an invariant checked when the
/// catalogue is built); the fit (fit_time_line's min_slope) holds to them.
constexpr double kMaxComputeEfficiency = 0.9;
constexpr double kMaxMemoryEfficiency = 0.9;

/// The operation classes the efficiency depends on (op_class maps a
/// Layer::op onto one).
enum class OpClass {
  Conv,    ///< "conv2d"
  Matmul,  ///< "linear", "lstm", "attention", "transformer", and unknown ops
  Memory,  ///< "embedding", "norm", "pool", "elementwise", "loss": memory-bound
};
constexpr int kOpClassCount = 3;
OpClass op_class(std::string_view op);
const char* to_string(OpClass op_class);

/// A pass's efficiency curves: compute (FLOPs) and memory (bytes).
struct PassEfficiency {
  EfficiencyCurve compute, memory;
};
/// One class's curves, for the forward pass and for each backward part.
struct ClassEfficiency {
  PassEfficiency forward, backward;
};

struct DeviceModel {
  std::string name;         ///< catalogue name: "V100", "H100", "VCU118", ...
  std::string description;  ///< the exact part, for people ("Tesla V100 PCIe 16 GB")
  DeviceKind kind = DeviceKind::Gpu;
  double memory_bytes = 0;  ///< device memory (GPU HBM; FPGA board DDR)

  // GPUs: peak FLOP/s by dtype (0: the dtype is not supported), memory
  // bandwidth, and the fitted efficiencies (GPUs) by OpClass.
  double peak_fp32_flops = 0;  ///< FP32 without tensor cores (CUDA cores)
  double peak_fp16_flops = 0;  ///< FP16 tensor core, dense
  double peak_bf16_flops = 0;  ///< BF16 tensor core, dense
  /// FP8 tensor core, dense (0: no FP8 tensor cores, as on the V100 and
  /// A100). Not a profile dtype: the FP8 recipe (Fp8Recipe) runs the linear
  /// layers' GEMMs of a bf16 or fp16 run at this rate.
  double peak_fp8_flops = 0;
  double memory_bandwidth_Bps = 0;
  ClassEfficiency efficiency[kOpClassCount] = {};
  /// Fixed time added to every pass that runs (forward, I, W) of a layer.
  double layer_overhead_s = 0;
  /// The tensor-core kernel model (GPUs; core/gpu_kernels.hpp): layers with
  /// a transformer_shape are timed kernel by kernel with it.
  TensorCoreModel tensor_cores;

  // FPGAs (after FPDeep, as BaPipe describes it): compute = dsp_slices x
  // clock_hz x 2 (one 16-bit multiply-add per DSP per cycle) x
  // fpga_efficiency; weights on chip, or streamed from DDR.
  int dsp_slices = 0;
  double clock_hz = 0;
  double on_chip_bytes = 0;
  double ddr_bandwidth_Bps = 0;
  double fpga_efficiency = 1;

  /// Peak FLOP/s for `dtype` ("fp32", "fp16", "bf16"; empty means fp32).
  /// Throws InputError when the device does not support the dtype (a V100
  /// has no bf16; the FPGA models compute in 16 bits only).
  double peak_flops(std::string_view dtype) const;
};

/// The catalogue, in the order listed in messages: V100, A100, H100, H200,
/// H800, VCU118, VCU129.
const std::vector<DeviceModel>& device_catalogue();
/// "V100, A100, H100, H200, H800, VCU118, VCU129".
std::string device_catalogue_names();
/// The entry named exactly `name`; nullptr when there is none.
const DeviceModel* find_device_model(std::string_view name);
/// The entry named `name`; InputError listing the catalogue otherwise
/// (`what` names the field, e.g. "platform.xml: host 'gpu0': property 'device_model'").
const DeviceModel& device_model(std::string_view name, const std::string& what);

/// The V100's efficiency curves fitted to PipeDream's profiles (fit_pipedream,
/// core/pipedream_flops.hpp), by OpClass. The other GPUs take them as they
/// are for e_max, with every `half` scaled by the GPU's peak (compute) or
/// bandwidth (memory) over the V100's: the time of a tiny operation
/// (half / (P e_max)) stays the same on every GPU.
ClassEfficiency v100_fitted_efficiency(OpClass op_class);
/// `fitted` (V100 curves) carried over to a device of compute peak ratio
/// `peak_ratio` and bandwidth ratio `bandwidth_ratio` (as above).
ClassEfficiency scale_efficiency(const ClassEfficiency& fitted, double peak_ratio, double bandwidth_ratio);
/// The catalogue's GPUs rebuilt with `fitted` V100 curves (by OpClass), for
/// the error bench's leave-one-model-out fits.
DeviceModel with_efficiency(const DeviceModel& device, const ClassEfficiency (&v100_fitted)[kOpClassCount]);

/// One pass of a layer as the roofline sees it.
struct PassWork {
  double flops = 0;
  double bytes = 0;  ///< device-memory bytes moved
  int steps = 1;     ///< sequential operations it consists of (an LSTM: its time steps)
};

/** A GPU pass's time: 0 when flops and bytes are both 0, else
 *    max(flops / (peak x e_c(flops / steps)), bytes / (bandwidth x e_m(bytes))) + overhead,
 *  with e_c, e_m the curves of `curves`: an operation of `steps` equal
 *  sequential parts runs each part at the compute efficiency of its own
 *  size; its bytes count as one transfer. */
double gpu_pass_time(const PassWork& work, const PassEfficiency& curves, double peak_flops, double bandwidth_Bps,
                     double overhead_s);

/** An FPGA pass's time: 0 when flops and weight bytes are both 0, else
 *    max(flops / (2 x dsp x clock x efficiency), weights_on_chip ? 0 : weight_bytes / ddr_bandwidth) + overhead. */
double fpga_pass_time(double flops, double weight_bytes, const DeviceModel& fpga, bool weights_on_chip);

/** The layer's analytic times on `device` for a profile of `dtype` at
 *  `sequence_length` (LSTM steps; 0: one step), with the backward split:
 *  - forward: forward_flops, bytes_read + bytes_written;
 *  - I (backward_input_s): backward_input_flops, the same bytes; it runs only
 *    when backward_input_flops > 0 (no input gradient: a first layer, an embedding);
 *  - W (backward_weight_s): backward_weight_flops, the same bytes; it runs
 *    only when the layer has parameters;
 *  backward_s = I + W. GPUs: gpu_pass_time with the curves of op_class(layer.op);
 *  FPGAs: fpga_pass_time with the layer's parameter bytes as weight bytes.
 *  Throws InputError when the layer has no forward_flops (the message names it). */
LayerTimes analytic_layer_times(const Layer& layer, const DeviceModel& device, std::string_view dtype,
                                int sequence_length, bool weights_on_chip = true);

/** A layer with a transformer_shape on a GPU with a tensor-core model:
 *  the times of one member (`share`) from layer_kernels under the device's
 *  constants (core/gpu_kernels.hpp), and the attention core's share of the
 *  forward's time. W runs when the layer has weight-gradient kernels (a
 *  tied head computes its table's gradient too). */
struct ShapedTimes {
  LayerTimes times;
  double attention_core_time_share = 0;
};
/// `fp8`: the FP8 recipe (core/fp8.hpp): layer_kernels with the device's
/// peak_fp8_flops; InputError naming the device when it has none.
ShapedTimes shaped_layer_times(const Layer& layer, const DeviceModel& device, std::string_view dtype,
                               const TensorParallelShare& share, bool fp8 = false);
/// True when `device` times `layer` kernel by kernel (shaped_layer_times).
bool times_by_kernels(const Layer& layer, const DeviceModel& device);

/** Fills in the times of every layer of `profile` whose times_given is
 *  false, from the device models of `platform`'s hosts (HostInfo::device_model):
 *  device_times[model] for each model named by a host, and the base times
 *  (forward_s, backward_s and their split) from the first host's model, so
 *  that code reading base times sees that device. Layers with measured times
 *  are untouched. FPGA weights are taken on chip when the whole profile's
 *  weights and gradients (2 x parameter bytes) fit in the board's on-chip
 *  RAM, else streamed from DDR.
 *  Throws InputError naming the layer and the host when a layer without
 *  times would run on a host without a device model (nor device times of
 *  its `device` type), or when a layer without times has no FLOPs; and for
 *  a multi-size profile with such layers. Returns notes for people (one a
 *  device model used), empty when no layer needed times. */
/// Where fill_analytic_times takes an FPGA board's weights from before the
/// partition is known: WholeModel keeps the whole model's layers on chip as
/// much as its on-chip RAM allows, as place_fpga_weights does per board
/// (data parallelism: every board holds the model); StagesFit takes them on chip, as BaPipe's partition aims to
/// (pipelines: place_fpga_weights then checks each board's own stages).
enum class FpgaWeights { WholeModel, StagesFit };
/// `share`: the tensor-parallel member a run times (its t and sequence
/// parallelism). A layer timed by kernels (times_by_kernels) is timed as
/// one member; where tensor parallelism divides the layer's times by t
/// (tensor_parallel_splits), the times stored are t x the member's, so that
/// tensor_parallel_profile's division leaves the member's own.
/// `fp8_format` (simulate --fp8-format; "" none): the FP8 recipe for the
/// layers timed by kernels (shaped_layer_times with fp8); the caller has
/// checked the hosts' devices (check_fp8_hosts) and the recipe.
std::vector<std::string> fill_analytic_times(Profile& profile, const PlatformSummary& platform,
                                             FpgaWeights fpga_weights = FpgaWeights::WholeModel,
                                             const TensorParallelShare& share = {},
                                             const std::string& fp8_format = "");

/** The FP8 recipe's hosts and layers (simulate --fp8-format `format`,
 *  non-empty): every host of `platform` must have a GPU device model with
 *  FP8 tensor cores (DeviceModel::peak_fp8_flops > 0), and every layer of
 *  `profile` must be timed kernel by kernel by them (no measured times, a
 *  transformer_shape): FP8 changes the tensor-core model's GEMMs, which
 *  measured or roofline times do not show. InputError naming the host and
 *  its device, or the layer, and what FP8 needs. */
void check_fp8_hosts(const Profile& profile, const PlatformSummary& platform, const std::string& format);

/** FPGA weights per board, once the partition is known (fill_analytic_times
 *  decided before it, by its FpgaWeights rule): each FPGA
 *  host with a device model holds the weights of the stages it runs, on chip
 *  as much as its on-chip RAM allows (each layer's weights and gradients, 2 x
 *  its parameter bytes; layers in order of the DDR time they would add per
 *  byte, largest first, while they fit), the others streamed from DDR; the
 *  analytic layers it runs (times_given false) are timed again under that rule (device_times[model], and the base times
 *  when the platform's first host is of that model). A layer held by two
 *  boards of one model that decide differently takes the DDR time (the
 *  slower). A split layer's parts (split_layers scales their FLOPs, bytes
 *  and weights) are timed on their own boards. Returns a note per FPGA
 *  board that runs an analytic layer (on chip or from DDR, and why), for
 *  people. */
std::vector<std::string> place_fpga_weights(Profile& profile, const Partition& partition, const PlatformSummary& platform);

/** Gives each GPU host of `platform` with a device model and no declared
 *  optimizer step (HostInfo::has_optimizer_step) the step its device model
 *  implies: `step_bytes_per_weight_byte` bytes moved per byte of the
 *  weights it updates (optimizer_step_bytes_per_parameter over the dtype's
 *  bytes), streamed at kMaxMemoryEfficiency of the HBM bandwidth, i.e.
 *  optimizer_step_rate = bandwidth x kMaxMemoryEfficiency /
 *  step_bytes_per_weight_byte. Nothing when step_bytes_per_weight_byte <=
 *  0. Returns how many hosts it gave a step. */
int give_device_optimizer_steps(PlatformSummary& platform, double step_bytes_per_weight_byte);
/// The GPU entry of the catalogue `host` names as its device model; null
/// when it names none, or an FPGA.
const DeviceModel* gpu_device_model(const HostInfo& host);

/// Least squares fit of t = a x + b n over samples (x, n, t) with
/// a >= min_slope, a > 0 and b >= 0, solved with Eigen: the free fit first;
/// b refitted as 0 when it comes out negative; when a comes out below
/// `min_slope` (a rate above a cap: min_slope = 1 / (cap x peak)), a is
/// held at min_slope and b refitted alone by least squares over the
/// residuals t - a x (0 when that is negative), and `at_min_slope` is set.
/// Throws InputError when there are no samples or the slope is not positive.
struct LinearFit {
  double a = 0, b = 0;
  bool at_min_slope = false;  ///< the free fit was steeper than allowed: a = min_slope
};
struct FitSample {
  double x = 0;  ///< size (FLOPs or bytes), summed over the parts the time covers
  double n = 0;  ///< steps, summed likewise
  double t = 0;  ///< measured seconds
};
LinearFit fit_time_line(const std::vector<FitSample>& samples, double min_slope = 0);
/// The efficiency curve of a fitted line at `rate` (peak FLOP/s or bytes/s):
/// e_max = 1 / (a rate), half = b / a.
EfficiencyCurve curve_from_fit(const LinearFit& fit, double rate);

}  // namespace pipegrid
