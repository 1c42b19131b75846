#include "core/platform.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "core/error.hpp"

namespace pipegrid {

const char* to_string(DeviceKind kind) { return kind == DeviceKind::Gpu ? "gpu" : "fpga"; }
const char* to_string(Execution execution) { return execution == Execution::Sync ? "sync" : "async"; }

const HostInfo& PlatformSummary::host(const std::string& name) const {
  for (const HostInfo& info : hosts)
    if (info.name == name) return info;
  throw InputError(fmt::format("{}: no host named '{}'", file, name));
}

int PlatformSummary::host_index(const std::string& name) const {
  for (std::size_t i = 0; i < hosts.size(); ++i)
    if (hosts[i].name == name) return static_cast<int>(i);
  throw InputError(fmt::format("{}: no host named '{}'", file, name));
}

double parse_bytes(const std::string& text, const std::string& what) {
  static const std::pair<const char*, double> units[] = {
      {"B", 1},       {"kB", 1e3},  {"KB", 1e3},  {"MB", 1e6},  {"GB", 1e9},  {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
  };
  const char* begin = text.c_str();
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  std::string unit(end);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(unit.begin());
  double scale = unit.empty() ? 1 : 0;
  for (const auto& [name, factor] : units)
    if (unit == name) scale = factor;
  if (end == begin || scale == 0 || !std::isfinite(number) || number < 0)
    throw InputError(fmt::format("{}: expected a non-negative size in bytes, optionally with a unit (B, kB, MB, GB, "
                                 "KiB, MiB, GiB, TiB), found '{}'",
                                 what, text));
  return number * scale;
}

double parse_bandwidth(const std::string& text, const std::string& what) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  const std::string unit(end);
  double scale = unit.empty() ? 1 : 0;
  if (!unit.empty() && unit.size() >= 3) {
    const std::string suffix = unit.substr(unit.size() - 3);
    const std::string prefix = unit.substr(0, unit.size() - 3);
    const double per_unit = suffix == "Bps" ? 1 : suffix == "bps" ? 0.125 : 0;
    static const std::pair<const char*, double> prefixes[] = {
        {"", 1}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
        {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
    for (const auto& [name, factor] : prefixes)
      if (prefix == name) scale = per_unit * factor;
  }
  if (end == begin || scale == 0 || !std::isfinite(number) || number <= 0)
    throw InputError(fmt::format("{}: expected a positive bandwidth in bytes per second, or with a SimGrid unit "
                                 "(Bps, kBps, MBps, GBps, bps, Mbps, Gbps, KiBps, GiBps, ...), found '{}'",
                                 what, text));
  return number * scale;
}

double parse_duration(const std::string& text, const std::string& what) {
  static const std::pair<const char*, double> units[] = {
      {"ps", 1e-12}, {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1},
      {"m", 60},     {"h", 3600},  {"d", 86400}, {"w", 604800},
  };
  const char* begin = text.c_str();
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  const std::string unit(end);
  double scale = unit.empty() ? 1 : 0;
  for (const auto& [name, factor] : units)
    if (unit == name) scale = factor;
  if (end == begin || scale == 0 || !std::isfinite(number) || number < 0)
    throw InputError(fmt::format("{}: expected a non-negative duration in seconds, optionally with a SimGrid unit "
                                 "(ps, ns, us, ms, s, m, h, d, w), found '{}'",
                                 what, text));
  return number * scale;
}

HostInfo host_info_from_properties(const std::string& file, const std::string& host,
                                   const std::map<std::string, std::string>& properties) {
  HostInfo info;
  info.name = host;
  auto field = [&](const std::string& property) { return fmt::format("{}: host '{}': property '{}'", file, host, property); };
  if (auto it = properties.find("kind"); it != properties.end()) {
    if (it->second == "gpu") info.kind = DeviceKind::Gpu;
    else if (it->second == "fpga") info.kind = DeviceKind::Fpga;
    else throw InputError(fmt::format("{}: expected gpu or fpga, found '{}'", field("kind"), it->second));
  }
  info.execution = info.kind == DeviceKind::Gpu ? Execution::Sync : Execution::Async;
  if (auto it = properties.find("execution"); it != properties.end()) {
    if (it->second == "sync") info.execution = Execution::Sync;
    else if (it->second == "async") info.execution = Execution::Async;
    else throw InputError(fmt::format("{}: expected sync or async, found '{}'", field("execution"), it->second));
  }
  if (auto it = properties.find("memory"); it != properties.end())
    info.memory_bytes = parse_bytes(it->second, field("memory"));
  if (auto it = properties.find("speed_factor"); it != properties.end()) {
    char* end = nullptr;
    info.speed_factor = std::strtod(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end != '\0' || !std::isfinite(info.speed_factor) || info.speed_factor <= 0)
      throw InputError(fmt::format("{}: expected a positive number, found '{}'", field("speed_factor"), it->second));
  }
  if (auto it = properties.find("device"); it != properties.end()) {
    if (it->second.empty() || it->second.find_first_of(" \t") != std::string::npos)
      throw InputError(fmt::format("{}: expected a device type name without spaces, found '{}'", field("device"), it->second));
    info.device_type = it->second;
  }
  if (auto it = properties.find("action_overhead"); it != properties.end())
    info.action_overhead_s = parse_duration(it->second, field("action_overhead"));
  if (auto it = properties.find("optimizer_step_rate"); it != properties.end())
    info.optimizer_step_rate_Bps = parse_bandwidth(it->second, field("optimizer_step_rate"));
  if (auto it = properties.find("optimizer_step_overhead"); it != properties.end())
    info.optimizer_step_overhead_s = parse_duration(it->second, field("optimizer_step_overhead"));
  return info;
}

}  // namespace pipegrid
