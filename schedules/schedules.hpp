#pragma once
// Schedule generators: pure functions from a pipeline shape to a Program.
// No SimGrid, no LibTorch: a schedule is data, the engines interpret it.

#include <string>
#include <vector>

#include "core/platform.hpp"
#include "core/program.hpp"
#include "schedules/zb_auto.hpp"

namespace pipegrid {

struct ScheduleOptions {
  int num_stages = 1;
  int micro_batches = 1;
  int mini_batches = 1;
  /// Activation recomputation (every schedule): an R is run right before
  /// each B or I (before the overlapped pair that holds it), and only what
  /// the recomputation keeps stays stashed between F and R. The PipeDream
  /// family keeps its weight versions as without it: the R of a mini-batch
  /// runs with the version its F used.
  bool recompute = false;
  /// The option that asked for it, as refusals name it ("--recompute",
  /// "--recompute-granularity full").
  std::string recompute_flag = "--recompute";
  /// Replicas per stage (empty: one each). Work is routed round-robin: in
  /// flushed schedules micro-batch m of stage s runs on replica m mod r_s, in
  /// non-flushed ones (one micro-batch per mini-batch) mini-batch k runs on
  /// replica k mod r_s, forward and backward alike (PipeDream's 1F1B-RR).
  std::vector<int> replicas;
  /// pipedream-2bw: mini-batches per weight update (0: the number of stages).
  int update_interval = 0;
  /// dp: wait-free backpropagation (per-layer all-reduces during the backward).
  bool wait_free = false;
  /// PipeDream family: mini-batches each input-stage replica admits before
  /// its first backward (0: NOAM = ceil(devices / input replicas)). Later
  /// stages warm up with min(their own depth, ceil(depth x r_0 / r_s)).
  int pipeline_depth = 0;
  /// Stages per device (--virtual-stages; default_virtual_stages(name) on the
  /// command line). num_stages stays the global stage count S = p v, so the
  /// pipeline has p = S / v devices. 1 for the one-stage-per-device schedules.
  int virtual_stages = 1;
  /// Data parallelism over whole pipelines (a layout's d, Megatron-LM's
  /// data-parallel size): the schedule's Program for one pipeline of
  /// `micro_batches` micro-batches is run by d replicas, each a whole
  /// pipeline (replicate_pipelines). 1: one pipeline. Flushed multi-stage
  /// schedules only; excludes `replicas` (PipeDream's per-stage replication).
  int data_parallel = 1;
  /// With data_parallel > 1: Megatron-Core DDP's --overlap-grad-reduce
  /// (replicate_pipelines).
  bool overlap_grad_reduce = false;
  /// zb-auto (ScheduleOption::ActivationLimit): the activation memory each
  /// stage may hold, in units of p micro-batches' activations (the paper's
  /// M_limit = K p M_B; 1 is ZB-1p, 2 ZB-2p, fractions allowed, at least
  /// min_activation_limit(p)). 0: not given (zb-auto then runs K = 1).
  double activation_limit = 0;
  /// The per-stage pass times and transfer time the schedules that plan
  /// with them (ScheduleOption::StageTimes: zb-auto) are built from; empty
  /// vectors: every time 1, transfers 0 (resolved_stage_times). Ignored by
  /// the others.
  ZbStageTimes stage_times;
};

/// Options only some schedules take; each catalogue entry lists its own,
/// and a run refuses the others (no layer above schedules/ tests a name).
enum class ScheduleOption {
  VerticalSync,    ///< --vertical-sync: every stage uses the input stage's weight version
  UpdateInterval,  ///< --update-interval: mini-batches per weight update
  PredictionCost,  ///< --prediction-cost: weight prediction time per parameter byte
  WaitFree,        ///< --wait-free: per-layer all-reduces during the backward
  ActivationLimit, ///< --activation-limit: activation memory per stage, in p micro-batches (zb-auto)
  /// Built from the run's per-stage pass times (ScheduleOptions::stage_times;
  /// api's plan_schedule_options fills them for the schedules taking this).
  StageTimes,
};

/// How a schedule keeps weight versions between updates.
enum class WeightVersions {
  Latest,     ///< flushed: every micro-batch uses the weights of the last update
  Stashing,   ///< PipeDream: a version per mini-batch in flight, stashed from F to B
  TwoBuffered,///< PipeDream-2BW: two versions, an update every interval
  Predicted,  ///< PipeOptim: the forward predicts the weights of its backward
};

struct ScheduleInfo {
  std::string name;
  std::string summary;
  DeviceKind intended_kind;  ///< the device kind the schedule was designed for
  bool needs_async;          ///< rejected on synchronous hosts (fbp-as)
  bool flushed;              ///< flush and synchronous update per mini-batch
  bool single_stage;         ///< the whole model on every device (data parallelism)
  /// Stages per device: 0 = any (--virtual-stages), else exactly this many.
  int fixed_virtual_stages = 1;
  StageMap map = StageMap::Loop;  ///< how stages map to devices when several share one
  std::vector<ScheduleOption> options = {};  ///< the schedule-specific options it takes
  WeightVersions weights = WeightVersions::Latest;
  /// Two copies of the model over one pipeline of p devices (DualPipe): each
  /// of the p stages has two replicas, replica 0 on device min(s, p-1-s) and
  /// replica 1 on device max(s, p-1-s), so device r holds stages r and p-1-r
  /// (2x parameters); half the micro-batches run through each copy and the
  /// two replicas of each stage all-reduce their gradients per mini-batch.
  /// The partition places stage s on the host of device s (the first copy)
  /// and the second copy mirrors it (mirrored_stage_hosts).
  bool two_copies = false;
};

/** Whether the schedule takes `option` (its catalogue entry lists it). */
bool takes_option(const ScheduleInfo& info, ScheduleOption option);

/** The catalogue's schedules that take `option`, in catalogue order, joined
 *  by ", " (for messages: "--wait-free: applies to dp, not gpipe"). */
std::string schedules_taking(ScheduleOption option);

/** Every schedule pipegrid knows, in a stable order. */
const std::vector<ScheduleInfo>& schedule_catalog();

/** The catalog entry for `name`; InputError listing the known names otherwise. */
const ScheduleInfo& schedule_info(const std::string& name);

/** Stages per device a schedule runs unless --virtual-stages says otherwise:
 *  2 for interleaved-1f1b, looped-bfs, zb1p, zb-v and dualpipev, 1 for the
 *  others. InputError on an unknown name. */
int default_virtual_stages(const std::string& name);

/** The stage map of `name`: V for zb-v and dualpipev, Loop otherwise. */
StageMap stage_map_of(const std::string& name);

/** The hosts of a two-copy schedule's stages (ScheduleInfo::two_copies)
 *  from those of one copy: `copy_hosts[s]` the hosts of stage s and of
 *  pipeline device s, one per data-parallel replica q (d in all, the same
 *  count for every stage). Stage s gets copy_hosts[min(s, p-1-s)] followed
 *  by copy_hosts[max(s, p-1-s)]: replica c d + q is copy c's device of
 *  pipeline q, the Program's device order (replicate_pipelines). */
std::vector<std::vector<std::string>> mirrored_stage_hosts(const std::vector<std::vector<std::string>>& copy_hosts);

/** Throws InputError naming the flag when the options exceed the limits of
 *  core/limits.hpp (docs/formats.md, "Limits"): stages, micro-batches,
 *  mini-batches, pipeline depth, update interval, devices (replicas summed),
 *  stages x micro-batches x mini-batches and devices x mini-batches; also
 *  when `replicas` is neither empty nor one count >= 1 per stage. Every
 *  Program generate_schedule returns is within these limits. */
void check_schedule_limits(const ScheduleOptions& options);

/** Generates the Program of schedule `name`. Throws InputError on an unknown
 *  name or bad options (stages or micro-batches < 1, check_schedule_limits). */
Program generate_schedule(const std::string& name, const ScheduleOptions& options);

/** d whole pipelines running `pipeline` (one replica of every stage, no
 *  all-reduces: a flushed schedule's Program for m micro-batches): device
 *  (pipeline device i, replica q) for q = 0..d-1, in that order (i major);
 *  replica q runs the pipeline's micro-batch j as micro-batch j d + q (the
 *  round-robin rule of `replicas`), so the result has m d micro-batches;
 *  extra dependencies are copied per replica. Per stage and mini-batch k,
 *  one all-reduce of the stage's gradients over the d replicas, in replica
 *  order (the ring), once each device has run its last backward (B or W, of
 *  any stage it holds) of mini-batch k, as Megatron-LM reduces gradients
 *  after the whole backward when not overlapping; it releases each device's
 *  first action of mini-batch k + 1 on every stream. A device takes part in
 *  its stages' all-reduces in ascending stage order. With
 *  `overlap_grad_reduce` (Megatron-Core DDP, core_v0.14.0), each stage's
 *  all-reduce is ready at the stage's own last backward of mini-batch k
 *  instead, and a device takes part in them in the order those backwards
 *  run; stage 0's is `bucketed` (Megatron buckets only the first pipeline
 *  rank's first model chunk: DistributedDataParallel turns bucketing off for
 *  pipeline ranks > 0, get_model for model chunks > 0), the others reduce
 *  the whole stage at once. d = 1: `pipeline`. InputError for d < 1, or a
 *  `pipeline` with replicas but no all-reduces.
 *  A `pipeline` with all-reduces of its own (dualpipe's two copies: stage
 *  replicas c = 0, 1) keeps them instead of the above: device (i, q) is
 *  replica c d + q of its stages, and each all-reduce spans the d copies of
 *  its participants (ready and release renumbered for every q, c major);
 *  InputError with `overlap_grad_reduce` (they follow the whole backward). */
Program replicate_pipelines(const Program& pipeline, int data_parallel, bool overlap_grad_reduce = false);

/** Warm-up forwards of one replica of 0-based stage `stage`, before its first
 *  backward, when it runs `count` micro-batches (flushed) or mini-batches
 *  (non-flushed). With W the devices of stages stage..N-1 and r the stage's
 *  replicas, depth = ceil(W / r) (N - stage on a straight pipeline; NOAM on
 *  the input stage): gpipe and dp run all `count`; 1f1b-sno, 1f1b-as and the
 *  PipeDream family min(depth, count); 1f1b-so min(2 depth, count). */
int warmup_forwards(const std::string& name, const std::vector<int>& replicas, int stage, int count);

/** Mini-batches per weight update of `name`: the update interval for
 *  pipedream-2bw (default: the number of stages), 1 for pipedream and
 *  pipeoptim, 0 for flushed schedules (one update per flush). */
int update_interval(const std::string& name, const ScheduleOptions& options);

/** Errors and warnings for running schedule `name` on these hosts: throws
 *  InputError when an async-only schedule meets a synchronous host (BaPipe:
 *  GPUs cannot run forward and backward in parallel); returns one warning line
 *  per host whose kind differs from the schedule's intended kind. */
std::vector<std::string> check_schedule_for_hosts(const std::string& name,
                                                  const std::vector<HostInfo>& hosts);

}  // namespace pipegrid
