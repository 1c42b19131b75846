#include "core/platform.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/device_model.hpp"
#include "core/io.hpp"
#include "core/platform_check.hpp"

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

std::optional<double> scan_number(std::string_view text, std::size_t* length) {
  std::size_t at = 0;
  const auto digit = [&](std::size_t i) { return i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); };
  if (at < text.size() && (text[at] == '+' || text[at] == '-')) ++at;
  const std::size_t mantissa = at;
  std::size_t digits = 0;
  while (digit(at)) ++at, ++digits;
  if (at < text.size() && text[at] == '.') {
    ++at;
    while (digit(at)) ++at, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (at < text.size() && (text[at] == 'e' || text[at] == 'E')) {
    std::size_t exponent = at + 1;
    if (exponent < text.size() && (text[exponent] == '+' || text[exponent] == '-')) ++exponent;
    if (digit(exponent)) {
      while (digit(exponent)) ++exponent;
      at = exponent;
    }
  }
  // from_chars reads no '+'; the sign is applied after.
  const bool negative = text[0] == '-';
  double value = 0;
  const char* first = text.data() + mantissa;
  const auto [end, error] = std::from_chars(first, text.data() + at, value, std::chars_format::general);
  if (error != std::errc() || end != text.data() + at) return std::nullopt;
  if (!std::isfinite(value) || (value != 0 && !std::isnormal(value))) return std::nullopt;
  *length = at;
  return negative ? -value : value;
}

namespace {

// The number at the start of `text` and the rest after it; empty when there
// is no number in range there.
std::optional<std::pair<double, std::string>> number_and_unit(const std::string& text) {
  std::size_t length = 0;
  const std::optional<double> number = scan_number(text, &length);
  if (!number) return std::nullopt;
  return std::pair{*number, text.substr(length)};
}

}  // namespace

