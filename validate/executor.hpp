#pragma once
// The real executor: runs a Program's per-device action lists with LibTorch,
// one worker thread per device, and records what happened as a Timeline in
// the simulator's schema (hosts cpu0, cpu1, ... or gpu0, gpu1, ... or gpu0p0,
// gpu0p1, ..., in the Program's device order; F/B/R/I/W compute records,
// SEND_F/SEND_B transfer records with bytes, ALLREDUCE records as the
// simulator writes them, and a U record for each optimizer step, with the
// micro-batch and mini-batch of the backward it follows, as the simulator
// writes them when its platform has optimizer-step terms). A device with two streams (fbp-as) runs one worker
// thread per stream. LibTorch-free header.
//
// Beyond one stage per device (issue 14): a device holding several stages
// keeps each stage's layers, stashes and updates apart and runs each action
// on its stage; the hand-off between two stages of one device is the tensor
// itself (no copy, no SEND record). An I computes the gradient of its stage
// input only (autograd::grad, the graph retained) and sends it on as a B
// does; its W computes the parameter gradients from that graph and adds them
// to .grad as a B would, then frees the graph and the stash. An overlapped
// F&B pair runs as its two actions one after the other, in program order
// (no real overlap): its timeline records are the two actions' own times.
//
// Time: on CPUs the steady clock around each action on its worker thread; on
// GPUs CUDA events recorded on the worker's compute stream around each
// action and on the sender's copy stream around each copy, read once the run
// is over, so the timeline is the GPU's, not the launching thread's.
//
// Weights (ExecutionRequest::weight_rule, set from the schedule by the CLI;
// the update points themselves come from the Program): see WeightRule and
// docs/validation.md ("Executor").

#include <cstdint>
#include <string>
#include <vector>

#include "core/program.hpp"
#include "core/timeline.hpp"
#include "schedules/schedules.hpp"
#include "validate/model_zoo.hpp"

