#pragma once
// Profile: a model as an ordered chain of layers, measured at one micro-batch
// size (or several) on one device type, optionally with times for other
// device types. Times are seconds, sizes are bytes.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/platform.hpp"

namespace pipegrid {

/// The backward's split for zero-bubble schedules: its input-gradient part
/// (I) and its weight-gradient part (W). Both are given or neither; given,
/// each is >= 0 and they sum to backward_s within 1e-9 relative
/// (check_profile). Absent: the default rule of backward_split().
struct LayerTimes {
  double forward_s = 0;
  double backward_s = 0;
  std::optional<double> backward_input_s = {};   ///< I of backward_s (see above)
  std::optional<double> backward_weight_s = {};  ///< W of backward_s (see above)
};

/// The shape of a GPT-style model's layer, for the tensor-core kernel model
/// (core/gpu_kernels.hpp): what the gpt generator built it from. One
/// micro-batch of `batch` sequences of `sequence` tokens; kv_columns =
/// query groups x head width (h for multi-head attention).
struct TransformerShape {
  double batch = 0, sequence = 0, hidden = 0, heads = 0, kv_columns = 0, ffn = 0, vocabulary = 0;
  bool swiglu = false, linear_bias = true, rmsnorm = false, rotary = false, flash_attention = false;
  /// Position table added to the word embedding (learned positions).
  bool position_table = true;
  /// The attention is causal (a GPT decoder's): a flash-attention kernel
  /// skips the masked half of the scores; the unfused form computes them all.
  bool causal = true;
  /// A mixture-of-experts block (op "transformer"; experts > 0): `experts`
  /// routed experts of hidden width `expert_ffn` (SwiGLU as `swiglu`), each
  /// token routed to `topk` of them; a shared expert of `shared_ffn` (0:
  /// none) in place of the dense MLP; `imbalance` >= 1 the busiest
  /// expert-parallel rank's routed tokens over the mean. 0 experts: a
  /// dense block (the other MoE fields unused).
  double experts = 0, topk = 0, expert_ffn = 0, shared_ffn = 0, imbalance = 1;
  /// Multi-head latent attention (Megatron-Core MLASelfAttention) when
  /// kv_lora_rank > 0: queries through a q_lora_rank down projection (0: a
  /// direct one), keys and values up from a kv_lora_rank latent; per head
  /// query/key width qk_head_dim + qk_pos_head_dim (the rotary part, one
  /// key part shared by the heads) and value width v_head_dim. kv_columns
  /// is then unused.
  double q_lora_rank = 0, kv_lora_rank = 0, qk_head_dim = 0, qk_pos_head_dim = 0, v_head_dim = 0;
  bool moe() const { return experts > 0; }
  bool mla() const { return kv_lora_rank > 0; }
};

struct Layer {
  std::string name;
  double forward_s = 0;        ///< forward time of one micro-batch
  double backward_s = 0;       ///< backward time of one micro-batch
  double output_bytes = 0;     ///< bytes crossing the cut right after this layer
  double parameter_bytes = 0;  ///< weight bytes of this layer
  /// Times measured on particular device types, keyed by a host's `device`
  /// property ("VCU129", "V100"). A host whose type is listed here runs the
  /// layer in these times (its speed_factor does not apply); any other host
  /// takes forward_s / backward_s divided by its speed_factor.
  std::map<std::string, LayerTimes> device_times = {};
  /// Bytes of this layer's own output, what its forward leaves stashed for
  /// the backward. Absent: output_bytes (a chain, where the cut after a
  /// layer carries exactly its output). A branching model linearised into a
  /// chain differs: the cut also carries tensors that skip over the layer
  /// (a residual connection's input), which are stashed once, by the layer
  /// that made them.
  std::optional<double> activation_bytes = {};
  /// The backward's input-gradient and weight-gradient parts (see
  /// LayerTimes): both or neither; absent, backward_split()'s default.
  std::optional<double> backward_input_s = {};
  std::optional<double> backward_weight_s = {};

