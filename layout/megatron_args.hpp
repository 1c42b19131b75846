#pragma once
// Megatron-LM launch arguments (issue 27): the arguments of a
// `pretrain_gpt.py` launch read into a gpt model (generators/model_generators.hpp)
// and the parallel layout, as Megatron-LM release core_v0.14.0 reads them
// (megatron/training/arguments.py: add_megatron_arguments, validate_args,
// core_transformer_config_from_args; megatron/core/transformer/
// transformer_config.py; megatron/training/tokenizer/tokenizer.py for the
// vocabulary's padding; pretrain_gpt.py for its defaults). Every argument of
// that release is read, accepted and ignored, accepted with a note, or
// refused; docs/megatron.md lists each. Pure functions over plain data.

#include <optional>
#include <string>
#include <vector>

#include "generators/model_generators.hpp"

namespace pipegrid {

/// The Megatron-LM release whose arguments, defaults and checks are followed.
inline constexpr const char* kMegatronRelease = "core_v0.14.0";

/// Activation recomputation as the launch asks for it (Plan::layer_recompute).
struct MegatronRecompute {
  bool full = false;   ///< --recompute-granularity full
  std::string method;  ///< "uniform" or "block" when full (--recompute-method)
  int num_layers = 0;  ///< --recompute-num-layers when full
  /// --recompute-granularity selective, or --recompute-activations: the
  /// attention core (--recompute-modules core_attn, the default).
  bool selective = false;
};

/// What a Megatron-LM launch sets up, in pipegrid's terms.
struct MegatronLaunch {
  /// "gpt" with every option the arguments give (the vocabulary padded as
  /// Megatron pads it), micro_batch_size, and dtype fp16, bf16 or fp32.
  ModelSpec model;
  int tensor_parallel = 1;    ///< --tensor-model-parallel-size
  int pipeline_parallel = 1;  ///< --pipeline-model-parallel-size
  /// Model chunks per pipeline rank: L / (p x --num-layers-per-virtual-
  /// pipeline-stage), or --num-virtual-stages-per-pipeline-rank; 1 without.
  int virtual_stages = 1;
  int micro_batch_size = 1;                      ///< --micro-batch-size
  std::optional<long long> global_batch_size;    ///< --global-batch-size (absent: micro x data parallel)
  std::optional<int> decoder_first_pipeline_num_layers;  ///< transformer layers on the first stage
  std::optional<int> decoder_last_pipeline_num_layers;   ///< transformer layers on the last stage
  /// --account-for-embedding-in-pipeline-split / --account-for-loss-in-
  /// pipeline-split: the embedding (the loss) counts as one layer of the
  /// pipeline split, and the first (last) stage holds one transformer layer
  /// fewer (megatron_partition's slots).
  bool embedding_in_pipeline_split = false;
  bool loss_in_pipeline_split = false;
  MegatronRecompute recompute;
  /// --sequence-parallel at tensor parallel > 1 (validate_args turns it off
  /// at 1, with a note).
  bool sequence_parallel = false;
  int context_parallel = 1;        ///< --context-parallel-size
  int expert_parallel = 1;         ///< --expert-model-parallel-size
  int expert_tensor_parallel = 0;  ///< --expert-tensor-parallel-size (0: not given, follows tensor parallel)
  std::string fp8_format;          ///< --fp8-format (hybrid or e4m3), "" without
  /// Whether the attention kernel keeps no s x s scores for the backward
  /// (FlashAttention or cuDNN fused attention): --attention-backend flash
  /// or fused, or auto with Transformer Engine in fp16/bf16 (a note says
  /// so). The model's flash_attention option says the same.
  bool use_flash_attn = false;
  /// The optimizer as pipegrid's memory model names it: "adam", "momentum"
  /// (Megatron's sgd with --sgd-momentum > 0, its default 0.9) or "sgd".
  std::string optimizer = "adam";
  /// Whether Megatron's gradient buffers are fp32 (4 bytes per parameter):
  /// fp32 training, or --accumulate-allreduce-grads-in-fp32, which --bf16
  /// turns on unless --grad-reduce-in-bf16 (simulate's --gradient-dtype fp32).
  bool fp32_gradients = true;
  /// Megatron-Core DDP: --use-distributed-optimizer, --overlap-grad-reduce,
  /// --overlap-param-gather (which needs both), --ddp-bucket-size
  /// (parameters; absent: the release's max(40M, 1M x d)).
  bool distributed_optimizer = false, overlap_grad_reduce = false, overlap_param_gather = false;
  /// --tp-comm-overlap (needs sequence parallelism, as the release asserts).
  bool tp_comm_overlap = false;
  /// --no-overlap-p2p-communication: stage transfers are blocking calls on
  /// the compute stream (simulate's --blocking-transfers). Without the flag
  /// false, although Megatron's non-interleaved 1F1B always sends blocking
  /// (megatron/core/pipeline_parallel/schedules.py,
  /// forward_backward_pipelining_without_interleaving: p2p_communication's
  /// send/recv wait before returning): a known gap, kept so that launches
  /// without the flag simulate as before.
  bool blocking_transfers = false;
  std::optional<long long> ddp_bucket_size;
  /// "1f1b-sno" (Megatron's 1F1B, PipeDream-flush), or "interleaved-1f1b"
  /// when virtual_stages > 1.
  std::string schedule = "1f1b-sno";
  /// Arguments accepted that change neither time nor memory, as given
  /// ("--lr 6.0e-5", "--save-interval=1000"), in the launch's order.
  std::vector<std::string> ignored;
  /// What a reader should know: the launcher's words not read, the
  /// vocabulary's padding, arguments accepted whose effect pipegrid does not
  /// model, defaults taken.
  std::vector<std::string> notes;
};

/** Reads the arguments of a Megatron-LM launch. `text` is a shell line or a
 *  launch script pasted as is: words split at whitespace, single and double
 *  quotes, `\` + newline continuations, `#` comments; when a word ends in
 *  `.py` the arguments are the words after the last such word, up to the
 *  end of its command (an unescaped newline or a shell operator: `|`, `;`,
 *  `&`, `<`, `>`), and what precedes and follows is listed in notes as not
 *  read; without one, every word is an argument (newlines are spaces) up to
 *  a shell operator. `--name value` and `--name=value`; switches take no
 *  value. `origin` ("--megatron-args" or a file name) begins every message,
 *  with the line where the text has several.
 *  InputError (naming the argument, what was expected and what was found)
 *  for: an unexpanded `$VAR`, `${VAR}`, `$(...)` or backquote anywhere; an
 *  unterminated quote; an argument that is not one of the release's (with a
 *  near miss), a switch given a value, a value missing or of the wrong type
 *  or range; a required argument missing (--num-layers, --hidden-size,
 *  --num-attention-heads, --seq-length, --max-position-embeddings,
 *  --micro-batch-size, the vocabulary); the release's checks (heads and
 *  query groups multiples of tensor parallel, layers as the pipeline and
 *  virtual split need, --fp16 with --bf16, --tp-comm-overlap without
 *  sequence parallelism, ...); and the arguments pipegrid does not model
 *  (docs/megatron.md, Refused). */
MegatronLaunch read_megatron_args(const std::string& text, const std::string& origin);

/// How pipegrid treats an argument of the release.
enum class MegatronTreatment {
  Read,     ///< read into the launch (some values refused, docs/megatron.md)
  Ignored,  ///< accepted, listed in MegatronLaunch::ignored
  Noted,    ///< accepted, with a note on what pipegrid does not model
  Refused,  ///< refused: not modelled
  Retired,  ///< refused by the release itself, with its message
};

/// One argument of the release: its name (with "--"), whether it takes a
/// value, and how pipegrid treats it (reason: the group of an ignored
/// argument, the note of a noted one, why a refused one is refused, the
/// release's message for a retired one).
struct MegatronArgument {
  std::string name;
  bool takes_value = false;
  MegatronTreatment treatment = MegatronTreatment::Read;
  std::string reason;
};

/// Every argument of the release (add_megatron_arguments), in groups.
const std::vector<MegatronArgument>& megatron_arguments();

}  // namespace pipegrid

