#include "sweep/inputs.hpp"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "generators/cluster_platform.hpp"

namespace pipegrid::sweep {

namespace fs = std::filesystem;

std::string inline_platform_xml(const Setting& setting) {
  return cluster_platform_xml(cluster_spec_from_options(setting.inline_platform, "platform (inline table)"));
}

void materialize_inline_platforms(std::vector<PlannedRun>& runs, const std::string& dir) {
  for (PlannedRun& run : runs) {
    const auto found = run.settings.find("platform");
    if (found == run.settings.end() || found->second.inline_platform.empty()) continue;
    const std::string xml = inline_platform_xml(found->second);
    const fs::path path = fs::path(dir) / "platforms" / (sha256_hex(xml).substr(0, 16) + ".xml");
    if (!fs::exists(path)) {
      std::error_code error;
      fs::create_directories(path.parent_path(), error);
      if (error) throw InputError(fmt::format("{}: cannot create: {}", path.parent_path().string(), error.message()));
      write_file_atomically(path.string(), xml);
    }
    found->second.resolved_path = path.string();
  }
}

void check_requires(const ExperimentPlan& plan) {
  if (plan.missing_capabilities.empty()) return;
  std::string list;
  for (const std::string& capability : plan.missing_capabilities) list += (list.empty() ? "" : ", ") + capability;
  throw InputError(fmt::format("{}: requires {}, which this build of pipegrid lacks (the study is pending)", plan.file, list));
}

void check_inputs_exist(const ExperimentPlan& plan) {
  std::vector<std::string> missing;
  for (const std::string& path : plan.input_files) {
    std::error_code error;
    if (fs::is_directory(path, error))
      throw InputError(fmt::format("{}: input '{}' is a folder, not a file", plan.file, path));
    if (!fs::is_regular_file(path)) missing.push_back(path);
  }
  if (missing.empty()) return;
  std::string list;
  for (const std::string& path : missing) list += "\n  " + path;
  throw InputError(fmt::format("{}: {} input file{} missing:{}", plan.file, missing.size(), missing.size() == 1 ? " is" : "s are", list));
}

RunInputs inputs_of(const std::vector<const PlannedRun*>& runs) {
  RunInputs inputs;
  for (const PlannedRun* each : runs) {
    const PlannedRun& run = *each;
    if (const auto found = run.settings.find("partitioner"); found != run.settings.end() && !found->second.value.absent() &&
        found->second.value.text != "uniform")
      inputs.partitioners = true;
    for (const char* key : {"tensor_parallel", "context_parallel"})  // both read the routes of their rings
      if (const auto found = run.settings.find(key); found != run.settings.end() && found->second.value.numeric() &&
          found->second.value.number() > 1)
        inputs.tensor_parallel = true;
    if (const auto found = run.settings.find("profile"); found != run.settings.end() && !found->second.resolved_path.empty())
      inputs.profiles.insert(found->second.resolved_path);
    if (const auto found = run.settings.find("platform"); found != run.settings.end() && !found->second.resolved_path.empty())
      inputs.platforms.insert(found->second.resolved_path);
  }
  return inputs;
}

}  // namespace pipegrid::sweep
