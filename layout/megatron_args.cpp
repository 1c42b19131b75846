// Megatron-LM launch arguments, as release core_v0.14.0 reads them (see the
// header). The argument table below is that release's add_megatron_arguments
// (megatron/training/arguments.py): every name, whether it takes a value,
// and how pipegrid treats it. Messages quote the release's wording where it
// states the rule ("num_attention_heads (12) must be a multiple of
// tensor_model_parallel_size (8).").

#include "layout/megatron_args.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/platform_check.hpp"
#include "core/suggest.hpp"

namespace pipegrid {
namespace {

using Treatment = MegatronTreatment;

/// How many values an argument takes (argparse: store_true/store_false, a
/// value, nargs='*', nargs='+').
enum class Arity { Switch, One, Any, OneOrMore };
constexpr Arity S = Arity::Switch, V = Arity::One, L = Arity::Any, L1 = Arity::OneOrMore;

struct Group {
  Treatment treatment;
  const char* reason;  ///< see MegatronArgument::reason
  std::vector<std::pair<const char*, Arity>> arguments;
};

// clang-format off
const std::vector<Group>& groups() {
  static const std::vector<Group> all = {
      {Treatment::Read,
       "",
       {
        {"--num-layers", V}, {"--encoder-num-layers", V}, {"--hidden-size", V}, {"--ffn-hidden-size", V},
        {"--num-attention-heads", V}, {"--attention-backend", V}, {"--kv-channels", V},
        {"--group-query-attention", S}, {"--num-query-groups", V}, {"--max-position-embeddings", V},
        {"--position-embedding-type", V}, {"--use-rotary-position-embeddings", S}, {"--no-position-embedding", S},
        {"--make-vocab-size-divisible-by", V}, {"--normalization", V}, {"--swiglu", S},
        {"--untie-embeddings-and-output-weights", S}, {"--micro-batch-size", V}, {"--global-batch-size", V},
        {"--recompute-granularity", V}, {"--recompute-method", V}, {"--recompute-num-layers", V},
        {"--recompute-activations", S}, {"--transformer-impl", V}, {"--use-flash-attn", S},
        {"--disable-bias-linear", S}, {"--add-qkv-bias", S}, {"--optimizer", V}, {"--sgd-momentum", V},
        {"--sequence-parallel", S}, {"--use-mcore-models", S}, {"--use-legacy-models", S}, {"--fp16", S},
        {"--bf16", S}, {"--grad-reduce-in-bf16", S}, {"--accumulate-allreduce-grads-in-fp32", S},
        {"--main-grads-dtype", V}, {"--tensor-model-parallel-size", V}, {"--pipeline-model-parallel-size", V},
        {"--decoder-first-pipeline-num-layers", V}, {"--decoder-last-pipeline-num-layers", V},
        {"--account-for-embedding-in-pipeline-split", S}, {"--account-for-loss-in-pipeline-split", S},
        {"--num-layers-per-virtual-pipeline-stage", V}, {"--num-virtual-stages-per-pipeline-rank", V},
        {"--microbatch-group-size-per-virtual-pipeline-stage", V}, {"--no-overlap-p2p-communication", S},
        {"--context-parallel-size", V}, {"--cp-comm-type", L1}, {"--hierarchical-context-parallel-sizes", L1},
        {"--expert-model-parallel-size", V}, {"--num-experts", V},
        {"--vocab-size", V}, {"--padded-vocab-size", V}, {"--tokenizer-type", V}, {"--vocab-extra-ids", V},
        {"--seq-length", V}, {"--encoder-seq-length", V}, {"--decoder-seq-length", V}, {"--attention-dropout", V},
        {"--hidden-dropout", V}, {"--deterministic-mode", S}, {"--fp32-residual-connection", S},
        {"--fp16-lm-cross-entropy", S}, {"--rotary-percent", V}, {"--recompute-modules", L},
        {"--use-distributed-optimizer", S}, {"--overlap-grad-reduce", S}, {"--overlap-param-gather", S},
        {"--overlap-param-gather-with-optimizer-step", S}, {"--tp-comm-overlap", S},
        {"--ddp-bucket-size", V}, {"--fp8-format", V}, {"--fp8-recipe", V}, {"--expert-tensor-parallel-size", V},
        {"--moe-router-topk", V}, {"--moe-ffn-hidden-size", V},
        {"--moe-shared-expert-intermediate-size", V}, {"--moe-layer-freq", V}, {"--multi-latent-attention", S},
        {"--q-lora-rank", V}, {"--kv-lora-rank", V}, {"--qk-head-dim", V}, {"--qk-pos-emb-head-dim", V},
        {"--v-head-dim", V}, {"--mtp-num-layers", V}}},
      {Treatment::Retired,
       "--batch-size argument is no longer valid, use --micro-batch-size instead",
       {
        {"--batch-size", V}}},
      {Treatment::Retired,
       "--warmup argument is no longer valid, use --lr-warmup-fraction instead",
       {
        {"--warmup", V}}},
      {Treatment::Retired,
       "--model-parallel-size is no longer valid, use --tensor-model-parallel-size instead",
       {
        {"--model-parallel-size", V}}},
      {Treatment::Retired,
       "--checkpoint-activations is no longer valid, use --recompute-activations, or, for more control, --recompute-granularity and --recompute-method.",
       {
        {"--checkpoint-activations", S}}},
      {Treatment::Refused,
       "FP8 parameters (--fp8-param-gather: the distributed optimizer gathers FP8 weights); pipegrid's FP8 recipe keeps the 16-bit weights and Transformer Engine's cached FP8 copies of them",
       {
        {"--fp8-param-gather", S}}},
      {Treatment::Refused,
       "some layers or GEMMs of an FP8 run in 16 bits; pipegrid's FP8 recipe runs every transformer block's linear GEMMs (forward, input and weight gradients) in FP8",
       {
        {"--no-fp8-wgrad", S}, {"--first-last-layers-bf16", S}}},
      {Treatment::Refused,
       "Retro (retrieval-augmented) models are not the gpt model",
       {
        {"--retro-project-dir", V}, {"--retro-add-retriever", S}}},
      {Treatment::Refused,
       "recomputing the MoE layer is not modelled (pipegrid's selective recomputation redoes the attention core)",
       {
        {"--moe-layer-recompute", S}}},
      {Treatment::Refused,
       "--recompute-granularity full keeps the checkpoints whole in pipegrid",
       {
        {"--distribute-saved-activations", S}}},
      {Treatment::Refused,
       "pipegrid follows the Megatron-Core GPT model",
       {
        {"--heterogeneous-layers-config-path", V}, {"--heterogeneous-layers-config-encoded-json", V},
        {"--spec", L}, {"--is-hybrid-model", S}}},
      {Treatment::Refused,
       "the arguments come from a YAML file pipegrid does not read",
       {
        {"--yaml-cfg", V}}},
      {Treatment::Refused,
       "the model's arguments come from the checkpoint, which pipegrid does not read; give them",
       {
        {"--use-checkpoint-args", S}, {"--use-mp-args-from-checkpoint-args", S}}},
      {Treatment::Refused,
       "the optimizer's state on the host (offload) is not in pipegrid's memory model",
       {
        {"--optimizer-cpu-offload", S}}},
      {Treatment::Refused,
       "the precision-aware optimizer's state formats are not in pipegrid's memory model",
       {
        {"--use-precision-aware-optimizer", S}}},
      {Treatment::Refused,
       "an explicit per-stage layout string is not modelled (--decoder-first/last-pipeline-num-layers and "
       "--account-for-embedding/loss-in-pipeline-split are)",
       {
        {"--pipeline-model-parallel-layout", V}}},
      {Treatment::Refused,
       "deferring the head's weight gradient to the flush is not modelled",
       {
        {"--defer-embedding-wgrad-compute", S}}},
      {Treatment::Refused,
       "delaying weight gradients is not modelled",
       {
        {"--delay-wgrad-compute", S}}},
      {Treatment::Refused,
       "FSDP is not modelled",
       {
        {"--use-megatron-fsdp", S}, {"--use-torch-fsdp2", S}}},
      {Treatment::Refused,
       "pipegrid places ranks in Megatron's default order (tp-cp-ep-dp-pp)",
       {
        {"--use-tp-pp-dp-mapping", S}}},
      {Treatment::Refused,
       "pipegrid simulates training; this launch skips it",
       {
        {"--skip-train", S}}},
      {Treatment::Refused,
       "quantization recipes are not modelled",
       {
        {"--kitchen-config-file", V}, {"--kitchen-recipe-number", V}}},
      {Treatment::Noted,
       "kernel fusion: pipegrid's bytes count each element-wise step on its own, whatever Megatron fuses",
       {
        {"--no-masked-softmax-fusion", S}, {"--no-bias-gelu-fusion", S}, {"--no-bias-dropout-fusion", S},
        {"--no-rope-fusion", S}, {"--cross-entropy-loss-fusion", S}, {"--cross-entropy-fusion-impl", V},
        {"--no-gradient-accumulation-fusion", S}, {"--use-fused-weighted-squared-relu", S},
        {"--no-persist-layer-norm", S}}},
      {Treatment::Noted,
       "kernel fusion: pipegrid's bytes count each element-wise step on its own; unfused, Megatron's SwiGLU also keeps SiLU(gate) for the backward (N f elements more per block than pipegrid counts)",
       {
        {"--no-bias-swiglu-fusion", S}}},
      {Treatment::Noted,
       "CUDA graphs: pipegrid's costs have no kernel-launch overheads to remove, nor the graphs' memory pools",
       {
        {"--enable-cuda-graph", S}, {"--external-cuda-graph", S}, {"--cuda-graph-warmup-steps", V},
        {"--cuda-graph-scope", V}}},
      {Treatment::Noted,
       "the caching allocator: pipegrid's memory is what the tensors need; emptying the cache costs time pipegrid does not count",
       {
        {"--empty-unused-memory-level", V}}},
      {Treatment::Noted,
       "kernel algorithms: pipegrid's device model times the default (non-deterministic) kernels",
       {
        {"--disable-bf16-reduced-precision-matmul", S}}},
      {Treatment::Noted,
       "softmax precision: pipegrid costs the softmax in the model's dtype (Megatron computes in fp32, keeps the output in the dtype)",
       {
        {"--attention-softmax-in-fp32", S}, {"--apply-query-key-layer-scaling", S}}},
      {Treatment::Noted,
       "the activation: pipegrid costs squared ReLU as GeLU (one element-wise step, same tensors kept)",
       {
        {"--squared-relu", S}}},
      {Treatment::Noted,
       "query and key norms are not in pipegrid's block (2 x head-width parameters each, element-wise work)",
       {
        {"--qk-layernorm", S}, {"--qk-l2-norm", S}}},
      {Treatment::Noted,
       "rotary embedding: pipegrid rotates every channel of Q and K in every block (element-wise bytes only)",
       {
        {"--no-rope-freq", V}}},
      {Treatment::Noted,
       "batch-size ramp-up: pipegrid simulates iterations at the global batch size",
       {
        {"--rampup-batch-size", L}}},
      {Treatment::Noted,
       "pipeline transfers: pipegrid's simulation decides how sends overlap computation, not these settings",
       {
        {"--overlap-p2p-communication-warmup-flush", S}, {"--use-ring-exchange-p2p", S},
        {"--pipeline-model-parallel-comm-backend", V}}},
      {Treatment::Noted,
       "gradient buckets: pipegrid sizes them by --ddp-bucket-size (default max(40M, 1M x d) parameters) with "
       "--overlap-grad-reduce, unpadded, averaged as a sum",
       {
        {"--ddp-num-buckets", V}, {"--ddp-pad-buckets-for-high-nccl-busbw", S},
        {"--ddp-average-in-collective", S}, {"--no-gradient-reduce-div-fusion", S}}},
      {Treatment::Noted,
       "collectives: pipegrid's network model gives their times, not these NCCL settings",
       {
        {"--use-nccl-ub", S}, {"--use-sharp", S}, {"--sharp-enabled-group", V},
        {"--nccl-communicator-config-path", V}, {"--high-priority-stream-groups", L}}},
      {Treatment::Noted,
       "host-side pauses (garbage collection, synchronisation): pipegrid does not model them",
       {
        {"--train-sync-interval", V}, {"--manual-gc", S}, {"--manual-gc-interval", V}, {"--no-manual-gc-eval", S}}},
      {Treatment::Noted,
       "a check that re-runs or compares work: pipegrid does not simulate it",
       {
        {"--check-weight-hash-across-dp-replicas-interval", V}, {"--rerun-mode", V}, {"--error-injection-rate", V},
        {"--error-injection-type", V}}},
      {Treatment::Noted,
       "profiling: pipegrid does not simulate the profiler's overhead",
       {
        {"--profile", S}, {"--profile-step-start", V}, {"--profile-step-end", V}, {"--use-pytorch-profiler", S},
        {"--profile-ranks", L1}, {"--record-memory-history", S}, {"--memory-snapshot-path", V},
        {"--log-energy", S}, {"--timing-log-level", V}, {"--no-barrier-with-level-1-timing", S},
        {"--timing-log-option", V}}},
      {Treatment::Ignored,
       "delayed scaling's settings (scale margin, amax history and its reduction, update interval): the same kernels and bytes in pipegrid's FP8 recipe",
       {
        {"--fp8-margin", V}, {"--fp8-interval", V}, {"--fp8-amax-history-len", V}, {"--fp8-amax-compute-algo", V}}},
      {Treatment::Ignored,
       "settings of refused FP8 options (no effect without --first-last-layers-bf16, --fp8-recipe mxfp8 or --fp8-param-gather)",
       {
        {"--num-layers-at-start-in-bf16", V}, {"--num-layers-at-end-in-bf16", V},
        {"--reuse-grad-buf-for-mxfp8-param-ag", S}, {"--keep-fp8-transpose-cache", S}}},
      {Treatment::Ignored,
       "random numbers",
       {
        {"--te-rng-tracker", S}, {"--inference-rng-tracker", S}, {"--seed", V}, {"--data-parallel-random-init", S}}},
      {Treatment::Ignored,
       "inference and text generation",
       {
        {"--inference-batch-times-seqlen-threshold", V}, {"--max-tokens-to-oom", V},
        {"--output-bert-embeddings", S}, {"--bert-embedder-type", V}, {"--flash-decode", S},
        {"--inference-max-requests", V}, {"--inference-max-seq-length", V}, {"--inference-dynamic-batching", S},
        {"--inference-dynamic-batching-buffer-size-gb", V}, {"--inference-dynamic-batching-chunk-size", V},
        {"--inference-dynamic-batching-buffer-guaranteed-fraction", V},
        {"--inference-dynamic-batching-buffer-overflow-factor", V},
        {"--inference-dynamic-batching-max-requests-override", V},
        {"--inference-dynamic-batching-max-tokens-override", V},
        {"--inference-dynamic-batching-num-cuda-graphs", V}, {"--symmetric-ar-type", V},
        {"--nccl-all-reduce-for-prefill", S}, {"--mlp-chunks-for-prefill", V}}},
      {Treatment::Ignored,
       "settings of Retro (no effect without --retro-add-retriever)",
       {
        {"--retro-cyclic-train-iters", V}, {"--retro-encoder-layers", V}, {"--retro-encoder-hidden-dropout", V},
        {"--retro-encoder-attention-dropout", V}, {"--retro-num-neighbors", V},
        {"--retro-num-retrieved-chunks", V}, {"--retro-attention-gate", V},
        {"--retro-no-verify-neighbor-count", S}}},
      {Treatment::Ignored,
       "other models' settings (T5, BERT, ICT, vision, Mamba): no effect on the GPT model",
       {
        {"--decoder-num-layers", V}, {"--bert-no-binary-head", S}, {"--retriever-seq-length", V},
        {"--mask-prob", V}, {"--short-seq-prob", V}, {"--ict-head-size", V}, {"--biencoder-projection-dim", V},
        {"--biencoder-shared-query-context-model", S}, {"--ict-load", V}, {"--bert-load", V},
        {"--titles-data-path", V}, {"--query-in-block-prob", V}, {"--use-one-sent-docs", S},
        {"--evidence-data-path", V}, {"--retriever-report-topk-accuracies", L1}, {"--retriever-score-scaling", S},
        {"--block-data-path", V}, {"--embedding-path", V}, {"--indexer-batch-size", V},
        {"--indexer-log-interval", V}, {"--num-classes", V}, {"--img-h", V}, {"--img-w", V}, {"--num-channels", V},
        {"--patch-dim", V}, {"--classes-fraction", V}, {"--data-per-class-fraction", V}, {"--no-data-sharding", S},
        {"--head-lr-mult", V}, {"--vision-pretraining", S}, {"--vision-pretraining-type", V},
        {"--vision-backbone-type", V}, {"--swin-backbone-type", V}, {"--mask-type", V}, {"--mask-factor", V},
        {"--iter-per-epoch", V}, {"--dino-local-img-size", V}, {"--dino-local-crops-number", V},
        {"--dino-head-hidden-size", V}, {"--dino-bottleneck-size", V}, {"--dino-freeze-last-layer", V},
        {"--dino-norm-last-layer", S}, {"--dino-warmup-teacher-temp", V}, {"--dino-teacher-temp", V},
        {"--dino-warmup-teacher-temp-epochs", V}, {"--hybrid-attention-ratio", V}, {"--hybrid-mlp-ratio", V},
        {"--hybrid-override-pattern", V}, {"--mamba-state-dim", V}, {"--mamba-head-dim", V},
        {"--mamba-num-groups", V}, {"--mamba-num-heads", V}, {"--disable-mamba-mem-eff-path", S}}},
      {Treatment::Ignored,
       "position-embedding values (rotation frequencies, relative-attention buckets, mRoPE sections): the same work",
       {
        {"--relative-attention-num-buckets", V}, {"--relative-attention-max-distance", V}, {"--rotary-base", V},
        {"--rotary-interleaved", S}, {"--rotary-seq-len-interpolation-factor", V}, {"--use-rope-scaling", S},
        {"--rope-scaling-factor", V}, {"--mrope-section", L1}, {"--rope-type", V}}},
      {Treatment::Ignored,
       "numerics of the same kernels (norm epsilon and centring, GeLU formula, residual placement)",
       {
        {"--norm-epsilon", V}, {"--apply-layernorm-1p", S}, {"--apply-residual-connection-post-layernorm", S},
        {"--openai-gelu", S}, {"--onnx-safe", V}}},
      {Treatment::Ignored,
       "multi-token prediction loss weight",
       {
        {"--mtp-loss-scaling-factor", V}}},
      {Treatment::Ignored,
       "fault tolerance, straggler detection, in-process restart, workload inspection",
       {
        {"--log-straggler", S}, {"--disable-straggler-on-startup", S}, {"--straggler-ctrlr-port", V},
        {"--straggler-minmax-count", V}, {"--run-workload-inspector-server", S}, {"--inprocess-restart", S},
        {"--inprocess-max-iterations", V}, {"--inprocess-monitor-thread-interval", V},
        {"--inprocess-monitor-process-interval", V}, {"--inprocess-progress-watchdog-interval", V},
        {"--inprocess-heartbeat-interval", V}, {"--inprocess-soft-timeout", V}, {"--inprocess-hard-timeout", V},
        {"--inprocess-heartbeat-timeout", V}, {"--inprocess-barrier-timeout", V},
        {"--inprocess-completion-timeout", V}, {"--inprocess-last-call-wait", V},
        {"--inprocess-termination-grace-time", V}, {"--inprocess-granularity", V},
        {"--inprocess-active-world-size", V}, {"--inprocess-empty-cuda-cache", S}, {"--enable-ft-package", S},
        {"--calc-ft-timeouts", S}}},
      {Treatment::Ignored,
       "logging and monitoring (stdout, TensorBoard, Weights & Biases, one-logger)",
       {
        {"--no-one-logger", S}, {"--one-logger-project", V}, {"--one-logger-run-name", V},
        {"--one-logger-async", S}, {"--app-tag-run-name", V}, {"--app-tag-run-version", V},
        {"--config-logger-dir", V}, {"--log-params-norm", S}, {"--log-num-zeros-in-grad", S},
        {"--log-throughput", S}, {"--log-progress", S}, {"--tensorboard-log-interval", V},
        {"--tensorboard-queue-size", V}, {"--log-timers-to-tensorboard", S},
        {"--no-log-loss-scale-to-tensorboard", S}, {"--log-validation-ppl-to-tensorboard", S},
        {"--log-memory-to-tensorboard", S}, {"--log-world-size-to-tensorboard", S}, {"--wandb-project", V},
        {"--wandb-exp-name", V}, {"--wandb-save-dir", V}, {"--logging-level", V}, {"--log-interval", V},
        {"--tensorboard-dir", V}, {"--moe-per-layer-logging", S}}},
      {Treatment::Ignored,
       "the optimizer's hyper-parameters (weight decay, clipping, Adam's betas and epsilon)",
       {
        {"--weight-decay", V}, {"--start-weight-decay", V}, {"--end-weight-decay", V},
        {"--weight-decay-incr-style", V}, {"--clip-grad", V}, {"--adam-beta1", V}, {"--adam-beta2", V},
        {"--adam-eps", V}}},
      {Treatment::Ignored,
       "the loss scaler (fp16)",
       {
        {"--loss-scale", V}, {"--initial-loss-scale", V}, {"--min-loss-scale", V}, {"--loss-scale-window", V},
        {"--hysteresis", V}}},
      {Treatment::Ignored,
       "the learning rate and its schedule",
       {
        {"--lr", V}, {"--lr-decay-style", V}, {"--lr-wsd-decay-style", V}, {"--lr-decay-iters", V},
        {"--lr-decay-samples", V}, {"--lr-wsd-decay-samples", V}, {"--lr-wsd-decay-iters", V},
        {"--lr-warmup-fraction", V}, {"--lr-warmup-iters", V}, {"--lr-warmup-samples", V}, {"--lr-warmup-init", V},
        {"--min-lr", V}, {"--override-opt_param-scheduler", S}, {"--use-checkpoint-opt_param-scheduler", S},
        {"--decoupled-lr", V}, {"--decoupled-min-lr", V}}},
      {Treatment::Ignored,
       "initialisation",
       {
        {"--init-method-std", V}, {"--embedding-init-method-std", V}, {"--init-method-xavier-uniform", S},
        {"--use-cpu-initialization", S}, {"--no-initialization", S}, {"--init-model-with-meta-device", S}}},
      {Treatment::Ignored,
       "the length of training, exits and evaluation",
       {
        {"--train-iters", V}, {"--train-samples", V}, {"--exit-interval", V}, {"--exit-duration-in-mins", V},
        {"--exit-signal-handler", S}, {"--full-validation", S}, {"--multiple-validation-sets", S},
        {"--eval-iters", V}, {"--eval-interval", V}, {"--test-mode", S}, {"--iterations-to-skip", L1},
        {"--result-rejected-tracker-filename", V}, {"--decrease-batch-size-if-needed", S},
        {"--calculate-per-token-loss", S}}},
      {Treatment::Ignored,
       "loss and gradient checks",
       {
        {"--no-check-for-nan-in-loss-and-grad", S}, {"--check-for-spiky-loss", S}, {"--check-for-large-grads", S}}},
      {Treatment::Ignored,
       "checkpoints (saving, loading, formats, intervals)",
       {
        {"--save", V}, {"--save-interval", V}, {"--persistent-save-interval", V}, {"--save-retain-interval", V},
        {"--no-save-optim", S}, {"--no-save-rng", S}, {"--load", V}, {"--no-load-optim", S},
        {"--load-main-params-from-ckpt", S}, {"--no-load-rng", S}, {"--no-strict-fsdp-dtensor-load", S},
        {"--non-persistent-save-interval", V}, {"--non-persistent-ckpt-type", V},
        {"--non-persistent-global-ckpt-dir", V}, {"--non-persistent-local-ckpt-dir", V},
        {"--non-persistent-local-ckpt-algo", V}, {"--finetune", S}, {"--pretrained-checkpoint", V},
        {"--ckpt-step", V}, {"--no-use-tokenizer-model-from-checkpoint-args", S},
        {"--exit-on-missing-checkpoint", S}, {"--use-dist-ckpt", S}, {"--use-persistent-ckpt-worker", S},
        {"--auto-detect-ckpt-format", S}, {"--dist-ckpt-format", V}, {"--ckpt-format", V},
        {"--ckpt-convert-format", V}, {"--ckpt-convert-save", V},
        {"--ckpt-convert-update-legacy-dist-opt-format", S}, {"--ckpt-fully-parallel-save", S},
        {"--no-ckpt-fully-parallel-save", S}, {"--async-save", S}, {"--ckpt-fully-parallel-load", S},
        {"--ckpt-assume-constant-structure", S}, {"--dist-ckpt-strictness", V}, {"--load-model-opt-format", S},
        {"--replication", S}, {"--replication-jump", V}, {"--replication-factor", V}, {"--adlr-autoresume", S},
        {"--adlr-autoresume-interval", V}, {"--disable-msc", S}}},
      {Treatment::Ignored,
       "the distributed backend, process groups, timeouts and rank",
       {
        {"--distributed-backend", V}, {"--distributed-timeout-minutes", V}, {"--local-rank", V},
        {"--lazy-mpu-init", V}, {"--disable-gloo-process-groups", S}, {"--tp-comm-bootstrap-backend", V}}},
      {Treatment::Ignored,
       "settings of --tp-comm-overlap (no effect without it)",
       {
        {"--tp-comm-overlap-cfg", V}, {"--disable-tp-comm-overlap-ag", S}, {"--disable-tp-comm-overlap-rs", S},
        {"--tp-comm-overlap-rs-dgrad", S}, {"--disable-tp-comm-bulk-dgrad", S},
        {"--disable-tp-comm-bulk-wgrad", S}, {"--disable-tp-comm-split-ag", S}, {"--disable-tp-comm-split-rs", S}}},
      {Treatment::Ignored,
       "settings of --overlap-grad-reduce and --overlap-param-gather (no effect without them)",
       {
        {"--no-align-grad-reduce", S}, {"--no-align-param-gather", S}}},
      {Treatment::Ignored,
       "settings of the distributed optimizer and FSDP (no effect without them)",
       {
        {"--num-distributed-optimizer-instances", V}, {"--data-parallel-sharding-strategy", V},
        {"--fsdp-double-buffer", S}, {"--suggested-communication-unit-size", V},
        {"--enable-full-sharding-in-hsdp", S}, {"--torch-fsdp2-no-reshard-after-forward", S}}},
      {Treatment::Ignored,
       "settings of optimizer offload and the precision-aware optimizer (no effect without them)",
       {
        {"--optimizer-offload-fraction", V}, {"--use-torch-optimizer-for-cpu-offload", S},
        {"--overlap-cpu-optimizer-d2h-h2d", S}, {"--no-pin-cpu-grads", S}, {"--no-pin-cpu-params", S},
        {"--main-params-dtype", V}, {"--exp-avg-dtype", V}, {"--exp-avg-sq-dtype", V}}},
      {Treatment::Ignored,
       "settings of mixture of experts that change neither time nor memory in pipegrid's model (router numerics and "
       "groups, load-balancing losses, the dispatcher's implementation; the experts are timed as grouped GEMMs; no "
       "effect without --num-experts)",
       {
        {"--moe-shared-expert-overlap", S}, {"--moe-grouped-gemm", S}, {"--moe-use-legacy-grouped-gemm", S},
        {"--moe-extended-tp", S}, {"--moe-use-upcycling", S}, {"--moe-router-load-balancing-type", L1},
        {"--moe-router-dtype", V}, {"--moe-router-fusion", S}, {"--moe-router-score-function", V},
        {"--moe-router-pre-softmax", S}, {"--moe-router-num-groups", V},
        {"--moe-router-group-topk", V}, {"--moe-router-topk-scaling-factor", V},
        {"--moe-router-enable-expert-bias", S}, {"--moe-router-bias-update-rate", V},
        {"--moe-router-force-load-balancing", S}, {"--moe-router-padding-for-fp8", S},
        {"--moe-aux-loss-coeff", L1}, {"--moe-z-loss-coeff", V}, {"--moe-input-jitter-eps", V},
        {"--moe-token-dispatcher-type", V}, {"--moe-enable-deepep", S}, {"--moe-deepep-num-sms", V},
        {"--moe-permute-fusion", S}, {"--moe-token-drop-policy", V},
        {"--moe-apply-probs-on-input", S}, {"--moe-upcycling-granularity", V},
        {"--overlap-moe-expert-parallel-comm", S}}},
      {Treatment::Refused,
       "token dropping at an expert capacity is not modelled (pipegrid routes every token: dropless MoE, the release's "
       "default)",
       {
        {"--moe-expert-capacity-factor", V}, {"--moe-pad-expert-input-to-capacity", S}}},
      {Treatment::Ignored,
       "rotary scaling of multi-latent attention (the same work)",
       {
        {"--rotary-scaling-factor", V}, {"--mscale", V}, {"--mscale-all-dim", V},
        {"--cache-mla-latents", S}}},
      {Treatment::Ignored,
       "settings of weight-gradient deferral (no effect without --defer-embedding-wgrad-compute)",
       {
        {"--wgrad-deferral-limit", V}}},
      {Treatment::Ignored,
       "arguments this release no longer uses",
       {
        {"--no-async-tensor-model-parallel-allreduce", S}, {"--no-scatter-gather-tensors-in-pipeline", S}}},
      {Treatment::Ignored,
       "settings of --sequence-parallel (no effect without it)",
       {
        {"--no-clone-scatter-output-in-embedding", S}}},
      {Treatment::Noted,
       "experimental features: pipegrid models none of them",
       {
        {"--enable-experimental", S}}},
      {Treatment::Ignored,
       "data, tokenizer files and the data loader",
       {
        {"--vocab-file", V}, {"--merge-file", V}, {"--tokenizer-model", V}, {"--tiktoken-pattern", V},
        {"--tiktoken-num-special-tokens", V}, {"--tiktoken-special-tokens", L1}, {"--data-path", L},
        {"--split", V}, {"--train-data-path", L}, {"--valid-data-path", L}, {"--test-data-path", L},
        {"--data-args-path", V}, {"--per-split-data-args-path", V}, {"--data-cache-path", V},
        {"--no-mmap-bin-files", S}, {"--mock-data", S}, {"--sample-rate", V}, {"--num-workers", V},
        {"--reset-position-ids", S}, {"--reset-attention-mask", S}, {"--eod-mask-loss", S},
        {"--no-create-attention-mask-in-dataloader", S}, {"--num-dataset-builder-threads", V},
        {"--object-storage-cache-path", V}, {"--mid-level-dataset-surplus", V}, {"--dataloader-type", V},
        {"--sft", S}, {"--sft-tokenizer-prompt-format", V}}},
  };
  return all;
}
// clang-format on


struct Known {
  Arity arity;
  Treatment treatment;
  const char* reason;
};

const std::map<std::string, Known, std::less<>>& known_arguments() {
  static const std::map<std::string, Known, std::less<>> known = [] {
    std::map<std::string, Known, std::less<>> all;
    for (const Group& group : groups())
      for (const auto& [name, arity] : group.arguments) all.emplace(name, Known{arity, group.treatment, group.reason});
    return all;
  }();
  return known;
}

const std::vector<std::string>& known_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const auto& entry : known_arguments()) all.push_back(entry.first);
    return all;
  }();
  return names;
}

