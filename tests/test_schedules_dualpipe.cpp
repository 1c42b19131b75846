// DualPipe, the bidirectional schedule of the DeepSeek-V3 report
// (schedules/dualpipe.cpp): the reference's per-rank orders
// (/work/shared/SCHEDULES-BEYOND.md section 10), its two copies as replicas
// with their gradient all-reduces, and, through the independent
// list-scheduling model, the bubble and activations of the DualPipe README's
// table: (PP/2 - 1)(F&B + B - 3W) and PP + 1.

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "expect_input_error.hpp"
#include "list_schedule_model.hpp"
#include "schedules/beyond.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid {
namespace {
using testutil::input_error_of;
using testutil::ModelRun;
using testutil::simulate;
using testutil::Times;

Program make(int p, int m, int mini_batches = 1, bool recompute = false) {
  ScheduleOptions options;
  options.num_stages = p;
  options.micro_batches = m;
  options.mini_batches = mini_batches;
  options.recompute = recompute;
  return generate_schedule("dualpipe", options);
}

// PyTorch's cell form, `(0F3;3B5)` for an overlapped pair.
std::string cells(const Stream& stream) {
  const auto cell = [](const Action& a) {
    return std::to_string(a.stage) + "FBRIW"[static_cast<int>(a.kind)] + std::to_string(a.micro_batch);
  };
  std::string out;
  for (std::size_t i = 0; i < stream.actions.size(); ++i) {
    if (!out.empty()) out += ' ';
    if (std::find(stream.overlapped.begin(), stream.overlapped.end(), i) != stream.overlapped.end()) {
      out += "(" + cell(stream.actions[i]) + ";" + cell(stream.actions[i + 1]) + ")";
      ++i;
    } else {
      out += cell(stream.actions[i]);
    }
  }
  return out;
}

// Section 10 of SCHEDULES-BEYOND.md (DualPipe.step of deepseek-ai/DualPipe
// for 4 ranks, 8 micro-batches), its down micro-batches D0..D3 written as
// 0..3 and its up micro-batches U0..U3 as 4..7.
TEST(SchedulesDualPipe, ReferenceOrderOfFourRanksAndEightMicroBatches) {
  const std::vector<std::string> expected = {
      "0F0 0F1 0F2 3F4 3I4 3W4 3F5 (0F3;3B5) (3F6;0B0) 3B6 (3F7;0B1) 3B7 0I2 0W2 0I3 0W3",
      "1F0 2F4 1F1 2F5 1F2 2B4 (2F6;1B0) (1F3;2B5) (2F7;1B1) 2B6 1B2 2I7 1I3 2W7 1W3",
      "1F4 2F0 1F5 2F1 1F6 2B0 (2F2;1B4) (1F7;2B1) (2F3;1B5) 2B2 1B6 2I3 1I7 2W3 1W7",
      "0F4 0F5 0F6 3F0 3I0 3W0 3F1 (0F7;3B1) (3F2;0B4) 3B2 (3F3;0B5) 3B3 0I6 0W6 0I7 0W7",
  };
  const Program program = make(4, 8);
  ASSERT_EQ(program.devices.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(program.devices[r].streams.size(), 1u);
    EXPECT_EQ(cells(program.devices[r].streams[0]), expected[r]) << "rank " << r;
  }
}

TEST(SchedulesDualPipe, TwoCopiesAreTheTwoReplicasOfEachStage) {
  const Program program = make(6, 12, 2);
  EXPECT_EQ(program.num_stages, 6);
  EXPECT_EQ(program.micro_batches, 12);
  const std::vector<std::vector<int>> stages = {{0, 5}, {1, 4}, {2, 3}, {2, 3}, {1, 4}, {0, 5}};
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(program.devices[r].stages, stages[r]) << r;
    EXPECT_EQ(program.devices[r].replica, r < 3 ? 0 : 1) << r;
    // Rank r runs stage r for micro-batches 0..5 and stage 5-r for 6..11.
    for (const Action& a : program.devices[r].streams[0].actions)
      EXPECT_EQ(a.stage, a.micro_batch < 6 ? r : 5 - r) << r << " " << to_string(a);
  }
  // Per mini-batch and stage, ascending: one all-reduce over its two devices,
  // each joining at its last backward, releasing their next mini-batch.
  ASSERT_EQ(program.all_reduces.size(), 12u);
  for (int k = 0; k < 2; ++k)
    for (int s = 0; s < 6; ++s) {
      const AllReduce& all_reduce = program.all_reduces[static_cast<std::size_t>(k * 6 + s)];
      EXPECT_EQ(all_reduce.stage, s);
      EXPECT_EQ(all_reduce.round, k);
      EXPECT_FALSE(all_reduce.per_layer || all_reduce.bucketed);
      const int low = std::min(s, 5 - s), high = std::max(s, 5 - s);
      ASSERT_EQ(all_reduce.ready.size(), 2u);
      for (const auto& [i, device] : std::vector<std::pair<int, int>>{{0, low}, {1, high}}) {
        const auto& actions = program.devices[device].streams[0].actions;
        const auto last = std::find_if(actions.rbegin(), actions.rend(), [&](const Action& a) {
          return a.mini_batch == k && (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardWeight);
        });
        EXPECT_EQ(all_reduce.ready[i], *last) << "stage " << s << " round " << k;
      }
      if (k == 0) {
        ASSERT_EQ(all_reduce.release.size(), 2u);
        for (const auto& [i, device] : std::vector<std::pair<int, int>>{{0, low}, {1, high}}) {
          const auto& actions = program.devices[device].streams[0].actions;
          EXPECT_EQ(all_reduce.release[i], *std::find_if(actions.begin(), actions.end(), [](const Action& a) {
            return a.mini_batch == 1;
          }));
        }
      } else {
        EXPECT_TRUE(all_reduce.release.empty());
      }
    }
  EXPECT_NO_THROW(validate_program(program));
  // Through the Program's text form and back.
  EXPECT_EQ(parse_program_text(program_to_text(program), "dualpipe"), program);
}

