// Generated cluster platforms (generators/cluster_platform.hpp) as pipegrid's
// platform check and SimGrid read them: accepted, every pair of hosts
// routed both ways, with the latency and bandwidth docs/platforms.md gives.

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "generators/cluster_platform.hpp"
#include "sim/engine.hpp"
#include "sim/platform_xml.hpp"
#include "sim_test_util.hpp"

namespace pipegrid {
namespace {

using testutil::TempFile;

ClusterSpec spec_of(int servers, int gpus, const std::string& intra_link) {
  return cluster_spec_from_options({{"servers", std::to_string(servers)},
                                    {"gpus_per_server", std::to_string(gpus)},
                                    {"device", "V100"},
                                    {"memory", "16GiB"},
                                    {"intra", "150GBps,2us"},
                                    {"inter", "25Gbps,5us"},
                                    {"intra_link", intra_link}},
                                   "test");
}

TEST(ClusterPlatformRoutes, LimitsAgreeWithThePlatformCheck) {
  EXPECT_EQ(static_cast<std::size_t>(kMaxClusterHosts), kMaxPlatformHosts);
}

TEST(ClusterPlatformRoutes, EveryPairRoutedWithTheDocumentedLatencyAndBandwidth) {
  for (const char* intra_link : {"per-gpu", "shared"})
    for (const auto& [servers, gpus] : {std::pair{1, 1}, std::pair{1, 3}, std::pair{3, 1}, std::pair{3, 2}}) {
      SCOPED_TRACE(fmt::format("{} x {}, {}", servers, gpus, intra_link));
      const std::string xml = cluster_platform_xml(spec_of(servers, gpus, intra_link));
      const PlatformCheck check = check_platform_xml("cluster.xml", xml);
      EXPECT_EQ(check.hosts, static_cast<std::size_t>(servers * gpus));
      EXPECT_TRUE(check.warnings.empty());
      const TempFile file("cluster", ".xml", xml);
      const PlatformSummary platform = sim::read_platform(file.path(), sim::PlatformRoutes::All);
      ASSERT_EQ(platform.hosts.size(), static_cast<std::size_t>(servers * gpus));
      for (int a = 0; a < servers * gpus; ++a) {
        const HostInfo& host = platform.hosts[a];
        EXPECT_EQ(host.name, fmt::format("s{}-gpu{}", a / gpus, a % gpus));
        EXPECT_EQ(host.device_type, "V100");
        ASSERT_TRUE(host.memory_bytes.has_value());
        EXPECT_EQ(*host.memory_bytes, 16.0 * (1 << 30));
        for (int b = 0; b < servers * gpus; ++b) {
          if (a == b) continue;
          const bool same_server = a / gpus == b / gpus;
          EXPECT_DOUBLE_EQ(platform.route_latency_s[a][b], same_server ? 2e-6 : 5e-6) << a << " -> " << b;
          EXPECT_DOUBLE_EQ(platform.route_bandwidth_Bps[a][b], same_server ? 150e9 : 25e9 / 8) << a << " -> " << b;
        }
      }
    }
}

/// The names of the links SimGrid puts on the route from host a to host b.
std::vector<std::string> route_link_names(const PlatformSummary& platform, int a, int b) {
  std::vector<std::string> names;
  for (const int link : platform.route_links[a][b]) names.push_back(platform.links[link].name);
  return names;
}

PlatformSummary leaf_spine_platform(const std::string& nic) {
  // 4 servers x 2 GPUs, 2 servers per leaf, uplinks 4:1 oversubscribed.
  const ClusterSpec spec = cluster_spec_from_options({{"servers", "4"},
                                                      {"gpus_per_server", "2"},
                                                      {"device", "V100"},
                                                      {"memory", "16GiB"},
                                                      {"intra", "150GBps,2us"},
                                                      {"inter", "25Gbps,5us"},
                                                      {"nic", nic},
                                                      {"servers_per_leaf", "2"},
                                                      {"oversubscription", "4"}},
                                                     "test");
  const std::string xml = cluster_platform_xml(spec);
  const PlatformCheck check = check_platform_xml("cluster.xml", xml);
  EXPECT_EQ(check.hosts, 8u);
  EXPECT_TRUE(check.warnings.empty());
  const TempFile file("leaf-spine", ".xml", xml);
  return sim::read_platform(file.path(), sim::PlatformRoutes::All);
}

TEST(ClusterPlatformRoutes, LeafSpineRoutesFoundBySimGrid) {
  const PlatformSummary platform = leaf_spine_platform("per-server");
  ASSERT_EQ(platform.hosts.size(), 8u);
  const double nic = 25e9 / 8, uplink = 2 * nic / 4;
  for (int a = 0; a < 8; ++a) {
    EXPECT_EQ(platform.hosts[a].name, fmt::format("s{}-gpu{}", a / 2, a % 2));
    EXPECT_EQ(platform.hosts[a].server, fmt::format("server{}", a / 2));
    for (int b = 0; b < 8; ++b) {
      if (a == b) continue;
      const bool same_server = a / 2 == b / 2, same_leaf = a / 4 == b / 4;
      EXPECT_DOUBLE_EQ(platform.route_latency_s[a][b], same_server ? 2e-6 : 5e-6) << a << " -> " << b;
      EXPECT_DOUBLE_EQ(platform.route_bandwidth_Bps[a][b], same_server ? 150e9 : same_leaf ? nic : uplink) << a << " -> " << b;
    }
  }
  // GPU to GPU: NIC -> leaf -> (spine) -> leaf -> NIC; in the order SimGrid
  // lists them (its Dijkstra zones list a zone route's links backwards,
  // which changes nothing: a route's links are a set to its sharing and
  // latency). Inside a leaf, its switch's FATPIPE link is crossed on the
  // way in and out; across leaves, the spine's.
  EXPECT_EQ(route_link_names(platform, 0, 2),
            (std::vector<std::string>{"s0-nic_UP", "leaf0-switch", "leaf0-switch", "s1-nic_DOWN"}));
  EXPECT_EQ(route_link_names(platform, 1, 7),
            (std::vector<std::string>{"s0-nic_UP", "leaf0-switch", "spine", "leaf0-uplink_UP", "leaf1-uplink_DOWN", "spine",
                                      "leaf1-switch", "s3-nic_DOWN"}));
  EXPECT_EQ(route_link_names(platform, 6, 0),
            (std::vector<std::string>{"s3-nic_UP", "leaf1-switch", "spine", "leaf1-uplink_UP", "leaf0-uplink_DOWN", "spine",
                                      "leaf0-switch", "s0-nic_DOWN"}));
  // Switches are FATPIPE (each flow gets their bandwidth), NICs and uplinks shared.
  for (const LinkInfo& link : platform.links)
    EXPECT_EQ(link.shared, link.name.find("switch") == std::string::npos && link.name != "spine") << link.name;
}

TEST(ClusterPlatformRoutes, NicPerServerIsSharedPerGpuIsNot) {
  // Two GPUs of server 0 sending to server 2: one NIC for both, or one each.
  const PlatformSummary shared = leaf_spine_platform("per-server");
  EXPECT_EQ(route_link_names(shared, 0, 4).front(), "s0-nic_UP");
  EXPECT_EQ(route_link_names(shared, 1, 5).front(), "s0-nic_UP");
  EXPECT_EQ(route_link_names(shared, 4, 0).back(), "s0-nic_DOWN");
  EXPECT_EQ(route_link_names(shared, 5, 1).back(), "s0-nic_DOWN");
  const PlatformSummary own = leaf_spine_platform("per-gpu");
  EXPECT_EQ(route_link_names(own, 0, 4).front(), "s0-gpu0-nic_UP");
  EXPECT_EQ(route_link_names(own, 1, 5).front(), "s0-gpu1-nic_UP");
  EXPECT_EQ(route_link_names(own, 4, 1).back(), "s0-gpu1-nic_DOWN");
  // Per GPU: a server's NIC bandwidth is 2 x 3.125 GB/s, so the 4:1 uplink
  // (2 servers x 6.25 GB/s / 4) equals a GPU's NIC.
  EXPECT_DOUBLE_EQ(own.route_bandwidth_Bps[0][4], 25e9 / 8);
  EXPECT_DOUBLE_EQ(own.route_latency_s[0][4], 5e-6);
  EXPECT_DOUBLE_EQ(own.route_bandwidth_Bps[0][2], 25e9 / 8);
}

}  // namespace
}  // namespace pipegrid
