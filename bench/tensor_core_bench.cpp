// The tensor-core model's fit and its error per operation class on the
// fit set (docs/devices.md, "Tensor-core model"): measured A100 pass times
// of GPT layers from Zero Bubble (Qi et al. 2024, Table 9: one pipeline
// stage's F, B (input gradient) and W per micro-batch, fp16, flash
// attention, sequence 1024) and Korthikanti et al. 2022 (Table 4: one 22B
// layer's forward and backward under 8-way tensor parallelism, unfused
// attention, sequence 2048, micro-batch 4). Prints the fitted constants
// and, per sample, measured and predicted times; asserts nothing.
//   pipegrid_tensor_core_bench                    fit, then the table with the shipped A100 constants
//   pipegrid_tensor_core_bench --print-constants  the fitted constants only
//   pipegrid_tensor_core_bench --zb-flash         Zero Bubble's runs taken as flash attention (see kZbFlash)

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/device_model.hpp"
#include "core/gpu_kernels.hpp"

namespace {

using namespace pipegrid;

struct Measured {
  std::string label;
  TransformerShape shape;
  int layers = 1;  ///< transformer layers the pass covers
  int t = 1;
  bool sequence_parallel = false;
  char pass = 'F';  ///< F, B (input gradient, or a whole backward in Korthikanti's table: I + W), W
  bool whole_backward = false;
  double measured_s = 0;
};

TransformerShape gpt(double batch, double sequence, double hidden, double heads, double ffn, bool flash) {
  TransformerShape shape;
  shape.batch = batch;
  shape.sequence = sequence;
  shape.hidden = hidden;
  shape.heads = heads;
  shape.kv_columns = hidden;
  shape.ffn = ffn;
  shape.flash_attention = flash;
  return shape;
}

/// Seconds of one all-reduce of `bytes` over 8 GPUs of a DGX A100 as NCCL
/// runs it (docs/devices.md: ring, 300 GB/s NVLink at the 0.77 bus
/// efficiency of docs/platforms.md, 10 us start): what Korthikanti's forward
/// times hold besides compute.
double dgx_a100_all_reduce_s(double bytes) { return 10e-6 + 2.0 * 7 / 8 * bytes / (0.77 * 300e9); }

/// Zero Bubble's Table 9 runs are taken with unfused attention: their F and
/// B exceed W by a time proportional to the attention scores (b a s^2; per
/// layer 0.020-0.027 ms per million scores over the four models), which a
/// flash kernel does not have (docs/devices.md). --zb-flash fits them as
/// flash attention instead, to compare.
bool kZbFlash = false;
std::vector<Measured> fit_set() {
  std::vector<Measured> out;
  // Zero Bubble Table 9 (ms), the first m of each model (the others are
  // within 2%): a stage of (L + 2) / p layers, micro-batch b, sequence 1024.
  struct Zb {
    const char* name;
    double heads, hidden, ffn, batch;
    int layers;
    double f, b, w;
  };
  const Zb zb[] = {{"ZB 1.5B", 24, 2304, 9216, 6, 3, 18.522, 18.086, 9.337},
                   {"ZB 6.2B", 32, 4096, 16384, 3, 4, 29.718, 29.444, 19.927},
                   {"ZB 14.6B", 40, 5120, 20480, 1, 3, 11.347, 11.248, 8.132},
                   {"ZB 28.3B", 48, 6144, 24576, 1, 2, 10.419, 10.207, 7.715}};
  for (const Zb& row : zb) {
    const TransformerShape shape = gpt(row.batch, 1024, row.hidden, row.heads, row.ffn, kZbFlash);
    out.push_back({std::string(row.name) + " F", shape, row.layers, 1, false, 'F', false, row.f * 1e-3});
    out.push_back({std::string(row.name) + " B", shape, row.layers, 1, false, 'B', false, row.b * 1e-3});
    out.push_back({std::string(row.name) + " W", shape, row.layers, 1, false, 'W', false, row.w * 1e-3});
  }
  // Korthikanti Table 4 (ms): the forward less its two all-reduces (or two
  // all-gathers and two reduce-scatters: the same bytes) of N h fp16
  // values; the backward's overlap their all-reduces with the weight
  // gradients (the paper's section 5.2), so it is taken as compute.
  const TransformerShape k22 = gpt(4, 2048, 6144, 64, 24576, false);
  const double comm = 2 * dgx_a100_all_reduce_s(4 * 2048 * 6144 * 2.0);
  out.push_back({"Korthikanti 22B F", k22, 1, 8, false, 'F', false, 7.7e-3 - comm});
  out.push_back({"Korthikanti 22B B", k22, 1, 8, false, 'B', true, 11.9e-3});
  out.push_back({"Korthikanti 22B SP F", k22, 1, 8, true, 'F', false, 7.2e-3 - comm});
  out.push_back({"Korthikanti 22B SP B", k22, 1, 8, true, 'B', true, 11.8e-3});
  return out;
}

KernelSums kernels_of(const Measured& m, const DeviceModel& device) {
  Layer layer;
  layer.name = m.label;
  layer.op = "transformer";
  layer.transformer_shape = m.shape;
  const LayerKernels k = layer_kernels(layer, device.tensor_cores, device.peak_flops("fp16"), 2, {m.t, m.sequence_parallel});
  KernelSums pass = m.pass == 'F' ? k.forward : m.pass == 'W' ? k.weight : k.input;
  if (m.whole_backward) {
    pass.gemm_s += k.weight.gemm_s;
    pass.memory_bytes += k.weight.memory_bytes;
    pass.kernels += k.weight.kernels;
  }
  pass.gemm_s *= m.layers;
  pass.attention_forward_s *= m.layers;
  pass.attention_backward_s *= m.layers;
  pass.memory_bytes *= m.layers;
  pass.kernels *= m.layers;
  return pass;
}

}  // namespace

