// Property test of the steady-state period (issue 12): on random unbalanced
// and replicated pipelines of the schedules without a flush, under both
// network models, the period of a default run (pipegrid picks how many
// mini-batches to simulate) equals the period of a run 4 times as long:
// exactly (1e-9 relative) when both confirm a cycle, within 1% otherwise.
// The period never comes from the warm-up or the drain, so the length of
// the run cannot change it.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/run.hpp"
#include "sim_test_util.hpp"

namespace pipegrid {
namespace {

using testutil::TempFile;
using testutil::star_platform_xml;

struct Case {
  std::string schedule;
  std::string network;
  std::vector<int> replicas;
  std::vector<double> forward_s, backward_s, output_bytes;
};

std::string describe(const Case& c) {
  std::string text = fmt::format("{} on the {} network:", c.schedule, c.network);
  for (std::size_t s = 0; s < c.replicas.size(); ++s)
    text += fmt::format(" [F={} B={} out={} r={}]", c.forward_s[s], c.backward_s[s], c.output_bytes[s], c.replicas[s]);
  return text;
}

std::string profile_json(const Case& c) {
  std::string layers;
  for (std::size_t s = 0; s < c.replicas.size(); ++s)
    layers += fmt::format("{}    {{\"name\": \"l{}\", \"forward_s\": {}, \"backward_s\": {}, \"output_bytes\": {}, \"parameter_bytes\": 400}}",
                          s == 0 ? "" : ",\n", s, c.forward_s[s], c.backward_s[s], c.output_bytes[s]);
  return fmt::format("{{\n  \"name\": \"random\",\n  \"micro_batch_size\": 1,\n  \"input_bytes\": 100,\n  \"layers\": [\n{}\n  ]\n}}\n", layers);
}

TEST(SteadyStateProperty, TheDefaultRunsPeriodIsTheLongRunsPeriod) {
  std::mt19937 random(20261124);
  std::uniform_int_distribution<int> quarters(1, 16), bytes(0, 2500), stage_count(2, 5), replica_pick(0, 5);
  const std::vector<std::string> schedules = {"pipedream", "pipedream-2bw", "pipeoptim"};
  int periodic_pairs = 0, cases = 0;
  for (int trial = 0; trial < 8; ++trial)
    for (const std::string network : {"analytic", "simgrid"}) {
      Case c;
      c.schedule = schedules[trial % schedules.size()];
      c.network = network;
      const int stages = stage_count(random);
      int hosts = 0;
      for (int s = 0; s < stages; ++s) {
        const int pick = replica_pick(random);
        c.replicas.push_back(pick == 4 ? 2 : pick == 5 ? 3 : 1);
        c.forward_s.push_back(quarters(random) / 4.0);
        c.backward_s.push_back(quarters(random) / 4.0);
        c.output_bytes.push_back(bytes(random));
        hosts += c.replicas.back();
      }
      TempFile platform("pipegrid-property", ".xml", star_platform_xml(hosts, 0.01, 1000));
      TempFile profile("pipegrid-property", ".json", profile_json(c));
      cli::PlanRequest request;
      request.platform_file = platform.path();
      request.profile_file = profile.path();
      request.schedule = c.schedule;
      request.network = c.network;
      std::string replicas;
      for (int r : c.replicas) replicas += (replicas.empty() ? "" : ",") + std::to_string(r);
      request.replicas = replicas;

      Plan plan = cli::make_plan(request);
      const cli::RunResult by_default = cli::run_plan(plan);
      request.mini_batches = 4 * plan.mini_batches;
      Plan long_plan = cli::make_plan(request);
      const cli::RunResult longer = cli::run_plan(long_plan);
      ASSERT_TRUE(by_default.metrics.steady_state && longer.metrics.steady_state) << describe(c);
      const double a = by_default.metrics.minibatch_time_s, b = longer.metrics.minibatch_time_s;
      const bool both_periodic = by_default.metrics.steady_state->periodic && longer.metrics.steady_state->periodic;
      const double tolerance = both_periodic ? 1e-9 : 1e-2;
      EXPECT_LE(std::fabs(a - b), tolerance * b)
          << describe(c) << ": default run (" << plan.mini_batches << " mini-batches) period " << a << ", run of "
          << long_plan.mini_batches << " period " << b << (both_periodic ? " (both periodic)" : " (not both periodic)");
      // A cycle is always confirmed on the exact network model.
      if (c.network == "analytic") {
        EXPECT_TRUE(by_default.metrics.steady_state->periodic) << describe(c);
      }
      if (std::getenv("PIPEGRID_TEST_VERBOSE"))
        fmt::print("{}: K={} {} {} | K={} {} {}\n", describe(c), plan.mini_batches, a, by_default.metrics.steady_state->periodic,
                   long_plan.mini_batches, b, longer.metrics.steady_state->periodic);
      periodic_pairs += both_periodic;
      ++cases;
    }
  EXPECT_EQ(cases, 16);
  EXPECT_GE(periodic_pairs, 8);
}

}  // namespace
}  // namespace pipegrid
