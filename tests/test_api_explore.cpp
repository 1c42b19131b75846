// api::explore, the facade `pipegrid explore` prints from. On the inputs of
// the end-to-end cases explore-tiny and explore-tiny-memory-json, the
// facade called directly gives the winner, the rankings (order, ranks,
// verdicts, throughputs) and the winner's plan that the pipegrid binary
// prints with --json and writes with --save-plan: the CLI may not rank or
// choose on its own. Its progress callback counts every candidate once, and
// bad input is an InputError before any candidate runs.

#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
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
class Scratch {
 public:
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "pipegrid-api-explore-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~Scratch() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
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
  return words;
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
                  "--partitioners: expected uniform, pipedream or bapipe, found 'greedy'");
  EXPECT_FALSE(progressed);
}

}  // namespace
