// NCCL's achieved bandwidth and start latency in the engine (docs/
// semantics.md, NCCL efficiency and latency): on a star whose links carry
// nccl_efficiency and nccl_latency, a data-parallel ring (flows and rounds)
// and a stage transfer (share and fifo) take their closed forms exactly;
// without the properties nothing changes; bad values are refused naming the
// file, the link and the property.

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/program.hpp"
#include "generators/cluster_platform.hpp"
#include "expect_input_error.hpp"
#include "schedules/schedules.hpp"
#include "sim/engine.hpp"
#include "sim_test_util.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;
using testutil::TempFile;

constexpr double kLinkLatency = 0.25;  // per star link: a route crosses two
constexpr double kBandwidth = 1000.0;  // bytes per second
constexpr double kComputeS = 1.0;
constexpr double kEfficiency = 0.5, kNcclLatency = 1e-3;

// The star of sim_test_util with `properties` (<prop .../> elements) on
// every link.
std::string star_with(int hosts, const std::string& properties) {
  std::string xml = testutil::star_platform_xml(hosts, kLinkLatency, kBandwidth);
  const std::string plain = "sharing_policy=\"SPLITDUPLEX\"/>";
  for (std::size_t at = xml.find(plain); at != std::string::npos; at = xml.find(plain, at))
    xml.replace(at, plain.size(), "sharing_policy=\"SPLITDUPLEX\">" + properties + "</link>");
  return xml;
}

std::string nccl_properties(double efficiency, double latency_s) {
  return fmt::format("<prop id=\"nccl_efficiency\" value=\"{}\"/><prop id=\"nccl_latency\" value=\"{}\"/>", efficiency,
                     latency_s);
}

// One mini-batch of dp over r replicas of one stage, gradients of `bytes`,
// on `platform_xml` (hosts h0 ...).
sim::SimulationResult run_ring(const std::string& platform_xml, int r, double bytes, sim::CollectiveModel model,
                               bool distributed = false) {
  const TempFile platform("pipegrid-nccl-ring", ".xml", platform_xml);
  return testutil::simulate_dp_ring(platform.path(), r, bytes, kComputeS, model, distributed);
}

using testutil::action_spans;

TEST(NcclEngine, ADataParallelRingTakesTheClosedFormUnderFlowsAndRounds) {
  for (const int r : {2, 4}) {
    const double bytes = 840.0 * r;
    const std::string xml = star_with(r, nccl_properties(kEfficiency, kNcclLatency));
    // nccl_latency + 2 (r - 1) (2 L + S / (r eta B)).
    const double all_reduce = kNcclLatency + 2 * (r - 1) * (2 * kLinkLatency + bytes / r / (kEfficiency * kBandwidth));
    const double half = kNcclLatency + (r - 1) * (2 * kLinkLatency + bytes / r / (kEfficiency * kBandwidth));
    for (const auto model : {sim::CollectiveModel::Flows, sim::CollectiveModel::Rounds}) {
      const sim::SimulationResult result = run_ring(xml, r, bytes, model);
      const auto ring = action_spans(result, "ALLREDUCE");
      ASSERT_EQ(ring.size(), static_cast<std::size_t>(r));
      for (const auto& [host, span] : ring) {
        EXPECT_NEAR(span.first, 2 * kComputeS, 1e-9) << r << " " << host;
        EXPECT_NEAR(span.second, 2 * kComputeS + all_reduce, 1e-9) << r << " " << sim::to_string(model) << " " << host;
      }
      // The records keep the payload bytes, not the bytes on the wire.
      for (const TimelineRecord& record : result.timeline.records)
        if (record.action == "ALLREDUCE") {
          EXPECT_DOUBLE_EQ(record.bytes, 2 * (r - 1) * bytes / r);
        }
      // The distributed optimizer: a reduce-scatter and an all-gather, each paying the latency.
      const sim::SimulationResult sharded = run_ring(xml, r, bytes, model, true);
      for (const auto& [host, span] : action_spans(sharded, "REDUCE_SCATTER"))
        EXPECT_NEAR(span.second - span.first, half, 1e-9) << r << " " << host;
      for (const auto& [host, span] : action_spans(sharded, "ALLGATHER"))
        EXPECT_NEAR(span.second - span.first, half, 1e-9) << r << " " << host;
    }
  }
}

