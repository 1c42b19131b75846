// Ring collectives (docs/semantics.md, "Collectives"): the flow form against
// the round-by-round form and closed forms, reduce-scatter and all-gather
// times, and the number of SimGrid communications a large ring starts.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/program.hpp"
#include "schedules/schedules.hpp"
#include "sim/engine.hpp"
#include "sim_test_util.hpp"

namespace pipegrid {
namespace {

using testutil::TempFile;

constexpr double kLatency = 0.25;        // per star link: a route crosses two
constexpr double kBandwidth = 1000.0;    // bytes per second
constexpr double kComputeS = 1.0;        // forward and backward of the one stage

// One mini-batch of dp over r replicas of one stage (one micro-batch each,
// so every replica joins its all-reduce at 2 s), gradients of `bytes`, on a
// star of r hosts where every ring hop crosses its own two links.
sim::SimulationResult run_ring(int r, double bytes, sim::CollectiveModel model, bool distributed = false,
                               double gradient_bytes_per_weight_byte = 1) {
  static std::map<int, std::unique_ptr<TempFile>> platforms;
  auto& platform = platforms[r];
  if (!platform) platform = std::make_unique<TempFile>(fmt::format("pipegrid-ring{}", r), ".xml", testutil::star_platform_xml(r, kLatency, kBandwidth));
  return testutil::simulate_dp_ring(platform->path(), r, bytes, kComputeS, model, distributed, gradient_bytes_per_weight_byte);
}

using testutil::action_spans;

// k steps of bytes / r each over a route of two links: k (2 L + bytes / (r B)).
double ring_seconds(int r, int steps, double bytes) { return steps * (2 * kLatency + bytes / r / kBandwidth); }

TEST(Collectives, FlowsEqualRoundsAndTheClosedFormOnUncontendedHomogeneousRings) {
  for (const int r : {2, 3, 8}) {
    const double bytes = 840.0 * r;  // chunks of whole bytes
    const auto flows = action_spans(run_ring(r, bytes, sim::CollectiveModel::Flows), "ALLREDUCE");
    const auto rounds = action_spans(run_ring(r, bytes, sim::CollectiveModel::Rounds), "ALLREDUCE");
    ASSERT_EQ(flows.size(), static_cast<std::size_t>(r));
    ASSERT_EQ(rounds.size(), static_cast<std::size_t>(r));
    const double expected_end = 2 * kComputeS + ring_seconds(r, 2 * (r - 1), bytes);
    for (const auto& [host, span] : flows) {
      EXPECT_NEAR(span.first, 2 * kComputeS, 1e-9) << "r=" << r << " " << host;
      EXPECT_NEAR(span.second, expected_end, 1e-9) << "r=" << r << " " << host;
      EXPECT_NEAR(span.second, rounds.at(host).second, 1e-9) << "r=" << r << " " << host;
      EXPECT_NEAR(span.first, rounds.at(host).first, 1e-9) << "r=" << r << " " << host;
    }
  }
}

TEST(Collectives, ReduceScatterAndAllGatherEachTakeRMinusOneSteps) {
  const int r = 4;
  const double bytes = 4000;
  for (const auto model : {sim::CollectiveModel::Flows, sim::CollectiveModel::Rounds}) {
    const sim::SimulationResult result = run_ring(r, bytes, model, true);
    const auto scatter = action_spans(result, "REDUCE_SCATTER"), gather = action_spans(result, "ALLGATHER");
    EXPECT_TRUE(action_spans(result, "ALLREDUCE").empty());
    ASSERT_EQ(scatter.size(), 4u);
    ASSERT_EQ(gather.size(), 4u);
    // 3 steps of 1000 bytes over 2 x 0.25 s of latency: 3 x 1.5 s each; no optimizer step between them.
    for (const auto& [host, span] : scatter) {
      EXPECT_NEAR(span.first, 2, 1e-9) << host;
      EXPECT_NEAR(span.second, 2 + 4.5, 1e-9) << host;
      EXPECT_NEAR(gather.at(host).first, 6.5, 1e-9) << host;
      EXPECT_NEAR(gather.at(host).second, 6.5 + 4.5, 1e-9) << host;
    }
    for (const TimelineRecord& record : result.timeline.records)
      if (record.action == "REDUCE_SCATTER" || record.action == "ALLGATHER") {
        EXPECT_DOUBLE_EQ(record.bytes, 3000) << record.action;
      }
  }
}

// Gradients reduced in fp32 for 16-bit weights (Megatron's
// grad_reduce_in_fp32): the reduce-scatter carries twice the weight bytes,
// the all-gather of the parameters the weight bytes; an all-reduce twice.
TEST(Collectives, Fp32GradientsDoubleTheReductionsButNotTheParameterGather) {
  const int r = 4;
  const double bytes = 4000;
  const sim::SimulationResult zero1 = run_ring(r, bytes, sim::CollectiveModel::Flows, true, 2.0);
  const auto scatter = action_spans(zero1, "REDUCE_SCATTER"), gather = action_spans(zero1, "ALLGATHER");
  ASSERT_EQ(scatter.size(), 4u);
  for (const auto& [host, span] : scatter) {
    // 3 steps of 2000 bytes: 3 x (0.5 + 2) s; then 3 steps of 1000 bytes: 3 x 1.5 s.
    EXPECT_NEAR(span.second, 2 + 7.5, 1e-9) << host;
    EXPECT_NEAR(gather.at(host).second, 2 + 7.5 + 4.5, 1e-9) << host;
  }
  for (const TimelineRecord& record : zero1.timeline.records) {
    if (record.action == "REDUCE_SCATTER") {
      EXPECT_DOUBLE_EQ(record.bytes, 6000);
    }
    if (record.action == "ALLGATHER") {
      EXPECT_DOUBLE_EQ(record.bytes, 3000);
    }
  }
  const auto all_reduce = action_spans(run_ring(r, bytes, sim::CollectiveModel::Flows, false, 2.0), "ALLREDUCE");
  for (const auto& [host, span] : all_reduce) EXPECT_NEAR(span.second, 2 + ring_seconds(r, 2 * (r - 1), 2 * bytes), 1e-9) << host;
}

TEST(Collectives, FlowsStartOneFlowPerParticipantAndMeasureEachRoutesLatencyOnce) {
  // r flows and r latency probes, against r x 2(r-1) rounds.
  EXPECT_EQ(run_ring(8, 8000, sim::CollectiveModel::Rounds).collective_communications, 8u * 14u);
  EXPECT_EQ(run_ring(8, 8000, sim::CollectiveModel::Flows).collective_communications, 16u);
  const sim::SimulationResult large = run_ring(512, 512000, sim::CollectiveModel::Flows);
  EXPECT_EQ(large.collective_communications, 1024u);
  const auto ends = action_spans(large, "ALLREDUCE");
  ASSERT_EQ(ends.size(), 512u);
  for (const auto& [host, span] : ends) ASSERT_NEAR(span.second, 2 + ring_seconds(512, 1022, 512000), 1e-6) << host;
}

// 1f1b-sno over 2 stages of F = B = 1 s on `hosts`, the first and the last
// stage's word tables tied (1000 bytes), the analytic network.
sim::SimulationRequest tied_request(const std::string& platform, const ScheduleOptions& options,
                                    std::vector<std::vector<std::string>> hosts, sim::CollectiveModel model) {
  sim::SimulationRequest request;
  request.platform_file = platform;
  request.program = generate_schedule("1f1b-sno", options);
  StageCost stage;
  stage.forward_s = stage.backward_s = kComputeS;
  request.stages = {stage, stage};
  request.hosts = std::move(hosts);
  request.network = sim::NetworkModel::Analytic;
  request.collective_model = model;
  request.tied_embedding = sim::SimulationRequest::TiedEmbedding{0, 1, 1000};
  return request;
}

TEST(Collectives, TiedEmbeddingsAreAllReducedBetweenFirstAndLastStageAfterTheirDataParallelSync) {
  // 1f1b-sno, 2 stages, M = 1, d = 2 on a star of 4 (each hop 2 x 0.25 s):
  // stage 0 on h0 (replica 0) and h1, stage 1 on h2 and h3; F = B = 1 s,
  // 0-byte activations and stage gradients. h0: F [0,1], B [4,5]; h2: F
  // [1.5,2.5], B [2.5,3.5]. Stage 1's all-reduce (0 bytes, 2 steps) [3.5,4.5],
  // stage 0's [5,6]; then the tied word table's (1000 bytes, 2 participants:
  // 2 x 0.5 s + 1000 B / 1000 B/s) from 6, when h0 joins, to 8.
  TempFile platform("pipegrid-tied", ".xml", testutil::star_platform_xml(4, kLatency, kBandwidth));
  ScheduleOptions options;
  options.num_stages = 2;
  options.micro_batches = 1;
  options.data_parallel = 2;
  for (const auto model : {sim::CollectiveModel::Flows, sim::CollectiveModel::Rounds}) {
    const sim::SimulationResult result =
        sim::simulate(tied_request(platform.path(), options, {{"h0", "h1"}, {"h2", "h3"}}, model));
    std::map<std::string, std::pair<double, double>> tied, stage_sync;
    for (const TimelineRecord& record : result.timeline.records) {
      if (record.action != "ALLREDUCE") continue;
      (record.micro_batch == -2 ? tied : stage_sync)[record.host] = {record.start_s, record.end_s};
      if (record.micro_batch == -2) {
        EXPECT_DOUBLE_EQ(record.bytes, 1000);
        EXPECT_EQ(record.peer, std::string(record.host == "h0" ? "h2" : record.host == "h2" ? "h0" : record.host == "h1" ? "h3" : "h1"));
      }
    }
    ASSERT_EQ(tied.size(), 4u) << sim::to_string(model);
    EXPECT_NEAR(stage_sync.at("h2").second, 4.5, 1e-9) << sim::to_string(model);
    EXPECT_NEAR(stage_sync.at("h0").second, 6, 1e-9) << sim::to_string(model);
    for (const auto& [host, span] : tied) {
      EXPECT_NEAR(span.first, host == "h0" || host == "h1" ? 6 : 4.5, 1e-9) << sim::to_string(model) << " " << host;
      EXPECT_NEAR(span.second, 8, 1e-9) << sim::to_string(model) << " " << host;
    }
  }
}

TEST(Collectives, TiedEmbeddingsAreAllReducedAtD1AfterEachMiniBatchAndTheNextForwardWaits) {
  // 1f1b-sno, 2 stages, M = 1, d = 1, 2 mini-batches on a star of 2 (each hop
  // 2 x 0.25 s): stage 0 on h0, stage 1 on h1; F = B = 1 s, 0-byte
  // activations. Mini-batch 0: h0 F [0,1], h1 F [1.5,2.5], B [2.5,3.5], h0 B
  // [4,5]. The tied all-reduce (1000 bytes over 2: a flow of 2 x 500 bytes,
  // 0.5 s + 1 s, then one more latency 0.5 s) from 5, when h0 joins, to 7;
  // h0 then steps (optimizer_step_overhead 0.25 s: [7,7.25]) and its forward
  // of mini-batch 1 starts at 7.25; h1 steps [7,7.25] and its forward starts
  // when the activation arrives, 8.75.
  const std::string xml = testutil::star_platform_xml(2, kLatency, kBandwidth);
  std::string stepped = xml;
  for (std::size_t at = 0; (at = stepped.find("speed=\"1f\"/>", at)) != std::string::npos; ++at)
    stepped.replace(at, 12, "speed=\"1f\"><prop id=\"optimizer_step_overhead\" value=\"0.25s\"/></host>");
  ASSERT_NE(stepped, xml);
  TempFile platform("pipegrid-tied-d1", ".xml", stepped);
  ScheduleOptions options;
  options.num_stages = 2;
  options.micro_batches = 1;
  options.mini_batches = 2;
  for (const auto model : {sim::CollectiveModel::Flows, sim::CollectiveModel::Rounds}) {
    const sim::SimulationResult result = sim::simulate(tied_request(platform.path(), options, {{"h0"}, {"h1"}}, model));
    std::map<std::pair<std::string, int>, std::pair<double, double>> tied, forward, step;
    for (const TimelineRecord& record : result.timeline.records) {
      const auto key = std::make_pair(record.host, record.mini_batch);
      if (record.action == "ALLREDUCE") {
        EXPECT_EQ(record.micro_batch, -2);
        EXPECT_DOUBLE_EQ(record.bytes, 1000);
        EXPECT_EQ(record.stage, record.host == "h0" ? 0 : 1);
        EXPECT_EQ(record.peer, std::string(record.host == "h0" ? "h1" : "h0"));
        tied[key] = {record.start_s, record.end_s};
      }
      if (record.action == "F") forward[key] = {record.start_s, record.end_s};
      if (record.action == "U") step[key] = {record.start_s, record.end_s};
    }
    const std::string name = sim::to_string(model);
    ASSERT_EQ(tied.size(), 4u) << name;
    EXPECT_NEAR(tied.at({"h1", 0}).first, 3.5, 1e-9) << name;
    EXPECT_NEAR(tied.at({"h0", 0}).first, 5, 1e-9) << name;
    EXPECT_NEAR(tied.at({"h0", 0}).second, 7, 1e-9) << name;
    EXPECT_NEAR(tied.at({"h1", 0}).second, 7, 1e-9) << name;
    EXPECT_NEAR(step.at({"h0", 0}).first, 7, 1e-9) << name;
    EXPECT_NEAR(step.at({"h1", 0}).second, 7.25, 1e-9) << name;
    EXPECT_NEAR(forward.at({"h0", 1}).first, 7.25, 1e-9) << name;
    EXPECT_NEAR(forward.at({"h1", 1}).first, 8.75, 1e-9) << name;
    // Mini-batch 1 repeats mini-batch 0 shifted by 7.25 s.
    EXPECT_NEAR(tied.at({"h0", 1}).second, 14.25, 1e-9) << name;
  }
}

// Two servers, A (a0, a1) and B (b0, b1): each GPU its own link to its
// server's switch (1e12 B/s, no latency), each server one NIC (1000 B/s,
// 0.25 s each way, full duplex) to the other; a route between servers
// crosses the sender's GPU link, its NIC up, the other NIC down and the
// receiver's GPU link: 0.5 s + bytes / 1000 B/s alone.
std::string two_servers_xml() {
  std::string xml =
      "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      "<platform version=\"4.1\">\n  <zone id=\"two-servers\" routing=\"Full\">\n";
  const std::vector<std::string> hosts = {"a0", "a1", "b0", "b1"};
  for (const std::string& h : hosts) xml += fmt::format("    <host id=\"{}\" speed=\"1f\"/>\n", h);
  for (const std::string& h : hosts)
    xml += fmt::format("    <link id=\"{}-link\" bandwidth=\"1e12Bps\" latency=\"0s\" sharing_policy=\"SPLITDUPLEX\"/>\n", h);
  for (const char* nic : {"nicA", "nicB"})
    xml += fmt::format("    <link id=\"{}\" bandwidth=\"1000Bps\" latency=\"0.25s\" sharing_policy=\"SPLITDUPLEX\"/>\n", nic);
  for (const std::string& from : hosts)
    for (const std::string& to : hosts) {
      if (from == to) continue;
      std::string links = fmt::format("<link_ctn id=\"{}-link\" direction=\"UP\"/>", from);
      if (from[0] != to[0])
        links += fmt::format("<link_ctn id=\"nic{}\" direction=\"UP\"/><link_ctn id=\"nic{}\" direction=\"DOWN\"/>",
                             from[0] == 'a' ? 'A' : 'B', to[0] == 'a' ? 'A' : 'B');
      links += fmt::format("<link_ctn id=\"{}-link\" direction=\"DOWN\"/>", to);
      xml += fmt::format("    <route src=\"{}\" dst=\"{}\" symmetrical=\"NO\">{}</route>\n", from, to, links);
    }
  return xml + "  </zone>\n</platform>\n";
}

TEST(Collectives, TensorParallelFlowsShareTheNicWithDataParallelTraffic) {
  // dp over a0 (replica 0, leading the tensor-parallel group {a0, b0}, which
  // spans the servers) and b1 (replica 1, alone); one micro-batch each, F =
  // 1 s. The stage's 2 layers: L0 (no backward, no weights), L1 (backward
  // 1 s, 1000 weight bytes, and in its backward's input part one all-reduce
  // of 500 bytes over the group); wait-free per-layer all-reduces. At 2 both
  // have run L1's backward: the data-parallel all-reduce of L1 (r 2: a flow
  // of 2 x 500 bytes each way, a0 -> b1 and b1 -> a0) and a0's group ring (t
  // 2: a flow of 2 x 250 bytes each way, a0 -> b0 and b0 -> a0) start
  // together; each NIC direction carries one flow of each. After the 0.5 s
  // latency they share 1000 B/s: the group's 500 bytes are through at 2.5 +
  // 500 / 500 = 3.5, then one more latency: a0's B ends at 4 (uncontended,
  // and as compute charges it: 2 + 2 x (0.5 + 500 / (2 x 1000)) = 3.5). The
  // data-parallel flow has 500 bytes left at 3.5, alone at 1000 B/s: through
  // at 4, its last latency: 4.5 (alone: 4).
  TempFile platform("pipegrid-tp-two-servers", ".xml", two_servers_xml());
  for (const bool with_data_parallel_bytes : {true, false}) {
    ScheduleOptions options;
    options.num_stages = 1;
    options.micro_batches = 2;
    options.replicas = {2};
    sim::SimulationRequest request;
    request.platform_file = platform.path();
    request.program = generate_schedule("dp", options);
    ASSERT_EQ(request.program.all_reduces.size(), 1u);
    request.program.all_reduces[0].per_layer = true;
    const double weight_bytes = with_data_parallel_bytes ? 1000 : 0;
    StageCost stage;
    stage.forward_s = kComputeS;
    stage.backward_s = kComputeS;
    stage.weight_bytes = weight_bytes;
    request.stages = {stage};
    sim::LayerCost first, second;
    first.forward_s = second.forward_s = kComputeS / 2;
    second.backward_s = kComputeS;
    second.weight_bytes = weight_bytes;
    second.tensor_parallel.backward_input = {{RingCollectiveKind::AllReduce, 1, 500}};
    request.stage_layers = {{first, second}};
    request.hosts = {{"a0", "b1"}};
    request.tensor_parallel_members = {{"a0", {"a0", "b0"}}};
    request.network = sim::NetworkModel::Analytic;
    const sim::SimulationResult result = sim::simulate(request);
    const std::string what = with_data_parallel_bytes ? "with data-parallel bytes" : "alone";
    std::map<std::string, std::pair<double, double>> backward, all_reduce;
    for (const TimelineRecord& record : result.timeline.records) {
      if (record.action == "B") backward[record.host] = {record.start_s, record.end_s};
      if (record.action == "ALLREDUCE") all_reduce[record.host] = {record.start_s, record.end_s};
    }
    ASSERT_EQ(backward.size(), 2u) << what;
    EXPECT_NEAR(backward.at("b1").second, 2, 1e-9) << what;
    EXPECT_NEAR(backward.at("a0").first, 1, 1e-9) << what;
    if (with_data_parallel_bytes) {
      EXPECT_NEAR(backward.at("a0").second, 4, 1e-9) << what;
      for (const auto& [host, span] : all_reduce) {
        EXPECT_NEAR(span.first, 2, 1e-9) << what << " " << host;
        EXPECT_NEAR(span.second, 4.5, 1e-9) << what << " " << host;
      }
      // The group's ring: 2 flows and 2 latency probes; the data-parallel one alike.
      EXPECT_EQ(result.collective_communications, 8u);
    } else {
      EXPECT_NEAR(backward.at("a0").second, 3.5, 1e-9) << what;
    }
  }
}

TEST(Collectives, CollectiveModelNamesParseAndOthersAreRefusedNamingTheFlag) {
  EXPECT_EQ(sim::parse_collective_model("flows"), sim::CollectiveModel::Flows);
  EXPECT_EQ(sim::parse_collective_model("rounds"), sim::CollectiveModel::Rounds);
  try {
    sim::parse_collective_model("tree");
    FAIL() << "tree accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--collective-model"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace pipegrid