// ---------------------------------------------------------------- words

/// Where a message points: the origin, and the line where the text has
/// several.
struct Origin {
  std::string name;
  bool lines = false;

  std::string at(int line) const { return lines && line > 0 ? fmt::format("{}:{}", name, line) : name; }
  [[noreturn]] void fail(int line, const std::string& message) const { throw InputError(at(line) + ": " + message); }
};

enum class WordKind { Word, Newline, Operator };

struct Word {
  WordKind kind = WordKind::Word;
  std::string text;
  int line = 0;
  std::size_t offset = 0;  ///< where it starts in the text
};

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool is_operator_char(char c) { return c == '|' || c == '&' || c == ';' || c == '<' || c == '>' || c == '(' || c == ')'; }

/// Throws for a shell expansion starting at text[at] == '$' (a variable,
/// ${...}, $(...), a special parameter); returns for a literal '$'.
void refuse_expansion(const std::string& text, std::size_t at, int line, const Origin& origin) {
  const char next = at + 1 < text.size() ? text[at + 1] : '\0';
  const auto refuse = [&](const std::string& written, const std::string& what) {
    origin.fail(line, fmt::format("{}: {}; expand it before passing the arguments", printable(written), what));
  };
  if (is_name_start(next)) {
    std::size_t end = at + 1;
    while (end < text.size() && is_name_char(text[end])) ++end;
    refuse(text.substr(at, end - at), "an unexpanded shell variable");
  }
  if (next == '{') {
    const std::size_t close = text.find('}', at);
    const std::string written = text.substr(at, close == std::string::npos ? std::string::npos : close + 1 - at);
    std::size_t end = at + 2;
    while (end < text.size() && (is_name_char(text[end]) || std::string_view("@*#?!$-").find(text[end]) != std::string_view::npos)) {
      ++end;
      if (!is_name_char(text[end - 1])) break;
    }
    refuse(written, fmt::format("an unexpanded shell variable ({})", printable(text.substr(at + 2, end - at - 2))));
  }
  if (next == '(') refuse("$(...)", "a command substitution");
  if (std::isdigit(static_cast<unsigned char>(next)) != 0 || std::string_view("@*#?!$-").find(next) != std::string_view::npos)
    refuse(text.substr(at, 2), "an unexpanded shell parameter");
}

