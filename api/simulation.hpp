#pragma once
// The library facade: a PlanRequest (plain data) in, a Plan; a Plan in, the
// RunResult (Program, simulated Timeline, Metrics, notes) out. simulate,
// explore, sweep and the Python module call it; it never parses arguments.

#include <optional>
#include <string>
#include <vector>

#include "core/io.hpp"
#include "core/metrics.hpp"
#include "generators/model_generators.hpp"
#include "core/plan.hpp"
#include "core/platform.hpp"
#include "core/program.hpp"
#include "core/timeline.hpp"
#include "core/torch_schedule.hpp"
#include "core/utilisation.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid::api {

struct PlanRequest {
  std::string platform_file;
  std::string profile_file;
  /// The alternative to profile_file (simulate --model NAME): the profile a
  /// model generator builds, at micro_batch_size when given.
  ModelSpec model;
  std::optional<int> batch_size;
  /// Run micro-batches of this many samples: the profile's times and
  /// activation bytes are taken at this size (profile_at_micro_batch_size).
  /// Absent: the profile's own micro_batch_size.
  std::optional<int> micro_batch_size;
  /// The rule for a micro_batch_size the profile does not cover
  /// (micro_batch_scaling(): "none" refuses it, "linear" scales the nearest
  /// measured size).
  std::string micro_batch_scaling = "none";
  std::string schedule;
  int micro_batches = 1;
  /// Absent: 1 for flushed schedules; for the others, start at
  /// max(32, 4 x devices) and double until a steady-state cycle is confirmed
  /// (Plan::extend_mini_batches).
  std::optional<int> mini_batches;
  /// Replaces every host's memory capacity (units as parse_bytes takes them).
  std::string memory;
  /// "uniform" (layers split by count), "balanced" (balanced_partition:
  /// stages of balanced compute), "megatron" (Megatron-LM's stage layout:
  /// megatron_partition) or a partition file.
  std::string partition = "uniform";
  /// --partition megatron: transformer layers on the first and the last
  /// pipeline rank (Megatron's --decoder-first/last-pipeline-num-layers).
  std::optional<int> first_pipeline_layers, last_pipeline_layers;
  /// --partition megatron: the embedding (the loss) counts as a layer of the
  /// split (Megatron's --account-for-embedding/loss-in-pipeline-split; set
  /// by --megatron-args).
  bool embedding_in_pipeline_split = false, loss_in_pipeline_split = false;
  std::string replicas;               ///< "3,1": replicated stages, layers balanced per replica
  /// Choose the partition as explore does (partition_for_run: uniform,
  /// pipedream, pipedream-straight, pipedream-memory, bapipe); empty: from
  /// `partition` or `replicas`, which it excludes.
  std::string partitioner;
  bool split_layers = false;  ///< partitioner bapipe: split boundary layers between GPUs too
  std::string network = "simgrid";
  /// How concurrent activations and gradients share the network: share
  /// (default) or fifo (sim::TransferRule; Plan::transfer_rule).
  std::string transfer_rule = "share";
  /// Each stage transfer holds its sender until it has arrived (simulate
  /// --blocking-transfers; Plan::blocking_transfers).
  bool blocking_transfers = false;
  bool recompute = false;
  /// Megatron-LM's layer-wise recomputation (--recompute-granularity full or
  /// selective, --recompute-method uniform or block, --recompute-num-layers;
  /// core/recompute.hpp): Plan::layer_recompute. Excludes `recompute`.
  std::string recompute_granularity, recompute_method;
  std::optional<int> recompute_num_layers;
  /// --gradient-dtype: "" (gradients in the dtype) or fp32 (Plan::gradient_dtype).
  std::string gradient_dtype;
  /// sgd, momentum or adam; "" when not given: default_optimizer of the
  /// run's dtype (core/precision.hpp)
  std::string optimizer;
  bool vertical_sync = false;
  int update_interval = 0;
  double prediction_cost_s_per_byte = 0;
  bool wait_free = false;
  int pipeline_depth = 0;
  /// Stages per device for interleaved and V schedules (absent: the
  /// schedule's default, default_virtual_stages).
  std::optional<int> virtual_stages;
  /// An overlapped F&B pair takes fb_overlap x (F + B), in (0, 1].
  double fb_overlap = 1.0;
  /// --activation-limit K (zb-auto): activation memory per stage in p
  /// micro-batches' activations; absent: the schedule's default (1).
  std::optional<double> activation_limit;
  /// Run this Program instead of a named schedule (simulate --program): its
  /// stages, micro-batches, mini-batches and stage -> device map come from
  /// the file, device d on the platform's d-th host.
  std::string program_file;
  std::string program_format = "text";  ///< text | torch-csv
  /// The profile's number format when it states none (simulate --dtype:
  /// fp32, fp16, bf16); "" for none.
  std::string dtype;
  /// Hosts per tensor-parallel group (simulate --tensor-parallel; Plan::tensor_parallel).
  int tensor_parallel = 1;
  /// Context-parallel ranks per sequence (simulate --context-parallel;
  /// Plan::context_parallel).
  int context_parallel = 1;
  /// Expert-parallel ranks (simulate --expert-parallel; Plan::expert_parallel)
  /// and expert tensor parallelism (--expert-tensor-parallel; 0: tensor_parallel).
  int expert_parallel = 1;
  int expert_tensor_parallel = 0;
  /// FP8 recipe (simulate --fp8-format hybrid|e4m3; Plan::fp8_format); "" none.
  std::string fp8_format;
  /// Megatron's sequence parallelism (simulate --sequence-parallel;
  /// Plan::sequence_parallel): off at tensor parallel 1, as Megatron-LM
  /// turns it off there (the plan's note says so).
  bool sequence_parallel = false;
  /// Megatron-LM's --tp-comm-overlap (simulate --tp-comm-overlap;
  /// Plan::tp_comm_overlap): needs sequence_parallel at t > 1.
  bool tp_comm_overlap = false;
  /// compute (default) or flows: how the tensor-parallel collectives are
  /// charged (simulate --tp-collectives; Plan::tp_collectives).
  std::string tp_collectives = "compute";
  /// A parallel layout t x p x d over the platform's hosts (Megatron-LM's
  /// sizes; any of these makes one): the data-parallel size d (whole
  /// pipelines, Plan::data_parallel), the pipeline-parallel size p, and the
  /// global batch (micro-batch size x micro-batches per pipeline x d).
  /// Absent sizes follow from the hosts: t x p x d = the platform's hosts, as
  /// Megatron derives d from the world size.
  std::optional<int> data_parallel;
  std::optional<int> pipeline_parallel;
  std::optional<long long> global_batch_size;
  /// flows (default) or rounds: how ring collectives move their bytes
  /// (Plan::collective_model).
  std::string collective_model = "flows";
  /// Megatron-Core DDP over a layout's pipelines (Plan::overlap_grad_reduce,
  /// ddp_bucket_size, distributed_optimizer, overlap_param_gather; Megatron's
  /// --overlap-grad-reduce, --ddp-bucket-size, --use-distributed-optimizer,
  /// --overlap-param-gather).
  bool overlap_grad_reduce = false;
  std::optional<long long> ddp_bucket_size;
  bool distributed_optimizer = false;
  bool overlap_param_gather = false;
  /// The arguments of a Megatron-LM launch (simulate --megatron-args, or the
  /// text of --megatron-args-file; read_megatron_args, layout/): they give
  /// the model (a generated gpt), the layout t x p (d follows from the
  /// hosts), the micro- and global batch, the precision, recomputation and
  /// the schedule (Megatron's 1F1B, interleaved with virtual stages; another
  /// flushed schedule with --schedule), and --partition megatron. "": none.
  std::string megatron_args;
  /// A file holding such arguments (simulate --megatron-args-file): read
  /// as megatron_args, messages naming the file. Excludes megatron_args.
  std::string megatron_args_file;
};

