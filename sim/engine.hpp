#pragma once
// The SimGrid engine. One S4U actor per device stream interprets its action
// list; activations and gradients travel as SimGrid communications along the
// platform's routes (eager: a send never waits for the receiver); between
// two stages of one device nothing travels. How concurrent activations and
// gradients share the network is SimulationRequest::transfer_rule. A device
// that takes part in all-reduces has one more actor (its communication
// stream) that runs them in Program order as ring collectives over the real
// routes (SimulationRequest::collective_model: one flow per neighbour pair,
// or round by round), so they contend with pipeline traffic as SimGrid
// shares links; with the distributed optimizer each becomes reduce-scatters,
// the optimizer step and all-gathers (docs/semantics.md, "Gradient
// synchronisation"). Hosts may declare an action overhead (added to every F, B, R) and
// an optimizer step (a "U" compute record at each weight update; see
// SimulationRequest::update_interval and docs/semantics.md). The engine
// knows actions, never schedule names.

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/partition.hpp"
#include "core/platform.hpp"
#include "core/program.hpp"
#include "core/tensor_parallel.hpp"
#include "core/timeline.hpp"

namespace pipegrid::sim {

enum class NetworkModel {
  Analytic,  ///< exactly latency + bytes / bandwidth per transfer (CM02, no TCP corrections)
  SimGrid,   ///< SimGrid's default realistic model
};
const char* to_string(NetworkModel model);
NetworkModel parse_network_model(const std::string& text);

/// How the activations and gradients that leave a host share the network
/// (docs/semantics.md, "Transfer rules"). All-reduce rounds follow Share
/// under both rules.
enum class TransferRule {
  /// Every message starts when it is ready; concurrent messages share the
  /// links as the network model does.
  Share,
  /// One message at a time per (source host, destination host) channel: a
  /// message starts when it is ready and the channel's previous message (in
  /// the order they became ready; at one instant, program order) has
  /// arrived. Messages on different channels share the links as under Share.
  Fifo,
};
const char* to_string(TransferRule rule);
/// InputError naming --transfer-rule unless `text` is share or fifo.
TransferRule parse_transfer_rule(const std::string& text);

/** One layer of a stage: its share of the backward and of the gradients
 *  (per-layer, wait-free all-reduces) and its times on particular device
 *  types (Layer::device_times). */
/// A layer's times on one device type (seconds on that host), with the
/// backward's input- and weight-gradient halves (core/profile.hpp,
/// backward_split).
struct DeviceLayerTimes {
  double forward_s = 0, backward_s = 0, backward_input_s = 0, backward_weight_s = 0;
};

struct LayerCost {
  double backward_s = 0;  ///< profile units (speed factor 1)
  double weight_bytes = 0;
  double forward_s = 0;   ///< profile units; needed with device_times
  double backward_input_s = 0, backward_weight_s = 0;  ///< the backward's halves, profile units
  /// A host whose `device` property is listed runs this layer in these times
  /// (seconds on that host; its speed_factor does not apply).
  std::map<std::string, DeviceLayerTimes> device_times = {};
  /// The share of its forward a recompute (R) re-runs when the stage's
  /// StageCost::recompute_s is set (its device times scaled alike).
  double recompute_share = 1;
  /// Its tensor-parallel collectives, run as flows over the group of the
  /// stage's host (SimulationRequest::tensor_parallel_members); none when
  /// they are charged as compute time (in the times above) or t is 1.
  LayerCollectives tensor_parallel = {};
  /// Bytes one token-dispatch all-to-all of this layer delivers to the
  /// busiest expert-parallel rank (Layer::moe_dispatch_bytes of the
  /// member's profile); 0: no all-to-all. Run as flows over the
  /// expert-parallel groups (SimulationRequest::expert_parallel_ranks).
  double moe_dispatch_bytes = 0;
};

/// How a ring collective over r participants moves S bytes (docs/semantics.md,
/// "Collectives"). An all-reduce has k = 2(r-1) steps, a reduce-scatter and
/// an all-gather k = r-1; each step moves S / r bytes from every participant
/// to the next.
enum class CollectiveModel {
  /// Once every participant has joined, one flow per participant to the next
  /// of k S / r bytes, then (k - 1) more latencies of that route (as SimGrid
  /// applies them: measured by a zero-byte message on the route); the
  /// collective ends for all when the last participant has: O(r) activities.
  Flows,
  /// k rounds: each participant sends S / r bytes to the next and waits for
  /// the previous participant's chunk of that round: O(r k) activities.
  Rounds,
};
const char* to_string(CollectiveModel model);
/// InputError naming --collective-model unless `text` is flows or rounds.
CollectiveModel parse_collective_model(const std::string& text);

struct SimulationRequest {
  std::string platform_file;
  /// > 0: GPU hosts with a device model and no declared optimizer step
  /// take the step their device model implies at this many bytes moved per
  /// weight byte (give_device_optimizer_steps, core/device_model.hpp).
  double device_step_bytes_per_weight_byte = 0;
  Program program;
  /// Per stage, profile units (speed factor 1). A forward (or recompute) of
  /// stage s on a host takes stages[s].forward_s / speed_factor (a recompute
  /// its recompute_s when set, each layer's share of its forward being
  /// LayerCost::recompute_share), a B its
  /// backward_s, an I its backward_input_s, a W its backward_weight_s, unless some layers of
  /// stage_layers[s] have device_times for the host's `device`: those layers
  /// then take their device times, and the rest of the stage's time
  /// (stages[s].forward_s less those layers' forward_s: the other layers and
  /// any time no layer accounts for, such as PipeOptim's weight prediction)
  /// is divided by speed_factor. The same for backwards. Without device
  /// times this is the plain stage time / speed_factor, bit for bit.
  std::vector<StageCost> stages;
  /// hosts[stage][replica]: the host running each device of the Program (a
  /// device holding several stages: the host of each of them).
  std::vector<std::vector<std::string>> hosts;
  /// An overlapped F&B pair (Stream::overlapped) runs for fb_overlap x (the
  /// forward's time + the backward's time) on its host, in (0, 1].
  double fb_overlap = 1.0;
  /// stage_layers[stage]: the stage's layers in order; needed when the
  /// Program has per-layer all-reduces (a whole-stage layer is assumed if
  /// empty) and when layers have device_times.
  std::vector<std::vector<LayerCost>> stage_layers;
  NetworkModel network = NetworkModel::Analytic;
  TransferRule transfer_rule = TransferRule::Share;
  /// Blocking stage transfers (Megatron-LM's p2p without overlap,
  /// --no-overlap-p2p-communication: its send/recv are blocking NCCL calls on
  /// the compute stream). When true, after an action whose result goes to
  /// another host (an F's activation, a B's gradient), the stream that ran it
  /// starts nothing else (not even the optimizer step that follows it) until
  /// that message has arrived at the receiver: its last byte plus the route's
  /// NCCL start latency, the time the receiver uses. The action's compute
  /// record keeps its own end; the wait is idle time on the sender. An
  /// overlapped F&B pair waits after the pair for both of its messages.
  /// false: sends overlap the sender's next actions.
  bool blocking_transfers = false;
  /// When the weights of a device without all-reduces are updated, for the
  /// optimizer step of hosts that declare one (HostInfo::has_optimizer_step):
  /// 0: after the device's last backward of each mini-batch and stage (flushed
  /// schedules); k >= 1: after every k-th backward of the device in program
  /// order (pipedream and pipeoptim 1, pipedream-2bw its update interval).
  /// A device that takes part in all-reduces steps after each of them.
  int update_interval = 0;
  /// A recompute (R) starts only once the gradient its backward consumes
  /// has arrived (Megatron's recomputation runs inside the backward);
  /// false: once its forward has ended (GPipe's, which may run ahead).
  bool recompute_waits_for_gradient = false;
  CollectiveModel collective_model = CollectiveModel::Flows;
  /// Megatron-Core DDP buckets of an AllReduce with `bucketed`: the stage's
  /// layers in reverse order go into buckets of gradient bytes, a bucket
  /// closing once it holds at least bucket_bytes (the layer that reaches it
  /// included; Megatron's param_and_grad_buffer, by parameters); each
  /// bucket's collective starts when the ready backward has passed its
  /// first layer. 0: one bucket, the whole stage.
  double bucket_bytes = 0;
  /// Megatron's distributed optimizer (ZeRO-1): each all-reduce becomes a
  /// reduce-scatter per bucket, the optimizer step on the participant's
  /// 1/r shard (its bytes / r), then an all-gather of the parameters per
  /// bucket, in the reverse bucket order (forward order).
  bool distributed_optimizer = false;
  /// With distributed_optimizer: the actions an all-reduce releases wait for
  /// the optimizer step only; the first forward of the stage in the next
  /// mini-batch on each participant (mini-batch of its ready action + 1)
  /// waits for that participant's all-gathers.
  bool overlap_param_gather = false;
  /// Bytes of a gradient per byte of weight: the all-reduces and
  /// reduce-scatters (gradients, the tied embedding's too) carry the weight
  /// bytes times this; the all-gathers (parameters) the weight bytes. 2 for
  /// 16-bit weights whose gradients are reduced in fp32 (Megatron-LM with
  /// --bf16, or --accumulate-allreduce-grads-in-fp32).
  double gradient_bytes_per_weight_byte = 1;
  /// Megatron's tied word embedding under pipeline parallelism: the device
  /// of `last_stage` keeps a copy of the word table of `first_stage`'s
  /// embedding; their gradients are all-reduced between the two (replica q
  /// of each: Megatron's embedding group) once each has synchronised that
  /// stage's gradients over its replicas (the all-reduce of the Program for
  /// the stage and round), before its optimizer step. With all-reduces of
  /// those stages, their participants must be in the same replica order.
  /// Without any (d = 1; Megatron reduces the embedding group whatever d
  /// is, finalize_model_grads.py, core_v0.14.0): one all-reduce per
  /// mini-batch between the two stages' devices, each joining once its
  /// stage's final backwards (B or W) of the mini-batch have ended, then
  /// the optimizer step of that stage; the stage's forwards of the next
  /// mini-batch wait for both. Only when update_interval is 0 and every
  /// stream runs its mini-batches in order (a flushed Program); otherwise
  /// not simulated.
  struct TiedEmbedding {
    int first_stage = 0, last_stage = 0;
    double bytes = 0;  ///< the word table's gradient bytes
  };
  std::optional<TiedEmbedding> tied_embedding;
  /// Tensor parallelism with its collectives as flows (--tp-collectives
  /// flows): per group leader (a host of `hosts`), the group's hosts in
  /// ring order, the leader first. After the compute of each F, R, B or I
  /// the leader runs, the collectives of that pass of the stage's layers
  /// (LayerCost::tensor_parallel: a forward's for F, and for R those of the
  /// layers it re-runs whole, recompute_share 1; the input-gradient part's
  /// for B and I) run as one ring over the members: once every collective
  /// is summed (its count x ring steps, each step bytes / t), one flow per
  /// member to the next (the last to the first) of the summed bytes on the
  /// platform's route, then the summed steps less one times that route's
  /// latency (measured as for CollectiveModel::Flows); the action ends when
  /// the last member's part has. An overlapped F&B pair runs both actions'
  /// collectives after the pair's compute. The action's record spans
  /// compute and collectives. InputError when a member is not a host of
  /// the platform or a leader's list does not start with itself.
  std::map<std::string, std::vector<std::string>> tensor_parallel_members;
  /// Expert parallelism (docs/semantics.md, "Expert parallelism"): per
  /// leader (a host of `hosts`), the ranks its actions stand for (the leader
  /// and the other members of its tensor x context group), each with its
  /// expert-parallel group (`group`, in expert-rank order, the rank itself
  /// included). After the compute (and the tensor-parallel collectives) of
  /// each F, R that re-runs a layer whole, and B or I, the all-to-alls of
  /// that pass run: a dispatch and a combine per layer with
  /// moe_dispatch_bytes (2 x those bytes per layer and pass). Per rank of
  /// an expert group of ep, 1 / ep of the bytes stay local; of the rest,
  /// the share bound for the group's ranks in the rank's server (its
  /// englobing zone) is one flow to the next such rank, the share bound
  /// for other servers one flow to the first rank in another server from
  /// the rank c places after it in group order, c the group's ranks in its
  /// server (with equal contiguous blocks per server, the rank at the same
  /// offset in the next server's block: a permutation, every rank
  /// receiving one such flow): O(r) flows per all-to-all, each rank's
  /// out- and inbound bytes on its own links, as NCCL's all-to-all loads
  /// them. Bytes go at the route's nccl_efficiency; each all-to-all pays
  /// the larger of the two routes' nccl_latency and route latency once.
  /// Ranks do not wait for each other (uniform routing: the ranks of a
  /// group run in step). In an overlapped F&B pair the pair's all-to-alls
  /// start with its compute and run concurrently with it (DualPipe's
  /// overlap): the pair ends when both have. InputError when a host is not
  /// a host of the platform or a group does not hold its rank.
  struct ExpertParallelRank {
    std::string host;
    std::vector<std::string> group;
  };
  std::map<std::string, std::vector<ExpertParallelRank>> expert_parallel_ranks;
};

struct SimulationResult {
  PlatformSummary platform;  ///< hosts only (route matrices empty)
  Timeline timeline;  ///< records sorted by (start, host, stream, ...); memory not yet annotated
  /// SimGrid communications the collectives started (their flows, rounds
  /// and latency probes): O(r) per collective under CollectiveModel::Flows.
  std::size_t collective_communications = 0;
  /// Overlapped F&B pairs with all-to-alls: the summed spans of the pairs,
  /// and the summed spans they would take run one after the other (each
  /// pair's compute plus its all-to-alls' time): their ratio is the
  /// overlap the simulation achieved (fb_overlap_effective). 0 when no
  /// pair ran an all-to-all.
  double overlapped_pair_span_s = 0, overlapped_pair_serial_s = 0;
  /// Seconds of all-to-alls summed over every action that ran some, and the
  /// part of them no compute hid (outside overlapped pairs all of it).
  double all_to_all_s = 0, all_to_all_exposed_s = 0;
};

/** Runs the simulation in a forked child process (SimGrid allows one engine
 *  per process) and returns its result. Before SimGrid sees the platform,
 *  checks its text (check_platform_xml, core/platform_check.hpp) and that no
 *  host runs two devices (check_one_device_per_host); before simulating,
 *  that SimGrid finds a route wherever the run sends data (a stage to the
 *  next and back, each replica to the next in an all-reduce ring; and back
 *  under NetworkModel::SimGrid, whose acknowledgements use the reverse
 *  route). Throws InputError with the child's message when the platform or
 *  the request is rejected, including SimGrid aborts. */
SimulationResult simulate(const SimulationRequest& request);

/** Whether simulate() shows a progress line on stderr while SimGrid runs
 *  (core/progress.hpp: simulated time, activities done, wall clock elapsed;
 *  the first after 0.5 s, then at most 4 a second, erased at the end). The
 *  caller decides; `pipegrid simulate` turns it on when stderr is a
 *  terminal. Off by default. */
void set_progress(bool enabled);

/** Whether read_platform computes the all-pairs route matrices
 *  (PlatformSummary::route_bandwidth_Bps and route_latency_s): quadratic in
 *  hosts, needed by partitioners, not by simulations. */
enum class PlatformRoutes { All, None };
/// Most hosts read_platform computes route matrices for (about 4 s and
/// 250 MB at this size; docs/platforms.md, Limits).
constexpr std::size_t kMaxRouteMatrixHosts = 2048;

/** Reads the platform's hosts and their properties (in a forked child),
 *  after checking its text as simulate() does; prints the check's warnings
 *  (unknown host properties) on stderr, once per file per process. */
PlatformSummary read_platform(const std::string& platform_file, PlatformRoutes routes = PlatformRoutes::All);

/** The routes from hosts[a] to hosts[b] for each (a, b) of `pairs` (host
 *  indices in the order the platform file declares them), computed in a
 *  forked child after checking the platform as read_platform does: linear
 *  in the pairs, for platforms too large for the all-pairs matrices.
 *  InputError when an index is beyond the platform's hosts. */
RouteTable read_routes(const std::string& platform_file, const std::vector<std::pair<std::size_t, std::size_t>>& pairs);

/** For a process forked to run one command (a sweep's run): the next engine
 *  that simulate() or read_platform() starts runs in this process rather
 *  than in a forked child, with the same results and exceptions; a SimGrid
 *  abort then ends this process. SimGrid allows one engine per process: a
 *  later engine calls `second_engine`, which must not return (the caller
 *  runs the command again without this call). */
void run_next_engine_in_process(void (*second_engine)());

}  // namespace pipegrid::sim
