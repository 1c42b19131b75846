// api::plan, the search `pipegrid plan` prints (issue 30). Its bounds are
// proofs: on a small GPT over two DGX A100 servers, simulating every layout
// the memory bound keeps (exhaustive) finds the same winner as the
// best-first search that stops at the time bound; no simulated layout runs
// below its time or memory bound (plan() would throw); a layout discarded by
// the memory bound never fits (its peak, simulated with the memory lifted,
// is above what the GPU leaves usable). The counts add up, the JSON is the
// same bytes twice, and bad input is an InputError naming the argument.

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/planner.hpp"
#include "core/io.hpp"
#include "expect_input_error.hpp"
#include "generators/cluster_platform.hpp"
#include "scratch_folder.hpp"

namespace {

using pipegrid::api::PlannerRequest;
using pipegrid::api::PlannerResult;

const std::string kModel =
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 --fp16";

class PlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    platform_ = (folder_.path() / "dgx8.xml").string();
    pipegrid::write_file_atomically(
        platform_, pipegrid::cluster_platform_xml(
                       pipegrid::catalogue_cluster_spec(pipegrid::catalogue_server("dgx-a100-80gb"), 2)));
  }
  PlannerRequest request(const std::string& memory) const {
    PlannerRequest r;
    r.platform_file = platform_;
    r.megatron_args = kModel;
    r.global_batch_size = 32;
    r.memory = memory;
    r.jobs = 2;
    return r;
  }
  static std::size_t counted(const PlannerResult& result) {
    return result.refused + result.memory_bounded + result.time_bounded + result.simulated;
  }
  pipegrid::testutil::ScratchFolder folder_{"planner-test"};
  std::string platform_;
};

TEST_F(PlannerTest, BestFirstFindsTheExhaustiveWinnerAndEveryBoundHolds) {
  PlannerRequest exhaustive_request = request("80GB");
  exhaustive_request.exhaustive = true;
  const PlannerResult exhaustive = pipegrid::api::plan(exhaustive_request);
  const PlannerResult best_first = pipegrid::api::plan(request("80GB"));
  ASSERT_TRUE(exhaustive.has_winner());
  ASSERT_TRUE(best_first.has_winner());
  EXPECT_EQ(best_first.ranking.front().layout.label(), exhaustive.ranking.front().layout.label());
  EXPECT_EQ(best_first.ranking.front().iteration_time_s, exhaustive.ranking.front().iteration_time_s);
  EXPECT_LT(best_first.simulated, exhaustive.simulated);
  EXPECT_EQ(exhaustive.time_bounded, 0u);
  EXPECT_EQ(counted(exhaustive), exhaustive.enumerated);
  EXPECT_EQ(counted(best_first), best_first.enumerated);
  ASSERT_TRUE(best_first.best_unsimulated_bound_s.has_value());
  EXPECT_GE(*best_first.best_unsimulated_bound_s, best_first.ranking.front().iteration_time_s);
  for (const auto& s : exhaustive.ranking) {
    ASSERT_TRUE(s.error.empty()) << s.layout.label() << ": " << s.error;
    EXPECT_LE(s.bound_time_s, s.iteration_time_s * (1 + 1e-9)) << s.layout.label();
    EXPECT_LE(s.bound_memory_bytes, s.peak_memory_bytes * (1 + 1e-9)) << s.layout.label();
  }
  // A bound that loose would prove little: on average within 20% here
  // (tiny layers, where communication weighs most).
  EXPECT_LT(exhaustive.mean_bound_ratio, 1.2);
  EXPECT_GE(exhaustive.mean_bound_ratio, 1.0);
  // Several tensor sizes, pipeline sizes and both schedules were simulated.
  std::set<int> tensor, pipeline;
  std::set<std::string> schedules;
  for (const auto& s : exhaustive.ranking) {
    tensor.insert(s.layout.tensor_parallel);
    pipeline.insert(s.layout.pipeline_parallel);
    schedules.insert(s.layout.schedule);
  }
  EXPECT_EQ(tensor, (std::set<int>{1, 2, 4, 8}));
  EXPECT_EQ(pipeline, (std::set<int>{1, 2, 4}));
  std::set<int> data;
  for (const auto& s : exhaustive.ranking) data.insert(s.layout.data_parallel);
  EXPECT_TRUE(data.count(16) && data.count(2)) << "rings across the two servers and inside one";
  EXPECT_EQ(schedules, (std::set<std::string>{"1f1b-sno", "interleaved-1f1b"}));
}

