// Expert parallelism's all-to-alls in the engine (docs/semantics.md,
// "Expert parallelism"; SimulationRequest::expert_parallel_ranks) on a
// hand-made platform of two servers under the analytic network: an
// action's end is its compute plus the closed form of its all-to-alls,
// every rank receives one inter-server flow (a permutation, no incast), an
// overlapped F&B pair takes max(compute, all-to-alls), and bad groups are
// refused.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/program.hpp"
#include "sim/engine.hpp"
#include "sim_test_util.hpp"

namespace pipegrid {
namespace {

using testutil::TempFile;

// Two servers (zones s0, s1) of `gpus` GPUs each. Each GPU has its own
// NVLink link (kNvBandwidth, kNvLatency) to its server's switch, and its
// own NIC link (kNicBandwidth, kNicLatency) to its server's router; the
// routers meet through one free link. Inside a server a route crosses the
// sender's and the receiver's NVLink links (latency 2 kNvLatency), between
// servers their NIC links (2 kNicLatency); every link full duplex, no NCCL
// properties (efficiency 1, no start latency).
constexpr double kNvBandwidth = 1000.0, kNvLatency = 0.01;
constexpr double kNicBandwidth = 100.0, kNicLatency = 0.05;
constexpr double kIntraRoute = 2 * kNvLatency, kInterRoute = 2 * kNicLatency;
constexpr double kForward = 1.0, kBackward = 2.0;

std::string host_name(int server, int gpu) { return fmt::format("s{}-g{}", server, gpu); }

std::string two_servers_xml(int gpus) {
  std::string xml =
      "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      "<platform version=\"4.1\">\n  <zone id=\"cluster\" routing=\"Full\">\n";
  for (int s = 0; s < 2; ++s) {
    xml += fmt::format("    <zone id=\"s{}\" routing=\"Full\">\n      <router id=\"s{}-router\"/>\n", s, s);
    for (int g = 0; g < gpus; ++g) {
      const std::string h = host_name(s, g);
      xml += fmt::format("      <host id=\"{}\" speed=\"1f\"/>\n", h);
      xml += fmt::format("      <link id=\"{}-nv\" bandwidth=\"{}Bps\" latency=\"{}s\" sharing_policy=\"SPLITDUPLEX\"/>\n", h,
                         kNvBandwidth, kNvLatency);
      xml += fmt::format("      <link id=\"{}-nic\" bandwidth=\"{}Bps\" latency=\"{}s\" sharing_policy=\"SPLITDUPLEX\"/>\n", h,
                         kNicBandwidth, kNicLatency);
    }
    for (int a = 0; a < gpus; ++a) {
      const std::string from = host_name(s, a);
      for (int b = 0; b < gpus; ++b) {
        if (a == b) continue;
        const std::string to = host_name(s, b);
        xml += fmt::format(
            "      <route src=\"{}\" dst=\"{}\" symmetrical=\"NO\"><link_ctn id=\"{}-nv\" direction=\"UP\"/>"
            "<link_ctn id=\"{}-nv\" direction=\"DOWN\"/></route>\n",
            from, to, from, to);
      }
      xml += fmt::format(
          "      <route src=\"{0}\" dst=\"s{1}-router\" symmetrical=\"NO\"><link_ctn id=\"{0}-nic\" direction=\"UP\"/></route>\n"
          "      <route src=\"s{1}-router\" dst=\"{0}\" symmetrical=\"NO\"><link_ctn id=\"{0}-nic\" direction=\"DOWN\"/></route>\n",
          from, s);
    }
    xml += "    </zone>\n";
  }
  xml += "    <link id=\"fabric\" bandwidth=\"1e15Bps\" latency=\"0s\" sharing_policy=\"FATPIPE\"/>\n";
  xml +=
      "    <zoneRoute src=\"s0\" dst=\"s1\" gw_src=\"s0-router\" gw_dst=\"s1-router\" symmetrical=\"NO\"><link_ctn id=\"fabric\"/></zoneRoute>\n"
      "    <zoneRoute src=\"s1\" dst=\"s0\" gw_src=\"s1-router\" gw_dst=\"s0-router\" symmetrical=\"NO\"><link_ctn id=\"fabric\"/></zoneRoute>\n";
  return xml + "  </zone>\n</platform>\n";
}

// One layer of `dispatch_bytes` all-to-all bytes; F 1 s, B 2 s.
std::vector<StageCost> one_stage() {
  StageCost stage;
  stage.forward_s = kForward;
  stage.backward_s = kBackward;
  return {stage};
}
sim::LayerCost moe_layer(double dispatch_bytes) {
  sim::LayerCost layer;
  layer.forward_s = kForward;
  layer.backward_s = kBackward;
  layer.moe_dispatch_bytes = dispatch_bytes;
  return layer;
}

using Records = std::map<std::pair<std::string, std::string>, TimelineRecord>;  // (host, action micro-batch)

// Replica q of the one stage on leaders[q], running `q`F`q` then its B;
// every member of `group` an expert-parallel rank with that group; only
// `leaders` run actions.
sim::SimulationResult run_expert_group(const std::string& platform, const std::vector<std::string>& group,
                                       const std::vector<std::string>& leaders, double dispatch_bytes) {
  std::string text = fmt::format("# pipegrid program: 1 stages, {} micro-batches, 1 mini-batches\n", leaders.size());
  for (std::size_t q = 0; q < leaders.size(); ++q)
    text += fmt::format("device {0} stage 0 replica {0} stream 0: 0F{0} 0B{0}\n", q);
  sim::SimulationRequest request;
  request.platform_file = platform;
  request.program = parse_program_text(text, "test program");
  validate_program(request.program);
  request.stages = one_stage();
  request.stage_layers = {{moe_layer(dispatch_bytes)}};
  request.hosts = {leaders};
  for (const std::string& leader : leaders) request.expert_parallel_ranks[leader] = {{leader, group}};
  request.network = sim::NetworkModel::Analytic;
  return sim::simulate(request);
}

Records records_of(const sim::SimulationResult& result) {
  Records records;
  for (const TimelineRecord& r : result.timeline.records)
    records[{r.host, r.action + std::to_string(r.micro_batch)}] = r;
  return records;
}

// The closed form of one pass's all-to-alls (a dispatch and a combine of
// B bytes each: 2 B on the flows, 2 all-to-alls) for a rank with `same`
// other group ranks in its server, in a group of ep: the intra flow of 2 B
// same / ep over NVLink and the inter flow of 2 B (ep - 1 - same) / ep over
// the NICs run at once, each paying its route's latency, then one more
// route latency (the larger of the two routes) for the second all-to-all.
double all_to_alls_s(double bytes, int ep, int same) {
  const double intra = 2 * bytes * same / ep, inter = 2 * bytes * (ep - 1 - same) / ep;
  double flows = 0, latency = 0;
  if (intra > 0) {
    flows = std::max(flows, kIntraRoute + intra / kNvBandwidth);
    latency = std::max(latency, kIntraRoute);
  }
  if (inter > 0) {
    flows = std::max(flows, kInterRoute + inter / kNicBandwidth);
    latency = std::max(latency, kInterRoute);
  }
  return flows + (2 - 1) * latency;
}

void expect_relative(double found, double expected, const std::string& what) {
  EXPECT_NEAR(found, expected, 1e-9 * std::max(1.0, std::abs(expected))) << what;
}

TEST(ExpertParallelEngine, AcrossTwoServersEachPassTakesComputePlusTheClosedForm) {
  // ep 4: s0-g0, s0-g1, s1-g0, s1-g1; each rank has one group rank in its
  // server (1 / 4 of the bytes over NVLink) and two in the other (2 / 4
  // over its NIC); 1 / 4 stays. Every rank runs.
  const TempFile platform("pipegrid-ep-two-servers", ".xml", two_servers_xml(2));
  const std::vector<std::string> group = {"s0-g0", "s0-g1", "s1-g0", "s1-g1"};
  const double bytes = 4000;
  const sim::SimulationResult result = run_expert_group(platform.path(), group, group, bytes);
  const Records records = records_of(result);
  const double a2a = all_to_alls_s(bytes, 4, 1);
  ASSERT_GT(a2a, 0);
  for (std::size_t q = 0; q < group.size(); ++q) {
    const std::string mb = std::to_string(q);
    expect_relative(records.at({group[q], "F" + mb}).end_s, kForward + a2a, group[q] + " F");
    expect_relative(records.at({group[q], "B" + mb}).end_s, kForward + a2a + kBackward + a2a, group[q] + " B");
  }
  expect_relative(result.all_to_all_s, 4 * 2 * a2a, "all_to_all_s");
  expect_relative(result.all_to_all_exposed_s, result.all_to_all_s, "exposed outside pairs");
  EXPECT_EQ(result.overlapped_pair_serial_s, 0);
}

TEST(ExpertParallelEngine, InsideOneServerOnlyTheNvlinkFlowRuns) {
  const TempFile platform("pipegrid-ep-one-server", ".xml", two_servers_xml(4));
  const std::vector<std::string> group = {"s0-g0", "s0-g1", "s0-g2", "s0-g3"};
  const double bytes = 4000;
  const Records records = records_of(run_expert_group(platform.path(), group, group, bytes));
  const double a2a = all_to_alls_s(bytes, 4, 3);
  expect_relative(a2a, 2 * kIntraRoute + 2 * bytes * 3 / 4 / kNvBandwidth, "closed form without a NIC");
  for (std::size_t q = 0; q < group.size(); ++q)
    expect_relative(records.at({group[q], "F" + std::to_string(q)}).end_s, kForward + a2a, group[q]);
}

TEST(ExpertParallelEngine, EveryRankReceivesOneInterServerFlowSoAllSendingTakesNoLongerThanOne) {
  // ep 16 over two servers of 8: were the inter-server flows all bound for
  // one rank, its NIC would carry 8 of them when all send.
  const TempFile platform("pipegrid-ep-permutation", ".xml", two_servers_xml(8));
  std::vector<std::string> group;
  for (int s = 0; s < 2; ++s)
    for (int g = 0; g < 8; ++g) group.push_back(host_name(s, g));
  const double bytes = 16000;
  const Records alone = records_of(run_expert_group(platform.path(), group, {group.front()}, bytes));
  const Records all = records_of(run_expert_group(platform.path(), group, group, bytes));
  const double a2a = all_to_alls_s(bytes, 16, 7);
  expect_relative(alone.at({group.front(), "F0"}).end_s, kForward + a2a, "one rank sending");
  for (std::size_t q = 0; q < group.size(); ++q)
    expect_relative(all.at({group[q], "F" + std::to_string(q)}).end_s, kForward + a2a, "all sending: " + group[q]);
}

TEST(ExpertParallelEngine, AnOverlappedPairTakesTheLongerOfItsComputeAndItsAllToAlls) {
  // 0F0, then 0F1 and 0B0 as one overlapped pair, then 0B1 on s0-g0 in a
  // group of 4 over two servers. The pair computes F + B = 3 s while both
  // actions' all-to-alls (4 of them, 4 B on each flow) run beside it.
  const TempFile platform("pipegrid-ep-pair", ".xml", two_servers_xml(2));
  const std::vector<std::string> group = {"s0-g0", "s0-g1", "s1-g0", "s1-g1"};
  for (const double bytes : {400.0, 40000.0}) {  // all-to-alls shorter than the compute, then longer
    const std::string what = fmt::format("bytes {}", bytes);
    sim::SimulationRequest request;
    request.platform_file = platform.path();
    request.program = parse_program_text(
        "# pipegrid program: 1 stages, 2 micro-batches, 1 mini-batches\n"
        "device 0 stage 0 replica 0 stream 0: 0F0 (0F1;0B0) 0B1\n",
        "test program");
    validate_program(request.program);
    request.stages = one_stage();
    request.stage_layers = {{moe_layer(bytes)}};
    request.hosts = {{"s0-g0"}};
    request.expert_parallel_ranks["s0-g0"] = {{"s0-g0", group}};
    request.network = sim::NetworkModel::Analytic;
    const sim::SimulationResult result = sim::simulate(request);
    const Records records = records_of(result);
    const double single = all_to_alls_s(bytes, 4, 1);
    // The pair: 4 all-to-alls on flows of 2 x the bytes: 3 route latencies after the flows.
    const double intra = 4 * bytes * 1 / 4, inter = 4 * bytes * 2 / 4;
    const double pair_a2a = std::max(kIntraRoute + intra / kNvBandwidth, kInterRoute + inter / kNicBandwidth) +
                            3 * std::max(kIntraRoute, kInterRoute);
    const double compute = kForward + kBackward;
    const double pair_start = kForward + single;
    expect_relative(records.at({"s0-g0", "F0"}).end_s, pair_start, what + " F0");
    expect_relative(records.at({"s0-g0", "B0"}).end_s, pair_start + std::max(compute, pair_a2a), what + " pair end");
    expect_relative(result.overlapped_pair_span_s, std::max(compute, pair_a2a), what + " pair span");
    expect_relative(result.overlapped_pair_serial_s, compute + pair_a2a, what + " pair serial");
    expect_relative(result.all_to_all_s, 2 * single + pair_a2a, what + " all_to_all_s");
    expect_relative(result.all_to_all_exposed_s, 2 * single + std::max(0.0, pair_a2a - compute), what + " exposed");
  }
}

TEST(ExpertParallelEngine, GroupsNotHoldingTheirRankAndUnknownHostsAreRefused) {
  const TempFile platform("pipegrid-ep-refused", ".xml", two_servers_xml(2));
  auto refusal = [&](const std::vector<std::string>& group) -> std::string {
    sim::SimulationRequest request;
    request.platform_file = platform.path();
    request.program = parse_program_text(
        "# pipegrid program: 1 stages, 1 micro-batches, 1 mini-batches\n"
        "device 0 stage 0 replica 0 stream 0: 0F0 0B0\n",
        "test program");
    request.stages = one_stage();
    request.stage_layers = {{moe_layer(100)}};
    request.hosts = {{"s0-g0"}};
    request.expert_parallel_ranks["s0-g0"] = {{"s0-g0", group}};
    request.network = sim::NetworkModel::Analytic;
    try {
      sim::simulate(request);
    } catch (const InputError& error) {
      return error.what();
    }
    return "(accepted)";
  };
  EXPECT_NE(refusal({"s0-g1", "s1-g0"}).find("expert parallelism: the expert-parallel group of 's0-g0' does not hold it"),
            std::string::npos)
      << refusal({"s0-g1", "s1-g0"});
  const std::string unknown = refusal({"s0-g0", "s9-g9"});
  EXPECT_NE(unknown.find("no host named 's9-g9' (an expert-parallel rank of 's0-g0')"), std::string::npos) << unknown;
}

}  // namespace
}  // namespace pipegrid