/// The words of `text` as a shell splits them (without expanding anything),
/// with unescaped newlines and shell operators as words of their own.
std::vector<Word> split_words(const std::string& text, const Origin& origin) {
  std::vector<Word> words;
  std::string current;
  bool in_word = false, quoted = false;
  int line = 1, word_line = 1;
  std::size_t i = 0, word_offset = 0;
  const auto start = [&] {
    if (!in_word) {
      in_word = true;
      word_line = line;
      word_offset = i;
    }
  };
  const auto finish = [&] {
    if (in_word) words.push_back({WordKind::Word, current, word_line, word_offset});
    current.clear();
    in_word = quoted = false;
  };
  const std::size_t n = text.size();
  while (i < n) {
    const char c = text[i];
    if (c == '\n') {
      finish();
      words.push_back({WordKind::Newline, "", line, i});
      ++line;
      ++i;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      finish();
      ++i;
    } else if (c == '#' && !in_word) {  // a comment, to the end of the line
      while (i < n && text[i] != '\n') ++i;
    } else if (c == '\\') {
      if (i + 1 < n && text[i + 1] == '\n') {  // a continuation
        i += 2;
        ++line;
      } else if (i + 2 < n && text[i + 1] == '\r' && text[i + 2] == '\n') {
        i += 3;
        ++line;
      } else {
        start();
        quoted = true;
        current += i + 1 < n ? text[i + 1] : '\\';
        i += 2;
      }
    } else if (c == '\'') {
      start();
      quoted = true;
      const int opened = line;
      const std::size_t close = text.find('\'', i + 1);
      if (close == std::string::npos) origin.fail(opened, "a single quote opened here is never closed");
      const std::string inside = text.substr(i + 1, close - i - 1);
      line += static_cast<int>(std::count(inside.begin(), inside.end(), '\n'));
      current += inside;
      i = close + 1;
    } else if (c == '"') {
      start();
      quoted = true;
      const int opened = line;
      ++i;
      for (;;) {
        if (i >= n) origin.fail(opened, "a double quote opened here is never closed");
        const char d = text[i];
        if (d == '"') {
          ++i;
          break;
        }
        if (d == '\\' && i + 1 < n && std::string_view("\"\\$`\n").find(text[i + 1]) != std::string_view::npos) {
          if (text[i + 1] == '\n') ++line;
          else current += text[i + 1];
          i += 2;
          continue;
        }
        if (d == '$') refuse_expansion(text, i, line, origin);
        if (d == '`') origin.fail(line, "`...`: a command substitution; expand it before passing the arguments");
        if (d == '\n') ++line;
        current += d;
        ++i;
      }
    } else if (c == '$') {
      refuse_expansion(text, i, line, origin);
      start();
      current += c;
      ++i;
    } else if (c == '`') {
      origin.fail(line, "`...`: a command substitution; expand it before passing the arguments");
    } else if (is_operator_char(c)) {
      // 2>&1, 2>file: the descriptor belongs to the redirection.
      const bool descriptor = in_word && !quoted && (c == '<' || c == '>') &&
                              std::all_of(current.begin(), current.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)) != 0; });
      std::string op = descriptor ? current : "";
      const std::size_t op_offset = descriptor ? word_offset : i;
      if (descriptor) {
        current.clear();
        in_word = quoted = false;
      } else {
        finish();
      }
      while (i < n && is_operator_char(text[i])) op += text[i++];
      words.push_back({WordKind::Operator, op, line, op_offset});
    } else {
      start();
      current += c;
      ++i;
    }
  }
  finish();
  return words;
}