  /// Analytic costs of one micro-batch (model generators, `pipegrid model`;
  /// docs/formats.md, Analytic fields). All optional; a layer with
  /// forward_flops may omit its times (times_given false): the device model
  /// of the host that runs it supplies them (core/device_model.hpp).
  std::optional<double> forward_flops = {};          ///< floating-point operations of the forward
  std::optional<double> backward_input_flops = {};   ///< of the input gradient (I)
  std::optional<double> backward_weight_flops = {};  ///< of the weight gradient (W)
  std::optional<double> bytes_read = {};             ///< device-memory bytes the forward reads
  std::optional<double> bytes_written = {};          ///< device-memory bytes the forward writes
  /// What the layer computes, for device models and tensor parallelism:
  /// "embedding", "linear", "conv2d", "lstm", "attention", "transformer",
  /// "norm", "pool", "elementwise", "loss"; empty when unknown.
  std::string op = {};
  /// false: the profile gives no forward_s/backward_s for this layer (they
  /// are 0 here until a device model fills them in).
  bool times_given = true;
  /// The attention core of a transformer layer (the gpt generator's; both
  /// or neither, each in [0, 1], the same at every micro-batch size): the
  /// work Megatron-LM's selective recomputation recomputes (Q K^T, softmax,
  /// dropout, attention x V; core/recompute.hpp). Its share of the layer's
  /// forward_flops, and its share of the layer's stashed_bytes(): the s x s
  /// scores after the softmax and after the dropout, and the dropout's mask
  /// (fused attention keeps none of them: its log-sum-exp).
  std::optional<double> attention_core_flops_share = {};
  std::optional<double> attention_core_stash_share = {};
  /// The attention core's share of the forward's *time*, where a device
  /// model timed the layer kernel by kernel (fill_analytic_times; not read
  /// from files): what selective recomputation adds to the backward. Absent:
  /// attention_core_flops_share stands for it.
  std::optional<double> attention_core_time_share = {};
  /// The model shape the layer comes from (the gpt generator's embedding,
  /// blocks, final norm, head and loss; docs/formats.md): with it a GPU's
  /// tensor-core model times the layer kernel by kernel (core/gpu_kernels.hpp)
  /// instead of by its summed FLOPs and bytes.
  std::optional<TransformerShape> transformer_shape = {};

  /// How Megatron's tensor parallelism splits the layer (docs/formats.md,
  /// Tensor-parallel fields; core/tensor_parallel.hpp). Size-independent,
  /// like `op` and parameter_bytes.
  /// The vocabulary size V of a layer Megatron splits over the vocabulary
  /// (op "embedding": VocabParallelEmbedding, V / t rows of the word table
  /// per member; op "linear": the head, a ColumnParallelLinear of V / t
  /// logits; op "loss": vocab_parallel_cross_entropy). Only with those ops
  /// (check_profile). Absent: not vocabulary-parallel (replicated).
  std::optional<long long> vocabulary = {};
  /// Bytes of parameter_bytes that tensor parallelism keeps whole on every
  /// member (a learned position table: Megatron's position embedding is a
  /// plain torch.nn.Embedding); at most parameter_bytes. Default 0.
  double replicated_parameter_bytes = 0;
  /// Fraction, in [0, 1], of the stashed activation (stashed_bytes()) that
  /// tensor parallelism without sequence parallelism keeps whole on every
  /// member and sequence parallelism splits t ways (a transformer block's
  /// layer norms' inputs and outputs and its residual dropout masks:
  /// Korthikanti et al. 2022's 10 s b h of 34 s b h + 5 a s^2 b; an
  /// embedding's output). Default 0: a split layer's stash is all split.
  double replicated_activation_fraction = 0;

