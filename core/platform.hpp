#pragma once
// What pipegrid needs to know about each accelerator of a SimGrid platform.
// The XML itself is loaded by SimGrid (sim/); this is the summary read from
// the hosts' properties, in the order the file declares the hosts.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipegrid {

enum class DeviceKind { Gpu, Fpga };
enum class Execution {
  Sync,   ///< a result is sent only when the whole operation ends (GPUs)
  Async,  ///< results stream out while the operation runs (FPGAs, cut-through)
};

/// Bounds on host property values (docs/platforms.md, Limits): beyond them a
/// simulated time would overflow or be meaningless.
constexpr double kMinSpeedFactor = 1e-6, kMaxSpeedFactor = 1e6;
constexpr double kMaxHostDurationSeconds = 1e9;  ///< action_overhead, optimizer_step_overhead

struct HostInfo {
  std::string name;
  DeviceKind kind = DeviceKind::Gpu;
  Execution execution = Execution::Sync;
  std::optional<double> memory_bytes;  ///< absent: unlimited
  /// `memory_reserve`: device memory a real process holds besides what the
  /// model accounts for (CUDA context, communication buffers, the caching
  /// allocator's fragmentation), out of the capacity: bytes (a size with a
  /// unit, or a plain whole number of at least 1), or a fraction of the capacity
  /// in effect (a plain number in [0, 1)). At most one of the two; neither:
  /// no reserve. A device is out of memory when its peak exceeds capacity -
  /// reserve (memory_reserve_of).
  std::optional<double> memory_reserve_bytes;
  std::optional<double> memory_reserve_fraction;
  double speed_factor = 1;             ///< compute time = profile time / factor
  /// The host's `device` property (e.g. "VCU129", "V100"): selects per-device
  /// times in a profile. Empty when absent.
  std::string device_type;
  /// The device-model catalogue entry this host is (core/device_model.hpp:
  /// "V100", "H100", "VCU118", ...): the `device_model` property, else the
  /// `device` property when it names a catalogue entry; empty: none (the
  /// host then needs measured times).
  std::string device_model;
  /// The server the host belongs to, for tensor parallelism: the name of the
  /// innermost SimGrid zone that holds it (`pipegrid platform cluster` makes
  /// one zone per server). Hosts with the same name are one server.
  std::string server;
  /// `action_overhead` (seconds): a fixed time added to every compute action
  /// (F, B, R) on this host, the launch and dispatch cost a real executor
  /// pays per action. 0 when absent.
  double action_overhead_s = 0;
  /// `optimizer_step_rate` (parameter bytes per second) and
  /// `optimizer_step_overhead` (seconds): the host runs an optimizer step of
  /// overhead + stage parameter bytes / rate at each weight update of its
  /// stage (docs/semantics.md, Optimizer steps). Absent rate: no bytes term.
  /// The step is simulated only when at least one of the two is given.
  std::optional<double> optimizer_step_rate_Bps;
  std::optional<double> optimizer_step_overhead_s;
  bool has_optimizer_step() const { return optimizer_step_rate_Bps || optimizer_step_overhead_s; }
  /// The reserve out of a capacity of `capacity_bytes` (the host's memory,
  /// or simulate --memory's): the bytes given, or the fraction of it; 0
  /// without a reserve.
  double memory_reserve_of(double capacity_bytes) const {
    if (memory_reserve_bytes) return *memory_reserve_bytes;
    return memory_reserve_fraction ? *memory_reserve_fraction * capacity_bytes : 0;
  }
  /// Seconds of one optimizer step over `parameter_bytes` (0 without the term).
  double optimizer_step_s(double parameter_bytes) const {
    return optimizer_step_overhead_s.value_or(0.0) +
           (optimizer_step_rate_Bps ? parameter_bytes / *optimizer_step_rate_Bps : 0.0);
  }
};

/// One network resource some route crosses: a SimGrid link, or one direction
/// of a SPLITDUPLEX link (SimGrid names them `id_UP` and `id_DOWN`).
struct LinkInfo {
  std::string name;
  double bandwidth_Bps = 0;
  /// false for a FATPIPE link (every flow gets the whole bandwidth); true
  /// when concurrent flows share it.
  bool shared = true;
  /// The link's `nccl_efficiency` and `nccl_latency` (LinkNccl); 1 and 0
  /// when absent.
  double nccl_efficiency = 1;
  double nccl_latency_s = 0;
};

/// Link property names of NCCL's achieved bandwidth and start latency
/// (docs/semantics.md, NCCL efficiency and latency).
inline constexpr const char* kNcclEfficiencyProperty = "nccl_efficiency";
inline constexpr const char* kNcclLatencyProperty = "nccl_latency";

/** What NCCL achieves over one link (docs/semantics.md, NCCL efficiency and
 *  latency): a collective's or stage transfer's flow over a route sends
 *  bytes / efficiency (the smallest over the route's links), and each
 *  collective or transfer first waits latency_s (the largest over its
 *  routes' links). Defaults 1 and 0: line rate, no start latency. */
