#include "core/recompute.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/platform_check.hpp"

namespace pipegrid {

namespace {

bool is_transformer(const Layer& layer) { return layer.op == "transformer"; }

}  // namespace

void check_layer_recompute(const LayerRecompute& recompute) {
  const std::string& granularity = recompute.granularity;
  if (granularity.empty()) {
    // Megatron ignores them without a granularity; pipegrid never ignores an option.
    if (!recompute.method.empty())
      throw InputError(fmt::format("--recompute-method {}: applies with --recompute-granularity full; give it, or drop "
                                   "--recompute-method",
                                   printable(recompute.method)));
    if (recompute.num_layers != 0)
      throw InputError(fmt::format("--recompute-num-layers {}: applies with --recompute-granularity full; give it, or drop "
                                   "--recompute-num-layers",
                                   recompute.num_layers));
    return;
  }
  if (granularity != "full" && granularity != "selective")
    throw InputError(fmt::format("--recompute-granularity: expected full or selective, found '{}'", printable(granularity)));
  if (granularity == "selective") {
    // Megatron-LM core_v0.14.0, validate_args and TransformerConfig.__post_init__.
    if (!recompute.method.empty())
      throw InputError(fmt::format("--recompute-method {}: recompute method is not yet supported for selective "
                                   "recomputing granularity (Megatron-LM); selective recomputes the attention core of "
                                   "every transformer layer: drop --recompute-method",
                                   printable(recompute.method)));
    if (recompute.num_layers != 0)
      throw InputError(fmt::format("--recompute-num-layers {}: When using recompute_granularity: selective "
                                   "recompute_num_layers must be None (Megatron-LM): drop --recompute-num-layers",
                                   recompute.num_layers));
    return;
  }
  if (recompute.method.empty())
    throw InputError("--recompute-granularity full: Using recompute_granularity: full so recompute_method must be "
                     "\"block\" or \"uniform\" (Megatron-LM): give --recompute-method uniform or block");
  if (recompute.method != "uniform" && recompute.method != "block")
    throw InputError(fmt::format("--recompute-method: expected uniform or block, found '{}'", printable(recompute.method)));
  if (recompute.num_layers < 1)
    throw InputError(fmt::format("--recompute-num-layers: When using recompute_granularity: full recompute_num_layers "
                                 "must be at least 1 (Megatron-LM), found {}",
                                 recompute.num_layers == 0 ? std::string("nothing") : fmt::format("{}", recompute.num_layers)));
}

std::string layer_recompute_text(const LayerRecompute& recompute) {
  if (recompute.granularity == "selective") return "selective recomputation (the attention core of every transformer layer)";
  if (recompute.granularity != "full") return "";
  const int n = recompute.num_layers;
  if (recompute.method == "uniform")
    return fmt::format("full recomputation, uniform: every transformer layer, checkpointed in groups of {}", n);
  return fmt::format("full recomputation, block: the first {} transformer layer{} of each stage, each checkpointed", n,
                     n == 1 ? "" : "s");
}

void check_layer_recompute_profile(const LayerRecompute& recompute, const Profile& profile,
                                   const std::string& profile_label) {
  if (!recompute.enabled()) return;
  const std::string flag = "--recompute-granularity " + recompute.granularity;
  const auto transformer = std::find_if(profile.layers.begin(), profile.layers.end(), is_transformer);
  if (transformer == profile.layers.end())
    throw InputError(fmt::format("{}: recomputes transformer layers (op \"transformer\"), and {} has none; --recompute "
                                 "recomputes any stage's layers (GPipe's recomputation)",
                                 flag, profile_label));
  if (recompute.granularity != "selective") return;
  for (const Layer& layer : profile.layers)
    if (is_transformer(layer) && !layer.attention_core_flops_share)
      throw InputError(fmt::format("{}: recomputes each transformer layer's attention core, and layer '{}' of {} does not "
                                   "give it (attention_core_flops_share and attention_core_stash_share, which the gpt "
                                   "model's layers give); use --recompute-granularity full",
                                   flag, printable(layer.name), profile_label));
}

std::vector<StageRecompute> stage_recompute(const Profile& profile, const Partition& partition,
                                            const LayerRecompute& recompute, double checkpoint_input_factor) {
  const std::vector<StageCost> costs = stage_costs(profile, partition);
  std::vector<StageRecompute> stages(costs.size());
  const bool selective = recompute.granularity == "selective";
  for (std::size_t s = 0; s < costs.size(); ++s) {
    const StageCost& cost = costs[s];
    StageRecompute& stage = stages[s];
    stage.kept_bytes = cost.input_bytes;
    // The input of layer l as a checkpoint holds it.
    auto checkpoint_of = [&](int l) {
      return l == cost.first_layer ? (checkpoint_input_factor - 1) * cost.input_bytes
                                   : checkpoint_input_factor * profile.layers[static_cast<std::size_t>(l - 1)].output_bytes;
    };
    int transformers = 0;  // transformer layers of the stage seen so far
    double group_stash = 0;
    int group_size = 0;
    for (int l = cost.first_layer; l <= cost.last_layer; ++l) {
      const Layer& layer = profile.layers[static_cast<std::size_t>(l)];
      double share = 0;
      if (!is_transformer(layer)) {
        stage.kept_bytes += layer.stashed_bytes();
      } else if (selective) {
        share = layer.attention_core_time_share.value_or(layer.attention_core_flops_share.value_or(0));
        const double core = layer.stashed_bytes() * layer.attention_core_stash_share.value_or(0);
        stage.kept_bytes += layer.stashed_bytes() - core;
        stage.recompute_bytes = std::max(stage.recompute_bytes, core);
      } else if (recompute.method == "block") {
        if (transformers < recompute.num_layers) {
          share = 1;
          stage.kept_bytes += checkpoint_of(l);
          stage.recompute_bytes = std::max(stage.recompute_bytes, layer.stashed_bytes());
        } else {
          stage.kept_bytes += layer.stashed_bytes();
        }
      } else {  // uniform: groups of num_layers, each keeping its first layer's input
        share = 1;
        if (group_size == recompute.num_layers) {
          group_size = 0;
          group_stash = 0;
        }
        if (group_size == 0) stage.kept_bytes += checkpoint_of(l);
        ++group_size;
        group_stash += layer.stashed_bytes();
        stage.recompute_bytes = std::max(stage.recompute_bytes, group_stash);
      }
      if (is_transformer(layer)) ++transformers;
      stage.layer_share.push_back(share);
      stage.recompute_s += share * layer.forward_s;
    }
  }
  return stages;
}

std::string executor_layer_recompute_refusal(const std::string& flag, const std::string& command,
                                             const std::string& simulate_instead) {
  return fmt::format("{0}: pipegrid {1} runs the model for real, and its executor recomputes whole stages only "
                     "(--recompute: each forward keeps its stage input, a recompute re-runs the stage's forward before "
                     "its backward), not Megatron-LM's recomputation layer by layer, which pipegrid simulates only; "
                     "give --recompute to {1}, or {2} to simulate",
                     flag, command, simulate_instead.empty() ? flag : simulate_instead);
}

}  // namespace pipegrid
