#include "generators/cluster_platform.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "core/device_model.hpp"
#include "core/error.hpp"
#include "core/platform.hpp"
#include "core/platform_check.hpp"
#include "core/suggest.hpp"

namespace pipegrid {

namespace {

using Units = std::vector<std::pair<const char*, double>>;  ///< largest first

const Units& bandwidth_units() {
  static const Units units = {{"TBps", 1e12}, {"GBps", 1e9}, {"MBps", 1e6}, {"kBps", 1e3}, {"Bps", 1}};
  return units;
}
const Units& time_units() {
  static const Units units = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}, {"ps", 1e-12}};
  return units;
}
const Units& speed_units() {
  static const Units units = {{"Ef", 1e18}, {"Pf", 1e15}, {"Tf", 1e12}, {"Gf", 1e9}, {"Mf", 1e6}, {"kf", 1e3}, {"f", 1}};
  return units;
}

// `value` with a unit, as text that reads back (number x scale, as SimGrid
// and pipegrid's check compute it) to exactly `value`: the shortest such
// text, or the one in the largest unit whose number is at least 1 and which
// is at most a character longer ("25Gbps" is written 3.125GBps rather than
// 3125MBps; half of 5us 2.5us, 0.5 ms 0.5ms). The base unit (scale 1)
// always reads back.
std::string quantity_text(double value, const Units& units) {
  std::vector<std::pair<std::string, bool>> texts;  // reads back, in unit order; whether its number is >= 1
  std::size_t shortest = std::string::npos;
  for (const auto& [unit, scale] : units) {
    const double scaled = value / scale;
    const std::string number = fmt::format("{}", scaled);
    std::size_t length = 0;
    const std::optional<double> back = scan_number(number, &length);
    if (!back || length != number.size() || *back * scale != value) continue;
    texts.emplace_back(number + unit, scaled >= 1);
    if (shortest == std::string::npos || texts.back().first.size() < texts[shortest].first.size()) shortest = texts.size() - 1;
  }
  for (const auto& [text, at_least_one] : texts)
    if (at_least_one && text.size() <= texts[shortest].first.size() + 1) return text;
  return texts[shortest].first;
}