struct LinkNccl {
  double efficiency = 1;
  double latency_s = 0;
  bool is_default() const { return efficiency == 1 && latency_s == 0; }
  /// Over a path through this and `other`: the smaller efficiency and the
  /// larger latency.
  LinkNccl and_then(const LinkNccl& other) const {
    return {efficiency < other.efficiency ? efficiency : other.efficiency,
            latency_s > other.latency_s ? latency_s : other.latency_s};
  }
  friend bool operator==(const LinkNccl&, const LinkNccl&) = default;
};

/** Reads a link's `nccl_efficiency` (a plain number in (0, 1]) and
 *  `nccl_latency` (a duration parse_duration reads, at most
 *  kMaxHostDurationSeconds) from its XML properties; absent ones keep the
 *  defaults, other properties are ignored. InputError naming the file, the
 *  link and the property when a value is malformed or out of range. */
LinkNccl link_nccl_from_properties(const std::string& file, const std::string& link,
                                   const std::map<std::string, std::string>& properties);

/** The NCCL values over `links` (indices into `all`): the smallest
 *  efficiency and the largest latency; the defaults for no link. */
LinkNccl route_nccl(const std::vector<LinkInfo>& all, const std::vector<int>& links);

/** For people: "77% of line rate + 10 us per operation" (either part
 *  alone when the other is the default); empty for the defaults. */
std::string nccl_values_text(const LinkNccl& nccl);
/** nccl_values_text after "NCCL at " ("NCCL " when only the latency is
 *  not the default); empty for the defaults. */
std::string nccl_text(const LinkNccl& nccl);

/// A route between two hosts as SimGrid computes it (sim::read_routes).
struct HostRoute {
  bool found = false;      ///< false: SimGrid finds no route (or one of no link and no latency)
  double latency_s = 0;    ///< the sum of its links' latencies
  std::vector<int> links;  ///< indices into RouteTable::links, in route order
};

/// Routes between chosen pairs of hosts, and the links they cross.
struct RouteTable {
  std::vector<LinkInfo> links;
  std::vector<HostRoute> routes;  ///< one per requested pair, in request order
};

struct PlatformSummary {
  std::string file;
  std::vector<HostInfo> hosts;
  /// route_bandwidth_Bps[a][b]: the narrowest link bandwidth on the route
  /// from hosts[a] to hosts[b] (bytes/s); route_latency_s[a][b]: the sum of
  /// its links' latencies. 0 bandwidth: no route. The diagonal is 0.
  std::vector<std::vector<double>> route_bandwidth_Bps, route_latency_s;
  /// The links routes cross, and route_links[a][b]: indices into `links` of
  /// the route from hosts[a] to hosts[b]. Both empty when unknown (a summary
  /// read back from a plan, or built from --machines): then a cost model
  /// takes every route as a link of its own.
  std::vector<LinkInfo> links;
  std::vector<std::vector<std::vector<int>>> route_links;
  const HostInfo& host(const std::string& name) const;
  /// Index of the named host in `hosts`; InputError when absent.
  int host_index(const std::string& name) const;
};

/** Builds a HostInfo from a host's XML properties (`kind`, `execution`,
 *  `memory`, `speed_factor`, `device`, `action_overhead`,
 *  `optimizer_step_rate`, `optimizer_step_overhead`; all optional). Throws
 *  InputError naming the file, host and property when a value is malformed
 *  (numbers are read whole, finite and in range) or when a property name is
 *  a near miss of a known one (near_miss_property, core/platform_check.hpp:
 *  "did you mean 'memory'"). Other properties are ignored here (the platform
 *  check warns about them). */
HostInfo host_info_from_properties(const std::string& file, const std::string& host,
                                   const std::map<std::string, std::string>& properties);

/** Reads a decimal number at the start of `text`: [+-]digits[.digits] or
 *  [+-].digits, then an optional exponent e[+-]digits; no leading space, no
 *  hexadecimal, inf or nan, independent of the locale. Sets *length to the
 *  characters read. Empty when there is no number there, or when it is out
 *  of double's range (overflow, or a non-zero value that would round to
 *  zero or to a subnormal). */
std::optional<double> scan_number(std::string_view text, std::size_t* length);

/** Parses a byte size: a plain number of bytes or a number with a unit
 *  (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB). Throws InputError using `what`
 *  to name the field. */
double parse_bytes(const std::string& text, const std::string& what);

/** A host's `memory_reserve` (HostInfo): a plain number in [0, 1) is a
 *  fraction of the capacity, anything else a size parse_bytes reads.
 *  Throws InputError using `what` to name the field. */
struct MemoryReserve {
  std::optional<double> bytes, fraction;
};
MemoryReserve parse_memory_reserve(const std::string& text, const std::string& what);

/** Parses a bandwidth: a plain number of bytes per second or a number with a
 *  SimGrid unit ("10Gbps" = 1.25e9, "1.25GBps", "12GiBps"). Zero, negative
 *  and malformed values throw InputError using `what` to name the field. */
double parse_bandwidth(const std::string& text, const std::string& what);

/** Parses a duration: a plain number of seconds or a number with a SimGrid
 *  time unit (ps, ns, us, ms, s, m, h, d, w: "12us" = 1.2e-5). Negative,
 *  non-finite and malformed values throw InputError using `what` to name the
 *  field. */
double parse_duration(const std::string& text, const std::string& what);

const char* to_string(DeviceKind kind);
const char* to_string(Execution execution);

}  // namespace pipegrid