std::string joined(const std::vector<Word>& words, std::size_t begin, std::size_t end) {
  std::string text;
  for (std::size_t i = begin; i < end; ++i)
    if (words[i].kind != WordKind::Newline) text += (text.empty() ? "" : " ") + words[i].text;
  return text;
}

/// At most `limit` characters of `text`, "..." marking a cut.
std::string shortened(const std::string& text, std::size_t limit = 120) {
  return text.size() <= limit ? text : text.substr(0, limit) + "...";
}

// ---------------------------------------------------------------- arguments

/// One argument as the launch gives it.
struct Given {
  std::string name;                 ///< with "--"
  const Known* known = nullptr;
  std::vector<std::string> values;  ///< none for a switch
  std::string as_given;             ///< "--lr 1e-4", "--lr=1e-4", "--swiglu"
  int line = 0;
};

/// argparse's test for a word that is a value although it starts with '-':
/// a negative number (-1, -.5, -0.25).
bool looks_like_negative_number(const std::string& word) {
  if (word.size() < 2 || word[0] != '-') return false;
  const std::string rest = word.substr(1);
  const std::size_t dot = rest.find('.');
  const auto digits = [](const std::string& part) {
    return std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
  };
  if (dot == std::string::npos) return digits(rest);
  return digits(rest.substr(0, dot)) && dot + 1 < rest.size() && digits(rest.substr(dot + 1));
}

bool is_value_word(const Word& word) {
  return word.kind == WordKind::Word && (word.text.empty() || word.text[0] != '-' || looks_like_negative_number(word.text));
}

std::vector<Given> parse_arguments(const std::vector<Word>& words, std::size_t begin, std::size_t end, const Origin& origin) {
  std::vector<Given> given;
  std::vector<const Word*> list;
  for (std::size_t i = begin; i < end; ++i)
    if (words[i].kind == WordKind::Word) list.push_back(&words[i]);
  for (std::size_t i = 0; i < list.size();) {
    const Word& word = *list[i];
    if (word.text.rfind("--", 0) != 0) {
      if (!given.empty() && given.back().known->arity == Arity::Switch && given.back().line > 0 && i > 0 &&
          list[i - 1]->text == given.back().as_given)
        origin.fail(word.line, fmt::format("'{}': expected an argument (--name), found a value; {} is a switch and takes none",
                                           printable(word.text), given.back().name));
      origin.fail(word.line, fmt::format("'{}': expected an argument (--name), found a word that is not one (Megatron-LM "
                                         "takes no positional arguments)",
                                         printable(word.text)));
    }
    Given argument;
    argument.line = word.line;
    const std::size_t equals = word.text.find('=');
    argument.name = word.text.substr(0, equals);
    const auto known = known_arguments().find(argument.name);
    if (known == known_arguments().end())
      origin.fail(word.line, fmt::format("{}: not an argument of Megatron-LM {}{}", printable(argument.name), kMegatronRelease,
                                         did_you_mean(argument.name, known_names())));
    argument.known = &known->second;
    argument.as_given = word.text;
    ++i;
    const Arity arity = argument.known->arity;
    if (equals != std::string::npos) {
      if (arity == Arity::Switch)
        origin.fail(word.line, fmt::format("{}: a switch takes no value, found '={}'", argument.name,
                                           printable(word.text.substr(equals + 1))));
      argument.values.push_back(word.text.substr(equals + 1));
    } else if (arity == Arity::One || arity == Arity::OneOrMore) {
      if (i >= list.size() || !is_value_word(*list[i]))
        origin.fail(word.line, fmt::format("{}: expected a value, found {}", argument.name,
                                           i >= list.size() ? std::string("the end of the arguments")
                                                            : fmt::format("the argument {}", printable(list[i]->text))));
      argument.values.push_back(list[i]->text);
      argument.as_given += " " + list[i]->text;
      ++i;
    }
    if (equals == std::string::npos && (arity == Arity::Any || arity == Arity::OneOrMore))
      while (i < list.size() && is_value_word(*list[i])) {
        argument.values.push_back(list[i]->text);
        argument.as_given += " " + list[i]->text;
        ++i;
      }
    if (argument.known->treatment == Treatment::Retired) origin.fail(word.line, argument.name + ": " + argument.known->reason);
    given.push_back(std::move(argument));
  }
  return given;
}

// ---------------------------------------------------------------- values

/// The arguments given, by name (the last of a repeated one wins, as in
/// argparse), with typed access; every error names the argument and its
/// line.
class Arguments {
 public:
  Arguments(std::vector<Given> given, const Origin& origin) : given_(std::move(given)), origin_(origin) {
    for (const Given& argument : given_) last_[argument.name] = &argument;
  }

  const std::vector<Given>& all() const { return given_; }
  bool has(const std::string& name) const { return last_.count(name) != 0; }
  const Given* get(const std::string& name) const {
    const auto found = last_.find(name);
    return found == last_.end() ? nullptr : found->second;
  }

  /// The origin and the argument's line, as a message begins.
  std::string where(const Given& argument) const { return origin_.at(argument.line); }

  [[noreturn]] void fail(const std::string& name, const std::string& message) const {
    const Given* argument = get(name);
    origin_.fail(argument ? argument->line : 0, name + ": " + message);
  }
  [[noreturn]] void fail(const Given& argument, const std::string& message) const {
    origin_.fail(argument.line, argument.name + ": " + message);
  }

  /// The integer value of `name` in [low, high]; nullopt when not given.
  std::optional<long long> integer(const std::string& name, long long low, long long high) const {
    const Given* argument = get(name);
    if (!argument) return std::nullopt;
    const std::string& text = argument->values.at(0);
    long long value = 0;
    const char* first = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
    const char* last = text.data() + text.size();
    const auto [stop, status] = std::from_chars(first, last, value);
    if (status != std::errc() || stop != last || first == last || value < low || value > high)
      fail(*argument, fmt::format("expected an integer from {} to {}, found '{}'", low, high, printable(text)));
    return value;
  }

  /// The number value of `name` (finite, in [low, high]); nullopt when not given.
  std::optional<double> number(const std::string& name, double low, double high) const {
    const Given* argument = get(name);
    if (!argument) return std::nullopt;
    const std::string& text = argument->values.at(0);
    char* stop = nullptr;
    const double value = text.empty() ? 0 : std::strtod(text.c_str(), &stop);
    if (text.empty() || stop != text.c_str() + text.size() || !std::isfinite(value) || value < low || value > high)
      fail(*argument, fmt::format("expected a number from {} to {}, found '{}'", low, high, printable(text)));
    return value;
  }

  /// The value of `name`, one of `choices`; `fallback` when not given.
  std::string choice(const std::string& name, const std::vector<std::string>& choices, const std::string& fallback) const {
    const Given* argument = get(name);
    if (!argument) return fallback;
    const std::string& text = argument->values.at(0);
    if (std::find(choices.begin(), choices.end(), text) == choices.end()) {
      std::string list;
      for (const std::string& choice : choices) list += (list.empty() ? "" : ", ") + choice;
      std::string suggestion = did_you_mean(text, choices);
      for (const std::string& choice : choices)
        if (std::equal(choice.begin(), choice.end(), text.begin(), text.end(), [](char x, char y) {
              return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
            }))
          suggestion = " (did you mean '" + choice + "'?)";
      fail(*argument, fmt::format("expected one of {}, found '{}'{}", list, printable(text), suggestion));
    }
    return text;
  }

 private:
  std::vector<Given> given_;
  std::map<std::string, const Given*> last_;
  const Origin& origin_;
};

constexpr long long kMaxLayers = 100000;
constexpr long long kMaxParallel = 100000;
constexpr long long kMaxMicroBatch = 1000000;
constexpr long long kMaxGlobalBatch = 1000000000000LL;

[[noreturn]] void refuse(const Arguments& arguments, const Given& argument, const std::string& why) {
  arguments.fail(argument, fmt::format("not modelled: {}; drop it to simulate without it", why));
}

/// Megatron-LM's --moe-layer-freq string form, a Python expression of
/// integer lists ("([0]*3+[1]*58)", "[1,0,1,0]"): sums of terms, each an
/// integer list (or a parenthesised sum) repeated by "* N" (either side).
/// The list; InputError naming the argument for anything else.
class LayerPatternParser {
 public:
  LayerPatternParser(const std::string& text, const Arguments& arguments) : text_(text), arguments_(arguments) {}
  std::vector<int> parse() {
    std::vector<int> list = sum();
    skip();
    if (at_ != text_.size()) fail("unexpected '" + std::string(1, text_[at_]) + "'");
    return list;
  }

 private:
  void skip() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool take(char c) {
    skip();
    if (at_ < text_.size() && text_[at_] == c) return ++at_, true;
    return false;
  }
  [[noreturn]] void fail(const std::string& what) const {
    arguments_.fail("--moe-layer-freq", fmt::format("expected an integer N (every N-th layer MoE) or a list expression "
                                                    "such as \"([0]*3+[1]*58)\" of 0 (dense) and 1 (MoE); {} in '{}'",
                                                    what, printable(text_)));
  }
  long long integer() {
    skip();
    const std::size_t begin = at_;
    while (at_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_]))) ++at_;
    if (begin == at_ || at_ - begin > 6) fail("expected a small non-negative integer at offset " + std::to_string(begin));
    return std::stoll(text_.substr(begin, at_ - begin));
  }
  std::vector<int> sum() {
    std::vector<int> list = product();
    while (take('+')) {
      const std::vector<int> more = product();
      list.insert(list.end(), more.begin(), more.end());
    }
    return list;
  }
  std::vector<int> product() {
    long long times = 1;
    skip();
    if (at_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_]))) {  // N * [list]
      times = integer();
      if (!take('*')) fail("expected '*' after a repeat count");
    }
    std::vector<int> item = atom();
    while (take('*')) times *= integer();
    if (times * static_cast<long long>(item.size()) > kMaxPatternLayers) fail("the list is too long");
    std::vector<int> list;
    for (long long k = 0; k < times; ++k) list.insert(list.end(), item.begin(), item.end());
    return list;
  }
  std::vector<int> atom() {
    if (take('(')) {
      std::vector<int> inner = sum();
      if (!take(')')) fail("expected ')'");
      return inner;
    }
    if (!take('[')) fail("expected '[' or '('");
    std::vector<int> list;
    if (take(']')) return list;
    do {
      const long long value = integer();
      if (value > 1) fail("expected 0 or 1 in the list, found " + std::to_string(value));
      list.push_back(static_cast<int>(value));
    } while (take(','));
    if (!take(']')) fail("expected ']'");
    return list;
  }
  static constexpr long long kMaxPatternLayers = 100000;
  const std::string& text_;
  const Arguments& arguments_;
  std::size_t at_ = 0;
};