/** The schedule entry of a plan: its catalog entry, or for a Program given
 *  as a file (Plan::program_text) an entry named "program" (flushed, no
 *  intended kind check beyond streams: see run_plan). */
const ScheduleInfo& plan_schedule_info(const Plan& plan);

/** The options a plan's schedule is generated with, for `mini_batches`
 *  mini-batches (replicas per stage from the partition's hosts). For a
 *  schedule taking ScheduleOption::StageTimes (zb-auto), the stage times
 *  too (docs/schedules.md, zb-auto): per stage, its layers' F, I and W
 *  times on the host of its first replica (layer_times_on,
 *  backward_split_on) and M_W / M_B = weight_gradient_stash_bytes /
 *  stash_bytes (stage_costs); the transfer time, the largest over the
 *  stage boundaries of the route's latency + the activation's bytes / the
 *  route's narrowest bandwidth (sim::read_routes on `platform_file`). With
 *  no `platform` (and file), the profile's times at speed factor 1 and a
 *  transfer time of 0. */
ScheduleOptions plan_schedule_options(const Plan& plan, int mini_batches, const PlatformSummary* platform = nullptr,
                                      const std::string& platform_file = "");


/** A sweep reads each input once in its parent process, and its runs (forked
 *  children) inherit what it read: after this call, profiles and platform
 *  summaries are kept in memory by path for the life of the process (the
 *  files must not change meanwhile). Off by default. */
