// api::explore, the facade `pipegrid explore` prints from. On the inputs of
// the end-to-end cases explore-tiny and explore-tiny-memory-json, the
// facade called directly gives the winner, the rankings (order, ranks,
// verdicts, throughputs) and the winner's plan that the pipegrid binary
// prints with --json and writes with --save-plan: the CLI may not rank or
// choose on its own. Its progress callback counts every candidate once, and
// bad input is an InputError before any candidate runs. Layouts t x p x d
// (issue 27): without filters every one of the hosts is tried; on two
// servers behind a slow link several pipelines of several stages win, and
// the winner's plan re-runs as such; --data-parallel keeps only its sizes.

#include <unistd.h>

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "scratch_folder.hpp"
#include <nlohmann/json.hpp>

#include "api/explore.hpp"
#include "core/io.hpp"
#include "core/plan.hpp"
#include "expect_input_error.hpp"
#include "run_command.hpp"

namespace {

namespace fs = std::filesystem;

const std::string kBinary = PIPEGRID_BINARY;
const std::string kCommon = std::string(PIPEGRID_SOURCE_DIR) + "/tests/data/common";

/// A scratch folder, removed with its content at the end of the test.
class Scratch : public pipegrid::testutil::ScratchFolder {
 public:
  Scratch() : ScratchFolder("pipegrid-api-explore") {}
};

/// explore-tiny's inputs: two GPUs over a latency-bound link, the tiny
/// profile, 16 samples per mini-batch, the analytic network, two jobs.
pipegrid::api::ExploreRequest tiny_request() {
  pipegrid::api::ExploreRequest request;
  request.platform_file = kCommon + "/chain2-latency.xml";
  request.profile_file = kCommon + "/tiny.json";
  request.mini_batch_size = 16;
  request.network = "analytic";
  request.jobs = 2;
  return request;
}

/// The pipegrid command line that asks for `request` (the flags it sets).
std::vector<std::string> cli_words(const pipegrid::api::ExploreRequest& request) {
  std::vector<std::string> words = {kBinary,
                                    "explore",
                                    "--platform",
                                    request.platform_file,
                                    "--profile",
                                    request.profile_file,
                                    "--mini-batch-size",
                                    std::to_string(request.mini_batch_size),
                                    "--network",
                                    request.network,
                                    "--jobs",
                                    std::to_string(request.jobs),
                                    "--semantics",
                                    request.semantics};
  if (!request.memory.empty()) words.insert(words.end(), {"--memory", request.memory});
  const auto joined = [](const auto& values) {
    std::string text;
    for (const auto& value : values) {
      if (!text.empty()) text += ",";
      if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string>) text += value;
      else text += std::to_string(value);
    }
    return text;
  };
  if (!request.schedules.empty()) words.insert(words.end(), {"--schedules", joined(request.schedules)});
  if (!request.partitioners.empty()) words.insert(words.end(), {"--partitioners", joined(request.partitioners)});
  if (!request.micro_batches.empty()) words.insert(words.end(), {"--micro-batches", joined(request.micro_batches)});
  if (!request.tensor_parallel.empty()) words.insert(words.end(), {"--tensor-parallel", joined(request.tensor_parallel)});
  if (!request.data_parallel.empty()) words.insert(words.end(), {"--data-parallel", joined(request.data_parallel)});
  return words;
}

/// Two servers of two H100s behind a slow link (3.125 GB/s; 150 GB/s inside
/// a server) and layouts-wide8.json: an embedding, 6 equal transformer
/// blocks and a head, 50 MB of weights each, 1 MiB activations. dp
/// all-reduces 400 MB over the slow link; one pipeline of 4 stages cannot
/// balance 6 blocks (two of its stages hold two); two pipelines of 2 stages
/// (3 blocks each) all-reduce inside a server and send activations over the
/// slow link only.
pipegrid::api::ExploreRequest two_servers_request() {
  pipegrid::api::ExploreRequest request;
  request.platform_file = kCommon + "/tp-h100-2x2.xml";
  request.profile_file = kCommon + "/layouts-wide8.json";
  request.mini_batch_size = 8;
  request.schedules = {"1f1b-sno", "zb-h1", "dp"};
  request.network = "analytic";
  request.jobs = 2;
  return request;
}

