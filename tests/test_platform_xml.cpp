// The platform pre-check (sim/platform_xml.hpp): what SimGrid would crash,
// abort or misread on is refused, naming the file, the element and the value.
// No SimGrid engine is started here.

#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>

#include "core/platform_check.hpp"
#include "expect_input_error.hpp"
#include "sim/platform_xml.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

// A two-host platform; `hosts` and `rest` replace its hosts and its links
// and routes.
std::string platform(const std::string& hosts = R"(<host id="a" speed="1Gf"/><host id="b" speed="1Gf"/>)",
                     const std::string& rest = R"(<link id="l" bandwidth="1GBps" latency="1us"/>
      <route src="a" dst="b"><link_ctn id="l"/></route>)",
                     const std::string& zone = R"(id="z" routing="Full")") {
  return fmt::format(R"(<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <zone {}>
      {}
      {}
  </zone>
</platform>
)",
                     zone, hosts, rest);
}

std::string error_of(const std::string& xml) {
  return input_error_of([&] { check_platform_xml("p.xml", xml); });
}

TEST(PlatformXml, AcceptsAValidPlatformAndCountsHosts) {
  const PlatformCheck check = check_platform_xml("p.xml", platform());
  EXPECT_EQ(check.hosts, 2u);
  EXPECT_TRUE(check.warnings.empty());
  // Units as SimGrid reads them, pstate lists, unit-less zeros.
  EXPECT_NO_THROW(check_platform_xml(
      "p.xml", platform(R"(<host id="a" speed="1Gf, 500Mf" pstate="1" core="4"/><host id="b" speed="2megaflops"/>)",
                        R"(<link id="l" bandwidth="10Gbps" latency="0"/><link id="m" bandwidth="1KiBps" latency="2ms"/>)")));
}

TEST(PlatformXml, SpeedsMustBePositiveAndFinite) {
  for (const char* speed : {"0f", "0", "-1f", "inf", "nan", "1e999f", "1Gf,0f", "fast", "1Gz", "", "1e-9f", "1e300f"}) {
    const std::string message = error_of(platform(fmt::format(R"(<host id="a" speed="{}"/><host id="b" speed="1Gf"/>)", speed)));
    EXPECT_CONTAINS(message, "p.xml: host 'a': speed: expected a positive speed");
    EXPECT_CONTAINS(message, fmt::format("found '{}'", speed));
  }
}

TEST(PlatformXml, BandwidthsPositiveLatenciesNonNegative) {
  for (const char* bandwidth : {"0Bps", "0", "-1GBps", "inf", "1e400Bps", "10Gb", "0.5Bps", "1e-300"})
    EXPECT_CONTAINS(error_of(platform(R"(<host id="a" speed="1Gf"/><host id="b" speed="1Gf"/>)",
                                      fmt::format(R"(<link id="l" bandwidth="{}"/>)", bandwidth))),
                    fmt::format("p.xml: link 'l': bandwidth: expected a positive bandwidth (with a unit: '12GBps', '10Gbps'; at least 1 B/s), found '{}'",
                                bandwidth));
  EXPECT_CONTAINS(error_of(platform(R"(<host id="a" speed="1Gf"/><host id="b" speed="1Gf"/>)",
                                    R"(<link id="l" bandwidth="1GBps" latency="-1us"/>)")),
                  "p.xml: link 'l': latency: expected a non-negative duration");
  EXPECT_CONTAINS(error_of(platform(R"(<host id="a" speed="1Gf"/><host id="b" speed="1Gf"/>)",
                                    R"(<link id="l" bandwidth="1GBps" latency="1e300s"/>)")),
                  "at most 1e9 s), found '1e300s'");
  EXPECT_CONTAINS(error_of(platform(R"(<host id="a" speed="1Gf"/><host id="b" speed="1Gf"/>)",
                                    R"(<backbone id="bb" bandwidth="0" latency="1us"/>)")),
                  "p.xml: backbone 'bb': bandwidth");
}

