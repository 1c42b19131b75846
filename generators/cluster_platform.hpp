#pragma once
// A SimGrid platform for a cluster of identical GPU servers, made from a few
// numbers: `pipegrid platform cluster` writes it, and an experiment file may
// give a platform as a table of the same options. Pure: the XML text comes
// out, nothing here loads it (docs/platforms.md, Generated clusters).

#include <map>
#include <string>
#include <vector>

#include "core/platform.hpp"

namespace pipegrid {

/// How the GPUs of one server are wired to each other.
enum class IntraLink {
  PerGpu,  ///< each GPU its own full-duplex link to the server's switch (NVLink/NVSwitch, PCIe switch ports)
  Shared,  ///< one link per server that every transfer inside it shares, both directions (a shared PCIe tree)
};

/// How a server reaches the fabric between servers.
enum class NicLayout {
  PerServer,  ///< one full-duplex NIC link per server that all its GPUs share
  PerGpu,     ///< each GPU its own full-duplex NIC link (DGX A100/H100: 8 x 200/400 Gb/s)
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
  NicLayout nic = NicLayout::PerServer;
  /// Servers under one leaf switch, dividing `servers`; 0: every server on
  /// one switch (as is a value equal to `servers`).
  int servers_per_leaf = 0;
  /// A leaf's uplink bandwidth is servers_per_leaf x a server's NIC
  /// bandwidth / oversubscription (>= 1); only with two or more leaves.
  double oversubscription = 1;
  double speed_flops = 1e12;  ///< SimGrid host speed; not used for profile-timed work (docs/platforms.md)
  /// What NCCL achieves inside a server and between servers: written as the
  /// links' nccl_efficiency and nccl_latency properties (the intra links,
  /// the NICs), each only when not the default 1 or 0 (docs/semantics.md,
  /// NCCL efficiency and latency). A spec built by hand has none;
  /// cluster_spec_from_options gives cluster_nccl_defaults unless told.
  LinkNccl intra_nccl, inter_nccl;
};

/** The NCCL values cluster_spec_from_options gives a cluster of `device`
 *  (docs/platforms.md, NCCL defaults): inside a server with per-gpu links
 *  (NVLink through NVSwitch), V100 and A100 0.77 (A100's ~230 GB/s
 *  all_reduce busbw of 300 GB/s; V100 carried over), H100 and H200 0.822
 *  (370 of 450 GB/s, NVIDIA/nccl-tests issue 212), each 10 us; a shared
 *  intra link (a PCIe tree) none; between servers, for every GPU of the
 *  catalogue, 0.92 and 25 us; none for other devices. */
struct ClusterNccl {
  LinkNccl intra, inter;
};
ClusterNccl cluster_nccl_defaults(const std::string& device, IntraLink intra_link);

/// Bounds on a generated cluster: at most kMaxClusterHosts hosts (the most a
/// platform may declare, kMaxPlatformHosts in sim/platform_xml.hpp); at most
/// kMaxClusterSwitchPorts servers on one switch (the flat switch or a leaf)
/// and leaves on the spine (SimGrid's route cache for a switch's zone holds
/// a number per pair of its members); and at most kMaxClusterIntraRoutes
/// routes inside servers (servers x G x (G - 1): a server's GPUs are routed
/// pair by pair), which keeps the file under pipegrid's 64 MiB limit on
/// platform files. Everything else grows linearly with the servers.
constexpr int kMaxClusterHosts = 16384;
constexpr int kMaxClusterServers = 16384;
constexpr int kMaxClusterGpusPerServer = 64;
constexpr int kMaxClusterSwitchPorts = 2048;
constexpr long long kMaxClusterIntraRoutes = 262144;
constexpr double kMaxClusterOversubscription = 1e6;

/** The option names, without `--` and with '_': servers, gpus_per_server,
 *  device, memory, memory_reserve, intra, inter, intra_link, speed, nic,
 *  servers_per_leaf, oversubscription. */
const std::vector<std::string>& cluster_option_names();

/** The spec the options give. Keys are the option names with '_' or '-'
 *  and an optional leading `--` ("gpus_per_server", "gpus-per-server",
 *  "--gpus-per-server"); values are text:
 *  - servers, gpus_per_server: integers >= 1 (at most kMaxClusterServers,
 *    kMaxClusterGpusPerServer, kMaxClusterHosts hosts and
 *    kMaxClusterIntraRoutes routes inside servers in all);
 *  - device: a name of letters, digits, '.', '_', '+' and '-';
 *  - memory: a size parse_bytes reads ("16GiB"), > 0;
 *  - memory_reserve: a fraction in [0, 1) or a size below memory
 *    (parse_memory_reserve; default kDefaultClusterMemoryReserve);
 *  - intra, inter: "BANDWIDTH[,LATENCY]" with SimGrid's units ("25Gbps",
 *    "12GBps", plain numbers: bytes/s; "5us", plain numbers: seconds);
 *    latency 0 when omitted; bandwidth >= 1 B/s, latency <= 1e9 s;
 *  - intra_link: per-gpu (default) or shared;
 *  - speed: flop/s with SimGrid's units ("1Tf", default), 1e-6 to 1e24;
 *  - nic: per-server (default) or per-gpu;
 *  - servers_per_leaf: an integer from 1 to servers that divides servers;
 *    without it, or equal to servers, one switch (at most
 *    kMaxClusterSwitchPorts servers on it, and leaves on the spine);
 *  - oversubscription: a number from 1 to kMaxClusterOversubscription
 *    (default 1), only with two or more leaves;
 *  - intra_nccl_efficiency, inter_nccl_efficiency: a number in (0, 1], or
 *    none (1); intra_nccl_latency, inter_nccl_latency: a duration
 *    ("10us", plain numbers: seconds) of at most 1e9 s, or none (0);
 *    defaults cluster_nccl_defaults(device, intra_link).
 *  servers, gpus_per_server, device, memory, intra and inter are required.
 *  Throws InputError starting with `where` and naming the key as given: a
 *  malformed or out-of-range value (what was expected, what was found), a
 *  missing key, a key given twice under two spellings, an unknown key (with
 *  the nearest name: "did you mean 'gpus_per_server'?"). */
ClusterSpec cluster_spec_from_options(const std::map<std::string, std::string>& options, const std::string& where);

/** The platform XML (SimGrid 4.1), the same text for the same spec. Routes
 *  are found by SimGrid when needed (DijkstraCache zones over switches), not
 *  declared per pair of servers: the file grows linearly with the servers.
 *  - links inside a server carry spec.intra_nccl, NICs spec.inter_nccl, as
 *    properties nccl_efficiency and nccl_latency (each only when not 1 or
 *    0); switches, uplinks and the spine none (a route's values are the
 *    smallest efficiency and largest latency over its links);
 *  - hosts `sK-gpuG` in that order (pipeline order), each in the zone
 *    `serverK` (routing Full), with properties kind=gpu, device, memory and
 *    memory_reserve;
 *  - inside a server (per-gpu): link `sK-gpuG-link` per GPU, full duplex,
 *    intra bandwidth and half the intra latency; GPU a -> b crosses a's link
 *    up and b's down. (shared): one link `sK-bus` with the intra bandwidth
 *    and latency that every transfer inside the server crosses;
 *  - NICs (two or more servers): nic per-server: link `sK-nic` per server;
 *    per-gpu: link `sK-gpuG-nic` per GPU; full duplex, inter bandwidth and
 *    half the inter latency, between the GPU and the server's gateway
 *    router `sK-router`;
 *  - one switch (no leaves, or one): a zone `cluster` (DijkstraCache) holding
 *    the servers and a zone `switch` (router `switch-router`), and a link
 *    `switch` (FATPIPE, inter bandwidth, no latency) on the zone routes
 *    between each server and the switch, both ways;
 *  - leaf-spine: the zone `cluster` holds zones `leafL` (DijkstraCache), each
 *    with its servers and a switch zone `leafL-switch` (router
 *    `leafL-switch-router`,
 *    link `leafL-switch` as above), and a spine zone `spine` (router
 *    `spine-router`, FATPIPE link `spine`); each leaf's uplink `leafL-uplink`
 *    (full duplex, servers_per_leaf x a server's NIC bandwidth /
 *    oversubscription, no latency) and the spine join leaf and spine;
 *  - a GPU of server a to one of server b: a's NIC up, the leaf (switch),
 *    [a's leaf uplink up, the spine, b's leaf uplink down, b's leaf,] b's NIC
 *    down: the inter latency; a switch's FATPIPE link, crossed on the way in
 *    and out, counts once in SimGrid's sharing (FATPIPE takes the largest
 *    use) and adds no latency.
 *  With two or more servers, every link is declared at the top of the root
 *  zone `cluster` (after the first switch's zone), where SimGrid 3.32 finds
 *  a link by name at once. Values with SimGrid units, written so that they
 *  read back exactly. */
std::string cluster_platform_xml(const ClusterSpec& spec);

}  // namespace pipegrid

namespace pipegrid {

/// A server of the catalogue `pipegrid plan --server` lays clusters out of:
/// its GPUs and links as `platform cluster` options (docs/platforms.md,
/// Server catalogue, gives each value's source).
struct CatalogueServer {
  std::string name;
  int gpus_per_server = 8;
  std::string device, memory, intra, inter, nic;
  std::string description;
};

/** The catalogue's names, in its order. */
std::vector<std::string> catalogue_server_names();
/** The entry `name`; InputError naming --server and listing the names
 *  (with the nearest) otherwise. */
const CatalogueServer& catalogue_server(const std::string& name);
/** `servers` of `server` on one switch, with cluster_spec_from_options's
 *  defaults (memory reserve, NCCL values). */
ClusterSpec catalogue_cluster_spec(const CatalogueServer& server, int servers);

}  // namespace pipegrid
