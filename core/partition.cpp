#include "core/partition.hpp"

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/json_input.hpp"
#include "core/limits.hpp"

namespace pipegrid {

Partition uniform_partition(const Profile& profile, const std::vector<std::string>& hosts, int num_stages) {
  const int layers = static_cast<int>(profile.layers.size());
  if (num_stages < 1) throw InputError(fmt::format("stages: expected at least 1, found {}", num_stages));
  if (num_stages > layers)
    throw InputError(fmt::format("profile '{}': {} stages need at least {} layers, found {}", profile.name, num_stages,
                                 num_stages, layers));
  if (static_cast<int>(hosts.size()) < num_stages)
    throw InputError(fmt::format("platform: {} stages need {} hosts, found {}", num_stages, num_stages, hosts.size()));
  Partition partition;
  const int base = layers / num_stages, extra = layers % num_stages;
  for (int stage = 0; stage < num_stages; ++stage) {
    const int count = base + (stage < extra ? 1 : 0);
    partition.stage_of_layer.insert(partition.stage_of_layer.end(), count, stage);
    partition.hosts.push_back({hosts[stage]});
  }
  return partition;
}

Partition balanced_partition(const Profile& profile, const std::vector<std::string>& hosts, int num_stages) {
  // The checks and host placement of the uniform partition.
  Partition partition = uniform_partition(profile, hosts, num_stages);
  const std::size_t layers = profile.layers.size();
  const auto stages = static_cast<std::size_t>(num_stages);
  std::vector<double> prefix(layers + 1, 0.0);
  for (std::size_t l = 0; l < layers; ++l)
    prefix[l + 1] = prefix[l] + profile.layers[l].forward_s + profile.layers[l].backward_s;
  const auto cost = [&](std::size_t first, std::size_t end) { return prefix[end] - prefix[first]; };
  // best[s][l]: the smallest largest-stage cost of layers [0, l) in s + 1
  // stages; cut[s][l]: where its last stage starts (the smallest such).
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages, std::vector<double>(layers + 1, kInfinity));
  std::vector<std::vector<std::size_t>> cut(stages, std::vector<std::size_t>(layers + 1, 0));
  for (std::size_t l = 1; l <= layers; ++l) best[0][l] = cost(0, l);
  for (std::size_t s = 1; s < stages; ++s)
    for (std::size_t l = s + 1; l <= layers; ++l) {
      // max(best[s-1][j], cost(j, l)) over j in [s, l): the first term
      // grows with j, the second shrinks: the optimum is where they cross.
      std::size_t low = s, high = l - 1;
      while (low < high) {
        const std::size_t middle = (low + high) / 2;
        if (best[s - 1][middle] >= cost(middle, l)) high = middle;
        else low = middle + 1;
      }
      for (const std::size_t j : {low > s ? low - 1 : low, low}) {
        const double value = std::max(best[s - 1][j], cost(j, l));
        if (value < best[s][l]) best[s][l] = value, cut[s][l] = j;
      }
    }
  std::size_t end = layers;
  for (std::size_t s = stages; s-- > 0;) {
    const std::size_t first = s == 0 ? 0 : cut[s][end];
    for (std::size_t l = first; l < end; ++l) partition.stage_of_layer[l] = static_cast<int>(s);
    end = first;
  }
  return partition;
}

