// The cluster platform generator (generators/cluster_platform.hpp): options to a
// spec, with errors that name the option, and the spec to exact XML.

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "generators/cluster_platform.hpp"
#include "expect_input_error.hpp"

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
  Host speed 1Tf: not used for profile-timed work. Hosts in pipeline order: s0-gpu0, ..., s1-gpu1.
-->
<platform version="4.1">
  <zone id="cluster" routing="Full">
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
      <link id="s0-gpu0-link" bandwidth="150GBps" latency="1us" sharing_policy="SPLITDUPLEX"/>
      <link id="s0-gpu1-link" bandwidth="150GBps" latency="1us" sharing_policy="SPLITDUPLEX"/>
      <link id="s0-nic" bandwidth="3.125GBps" latency="2.5us" sharing_policy="SPLITDUPLEX"/>
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
      <link id="s1-gpu0-link" bandwidth="150GBps" latency="1us" sharing_policy="SPLITDUPLEX"/>
      <link id="s1-gpu1-link" bandwidth="150GBps" latency="1us" sharing_policy="SPLITDUPLEX"/>
      <link id="s1-nic" bandwidth="3.125GBps" latency="2.5us" sharing_policy="SPLITDUPLEX"/>
      <route src="s1-gpu0" dst="s1-gpu1" symmetrical="NO"><link_ctn id="s1-gpu0-link" direction="UP"/><link_ctn id="s1-gpu1-link" direction="DOWN"/></route>
      <route src="s1-gpu1" dst="s1-gpu0" symmetrical="NO"><link_ctn id="s1-gpu1-link" direction="UP"/><link_ctn id="s1-gpu0-link" direction="DOWN"/></route>
      <route src="s1-gpu0" dst="s1-router" symmetrical="NO"><link_ctn id="s1-nic" direction="UP"/></route>
      <route src="s1-router" dst="s1-gpu0" symmetrical="NO"><link_ctn id="s1-nic" direction="DOWN"/></route>
      <route src="s1-gpu1" dst="s1-router" symmetrical="NO"><link_ctn id="s1-nic" direction="UP"/></route>
      <route src="s1-router" dst="s1-gpu1" symmetrical="NO"><link_ctn id="s1-nic" direction="DOWN"/></route>
    </zone>
    <link id="switch" bandwidth="3.125GBps" latency="0s" sharing_policy="FATPIPE"/>
    <zoneRoute src="server0" dst="server1" gw_src="s0-router" gw_dst="s1-router" symmetrical="NO"><link_ctn id="switch"/></zoneRoute>
    <zoneRoute src="server1" dst="server0" gw_src="s1-router" gw_dst="s0-router" symmetrical="NO"><link_ctn id="switch"/></zoneRoute>
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
  EXPECT_CONTAINS(single, R"(<zoneRoute src="server2" dst="server1" gw_src="s2-router" gw_dst="s1-router")");
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
  EXPECT_EQ(error_with("servers", "0"), "platform cluster: --servers: expected an integer from 1 to 256, found '0'");
  EXPECT_EQ(error_with("servers", "two"), "platform cluster: --servers: expected an integer from 1 to 256, found 'two'");
  EXPECT_EQ(error_with("servers", "2.5"), "platform cluster: --servers: expected an integer from 1 to 256, found '2.5'");
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
            "H100, H200, VCU118, VCU129 (docs/devices.md)");
  EXPECT_EQ(error_with("device", "v100"),
            "platform cluster: --device: unknown device 'v100': expected one of the device catalogue's V100, A100, "
            "H100, H200, VCU118, VCU129 (docs/devices.md)");
  EXPECT_EQ(error_with("intra_link", "ring"), "platform cluster: --intra_link: expected per-gpu or shared, found 'ring'");
  EXPECT_CONTAINS(error_with("speed", "fast"), "platform cluster: --speed: expected a speed in flop/s");
  EXPECT_CONTAINS(error_with("speed", "1e30f"), "found '1e30f'");
  std::map<std::string, std::string> many = two_by_two();
  many["servers"] = "128";
  many["gpus_per_server"] = "64";
  EXPECT_EQ(input_error_of([&] { cluster_spec_from_options(many, "t"); }),
            "t: 128 servers x 64 GPUs make 8192 hosts; a platform has at most 4096");
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
            "inter, intra_link, speed)");
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