std::string canonical_key(std::string key) {
  if (key.rfind("--", 0) == 0) key.erase(0, 2);
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

std::string trimmed(const std::string& text) {
  std::size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

int integer_option(const std::string& text, int max, const std::string& what) {
  const std::string value = trimmed(text);
  bool digits = !value.empty() && value.size() <= 9;
  for (const char c : value) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  const long number = digits ? std::stol(value) : 0;
  if (!digits || number < 1 || number > max)
    throw InputError(fmt::format("{}: expected an integer from 1 to {}, found '{}'", what, max, printable(text)));
  return static_cast<int>(number);
}

ClusterLink link_option(const std::string& text, const std::string& what) {
  const std::size_t comma = text.find(',');
  const std::string bandwidth = trimmed(text.substr(0, comma));
  const std::string latency = comma == std::string::npos ? "" : trimmed(text.substr(comma + 1));
  if (bandwidth.empty() || (comma != std::string::npos && latency.empty()))
    throw InputError(fmt::format("{}: expected BANDWIDTH or BANDWIDTH,LATENCY (such as 25Gbps,5us), found '{}'", what,
                                 printable(text)));
  ClusterLink link;
  link.bandwidth_Bps = parse_bandwidth(bandwidth, what + " (bandwidth)");
  if (link.bandwidth_Bps < 1)
    throw InputError(fmt::format("{} (bandwidth): expected at least 1 B/s, found '{}'", what, printable(bandwidth)));
  if (!latency.empty()) {
    link.latency_s = parse_duration(latency, what + " (latency)");
    if (link.latency_s > 1e9)
      throw InputError(fmt::format("{} (latency): expected at most 1e9 s, found '{}'", what, printable(latency)));
  }
  return link;
}

double speed_option(const std::string& text, const std::string& what) {
  const std::string value = trimmed(text);
  std::size_t length = 0;
  const std::optional<double> number = scan_number(value, &length);
  double scale = 0;
  if (number) {
    const std::string unit = value.substr(length);
    if (unit.empty() || unit == "flops") scale = 1;
    for (const auto& [name, factor] : speed_units())
      if (unit == name) scale = factor;
  }
  const double flops = number ? *number * scale : 0;
  if (!number || scale == 0 || !(flops >= 1e-6 && flops <= 1e24))
    throw InputError(fmt::format("{}: expected a speed in flop/s from 1e-6 to 1e24, optionally with a SimGrid unit (f, kf, "
                                 "Mf, Gf, Tf, Pf, Ef), found '{}'",
                                 what, printable(text)));
  return flops;
}

double oversubscription_option(const std::string& text, const std::string& what) {
  const std::string value = trimmed(text);
  std::size_t length = 0;
  const std::optional<double> number = scan_number(value, &length);
  if (!number || length != value.size() || !(*number >= 1 && *number <= kMaxClusterOversubscription))
    throw InputError(fmt::format("{}: expected a number from 1 to {:g} (a leaf's downlink to uplink bandwidth: 1 is "
                                 "non-blocking, 2 is 2:1), found '{}'",
                                 what, kMaxClusterOversubscription, printable(text)));
  return *number;
}

// A cluster option's NCCL efficiency: a number in (0, 1], or none (1).
double nccl_efficiency_option(const std::string& text, const std::string& what) {
  const std::string value = trimmed(text);
  if (value == "none") return 1;
  std::size_t length = 0;
  const std::optional<double> number = scan_number(value, &length);
  if (!number || length != value.size() || !(*number > 0 && *number <= 1))
    throw InputError(fmt::format("{}: expected a number in (0, 1] (the share of the line rate NCCL achieves) or none, "
                                 "found '{}'",
                                 what, printable(text)));
  return *number;
}

// A cluster option's NCCL latency: a duration of at most 1e9 s, or none (0).
double nccl_latency_option(const std::string& text, const std::string& what) {
  const std::string value = trimmed(text);
  if (value == "none") return 0;
  const double seconds = parse_duration(value, what);
  if (seconds > 1e9) throw InputError(fmt::format("{}: expected at most 1e9 s, found '{}'", what, printable(text)));
  return seconds;
}

// ` <prop .../>`s of the NCCL values that are not the defaults.
std::string nccl_properties(const LinkNccl& nccl) {
  std::string text;
  if (nccl.efficiency != 1) text += fmt::format("<prop id=\"{}\" value=\"{}\"/>", kNcclEfficiencyProperty, nccl.efficiency);
  if (nccl.latency_s != 0)
    text += fmt::format("<prop id=\"{}\" value=\"{}\"/>", kNcclLatencyProperty, quantity_text(nccl.latency_s, time_units()));
  return text;
}

// A <link> element (`attributes` after its id) with the NCCL properties.
std::string link_element(const std::string& indent, const std::string& attributes, const LinkNccl& nccl) {
  const std::string properties = nccl_properties(nccl);
  return properties.empty() ? fmt::format("{}<link {}/>\n", indent, attributes)
                            : fmt::format("{}<link {}>{}</link>\n", indent, attributes, properties);
}

// For the file's comment: "77% of line rate, 10us per operation".
std::string nccl_comment(const LinkNccl& nccl) {
  if (nccl.is_default()) return "line rate, no start latency";
  return fmt::format("{:g}% of line rate, {} per operation", nccl.efficiency * 100,
                     nccl.latency_s == 0 ? std::string("no start latency") : quantity_text(nccl.latency_s, time_units()));
}

}  // namespace

ClusterNccl cluster_nccl_defaults(const std::string& device, IntraLink intra_link) {
  // docs/platforms.md, NCCL defaults: the sources, and what is unverified.
  constexpr double kNvlink3Efficiency = 0.77;   // A100: ~230 of 300 GB/s (NVIDIA/nccl-tests issue 149)
  constexpr double kNvlink4Efficiency = 0.822;  // H100/H200: 370 of 450 GB/s (NVIDIA/nccl-tests issue 212)
  constexpr double kIntraLatency = 10 * 1e-6;     // ~10.1 us at 32 B on 2 GPUs (NVIDIA/nccl issue 583; approximate)
  constexpr double kNetworkEfficiency = 0.92;   // NCCL Simple over IB/RoCE: ~90-95% of the NIC (unverified)
  constexpr double kNetworkLatency = 25 * 1e-6;   // 2-node operation (docs/platforms.md: from NVIDIA/nccl issue 1244)
  ClusterNccl nccl;
  const DeviceModel* model = find_device_model(device);
  if (model == nullptr || model->kind != DeviceKind::Gpu) return nccl;
  const auto named = [&](const char* prefix) { return device.rfind(prefix, 0) == 0; };
  if (intra_link == IntraLink::PerGpu) {
    if (named("V100") || named("A100")) nccl.intra = {kNvlink3Efficiency, kIntraLatency};
    if (named("H100") || named("H200") || named("H800")) nccl.intra = {kNvlink4Efficiency, kIntraLatency};
  }
  nccl.inter = {kNetworkEfficiency, kNetworkLatency};
  return nccl;
}

const std::vector<std::string>& cluster_option_names() {
  static const std::vector<std::string> names = {"servers", "gpus_per_server", "device",     "memory",
                                                 "memory_reserve", "intra", "inter", "intra_link",
                                                 "speed",   "nic",             "servers_per_leaf", "oversubscription",
                                                 "intra_nccl_efficiency", "inter_nccl_efficiency",
                                                 "intra_nccl_latency", "inter_nccl_latency"};
  return names;
}

ClusterSpec cluster_spec_from_options(const std::map<std::string, std::string>& options, const std::string& where) {
  const std::vector<std::string>& names = cluster_option_names();
  // canonical name -> (the key as given, its value)
  std::map<std::string, std::pair<std::string, std::string>> given;
  for (const auto& [key, value] : options) {
    const std::string name = canonical_key(key);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string nearest;
      std::size_t best = 3;
      for (const std::string& candidate : names) {
        const std::size_t distance = edit_distance(name, candidate);
        if (distance < best || (nearest.empty() && name.size() >= 3 && candidate.rfind(name, 0) == 0))
          nearest = candidate, best = std::min(best, distance);
      }
      std::string known;
      for (const std::string& candidate : names) known += (known.empty() ? "" : ", ") + candidate;
      throw InputError(nearest.empty()
                           ? fmt::format("{}: unknown key '{}' (expected one of {})", where, printable(key), known)
                           : fmt::format("{}: unknown key '{}' (did you mean '{}'?)", where, printable(key), nearest));
    }
    const auto [it, added] = given.emplace(name, std::pair{key, value});
    if (!added)
      throw InputError(fmt::format("{}: '{}' and '{}' both give {}: give it once", where, printable(it->second.first),
                                   printable(key), name));
  }
  for (const char* required : {"servers", "gpus_per_server", "device", "memory", "intra", "inter"})
    if (!given.count(required))
      throw InputError(fmt::format("{}: missing '{}' (required: servers, gpus_per_server, device, memory, intra, inter)", where,
                                   required));
  const auto what = [&](const std::string& name) { return fmt::format("{}: {}", where, printable(given.at(name).first)); };
  const auto value = [&](const std::string& name) -> const std::string& { return given.at(name).second; };

  ClusterSpec spec;
  spec.servers = integer_option(value("servers"), kMaxClusterServers, what("servers"));
  spec.gpus_per_server = integer_option(value("gpus_per_server"), kMaxClusterGpusPerServer, what("gpus_per_server"));
  if (spec.servers * spec.gpus_per_server > kMaxClusterHosts)
    throw InputError(fmt::format("{}: {} servers x {} GPUs make {} hosts; a platform has at most {}", where, spec.servers,
                                 spec.gpus_per_server, spec.servers * spec.gpus_per_server, kMaxClusterHosts));
  const long long intra_routes = static_cast<long long>(spec.servers) * spec.gpus_per_server * (spec.gpus_per_server - 1);
  if (intra_routes > kMaxClusterIntraRoutes)
    throw InputError(fmt::format("{}: {} servers x {} GPUs make {} routes inside servers (one per ordered pair of a "
                                 "server's GPUs); a generated platform has at most {}, which keeps the file under "
                                 "pipegrid's 64 MiB limit: use fewer GPUs per server or fewer servers",
                                 where, spec.servers, spec.gpus_per_server, intra_routes, kMaxClusterIntraRoutes));
  spec.device = trimmed(value("device"));
  const bool device_ok = !spec.device.empty() && spec.device.size() <= 64 &&
                         std::all_of(spec.device.begin(), spec.device.end(), [](char c) {
                           return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '+' || c == '-';
                         });
  if (!device_ok)
    throw InputError(fmt::format("{}: expected a device type name of at most 64 letters, digits, '.', '_', '+' or '-' "
                                 "(such as V100), found '{}'",
                                 what("device"), printable(value("device"))));
  // A name outside the catalogue is refused at once: generated profiles are
  // timed by the device's model, and a misspelt name would surface only
  // later, as layers nobody can time (docs/devices.md, Catalogue).
  if (!find_device_model(spec.device))
    throw InputError(fmt::format("{}: unknown device '{}': expected one of the device catalogue's {} "
                                 "(docs/devices.md)",
                                 what("device"), spec.device, device_catalogue_names()));
  spec.memory = trimmed(value("memory"));
  if (!(parse_bytes(spec.memory, what("memory")) > 0))
    throw InputError(fmt::format("{}: expected a memory size above 0 (such as 16GiB), found '{}'", what("memory"),
                                 printable(value("memory"))));
  if (given.count("memory_reserve")) {
    spec.memory_reserve = trimmed(value("memory_reserve"));
    const MemoryReserve reserve = parse_memory_reserve(spec.memory_reserve, what("memory_reserve"));
    if (reserve.bytes && *reserve.bytes >= parse_bytes(spec.memory, what("memory")))
      throw InputError(fmt::format("{}: expected a reserve below the memory ({}), found '{}'", what("memory_reserve"),
                                   spec.memory, printable(value("memory_reserve"))));
  }
  spec.intra = link_option(value("intra"), what("intra"));
  spec.inter = link_option(value("inter"), what("inter"));
  if (given.count("intra_link")) {
    const std::string link = trimmed(value("intra_link"));
    if (link == "per-gpu") spec.intra_link = IntraLink::PerGpu;
    else if (link == "shared") spec.intra_link = IntraLink::Shared;
    else
      throw InputError(fmt::format("{}: expected per-gpu or shared, found '{}'", what("intra_link"), printable(value("intra_link"))));
  }
  if (given.count("speed")) spec.speed_flops = speed_option(value("speed"), what("speed"));
  if (given.count("nic")) {
    const std::string nic = trimmed(value("nic"));
    if (nic == "per-server") spec.nic = NicLayout::PerServer;
    else if (nic == "per-gpu") spec.nic = NicLayout::PerGpu;
    else throw InputError(fmt::format("{}: expected per-server or per-gpu, found '{}'", what("nic"), printable(value("nic"))));
  }
  if (given.count("servers_per_leaf")) {
    spec.servers_per_leaf = integer_option(value("servers_per_leaf"), spec.servers, what("servers_per_leaf"));
    if (spec.servers % spec.servers_per_leaf != 0)
      throw InputError(fmt::format("{}: expected a divisor of the {} servers (every leaf switch holds as many), found {}",
                                   what("servers_per_leaf"), spec.servers, spec.servers_per_leaf));
  }
  const int leaves = spec.servers_per_leaf > 0 ? spec.servers / spec.servers_per_leaf : 1;
  const int on_one_switch = leaves > 1 ? spec.servers_per_leaf : spec.servers;
  if (on_one_switch > kMaxClusterSwitchPorts)
    throw InputError(fmt::format("{}: {} servers on one switch; a switch takes at most {} (SimGrid's route cache for a "
                                 "switch grows with the square of what it connects): {} --servers-per-leaf",
                                 given.count("servers_per_leaf") ? what("servers_per_leaf") : where, on_one_switch,
                                 kMaxClusterSwitchPorts, given.count("servers_per_leaf") ? "use a smaller" : "give"));
  if (leaves > kMaxClusterSwitchPorts)
    throw InputError(fmt::format("{}: {} leaves on the spine; the spine takes at most {}: use a larger --servers-per-leaf",
                                 what("servers_per_leaf"), leaves, kMaxClusterSwitchPorts));
  if (given.count("oversubscription")) {
    spec.oversubscription = oversubscription_option(value("oversubscription"), what("oversubscription"));
    if (leaves < 2)
      throw InputError(fmt::format("{}: oversubscription applies to the uplinks of two or more leaf switches; give "
                                   "--servers-per-leaf below the {} servers, found {}",
                                   what("oversubscription"), spec.servers,
                                   given.count("servers_per_leaf") ? fmt::format("{} servers per leaf", spec.servers_per_leaf)
                                                                   : std::string("no servers per leaf")));
  }
  const ClusterNccl nccl = cluster_nccl_defaults(spec.device, spec.intra_link);
  spec.intra_nccl = nccl.intra;
  spec.inter_nccl = nccl.inter;
  if (given.count("intra_nccl_efficiency"))
    spec.intra_nccl.efficiency = nccl_efficiency_option(value("intra_nccl_efficiency"), what("intra_nccl_efficiency"));
  if (given.count("inter_nccl_efficiency"))
    spec.inter_nccl.efficiency = nccl_efficiency_option(value("inter_nccl_efficiency"), what("inter_nccl_efficiency"));
  if (given.count("intra_nccl_latency"))
    spec.intra_nccl.latency_s = nccl_latency_option(value("intra_nccl_latency"), what("intra_nccl_latency"));
  if (given.count("inter_nccl_latency"))
    spec.inter_nccl.latency_s = nccl_latency_option(value("inter_nccl_latency"), what("inter_nccl_latency"));
  return spec;
}

