// The cluster platform generator (generators/cluster_platform.hpp): options to a
// spec, with errors that name the option, and the spec to exact XML.

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "generators/cluster_platform.hpp"
#include "expect_input_error.hpp"
#include "sim/platform_xml.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

std::map<std::string, std::string> two_by_two() {
  return {{"servers", "2"},  {"gpus_per_server", "2"},   {"device", "V100"},
          {"memory", "16GiB"}, {"intra", "150GBps,2us"}, {"inter", "25Gbps,5us"}};
}

const char* const kTwoByTwoXml = R"XML(<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<!--
  Written by pipegrid platform cluster: 2 servers x 2 GPUs (4 hosts).
  Inside a server: each GPU its own full-duplex link sK-gpuG-link (150GBps, 1us); GPU a to GPU b
  crosses a's link up and b's link down: 2us + bytes / 150GBps alone on its route.
  Between servers: the sender's NIC sK-nic up (3.125GBps, 2.5us), the non-blocking switch, the receiver's
  NIC down: 5us + bytes / 3.125GBps alone on its route; a server's sends share its NIC, so do its receives.
  NCCL (link properties nccl_efficiency, nccl_latency): inside a server 77% of line rate, 10us per operation;
  between servers 92% of line rate, 25us per operation.
  Host speed 1Tf: not used for profile-timed work. Hosts in pipeline order: s0-gpu0, ..., s1-gpu1.
