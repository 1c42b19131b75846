#pragma once
// Internal to sim/: what the Program engine (engine.cpp) and the graph
// replay (graph_engine.cpp) share inside one SimGrid engine: NCCL values of
// routes, the latency SimGrid gives a route, and ring collectives over the
// platform's routes (docs/semantics.md, "Collectives"). Not part of the
// library's interface.

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <simgrid/s4u.hpp>

#include "core/platform.hpp"
#include "sim/engine.hpp"

namespace pipegrid::sim::internal {

/// The collectives of a gradient synchronisation: an all-reduce has
/// k = 2(r - 1) ring steps, a reduce-scatter and an all-gather k = r - 1.
enum class CollectiveKind { AllReduce, ReduceScatter, AllGather };

/** A link's NCCL values (its nccl_efficiency and nccl_latency properties;
 *  link_nccl_from_properties): InputError naming `file`, the link and the
 *  property when one is malformed. A SPLITDUPLEX link's directions carry
 *  no properties in SimGrid 3.32: its declared link holds them. */
LinkNccl link_nccl(const simgrid::s4u::Link& link, const std::string& file);

/** The ring collectives of one simulation and what they measure once
 *  (route NCCL values, route latencies). Create after the platform is
 *  loaded (it reads every link's NCCL properties). */
class RingNetwork {
 public:
  RingNetwork(std::string platform_file, CollectiveModel model);

  /// The state one ring collective's participants share.
  struct Progress {
    const std::vector<simgrid::s4u::Host*>& hosts;  ///< ring order
    std::vector<int>& rounds;             ///< per participant (Rounds)
    std::size_t& joined;                  ///< participants that have joined (Flows)
    std::size_t& left;                    ///< participants done (Flows)
    simgrid::s4u::ConditionVariablePtr signal;
    std::optional<LinkNccl>& nccl;        ///< the ring's NCCL values, once known (ring_nccl)
  };
  /// A participant's part in a ring collective: from its start (when it
  /// joined) to its end, the bytes it sent, its successor in the ring.
  struct Part {
    double start_s = 0, end_s = 0, bytes = 0;
    std::size_t next = 0;
  };

  /** Participant p's part in one ring collective of `bytes` over
   *  ring.hosts, as the collective model says (CollectiveModel); returns
   *  when p is done. */
  Part run_ring(Progress& ring, std::size_t p, CollectiveKind kind, double bytes);

  /// NCCL's efficiency and start latency over the route from `from` to `to`:
  /// the smallest nccl_efficiency and the largest nccl_latency of its links,
  /// read once per route; the defaults when no link of the platform gives either.
  LinkNccl route_nccl(simgrid::s4u::Host* from, simgrid::s4u::Host* to);
  /// The NCCL values of a ring over `hosts`: the smallest efficiency and the
  /// largest latency of its routes; computed once into `known`.
  LinkNccl ring_nccl(const std::vector<simgrid::s4u::Host*>& hosts, std::optional<LinkNccl>& known);
  /// A collective's message of `bytes` from `from` to `to`, started now.
  simgrid::s4u::CommPtr start_collective_message(simgrid::s4u::Host* from, simgrid::s4u::Host* to, double bytes);
  /// Unless the route's latency is known: a zero-byte message from `from`
  /// to `to` whose time is the latency SimGrid gives a message on that route.
  simgrid::s4u::CommPtr start_latency_probe(simgrid::s4u::Host* from, simgrid::s4u::Host* to);
  /// The latency of the route, measured once: waits for `probe` when unknown.
  double route_latency(simgrid::s4u::Host* from, simgrid::s4u::Host* to, const simgrid::s4u::CommPtr& probe);
  /// The rails ring step p -> p + 1 runs over when it crosses from one
  /// server into another (NCCL_CROSS_NIC's default); empty inside a server.
  std::vector<std::pair<simgrid::s4u::Host*, simgrid::s4u::Host*>> crossing_rails(
      const std::vector<simgrid::s4u::Host*>& hosts, std::size_t p) const;
  /// The flows of ring step p -> p + 1 carrying `bytes`, started now: one
  /// inside a server, bytes / c over each of the c rails into another.
  std::vector<simgrid::s4u::CommPtr> start_ring_step(const std::vector<simgrid::s4u::Host*>& hosts, std::size_t p,
                                                     double bytes);
  /// The mutex its waits use: the engine's waits on the same condition
  /// variables use it too.
  simgrid::s4u::MutexPtr mutex() const { return mutex_; }
  /// SimGrid communications the collectives started.
  std::size_t collective_communications() const { return collective_communications_; }

 private:
  std::string platform_file_;
  CollectiveModel model_;
  /// Whether some link of the platform gives nccl_efficiency or nccl_latency.
  bool nccl_links_ = false;
  std::map<std::pair<simgrid::s4u::Host*, simgrid::s4u::Host*>, LinkNccl> route_nccl_;
  std::map<std::pair<simgrid::s4u::Host*, simgrid::s4u::Host*>, double> route_latency_;
  std::size_t collective_communications_ = 0;
  simgrid::s4u::MutexPtr mutex_ = simgrid::s4u::Mutex::create();
};

}  // namespace pipegrid::sim::internal