int main(int argc, char** argv) {
  const bool constants_only = argc > 1 && std::strcmp(argv[1], "--print-constants") == 0;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--zb-flash") == 0) kZbFlash = true;
  const DeviceModel& a100 = *find_device_model("A100");
  const std::vector<Measured> set = fit_set();
  std::vector<TensorCoreSample> samples;
  for (const Measured& m : set) samples.push_back({kernels_of(m, a100), m.measured_s});
  const TensorCoreModel fitted = fit_tensor_cores(samples, a100.tensor_cores, a100.memory_bandwidth_Bps);
  std::printf("A100 fit: gemm_efficiency %.6g, memory_efficiency %.6g, kernel_overhead_s %.6g\n", fitted.gemm_efficiency,
              fitted.memory_efficiency, fitted.kernel_overhead_s);
  if (constants_only) return 0;
  for (const auto& [title, model] : {std::pair{"fitted", fitted}, std::pair{"shipped", a100.tensor_cores}}) {
    std::printf("\n%s constants (gemm %.3f, memory %.3f, overhead %.3g s, flash %.2f / %.2f):\n", title,
                model.gemm_efficiency, model.memory_efficiency, model.kernel_overhead_s,
                model.attention_forward_efficiency, model.attention_backward_efficiency);
    std::printf("| sample | measured ms | predicted ms | error | GEMM share | memory share |\n|---|---:|---:|---:|---:|---:|\n");
    double total = 0;
    for (std::size_t i = 0; i < set.size(); ++i) {
      const KernelSums& k = samples[i].kernels;
      const double predicted = k.seconds(model, a100.memory_bandwidth_Bps);
      const double error = (predicted - set[i].measured_s) / set[i].measured_s;
      total += std::fabs(error);
      std::printf("| %s | %.3f | %.3f | %+.1f%% | %.0f%% | %.0f%% |\n", set[i].label.c_str(), set[i].measured_s * 1e3,
                  predicted * 1e3, 100 * error, 100 * k.gemm_s / model.gemm_efficiency / predicted,
                  100 * k.memory_bytes / (a100.memory_bandwidth_Bps * model.memory_efficiency) / predicted);
    }
    std::printf("mean |error| %.1f%%\n", 100 * total / static_cast<double>(set.size()));
    // Per operation class: W passes are weight-gradient GEMMs only; F and B
    // (input gradient, or a whole backward) add attention and element-wise work.
    for (const char pass : {'F', 'B', 'W'}) {
      double sum = 0;
      int count = 0;
      for (std::size_t i = 0; i < set.size(); ++i) {
        if (set[i].pass != pass) continue;
        sum += std::fabs(samples[i].kernels.seconds(model, a100.memory_bandwidth_Bps) - set[i].measured_s) / set[i].measured_s;
        ++count;
      }
      if (count > 0)
        std::printf("  A100 %s passes: mean |error| %.1f%% over %d\n",
                    pass == 'F' ? "forward" : pass == 'W' ? "weight-gradient (GEMMs only)" : "input-gradient / backward",
                    100 * sum / count, count);
    }
  }
  return 0;
}
