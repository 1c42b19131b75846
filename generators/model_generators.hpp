#pragma once
// Model generators: a Profile built from a model's architecture, with the
// analytic costs of every layer (FLOPs, memory traffic, activation and
// parameter bytes) and no times. Pure functions over plain data; the rules
// are in docs/formats.md, "Analytic fields".
//
// Models and options (integers; the shared vocabulary of the model zoo, the
// CLI's `--NAME` flags and experiments' parameters):
//   mlp:      layers (8), hidden (256), classes (10); micro-batch 32.
//   vgg16:    width (64), image (224), hidden (4096 x width / 64), classes
//             (1000); micro-batch 128.
//   resnet50: width (64), image (224), classes (1000); micro-batch 128.
//   gnmt:     layers (8: L, even, >= 4), hidden (1024), vocabulary (32320),
//             sequence (48); micro-batch 32 (PipeDream's gnmt profile).
//   gpt:      layers (12), hidden (768), heads (12), ffn (4 x hidden; with
//             swiglu int(8 x hidden / 3 / 64) x 64), sequence (1024),
//             vocabulary (50257); and what Megatron-LM launches set (each
//             0 or 1 unless said; the defaults are GPT-2's choices):
//             query_groups (heads: grouped-query attention, K and V of
//             query_groups x hidden / heads columns each; divides heads),
//             swiglu (0: GeLU MLP; 1: SwiGLU, up projection to 2 x ffn),
//             linear_bias (1: biases in the block's linear layers),
//             rmsnorm (0: LayerNorm, 2 x hidden parameters; 1: RMSNorm,
//             hidden), rotary (0: a learned position table of `positions`
//             rows; 1: rotary position embedding, no table), positions
//             (sequence; >= sequence; none with rotary), tied_embeddings
//             (0: the head has its own vocabulary x hidden weights; 1: the
//             head uses the embedding's word table and has no parameters.
//             Under pipeline parallelism Megatron-LM keeps a copy of the
//             word table on the last stage, kept equal by an all-reduce of
//             its gradients; that copy's memory and the all-reduce are not
//             in this profile: the simulation adds them), flash_attention
//             (0: unfused attention keeping the s x s scores; 1: a fused
//             kernel, FlashAttention or cuDNN, keeping none and recomputing
//             them in the backward); mixture of experts: num_experts
//             (0: dense), moe_topk (2), moe_ffn (ffn), moe_shared_ffn (0:
//             none), moe_dense_first (0), moe_layer_freq (1),
//             moe_imbalance (percent, 100); multi-head latent attention:
//             mla (0), q_lora_rank (0: none), kv_lora_rank (32),
//             qk_head_dim (128), qk_pos_emb_head_dim (64), v_head_dim
//             (128); multi-token prediction: mtp_layers (0) (Megatron-LM
//             core_v0.14.0's defaults; docs/semantics.md, Mixture of
//             experts).
// Every model also takes micro_batch_size and dtype (fp32, the default,
// fp16 or bf16).

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/profile.hpp"

namespace pipegrid {

/// Largest value of a model option unless its entry says otherwise.
inline constexpr long long kModelOptionCap = 10000000;

/// One integer option of a model generator.
struct ModelOptionInfo {
  std::string name;                        ///< snake_case; the CLI flag is --name with '_' -> '-'
  std::optional<long long> default_value;  ///< nullopt: derived from other options (see description)
  std::string description;
  long long min_value = 1;  ///< smallest value (0 for the 0/1 switches)
  long long max_value = kModelOptionCap;
  /// Whether the profile's name (model_spec_text) writes the option at its
  /// default value; false for options added after profiles were named, so
  /// that a model at their defaults keeps its name.
  bool named_at_default = true;
};

/// A registered model generator.
struct ModelInfo {
  std::string name;
  std::string description;
  std::vector<ModelOptionInfo> options;  ///< without micro_batch_size and dtype
  int default_micro_batch_size = 1;
};

/// The generators in the order `pipegrid model --list` shows them.
const std::vector<ModelInfo>& model_generators();

/// The generator named `name`; InputError listing the names otherwise.
const ModelInfo& model_generator(const std::string& name);

/// Every option name some model takes (union, in first-seen order), without
/// micro_batch_size and dtype: the CLI defines one flag per name.
const std::vector<std::string>& model_option_names();

/** The smallest and the largest value model option `name` takes (the same
 *  in every model that has it); "micro_batch_size" too (1 to 10^6). */
long long model_option_min(const std::string& name);
long long model_option_max(const std::string& name);

/// The dtypes a generated profile may have: fp32, fp16, bf16.
const std::vector<std::string>& model_dtypes();

/// Bytes of one element (parameter or activation) in `dtype`: 4 for fp32,
/// 2 for fp16 and bf16; InputError naming --dtype otherwise.
double dtype_bytes(const std::string& dtype);

/// A model and its options as a user gives them: options absent take their
/// defaults, micro_batch_size and dtype too.
struct ModelSpec {
  std::string name;
  std::map<std::string, long long> options;
  std::optional<long long> micro_batch_size;
  std::string dtype;  ///< empty: fp32
};

/// A spec with every option filled in (defaults and derived values).
struct ResolvedModel {
  std::string name;
  std::map<std::string, long long> options;  ///< every option of the model
  int micro_batch_size = 1;
  std::string dtype = "fp32";
};

/** Checks the spec and fills in the defaults. InputError (naming the flag,
 *  --layers, what was expected and what was found) for an unknown model, an
 *  option the model does not take, a value outside the option's range
 *  (model_option_min .. model_option_max: 1 to 10^7, layers 10^5, the
 *  switches 0 to 1), a micro-batch size outside 1..10^6, an unknown dtype,
 *  and the models' own rules: gnmt's layers even and >= 4; gpt's hidden a
 *  multiple of heads, query_groups a divisor of heads, positions >= sequence
 *  and not given with rotary, a derived ffn of at least 1, moe_topk at most
 *  num_experts, no query_groups with mla; vgg16's and
 *  resnet50's image a multiple of 32. */
ResolvedModel resolve_model_spec(const ModelSpec& spec);

/** "NAME key=value ..." in the registry's option order (an option whose
 *  named_at_default is false only where it differs from its default), then
 *  micro_batch_size and dtype: the generated profile's name. */
std::string model_spec_text(const ResolvedModel& model);

/** The profile of the model: one layer per entry of the model's layer list
 *  (docs/formats.md, Analytic fields), every layer with op, FLOPs,
 *  bytes_read/bytes_written, output, activation and parameter bytes, and
 *  times_given false (no times); the profile with micro_batch_size, dtype,
 *  sequence_length (sequence models) and input_bytes. Passes check_profile.
 *  Throws what resolve_model_spec throws, and InputError when a value
 *  exceeds the limits of check_profile. */
Profile generate_model_profile(const ModelSpec& spec);

/** The parameters of a profile's layers: parameter_bytes summed, divided by
 *  the bytes per element of the profile's dtype (fp32 when empty). */
double profile_parameter_count(const Profile& profile);

/** Forward + backward_input + backward_weight FLOPs of one micro-batch,
 *  summed over the layers that have them. */
double profile_total_flops(const Profile& profile);

}  // namespace pipegrid