namespace pipegrid {

/** pipegrid's schedule of a launch with `virtual_stages` model chunks per
 *  pipeline rank: Megatron-LM's 1F1B (PipeDream-flush, "1f1b-sno") at 1,
 *  its interleaved schedule ("interleaved-1f1b") above (MegatronLaunch::
 *  schedule). */
std::string megatron_schedule(int virtual_stages);
/** Both, 1F1B first: every schedule a launch can run. */
const std::vector<std::string>& megatron_schedules();

/** The Megatron-LM arguments (release kMegatronRelease) of the `gpt`
 *  generator's model `spec` (generators/model_generators.hpp), without the
 *  layout: --num-layers, --hidden-size, --num-attention-heads,
 *  --ffn-hidden-size (when given), --seq-length, --max-position-embeddings
 *  (positions, else sequence), --vocab-size, --group-query-attention
 *  --num-query-groups (query_groups), --swiglu, --disable-bias-linear
 *  (linear_bias 0), --normalization RMSNorm, --position-embedding-type rope,
 *  --untie-embeddings-and-output-weights (tied_embeddings 0: Megatron ties
 *  them by default), --attention-backend flash or unfused
 *  (flash_attention), and --fp16 or --bf16. Megatron pads the vocabulary to
 *  a multiple of 128 x t, which the generator does not: the launch's head is
 *  that much wider. InputError (naming --model) for another model, or what
 *  resolve_model_spec refuses. */
std::string megatron_arguments_of_gpt(const ModelSpec& spec);

}  // namespace pipegrid