  /// Mixture of experts (the gpt generator's MoE blocks; docs/formats.md,
  /// Mixture-of-experts fields). Size-independent like parameter_bytes:
  /// the bytes of parameter_bytes that are routed experts' weights (biases
  /// included). Expert parallelism over ep ranks keeps 1 / ep of them on
  /// each rank (and expert tensor parallelism over etp members 1 / etp of
  /// that); the rest of the layer (attention, router, shared experts,
  /// norms) is dense and split as tensor parallelism splits a block. 0: no
  /// routed experts. At most parameter_bytes.
  double expert_parameter_bytes = 0;
  /// Bytes one token-dispatch all-to-all delivers to the busiest
  /// expert-parallel rank for one micro-batch: tokens x top-k x hidden x
  /// element bytes x the routing imbalance (the busiest rank's routed
  /// tokens over the mean; 1 under uniform routing). The combine
  /// all-to-all moves the same bytes back; a forward runs a dispatch and a
  /// combine, the backward's input gradient the two again (their
  /// gradients). 0: no all-to-all (no routed experts). Of these bytes, a
  /// rank of an expert-parallel group of ep keeps (1 / ep) local: the rest
  /// crosses the links (sim: all-to-all flows).
  double moe_dispatch_bytes = 0;

  double stashed_bytes() const { return activation_bytes.value_or(output_bytes); }
  bool has_flops() const { return forward_flops.has_value(); }
  bool has_parameters() const { return parameter_bytes > 0; }
};

/// A layer's values at one measured micro-batch size (MeasuredSize).
struct LayerAtSize {
  double forward_s = 0;
  double backward_s = 0;
  double output_bytes = 0;
  std::optional<double> activation_bytes = {};          ///< as Layer::activation_bytes
  std::map<std::string, LayerTimes> device_times = {};  ///< as Layer::device_times
  std::optional<double> backward_input_s = {};          ///< as Layer::backward_input_s
  std::optional<double> backward_weight_s = {};         ///< as Layer::backward_weight_s
  /// As Layer's analytic fields (given at every size or at none).
  std::optional<double> forward_flops = {};
  std::optional<double> backward_input_flops = {};
  std::optional<double> backward_weight_flops = {};
  std::optional<double> bytes_read = {};
  std::optional<double> bytes_written = {};
  bool times_given = true;  ///< as Layer::times_given (the same at every size)
};

/// A profile's values at one measured micro-batch size; parameter bytes and
/// names do not depend on the size and stay in Profile::layers.
struct MeasuredSize {
  int micro_batch_size = 1;
  double input_bytes = 0;
  std::vector<LayerAtSize> layers;  ///< one per Profile::layers, same order
};

/** Sets every size-dependent field of `layer` (times, their split and
 *  device times, output and activation bytes, analytic work, times_given)
 *  to `at`'s; name, op and parameter bytes stay. */
void take_values_at_size(Layer& layer, const LayerAtSize& at);

struct Profile {
  std::string name;
  /// The model that was measured, when it can be rebuilt: `pipegrid
  /// calibrate` writes its zoo model as "NAME key=value ..." (what
  /// `validate --plan` runs); empty for profiles measured elsewhere.
  std::string model;
  int micro_batch_size = 1;
  /// Bytes of the model's input for one micro-batch (what the first stage
  /// receives and stashes). 0 when unknown.
  double input_bytes = 0;
  std::vector<Layer> layers;
  /// A multi-size profile's measured sizes, strictly ascending, at least
  /// two; empty for a single-size profile (the usual case). Everything above
  /// is then the profile at its first size (micro_batch_size ==
  /// measured.front().micro_batch_size, the layers' times and bytes those of
  /// measured.front()), so code that runs one size never looks here; use
  /// profile_at_micro_batch_size for another size. check_profile checks this.
  std::vector<MeasuredSize> measured = {};
  /// How micro_batch_size was found when the file does not state it (a
  /// PipeDream graph.txt read without --batch-size), for people: "inferred
  /// from the LSTM hidden states: 131072 bytes = 32 x 1024 float32 (8 LSTM
  /// nodes)"; or, when micro_batch_size_known is false, "unknown: " and why.
  /// Empty when the file or --batch-size states it. Not written to JSON.
  std::string micro_batch_size_note = {};
  /// False only for a graph.txt read with BatchSizeUse::Optional whose batch
  /// size could not be inferred: micro_batch_size is then 1, a placeholder
  /// that no result may depend on.
  bool micro_batch_size_known = true;
  /// The number format of the profile's parameters and activations: "fp32"
  /// (the default when a file states none), "fp16" or "bf16" (mixed
  /// precision training: fp32 master weights; docs/semantics.md, Memory).
  /// Empty: not stated (taken as fp32, or as simulate --dtype says).
  std::string dtype = {};
  /// Sequence length (tokens per sample) a generated profile was built at;
  /// 0 when not applicable or unknown. Informative.
  int sequence_length = 0;
};

/** The layer's forward and backward time on `host`: its device_times of the
 *  host's device type, else of the host's device model, else forward_s and
 *  backward_s divided by the host's speed_factor (see Layer::device_times). */
LayerTimes layer_times_on(const Layer& layer, const HostInfo& host);

/** A backward's two parts: input gradient (I) and weight gradient (W). */
struct BackwardSplit {
  double input_s = 0, weight_s = 0;
};

/** The backward's halves: (input_s, weight_s) when both are given, else the
 *  default rule: I = W = backward_s / 2 when has_parameters, I = backward_s,
 *  W = 0 otherwise (a layer without weights has no weight gradient). Only
 *  one of the two given: the default (check_profile refuses such a profile). */
BackwardSplit backward_split(double backward_s, std::optional<double> input_s, std::optional<double> weight_s,
                             bool has_parameters);
/** The layer's own split (Layer::has_parameters decides the default). */
BackwardSplit backward_split(const Layer& layer);
/** The split of a device's times of `layer` (`times`, one of its
 *  device_times): its own I and W when given, else the default rule on
 *  times.backward_s with the layer's parameters. */
BackwardSplit backward_split(const Layer& layer, const LayerTimes& times);
/** The split on `host`, as layer_times_on: the device times' split when the
 *  host's device type or device model is listed, else the layer's own split divided by the
 *  host's speed_factor. I + W equals layer_times_on(...).backward_s up to
 *  rounding. */
BackwardSplit backward_split_on(const Layer& layer, const HostInfo& host);

/** Whether i + w equals backward within the relative tolerance check_profile
 *  allows: |i + w - backward| <= 1e-9 x max(backward, i + w). */
bool backward_split_sums_to(double backward, double input, double weight);

/** The micro-batch sizes the profile has times for, ascending (one entry for
 *  a single-size profile). */
std::vector<int> profile_micro_batch_sizes(const Profile& profile);

/** A profile taken to a micro-batch size, and how, for people: empty when
 *  the values are measured or interpolated between measured sizes (or, rule
 *  none, extrapolated from a multi-size profile); set when a
 *  MicroBatchScaling rule derived them ("32 samples from the measured 4 by
 *  linear scaling: ..."). */
struct ProfileAtSize {
  Profile profile;
  std::string note;
};

/** A rule for the micro-batch sizes a profile does not cover: every size
 *  but its own for a single-size profile; below the smallest or above the
 *  largest measured size for a multi-size one (sizes in between are always
 *  interpolated, measured sizes always taken as measured). Rules are pure
 *  and registered by name (micro_batch_scaling): `simulate
 *  --micro-batch-scaling NAME` picks one; an analytic compute model would be
 *  another rule. */
class MicroBatchScaling {
 public:
  virtual ~MicroBatchScaling() = default;
  virtual const std::string& name() const = 0;
  /** The single-size profile at `size`, a size `profile` does not cover (see
   *  above; `size` >= 1). Throws InputError when the rule cannot give one. */
  virtual ProfileAtSize outside_measured(const Profile& profile, int size) const = 0;
};

/** The registered rules, in the order `--micro-batch-scaling` lists them:
 *  - none (the default): a single-size profile has no other size (an
 *    InputError that names --micro-batch-scaling linear); a multi-size
 *    profile is extrapolated along the line through its two nearest measured
 *    sizes (profile_at_micro_batch_size below);
 *  - linear: the profile at the nearest measured size a (its only size, or
 *    the smallest or largest), with every value that grows with the samples
 *    multiplied by size / a, computed as v x size / a: forward and backward
 *    times (the backward's I and W parts where given), device times,
 *    output_bytes, activation_bytes, input_bytes, and the analytic fields
 *    (FLOPs, bytes_read, bytes_written) where given.
 *    Parameter bytes and names stay; check_profile's limits still apply. */
const std::vector<std::string>& micro_batch_scaling_names();

/** The rule registered as `name`; InputError naming --micro-batch-scaling and
 *  listing the rules otherwise. */
const MicroBatchScaling& micro_batch_scaling(const std::string& name);

/** The single-size profile at `size`: measured values at a measured size,
 *  interpolated between two measured sizes (as below), `rule` outside them.
 *  Throws InputError when `size` < 1 or the rule cannot give the size. */
ProfileAtSize profile_at_micro_batch_size(const Profile& profile, int size, const MicroBatchScaling& rule);

/** The single-size profile with micro-batches of `size` samples (SEMANTICS.md,
 *  Batch size), rule none. At a measured size, that size's values exactly. Otherwise
 *  every time and activation size (forward_s, backward_s, output_bytes,
 *  activation_bytes, device times, input_bytes, the analytic FLOPs and
 *  bytes_read/bytes_written where given; a given backward split's I
 *  and W too, then both scaled by backward_s / (I + W) so that they sum to
 *  the interpolated backward_s up to rounding) is interpolated linearly between the two
 *  measured sizes around `size`, or extrapolated along the line through the
 *  two nearest when `size` lies outside them:
 *    v(size) = v(a) + (v(b) - v(a)) * (size - a) / (b - a).
 *  Names and parameter bytes are unchanged; the result has no `measured`.
 *  Throws InputError when `size` < 1, when a single-size profile is asked
 *  for another size than its micro_batch_size (no scaling is invented; the
 *  message names --micro-batch-scaling linear), and when extrapolation makes a value negative (the message names the layer,
 *  the field and the two sizes; values are never clamped), and when it
 *  makes a value exceed the limits of check_profile. */
Profile profile_at_micro_batch_size(const Profile& profile, int size);

/** Reads a profile JSON file ({"name", "micro_batch_size", "layers": [...]},
 *  or a multi-size profile with "micro_batch_sizes" and per-size lists; see
 *  docs/formats.md). Throws InputError naming the file and field on any
 *  missing, mistyped or negative value. */
Profile read_profile_json(const std::string& path);

/** Parses profile JSON text; `origin` names the source in error messages. */
Profile parse_profile_json(const std::string& text, const std::string& origin);

/** Serialises a profile to JSON text (the format read_profile_json reads):
 *  a multi-size profile as its measured sizes, device times only where a
 *  layer has them. Reading the text back gives the same profile. */
std::string profile_to_json(const Profile& profile);

/** Reads PipeDream's graph.txt (times in ms, sizes in bytes) and turns it into
 *  a chain of layers through the canonical topological order of its nodes
 *  (Kahn's algorithm, ties broken by the order the file lists the nodes).
 *  A layer's output_bytes are the outputs of every node before the cut that a
 *  node after it consumes. Input nodes are zeroed (as PipeDream's optimizer
 *  does); their activation bytes become Profile::input_bytes.
 *  `batch_size`: the micro-batch size the times were measured at; when absent
 *  it is inferred (docs/formats.md, graph.txt, Batch size: from an input of
 *  whole 3x224x224 float32 images, or from the LSTM nodes' hidden states)
 *  and Profile::micro_batch_size_note says how; an InputError is thrown
 *  when it cannot be. Values beyond core/limits.hpp are InputErrors naming
 *  the line. */
Profile read_pipedream_graph(const std::string& path, std::optional<int> batch_size);

/** Reads either format: a file ending in .json is a profile JSON, anything
 *  else a PipeDream graph.txt. */
Profile read_profile(const std::string& path, std::optional<int> batch_size);

/** Throws InputError when a layer has a negative or non-finite value (device
 *  times included) or an empty device type name, a backward split (the
 *  layer's, or a device's, at any size) with one part only or whose parts do
 *  not sum to backward_s (backward_split_sums_to; the message names the
 *  layer's index and name and the field), the profile has no layers,
 *  or a multi-size profile's `measured` breaks its contract (sizes not
 *  strictly ascending, fewer than two, a layer count or device types that
 *  differ between sizes, a backward split given at some sizes only, first
 *  size not the one the fields hold). `origin`
 *  names the source. */
void check_profile(const Profile& profile, const std::string& origin);

}  // namespace pipegrid
