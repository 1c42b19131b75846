#include "core/plan.hpp"

#include <algorithm>
#include <cstdint>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/json_input.hpp"
#include "core/limits.hpp"
#include "core/platform_check.hpp"
#include "core/fp8.hpp"
#include "core/precision.hpp"
#include "core/tensor_parallel.hpp"
#include "core/context_parallel.hpp"
#include "core/program.hpp"

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
  // Written only when set, so that plans without them read as before.
  if (!plan.partitioner.empty()) document["partitioner"] = plan.partitioner;
  if (plan.micro_batch_scaling != "none") document["micro_batch_scaling"] = plan.micro_batch_scaling;
  if (!plan.micro_batch_scaling_note.empty()) document["micro_batch_scaling_note"] = plan.micro_batch_scaling_note;
  if (plan.virtual_stages != 1) document["virtual_stages"] = plan.virtual_stages;
  if (plan.fb_overlap != 1.0) document["fb_overlap"] = plan.fb_overlap;
  if (plan.activation_limit != 0) document["activation_limit"] = plan.activation_limit;
  if (plan.transfer_rule != "share") document["transfer_rule"] = plan.transfer_rule;
  if (plan.blocking_transfers) document["blocking_transfers"] = true;
  if (!plan.program_text.empty()) document["program"] = plan.program_text;
  if (!plan.dtype.empty()) document["dtype"] = plan.dtype;
  if (!plan.gradient_dtype.empty()) document["gradient_dtype"] = plan.gradient_dtype;
  if (!plan.fp8_format.empty()) document["fp8_format"] = plan.fp8_format;
  if (plan.layer_recompute.enabled()) {
    document["recompute_granularity"] = plan.layer_recompute.granularity;
    if (!plan.layer_recompute.method.empty()) document["recompute_method"] = plan.layer_recompute.method;
    if (plan.layer_recompute.num_layers != 0) document["recompute_num_layers"] = plan.layer_recompute.num_layers;
  }
  if (plan.tensor_parallel != 1) document["tensor_parallel"] = plan.tensor_parallel;
  if (plan.expert_parallel != 1) document["expert_parallel"] = plan.expert_parallel;
  if (plan.expert_tensor_parallel != 0) document["expert_tensor_parallel"] = plan.expert_tensor_parallel;
  if (plan.sequence_parallel) document["sequence_parallel"] = true;
  if (plan.tp_comm_overlap) document["tp_comm_overlap"] = true;
  if (plan.tp_collectives != "compute") document["tp_collectives"] = plan.tp_collectives;
  if (!plan.tensor_parallel_collectives.empty()) {
    // Per layer: [[kind, count, bytes], ...] of the forward and of the backward's input part.
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const LayerCollectives& layer : plan.tensor_parallel_collectives) {
      nlohmann::ordered_json entry = nlohmann::ordered_json::object();
      for (const auto& [name, list] : {std::pair{"forward", &layer.forward}, std::pair{"backward_input", &layer.backward_input}}) {
        if (list->empty()) continue;
        nlohmann::ordered_json collectives = nlohmann::ordered_json::array();
        for (const RingCollective& c : *list) collectives.push_back({to_string(c.kind), c.count, c.bytes});
        entry[name] = collectives;
      }
      layers.push_back(entry);
    }
    document["tensor_parallel_collectives"] = layers;
  }
  if (!plan.tensor_parallel_note.empty()) document["tensor_parallel_note"] = plan.tensor_parallel_note;
  if (plan.context_parallel != 1) document["context_parallel"] = plan.context_parallel;
  if (!plan.context_parallel_note.empty()) document["context_parallel_note"] = plan.context_parallel_note;
  if (plan.data_parallel != 1) document["data_parallel"] = plan.data_parallel;
  if (plan.collective_model != "flows") document["collective_model"] = plan.collective_model;
  if (plan.overlap_grad_reduce) document["overlap_grad_reduce"] = true;
  if (plan.ddp_bucket_size) document["ddp_bucket_size"] = *plan.ddp_bucket_size;
  if (plan.distributed_optimizer) document["distributed_optimizer"] = true;
  if (plan.overlap_param_gather) document["overlap_param_gather"] = true;
  if (plan.parallel_layout) document["parallel_layout"] = true;
  document["platform_file"] = plan.platform_file;
  document["platform_xml"] = plan.platform_xml;
  document["partition"] = nlohmann::ordered_json::parse(partition_to_json(plan.partition));
  document["profile"] = nlohmann::ordered_json::parse(profile_to_json(plan.profile));
  return document.dump(2) + "\n";
}