void enable_input_cache();
/// `pipegrid simulate`: a progress line on stderr while a simulation runs,
/// when stderr is a terminal (sim::set_progress; never in pipes or files).
void enable_progress_on_terminal();
/** Reads a profile (as make_plan does without --batch-size) or a platform's
 *  summary (with its routes too, as partitioners need them) into the cache. */
void preload_profile(const std::string& path);
void preload_platform(const std::string& path, bool with_routes);

/** The platform's summary (hosts and their properties, no routes) as
 *  make_plan reads it: through the input cache when it is on. */
PlatformSummary platform_summary(const std::string& path);

/** SHA-256 (hex) of a file's content, read once per process. */
std::string input_file_sha256(const std::string& path);

/** A sweep's runs keep the partitions a --partitioner chose (and the reasons
 *  it found none) as files in `folder`, by the hash of everything the
 *  partitioner reads, and reuse them. Empty (the default): no cache. */
void set_partition_cache(const std::string& folder);

/** Reads the inputs and pins them into a Plan. Throws InputError, and
 *  InfeasibleError when the partitioner finds no partition. */
Plan make_plan(const PlanRequest& request);

struct RunResult {
  PlatformSummary platform;
  Program program;
  Timeline timeline;  ///< memory annotated
  Metrics metrics;
  /// What the mini-batch time implies: TFLOP/s per GPU, MFU and HFU.
  FlopsUtilisation utilisation;
  std::vector<std::string> warnings;
  /// Expert parallelism's all-to-alls (sim::SimulationResult): seconds
  /// summed over the actions that ran some (every leader's), the part no
  /// compute hid, and in overlapped F&B pairs the spans and the spans run
  /// one after the other. Summed over mini-batches simulated.
  double all_to_all_s = 0, all_to_all_exposed_s = 0;
  double overlapped_pair_span_s = 0, overlapped_pair_serial_s = 0;
  /// Leaders whose actions run all-to-alls (SimulationRequest::expert_parallel_ranks).
  int all_to_all_devices = 0;
  /// span / serial of the pairs that ran all-to-alls (DualPipe's achieved
  /// overlap: 1 = none hidden, 0.5 = the compute and the all-to-alls of
  /// each pair equal and fully overlapped); absent without such pairs.
  std::optional<double> fb_overlap_effective() const {
    if (overlapped_pair_serial_s <= 0) return std::nullopt;
    return overlapped_pair_span_s / overlapped_pair_serial_s;
  }
};

/** Generates the Program, validates it, simulates it and computes metrics.
 *  With plan.extend_mini_batches, simulates again with twice the
 *  mini-batches while no steady-state cycle is confirmed, at most up to
 *  max_auto_mini_batches(plan), and leaves the count simulated in
 *  plan.mini_batches. Throws InputError for bad input, InvariantViolation
 *  for an impossible result. */
RunResult run_plan(Plan& plan);

/** Where a run's mini-batches start when the user gives none (schedules
 *  without a flush): max(32, 4 x devices); the doubling stops at 16 times
 *  that. */
int default_mini_batches(const Plan& plan);
int max_auto_mini_batches(const Plan& plan);

/** A layout's pipeline size p: the plan's stages / stages per device. */
int pipeline_parallel_size(const Plan& plan);
/** "t 8 x p 4 x d 2 = 64 GPUs, ranks in Megatron-Core's order ...; global
 *  batch 512 = micro-batch 4 x 64 micro-batches per pipeline x 2 pipelines". */
std::string layout_text(const Plan& plan);

/** The plan's rank map as JSON (simulate --layout-json): every global rank
 *  of the t x p x d layout in Megatron-Core's order (rank = tensor rank + t
 *  (data rank + d pipeline rank)), its host of `platform` (every host: a
 *  tensor-parallel group is its leader and the t - 1 hosts after it), its
 *  coordinates, stages and layers, and the tensor, data and pipeline groups.
 *  InputError for a Program read from a file or stages replicated unequally
 *  (--replicas). */
std::string layout_to_json(const Plan& plan, const PlatformSummary& platform);

std::string metrics_to_json(const Plan& plan, const RunResult& result);
/** The run's timeline as the SVG Gantt chart `simulate --svg` draws: titled
 *  with the schedule, model, platform file and the run's shape, each
 *  device's memory capacity and reserve marked, tensor-parallel groups as
 *  the plan has them. */
std::string timeline_svg_of_run(const Plan& plan, const RunResult& result);
std::string metrics_to_table(const Plan& plan, const RunResult& result);

}  // namespace pipegrid::api