TEST(NcclEngine, ARingTakesTheSmallestEfficiencyAndTheLargestLatencyOfItsLinks) {
  // h1's link is slower in NCCL's terms: every ring step runs at it (the
  // ring waits for its slowest step), and its latency is paid once.
  std::string xml = star_with(3, nccl_properties(0.8, 1e-4));
  const std::size_t l1 = xml.find("<link id=\"l1\"");
  ASSERT_NE(l1, std::string::npos);
  const std::size_t at = xml.find(nccl_properties(0.8, 1e-4), l1);
  xml.replace(at, nccl_properties(0.8, 1e-4).size(), nccl_properties(0.5, 2e-3));
  const double bytes = 3000;
  const double expected = 2e-3 + 4 * (2 * kLinkLatency + 1000 / (0.5 * kBandwidth));
  for (const auto model : {sim::CollectiveModel::Flows, sim::CollectiveModel::Rounds})
    for (const auto& [host, span] : action_spans(run_ring(xml, 3, bytes, model), "ALLREDUCE"))
      EXPECT_NEAR(span.second, 2 * kComputeS + expected, 1e-9) << sim::to_string(model) << " " << host;
}

TEST(NcclEngine, WithoutThePropertiesOrWithTheDefaultsNothingChanges) {
  const double bytes = 3360;
  const double plain = 2 * kComputeS + 2 * 3 * (2 * kLinkLatency + bytes / 4 / kBandwidth);
  for (const std::string& xml : {testutil::star_platform_xml(4, kLinkLatency, kBandwidth), star_with(4, nccl_properties(1, 0))})
    for (const auto model : {sim::CollectiveModel::Flows, sim::CollectiveModel::Rounds})
      for (const auto& [host, span] : action_spans(run_ring(xml, 4, bytes, model), "ALLREDUCE"))
        EXPECT_NEAR(span.second, plain, 1e-9) << host;
}

// Two stages on h0 and h1, one micro-batch: the activation of kBytes from h0
// to h1 and the gradient back.
std::map<std::string, std::pair<double, double>> transfers(const std::string& platform_xml, sim::TransferRule rule) {
  const TempFile platform("pipegrid-nccl-transfer", ".xml", platform_xml);
  sim::SimulationRequest request;
  request.platform_file = platform.path();
  request.program = parse_program_text(
      "# pipegrid program: 2 stages, 1 micro-batches, 1 mini-batches\n"
      "device 0 stage 0 replica 0 stream 0: 0F0 0B0\n"
      "device 1 stage 1 replica 0 stream 0: 1F0 1B0\n",
      "test program");
  validate_program(request.program);
  request.stages = testutil::balanced_stages(2, kComputeS, kComputeS);
  request.stages[1].input_bytes = 600;
  request.hosts = {{"h0"}, {"h1"}};
  request.network = sim::NetworkModel::Analytic;
  request.transfer_rule = rule;
  const sim::SimulationResult result = sim::simulate(request);
  std::map<std::string, std::pair<double, double>> out = action_spans(result, "SEND_F");
  for (const auto& [host, span] : action_spans(result, "F")) out["F@" + host] = span;
  return out;
}