/// One ranking of the facade against the same ranking in the CLI's JSON:
/// the same candidates in the same order, with the same ranks, verdicts and
/// throughputs.
void expect_same_ranking(const pipegrid::api::ExploreResult& result, const std::vector<pipegrid::RankedCandidate>& ranking,
                         const nlohmann::json& printed, const std::string& which) {
  ASSERT_TRUE(printed.is_array()) << which;
  ASSERT_EQ(printed.size(), ranking.size()) << which;
  for (std::size_t i = 0; i < ranking.size(); ++i) {
    const pipegrid::CandidateOutcome& outcome = result.outcomes.at(ranking[i].index);
    const nlohmann::json& entry = printed[i];
    const std::string where = which + " #" + std::to_string(i + 1);
    EXPECT_EQ(entry.at("rank").get<int>(), ranking[i].rank) << where;
    EXPECT_EQ(entry.at("verdict").get<std::string>(), ranking[i].verdict) << where;
    EXPECT_EQ(entry.at("schedule").get<std::string>(), outcome.schedule) << where;
    EXPECT_EQ(entry.at("partitioner").get<std::string>(), outcome.partitioner) << where;
    EXPECT_EQ(entry.at("micro_batches").get<int>(), outcome.micro_batches) << where;
    EXPECT_EQ(entry.at("micro_batch_size").get<int>(), outcome.micro_batch_size) << where;
    EXPECT_EQ(entry.contains("stages"), result.partitions.at(ranking[i].index).has_value()) << where;
    EXPECT_EQ(entry.contains("layout"), result.shows_layouts()) << where;
    if (result.shows_layouts()) {
      EXPECT_EQ(entry.at("layout").get<std::string>(),
                pipegrid::api::layout_label(outcome.tensor_parallel, outcome.pipeline_parallel, outcome.data_parallel))
          << where;
      EXPECT_EQ(entry.at("data_parallel").get<int>(), outcome.data_parallel) << where;
      EXPECT_EQ(entry.at("pipeline_parallel").get<int>(), outcome.pipeline_parallel) << where;
      EXPECT_EQ(entry.at("global_batch_size").get<long long>(), outcome.global_batch_size) << where;
    }
    if (!outcome.error) {
      EXPECT_EQ(entry.at("throughput_samples_per_s").get<double>(), outcome.throughput_samples_per_s) << where;
    }
  }
}

/// Runs the facade and the binary on `request` and compares what they say.
void expect_facade_equals_cli(const pipegrid::api::ExploreRequest& request) {
  const pipegrid::api::ExploreResult result = pipegrid::api::explore(request);

  const Scratch scratch;
  const fs::path plan_path = scratch.path() / "winner.json";
  std::vector<std::string> words = cli_words(request);
  words.insert(words.end(), {"--json", "--save-plan", plan_path.string()});
  const testutil::CommandResult cli = testutil::run_words("", words, (scratch.path() / "stderr.txt").string());
  ASSERT_EQ(cli.status, result.has_winner() ? 0 : 1) << cli.err;
  const nlohmann::json printed = nlohmann::json::parse(cli.out);

  EXPECT_EQ(printed.at("candidates_simulated").get<std::size_t>(), result.outcomes.size());
  EXPECT_EQ(printed.at("micro_batch_note").get<std::string>(), result.micro_batch_choices.note);
  expect_same_ranking(result, result.ranking, printed.at("ranking"), "ranking");
  if (request.semantics == "exact")
    expect_same_ranking(result, result.stale_weight_ranking, printed.at("stale_weight_ranking"), "stale-weight ranking");
  else
    EXPECT_TRUE(result.stale_weight_ranking.empty());

  ASSERT_TRUE(result.has_winner());
  ASSERT_TRUE(result.best_plan.has_value());
  const pipegrid::CandidateOutcome& winner = result.outcomes.at(result.ranking.front().index);
  const nlohmann::json& printed_winner = printed.at("winner");
  EXPECT_EQ(printed_winner.at("schedule").get<std::string>(), winner.schedule);
  EXPECT_EQ(printed_winner.at("partitioner").get<std::string>(), winner.partitioner);
  EXPECT_EQ(printed_winner.at("micro_batches").get<int>(), winner.micro_batches);
  EXPECT_EQ(printed_winner.at("throughput_samples_per_s").get<double>(), winner.throughput_samples_per_s);
  EXPECT_EQ(result.best_plan->schedule, winner.schedule);
  EXPECT_EQ(pipegrid::read_text_file(plan_path.string()), pipegrid::plan_to_json(*result.best_plan));
}

