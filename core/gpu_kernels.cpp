// The tensor-core kernel model (core/gpu_kernels.hpp; docs/devices.md).

#include "core/gpu_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Dense>
#include <fmt/format.h>

#include "core/device_model.hpp"
#include "core/error.hpp"

namespace pipegrid {

namespace {

struct Tile {
  double rows, columns;
};
/// cuBLAS's CTA tiles (NVIDIA, Matrix Multiplication Background User's
/// Guide, DU-09799-001, section 2.3), largest first.
constexpr Tile kTiles[] = {{256, 128}, {128, 256}, {128, 128}, {128, 64}, {64, 128}, {64, 64}};
/// The tile area one SM holds per wave: one 256 x 128 tile (the guide's A100
/// example: "one thread block per SM, leading to a wave size of 108 tiles").
constexpr double kTileAreaPerSm = 256.0 * 128.0;
/// Operand reuse (mt nt / (mt + nt) elements per element loaded) at which a
/// tile's loads keep up with its tensor cores: 128 x 128's.
constexpr double kFullIntensity = 64;
/// K is consumed in steps of this many elements.
constexpr double kKStep = 32;

/// Adds the element-wise kernels' bytes and counts them.
void memory_kernel(KernelSums& sums, double bytes, double kernels = 1) {
  sums.memory_bytes += bytes;
  sums.kernels += kernels;
}

/// The kernels of a block with multi-head latent attention or experts
/// (layer_kernels' contract), added to `out`.
template <typename Gemm, typename WeightGemm, typename Norm, typename DropoutAdd>
void moe_or_mla_block(LayerKernels& out, const TransformerShape& g, double t, double rows, double tokens, double e,
                      double peak_flops, const TensorParallelShare& share, Gemm& gemm, WeightGemm& weight_gemm, Norm& norm,
                      DropoutAdd& dropout_add) {
  const double h = g.hidden, s = g.sequence, heads = g.heads / t;
  // Element-wise kernel over `elements` of the member: `forward` and
  // `input` passes of the elements each.
  const auto pass = [&](double elements, double forward, double input) {
    memory_kernel(out.forward, forward * elements * e);
    memory_kernel(out.input, input * elements * e);
  };
  norm(rows);
  double qk_width = h / g.heads, v_width = h / g.heads;
  if (!g.mla()) {
    weight_gemm(tokens, (h + 2 * g.kv_columns) / t, h);
    if (g.rotary) pass(tokens * (h + g.kv_columns) / t, 2, 2);
  } else {
    qk_width = g.qk_head_dim + g.qk_pos_head_dim;
    v_width = g.v_head_dim;
    if (g.q_lora_rank > 0) {
      weight_gemm(tokens, g.q_lora_rank, h);
      pass(tokens * g.q_lora_rank, 2, 3);  // q_layernorm
      weight_gemm(tokens, heads * qk_width, g.q_lora_rank);
    } else {
      weight_gemm(tokens, heads * qk_width, h);
    }
    weight_gemm(tokens, g.kv_lora_rank + g.qk_pos_head_dim, h);
    pass(tokens * g.kv_lora_rank, 2, 3);  // kv_layernorm
    weight_gemm(tokens, heads * (g.qk_head_dim + g.v_head_dim), g.kv_lora_rank);
    pass(tokens * (heads + 1) * g.qk_pos_head_dim, 2, 2);  // rotary
    pass(tokens * heads * qk_width, 2, 2);                 // the keys assembled
  }
  KernelSums& core = out.attention_core;
  const double batch = g.batch * heads;
  if (g.flash_attention) {
    const double causal = g.causal ? 0.5 : 1;
    const double qk_flops = 2 * batch * s * s * qk_width * causal, v_flops = 2 * batch * s * s * v_width * causal;
    core.attention_forward_s += (qk_flops + v_flops) / peak_flops;
    core.kernels += 1;
    out.input.attention_backward_s += (2 * (qk_flops + v_flops) + qk_flops) / peak_flops;
    out.input.kernels += 1;
  } else {
    const double scores = batch * s * s;
    gemm(core, {s, s, qk_width, batch});
    memory_kernel(core, 2 * scores * e);
    memory_kernel(core, 2 * scores * e + scores);
    gemm(core, {s, v_width, s, batch});
    gemm(out.input, {s, s, v_width, batch});
    gemm(out.input, {s, v_width, s, batch});
    memory_kernel(out.input, 2 * scores * e + scores);
    memory_kernel(out.input, 3 * scores * e);
    gemm(out.input, {s, qk_width, s, batch});
    gemm(out.input, {s, qk_width, s, batch});
  }
  out.forward.gemm_s += core.gemm_s;
  out.forward.attention_forward_s += core.attention_forward_s;
  out.forward.memory_bytes += core.memory_bytes;
  out.forward.kernels += core.kernels;
  weight_gemm(tokens, h, heads * v_width);
  dropout_add();
  norm(rows);
  const auto mlp = [&](double width) {
    const double up = g.swiglu ? 2 * width : width;
    weight_gemm(tokens, up / t, h);
    pass(tokens * width / t, g.swiglu ? 3 : 2, g.swiglu ? 5 : 3);
    weight_gemm(tokens, h, width / t);
  };
  if (!g.moe()) {
    mlp(g.ffn);
  } else {
    const double ep = std::max(1, share.expert_parallel);
    const double etp = share.expert_tensor_parallel > 0 ? share.expert_tensor_parallel : t;
    const double experts = g.experts, local_experts = std::max(1.0, experts / ep);
    weight_gemm(rows, experts, h);                 // router
    pass(rows * experts, 2, 2);                    // score function, top-k
    // Rows per local expert on the busiest rank (the imbalance is between
    // expert-parallel ranks: none at ep 1).
    const double received = tokens * g.topk * std::min(ep, experts) / experts * (ep > 1 ? g.imbalance : 1);
    const double local_rows = received * local_experts;
    pass(rows * h + local_rows * h, 1, 1);         // permute (and its backward)
    const double fe = g.expert_ffn, up = g.swiglu ? 2 * fe : fe;
    const auto grouped = [&](double n, double k) {
      gemm(out.forward, {received, n, k, local_experts});
      gemm(out.input, {received, k, n, local_experts});
      gemm(out.weight, {k, n, received, local_experts});
    };
    grouped(up / etp, h);
    pass(local_rows * fe / etp, g.swiglu ? 3 : 2, g.swiglu ? 5 : 3);
    grouped(h, fe / etp);
    pass(local_rows * h + rows * h, 1, 2);         // unpermute, weighted by the probabilities
    if (g.shared_ffn > 0) {
      mlp(g.shared_ffn);
      pass(rows * h, 3, 2);                        // shared + routed
    }
  }
  dropout_add();
}

}  // namespace

double gemm_unit_time_s(const GemmShape& gemm, int sms, double peak_flops) {
  if (!(gemm.m > 0 && gemm.n > 0 && gemm.k > 0 && gemm.batch > 0) || sms <= 0 || !(peak_flops > 0)) return 0;
  const double k = std::ceil(gemm.k / kKStep) * kKStep;
  double best = std::numeric_limits<double>::infinity();
  for (const Tile& tile : kTiles) {
    const double tiles = gemm.batch * std::ceil(gemm.m / tile.rows) * std::ceil(gemm.n / tile.columns);
    const double slots = sms * (kTileAreaPerSm / (tile.rows * tile.columns));
    const double waves = std::ceil(tiles / slots);
    const double intensity = tile.rows * tile.columns / (tile.rows + tile.columns);
    const double factor = std::min(1.0, intensity / kFullIntensity);
    const double per_slot_rate = peak_flops / slots * factor;
    best = std::min(best, waves * 2 * tile.rows * tile.columns * k / per_slot_rate);
  }
  return best;
}

double KernelSums::seconds(const TensorCoreModel& model, double bandwidth_Bps) const {
  double s = 0;
  if (gemm_s > 0) s += gemm_s / model.gemm_efficiency;
  if (attention_forward_s > 0) s += attention_forward_s / model.attention_forward_efficiency;
  if (attention_backward_s > 0) s += attention_backward_s / model.attention_backward_efficiency;
  if (memory_bytes > 0) s += memory_bytes / (bandwidth_Bps * model.memory_efficiency);
  return s + kernels * model.kernel_overhead_s;
}

LayerKernels layer_kernels(const Layer& layer, const TensorCoreModel& model, double peak_flops, double e,
                           const TensorParallelShare& share, double fp8_peak_flops) {
  if (!layer.transformer_shape)
    throw InputError(fmt::format("layer '{}': no transformer_shape to time kernel by kernel", layer.name));
  const TransformerShape& g = *layer.transformer_shape;
  const double t = std::max(1, share.t);
  const double cp = std::max(1, share.context_parallel);
  const double tokens = g.batch * g.sequence / cp;  // the context-parallel rank's tokens
  // Norms, dropouts and residual adds: split t ways under sequence parallelism.
  const double rows = share.sequence_parallel ? tokens / t : tokens;
  const double h = g.hidden, f = g.ffn, kv = g.kv_columns, s = g.sequence;
  const double up = g.swiglu ? 2 * f : f;
  const double head_width = h / g.heads;
  const double heads = g.heads / t;  // the member's attention heads
  LayerKernels out;
  auto gemm = [&](KernelSums& sums, const GemmShape& shape, double peak = 0) {
    sums.gemm_s += gemm_unit_time_s(shape, model.sms, peak > 0 ? peak : peak_flops);
    sums.kernels += 1;
  };
  // A weight GEMM of the forward (M x K by K x N) and its two gradients.
  auto weight_gemm = [&](double m, double n, double k) {
    gemm(out.forward, {m, n, k});
    gemm(out.input, {m, k, n});
    gemm(out.weight, {k, n, m});
  };
  // A transformer block's linear GEMM: in FP8 under the recipe, with the
  // casts of its input (input_rows x k: the member's own rows, which
  // sequence parallelism gathers after the cast) and of its output
  // gradient (gradient_rows x n), each with its transpose and amax fused.
  const bool fp8 = fp8_peak_flops > 0 && layer.op == "transformer";
  auto linear_gemm = [&](double m, double n, double k, double input_rows, double gradient_rows) {
    if (!fp8) return weight_gemm(m, n, k);
    gemm(out.forward, {m, n, k}, fp8_peak_flops);
    gemm(out.input, {m, k, n}, fp8_peak_flops);
    gemm(out.weight, {k, n, m}, fp8_peak_flops);
    memory_kernel(out.forward, input_rows * k * (e + 2));
    memory_kernel(out.input, gradient_rows * n * (e + 2));
  };
  auto norm = [&](double norm_rows) {
    memory_kernel(out.forward, 2 * norm_rows * h * e);
    memory_kernel(out.input, 3 * norm_rows * h * e);  // reads x and dy, writes dx (the scale's gradient folded in)
  };
  // Bias-dropout-add: reads the branch and the residual, writes the sum and a 1-byte mask.
  auto dropout_add = [&]() {
    memory_kernel(out.forward, 3 * rows * h * e + rows * h);
    memory_kernel(out.input, 2 * rows * h * e + rows * h);  // reads dy and the mask, writes the branch's gradient
  };
  if (layer.op == "transformer" && (g.moe() || g.mla())) {
    moe_or_mla_block(out, g, t, rows, tokens, e, peak_flops, share, gemm, weight_gemm, norm, dropout_add);
  } else if (layer.op == "transformer") {
    norm(rows);
    linear_gemm(tokens, (h + 2 * kv) / t, h, rows, tokens);
    if (g.rotary) {
      const double rotated = tokens * (h + kv) / t * e;
      memory_kernel(out.forward, 2 * rotated);
      memory_kernel(out.input, 2 * rotated);
    }
    KernelSums& core = out.attention_core;
    const double batch = g.batch * heads;
    if (g.flash_attention) {
      // s / cp queries against s keys; causal and load-balanced, 1 / cp of the causal FLOPs.
      const double flops = 4 * g.batch * s * s * h / t * (g.causal ? 0.5 : 1) / cp;
      core.attention_forward_s += flops / peak_flops;
      core.kernels += cp;  // one per ring step
      out.input.attention_backward_s += 2.5 * flops / peak_flops;  // recomputes Q K^T (FlashAttention-2, section 4.1)
      out.input.kernels += cp;
    } else {
      const double scores = batch * s * s;
      gemm(core, {s, s, head_width, batch});           // Q K^T
      memory_kernel(core, 2 * scores * e);             // scale, mask, softmax (one fused kernel)
      memory_kernel(core, 2 * scores * e + scores);    // dropout: its output and a 1-byte mask
      gemm(core, {s, head_width, s, batch});           // attention x V
      gemm(out.input, {s, s, head_width, batch});      // dP = dO V^T
      gemm(out.input, {s, head_width, s, batch});      // dV = P^T dO
      memory_kernel(out.input, 2 * scores * e + scores);  // dropout's backward
      memory_kernel(out.input, 3 * scores * e);        // softmax's backward: reads P and dP, writes dS
      gemm(out.input, {s, head_width, s, batch});      // dQ = dS K
      gemm(out.input, {s, head_width, s, batch});      // dK = dS^T Q
    }
    out.forward.gemm_s += core.gemm_s;
    out.forward.attention_forward_s += core.attention_forward_s;
    out.forward.memory_bytes += core.memory_bytes;
    out.forward.kernels += core.kernels;
    linear_gemm(tokens, h, h / t, tokens, rows);
    dropout_add();
    norm(rows);
    linear_gemm(tokens, up / t, h, rows, tokens);
    const double activation = tokens * f / t * e;
    memory_kernel(out.forward, (g.swiglu ? 3 : 2) * activation);  // fused bias-GeLU, or SwiGLU
    memory_kernel(out.input, (g.swiglu ? 5 : 3) * activation);
    linear_gemm(tokens, h, f / t, tokens, rows);
    dropout_add();
    if (g.linear_bias)  // each bias's gradient: a sum over the tokens of its GEMM's output gradient
      memory_kernel(out.weight, tokens * ((h + 2 * kv) / t + h + up / t + h) * e, 4);
  } else if (layer.op == "embedding") {
    out.runs_input = false;
    memory_kernel(out.forward, 2 * tokens * h * e);                      // word lookup
    if (g.position_table) memory_kernel(out.forward, 3 * tokens * h * e);  // + position
    memory_kernel(out.forward, 2 * rows * h * e + rows * h);             // dropout
    memory_kernel(out.weight, 2 * rows * h * e + rows * h);              // dropout's backward
    // The tables' gradients: the output gradient's rows added into fp32 gradient rows.
    memory_kernel(out.weight, (g.position_table ? 2 : 1) * tokens * h * (e + 8), g.position_table ? 2 : 1);
  } else if (layer.op == "norm") {
    norm(rows);
  } else if (layer.op == "linear") {
    // Split over the vocabulary only where tensor parallelism splits it (its `vocabulary`).
    weight_gemm(tokens, g.vocabulary / (layer.vocabulary ? t : 1), h);
  } else if (layer.op == "loss") {
    // Megatron-Core's vocab_parallel_cross_entropy over the member's logits:
    // max, subtract, exp, sum, normalise (5 reads and 3 writes of them);
    // backward: the softmax minus the one-hot, times the loss's gradient.
    const double logits = tokens * g.vocabulary / (layer.vocabulary ? t : 1) * e;
    memory_kernel(out.forward, 8 * logits, 5);
    memory_kernel(out.input, 2 * logits, 2);
  } else {
    throw InputError(fmt::format("layer '{}': op '{}' has no kernel model (expected embedding, transformer, norm, linear "
                                 "or loss with a transformer_shape)",
                                 layer.name, layer.op));
  }
  return out;
}

TensorCoreModel fit_tensor_cores(const std::vector<TensorCoreSample>& samples, const TensorCoreModel& given,
                                 double bandwidth_Bps) {
  if (samples.size() < 3) throw InputError(fmt::format("tensor-core fit: expected at least 3 samples, found {}", samples.size()));
  const Eigen::Index rows = static_cast<Eigen::Index>(samples.size());
  Eigen::MatrixXd design(rows, 3);
  Eigen::VectorXd target(rows);
  for (Eigen::Index i = 0; i < rows; ++i) {
    const TensorCoreSample& sample = samples[static_cast<std::size_t>(i)];
    if (!(sample.measured_s > 0) || !std::isfinite(sample.measured_s))
      throw InputError(fmt::format("tensor-core fit: sample {}: expected a measured time > 0, found {}", i, sample.measured_s));
    const KernelSums& k = sample.kernels;
    double attention = 0;
    if (k.attention_forward_s > 0) attention += k.attention_forward_s / given.attention_forward_efficiency;
    if (k.attention_backward_s > 0) attention += k.attention_backward_s / given.attention_backward_efficiency;
    design(i, 0) = k.gemm_s / sample.measured_s;
    design(i, 1) = k.memory_bytes / bandwidth_Bps / sample.measured_s;
    design(i, 2) = k.kernels / sample.measured_s;
    target(i) = (sample.measured_s - attention) / sample.measured_s;
  }
  const double lower[3] = {1 / kMaxComputeEfficiency, 1 / kMaxMemoryEfficiency, 0};
  // Active set: solve over the free coefficients, hold any past its bound, repeat.
  bool held[3] = {false, false, false};
  Eigen::Vector3d coefficient = Eigen::Vector3d::Zero();
  for (int round = 0; round < 4; ++round) {
    std::vector<Eigen::Index> free;
    Eigen::VectorXd rest = target;
    for (int c = 0; c < 3; ++c) {
      if (held[c]) rest -= design.col(c) * lower[c];
      else free.push_back(c);
    }
    if (!free.empty()) {
      Eigen::MatrixXd part(rows, static_cast<Eigen::Index>(free.size()));
      for (std::size_t j = 0; j < free.size(); ++j) part.col(static_cast<Eigen::Index>(j)) = design.col(free[j]);
      const Eigen::VectorXd solved = part.colPivHouseholderQr().solve(rest);
      for (std::size_t j = 0; j < free.size(); ++j) coefficient(free[j]) = solved(static_cast<Eigen::Index>(j));
    }
    bool changed = false;
    for (int c = 0; c < 3; ++c) {
      if (held[c]) coefficient(c) = lower[c];
      else if (!(coefficient(c) >= lower[c])) held[c] = changed = true;
    }
    if (!changed) break;
  }
  TensorCoreModel out = given;
  out.gemm_efficiency = 1 / coefficient(0);
  out.memory_efficiency = 1 / coefficient(1);
  out.kernel_overhead_s = coefficient(2);
  return out;
}

}  // namespace pipegrid
