#include "cli/simulate_options.hpp"

#include <fmt/format.h>

#include "cli/model_command.hpp"
#include "core/error.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid::cli {

void add_simulate_input_options(CLI::App& command, api::PlanRequest& request) {
  command.add_option("--platform", request.platform_file, "SimGrid platform XML file");
  command.add_option("--profile", request.profile_file, "profile JSON, or PipeDream graph.txt");
  command.add_option("--schedule", request.schedule, "schedule name (see `pipegrid schedule --list`)");
  command.add_option("--virtual-stages", request.virtual_stages,
                     "stages per device of interleaved schedules (default: 2 for interleaved-1f1b, looped-bfs and zb1p; "
                     "zb-v and dualpipev always 2)");
  command.add_option("--fb-overlap", request.fb_overlap,
                     "an overlapped F&B pair (dualpipev, dualpipe) takes this fraction of F + B, in (0, 1] (default 1)");
  command.add_option("--activation-limit", request.activation_limit,
                     "zb-auto: activation memory per stage in p micro-batches' activations (1: ZB-1p, default; 2: "
                     "ZB-2p; fractions allowed, at least 1/p)");
  command.add_option("--program", request.program_file,
                     "run this Program file instead of --schedule (stages, micro-batches and placement from the file)");
  command.add_option("--program-format", request.program_format, "text (pipegrid's, default) or torch-csv (PyTorch pipelining)");
  command.add_option("--micro-batches", request.micro_batches, "micro-batches per mini-batch (M)");
  command.add_option("--mini-batches", request.mini_batches,
                     "mini-batches to simulate (default: 1 for flushed schedules, max(32, 4 x devices) for the others)");
  command.add_option("--partition", request.partition,
                     "uniform (default: layers split by count), balanced (contiguous stages of balanced compute, "
                     "any schedule), megatron (Megatron-LM's layout: transformer layers split evenly, embedding on the "
                     "first stage, head and loss on the last) or a partition file");
  command.add_option("--first-pipeline-layers", request.first_pipeline_layers,
                     "--partition megatron: transformer layers on the first pipeline rank (Megatron's "
                     "--decoder-first-pipeline-num-layers); the others split the rest");
  command.add_option("--last-pipeline-layers", request.last_pipeline_layers,
                     "--partition megatron: transformer layers on the last pipeline rank (Megatron's "
                     "--decoder-last-pipeline-num-layers)");
  command.add_option("--replicas", request.replicas,
                     "replicas per stage, e.g. 3,1: stages take hosts in platform order, layers balanced per replica");
  command.add_option("--optimizer", request.optimizer,
                     "sgd, momentum or adam: optimizer state in memory (default: adam for fp16 and bf16, sgd for fp32)");
  command.add_flag("--vertical-sync", request.vertical_sync, "pipedream: every stage uses the input stage's weight version");
  command.add_option("--update-interval", request.update_interval,
                     "pipedream-2bw: mini-batches per weight update (default: the number of stages)");
  command.add_option("--prediction-cost", request.prediction_cost_s_per_byte,
                     "pipeoptim: weight-prediction time in seconds per parameter byte (default 0)");
  command.add_flag("--wait-free", request.wait_free, "dp: all-reduce each layer as soon as its backward ends");
  command.add_option("--pipeline-depth", request.pipeline_depth,
                     "pipedream family: mini-batches admitted per input replica (default NOAM)");
  command.add_option("--memory", request.memory,
                     "replace every host's memory capacity (bytes, or with a unit: 64GiB, 16GB); drives the OOM verdict");
  command.add_option("--network", request.network,
                     "simgrid (default: SimGrid's realistic model) or analytic (exactly latency + bytes/bandwidth)");
  command.add_option("--transfer-rule", request.transfer_rule,
                     "share (default: concurrent activations and gradients share the links) or fifo (one at a time per "
                     "(source, destination) host pair, in the order they became ready)");
  command.add_flag("--blocking-transfers", request.blocking_transfers,
                   "each stage transfer (activation, gradient) holds its sending device until it has arrived, as "
                   "Megatron-LM's p2p without overlap (--no-overlap-p2p-communication); default: sends overlap compute");
  command.add_flag("--recompute", request.recompute,
                   "GPipe's activation recomputation (flushed schedules): each stage's whole forward again before its "
                   "backward, only its input kept");
  command.add_option("--recompute-granularity", request.recompute_granularity,
                     "Megatron-LM's recomputation, layer by layer (flushed schedules; not with --recompute): full "
                     "(whole transformer layers, as --recompute-method says) or selective (the attention core of every "
                     "transformer layer)");
  command.add_option("--recompute-method", request.recompute_method,
                     "--recompute-granularity full: uniform (every transformer layer, checkpointed in groups of "
                     "--recompute-num-layers) or block (only the first --recompute-num-layers transformer layers of "
                     "each stage)");
  command.add_option("--recompute-num-layers", request.recompute_num_layers,
                     "--recompute-granularity full: transformer layers per checkpoint (uniform) or per stage (block)");
  command.add_option("--gradient-dtype", request.gradient_dtype,
                     "fp32: fp32 gradients of fp16 or bf16 weights (Megatron-LM's default with --bf16: 18 bytes per "
                     "parameter with adam); default: the weights' dtype");
  command.add_option("--batch-size", request.batch_size, "micro-batch size the profile was measured at (graph.txt)");
  command.add_option("--micro-batch-size", request.micro_batch_size,
                     "run micro-batches of N samples (profile times interpolated between its measured sizes)");
  command.add_option("--micro-batch-scaling", request.micro_batch_scaling,
                     "none (default: refuse a size the profile does not cover) or linear (scale the nearest measured size: "
                     "times and activations proportional to the samples)");
  command.add_option("--partitioner", request.partitioner,
                     "uniform, pipedream, pipedream-straight, pipedream-memory or bapipe: partition as explore does (not with "
                     "--partition FILE)");
  command.add_flag("--split-layers", request.split_layers,
                   "--partitioner bapipe: split boundary layers between GPUs too (by default only between FPGAs)");
  command.add_option("--dtype", request.dtype,
                     "fp32, fp16 or bf16: the number format of a --model, or of a --profile that states none (memory per "
                     "parameter: docs/semantics.md, Memory)");
  command.add_option("--fp8-format", request.fp8_format,
                     "hybrid (E4M3 forward, E5M2 gradients) or e4m3: Megatron-LM's FP8 recipe on top of --dtype bf16 or "
                     "fp16, on H100, H200 or H800 (the blocks' linear GEMMs in FP8; docs/semantics.md, FP8)");
  command.add_option("--tensor-parallel", request.tensor_parallel,
                     "split each stage t ways over t consecutive hosts, which may span servers (transformer layers "
                     "with FLOPs, and the embedding, head and loss a profile marks with `vocabulary`; others "
                     "replicated); default 1");
  command.add_option("--context-parallel", request.context_parallel,
                     "Megatron's context parallelism: split every sequence over cp ranks that follow the tensor ranks "
                     "(groups of t x cp consecutive hosts), ring attention passing keys and values point to point, "
                     "overlapped with the attention (Transformer Engine, --cp-comm-type p2p); needs --flash-attention 1 "
                     "and a sequence that is a multiple of 2 cp; default 1");
  command.add_flag("--sequence-parallel", request.sequence_parallel,
                   "Megatron's sequence parallelism in the tensor-parallel groups: reduce-scatter + all-gather for "
                   "all-reduces, norms and stashed activations split t ways (off at --tensor-parallel 1)");
  command.add_flag("--tp-comm-overlap", request.tp_comm_overlap,
                   "Megatron's --tp-comm-overlap: a transformer layer's sequence-parallel all-gathers and "
                   "reduce-scatters pipelined with its GEMMs, charged only what they exceed them by (needs "
                   "--sequence-parallel; docs/semantics.md, Tensor parallelism)");
  command.add_option("--tp-collectives", request.tp_collectives,
                     "compute (default: a layer's tensor-parallel collectives charged as compute time over the groups' "
                     "slowest ring step) or flows (run by the engine after each F, B or I as one ring of flows over the "
                     "group's hosts, sharing links with other traffic; docs/semantics.md, Tensor parallelism)");
  command.add_option("--expert-parallel", request.expert_parallel,
                     "Megatron's --expert-model-parallel-size: a MoE model's routed experts split over ep ranks carved "
                     "out of tensor x context x data parallelism (expert rank order tp-ep-dp-pp), with each MoE layer's "
                     "dispatch and combine all-to-alls run as flows (docs/semantics.md, Expert parallelism); default 1");
  command.add_option("--expert-tensor-parallel", request.expert_tensor_parallel,
                     "Megatron's --expert-tensor-parallel-size: 1, or the tensor-parallel size (the default)");
  command.add_option("--pipeline-parallel", request.pipeline_parallel,
                     "a layout's pipeline size p (Megatron's --pipeline-model-parallel-size): t x p x d = the hosts");
  command.add_option("--data-parallel", request.data_parallel,
                     "a layout's data-parallel size d: d whole pipelines, each running the schedule over its own "
                     "--micro-batches (Megatron's counting); default hosts / (t x p)");
  command.add_option("--collective-model", request.collective_model,
                     "flows (default: a ring collective is one flow per neighbour pair plus its latencies) or rounds "
                     "(2(r-1) rounds of point-to-point transfers per all-reduce; docs/semantics.md, Collectives)");
  command.add_flag("--overlap-grad-reduce", request.overlap_grad_reduce,
                   "a layout's gradient all-reduces (or reduce-scatters) start during the backward, per Megatron-Core "
                   "DDP bucket (Megatron's --overlap-grad-reduce)");
  command.add_option("--ddp-bucket-size", request.ddp_bucket_size,
                     "--overlap-grad-reduce: parameters per bucket of the first pipeline stage (default max(40M, 1M x d), "
                     "Megatron's --ddp-bucket-size)");
  command.add_flag("--use-distributed-optimizer", request.distributed_optimizer,
                   "Megatron's distributed optimizer (ZeRO-1): reduce-scatter, a sharded optimizer step, all-gather; "
                   "optimizer state split over the d replicas");
  command.add_flag("--overlap-param-gather", request.overlap_param_gather,
                   "--use-distributed-optimizer: the parameters' all-gather overlaps the next mini-batch's forward "
                   "(needs --overlap-grad-reduce, as Megatron)");
  command.add_option("--megatron-args", request.megatron_args,
                     "the arguments of a Megatron-LM launch (core_v0.14.0; give them as --megatron-args=\"...\"): "
                     "model, layout, batch, precision, recomputation (docs/megatron.md)");
  command.add_option("--megatron-args-file", request.megatron_args_file,
                     "a file holding a Megatron-LM launch's arguments (a launch script as it is)");
  command.add_option("--global-batch-size", request.global_batch_size,
                     "samples per iteration: micro-batch size x micro-batches per pipeline x d (Megatron's "
                     "--global-batch-size); sets --micro-batches");
  // The model generators' options, last (add_model_options skips a --dtype
  // already defined above).
  command.add_option("--model", request.model.name,
                     "instead of --profile: a generated model's profile (mlp, vgg16, resnet50, gnmt, gpt; `pipegrid model "
                     "--list`), built at --micro-batch-size");
  add_model_options(command, request.model, false);
}

