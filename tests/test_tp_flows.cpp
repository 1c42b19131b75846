// Tensor-parallel collectives as network flows (--tp-collectives flows;
// docs/semantics.md, Tensor parallelism) through api::make_plan, the
// SimGrid engine and metrics: on a group whose ring no other traffic
// shares, under the analytic network, every action takes what the
// collectives charged as compute time give it; the plan carries the
// collectives; the flag's bad values and --tp-comm-overlap are refused.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "api/simulation.hpp"
#include "core/error.hpp"
#include "core/plan.hpp"
#include "core/tensor_parallel.hpp"

namespace pipegrid {
namespace {

const std::string kSource = PIPEGRID_SOURCE_DIR;

struct Layout {
  int t = 2, p = 1;
  bool sequence_parallel = false;
  std::string recompute_granularity;  ///< "" or "full" (uniform, 1 layer)
};

std::string describe(const Layout& layout) {
  return fmt::format("t {} p {}{}{}", layout.t, layout.p, layout.sequence_parallel ? " sequence parallel" : "",
                     layout.recompute_granularity.empty() ? "" : " recompute " + layout.recompute_granularity);
}

// A GPT of 4 blocks (fp16) on one server of 4 H100s (tp-h100-1x4.xml: each
// GPU its own full-duplex link), 1F1B with 4 micro-batches, t x p x d = 4.
// `platform`: tp-h100-1x4.xml, or tp-h100-1x4-nccl.xml (the same with
// nccl_efficiency 0.8 and nccl_latency 10us on every link).
api::PlanRequest gpt_request(const Layout& layout, const std::string& tp_collectives,
                             const std::string& platform = "tp-h100-1x4.xml") {
  api::PlanRequest request;
  request.platform_file = kSource + "/tests/data/common/" + platform;
  request.model = {"gpt", {{"layers", 4}, {"hidden", 512}, {"heads", 8}, {"sequence", 1024}, {"vocabulary", 1000}}, 2, "fp16"};
  request.schedule = "1f1b-sno";
  request.micro_batches = 4;
  request.partition = "megatron";
  request.network = "analytic";
  request.tensor_parallel = layout.t;
  request.pipeline_parallel = layout.p;
  request.sequence_parallel = layout.sequence_parallel;
  if (!layout.recompute_granularity.empty()) {
    request.recompute_granularity = layout.recompute_granularity;
    request.recompute_method = "uniform";
    request.recompute_num_layers = 1;
  }
  request.tp_collectives = tp_collectives;
  return request;
}

bool is_compute(const std::string& action) {
  return action == "F" || action == "B" || action == "I" || action == "W" || action == "R";
}

TEST(TensorParallelFlows, OnAnUncontendedGroupEachActionTakesWhatComputeChargesIt) {
  // p 1: nothing but the group's own ring crosses its links during an
  // action (the data-parallel all-reduce, at d 2, follows the backwards).
  // NCCL's efficiency and start latency (docs/semantics.md) alike in both.
  std::vector<std::pair<std::string, Layout>> cases;
  for (const std::string platform : {"tp-h100-1x4.xml", "tp-h100-1x4-nccl.xml"})
    for (const Layout& layout : {Layout{4, 1, false, ""}, Layout{4, 1, true, ""}, Layout{2, 1, false, ""},
                                 Layout{2, 1, true, ""}, Layout{2, 1, false, "full"}})
      cases.emplace_back(platform, layout);
  for (const auto& [platform, layout] : cases) {
    const std::string what = describe(layout) + " on " + platform;
    Plan compute_plan = api::make_plan(gpt_request(layout, "compute", platform));
    Plan flows_plan = api::make_plan(gpt_request(layout, "flows", platform));
    // Not vacuous: the flows plan's layers lack the collectives' seconds.
    ASSERT_EQ(compute_plan.profile.layers.size(), flows_plan.profile.layers.size()) << what;
    ASSERT_EQ(flows_plan.tensor_parallel_collectives.size(), flows_plan.profile.layers.size()) << what;
    EXPECT_TRUE(compute_plan.tensor_parallel_collectives.empty()) << what;
    double compute_forward = 0, flows_forward = 0;
    for (std::size_t l = 0; l < compute_plan.profile.layers.size(); ++l) {
      compute_forward += compute_plan.profile.layers[l].forward_s;
      flows_forward += flows_plan.profile.layers[l].forward_s;
    }
    EXPECT_LT(flows_forward, compute_forward * 0.99) << what;
    const api::RunResult compute = api::run_plan(compute_plan);
    const api::RunResult flows = api::run_plan(flows_plan);
    std::vector<const TimelineRecord*> a, b;
    for (const TimelineRecord& r : compute.timeline.records)
      if (is_compute(r.action)) a.push_back(&r);
    for (const TimelineRecord& r : flows.timeline.records)
      if (is_compute(r.action)) b.push_back(&r);
    ASSERT_EQ(a.size(), b.size()) << what;
    ASSERT_FALSE(a.empty()) << what;
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(std::tie(a[i]->host, a[i]->stage, a[i]->action, a[i]->micro_batch, a[i]->mini_batch),
                std::tie(b[i]->host, b[i]->stage, b[i]->action, b[i]->micro_batch, b[i]->mini_batch))
          << what << " record " << i;
      EXPECT_NEAR(a[i]->start_s, b[i]->start_s, 1e-9) << what << " " << a[i]->action << a[i]->micro_batch;
      EXPECT_NEAR(a[i]->end_s, b[i]->end_s, 1e-9) << what << " " << a[i]->action << a[i]->micro_batch;
    }
    EXPECT_NEAR(compute.metrics.minibatch_time_s, flows.metrics.minibatch_time_s, 1e-9) << what;
  }
}

TEST(TensorParallelFlows, NcclPropertiesSlowTheCollectivesAndTheNoteSaysSo) {
  const Layout layout{4, 1, false, ""};
  for (const char* mode : {"compute", "flows"}) {
    Plan plain = api::make_plan(gpt_request(layout, mode));
    Plan nccl = api::make_plan(gpt_request(layout, mode, "tp-h100-1x4-nccl.xml"));
    EXPECT_GT(api::run_plan(nccl).metrics.minibatch_time_s, api::run_plan(plain).metrics.minibatch_time_s) << mode;
    EXPECT_EQ(plain.tensor_parallel_note.find("NCCL"), std::string::npos) << mode;
    EXPECT_NE(nccl.tensor_parallel_note.find("NCCL at 80% of line rate + 10 us per operation"), std::string::npos)
        << mode << ": " << nccl.tensor_parallel_note;
  }
}

TEST(TensorParallelFlows, ThePlanFileCarriesTheCollectivesAndRunsAlike) {
  Plan plan = api::make_plan(gpt_request(Layout{2, 2, true, ""}, "flows"));
  const std::string text = plan_to_json(plan);
  EXPECT_NE(text.find("\"tp_collectives\": \"flows\""), std::string::npos);
  EXPECT_NE(text.find("\"reduce_scatter\""), std::string::npos);
  Plan read = parse_plan_json(text, "plan.json");
  EXPECT_EQ(read.tp_collectives, "flows");
  EXPECT_EQ(read.tensor_parallel_collectives, plan.tensor_parallel_collectives);
  const api::RunResult first = api::run_plan(plan), second = api::run_plan(read);
  EXPECT_EQ(first.metrics.minibatch_time_s, second.metrics.minibatch_time_s);
  // The default is not written: plans without the option read as before.
  const std::string compute = plan_to_json(api::make_plan(gpt_request(Layout{2, 2, true, ""}, "compute")));
  EXPECT_EQ(compute.find("tp_collectives"), std::string::npos);
  EXPECT_EQ(compute.find("tensor_parallel_collectives"), std::string::npos);
}

TEST(TensorParallelFlows, BadValuesAndTheCommOverlapAreRefusedNamingTheFlags) {
  try {
    api::make_plan(gpt_request(Layout{2, 2, true, ""}, "rings"));
    FAIL() << "rings accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--tp-collectives"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("'rings'"), std::string::npos) << error.what();
  }
  api::PlanRequest overlapped = gpt_request(Layout{2, 2, true, ""}, "flows");
  overlapped.tp_comm_overlap = true;
  try {
    api::make_plan(overlapped);
    FAIL() << "--tp-comm-overlap accepted with flows";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--tp-comm-overlap"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("--tp-collectives flows"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace pipegrid
