#include "search/strategy.hpp"

#include <fmt/format.h>

#include <vector>

namespace pipegrid::search {

std::string strategy_problem(const Strategy& strategy, int layers, const PlatformSummary& platform) {
  if (strategy.stages.empty()) return "no stage";
  const int hosts = static_cast<int>(platform.hosts.size());
  std::vector<bool> used(static_cast<std::size_t>(hosts), false);
  int next_layer = 0;
  for (std::size_t s = 0; s < strategy.stages.size(); ++s) {
    const StageConfig& stage = strategy.stages[s];
    if (stage.first_layer != next_layer)
      return fmt::format("stage {} starts at layer {}, expected {}", s, stage.first_layer, next_layer);
    if (stage.last_layer < stage.first_layer || stage.last_layer >= layers)
      return fmt::format("stage {}: layers {}..{} outside 0..{} or empty", s, stage.first_layer, stage.last_layer, layers - 1);
    next_layer = stage.last_layer + 1;
    if (stage.tensor < 1 || stage.data < 1) return fmt::format("stage {}: tensor {} and data {} must be >= 1", s, stage.tensor, stage.data);
    if (hosts % stage.tensor != 0) return fmt::format("stage {}: tensor {} does not divide the {} hosts", s, stage.tensor, hosts);
    if (static_cast<int>(stage.groups.size()) != stage.data)
      return fmt::format("stage {}: {} groups for data degree {}", s, stage.groups.size(), stage.data);
    for (int r = 0; r < stage.data; ++r) {
      const int group = stage.groups[static_cast<std::size_t>(r)];
      if (group < 0 || (group + 1) * stage.tensor > hosts) return fmt::format("stage {}: group {} beyond the platform", s, group);
      const std::string& server = platform.hosts[static_cast<std::size_t>(stage.host(r))].server;
      for (int k = 0; k < stage.tensor; ++k) {
        const int host = stage.host(r, k);
        if (used[static_cast<std::size_t>(host)]) return fmt::format("stage {}: host {} used twice", s, platform.hosts[static_cast<std::size_t>(host)].name);
        used[static_cast<std::size_t>(host)] = true;
        if (platform.hosts[static_cast<std::size_t>(host)].server != server)
          return fmt::format("stage {}: tensor group {} spans servers", s, group);
      }
    }
  }
  if (next_layer != layers) return fmt::format("the stages end at layer {}, the model has {}", next_layer - 1, layers);
  return "";
}

std::string strategy_text(const Strategy& strategy, const PlatformSummary& platform) {
  std::string text;
  for (std::size_t s = 0; s < strategy.stages.size(); ++s) {
    const StageConfig& stage = strategy.stages[s];
    std::string hosts;
    // Consecutive leaders as ranges: "gpu0..gpu15" when the groups are 0..15.
    for (std::size_t r = 0; r < stage.groups.size();) {
      std::size_t end = r;
      while (stage.tensor == 1 && end + 1 < stage.groups.size() && stage.groups[end + 1] == stage.groups[end] + 1) ++end;
      const auto name = [&](std::size_t i) -> const std::string& {
        return platform.hosts[static_cast<std::size_t>(stage.groups[i] * stage.tensor)].name;
      };
      hosts += (r == 0 ? "" : ",") + name(r) + (end > r ? ".." + name(end) : "");
      r = end + 1;
    }
    text += fmt::format("{}[{}-{}] t{} d{} ({})", s == 0 ? "" : " | ", stage.first_layer, stage.last_layer, stage.tensor,
                        stage.data, hosts);
  }
  return text;
}

Strategy data_parallel_strategy(int layers, const PlatformSummary& platform) {
  StageConfig stage;
  stage.first_layer = 0;
  stage.last_layer = layers - 1;
  stage.data = static_cast<int>(platform.hosts.size());
  for (int h = 0; h < stage.data; ++h) stage.groups.push_back(h);
  return Strategy{{stage}};
}

int strategy_hosts(const Strategy& strategy) {
  int hosts = 0;
  for (const StageConfig& stage : strategy.stages) hosts += stage.tensor * stage.data;
  return hosts;
}

}  // namespace pipegrid::search