// d whole DualPipe pipelines (replicate_pipelines): device (i, q) is
// replica c d + q of its stages (c its copy), micro-batch j of pipeline q is
// j d + q, and each stage's all-reduce spans its 2d devices.
TEST(SchedulesDualPipe, DataParallelPipelinesOfTwoCopies) {
  ScheduleOptions options;
  options.num_stages = 4;
  options.micro_batches = 8;
  options.mini_batches = 2;
  options.data_parallel = 3;
  const Program program = generate_schedule("dualpipe", options);
  const Program one = make(4, 8, 2);
  ASSERT_EQ(program.devices.size(), 12u);
  EXPECT_EQ(program.micro_batches, 24);
  for (int i = 0; i < 4; ++i)
    for (int q = 0; q < 3; ++q) {
      const DeviceProgram& device = program.devices[static_cast<std::size_t>(i * 3 + q)];
      EXPECT_EQ(device.stages, one.devices[i].stages);
      EXPECT_EQ(device.replica, one.devices[i].replica * 3 + q);
      ASSERT_EQ(device.streams[0].actions.size(), one.devices[i].streams[0].actions.size());
      EXPECT_EQ(device.streams[0].overlapped, one.devices[i].streams[0].overlapped);
      for (std::size_t k = 0; k < device.streams[0].actions.size(); ++k) {
        Action expected = one.devices[i].streams[0].actions[k];
        expected.micro_batch = expected.micro_batch * 3 + q;
        EXPECT_EQ(device.streams[0].actions[k], expected);
      }
    }
  ASSERT_EQ(program.all_reduces.size(), one.all_reduces.size());
  for (std::size_t a = 0; a < one.all_reduces.size(); ++a) {
    const AllReduce& mine = program.all_reduces[a];
    const AllReduce& theirs = one.all_reduces[a];
    EXPECT_EQ(mine.stage, theirs.stage);
    EXPECT_EQ(mine.round, theirs.round);
    ASSERT_EQ(mine.ready.size(), 6u);
    for (std::size_t c = 0; c < 2; ++c)
      for (int q = 0; q < 3; ++q) {
        Action expected = theirs.ready[c];
        expected.micro_batch = expected.micro_batch * 3 + q;
        EXPECT_EQ(mine.ready[c * 3 + static_cast<std::size_t>(q)], expected);
      }
    EXPECT_EQ(mine.release.size(), 3 * theirs.release.size());
  }
  EXPECT_NO_THROW(validate_program(program));
  const ModelRun run = simulate(program, 1, {}), alone = simulate(one, 1, {});
  ASSERT_TRUE(run.complete);
  EXPECT_NEAR(run.makespan, alone.makespan, 1e-9);
  EXPECT_EQ(run.peak, std::vector<int>(12, 5));
}

