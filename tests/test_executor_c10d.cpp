// The c10d launchers (validate/c10d.cpp): the executor as one process per
// device over Gloo. Numerics equal the single-device reference (flushed
// schedules) or the threads launcher's run (stale weights); the merged
// timeline holds every Program action once; a failing rank ends the run
// with its name and stderr. The ranks are the pipegrid binary
// (PIPEGRID_BINARY, `pipegrid __rank`).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schedules/schedules.hpp"
#include "tests/executor_test_util.hpp"
#include "tests/expect_input_error.hpp"
#include "validate/executor.hpp"
#include "validate/model_zoo.hpp"

namespace pipegrid::validate {
namespace {

using executor_test::expect_timeline_follows_program;
using executor_test::make_request;
using executor_test::relative_error;
using executor_test::small_model;
using pipegrid::testutil::input_error_of;

Launcher processes() {
  Launcher launcher;
  launcher.kind = Launcher::Kind::Processes;
  launcher.executable = PIPEGRID_BINARY;
  launcher.timeout_s = 120;
  return launcher;
}

ModelState concatenated(const ExecutionResult& result) {
  ModelState state;
  for (const ModelState& stage : result.stages) {
    state.weights.insert(state.weights.end(), stage.weights.begin(), stage.weights.end());
    state.gradients.insert(state.gradients.end(), stage.gradients.begin(), stage.gradients.end());
  }
  return state;
}

struct C10dCase {
  std::string name, model, schedule;
  std::vector<int> replicas;  ///< one per stage (empty: `stages` unreplicated)
  int stages = 2, virtual_stages = 1, micro_batches = 1, mini_batches = 3;
  WeightRule rule = WeightRule::Flush;
};

void PrintTo(const C10dCase& c, std::ostream* out) { *out << c.name; }

class C10dProcesses : public testing::TestWithParam<C10dCase> {};

// One process per device: the same numbers as one device (flushed) or as the
// threads launcher (stale weights, whose own tests replay the rule), and the
// Program's every action once, merged on one clock.
TEST_P(C10dProcesses, NumericsAndTimelineOfThePlan) {
  const C10dCase& c = GetParam();
  ScheduleOptions options;
  options.num_stages = c.replicas.empty() ? c.stages : static_cast<int>(c.replicas.size());
  options.virtual_stages = c.virtual_stages;
  options.micro_batches = c.micro_batches;
  options.mini_batches = c.mini_batches;
  options.replicas = c.replicas;
  const ModelConfig model = resolve_model(small_model(c.model));
  ExecutionRequest request = make_request(model, c.schedule, options);
  request.weight_rule = c.rule;
  request.warmup_mini_batches = 1;
  request.launcher = processes();
  const ExecutionResult result = execute(request);
  expect_timeline_follows_program(request, result);
  EXPECT_EQ(result.clock, "shared CLOCK_MONOTONIC");
  ASSERT_EQ(result.clock_offset_residual_s.size(), request.program.devices.size());
  for (double residual : result.clock_offset_residual_s) EXPECT_EQ(residual, 0);
  const ModelState executed = concatenated(result);
  if (c.rule == WeightRule::Flush) {
    const ModelState reference =
        run_reference(model, c.micro_batches, c.mini_batches, request.micro_batch_size, request.learning_rate, request.seed);
    EXPECT_LT(relative_error(executed.gradients, reference.gradients), 1e-5);
    EXPECT_LT(relative_error(executed.weights, reference.weights), 1e-5);
  } else {
    ExecutionRequest threads = request;
    threads.launcher = Launcher{};
    const ModelState expected = concatenated(execute(threads));
    EXPECT_LT(relative_error(executed.weights, expected.weights), 1e-5);
    EXPECT_LT(relative_error(executed.gradients, expected.gradients), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Executor, C10dProcesses,
    testing::Values(C10dCase{"gpipe_2", "mlp", "gpipe", {}, 2, 1, 4, 3}, C10dCase{"onef1b_4", "mlp", "1f1b-sno", {}, 4, 1, 4, 3},
                    C10dCase{"onef1b_so_gpt_2", "gpt", "1f1b-so", {}, 2, 1, 3, 3},
                    C10dCase{"pipedream_2", "mlp", "pipedream", {}, 2, 1, 1, 5, WeightRule::Stashing},
                    C10dCase{"pipedream_4", "mlp", "pipedream", {}, 4, 1, 1, 6, WeightRule::Stashing},
                    C10dCase{"replicated_dp_2", "mlp", "dp", {2}, 1, 1, 4, 3},
                    C10dCase{"replicated_gpipe_4", "mlp", "gpipe", {2, 2}, 2, 1, 4, 3},
                    C10dCase{"interleaved_2", "mlp", "interleaved-1f1b", {}, 4, 2, 4, 2}),
    [](const testing::TestParamInfo<C10dCase>& info) { return info.param.name; });

// A rank that cannot start ends the run with its rank, status and stderr,
// promptly (no wait for the others' timeouts).
TEST(C10dProcesses, AFailingRankIsNamedWithItsStderr) {
  ExecutionRequest request = make_request(resolve_model(small_model("mlp")), "gpipe", 2, 2, 2);
  request.launcher = processes();
  request.launcher.executable = "/nonexistent/pipegrid";
  try {
    execute(request);
    FAIL() << "expected a failure";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("--launcher processes: rank "), std::string::npos) << message;
    EXPECT_NE(message.find("exited with status 127"), std::string::npos) << message;
    EXPECT_NE(message.find("cannot start /nonexistent/pipegrid"), std::string::npos) << message;
  }
}

TEST(C10dProcesses, BadLaunchers) {
  EXPECT_CONTAINS(input_error_of([] { parse_launcher_kind("mpi"); }), "--launcher 'mpi': expected threads");
  ExecutionRequest request = make_request(resolve_model(small_model("mlp")), "gpipe", 2, 2, 2);
  request.launcher = processes();
  request.device = parse_device_spec("cuda-partitioned:2");
  EXPECT_FALSE(input_error_of([&] { execute(request); }).empty());
}

}  // namespace
}  // namespace pipegrid::validate