-->
<platform version="4.1">
  <zone id="cluster" routing="DijkstraCache">
    <zone id="switch" routing="Full">
      <router id="switch-router"/>
    </zone>
    <link id="s0-gpu0-link" bandwidth="150GBps" latency="1us" sharing_policy="SPLITDUPLEX"><prop id="nccl_efficiency" value="0.77"/><prop id="nccl_latency" value="10us"/></link>
    <link id="s0-gpu1-link" bandwidth="150GBps" latency="1us" sharing_policy="SPLITDUPLEX"><prop id="nccl_efficiency" value="0.77"/><prop id="nccl_latency" value="10us"/></link>
    <link id="s0-nic" bandwidth="3.125GBps" latency="2.5us" sharing_policy="SPLITDUPLEX"><prop id="nccl_efficiency" value="0.92"/><prop id="nccl_latency" value="25us"/></link>
    <link id="s1-gpu0-link" bandwidth="150GBps" latency="1us" sharing_policy="SPLITDUPLEX"><prop id="nccl_efficiency" value="0.77"/><prop id="nccl_latency" value="10us"/></link>
    <link id="s1-gpu1-link" bandwidth="150GBps" latency="1us" sharing_policy="SPLITDUPLEX"><prop id="nccl_efficiency" value="0.77"/><prop id="nccl_latency" value="10us"/></link>
    <link id="s1-nic" bandwidth="3.125GBps" latency="2.5us" sharing_policy="SPLITDUPLEX"><prop id="nccl_efficiency" value="0.92"/><prop id="nccl_latency" value="25us"/></link>
    <link id="switch" bandwidth="3.125GBps" latency="0s" sharing_policy="FATPIPE"/>
    <zone id="server0" routing="Full">
      <host id="s0-gpu0" speed="1Tf">
        <prop id="kind" value="gpu"/>
        <prop id="device" value="V100"/>
        <prop id="memory" value="16GiB"/>
        <prop id="memory_reserve" value="0.05"/>
      </host>
      <host id="s0-gpu1" speed="1Tf">
        <prop id="kind" value="gpu"/>
        <prop id="device" value="V100"/>
        <prop id="memory" value="16GiB"/>
        <prop id="memory_reserve" value="0.05"/>
      </host>
      <router id="s0-router"/>
      <route src="s0-gpu0" dst="s0-gpu1" symmetrical="NO"><link_ctn id="s0-gpu0-link" direction="UP"/><link_ctn id="s0-gpu1-link" direction="DOWN"/></route>
      <route src="s0-gpu1" dst="s0-gpu0" symmetrical="NO"><link_ctn id="s0-gpu1-link" direction="UP"/><link_ctn id="s0-gpu0-link" direction="DOWN"/></route>
      <route src="s0-gpu0" dst="s0-router" symmetrical="NO"><link_ctn id="s0-nic" direction="UP"/></route>
      <route src="s0-router" dst="s0-gpu0" symmetrical="NO"><link_ctn id="s0-nic" direction="DOWN"/></route>
      <route src="s0-gpu1" dst="s0-router" symmetrical="NO"><link_ctn id="s0-nic" direction="UP"/></route>
      <route src="s0-router" dst="s0-gpu1" symmetrical="NO"><link_ctn id="s0-nic" direction="DOWN"/></route>
    </zone>
    <zone id="server1" routing="Full">
      <host id="s1-gpu0" speed="1Tf">
        <prop id="kind" value="gpu"/>
        <prop id="device" value="V100"/>
        <prop id="memory" value="16GiB"/>
        <prop id="memory_reserve" value="0.05"/>
      </host>
      <host id="s1-gpu1" speed="1Tf">
        <prop id="kind" value="gpu"/>
        <prop id="device" value="V100"/>
        <prop id="memory" value="16GiB"/>
        <prop id="memory_reserve" value="0.05"/>
      </host>
      <router id="s1-router"/>
      <route src="s1-gpu0" dst="s1-gpu1" symmetrical="NO"><link_ctn id="s1-gpu0-link" direction="UP"/><link_ctn id="s1-gpu1-link" direction="DOWN"/></route>
      <route src="s1-gpu1" dst="s1-gpu0" symmetrical="NO"><link_ctn id="s1-gpu1-link" direction="UP"/><link_ctn id="s1-gpu0-link" direction="DOWN"/></route>
      <route src="s1-gpu0" dst="s1-router" symmetrical="NO"><link_ctn id="s1-nic" direction="UP"/></route>
      <route src="s1-router" dst="s1-gpu0" symmetrical="NO"><link_ctn id="s1-nic" direction="DOWN"/></route>
      <route src="s1-gpu1" dst="s1-router" symmetrical="NO"><link_ctn id="s1-nic" direction="UP"/></route>
      <route src="s1-router" dst="s1-gpu1" symmetrical="NO"><link_ctn id="s1-nic" direction="DOWN"/></route>
    </zone>
    <zoneRoute src="server0" dst="switch" gw_src="s0-router" gw_dst="switch-router" symmetrical="NO"><link_ctn id="switch"/></zoneRoute>
    <zoneRoute src="switch" dst="server0" gw_src="switch-router" gw_dst="s0-router" symmetrical="NO"><link_ctn id="switch"/></zoneRoute>
    <zoneRoute src="server1" dst="switch" gw_src="s1-router" gw_dst="switch-router" symmetrical="NO"><link_ctn id="switch"/></zoneRoute>
    <zoneRoute src="switch" dst="server1" gw_src="switch-router" gw_dst="s1-router" symmetrical="NO"><link_ctn id="switch"/></zoneRoute>
  </zone>
</platform>
)XML";

TEST(ClusterPlatform, TwoByTwoExactly) {
  const ClusterSpec spec = cluster_spec_from_options(two_by_two(), "t");
  EXPECT_EQ(spec.servers, 2);
  EXPECT_EQ(spec.gpus_per_server, 2);
  EXPECT_EQ(spec.device, "V100");
  EXPECT_EQ(spec.memory, "16GiB");
  EXPECT_EQ(spec.intra.bandwidth_Bps, 150e9);
  EXPECT_DOUBLE_EQ(spec.intra.latency_s, 2e-6);
  EXPECT_EQ(spec.inter.bandwidth_Bps, 25e9 / 8);
  EXPECT_DOUBLE_EQ(spec.inter.latency_s, 5e-6);
  EXPECT_EQ(spec.intra_link, IntraLink::PerGpu);
  EXPECT_EQ(spec.speed_flops, 1e12);
  EXPECT_EQ(cluster_platform_xml(spec), kTwoByTwoXml);
  // The same spec, the same bytes.
  EXPECT_EQ(cluster_platform_xml(cluster_spec_from_options(two_by_two(), "t")), cluster_platform_xml(spec));
}

