#include "core/tensor_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/platform_check.hpp"
#include "core/precision.hpp"

namespace pipegrid {

namespace {

void check_t(int t) {
  if (t < 1 || t > kMaxTensorParallel)
    throw InputError(fmt::format("--tensor-parallel: expected hosts per group from 1 to {}, found {}", kMaxTensorParallel, t));
}

// "a, b, c" for at most `shown` names, then "and N more".
std::string name_list(const Profile& profile, const std::vector<int>& layers, std::size_t shown = 6) {
  std::string text;
  for (std::size_t i = 0; i < layers.size() && i < shown; ++i)
    text += (text.empty() ? "" : ", ") + profile.layers[static_cast<std::size_t>(layers[i])].name;
  if (layers.size() > shown) text += fmt::format(" and {} more", layers.size() - shown);
  return text;
}

}  // namespace

double ring_all_reduce_s(double bytes, int t, const TensorParallelLink& link) {
  if (t <= 1) return 0;
  return link.nccl_latency_s + 2.0 * (t - 1) * (link.latency_s + bytes / (t * link.nccl_efficiency * link.bandwidth_Bps));
}

double reduce_scatter_s(double bytes, int t, const TensorParallelLink& link) {
  if (t <= 1) return 0;
  return link.nccl_latency_s + (t - 1) * (link.latency_s + bytes / (t * link.nccl_efficiency * link.bandwidth_Bps));
}

double all_gather_s(double bytes, int t, const TensorParallelLink& link) { return reduce_scatter_s(bytes, t, link); }

const char* to_string(TensorParallelCollectives mode) {
  return mode == TensorParallelCollectives::Compute ? "compute" : "flows";
}

TensorParallelCollectives parse_tensor_parallel_collectives(const std::string& text) {
  if (text == "compute") return TensorParallelCollectives::Compute;
  if (text == "flows") return TensorParallelCollectives::Flows;
  throw InputError(fmt::format("--tp-collectives: expected compute or flows, found '{}'", printable(text)));
}

const char* to_string(RingCollectiveKind kind) {
  switch (kind) {
    case RingCollectiveKind::AllReduce: return "all_reduce";
    case RingCollectiveKind::ReduceScatter: return "reduce_scatter";
    case RingCollectiveKind::AllGather: return "all_gather";
  }
  return "?";
}

int ring_steps(RingCollectiveKind kind, int t) {
  if (t <= 1) return 0;
  return kind == RingCollectiveKind::AllReduce ? 2 * (t - 1) : t - 1;
}

double collectives_s(const std::vector<RingCollective>& collectives, int t, const TensorParallelLink& link) {
  double seconds = 0;
  for (const RingCollective& c : collectives) {
    const double one = c.kind == RingCollectiveKind::AllReduce       ? ring_all_reduce_s(c.bytes, t, link)
                       : c.kind == RingCollectiveKind::ReduceScatter ? reduce_scatter_s(c.bytes, t, link)
                                                                     : all_gather_s(c.bytes, t, link);
    seconds += c.count * one;
  }
  return seconds;
}

namespace {

/// How the transform treats a layer (tensor_parallel_profile's cases).
enum class Treatment {
  Replicated,
  Transformer,
  VocabularyEmbedding,
  VocabularyHead,
  VocabularyLoss,
  SequenceNorm,
  ColumnLinear
};

Treatment treatment_of(const Layer& layer, bool sequence_parallel, bool split_linear) {
  if (layer.op == "transformer" && layer.has_flops()) return Treatment::Transformer;
  if (layer.vocabulary) {
    if (layer.op == "embedding") return Treatment::VocabularyEmbedding;
    if (layer.op == "linear") return Treatment::VocabularyHead;
    if (layer.op == "loss") return Treatment::VocabularyLoss;
  }
  if (sequence_parallel && layer.op == "norm") return Treatment::SequenceNorm;
  if (split_linear && is_plain_linear(layer)) return Treatment::ColumnLinear;
  return Treatment::Replicated;
}

/// Bytes of a fp32 value: vocab_parallel_cross_entropy reduces in fp32.
constexpr double kCrossEntropyValueBytes = 4;
/// vocab_parallel_cross_entropy's all-reduces: the logits' max, the target
/// logit and the sum of the exponentials, each one value per row.
constexpr int kCrossEntropyAllReduces = 3;

std::string plural(std::size_t count, const char* word) {
  return fmt::format("{} {}{}", count, word, count == 1 ? "" : "s");
}

// TensorParallelProfile::note.
std::string tensor_parallel_note(const Profile& profile, const TensorParallelProfile& result, int t,
                                 const TensorParallelLink& link, bool sequence_parallel, bool embedding_reduce_scatters,
                                 bool comm_overlap, TensorParallelCollectives mode) {
  std::vector<std::string> parts;
  parts.push_back(result.split.empty() ? std::string("no transformer layer split (none with FLOPs)")
                                       : plural(result.split.size(), "transformer layer") + " split");
  if (result.vocabulary.empty()) {
    parts.push_back("no layer split over the vocabulary (none gives `vocabulary`: an embedding, head or loss stays "
                    "whole on every member)");
  } else {
    std::string text = "split over the vocabulary as Megatron-Core's VocabParallelEmbedding, ColumnParallelLinear head and "
                       "vocab_parallel_cross_entropy: ";
    for (std::size_t i = 0; i < result.vocabulary.size(); ++i) {
      const Layer& layer = profile.layers[static_cast<std::size_t>(result.vocabulary[i])];
      text += (i == 0 ? "" : ", ") + layer.name;
      if (layer.op == "embedding")
        text += layer.replicated_parameter_bytes > 0 ? " (its word table; its position table and its lookups whole)"
                                                     : " (its word table; its lookups whole)";
    }
    parts.push_back(text);
  }
  if (!result.linear.empty())
    parts.push_back(fmt::format("{} split column-parallel (output features / t, the output all-gathered in the "
                                "forward, the input's gradient all-reduced in the backward): {}",
                                plural(result.linear.size(), "linear layer"), name_list(profile, result.linear)));
  if (!result.sequence.empty())
    parts.push_back(fmt::format("{} split over the sequence: {}", plural(result.sequence.size(), "norm"),
                                name_list(profile, result.sequence)));
  parts.push_back(result.replicated.empty() ? std::string("no layer replicated")
                                            : fmt::format("{} replicated: {}", plural(result.replicated.size(), "layer"),
                                                          name_list(profile, result.replicated)));
  if (sequence_parallel)
    parts.push_back("sequence parallel: the split layers' stashed activations and the norms' work divided by t too");
  // The collectives, per layer kind.
  std::vector<std::string> collectives;
  if (!result.split.empty())
    collectives.push_back(sequence_parallel
                              ? "per transformer layer 2 reduce-scatters and 2 all-gathers of its output in the forward "
                                "and in the backward"
                              : "per transformer layer 2 all-reduces of its output in the forward and 2 in the backward");
  for (const int l : result.vocabulary) {
    const Layer& layer = profile.layers[static_cast<std::size_t>(l)];
    if (layer.op == "embedding")
      collectives.push_back(fmt::format(
          "{} {} of its output in the forward{}", layer.name, embedding_reduce_scatters ? "1 reduce-scatter" : "1 all-reduce",
          sequence_parallel ? ", 1 all-gather of its gradient in the backward" : ""));
    else if (layer.op == "linear")
      collectives.push_back(fmt::format("{} {}", layer.name,
                                        sequence_parallel
                                            ? "1 all-gather of its input in the forward, 1 reduce-scatter of the input's "
                                              "gradient in the backward"
                                            : "1 all-reduce of its input's gradient in the backward"));
    else
      collectives.push_back(fmt::format("{} 3 all-reduces of one fp32 value per token in the forward", layer.name));
  }
  const LinkNccl nccl{link.nccl_efficiency, link.nccl_latency_s};
  if (!collectives.empty() && mode == TensorParallelCollectives::Compute && nccl.is_default())
    parts.push_back(fmt::format("{}; each a ring over {} hosts, charged as compute time (an all-reduce 2 x {} x ({} + "
                                "bytes / ({} x {:.4g} GB/s)), a reduce-scatter or an all-gather half that)",
                                fmt::join(collectives, "; "), t, t - 1, human_seconds(link.latency_s), t,
                                link.bandwidth_Bps / 1e9));
  if (!collectives.empty() && mode == TensorParallelCollectives::Compute && !nccl.is_default())
    parts.push_back(fmt::format("{}; each a ring over {} hosts, charged as compute time (an all-reduce {} + 2 x {} x ({} "
                                "+ bytes / ({} x {:.4g} x {:.4g} GB/s)), a reduce-scatter or an all-gather {} + half the "
                                "ring steps; {})",
                                fmt::join(collectives, "; "), t, human_seconds(link.nccl_latency_s), t - 1,
                                human_seconds(link.latency_s), t, link.nccl_efficiency, link.bandwidth_Bps / 1e9,
                                human_seconds(link.nccl_latency_s), nccl_text(nccl)));
  if (!collectives.empty() && mode == TensorParallelCollectives::Flows)
    parts.push_back(fmt::format("{}; run as network flows (--tp-collectives flows): after each F, B or I of a group's "
                                "first host, the collectives of its layers as one ring over the group's {} hosts, one "
                                "flow per host to the next on the platform's routes, then the remaining latencies",
                                fmt::join(collectives, "; "), t));
  if (!collectives.empty() && mode == TensorParallelCollectives::Flows && !nccl.is_default())
    parts.push_back(fmt::format("{}: each collective's flows carry bytes / {:.4g} after its start latency (the ring's "
                                "largest)",
                                nccl_text(nccl), nccl.efficiency));
  if (comm_overlap && !result.split.empty())
    parts.push_back("--tp-comm-overlap: a transformer layer's all-gathers and reduce-scatters pipelined with its GEMMs "
                    "(all but its attention core), each pass charged only what they exceed the GEMMs by (an upper "
                    "bound on the overlap: no SM contention)");
  if (link.crossing_channels > 0 && mode == TensorParallelCollectives::Compute)
    parts.push_back(fmt::format("groups span servers: a ring step between two servers runs as {} concurrent channel{} "
                                "(NCCL's rings, each crossing on its own GPU's route), their total the bandwidth above",
                                link.crossing_channels, link.crossing_channels == 1 ? "" : "s"));
  if (link.crossing_channels > 0 && mode == TensorParallelCollectives::Flows)
    parts.push_back("groups span servers: a ring step between two servers (netzones) runs as one flow per rail, the "
                    "GPU pairs of the two servers' members, NCCL's channels on the same NIC on both sides");
  parts.push_back(fmt::format("transfers between stages carry output_bytes / {} (each member sends its share in parallel; "
                              "the group's first host stands for it)",
                              t));
  return fmt::format("tensor parallel {}{}: {}", t, sequence_parallel ? " with sequence parallelism" : "",
                     fmt::join(parts, "; "));
}

}  // namespace

bool is_plain_linear(const Layer& layer) {
  if (layer.vocabulary) return false;
  if (layer.op == "linear") return true;
  // PipeDream's graph.txt layers are named "nodeN: Linear(...)".
  const std::size_t colon = layer.name.find(": ");
  const std::size_t module = layer.name.rfind("Linear(", 0) == 0 ? 0 : colon == std::string::npos ? std::string::npos : colon + 2;
  return layer.op.empty() && module != std::string::npos && layer.name.compare(module, 7, "Linear(") == 0;
}

bool tensor_parallel_splits(const Layer& layer, bool sequence_parallel, bool split_linear) {
  const Treatment treatment = treatment_of(layer, sequence_parallel, split_linear);
  return treatment != Treatment::Replicated && treatment != Treatment::VocabularyEmbedding;
}

double overlapped_collectives_s(double collectives_s, double gemm_s) { return std::max(0.0, collectives_s - gemm_s); }

TensorParallelProfile tensor_parallel_profile(const Profile& profile, int t, const TensorParallelLink& link,
                                              bool sequence_parallel, bool comm_overlap, TensorParallelCollectives mode,
                                              bool split_linear, int expert_tensor_parallel) {
  check_t(t);
  if (expert_tensor_parallel < 0 || expert_tensor_parallel > kMaxTensorParallel)
    throw InputError(fmt::format("--expert-tensor-parallel: expected 0 (follows --tensor-parallel) to {}, found {}",
                                 kMaxTensorParallel, expert_tensor_parallel));
  if (comm_overlap && !sequence_parallel)
    throw InputError("--tp-comm-overlap: needs --sequence-parallel (Megatron-LM asserts it: the overlap pipelines the "
                     "sequence-parallel all-gathers and reduce-scatters with the GEMMs)");
  if (comm_overlap && mode == TensorParallelCollectives::Flows)
    throw InputError("--tp-comm-overlap with --tp-collectives flows: the overlap is modelled as a bound on compute time "
                     "only (the collectives charged as compute); give --tp-collectives compute, or drop --tp-comm-overlap");
  TensorParallelProfile result;
  result.profile = profile;
  result.collectives.assign(profile.layers.size(), {});
  if (t == 1) {
    for (std::size_t l = 0; l < profile.layers.size(); ++l) result.replicated.push_back(static_cast<int>(l));
    return result;
  }
  const bool charged = mode == TensorParallelCollectives::Compute;
  using Kind = RingCollectiveKind;
  const double n = t;
  bool embedding_reduce_scatters = false;  // a vocabulary-parallel embedding without a position table, under SP
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const Layer& original = profile.layers[l];
    Layer& layer = result.profile.layers[l];
    layer.output_bytes = original.output_bytes / n;
    const Treatment treatment = treatment_of(original, sequence_parallel, split_linear);
    const int index = static_cast<int>(l);
    if (treatment == Treatment::Replicated) {
      layer.activation_bytes = original.stashed_bytes();
      result.replicated.push_back(index);
      continue;
    }
    const double input = l == 0 ? profile.input_bytes : profile.layers[l - 1].output_bytes;
    LayerCollectives& collectives = result.collectives[l];
    const double output = original.output_bytes;
    switch (treatment) {
      case Treatment::Transformer: {
        result.split.push_back(index);
        const std::vector<RingCollective> per_pass =
            sequence_parallel ? std::vector<RingCollective>{{Kind::ReduceScatter, 2, output}, {Kind::AllGather, 2, output}}
                              : std::vector<RingCollective>{{Kind::AllReduce, 2, output}};
        collectives = {per_pass, per_pass};
        break;
      }
      case Treatment::VocabularyEmbedding: {
        result.vocabulary.push_back(index);
        const bool position_table = original.replicated_parameter_bytes > 0;
        if (sequence_parallel && !position_table) {
          embedding_reduce_scatters = true;
          collectives = {{{Kind::ReduceScatter, 1, output}}, {{Kind::AllGather, 1, output}}};
        } else {
          collectives.forward = {{Kind::AllReduce, 1, output}};
          if (sequence_parallel) collectives.backward_input = {{Kind::AllGather, 1, output}};
        }
        break;
      }
      case Treatment::VocabularyHead:
        result.vocabulary.push_back(index);
        if (sequence_parallel) collectives = {{{Kind::AllGather, 1, input}}, {{Kind::ReduceScatter, 1, input}}};
        else collectives.backward_input = {{Kind::AllReduce, 1, input}};
        break;
      case Treatment::VocabularyLoss: {
        result.vocabulary.push_back(index);
        const double rows = input / (static_cast<double>(*original.vocabulary) * dtype_bytes(profile.dtype, "the profile's dtype"));
        collectives.forward = {{Kind::AllReduce, kCrossEntropyAllReduces, kCrossEntropyValueBytes * rows}};
        break;
      }
      case Treatment::SequenceNorm:
        result.sequence.push_back(index);
        break;
      case Treatment::ColumnLinear:
        // Column-parallel with the output gathered (Megatron-Core's
        // ColumnParallelLinear, gather_output=True): each member computes
        // 1 / t of the output features; the forward all-gathers the output,
        // the backward all-reduces the input's gradient.
        result.linear.push_back(index);
        collectives = {{{Kind::AllGather, 1, output}}, {{Kind::AllReduce, 1, input}}};
        break;
      case Treatment::Replicated:
        break;
    }
    // The seconds each pass's collectives add to the layer's times (none under Flows).
    const double added_forward_s = charged ? collectives_s(collectives.forward, t, link) : 0;
    const double added_input_s = charged ? collectives_s(collectives.backward_input, t, link) : 0;
    const double work = treatment == Treatment::VocabularyEmbedding ? 1 : n;
    const BackwardSplit backward = backward_split(original);
    // The seconds a pass's collectives add to a pass of `compute_s`.
    const bool overlapped = comm_overlap && treatment == Treatment::Transformer;
    const double gemm_share = 1 - original.attention_core_flops_share.value_or(0.0);
    const auto exposed = [&](double collectives_s, double compute_s) {
      return overlapped ? overlapped_collectives_s(collectives_s, gemm_share * compute_s) : collectives_s;
    };
    layer.forward_s = original.forward_s / work + exposed(added_forward_s, original.forward_s / work);
    layer.backward_input_s = backward.input_s / work + exposed(added_input_s, backward.input_s / work);
    layer.backward_weight_s = backward.weight_s / work;
    layer.backward_s = *layer.backward_input_s + *layer.backward_weight_s;
    for (auto& [device, times] : layer.device_times) {
      const BackwardSplit parts = backward_split(original, original.device_times.at(device));
      times.forward_s = times.forward_s / work + exposed(added_forward_s, times.forward_s / work);
      times.backward_input_s = parts.input_s / work + exposed(added_input_s, parts.input_s / work);
      times.backward_weight_s = parts.weight_s / work;
      times.backward_s = *times.backward_input_s + *times.backward_weight_s;
    }
    if (work != 1)
      for (std::optional<double>* value : {&layer.forward_flops, &layer.backward_input_flops, &layer.backward_weight_flops,
                                           &layer.bytes_read, &layer.bytes_written})
        if (value->has_value()) **value /= n;
    const double stashed = original.stashed_bytes();
    const double whole = original.replicated_activation_fraction;
    if (treatment == Treatment::SequenceNorm) {
      layer.activation_bytes = stashed / n;
    } else {
      const double replicated = original.replicated_parameter_bytes;
      const double experts = original.expert_parameter_bytes;
      if (experts > 0) {  // routed experts split etp ways, the rest of the block t ways
        const double etp = expert_tensor_parallel > 0 ? expert_tensor_parallel : n;
        layer.parameter_bytes = replicated + (original.parameter_bytes - replicated - experts) / n + experts / etp;
        layer.expert_parameter_bytes = experts / etp;
        layer.moe_dispatch_bytes = original.moe_dispatch_bytes / n;
      } else {
        layer.parameter_bytes = replicated + (original.parameter_bytes - replicated) / n;
      }
      layer.replicated_parameter_bytes = replicated;
      layer.activation_bytes = sequence_parallel ? stashed / n : stashed * whole + stashed * (1 - whole) / n;
    }
  }
  // A split layer's attention core is split t ways (by heads): its shares of
  // the member's FLOPs and stash follow from the whole layer's, whatever the
  // transform did to the rest of the layer (selective recomputation,
  // core/recompute.hpp).
  for (const int l : result.split) {
    const Layer& whole = profile.layers[static_cast<std::size_t>(l)];
    Layer& member = result.profile.layers[static_cast<std::size_t>(l)];
    if (!whole.attention_core_flops_share || !whole.attention_core_stash_share) continue;
    if (whole.forward_flops && member.forward_flops && *member.forward_flops > 0)
      member.attention_core_flops_share =
          std::min(1.0, *whole.attention_core_flops_share * ((*whole.forward_flops / t) / *member.forward_flops));
    if (whole.attention_core_time_share && member.forward_s > 0)
      member.attention_core_time_share =
          std::min(1.0, *whole.attention_core_time_share * ((whole.forward_s / t) / member.forward_s));
    if (member.stashed_bytes() > 0)
      member.attention_core_stash_share =
          std::min(1.0, *whole.attention_core_stash_share * ((whole.stashed_bytes() / t) / member.stashed_bytes()));
  }
  result.note = tensor_parallel_note(profile, result, t, link, sequence_parallel, embedding_reduce_scatters, comm_overlap, mode);
  return result;
}