void check_simulate_inputs(const CLI::App& command, const api::PlanRequest& request) {
  if (request.platform_file.empty()) throw InputError("simulate: --platform is required (or give --plan FILE)");
  const bool megatron = !request.megatron_args.empty() || !request.megatron_args_file.empty();
  if (request.profile_file.empty() && request.model.name.empty() && !megatron)
    throw InputError("simulate: --profile is required (or --model NAME, --megatron-args, or give --plan FILE)");
  if (request.schedule.empty() && request.program_file.empty() && !megatron)
    throw InputError("simulate: --schedule or --program is required (or give --plan FILE)");
  if (!request.program_file.empty() && command.count("--micro-batches") != 0)
    throw InputError("--micro-batches: the Program says how many micro-batches it runs; drop --micro-batches");
  if (request.program_file.empty() && command.count("--program-format") != 0)
    throw InputError("--program-format: applies to --program FILE");
  if (request.program_file.empty() && command.count("--micro-batches") == 0 && !request.global_batch_size &&
      !megatron && schedule_info(request.schedule).flushed)
    throw InputError(fmt::format("simulate: --micro-batches (or --global-batch-size) is required for {} (or give "
                                 "--plan FILE)",
                                 request.schedule));
  if (command.count("--micro-batches") != 0 && request.global_batch_size)
    throw InputError(fmt::format("--micro-batches {} and --global-batch-size {}: both set the micro-batches per "
                                 "pipeline (global batch = micro-batch size x micro-batches x d); give one",
                                 request.micro_batches, *request.global_batch_size));
}

}  // namespace pipegrid::cli
