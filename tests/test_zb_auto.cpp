// zb-auto (schedules/zb_auto.hpp): the bubble rates of Qi et al.'s Table 5
// (arXiv 2401.10241, ICLR 2024) for ZB-1p (K = 1) and ZB-2p (K = 2) from the
// pass times of its Table 9 (copied from
// /work/shared/data/published-runs/zero-bubble-2024.json), the activation
// limit in the Program, monotonicity in K, determinism and refusals.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "expect_input_error.hpp"
#include "schedules/schedules.hpp"
#include "schedules/zb_auto.hpp"

namespace pipegrid {
namespace {

struct Table5Row {
  const char* model;
  int p, m;
  int hidden, heads;  // Table 3; sequence 1024
  double forward_ms, input_ms, weight_ms, comm_ms;  // Table 9
  double zb1p_bubble, zb2p_bubble;                   // Table 5
};

const std::vector<Table5Row>& table5() {
  static const std::vector<Table5Row> rows = {
      {"1.5B", 8, 24, 2304, 24, 18.522, 18.086, 9.337, 0.601, 0.1585, 0.0433},
      {"1.5B", 8, 32, 2304, 24, 18.513, 18.086, 9.331, 0.626, 0.1242, 0.0039},
      {"1.5B", 8, 64, 2304, 24, 18.546, 18.097, 9.321, 0.762, 0.0674, 0.0026},
      {"6.2B", 8, 24, 4096, 32, 29.718, 29.444, 19.927, 0.527, 0.1323, 0.0029},
      {"6.2B", 8, 32, 4096, 32, 29.802, 29.428, 19.53, 0.577, 0.1045, 0.0022},
      {"6.2B", 8, 64, 4096, 32, 29.935, 29.621, 19.388, 0.535, 0.0554, 0.0010},
      {"14.6B", 16, 48, 5120, 40, 11.347, 11.248, 8.132, 0.377, 0.1397, 0.0066},
      {"14.6B", 16, 64, 5120, 40, 11.307, 11.254, 8.101, 0.379, 0.1088, 0.0054},
      {"14.6B", 16, 128, 5120, 40, 11.325, 11.308, 8.109, 0.378, 0.0576, 0.0028},
      {"28.3B", 32, 96, 6144, 48, 10.419, 10.207, 7.715, 0.408, 0.1421, 0.0038},
      {"28.3B", 32, 128, 6144, 48, 10.408, 10.204, 7.703, 0.408, 0.1106, 0.0029},
      {"28.3B", 32, 256, 6144, 48, 10.402, 10.248, 7.698, 0.46, 0.0594, 0.0018},
  };
  return rows;
}

// The row's times; the memory rule of the paper with the authors' estimate
// M_W / M_B = 32h / (34h + 5as) (sequence s = 1024).
ZbStageTimes row_times(const Table5Row& row) {
  ZbStageTimes times;
  const auto p = static_cast<std::size_t>(row.p);
  times.forward_s.assign(p, row.forward_ms);
  times.backward_input_s.assign(p, row.input_ms);
  times.backward_weight_s.assign(p, row.weight_ms);
  times.weight_memory_fraction.assign(p, 32.0 * row.hidden / (34.0 * row.hidden + 5.0 * row.heads * 1024));
  times.transfer_s = row.comm_ms;
  return times;
}

Program zb_auto(int p, int m, double k, const ZbStageTimes& times) {
  ScheduleOptions options;
  options.num_stages = p;
  options.micro_batches = m;
  options.activation_limit = k;
  options.stage_times = times;
  return generate_schedule("zb-auto", options);
}

double bubble(const Table5Row& row, double k) {
  const ZbStageTimes times = row_times(row);
  const Program program = zb_auto(row.p, row.m, k, times);
  validate_program(program);
  const double iteration = one_stage_per_device_iteration_s(program, times);
  return (iteration - row.m * (row.forward_ms + row.input_ms + row.weight_ms)) / iteration;
}

TEST(ZbAuto, Table5BubbleRatesOfZb1pAndZb2p) {
  for (const Table5Row& row : table5()) {
    SCOPED_TRACE(std::string(row.model) + " p=" + std::to_string(row.p) + " m=" + std::to_string(row.m));
    EXPECT_NEAR(bubble(row, 1), row.zb1p_bubble, 0.005);
    EXPECT_NEAR(bubble(row, 2), row.zb2p_bubble, 0.005);
  }
}

// In units of one micro-batch's activations: F +1, I -(1 - f), W -f.
double peak_activations(const Program& program, const ZbStageTimes& times, int stage) {
  const double f = times.weight_memory_fraction.empty() ? 1.0 : times.weight_memory_fraction[static_cast<std::size_t>(stage)];
  double held = 0, peak = 0;
  for (const Action& action : program.devices[static_cast<std::size_t>(stage)].streams.front().actions) {
    held += action.kind == ActionKind::Forward ? 1.0 : action.kind == ActionKind::BackwardInput ? -(1.0 - f) : -f;
    peak = std::max(peak, held);
  }
  return peak;
}

TEST(ZbAuto, ActivationLimitHoldsOnEveryStage) {
  const Table5Row& row = table5()[1];
  for (const double k : {1.0 / 8, 0.5, 1.0, 1.5, 2.0, 3.0}) {
    for (const bool paper_memory : {true, false}) {
      ZbStageTimes times = row_times(row);
      if (!paper_memory) times.weight_memory_fraction.clear();  // held from F to W
      const Program program = zb_auto(row.p, row.m, k, times);
      validate_program(program);
      for (int s = 0; s < row.p; ++s) EXPECT_LE(peak_activations(program, times, s), k * row.p + 1e-9) << "K " << k << " stage " << s;
    }
  }
  // Held from F to W at K = 1: stage 0 reaches p micro-batches in flight.
  const Program program = zb_auto(4, 12, 1, {});
  EXPECT_DOUBLE_EQ(peak_activations(program, {}, 0), 4);
}

TEST(ZbAuto, MoreMemoryNeverLengthensTheIteration) {
  for (const Table5Row& row : {table5()[0], table5()[6]}) {
    const ZbStageTimes times = row_times(row);
    double previous = INFINITY;
    for (const double k : {1.0 / row.p, 0.5, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0}) {
      const double iteration = one_stage_per_device_iteration_s(zb_auto(row.p, row.m, k, times), times);
      EXPECT_LE(iteration, previous + 1e-9) << row.model << " K " << k;
      previous = iteration;
    }
  }
}

TEST(ZbAuto, SameInputsSameProgram) {
  const ZbStageTimes times = row_times(table5()[3]);
  EXPECT_EQ(program_to_text(zb_auto(8, 24, 1.5, times)), program_to_text(zb_auto(8, 24, 1.5, times)));
}

TEST(ZbAuto, DefaultTimesAtKOneAreZbH1Shaped) {
  // T_F = T_B = T_W = 1, no transfer time: the bubble of ZB-H1, (p - 1)(T_F + T_B - T_W).
  const Program program = zb_auto(4, 8, 1, {});
  EXPECT_DOUBLE_EQ(one_stage_per_device_iteration_s(program, {}), 8 * 3 + 3 * 1);
  // K = 2: zero bubble after the start-up (the paper's ZB-2p).
  EXPECT_DOUBLE_EQ(one_stage_per_device_iteration_s(zb_auto(4, 8, 2, {}), {}), 8 * 3);
}

void expect_input_error(const std::function<void()>& action, const std::vector<std::string>& parts) {
  const std::string message = testutil::input_error_of(action);
  for (const std::string& part : parts) EXPECT_CONTAINS(message, part);
}

TEST(ZbAuto, RefusesTooSmallLimitsAndMisuse) {
  expect_input_error([] { zb_auto(8, 16, 0.1, {}); }, {"--activation-limit", "at least 0.125", "0.1"});
  expect_input_error([] { zb_auto(8, 16, -1, {}); }, {"--activation-limit", "at least"});
  ScheduleOptions options;
  options.num_stages = 4;
  options.micro_batches = 8;
  options.activation_limit = 1;
  expect_input_error([&] { generate_schedule("zb-h1", options); }, {"--activation-limit", "applies to zb-auto", "zb-h1"});
  ZbStageTimes wrong;
  wrong.forward_s = {1, 1};
  options.stage_times = wrong;
  expect_input_error([&] { generate_schedule("zb-auto", options); }, {"forward_s", "one value per stage (4)", "2"});
}

TEST(ZbAuto, ListedAsNotPyTorchsZb1p) {
  const ScheduleInfo& info = schedule_info("zb-auto");
  EXPECT_NE(info.summary.find("not PyTorch's zb1p"), std::string::npos);
  EXPECT_TRUE(takes_option(info, ScheduleOption::ActivationLimit));
  EXPECT_TRUE(takes_option(info, ScheduleOption::StageTimes));
}

}  // namespace
}  // namespace pipegrid
