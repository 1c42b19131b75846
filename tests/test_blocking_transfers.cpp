// Blocking stage transfers (sim::SimulationRequest::blocking_transfers,
// Megatron-LM's --no-overlap-p2p-communication): a sender starts nothing
// until its message has arrived. Closed forms under the analytic network
// model (a transfer alone on a route of latency L and bandwidth W takes
// L + bytes / W), exact to 1e-9.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/program.hpp"
#include "core/timeline.hpp"
#include "sim/engine.hpp"
#include "sim_test_util.hpp"

namespace pipegrid {
namespace {

using sim::TransferRule;
using testutil::TempFile;

bool near(double actual, double expected) { return std::abs(actual - expected) <= 1e-9 * std::abs(expected) + 1e-12; }

// Star platform of two hosts (sim_test_util): a route crosses two links.
constexpr double kLinkLatency = 0.125, kBandwidth = 16, kBytes = 8;
constexpr double kArrival = 2 * kLinkLatency + kBytes / kBandwidth;  // one activation alone: 0.75 s
constexpr double kForward = 1, kBackward = 2;

// GPipe over 2 stages, 2 micro-batches.
constexpr const char* kGpipe =
    "# pipegrid program: 2 stages, 2 micro-batches, 1 mini-batches\n"
    "device 0 stage 0 replica 0 stream 0: 0F0 0F1 0B0 0B1\n"
    "device 1 stage 1 replica 0 stream 0: 1F0 1F1 1B0 1B1\n";

using Records = std::map<std::tuple<std::string, std::string, int>, TimelineRecord>;  // (host, action, micro-batch)

// `program` on a star of as many hosts (h0 ...) as `stages`, analytic network.
Records simulate_program(const char* program, const std::vector<StageCost>& stages, bool blocking, TransferRule rule) {
  const TempFile platform("pipegrid-blocking", ".xml",
                          testutil::star_platform_xml(static_cast<int>(stages.size()), kLinkLatency, kBandwidth));
  sim::SimulationRequest request;
  request.platform_file = platform.path();
  request.program = parse_program_text(program, "test program");
  validate_program(request.program);
  request.stages = stages;
  for (std::size_t h = 0; h < stages.size(); ++h) request.hosts.push_back({"h" + std::to_string(h)});
  request.network = sim::NetworkModel::Analytic;
  request.transfer_rule = rule;
  request.blocking_transfers = blocking;
  Records records;
  for (const TimelineRecord& r : sim::simulate(request).timeline.records) records[{r.host, r.action, r.micro_batch}] = r;
  return records;
}

Records run(bool blocking, TransferRule rule) {
  std::vector<StageCost> stages = testutil::balanced_stages(2, kForward, kBackward);
  stages[1].input_bytes = kBytes;  // stage 0's activation; gradients carry 0 bytes
  return simulate_program(kGpipe, stages, blocking, rule);
}

TEST(BlockingTransfers, DefaultIsOverlapped) { EXPECT_FALSE(sim::SimulationRequest{}.blocking_transfers); }

TEST(BlockingTransfers, SenderWaitsForItsActivationToArrive) {
  for (const TransferRule rule : {TransferRule::Share, TransferRule::Fifo}) {
    SCOPED_TRACE(sim::to_string(rule));
    const Records records = run(true, rule);
    const TimelineRecord& f0 = records.at({"h0", "F", 0});
    const TimelineRecord& f1 = records.at({"h0", "F", 1});
    const TimelineRecord& send0 = records.at({"h0", "SEND_F", 0});
    // The compute record keeps its own end; the send runs L + B / W after it.
    EXPECT_TRUE(near(f0.start_s, 0)) << f0.start_s;
    EXPECT_TRUE(near(f0.end_s, kForward)) << f0.end_s;
    EXPECT_TRUE(near(send0.start_s, kForward)) << send0.start_s;
    EXPECT_TRUE(near(send0.end_s, kForward + kArrival)) << send0.end_s;
    // The next forward starts at the arrival: compute + latency + bytes / bandwidth.
    EXPECT_TRUE(near(f1.start_s, kForward + kArrival)) << f1.start_s;
    EXPECT_TRUE(near(f1.end_s, 2 * kForward + kArrival)) << f1.end_s;
    // 0B0 waits for 0F1's send too (2 F + 2 arrivals), then for 1B0's gradient.
    EXPECT_TRUE(near(records.at({"h1", "F", 1}).start_s, 2 * (kForward + kArrival)));
  }
}

TEST(BlockingTransfers, WithoutItTheNextForwardFollowsTheCompute) {
  for (const TransferRule rule : {TransferRule::Share, TransferRule::Fifo}) {
    SCOPED_TRACE(sim::to_string(rule));
    const Records records = run(false, rule);
    EXPECT_TRUE(near(records.at({"h0", "F", 1}).start_s, kForward));
    EXPECT_TRUE(near(records.at({"h0", "SEND_F", 0}).end_s, kForward + kArrival));
    EXPECT_TRUE(near(records.at({"h1", "F", 1}).start_s, std::max(2 * kForward + kArrival, kForward + kArrival + kForward)));
  }
}

TEST(BlockingTransfers, ReceiverTimesAreTheSameAsOverlapped) {
  // The first micro-batch: the receiver sees the same arrival either way.
  for (const TransferRule rule : {TransferRule::Share, TransferRule::Fifo}) {
    SCOPED_TRACE(sim::to_string(rule));
    EXPECT_TRUE(near(run(true, rule).at({"h1", "F", 0}).start_s, kForward + kArrival));
    EXPECT_TRUE(near(run(false, rule).at({"h1", "F", 0}).start_s, kForward + kArrival));
  }
}

// Stage 1 on h1 runs 1F2 and 1B0 as an overlapped pair: its activation goes
// to h2, its gradient to h0, both over h1's link at once.
constexpr const char* kPair =
    "# pipegrid program: 3 stages, 3 micro-batches, 1 mini-batches\n"
    "device 0 stage 0 replica 0 stream 0: 0F0 0F1 0F2 0B0 0B1 0B2\n"
    "device 1 stage 1 replica 0 stream 0: 1F0 1F1 (1F2;1B0) 1B1 1B2\n"
    "device 2 stage 2 replica 0 stream 0: 2F0 2B0 2F1 2B1 2F2 2B2\n";

Records run_pair_program(bool blocking, TransferRule rule) {
  std::vector<StageCost> stages = testutil::balanced_stages(3, kForward, kBackward);
  for (int s = 0; s < 3; ++s) stages[static_cast<std::size_t>(s)].output_bytes = 64 * kBytes;
  for (int s = 1; s < 3; ++s) stages[static_cast<std::size_t>(s)].input_bytes = 64 * kBytes;
  return simulate_program(kPair, stages, blocking, rule);
}

TEST(BlockingTransfers, AnOverlappedPairWaitsForBothOfItsMessages) {
  for (const TransferRule rule : {TransferRule::Share, TransferRule::Fifo}) {
    for (const bool blocking : {true, false}) {
      SCOPED_TRACE(std::string(sim::to_string(rule)) + (blocking ? " blocking" : " overlapped"));
      const Records records = run_pair_program(blocking, rule);
      const double pair_end = records.at({"h1", "B", 0}).end_s;
      const double activation = records.at({"h1", "SEND_F", 2}).end_s;
      const double gradient = records.at({"h1", "SEND_B", 0}).end_s;
      const double next = records.at({"h1", "B", 1}).start_s;
      const double next_input = records.at({"h2", "SEND_B", 1}).end_s;  // 1B1's own input
      // Both messages arrive after 1B1's own input: the hold, not the input, decides.
      ASSERT_GT(std::max(activation, gradient), next_input);
      EXPECT_TRUE(near(next, blocking ? std::max(activation, gradient) : std::max(pair_end, next_input))) << next;
    }
  }
}

}  // namespace
}  // namespace pipegrid