Partition megatron_partition(const Profile& profile, const std::vector<std::string>& stage_hosts, int num_stages,
                             int virtual_stages, const std::vector<int>& device_of_stage,
                             std::optional<int> first_rank_layers, std::optional<int> last_rank_layers,
                             bool embedding_slot, bool loss_slot) {
  const int v = virtual_stages;
  if (num_stages < 1 || v < 1 || num_stages % v != 0 || device_of_stage.size() != static_cast<std::size_t>(num_stages) ||
      stage_hosts.size() != static_cast<std::size_t>(num_stages))
    throw InputError(fmt::format("--partition megatron: {} stages, {} per device: expected a multiple of {}", num_stages, v, v));
  const int p = num_stages / v;
  std::vector<std::size_t> blocks;
  bool after_final_norm = false;  // multi-token prediction modules follow the final norm (see the header)
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& layer = profile.layers[l];
    if (layer.op == "norm" && layer.transformer_shape && !blocks.empty()) after_final_norm = true;
    if (layer.op == "transformer" && !after_final_norm) blocks.push_back(l);
  }
  const int blocks_count = static_cast<int>(blocks.size());
  const int total = blocks_count + (embedding_slot ? 1 : 0) + (loss_slot ? 1 : 0);
  if (blocks_count == 0)
    throw InputError(fmt::format("--partition megatron: profile '{}' has no transformer layers (op \"transformer\") to "
                                 "split as Megatron-LM does; use --partition uniform, a partition file or --partitioner",
                                 profile.name));
  const std::string flags = fmt::format("{}{}", first_rank_layers ? fmt::format(" --first-pipeline-layers {}", *first_rank_layers) : "",
                                        last_rank_layers ? fmt::format(" --last-pipeline-layers {}", *last_rank_layers) : "");
  for (const auto& given : {first_rank_layers, last_rank_layers})
    if (given && (*given < 0 || *given > total))
      throw InputError(fmt::format("--partition megatron{}: expected 0 to {} layers on the first or last pipeline rank, "
                                   "found {}",
                                   flags, total, *given));
  if ((embedding_slot || loss_slot) && (first_rank_layers || last_rank_layers))
    throw InputError(fmt::format("--partition megatron{}: the embedding or the loss counted as a layer of the split "
                                 "cannot be combined with uneven first and last pipeline ranks",
                                 flags));
  const std::string unit = embedding_slot || loss_slot ? "layers (the embedding and the loss counted as layers)"
                                                        : "transformer layers";
  std::vector<int> rank_layers(static_cast<std::size_t>(p), 0);
  if ((first_rank_layers || last_rank_layers) && p == 1)
    throw InputError(fmt::format("--partition megatron{}: uneven first and last pipeline stages need a pipeline of at "
                                 "least 2 ranks, found 1",
                                 flags));
  int rest = total, middle_ranks = p;
  if (first_rank_layers) rest -= *first_rank_layers, --middle_ranks, rank_layers.front() = *first_rank_layers;
  if (last_rank_layers) rest -= *last_rank_layers, --middle_ranks, rank_layers.back() = *last_rank_layers;
  if (rest < 0 || (middle_ranks == 0 && rest != 0) || (middle_ranks > 0 && rest % middle_ranks != 0)) {
    if (!first_rank_layers && !last_rank_layers)
      throw InputError(fmt::format("--partition megatron: {} {} do not split evenly over {} pipeline ranks; expected a "
                                   "multiple of {} (Megatron splits layers evenly over the pipeline ranks)",
                                   total, unit, p, p));
    throw InputError(fmt::format("--partition megatron{}: {} transformer layers leave {} for the other {} pipeline rank{}; "
                                 "expected a multiple of {} (Megatron splits layers evenly over the pipeline ranks)",
                                 flags, total, rest, middle_ranks, middle_ranks == 1 ? "" : "s", std::max(middle_ranks, 1)));
  }
  for (int r = 0; r < p; ++r) {
    const bool given = (r == 0 && first_rank_layers) || (r == p - 1 && last_rank_layers);
    if (!given) rank_layers[static_cast<std::size_t>(r)] = rest / std::max(middle_ranks, 1);
    if (rank_layers[static_cast<std::size_t>(r)] % v != 0)
      throw InputError(fmt::format("--partition megatron{}: pipeline rank {} holds {} {}, which do not split into its {} "
                                   "virtual stages; expected a multiple of {}",
                                   flags, r, rank_layers[static_cast<std::size_t>(r)], unit, v, v));
  }
  Partition partition;
  partition.stage_of_layer.assign(profile.layers.size(), 0);
  std::size_t next_block = 0;
  for (int s = 0; s < num_stages; ++s) {
    // The embedding's (loss's) slot takes a transformer layer's place on the
    // first (last) stage.
    const int count = rank_layers[static_cast<std::size_t>(device_of_stage[static_cast<std::size_t>(s)])] / v -
                      (embedding_slot && s == 0 ? 1 : 0) - (loss_slot && s == num_stages - 1 ? 1 : 0);
    if (count < 0 || (count == 0 && s != 0 && s != num_stages - 1))
      throw InputError(fmt::format("--partition megatron: stage {} would hold no transformer layer; expected at least "
                                   "one per middle stage",
                                   s));
    for (int k = 0; k < count; ++k) {
      const std::size_t first = blocks[next_block];
      const std::size_t end = next_block + 1 < blocks.size() ? blocks[next_block + 1] : profile.layers.size();
      // The transformer layer and what follows it up to the next one.
      for (std::size_t l = first; l < end; ++l) partition.stage_of_layer[l] = s;
      ++next_block;
    }
    partition.hosts.push_back({stage_hosts[static_cast<std::size_t>(s)]});
  }
  // The layers after the last transformer layer (final norm, head, loss)
  // follow it to its stage; they belong to the last stage. A last stage of
  // 0 transformer layers (uneven stages) still takes them.
  for (std::size_t l = blocks.back() + 1; l < profile.layers.size(); ++l) partition.stage_of_layer[l] = num_stages - 1;
  return partition;
}