TEST(PlatformXml, ClustersArePrecheckedToo) {
  const std::string base = R"(<cluster id="c" prefix="n" suffix="" radical="0-3" speed="1Gf" bw="1GBps" lat="1us"{}/>)";
  EXPECT_EQ(check_platform_xml("p.xml", platform(fmt::format(fmt::runtime(base), ""), "")).hosts, 4u);
  EXPECT_CONTAINS(error_of(platform(fmt::format(fmt::runtime(base), R"( bb_bw="0")"), "")), "p.xml: cluster 'c': bb_bw: expected a positive");
  EXPECT_CONTAINS(error_of(platform(R"(<cluster id="c" prefix="n " suffix="" radical="0-1" speed="1Gf" bw="1GBps" lat="0"/>)", "")),
                  "cluster 'c': host 'n 0': it contains a space");
  EXPECT_CONTAINS(error_of(platform(R"(<cluster id="c" prefix="n" suffix="" radical="0-99999999999" speed="1Gf" bw="1GBps" lat="0"/>)", "")),
                  "radical: expected an integer");
  EXPECT_CONTAINS(error_of(platform(R"(<cluster id="c" prefix="n" suffix="" radical="0-16384" speed="1Gf" bw="1GBps" lat="0"/>)", "")),
                  "more than 16384 hosts");
  EXPECT_EQ(check_platform_xml("p.xml", platform(R"(<cluster id="c" prefix="n" suffix="" radical="0-16383" speed="1Gf" bw="1GBps" lat="0"/>)", "")).hosts,
            16384u);
}

