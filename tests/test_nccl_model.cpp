// NCCL's achieved bandwidth and start latency (docs/semantics.md, NCCL
// efficiency and latency) without the engine: the link properties, the
// tensor-parallel closed forms and link, and the cluster generator's
// defaults and options (docs/platforms.md, NCCL defaults).

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/platform.hpp"
#include "core/tensor_parallel.hpp"
#include "expect_input_error.hpp"
#include "generators/cluster_platform.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

TEST(NcclModel, LinkPropertiesAreReadWithDefaultsOneAndZero) {
  EXPECT_EQ(link_nccl_from_properties("p.xml", "l", {}), (LinkNccl{1, 0}));
  EXPECT_EQ(link_nccl_from_properties("p.xml", "l", {{"bandwidth_note", "x"}}), (LinkNccl{1, 0}));
  EXPECT_EQ(link_nccl_from_properties("p.xml", "l", {{"nccl_efficiency", "0.5"}, {"nccl_latency", "1ms"}}),
            (LinkNccl{0.5, 1e-3}));
  EXPECT_EQ(link_nccl_from_properties("p.xml", "l", {{"nccl_efficiency", "1"}, {"nccl_latency", "0"}}), (LinkNccl{1, 0}));
  EXPECT_EQ(link_nccl_from_properties("p.xml", "l", {{"nccl_latency", "2.5e-5"}}).latency_s, 2.5e-5);
  EXPECT_TRUE(LinkNccl{}.is_default());
  EXPECT_FALSE((LinkNccl{1, 1e-6}.is_default()));
}

TEST(NcclModel, BadLinkPropertiesNameTheFileTheLinkAndTheProperty) {
  for (const char* bad : {"0", "1.5", "-0.5", "abc", "0.5x", ""}) {
    const std::string message =
        input_error_of([&] { link_nccl_from_properties("p.xml", "nic0", {{"nccl_efficiency", bad}}); });
    EXPECT_CONTAINS(message, "p.xml: link 'nic0': property 'nccl_efficiency': expected a number in (0, 1]");
    EXPECT_CONTAINS(message, std::string("found '") + bad + "'");
  }
  for (const char* bad : {"-1", "x", "1parsec", "2e9"}) {
    const std::string message = input_error_of([&] { link_nccl_from_properties("p.xml", "nic0", {{"nccl_latency", bad}}); });
    EXPECT_CONTAINS(message, "p.xml: link 'nic0': property 'nccl_latency': expected");
    EXPECT_CONTAINS(message, std::string("found '") + bad + "'");
  }
}

TEST(NcclModel, ARouteTakesTheSmallestEfficiencyAndTheLargestLatency) {
  const std::vector<LinkInfo> links = {{"a", 1e9, true, 0.9, 1e-5}, {"b", 1e9, true, 0.5, 2e-6}, {"c", 1e9, false}};
  EXPECT_EQ(route_nccl(links, {0, 1, 2}), (LinkNccl{0.5, 1e-5}));
  EXPECT_EQ(route_nccl(links, {2}), (LinkNccl{1, 0}));
  EXPECT_EQ(route_nccl(links, {}), (LinkNccl{1, 0}));
  EXPECT_EQ(nccl_text({}), "");
  EXPECT_EQ(nccl_text({0.77, 1e-5}), "NCCL at 77% of line rate + 10 us per operation");
  EXPECT_EQ(nccl_text({0.5, 0}), "NCCL at 50% of line rate");
  EXPECT_EQ(nccl_text({1, 1e-3}), "NCCL 1 ms per operation");
}

// The compute-charged closed forms: an all-reduce of S over t hosts costs
// nccl_latency + 2 (t - 1) (latency + S / (t eta B)); a reduce-scatter or an
// all-gather nccl_latency + (t - 1) (latency + S / (t eta B)).
TEST(NcclModel, RingClosedFormsPayTheLatencyOnceAndTheBytesAtEfficiency) {
  TensorParallelLink link;
  link.latency_s = 2e-6;
  link.bandwidth_Bps = 100e9;
  link.nccl_efficiency = 0.8;
  link.nccl_latency_s = 1e-5;
  const double S = 64e6;
  for (const int t : {2, 4, 8}) {
    const double step = link.latency_s + S / (t * 0.8 * 100e9);
    EXPECT_NEAR(ring_all_reduce_s(S, t, link), 1e-5 + 2 * (t - 1) * step, 1e-15) << t;
    EXPECT_NEAR(reduce_scatter_s(S, t, link), 1e-5 + (t - 1) * step, 1e-15) << t;
    EXPECT_NEAR(all_gather_s(S, t, link), 1e-5 + (t - 1) * step, 1e-15) << t;
    // Each collective pays the latency once: 3 all-reduces and a reduce-scatter.
    const std::vector<RingCollective> collectives = {{RingCollectiveKind::AllReduce, 3, S},
                                                     {RingCollectiveKind::ReduceScatter, 1, S}};
    EXPECT_NEAR(collectives_s(collectives, t, link), 4 * 1e-5 + 7 * (t - 1) * step, 1e-15) << t;
  }
  EXPECT_EQ(ring_all_reduce_s(S, 1, link), 0);  // no ring, no operation
  // The defaults leave the closed forms as they were.
  TensorParallelLink plain = link;
  plain.nccl_efficiency = 1;
  plain.nccl_latency_s = 0;
  EXPECT_DOUBLE_EQ(ring_all_reduce_s(S, 4, plain), 2 * 3 * (2e-6 + S / (4 * 100e9)));
}