namespace {

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

/// "3,1": the counts as the --replicas shorthand spells them.
std::string replicas_text(const std::vector<int>& replicas) {
  std::string text;
  for (const int count : replicas) text += fmt::format("{}{}", text.empty() ? "" : ",", count);
  return text;
}

}  // namespace

std::vector<int> parse_replicas(const std::string& text) {
  if (trimmed(text).empty())
    throw InputError("--replicas: expected replica counts per stage separated by commas, such as 3,1; found an empty value");
  std::vector<int> counts;
  for (std::size_t start = 0;;) {
    const std::size_t comma = text.find(',', start);
    const std::string item = trimmed(text.substr(start, comma == std::string::npos ? comma : comma - start));
    const std::size_t stage = counts.size();
    if (item.empty())
      throw InputError(fmt::format("--replicas: stage {}: expected a replica count, found nothing in '{}' (a stray comma?)",
                                   stage, text));
    int count = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), count);
    if (error == std::errc::result_out_of_range)
      throw InputError(fmt::format("--replicas: stage {}: expected a replica count, found '{}' in '{}' (too large)", stage,
                                   item, text));
    if (error != std::errc() || end != item.data() + item.size())
      throw InputError(fmt::format("--replicas: stage {}: expected a whole number of replicas, found '{}' in '{}'", stage,
                                   item, text));
    if (count < 1)
      throw InputError(fmt::format("--replicas: stage {}: expected at least 1 replica, found '{}' in '{}'", stage, item, text));
    counts.push_back(count);
    if (comma == std::string::npos) return counts;
    start = comma + 1;
  }
}

