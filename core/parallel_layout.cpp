// Megatron-Core's rank generator (core/parallel_layout.hpp).

#include "core/parallel_layout.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace pipegrid {

namespace {

constexpr int kMaxSize = 1 << 20;

/// Coordinates of `index` over `sizes`, the first fastest (parallel_state's decompose).
std::vector<long long> decompose(long long index, const std::vector<int>& sizes) {
  std::vector<long long> coordinates;
  for (const int size : sizes) {
    coordinates.push_back(index % size);
    index /= size;
  }
  return coordinates;
}

// The dense generator's dimensions in order tp-cp-ep-dp-pp (ep 1).
std::vector<int> dense_dimensions(const ParallelSizes& s) { return {s.tp, s.cp, 1, s.dp, s.pp}; }
// The expert generator's, in the same order with cp 1: tp (etp), ep, dp (edp), pp.
std::vector<int> expert_dimensions(const ParallelSizes& s) {
  return {s.expert_tensor(), 1, s.ep, static_cast<int>(s.expert_data()), s.pp};
}

}  // namespace

void check_parallel_sizes(const ParallelSizes& sizes, long long world) {
  for (const auto& [flag, value] : {std::pair{"--tensor-parallel", sizes.tp}, std::pair{"--context-parallel", sizes.cp},
                                    std::pair{"--expert-parallel", sizes.ep}, std::pair{"--data-parallel", sizes.dp},
                                    std::pair{"--pipeline-parallel", sizes.pp}})
    if (value < 1 || value > kMaxSize)
      throw InputError(fmt::format("{}: expected a size from 1 to {}, found {}", flag, kMaxSize, value));
  if (sizes.etp < 0 || sizes.etp > kMaxSize)
    throw InputError(fmt::format("--expert-tensor-parallel: expected a size from 1 to {} (0: the tensor size), found {}",
                                 kMaxSize, sizes.etp));
  if (world > 0 && sizes.world() != world)
    throw InputError(fmt::format("--tensor-parallel {} x --context-parallel {} x --data-parallel {} x "
                                 "--pipeline-parallel {} = {}: expected the world size {}",
                                 sizes.tp, sizes.cp, sizes.dp, sizes.pp, sizes.world(), world));
  const long long dense = static_cast<long long>(sizes.tp) * sizes.cp * sizes.dp;
  const long long expert = static_cast<long long>(sizes.expert_tensor()) * sizes.ep;
  if (dense % expert != 0)
    throw InputError(fmt::format("--expert-parallel {} x --expert-tensor-parallel {} = {}: expected a divisor of "
                                 "tensor x context x data = {} x {} x {} = {} (Megatron-Core's expert rank generator "
                                 "carves expert x expert-tensor x expert-data out of them)",
                                 sizes.ep, sizes.expert_tensor(), expert, sizes.tp, sizes.cp, sizes.dp, dense));
}

std::vector<std::vector<long long>> masked_orthogonal_rank_groups(long long world, const std::vector<int>& dimension_sizes,
                                                                  const std::vector<bool>& in_group) {
  if (dimension_sizes.size() != in_group.size())
    throw InputError(fmt::format("rank groups: {} sizes but {} mask entries", dimension_sizes.size(), in_group.size()));
  long long product = 1;
  std::vector<int> masked_sizes, unmasked_sizes;
  std::vector<long long> masked_strides, unmasked_strides;
  for (std::size_t i = 0; i < dimension_sizes.size(); ++i) {
    if (dimension_sizes[i] < 1) throw InputError(fmt::format("rank groups: dimension {} has size {}", i, dimension_sizes[i]));
    (in_group[i] ? masked_sizes : unmasked_sizes).push_back(dimension_sizes[i]);
    (in_group[i] ? masked_strides : unmasked_strides).push_back(product);
    product *= dimension_sizes[i];
  }
  if (product != world)
    throw InputError(fmt::format("rank groups: the sizes make {} ranks, expected the world size {}", product, world));
  long long group_size = 1;
  for (const int size : masked_sizes) group_size *= size;
  std::vector<std::vector<long long>> groups;
  for (long long g = 0; g < world / group_size; ++g) {
    const std::vector<long long> group_coordinates = decompose(g, unmasked_sizes);
    long long base = 0;
    for (std::size_t i = 0; i < group_coordinates.size(); ++i) base += group_coordinates[i] * unmasked_strides[i];
    std::vector<long long> ranks;
    for (long long m = 0; m < group_size; ++m) {
      const std::vector<long long> member = decompose(m, masked_sizes);
      long long rank = base;
      for (std::size_t i = 0; i < member.size(); ++i) rank += member[i] * masked_strides[i];
      ranks.push_back(rank);
    }
    groups.push_back(std::move(ranks));
  }
  return groups;
}

