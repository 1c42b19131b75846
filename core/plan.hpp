#pragma once
// Plan: one file that pins everything needed to reproduce a run. The profile
// and the platform XML are embedded, so a plan still runs when the files it
// came from have moved or changed.

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/partition.hpp"
#include "core/profile.hpp"
#include "core/tensor_parallel.hpp"
#include "core/recompute.hpp"

namespace pipegrid {

struct Plan {
  Profile profile;
  std::string platform_file;  ///< where the platform came from (informative)
  std::string platform_xml;   ///< its content
  Partition partition;
  std::string schedule;
  int micro_batches = 1;
  int mini_batches = 1;
  /// Schedules without a flush: `mini_batches` is where the run starts; the
  /// run doubles it (up to a cap) until a steady-state cycle is confirmed.
  /// false: exactly `mini_batches` are simulated.
  bool extend_mini_batches = false;
  /// Replaces every host's memory capacity (simulate --memory); absent: the
  /// platform's `memory` properties.
  std::optional<double> memory_bytes;
  /// GPipe's recomputation (--recompute): an R re-runs the stage's whole
  /// forward before each backward, the stage input kept meanwhile.
  bool recompute = false;
  /// Megatron-LM's layer-wise recomputation (--recompute-granularity ...;
  /// core/recompute.hpp), in place of `recompute`; none when not enabled.
  LayerRecompute layer_recompute;
  std::string network = "analytic";  ///< analytic | simgrid
  /// share | fifo: how concurrent activations and gradients share the
  /// network (docs/semantics.md, Transfer rules; sim::TransferRule).
  std::string transfer_rule = "share";
  /// Each stage transfer holds its sender until it has arrived (Megatron-LM's
  /// non-overlapped p2p; sim::SimulationRequest::blocking_transfers).
  bool blocking_transfers = false;
  std::string optimizer = "sgd";     ///< sgd | momentum | adam: 0, 1, 2 weight copies of state
  /// Why `optimizer` is what it is when the user did not say (default_optimizer
  /// of the dtype); informative, not written to plan files. "" otherwise.
  std::string optimizer_note;
  bool vertical_sync = false;        ///< pipedream: every stage uses the input stage's version
  int update_interval = 0;           ///< pipedream-2bw: mini-batches per update (0: the stages)
  double prediction_cost_s_per_byte = 0;  ///< pipeoptim: prediction time per parameter byte
  bool wait_free = false;            ///< dp: per-layer all-reduces during the backward
  int pipeline_depth = 0;            ///< PipeDream family: admitted per input replica (0: NOAM)
  /// The partitioner that chose `partition` (simulate --partitioner: uniform,
  /// pipedream, ...); empty when it came from --partition or --replicas.
  /// Informative: `partition` is what runs.
  std::string partitioner;
  /// The micro-batch scaling rule the profile was taken to its size with
  /// (micro_batch_scaling(): none or linear), and what it did when it
  /// derived the size ("" when the profile covers the size). Informative:
  /// `profile` is embedded at the size it runs.
  std::string micro_batch_scaling = "none";
  std::string micro_batch_scaling_note;
  /// Stages per device (interleaved and V schedules: the partition has p x v
  /// stages over p devices); 1 for the classic schedules.
  int virtual_stages = 1;
  /// An overlapped F&B pair (dualpipev) takes fb_overlap x (F + B), in (0, 1].
  double fb_overlap = 1.0;
  /// zb-auto's activation memory per stage in p micro-batches' activations
  /// (simulate --activation-limit; ScheduleOptions::activation_limit); 0:
  /// not given. Written to plan files only when given.
  double activation_limit = 0;
  /// A hand-written or imported Program (simulate --program) in pipegrid's
  /// text form; empty: generated from `schedule`. `schedule` then names its
  /// origin ("program FILE").
  std::string program_text;
  /// The number format of the profile's parameters and activations: the
  /// profile's own dtype, else simulate --dtype; "" when neither states one
  /// (fp32). Memory keeps resident_weight_factor(dtype, optimizer) bytes per
  /// weight byte (core/precision.hpp).
  std::string dtype;
  /// The gradients' format when it is not `dtype` (--gradient-dtype fp32:
  /// fp32 gradients of fp16 or bf16 weights, Megatron-LM's default with
  /// --bf16); "" otherwise. Memory: bytes_per_parameter(dtype, optimizer,
  /// gradient_dtype).
  std::string gradient_dtype;
  /// Hosts per tensor-parallel group (simulate --tensor-parallel): 1, or t
  /// consecutive hosts of one server running each stage split t ways. The
  /// embedded profile is then the per-member one (tensor_parallel_profile)
  /// and the partition places stages on the groups' first hosts only.
  int tensor_parallel = 1;
  /// Megatron's context parallelism (--context-parallel-size): each
  /// sequence split over cp ranks, which follow the tensor-parallel ranks in
  /// Megatron-Core's rank order (tp-cp-ep-dp-pp). 1: none. Written to plan
  /// files only when not 1.
  int context_parallel = 1;
  /// Expert parallelism (--expert-model-parallel-size): a MoE layer's
  /// routed experts split over ep ranks carved out of data x context
  /// parallelism as Megatron-Core's expert rank generator does (order
  /// tp-ep-dp-pp over the expert tensor size). 1: none. Written to plan
  /// files only when not 1.
  int expert_parallel = 1;
  /// Expert tensor parallelism (--expert-tensor-parallel-size): 0 follows
  /// tensor_parallel, as Megatron-Core does when it is not given.
  int expert_tensor_parallel = 0;
  /// FP8 recipe on top of bf16 (--fp8-format): "hybrid" (E4M3 forward,
  /// E5M2 gradients) or "e4m3"; "" none. Written to plan files only when set.
  std::string fp8_format;
  /// Megatron's sequence parallelism in the tensor-parallel groups
  /// (simulate --sequence-parallel; tensor_parallel_profile): only with
  /// tensor_parallel > 1. Written to plan files only when set.
  bool sequence_parallel = false;
  /// Megatron-LM's --tp-comm-overlap (overlapped_collectives_s,
  /// core/tensor_parallel.hpp): only with sequence_parallel. Written to plan
  /// files only when set; the embedded profile already carries its effect.
  bool tp_comm_overlap = false;
  /// compute | flows: how the tensor-parallel collectives are charged
  /// (simulate --tp-collectives; TensorParallelCollectives,
  /// core/tensor_parallel.hpp). Written to plan files only when not
  /// compute. With flows at tensor_parallel > 1 the embedded profile's times
  /// hold no collective and `tensor_parallel_collectives` lists them.
  std::string tp_collectives = "compute";
  /// With tp_collectives flows: per layer of `profile`, its collectives
  /// (TensorParallelProfile::collectives), for the engine to run; empty
  /// otherwise.
  std::vector<LayerCollectives> tensor_parallel_collectives;
  /// Data-parallel pipelines (a layout's d; simulate --data-parallel,
  /// --megatron-args): each replica is a whole pipeline running `schedule`
  /// over `micro_batches` micro-batches of its own (Megatron's counting:
  /// global batch = micro-batch size x micro_batches x data_parallel).
  /// 1: one pipeline (PipeDream's per-stage replicas, if any, are in
  /// `partition.hosts` instead).
  int data_parallel = 1;
  /// flows | rounds: how ring collectives move their bytes
  /// (sim::CollectiveModel; docs/semantics.md, Collectives).
  std::string collective_model = "flows";
  /// Megatron-Core's DDP over the data-parallel pipelines (docs/semantics.md,
  /// "Gradient synchronisation"; Megatron's --overlap-grad-reduce,
  /// --ddp-bucket-size, --use-distributed-optimizer, --overlap-param-gather):
  /// each stage's gradients reduced during the backward, in buckets of
  /// ddp_bucket_size parameters on the first stage (absent: max(40M, 1M x
  /// data_parallel)); reduce-scatter, sharded step and all-gather instead of
  /// an all-reduce; the all-gather overlapped with the next forward.
  bool overlap_grad_reduce = false;
  std::optional<long long> ddp_bucket_size;
  bool distributed_optimizer = false;
  bool overlap_param_gather = false;
  /// Parameters per DDP bucket: ddp_bucket_size, else Megatron-Core's
  /// default max(40000000, 1000000 x data_parallel) (core_v0.14.0,
  /// megatron/training/training.py, get_model).
  long long ddp_bucket_parameters() const {
    return ddp_bucket_size.value_or(std::max<long long>(40000000LL, 1000000LL * data_parallel));
  }
  /// A parallel layout was asked for (--data-parallel, --pipeline-parallel,
  /// --global-batch-size or --megatron-args): outputs then state the layout
  /// and the global batch. Informative.
  bool parallel_layout = false;
  /// Samples of one mini-batch (an iteration): micro-batch size x
  /// micro_batches x data_parallel.
  long long global_batch_size() const {
    return static_cast<long long>(profile.micro_batch_size) * micro_batches * data_parallel;
  }
  /// What reading a Megatron-LM launch (--megatron-args) found: the release
  /// followed, the arguments ignored, and notes; informative, not written to
  /// plan files. Empty without one.
  std::vector<std::string> megatron_notes;
  /// TensorParallelProfile::note of the transform that made `profile`;
  /// informative ("" when tensor_parallel is 1).
  std::string tensor_parallel_note;
  /// ContextParallelProfile::note of the transform that made `profile`;
  /// informative ("" when context_parallel is 1). Written to plan files
  /// only when set.
  std::string context_parallel_note;
  /// What reading the Program's file noticed (a PyTorch CSV: idle steps
  /// dropped, the older grammar, communication checked); informative, not
  /// written to plan files.
  std::vector<std::string> program_notes;
  /// What the device models did for layers given by FLOPs only (which model
  /// timed them; FPGA weights on chip or from DDR); informative, not written
  /// to plan files (the layers' times are).
  std::vector<std::string> device_model_notes;
};

/** Weight copies of optimizer state: sgd 0, momentum 1, adam 2; InputError
 *  naming --optimizer otherwise. */
int optimizer_copies(const std::string& optimizer);

std::string plan_to_json(const Plan& plan);
Plan parse_plan_json(const std::string& text, const std::string& origin);
Plan read_plan_file(const std::string& path);

}  // namespace pipegrid