Partition replicated_partition(const Profile& profile, const std::vector<HostInfo>& hosts,
                               const std::vector<int>& replicas) {
  const std::string what = "--replicas " + replicas_text(replicas);
  if (replicas.empty()) throw InputError("--replicas: expected at least one stage, found none");
  long long needed = 0;
  for (std::size_t s = 0; s < replicas.size(); ++s) {
    if (replicas[s] < 1) throw InputError(fmt::format("{}: stage {}: expected at least 1 replica, found {}", what, s, replicas[s]));
    needed += replicas[s];
  }
  if (needed > static_cast<long long>(hosts.size()))
    throw InputError(fmt::format("{}: expected at least {} hosts on the platform (one per replica), found {}", what, needed,
                                 hosts.size()));
  const int num_stages = static_cast<int>(replicas.size());
  const int layers = static_cast<int>(profile.layers.size());
  if (num_stages > layers)
    throw InputError(fmt::format("{}: profile '{}': {} stages need at least {} layers, found {}", what, profile.name,
                                 num_stages, num_stages, layers));

  // Hosts in platform order; a stage runs at the pace of its slowest replica.
  Partition partition;
  std::vector<double> capacity(num_stages);
  std::size_t next_host = 0;
  for (int s = 0; s < num_stages; ++s) {
    double slowest = std::numeric_limits<double>::infinity();
    std::vector<std::string> names;
    for (int r = 0; r < replicas[s]; ++r, ++next_host) {
      slowest = std::min(slowest, hosts[next_host].speed_factor);
      names.push_back(hosts[next_host].name);
    }
    capacity[s] = static_cast<double>(replicas[s]) * slowest;
    partition.hosts.push_back(std::move(names));
  }

  // work[a][b]: forward + backward of layers a..b, summed as stage_costs()
  // sums them, so the objective here is bit for bit the one it reports.
  const auto at = [layers](int a, int b) { return static_cast<std::size_t>(a) * layers + b; };
  std::vector<double> work(static_cast<std::size_t>(layers) * layers);
  for (int a = 0; a < layers; ++a) {
    double forward = 0, backward = 0;
    for (int b = a; b < layers; ++b) {
      forward += profile.layers[b].forward_s;
      backward += profile.layers[b].backward_s;
      work[at(a, b)] = forward + backward;
    }
  }
  const auto time = [&](int s, int a, int b) { return work[at(a, b)] / capacity[s]; };

  // best[s][b]: the smallest bottleneck of layers 0..b split into stages 0..s.
  // Stage s ends at b in s..layers-num_stages+s, so every stage keeps a layer.
  const double infinity = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(num_stages, std::vector<double>(layers, infinity));
  for (int b = 0; b <= layers - num_stages; ++b) best[0][b] = time(0, 0, b);
  for (int s = 1; s < num_stages; ++s)
    for (int b = s; b <= layers - num_stages + s; ++b)
      for (int a = s; a <= b; ++a) best[s][b] = std::min(best[s][b], std::max(best[s - 1][a - 1], time(s, a, b)));
  const double optimum = best[num_stages - 1][layers - 1];

  // Tie rule. fits[s][a]: layers a..end split into stages s.. with every
  // stage's time <= optimum. Then each stage in turn takes the fewest layers
  // that leave the rest feasible: the lexicographically smallest cuts.
  std::vector<std::vector<char>> fits(num_stages + 1, std::vector<char>(layers + 1, 0));
  fits[num_stages][layers] = 1;
  for (int s = num_stages - 1; s >= 0; --s)
    for (int a = s; a < layers; ++a)
      for (int b = a; b < layers && !fits[s][a]; ++b) fits[s][a] = time(s, a, b) <= optimum && fits[s + 1][b + 1];
  int first = 0;
  for (int s = 0; s < num_stages; ++s) {
    int last = first;
    while (!(time(s, first, last) <= optimum && fits[s + 1][last + 1])) ++last;
    partition.stage_of_layer.insert(partition.stage_of_layer.end(), last - first + 1, s);
    first = last + 1;
  }
  return partition;
}