/// The gpt model's MoE, multi-head latent attention and multi-token
/// prediction options from Megatron-LM core_v0.14.0's arguments
/// (megatron/training/arguments.py: --num-experts, --moe-router-topk
/// (default 2), --moe-ffn-hidden-size (default --ffn-hidden-size),
/// --moe-shared-expert-intermediate-size, --moe-layer-freq (default 1: an
/// int N makes layer i MoE when i % N == 0; a list gives each layer),
/// --multi-latent-attention with --q-lora-rank (None), --kv-lora-rank
/// (32), --qk-head-dim (128), --qk-pos-emb-head-dim (64), --v-head-dim
/// (128), --mtp-num-layers). A --moe-layer-freq list the model's options
/// (moe_dense_first dense blocks, then every moe_layer_freq-th MoE) cannot
/// state is refused.
std::map<std::string, long long> moe_and_mla_options(const Arguments& a, long long layers, std::vector<std::string>& notes) {
  std::map<std::string, long long> options;
  const long long experts = a.integer("--num-experts", 0, kModelOptionCap).value_or(0);
  if (experts > 0) {
    options["num_experts"] = experts;
    if (const auto topk = a.integer("--moe-router-topk", 1, kModelOptionCap)) {
      if (*topk > experts)
        a.fail("--moe-router-topk", fmt::format("expected at most --num-experts ({}) experts per token, found {}", experts, *topk));
      options["moe_topk"] = *topk;
    }
    if (const auto ffn = a.integer("--moe-ffn-hidden-size", 1, kModelOptionCap)) options["moe_ffn"] = *ffn;
    if (const auto shared = a.integer("--moe-shared-expert-intermediate-size", 1, kModelOptionCap))
      options["moe_shared_ffn"] = *shared;
    if (const Given* freq = a.get("--moe-layer-freq")) {
      const std::string& text = freq->values.at(0);
      const bool number = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
      if (number) {
        options["moe_layer_freq"] = *a.integer("--moe-layer-freq", 1, kMaxLayers);
      } else {
        const std::vector<int> pattern = LayerPatternParser(text, a).parse();
        if (static_cast<long long>(pattern.size()) != layers)
          a.fail("--moe-layer-freq", fmt::format("Invalid length of moe_layer_pattern: {}, expected: {}, current moe "
                                                 "layer pattern: {}",
                                                 pattern.size(), layers, printable(text)));
        long long dense_first = 0;
        while (dense_first < layers && pattern[static_cast<std::size_t>(dense_first)] == 0) ++dense_first;
        long long freq_n = 1;
        if (dense_first < layers) {
          long long next = dense_first + 1;
          while (next < layers && pattern[static_cast<std::size_t>(next)] == 0) ++next;
          freq_n = next < layers ? next - dense_first : std::max<long long>(1, layers - dense_first);
        }
        for (long long i = 0; i < layers; ++i) {
          const int expected = i >= dense_first && (i - dense_first) % freq_n == 0 ? 1 : 0;
          if (pattern[static_cast<std::size_t>(i)] != expected)
            refuse(a, *freq, fmt::format("a layer pattern other than N dense first layers then every M-th layer MoE "
                                         "(layer {} breaks it)",
                                         i + 1));
        }
        options["moe_dense_first"] = dense_first;
        options["moe_layer_freq"] = freq_n;
      }
    }
  } else {
    for (const char* name : {"--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
                             "--moe-layer-freq"})
      if (const Given* given = a.get(name)) notes.push_back(given->as_given + ": no effect without --num-experts");
  }
  if (a.has("--multi-latent-attention")) {
    options["mla"] = 1;
    if (const auto rank = a.integer("--q-lora-rank", 1, kModelOptionCap)) options["q_lora_rank"] = *rank;
    const std::pair<const char*, const char*> dims[] = {{"--kv-lora-rank", "kv_lora_rank"},
                                                        {"--qk-head-dim", "qk_head_dim"},
                                                        {"--v-head-dim", "v_head_dim"}};
    for (const auto& [flag, option] : dims)
      if (const auto value = a.integer(flag, 1, kModelOptionCap)) options[option] = *value;
    if (const auto rope = a.integer("--qk-pos-emb-head-dim", 0, kModelOptionCap)) options["qk_pos_emb_head_dim"] = *rope;
    if (!a.has("--kv-lora-rank"))
      notes.push_back("--kv-lora-rank: 32, the release's default (DeepSeek-V2/V3 use 512)");
  } else {
    for (const char* name : {"--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim"})
      if (const Given* given = a.get(name)) notes.push_back(given->as_given + ": no effect without --multi-latent-attention");
  }
  if (const auto mtp = a.integer("--mtp-num-layers", 0, 100); mtp && *mtp > 0) options["mtp_layers"] = *mtp;
  return options;
}

/// The refusals that depend on nothing but the argument, in the order the
/// launch gives them.
void refuse_unmodelled(const Arguments& arguments) {
  for (const Given& argument : arguments.all()) {
    const std::string& name = argument.name;
    const std::string value = argument.values.empty() ? "" : argument.values[0];
    switch (argument.known->treatment) {
      case Treatment::Refused: refuse(arguments, argument, argument.known->reason);
      default: break;
    }
    if (name == "--use-legacy-models")
      refuse(arguments, argument, "pipegrid follows the Megatron-Core GPT model (the release's default)");
    if (name == "--vocab-extra-ids" && arguments.integer(name, 0, kModelOptionCap) > 0)
      refuse(arguments, argument, "extra vocabulary ids (T5's sentinels) are not in the gpt model");
    if (name == "--position-embedding-type" &&
        arguments.choice(name, {"learned_absolute", "rope", "mrope", "relative", "none"}, "") != "learned_absolute" &&
        value != "rope")
      refuse(arguments, argument, "the gpt model has learned absolute (learned_absolute) or rotary (rope) positions");
    if (name == "--add-qkv-bias" && arguments.has("--disable-bias-linear"))
      refuse(arguments, argument, "biases in the Q, K, V projection alone (with --disable-bias-linear)");
  }
}

/// The vocabulary Megatron builds the model with (padded_vocab_size) and
/// what a reader should know about it. Megatron pads the tokenizer's
/// vocabulary to a multiple of --make-vocab-size-divisible-by x tensor
/// parallel (tokenizer.py, _vocab_size_with_padding) unless
/// --padded-vocab-size gives it.
long long vocabulary_of(const Arguments& arguments, int tensor_parallel, std::vector<std::string>& notes) {
  const long long divisible_by = arguments.integer("--make-vocab-size-divisible-by", 1, kModelOptionCap).value_or(128);
  if (const auto padded = arguments.integer("--padded-vocab-size", 1, kModelOptionCap)) {
    notes.push_back(fmt::format("vocabulary: {} as --padded-vocab-size gives it (Megatron pads nothing more)", *padded));
    return *padded;
  }
  // pretrain_gpt.py's args_defaults: tokenizer_type GPT2BPETokenizer.
  const std::string tokenizer = arguments.choice(
      "--tokenizer-type",
      {"BertWordPieceLowerCase", "BertWordPieceCase", "GPT2BPETokenizer", "SentencePieceTokenizer", "GPTSentencePieceTokenizer",
       "HuggingFaceTokenizer", "Llama2Tokenizer", "TikTokenizer", "MultimodalTokenizer", "NullTokenizer",
       "NullMultimodalTokenizer", "SFTTokenizer"},
      "GPT2BPETokenizer");
  const std::optional<long long> vocab_size = arguments.integer("--vocab-size", 1, kModelOptionCap);
  long long vocabulary = 0;
  std::string source;
  if (tokenizer == "NullTokenizer" || tokenizer == "NullMultimodalTokenizer") {
    if (!vocab_size)
      arguments.fail("--vocab-size", fmt::format("expected a value: --tokenizer-type {} takes its vocabulary from it, found "
                                                 "none",
                                                 tokenizer));
    vocabulary = *vocab_size + 1;
    source = fmt::format("--vocab-size {} + 1 (the {}'s end-of-document token)", *vocab_size, tokenizer);
  } else if (tokenizer == "TikTokenizer") {
    vocabulary = vocab_size.value_or(131072);
    source = vocab_size ? fmt::format("--vocab-size {} (TikTokenizer)", *vocab_size)
                        : std::string("TikTokenizer's fallback 131072 (no --vocab-size)");
  } else if (vocab_size) {
    vocabulary = *vocab_size;
    source = fmt::format("--vocab-size {}, taken as the vocabulary of {} (Megatron reads it from the tokenizer's files, "
                         "which pipegrid does not)",
                         *vocab_size, tokenizer);
  } else if (tokenizer == "GPT2BPETokenizer") {
    vocabulary = 50257;
    source = "50257, GPT-2's vocabulary (GPT2BPETokenizer's --vocab-file read as gpt2-vocab.json; give --vocab-size or "
             "--padded-vocab-size for another)";
  } else {
    arguments.fail("--vocab-size",
                   fmt::format("expected the vocabulary's size: --tokenizer-type {} reads it from the tokenizer's files, which "
                               "pipegrid does not read; give --vocab-size (the tokenizer's vocabulary) or --padded-vocab-size, "
                               "found neither",
                               tokenizer));
  }
  const long long multiple = divisible_by * tensor_parallel;
  const long long padded = (vocabulary + multiple - 1) / multiple * multiple;
  if (padded > kModelOptionCap)
    arguments.fail("--vocab-size", fmt::format("expected a padded vocabulary of at most {}, found {}", kModelOptionCap, padded));
  notes.push_back(fmt::format("vocabulary: {} padded to {} (a multiple of --make-vocab-size-divisible-by {} x tensor parallel {})",
                              source, padded, divisible_by, tensor_parallel));
  return padded;
}