// Two servers of 2 GPUs: NVLink inside (0.8, 10 us), a NIC with a switch
// between (0.9, 25 us). A group inside a server sees only NVLink's values;
// a group spanning the servers the smallest efficiency and largest latency.
TEST(NcclModel, TheTensorParallelLinkTakesTheRingsRoutesValues) {
  PlatformSummary platform;
  platform.file = "cluster.xml";
  for (int s = 0; s < 2; ++s)
    for (int g = 0; g < 2; ++g) {
      HostInfo host;
      host.name = "s" + std::to_string(s) + "-gpu" + std::to_string(g);
      host.server = "server" + std::to_string(s);
      platform.hosts.push_back(host);
    }
  const auto table = [&](const std::vector<std::vector<int>>& groups) {
    RouteTable routes;
    routes.links = {{"nvlink", 150e9, true, 0.8, 1e-5}, {"nic", 25e9, true, 0.9, 2.5e-5}, {"switch", 40e9, false}};
    for (const auto& [a, b] : tensor_parallel_route_pairs(platform, groups))
      routes.routes.push_back(platform.hosts[a].server == platform.hosts[b].server ? HostRoute{true, 2e-6, {0}}
                                                                                   : HostRoute{true, 7e-6, {1, 2, 1}});
    return routes;
  };
  const auto inside = tensor_parallel_groups(platform, 2);
  TensorParallelLink link = tensor_parallel_link(platform, inside, table(inside));
  EXPECT_EQ(link.nccl_efficiency, 0.8);
  EXPECT_EQ(link.nccl_latency_s, 1e-5);
  const auto spanning = tensor_parallel_groups(platform, 4);
  link = tensor_parallel_link(platform, spanning, table(spanning));
  EXPECT_EQ(link.nccl_efficiency, 0.8);
  EXPECT_EQ(link.nccl_latency_s, 2.5e-5);
  // Route matrices without links: the defaults.
  platform.route_bandwidth_Bps.assign(4, std::vector<double>(4, 1e9));
  platform.route_latency_s.assign(4, std::vector<double>(4, 1e-6));
  link = tensor_parallel_link(platform, inside);
  EXPECT_EQ(link.nccl_efficiency, 1);
  EXPECT_EQ(link.nccl_latency_s, 0);
}

std::map<std::string, std::string> cluster_options(const std::string& device) {
  return {{"servers", "2"},        {"gpus_per_server", "2"}, {"device", device},
          {"memory", "80GB"},      {"intra", "300GBps,2us"}, {"inter", "25GBps,5us"}};
}

TEST(NcclModel, ClusterDefaultsFollowTheDeviceAndTheFabric) {
  EXPECT_EQ(cluster_spec_from_options(cluster_options("A100"), "t").intra_nccl, (LinkNccl{0.77, 10 * 1e-6}));
  EXPECT_EQ(cluster_spec_from_options(cluster_options("V100"), "t").intra_nccl, (LinkNccl{0.77, 10 * 1e-6}));
  EXPECT_EQ(cluster_spec_from_options(cluster_options("H100"), "t").intra_nccl, (LinkNccl{0.822, 10 * 1e-6}));
  EXPECT_EQ(cluster_spec_from_options(cluster_options("H200"), "t").intra_nccl, (LinkNccl{0.822, 10 * 1e-6}));
  for (const char* device : {"V100", "A100", "H100", "H200"})
    EXPECT_EQ(cluster_spec_from_options(cluster_options(device), "t").inter_nccl, (LinkNccl{0.92, 25 * 1e-6})) << device;
  // A shared intra link (a PCIe tree) has no NVLink figure; FPGAs none at all.
  auto shared = cluster_options("A100");
  shared["intra_link"] = "shared";
  EXPECT_TRUE(cluster_spec_from_options(shared, "t").intra_nccl.is_default());
  EXPECT_EQ(cluster_nccl_defaults("VCU118", IntraLink::PerGpu).inter, (LinkNccl{}));
  EXPECT_EQ(cluster_nccl_defaults("VCU118", IntraLink::PerGpu).intra, (LinkNccl{}));
  // A spec built by hand has none.
  EXPECT_TRUE(ClusterSpec{}.intra_nccl.is_default());
  EXPECT_TRUE(ClusterSpec{}.inter_nccl.is_default());
}