void check_partition(const Partition& partition, const Profile& profile, const std::string& origin) {
  if (partition.stage_of_layer.size() != profile.layers.size())
    throw InputError(fmt::format("{}: expected a stage for each of the {} layers of '{}', found {}", origin,
                                 profile.layers.size(), profile.name, partition.stage_of_layer.size()));
  std::vector<int> count(partition.hosts.size(), 0);
  int previous = 0;
  for (std::size_t l = 0; l < partition.stage_of_layer.size(); ++l) {
    const int stage = partition.stage_of_layer[l];
    if (stage < previous || stage >= partition.num_stages())
      throw InputError(fmt::format("{}: layer {}: expected a stage in {}..{} not below the previous layer's, found {}",
                                   origin, l, previous, partition.num_stages() - 1, stage));
    previous = stage;
    ++count[stage];
  }
  for (int stage = 0; stage < partition.num_stages(); ++stage) {
    if (count[stage] == 0) throw InputError(fmt::format("{}: stage {} has no layers", origin, stage));
    if (partition.hosts[stage].empty()) throw InputError(fmt::format("{}: stage {} has no hosts", origin, stage));
  }
  if (partition.split_last.empty()) return;
  if (partition.split_last.size() != partition.hosts.size())
    throw InputError(fmt::format("{}: split_last: expected one fraction per stage ({}), found {}", origin,
                                 partition.num_stages(), partition.split_last.size()));
  for (int stage = 0; stage < partition.num_stages(); ++stage) {
    const double split = partition.split_last[stage];
    if (split == 0) continue;
    if (!(split > 0 && split < 1))
      throw InputError(fmt::format("{}: stage {}: split_last: expected 0 (none) or a fraction strictly between 0 and 1, "
                                   "found {}",
                                   origin, stage, split));
    if (stage + 1 == partition.num_stages())
      throw InputError(fmt::format("{}: stage {}: split_last: the last stage has no next stage to share a layer with", origin,
                                   stage));
    if (stage > 0 && partition.split_last[stage - 1] > 0 && count[stage] == 1)
      throw InputError(fmt::format("{}: stage {}: split_last: its only layer is the part of a layer shared with stage {}; "
                                   "a layer is split at most once",
                                   origin, stage, stage - 1));
  }
}

std::vector<StageCost> stage_costs(const Profile& profile, const Partition& partition) {
  std::vector<StageCost> stages(partition.num_stages());
  std::vector<bool> seen(stages.size(), false);
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& layer = profile.layers[l];
    StageCost& stage = stages[partition.stage_of_layer[l]];
    if (!seen[partition.stage_of_layer[l]]) stage.first_layer = static_cast<int>(l);
    seen[partition.stage_of_layer[l]] = true;
    stage.last_layer = static_cast<int>(l);
    stage.forward_s += layer.forward_s;
    stage.backward_s += layer.backward_s;
    const BackwardSplit split = backward_split(layer);
    stage.backward_input_s += split.input_s;
    stage.backward_weight_s += split.weight_s;
    stage.weight_bytes += layer.parameter_bytes;
    stage.stash_bytes += layer.stashed_bytes();
  }
  for (std::size_t s = 0; s < stages.size(); ++s) {
    StageCost& stage = stages[s];
    stage.input_bytes = s == 0 ? profile.input_bytes : profile.layers[stages[s - 1].last_layer].output_bytes;
    stage.output_bytes = s + 1 == stages.size() ? 0 : profile.layers[stage.last_layer].output_bytes;
    stage.stash_bytes += stage.input_bytes;
    for (int l = stage.first_layer; l <= stage.last_layer; ++l) {
      const Layer& layer = profile.layers[l];
      if (!layer.has_parameters()) continue;
      const double input = l == stage.first_layer ? stage.input_bytes : profile.layers[l - 1].stashed_bytes();
      stage.weight_gradient_stash_bytes += input + layer.output_bytes;
    }
  }
  return stages;
}

namespace {

/// A given backward split's parts times `share` (absent parts stay absent).
void scale_split(std::optional<double>& input, std::optional<double>& weight, double share) {
  if (input) input = *input * share;
  if (weight) weight = *weight * share;
}

}  // namespace

