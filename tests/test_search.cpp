// FlexFlow's strategy search (search/): delta simulation equals full
// simulation exactly on every step of seeded searches; the task-graph engine
// equals SimGrid (--network analytic --transfer-rule fifo) on GPipe
// strategies whose transfers share no link; a seed gives the same JSON;
// strategies are checked; plain linear layers split on request.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "api/simulation.hpp"
#include "core/tensor_parallel.hpp"
#include "search/engine.hpp"
#include "search/mcmc.hpp"
#include "search/strategy.hpp"
#include "sim/engine.hpp"
#include "sim_test_util.hpp"

namespace pipegrid::search {
namespace {

// Ten layers of uneven times and bytes; the seventh a PyTorch Linear.
Profile test_profile() {
  Profile profile;
  profile.name = "search-test";
  profile.micro_batch_size = 2;
  profile.input_bytes = 64;
  for (int l = 0; l < 10; ++l) {
    Layer layer;
    layer.name = l == 6 ? "Linear(in_features=8, out_features=8, bias=True)" : "layer" + std::to_string(l);
    layer.forward_s = 0.25 + 0.125 * (l % 3);
    layer.backward_s = 2 * layer.forward_s + 0.0625 * (l % 2);
    layer.output_bytes = 16 + 8 * (l % 4);
    layer.parameter_bytes = 32 * (1 + l % 5);
    profile.layers.push_back(layer);
  }
  return profile;
}

// A full mesh: hosts h0..h(n-1) (1 flop/s), a SPLITDUPLEX link of its own
// for every pair (1000 B/s, 0.01 s; slower, 500 B/s, from h0), so no two
// channels share a link: FlexFlow's assumption holds exactly.
std::string mesh_platform_xml(int hosts) {
  std::string xml = "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
                    "<platform version=\"4.1\">\n  <zone id=\"mesh\" routing=\"Full\">\n";
  for (int h = 0; h < hosts; ++h)
    xml += "    <host id=\"h" + std::to_string(h) + "\" speed=\"1f\"><prop id=\"kind\" value=\"gpu\"/></host>\n";
  for (int a = 0; a < hosts; ++a)
    for (int b = a + 1; b < hosts; ++b)
      xml += "    <link id=\"l" + std::to_string(a) + "_" + std::to_string(b) + "\" bandwidth=\"" + (a == 0 ? "500" : "1000") +
             "Bps\" latency=\"10ms\" sharing_policy=\"SPLITDUPLEX\"/>\n";
  for (int a = 0; a < hosts; ++a)
    for (int b = a + 1; b < hosts; ++b) {
      const std::string link = "l" + std::to_string(a) + "_" + std::to_string(b);
      xml += "    <route src=\"h" + std::to_string(a) + "\" dst=\"h" + std::to_string(b) + "\" symmetrical=\"NO\"><link_ctn id=\"" +
             link + "\" direction=\"UP\"/></route>\n";
      xml += "    <route src=\"h" + std::to_string(b) + "\" dst=\"h" + std::to_string(a) + "\" symmetrical=\"NO\"><link_ctn id=\"" +
             link + "\" direction=\"DOWN\"/></route>\n";
    }
  return xml + "  </zone>\n</platform>\n";
}

struct Fixture {
  testutil::TempFile platform_file;
  PlatformSummary platform;
  explicit Fixture(int hosts)
      : platform_file("search-mesh", ".xml", mesh_platform_xml(hosts)),
        platform(sim::read_platform(platform_file.path(), sim::PlatformRoutes::All)) {}
};

StageConfig stage(int first, int last, int tensor, std::vector<int> groups) {
  StageConfig config;
  config.first_layer = first;
  config.last_layer = last;
  config.tensor = tensor;
  config.data = static_cast<int>(groups.size());
  config.groups = std::move(groups);
  return config;
}

SearchRequest search_request(const Fixture& fixture, std::uint64_t seed, long long steps) {
  SearchRequest request;
  request.platform_file = fixture.platform_file.path();
  request.seed = seed;
  request.budget_steps = steps;
  request.check_delta = true;
  request.top = 3;
  return request;
}

TEST(SearchEngine, DeltaEqualsFullOnEveryStepOfSeededSearches) {
  const Fixture fixture(8);
  const CostModel model(test_profile(), fixture.platform, 8, {1, 2, 4}, std::nullopt, "sgd");
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    SearchRequest request = search_request(fixture, seed, 400);
    request.beta = 2;  // a warm chain: many proposals accepted, each checked
    const SearchResult result = mcmc_search(model, request);  // throws InvariantViolation on a mismatch
    EXPECT_EQ(result.delta_checks, result.steps - result.rejected_memory) << "seed " << seed;
    EXPECT_GT(result.accepted, 0) << "seed " << seed;
    // Delta re-times fewer tasks than full simulation would.
    EXPECT_LT(result.tasks_retimed, result.tasks_total) << "seed " << seed;
  }
}

TEST(SearchEngine, DeltaAfterChangingTheLastStageRetimesOnlyWhatItReaches) {
  const Fixture fixture(4);
  const CostModel model(test_profile(), fixture.platform, 6, {1, 2}, std::nullopt, "sgd");
  const Strategy before{{stage(0, 4, 1, {0}), stage(5, 9, 1, {1})}};
  Strategy after = before;
  after.stages[1] = stage(5, 9, 1, {1, 2});
  TaskGraphEngine engine(model), reference(model);
  engine.full(before);
  const double delta = engine.delta(after);
  EXPECT_EQ(delta, reference.full(after));
  EXPECT_EQ(engine.ends(), reference.ends());
  EXPECT_LT(engine.last_retimed(), engine.task_count());
  EXPECT_GT(engine.last_retimed(), 0);
  // And back, and a boundary move.
  EXPECT_EQ(engine.delta(before), reference.full(before));
  Strategy moved = before;
  moved.stages[0].last_layer = 6;
  moved.stages[1].first_layer = 7;
  EXPECT_EQ(engine.delta(moved), reference.full(moved));
  EXPECT_EQ(engine.ends(), reference.ends());
}

TEST(SearchEngine, OneStageOneHostIsTheSumOfItsPasses) {
  const Fixture fixture(2);
  const Profile profile = test_profile();
  const CostModel model(profile, fixture.platform, 3, {1}, std::nullopt, "sgd");
  double forward = 0, backward = 0;
  for (const Layer& layer : profile.layers) forward += layer.forward_s, backward += layer.backward_s;
  TaskGraphEngine engine(model);
  EXPECT_NEAR(engine.full(Strategy{{stage(0, 9, 1, {0})}}), 3 * (forward + backward), 1e-12);
}

// SimGrid's mini-batch time of the strategy's plan (gpipe, analytic, fifo).
double simgrid_time(const CostModel& model, const Fixture& fixture, const Strategy& strategy) {
  SearchRequest request;
  request.platform_file = fixture.platform_file.path();
  std::string why;
  std::optional<Plan> plan = strategy_plan(model, request, strategy, &why);
  EXPECT_TRUE(plan.has_value()) << why;
  return api::run_plan(*plan).metrics.minibatch_time_s;
}

TEST(SearchEngine, EqualsSimGridAnalyticFifoWhereNoLinkIsShared) {
  const Fixture fixture(6);
  const CostModel model(test_profile(), fixture.platform, 4, {1, 2}, std::nullopt, "sgd");
  const std::vector<Strategy> strategies = {
      Strategy{{stage(0, 9, 1, {0})}},                                             // one device
      Strategy{{stage(0, 2, 1, {0}), stage(3, 6, 1, {1}), stage(7, 9, 1, {2})}},  // a pipeline
      Strategy{{stage(0, 9, 1, {0, 1, 2, 3})}},                                   // data parallelism: a ring of 4
      Strategy{{stage(0, 4, 1, {0, 1}), stage(5, 9, 1, {2})}},                    // a replicated first stage
      Strategy{{stage(0, 3, 1, {5}), stage(4, 9, 1, {0, 3, 1})}},                 // replicated last stage, M not a multiple
      Strategy{{stage(0, 5, 1, {4}), stage(6, 9, 2, {1})}},                       // tensor parallel 2 (Linear split)
  };
  for (const Strategy& strategy : strategies) {
    TaskGraphEngine engine(model);
    const double ours = engine.full(strategy);
    const double simgrid = simgrid_time(model, fixture, strategy);
    EXPECT_NEAR(ours, simgrid, 1e-9 * simgrid) << strategy_text(strategy, fixture.platform);
  }
}

TEST(SearchMcmc, SameSeedSameJson) {
  const Fixture fixture(8);
  const CostModel model(test_profile(), fixture.platform, 8, {1, 2, 4}, std::nullopt, "sgd");
  SearchRequest request = search_request(fixture, 7, 300);
  request.check_delta = false;
  const std::string first = result_to_json(model, request, mcmc_search(model, request));
  const std::string second = result_to_json(model, request, mcmc_search(model, request));
  EXPECT_EQ(first, second);
  request.seed = 8;
  EXPECT_NE(first.find("\"seed\": 7"), std::string::npos);
}

TEST(SearchMcmc, FindsNoWorseThanDataParallelism) {
  const Fixture fixture(8);
  const CostModel model(test_profile(), fixture.platform, 8, {1, 2, 4}, std::nullopt, "sgd");
  const SearchResult result = mcmc_search(model, search_request(fixture, 1, 300));
  ASSERT_FALSE(result.top.empty());
  EXPECT_LE(result.top.front().engine_s, result.data_parallel.engine_s);
  for (std::size_t i = 1; i < result.top.size(); ++i) EXPECT_LE(result.top[i - 1].engine_s, result.top[i].engine_s);
  for (const Candidate& candidate : result.top)
    EXPECT_EQ(strategy_problem(candidate.strategy, 10, fixture.platform), "");
}

TEST(SearchStrategy, ProblemsAreNamed) {
  const Fixture fixture(4);
  EXPECT_EQ(strategy_problem(Strategy{{stage(0, 4, 1, {0}), stage(5, 9, 2, {1})}}, 10, fixture.platform), "");
  EXPECT_NE(strategy_problem(Strategy{{stage(0, 4, 1, {0}), stage(6, 9, 1, {1})}}, 10, fixture.platform).find("starts at layer 6"),
            std::string::npos);
  EXPECT_NE(strategy_problem(Strategy{{stage(0, 4, 1, {2}), stage(5, 9, 2, {1})}}, 10, fixture.platform).find("used twice"),
            std::string::npos);
  EXPECT_NE(strategy_problem(Strategy{{stage(0, 8, 1, {0})}}, 10, fixture.platform).find("end at layer 8"), std::string::npos);
  EXPECT_NE(strategy_problem(Strategy{{stage(0, 9, 4, {1})}}, 10, fixture.platform).find("beyond the platform"),
            std::string::npos);
}

TEST(TensorParallelLinear, PlainLinearLayersSplitOnlyOnRequest) {
  Profile profile = test_profile();
  TensorParallelLink link;
  link.latency_s = 0.001;
  link.bandwidth_Bps = 1000;
  const TensorParallelProfile kept = tensor_parallel_profile(profile, 2, link);
  EXPECT_EQ(kept.profile.layers[6].forward_s, profile.layers[6].forward_s);
  EXPECT_TRUE(kept.linear.empty());
  const TensorParallelProfile split =
      tensor_parallel_profile(profile, 2, link, false, false, TensorParallelCollectives::Compute, true);
  ASSERT_EQ(split.linear, std::vector<int>{6});
  const Layer& whole = profile.layers[6];
  const Layer& member = split.profile.layers[6];
  // Forward: half the work + an all-gather of the output; backward's I: half
  // + an all-reduce of the input's gradient (X: layer 5's output).
  EXPECT_DOUBLE_EQ(member.forward_s, whole.forward_s / 2 + all_gather_s(whole.output_bytes, 2, link));
  const BackwardSplit parts = backward_split(whole);
  EXPECT_DOUBLE_EQ(*member.backward_input_s,
                   parts.input_s / 2 + ring_all_reduce_s(profile.layers[5].output_bytes, 2, link));
  EXPECT_DOUBLE_EQ(member.parameter_bytes, whole.parameter_bytes / 2);
  EXPECT_TRUE(is_plain_linear(whole));
  EXPECT_FALSE(is_plain_linear(profile.layers[5]));
  Layer pipedream;
  pipedream.name = "node18: Linear(in_features=9216, out_features=4096, bias=True)";
  EXPECT_TRUE(is_plain_linear(pipedream));
  pipedream.name = "node2: Conv2d(3, 64)";
  EXPECT_FALSE(is_plain_linear(pipedream));
  EXPECT_NE(split.note.find("1 linear layer split column-parallel"), std::string::npos);
}

}  // namespace
}  // namespace pipegrid::search