TEST(explore, WeightExactAndStaleRankingsWinnerAndPlanAreTheClis) { expect_facade_equals_cli(tiny_request()); }

TEST(explore, UnderAMemoryLimitWithOneRankingTheWinnerAndPlanAreTheClis) {
  pipegrid::api::ExploreRequest request = tiny_request();
  request.memory = "870";
  request.semantics = "all";
  expect_facade_equals_cli(request);
}

TEST(explore, ProgressCountsEachCandidateOnceFromNothingToAll) {
  std::vector<std::pair<std::size_t, std::size_t>> told;
  const pipegrid::api::ExploreResult result =
      pipegrid::api::explore(tiny_request(), [&](std::size_t simulated, std::size_t total) { told.emplace_back(simulated, total); });
  ASSERT_GT(result.outcomes.size(), 1u);
  ASSERT_EQ(told.size(), result.outcomes.size() + 1);
  for (std::size_t i = 0; i < told.size(); ++i) {
    EXPECT_EQ(told[i].first, i);
    EXPECT_EQ(told[i].second, result.outcomes.size());
  }
  EXPECT_EQ(result.jobs, 2);
  EXPECT_EQ(result.partitions.size(), result.outcomes.size());
}

TEST(explore, BadInputIsAnInputErrorNamingTheFlagBeforeAnyCandidateRuns) {
  bool progressed = false;
  const auto progress = [&](std::size_t, std::size_t) { progressed = true; };
  pipegrid::api::ExploreRequest request = tiny_request();
  request.semantics = "fast";
  EXPECT_CONTAINS(pipegrid::testutil::input_error_of([&] { pipegrid::api::explore(request, progress); }),
                  "--semantics: expected exact or all, found 'fast'");
  request = tiny_request();
  request.partitioners = {"greedy"};
  EXPECT_CONTAINS(pipegrid::testutil::input_error_of([&] { pipegrid::api::explore(request, progress); }),
                  "--partitioners: expected uniform, pipedream, bapipe or megatron, found 'greedy'");
  request = tiny_request();
  request.partitioners = {"megatron"};
  EXPECT_CONTAINS(pipegrid::testutil::input_error_of([&] { pipegrid::api::explore(request, progress); }),
                  "--partitioners megatron: Megatron's stage layout splits transformer layers");
  request = two_servers_request();
  request.data_parallel = {3};
  EXPECT_CONTAINS(pipegrid::testutil::input_error_of([&] { pipegrid::api::explore(request, progress); }),
                  "--data-parallel 3: expected a size that divides the number of tensor-parallel groups");
  request.data_parallel = {0};
  EXPECT_CONTAINS(pipegrid::testutil::input_error_of([&] { pipegrid::api::explore(request, progress); }),
                  "--data-parallel: expected integers >= 1, found 0");
  // d = 4 on 4 hosts is dp, which --schedules leaves out.
  request.data_parallel = {4};
  request.schedules = {"zb-h1"};
  EXPECT_CONTAINS(pipegrid::testutil::input_error_of([&] { pipegrid::api::explore(request, progress); }),
                  "--data-parallel 4: no candidate left");
  EXPECT_FALSE(progressed);
}