TEST(SchedulesDualPipe, MirroredHostsMatchTheProgramsDevices) {
  using Hosts = std::vector<std::vector<std::string>>;
  EXPECT_EQ(mirrored_stage_hosts({{"a"}, {"b"}, {"c"}, {"d"}}), (Hosts{{"a", "d"}, {"b", "c"}, {"b", "c"}, {"a", "d"}}));
  EXPECT_EQ(mirrored_stage_hosts({{"a"}, {"b"}}), (Hosts{{"a", "b"}, {"a", "b"}}));
  // d = 2 pipelines: replica c d + q is copy c's device of pipeline q.
  EXPECT_EQ(mirrored_stage_hosts({{"a0", "a1"}, {"b0", "b1"}}), (Hosts{{"a0", "a1", "b0", "b1"}, {"a0", "a1", "b0", "b1"}}));
  EXPECT_TRUE(schedule_info("dualpipe").two_copies);
  EXPECT_TRUE(schedule_info("dualpipe").flushed);
  EXPECT_FALSE(schedule_info("dualpipev").two_copies);
  EXPECT_EQ(default_virtual_stages("dualpipe"), 1);
}

// The README's (PP/2 - 1)(F&B + B - 3W), PP = p the devices and stages, B
// the full backward I + W, F&B = F + B (no overlap gain), holds exactly
// where the input-gradient half takes as long as the forward (I = F) and
// W <= F; elsewhere it does not (I = 2F: 3 against 4 at p = 4; F&B =
// 0.7 (F + B): 1.5 against 3.3 at p = 8), as SCHEDULES-BEYOND.md 8.1 notes.
TEST(SchedulesDualPipe, BubbleEqualsTheReadmeClosedForm) {
  struct Case {
    double f, w;  // I = F
  };
  for (const int p : {2, 4, 6, 8, 10})
    for (const int extra : {0, 2, 6})
      for (const Case c : {Case{1, 1}, Case{1, 0.5}, Case{1, 0.25}, Case{0.8, 0.3}, Case{2, 0.5}, Case{2.5, 2.5}}) {
        const int m = 2 * p + extra;
        const Times times{c.f, c.f, c.w, 1};
        const double f = c.f, b = c.f + c.w, w = c.w, f_and_b = f + b;
        const ModelRun run = simulate(make(p, m), 1, times);
        ASSERT_TRUE(run.complete) << "p=" << p << " m=" << m;
        const double bubble = (p / 2 - 1) * (f_and_b + b - 3 * w);
        EXPECT_NEAR(run.span_bubble, bubble, 1e-9) << "p=" << p << " m=" << m << " F=I=" << c.f << " W=" << c.w;
        // Every device works m (F + B) and starts at 0.
        EXPECT_NEAR(run.makespan, m * (f + b) + bubble, 1e-9) << "p=" << p << " m=" << m << " F=I=" << c.f << " W=" << c.w;
      }
  // SCHEDULES-BEYOND.md section 12: p = 4, m = 8 at unit times.
  const ModelRun run = simulate(make(4, 8), 1, {});
  EXPECT_NEAR(run.makespan, 26.0, 1e-9);
  EXPECT_NEAR(run.span_bubble, 2.0, 1e-9);
  EXPECT_NEAR(run.global_bubble, 2.0, 1e-9);
}