/// Checks the pipeline and virtual split of `layers` as the release does
/// (validate_args; TransformerConfig.__post_init__; get_num_layers_to_build)
/// and returns the virtual stages per pipeline rank.
int virtual_stages_of(const Arguments& arguments, long long layers, int pipeline, std::optional<int> first,
                      std::optional<int> last) {
  const auto per_virtual = arguments.integer("--num-layers-per-virtual-pipeline-stage", 1, kMaxLayers);
  const auto per_rank = arguments.integer("--num-virtual-stages-per-pipeline-rank", 1, kMaxLayers);
  if (per_virtual && per_rank)
    arguments.fail("--num-virtual-stages-per-pipeline-rank",
                   "No more than one of the following arguments can be set at the same time: "
                   "--num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank, "
                   "--pipeline-model-parallel-layout.");
  long long virtual_stages = 1;
  if (per_virtual) {
    if (first || last)
      arguments.fail("--num-layers-per-virtual-pipeline-stage",
                     "please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel degree when "
                     "enable uneven pipeline parallelism");
    if (layers % pipeline != 0)
      arguments.fail("--num-layers", fmt::format("number of layers of the model ({}) must be divisible by pipeline model "
                                                 "parallel size ({})",
                                                 layers, pipeline));
    const long long per_stage = layers / pipeline;
    if (per_stage % *per_virtual != 0)
      arguments.fail("--num-layers-per-virtual-pipeline-stage",
                     fmt::format("number of layers per pipeline stage ({}) must be divisible by number of layers per virtual "
                                 "pipeline stage ({})",
                                 per_stage, *per_virtual));
    virtual_stages = per_stage / *per_virtual;
  } else if (per_rank) {
    virtual_stages = *per_rank;
  }
  if (first || last) {
    const std::string name = first ? "--decoder-first-pipeline-num-layers" : "--decoder-last-pipeline-num-layers";
    if (pipeline < 2)
      arguments.fail(name, "expected --pipeline-model-parallel-size > 1 (a first or last stage of its own needs a "
                           "pipeline), found 1");
    long long middle_layers = layers;
    int middle_stages = pipeline;
    for (const auto& [stage, value, flag] : {std::tuple{"first", first, "--decoder-first-pipeline-num-layers"},
                                             std::tuple{"last", last, "--decoder-last-pipeline-num-layers"}}) {
      if (!value) continue;
      if (*value % virtual_stages != 0)
        arguments.fail(flag, fmt::format("number of layers at {} stage: {} must be divisible by virtual pipeline parallel "
                                         "degree {}",
                                         stage, *value, virtual_stages));
      middle_layers -= *value;
      --middle_stages;
    }
    if (middle_layers < 0 || (middle_stages == 0 && middle_layers != 0))
      arguments.fail(name, fmt::format("the first and last stages hold {} of the {} layers (--num-layers); expected {}",
                                       layers - middle_layers, layers,
                                       middle_stages == 0 ? "all of them: no middle stage is left" : "at most all of them"));
    if (middle_stages > 0 && middle_layers % middle_stages != 0)
      arguments.fail(name, fmt::format("number of layers at middle stage: {} must be divisible by the middle pipeline "
                                       "model parallel size {}",
                                       middle_layers, middle_stages));
    if (middle_stages > 0 && middle_layers / middle_stages % virtual_stages != 0)
      arguments.fail(name, fmt::format("number of layers on each middle pipeline rank: {} must be divisible by virtual "
                                       "pipeline parallel degree {}",
                                       middle_layers / middle_stages, virtual_stages));
    if (middle_stages > 0 && middle_layers == 0)
      arguments.fail(name, fmt::format("not modelled: {} middle stages without transformer layers; drop it to simulate "
                                       "without it",
                                       middle_stages));
  } else if (!per_virtual) {
    if (layers % pipeline != 0)
      arguments.fail("--num-layers", fmt::format("Number of layers ({}) should be divisible by the pipeline-model-parallel "
                                                 "size ({})",
                                                 layers, pipeline));
    if (layers / pipeline % virtual_stages != 0)
      arguments.fail("--num-virtual-stages-per-pipeline-rank",
                     fmt::format("num_layers_per_pipeline_rank {} should be divisible by vp_size {}", layers / pipeline,
                                 virtual_stages));
  }
  if (virtual_stages > 1) {
    const bool overlap_p2p = !arguments.has("--no-overlap-p2p-communication");
    const std::string name = per_virtual ? "--num-layers-per-virtual-pipeline-stage" : "--num-virtual-stages-per-pipeline-rank";
    if (overlap_p2p && pipeline <= 1)
      arguments.fail(name, "When interleaved schedule is used, pipeline-model-parallel size should be greater than 1");
    if (!overlap_p2p && pipeline <= 2)
      arguments.fail(name, "When interleaved schedule is used and p2p communication overlap is disabled, "
                           "pipeline-model-parallel size should be greater than 2 to avoid having multiple p2p sends and "
                           "recvs between same 2 ranks per communication batch");
  }
  return static_cast<int>(virtual_stages);
}

}  // namespace

const std::vector<MegatronArgument>& megatron_arguments() {
  static const std::vector<MegatronArgument> all = [] {
    std::vector<MegatronArgument> list;
    for (const Group& group : groups())
      for (const auto& [name, arity] : group.arguments)
        list.push_back({name, arity != Arity::Switch, group.treatment, group.reason});
    return list;
  }();
  return all;
}