Profile split_layers(const Profile& profile, const std::vector<LayerSplit>& splits) {
  const int layers = static_cast<int>(profile.layers.size());
  for (std::size_t i = 0; i < splits.size(); ++i) {
    const LayerSplit& split = splits[i];
    if (split.layer < 0 || split.layer >= layers)
      throw InputError(fmt::format("profile '{}': split {}: expected a layer in 0..{}, found {}", profile.name, i,
                                   layers - 1, split.layer));
    if (i > 0 && split.layer <= splits[i - 1].layer)
      throw InputError(fmt::format("profile '{}': split {}: expected a layer after {} (splits in increasing layer order, "
                                   "each layer once), found {}",
                                   profile.name, i, splits[i - 1].layer, split.layer));
    if (!(split.fraction > 0 && split.fraction < 1))
      throw InputError(fmt::format("profile '{}': split of layer {}: expected a fraction strictly between 0 and 1, found {}",
                                   profile.name, split.layer, split.fraction));
  }
  // The splits apply to the profile at its micro_batch_size: the result has
  // that size only.
  Profile result = profile;
  result.measured.clear();
  result.layers.clear();
  result.layers.reserve(profile.layers.size() + splits.size());
  std::size_t next = 0;
  for (int l = 0; l < layers; ++l) {
    const Layer& layer = profile.layers[l];
    if (next == splits.size() || splits[next].layer != l) {
      result.layers.push_back(layer);
      continue;
    }
    const double f = splits[next++].fraction, rest = 1 - f;
    const double input = l == 0 ? profile.input_bytes : profile.layers[l - 1].output_bytes;
    Layer first = layer, second = layer;
    first.name = fmt::format("{}[0:{}]", layer.name, f);
    first.forward_s = layer.forward_s * f;
    first.backward_s = layer.backward_s * f;
    scale_split(first.backward_input_s, first.backward_weight_s, f);
    first.parameter_bytes = layer.parameter_bytes * f;
    first.output_bytes = input + f * layer.output_bytes;
    if (layer.activation_bytes) first.activation_bytes = input + f * *layer.activation_bytes;
    second.name = fmt::format("{}[{}:1]", layer.name, f);
    second.forward_s = layer.forward_s * rest;
    second.backward_s = layer.backward_s * rest;
    scale_split(second.backward_input_s, second.backward_weight_s, rest);
    second.parameter_bytes = layer.parameter_bytes * rest;
    for (auto* part : {&first, &second}) {
      const double share = part == &first ? f : rest;
      part->replicated_parameter_bytes = layer.replicated_parameter_bytes * share;
      for (auto& [device, times] : part->device_times) {
        times.forward_s *= share;
        times.backward_s *= share;
        scale_split(times.backward_input_s, times.backward_weight_s, share);
      }
      // A part does its share of the layer's analytic work too.
      for (std::optional<double>* work : {&part->forward_flops, &part->backward_input_flops, &part->backward_weight_flops,
                                          &part->bytes_read, &part->bytes_written})
        if (*work) **work *= share;
      // A part is not the whole shape: its analytic times come from its share of the work.
      part->transformer_shape.reset();
    }
    result.layers.push_back(std::move(first));
    result.layers.push_back(std::move(second));
  }
  return result;
}

