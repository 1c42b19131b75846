// The FP8 recipe (core/fp8.hpp; docs/semantics.md, FP8, gives the sources).

#include "core/fp8.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/platform_check.hpp"

namespace pipegrid {

const std::vector<std::string>& fp8_format_names() {
  static const std::vector<std::string> names = {"hybrid", "e4m3"};
  return names;
}

void check_fp8_recipe(const std::string& format, const std::string& dtype, const std::string& flag) {
  if (format.empty()) return;
  const auto& names = fp8_format_names();
  if (std::find(names.begin(), names.end(), format) == names.end())
    throw InputError(fmt::format("{}: expected hybrid (E4M3 forward, E5M2 gradients) or e4m3, found '{}'", flag,
                                 printable(format)));
  if (dtype != "bf16" && dtype != "fp16")
    throw InputError(fmt::format("{} {}: FP8 is a recipe on top of 16-bit mixed precision (Megatron: --bf16 or --fp16 "
                                 "with --fp8-format); expected dtype bf16 or fp16, found {}",
                                 flag, format, dtype.empty() ? std::string("fp32 (no dtype given)") : dtype));
}

double fp8_gemm_parameters(const Layer& layer) {
  if (layer.op != "transformer" || !layer.transformer_shape) return 0;
  const TransformerShape& g = *layer.transformer_shape;
  const double h = g.hidden, kv = g.kv_columns, f = g.ffn, up = g.swiglu ? 2 * f : f;
  return h * (h + 2 * kv) + h * h + h * up + f * h;
}

double fp8_weight_cast_bytes_per_parameter(double element_bytes) { return element_bytes + 2; }

void apply_fp8_activations(Profile& profile, double e) {
  for (Layer& layer : profile.layers) {
    if (layer.op != "transformer" || !layer.transformer_shape || !layer.activation_bytes) continue;
    const TransformerShape& g = *layer.transformer_shape;
    const double rows = g.batch * g.sequence, h = g.hidden, f = g.ffn;
    const double saved_per_value = e - 1;
    // Norm outputs (Q K V and MLP up inputs) and the MLP down input: e -> 1 byte.
    double change = -saved_per_value * (2 * rows * h + rows * f);
    // Output projection input: an FP8 copy beside flash attention's own
    // output, or in place of the unfused product's output.
    change += g.flash_attention ? rows * h : -saved_per_value * rows * h;
    const double before = *layer.activation_bytes;
    const double after = before + change;
    const double replicated = layer.replicated_activation_fraction * before - saved_per_value * 2 * rows * h;
    layer.activation_bytes = after;
    layer.replicated_activation_fraction = std::clamp(replicated / after, 0.0, 1.0);
    if (layer.attention_core_stash_share) *layer.attention_core_stash_share *= before / after;
  }
}

}  // namespace pipegrid