MegatronLaunch read_megatron_args(const std::string& text, const std::string& origin_name) {
  const Origin origin{origin_name, text.find('\n') != std::string::npos};
  const std::vector<Word> words = split_words(text, origin);
  MegatronLaunch launch;
  std::vector<std::string>& notes = launch.notes;

  // The arguments: after the last word ending in .py to the end of its
  // command, or every word up to a shell operator.
  std::size_t script = words.size();
  for (std::size_t i = 0; i < words.size(); ++i)
    if (words[i].kind == WordKind::Word && words[i].text.size() > 3 &&
        words[i].text.compare(words[i].text.size() - 3, 3, ".py") == 0)
      script = i;
  std::size_t begin = 0, end = 0;
  if (script < words.size()) {
    std::size_t command = script;
    while (command > 0 && words[command - 1].kind == WordKind::Word) --command;
    notes.push_back("launcher, not read: " + shortened(joined(words, command, script + 1)));
    const std::size_t before =
        static_cast<std::size_t>(std::count_if(words.begin(), words.begin() + static_cast<long>(command),
                                               [](const Word& word) { return word.kind != WordKind::Newline; }));
    if (before > 0) {
      const auto first = std::find_if(words.begin(), words.end(), [](const Word& word) { return word.kind != WordKind::Newline; });
      notes.push_back(fmt::format("not read: the {} shell word{} before the command (from line {})", before,
                                  before == 1 ? "" : "s", first->line));
    }
    begin = end = script + 1;
    while (end < words.size() && words[end].kind == WordKind::Word) ++end;
  } else {
    while (end < words.size() && words[end].kind != WordKind::Operator) ++end;
  }
  if (std::any_of(words.begin() + static_cast<long>(end), words.end(),
                  [](const Word& word) { return word.kind != WordKind::Newline; })) {
    std::size_t next = end;
    while (words[next].kind == WordKind::Newline) ++next;
    // As written, to the end of its line ("..." when more follows).
    const std::size_t line_end = std::min(text.find('\n', words[next].offset), text.size());
    std::string rest = text.substr(words[next].offset, line_end - words[next].offset);
    while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.back())) != 0) rest.pop_back();
    const bool more = std::any_of(words.begin() + static_cast<long>(next), words.end(), [&](const Word& word) {
      return word.kind != WordKind::Newline && word.offset >= line_end;
    });
    notes.push_back(fmt::format("not read: what follows the arguments{}: {}{}",
                                origin.lines ? fmt::format(" (line {})", words[next].line) : "", shortened(rest),
                                more ? " ..." : ""));
  }

  const Arguments arguments(parse_arguments(words, begin, end, origin), origin);
  const auto& a = arguments;

  // Parallel sizes first: refusals and checks depend on them.
  const int tensor_parallel = static_cast<int>(a.integer("--tensor-model-parallel-size", 1, kMaxParallel).value_or(1));
  const int pipeline_parallel = static_cast<int>(a.integer("--pipeline-model-parallel-size", 1, kMaxParallel).value_or(1));
  refuse_unmodelled(a);

  // Number format (validate_args; TransformerConfig.__post_init__).
  if (a.has("--fp16") && a.has("--bf16"))
    a.fail("--bf16", "Only one of fp16 and bf16 should be True; found --fp16 and --bf16");
  const std::string dtype = a.has("--fp16") ? "fp16" : a.has("--bf16") ? "bf16" : "fp32";

  // Model size. Required: num_layers (or encoder_num_layers), hidden_size,
  // num_attention_heads, max_position_embeddings; seq_length (or
  // encoder_seq_length).
  const auto required = [&](const std::string& name, const std::string& why) {
    a.fail(name, fmt::format("expected a value ({}), found none", why));
  };
  std::optional<long long> layers = a.integer("--num-layers", 1, kMaxLayers);
  if (const auto encoder = a.integer("--encoder-num-layers", 1, kMaxLayers)) {
    if (layers) a.fail("--encoder-num-layers", "cannot have both num-layers and encoder-num-layers specified");
    layers = encoder;
  }
  if (!layers) required("--num-layers", "either num-layers or encoder-num-layers should be specified");
  const auto hidden = a.integer("--hidden-size", 1, kModelOptionCap);
  if (!hidden) required("--hidden-size", "Megatron-LM requires it");
  const auto heads = a.integer("--num-attention-heads", 1, kModelOptionCap);
  if (!heads) required("--num-attention-heads", "Megatron-LM requires it");
  if (*hidden % *heads != 0)
    a.fail("--hidden-size", fmt::format("expected a multiple of --num-attention-heads ({}), found {}", *heads, *hidden));
  if (const auto kv_channels = a.integer("--kv-channels", 1, kModelOptionCap);
      kv_channels && *kv_channels != *hidden / *heads && !a.has("--multi-latent-attention"))
    refuse(a, *a.get("--kv-channels"),
           fmt::format("heads of {} channels; the gpt model's are --hidden-size / --num-attention-heads = {} wide",
                       *kv_channels, *hidden / *heads));
  if (*heads % tensor_parallel != 0)
    a.fail("--num-attention-heads", fmt::format("num_attention_heads ({}) must be a multiple of tensor_model_parallel_size "
                                                "({}).",
                                                *heads, tensor_parallel));
  long long query_groups = *heads;
  const auto groups_given = a.integer("--num-query-groups", 1, kModelOptionCap);
  if (a.has("--group-query-attention")) {
    query_groups = groups_given.value_or(1);  // the release's default
    if (*heads % query_groups != 0)
      a.fail("--num-query-groups",
             fmt::format("expected a divisor of --num-attention-heads ({}), found {}", *heads, query_groups));
    if (query_groups % tensor_parallel != 0)
      a.fail("--num-query-groups", fmt::format("num_query_groups ({}) must be a multiple of tensor_model_parallel_size ({}).",
                                               query_groups, tensor_parallel));
    if (!groups_given)
      notes.push_back("--group-query-attention without --num-query-groups: 1 key/value group (the release's default)");
  } else if (groups_given) {
    notes.push_back(fmt::format("{}: no effect without --group-query-attention (multi-head attention)",
                                a.get("--num-query-groups")->as_given));
  }

  std::optional<long long> sequence = a.integer("--seq-length", 1, kModelOptionCap);
  if (const auto encoder = a.integer("--encoder-seq-length", 1, kModelOptionCap)) {
    if (sequence) a.fail("--encoder-seq-length", "expected it exclusive of --seq-length, found both");
    sequence = encoder;
  }
  if (!sequence) required("--seq-length", "Megatron-LM needs --seq-length or --encoder-seq-length");
  const auto positions = a.integer("--max-position-embeddings", 1, kModelOptionCap);
  if (!positions) required("--max-position-embeddings", "Megatron-LM requires it");
  if (*positions < *sequence)
    a.fail("--max-position-embeddings", fmt::format("max_position_embeddings ({}) must be greater than or equal to "
                                                    "seq_length ({}).",
                                                    *positions, *sequence));
  if (const auto decoder = a.integer("--decoder-seq-length", 1, kModelOptionCap); decoder && *positions < *decoder)
    a.fail("--max-position-embeddings", fmt::format("expected at least --decoder-seq-length ({}), found {}", *decoder, *positions));

  std::string position_type = a.choice("--position-embedding-type", {"learned_absolute", "rope", "mrope", "relative", "none"},
                                       "learned_absolute");
  if (a.has("--use-rotary-position-embeddings")) position_type = "rope";
  if (a.has("--no-position-embedding") && position_type != "rope")
    a.fail("--no-position-embedding", "--no-position-embedding is deprecated, use --position-embedding-type");
  const bool rotary = position_type == "rope";
  const std::string normalization = a.choice("--normalization", {"LayerNorm", "RMSNorm"}, "LayerNorm");
  const bool swiglu = a.has("--swiglu");
  if (swiglu && a.has("--squared-relu")) a.fail("--squared-relu", "expected it without --swiglu (the release asserts not swiglu)");
  long long ffn = 0;
  if (const auto given = a.integer("--ffn-hidden-size", 1, kModelOptionCap)) {
    ffn = *given;
  } else if (swiglu) {
    // validate_args: int((4 * hidden_size * 2 / 3) / 64) * 64.
    ffn = static_cast<long long>(4.0 * static_cast<double>(*hidden) * 2 / 3 / 64) * 64;
    if (ffn < 1)
      a.fail("--hidden-size", fmt::format("with --swiglu the default --ffn-hidden-size int((4 x {} x 2 / 3) / 64) x 64 is 0; "
                                          "give --ffn-hidden-size",
                                          *hidden));
    notes.push_back(fmt::format("--ffn-hidden-size: {} = int((4 x {} x 2 / 3) / 64) x 64, the release's default with --swiglu",
                                ffn, *hidden));
  } else {
    ffn = 4 * *hidden;
  }
  const long long vocabulary = vocabulary_of(a, tensor_parallel, notes);
  for (const char* dropout : {"--attention-dropout", "--hidden-dropout"})
    if (a.number(dropout, 0, 1) == 0.0)
      notes.push_back(fmt::format("{}: pipegrid's blocks keep their dropout masks (1 byte per element) and steps at any rate; "
                                  "at 0 Megatron skips them",
                                  a.get(dropout)->as_given));

  // Parallel layout.
  const auto first = a.integer("--decoder-first-pipeline-num-layers", 1, kMaxLayers);
  const auto last = a.integer("--decoder-last-pipeline-num-layers", 1, kMaxLayers);
  // The embedding and the loss may each count as a layer of the split
  // (TransformerConfig.account_for_*_in_pipeline_split): the release splits
  // L + 1 or L + 2 layers, and the first (last) stage builds one fewer.
  launch.embedding_in_pipeline_split = a.has("--account-for-embedding-in-pipeline-split");
  launch.loss_in_pipeline_split = a.has("--account-for-loss-in-pipeline-split");
  const int slots = (launch.embedding_in_pipeline_split ? 1 : 0) + (launch.loss_in_pipeline_split ? 1 : 0);
  if (slots > 0 && (first || last))
    a.fail(launch.embedding_in_pipeline_split ? "--account-for-embedding-in-pipeline-split"
                                              : "--account-for-loss-in-pipeline-split",
           "cannot be combined with --decoder-first-pipeline-num-layers or --decoder-last-pipeline-num-layers "
           "(uneven pipeline split)");
  launch.virtual_stages = virtual_stages_of(a, *layers + slots, pipeline_parallel, first, last);
  if (const auto group = a.integer("--microbatch-group-size-per-virtual-pipeline-stage", 1, kMaxParallel);
      group && *group != pipeline_parallel)
    refuse(a, *a.get("--microbatch-group-size-per-virtual-pipeline-stage"),
           fmt::format("pipegrid's interleaved 1F1B runs groups of --pipeline-model-parallel-size ({}) micro-batches, the "
                       "release's default",
                       pipeline_parallel));
  launch.tensor_parallel = tensor_parallel;
  launch.pipeline_parallel = pipeline_parallel;
  if (first) launch.decoder_first_pipeline_num_layers = static_cast<int>(*first);
  if (last) launch.decoder_last_pipeline_num_layers = static_cast<int>(*last);
  launch.schedule = megatron_schedule(launch.virtual_stages);
  // validate_args turns sequence parallelism off at tensor parallel 1.
  launch.sequence_parallel = a.has("--sequence-parallel") && tensor_parallel > 1;
  // Expert parallelism (megatron/core/parallel_state.py, the expert rank
  // generator; --expert-tensor-parallel-size defaults to the tensor size).
  launch.expert_parallel = static_cast<int>(a.integer("--expert-model-parallel-size", 1, kMaxParallel).value_or(1));
  launch.expert_tensor_parallel = static_cast<int>(a.integer("--expert-tensor-parallel-size", 1, kMaxParallel).value_or(0));
  if (a.has("--sequence-parallel") && tensor_parallel == 1)
    notes.push_back("--sequence-parallel: the release turns it off at tensor parallel 1");
  launch.tp_comm_overlap = a.has("--tp-comm-overlap");
  // Context parallelism: Transformer Engine's ring attention, --cp-comm-type
  // p2p (megatron/training/arguments.py, core_v0.14.0: the default; one type
  // for every layer, or one per layer).
  launch.context_parallel = static_cast<int>(a.integer("--context-parallel-size", 1, kMaxParallel).value_or(1));
  if (const Given* type = a.get("--cp-comm-type")) {
    for (const std::string& value : type->values) {
      if (value == "p2p") continue;
      if (value != "a2a" && value != "allgather" && value != "a2a+p2p")
        a.fail("--cp-comm-type", fmt::format("expected p2p, a2a, allgather or a2a+p2p, found '{}'", printable(value)));
      if (launch.context_parallel > 1)
        refuse(a, *type,
               fmt::format("--cp-comm-type {}: pipegrid models the ring attention of p2p (keys and values passed round "
                           "the ring, overlapped with the attention's blocks); {} exchanges differently",
                           value, value == "a2a" ? "a2a (Ulysses) all-to-alls the heads"
                                  : value == "allgather" ? "allgather gathers the whole keys and values first"
                                                         : "a2a+p2p runs a hierarchy of both"));
    }
    if (launch.context_parallel == 1) notes.push_back("--cp-comm-type: no effect at --context-parallel-size 1");
  }
  if (const Given* sizes = a.get("--hierarchical-context-parallel-sizes")) {
    // Trivial: one level, the whole context-parallel group (a plain ring).
    long long product = 1, levels = 0;
    for (const std::string& value : sizes->values) {
      char* end = nullptr;
      const long long size = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || size < 1 || size > kMaxParallel)
        a.fail("--hierarchical-context-parallel-sizes", fmt::format("expected sizes >= 1, found '{}'", printable(value)));
      product *= size;
      if (size > 1) ++levels;
    }
    if (launch.context_parallel > 1 && (product != launch.context_parallel || levels > 1))
      refuse(a, *sizes,
             fmt::format("hierarchical context parallelism (a2a+p2p over levels whose product is {}); pipegrid models "
                         "one p2p ring over the --context-parallel-size {} ranks",
                         product, launch.context_parallel));
    notes.push_back(launch.context_parallel > 1
                        ? "--hierarchical-context-parallel-sizes: one level, the whole context-parallel group (a plain "
                          "ring)"
                        : "--hierarchical-context-parallel-sizes: no effect at --context-parallel-size 1");
  }
  if (launch.tp_comm_overlap && !launch.sequence_parallel)
    a.fail("--tp-comm-overlap",
           "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is enabled");

  // Batches.
  const auto micro = a.integer("--micro-batch-size", 1, kMaxMicroBatch);
  if (!micro) required("--micro-batch-size", "Megatron-LM requires it");
  launch.micro_batch_size = static_cast<int>(*micro);
  launch.global_batch_size = a.integer("--global-batch-size", 1, kMaxGlobalBatch);
  if (launch.global_batch_size && *launch.global_batch_size % *micro != 0)
    a.fail("--global-batch-size", fmt::format("expected a multiple of --micro-batch-size ({}) times the data-parallel size, "
                                              "found {}",
                                              *micro, *launch.global_batch_size));

  // Recomputation (validate_args: --recompute-activations sets the
  // granularity selective, whatever was given; selective takes no method;
  // TransformerConfig.__post_init__: full takes a method and layers,
  // selective no layers).
  std::string granularity = a.choice("--recompute-granularity", {"full", "selective"}, "");
  const std::string method = a.choice("--recompute-method", {"uniform", "block"}, "");
  const auto recompute_layers = a.integer("--recompute-num-layers", 1, kMaxLayers);
  if (a.has("--recompute-activations")) {
    if (granularity == "full")
      notes.push_back(fmt::format("--recompute-activations: sets the granularity selective, replacing {}",
                                  a.get("--recompute-granularity")->as_given));
    granularity = "selective";
  }
  if (granularity == "selective") {
    if (!method.empty())
      a.fail("--recompute-method", "recompute method is not yet supported for selective recomputing granularity");
    if (recompute_layers)
      a.fail("--recompute-num-layers", "When using recompute_granularity: selective recompute_num_layers must be None.");
    launch.recompute.selective = true;
    if (const Given* modules = a.get("--recompute-modules")) {
      // Megatron-Core's modules other than the attention core are MoE's,
      // MLA's, the norms' and the MLP's; pipegrid recomputes the core only.
      if (modules->values != std::vector<std::string>{"core_attn"})
        refuse(arguments, *modules, "selective recomputation of modules other than the attention core (core_attn, the default)");
    }
  } else if (a.has("--recompute-modules")) {
    notes.push_back(fmt::format("{}: no effect without --recompute-granularity selective", a.get("--recompute-modules")->as_given));
  }
  if (granularity == "full") {
    if (method.empty())
      a.fail("--recompute-granularity", "Using recompute_granularity: full so recompute_method must be \"block\" or \"uniform\"");
    if (!recompute_layers)
      a.fail("--recompute-granularity", fmt::format("When using recompute_granularity: full recompute_num_layers must be between "
                                                    "1 and num_layers_per_pipeline_rank: {}",
                                                    *layers / pipeline_parallel));
    launch.recompute = {true, method, static_cast<int>(*recompute_layers)};
  } else {
    for (const char* name : {"--recompute-method", "--recompute-num-layers"})
      if (a.has(name)) notes.push_back(fmt::format("{}: no effect without --recompute-granularity", a.get(name)->as_given));
  }

  // Attention kernel: Megatron-Core picks it by --attention-backend
  // (--use-flash-attn only selects FlashAttention in the legacy models).
  const std::string implementation = a.choice("--transformer-impl", {"local", "transformer_engine"}, "transformer_engine");
  const std::string backend = a.choice("--attention-backend", {"flash", "fused", "unfused", "local", "auto"}, "auto");
  if (backend == "local")
    a.fail("--attention-backend", "--attention-backend local is only supported with --spec local");
  if (implementation == "local") {
    launch.use_flash_attn = false;
    notes.push_back("--transformer-impl local: Megatron's own layers, attention unfused (the s x s scores kept); pipegrid's "
                    "costs do not depend on the implementation");
  } else if (backend == "auto") {
    launch.use_flash_attn = dtype != "fp32";
    notes.push_back(dtype != "fp32"
                        ? "attention: --attention-backend auto (the default) with Transformer Engine in " + dtype +
                              ": taken as fused attention (FlashAttention or cuDNN, no s x s scores kept), as on Ampere "
                              "and later; give --attention-backend unfused for the other"
                        : std::string("attention: --attention-backend auto in fp32: unfused (the s x s scores kept)"));
  } else {
    launch.use_flash_attn = backend == "flash" || backend == "fused";
  }
  if (a.has("--use-flash-attn"))
    notes.push_back("--use-flash-attn: selects FlashAttention in the legacy models only; the attention follows "
                    "--attention-backend");
  if (a.has("--deterministic-mode") && a.has("--use-flash-attn"))
    a.fail("--deterministic-mode", "Flash attention can not be used in deterministic mode.");
  if (a.has("--deterministic-mode"))
    notes.push_back("--deterministic-mode: pipegrid's device model times the default (non-deterministic) kernels");

  // Optimizer and gradients.
  const std::string optimizer = a.choice("--optimizer", {"adam", "sgd"}, "adam");
  const double momentum = a.number("--sgd-momentum", 0, 1e6).value_or(0.9);
  launch.optimizer = optimizer == "adam" ? "adam" : momentum > 0 ? "momentum" : "sgd";
  // Megatron-Core DDP (megatron/training/arguments.py and training.py, get_model).
  launch.distributed_optimizer = a.has("--use-distributed-optimizer");
  launch.overlap_grad_reduce = a.has("--overlap-grad-reduce");
  launch.overlap_param_gather = a.has("--overlap-param-gather");
  if (launch.overlap_param_gather && !launch.distributed_optimizer)
    a.fail("--overlap-param-gather", "--overlap-param-gather only supported with distributed optimizer or megatron fsdp");
  if (launch.overlap_param_gather && !launch.overlap_grad_reduce)
    a.fail("--overlap-param-gather", "Must use --overlap-param-gather with --overlap-grad-reduce");
  if (a.has("--overlap-param-gather-with-optimizer-step")) {
    const std::string flag = "--overlap-param-gather-with-optimizer-step";
    if (!launch.distributed_optimizer) a.fail(flag, flag + " only supported with distributed optimizer");
    if (!launch.overlap_param_gather) a.fail(flag, "Must use " + flag + " with --overlap-param-gather");
    if (launch.virtual_stages == 1) a.fail(flag, flag + " only supported with interleaved pipeline parallelism");
    notes.push_back(flag + ": Megatron starts the first model chunk's parameter all-gather with the optimizer step; "
                    "pipegrid starts it after the step, as --overlap-param-gather does (the iteration can come out "
                    "longer by at most the step's time on the 1/d shard)");
  }
  if (const auto bucket = a.integer("--ddp-bucket-size", 1, 1LL << 50)) {
    if (a.has("--ddp-num-buckets")) a.fail("--ddp-num-buckets", "Cannot specify both --ddp-num-buckets and --ddp-bucket-size");
    launch.ddp_bucket_size = *bucket;
    if (!launch.overlap_grad_reduce)
      notes.push_back(fmt::format("{}: no effect without --overlap-grad-reduce (Megatron reduces one bucket)",
                                  a.get("--ddp-bucket-size")->as_given));
  }
  if (optimizer == "adam" && a.has("--sgd-momentum"))
    notes.push_back(fmt::format("{}: no effect with --optimizer adam", a.get("--sgd-momentum")->as_given));
  const std::string main_grads = a.choice("--main-grads-dtype", {"fp32", "bf16"}, "fp32");
  bool accumulate_in_fp32 = a.has("--accumulate-allreduce-grads-in-fp32");
  if (dtype == "bf16") {  // validate_args: bf16 reduces gradients in fp32 unless told otherwise
    if (accumulate_in_fp32 && main_grads != "fp32")
      a.fail("--main-grads-dtype", "--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32 is set");
    if (a.has("--grad-reduce-in-bf16")) accumulate_in_fp32 = false;
    else if (!accumulate_in_fp32 && main_grads == "fp32") accumulate_in_fp32 = true;
  }
  launch.fp32_gradients = dtype == "fp32" || accumulate_in_fp32;
  if (dtype != "fp32" && !launch.fp32_gradients)
    notes.push_back(fmt::format("gradients: {} (2 bytes per parameter); Megatron's optimizer copies them to fp32 for its "
                                "step (its distributed-optimizer table: 20 bytes per parameter with Adam), as pipegrid "
                                "counts them while the step runs",
                                dtype));
  // FP8 (validate_args and TransformerConfig, core_v0.14.0): --fp8-format
  // e4m3 or hybrid; --fp8-recipe delayed (the default), tensorwise, mxfp8
  // or blockwise.
  launch.fp8_format = a.choice("--fp8-format", {"e4m3", "hybrid"}, "");
  const std::string fp8_recipe = a.choice("--fp8-recipe", {"tensorwise", "delayed", "mxfp8", "blockwise"}, "delayed");
  if (launch.fp8_format.empty()) {
    if (a.has("--fp8-recipe"))
      notes.push_back(fmt::format("{}: no effect without --fp8-format", a.get("--fp8-recipe")->as_given));
  } else {
    if (dtype == "fp32")
      a.fail("--fp8-format", fmt::format("FP8 is a recipe on top of 16-bit mixed precision in pipegrid; expected --bf16 "
                                         "or --fp16 with --fp8-format {}, found neither (fp32 weights)",
                                         launch.fp8_format));
    if (fp8_recipe == "mxfp8")
      a.fail("--fp8-recipe", "not modelled: mxfp8 (MX block scaling) runs on Blackwell GPUs only, and pipegrid's FP8 "
                             "devices are Hopper's (H100, H200, H800); give delayed or tensorwise");
    if (fp8_recipe == "blockwise")
      a.fail("--fp8-recipe", "not modelled: blockwise scaling (1 x 128 and 128 x 128 blocks, DeepSeek-V3's) has its own "
                             "quantisation kernels and scale bytes, which pipegrid's FP8 recipe does not count; give "
                             "delayed or tensorwise");
    if (fp8_recipe == "tensorwise")
      notes.push_back("--fp8-recipe tensorwise: modelled as delayed scaling (the same FP8 GEMMs and casts; the amax of "
                      "the current tensor, which tensorwise scaling reads first, is not counted)");
  }
  if (a.has("--fp32-residual-connection")) {
    if (dtype == "fp32")
      a.fail("--fp32-residual-connection", "residual connection in fp32 only supported when using fp16 or bf16.");
    notes.push_back("--fp32-residual-connection: pipegrid keeps the residual stream in " + dtype);
  }
  if (a.has("--fp16-lm-cross-entropy")) {
    if (dtype != "fp16") a.fail("--fp16-lm-cross-entropy", "lm cross entropy in fp16 only support in fp16 mode.");
  }
  if (const auto percent = a.number("--rotary-percent", 0, 1); percent && *percent < 1)
    notes.push_back(fmt::format("{}: pipegrid rotates every channel of Q and K (element-wise bytes only)",
                                a.get("--rotary-percent")->as_given));
  // Megatron's non-interleaved 1F1B sends blocking with or without this flag
  // (a known gap: only the flag turns blocking transfers on; MegatronLaunch::blocking_transfers).
  launch.blocking_transfers = a.has("--no-overlap-p2p-communication");
  if (launch.blocking_transfers)
    notes.push_back("--no-overlap-p2p-communication: blocking stage transfers (each send holds its device until it has "
                    "arrived; simulate --blocking-transfers)");

  // What the release accepts that pipegrid leaves aside: ignored (listed as
  // given) and noted (one note per reason, naming the arguments).
  std::vector<std::pair<const char*, std::string>> noted;
  for (const Given& argument : arguments.all()) {
    if (argument.known->treatment == Treatment::Ignored) launch.ignored.push_back(argument.as_given);
    if (argument.known->treatment == Treatment::Noted) {
      const auto same = std::find_if(noted.begin(), noted.end(), [&](const auto& entry) { return entry.first == argument.known->reason; });
      if (same == noted.end()) noted.emplace_back(argument.known->reason, argument.as_given);
      else same->second += ", " + argument.as_given;
    }
    if (argument.name == "--use-mcore-models") launch.ignored.push_back(argument.as_given);
  }
  for (const auto& [reason, names] : noted) notes.push_back(names + ": " + reason);

  // The model.
  ModelSpec& model = launch.model;
  model.name = "gpt";
  model.options = {{"layers", *layers},
                   {"hidden", *hidden},
                   {"heads", *heads},
                   {"ffn", ffn},
                   {"sequence", *sequence},
                   {"vocabulary", vocabulary},
                   {"query_groups", query_groups},
                   {"swiglu", swiglu ? 1 : 0},
                   {"linear_bias", a.has("--disable-bias-linear") ? 0 : 1},
                   {"rmsnorm", normalization == "RMSNorm" ? 1 : 0},
                   {"rotary", rotary ? 1 : 0},
                   {"tied_embeddings", a.has("--untie-embeddings-and-output-weights") ? 0 : 1},
                   {"flash_attention", launch.use_flash_attn ? 1 : 0}};
  if (!rotary) model.options["positions"] = *positions;
  for (const auto& [option, value] : moe_and_mla_options(a, *layers, notes)) model.options[option] = value;
  model.micro_batch_size = *micro;
  model.dtype = dtype;
  try {
    resolve_model_spec(model);
  } catch (const InputError& error) {
    throw InputError(fmt::format("{}: the model the arguments describe: {}", origin.name, error.what()));
  }
  return launch;
}

}  // namespace pipegrid

