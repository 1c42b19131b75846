// The FP8 recipe through make_plan, the engine and metrics (issue 32 item
// 3): an FP8 run of a GPT on H100s is faster than its bf16 run, never above
// the FP8 peak, and holds Transformer Engine's FP8 weight copies and its
// FP8-saved activations in memory; A100s refuse it.

#include <gtest/gtest.h>

#include <string>

#include "api/simulation.hpp"
#include "core/fp8.hpp"
#include "core/plan.hpp"
#include "expect_input_error.hpp"

namespace pipegrid {
namespace {

const std::string kSource = PIPEGRID_SOURCE_DIR;

struct Fp8GptRun {
  Plan plan;
  api::RunResult result;
};

Fp8GptRun run_gpt(const std::string& fp8_format, const std::string& schedule = "1f1b-sno", int micro_batches = 4,
            const std::string& platform = "tp-h100-1x4.xml", long long micro_batch_size = 2) {
  api::PlanRequest request;
  request.platform_file = kSource + "/tests/data/common/" + platform;
  request.model = {"gpt",
                   {{"layers", 4}, {"hidden", 2048}, {"heads", 16}, {"sequence", 2048}, {"flash_attention", 1}},
                   micro_batch_size,
                   "bf16"};
  request.schedule = schedule;
  request.micro_batches = micro_batches;
  request.partition = "megatron";
  request.network = "analytic";
  request.fp8_format = fp8_format;
  Fp8GptRun run{api::make_plan(request), {}};
  run.result = api::run_plan(run.plan);
  return run;
}

TEST(Fp8Run, FasterThanBf16AndNeverAboveTheFp8Peak) {
  const Fp8GptRun bf16 = run_gpt("");
  for (const char* format : {"hybrid", "e4m3"}) {
    const Fp8GptRun fp8 = run_gpt(format);
    EXPECT_EQ(fp8.plan.fp8_format, format);
    const double speedup = bf16.result.metrics.minibatch_time_s / fp8.result.metrics.minibatch_time_s;
    EXPECT_GT(speedup, 1.05) << format;
    EXPECT_LT(speedup, 2) << format;  // only the linear GEMMs run twice as fast
    const FlopsUtilisation& u = fp8.result.utilisation;
    ASSERT_TRUE(u.tflops_per_gpu && u.peak_fp8_flops && u.mfu_of_fp8_peak && u.mfu);
    EXPECT_LE(*u.tflops_per_gpu * 1e12, *u.peak_fp8_flops / u.gpus);
    EXPECT_LT(*u.mfu_of_fp8_peak, 1);
    EXPECT_NEAR(*u.mfu, *u.tflops_per_gpu * 1e12 / 989.5e12, 1e-9);  // mfu against the bf16 peak
    EXPECT_TRUE(fp8.result.warnings.empty()) << fp8.result.warnings.front();
  }
  EXPECT_FALSE(bf16.result.utilisation.peak_fp8_flops);
}

TEST(Fp8Run, MemoryHoldsTheFp8WeightCacheAndTheFp8SavedInputs) {
  // GPipe with one micro-batch: each host's peak is its resident bytes plus
  // one micro-batch's stash, so the FP8 run's peak differs from bf16's by the
  // FP8 weights and transposes (2 bytes per FP8-GEMM parameter) plus the
  // change of the blocks' saved activations (micro-batches of 8 samples:
  // the stash, not the optimizer step's gradient copy, makes each peak).
  const Fp8GptRun bf16 = run_gpt("", "gpipe", 1, "tp-h100-1x4.xml", 8);
  const Fp8GptRun fp8 = run_gpt("hybrid", "gpipe", 1, "tp-h100-1x4.xml", 8);
  ASSERT_EQ(bf16.result.metrics.devices.size(), fp8.result.metrics.devices.size());
  for (std::size_t d = 0; d < fp8.result.metrics.devices.size(); ++d) {
    const DeviceMetrics& device = fp8.result.metrics.devices[d];
    ASSERT_EQ(device.stages.size(), 1u);
    double expected = 0;
    for (std::size_t l = 0; l < fp8.plan.profile.layers.size(); ++l) {
      if (fp8.plan.partition.stage_of_layer[l] != device.stages.front()) continue;
      expected += kFp8WeightCacheBytesPerParameter * fp8_gemm_parameters(fp8.plan.profile.layers[l]);
      expected += fp8.plan.profile.layers[l].stashed_bytes() - bf16.plan.profile.layers[l].stashed_bytes();
    }
    EXPECT_NEAR(device.peak_memory_bytes - bf16.result.metrics.devices[d].peak_memory_bytes, expected, 1) << device.host;
  }
}

TEST(Fp8Run, PlanFilesKeepTheRecipeOnlyWhenSet) {
  const Fp8GptRun fp8 = run_gpt("hybrid", "gpipe", 1);
  const std::string text = plan_to_json(fp8.plan);
  EXPECT_NE(text.find("\"fp8_format\": \"hybrid\""), std::string::npos);
  EXPECT_EQ(parse_plan_json(text, "p.json").fp8_format, "hybrid");
  EXPECT_EQ(plan_to_json(parse_plan_json(text, "p.json")), text);
  EXPECT_EQ(plan_to_json(run_gpt("", "gpipe", 1).plan).find("fp8_format"), std::string::npos);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string changed = text;
    changed.replace(changed.find(from), from.size(), to);
    return testutil::input_error_of([&] { parse_plan_json(changed, "p.json"); });
  };
  EXPECT_EQ(with("\"fp8_format\": \"hybrid\"", "\"fp8_format\": \"\""),
            "p.json: fp8_format: expected hybrid or e4m3, found \"\"");
  EXPECT_CONTAINS(with("\"fp8_format\": \"hybrid\"", "\"fp8_format\": \"e5m2\""),
                  "p.json: fp8_format: expected hybrid (E4M3 forward, E5M2 gradients) or e4m3, found 'e5m2'");
  EXPECT_CONTAINS(with("\"dtype\": \"bf16\"", "\"dtype\": \"fp32\""),
                  "p.json: fp8_format hybrid: FP8 is a recipe on top of 16-bit mixed precision");
}

TEST(Fp8Run, RefusedOnA100AndWithoutBf16) {
  const std::string message = testutil::input_error_of([] { run_gpt("hybrid", "1f1b-sno", 4, "a100-1x4.xml"); });
  EXPECT_CONTAINS(message, "--fp8-format hybrid: ");
  EXPECT_CONTAINS(message, "a100-1x4.xml: host 's0-gpu0' is a A100 (NVIDIA A100 SXM4 80 GB), which has no FP8 tensor "
                           "cores; FP8 runs on H100, H200 or H800");
  api::PlanRequest request;
  request.platform_file = kSource + "/tests/data/common/tp-h100-1x4.xml";
  request.model = {"gpt", {{"layers", 4}, {"hidden", 512}, {"heads", 8}, {"sequence", 512}}, 2, "fp32"};
  request.schedule = "gpipe";
  request.fp8_format = "hybrid";
  EXPECT_CONTAINS(testutil::input_error_of([&] { api::make_plan(request); }), "expected dtype bf16 or fp16, found fp32");
}

}  // namespace
}  // namespace pipegrid
