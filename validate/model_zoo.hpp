#pragma once
// Model zoo: real models for the executor, defined layer by layer so that
// any contiguous range of layers is a stage module. This header is
// LibTorch-free; the modules themselves are in validate/detail/model.hpp.
//
// Models and their options (integers; the shared vocabulary of the model
// generators, given as flags `--layers 4 --hidden 64` on execute, validate
// and calibrate, recorded as "NAME key=value ..." in calibrated profiles):
//   mlp:   layers (8), hidden (256), classes (10). Layers: layers-1 x
//          (Linear hidden->hidden, ReLU), then Linear hidden->classes; the
//          input has `hidden` features.
//   vgg16: width (64: channels of the first block; VGG-16's 64 scales
//          every block), image (224: square input side, a multiple of
//          32), hidden (4096 x width/64: classifier width), classes
//          (1000). Layers: 13 x (3x3 conv, ReLU), 5 x max-pool, 3
//          classifier layers (no dropout): 21 layers.
//   gnmt:  layers (4), hidden (256), vocabulary (1024), sequence (16).
//          Layers: embedding, `layers` single-layer LSTMs, projection to
//          the vocabulary.
//   gpt:   layers (4), hidden (256: model dimension), heads (4), ffn
//          (4 x hidden: feed-forward width), sequence (32), vocabulary
//          (1024). Token + learned position embedding, `layers` pre-norm
//          causal decoder blocks, head (LayerNorm, Linear to vocabulary).
// The names are the only spelling: the old ones (mlp width/depth, vocab,
// seq, the model transformer) are errors that name the new one.
// No batch normalisation and no dropout: runs are deterministic, so
// numerics can be compared with a single-device reference. Parameters are
// initialised from a seed (same seed, same weights).
//
// Data: micro-batch (mini-batch k, micro-batch m) of B samples is a function
// of (seed, k, m) only; the loss is the mean cross-entropy over the samples
// (and positions), so the micro-batches' gradients, each scaled by 1/M, sum
// to the gradient of the whole mini-batch.

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace pipegrid::validate {

struct ModelConfig {
  std::string name;                   ///< mlp, vgg16, gnmt, gpt
  std::map<std::string, int> options; ///< absent options take their defaults
};

/** The zoo's model names, in a stable order. */
const std::vector<std::string>& model_names();

/** Every option name of the zoo's models, in the order of the command
 *  line's help: layers, hidden, heads, ffn, sequence, vocabulary, classes,
 *  image, width. */
const std::vector<std::string>& option_names();

/** The name `key` has now as an option of `model` (mlp's width: hidden,
 *  gpt's seq: sequence, ...); `key` itself when it was not renamed. */
std::string current_option_name(const std::string& model, const std::string& key);

/** How errors name an option: as a flag (`--hidden 0`) or as in a spec
 *  (`hidden=0`). */
enum class OptionSpelling { Flag, Spec };

/** Checks the name and options (known keys, positive values, model-specific
 *  rules) and fills in the defaults. Throws InputError naming the option;
 *  an old name (model transformer, option width of mlp, ...) is an error
 *  that says "did you mean" its new name. */
ModelConfig resolve_model(const ModelConfig& config, OptionSpelling spelling = OptionSpelling::Flag);

/** "NAME key=value ..." (options in key order): what a calibrated profile
 *  records as its `model`. */
std::string model_to_spec(const ModelConfig& config);

/** The inverse of model_to_spec, resolved; InputError naming `origin` for
 *  an empty or malformed text or an unknown model or option (old names
 *  included). */
ModelConfig model_from_spec(const std::string& text, const std::string& origin);

/** Number of layers of the (resolved) model. */
int num_layers(const ModelConfig& config);

/** Contiguous layer ranges [first, last) of each stage. */
using LayerRanges = std::vector<std::pair<int, int>>;

/** `num_stages` ranges with layer counts as equal as possible (the earlier
 *  stages take the extra layers). InputError when there are fewer layers than
 *  stages. */
LayerRanges uniform_ranges(int layers, int num_stages);

/** Ranges from layer counts per stage ("3,5": stage 0 takes layers 0-2, stage
 *  1 layers 3-7); the counts must add up to `layers`. */
LayerRanges ranges_from_counts(const std::vector<int>& counts, int layers);

}  // namespace pipegrid::validate
