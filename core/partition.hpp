#pragma once
// Partition: a stage number for every layer (never decreasing along the
// chain), the hosts of each stage (one host per replica), and the layers
// that neighbouring stages share (BaPipe's intra-layer partition).

#include <optional>
#include <string>
#include <vector>

#include "core/platform.hpp"
#include "core/profile.hpp"

namespace pipegrid {

struct Partition {
  std::vector<int> stage_of_layer;               ///< size = number of layers
  std::vector<std::vector<std::string>> hosts;  ///< hosts[stage] = replica hosts
  /// Intra-layer splits. split_last[s] in (0, 1): the last layer of stage s
  /// and the first layer of stage s + 1 are the two parts of one layer of
  /// the unsplit profile (split_layers() made them), stage s doing this
  /// fraction of it. Empty, or 0 for a stage: no split. The partition refers
  /// to the profile holding the parts (stage_of_layer counts both); this
  /// field only says how the partition file names them against the unsplit
  /// profile.
  std::vector<double> split_last;
  int num_stages() const { return static_cast<int>(hosts.size()); }
  /// split_last[stage], or 0 when the field is empty.
  double split_after(int stage) const {
    return stage >= 0 && static_cast<std::size_t>(stage) < split_last.size() ? split_last[stage] : 0.0;
  }
};

/** One intra-layer split: layer `layer` of a profile, of which the earlier
 *  stage does `fraction` (strictly between 0 and 1) and the next the rest. */
struct LayerSplit {
  int layer = 0;
  double fraction = 0;
};

/** The profile with each split layer replaced by its two parts
 *  (SEMANTICS.md, BaPipe's balanced partition, step 3). Layer l split at f
 *  becomes "name[0:f]", with f of its forward and backward times (its
 *  device_times and a given backward split too: both parts x f, so they
 *  still sum to the backward), of its analytic work (FLOPs, bytes read and
 *  written, where given) and of its parameter bytes, whose output is what the
 *  earlier stage sends on: the layer's input (the previous layer's
 *  output_bytes, the profile's input_bytes for layer 0) plus f x its
 *  output_bytes; and "name[f:1]", with the rest (times and parameters x
 *  (1 - f)) and the layer's own output_bytes. f is written in the names as
 *  the shortest decimal that reads back to it. Splits must be in increasing
 *  layer order, each layer at most once: InputError otherwise. The result is
 *  a single-size profile at `profile`'s micro_batch_size (a multi-size
 *  profile's other sizes are dropped: take profile_at_micro_batch_size first
 *  to split another size). */
Profile split_layers(const Profile& profile, const std::vector<LayerSplit>& splits);

/** Per-stage costs derived from a profile and a partition, in profile units
 *  (seconds at speed factor 1, bytes). */
struct StageCost {
  int first_layer = 0, last_layer = 0;  ///< inclusive layer range
  double forward_s = 0, backward_s = 0;
  /// The backward's input-gradient (I) and weight-gradient (W) parts of
  /// zero-bubble schedules: sums over the stage's layers of
  /// backward_split(layer), in layer order like backward_s (their sum equals
  /// backward_s up to rounding).
  double backward_input_s = 0, backward_weight_s = 0;
  /// What one micro-batch keeps from the end of its I to the end of its W
  /// (split backward): for each layer with parameters, its input activation
  /// (input_bytes for the stage's first layer, else the previous layer's
  /// stashed_bytes()) plus its output gradient (its output_bytes). I frees
  /// the rest of stash_bytes, W this.
  double weight_gradient_stash_bytes = 0;
  double input_bytes = 0;   ///< activation received from the previous stage (model input for stage 0)
  double output_bytes = 0;  ///< activation sent to the next stage (0 for the last stage)
  double weight_bytes = 0;
  /// The routed experts' part of weight_bytes (expert parallelism: the
  /// rank's shard; Layer::expert_parameter_bytes), which the memory model
  /// counts with its own resident factor (MemoryModel). Not set by
  /// stage_costs().
  double expert_weight_bytes = 0;
  /// What one micro-batch's backward needs kept from its forward: the stage's
  /// input + the sum of output_bytes over its layers (SEMANTICS.md).
  double stash_bytes = 0;
  /// The recompute (R) action's time when it re-runs part of the forward
  /// (Megatron's layer-wise recomputation: StageRecompute::recompute_s,
  /// core/recompute.hpp); absent, the whole forward_s (GPipe's). Not set
  /// by stage_costs().
  std::optional<double> recompute_s = {};
};

/** The uniform partition: `num_stages` stages, layers split as evenly as
 *  their count allows (the first stages take one more layer when it does not
 *  divide), stage s on hosts[s]. Throws InputError when there are more stages
 *  than layers or fewer hosts than stages. */
Partition uniform_partition(const Profile& profile, const std::vector<std::string>& hosts, int num_stages);

/** A contiguous split of the layers into `num_stages` stages that minimises
 *  the largest stage's compute (forward + backward seconds summed over its
 *  layers; ties: the earliest stage boundaries), stage s on hosts[s]. For
 *  every schedule: with several stages per device (a loop or a V), each
 *  stage is balanced, hence each device. Exact (dynamic program over the
 *  layers' prefix sums). InputError as uniform_partition. */
Partition balanced_partition(const Profile& profile, const std::vector<std::string>& hosts, int num_stages);

/** Megatron-LM's stage layout (Megatron-LM core_r0.10.0:
 *  megatron/core/transformer/transformer_block.py, get_num_layers_to_build,
 *  and the checks of TransformerConfig): the profile's transformer layers
 *  (op "transformer") split over p = num_stages / virtual_stages pipeline
 *  ranks, rank r holding `device_of_stage[s] == r`'s stages: rank 0 takes
 *  `first_rank_layers` and rank p-1 `last_rank_layers` when given, the other
 *  ranks the rest evenly; each rank's layers split evenly over its
 *  virtual_stages chunks, in stage order. The layers before the first
 *  transformer layer (embedding) go to stage 0, those after the last (final
 *  norm, head, loss) to the last stage, others with the transformer layer
 *  before them. Transformer layers after the gpt generator's final norm (a
 *  layer of op "norm" with a transformer_shape, after the blocks) are
 *  multi-token prediction modules: not in the split, on the last stage
 *  (Megatron-Core core_v0.14.0 builds them there, after the decoder). With `embedding_slot` (`loss_slot`), Megatron's
 *  --account-for-embedding-in-pipeline-split (-loss-): the embedding (the
 *  head and loss) counts as one layer of the split, which then divides L + 1
 *  (+ 1) layers, and the first (last) stage holds one transformer layer
 *  fewer; not with first/last_rank_layers. Stage s on stage_hosts[s].
 *  InputError naming --partition
 *  megatron (and --first/--last-pipeline-layers) when the profile has no transformer layers
 *  or a count does not divide as Megatron requires. */
Partition megatron_partition(const Profile& profile, const std::vector<std::string>& stage_hosts, int num_stages,
                             int virtual_stages, const std::vector<int>& device_of_stage,
                             std::optional<int> first_rank_layers, std::optional<int> last_rank_layers,
                             bool embedding_slot = false, bool loss_slot = false);

/** Parses the `--replicas` shorthand: replica counts per stage separated by
 *  commas, such as "3,1" or "4,2,1,1" (spaces around a count are allowed).
 *  Throws InputError naming `--replicas` when the text is empty or a count is
 *  missing, not a whole number, or below 1. */
std::vector<int> parse_replicas(const std::string& text);

/** The replicated partition: one stage per entry of `replicas`, stage s run
 *  by replicas[s] hosts taken in platform order (stage 0 the first
 *  replicas[0] hosts, and so on; hosts beyond sum(replicas) stay unused).
 *  Layers are split into contiguous, non-empty stages minimising the slowest
 *  stage's time per replica,
 *    max over s of (forward_s + backward_s of its layers)
 *                  / (replicas[s] * the lowest speed_factor of its hosts),
 *  by exact dynamic programming (O(S·L²)). Stage sums are taken in layer
 *  order, forward and backward apart, as stage_costs() does, and compared
 *  exactly: no tolerance. Ties: among the optimal splits, the one whose cut
 *  positions (first layer of stages 1..S-1) are lexicographically smallest,
 *  i.e. each stage in turn as short as the optimum allows.
 *  Throws InputError when a count is below 1, the platform has fewer hosts
 *  than sum(replicas), or there are more stages than layers. */
Partition replicated_partition(const Profile& profile, const std::vector<HostInfo>& hosts,
                               const std::vector<int>& replicas);

/** Checks the partition against the profile: one stage per layer, stages
 *  never decreasing and none empty, every stage with at least one host;
 *  split_last empty or one entry per stage, each 0 or strictly between 0
 *  and 1, none on the last stage, and no stage made of one layer that is a
 *  part of two splits. `origin` names the source in errors. */
void check_partition(const Partition& partition, const Profile& profile, const std::string& origin);

std::vector<StageCost> stage_costs(const Profile& profile, const Partition& partition);

/** A partition file read against a profile: the profile with the file's
 *  split layers applied (split_layers()) and the partition over it. */
struct PartitionFile {
  Profile profile;
  Partition partition;  ///< over `profile`; split_last as the file gives it
};

/** Partition file (JSON):
 *  {"stages": [{"layers": [first, last], "split_last": f, "hosts": ["gpu0", ...]}, ...]}
 *  Layer indices are 0-based and inclusive, counted in the unsplit profile.
 *  "split_last" (optional, strictly between 0 and 1) says the stage shares
 *  its last layer with the next stage, which must start at that layer: this
 *  stage does fraction f of it, the next the rest. A layer is split at most
 *  once and the last stage has nothing to share with. Errors name the file,
 *  the stage and the field, what was expected and what was found. */
PartitionFile read_partition_file(const std::string& path, const Profile& profile);
PartitionFile parse_partition_file(const std::string& text, const std::string& origin, const Profile& profile);

/** The file's optional "layer_order": when a partitioner re-listed a
 *  branching model's layers so that its stages are contiguous, the stage
 *  ranges count in that order, profile layer i being the file's
 *  layer_order[i] (apply it with reorder_layers() before reading the
 *  stages). Empty when absent; InputError naming the file when it is not a
 *  list of layer indices. */
std::vector<int> parse_partition_layer_order(const std::string& text, const std::string& origin);

/** The same JSON read against a profile that already holds the split parts
 *  (a Plan's profile, written from the profile a PartitionFile returned):
 *  layer ranges still count in the unsplit profile, so a stage that shares
 *  its last layer covers one more layer of `profile` than its range says. */
Partition parse_partition_json(const std::string& text, const std::string& origin, const Profile& profile);

/** Writes the partition file form: layer ranges in the unsplit profile, with
 *  "split_last" where the partition has a split (the output reads back with
 *  parse_partition_file against the unsplit profile, and with
 *  parse_partition_json against the profile holding the parts). */
std::string partition_to_json(const Partition& partition);

}  // namespace pipegrid