namespace {

/// One entry of a partition file's "stages", validated for shape and for the
/// chain of ranges (each starts where the previous one ends, or at its
/// shared layer).
struct FileStage {
  int first = 0, last = 0;  ///< inclusive, in the unsplit profile
  double split_last = 0;    ///< 0: none
  std::vector<std::string> hosts;
};

/// Layer indices a partition file may give: an int, and with one more (the
/// next range's start) still an int.
constexpr long long kMaxLayerIndex = std::numeric_limits<int>::max() - 1;

/// `layer_count`: an upper bound on the unsplit profile's layers (a range
/// beyond it is refused before anything is allocated for it).
std::vector<FileStage> parse_file_stages(const nlohmann::json& document, const std::string& origin,
                                         std::size_t layer_count) {
  if (!document.is_object() || !document.contains("stages") || !document["stages"].is_array())
    throw InputError(fmt::format("{}: expected an object with a 'stages' array", origin));
  reject_unknown_json_fields(document, origin, {"stages", "layer_order"});
  std::vector<FileStage> result;
  const auto& stages = document["stages"];
  int next_first = 0;  // where the next range must start
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const auto& stage = stages[s];
    const std::string where = fmt::format("{}: stages[{}]", origin, s);
    if (!stage.is_object()) throw InputError(fmt::format("{}: expected an object, found {}", where, shown_json(stage)));
    reject_unknown_json_fields(stage, where, {"layers", "split_last", "hosts"});
    FileStage entry;
    const auto layers = stage.find("layers");
    if (layers == stage.end() || !layers->is_array() || layers->size() != 2 || !(*layers)[0].is_number_integer() ||
        !(*layers)[1].is_number_integer())
      throw InputError(fmt::format("{}.layers: expected [first, last] layer indices (0-based, inclusive), found {}", where,
                                   layers == stage.end() ? "nothing" : shown_json(*layers)));
    for (std::size_t end = 0; end < 2; ++end) {
      const auto index = json_integer_in((*layers)[end], 0, kMaxLayerIndex);
      if (!index)
        throw InputError(fmt::format("{}.layers[{}]: expected a layer index in 0..{}, found {}", where, end, kMaxLayerIndex,
                                     shown_json((*layers)[end])));
      (end == 0 ? entry.first : entry.last) = static_cast<int>(*index);
    }
    if (static_cast<std::size_t>(entry.last) >= layer_count)
      throw InputError(fmt::format("{}.layers: expected a range within the profile's {} layers (0..{}), found [{}, {}]",
                                   where, layer_count, static_cast<long long>(layer_count) - 1, entry.first, entry.last));
    const bool shares_first = s > 0 && result.back().split_last > 0;
    if (entry.first != next_first || entry.last < entry.first)
      throw InputError(fmt::format("{}.layers: expected a range starting at layer {}, found [{}, {}]{}", where, next_first,
                                   entry.first, entry.last,
                                   shares_first ? fmt::format(" (stages[{}] shares layer {} with it: split_last)", s - 1,
                                                              next_first)
                                                : ""));
    if (const auto split = stage.find("split_last"); split != stage.end()) {
      if (!split->is_number() || !(split->get<double>() > 0 && split->get<double>() < 1))
        throw InputError(fmt::format("{}.split_last: expected the fraction of layer {} this stage does, strictly "
                                     "between 0 and 1, found {}",
                                     where, entry.last, shown_json(*split)));
      if (s + 1 == stages.size())
        throw InputError(fmt::format("{}.split_last: the last stage has no next stage to share layer {} with", where,
                                     entry.last));
      if (shares_first && entry.last == entry.first)
        throw InputError(fmt::format("{}.split_last: layer {} is already shared with stages[{}]; a layer is split at "
                                     "most once",
                                     where, entry.last, s - 1));
      entry.split_last = split->get<double>();
    }
    const auto hosts = stage.find("hosts");
    if (hosts == stage.end() || !hosts->is_array() || hosts->empty())
      throw InputError(fmt::format("{}.hosts: expected a non-empty list of host names", where));
    for (const auto& host : *hosts) {
      if (!host.is_string()) throw InputError(fmt::format("{}.hosts: expected host names (strings), found {}", where, shown_json(host)));
      entry.hosts.push_back(host.get<std::string>());
    }
    next_first = entry.split_last > 0 ? entry.last : entry.last + 1;
    result.push_back(std::move(entry));
  }
  return result;
}