std::vector<std::vector<int>> tensor_parallel_groups(const PlatformSummary& platform, int t) {
  check_t(t);
  const std::size_t hosts = platform.hosts.size();
  if (hosts % static_cast<std::size_t>(t) != 0)
    throw InputError(fmt::format("--tensor-parallel {}: {} has {} hosts, not a multiple of {}: groups of {} consecutive hosts "
                                 "must cover them all",
                                 t, printable(platform.file), hosts, t, t));
  std::vector<std::vector<int>> groups(hosts / static_cast<std::size_t>(t));
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (int m = 0; m < t; ++m) groups[g].push_back(static_cast<int>(g) * t + m);
  return groups;
}

bool tensor_parallel_spans_servers(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups) {
  for (const std::vector<int>& group : groups)
    for (const int member : group)
      if (platform.hosts[static_cast<std::size_t>(member)].server !=
          platform.hosts[static_cast<std::size_t>(group.front())].server)
        return true;
  return false;
}

namespace {

// One step of a group's ring: from member `from` to member `to` (positions
// in the group), and the host pairs that carry it (one route inside a
// server, one per channel between two servers).
struct RingStep {
  std::size_t from = 0, to = 0;
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
};

std::vector<RingStep> ring_steps(const PlatformSummary& platform, const std::vector<int>& group) {
  std::vector<RingStep> steps;
  if (group.size() < 2) return steps;
  const auto host = [&](std::size_t m) { return static_cast<std::size_t>(group[m]); };
  const auto server = [&](std::size_t m) -> const std::string& { return platform.hosts[host(m)].server; };
  // The group's members on the server of member m, in group order.
  const auto members_with = [&](std::size_t m) {
    std::vector<std::size_t> members;
    for (std::size_t k = 0; k < group.size(); ++k)
      if (server(k) == server(m)) members.push_back(host(k));
    return members;
  };
  for (std::size_t m = 0; m < group.size(); ++m) {
    RingStep step{m, (m + 1) % group.size(), {}};
    if (server(step.from) == server(step.to)) {
      step.pairs.emplace_back(host(step.from), host(step.to));
    } else {
      const std::vector<std::size_t> here = members_with(step.from), there = members_with(step.to);
      for (std::size_t k = 0; k < std::min(here.size(), there.size()); ++k) step.pairs.emplace_back(here[k], there[k]);
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace

std::vector<std::pair<std::size_t, std::size_t>> tensor_parallel_route_pairs(const PlatformSummary& platform,
                                                                             const std::vector<std::vector<int>>& groups) {
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  for (const std::vector<int>& group : groups)
    for (const RingStep& step : ring_steps(platform, group)) pairs.insert(pairs.end(), step.pairs.begin(), step.pairs.end());
  return pairs;
}

TensorParallelLink tensor_parallel_link(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups,
                                        const RouteTable& routes) {
  TensorParallelLink link;
  bool any = false;
  std::size_t next_route = 0;
  for (const std::vector<int>& group : groups)
    for (const RingStep& step : ring_steps(platform, group)) {
      // The step's channels as equal concurrent flows: each at the rate of
      // its most loaded link.
      std::map<int, int> flows_through;
      const std::size_t first = next_route;
      for (std::size_t c = 0; c < step.pairs.size(); ++c) {
        if (next_route >= routes.routes.size())
          throw std::logic_error("tensor_parallel_link: fewer routes than tensor_parallel_route_pairs");
        const HostRoute& route = routes.routes[next_route++];
        const auto [a, b] = step.pairs[c];
        if (!route.found)
          throw InputError(fmt::format("--tensor-parallel: {} has no route from '{}' to '{}', a step of a tensor-parallel "
                                       "group's all-reduce ring",
                                       printable(platform.file), printable(platform.hosts[a].name), printable(platform.hosts[b].name)));
        for (const int l : route.links)
          if (routes.links[static_cast<std::size_t>(l)].shared) ++flows_through[l];
      }
      double slowest_rate = std::numeric_limits<double>::infinity(), latency = 0;
      for (std::size_t r = first; r < next_route; ++r) {
        const HostRoute& route = routes.routes[r];
        double rate = std::numeric_limits<double>::infinity();
        for (const int l : route.links) {
          const LinkInfo& info = routes.links[static_cast<std::size_t>(l)];
          rate = std::min(rate, info.shared ? info.bandwidth_Bps / flows_through[l] : info.bandwidth_Bps);
        }
        slowest_rate = std::min(slowest_rate, rate);
        latency = std::max(latency, route.latency_s);
        const LinkNccl nccl = LinkNccl{link.nccl_efficiency, link.nccl_latency_s}.and_then(route_nccl(routes.links, route.links));
        link.nccl_efficiency = nccl.efficiency;
        link.nccl_latency_s = nccl.latency_s;
      }
      if (platform.hosts[static_cast<std::size_t>(group[step.from])].server !=
          platform.hosts[static_cast<std::size_t>(group[step.to])].server) {
        const int channels = static_cast<int>(step.pairs.size());
        link.crossing_channels = link.crossing_channels == 0 ? channels : std::min(link.crossing_channels, channels);
      }
      const double bandwidth = static_cast<double>(step.pairs.size()) * slowest_rate;
      link.bandwidth_Bps = any ? std::min(link.bandwidth_Bps, bandwidth) : bandwidth;
      link.latency_s = any ? std::max(link.latency_s, latency) : latency;
      any = true;
    }
  if (any && std::isinf(link.bandwidth_Bps))
    throw InputError(fmt::format("--tensor-parallel: the routes of {} inside the tensor-parallel groups cross no link",
                                 printable(platform.file)));
  return link;
}

TensorParallelLink tensor_parallel_link(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups) {
  const std::vector<std::pair<std::size_t, std::size_t>> pairs = tensor_parallel_route_pairs(platform, groups);
  if (!pairs.empty() && platform.route_bandwidth_Bps.size() != platform.hosts.size())
    throw InputError(fmt::format("--tensor-parallel: the routes of {} are unknown", printable(platform.file)));
  const bool with_links = platform.route_links.size() == platform.hosts.size();
  RouteTable table;
  if (with_links) table.links = platform.links;
  for (const auto& [a, b] : pairs) {
    HostRoute route;
    route.found = platform.route_bandwidth_Bps[a][b] > 0;
    route.latency_s = platform.route_latency_s[a][b];
    if (with_links) {
      route.links = platform.route_links[a][b];
    } else if (route.found) {  // a route of one link of its own
      route.links = {static_cast<int>(table.links.size())};
      table.links.push_back({"", platform.route_bandwidth_Bps[a][b], true});
    }
    table.routes.push_back(std::move(route));
  }
  return tensor_parallel_link(platform, groups, table);
}

PlatformSummary leader_platform(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups) {
  PlatformSummary leaders;
  leaders.file = platform.file;
  leaders.links = platform.links;
  std::vector<std::size_t> index;
  for (const std::vector<int>& group : groups) index.push_back(static_cast<std::size_t>(group.front()));
  for (const std::size_t i : index) leaders.hosts.push_back(platform.hosts[i]);
  const bool routes = platform.route_bandwidth_Bps.size() == platform.hosts.size();
  const bool links = platform.route_links.size() == platform.hosts.size();
  if (routes) {
    leaders.route_bandwidth_Bps.assign(index.size(), std::vector<double>(index.size(), 0.0));
    leaders.route_latency_s.assign(index.size(), std::vector<double>(index.size(), 0.0));
  }
  if (links) leaders.route_links.assign(index.size(), std::vector<std::vector<int>>(index.size()));
  for (std::size_t a = 0; a < index.size(); ++a)
    for (std::size_t b = 0; b < index.size(); ++b) {
      if (routes) {
        leaders.route_bandwidth_Bps[a][b] = platform.route_bandwidth_Bps[index[a]][index[b]];
        leaders.route_latency_s[a][b] = platform.route_latency_s[index[a]][index[b]];
      }
      if (links) leaders.route_links[a][b] = platform.route_links[index[a]][index[b]];
    }
  if (!links) leaders.links.clear();
  return leaders;
}

}  // namespace pipegrid
