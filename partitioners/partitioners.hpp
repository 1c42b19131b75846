#pragma once
// The partitioners behind `pipegrid partition` and `pipegrid explore`: given
// a profile and a platform, each chooses the stages, their layers, their
// replicas and their hosts. Pure functions over plain data (no SimGrid): the
// platform arrives as the summary sim::read_platform() made, routes included.

#include <optional>
#include <string>
#include <vector>

#include "core/model_graph.hpp"
#include "core/partition.hpp"
#include "core/platform.hpp"
#include "core/profile.hpp"

namespace pipegrid {

struct PartitionerInput {
  Profile profile;
  PlatformSummary platform;
  /// The schedule and M the partition is for; partitioners that check memory
  /// (bapipe's fine-tuning) use them. Empty schedule: 1f1b-so (1f1b-as when every host is asynchronous), M = stages.
  std::string schedule;
  int micro_batches = 0;
  bool straight = false;                    ///< no replicated stages
  /// bapipe: split boundary layers between synchronous hosts too (by
  /// default only between two asynchronous hosts, BaPipe's FPGA technique).
  bool split_layers = false;
  std::optional<double> memory_limit_bytes;  ///< per device; absent: the hosts' own `memory`
  /// The run's number format ("" = fp32) and optimizer: memory checks keep
  /// resident_weight_factor(dtype, optimizer) bytes per weight byte
  /// (core/precision.hpp; bapipe, pipedream-memory).
  std::string dtype;
  std::string optimizer = "sgd";
  std::string gradient_dtype;  ///< "" or fp32 (Plan::gradient_dtype): resident_weight_factor's third argument
  /// pipedream: the hierarchy, lowest level first (`--machines 4 4
  /// --bandwidth 8e9 1.25e9`: 4 GPUs per server at 8e9 B/s, 4 servers at
  /// 1.25e9 B/s). Empty: derived from the platform's routes.
  std::vector<int> machines;
  std::vector<double> bandwidths_Bps;
  /// pipedream: "released" (the released optimizer's costs, SEMANTICS.md) or
  /// "paper" (the SOSP'19 formulas: compute and communication overlapped).
  std::string cost_model = "released";
  /// The model's graph when it branches (PipeDream graph.txt; its profile is
  /// `profile`); absent: the profile is a chain.
  std::optional<ModelGraph> graph;
  /// The profile's file, named in messages about the graph (pipedream's
  /// antichain bound); empty: the profile's name.
  std::string profile_file;
};

/** One stage of a chosen partition, as reported to the user. Times are for
 *  one micro-batch on the stage's slowest host, divided by its replicas. */
struct StageReport {
  int first_layer = 0, last_layer = 0;  ///< inclusive, indices into PartitionerOutput::profile
  std::vector<std::string> hosts;       ///< one per replica
  double compute_s = 0;                 ///< forward + backward per replica
  double communication_s = 0;           ///< the larger of its input and output transfer
  double memory_bytes = 0;              ///< the partitioner's estimate of a device's peak
  /// bapipe: the stage's share of the predicted time per micro-batch
  /// (PipelineTime::stage_s); 0 where the partitioner does not predict one.
  double stage_time_s = 0;
};

struct PartitionerOutput {
  /// The profile the partition refers to: the input's, or one with a layer
  /// split in two by an intra-layer partition.
  Profile profile;
  Partition partition;
  /// When the partitioner re-listed a branching model's layers so that its
  /// stages are contiguous: profile.layers[i] is the input's layer
  /// layer_order[i]. Empty: the input's order.
  std::vector<int> layer_order;
  double time_per_stage_s = 0;  ///< the partitioner's bottleneck stage time (bapipe: steady state per micro-batch)
  /// bapipe: the mini-batch time it predicts and minimises, for
  /// `predicted_for` ("1f1b-so with M = 8"); absent for the others.
  std::optional<double> predicted_minibatch_s;
  std::string predicted_for;
  int bottleneck_stage = 0;
  std::vector<StageReport> stages;
  std::vector<std::string> notes;  ///< how the choice was made, for people
};

/** The per-stage report of a partition: compute per replica on the slowest
 *  of the stage's hosts (Layer::device_times or speed_factor), and the larger
 *  of the activation and gradient transfers over the routes between the
 *  stages' first replicas (latency + bytes / narrowest bandwidth).
 *  memory_bytes is left 0 for the caller to fill. */
std::vector<StageReport> report_stages(const Profile& profile, const Partition& partition, const PlatformSummary& platform);

/** The stages of `partition` that do no compute: the forward and backward
 *  of their layers take 0 s on every one of their hosts (PipeDream's
 *  optimizer gives a lone ReLU a device of its own when that costs nothing). */
std::vector<int> idle_stages(const Profile& profile, const Partition& partition, const PlatformSummary& platform);

/** `partition` with every idle stage's layers merged into the busy stage
 *  before it (leading idle stages into the first busy one) and its hosts
 *  left out: the same pipeline on fewer devices. Nothing when no stage is
 *  idle, every stage is, or the partition splits a layer. */
std::optional<Partition> merge_idle_stages(const Profile& profile, const Partition& partition, const PlatformSummary& platform);

/** "stage 3", "stages 3 and 6", "stages 1, 3 and 6". */
std::string stage_list_text(const std::vector<int>& stages);

/** Names accepted by run_partitioner, in the order explore tries them. */
const std::vector<std::string>& partitioner_names();

/** Runs the named partitioner. Throws InputError for an unknown name, and
 *  InfeasibleError (an InputError) when no partition exists (more stages than
 *  layers, an unreachable memory limit). */
PartitionerOutput run_partitioner(const std::string& name, const PartitionerInput& input);

/** The partitions `explore` tries for a run, by name, and what `simulate
 *  --partitioner NAME` runs: "uniform", "pipedream", "pipedream-straight",
 *  "pipedream-memory", "bapipe". */
const std::vector<std::string>& run_partitioner_names();

/** What a run's partition is chosen from (explore's candidate, simulate's
 *  plan). */
struct RunPartitionInput {
  /// The model at the run's micro-batch size (its profile is what the run
  /// simulates; a branching graph.txt keeps its edges for PipeDream).
  ModelGraph graph;
  /// Routes included (sim::read_platform with PlatformRoutes::All).
  PlatformSummary platform;
  std::string schedule;  ///< bapipe plans for it (a flushed schedule)
  int micro_batches = 1; ///< bapipe: M of the flushed schedule
  /// --memory: every device's capacity in place of the hosts' own.
  std::optional<double> memory_limit_bytes;
  bool split_layers = false;  ///< bapipe: --split-layers
  std::string dtype;               ///< as PartitionerInput::dtype
  std::string optimizer = "sgd";   ///< as PartitionerInput::optimizer
  std::string gradient_dtype;      ///< as PartitionerInput::gradient_dtype
};

/** The memory pipedream-memory partitions within: the smallest, over hosts,
 *  of `memory_limit_bytes` (else the host's `memory`) less the host's
 *  reserve (HostInfo::memory_reserve_of); absent when no limit is given and
 *  a host has no `memory` (explore then does not try pipedream-memory). */
std::optional<double> pipedream_memory_capacity(const PlatformSummary& platform, std::optional<double> memory_limit_bytes);

/** The partition `name` (run_partitioner_names) chooses, exactly as explore
 *  makes it:
 *  - uniform: one stage per host in platform order, layers split by count
 *    (uniform_partition); InfeasibleError when there are more hosts than
 *    layers;
 *  - pipedream: PipeDream's optimizer with replication, the hierarchy taken
 *    from the routes, no memory limit; pipedream-straight: the same without
 *    replicated stages; pipedream-memory: with replication, every stage's
 *    stash within pipedream_memory_capacity (InputError when there is none);
 *  - bapipe: BaPipe's partition for `schedule` with `micro_batches`, within
 *    `memory_limit_bytes` or the hosts' own memory, splitting layers as
 *    `split_layers` says.
 *  InfeasibleError when the partitioner finds no partition; InputError for
 *  an unknown name or input it cannot take. */
PartitionerOutput partition_for_run(const std::string& name, const RunPartitionInput& input);

/** The named partition rules of `--partition` (besides a partition file):
 *  uniform, balanced, megatron. */
const std::vector<std::string>& partition_rule_names();
bool is_partition_rule(const std::string& name);

/** What the megatron rule takes besides the stages (megatron_partition). */
struct MegatronStageSplit {
  std::optional<int> first_rank_layers, last_rank_layers;
  bool embedding_slot = false, loss_slot = false;
};

/** The partition rule `name` (partition_rule_names) over stage_hosts.size()
 *  stages, stage s on stage_hosts[s], device_of_stage[s] its device of a
 *  loop or a V of `virtual_stages` stages per device: uniform_partition,
 *  balanced_partition or megatron_partition (with `megatron`). InputError
 *  as they throw it; for another name too. */
Partition partition_by_rule(const std::string& name, const Profile& profile, const std::vector<std::string>& stage_hosts,
                            int virtual_stages, const std::vector<int>& device_of_stage,
                            const MegatronStageSplit& megatron = {});

}  // namespace pipegrid