namespace pipegrid::validate {

/** Where the devices are. `cpu:N`: N worker threads, one intra-op thread
 *  each; `cpu`: one worker per device of the Program. `cuda`: one GPU per
 *  device (cuda:0, cuda:1, ...); `cuda:N`: the same, checked to be N.
 *  `cuda-partitioned:N`: GPU 0 split into N SM partitions with CUDA green
 *  contexts, each partition one device with its own compute stream. The
 *  cuda kinds run only in a build against a CUDA LibTorch. */
struct DeviceSpec {
  std::string kind = "cpu";  ///< cpu, cuda or cuda-partitioned
  int count = 0;             ///< 0: one per Program device
};

/** Parses `cpu`, `cpu:N`, `cuda`, `cuda:N` or `cuda-partitioned:N` (N >= 1);
 *  InputError otherwise. */
DeviceSpec parse_device_spec(const std::string& text);

/** Where the devices' workers run (docs/validation.md, "Launchers and
 *  c10d"). Threads: one process, a worker thread per device stream, the
 *  in-process transport. Processes: one process per device on this machine
 *  (`executable __rank`, see validate/launch.hpp), messages and all-reduces
 *  through c10d (Gloo on cpu, NCCL on cuda), a FileStore in a fresh
 *  temporary folder; the calling process waits, merges the ranks' parts and
 *  returns the result. Env: this process is rank RANK of WORLD_SIZE (one
 *  device each) of a job started elsewhere (torchrun's variables;
 *  MASTER_ADDR and MASTER_PORT name the TCPStore rank 0 serves); rank 0
 *  returns the merged result, the others a result with `primary` false. */
struct Launcher {
  enum class Kind { Threads, Processes, Env };
  Kind kind = Kind::Threads;
  /// Processes: the pipegrid binary each rank runs (default: this program).
  std::string executable;
  /// Waits on the store, on messages and on collectives (c10d launchers).
  double timeout_s = 300;
};

/** Parses threads, processes or env; InputError naming --launcher otherwise. */
Launcher::Kind parse_launcher_kind(const std::string& text);
std::string to_string(Launcher::Kind kind);

/** True when this build can run the cuda kinds (built against a CUDA
 *  LibTorch); whether a GPU is present is found out when one is asked for. */
bool cuda_devices_built();

/** How a stage's weights move; which actions are followed by an update is
 *  read from the Program. An update on a device of a replicated stage (one
 *  that takes part in the Program's all-reduces) follows each of its
 *  all-reduces: the gradients accumulated since its previous update are
 *  summed over the replicas (Transport::all_reduce), then every replica
 *  takes the same step. On a device of an unreplicated stage the rule says
 *  which backwards are followed by an update. Every update is plain SGD,
 *  w <- w - lr * g, where g is the accumulated gradient: as it is for
 *  Flush (each micro-batch's loss is scaled by 1/M, so g is the gradient of
 *  the mini-batch's mean loss, summed over the replicas), and divided by the
 *  number of mini-batches it accumulates (over all replicas) for the other
 *  rules, whose mini-batches each have their own mean loss. */
enum class WeightRule {
  /// gpipe, 1f1b-*, fbp-as, dp and the schedules of issue 14 (interleaved, zero-bubble, V, DualPipeV):
  /// one update of each stage after the device's last backward (B, or W when split) of that stage in
  /// each mini-batch. The only rule for devices with several stages or split backwards.
  Flush,
  /// pipedream: an update after every backward; a forward uses the latest
  /// weights and its backward the same version (stashed while newer ones appear).
  Stashing,
  /// pipedream-2bw: Stashing's versions, an update after every
  /// `update_interval`-th backward of the device (gradients accumulated in
  /// between; a trailing partial interval is not applied).
  TwoBW,
  /// pipedream --vertical-sync: an update after every backward; mini-batch k
  /// uses, on every stage, the version whose index (updates done) the input
  /// stage's device had when it ran k's forward, forward and backward alike.
  VerticalSync,
  /// pipeoptim: an update after every backward; a forward runs with predicted
  /// weights w - lr * s * d, where s is the number of updates the device
  /// makes between that forward and its backward (from the Program) and d
  /// the gradient of its latest update (0 before the first); nothing is
  /// stashed: the backward uses the weights current when it runs.
  Prediction,
};

/** The schedule's name of a rule (flush, stashing, 2bw, vertical-sync, prediction). */
std::string to_string(WeightRule rule);

/** The rule a catalogue schedule's weights follow (its WeightVersions;
 *  pipedream's stashing becomes VerticalSync with --vertical-sync). */
WeightRule weight_rule_of(const ScheduleInfo& info, bool vertical_sync);

struct ExecutionRequest {
  ModelConfig model;
  LayerRanges stages;   ///< layer range of each stage (one per Program stage)
  /// Devices are stage replicas (all-reduces among them); two streams per
  /// device (fbp-as) run as two worker threads on one CPU device.
  Program program;
  int micro_batch_size = 8;
  /// The Program's first mini-batches that are run but left out of the
  /// timeline and the times (warm-up: allocator, caches, thread start).
  int warmup_mini_batches = 0;
  double learning_rate = 0.01;
  std::uint64_t seed = 1;  ///< weights and data
  DeviceSpec device;
  /// Record each stage's final weights and last mini-batch's gradients.
  bool keep_state = false;
  /// How weights move (see WeightRule); every rule but Flush needs one
  /// micro-batch per mini-batch and one stream per device.
  WeightRule weight_rule = WeightRule::Flush;
  /// TwoBW: backwards per update on an unreplicated stage (>= 1).
  int update_interval = 1;
  /// GPUs: stage every copy through pinned host memory (device to host,
  /// then host to device, on the sender's copy stream), as over PCIe
  /// without peer access; default: one device-to-device copy.
  bool copy_through_host = false;
  Launcher launcher;
};

/** Parameters of a stage (or of the whole model), each flattened, in layer
 *  order (the order of LibTorch's Module::parameters()). */
struct ModelState {
  std::vector<std::vector<float>> weights;    ///< after the last update
  /// The gradient g of the device's last update (after the all-reduce and
  /// the division, see WeightRule), or zeros when it made none.
  std::vector<std::vector<float>> gradients;
};

struct DeviceSummary {
  std::string host;
  int stage = 0;            ///< the first of `stages`
  std::vector<int> stages;  ///< the stages the device holds, as the Program lists them
  double busy_s = 0;  ///< F, B, I, W and R time over the measured mini-batches
  double step_s = 0;  ///< optimizer steps (with their weight copies) over the measured mini-batches
  /// Peak bytes allocated on the device over the whole run (warm-up
  /// included), where measured (GPUs; partitions of one GPU each report the
  /// whole GPU's); -1 when not measured (CPU).
  std::int64_t peak_memory_bytes = -1;
};

struct ExecutionResult {
  /// Measured mini-batches only, renumbered from 0, times in seconds from the
  /// start of the first measured action.
  Timeline timeline;
  int measured_mini_batches = 0;
  /// The mini-batch time as docs/semantics.md defines it (minibatch_time_of
  /// over `timeline`): the steady-state period when mini-batches overlap
  /// (schedules without a flush), else the span of the measured part divided
  /// by the measured mini-batches.
  double minibatch_time_s = 0;
  /// Span of the measured part divided by the measured mini-batches.
  double mean_minibatch_span_s = 0;
  std::vector<DeviceSummary> devices;
  /// With keep_state, one per stage (its replica 0; replicas are checked to
  /// hold the same weights, std::logic_error otherwise).
  std::vector<ModelState> stages;
  /// False on the ranks of an env launch other than 0: they ran their
  /// device, rank 0 has the result; everything else here is empty.
  bool primary = true;
  /// How the ranks' timelines were put on one clock: "one process" (threads),
  /// "shared CLOCK_MONOTONIC" (one host), or "ping-pong offsets" (hosts
  /// apart: each rank's offset to rank 0 from the round trip of least time).
  std::string clock = "one process";
  /// Per device (the Program's order): the uncertainty of its offset to
  /// rank 0's clock, half the least round trip (0 on a shared clock).
  std::vector<double> clock_offset_residual_s;
};

/** Runs the request. Throws InputError for a request it cannot run (unknown
 *  device or one this build or machine lacks, device count or stage ranges
 *  that do not match the Program, a weight rule the Program cannot follow,
 *  an all-reduce that leaves out a replica of its stage, several streams per
 *  device on a GPU) and ProgramError for an invalid Program;
 *  std::runtime_error when LibTorch fails in a worker. With the processes
 *  launcher, a rank that fails ends the run (the others stopped) with an
 *  error naming it, its exit status and the end of its stderr: InputError
 *  when it exited 2, std::runtime_error otherwise; with env, InputError for
 *  a missing or invalid variable (named) or a WORLD_SIZE that is not the
 *  Program's device count. Cross-device extra dependencies and
 *  cuda-partitioned devices run with threads only (InputError). */
ExecutionResult execute(const ExecutionRequest& request);

/** The single-device reference: the whole model on the calling thread; for
 *  each of `mini_batches` mini-batches, the M micro-batches (the same data as
 *  execute() uses) concatenated into one batch, one backward of the mean
 *  loss and one SGD step. Returns the whole model's state (keep_state's
 *  layout: the stages' lists concatenated). */
ModelState run_reference(const ModelConfig& model, int micro_batches, int mini_batches, int micro_batch_size,
                         double learning_rate, std::uint64_t seed);

}  // namespace pipegrid::validate