TEST_F(PlannerTest, TheMemoryBoundNeverDiscardsALayoutThatFits) {
  PlannerRequest lifted = request("1TB");
  lifted.exhaustive = true;
  const PlannerResult all = pipegrid::api::plan(lifted);
  EXPECT_EQ(all.memory_bounded, 0u);
  std::map<std::string, double> peak_of;
  for (const auto& s : all.ranking) peak_of[s.layout.label() + " " + s.layout.schedule] = s.peak_memory_bytes;

  PlannerRequest tight = request("1.2GB");
  tight.exhaustive = true;
  const PlannerResult kept = pipegrid::api::plan(tight);
  ASSERT_GT(kept.memory_bounded, 0u) << "pick a memory that makes the bound discard some layouts";
  std::set<std::string> simulated;
  for (const auto& s : kept.ranking) simulated.insert(s.layout.label() + " " + s.layout.schedule);
  std::size_t fitting = 0;
  for (const auto& [label, peak] : peak_of)
    if (peak <= kept.usable_memory_bytes) {
      ++fitting;
      EXPECT_TRUE(simulated.count(label)) << label << " fits (" << peak << " B) but was discarded";
    }
  EXPECT_GT(fitting, 0u);
  for (const auto& s : kept.ranking) EXPECT_EQ(s.fits, s.peak_memory_bytes <= kept.usable_memory_bytes) << s.layout.label();
}

TEST_F(PlannerTest, SameInputsSameJson) {
  const std::string once = pipegrid::api::planner_result_to_json(pipegrid::api::plan(request("80GB")));
  const std::string twice = pipegrid::api::planner_result_to_json(pipegrid::api::plan(request("80GB")));
  EXPECT_EQ(once, twice);
  const nlohmann::json j = nlohmann::json::parse(once);
  ASSERT_FALSE(j.at("ranking").empty());
  EXPECT_NE(j.at("ranking")[0].at("megatron_args").get<std::string>().find("--tensor-model-parallel-size"), std::string::npos);
}

// Issue 30's quality goal on Korthikanti et al. 2022's 22B (Table 3: 8 A100,
// global batch 4, t 8, micro-batch 4, selective recomputation and sequence
// parallelism): the published layout is in the top 5, or the plan's winner
// is predicted faster than it by the same model. The published launch is
// simulated through the same planner restricted to it.
TEST_F(PlannerTest, KorthikantisTwentyTwoBillionLayoutIsBeatenOrInTheTopFive) {
  const std::string gpt22b =
      "--num-layers 48 --hidden-size 6144 --num-attention-heads 64 --ffn-hidden-size 24576 --seq-length 2048 "
      "--max-position-embeddings 2048 --fp16 --accumulate-allreduce-grads-in-fp32 --attention-backend unfused";
  PlannerRequest search = request("80GB");
  search.megatron_args = gpt22b;
  search.global_batch_size = 4;
  const std::string one_server = (folder_.path() / "dgx8-one.xml").string();
  pipegrid::write_file_atomically(
      one_server,
      pipegrid::cluster_platform_xml(pipegrid::catalogue_cluster_spec(pipegrid::catalogue_server("dgx-a100-80gb"), 1)));
  search.platform_file = one_server;
  const PlannerResult planned = pipegrid::api::plan(search);
  ASSERT_TRUE(planned.has_winner());

  PlannerRequest published = search;
  published.tensor_parallel = {8};
  published.pipeline_parallel = {1};
  published.micro_batch_sizes = {4};
  published.recompute = {"selective"};
  published.sequence_parallel = {true};
  published.schedules = {"1f1b-sno"};
  const PlannerResult alone = pipegrid::api::plan(published);
  ASSERT_EQ(alone.ranking.size(), 1u);
  const auto& launch = alone.ranking.front();
  EXPECT_EQ(launch.layout.label(), "t8 p1 d1 mbs4 selective sp");
  bool in_top_five = false;
  for (std::size_t i = 0; i < std::min<std::size_t>(5, planned.ranking.size()); ++i)
    in_top_five = in_top_five || planned.ranking[i].layout.label() == launch.layout.label();
  EXPECT_TRUE(in_top_five || planned.ranking.front().iteration_time_s < launch.iteration_time_s)
      << "winner " << planned.ranking.front().layout.label() << " " << planned.ranking.front().iteration_time_s
      << " s, published " << launch.iteration_time_s << " s";
}

TEST_F(PlannerTest, BadInputIsAnInputErrorNamingIt) {
  using pipegrid::testutil::input_error_of;
  PlannerRequest layout_given = request("80GB");
  layout_given.megatron_args = kModel + " --tensor-model-parallel-size 2";
  EXPECT_CONTAINS(input_error_of([&] { pipegrid::api::plan(layout_given); }),
                  "--tensor-model-parallel-size is what plan chooses");
  PlannerRequest no_batch = request("80GB");
  no_batch.global_batch_size.reset();
  EXPECT_CONTAINS(input_error_of([&] { pipegrid::api::plan(no_batch); }), "--global-batch-size");
  PlannerRequest bad_schedule = request("80GB");
  bad_schedule.schedules = {"gpipe"};
  EXPECT_CONTAINS(input_error_of([&] { pipegrid::api::plan(bad_schedule); }), "--schedules: expected 1f1b-sno, interleaved-1f1b");
  PlannerRequest bad_tensor = request("80GB");
  bad_tensor.tensor_parallel = {3};
  EXPECT_CONTAINS(input_error_of([&] { pipegrid::api::plan(bad_tensor); }), "--tensor-parallel 3");
  EXPECT_CONTAINS(input_error_of([&] { pipegrid::catalogue_server("dgx-a100"); }), "dgx-a100-80gb");
}

}  // namespace