double parse_bytes(const std::string& text, const std::string& what) {
  static const std::pair<const char*, double> units[] = {
      {"B", 1},       {"kB", 1e3},  {"KB", 1e3},  {"MB", 1e6},  {"GB", 1e9},  {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
  };
  const auto parsed = number_and_unit(text);
  double scale = 0;
  if (parsed) {
    std::string unit = parsed->second;
    while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
    scale = unit.empty() ? 1 : 0;
    for (const auto& [name, factor] : units)
      if (unit == name) scale = factor;
  }
  if (!parsed || scale == 0 || parsed->first < 0 || !std::isfinite(parsed->first * scale))
    throw InputError(fmt::format("{}: expected a non-negative size in bytes, optionally with a unit (B, kB, MB, GB, "
                                 "KiB, MiB, GiB, TiB), found '{}'",
                                 what, printable(text)));
  return parsed->first * scale;
}

double parse_bandwidth(const std::string& text, const std::string& what) {
  const auto parsed = number_and_unit(text);
  double scale = 0;
  if (parsed) {
    const std::string& unit = parsed->second;
    scale = unit.empty() ? 1 : 0;
    if (unit.size() >= 3) {
      const std::string suffix = unit.substr(unit.size() - 3);
      const std::string prefix = unit.substr(0, unit.size() - 3);
      const double per_unit = suffix == "Bps" ? 1 : suffix == "bps" ? 0.125 : 0;
      static const std::pair<const char*, double> prefixes[] = {
          {"", 1}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
          {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
      for (const auto& [name, factor] : prefixes)
        if (prefix == name) scale = per_unit * factor;
    }
  }
  if (!parsed || scale == 0 || !(parsed->first * scale > 0) || !std::isfinite(parsed->first * scale))
    throw InputError(fmt::format("{}: expected a positive bandwidth in bytes per second, or with a SimGrid unit "
                                 "(Bps, kBps, MBps, GBps, bps, Mbps, Gbps, KiBps, GiBps, ...), found '{}'",
                                 what, printable(text)));
  return parsed->first * scale;
}

double parse_duration(const std::string& text, const std::string& what) {
  static const std::pair<const char*, double> units[] = {
      {"ps", 1e-12}, {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1},
      {"m", 60},     {"h", 3600},  {"d", 86400}, {"w", 604800},
  };
  const auto parsed = number_and_unit(text);
  double scale = 0;
  if (parsed) {
    scale = parsed->second.empty() ? 1 : 0;
    for (const auto& [name, factor] : units)
      if (parsed->second == name) scale = factor;
  }
  if (!parsed || scale == 0 || parsed->first < 0 || !std::isfinite(parsed->first * scale))
    throw InputError(fmt::format("{}: expected a non-negative duration in seconds, optionally with a SimGrid unit "
                                 "(ps, ns, us, ms, s, m, h, d, w), found '{}'",
                                 what, printable(text)));
  return parsed->first * scale;
}

MemoryReserve parse_memory_reserve(const std::string& text, const std::string& what) {
  MemoryReserve reserve;
  std::size_t length = 0;
  const std::optional<double> plain = scan_number(text, &length);
  if (plain && length == text.size() && *plain >= 0 && *plain < 1) {
    reserve.fraction = *plain;
    return reserve;
  }
  // A plain number of 1 or more is bytes: a whole number (1.5 is neither a
  // fraction nor a count of bytes).
  const bool fractional_bytes = plain && length == text.size() && *plain != std::floor(*plain);
  try {
    if (fractional_bytes) throw InputError("");
    reserve.bytes = parse_bytes(text, what);
  } catch (const InputError&) {
    throw InputError(fmt::format("{}: expected a fraction of the memory in [0, 1) (such as 0.05) or a size in bytes "
                                 "(such as 2GiB), found '{}'",
                                 what, printable(text)));
  }
  return reserve;
}

HostInfo host_info_from_properties(const std::string& file, const std::string& host,
                                   const std::map<std::string, std::string>& properties) {
  HostInfo info;
  info.name = host;
  auto field = [&](const std::string& property) {
    return fmt::format("{}: host '{}': property '{}'", file, printable(host), property);
  };
  for (const auto& [name, value] : properties)
    if (const std::optional<std::string> suggestion = near_miss_property(name))
      throw InputError(fmt::format("{}: host '{}': unknown property '{}': did you mean '{}'?", file, printable(host),
                                   printable(name), *suggestion));
  if (auto it = properties.find("kind"); it != properties.end()) {
    if (it->second == "gpu") info.kind = DeviceKind::Gpu;
    else if (it->second == "fpga") info.kind = DeviceKind::Fpga;
    else throw InputError(fmt::format("{}: expected gpu or fpga, found '{}'", field("kind"), printable(it->second)));
  }
  info.execution = info.kind == DeviceKind::Gpu ? Execution::Sync : Execution::Async;
  if (auto it = properties.find("execution"); it != properties.end()) {
    if (it->second == "sync") info.execution = Execution::Sync;
    else if (it->second == "async") info.execution = Execution::Async;
    else throw InputError(fmt::format("{}: expected sync or async, found '{}'", field("execution"), printable(it->second)));
  }
  if (auto it = properties.find("memory"); it != properties.end())
    info.memory_bytes = parse_bytes(it->second, field("memory"));
  if (auto it = properties.find("memory_reserve"); it != properties.end()) {
    const MemoryReserve reserve = parse_memory_reserve(it->second, field("memory_reserve"));
    info.memory_reserve_bytes = reserve.bytes;
    info.memory_reserve_fraction = reserve.fraction;
    if (reserve.bytes && info.memory_bytes && *reserve.bytes >= *info.memory_bytes)
      throw InputError(fmt::format("{}: expected a reserve below the host's memory ({}), found '{}'",
                                   field("memory_reserve"), printable(properties.at("memory")), printable(it->second)));
  }
  if (auto it = properties.find("speed_factor"); it != properties.end()) {
    std::size_t length = 0;
    const std::optional<double> factor = scan_number(it->second, &length);
    if (!factor || length != it->second.size() || *factor < kMinSpeedFactor || *factor > kMaxSpeedFactor)
      throw InputError(fmt::format("{}: expected a positive number from {:g} to {:g}, found '{}'", field("speed_factor"),
                                   kMinSpeedFactor, kMaxSpeedFactor, printable(it->second)));
    info.speed_factor = *factor;
  }
  if (auto it = properties.find("device"); it != properties.end()) {
    if (it->second.empty() || !host_id_problem(it->second).empty())
      throw InputError(fmt::format("{}: expected a device type name without spaces, commas or quotes, found '{}'",
                                   field("device"), printable(it->second)));
    info.device_type = it->second;
  }
  // device_model names a catalogue entry (core/device_model.hpp); absent,
  // the `device` property does when it is one. An absent `kind` follows the
  // model's; a given one must agree with it.
  if (auto it = properties.find("device_model"); it != properties.end())
    info.device_model = device_model(it->second, field("device_model")).name;
  else if (find_device_model(info.device_type))
    info.device_model = info.device_type;
  if (!info.device_model.empty()) {
    const DeviceKind model_kind = find_device_model(info.device_model)->kind;
    if (properties.count("kind") == 0) {
      info.kind = model_kind;
      if (properties.count("execution") == 0)
        info.execution = model_kind == DeviceKind::Gpu ? Execution::Sync : Execution::Async;
    } else if (info.kind != model_kind) {
      throw InputError(fmt::format("{}: device model {} is a{} {}, but the host's kind is {}", field("device_model"),
                                   info.device_model, model_kind == DeviceKind::Gpu ? "" : "n",
                                   to_string(model_kind), to_string(info.kind)));
    }
  }
  auto duration = [&](const char* property) -> std::optional<double> {
    const auto it = properties.find(property);
    if (it == properties.end()) return std::nullopt;
    const double seconds = parse_duration(it->second, field(property));
    if (seconds > kMaxHostDurationSeconds)
      throw InputError(fmt::format("{}: expected at most {:g} s, found '{}'", field(property), kMaxHostDurationSeconds,
                                   printable(it->second)));
    return seconds;
  };
  info.action_overhead_s = duration("action_overhead").value_or(0.0);
  if (auto it = properties.find("optimizer_step_rate"); it != properties.end()) {
    info.optimizer_step_rate_Bps = parse_bandwidth(it->second, field("optimizer_step_rate"));
    if (*info.optimizer_step_rate_Bps < 1)
      throw InputError(fmt::format("{}: expected at least 1 byte per second, found '{}'", field("optimizer_step_rate"),
                                   printable(it->second)));
  }
  info.optimizer_step_overhead_s = duration("optimizer_step_overhead");
  return info;
}

LinkNccl link_nccl_from_properties(const std::string& file, const std::string& link,
                                   const std::map<std::string, std::string>& properties) {
  LinkNccl nccl;
  const auto field = [&](const char* property) {
    return fmt::format("{}: link '{}': property '{}'", file, printable(link), property);
  };
  if (auto it = properties.find(kNcclEfficiencyProperty); it != properties.end()) {
    std::size_t length = 0;
    const std::optional<double> number = scan_number(it->second, &length);
    if (!number || length != it->second.size() || !(*number > 0 && *number <= 1))
      throw InputError(fmt::format("{}: expected a number in (0, 1] (the share of the line rate NCCL achieves: 1 is line "
                                   "rate), found '{}'",
                                   field(kNcclEfficiencyProperty), printable(it->second)));
    nccl.efficiency = *number;
  }
  if (auto it = properties.find(kNcclLatencyProperty); it != properties.end()) {
    nccl.latency_s = parse_duration(it->second, field(kNcclLatencyProperty));
    if (nccl.latency_s > kMaxHostDurationSeconds)
      throw InputError(fmt::format("{}: expected at most {:g} s, found '{}'", field(kNcclLatencyProperty),
                                   kMaxHostDurationSeconds, printable(it->second)));
  }
  return nccl;
}

LinkNccl route_nccl(const std::vector<LinkInfo>& all, const std::vector<int>& links) {
  LinkNccl nccl;
  for (const int l : links) {
    const LinkInfo& link = all.at(static_cast<std::size_t>(l));
    nccl = nccl.and_then({link.nccl_efficiency, link.nccl_latency_s});
  }
  return nccl;
}

std::string nccl_values_text(const LinkNccl& nccl) {
  std::string text;
  if (nccl.efficiency != 1) text = fmt::format("{:.4g}% of line rate", nccl.efficiency * 100);
  if (nccl.latency_s != 0)
    text += fmt::format("{}{} per operation", text.empty() ? "" : " + ", human_seconds(nccl.latency_s));
  return text;
}

std::string nccl_text(const LinkNccl& nccl) {
  if (nccl.is_default()) return "";
  return fmt::format("NCCL {}{}", nccl.efficiency != 1 ? "at " : "", nccl_values_text(nccl));
}

}  // namespace pipegrid