TEST(PlatformXml, RoutesDeclaredTwiceNameTheRoute) {
  const std::string hosts = R"(<host id="a" speed="1Gf"/><host id="b" speed="1Gf"/><link id="l" bandwidth="1GBps"/>)";
  EXPECT_CONTAINS(error_of(platform(hosts, R"(<route src="a" dst="b" symmetrical="NO"><link_ctn id="l"/></route>
       <route src="b" dst="a"><link_ctn id="l"/></route>)")),
                  "p.xml: zone 'z': the route from 'a' to 'b' is declared twice: by route a -> b and by the symmetrical route b -> a");
  EXPECT_CONTAINS(error_of(platform(hosts, R"(<route src="a" dst="b" symmetrical="NO"><link_ctn id="l"/></route>
       <route src="a" dst="b" symmetrical="NO"><link_ctn id="l"/></route>)")),
                  "the route from 'a' to 'b' is declared twice");
  // One each way, not symmetrical: fine.
  EXPECT_NO_THROW(check_platform_xml("p.xml", platform(hosts, R"(<route src="a" dst="b" symmetrical="NO"><link_ctn id="l"/></route>
       <route src="b" dst="a" symmetrical="no"><link_ctn id="l"/></route>)")));
  EXPECT_CONTAINS(error_of(platform(hosts, R"(<route src="a" dst="b"><link_ctn id="l"/></route>)", R"(id="z" routing="None")")),
                  "zone 'z' (routing=\"None\") takes no routes, found route a -> b");
  EXPECT_CONTAINS(error_of(platform(hosts, "", R"(id="z" routing="Fulll")")), "routing: expected Full, Floyd");
}

TEST(PlatformXml, IdsAreUniqueAndCarriable) {
  EXPECT_CONTAINS(error_of(platform(R"(<host id="a" speed="1Gf"/><host id="a" speed="1Gf"/>)", "")),
                  "two elements are named 'a' (a host and a host)");
  EXPECT_CONTAINS(error_of(platform(R"(<host id="a" speed="1Gf"/><host id="z" speed="1Gf"/>)", "")),
                  "two elements are named 'z' (a zone and a host)");
  EXPECT_CONTAINS(error_of(platform(R"(<host id="a" speed="1Gf"/>)", R"(<link id="l" bandwidth="1Bps"/><link id="l" bandwidth="1Bps"/>)")),
                  "two links are named 'l'");
  EXPECT_CONTAINS(error_of(platform(R"(<host id="a,b" speed="1Gf"/>)", "")), "host 'a,b': it contains a comma");
  const std::string message = error_of(platform("<host id=\"a\xFF\" speed=\"1Gf\"/>", ""));
  EXPECT_CONTAINS(message, "host 'a\\xFF': byte \\xFF is not valid UTF-8");
  EXPECT_TRUE(valid_utf8(message));
}

TEST(PlatformXml, PropertiesNearMissesAreErrorsOthersWarnings) {
  EXPECT_CONTAINS(error_of(platform(R"(<host id="a" speed="1Gf"><prop id="mem" value="1GiB"/></host>)", "")),
                  "p.xml: host 'a': unknown property 'mem': did you mean 'memory'?");
  EXPECT_CONTAINS(error_of(platform(R"(<host id="a" speed="1Gf"><prop id="Kind" value="gpu"/></host>)", "")),
                  "did you mean 'kind'?");
  EXPECT_CONTAINS(error_of(platform(R"(<host id="a" speed="1Gf"><prop id="memory" value="1GiB"/><prop id="memory" value="2GiB"/></host>)", "")),
                  "host 'a': property 'memory' is given twice");
  EXPECT_CONTAINS(error_of(platform(R"(<host id="a" speed="1Gf"><prop id="memory" value="lots"/></host>)", "")),
                  "p.xml: host 'a': property 'memory': expected a non-negative size");
  EXPECT_CONTAINS(error_of(platform(R"(<cluster id="c" prefix="n" suffix="" radical="0-1" speed="1Gf" bw="1GBps" lat="0"><prop id="speed_factr" value="2"/></cluster>)", "")),
                  "host 'n0': unknown property 'speed_factr': did you mean 'speed_factor'?");
  const PlatformCheck check =
      check_platform_xml("p.xml", platform(R"(<host id="a" speed="1Gf"><prop id="wattage_per_state" value="1:2"/></host>)", ""));
  ASSERT_EQ(check.warnings.size(), 1u);
  EXPECT_CONTAINS(check.warnings[0], "p.xml: host 'a': unknown property 'wattage_per_state' ignored (pipegrid reads kind,");
}

TEST(PlatformXml, DocumentLevelProblems) {
  EXPECT_CONTAINS(error_of("<platform version=\"4.1\"><zone id=\"z\" routing=\"Full\">"), "p.xml:1: not a valid SimGrid platform: malformed XML");
  EXPECT_CONTAINS(error_of("<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"x\">\n<platform version=\"4.1\">\n<host id=\"a\" speed=\"1Gf\" bad>\n</platform>"),
                  "p.xml:4: not a valid SimGrid platform: malformed XML");
  EXPECT_CONTAINS(error_of("<?xml version='1.0'?>\n<platform version=\"4.1\"></platform>"), "expected <!DOCTYPE platform");
  for (const char* version : {"-1e999", "3", "5", "4.1x", ""}) {
    std::string xml = platform();
    xml.replace(xml.find("4.1"), 3, version);
    EXPECT_CONTAINS(error_of(xml), fmt::format("p.xml: <platform version>: expected 4.1 (or 4.0; SimGrid 3.32 reads version 4 files), found '{}'", version));
  }
  EXPECT_CONTAINS(error_of("<?xml version='1.0'?>\n<!DOCTYPE x SYSTEM \"x\">\n<other/>"), "expected one <platform> element at the top, found <other>");
  std::string pstate = platform(R"(<host id="a" speed="1Gf" pstate="1"/>)", "");
  EXPECT_CONTAINS(error_of(pstate), "p.xml: host 'a': pstate: expected an integer from 0 to 0, found '1'");
}

}  // namespace
}  // namespace pipegrid
