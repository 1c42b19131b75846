// The transfer rules (docs/semantics.md, "Transfer rules"; sim::TransferRule):
// how concurrent activations and gradients share the network. Closed forms
// under the analytic network model (CM02 without TCP corrections: a transfer
// alone on a route of latency L and bandwidth W takes L + bytes / W; flows
// that cross one link split its bandwidth equally), exact to 1e-9.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/program.hpp"
#include "core/timeline.hpp"
#include "render/timeline_csv.hpp"
#include "sim/engine.hpp"
#include "sim_test_util.hpp"

namespace pipegrid {
namespace {

using sim::TransferRule;
using testutil::SimCase;
using testutil::TempFile;

bool near(double actual, double expected) { return std::abs(actual - expected) <= 1e-9 * std::abs(expected) + 1e-12; }

// Star platform (sim_test_util): every route crosses two links (the sender's
// up, the receiver's down), so a route's latency is 2 x kLinkLatency.
constexpr double kLinkLatency = 0.125, kBandwidth = 16, kBytes = 8;
constexpr double kRouteLatency = 2 * kLinkLatency;
constexpr double kAlone = kRouteLatency + kBytes / kBandwidth;  // one transfer alone: 0.75 s

struct Send {
  double start = 0, end = 0;
  std::string peer;
};

// Runs `program_text` with every action taking no time, stage s's input
// activation of kBytes bytes and latency-only gradients, stage s replica r on
// hosts[s][r] of a 3-host star; returns the SEND_F records by (host,
// micro-batch, mini-batch).
std::map<std::tuple<std::string, int, int>, Send> forward_sends(const std::string& program_text,
                                                                 const std::vector<std::vector<std::string>>& hosts,
                                                                 TransferRule rule) {
  const TempFile platform("pipegrid-transfer", ".xml", testutil::star_platform_xml(3, kLinkLatency, kBandwidth));
  sim::SimulationRequest request;
  request.platform_file = platform.path();
  request.program = parse_program_text(program_text, "test program");
  validate_program(request.program);
  request.stages = testutil::balanced_stages(request.program.num_stages, 0, 0);
  for (std::size_t s = 1; s < request.stages.size(); ++s) request.stages[s].input_bytes = kBytes;
  request.hosts = hosts;
  request.network = sim::NetworkModel::Analytic;
  request.transfer_rule = rule;
  std::map<std::tuple<std::string, int, int>, Send> sends;
  for (const TimelineRecord& r : sim::simulate(request).timeline.records)
    if (r.action == "SEND_F") sends[{r.host, r.micro_batch, r.mini_batch}] = {r.start_s, r.end_s, r.peer};
  return sends;
}

// Two micro-batches whose activations are both ready at t = 0 on one channel
// (h0 -> h1).
constexpr const char* kTwoOnOneChannel =
    "# pipegrid program: 2 stages, 2 micro-batches, 1 mini-batches\n"
    "device 0 stage 0 replica 0 stream 0: 0F0 0F1 0B0 0B1\n"
    "device 1 stage 1 replica 0 stream 0: 1F0 1F1 1B0 1B1\n";

TEST(TransferRule, ShareSplitsOneChannelBetweenConcurrentTransfers) {
  const auto sends = forward_sends(kTwoOnOneChannel, {{"h0"}, {"h1"}}, TransferRule::Share);
  ASSERT_EQ(sends.size(), 2u);
  for (int m = 0; m < 2; ++m) {
    const Send& send = sends.at({"h0", m, 0});
    EXPECT_TRUE(near(send.start, 0)) << m;
    // Both cross the links at once, each at W / 2: L + 2B / W.
    EXPECT_TRUE(near(send.end, kRouteLatency + 2 * kBytes / kBandwidth)) << m << ": " << send.end;
  }
}

TEST(TransferRule, FifoStartsEachTransferWhenThePreviousHasArrived) {
  const auto sends = forward_sends(kTwoOnOneChannel, {{"h0"}, {"h1"}}, TransferRule::Fifo);
  ASSERT_EQ(sends.size(), 2u);
  const Send& first = sends.at({"h0", 0, 0});
  const Send& second = sends.at({"h0", 1, 0});
  EXPECT_TRUE(near(first.start, 0));
  EXPECT_TRUE(near(first.end, kAlone)) << first.end;  // L + B / W
  // The second waits for the first's arrival, latency included: 2 (L + B / W).
  EXPECT_TRUE(near(second.start, kAlone)) << second.start;
  EXPECT_TRUE(near(second.end, 2 * kAlone)) << second.end;
}

// Stage 1 replicated on h1 and h2: h0 sends mini-batch 0's activation to h1
// and mini-batch 1's to h2, both at t = 0; the two routes share h0's link.
constexpr const char* kTwoChannels =
    "# pipegrid program: 2 stages, 1 micro-batches, 2 mini-batches\n"
    "device 0 stage 0 replica 0 stream 0: 0F0 0F0@1 0B0 0B0@1\n"
    "device 1 stage 1 replica 0 stream 0: 1F0 1B0\n"
    "device 2 stage 1 replica 1 stream 0: 1F0@1 1B0@1\n";

TEST(TransferRule, FifoLeavesTransfersToDifferentPeersSharing) {
  for (const TransferRule rule : {TransferRule::Share, TransferRule::Fifo}) {
    const auto sends = forward_sends(kTwoChannels, {{"h0"}, {"h1", "h2"}}, rule);
    ASSERT_EQ(sends.size(), 2u);
    EXPECT_EQ(sends.at({"h0", 0, 0}).peer, "h1");
    EXPECT_EQ(sends.at({"h0", 0, 1}).peer, "h2");
    for (const auto& [key, send] : sends) {
      EXPECT_TRUE(near(send.start, 0)) << sim::to_string(rule);
      EXPECT_TRUE(near(send.end, kRouteLatency + 2 * kBytes / kBandwidth)) << sim::to_string(rule) << ": " << send.end;
    }
  }
}

TEST(TransferRule, DefaultIsShare) { EXPECT_EQ(sim::SimulationRequest{}.transfer_rule, TransferRule::Share); }

TEST(TransferRule, NamesParseAndBadOnesNameTheFlag) {
  EXPECT_EQ(sim::parse_transfer_rule("share"), TransferRule::Share);
  EXPECT_EQ(sim::parse_transfer_rule("fifo"), TransferRule::Fifo);
  EXPECT_STREQ(sim::to_string(TransferRule::Share), "share");
  EXPECT_STREQ(sim::to_string(TransferRule::Fifo), "fifo");
  for (const std::string bad : {"FIFO", "queue", ""}) {
    try {
      sim::parse_transfer_rule(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& error) {
      EXPECT_EQ(std::string(error.what()), fmt::format("--transfer-rule: expected share or fifo, found '{}'", bad));
    }
  }
}

// ---- FIFO closed forms on latency-only chains (docs/semantics.md): each
// message takes exactly SR and a channel carries one at a time.

double gpipe_fifo(const SimCase& c) {
  const double n = c.stages, m = c.micro_batches, f = c.forward_s, b = c.backward_s, sr = c.hop_s;
  return n * (f + b) + (m - 1) * (std::max(f, sr) + std::max(b, sr)) + 2 * (n - 1) * sr;
}

double sno_table2(const SimCase& c) {
  const int n = c.stages, m = c.micro_batches;
  return (m + n - 1) * (c.forward_s + c.backward_s) + (n + m - 2 - (m - 1 + n - 1) / n) * 2 * c.hop_s;
}

std::vector<SimCase> fifo_grid(const std::string& schedule) {
  std::vector<SimCase> cases;
  for (const int n : {2, 3, 4})
    for (const int m : {1, 2, 3, 5, 8})
      for (const auto& [f, b] : {std::pair{1.0, 1.0}, std::pair{1.0, 2.0}, std::pair{2.0, 1.0}})
        for (const double sr : {0.0, 0.5, 1.0, 1.5, 2.5, 4.0}) {
          SimCase c{schedule, n, m, f, b, sr};
          c.transfer_rule = TransferRule::Fifo;
          cases.push_back(c);
        }
  return cases;
}

TEST(TransferRuleClosedForms, GPipeOnFifoLinks) {
  testutil::PlatformCache cache;
  for (const SimCase& c : fifo_grid("gpipe")) {
    const double expected = gpipe_fifo(c);
    const double found = testutil::run_case(c, cache).minibatch_time_s;
    EXPECT_TRUE(near(found, expected)) << describe(c) << ": expected " << expected << ", found " << found;
  }
}

TEST(TransferRuleClosedForms, OneFOneBSnoKeepsTableTwoWhileSrAtMostFPlusB) {
  testutil::PlatformCache cache;
  for (const SimCase& c : fifo_grid("1f1b-sno")) {
    if (c.hop_s > c.forward_s + c.backward_s) continue;
    const double expected = sno_table2(c);
    const double found = testutil::run_case(c, cache).minibatch_time_s;
    EXPECT_TRUE(near(found, expected)) << describe(c) << ": expected " << expected << ", found " << found;
  }
}

TEST(TransferRuleClosedForms, OneFOneBSoKeepsTableTwoIffOneMicroBatchOrSrAtMostMinFB) {
  testutil::PlatformCache cache;
  for (const SimCase& c : fifo_grid("1f1b-so")) {
    const double expected = (c.micro_batches + c.stages - 1) * (c.forward_s + c.backward_s) + (c.stages - 1) * 2 * c.hop_s;
    const double found = testutil::run_case(c, cache).minibatch_time_s;
    if (c.micro_batches == 1 || c.hop_s <= std::min(c.forward_s, c.backward_s))
      EXPECT_TRUE(near(found, expected)) << describe(c) << ": expected " << expected << ", found " << found;
    else
      EXPECT_GT(found, expected + 1e-9) << describe(c);
  }
}

TEST(TransferRuleClosedForms, OneFOneBAsHidesCommunicationWhileSrAtMostMinFB) {
  // Cut-through: a message holds its channel until its producer has ended,
  // so with SR <= min(F, B) no message waits and Table I's form holds.
  testutil::PlatformCache cache;
  for (const SimCase& c : fifo_grid("1f1b-as")) {
    if (c.hop_s > std::min(c.forward_s, c.backward_s)) continue;
    const double expected = (c.micro_batches + c.stages - 1) * (c.forward_s + c.backward_s);
    const double found = testutil::run_case(c, cache).minibatch_time_s;
    EXPECT_TRUE(near(found, expected)) << describe(c) << ": expected " << expected << ", found " << found;
  }
}

TEST(TransferRuleClosedForms, FifoDiffersFromShareWhereMessagesOverlap) {
  // Guards the grid above against a rule that is never applied: on latency
  // links, sharing lets messages overlap, FIFO does not.
  testutil::PlatformCache cache;
  SimCase c{"gpipe", 2, 3, 1, 1, 2.5};
  const double shared = testutil::run_case(c, cache).minibatch_time_s;
  EXPECT_TRUE(near(shared, (3 + 2 - 1) * 2.0 + 2 * 2.5)) << shared;  // GPipe's form: messages overlap
  c.transfer_rule = TransferRule::Fifo;
  EXPECT_TRUE(near(testutil::run_case(c, cache).minibatch_time_s, gpipe_fifo(c)));
  EXPECT_GT(gpipe_fifo(c), shared + 1);
}

TEST(TransferRule, FifoIsDeterministic) {
  testutil::PlatformCache cache;
  for (SimCase c : {SimCase{"1f1b-so", 4, 9, 2, 3, 1.5}, SimCase{"fbp-as", 3, 8, 3, 1, 0.5}, SimCase{"gpipe", 5, 7, 1, 2, 2.25}}) {
    c.transfer_rule = TransferRule::Fifo;
    const std::string first = timeline_to_csv(testutil::run_case(c, cache).timeline);
    EXPECT_EQ(first, timeline_to_csv(testutil::run_case(c, cache).timeline)) << describe(c);
  }
}

}  // namespace
}  // namespace pipegrid