std::string cluster_platform_xml(const ClusterSpec& spec) {
  const int S = spec.servers, G = spec.gpus_per_server;
  const bool per_gpu = spec.intra_link == IntraLink::PerGpu;
  const bool nic_per_gpu = spec.nic == NicLayout::PerGpu;
  const int leaves = spec.servers_per_leaf > 0 ? S / spec.servers_per_leaf : 1;
  const int servers_per_leaf = S / leaves;
  const std::string intra_bandwidth = quantity_text(spec.intra.bandwidth_Bps, bandwidth_units());
  const std::string inter_bandwidth = quantity_text(spec.inter.bandwidth_Bps, bandwidth_units());
  const std::string intra_latency = quantity_text(spec.intra.latency_s, time_units());
  const std::string inter_latency = quantity_text(spec.inter.latency_s, time_units());
  const std::string half_intra_latency = quantity_text(spec.intra.latency_s / 2, time_units());
  const std::string half_inter_latency = quantity_text(spec.inter.latency_s / 2, time_units());
  const double server_nic_Bps = spec.inter.bandwidth_Bps * (nic_per_gpu ? G : 1);
  const std::string uplink_bandwidth =
      quantity_text(servers_per_leaf * server_nic_Bps / spec.oversubscription, bandwidth_units());
  const std::string speed = quantity_text(spec.speed_flops, speed_units());
  const auto host = [](int s, int g) { return fmt::format("s{}-gpu{}", s, g); };
  const auto nic = [&](int s, int g) { return nic_per_gpu ? fmt::format("s{}-gpu{}-nic", s, g) : fmt::format("s{}-nic", s); };

  std::string xml;
  xml += "<?xml version='1.0'?>\n";
  xml += "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n";
  xml += "<!--\n";
  // (No user text in the comment: a name may hold "--", which ends none.)
  xml += fmt::format("  Written by pipegrid platform cluster: {} server{} x {} GPU{} ({} hosts).\n", S, S == 1 ? "" : "s", G,
                     G == 1 ? "" : "s", S * G);
  if (G > 1 && per_gpu)
    xml += fmt::format("  Inside a server: each GPU its own full-duplex link sK-gpuG-link ({}, {}); GPU a to GPU b\n"
                       "  crosses a's link up and b's link down: {} + bytes / {} alone on its route.\n",
                       intra_bandwidth, half_intra_latency, intra_latency, intra_bandwidth);
  else if (G > 1)
    xml += fmt::format("  Inside a server: one link sK-bus ({}, {}) that every transfer inside the server shares,\n"
                       "  both directions: {} + bytes / {} alone on its route.\n",
                       intra_bandwidth, intra_latency, intra_latency, intra_bandwidth);
  if (S > 1 && leaves == 1)
    xml += fmt::format("  Between servers: the sender's NIC {} up ({}, {}), the non-blocking switch, the receiver's\n"
                       "  NIC down: {} + bytes / {} alone on its route; {}.\n",
                       nic_per_gpu ? "sK-gpuG-nic" : "sK-nic", inter_bandwidth, half_inter_latency, inter_latency,
                       inter_bandwidth,
                       nic_per_gpu ? "a GPU's sends share its NIC, so do its receives"
                                   : "a server's sends share its NIC, so do its receives");
  else if (S > 1)
    xml += fmt::format("  Between servers: the sender's NIC {} up ({}, {}), its leaf switch, and for another leaf\n"
                       "  the leaf's uplink up ({}, no latency), the spine and the other leaf's uplink down, then\n"
                       "  the receiver's leaf and NIC down: {} + bytes / {} alone on its route; {} servers per leaf,\n"
                       "  uplink = {} servers x {} per server / oversubscription {}.\n",
                       nic_per_gpu ? "sK-gpuG-nic" : "sK-nic", inter_bandwidth, half_inter_latency, uplink_bandwidth,
                       inter_latency, inter_bandwidth, servers_per_leaf, servers_per_leaf,
                       quantity_text(server_nic_Bps, bandwidth_units()), spec.oversubscription);
  if ((G > 1 && !spec.intra_nccl.is_default()) || (S > 1 && !spec.inter_nccl.is_default())) {
    std::string levels;
    if (G > 1) levels += fmt::format("inside a server {}", nccl_comment(spec.intra_nccl));
    if (S > 1) levels += fmt::format("{}between servers {}", levels.empty() ? "" : ";\n  ", nccl_comment(spec.inter_nccl));
    xml += fmt::format("  NCCL (link properties nccl_efficiency, nccl_latency): {}.\n", levels);
  }
  xml += fmt::format("  Host speed {}: not used for profile-timed work. Hosts in pipeline order: s0-gpu0, ..., s{}-gpu{}.\n", speed,
                     S - 1, G - 1);
  xml += "-->\n";
  xml += "<platform version=\"4.1\">\n";
  xml += fmt::format("  <zone id=\"cluster\" routing=\"{}\">\n", S > 1 ? "DijkstraCache" : "Full");

  // A server's links: its GPUs' (or its bus) and its NICs. With two or more
  // servers they are declared at the top of the root zone, where SimGrid
  // 3.32 finds a link by name at once (it searches the zone tree depth
  // first, which makes a link per server zone cost a search of the zones
  // before it: minutes at 2,048 servers).
  const auto server_links = [&](int s, const std::string& indent) {
    if (G > 1) {
      if (per_gpu)
        for (int g = 0; g < G; ++g)
          xml += link_element(indent,
                              fmt::format("id=\"{}-link\" bandwidth=\"{}\" latency=\"{}\" sharing_policy=\"SPLITDUPLEX\"",
                                          host(s, g), intra_bandwidth, half_intra_latency),
                              spec.intra_nccl);
      else
        xml += link_element(indent,
                            fmt::format("id=\"s{}-bus\" bandwidth=\"{}\" latency=\"{}\" sharing_policy=\"SHARED\"", s,
                                        intra_bandwidth, intra_latency),
                            spec.intra_nccl);
    }
    if (S > 1)
      for (int g = 0; g < (nic_per_gpu ? G : 1); ++g)
        xml += link_element(indent,
                            fmt::format("id=\"{}\" bandwidth=\"{}\" latency=\"{}\" sharing_policy=\"SPLITDUPLEX\"", nic(s, g),
                                        inter_bandwidth, half_inter_latency),
                            spec.inter_nccl);
  };
  // A server's zone, indented by `indent`.
  const auto server_zone = [&](int s, const std::string& indent) {
    xml += fmt::format("{}<zone id=\"server{}\" routing=\"Full\">\n", indent, s);
    for (int g = 0; g < G; ++g) {
      xml += fmt::format("{}  <host id=\"{}\" speed=\"{}\">\n", indent, host(s, g), speed);
      xml += fmt::format("{}    <prop id=\"kind\" value=\"gpu\"/>\n", indent);
      xml += fmt::format("{}    <prop id=\"device\" value=\"{}\"/>\n", indent, spec.device);
      xml += fmt::format("{}    <prop id=\"memory\" value=\"{}\"/>\n", indent, spec.memory);
      xml += fmt::format("{}    <prop id=\"memory_reserve\" value=\"{}\"/>\n", indent, spec.memory_reserve);
      xml += fmt::format("{}  </host>\n", indent);
    }
    const std::string router = fmt::format("s{}-router", s);
    if (S > 1) xml += fmt::format("{}  <router id=\"{}\"/>\n", indent, router);
    if (S == 1) server_links(s, indent + "  ");
    for (int a = 0; a < G; ++a)
      for (int b = 0; b < G; ++b) {
        if (a == b) continue;
        const std::string links =
            per_gpu ? fmt::format("<link_ctn id=\"{}-link\" direction=\"UP\"/><link_ctn id=\"{}-link\" direction=\"DOWN\"/>",
                                  host(s, a), host(s, b))
                    : fmt::format("<link_ctn id=\"s{}-bus\"/>", s);
        xml += fmt::format("{}  <route src=\"{}\" dst=\"{}\" symmetrical=\"NO\">{}</route>\n", indent, host(s, a), host(s, b),
                           links);
      }
    if (S > 1)
      for (int g = 0; g < G; ++g) {
        xml += fmt::format("{}  <route src=\"{}\" dst=\"{}\" symmetrical=\"NO\"><link_ctn id=\"{}\" direction=\"UP\"/></route>\n",
                           indent, host(s, g), router, nic(s, g));
        xml += fmt::format(
            "{}  <route src=\"{}\" dst=\"{}\" symmetrical=\"NO\"><link_ctn id=\"{}\" direction=\"DOWN\"/></route>\n", indent,
            router, host(s, g), nic(s, g));
      }
    xml += fmt::format("{}</zone>\n", indent);
  };
  // A switch: a zone `name` holding its router `name-router`; its FATPIPE
  // link `name` is declared with the other links.
  const auto switch_zone = [&](const std::string& name, const std::string& indent) {
    xml += fmt::format("{}<zone id=\"{}\" routing=\"Full\">\n", indent, name);
    xml += fmt::format("{}  <router id=\"{}-router\"/>\n", indent, name);
    xml += fmt::format("{}</zone>\n", indent);
  };
  const auto switch_link = [&](const std::string& name) {
    xml += fmt::format("    <link id=\"{}\" bandwidth=\"{}\" latency=\"0s\" sharing_policy=\"FATPIPE\"/>\n", name,
                       inter_bandwidth);
  };
  const auto server_routes = [&](const std::string& switch_name, int first, int last, const std::string& indent) {
    for (int s = first; s < last; ++s) {
      xml += fmt::format("{}<zoneRoute src=\"server{}\" dst=\"{}\" gw_src=\"s{}-router\" gw_dst=\"{}-router\" "
                         "symmetrical=\"NO\"><link_ctn id=\"{}\"/></zoneRoute>\n",
                         indent, s, switch_name, s, switch_name, switch_name);
      xml += fmt::format("{}<zoneRoute src=\"{}\" dst=\"server{}\" gw_src=\"{}-router\" gw_dst=\"s{}-router\" "
                         "symmetrical=\"NO\"><link_ctn id=\"{}\"/></zoneRoute>\n",
                         indent, switch_name, s, switch_name, s, switch_name);
    }
  };

  // With two or more servers the root zone holds zones, links, then zone
  // routes; SimGrid's parser takes a zone whose first element is a link for
  // one of hosts, routers and links, so the flat switch's (or the spine's)
  // zone comes first.
  if (S > 1) {
    switch_zone(leaves == 1 ? "switch" : "spine", "    ");
    for (int s = 0; s < S; ++s) server_links(s, "    ");
    if (leaves == 1) {
      switch_link("switch");
    } else {
      for (int leaf = 0; leaf < leaves; ++leaf) switch_link(fmt::format("leaf{}-switch", leaf));
      switch_link("spine");
      for (int leaf = 0; leaf < leaves; ++leaf)
        xml += fmt::format("    <link id=\"leaf{}-uplink\" bandwidth=\"{}\" latency=\"0s\" sharing_policy=\"SPLITDUPLEX\"/>\n",
                           leaf, uplink_bandwidth);
    }
  }
  if (S == 1) {
    server_zone(0, "    ");
  } else if (leaves == 1) {
    for (int s = 0; s < S; ++s) server_zone(s, "    ");
    server_routes("switch", 0, S, "    ");
  } else {
    for (int leaf = 0; leaf < leaves; ++leaf) {
      xml += fmt::format("    <zone id=\"leaf{}\" routing=\"DijkstraCache\">\n", leaf);
      const int first = leaf * servers_per_leaf, last = first + servers_per_leaf;
      for (int s = first; s < last; ++s) server_zone(s, "      ");
      const std::string leaf_switch = fmt::format("leaf{}-switch", leaf);
      switch_zone(leaf_switch, "      ");
      server_routes(leaf_switch, first, last, "      ");
      xml += "    </zone>\n";
    }
    for (int leaf = 0; leaf < leaves; ++leaf) {
      xml += fmt::format("    <zoneRoute src=\"leaf{}\" dst=\"spine\" gw_src=\"leaf{}-switch-router\" gw_dst=\"spine-router\" "
                         "symmetrical=\"NO\"><link_ctn id=\"leaf{}-uplink\" direction=\"UP\"/><link_ctn id=\"spine\"/></zoneRoute>\n",
                         leaf, leaf, leaf);
      xml += fmt::format("    <zoneRoute src=\"spine\" dst=\"leaf{}\" gw_src=\"spine-router\" gw_dst=\"leaf{}-switch-router\" "
                         "symmetrical=\"NO\"><link_ctn id=\"spine\"/><link_ctn id=\"leaf{}-uplink\" direction=\"DOWN\"/></zoneRoute>\n",
                         leaf, leaf, leaf);
    }
  }
  xml += "  </zone>\n";
  xml += "</platform>\n";
  return xml;
}

}  // namespace pipegrid