namespace pipegrid {

std::string megatron_schedule(int virtual_stages) { return virtual_stages > 1 ? "interleaved-1f1b" : "1f1b-sno"; }

const std::vector<std::string>& megatron_schedules() {
  static const std::vector<std::string> names = {megatron_schedule(1), megatron_schedule(2)};
  return names;
}

std::string megatron_arguments_of_gpt(const ModelSpec& spec) {
  if (spec.name != "gpt")
    throw InputError(fmt::format("--model {}: plan lays out Megatron-LM's GPT models; give --model gpt or --megatron-args",
                                 printable(spec.name)));
  const ResolvedModel model = resolve_model_spec(spec);
  const auto option = [&](const char* name) { return model.options.at(name); };
  std::string text = fmt::format("--num-layers {} --hidden-size {} --num-attention-heads {}", option("layers"),
                                 option("hidden"), option("heads"));
  if (spec.options.count("ffn")) text += fmt::format(" --ffn-hidden-size {}", option("ffn"));
  const long long sequence = option("sequence");
  const bool rotary = option("rotary") == 1;
  const long long positions = !rotary && model.options.count("positions") ? option("positions") : sequence;
  text += fmt::format(" --seq-length {} --max-position-embeddings {} --vocab-size {}", sequence, positions,
                      option("vocabulary"));
  if (model.options.count("query_groups") && option("query_groups") != option("heads"))
    text += fmt::format(" --group-query-attention --num-query-groups {}", option("query_groups"));
  if (option("swiglu") == 1) text += " --swiglu";
  if (option("linear_bias") == 0) text += " --disable-bias-linear";
  if (option("rmsnorm") == 1) text += " --normalization RMSNorm";
  if (rotary) text += " --position-embedding-type rope";
  if (option("tied_embeddings") == 0) text += " --untie-embeddings-and-output-weights";
  if (option("num_experts") > 0) {
    text += fmt::format(" --num-experts {} --moe-router-topk {} --moe-ffn-hidden-size {}", option("num_experts"),
                        option("moe_topk"), option("moe_ffn"));
    if (option("moe_shared_ffn") > 0)
      text += fmt::format(" --moe-shared-expert-intermediate-size {}", option("moe_shared_ffn"));
    if (option("moe_dense_first") > 0 || option("moe_layer_freq") > 1) {
      std::string pattern;  // Megatron's list form: N dense layers, then every M-th MoE
      for (long long i = 0; i < option("layers"); ++i) {
        const bool moe = i >= option("moe_dense_first") && (i - option("moe_dense_first")) % option("moe_layer_freq") == 0;
        pattern += fmt::format("{}{}", pattern.empty() ? "" : ",", moe ? 1 : 0);
      }
      text += " --moe-layer-freq '[" + pattern + "]'";
    }
  }
  if (option("mla") == 1) {
    text += " --multi-latent-attention";
    if (option("q_lora_rank") > 0) text += fmt::format(" --q-lora-rank {}", option("q_lora_rank"));
    text += fmt::format(" --kv-lora-rank {} --qk-head-dim {} --qk-pos-emb-head-dim {} --v-head-dim {}",
                        option("kv_lora_rank"), option("qk_head_dim"), option("qk_pos_emb_head_dim"),
                        option("v_head_dim"));
  }
  if (option("mtp_layers") > 0) text += fmt::format(" --mtp-num-layers {}", option("mtp_layers"));
  text += option("flash_attention") == 1 ? " --attention-backend flash" : " --attention-backend unfused";
  if (model.dtype == "fp16") text += " --fp16";
  if (model.dtype == "bf16") text += " --bf16";
  return text;
}

}  // namespace pipegrid