TEST(explore, WithoutFiltersEveryLayoutOfTheHostsIsTried) {
  // One server of 4 H100s, a transformer profile with FLOPs: t = 1, 2, 4.
  pipegrid::api::ExploreRequest request;
  request.platform_file = kCommon + "/tp-h100-1x4.xml";
  request.profile_file = kCommon + "/tp-gpt-tiny.json";
  request.mini_batch_size = 16;
  request.network = "analytic";
  request.jobs = 2;
  const pipegrid::api::ExploreResult result = pipegrid::api::explore(request);
  ASSERT_EQ(result.tensor_parallel_tried, (std::vector<int>{1, 2, 4}));

  // Every t x p x d = 4, whatever ran.
  std::set<std::tuple<int, int, int>> expected;
  for (const int t : result.tensor_parallel_tried)
    for (int d = 1; d <= 4 / t; ++d)
      if ((4 / t) % d == 0) expected.insert({t, 4 / t / d, d});
  ASSERT_EQ(expected.size(), 6u);
  std::set<std::tuple<int, int, int>> listed, ran;
  for (const pipegrid::api::ExploredLayout& layout : result.layouts) {
    listed.insert({layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel});
    EXPECT_GT(layout.candidates, 0u);
  }
  std::size_t counted = 0;
  for (const pipegrid::CandidateOutcome& outcome : result.outcomes) {
    EXPECT_EQ(outcome.tensor_parallel * outcome.pipeline_parallel * outcome.data_parallel, 4) << outcome.schedule;
    if (!outcome.error) ran.insert({outcome.tensor_parallel, outcome.pipeline_parallel, outcome.data_parallel});
    for (const pipegrid::api::ExploredLayout& layout : result.layouts)
      if (layout.tensor_parallel == outcome.tensor_parallel && layout.data_parallel == outcome.data_parallel) ++counted;
  }
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(ran, expected);
  EXPECT_EQ(counted, result.outcomes.size());
  EXPECT_TRUE(result.shows_layouts());

  // The layouts of several pipelines run every flushed multi-stage schedule
  // and the partitions made over replica 0's pipeline, Megatron's included.
  std::set<std::string> schedules, partitioners;
  for (std::size_t i = 0; i < result.outcomes.size(); ++i) {
    const pipegrid::CandidateOutcome& outcome = result.outcomes[i];
    if (outcome.tensor_parallel != 1 || outcome.data_parallel != 2) continue;
    schedules.insert(outcome.schedule);
    for (std::size_t from = 0; from <= outcome.partitioner.size();) {
      const std::size_t to = std::min(outcome.partitioner.find('=', from), outcome.partitioner.size());
      partitioners.insert(outcome.partitioner.substr(from, to - from));
      from = to + 1;
    }
    EXPECT_FALSE(outcome.stale_weights) << outcome.schedule;
    EXPECT_NE(outcome.schedule, "dp");
    // Megatron's counting: the global batch is micro x M per pipeline x d,
    // a shape of the mini-batch.
    EXPECT_EQ(outcome.global_batch_size, 1LL * outcome.micro_batch_size * outcome.micro_batches * 2) << outcome.schedule;
    EXPECT_EQ(request.mini_batch_size % outcome.global_batch_size, 0) << outcome.schedule;
    if (const std::optional<pipegrid::Partition>& partition = result.partitions[i]) {
      for (const auto& hosts : partition->hosts) EXPECT_EQ(hosts.size(), 2u) << outcome.schedule;
    }
  }
  EXPECT_EQ(schedules, (std::set<std::string>{"gpipe", "1f1b-sno", "1f1b-so", "interleaved-1f1b", "looped-bfs", "zb-h1",
                                              "zb-h2", "zb1p", "zb-auto", "zb-v", "dualpipev"}));
  EXPECT_EQ(partitioners, (std::set<std::string>{"uniform", "pipedream-straight", "bapipe", "megatron"}));
}