TEST(NcclModel, ClusterOptionsOverrideOrSwitchOffTheDefaults) {
  auto options = cluster_options("A100");
  options["intra_nccl_efficiency"] = "0.5";
  options["--inter-nccl-latency"] = "40us";
  options["intra-nccl-latency"] = "none";
  options["inter_nccl_efficiency"] = "1";
  const ClusterSpec spec = cluster_spec_from_options(options, "t");
  EXPECT_EQ(spec.intra_nccl, (LinkNccl{0.5, 0}));
  EXPECT_EQ(spec.inter_nccl, (LinkNccl{1, 40 * 1e-6}));  // as "40us" reads
  options["intra_nccl_efficiency"] = "none";
  options["--inter-nccl-latency"] = "0";
  const ClusterSpec off = cluster_spec_from_options(options, "t");
  EXPECT_TRUE(off.intra_nccl.is_default());
  EXPECT_TRUE(off.inter_nccl.is_default());
  const std::string xml = cluster_platform_xml(off);
  EXPECT_EQ(xml.find("nccl_"), std::string::npos);
}

TEST(NcclModel, ClusterOptionErrorsNameTheOption) {
  const auto error_with = [](const std::string& key, const std::string& value) {
    auto options = cluster_options("H100");
    options[key] = value;
    return input_error_of([&] { cluster_spec_from_options(options, "platform cluster"); });
  };
  EXPECT_EQ(error_with("intra_nccl_efficiency", "1.2"),
            "platform cluster: intra_nccl_efficiency: expected a number in (0, 1] (the share of the line rate NCCL "
            "achieves) or none, found '1.2'");
  EXPECT_CONTAINS(error_with("inter-nccl-efficiency", "0"), ": inter-nccl-efficiency: expected a number in (0, 1]");
  EXPECT_CONTAINS(error_with("intra_nccl_latency", "-3us"), ": intra_nccl_latency: expected a non-negative duration");
  EXPECT_CONTAINS(error_with("inter_nccl_latency", "fast"), "found 'fast'");
  EXPECT_CONTAINS(error_with("inter_nccl_latency", "2e9"), ": inter_nccl_latency: expected at most 1e9 s, found '2e9'");
  EXPECT_CONTAINS(error_with("intra_ncl_latency", "1us"), "did you mean 'intra_nccl_latency'");
}

TEST(NcclModel, TheClusterXmlCarriesTheValuesOnItsIntraLinksAndNics) {
  const ClusterSpec spec = cluster_spec_from_options(cluster_options("H100"), "t");
  const std::string xml = cluster_platform_xml(spec);
  EXPECT_CONTAINS(xml, "<link id=\"s0-gpu0-link\" bandwidth=\"300GBps\" latency=\"1us\" sharing_policy=\"SPLITDUPLEX\">"
                       "<prop id=\"nccl_efficiency\" value=\"0.822\"/><prop id=\"nccl_latency\" value=\"10us\"/></link>");
  EXPECT_CONTAINS(xml, "<link id=\"s1-nic\" bandwidth=\"25GBps\" latency=\"2.5us\" sharing_policy=\"SPLITDUPLEX\">"
                       "<prop id=\"nccl_efficiency\" value=\"0.92\"/><prop id=\"nccl_latency\" value=\"25us\"/></link>");
  EXPECT_CONTAINS(xml, "<link id=\"switch\" bandwidth=\"25GBps\" latency=\"0s\" sharing_policy=\"FATPIPE\"/>");
  EXPECT_CONTAINS(xml, "NCCL (link properties nccl_efficiency, nccl_latency): inside a server 82.2% of line rate, 10us per "
                       "operation;\n  between servers 92% of line rate, 25us per operation.");
  // The values read back as written.
  EXPECT_EQ(link_nccl_from_properties("x", "l", {{"nccl_efficiency", "0.822"}, {"nccl_latency", "10us"}}),
            spec.intra_nccl);
  EXPECT_EQ(link_nccl_from_properties("x", "l", {{"nccl_efficiency", "0.92"}, {"nccl_latency", "25us"}}), spec.inter_nccl);
}

}  // namespace
}  // namespace pipegrid
