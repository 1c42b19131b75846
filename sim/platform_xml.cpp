#include "sim/platform_xml.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

// Boost.PropertyTree's own XML parser (the one pt::read_xml runs), used
// directly: the same parse (flags 0: no comment nodes, whitespace kept),
// in place, without building a property tree (a tenth of the time and
// memory on large platforms).
#include <boost/property_tree/detail/rapidxml.hpp>
#include <fmt/format.h>

#include "core/error.hpp"
#include "core/platform.hpp"
#include "core/platform_check.hpp"

namespace pipegrid {

namespace {

namespace rapidxml = boost::property_tree::detail::rapidxml;
using Node = rapidxml::xml_node<char>;

/// The element children of `node`, in document order (what a property tree
/// read with pt::read_xml lists, less its "<xmlattr>" entry).
template <class Visit>
void for_each_element(const Node& node, Visit&& visit) {
  for (const Node* child = node.first_node(); child != nullptr; child = child->next_sibling())
    if (child->type() == rapidxml::node_element) visit(std::string(child->name()), *child);
}

// SimGrid's units (xbt/parse_units: time, bandwidth, speed), to the base unit.
using Units = std::map<std::string, double, std::less<>>;

Units prefixed(const std::string& unit, double base, bool decimal, bool binary, bool long_prefixes) {
  static const char* const kShort[] = {"k", "M", "G", "T", "P", "E", "Z", "Y"};
  static const char* const kLong[] = {"kilo", "mega", "giga", "tera", "peta", "exa", "zeta", "yotta"};
  static const char* const kBinary[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"};
  Units units{{unit, base}};
  double factor = base;
  if (decimal)
    for (const char* prefix : long_prefixes ? kLong : kShort) units[prefix + unit] = factor *= 1000.0;
  factor = base;
  if (binary)
    for (const char* prefix : kBinary) units[prefix + unit] = factor *= 1024.0;
  return units;
}

const Units& speed_units() {
  static const Units units = [] {
    Units all = prefixed("f", 1, true, false, false);
    all.merge(prefixed("flops", 1, true, false, true));
    return all;
  }();
  return units;
}

const Units& bandwidth_units() {
  static const Units units = [] {
    Units all = prefixed("Bps", 1, true, true, false);
    all.merge(prefixed("bps", 0.125, true, true, false));
    return all;
  }();
  return units;
}

const Units& time_units() {
  static const Units units{{"w", 604800}, {"d", 86400}, {"h", 3600},  {"m", 60},     {"s", 1},
                           {"ms", 1e-3},  {"us", 1e-6}, {"ns", 1e-9}, {"ps", 1e-12}};
  return units;
}

std::string trimmed(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return std::string(text);
}

std::vector<std::string> split(const std::string& text, const char* separators) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = text.find_first_of(separators, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

// A value with a SimGrid unit (none: the base unit); empty when malformed or
// out of range.
std::optional<double> quantity(const std::string& text, const Units& units) {
  std::size_t length = 0;
  const std::optional<double> number = scan_number(text, &length);
  if (!number) return std::nullopt;
  const std::string unit = text.substr(length);
  double scale = 1;
  if (!unit.empty()) {
    const auto it = units.find(unit);
    if (it == units.end()) return std::nullopt;
    scale = it->second;
  }
  const double value = *number * scale;
  if (!std::isfinite(value)) return std::nullopt;
  return value;
}

struct Zone {
  std::string id;
  bool takes_routes = true;    ///< Full, Floyd, Dijkstra, DijkstraCache, Cluster (star)
  bool checks_duplicates = true;  ///< Full, Floyd, Dijkstra, DijkstraCache
  std::string routing;
  /// (src, dst) -> the declaration that made that route.
  std::map<std::pair<std::string, std::string>, std::string> routes;
};

class Checker {
 public:
  explicit Checker(const std::string& file) : file_(file) {}

  PlatformCheck run(const std::string& xml) {
    if (xml.size() > kMaxPlatformFileBytes)
      throw InputError(fmt::format("{}: the file has {} bytes; pipegrid reads platform files of at most {} MiB", file_,
                                   xml.size(), kMaxPlatformFileBytes >> 20));
    // As pt::read_xml(stream, tree, no_comments): the text up to its first
    // NUL byte, parsed with flags 0; a parse error names its line.
    std::vector<char> text(xml.begin(), xml.end());
    text.push_back(0);
    rapidxml::xml_document<char> document;
    try {
      document.parse<0>(text.data());
    } catch (const rapidxml::parse_error& error) {
      const long line = static_cast<long>(std::count(text.data(), error.where<char>(), '\n') + 1);
      throw InputError(fmt::format("{}:{}: not a valid SimGrid platform: malformed XML: {}", file_, line,
                                   printable(error.what())));
    }
    const Node* platform = nullptr;
    for_each_element(document, [&](const std::string& name, const Node& child) {
      if (name != "platform" || platform != nullptr)
        throw InputError(fmt::format("{}: not a valid SimGrid platform: expected one <platform> element at the top, found <{}>",
                                     file_, printable(name)));
      platform = &child;
    });
    if (platform == nullptr) throw InputError(fmt::format("{}: not a valid SimGrid platform: no <platform> element", file_));
    // SimGrid's parser wants the document type before the root element.
    const std::size_t doctype = xml.find("<!DOCTYPE"), root = xml.find("<platform");
    if (doctype == std::string::npos || doctype > root)
      throw InputError(fmt::format("{}: not a valid SimGrid platform: expected <!DOCTYPE platform SYSTEM "
                                   "\"https://simgrid.org/simgrid.dtd\"> before <platform> (SimGrid reads no file without it)",
                                   file_));
    check_version(*platform);
    children(*platform, nullptr);
    return std::move(result_);
  }

 private:
  // The first attribute of that name, as a property tree's find gives it.
  static std::optional<std::string> attribute(const Node& node, const char* name) {
    for (const rapidxml::xml_attribute<char>* it = node.first_attribute(); it != nullptr; it = it->next_attribute())
      if (std::strcmp(it->name(), name) == 0) return std::string(it->value(), it->value_size());
    return std::nullopt;
  }

  std::string where(const std::string& element, const std::optional<std::string>& id) const {
    return id ? fmt::format("{}: {} '{}'", file_, element, printable(*id)) : fmt::format("{}: <{}>", file_, element);
  }

  void check_version(const Node& platform) {
    const std::optional<std::string> version = attribute(platform, "version");
    std::size_t length = 0;
    const std::optional<double> number = version ? scan_number(*version, &length) : std::nullopt;
    if (!number || length != version->size() || *number < 4 || *number > 4.1 + 1e-9)
      throw InputError(fmt::format("{}: <platform version>: expected 4.1 (or 4.0; SimGrid 3.32 reads version 4 files), found {}",
                                   file_, version ? "'" + printable(*version) + "'" : "none"));
  }

  void children(const Node& node, Zone* zone) {
    for_each_element(node, [&](const std::string& name, const Node& child) { element(name, child, zone); });
  }

  void element(const std::string& name, const Node& node, Zone* zone) {
    if (name == "zone" || name == "AS") return visit_zone(name, node);
    if (name == "host") return visit_host(node);
    if (name == "cluster" || name == "cabinet") return visit_cluster(name, node);
    if (name == "peer") return visit_peer(node);
    if (name == "router") return add_netpoint("router", attribute(node, "id"));
    if (name == "link" || name == "backbone") return visit_link(name, node);
    if (name == "route" || name == "zoneRoute" || name == "ASroute") return visit_route(name, node, zone);
    if (name == "storage" || name == "storage_type" || name == "mount" || name == "include")
      throw InputError(fmt::format("{}: <{}>: SimGrid 3.32 no longer reads this element; remove it", file_, name));
    if (name == "actor" || name == "process")
      throw InputError(fmt::format("{}: <{}>: pipegrid starts its own actors; a platform file for pipegrid declares none",
                                   file_, name));
    if (name == "trace")
      if (const auto periodicity = attribute(node, "periodicity")) {
        std::size_t length = 0;
        const std::string value = trimmed(*periodicity);
        const std::optional<double> number = scan_number(value, &length);
        if (!number || length != value.size() || *number < 0)
          throw InputError(fmt::format("{}: periodicity: expected a non-negative number of seconds, found '{}'",
                                       where("trace", attribute(node, "id")), printable(*periodicity)));
      }
    // Other elements (prop of zones and links, config, trace connections,
    // bypass routes) are SimGrid's business.
  }

  void visit_zone(const std::string& name, const Node& node) {
    const std::optional<std::string> id = attribute(node, "id");
    add_netpoint("zone", id);
    Zone zone;
    zone.id = id.value_or("");
    const std::string routing = attribute(node, "routing").value_or("");
    std::string folded = routing;
    for (char& c : folded) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    static const std::set<std::string> routed = {"full", "floyd", "dijkstra", "dijkstracache"};
    static const std::set<std::string> unrouted = {"none", "vivaldi", "wifi"};
    if (routed.count(folded) == 0 && unrouted.count(folded) == 0 && folded != "cluster")
      throw InputError(fmt::format("{}: routing: expected Full, Floyd, Dijkstra, DijkstraCache, Cluster, None, Vivaldi or "
                                   "Wifi, found '{}'",
                                   where(name, id), printable(routing)));
    zone.routing = routing;
    zone.takes_routes = unrouted.count(folded) == 0;
    zone.checks_duplicates = routed.count(folded) != 0;
    children(node, &zone);
  }

  void add_netpoint(const char* kind, const std::optional<std::string>& id) {
    if (!id) throw InputError(fmt::format("{}: a <{}> without an id", file_, kind));
    if (const auto [it, added] = netpoints_.emplace(*id, kind); !added)
      throw InputError(fmt::format("{}: two elements are named '{}' (a {} and a {}): hosts, routers and zones need distinct ids",
                                   file_, printable(*id), it->second, kind));
  }

  void count_hosts(std::size_t more) {
    result_.hosts += more;
    if (result_.hosts > kMaxPlatformHosts)
      throw InputError(fmt::format("{}: more than {} hosts; pipegrid reads platforms of at most {} hosts", file_,
                                   kMaxPlatformHosts, kMaxPlatformHosts));
  }

  void host_id(const std::string& element, const std::string& id) {
    if (const std::string problem = host_id_problem(id); !problem.empty())
      throw InputError(fmt::format("{}: {} '{}': {}; pipegrid refuses host ids that its outputs (timeline CSV, tables) "
                                   "cannot carry (spaces, commas, double quotes, control characters, bytes that are not "
                                   "UTF-8): rename it",
                                   file_, element, printable(id), problem));
  }

  // A positive quantity with its units and bounds (PlatformLimits).
  struct Kind {
    const Units& units;
    double low, high;
    const char* expected;
  };
  static Kind speed() {
    return {speed_units(), kMinHostSpeed, kMaxHostSpeed,
            "a positive speed (flop/s, with a unit: '1Gf', '14Tf'; from 1e-6 to 1e24)"};
  }
  static Kind bandwidth() {
    return {bandwidth_units(), kMinBandwidth, std::numeric_limits<double>::max(),
            "a positive bandwidth (with a unit: '12GBps', '10Gbps'; at least 1 B/s)"};
  }

  // A list of positive quantities (speeds of pstates, bandwidths of a WiFi
  // link); returns its length.
  std::size_t positive_list(const std::string& context, const char* attribute_name, const std::optional<std::string>& text,
                            const char* separators, const Kind& kind) {
    if (!text) throw InputError(fmt::format("{}: {}: expected {}, found none", context, attribute_name, kind.expected));
    const std::vector<std::string> parts = split(*text, separators);
    for (const std::string& part : parts) {
      const std::optional<double> value = quantity(trimmed(part), kind.units);
      if (!value || !(*value > 0) || *value < kind.low || *value > kind.high)
        throw InputError(
            fmt::format("{}: {}: expected {}, found '{}'", context, attribute_name, kind.expected, printable(*text)));
    }
    return parts.size();
  }

  void positive(const std::string& context, const char* attribute_name, const std::optional<std::string>& text,
                const Kind& kind) {
    positive_list(context, attribute_name, text, "", kind);
  }

  void latency(const std::string& context, const char* attribute_name, const std::optional<std::string>& text) {
    if (!text) return;  // SimGrid's default: 0
    const std::optional<double> value = quantity(trimmed(*text), time_units());
    if (!value || *value < 0 || *value > kMaxLatencySeconds)
      throw InputError(fmt::format("{}: {}: expected a non-negative duration (seconds, or with a unit: '5us', '1.5ms'; "
                                   "at most 1e9 s), found '{}'",
                                   context, attribute_name, printable(*text)));
  }

  // An integer attribute in [low, high]; SimGrid reads it with std::stoi.
  long integer(const std::string& context, const char* attribute_name, const std::string& text, long low, long high) {
    std::size_t length = 0;
    const std::string value = trimmed(text);
    const std::optional<double> number = scan_number(value, &length);
    if (!number || length != value.size() || *number != std::floor(*number) || *number < static_cast<double>(low) ||
        *number > static_cast<double>(high))
      throw InputError(fmt::format("{}: {}: expected an integer from {} to {}, found '{}'", context, attribute_name, low,
                                   high, printable(text)));
    return static_cast<long>(*number);
  }


  void properties(const std::string& host, const Node& node) {
    std::map<std::string, std::string> found;
    for_each_element(node, [&](const std::string& name, const Node& child) {
      if (name != "prop") return;
      const std::optional<std::string> id = attribute(child, "id");
      const std::optional<std::string> value = attribute(child, "value");
      if (!id || !value) throw InputError(fmt::format("{}: host '{}': a <prop> needs an id and a value", file_, printable(host)));
      if (!found.emplace(*id, *value).second)
        throw InputError(fmt::format("{}: host '{}': property '{}' is given twice", file_, printable(host), printable(*id)));
    });
    // Near misses first (host_info_from_properties refuses them too), then
    // the values.
    host_info_from_properties(file_, host, found);
    const std::vector<std::string>& known = known_host_properties();
    for (const auto& [name, value] : found)
      if (std::find(known.begin(), known.end(), name) == known.end())
        result_.warnings.push_back(fmt::format("{}: host '{}': unknown property '{}' ignored (pipegrid reads {})", file_,
                                               printable(host), printable(name), fmt::join(known, ", ")));
  }

  void visit_host(const Node& node) {
    const std::optional<std::string> id = attribute(node, "id");
    add_netpoint("host", id);
    host_id("host", *id);
    count_hosts(1);
    const std::string context = where("host", id);
    const std::size_t pstates = positive_list(context, "speed", attribute(node, "speed"), ",", speed());
    if (const auto core = attribute(node, "core")) integer(context, "core", *core, 1, 1 << 20);
    if (const auto pstate = attribute(node, "pstate"))
      integer(context, "pstate", *pstate, 0, static_cast<long>(pstates) - 1);
    properties(*id, node);
  }

  void visit_peer(const Node& node) {
    const std::optional<std::string> id = attribute(node, "id");
    add_netpoint("peer", id);
    host_id("peer", *id);
    count_hosts(1);
    const std::string context = where("peer", id);
    positive(context, "speed", attribute(node, "speed"), speed());
    positive(context, "bw_in", attribute(node, "bw_in"), bandwidth());
    positive(context, "bw_out", attribute(node, "bw_out"), bandwidth());
    latency(context, "lat", attribute(node, "lat"));
  }

  void visit_cluster(const std::string& name, const Node& node) {
    const std::optional<std::string> id = attribute(node, "id");
    add_netpoint(name.c_str(), id);
    const std::string context = where(name, id);
    const std::string prefix = attribute(node, "prefix").value_or(""), suffix = attribute(node, "suffix").value_or("");
    // Radicals: "1-4,6,9-11".
    const std::string radicals = attribute(node, "radical").value_or("");
    std::vector<std::pair<long, long>> ranges;
    std::size_t members = 0;
    for (const std::string& group : split(radicals, ",")) {
      const std::vector<std::string> ends = split(group, "-");
      if (ends.size() > 2)
        throw InputError(fmt::format("{}: radical: expected ranges such as '0-15,20', found '{}'", context, printable(radicals)));
      const long first = integer(context, "radical", ends.front(), 0, 2147483647L);
      const long last = integer(context, "radical", ends.back(), 0, 2147483647L);
      if (last >= first) {
        members += static_cast<std::size_t>(last - first + 1);
        if (members > kMaxPlatformHosts) count_hosts(members);
        ranges.emplace_back(first, last);
      }
    }
    count_hosts(members);
    std::string first_host;
    for (const auto& [first, last] : ranges)
      for (long i = first; i <= last; ++i) {
        const std::string host = prefix + std::to_string(i) + suffix;
        if (first_host.empty()) first_host = host;
        add_netpoint("host", host);
        host_id(name + " '" + printable(id.value_or("")) + "': host", host);
      }
    const bool cluster = name == "cluster";
    if (cluster) {
      positive_list(context, "speed", attribute(node, "speed"), ",", speed());
      if (const auto core = attribute(node, "core")) integer(context, "core", *core, 1, 1 << 20);
    } else {
      positive(context, "speed", attribute(node, "speed"), speed());
    }
    positive(context, "bw", attribute(node, "bw"), bandwidth());
    latency(context, "lat", attribute(node, "lat"));
    if (cluster) {
      for (const char* optional_bandwidth : {"bb_bw", "limiter_link", "loopback_bw"})
        if (const auto text = attribute(node, optional_bandwidth); text && !text->empty())
          positive(context, optional_bandwidth, text, bandwidth());
      for (const char* optional_latency : {"bb_lat", "loopback_lat"})
        if (const auto text = attribute(node, optional_latency); text && !text->empty()) latency(context, optional_latency, text);
      // A cluster's properties go to each of its hosts.
      if (!first_host.empty()) properties(first_host, node);
    }
  }

  void visit_link(const std::string& name, const Node& node) {
    const std::optional<std::string> id = attribute(node, "id");
    if (!id) throw InputError(fmt::format("{}: a <{}> without an id", file_, name));
    if (!links_.insert(*id).second)
      throw InputError(fmt::format("{}: two links are named '{}': links need distinct ids", file_, printable(*id)));
    const std::string context = where(name, id);
    positive_list(context, "bandwidth", attribute(node, "bandwidth"), name == "link" ? ";," : "", bandwidth());
    latency(context, "latency", attribute(node, "latency"));
    // NCCL's efficiency and latency (link_nccl_from_properties).
    std::map<std::string, std::string> found;
    for_each_element(node, [&](const std::string& element, const Node& child) {
      if (element != "prop") return;
      const std::optional<std::string> property = attribute(child, "id");
      const std::optional<std::string> value = attribute(child, "value");
      if (!property || !value)
        throw InputError(fmt::format("{}: link '{}': a <prop> needs an id and a value", file_, printable(*id)));
      if (!found.emplace(*property, *value).second)
        throw InputError(fmt::format("{}: link '{}': property '{}' is given twice", file_, printable(*id), printable(*property)));
    });
    link_nccl_from_properties(file_, *id, found);
  }

  void visit_route(const std::string& name, const Node& node, Zone* zone) {
    const std::string src = attribute(node, "src").value_or(""), dst = attribute(node, "dst").value_or("");
    const std::string declaration = fmt::format("{} {} -> {}", name, printable(src), printable(dst));
    if (zone == nullptr) return;  // SimGrid's DTD refuses it
    if (!zone->takes_routes)
      throw InputError(fmt::format("{}: zone '{}' (routing=\"{}\") takes no routes, found {}: use routing=\"Full\" to "
                                   "declare routes",
                                   file_, printable(zone->id), printable(zone->routing), declaration));
    if (!zone->checks_duplicates) return;
    const std::string symmetrical = attribute(node, "symmetrical").value_or("YES");
    auto add = [&](const std::string& from, const std::string& to, const std::string& by) {
      const auto [it, added] = zone->routes.emplace(std::pair{from, to}, by);
      if (!added)
        throw InputError(fmt::format("{}: zone '{}': the route from '{}' to '{}' is declared twice: by {} and by {} (a route "
                                     "is symmetrical unless it says symmetrical=\"NO\": it then also declares the route "
                                     "back); give each direction one route",
                                     file_, printable(zone->id), printable(from), printable(to), it->second, by));
    };
    add(src, dst, declaration);
    if ((symmetrical == "YES" || symmetrical == "yes") && src != dst)
      add(dst, src, fmt::format("the symmetrical {}", declaration));
  }

  const std::string& file_;
  PlatformCheck result_;
  std::map<std::string, std::string> netpoints_;  ///< id -> kind
  std::set<std::string> links_;
};

}  // namespace

PlatformCheck check_platform_xml(const std::string& file, const std::string& xml) { return Checker(file).run(xml); }

}  // namespace pipegrid
