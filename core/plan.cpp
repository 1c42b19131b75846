#include "core/plan.hpp"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"

namespace pipegrid {

namespace {
constexpr int kPlanVersion = 1;
}

int optimizer_copies(const std::string& optimizer) {
  if (optimizer == "sgd") return 0;
  if (optimizer == "momentum") return 1;
  if (optimizer == "adam") return 2;
  throw InputError(fmt::format("--optimizer: expected sgd, momentum or adam, found '{}'", optimizer));
}

std::string plan_to_json(const Plan& plan) {
  nlohmann::ordered_json document;
  document["pipegrid_plan"] = kPlanVersion;
  document["schedule"] = plan.schedule;
  document["micro_batches"] = plan.micro_batches;
  document["mini_batches"] = plan.mini_batches;
  if (plan.extend_mini_batches) document["extend_mini_batches"] = true;
  if (plan.memory_bytes) document["memory_bytes"] = *plan.memory_bytes;
  document["recompute"] = plan.recompute;
  document["network"] = plan.network;
  document["optimizer"] = plan.optimizer;
  document["vertical_sync"] = plan.vertical_sync;
  document["update_interval"] = plan.update_interval;
  document["prediction_cost_s_per_byte"] = plan.prediction_cost_s_per_byte;
  document["wait_free"] = plan.wait_free;
  document["pipeline_depth"] = plan.pipeline_depth;
  document["platform_file"] = plan.platform_file;
  document["platform_xml"] = plan.platform_xml;
  document["partition"] = nlohmann::ordered_json::parse(partition_to_json(plan.partition));
  document["profile"] = nlohmann::ordered_json::parse(profile_to_json(plan.profile));
  return document.dump(2) + "\n";
}

Plan parse_plan_json(const std::string& text, const std::string& origin) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw InputError(fmt::format("{}: malformed JSON: {}", origin, error.what()));
  }
  if (!document.is_object() || !document.contains("pipegrid_plan"))
    throw InputError(fmt::format("{}: not a pipegrid plan (expected a 'pipegrid_plan' field)", origin));
  if (document["pipegrid_plan"] != kPlanVersion)
    throw InputError(fmt::format("{}: pipegrid_plan: expected version {}, found {}", origin, kPlanVersion, document["pipegrid_plan"].dump()));
  auto field = [&](const char* name, auto check, const char* expected) -> const nlohmann::json& {
    if (!document.contains(name) || !check(document[name]))
      throw InputError(fmt::format("{}: {}: expected {}, found {}", origin, name, expected,
                                   document.contains(name) ? document[name].dump() : "nothing"));
    return document[name];
  };
  auto is_string = [](const nlohmann::json& j) { return j.is_string(); };
  auto is_count = [](const nlohmann::json& j) { return j.is_number_integer() && j.get<long long>() >= 1; };
  Plan plan;
  plan.schedule = field("schedule", is_string, "a schedule name").get<std::string>();
  plan.micro_batches = field("micro_batches", is_count, "an integer >= 1").get<int>();
  plan.mini_batches = field("mini_batches", is_count, "an integer >= 1").get<int>();
  plan.recompute = field("recompute", [](const nlohmann::json& j) { return j.is_boolean(); }, "true or false").get<bool>();
  plan.network = field("network", is_string, "analytic or simgrid").get<std::string>();
  // Fields added with the PipeDream family; plans written before them use the defaults.
  auto is_boolean = [](const nlohmann::json& j) { return j.is_boolean(); };
  if (document.contains("optimizer")) plan.optimizer = field("optimizer", is_string, "sgd, momentum or adam").get<std::string>();
  optimizer_copies(plan.optimizer);
  if (document.contains("vertical_sync")) plan.vertical_sync = field("vertical_sync", is_boolean, "true or false").get<bool>();
  if (document.contains("update_interval"))
    plan.update_interval = field("update_interval", [](const nlohmann::json& j) { return j.is_number_integer() && j.get<long long>() >= 0; },
                                 "an integer >= 0").get<int>();
  if (document.contains("prediction_cost_s_per_byte"))
    plan.prediction_cost_s_per_byte = field("prediction_cost_s_per_byte", [](const nlohmann::json& j) { return j.is_number() && j.get<double>() >= 0; },
                                            "a number >= 0").get<double>();
  if (document.contains("wait_free")) plan.wait_free = field("wait_free", is_boolean, "true or false").get<bool>();
  if (document.contains("pipeline_depth"))
    plan.pipeline_depth = field("pipeline_depth", [](const nlohmann::json& j) { return j.is_number_integer() && j.get<long long>() >= 0; },
                                "an integer >= 0").get<int>();
  if (document.contains("extend_mini_batches"))
    plan.extend_mini_batches = field("extend_mini_batches", is_boolean, "true or false").get<bool>();
  if (document.contains("memory_bytes"))
    plan.memory_bytes = field("memory_bytes", [](const nlohmann::json& j) { return j.is_number() && j.get<double>() >= 0 && j.get<double>() < 1e300; },
                              "a memory capacity in bytes >= 0").get<double>();
  plan.platform_file = field("platform_file", is_string, "a path").get<std::string>();
  plan.platform_xml = field("platform_xml", is_string, "the platform XML text").get<std::string>();
  plan.profile = parse_profile_json(field("profile", [](const nlohmann::json& j) { return j.is_object(); }, "a profile object").dump(),
                                    origin + ": profile");
  plan.partition = parse_partition_json(field("partition", [](const nlohmann::json& j) { return j.is_object(); }, "a partition object").dump(),
                                        origin + ": partition", plan.profile);
  return plan;
}

Plan read_plan_file(const std::string& path) { return parse_plan_json(read_text_file(path), path); }

}  // namespace pipegrid