Plan parse_plan_json(const std::string& text, const std::string& origin) {
  const nlohmann::json document = parse_json_input(text, origin);
  if (!document.is_object() || !document.contains("pipegrid_plan"))
    throw InputError(fmt::format("{}: not a pipegrid plan (expected a 'pipegrid_plan' field)", origin));
  if (document["pipegrid_plan"] != kPlanVersion)
    throw InputError(fmt::format("{}: pipegrid_plan: expected version {}, found {}", origin, kPlanVersion,
                                 shown_json(document["pipegrid_plan"])));
  reject_unknown_json_fields(document, origin,
                             {"pipegrid_plan", "schedule", "micro_batches", "mini_batches", "recompute", "network",
                              "optimizer", "vertical_sync", "update_interval", "prediction_cost_s_per_byte", "wait_free",
                              "pipeline_depth", "partitioner", "micro_batch_scaling", "micro_batch_scaling_note",
                              "virtual_stages", "fb_overlap", "activation_limit", "transfer_rule", "blocking_transfers", "program", "dtype", "gradient_dtype", "fp8_format", "recompute_granularity", "recompute_method", "recompute_num_layers", "tensor_parallel", "expert_parallel", "expert_tensor_parallel", "sequence_parallel", "tp_comm_overlap", "tp_collectives", "tensor_parallel_collectives", "tensor_parallel_note", "context_parallel", "context_parallel_note", "data_parallel", "collective_model", "overlap_grad_reduce", "ddp_bucket_size", "distributed_optimizer", "overlap_param_gather", "parallel_layout", "extend_mini_batches", "memory_bytes", "platform_file", "platform_xml", "partition", "profile"});
  auto field = [&](const char* name, auto check, const std::string& expected) -> const nlohmann::json& {
    if (!document.contains(name) || !check(document[name]))
      throw InputError(fmt::format("{}: {}: expected {}, found {}", origin, name, expected,
                                   document.contains(name) ? shown_json(document[name]) : "nothing"));
    return document[name];
  };
  // An integer field in min..max (limits.hpp: the schedule generator's
  // limits, so that a plan never asks for more than a command line may).
  auto integer = [&](const char* name, long long min, long long max) {
    const auto found = document.find(name);
    if (found != document.end()) {
      if (const auto value = json_integer_in(*found, min, max)) return static_cast<int>(*value);
      const bool above = found->is_number_unsigned() ? found->get<std::uint64_t>() > static_cast<std::uint64_t>(max)
                                                     : found->is_number_integer() && found->get<std::int64_t>() > max;
      if (above)
        throw InputError(fmt::format("{}: {}: expected at most {} (docs/formats.md, Limits), found {}", origin, name, max,
                                     shown_json(*found)));
    }
    throw InputError(fmt::format("{}: {}: expected an integer >= {}, found {}", origin, name, min,
                                 found == document.end() ? "nothing" : shown_json(*found)));
  };
  auto is_string = [](const nlohmann::json& j) { return j.is_string(); };
  auto is_boolean = [](const nlohmann::json& j) { return j.is_boolean(); };
  Plan plan;
  plan.schedule = field("schedule", is_string, "a schedule name").get<std::string>();
  plan.micro_batches = integer("micro_batches", 1, limits::kMaxMicroBatches);
  plan.mini_batches = integer("mini_batches", 1, limits::kMaxMiniBatches);
  plan.recompute = field("recompute", is_boolean, "true or false").get<bool>();
  plan.network = field("network", is_string, "analytic or simgrid").get<std::string>();
  // Fields added with the PipeDream family; plans written before them use the defaults.
  if (document.contains("optimizer")) plan.optimizer = field("optimizer", is_string, "sgd, momentum or adam").get<std::string>();
  optimizer_copies(plan.optimizer);
  if (document.contains("vertical_sync")) plan.vertical_sync = field("vertical_sync", is_boolean, "true or false").get<bool>();
  if (document.contains("update_interval")) plan.update_interval = integer("update_interval", 0, limits::kMaxUpdateInterval);
  if (document.contains("prediction_cost_s_per_byte"))
    plan.prediction_cost_s_per_byte =
        field("prediction_cost_s_per_byte",
              [](const nlohmann::json& j) { return json_number_in(j, 0, limits::kMaxPredictionCostSPerByte).has_value(); },
              fmt::format("a number in 0..{} (seconds per parameter byte)", limits::kMaxPredictionCostSPerByte))
            .get<double>();
  if (document.contains("wait_free")) plan.wait_free = field("wait_free", is_boolean, "true or false").get<bool>();
  if (document.contains("pipeline_depth")) plan.pipeline_depth = integer("pipeline_depth", 0, limits::kMaxPipelineDepth);
  if (document.contains("partitioner")) {
    plan.partitioner = field("partitioner", is_string, "a partitioner name").get<std::string>();
    if (plan.partitioner.empty())
      throw InputError(fmt::format("{}: partitioner: expected a partitioner name, found {}", origin, shown_json(document["partitioner"])));
  }
  if (document.contains("micro_batch_scaling")) {
    plan.micro_batch_scaling = field("micro_batch_scaling", is_string, "a micro-batch scaling rule").get<std::string>();
    const std::vector<std::string>& rules = micro_batch_scaling_names();
    if (std::find(rules.begin(), rules.end(), plan.micro_batch_scaling) == rules.end())
      throw InputError(fmt::format("{}: micro_batch_scaling: expected a rule of --micro-batch-scaling, found {}", origin,
                                   shown_json(document["micro_batch_scaling"])));
  }
  if (document.contains("micro_batch_scaling_note"))
    plan.micro_batch_scaling_note = field("micro_batch_scaling_note", is_string, "a note").get<std::string>();
  if (document.contains("virtual_stages")) plan.virtual_stages = integer("virtual_stages", 1, limits::kMaxStages);
  if (document.contains("fb_overlap"))
    plan.fb_overlap = field("fb_overlap", [](const nlohmann::json& j) { return json_number_in(j, 0, 1).has_value() && j.get<double>() > 0; },
                            "a number in (0, 1]")
                          .get<double>();
  if (document.contains("activation_limit"))
    plan.activation_limit =
        field("activation_limit",
              [](const nlohmann::json& j) { return json_number_in(j, 0, limits::kMaxStages).has_value() && j.get<double>() > 0; },
              fmt::format("a number in (0, {}] (p micro-batches' activations per stage)", limits::kMaxStages))
            .get<double>();
  if (document.contains("transfer_rule")) {
    plan.transfer_rule = field("transfer_rule", is_string, "share or fifo").get<std::string>();
    if (plan.transfer_rule != "share" && plan.transfer_rule != "fifo")
      throw InputError(fmt::format("{}: transfer_rule: expected share or fifo, found {}", origin, shown_json(document["transfer_rule"])));
  }
  if (document.contains("blocking_transfers"))
    plan.blocking_transfers = field("blocking_transfers", is_boolean, "true or false").get<bool>();
  if (document.contains("program")) {
    plan.program_text = field("program", is_string, "a Program in pipegrid's text form").get<std::string>();
    parse_program_text(plan.program_text, origin + ": program");
  }
  if (document.contains("dtype")) {
    plan.dtype = field("dtype", is_string, "fp32, fp16 or bf16").get<std::string>();
    dtype_bytes(plan.dtype, origin + ": dtype");
    if (plan.dtype.empty()) throw InputError(fmt::format("{}: dtype: expected fp32, fp16 or bf16, found \"\"", origin));
  }
  if (document.contains("gradient_dtype")) {
    plan.gradient_dtype = field("gradient_dtype", is_string, "fp32 or the dtype").get<std::string>();
    try {
      if (plan.gradient_dtype.empty()) dtype_bytes(plan.gradient_dtype, "--gradient-dtype");  // "" is not stated
      check_gradient_dtype(plan.dtype, plan.gradient_dtype);
    } catch (const InputError& error) {
      throw InputError(fmt::format("{}: gradient_dtype: {}", origin, error.what()));
    }
    if (plan.gradient_dtype.empty())
      throw InputError(fmt::format("{}: gradient_dtype: expected fp32, fp16 or bf16, found \"\"", origin));
  }
  if (document.contains("fp8_format")) {
    plan.fp8_format = field("fp8_format", is_string, "hybrid or e4m3").get<std::string>();
    if (plan.fp8_format.empty())  // "" is not stated: the field is written only when set
      throw InputError(fmt::format("{}: fp8_format: expected hybrid or e4m3, found \"\"", origin));
    try {
      check_fp8_recipe(plan.fp8_format, plan.dtype, "fp8_format");
    } catch (const InputError& error) {
      throw InputError(fmt::format("{}: {}", origin, error.what()));
    }
  }
  if (document.contains("recompute_granularity"))
    plan.layer_recompute.granularity = field("recompute_granularity", is_string, "full or selective").get<std::string>();
  if (document.contains("recompute_method"))
    plan.layer_recompute.method = field("recompute_method", is_string, "uniform or block").get<std::string>();
  if (document.contains("recompute_num_layers"))
    plan.layer_recompute.num_layers = integer("recompute_num_layers", 1, kMaxRecomputeLayers);
  try {
    check_layer_recompute(plan.layer_recompute);
    if (document.contains("recompute_granularity") && plan.layer_recompute.granularity.empty())
      throw InputError("--recompute-granularity: expected full or selective, found ''");
  } catch (const InputError& error) {
    throw InputError(fmt::format("{}: {}", origin, error.what()));
  }
  if (plan.recompute && plan.layer_recompute.enabled())
    throw InputError(fmt::format("{}: recompute and recompute_granularity: GPipe's and Megatron's recomputation; a plan "
                                 "has one",
                                 origin));
  if (document.contains("tensor_parallel")) plan.tensor_parallel = integer("tensor_parallel", 1, kMaxTensorParallel);
  if (document.contains("expert_parallel")) plan.expert_parallel = integer("expert_parallel", 1, limits::kMaxDevices);
  if (document.contains("expert_tensor_parallel"))
    plan.expert_tensor_parallel = integer("expert_tensor_parallel", 1, kMaxTensorParallel);
  if (document.contains("sequence_parallel"))
    plan.sequence_parallel = field("sequence_parallel", is_boolean, "true or false").get<bool>();
  if (plan.sequence_parallel && plan.tensor_parallel == 1)
    throw InputError(fmt::format("{}: sequence_parallel: expected it only with tensor_parallel > 1, found it with "
                                 "tensor_parallel 1",
                                 origin));
  if (document.contains("tp_comm_overlap"))
    plan.tp_comm_overlap = field("tp_comm_overlap", is_boolean, "true or false").get<bool>();
  if (plan.tp_comm_overlap && !plan.sequence_parallel)
    throw InputError(fmt::format("{}: tp_comm_overlap: expected it only with sequence_parallel, found it without", origin));
  if (document.contains("tp_collectives")) {
    plan.tp_collectives = field("tp_collectives", is_string, "compute or flows").get<std::string>();
    if (plan.tp_collectives != "compute" && plan.tp_collectives != "flows")
      throw InputError(fmt::format("{}: tp_collectives: expected compute or flows, found {}", origin, shown_json(document["tp_collectives"])));
    if (plan.tp_collectives == "flows" && plan.tp_comm_overlap)
      throw InputError(fmt::format("{}: tp_collectives: flows excludes tp_comm_overlap (modelled as compute time only)", origin));
  }
  if (document.contains("tensor_parallel_collectives")) {
    if (plan.tp_collectives != "flows" || plan.tensor_parallel == 1)
      throw InputError(fmt::format("{}: tensor_parallel_collectives: expected only with tp_collectives flows and "
                                   "tensor_parallel > 1",
                                   origin));
    const nlohmann::json& layers = field("tensor_parallel_collectives", [](const nlohmann::json& j) { return j.is_array(); },
                                         "an array of layers' collectives");
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const nlohmann::json& entry = layers[l];
      const std::string where = fmt::format("{}: tensor_parallel_collectives[{}]", origin, l);
      if (!entry.is_object()) throw InputError(fmt::format("{}: expected an object, found {}", where, shown_json(entry)));
      LayerCollectives& layer = plan.tensor_parallel_collectives.emplace_back();
      for (const auto& [key, value] : entry.items()) {
        std::vector<RingCollective>* list = key == "forward" ? &layer.forward : key == "backward_input" ? &layer.backward_input : nullptr;
        if (!list) throw InputError(fmt::format("{}: unknown field '{}' (expected forward or backward_input)", where, printable(key)));
        if (!value.is_array()) throw InputError(fmt::format("{}.{}: expected an array, found {}", where, key, shown_json(value)));
        for (const nlohmann::json& c : value) {
          const bool shaped = c.is_array() && c.size() == 3 && c[0].is_string();
          const std::optional<long long> count = shaped ? json_integer_in(c[1], 1, 1000) : std::nullopt;
          const std::optional<double> bytes = shaped ? json_number_in(c[2], 0, limits::kMaxBytes) : std::nullopt;
          std::optional<RingCollectiveKind> kind;
          for (const RingCollectiveKind k : {RingCollectiveKind::AllReduce, RingCollectiveKind::ReduceScatter, RingCollectiveKind::AllGather})
            if (shaped && c[0] == to_string(k)) kind = k;
          if (!kind || !count || !bytes)
            throw InputError(fmt::format("{}.{}: expected [all_reduce | reduce_scatter | all_gather, a count 1..1000, bytes "
                                         "0..{}], found {}",
                                         where, key, limits::kMaxBytes, shown_json(c)));
          list->push_back({*kind, static_cast<int>(*count), *bytes});
        }
      }
    }
  }
  if (document.contains("tensor_parallel_note"))
    plan.tensor_parallel_note = field("tensor_parallel_note", is_string, "a note").get<std::string>();
  if (document.contains("context_parallel")) plan.context_parallel = integer("context_parallel", 1, kMaxContextParallel);
  if (document.contains("context_parallel_note"))
    plan.context_parallel_note = field("context_parallel_note", is_string, "a note").get<std::string>();
  if (document.contains("data_parallel")) plan.data_parallel = integer("data_parallel", 1, limits::kMaxDevices);
  if (document.contains("collective_model")) {
    plan.collective_model = field("collective_model", is_string, "flows or rounds").get<std::string>();
    if (plan.collective_model != "flows" && plan.collective_model != "rounds")
      throw InputError(fmt::format("{}: collective_model: expected flows or rounds, found {}", origin, shown_json(document["collective_model"])));
  }
  for (const auto& [name, flag] : {std::pair{"overlap_grad_reduce", &Plan::overlap_grad_reduce},
                                   std::pair{"distributed_optimizer", &Plan::distributed_optimizer},
                                   std::pair{"overlap_param_gather", &Plan::overlap_param_gather}})
    if (document.contains(name)) plan.*flag = field(name, is_boolean, "true or false").get<bool>();
  if (document.contains("ddp_bucket_size"))
    plan.ddp_bucket_size = field("ddp_bucket_size", [](const nlohmann::json& j) { return json_integer_in(j, 1, 1LL << 50).has_value(); },
                                 "parameters per bucket, 1..2^50").get<long long>();
  if (document.contains("parallel_layout"))
    plan.parallel_layout = field("parallel_layout", is_boolean, "true or false").get<bool>();
  if (document.contains("extend_mini_batches"))
    plan.extend_mini_batches = field("extend_mini_batches", is_boolean, "true or false").get<bool>();
  if (document.contains("memory_bytes"))
    plan.memory_bytes = field("memory_bytes", [](const nlohmann::json& j) { return json_number_in(j, 0, limits::kMaxBytes).has_value(); },
                              fmt::format("a memory capacity in bytes in 0..{}", limits::kMaxBytes)).get<double>();
  plan.platform_file = field("platform_file", is_string, "a path").get<std::string>();
  plan.platform_xml = field("platform_xml", is_string, "the platform XML text").get<std::string>();
  auto is_object = [](const nlohmann::json& j) { return j.is_object(); };
  plan.profile = parse_profile_json_document(field("profile", is_object, "a profile object"), origin + ": profile");
  plan.partition =
      parse_partition_json_document(field("partition", is_object, "a partition object"), origin + ": partition", plan.profile);
  if (!plan.tensor_parallel_collectives.empty() && plan.tensor_parallel_collectives.size() != plan.profile.layers.size())
    throw InputError(fmt::format("{}: tensor_parallel_collectives: expected one entry per layer of the profile ({}), found {}",
                                 origin, plan.profile.layers.size(), plan.tensor_parallel_collectives.size()));
  if (plan.tp_collectives == "flows" && plan.tensor_parallel > 1 && plan.tensor_parallel_collectives.empty())
    throw InputError(fmt::format("{}: tp_collectives flows at tensor_parallel {}: expected tensor_parallel_collectives "
                                 "(the collectives per layer the engine runs), found none",
                                 origin, plan.tensor_parallel));
  return plan;
}

Plan read_plan_file(const std::string& path) { return parse_plan_json(read_text_file(path), path); }

}  // namespace pipegrid