RankCoordinates rank_coordinates(const ParallelSizes& sizes, long long rank) {
  check_parallel_sizes(sizes);
  if (rank < 0 || rank >= sizes.world())
    throw InputError(fmt::format("rank {}: expected 0 to {} (world size {})", rank, sizes.world() - 1, sizes.world()));
  const std::vector<long long> dense = decompose(rank, dense_dimensions(sizes));
  const std::vector<long long> expert = decompose(rank, expert_dimensions(sizes));
  RankCoordinates out;
  out.tensor = static_cast<int>(dense[0]);
  out.context = static_cast<int>(dense[1]);
  out.data = static_cast<int>(dense[3]);
  out.pipeline = static_cast<int>(dense[4]);
  out.expert_tensor = static_cast<int>(expert[0]);
  out.expert = static_cast<int>(expert[2]);
  out.expert_data = static_cast<int>(expert[3]);
  return out;
}

long long dense_rank(const ParallelSizes& sizes, int tensor, int context, int data, int pipeline) {
  return tensor + static_cast<long long>(sizes.tp) * (context + static_cast<long long>(sizes.cp) *
                                                                    (data + static_cast<long long>(sizes.dp) * pipeline));
}

const char* to_string(GroupKind kind) {
  switch (kind) {
    case GroupKind::Tensor: return "tp";
    case GroupKind::Context: return "cp";
    case GroupKind::Data: return "dp";
    case GroupKind::DataWithContext: return "dp-cp";
    case GroupKind::Pipeline: return "pp";
    case GroupKind::ModelParallel: return "tp-pp";
    case GroupKind::TensorAndContext: return "tp-cp";
    case GroupKind::Expert: return "ep";
    case GroupKind::ExpertTensor: return "etp";
    case GroupKind::ExpertData: return "edp";
    case GroupKind::ExpertTensorAndExpert: return "tp-ep";
  }
  return "?";
}

std::vector<std::vector<long long>> parallel_groups(const ParallelSizes& sizes, GroupKind kind) {
  check_parallel_sizes(sizes);
  // Masks over the order tp-cp-ep-dp-pp.
  const auto mask = [](bool tp, bool cp, bool ep, bool dp, bool pp) { return std::vector<bool>{tp, cp, ep, dp, pp}; };
  const long long world = sizes.world();
  switch (kind) {
    case GroupKind::Tensor: return masked_orthogonal_rank_groups(world, dense_dimensions(sizes), mask(1, 0, 0, 0, 0));
    case GroupKind::Context: return masked_orthogonal_rank_groups(world, dense_dimensions(sizes), mask(0, 1, 0, 0, 0));
    case GroupKind::Data: return masked_orthogonal_rank_groups(world, dense_dimensions(sizes), mask(0, 0, 0, 1, 0));
    case GroupKind::DataWithContext:
      return masked_orthogonal_rank_groups(world, dense_dimensions(sizes), mask(0, 1, 0, 1, 0));
    case GroupKind::Pipeline: return masked_orthogonal_rank_groups(world, dense_dimensions(sizes), mask(0, 0, 0, 0, 1));
    case GroupKind::ModelParallel:
      return masked_orthogonal_rank_groups(world, dense_dimensions(sizes), mask(1, 0, 0, 0, 1));
    case GroupKind::TensorAndContext:
      return masked_orthogonal_rank_groups(world, dense_dimensions(sizes), mask(1, 1, 0, 0, 0));
    case GroupKind::Expert: return masked_orthogonal_rank_groups(world, expert_dimensions(sizes), mask(0, 0, 1, 0, 0));
    case GroupKind::ExpertTensor:
      return masked_orthogonal_rank_groups(world, expert_dimensions(sizes), mask(1, 0, 0, 0, 0));
    case GroupKind::ExpertData:
      return masked_orthogonal_rank_groups(world, expert_dimensions(sizes), mask(0, 0, 0, 1, 0));
    case GroupKind::ExpertTensorAndExpert:
      return masked_orthogonal_rank_groups(world, expert_dimensions(sizes), mask(1, 0, 1, 0, 0));
  }
  return {};
}

}  // namespace pipegrid