namespace pipegrid {

namespace {

// Sources: NVIDIA's DGX A100 and DGX H100 user guides and datasheets
// (NVLink through NVSwitch, one ConnectX NIC per GPU: 8 x 200 Gb/s HDR on
// the A100 server, 8 x 400 Gb/s NDR on the H100 and H200 servers) and the
// H200's datasheet (141 GB of HBM3e). NVLink per direction: A100 (NVLink 3)
// 300 GB/s, H100 and H200 (NVLink 4) 450 GB/s. Latencies as the published
// Selene runs are mapped (docs/platforms.md): 2 us inside, 5 us between.
const std::vector<CatalogueServer>& catalogue() {
  static const std::vector<CatalogueServer> servers = {
      {"dgx-a100-80gb", 8, "A100", "80GB", "300GBps,2us", "25GBps,5us", "per-gpu",
       "DGX A100 80 GB: 8 A100 SXM4 80 GB, NVLink 3 (300 GB/s per direction), 8 x 200 Gb/s HDR"},
      {"dgx-a100-40gb", 8, "A100", "40GB", "300GBps,2us", "25GBps,5us", "per-gpu",
       "DGX A100 40 GB: 8 A100 SXM4 40 GB, NVLink 3 (300 GB/s per direction), 8 x 200 Gb/s HDR"},
      {"dgx-h100", 8, "H100", "80GB", "450GBps,2us", "50GBps,5us", "per-gpu",
       "DGX H100: 8 H100 SXM5 80 GB, NVLink 4 (450 GB/s per direction), 8 x 400 Gb/s NDR"},
      {"hgx-h200", 8, "H200", "141GB", "450GBps,2us", "50GBps,5us", "per-gpu",
       "HGX H200: 8 H200 SXM 141 GB, NVLink 4 (450 GB/s per direction), 8 x 400 Gb/s NDR"},
      // The H800 (NVIDIA's H800 datasheet: NVLink 400 GB/s, i.e. 200 GB/s
      // per direction) in the servers DeepSeek-V3 trained on (its report,
      // arXiv 2412.19437, section 3.1: 8 GPUs by NVLink and NVSwitch, one
      // 400 Gb/s InfiniBand NIC per GPU).
      {"hgx-h800", 8, "H800", "80GB", "200GBps,2us", "50GBps,5us", "per-gpu",
       "HGX H800: 8 H800 SXM5 80 GB, NVLink 4 cut to 400 GB/s (200 GB/s per direction), 8 x 400 Gb/s NDR"},
  };
  return servers;
}

}  // namespace

std::vector<std::string> catalogue_server_names() {
  std::vector<std::string> names;
  for (const CatalogueServer& server : catalogue()) names.push_back(server.name);
  return names;
}

const CatalogueServer& catalogue_server(const std::string& name) {
  for (const CatalogueServer& server : catalogue())
    if (server.name == name) return server;
  throw InputError(fmt::format("--server: expected one of {}, found '{}'{}", fmt::join(catalogue_server_names(), ", "),
                               printable(name), did_you_mean(name, catalogue_server_names())));
}

ClusterSpec catalogue_cluster_spec(const CatalogueServer& server, int servers) {
  return cluster_spec_from_options({{"servers", std::to_string(servers)},
                                    {"gpus_per_server", std::to_string(server.gpus_per_server)},
                                    {"device", server.device},
                                    {"memory", server.memory},
                                    {"intra", server.intra},
                                    {"inter", server.inter},
                                    {"nic", server.nic}},
                                   "--server " + server.name);
}

}  // namespace pipegrid