/// The partition over the profile that holds the split parts: a stage's
/// range [first, last] covers last - first + 1 of its layers (the part of
/// a layer shared with the previous stage counts as its first layer).
Partition partition_over_parts(const std::vector<FileStage>& stages) {
  Partition partition;
  bool any_split = false;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    partition.stage_of_layer.insert(partition.stage_of_layer.end(), stages[s].last - stages[s].first + 1,
                                    static_cast<int>(s));
    partition.hosts.push_back(stages[s].hosts);
    partition.split_last.push_back(stages[s].split_last);
    any_split = any_split || stages[s].split_last > 0;
  }
  if (!any_split) partition.split_last.clear();
  return partition;
}

}  // namespace

PartitionFile parse_partition_file(const std::string& text, const std::string& origin, const Profile& profile) {
  const std::vector<FileStage> stages = parse_file_stages(parse_json_input(text, origin), origin, profile.layers.size());
  // The ranges against the unsplit profile first (a shared layer counted
  // with the earlier stage), so a range that misses or overruns the chain is
  // reported in the file's own numbering.
  Partition unsplit;
  std::vector<LayerSplit> splits;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const int first = s > 0 && stages[s - 1].split_last > 0 ? stages[s].first + 1 : stages[s].first;
    if (stages[s].last >= first)
      unsplit.stage_of_layer.insert(unsplit.stage_of_layer.end(), stages[s].last - first + 1, static_cast<int>(s));
    unsplit.hosts.push_back(stages[s].hosts);
    if (stages[s].split_last > 0) splits.push_back({stages[s].last, stages[s].split_last});
  }
  if (unsplit.stage_of_layer.size() != profile.layers.size()) check_partition(unsplit, profile, origin);
  PartitionFile file;
  file.profile = split_layers(profile, splits);
  file.partition = partition_over_parts(stages);
  check_partition(file.partition, file.profile, origin);
  return file;
}

std::vector<int> parse_partition_layer_order(const std::string& text, const std::string& origin) {
  const nlohmann::json document = parse_json_input(text, origin);
  std::vector<int> order;
  if (!document.is_object() || !document.contains("layer_order")) return order;
  const nlohmann::json& list = document["layer_order"];
  if (!list.is_array())
    throw InputError(fmt::format("{}: layer_order: expected a list of layer indices, found {}", origin, shown_json(list)));
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto index = json_integer_in(list[i], 0, kMaxLayerIndex);
    if (!index)
      throw InputError(fmt::format("{}: layer_order[{}]: expected a layer index in 0..{}, found {}", origin, i,
                                   kMaxLayerIndex, shown_json(list[i])));
    order.push_back(static_cast<int>(*index));
  }
  return order;
}

PartitionFile read_partition_file(const std::string& path, const Profile& profile) {
  return parse_partition_file(read_text_file(path), path, profile);
}

Partition parse_partition_json(const std::string& text, const std::string& origin, const Profile& profile) {
  return parse_partition_json_document(parse_json_input(text, origin), origin, profile);
}

Partition parse_partition_json_document(const nlohmann::json& document, const std::string& origin, const Profile& profile) {
  Partition partition = partition_over_parts(parse_file_stages(document, origin, profile.layers.size()));
  check_partition(partition, profile, origin);
  return partition;
}

std::string partition_to_json(const Partition& partition) {
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  int parts_before = 0;  // split layers whose second part lies before this stage
  for (int s = 0; s < partition.num_stages(); ++s) {
    int first = -1, last = -1;
    for (std::size_t l = 0; l < partition.stage_of_layer.size(); ++l)
      if (partition.stage_of_layer[l] == s) {
        if (first < 0) first = static_cast<int>(l);
        last = static_cast<int>(l);
      }
    if (s > 0 && partition.split_after(s - 1) > 0) ++parts_before;
    nlohmann::ordered_json stage;
    stage["layers"] = {first - parts_before, last - parts_before};
    if (partition.split_after(s) > 0) stage["split_last"] = partition.split_after(s);
    stage["hosts"] = partition.hosts[s];
    stages.push_back(stage);
  }
  nlohmann::ordered_json document;
  document["stages"] = stages;
  return document.dump(2) + "\n";
}

}  // namespace pipegrid
