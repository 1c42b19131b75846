// The simulator's inputs from a Calibration (no LibTorch here).
#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "validate/calibrate.hpp"

namespace pipegrid::validate {

std::string calibration_platform_xml(const Calibration& calibration, int devices, const std::string& description) {
  // SimGrid wants a finite bandwidth: a copy too fast to fit a slope gets 1 PB/s.
  const double bandwidth = std::isfinite(calibration.bandwidth_bytes_per_s) ? calibration.bandwidth_bytes_per_s : 1e15;
  std::string xml = "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n<!--\n";
  xml += fmt::format("  Written by pipegrid calibrate: {}\n", description);
  xml += fmt::format(
      "  cpu:{} worker threads of one process, one intra-op thread each. Each host runs one\n"
      "  action at a time (kind gpu: synchronous execution). A copy between two workers is the\n"
      "  in-process transport's send + receive, fitted over {} message sizes as\n"
      "  latency {:.6g} s + bytes / {:.6g} B/s; one link per pair of hosts.\n"
      "  Optimizer (SGD) step: {:.6g} s per parameter byte (not simulated).\n-->\n",
      devices, calibration.copies.size(), calibration.latency_s, bandwidth, calibration.optimizer_s_per_byte);
  xml += "<platform version=\"4.1\">\n  <zone id=\"calibrated-cpu\" routing=\"Full\">\n";
  for (int d = 0; d < devices; ++d)
    xml += fmt::format("    <host id=\"cpu{}\" speed=\"1Gf\">\n      <prop id=\"kind\" value=\"gpu\"/>\n    </host>\n", d);
  for (int a = 0; a < devices; ++a)
    for (int b = a + 1; b < devices; ++b)
      xml += fmt::format("    <link id=\"copy{}-{}\" bandwidth=\"{:.9g}Bps\" latency=\"{:.9g}s\"/>\n", a, b, bandwidth,
                         calibration.latency_s);
  for (int a = 0; a < devices; ++a)
    for (int b = a + 1; b < devices; ++b)
      xml += fmt::format("    <route src=\"cpu{}\" dst=\"cpu{}\"><link_ctn id=\"copy{}-{}\"/></route>\n", a, b, a, b);
  xml += "  </zone>\n</platform>\n";
  return xml;
}

}  // namespace pipegrid::validate
