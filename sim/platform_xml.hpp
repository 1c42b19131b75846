#pragma once
// Checks a SimGrid platform file before SimGrid reads it. SimGrid aborts the
// process (xbt_die), crashes or misreads on several kinds of bad input (a
// zero or negative speed or bandwidth, a duplicated route, a number out of
// range); pipegrid refuses them first, with a message naming the file, the
// element and the value. Logic over the XML text (Boost.PropertyTree); no
// SimGrid engine here.

#include <cstddef>
#include <string>
#include <vector>

namespace pipegrid {

/// Most hosts a platform may declare (<host>, <peer> and cluster or cabinet
/// members together): 16,384 GPUs, the largest jobs pipegrid simulates
/// (docs/platforms.md, Limits). Partitioners, which need the all-pairs route
/// matrix, read at most kMaxRouteMatrixHosts of them (sim/engine.hpp).
constexpr std::size_t kMaxPlatformHosts = 16384;
/// Largest platform file pipegrid reads, in bytes.
constexpr std::size_t kMaxPlatformFileBytes = 64u << 20;

/// Bounds on platform values (docs/platforms.md, Limits): a host speed (each
/// pstate; the engine hands SimGrid t seconds of work as t x speed flops), a
/// bandwidth (bytes / bandwidth stays finite) and a latency (sums of
/// latencies stay finite).
constexpr double kMinHostSpeed = 1e-6, kMaxHostSpeed = 1e24;
constexpr double kMinBandwidth = 1;
constexpr double kMaxLatencySeconds = 1e9;

struct PlatformCheck {
  /// One line each (no "warning:" prefix): unknown host properties.
  std::vector<std::string> warnings;
  /// Hosts the file declares (<host>, <peer>, cluster and cabinet members).
  std::size_t hosts = 0;
};

/** Checks the text of SimGrid platform `file` (for messages):
 *  - well-formed XML under a <platform> root of version 4.x;
 *  - every speed (each pstate) positive and finite, every bandwidth positive
 *    and finite, every latency non-negative and finite, with SimGrid's units;
 *    integer attributes (core, pstate, radicals) in range;
 *  - host ids that pipegrid's outputs can carry (host_id_problem), no two
 *    hosts, routers or zones with one id, no two links with one id;
 *  - zone routing known, routes only in zones that take them, no route
 *    declared twice in a zone (a symmetrical route declares its reverse);
 *  - host properties (in <host> and <cluster>): values as
 *    host_info_from_properties reads them, no property given twice, no near
 *    miss of a known name (an error with the suggestion); other names are
 *    returned as warnings;
 *  - at most kMaxPlatformHosts hosts.
 *  Throws InputError naming the file and the element. Does not check routes
 *  between hosts (SimGrid computes them; sim/ checks the ones a run needs). */
PlatformCheck check_platform_xml(const std::string& file, const std::string& xml);

}  // namespace pipegrid