TEST(NcclEngine, AStageTransferPaysItsRoutesLatencyOnceAndItsBytesAtEfficiency) {
  const std::string xml = star_with(2, nccl_properties(kEfficiency, kNcclLatency));
  // nccl_latency + latency + B / (eta bw).
  const double expected = kNcclLatency + 2 * kLinkLatency + 600 / (kEfficiency * kBandwidth);
  for (const auto rule : {sim::TransferRule::Share, sim::TransferRule::Fifo}) {
    const auto spans = transfers(xml, rule);
    ASSERT_TRUE(spans.count("h0")) << sim::to_string(rule);
    EXPECT_NEAR(spans.at("h0").first, kComputeS, 1e-9) << sim::to_string(rule);
    EXPECT_NEAR(spans.at("h0").second, kComputeS + expected, 1e-9) << sim::to_string(rule);
    // The next stage's forward starts once the activation has arrived.
    EXPECT_NEAR(spans.at("F@h1").first, kComputeS + expected, 1e-9) << sim::to_string(rule);
  }
  const auto plain = transfers(testutil::star_platform_xml(2, kLinkLatency, kBandwidth), sim::TransferRule::Share);
  EXPECT_NEAR(plain.at("h0").second, kComputeS + 2 * kLinkLatency + 600 / kBandwidth, 1e-9);
}

TEST(NcclEngine, BadPropertiesAreRefusedNamingTheFileTheLinkAndTheProperty) {
  for (const auto& [property, value, expected] :
       {std::tuple<std::string, std::string, std::string>{"nccl_efficiency", "1.5", "expected a number in (0, 1]"},
        {"nccl_efficiency", "0", "expected a number in (0, 1]"},
        {"nccl_efficiency", "high", "expected a number in (0, 1]"},
        {"nccl_latency", "-1e-3", "expected a non-negative duration"},
        {"nccl_latency", "soon", "expected a non-negative duration"}}) {
    const TempFile platform("pipegrid-nccl-bad", ".xml",
                            star_with(2, fmt::format("<prop id=\"{}\" value=\"{}\"/>", property, value)));
    const std::string message = input_error_of([&] { sim::read_platform(platform.path(), sim::PlatformRoutes::None); });
    EXPECT_CONTAINS(message, fmt::format("{}: link 'l0': property '{}': {}", platform.path(), property, expected));
    EXPECT_CONTAINS(message, fmt::format("found '{}'", value));
  }
}

// A data-parallel ring over two servers of 4 GPUs, a NIC per GPU: each
// step between the servers runs over 4 rails (NCCL's channels, one NIC
// each), so a NIC carries a quarter of the step's bytes; with NVLink 1000x
// faster than a NIC and negligible latencies the all-reduce takes
// 2 (r - 1) / r x S / 4 / NIC bandwidth (r = 8), not 4 times that.
TEST(NcclEngine, AStepBetweenServersRunsOverOneRailPerGpuPair) {
  const std::map<std::string, std::string> options = {
      {"servers", "2"},          {"gpus_per_server", "4"},       {"device", "A100"},
      {"memory", "80GB"},        {"intra", "1000GBps,1ns"},      {"inter", "1GBps,1ns"},
      {"nic", "per-gpu"},        {"intra_nccl_efficiency", "none"}, {"inter_nccl_efficiency", "none"},
      {"intra_nccl_latency", "none"}, {"inter_nccl_latency", "none"}};
  const TempFile platform("pipegrid-rails", ".xml", cluster_platform_xml(cluster_spec_from_options(options, "t")));
  std::vector<std::string> hosts;
  for (int s = 0; s < 2; ++s)
    for (int g = 0; g < 4; ++g) hosts.push_back(fmt::format("s{}-gpu{}", s, g));
  const double bytes = 8e9, r = 8;
  const double expected = 2 * (r - 1) / r * bytes / 4 / 1e9;
  for (const sim::CollectiveModel model : {sim::CollectiveModel::Flows}) {
    const sim::SimulationResult result =
        testutil::simulate_dp_ring(platform.path(), 8, bytes, kComputeS, model, false, 1, hosts);
    const auto ring = action_spans(result, "ALLREDUCE");
    ASSERT_EQ(ring.size(), 8u);
    for (const auto& [host, span] : ring) EXPECT_NEAR(span.second - span.first, expected, 1e-3 * expected) << host;
  }
}

}  // namespace
}  // namespace pipegrid