TEST(ClusterPlatform, KeysTakeDashesUnderscoresAndDoubleDashes) {
  const std::map<std::string, std::string> flags = {
      {"--servers", "2"},      {"--gpus-per-server", "2"},   {"--device", "V100"},        {"--memory", "16GiB"},
      {"--intra", "150GBps,2us"}, {"--inter", "25Gbps, 5us"}, {"--intra-link", "per-gpu"}, {"--speed", "1Tf"}};
  EXPECT_EQ(cluster_platform_xml(cluster_spec_from_options(flags, "t")), kTwoByTwoXml);
  std::map<std::string, std::string> mixed = two_by_two();
  mixed.erase("gpus_per_server");
  mixed["gpus-per-server"] = "2";
  EXPECT_EQ(cluster_platform_xml(cluster_spec_from_options(mixed, "t")), kTwoByTwoXml);
}

TEST(ClusterPlatform, SharedLinkOneServerAndDefaults) {
  std::map<std::string, std::string> options = two_by_two();
  options["servers"] = "1";
  options["gpus_per_server"] = "3";
  options["intra_link"] = "shared";
  options["intra"] = "12GBps";  // latency 0
  options["speed"] = "14Tf";
  const std::string xml = cluster_platform_xml(cluster_spec_from_options(options, "t"));
  EXPECT_CONTAINS(xml, R"(<host id="s0-gpu2" speed="14Tf">)");
  EXPECT_CONTAINS(xml, R"(<link id="s0-bus" bandwidth="12GBps" latency="0s" sharing_policy="SHARED"/>)");
  EXPECT_CONTAINS(xml, R"(<route src="s0-gpu2" dst="s0-gpu0" symmetrical="NO"><link_ctn id="s0-bus"/></route>)");
  // One server: no NIC, router or switch.
  EXPECT_EQ(xml.find("nic"), std::string::npos);
  EXPECT_EQ(xml.find("router"), std::string::npos);
  EXPECT_EQ(xml.find("zoneRoute"), std::string::npos);
  EXPECT_EQ(xml.find("s1-"), std::string::npos);
  // One GPU per server: no intra link.
  options["gpus_per_server"] = "1";
  options["servers"] = "3";
  const std::string single = cluster_platform_xml(cluster_spec_from_options(options, "t"));
  EXPECT_EQ(single.find("bus"), std::string::npos);
  EXPECT_CONTAINS(single, R"(<zoneRoute src="server2" dst="switch" gw_src="s2-router" gw_dst="switch-router")");
  EXPECT_EQ(single.find(R"(dst="server1" gw_src="s2-router")"), std::string::npos);  // no route per pair of servers
}

TEST(ClusterPlatform, ValuesAreWrittenSoThatTheyReadBackExactly) {
  std::map<std::string, std::string> options = two_by_two();
  options["intra"] = "12GiBps,3us";  // 12884901888 B/s (not exact in GBps); half of 3 us
  options["inter"] = "10000000,0.001";  // plain numbers: B/s and s
  options["speed"] = "2.5e9";
  const std::string xml = cluster_platform_xml(cluster_spec_from_options(options, "t"));
  EXPECT_CONTAINS(xml, R"(bandwidth="12884901888Bps" latency="1.5us")");
  EXPECT_CONTAINS(xml, R"(<link id="s0-nic" bandwidth="10MBps" latency="0.5ms")");
  EXPECT_CONTAINS(xml, R"(speed="2.5Gf")");
}