TEST(explore, OnTwoServersBehindASlowLinkSeveralPipelinesOfSeveralStagesWin) {
  const pipegrid::api::ExploreRequest request = two_servers_request();
  const pipegrid::api::ExploreResult result = pipegrid::api::explore(request);
  ASSERT_TRUE(result.has_winner());
  const pipegrid::CandidateOutcome& winner = result.outcomes.at(result.ranking.front().index);
  EXPECT_EQ(winner.tensor_parallel, 1);
  EXPECT_EQ(winner.pipeline_parallel, 2);
  EXPECT_EQ(winner.data_parallel, 2);
  EXPECT_EQ(winner.global_batch_size, 8);
  // The best of pure data parallelism and of one pipeline fit, and lose.
  std::optional<double> best_dp, best_pipeline;
  for (const pipegrid::RankedCandidate& entry : result.ranking) {
    const pipegrid::CandidateOutcome& outcome = result.outcomes.at(entry.index);
    if (entry.rank == 0) continue;
    if (outcome.pipeline_parallel == 1 && !best_dp) best_dp = outcome.throughput_samples_per_s;
    if (outcome.data_parallel == 1 && !best_pipeline) best_pipeline = outcome.throughput_samples_per_s;
  }
  ASSERT_TRUE(best_dp && best_pipeline);
  EXPECT_LT(*best_dp, 0.9 * winner.throughput_samples_per_s);
  EXPECT_LT(*best_pipeline, 0.9 * winner.throughput_samples_per_s);
  // The winner's plan is the layout: 2 pipelines of 2 stages in
  // Megatron-Core's order, stage 0 on server 0's hosts (one per pipeline),
  // stage 1 on server 1's.
  ASSERT_TRUE(result.best_plan.has_value());
  EXPECT_TRUE(result.best_plan->parallel_layout);
  EXPECT_EQ(result.best_plan->data_parallel, 2);
  EXPECT_EQ(result.best_plan->global_batch_size(), 8);
  EXPECT_EQ(result.best_plan->partition.hosts,
            (std::vector<std::vector<std::string>>{{"s0-gpu0", "s0-gpu1"}, {"s1-gpu0", "s1-gpu1"}}));
  // The CLI prints and saves the same; simulate --plan re-runs the winner.
  expect_facade_equals_cli(request);
  const Scratch scratch;
  const fs::path plan_path = scratch.path() / "winner.json";
  pipegrid::write_file_atomically(plan_path.string(), pipegrid::plan_to_json(*result.best_plan));
  const testutil::CommandResult rerun = testutil::run_words(
      "", {kBinary, "simulate", "--plan", plan_path.string(), "--json"}, (scratch.path() / "stderr.txt").string());
  ASSERT_EQ(rerun.status, 0) << rerun.err;
  const nlohmann::json metrics = nlohmann::json::parse(rerun.out);
  EXPECT_EQ(metrics.at("data_parallel").get<int>(), 2);
  EXPECT_EQ(metrics.at("pipeline_parallel").get<int>(), 2);
  EXPECT_DOUBLE_EQ(metrics.at("throughput_samples_per_s").get<double>(), winner.throughput_samples_per_s);
}

TEST(explore, DataParallelKeepsOnlyTheLayoutsOfThoseSizes) {
  pipegrid::api::ExploreRequest request = two_servers_request();
  request.data_parallel = {2};
  const pipegrid::api::ExploreResult result = pipegrid::api::explore(request);
  ASSERT_FALSE(result.outcomes.empty());
  for (const pipegrid::CandidateOutcome& outcome : result.outcomes) {
    EXPECT_EQ(outcome.data_parallel, 2) << outcome.schedule;
    EXPECT_EQ(outcome.pipeline_parallel, 2) << outcome.schedule;
    EXPECT_NE(outcome.schedule, "dp");
  }
  ASSERT_EQ(result.layouts.size(), 1u);
  EXPECT_EQ(result.layouts[0].candidates, result.outcomes.size());
  // d = 1 and d = 4 (dp): the schedules of one pipeline and dp only.
  request.data_parallel = {1, 4};
  const pipegrid::api::ExploreResult others = pipegrid::api::explore(request);
  for (const pipegrid::CandidateOutcome& outcome : others.outcomes)
    EXPECT_EQ(outcome.schedule == "dp" ? outcome.data_parallel : outcome.pipeline_parallel, 4) << outcome.schedule;
  EXPECT_FALSE(others.shows_layouts());
}

}  // namespace
