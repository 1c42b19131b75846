#pragma once
// The library facade of `pipegrid partition`: a PartitionRequest (plain
// data) in, a PartitionResult (plain data) out. partition() reads the
// profile and the platform (a SimGrid file, or a machine hierarchy given as
// sizes and bandwidths), times layers given by FLOPs only with the hosts'
// device models, resolves the memory limit, number format and optimizer, and
// runs the named partitioner. It never parses arguments or prints; cli/
// does.

#include <optional>
#include <string>
#include <vector>

#include "partitioners/partitioners.hpp"

namespace pipegrid::api {

struct PartitionRequest {
  /// A name of partitioner_names(): pipedream, bapipe or uniform.
  std::string partitioner;
  /// A profile JSON or a PipeDream graph.txt.
  std::string profile_file;
  /// The micro-batch size a graph.txt was measured at; absent: inferred,
  /// else reported as unknown (no partitioner's result depends on it).
  std::optional<int> batch_size;
  /// A SimGrid platform file (hosts, routes, memory); "": the hierarchy
  /// `machines` and `bandwidths` describe instead.
  std::string platform_file;
  /// pipedream: machines per level, lowest first ({4, 4}: 4 GPUs per
  /// server, 4 servers), and each level's bandwidth in bytes/s or SimGrid
  /// units ("10Gbps"); one bandwidth per level. Without platform_file the
  /// hosts are gpu0.. in hierarchy order, each pair joined at the bandwidth
  /// of the lowest level that holds both, no latency.
  std::vector<int> machines;
  std::vector<std::string> bandwidths;
  bool straight = false;      ///< no replicated stages
  bool split_layers = false;  ///< bapipe: split boundary layers between GPUs too
  /// Memory per device the partition must fit in (units as parse_bytes
  /// takes them); "": each host's own.
  std::string memory;
  std::string cost_model = "released";  ///< pipedream: released or paper
  /// The schedule and micro-batches per mini-batch the partition is for
  /// (memory estimates); empty, 0: the partitioner's defaults.
  std::string schedule;
  int micro_batches = 0;
  std::string optimizer;  ///< sgd, momentum or adam; "": default_optimizer of the dtype
  std::string dtype;      ///< fp32, fp16 or bf16: the profile's number format when it states none; "": none
};

struct PartitionResult {
  /// What the partitioner chose: the profile the partition refers to, the
  /// partition, its stages, its objective and how the choice was made.
  PartitionerOutput chosen;
  /// The stages whose compute_s is 0 (their layers take 0 s on their
  /// hosts), ascending.
  std::vector<int> stages_without_compute;
  /// For people, without a final period: what stages_without_compute means
  /// ("stage 3 does no compute ..."); "" when there are none.
  std::string no_compute_note;
};

/** Runs the partition `request` describes. Throws InputError for bad input
 *  (its message names the flag or file: --machines, --bandwidth, --memory,
 *  --optimizer, --dtype, the profile), and InfeasibleError when the
 *  partitioner finds no partition. */
PartitionResult partition(const PartitionRequest& request);

/** The partition file `simulate --partition` reads: the partition as JSON,
 *  with the partitioner's layer_order when it re-listed the layers. */
std::string partition_file_text(const PartitionerOutput& chosen);

}  // namespace pipegrid::api