TEST(ClusterPlatform, BadValuesNameTheOption) {
  const auto error_with = [](const std::string& key, const std::string& value) {
    std::map<std::string, std::string> options = two_by_two();
    options.erase(key);
    options["--" + key] = value;
    return input_error_of([&] { cluster_spec_from_options(options, "platform cluster"); });
  };
  EXPECT_EQ(error_with("servers", "0"), "platform cluster: --servers: expected an integer from 1 to 16384, found '0'");
  EXPECT_EQ(error_with("servers", "two"), "platform cluster: --servers: expected an integer from 1 to 16384, found 'two'");
  EXPECT_EQ(error_with("servers", "2.5"), "platform cluster: --servers: expected an integer from 1 to 16384, found '2.5'");
  EXPECT_EQ(error_with("gpus_per_server", "65"),
            "platform cluster: --gpus_per_server: expected an integer from 1 to 64, found '65'");
  EXPECT_EQ(error_with("intra", "150GB,2us"),
            "platform cluster: --intra (bandwidth): expected a positive bandwidth in bytes per second, or with a SimGrid "
            "unit (Bps, kBps, MBps, GBps, bps, Mbps, Gbps, KiBps, GiBps, ...), found '150GB'");
  EXPECT_EQ(error_with("inter", "25Gbps,5 parsecs"),
            "platform cluster: --inter (latency): expected a non-negative duration in seconds, optionally with a SimGrid "
            "unit (ps, ns, us, ms, s, m, h, d, w), found '5 parsecs'");
  EXPECT_EQ(error_with("inter", "25Gbps,"),
            "platform cluster: --inter: expected BANDWIDTH or BANDWIDTH,LATENCY (such as 25Gbps,5us), found '25Gbps,'");
  EXPECT_EQ(error_with("intra", "0.5Bps"), "platform cluster: --intra (bandwidth): expected at least 1 B/s, found '0.5Bps'");
  EXPECT_EQ(error_with("memory", "lots"),
            "platform cluster: --memory: expected a non-negative size in bytes, optionally with a unit (B, kB, MB, GB, "
            "KiB, MiB, GiB, TiB), found 'lots'");
  EXPECT_EQ(error_with("memory", "0GiB"), "platform cluster: --memory: expected a memory size above 0 (such as 16GiB), found '0GiB'");
  EXPECT_CONTAINS(error_with("device", "V 100"), "platform cluster: --device: expected a device type name");
  EXPECT_CONTAINS(error_with("device", "<V100>"), "found '<V100>'");
  // Issue 26: the memory reserve, a fraction or a size below the memory.
  EXPECT_EQ(error_with("memory_reserve", "1.5"),  // neither a fraction nor whole bytes
            "platform cluster: --memory_reserve: expected a fraction of the memory in [0, 1) (such as 0.05) or a size in "
            "bytes (such as 2GiB), found '1.5'");
  EXPECT_EQ(error_with("memory_reserve", "-0.1"),
            "platform cluster: --memory_reserve: expected a fraction of the memory in [0, 1) (such as 0.05) or a size in "
            "bytes (such as 2GiB), found '-0.1'");
  EXPECT_EQ(error_with("memory_reserve", "16GiB"),
            "platform cluster: --memory_reserve: expected a reserve below the memory (16GiB), found '16GiB'");
  // Issue 26: a name outside the device catalogue is refused at once, with the catalogue.
  EXPECT_EQ(error_with("device", "A100-80GB"),
            "platform cluster: --device: unknown device 'A100-80GB': expected one of the device catalogue's V100, A100, "
            "H100, H200, H800, VCU118, VCU129 (docs/devices.md)");
  EXPECT_EQ(error_with("device", "v100"),
            "platform cluster: --device: unknown device 'v100': expected one of the device catalogue's V100, A100, "
            "H100, H200, H800, VCU118, VCU129 (docs/devices.md)");
  EXPECT_EQ(error_with("intra_link", "ring"), "platform cluster: --intra_link: expected per-gpu or shared, found 'ring'");
  EXPECT_CONTAINS(error_with("speed", "fast"), "platform cluster: --speed: expected a speed in flop/s");
  EXPECT_CONTAINS(error_with("speed", "1e30f"), "found '1e30f'");
  std::map<std::string, std::string> many = two_by_two();
  many["servers"] = "512";
  many["gpus_per_server"] = "64";
  EXPECT_EQ(input_error_of([&] { cluster_spec_from_options(many, "t"); }),
            "t: 512 servers x 64 GPUs make 32768 hosts; a platform has at most 16384");
  many["servers"] = "66";  // 4224 hosts, but 66 x 64 x 63 routes inside servers
  EXPECT_EQ(input_error_of([&] { cluster_spec_from_options(many, "t"); }),
            "t: 66 servers x 64 GPUs make 266112 routes inside servers (one per ordered pair of a server's GPUs); a "
            "generated platform has at most 262144, which keeps the file under pipegrid's 64 MiB limit: use fewer GPUs "
            "per server or fewer servers");
}

