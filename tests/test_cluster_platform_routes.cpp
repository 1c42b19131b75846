// Generated cluster platforms (generators/cluster_platform.hpp) as pipegrid's
// platform check and SimGrid read them: accepted, every pair of hosts
// routed both ways, with the latency and bandwidth docs/platforms.md gives.

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

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

}  // namespace
}  // namespace pipegrid
