// Context parallelism as a profile transform (core/context_parallel.hpp).

#include "core/context_parallel.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/precision.hpp"

namespace pipegrid {

void check_context_parallel_size(int cp, const std::string& flag) {
  if (cp < 1 || cp > kMaxContextParallel)
    throw InputError(fmt::format("{}: expected ranks per sequence from 1 to {}, found {}", flag, kMaxContextParallel, cp));
}

double point_to_point_s(double bytes, const TensorParallelLink& link) {
  if (!(bytes > 0)) return 0;
  return link.nccl_latency_s + link.latency_s + bytes / (link.nccl_efficiency * link.bandwidth_Bps);
}

double ring_attention_s(double attention_s, double kv_transfer_s, int cp, bool backward) {
  if (cp <= 1) return attention_s;
  const double c = attention_s / cp, x = kv_transfer_s;
  if (!backward) return (cp - 1) * std::max(c, x) + c;
  return 2 * std::max(c, x) + (cp - 2) * std::max(c, 2 * x);
}

double ring_attention_exposed_s(double attention_s, double kv_transfer_s, int cp, bool backward) {
  return std::max(0.0, ring_attention_s(attention_s, kv_transfer_s, cp, backward) - attention_s);
}

double kv_block_bytes(const TransformerShape& shape, int cp, int t, double element_bytes) {
  return 2 * (shape.sequence / cp) * (shape.kv_columns / std::max(1, t)) * shape.batch * element_bytes;
}

double data_context_gradient_factor(int d, int cp) {
  if (cp <= 1 || d <= 1) return 1;
  const double n = static_cast<double>(d) * cp;
  return ((n - 1) / n) / ((d - 1.0) / d);
}

std::vector<std::vector<int>> context_parallel_rings(std::size_t hosts, int t, int cp) {
  check_context_parallel_size(cp);
  const std::size_t group = static_cast<std::size_t>(std::max(1, t)) * static_cast<std::size_t>(cp);
  if (hosts % group != 0)
    throw InputError(fmt::format("--context-parallel {}: tensor parallel {} x context parallel {} = {} hosts per group, "
                                 "but the platform declares {} hosts; expected a multiple of {}",
                                 cp, t, cp, group, hosts, group));
  std::vector<std::vector<int>> rings;
  for (std::size_t first = 0; first < hosts; first += group) {
    std::vector<int> ring;
    for (int c = 0; c < cp; ++c) ring.push_back(static_cast<int>(first + static_cast<std::size_t>(c * std::max(1, t))));
    rings.push_back(std::move(ring));
  }
  return rings;
}

namespace {

void divide_times(LayerTimes& times, double cp) {
  times.forward_s /= cp;
  times.backward_s /= cp;
  if (times.backward_input_s) *times.backward_input_s /= cp;
  if (times.backward_weight_s) *times.backward_weight_s /= cp;
}

// Adds the ring's exposed seconds to a pass's times, the backward's parts made explicit.
void add_exchange(LayerTimes& times, double forward_extra_s, double backward_extra_s, bool has_parameters) {
  const BackwardSplit split = backward_split(times.backward_s, times.backward_input_s, times.backward_weight_s, has_parameters);
  times.forward_s += forward_extra_s;
  times.backward_input_s = split.input_s + backward_extra_s;
  times.backward_weight_s = split.weight_s;
  times.backward_s = *times.backward_input_s + *times.backward_weight_s;
}

}  // namespace

ContextParallelProfile context_parallel_profile(const Profile& profile, int cp, int t, const TensorParallelLink& link) {
  check_context_parallel_size(cp);
  ContextParallelProfile out{profile, {}};
  if (cp == 1) return out;
  const double e = dtype_bytes(profile.dtype.empty() ? "fp32" : profile.dtype, "the profile's dtype");
  Profile& p = out.profile;
  const double divisor = cp;
  p.input_bytes /= divisor;
  int rings = 0;
  double block_bytes = 0, block_s = 0, sequence = 0;
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    Layer& layer = p.layers[i];
    const bool transformer = layer.op == "transformer";
    if (transformer) {
      if (!layer.transformer_shape)
        throw InputError(fmt::format("--context-parallel {}: layer {} '{}' is a transformer layer without a "
                                     "transformer_shape; ring attention needs its sequence and key/value widths (the "
                                     "gpt generator's layers have them)",
                                     cp, i, layer.name));
      const TransformerShape& shape = *layer.transformer_shape;
      if (!shape.flash_attention)
        throw InputError(fmt::format("--context-parallel {}: layer {} '{}' uses unfused attention; Megatron-Core's "
                                     "context parallelism runs Transformer Engine's ring attention over fused "
                                     "attention kernels (core_v0.14.0 DotProductAttention asserts context parallel "
                                     "1): expected --flash-attention 1",
                                     cp, i, layer.name));
      const double chunks = 2.0 * cp;
      if (!(shape.sequence > 0) || std::fmod(shape.sequence, chunks) != 0)
        throw InputError(fmt::format("--context-parallel {}: sequence {} does not split into 2 x {} = {} equal chunks "
                                     "(Megatron-Core's get_batch_on_this_cp_rank, megatron/core/utils.py, "
                                     "core_v0.14.0, cuts each sequence into 2 cp chunks for the causal load "
                                     "balance): expected a multiple of {}",
                                     cp, shape.sequence, cp, chunks, chunks));
      sequence = shape.sequence;
    }
    // The rank's share of every pass.
    layer.forward_s /= divisor;
    layer.backward_s /= divisor;
    if (layer.backward_input_s) *layer.backward_input_s /= divisor;
    if (layer.backward_weight_s) *layer.backward_weight_s /= divisor;
    for (auto& [device, times] : layer.device_times) divide_times(times, divisor);
    for (std::optional<double>* work : {&layer.forward_flops, &layer.backward_input_flops, &layer.backward_weight_flops,
                                        &layer.bytes_read, &layer.bytes_written})
      if (*work) **work /= divisor;
    layer.activation_bytes = layer.stashed_bytes() / divisor;
    layer.output_bytes /= divisor;
    if (!transformer) continue;
    // The ring: the K,V blocks passed on during the attention's cp steps.
    const double bytes = kv_block_bytes(*layer.transformer_shape, cp, t, e);
    const double transfer_s = point_to_point_s(bytes, link);
    const auto attention_share = layer.attention_core_time_share ? layer.attention_core_time_share
                                                                 : layer.attention_core_flops_share;
    const double share = attention_share.value_or(0);
    const auto exchange = [&](LayerTimes& times) {
      const double attention_s = share * times.forward_s;
      add_exchange(times, ring_attention_exposed_s(attention_s, transfer_s, cp, false),
                   ring_attention_exposed_s(kAttentionBackwardRatio * attention_s, transfer_s, cp, true),
                   layer.has_parameters());
    };
    LayerTimes base{layer.forward_s, layer.backward_s, layer.backward_input_s, layer.backward_weight_s};
    exchange(base);
    layer.forward_s = base.forward_s;
    layer.backward_s = base.backward_s;
    layer.backward_input_s = base.backward_input_s;
    layer.backward_weight_s = base.backward_weight_s;
    for (auto& [device, times] : layer.device_times) exchange(times);
    ++rings;
    block_bytes = bytes;
    block_s = transfer_s;
  }
  if (rings == 0)
    throw InputError(fmt::format("--context-parallel {}: profile '{}' has no transformer layer (op \"transformer\"); "
                                 "context parallelism splits the sequences of a transformer (the gpt model's)",
                                 cp, profile.name));
  out.note = fmt::format("context parallel {}: each rank holds {} of every sequence's tokens (2 x {} load-balanced "
                         "chunks), every layer's work, stash and stage transfers / {}",
                         cp, sequence > 0 ? fmt::format("{:g}", sequence / cp) : std::string("1 / cp"), cp, cp);
  if (rings > 0)
    out.note += fmt::format("; ring attention (Transformer Engine, --cp-comm-type p2p) in {} transformer layer{}: K,V "
                            "blocks of {:.4g} MB passed point to point, {:.4g} ms each over {:.4g} GB/s, overlapped "
                            "with the attention's {} steps (the exposed part charged)",
                            rings, rings == 1 ? "" : "s", block_bytes / 1e6, block_s * 1e3, link.bandwidth_Bps / 1e9,
                            cp);
  return out;
}

}  // namespace pipegrid