TEST(ClusterPlatform, FabricOptionsParse) {
  std::map<std::string, std::string> options = two_by_two();
  options["servers"] = "8";
  options["--nic"] = "per-gpu";
  options["servers-per-leaf"] = "4";
  options["oversubscription"] = "1.5";
  const ClusterSpec spec = cluster_spec_from_options(options, "t");
  EXPECT_EQ(spec.nic, NicLayout::PerGpu);
  EXPECT_EQ(spec.servers_per_leaf, 4);
  EXPECT_EQ(spec.oversubscription, 1.5);
  // Defaults: a NIC per server, one switch, non-blocking.
  const ClusterSpec plain = cluster_spec_from_options(two_by_two(), "t");
  EXPECT_EQ(plain.nic, NicLayout::PerServer);
  EXPECT_EQ(plain.servers_per_leaf, 0);
  EXPECT_EQ(plain.oversubscription, 1);
}

TEST(ClusterPlatform, LeafSpineStructure) {
  std::map<std::string, std::string> options = two_by_two();
  options["servers"] = "4";
  options["servers_per_leaf"] = "2";
  options["oversubscription"] = "2";
  const std::string xml = cluster_platform_xml(cluster_spec_from_options(options, "t"));
  EXPECT_CONTAINS(xml, R"(<zone id="cluster" routing="DijkstraCache">
    <zone id="spine" routing="Full">
      <router id="spine-router"/>
    </zone>
    <link id="s0-gpu0-link")");
  EXPECT_CONTAINS(xml, R"(    <zone id="leaf0" routing="DijkstraCache">
      <zone id="server0" routing="Full">)");
  EXPECT_CONTAINS(xml, R"(    <zone id="leaf1" routing="DijkstraCache">
      <zone id="server2" routing="Full">)");
  EXPECT_CONTAINS(xml, R"(<zoneRoute src="server3" dst="leaf1-switch" gw_src="s3-router" gw_dst="leaf1-switch-router" symmetrical="NO"><link_ctn id="leaf1-switch"/></zoneRoute>)");
  // Uplink: 2 servers x 3.125 GB/s / 2.
  EXPECT_CONTAINS(xml, R"(<link id="leaf1-uplink" bandwidth="3.125GBps" latency="0s" sharing_policy="SPLITDUPLEX"/>)");
  EXPECT_CONTAINS(xml, R"(<zoneRoute src="leaf1" dst="spine" gw_src="leaf1-switch-router" gw_dst="spine-router" symmetrical="NO"><link_ctn id="leaf1-uplink" direction="UP"/><link_ctn id="spine"/></zoneRoute>)");
  EXPECT_CONTAINS(xml, R"(<zoneRoute src="spine" dst="leaf0" gw_src="spine-router" gw_dst="leaf0-switch-router" symmetrical="NO"><link_ctn id="spine"/><link_ctn id="leaf0-uplink" direction="DOWN"/></zoneRoute>)");
  EXPECT_EQ(xml.find(R"(id="switch")"), std::string::npos);
  // servers_per_leaf equal to servers: one switch, as without it.
  options.erase("oversubscription");
  options["servers_per_leaf"] = "4";
  std::map<std::string, std::string> flat = options;
  flat.erase("servers_per_leaf");
  EXPECT_EQ(cluster_platform_xml(cluster_spec_from_options(options, "t")), cluster_platform_xml(cluster_spec_from_options(flat, "t")));
}

TEST(ClusterPlatform, NicPerGpu) {
  std::map<std::string, std::string> options = two_by_two();
  options["nic"] = "per-gpu";
  options["servers"] = "4";
  options["servers_per_leaf"] = "2";
  const std::string xml = cluster_platform_xml(cluster_spec_from_options(options, "t"));
  EXPECT_CONTAINS(xml, R"(<link id="s1-gpu1-nic" bandwidth="3.125GBps" latency="2.5us" sharing_policy="SPLITDUPLEX">)"
                       R"(<prop id="nccl_efficiency" value="0.92"/><prop id="nccl_latency" value="25us"/></link>)");
  EXPECT_CONTAINS(xml, R"(<route src="s1-gpu1" dst="s1-router" symmetrical="NO"><link_ctn id="s1-gpu1-nic" direction="UP"/></route>)");
  EXPECT_CONTAINS(xml, R"(<route src="s1-router" dst="s1-gpu0" symmetrical="NO"><link_ctn id="s1-gpu0-nic" direction="DOWN"/></route>)");
  EXPECT_EQ(xml.find(R"(<link id="s1-nic")"), std::string::npos);
  // Uplink: 2 servers x 2 NICs x 3.125 GB/s, non-blocking.
  EXPECT_CONTAINS(xml, R"(<link id="leaf0-uplink" bandwidth="12.5GBps" latency="0s" sharing_policy="SPLITDUPLEX"/>)");
}

