#pragma once
// A SimGrid platform for a cluster of identical GPU servers, made from a few
// numbers: `pipegrid platform cluster` writes it, and an experiment file may
// give a platform as a table of the same options. Pure: the XML text comes
// out, nothing here loads it (docs/platforms.md, Generated clusters).

#include <map>
#include <string>
#include <vector>

namespace pipegrid {

/// How the GPUs of one server are wired to each other.
enum class IntraLink {
  PerGpu,  ///< each GPU its own full-duplex link to the server's switch (NVLink/NVSwitch, PCIe switch ports)
  Shared,  ///< one link per server that every transfer inside it shares, both directions (a shared PCIe tree)
};

/// A network level: a transfer alone on its route takes
/// latency_s + bytes / bandwidth_Bps.
struct ClusterLink {
  double bandwidth_Bps = 0;
  double latency_s = 0;
};

/// The memory a generated cluster's hosts hold back from the model unless
/// --memory-reserve says otherwise: 5% of each GPU's memory, for what a
/// training process holds besides its model state and activations (docs/
/// platforms.md, Memory reserve): the CUDA context (0.3 to 0.6 GiB), NCCL's
/// communication buffers (about 0.5 to 1 GiB at its default buffer size),
/// and the caching allocator's fragmentation (a few percent of the peak).
inline constexpr const char* kDefaultClusterMemoryReserve = "0.05";

struct ClusterSpec {
  int servers = 1;
  int gpus_per_server = 1;
  std::string device;  ///< each host's `device` property (selects a profile's per-device times)
  std::string memory;  ///< each host's `memory` property, as given (parse_bytes reads it)
  /// each host's `memory_reserve` property, as given (parse_memory_reserve
  /// reads it): kDefaultClusterMemoryReserve unless stated
  std::string memory_reserve = kDefaultClusterMemoryReserve;
  ClusterLink intra;   ///< between two GPUs of one server
  ClusterLink inter;   ///< between two GPUs of different servers
  IntraLink intra_link = IntraLink::PerGpu;
  double speed_flops = 1e12;  ///< SimGrid host speed; not used for profile-timed work (docs/platforms.md)
};

/// Bounds on a generated cluster: at most kMaxClusterHosts hosts (the most a
/// platform may declare, kMaxPlatformHosts in sim/platform_xml.hpp), and
/// server and GPU counts that keep the file well under pipegrid's 64 MiB
/// limit on platform files (routes grow with servers^2 and GPUs^2).
constexpr int kMaxClusterHosts = 4096;
constexpr int kMaxClusterServers = 256;
constexpr int kMaxClusterGpusPerServer = 64;

/** The option names, without `--` and with '_': servers, gpus_per_server,
 *  device, memory, memory_reserve, intra, inter, intra_link, speed. */
const std::vector<std::string>& cluster_option_names();

/** The spec the options give. Keys are the option names with '_' or '-'
 *  and an optional leading `--` ("gpus_per_server", "gpus-per-server",
 *  "--gpus-per-server"); values are text:
 *  - servers, gpus_per_server: integers >= 1 (at most kMaxClusterServers,
 *    kMaxClusterGpusPerServer, kMaxClusterHosts hosts in all);
 *  - device: a name of letters, digits, '.', '_', '+' and '-';
 *  - memory: a size parse_bytes reads ("16GiB"), > 0;
 *  - memory_reserve: a fraction in [0, 1) or a size below memory
 *    (parse_memory_reserve; default kDefaultClusterMemoryReserve);
 *  - intra, inter: "BANDWIDTH[,LATENCY]" with SimGrid's units ("25Gbps",
 *    "12GBps", plain numbers: bytes/s; "5us", plain numbers: seconds);
 *    latency 0 when omitted; bandwidth >= 1 B/s, latency <= 1e9 s;
 *  - intra_link: per-gpu (default) or shared;
 *  - speed: flop/s with SimGrid's units ("1Tf", default), 1e-6 to 1e24.
 *  servers, gpus_per_server, device, memory, intra and inter are required.
 *  Throws InputError starting with `where` and naming the key as given: a
 *  malformed or out-of-range value (what was expected, what was found), a
 *  missing key, a key given twice under two spellings, an unknown key (with
 *  the nearest name: "did you mean 'gpus_per_server'?"). */
ClusterSpec cluster_spec_from_options(const std::map<std::string, std::string>& options, const std::string& where);

/** The platform XML (SimGrid 4.1), the same text for the same spec:
 *  - a zone `cluster` holding one zone per server, `server0` ...; hosts
 *    `sK-gpuG` in that order (pipeline order), each with properties
 *    kind=gpu, device, memory and memory_reserve;
 *  - inside a server (per-gpu): link `sK-gpuG-link` per GPU, full duplex,
 *    intra bandwidth and half the intra latency; GPU a -> b crosses a's link
 *    up and b's down. (shared): one link `sK-bus` with the intra bandwidth
 *    and latency that every transfer inside the server crosses;
 *  - between servers (two or more): link `sK-nic` per server, full duplex,
 *    inter bandwidth and half the inter latency, and a non-blocking switch
 *    `switch` (FATPIPE, inter bandwidth, no latency); a GPU of server a to
 *    one of server b crosses a's NIC up, the switch and b's NIC down: the
 *    inter latency, and everything a server sends (receives) shares its NIC;
 *  - every pair of hosts routed both ways.
 *  Values with SimGrid units, written so that they read back exactly. */
std::string cluster_platform_xml(const ClusterSpec& spec);

}  // namespace pipegrid
