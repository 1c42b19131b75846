// Real execution (cpu:N) of the Programs of issue 14: devices holding several
// stages (a loop map and a V map), split backwards (I, then W later), R
// before an I, overlapped F&B pairs, hand-made and generated
// (interleaved-1f1b, looped-bfs, zb-h1, zb-h2, zb1p, zb-v, dualpipev). Each
// Program's gradients and weights after two flushed mini-batches equal the
// single-device run's, and its measured timeline is its Program (helpers of
// executor_test_util.hpp).

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "core/program.hpp"
#include "schedules/schedules.hpp"
#include "tests/executor_test_util.hpp"
#include "tests/expect_input_error.hpp"
#include "validate/executor.hpp"
#include "validate/model_zoo.hpp"

namespace pipegrid::validate {
namespace {

using executor_test::expect_timeline_follows_program;
using executor_test::relative_error;
using executor_test::small_model;
using pipegrid::testutil::input_error_of;

/** One device of a hand-made Program: its stages ("0,3") and the actions of
 *  mini-batch 0 in the text form; mini-batch k repeats them with `@k`. */
struct DeviceLine {
  std::string stages;
  std::string actions;
};

struct BeyondCase {
  std::string name;
  int num_stages = 0, micro_batches = 0;
  std::vector<DeviceLine> devices;
};

void PrintTo(const BeyondCase& c, std::ostream* out) { *out << c.name; }

/** The text form of `c` over `mini_batches` flushed mini-batches (each
 *  device runs mini-batch k's actions after all of k - 1's). */
std::string program_text(const BeyondCase& c, int mini_batches) {
  std::string text = "# pipegrid program: " + std::to_string(c.num_stages) + " stages, " + std::to_string(c.micro_batches) +
                     " micro-batches, " + std::to_string(mini_batches) + " mini-batches\n";
  const std::regex action(R"((\d+[FBRIW]\d+))");
  for (std::size_t d = 0; d < c.devices.size(); ++d) {
    const DeviceLine& device = c.devices[d];
    text += "device " + std::to_string(d) + (device.stages.find(',') == std::string::npos ? " stage " : " stages ") +
            device.stages + " replica 0 stream 0:";
    for (int k = 0; k < mini_batches; ++k)
      text += " " + (k == 0 ? device.actions : std::regex_replace(device.actions, action, "$1@" + std::to_string(k)));
    text += "\n";
  }
  return text;
}

const std::vector<BeyondCase>& cases() {
  static const std::vector<BeyondCase> all = {
      // Loop map: device r holds r and r + 2 (looped BFS order).
      {"loop_2x2", 4, 2,
       {{"0,2", "0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1"}, {"1,3", "1F0 1F1 3F0 3F1 3B0 3B1 1B0 1B1"}}},
      // Loop map, interleaved 1F1B order with one more micro-batch.
      {"loop_2x2_interleaved", 4, 3,
       {{"0,2", "0F0 0F1 2F0 0F2 2F1 2B0 2F2 2B1 0B0 2B2 0B1 0B2"},
        {"1,3", "1F0 1F1 3F0 3B0 1F2 3F1 3B1 1B0 3F2 3B2 1B1 1B2"}}},
      // V map: device 0 holds 0 and 3, device 1 holds 1 and 2 (1 -> 2 is a local hand-off).
      {"v_2", 4, 2, {{"0,3", "0F0 0F1 3F0 3B0 3F1 3B1 0B0 0B1"}, {"1,2", "1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1"}}},
      // One device holding every stage: all hand-offs local.
      {"one_device_3_stages", 3, 2, {{"0,1,2", "0F0 1F0 2F0 0F1 1F1 2F1 2B0 1B0 0B0 2B1 1B1 0B1"}}},
      // Split backwards, each W delayed past later forwards and I's; stage 0 mixes
      // I/W with a whole B (its last backward of the mini-batch is a W).
      {"split_zb_h1", 2, 3,
       {{"0", "0F0 0F1 0I0 0F2 0I1 0W0 0B2 0W1"}, {"1", "1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1W2"}}},
      // R before an I (and before a B).
      {"recompute_split", 2, 2,
       {{"0", "0F0 0F1 0R0 0I0 0R1 0B1 0W0"}, {"1", "1F0 1R0 1I0 1F1 1R1 1I1 1W0 1W1"}}},
      // V map with overlapped F&B pairs (DualPipeV style).
      {"v_overlapped", 4, 2,
       {{"0,3", "0F0 3F0 (0F1;3B0) 3F1 3B1 0B0 0B1"}, {"1,2", "1F0 2F0 1F1 (2F1;2B0) 1B0 2B1 1B1"}}},
      // V map with split backwards, an overlapped F and I, and R before an I (ZB-V style).
      {"v_split_overlapped_recompute", 4, 2,
       {{"0,3", "0F0 0F1 3F0 3I0 (3F1;0I0) 3W0 3R1 3I1 0W0 3W1 0I1 0W1"},
        {"1,2", "1F0 2F0 1F1 2F1 2I0 1I0 2W0 2I1 1I1 1W0 2W1 1W1"}}},
  };
  return all;
}

ExecutionRequest request_for(const ModelConfig& model, const BeyondCase& c, int mini_batches) {
  ExecutionRequest request;
  request.model = resolve_model(model);
  request.stages = uniform_ranges(num_layers(request.model), c.num_stages);
  request.program = parse_program_text(program_text(c, mini_batches), c.name);
  request.micro_batch_size = 3;
  request.learning_rate = 0.05;
  request.seed = 7;
  request.keep_state = true;
  return request;
}

class BeyondNumerics : public testing::TestWithParam<std::tuple<std::string, BeyondCase>> {};

// Gradients of the last mini-batch and weights after two updates equal the
// single-device reference; the timeline is the Program's.
TEST_P(BeyondNumerics, MatchesSingleDeviceReference) {
  const auto& [model_name, c] = GetParam();
  const ModelConfig model = small_model(model_name);
  const ExecutionRequest request = request_for(model, c, 2);
  ASSERT_NO_THROW(validate_program(request.program)) << program_text(c, 2);
  const ExecutionResult result = execute(request);
  const ModelState reference = run_reference(model, c.micro_batches, 2, request.micro_batch_size, request.learning_rate, request.seed);
  ModelState pipelined;
  ASSERT_EQ(result.stages.size(), static_cast<std::size_t>(c.num_stages));
  for (const ModelState& stage : result.stages) {
    pipelined.weights.insert(pipelined.weights.end(), stage.weights.begin(), stage.weights.end());
    pipelined.gradients.insert(pipelined.gradients.end(), stage.gradients.begin(), stage.gradients.end());
  }
  EXPECT_LT(relative_error(pipelined.gradients, reference.gradients), 1e-5);
  EXPECT_LT(relative_error(pipelined.weights, reference.weights), 1e-5);
  expect_timeline_follows_program(request, result);
  // Devices report the stages they hold.
  ASSERT_EQ(result.devices.size(), request.program.devices.size());
  for (std::size_t d = 0; d < result.devices.size(); ++d) {
    EXPECT_EQ(result.devices[d].stages, request.program.devices[d].stages);
    EXPECT_EQ(result.devices[d].stage, request.program.devices[d].stages.front());
  }
}

INSTANTIATE_TEST_SUITE_P(Executor, BeyondNumerics, testing::Combine(testing::Values("mlp", "gpt"), testing::ValuesIn(cases())),
                         [](const testing::TestParamInfo<std::tuple<std::string, BeyondCase>>& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

/** A generated schedule of issue 14: p devices, v stages each, M micro-batches. */
struct GeneratedCase {
  std::string model, schedule;
  int devices = 0, virtual_stages = 0, micro_batches = 0;
  bool recompute = false;
};

void PrintTo(const GeneratedCase& c, std::ostream* out) {
  *out << c.model << " " << c.schedule << " p=" << c.devices << " v=" << c.virtual_stages << " M=" << c.micro_batches
       << (c.recompute ? " recompute" : "");
}

class GeneratedBeyondNumerics : public testing::TestWithParam<GeneratedCase> {};

// generate_schedule's Programs (ScheduleOptions::virtual_stages) against
// the single-device reference, two flushed mini-batches.
TEST_P(GeneratedBeyondNumerics, MatchesSingleDeviceReference) {
  const GeneratedCase& c = GetParam();
  const ModelConfig model = small_model(c.model);
  ScheduleOptions options;
  options.num_stages = c.devices * c.virtual_stages;
  options.micro_batches = c.micro_batches;
  options.mini_batches = 2;
  options.virtual_stages = c.virtual_stages;
  options.recompute = c.recompute;
  const ExecutionRequest request = executor_test::make_request(model, c.schedule, options);
  ASSERT_EQ(request.program.devices.size(), static_cast<std::size_t>(c.devices));
  const ExecutionResult result = execute(request);
  const ModelState reference = run_reference(model, c.micro_batches, 2, request.micro_batch_size, request.learning_rate, request.seed);
  ModelState pipelined;
  ASSERT_EQ(result.stages.size(), static_cast<std::size_t>(options.num_stages));
  for (const ModelState& stage : result.stages) {
    pipelined.weights.insert(pipelined.weights.end(), stage.weights.begin(), stage.weights.end());
    pipelined.gradients.insert(pipelined.gradients.end(), stage.gradients.begin(), stage.gradients.end());
  }
  EXPECT_LT(relative_error(pipelined.gradients, reference.gradients), 1e-5);
  EXPECT_LT(relative_error(pipelined.weights, reference.weights), 1e-5);
  expect_timeline_follows_program(request, result);
}

INSTANTIATE_TEST_SUITE_P(
    Executor, GeneratedBeyondNumerics,
    testing::Values(GeneratedCase{"mlp", "interleaved-1f1b", 2, 2, 4}, GeneratedCase{"mlp", "interleaved-1f1b", 3, 2, 3},
                    GeneratedCase{"mlp", "interleaved-1f1b", 2, 2, 2, true}, GeneratedCase{"mlp", "looped-bfs", 2, 2, 3},
                    GeneratedCase{"mlp", "zb-h1", 3, 1, 4}, GeneratedCase{"mlp", "zb-h2", 2, 1, 4},
                    GeneratedCase{"mlp", "zb1p", 2, 2, 4}, GeneratedCase{"mlp", "zb-v", 2, 2, 4},
                    GeneratedCase{"mlp", "dualpipev", 2, 2, 4}, GeneratedCase{"mlp", "dualpipev", 3, 2, 6},
                    GeneratedCase{"gpt", "interleaved-1f1b", 2, 2, 4}, GeneratedCase{"gpt", "looped-bfs", 2, 2, 2},
                    GeneratedCase{"gpt", "zb-h1", 2, 1, 3}, GeneratedCase{"gpt", "zb-h2", 3, 1, 5},
                    GeneratedCase{"gpt", "zb1p", 2, 2, 2}, GeneratedCase{"gpt", "zb-v", 2, 2, 3},
                    GeneratedCase{"gpt", "dualpipev", 2, 2, 5}),
    [](const testing::TestParamInfo<GeneratedCase>& info) {
      std::string name = info.param.model + "_" + info.param.schedule + "_p" + std::to_string(info.param.devices) + "_v" +
                         std::to_string(info.param.virtual_stages) + "_M" + std::to_string(info.param.micro_batches) +
                         (info.param.recompute ? "_recompute" : "");
      for (char& ch : name)
        if (ch == '-') ch = '_';
      return name;
    });

TEST(BeyondExecutor, GnmtOnAVMapWithSplitBackwards) {
  const BeyondCase& c = cases().back();
  const ModelConfig model = small_model("gnmt");
  const ExecutionRequest request = request_for(model, c, 2);
  const ExecutionResult result = execute(request);
  const ModelState reference = run_reference(model, c.micro_batches, 2, request.micro_batch_size, request.learning_rate, request.seed);
  ModelState pipelined;
  for (const ModelState& stage : result.stages) {
    pipelined.weights.insert(pipelined.weights.end(), stage.weights.begin(), stage.weights.end());
    pipelined.gradients.insert(pipelined.gradients.end(), stage.gradients.begin(), stage.gradients.end());
  }
  EXPECT_LT(relative_error(pipelined.gradients, reference.gradients), 1e-5);
  EXPECT_LT(relative_error(pipelined.weights, reference.weights), 1e-5);
}

// The timeline names the split halves I and W, and sends nothing between two
// stages of one device.
TEST(BeyondExecutor, TimelineRecordsIAndWAndNoLocalSends) {
  const BeyondCase& c = cases().back();
  ExecutionRequest request = request_for(small_model("mlp"), c, 2);
  request.warmup_mini_batches = 1;
  const ExecutionResult result = execute(request);
  std::map<std::string, int> actions;
  for (const TimelineRecord& record : result.timeline.records) {
    ++actions[record.action];
    if (record.action == "SEND_F") {
      EXPECT_NE(record.stage, 1) << "stage 1 hands its output to stage 2 on its own device";
    }
    if (record.action == "SEND_B") {
      EXPECT_NE(record.stage, 2) << "stage 2 hands its gradient to stage 1 on its own device";
    }
  }
  // One measured mini-batch: 4 stages x 2 micro-batches of each of F, I, W; one R.
  EXPECT_EQ(actions["F"], 8);
  EXPECT_EQ(actions["I"], 8);
  EXPECT_EQ(actions["W"], 8);
  EXPECT_EQ(actions["R"], 1);
  EXPECT_EQ(actions.count("B"), 0u);
  // Cross-device hand-offs only: 0 -> 1 and 2 -> 3 forward, 3 -> 2 and 1 -> 0 backward.
  EXPECT_EQ(actions["SEND_F"], 4);
  EXPECT_EQ(actions["SEND_B"], 4);
  // One optimizer step per stage.
  EXPECT_EQ(actions[kOptimizerStepAction], 4);
  expect_timeline_follows_program(request, result);
}

// The weight rules with versions run one stage per device and whole backwards.
TEST(BeyondExecutor, VersionedRulesNeedOneStagePerDeviceAndWholeBackwards) {
  const BeyondCase v{"v", 4, 1, {{"0,3", "0F0 3F0 3B0 0B0"}, {"1,2", "1F0 2F0 2B0 1B0"}}};
  ExecutionRequest request = request_for(small_model("mlp"), v, 2);
  request.weight_rule = WeightRule::Stashing;
  EXPECT_NE(input_error_of([&] { execute(request); }).find("runs one stage per device"), std::string::npos);
  const BeyondCase split{"split", 2, 1, {{"0", "0F0 0I0 0W0"}, {"1", "1F0 1I0 1W0"}}};
  request = request_for(small_model("mlp"), split, 2);
  request.weight_rule = WeightRule::Prediction;
  EXPECT_NE(input_error_of([&] { execute(request); }).find("is a split backward (I/W)"), std::string::npos);
}

}  // namespace
}  // namespace pipegrid::validate