TEST(ClusterPlatform, BadFabricOptionsNameTheFlag) {
  const auto error_with = [](std::map<std::string, std::string> extra) {
    std::map<std::string, std::string> options = two_by_two();
    options["servers"] = "6";
    options.insert(extra.begin(), extra.end());
    return input_error_of([&] { cluster_spec_from_options(options, "platform cluster"); });
  };
  EXPECT_EQ(error_with({{"--nic", "per-rail"}}), "platform cluster: --nic: expected per-server or per-gpu, found 'per-rail'");
  EXPECT_EQ(error_with({{"--servers-per-leaf", "4"}}),
            "platform cluster: --servers-per-leaf: expected a divisor of the 6 servers (every leaf switch holds as many), "
            "found 4");
  EXPECT_EQ(error_with({{"--servers-per-leaf", "7"}}),
            "platform cluster: --servers-per-leaf: expected an integer from 1 to 6, found '7'");
  EXPECT_EQ(error_with({{"--servers-per-leaf", "0"}}),
            "platform cluster: --servers-per-leaf: expected an integer from 1 to 6, found '0'");
  EXPECT_EQ(error_with({{"--servers-per-leaf", "3"}, {"--oversubscription", "0.5"}}),
            "platform cluster: --oversubscription: expected a number from 1 to 1e+06 (a leaf's downlink to uplink "
            "bandwidth: 1 is non-blocking, 2 is 2:1), found '0.5'");
  EXPECT_CONTAINS(error_with({{"--servers-per-leaf", "3"}, {"--oversubscription", "2:1"}}), "found '2:1'");
  EXPECT_CONTAINS(error_with({{"--servers-per-leaf", "3"}, {"--oversubscription", "inf"}}), "found 'inf'");
  EXPECT_EQ(error_with({{"--oversubscription", "2"}}),
            "platform cluster: --oversubscription: oversubscription applies to the uplinks of two or more leaf switches; "
            "give --servers-per-leaf below the 6 servers, found no servers per leaf");
  EXPECT_EQ(error_with({{"--servers-per-leaf", "6"}, {"--oversubscription", "2"}}),
            "platform cluster: --oversubscription: oversubscription applies to the uplinks of two or more leaf switches; "
            "give --servers-per-leaf below the 6 servers, found 6 servers per leaf");
  // A switch takes at most 2048 servers; the spine at most 2048 leaves.
  std::map<std::string, std::string> options = two_by_two();
  options["servers"] = "4096";
  options["gpus_per_server"] = "4";
  EXPECT_EQ(input_error_of([&] { cluster_spec_from_options(options, "t"); }),
            "t: 4096 servers on one switch; a switch takes at most 2048 (SimGrid's route cache for a switch grows with "
            "the square of what it connects): give --servers-per-leaf");
  options["servers_per_leaf"] = "1";
  EXPECT_EQ(input_error_of([&] { cluster_spec_from_options(options, "t"); }),
            "t: servers_per_leaf: 4096 leaves on the spine; the spine takes at most 2048: use a larger --servers-per-leaf");
  options["servers_per_leaf"] = "32";
  EXPECT_EQ(cluster_spec_from_options(options, "t").servers, 4096);
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

TEST(ClusterPlatform, SixteenThousandGpusGrowLinearly) {
  const auto xml_of = [](int servers, const std::string& servers_per_leaf) {
    std::map<std::string, std::string> options = two_by_two();
    options["servers"] = std::to_string(servers);
    options["gpus_per_server"] = "8";
    options["nic"] = "per-gpu";
    if (!servers_per_leaf.empty()) options["servers_per_leaf"] = servers_per_leaf;
    return cluster_platform_xml(cluster_spec_from_options(options, "t"));
  };
  // 2,048 DGX-like servers of 8 GPUs, 32 per leaf, against 256 of them.
  const std::string large = xml_of(2048, "32"), small = xml_of(256, "32");
  EXPECT_EQ(occurrences(large, "<host "), 16384u);
  EXPECT_LE(large.size(), kMaxPlatformFileBytes);
  // Linear: bytes per host within 5% (ids have a digit or two more), where a
  // route per pair of servers would make it 8 times as many.
  const double per_host_large = static_cast<double>(large.size()) / 16384, per_host_small = static_cast<double>(small.size()) / 2048;
  EXPECT_LT(per_host_large / per_host_small, 1.05) << per_host_large << " vs " << per_host_small;
  EXPECT_GT(per_host_large / per_host_small, 1.0);
  // Zone routes: 2 per server and 2 per leaf, none per pair.
  EXPECT_EQ(occurrences(large, "<zoneRoute "), 2u * 2048 + 2u * 64);
  // One flat switch: as linear.
  const std::string flat = xml_of(2048, "");
  EXPECT_EQ(occurrences(flat, "<zoneRoute "), 2u * 2048);
  EXPECT_LE(flat.size(), kMaxPlatformFileBytes);
}

TEST(ClusterPlatform, TheLargestShapesTheLimitsAdmitFitThePlatformFileLimit) {
  // The most routes inside servers (963 x 17 x 16 = 261,936 <= 262,144) on
  // the most hosts (16,371), and 64 GPUs per server.
  for (const auto& [servers, gpus, per_leaf] : {std::tuple{963, 17, 107}, std::tuple{64, 64, 8}, std::tuple{16384, 1, 2048}}) {
    std::map<std::string, std::string> options = two_by_two();
    options["servers"] = std::to_string(servers);
    options["gpus_per_server"] = std::to_string(gpus);
    options["nic"] = "per-gpu";
    options["servers_per_leaf"] = std::to_string(per_leaf);
    options["memory_reserve"] = "0.125";
    const std::string xml = cluster_platform_xml(cluster_spec_from_options(options, "t"));
    EXPECT_LE(xml.size(), kMaxPlatformFileBytes) << servers << " x " << gpus;
  }
}

TEST(ClusterPlatform, UnknownMissingAndDoubledKeys) {
  std::map<std::string, std::string> options = two_by_two();
  options["gpus_per_servr"] = "8";
  EXPECT_EQ(input_error_of([&] { cluster_spec_from_options(options, "exp.toml:3: platform"); }),
            "exp.toml:3: platform: unknown key 'gpus_per_servr' (did you mean 'gpus_per_server'?)");
  options = two_by_two();
  options["colour"] = "blue";
  EXPECT_EQ(input_error_of([&] { cluster_spec_from_options(options, "t"); }),
            "t: unknown key 'colour' (expected one of servers, gpus_per_server, device, memory, memory_reserve, intra, "
            "inter, intra_link, speed, nic, servers_per_leaf, oversubscription, intra_nccl_efficiency, "
            "inter_nccl_efficiency, intra_nccl_latency, inter_nccl_latency)");
  options = two_by_two();
  options["intra-lnk"] = "shared";
  EXPECT_EQ(input_error_of([&] { cluster_spec_from_options(options, "t"); }),
            "t: unknown key 'intra-lnk' (did you mean 'intra_link'?)");
  options = two_by_two();
  options.erase("device");
  EXPECT_EQ(input_error_of([&] { cluster_spec_from_options(options, "t"); }),
            "t: missing 'device' (required: servers, gpus_per_server, device, memory, intra, inter)");
  options = two_by_two();
  options["gpus-per-server"] = "4";
  EXPECT_EQ(input_error_of([&] { cluster_spec_from_options(options, "t"); }),
            "t: 'gpus-per-server' and 'gpus_per_server' both give gpus_per_server: give it once");
}

}  // namespace
}  // namespace pipegrid