// The README's activations per device: PP + 1 micro-batches of one stage.
TEST(SchedulesDualPipe, PeakActivationsArePPlusOne) {
  for (const int p : {2, 4, 6, 8})
    for (const int m : {2 * p, 2 * p + 4, 4 * p}) {
      const ModelRun run = simulate(make(p, m), 1, {});
      EXPECT_EQ(run.peak, std::vector<int>(p, p + 1)) << "p=" << p << " m=" << m;
    }
}

TEST(SchedulesDualPipe, CompleteAndDeadlockFreeOverAGrid) {
  const std::vector<Times> times = {{1, 1, 1}, {1, 2, 1}, {2, 1, 0.5}, {1.3, 2.1, 0.4, 0.7}, {0.7, 1.1, 1.9, 0.5}};
  for (int p = 2; p <= 10; p += 2)
    for (int m = 2 * p; m <= 2 * p + 8; m += 2)
      for (const int mini_batches : {1, 2})
        for (const bool recompute : {false, true}) {
          const Program program = make(p, m, mini_batches, recompute);
          std::map<std::pair<int, int>, std::string> kinds;
          for (const DeviceProgram& device : program.devices)
            for (const Action& a : device.streams[0].actions)
              kinds[{a.stage, a.micro_batch + a.mini_batch * m}] += "FBRIW"[static_cast<int>(a.kind)];
          EXPECT_EQ(kinds.size(), static_cast<std::size_t>(p * m * mini_batches));
          try {
            validate_program(program);
          } catch (const ProgramError& error) {
            ADD_FAILURE() << "p=" << p << " m=" << m << ": " << error.what();
          }
          for (const Times& t : times)
            EXPECT_TRUE(simulate(program, 1, t).complete) << "p=" << p << " m=" << m << " recompute=" << recompute;
        }
}

TEST(SchedulesDualPipe, BadOptionsAreInputErrors) {
  const auto error = [](int p, int m, const std::function<void(ScheduleOptions&)>& more = {}) {
    ScheduleOptions options;
    options.num_stages = p;
    options.micro_batches = m;
    if (more) more(options);
    return input_error_of([&] { generate_schedule("dualpipe", options); });
  };
  std::string message = error(3, 6);
  EXPECT_CONTAINS(message, "--schedule dualpipe: needs an even number of devices");
  EXPECT_CONTAINS(message, "found 3");
  message = error(4, 7);
  EXPECT_CONTAINS(message, "--micro-batches: dualpipe on 4 devices needs an even number of micro-batches, at least "
                           "2 x devices = 8");
  EXPECT_CONTAINS(message, "found 7");
  EXPECT_CONTAINS(error(4, 6), "found 6");
  EXPECT_CONTAINS(error(4, 8, [](ScheduleOptions& o) { o.virtual_stages = 2; }),
                  "--virtual-stages: dualpipe runs 1 stage of each of its two model copies per device; expected 1, found 2");
  EXPECT_CONTAINS(error(4, 8, [](ScheduleOptions& o) { o.replicas = {1, 1, 1, 1}; }), "--replicas: dualpipe runs two copies");
  EXPECT_NO_THROW(generate_schedule("dualpipe", [] {
    ScheduleOptions options;
    options.num_stages = 4;
    options.micro_batches = 8;
    options.replicas = {2, 2, 2, 2};
    return options;
  }()));
  EXPECT_CONTAINS(error(4, 8, [](ScheduleOptions& o) { o.data_parallel = 2, o.overlap_grad_reduce = true; }),
                  "--overlap-grad-reduce: the pipeline all-reduces the replicas of its stages after the whole backward");
}

}  // namespace
}  // namespace pipegrid
