#include "core/partition.hpp"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"

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
    stage.weight_bytes += layer.parameter_bytes;
    stage.stash_bytes += layer.output_bytes;
  }
  for (std::size_t s = 0; s < stages.size(); ++s) {
    StageCost& stage = stages[s];
    stage.input_bytes = s == 0 ? profile.input_bytes : profile.layers[stages[s - 1].last_layer].output_bytes;
    stage.output_bytes = s + 1 == stages.size() ? 0 : profile.layers[stage.last_layer].output_bytes;
    stage.stash_bytes += stage.input_bytes;
  }
  return stages;
}

Partition parse_partition_json(const std::string& text, const std::string& origin, const Profile& profile) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw InputError(fmt::format("{}: malformed JSON: {}", origin, error.what()));
  }
  if (!document.is_object() || !document.contains("stages") || !document["stages"].is_array())
    throw InputError(fmt::format("{}: expected an object with a 'stages' array", origin));
  Partition partition;
  const auto& stages = document["stages"];
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const auto& stage = stages[s];
    const std::string where = fmt::format("{}: stages[{}]", origin, s);
    if (!stage.is_object()) throw InputError(fmt::format("{}: expected an object", where));
    const auto layers = stage.find("layers");
    if (layers == stage.end() || !layers->is_array() || layers->size() != 2 || !(*layers)[0].is_number_integer() ||
        !(*layers)[1].is_number_integer())
      throw InputError(fmt::format("{}.layers: expected [first, last] layer indices (0-based, inclusive)", where));
    const int first = (*layers)[0], last = (*layers)[1];
    if (first != static_cast<int>(partition.stage_of_layer.size()) || last < first)
      throw InputError(fmt::format("{}.layers: expected a range starting at layer {}, found [{}, {}]", where,
                                   partition.stage_of_layer.size(), first, last));
    partition.stage_of_layer.insert(partition.stage_of_layer.end(), last - first + 1, static_cast<int>(s));
    const auto hosts = stage.find("hosts");
    if (hosts == stage.end() || !hosts->is_array() || hosts->empty())
      throw InputError(fmt::format("{}.hosts: expected a non-empty list of host names", where));
    std::vector<std::string> names;
    for (const auto& host : *hosts) {
      if (!host.is_string()) throw InputError(fmt::format("{}.hosts: expected host names (strings), found {}", where, host.dump()));
      names.push_back(host.get<std::string>());
    }
    partition.hosts.push_back(std::move(names));
  }
  check_partition(partition, profile, origin);
  return partition;
}

Partition read_partition_file(const std::string& path, const Profile& profile) {
  return parse_partition_json(read_text_file(path), path, profile);
}

std::string partition_to_json(const Partition& partition) {
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (int s = 0; s < partition.num_stages(); ++s) {
    int first = -1, last = -1;
    for (std::size_t l = 0; l < partition.stage_of_layer.size(); ++l)
      if (partition.stage_of_layer[l] == s) {
        if (first < 0) first = static_cast<int>(l);
        last = static_cast<int>(l);
      }
    nlohmann::ordered_json stage;
    stage["layers"] = {first, last};
    stage["hosts"] = partition.hosts[s];
    stages.push_back(stage);
  }
  nlohmann::ordered_json document;
  document["stages"] = stages;
  return document.dump(2) + "\n";
}

}  // namespace pipegrid
