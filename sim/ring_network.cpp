#include "sim/ring_network.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <unordered_map>

#include "core/platform_check.hpp"

namespace sg = simgrid::s4u;

namespace pipegrid::sim::internal {

// A link's NCCL values (its nccl_efficiency and nccl_latency properties;
// link_nccl_from_properties): InputError naming `file`, the link and the
// property when one is malformed.
// A SPLITDUPLEX link's directions (`id_UP`, `id_DOWN`, the links routes
// cross) carry no properties in SimGrid 3.32: its declared link `id` holds
// them.
LinkNccl link_nccl(const sg::Link& link, const std::string& file) {
  const auto gives_nccl = [](const std::unordered_map<std::string, std::string>* all) {
    return all != nullptr && (all->count(kNcclEfficiencyProperty) > 0 || all->count(kNcclLatencyProperty) > 0);
  };
  const sg::Link* holder = &link;
  if (!gives_nccl(link.get_properties())) {
    const std::string& name = link.get_name();
    std::string declared;
    for (const std::string_view suffix : {std::string_view("_UP"), std::string_view("_DOWN")})
      if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        declared = name.substr(0, name.size() - suffix.size());
    if (declared.empty()) return {};
    try {
      holder = sg::Engine::get_instance()->split_duplex_link_by_name(declared);
    } catch (const std::exception&) {
      return {};  // a link named so, not a direction of one
    }
    if (holder == nullptr || !gives_nccl(holder->get_properties())) return {};
  }
  const auto* all = holder->get_properties();
  const std::map<std::string, std::string> properties(all->begin(), all->end());
  return link_nccl_from_properties(printable(file), holder->get_name(), properties);
}

RingNetwork::RingNetwork(std::string platform_file, CollectiveModel model)
    : platform_file_(std::move(platform_file)), model_(model) {
  for (const sg::Link* link : sg::Engine::get_instance()->get_all_links())
    nccl_links_ = nccl_links_ || !link_nccl(*link, platform_file_).is_default();
}

// NCCL's efficiency and start latency (docs/semantics.md, NCCL efficiency
// and latency) over the route from `from` to `to`: the smallest
// nccl_efficiency and the largest nccl_latency of its links, read once per
// route; the defaults (no SimGrid call) when no link of the platform
// gives either.
LinkNccl RingNetwork::route_nccl(sg::Host* from, sg::Host* to) {
  if (!nccl_links_) return {};
  const auto route = std::make_pair(from, to);
  if (const auto known = route_nccl_.find(route); known != route_nccl_.end()) return known->second;
  std::vector<sg::Link*> links;
  double latency = 0;
  from->route_to(to, links, &latency);
  LinkNccl nccl;
  for (const sg::Link* link : links) nccl = nccl.and_then(link_nccl(*link, platform_file_));
  return route_nccl_.emplace(route, nccl).first->second;
}

// The NCCL values of a ring over `hosts` (each to the next, the last to
// the first): the smallest efficiency and the largest latency of its
// routes; computed once into `known`.
LinkNccl RingNetwork::ring_nccl(const std::vector<sg::Host*>& hosts, std::optional<LinkNccl>& known) {
  if (!nccl_links_) return {};
  if (known) return *known;
  LinkNccl nccl;
  for (std::size_t p = 0; p < hosts.size() && hosts.size() > 1; ++p)
    nccl = nccl.and_then(route_nccl(hosts[p], hosts[(p + 1) % hosts.size()]));
  known = nccl;
  return nccl;
}

// A collective's message of `bytes` from `from` to `to`, started now.
sg::CommPtr RingNetwork::start_collective_message(sg::Host* from, sg::Host* to, double bytes) {
  sg::CommPtr comm = sg::Comm::sendto_init(from, to);
  comm->set_payload_size(static_cast<uint64_t>(std::llround(bytes)));
  comm->start();
  ++collective_communications_;
  return comm;
}

// Unless the route's latency is known: a zero-byte message from `from` to
// `to` beside a collective's flow, whose time is the latency SimGrid gives
// a message on that route (its network model's factor included).
sg::CommPtr RingNetwork::start_latency_probe(sg::Host* from, sg::Host* to) {
  return route_latency_.count({from, to}) ? nullptr : start_collective_message(from, to, 0);
}

// The latency of the route from `from` to `to`, measured once: waits for
// `probe` (start_latency_probe's) when it is not known yet.
double RingNetwork::route_latency(sg::Host* from, sg::Host* to, const sg::CommPtr& probe) {
  const auto route = std::make_pair(from, to);
  if (const auto known = route_latency_.find(route); known != route_latency_.end()) return known->second;
  probe->wait();
  return route_latency_.emplace(route, probe->get_finish_time() - probe->get_start_time()).first->second;
}


// The rails ring step p -> p + 1 runs over when it crosses from one
// server (a host's englobing netzone) into another: NCCL runs a ring
// collective as several channels, each crossing between servers on the
// NIC of its own GPU, the same rail on both sides (NCCL_CROSS_NIC's
// default: "NCCL tries to communicate between same NICs between nodes",
// NCCL environment variables documentation), so the step's bytes spread
// over the c = min(a, b) GPU pairs of the a ring members that end the
// sending server's run and the b that start the receiving one's: pairs
// (the i-th last of the one, the i-th first of the other) ... in ring
// order. Empty when the step stays inside a server.
std::vector<std::pair<sg::Host*, sg::Host*>> RingNetwork::crossing_rails(const std::vector<sg::Host*>& hosts, std::size_t p) const {
  const std::size_t r = hosts.size();
  const std::size_t next = (p + 1) % r;
  const sg::NetZone* from = hosts[p]->get_englobing_zone();
  const sg::NetZone* to = hosts[next]->get_englobing_zone();
  if (from == to) return {};
  std::vector<sg::Host*> senders, receivers;  // senders from p backwards, receivers from next forwards
  for (std::size_t k = 0; k < r && hosts[(p + r - k) % r]->get_englobing_zone() == from; ++k)
    senders.push_back(hosts[(p + r - k) % r]);
  for (std::size_t k = 0; k < r && hosts[(next + k) % r]->get_englobing_zone() == to; ++k)
    receivers.push_back(hosts[(next + k) % r]);
  const std::size_t c = std::min(senders.size(), receivers.size());
  std::vector<std::pair<sg::Host*, sg::Host*>> rails;
  for (std::size_t i = 0; i < c; ++i) rails.emplace_back(senders[c - 1 - i], receivers[i]);
  return rails;
}

// The flows of ring step p -> p + 1 carrying `bytes`, started now: one
// inside a server, bytes / c over each of the c rails into another
// (crossing_rails).
std::vector<sg::CommPtr> RingNetwork::start_ring_step(const std::vector<sg::Host*>& hosts, std::size_t p, double bytes) {
  const std::vector<std::pair<sg::Host*, sg::Host*>> rails = crossing_rails(hosts, p);
  if (rails.empty()) return {start_collective_message(hosts[p], hosts[(p + 1) % hosts.size()], bytes)};
  std::vector<sg::CommPtr> flows;
  for (const std::pair<sg::Host*, sg::Host*>& rail : rails)
    flows.push_back(start_collective_message(rail.first, rail.second, bytes / static_cast<double>(rails.size())));
  return flows;
}

RingNetwork::Part RingNetwork::run_ring(Progress& ring, std::size_t p, CollectiveKind kind, double bytes) {
  const std::size_t r = ring.hosts.size();
  const std::size_t next = (p + 1) % r, previous = (p + r - 1) % r;
  const int steps = static_cast<int>(kind == CollectiveKind::AllReduce ? 2 * (r - 1) : r - 1);
  const double chunk = bytes / static_cast<double>(r);
  const double start = sg::Engine::get_clock();
  // NCCL: the ring's start latency once, then each step's bytes / efficiency.
  const LinkNccl nccl = ring_nccl(ring.hosts, ring.nccl);
  const double wire_chunk = chunk / nccl.efficiency;
  if (model_ == CollectiveModel::Rounds) {
    std::vector<int>& rounds = ring.rounds;
    if (steps > 0 && nccl.latency_s > 0) sg::this_actor::sleep_for(nccl.latency_s);
    for (int round = 0; round < steps; ++round) {
      start_collective_message(ring.hosts[p], ring.hosts[next], wire_chunk)->wait();
      rounds[p] = round + 1;
      ring.signal->notify_all();
      std::unique_lock lock(*mutex_);
      while (rounds[previous] < round + 1) ring.signal->wait(lock);
    }
  } else {
    ++ring.joined;
    ring.signal->notify_all();
    {
      std::unique_lock lock(*mutex_);
      while (ring.joined < r) ring.signal->wait(lock);
    }
    if (steps > 0) {
      if (nccl.latency_s > 0) sg::this_actor::sleep_for(nccl.latency_s);
      // A step into another server runs over as many rails as both servers
      // have ring members (crossing_rails); inside a server, one flow.
      const std::vector<sg::CommPtr> flows = start_ring_step(ring.hosts, p, steps * wire_chunk);
      const double latency = route_latency(ring.hosts[p], ring.hosts[next], start_latency_probe(ring.hosts[p], ring.hosts[next]));
      for (const sg::CommPtr& flow : flows) flow->wait();
      if (steps > 1 && latency > 0) sg::this_actor::sleep_for((steps - 1) * latency);
    }
    ++ring.left;
    ring.signal->notify_all();
    std::unique_lock lock(*mutex_);
    while (ring.left < r) ring.signal->wait(lock);
  }
  return {start, sg::Engine::get_clock(), steps * chunk, next};
}

}  // namespace pipegrid::sim::internal
