#include "api/simulation.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/device_model.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/limits.hpp"
#include "core/model_graph.hpp"
#include "core/termination.hpp"
#include "core/torch_schedule.hpp"
#include "core/platform_check.hpp"
#include "core/fp8.hpp"
#include "core/precision.hpp"
#include "core/recompute.hpp"
#include "core/tensor_parallel.hpp"
#include "core/context_parallel.hpp"
#include "core/parallel_layout.hpp"
#include "layout/megatron_args.hpp"
#include "partitioners/partitioners.hpp"
#include "render/timeline_svg.hpp"
#include "schedules/schedules.hpp"
#include "sweep/experiment.hpp"
#include "sim/engine.hpp"

namespace pipegrid::api {

namespace {

bool input_cache_enabled = false;
std::map<std::pair<std::string, std::optional<int>>, Profile> cached_profiles;
std::map<std::pair<std::string, sim::PlatformRoutes>, PlatformSummary> cached_platforms;

Profile profile_from(const std::string& path, std::optional<int> batch_size) {
  if (!input_cache_enabled) return read_profile(path, batch_size);
  const auto key = std::make_pair(path, batch_size);
  if (const auto found = cached_profiles.find(key); found != cached_profiles.end()) return found->second;
  return cached_profiles.emplace(key, read_profile(path, batch_size)).first->second;
}

// Without the input cache, the last platform summary read, kept while the
// file's text is the same: run_plan then reuses the one make_plan read
// (a simulate starts SimGrid twice instead of three times).
struct LastPlatform {
  std::string path, text;
  sim::PlatformRoutes routes;
  PlatformSummary summary;
};
std::optional<LastPlatform> last_platform;

PlatformSummary platform_from(const std::string& path, sim::PlatformRoutes routes = sim::PlatformRoutes::None) {
  if (!input_cache_enabled) {
    std::string text;
    try {
      text = read_text_file(path);
    } catch (const InputError&) {
      return sim::read_platform(path, routes);  // its own message
    }
    if (last_platform && last_platform->path == path && last_platform->routes == routes && last_platform->text == text)
      return last_platform->summary;
    PlatformSummary summary = sim::read_platform(path, routes);
    last_platform = LastPlatform{path, std::move(text), routes, summary};
    return summary;
  }
  const auto key = std::make_pair(path, routes);
  if (const auto found = cached_platforms.find(key); found != cached_platforms.end()) return found->second;
  return cached_platforms.emplace(key, sim::read_platform(path, routes)).first->second;
}


bool is_json_path(const std::string& path) { return path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0; }

// The model a partitioner sees at the plan's size: a graph.txt's own graph
// (its branches kept; at a size the scaling rule derived, its activations
// scaled like the profile's), the chain of the plan's profile otherwise.
ModelGraph partitioner_graph(const PlanRequest& request, const Plan& plan, int measured_size) {
  if (!request.model.name.empty() || is_json_path(request.profile_file)) return chain_graph(plan.profile);
  ModelGraph graph = read_model_graph(request.profile_file, request.batch_size);
  const int size = plan.profile.micro_batch_size;
  if (size != measured_size)
    for (double& bytes : graph.activation_bytes) bytes = bytes * size / measured_size;
  if (plan.tensor_parallel > 1)  // a member's share crosses each cut (tensor_parallel_profile)
    for (double& bytes : graph.activation_bytes) bytes /= plan.tensor_parallel;
  if (plan.context_parallel > 1)  // and a context-parallel rank's share of it (context_parallel_profile)
    for (double& bytes : graph.activation_bytes) bytes /= plan.context_parallel;
  graph.profile = plan.profile;
  return graph;
}

/// Bytes the optimizer step moves per weight byte on a GPU host whose
/// device model times it (give_device_optimizer_steps): Megatron-LM's
/// mixed-precision step, for fp16 and bf16 runs; 0 for fp32 runs (the
/// papers' PipeDream and BaPipe runs, which time no step), where only a
/// host's declared optimizer_step_rate or optimizer_step_overhead steps.
/// Under the FP8 recipe the weights' cast to FP8 (and transpose), which
/// Transformer Engine runs once per mini-batch for the FP8 GEMMs' weights,
/// is charged here too: fp8_weight_cast_bytes_per_parameter over the dtype's
/// bytes, times the FP8-GEMM weights' share of the profile's weight bytes.
double device_step_bytes_per_weight_byte(const Plan& plan) {
  if (plan.dtype != "fp16" && plan.dtype != "bf16") return 0;
  const double element = dtype_bytes(plan.dtype, "--dtype");
  double bytes = optimizer_step_bytes_per_parameter(plan.dtype, plan.optimizer) / element;
  if (!plan.fp8_format.empty()) {
    double fp8_weights = 0, weights = 0;
    for (const Layer& layer : plan.profile.layers) {
      fp8_weights += fp8_gemm_parameters(layer) * element / std::max(1, plan.tensor_parallel);
      weights += layer.parameter_bytes;
    }
    if (weights > 0) bytes += fp8_weight_cast_bytes_per_parameter(element) / element * std::min(1.0, fp8_weights / weights);
  }
  return bytes;
}

// The link of `groups`' rings on `platform` (routes included): from the
// route matrices when a partitioner had them read, else only the pairs the
// rings use (linear in the hosts). With the input cache (sweeps, plan), the
// link of a (file, kind, t, cp) is read once.
TensorParallelLink ring_link(const PlatformSummary& platform, const std::vector<std::vector<int>>& groups,
                             const std::string& platform_file, const std::string& kind, int t, int cp) {
  static std::map<std::tuple<std::string, std::string, int, int>, TensorParallelLink> cached_links;
  const auto key = std::make_tuple(platform_file, kind, t, cp);
  const auto cached = input_cache_enabled ? cached_links.find(key) : cached_links.end();
  if (cached != cached_links.end()) return cached->second;
  const TensorParallelLink link =
      platform.route_bandwidth_Bps.size() == platform.hosts.size()
          ? tensor_parallel_link(platform, groups)
          : tensor_parallel_link(platform, groups, sim::read_routes(platform_file, tensor_parallel_route_pairs(platform, groups)));
  if (input_cache_enabled) cached_links.emplace(key, link);
  return link;
}

// Tensor parallelism (--tensor-parallel t > 1) and context parallelism
// (--context-parallel cp > 1): checks the groups of t x cp consecutive hosts
// of `platform` (routes included), makes plan.profile the per-rank profile
// (tensor_parallel_profile, then context_parallel_profile) and returns the
// platform the pipeline and data dimensions run over, the groups' first
// hosts. t == cp == 1: `platform` as is.
PlatformSummary tensor_parallel_view(Plan& plan, PlatformSummary platform, const std::string& platform_file) {
  const int t = plan.tensor_parallel, cp = plan.context_parallel;
  if (t == 1 && cp == 1) return platform;
  platform.file = platform_file;
  std::vector<std::vector<int>> groups;
  if (t > 1) {
    groups = tensor_parallel_groups(platform, t);
    const TensorParallelLink link = ring_link(platform, groups, platform_file, "tensor", t, 1);
    const TensorParallelCollectives mode = parse_tensor_parallel_collectives(plan.tp_collectives);
    TensorParallelProfile split = tensor_parallel_profile(plan.profile, t, link, plan.sequence_parallel, plan.tp_comm_overlap,
                                                          mode, plan.expert_tensor_parallel);
    plan.profile = std::move(split.profile);
    plan.tensor_parallel_note = std::move(split.note);
    if (mode == TensorParallelCollectives::Flows) plan.tensor_parallel_collectives = std::move(split.collectives);
  }
  if (cp > 1) {
    // The rings of tensor rank 0 (hosts at stride t); the others are alike.
    const std::vector<std::vector<int>> rings = context_parallel_rings(platform.hosts.size(), t, cp);
    const TensorParallelLink link = ring_link(platform, rings, platform_file, "context", t, cp);
    ContextParallelProfile split = context_parallel_profile(plan.profile, cp, t, link);
    plan.profile = std::move(split.profile);
    plan.context_parallel_note = std::move(split.note);
    // A rank's tensor-parallel collectives carry its N / cp tokens' activations.
    for (LayerCollectives& layer : plan.tensor_parallel_collectives)
      for (std::vector<RingCollective>* pass : {&layer.forward, &layer.backward_input})
        for (RingCollective& collective : *pass) collective.bytes /= cp;
    // Model-parallel groups of t x cp consecutive hosts, led by their first.
    groups.clear();
    for (const std::vector<int>& ring : rings) {
      std::vector<int> group;
      for (int member = 0; member < t * cp; ++member) group.push_back(ring.front() + member);
      groups.push_back(std::move(group));
    }
  }
  return leader_platform(platform, groups);
}

}  // namespace

void enable_input_cache() { input_cache_enabled = true; }

PlatformSummary platform_summary(const std::string& path) { return platform_from(path); }

void enable_progress_on_terminal() { sim::set_progress(isatty(STDERR_FILENO) == 1); }

namespace {
std::string partition_cache_folder;
}  // namespace

void set_partition_cache(const std::string& folder) { partition_cache_folder = folder; }

std::string input_file_sha256(const std::string& path) {
  static std::map<std::string, std::string> hashes;
  if (const auto found = hashes.find(path); found != hashes.end()) return found->second;
  return hashes.emplace(path, sweep::sha256_hex(read_text_file(path))).first->second;
}
void preload_profile(const std::string& path) {
  profile_from(path, std::nullopt);
  input_file_sha256(path);
}
void preload_platform(const std::string& path, bool with_routes) {
  platform_from(path);
  if (with_routes) platform_from(path, sim::PlatformRoutes::All);
}

const ScheduleInfo& plan_schedule_info(const Plan& plan) {
  static const ScheduleInfo program_info{"program", "a Program read from a file (simulate --program)", DeviceKind::Gpu,
                                         false, true, false};
  return plan.program_text.empty() ? schedule_info(plan.schedule) : program_info;
}

namespace {

// zb-auto's inputs (plan_schedule_options, api/simulation.hpp).
ZbStageTimes plan_stage_times(const Plan& plan, const PlatformSummary* platform, const std::string& platform_file) {
  ZbStageTimes times;
  const int stages = plan.partition.num_stages();
  const std::vector<StageCost> costs = stage_costs(plan.profile, plan.partition);
  times.forward_s.assign(static_cast<std::size_t>(stages), 0.0);
  times.backward_input_s.assign(static_cast<std::size_t>(stages), 0.0);
  times.backward_weight_s.assign(static_cast<std::size_t>(stages), 0.0);
  const HostInfo unit_host;  // speed factor 1, no device type
  for (std::size_t l = 0; l < plan.profile.layers.size(); ++l) {
    const std::size_t s = static_cast<std::size_t>(plan.partition.stage_of_layer[l]);
    const HostInfo& host = platform ? platform->host(plan.partition.hosts[s].front()) : unit_host;
    const Layer& layer = plan.profile.layers[l];
    times.forward_s[s] += layer_times_on(layer, host).forward_s;
    const BackwardSplit split = backward_split_on(layer, host);
    times.backward_input_s[s] += split.input_s;
    times.backward_weight_s[s] += split.weight_s;
  }
  for (const StageCost& cost : costs)
    times.weight_memory_fraction.push_back(
        cost.stash_bytes > 0 ? std::clamp(cost.weight_gradient_stash_bytes / cost.stash_bytes, 0.0, 1.0) : 1.0);
  if (platform && !platform_file.empty() && stages > 1) {
    std::vector<std::pair<std::size_t, std::size_t>> pairs;
    for (int s = 0; s + 1 < stages; ++s)
      pairs.emplace_back(static_cast<std::size_t>(platform->host_index(plan.partition.hosts[static_cast<std::size_t>(s)].front())),
                         static_cast<std::size_t>(platform->host_index(plan.partition.hosts[static_cast<std::size_t>(s) + 1].front())));
    const RouteTable routes = sim::read_routes(platform_file, pairs);
    for (std::size_t s = 0; s < routes.routes.size(); ++s) {
      const HostRoute& route = routes.routes[s];
      double narrowest = 0;
      for (const int link : route.links) {
        const double bandwidth = routes.links[static_cast<std::size_t>(link)].bandwidth_Bps;
        narrowest = narrowest == 0 ? bandwidth : std::min(narrowest, bandwidth);
      }
      const double bytes = costs[s].output_bytes;
      const double transfer = route.latency_s + (narrowest > 0 ? bytes / narrowest : 0.0);
      times.transfer_s = std::max(times.transfer_s, transfer);
    }
  }
  return times;
}

}  // namespace

ScheduleOptions plan_schedule_options(const Plan& plan, int mini_batches, const PlatformSummary* platform,
                                      const std::string& platform_file) {
  ScheduleOptions options;
  options.num_stages = plan.partition.num_stages();
  options.micro_batches = plan.micro_batches;
  options.mini_batches = mini_batches;
  options.recompute = plan.recompute || plan.layer_recompute.enabled();
  if (plan.layer_recompute.enabled()) options.recompute_flag = "--recompute-granularity " + plan.layer_recompute.granularity;
  options.update_interval = plan.update_interval;
  options.wait_free = plan.wait_free;
  options.pipeline_depth = plan.pipeline_depth;
  options.virtual_stages = plan.virtual_stages;
  options.data_parallel = plan.data_parallel;
  options.overlap_grad_reduce = plan.overlap_grad_reduce;
  if (plan.virtual_stages == 1 && plan.data_parallel == 1)
    for (const auto& replicas : plan.partition.hosts) options.replicas.push_back(static_cast<int>(replicas.size()));
  options.activation_limit = plan.activation_limit;
  if (plan.program_text.empty() && takes_option(schedule_info(plan.schedule), ScheduleOption::StageTimes))
    options.stage_times = plan_stage_times(plan, platform, platform_file);
  return options;
}


namespace {

// The partition's placement against the schedule's stage map: stages share
// a host exactly when the schedule puts them on one device. InputError
// naming `origin` otherwise.
void check_stage_placement(const Plan& plan, const std::string& origin) {
  if (!plan.program_text.empty()) return;  // the Program's own placement
  const int stages = plan.partition.num_stages();
  const int v = plan.virtual_stages;
  if (stages % v != 0)
    throw InputError(fmt::format("{}: {} stages, but {} holds {} stages per device: expected a multiple of {}", origin,
                                 stages, plan.schedule, v, v));
  const std::vector<int> device = stage_to_device(stages, v, stage_map_of(plan.schedule));
  std::map<std::string, int> first_stage_on;
  std::map<int, int> first_stage_of_device;
  for (int s = 0; s < stages; ++s) {
    const auto& hosts = plan.partition.hosts[static_cast<std::size_t>(s)];
    if (hosts.size() != 1) continue;  // replicas: check_one_device_per_host
    const auto [on, new_host] = first_stage_on.emplace(hosts.front(), s);
    const auto [of, new_device] = first_stage_of_device.emplace(device[static_cast<std::size_t>(s)], s);
    if (!new_host && device[static_cast<std::size_t>(on->second)] != device[static_cast<std::size_t>(s)])
      throw InputError(fmt::format(
          "{}: stages {} and {} are both placed on host '{}'; {} runs {}: give each device its own host{}", origin,
          on->second, s, printable(hosts.front()), plan.schedule,
          v == 1 ? "one stage per host" : fmt::format("stages {} and {} on different devices", on->second, s),
          v == 1 ? " (several stages per device: an interleaved or V schedule, or --program)" : ""));
    if (!new_device && plan.partition.hosts[static_cast<std::size_t>(of->second)].front() != hosts.front())
      throw InputError(fmt::format("{}: {} runs stages {} and {} on one device, but they are placed on hosts '{}' and '{}'",
                                   origin, plan.schedule, of->second, s,
                                   printable(plan.partition.hosts[static_cast<std::size_t>(of->second)].front()),
                                   printable(hosts.front())));
  }
}

// Expert parallelism (--expert-parallel ep > 1): checks it against the
// model and the layout, and makes plan.profile the expert-parallel rank's:
// each layer keeps 1 / ep of its routed experts' weights (Layer::
// expert_parameter_bytes; docs/semantics.md, "Expert parallelism").
void set_expert_parallel(const PlanRequest& request, Plan& plan) {
  if (request.expert_parallel < 1 || request.expert_parallel > limits::kMaxDevices)
    throw InputError(fmt::format("--expert-parallel: expected an integer from 1 to {}, found {}", limits::kMaxDevices,
                                 request.expert_parallel));
  if (request.expert_tensor_parallel < 0 || request.expert_tensor_parallel > kMaxTensorParallel)
    throw InputError(fmt::format("--expert-tensor-parallel: expected an integer from 1 to {}, found {}",
                                 kMaxTensorParallel, request.expert_tensor_parallel));
  const int ep = request.expert_parallel;
  const int etp = request.expert_tensor_parallel == 0 ? plan.tensor_parallel : request.expert_tensor_parallel;
  bool experts = false;
  for (const Layer& layer : plan.profile.layers) experts = experts || layer.expert_parameter_bytes > 0;
  if (ep == 1 && request.expert_tensor_parallel == 0) return;
  if (!experts)
    throw InputError(fmt::format("--expert-parallel {}: {} has no routed experts (no layer with expert_parameter_bytes; "
                                 "a gpt model has them with --num-experts)",
                                 ep, request.model.name.empty() ? request.profile_file : "--model " + request.model.name));
  if (const auto found = request.model.options.find("num_experts");
      found != request.model.options.end() && found->second % ep != 0)
    throw InputError(fmt::format("--expert-parallel {}: expected a divisor of --num-experts {} (each rank holds "
                                 "num_experts / ep experts, as Megatron-Core asserts)",
                                 ep, found->second));
  if (etp != plan.tensor_parallel && etp != 1)
    throw InputError(fmt::format("--expert-tensor-parallel {}: expected 1 or the tensor-parallel size {} (other expert "
                                 "tensor sizes are not modelled)",
                                 etp, plan.tensor_parallel));
  // Megatron-Core's expert rank generator (parallel_state.py, core_v0.14.0):
  // the ranks of a pipeline stage, t x cp x d of them, split into expert
  // tensor x expert x expert-data groups.
  const long long stage_ranks = static_cast<long long>(plan.tensor_parallel) * plan.context_parallel * plan.data_parallel;
  if (stage_ranks % (static_cast<long long>(ep) * etp) != 0)
    throw InputError(fmt::format("--expert-parallel {} x expert tensor parallel {} = {}: expected a divisor of tensor x "
                                 "context x data parallel = {} x {} x {} = {} (the ranks of a pipeline stage, which "
                                 "Megatron-Core splits into expert groups)",
                                 ep, etp, static_cast<long long>(ep) * etp, plan.tensor_parallel, plan.context_parallel,
                                 plan.data_parallel, stage_ranks));
  plan.expert_parallel = ep;
  plan.expert_tensor_parallel = request.expert_tensor_parallel;
  for (Layer& layer : plan.profile.layers) {
    if (layer.expert_parameter_bytes <= 0) continue;
    const double shard = layer.expert_parameter_bytes / ep;
    layer.parameter_bytes -= layer.expert_parameter_bytes - shard;
    layer.expert_parameter_bytes = shard;
  }
}

// The layout flags a user gave, as messages quote them.
std::string layout_flags_given(const PlanRequest& request) {
  std::vector<std::string> flags;
  if (request.pipeline_parallel) flags.push_back(fmt::format("--pipeline-parallel {}", *request.pipeline_parallel));
  if (request.data_parallel) flags.push_back(fmt::format("--data-parallel {}", *request.data_parallel));
  if (request.global_batch_size) flags.push_back(fmt::format("--global-batch-size {}", *request.global_batch_size));
  return fmt::format("{}", fmt::join(flags, " and "));
}

struct LayoutSizes {
  int pipeline = 1, data = 1;
};

// p and d of a layout over `groups` tensor-parallel groups (hosts when t =
// 1) of a platform of `world` hosts: t x p x d = world, as Megatron-LM
// derives d from the world size. InputError naming the flags otherwise.
LayoutSizes layout_sizes(const PlanRequest& request, const Plan& plan, std::size_t world, std::size_t groups) {
  const std::string platform_text =
      plan.context_parallel > 1
          ? fmt::format("{} declares {} hosts, {} model-parallel groups of t {} x cp {}", request.platform_file, world,
                        groups, plan.tensor_parallel, plan.context_parallel)
      : plan.tensor_parallel == 1
          ? fmt::format("{} declares {} hosts", request.platform_file, world)
          : fmt::format("{} declares {} hosts, {} tensor-parallel groups of {}", request.platform_file, world, groups,
                        plan.tensor_parallel);
  for (const auto& [flag, value] : {std::pair{"--pipeline-parallel", request.pipeline_parallel},
                                    std::pair{"--data-parallel", request.data_parallel}})
    if (value && (*value < 1 || *value > limits::kMaxDevices))
      throw InputError(fmt::format("{}: expected an integer from 1 to {}, found {}", flag, limits::kMaxDevices, *value));
  const auto n = static_cast<int>(groups);
  LayoutSizes sizes;
  if (request.pipeline_parallel && request.data_parallel) {
    sizes = {*request.pipeline_parallel, *request.data_parallel};
    if (static_cast<long long>(sizes.pipeline) * sizes.data != n && plan.context_parallel > 1)
      throw InputError(fmt::format("--tensor-parallel {} x --context-parallel {} x --pipeline-parallel {} x "
                                   "--data-parallel {} = {} GPUs, but {}: expected t x cp x p x d to be every host "
                                   "(Megatron's world size)",
                                   plan.tensor_parallel, plan.context_parallel, sizes.pipeline, sizes.data,
                                   static_cast<long long>(plan.tensor_parallel) * plan.context_parallel * sizes.pipeline *
                                       sizes.data,
                                   platform_text));
    if (static_cast<long long>(sizes.pipeline) * sizes.data != n)
      throw InputError(fmt::format("--tensor-parallel {} x --pipeline-parallel {} x --data-parallel {} = {} GPUs, but "
                                   "{}: expected t x p x d to be every host (Megatron's world size)",
                                   plan.tensor_parallel, sizes.pipeline, sizes.data,
                                   static_cast<long long>(plan.tensor_parallel) * sizes.pipeline * sizes.data,
                                   platform_text));
  } else if (request.data_parallel) {
    if (n % *request.data_parallel != 0)
      throw InputError(fmt::format("--data-parallel {}: {}; expected a size that divides {} (the pipeline size is the "
                                   "rest: hosts / (t x d))",
                                   *request.data_parallel, platform_text, n));
    sizes = {n / *request.data_parallel, *request.data_parallel};
  } else if (request.pipeline_parallel) {
    if (n % *request.pipeline_parallel != 0)
      throw InputError(fmt::format("--pipeline-parallel {}: {}; expected a size that divides {} (the data-parallel size "
                                   "is the rest: hosts / (t x p), as in Megatron)",
                                   *request.pipeline_parallel, platform_text, n));
    sizes = {*request.pipeline_parallel, n / *request.pipeline_parallel};
  } else {
    sizes = {n, 1};
  }
  return sizes;
}

}  // namespace

namespace {

// The request a Megatron-LM launch makes: its model, layout, batch,
// precision, recomputation and schedule, with the flags a user gave on top
// only where they agree with it (or choose what the launch leaves open: the
// schedule, the partition, the platform's memory). InputError naming both
// otherwise.
PlanRequest request_from_megatron_launch(const PlanRequest& request, std::vector<std::string>& notes) {
  if (!request.megatron_args.empty() && !request.megatron_args_file.empty())
    throw InputError(fmt::format("--megatron-args and --megatron-args-file {}: both give the launch; give one",
                                 printable(request.megatron_args_file)));
  const std::string origin = request.megatron_args_file.empty() ? "--megatron-args" : request.megatron_args_file;
  const MegatronLaunch launch = read_megatron_args(
      request.megatron_args_file.empty() ? request.megatron_args : read_text_file(request.megatron_args_file), origin);
  if (!request.profile_file.empty() || !request.model.name.empty())
    throw InputError(fmt::format("{} and {}: both give the model; give one", origin,
                                 request.profile_file.empty() ? "--model " + printable(request.model.name)
                                                              : "--profile " + printable(request.profile_file)));
  const auto agree = [&](const std::string& flag, bool given, long long ours, const std::string& argument,
                         long long theirs) {
    if (given && ours != theirs)
      throw InputError(fmt::format("{} {}: {} sets {} {}; drop {} or make them agree", flag, ours, origin, argument,
                                   theirs, flag));
  };
  agree("--tensor-parallel", request.tensor_parallel != 1, request.tensor_parallel, "--tensor-model-parallel-size",
        launch.tensor_parallel);
  agree("--expert-parallel", request.expert_parallel != 1, request.expert_parallel, "--expert-model-parallel-size",
        launch.expert_parallel);
  agree("--expert-tensor-parallel", request.expert_tensor_parallel != 0, request.expert_tensor_parallel,
        "--expert-tensor-parallel-size", launch.expert_tensor_parallel);
  agree("--context-parallel", request.context_parallel != 1, request.context_parallel, "--context-parallel-size",
        launch.context_parallel);
  agree("--pipeline-parallel", request.pipeline_parallel.has_value(), request.pipeline_parallel.value_or(0),
        "--pipeline-model-parallel-size", launch.pipeline_parallel);
  agree("--micro-batch-size", request.micro_batch_size.has_value(), request.micro_batch_size.value_or(0),
        "--micro-batch-size", launch.micro_batch_size);
  if (launch.global_batch_size)
    agree("--global-batch-size", request.global_batch_size.has_value(), request.global_batch_size.value_or(0),
          "--global-batch-size", *launch.global_batch_size);
  if (request.micro_batches != 1)
    throw InputError(fmt::format("--micro-batches {}: {} sets the batch (--global-batch-size and --micro-batch-size; "
                                 "micro-batches per pipeline = global / (micro x d)); drop --micro-batches",
                                 request.micro_batches, origin));
  if (!request.dtype.empty() && request.dtype != launch.model.dtype)
    throw InputError(fmt::format("--dtype {}: {} trains in {}; drop --dtype", printable(request.dtype), origin,
                                 launch.model.dtype));
  // The launch's recomputation is Megatron's, layer by layer.
  LayerRecompute recompute;
  if (launch.recompute.full) recompute = {"full", launch.recompute.method, launch.recompute.num_layers};
  if (launch.recompute.selective) recompute = {"selective", "", 0};
  if (request.recompute)
    throw InputError(fmt::format("--recompute: GPipe's recomputation, and {} {}; drop --recompute", origin,
                                 recompute.enabled()
                                     ? "recomputes as Megatron-LM does (" + layer_recompute_text(recompute) + ")"
                                     : "recomputes nothing (Megatron's --recompute-granularity in the launch recomputes)"));
  const auto agree_text = [&](const std::string& flag, const std::string& ours, const std::string& argument,
                              const std::string& theirs) {
    if (!ours.empty() && ours != theirs)
      throw InputError(fmt::format("{} {}: {} {}; drop {} or make them agree", flag, printable(ours), origin,
                                   theirs.empty() ? "does not set " + argument : "sets " + argument + " " + theirs, flag));
  };
  agree_text("--recompute-granularity", request.recompute_granularity, "--recompute-granularity", recompute.granularity);
  agree_text("--recompute-method", request.recompute_method, "--recompute-method", recompute.method);
  if (request.recompute_num_layers)
    agree_text("--recompute-num-layers", fmt::format("{}", *request.recompute_num_layers), "--recompute-num-layers",
               recompute.num_layers ? fmt::format("{}", recompute.num_layers) : std::string());
  const std::string gradient_dtype = launch.fp32_gradients && launch.model.dtype != "fp32" ? "fp32" : "";
  const std::string launch_gradients = gradient_dtype.empty() ? launch.model.dtype : gradient_dtype;
  if (!request.gradient_dtype.empty() && request.gradient_dtype != launch_gradients)
    throw InputError(fmt::format("--gradient-dtype {}: {} keeps its gradients in {} (Megatron: fp32 with "
                                 "--accumulate-allreduce-grads-in-fp32, the default with --bf16); drop --gradient-dtype "
                                 "or make them agree",
                                 printable(request.gradient_dtype), origin, launch_gradients));
  agree_text("--fp8-format", request.fp8_format, "--fp8-format", launch.fp8_format);
  if (request.sequence_parallel && !launch.sequence_parallel)
    throw InputError(fmt::format("--sequence-parallel: {} runs without sequence parallelism (no --sequence-parallel at "
                                 "--tensor-model-parallel-size > 1); drop --sequence-parallel or add it to the launch",
                                 origin));
  if (!request.optimizer.empty() && request.optimizer != launch.optimizer)
    throw InputError(fmt::format("--optimizer {}: {} trains with {}; drop --optimizer", printable(request.optimizer),
                                 origin, launch.optimizer));
  for (const auto& [flag, ours, theirs] :
       {std::tuple{"--use-distributed-optimizer", request.distributed_optimizer, launch.distributed_optimizer},
        std::tuple{"--overlap-grad-reduce", request.overlap_grad_reduce, launch.overlap_grad_reduce},
        std::tuple{"--overlap-param-gather", request.overlap_param_gather, launch.overlap_param_gather},
        std::tuple{"--tp-comm-overlap", request.tp_comm_overlap, launch.tp_comm_overlap}})
    if (ours && !theirs)
      throw InputError(fmt::format("{}: {} runs without it; drop {} or add it to the launch", flag, origin, flag));
  if (request.ddp_bucket_size && request.ddp_bucket_size != launch.ddp_bucket_size)
    throw InputError(fmt::format("--ddp-bucket-size {}: {} {}; drop --ddp-bucket-size or make them agree",
                                 *request.ddp_bucket_size, origin,
                                 launch.ddp_bucket_size ? fmt::format("sets --ddp-bucket-size {}", *launch.ddp_bucket_size)
                                                        : std::string("does not set --ddp-bucket-size")));
  PlanRequest launched = request;
  launched.distributed_optimizer = launch.distributed_optimizer;
  launched.overlap_grad_reduce = launch.overlap_grad_reduce;
  launched.overlap_param_gather = launch.overlap_param_gather;
  // --no-overlap-p2p-communication, or simulate's --blocking-transfers on its own.
  launched.blocking_transfers = request.blocking_transfers || launch.blocking_transfers;
  launched.ddp_bucket_size = launch.ddp_bucket_size;
  launched.megatron_args.clear();
  launched.megatron_args_file.clear();
  launched.model = launch.model;
  launched.micro_batch_size = launch.micro_batch_size;
  launched.dtype = launch.model.dtype;
  launched.optimizer = launch.optimizer;
  launched.recompute = false;
  launched.recompute_granularity = recompute.granularity;
  launched.recompute_method = recompute.method;
  launched.recompute_num_layers = recompute.num_layers ? std::optional<int>(recompute.num_layers) : std::nullopt;
  launched.gradient_dtype = gradient_dtype;
  launched.fp8_format = launch.fp8_format;
  launched.tensor_parallel = launch.tensor_parallel;
  launched.expert_parallel = launch.expert_parallel;
  launched.expert_tensor_parallel = launch.expert_tensor_parallel;
  launched.context_parallel = launch.context_parallel;
  launched.sequence_parallel = launch.sequence_parallel;
  launched.tp_comm_overlap = launch.tp_comm_overlap;
  launched.pipeline_parallel = launch.pipeline_parallel;
  // Megatron's default global batch: one micro-batch per pipeline (micro x d).
  launched.global_batch_size = launch.global_batch_size;
  if (!launch.global_batch_size) launched.micro_batches = 1;
  if (launched.schedule.empty()) launched.schedule = launch.schedule;
  if (launch.virtual_stages > 1 || launched.schedule == launch.schedule) {
    if (request.virtual_stages && *request.virtual_stages != launch.virtual_stages)
      throw InputError(fmt::format("--virtual-stages {}: {} runs {} model chunks per pipeline rank; drop --virtual-stages",
                                   *request.virtual_stages, origin, launch.virtual_stages));
    if (launch.virtual_stages > 1) launched.virtual_stages = launch.virtual_stages;
  }
  if (request.partition == "uniform" && request.partitioner.empty() && request.replicas.empty())
    launched.partition = "megatron";
  if (launch.decoder_first_pipeline_num_layers) launched.first_pipeline_layers = launch.decoder_first_pipeline_num_layers;
  if (launch.decoder_last_pipeline_num_layers) launched.last_pipeline_layers = launch.decoder_last_pipeline_num_layers;
  launched.embedding_in_pipeline_split = launch.embedding_in_pipeline_split;
  launched.loss_in_pipeline_split = launch.loss_in_pipeline_split;
  if ((launch.embedding_in_pipeline_split || launch.loss_in_pipeline_split) && launched.partition != "megatron")
    throw InputError(fmt::format("{}: --account-for-embedding/loss-in-pipeline-split shape Megatron's stage layout, and "
                                 "--partition {} replaces it; drop one",
                                 origin, printable(request.partition)));
  notes.push_back(fmt::format("{}: a Megatron-LM {} launch: {}", origin, kMegatronRelease,
                              model_spec_text(resolve_model_spec(launch.model))));
  if (!launch.ignored.empty())
    notes.push_back(fmt::format("{} argument{} ignored (no effect on time or memory): {}", launch.ignored.size(),
                                launch.ignored.size() == 1 ? "" : "s", fmt::join(launch.ignored, " ")));
  for (const std::string& note : launch.notes) notes.push_back(note);
  return launched;
}

}  // namespace

namespace {

// Megatron-Core DDP's options (PlanRequest::overlap_grad_reduce ...) into
// the plan: they apply to a layout's data-parallel pipelines; InputError
// naming the flag where Megatron-LM refuses them (core_v0.14.0,
// megatron/training/arguments.py: --overlap-param-gather needs the
// distributed optimizer and --overlap-grad-reduce).
void set_ddp_options(const PlanRequest& request, Plan& plan) {
  const bool any = request.overlap_grad_reduce || request.ddp_bucket_size || request.distributed_optimizer ||
                   request.overlap_param_gather;
  if (!any) return;
  const char* flag = request.overlap_grad_reduce     ? "--overlap-grad-reduce"
                     : request.ddp_bucket_size       ? "--ddp-bucket-size"
                     : request.distributed_optimizer ? "--use-distributed-optimizer"
                                                     : "--overlap-param-gather";
  if (!plan.parallel_layout)
    throw InputError(fmt::format("{}: applies to a layout's data-parallel pipelines (--data-parallel, "
                                 "--pipeline-parallel, --global-batch-size or --megatron-args); dp and --replicas "
                                 "all-reduce after the backward",
                                 flag));
  if (request.ddp_bucket_size && *request.ddp_bucket_size < 1)
    throw InputError(fmt::format("--ddp-bucket-size: expected parameters per bucket >= 1, found {}", *request.ddp_bucket_size));
  if (request.overlap_param_gather && !request.distributed_optimizer)
    throw InputError("--overlap-param-gather: needs --use-distributed-optimizer (Megatron-LM: '--overlap-param-gather only "
                     "supported with distributed optimizer')");
  if (request.overlap_param_gather && !request.overlap_grad_reduce)
    throw InputError("--overlap-param-gather: needs --overlap-grad-reduce (Megatron-LM: 'Must use --overlap-param-gather "
                     "with --overlap-grad-reduce')");
  plan.overlap_grad_reduce = request.overlap_grad_reduce;
  plan.ddp_bucket_size = request.ddp_bucket_size;
  plan.distributed_optimizer = request.distributed_optimizer;
  plan.overlap_param_gather = request.overlap_param_gather;
}

}  // namespace

Plan make_plan(const PlanRequest& request) {
  if (!request.megatron_args.empty() || !request.megatron_args_file.empty()) {
    std::vector<std::string> notes;
    Plan plan = make_plan(request_from_megatron_launch(request, notes));
    plan.megatron_notes = std::move(notes);
    plan.parallel_layout = true;
    return plan;
  }
  Plan plan;
  // --partition names a rule (uniform, megatron) or a partition file.
  const bool partition_rule = is_partition_rule(request.partition);
  if ((request.first_pipeline_layers || request.last_pipeline_layers) && request.partition != "megatron")
    throw InputError(fmt::format("--first-pipeline-layers and --last-pipeline-layers: apply to --partition megatron, "
                                 "not --partition {}",
                                 printable(request.partition)));
  // The profile as messages name it: its file, or the generated model.
  const std::string profile_label = request.model.name.empty()
                                        ? fmt::format("profile {}", printable(request.profile_file))
                                        : fmt::format("model {} (--model)", printable(request.model.name));
  if (!request.model.name.empty()) {
    // A generated profile, built at the size to run.
    if (!request.profile_file.empty())
      throw InputError(fmt::format("--model {} and --profile {}: both give the model; give one", printable(request.model.name),
                                   printable(request.profile_file)));
    if (request.batch_size) throw InputError("--batch-size: applies to a PipeDream graph.txt --profile, not to --model");
    ModelSpec spec = request.model;
    if (request.micro_batch_size) spec.micro_batch_size = *request.micro_batch_size;
    if (!request.dtype.empty()) spec.dtype = request.dtype;
    plan.profile = generate_model_profile(spec);
  } else {
    if (request.profile_file.empty()) throw InputError("simulate: --profile FILE or --model NAME is required");
    if (!request.model.options.empty())
      throw InputError(fmt::format("--{}: a model option, for --model NAME; the profile {} gives the model",
                                   request.model.options.begin()->first, printable(request.profile_file)));
    plan.profile = profile_from(request.profile_file, request.batch_size);
  }
  if (request.micro_batch_size && *request.micro_batch_size < 1)
    throw InputError(fmt::format("--micro-batch-size: expected an integer >= 1, found {}", *request.micro_batch_size));
  const MicroBatchScaling& scaling = micro_batch_scaling(request.micro_batch_scaling);
  if (!request.partitioner.empty()) {
    const std::vector<std::string>& names = run_partitioner_names();
    if (std::find(names.begin(), names.end(), request.partitioner) == names.end()) {
      std::string known;
      for (const std::string& name : names) known += (known.empty() ? "" : ", ") + name;
      throw InputError(fmt::format("--partitioner: expected one of {}, found '{}'", known, printable(request.partitioner)));
    }
    if (partition_rule && request.partition != "uniform")
      throw InputError(fmt::format("--partitioner and --partition {} both say how to partition the model: give one",
                                   request.partition));
    if (request.partition != "uniform")
      throw InputError("--partitioner and --partition FILE both say how to partition the model: give one");
    if (!request.replicas.empty())
      throw InputError("--partitioner and --replicas both say how to place stages: give one");
  }
  if (request.split_layers && request.partitioner != "bapipe")
    throw InputError(fmt::format("--split-layers: applies to --partitioner bapipe, not {}",
                                 request.partitioner.empty() ? "a run without --partitioner" : request.partitioner));
  // The plan runs one size (a multi-size profile's first when none is asked
  // for) and embeds the profile at that size only.
  const int micro_batch_size = request.micro_batch_size.value_or(plan.profile.micro_batch_size);
  const int measured_size = plan.profile.micro_batch_size;
  try {
    ProfileAtSize at_size = profile_at_micro_batch_size(plan.profile, micro_batch_size, scaling);
    plan.profile = std::move(at_size.profile);
    plan.micro_batch_scaling_note = std::move(at_size.note);
  } catch (const InputError& error) {
    // A profile of analytic layers only was written by `pipegrid model`: the
    // generator builds it at any size, exactly.
    const bool generated = request.model.name.empty() && !plan.profile.layers.empty() &&
                           std::none_of(plan.profile.layers.begin(), plan.profile.layers.end(),
                                        [](const Layer& layer) { return layer.times_given; });
    throw InputError(fmt::format("--micro-batch-size {}: {}: {}{}", micro_batch_size, profile_label, error.what(),
                                 generated ? fmt::format(" (its layers are analytic, as `pipegrid model` writes them: "
                                                         "generate it at this size with `pipegrid model NAME ... "
                                                         "--micro-batch-size {0}`, or simulate `--model NAME ... "
                                                         "--micro-batch-size {0}` directly)",
                                                         micro_batch_size)
                                           : std::string()));
  }
  // A scaling rule takes the profile to a size it was not measured at:
  // without a size asked for, or with a generated model (built at any size),
  // it would do nothing.
  if (request.micro_batch_scaling != "none" && !request.model.name.empty())
    throw InputError(fmt::format("--micro-batch-scaling {}: --model {} builds the profile at --micro-batch-size "
                                 "itself, exactly; drop --micro-batch-scaling",
                                 printable(request.micro_batch_scaling), printable(request.model.name)));
  if (request.micro_batch_scaling != "none" && !request.micro_batch_size)
    throw InputError(fmt::format("--micro-batch-scaling {}: scales {} to the size --micro-batch-size asks for, and none "
                                 "is given (the profile runs at its size {}); give --micro-batch-size or drop "
                                 "--micro-batch-scaling",
                                 printable(request.micro_batch_scaling), profile_label, measured_size));
  plan.micro_batch_scaling = scaling.name();
  // The path goes into JSON outputs (metrics, plans), which must be UTF-8.
  if (!valid_utf8(request.platform_file))
    throw InputError(fmt::format("--platform '{}': the path is not valid UTF-8, and pipegrid writes it into its JSON "
                                 "outputs: rename the file",
                                 printable(request.platform_file)));
  plan.platform_file = request.platform_file;
  plan.platform_xml = read_text_file(request.platform_file);
  std::optional<Program> program;
  if (!request.program_file.empty()) {
    if (!request.schedule.empty())
      throw InputError(fmt::format("--program {} and --schedule {}: the Program is the schedule; give one",
                                   printable(request.program_file), request.schedule));
    if (!request.replicas.empty() || !request.partitioner.empty())
      throw InputError("--program: the Program places its stages on the platform's hosts in order; --replicas and "
                       "--partitioner do not apply (give --partition FILE to choose the layers of each stage)");
    if (request.virtual_stages)
      throw InputError("--virtual-stages: the Program's devices say which stages they hold; drop --virtual-stages");
    if (request.pipeline_depth != 0)
      throw InputError("--pipeline-depth: the Program's streams say when each device runs what; drop --pipeline-depth");
    program = read_program_file(request.program_file, request.program_format, &plan.program_notes);
    plan.program_text = program_to_text(*program);
    plan.schedule = "program " + request.program_file.substr(request.program_file.find_last_of('/') + 1);
  } else {
    plan.schedule = request.schedule;
    schedule_info(plan.schedule);  // rejects unknown names before any work
  }
  if (!(request.fb_overlap > 0 && request.fb_overlap <= 1))
    throw InputError(fmt::format("--fb-overlap: expected a fraction in (0, 1] of an overlapped pair's F + B time, found {}",
                                 request.fb_overlap));
  plan.fb_overlap = request.fb_overlap;
  if (request.activation_limit) {
    if (!request.program_file.empty() || !takes_option(schedule_info(plan.schedule), ScheduleOption::ActivationLimit))
      throw InputError(fmt::format("--activation-limit: applies to {}, not {}", schedules_taking(ScheduleOption::ActivationLimit),
                                   request.program_file.empty() ? plan.schedule : "--program"));
    if (!(*request.activation_limit > 0) || *request.activation_limit > limits::kMaxStages)
      throw InputError(fmt::format("--activation-limit: expected a number > 0 (p micro-batches' activations per stage: "
                                   "1 is ZB-1p, 2 ZB-2p; at least 1/p), at most {}, found {}",
                                   limits::kMaxStages, *request.activation_limit));
    plan.activation_limit = *request.activation_limit;
  }
  if (request.micro_batches < 1)
    throw InputError(fmt::format("--micro-batches: expected an integer >= 1, found {}", request.micro_batches));
  if (request.mini_batches && *request.mini_batches < 1)
    throw InputError(fmt::format("--mini-batches: expected an integer >= 1, found {}", *request.mini_batches));
  const ScheduleInfo& info = plan_schedule_info(plan);
  plan.micro_batches = program ? program->micro_batches : request.micro_batches;
  if (program && request.mini_batches)
    throw InputError("--mini-batches: the Program says how many mini-batches it runs; drop --mini-batches");
  plan.virtual_stages = request.virtual_stages.value_or(program ? 1 : default_virtual_stages(plan.schedule));
  if (plan.virtual_stages < 1 || plan.virtual_stages > limits::kMaxStages)
    throw InputError(fmt::format("--virtual-stages: expected 1 to {} stages per device, found {}", limits::kMaxStages,
                                 plan.virtual_stages));
  if (!program && info.fixed_virtual_stages != 0 && plan.virtual_stages != info.fixed_virtual_stages)
    throw InputError(fmt::format("--virtual-stages: {} runs {} stage{}{} per device; expected {}, found {}", plan.schedule,
                                 info.fixed_virtual_stages, info.fixed_virtual_stages == 1 ? "" : "s",
                                 info.two_copies ? " of each of its two model copies" : "", info.fixed_virtual_stages,
                                 plan.virtual_stages));
  plan.recompute = request.recompute;
  if (request.recompute_num_layers && (*request.recompute_num_layers < 1 || *request.recompute_num_layers > kMaxRecomputeLayers))
    throw InputError(fmt::format("--recompute-num-layers: expected an integer from 1 to {}, found {}", kMaxRecomputeLayers,
                                 *request.recompute_num_layers));
  const LayerRecompute layer_recompute{request.recompute_granularity, request.recompute_method,
                                       request.recompute_num_layers.value_or(0)};
  check_layer_recompute(layer_recompute);
  if (request.recompute && layer_recompute.enabled())
    throw InputError(fmt::format("--recompute and --recompute-granularity {}: GPipe's recomputation (each stage's whole "
                                 "forward again, its input kept) and Megatron-LM's (layer by layer); give one",
                                 printable(layer_recompute.granularity)));
  plan.layer_recompute = layer_recompute;
  check_layer_recompute_profile(plan.layer_recompute, plan.profile, profile_label);
  if (!request.optimizer.empty()) optimizer_copies(request.optimizer);
  plan.dtype = run_dtype(plan.profile.dtype, request.dtype, request.profile_file);
  check_gradient_dtype(plan.dtype, request.gradient_dtype);
  // fp32 gradients of 16-bit weights; gradients in the weights' format are the default.
  if (request.gradient_dtype == "fp32" && dtype_bytes(plan.dtype, "--dtype") != 4) plan.gradient_dtype = "fp32";
  plan.optimizer = request.optimizer.empty() ? default_optimizer(plan.dtype) : request.optimizer;
  if (request.optimizer.empty() && plan.optimizer != "sgd")
    plan.optimizer_note = fmt::format("the default for {}; --optimizer sgd or momentum to change", plan.dtype);
  check_fp8_recipe(request.fp8_format, plan.dtype);
  plan.fp8_format = request.fp8_format;
  if (request.tensor_parallel < 1 || request.tensor_parallel > kMaxTensorParallel)
    throw InputError(fmt::format("--tensor-parallel: expected hosts per group from 1 to {}, found {}", kMaxTensorParallel,
                                 request.tensor_parallel));
  plan.tensor_parallel = request.tensor_parallel;
  // Checked against the model and the layout by set_expert_parallel; the
  // tensor-parallel split and the kernels need the expert tensor size first.
  if (request.expert_tensor_parallel > 0 && request.expert_tensor_parallel <= kMaxTensorParallel)
    plan.expert_tensor_parallel = request.expert_tensor_parallel;
  // Megatron-LM turns sequence parallelism off at tensor parallel 1
  // (megatron/training/arguments.py, validate_args, core_v0.14.0).
  plan.sequence_parallel = request.sequence_parallel && plan.tensor_parallel > 1;
  if (request.sequence_parallel && plan.tensor_parallel == 1)
    plan.tensor_parallel_note = "--sequence-parallel: off at tensor parallel 1 (Megatron-LM turns it off there)";
  if (request.tp_comm_overlap && !plan.sequence_parallel)
    throw InputError(fmt::format("--tp-comm-overlap: needs --sequence-parallel at tensor parallel > 1 (Megatron-LM asserts "
                                 "it), found {}",
                                 plan.tensor_parallel == 1 ? "tensor parallel 1" : "no --sequence-parallel"));
  plan.tp_comm_overlap = request.tp_comm_overlap;
  check_context_parallel_size(request.context_parallel);
  plan.context_parallel = request.context_parallel;
  if (parse_tensor_parallel_collectives(request.tp_collectives) == TensorParallelCollectives::Flows) {
    if (request.tp_comm_overlap)
      throw InputError("--tp-comm-overlap with --tp-collectives flows: the overlap is modelled as a bound on compute "
                       "time only (the collectives charged as compute); give --tp-collectives compute, or drop "
                       "--tp-comm-overlap");
    if (plan.tensor_parallel == 1) {
      const std::string note = "--tp-collectives flows: no collectives at tensor parallel 1";
      plan.tensor_parallel_note = plan.tensor_parallel_note.empty() ? note : plan.tensor_parallel_note + "; " + note;
    } else {
      plan.tp_collectives = request.tp_collectives;
    }
  }
  // Schedule-specific options: the catalogue entry says which it takes.
  if (request.vertical_sync && !takes_option(info, ScheduleOption::VerticalSync))
    throw InputError(fmt::format("--vertical-sync: applies to {}, not {}", schedules_taking(ScheduleOption::VerticalSync),
                                 plan.schedule));
  plan.vertical_sync = request.vertical_sync;
  if (request.update_interval < 0 ||
      (request.update_interval != 0 && !takes_option(info, ScheduleOption::UpdateInterval)))
    throw InputError(fmt::format("--update-interval: expected an integer >= 1 for {}, found {} for {}",
                                 schedules_taking(ScheduleOption::UpdateInterval), request.update_interval, plan.schedule));
  plan.update_interval = request.update_interval;
  if (!(request.prediction_cost_s_per_byte >= 0 && std::isfinite(request.prediction_cost_s_per_byte)) ||
      (request.prediction_cost_s_per_byte != 0 && !takes_option(info, ScheduleOption::PredictionCost)))
    throw InputError(fmt::format("--prediction-cost: expected seconds per parameter byte >= 0 (finite) for {}, found {} for {}",
                                 schedules_taking(ScheduleOption::PredictionCost), request.prediction_cost_s_per_byte,
                                 plan.schedule));
  plan.prediction_cost_s_per_byte = request.prediction_cost_s_per_byte;
  if (request.wait_free && !takes_option(info, ScheduleOption::WaitFree))
    throw InputError(fmt::format("--wait-free: applies to {}, not {}", schedules_taking(ScheduleOption::WaitFree),
                                 plan.schedule));
  plan.wait_free = request.wait_free;
  plan.pipeline_depth = request.pipeline_depth;
  sim::parse_network_model(request.network);
  plan.network = request.network;
  sim::parse_transfer_rule(request.transfer_rule);
  plan.transfer_rule = request.transfer_rule;
  plan.blocking_transfers = request.blocking_transfers;
  sim::parse_collective_model(request.collective_model);
  plan.collective_model = request.collective_model;
  if (!request.memory.empty()) plan.memory_bytes = parse_bytes(request.memory, "--memory");
  // Partitioners other than uniform weigh the routes between every pair of
  // hosts. Tensor parallelism reads the routes its rings use on its own.
  const bool needs_routes = !request.partitioner.empty() && request.partitioner != "uniform" && !info.single_stage;
  PlatformSummary all_hosts =
      platform_from(request.platform_file, needs_routes ? sim::PlatformRoutes::All : sim::PlatformRoutes::None);
  // The FP8 recipe: on FP8 devices only, the FP8 GEMMs' saved inputs in
  // one byte (docs/semantics.md, FP8).
  if (!plan.fp8_format.empty()) {
    check_fp8_hosts(plan.profile, all_hosts, plan.fp8_format);
    apply_fp8_activations(plan.profile, dtype_bytes(plan.dtype, "--dtype"));
  }
  // Layers given by their FLOPs only are timed by the hosts' device models
  // (docs/devices.md), before tensor parallelism splits them and before any
  // partitioner weighs them.
  try {
    plan.device_model_notes = fill_analytic_times(
        plan.profile, all_hosts, info.single_stage ? FpgaWeights::WholeModel : FpgaWeights::StagesFit,
        TensorParallelShare{plan.tensor_parallel, plan.sequence_parallel, plan.context_parallel, request.expert_parallel,
                            request.expert_tensor_parallel},
        plan.fp8_format);
  } catch (const InputError& error) {
    throw InputError(fmt::format("{}: {}", request.model.name.empty() ? request.profile_file : "--model " + request.model.name,
                                 error.what()));
  }
  const std::size_t world_size = all_hosts.hosts.size();
  const PlatformSummary platform = tensor_parallel_view(plan, std::move(all_hosts), request.platform_file);
  std::vector<std::string> hosts;
  for (const HostInfo& host : platform.hosts) hosts.push_back(host.name);
  // A parallel layout t x p x d (Megatron-LM's sizes): the pipeline runs on
  // the pipeline hosts of replica 0 and is replicated over the others
  // (expand_to_replicas). Without a layout: one pipeline over every host.
  std::vector<std::string> pipeline_hosts = hosts;
  PlatformSummary pipeline_platform = platform;
  const bool layout = request.data_parallel || request.pipeline_parallel || request.global_batch_size;
  plan.parallel_layout = layout;
  if (layout) {
    const LayoutSizes sizes = layout_sizes(request, plan, world_size, hosts.size());
    if (program)
      throw InputError(fmt::format("--program {}: the Program places its own devices and replicas; {} do not apply",
                                   printable(request.program_file), layout_flags_given(request)));
    if (info.single_stage)
      throw InputError(fmt::format("--schedule {}: runs the whole model on every host; a layout ({}) runs pipelines of "
                                   "any other flushed schedule (a pipeline of one stage is data parallelism: "
                                   "--pipeline-parallel 1)",
                                   plan.schedule, layout_flags_given(request)));
    if (!info.flushed)
      throw InputError(fmt::format("{}: {} pipelines mini-batches without a flush and replicates stages one by one "
                                   "(--replicas, PipeDream's 1F1B-RR); a layout replicates whole flushed pipelines",
                                   layout_flags_given(request), plan.schedule));
    if (!request.replicas.empty())
      throw InputError(fmt::format("--replicas {} and {}: both replicate stages; --replicas replicates stages one by one "
                                   "(PipeDream), a layout whole pipelines (Megatron-LM): give one",
                                   request.replicas, layout_flags_given(request)));
    plan.data_parallel = sizes.data;
    if (request.global_batch_size) {
      const long long per_micro_batch = static_cast<long long>(plan.profile.micro_batch_size) * sizes.data;
      if (*request.global_batch_size < 1 || *request.global_batch_size % per_micro_batch != 0)
        throw InputError(fmt::format("--global-batch-size {}: expected a multiple of micro-batch size {} x data-parallel "
                                     "size {} = {} (Megatron: global batch = micro-batch size x micro-batches x d)",
                                     *request.global_batch_size, plan.profile.micro_batch_size, sizes.data,
                                     per_micro_batch));
      const long long micro_batches = *request.global_batch_size / per_micro_batch;
      if (micro_batches > limits::kMaxMicroBatches)
        throw InputError(fmt::format("--global-batch-size {}: {} micro-batches per pipeline, above the {} pipegrid "
                                     "simulates (docs/formats.md, Limits)",
                                     *request.global_batch_size, micro_batches, limits::kMaxMicroBatches));
      if (request.micro_batches != 1 && request.micro_batches != micro_batches)
        throw InputError(fmt::format("--micro-batches {} and --global-batch-size {}: the global batch makes {} "
                                     "micro-batches per pipeline (micro-batch size {} x d {}); give one",
                                     request.micro_batches, *request.global_batch_size, micro_batches,
                                     plan.profile.micro_batch_size, sizes.data));
      plan.micro_batches = static_cast<int>(micro_batches);
    }
    std::vector<std::vector<int>> replica_zero;
    pipeline_hosts.clear();
    for (int i = 0; i < sizes.pipeline; ++i) {
      replica_zero.push_back({i * sizes.data});
      pipeline_hosts.push_back(hosts[static_cast<std::size_t>(i * sizes.data)]);
    }
    pipeline_platform = leader_platform(platform, replica_zero);
  }
  // Pipeline rank i's host of replica 0 -> the hosts of every replica, in
  // Megatron-Core's rank order (leader i d + q for replica q).
  const auto expand_to_replicas = [&](Partition& partition, const std::string& origin) {
    if (plan.data_parallel == 1) return;
    for (std::size_t s = 0; s < partition.hosts.size(); ++s) {
      std::vector<std::string>& replicas = partition.hosts[s];
      if (replicas.size() == static_cast<std::size_t>(plan.data_parallel)) continue;
      const auto rank = std::find(pipeline_hosts.begin(), pipeline_hosts.end(), replicas.front());
      if (replicas.size() != 1 || rank == pipeline_hosts.end())
        throw InputError(fmt::format("{}: stage {} is placed on {} host{}; with --data-parallel {} a stage names its "
                                     "host in pipeline 0 (one of {}) or one host per pipeline",
                                     origin, s, replicas.size(), replicas.size() == 1 ? " '" + printable(replicas.front()) + "'" : "s",
                                     plan.data_parallel, fmt::join(pipeline_hosts, ", ")));
      const std::size_t first = static_cast<std::size_t>(rank - pipeline_hosts.begin()) * plan.data_parallel;
      replicas.clear();
      for (int q = 0; q < plan.data_parallel; ++q) replicas.push_back(hosts[first + static_cast<std::size_t>(q)]);
    }
  };
  if (!request.replicas.empty() && request.partition != "uniform")
    throw InputError("--replicas and --partition FILE both say how to place stages: give one");
  if (program) {
    // Device d of the Program runs on the platform's d-th host; each stage
    // on the hosts of the devices that hold it, by replica.
    if (program->devices.size() > hosts.size())
      throw InputError(fmt::format("--program {}: {} devices, but {} declares {} hosts", printable(request.program_file),
                                   program->devices.size(), request.platform_file, hosts.size()));
    std::vector<std::vector<std::string>> stage_hosts(static_cast<std::size_t>(program->num_stages));
    for (std::size_t d = 0; d < program->devices.size(); ++d)
      for (const int stage : program->devices[d].stages) {
        auto& replicas = stage_hosts[static_cast<std::size_t>(stage)];
        const auto replica = static_cast<std::size_t>(program->devices[d].replica);
        if (replicas.size() <= replica) replicas.resize(replica + 1);
        replicas[replica] = hosts[d];
      }
    for (std::size_t s = 0; s < stage_hosts.size(); ++s)
      for (std::size_t r = 0; r < stage_hosts[s].size(); ++r)
        if (stage_hosts[s][r].empty())
          throw InputError(fmt::format("--program {}: stage {} has replica {} but no device holds replica {}",
                                       printable(request.program_file), s, stage_hosts[s].size() - 1, r));
    if (partition_rule && request.partition != "uniform")
      throw InputError(fmt::format("--partition {}: the Program {} places its stages; give a partition file to "
                                   "choose the layers of each stage",
                                   request.partition, printable(request.program_file)));
    if (request.partition == "uniform") {
      if (stage_hosts.size() > plan.profile.layers.size())
        throw InputError(fmt::format("--program {}: {} stages, but {} has only {} layers",
                                     printable(request.program_file), stage_hosts.size(), profile_label,
                                     plan.profile.layers.size()));
      plan.partition = uniform_partition(plan.profile, std::vector<std::string>(stage_hosts.size()), program->num_stages);
      plan.partition.hosts = stage_hosts;
    } else {
      PartitionFile file = parse_partition_file(read_text_file(request.partition), request.partition, plan.profile);
      if (file.partition.num_stages() != program->num_stages)
        throw InputError(fmt::format("{}: {} stages, but the Program {} has {}", request.partition,
                                     file.partition.num_stages(), printable(request.program_file), program->num_stages));
      plan.profile = std::move(file.profile);
      plan.partition = std::move(file.partition);
      plan.partition.hosts = stage_hosts;  // the Program's placement
    }
  } else if (info.single_stage) {
    // Data parallelism: the whole model, one replica per host.
    if (request.partition != "uniform" || !request.replicas.empty())
      throw InputError(fmt::format("--schedule {}: runs the whole model on every host of the platform; drop --partition and --replicas", plan.schedule));
    if (!request.partitioner.empty())
      throw InputError(fmt::format("--schedule {}: runs the whole model on every host of the platform; drop --partitioner", plan.schedule));
    plan.partition.stage_of_layer.assign(plan.profile.layers.size(), 0);
    plan.partition.hosts = {hosts};
  } else if (!request.partitioner.empty()) {
    // As explore makes the partition (partition_for_run), for this schedule,
    // M, micro-batch size and memory.
    RunPartitionInput input;
    input.graph = partitioner_graph(request, plan, measured_size);
    input.platform = pipeline_platform;
    // Partitioners name the platform in their messages by its file name, as
    // in explore, so that a reason reads the same wherever the file lies.
    input.platform.file = request.platform_file.substr(request.platform_file.find_last_of('/') + 1);
    input.schedule = plan.schedule;
    input.micro_batches = plan.micro_batches;
    input.memory_limit_bytes = plan.memory_bytes;
    input.split_layers = request.split_layers;
    input.dtype = plan.dtype;
    input.optimizer = plan.optimizer;
    input.gradient_dtype = plan.gradient_dtype;
    // A sweep keeps each partition (or the reason there is none) by the hash
    // of everything the partitioner reads: runs differing elsewhere share it.
    std::string cache_path;
    if (!partition_cache_folder.empty()) {
      const std::string key = fmt::format(
          "partitioner={}\nschedule={}\nmicro_batches={}\nmemory={}\nsplit_layers={}\nplatform_name={}\nplatform={}\n"
          "profile_file={}\nprofile={}\n",
          request.partitioner, input.schedule, input.micro_batches,
          input.memory_limit_bytes ? fmt::format("{}", *input.memory_limit_bytes) : "-", input.split_layers,
          input.platform.file, sweep::sha256_hex(plan.platform_xml),
          request.model.name.empty() ? input_file_sha256(request.profile_file) : "model",
          sweep::sha256_hex(profile_to_json(plan.profile)));
      // Memory state and tensor parallelism, only when they differ from
      // fp32 SGD without it (keys made before them stay valid).
      std::string key_more;
      if (resident_weight_factor(input.dtype, input.optimizer) != 2)
        key_more += fmt::format("dtype={}\noptimizer={}\n", input.dtype, input.optimizer);
      if (!input.gradient_dtype.empty()) key_more += fmt::format("gradient_dtype={}\n", input.gradient_dtype);
      if (plan.tensor_parallel != 1) key_more += fmt::format("tensor_parallel={}\n", plan.tensor_parallel);
      cache_path = fmt::format("{}/{}.json", partition_cache_folder, sweep::sha256_hex(key + key_more).substr(0, 32));
    }
    PartitionerOutput chosen;
    bool cached = false;
    if (!cache_path.empty() && std::filesystem::exists(cache_path)) {
      const nlohmann::json entry = nlohmann::json::parse(read_text_file(cache_path));
      if (entry.contains("infeasible")) throw InfeasibleError(entry["infeasible"].get<std::string>());
      chosen.profile = parse_profile_json(entry.at("profile").dump(), cache_path);
      chosen.partition = parse_partition_json(entry.at("partition").dump(), cache_path, chosen.profile);
      cached = true;
    }
    if (!cached) {
      try {
        chosen = partition_for_run(request.partitioner, input);
      } catch (const InfeasibleError& error) {
        const std::string reason = fmt::format("--partitioner {}: no feasible partition: {}", request.partitioner, error.what());
        if (!cache_path.empty()) write_file_atomically(cache_path, nlohmann::json{{"infeasible", reason}}.dump() + "\n");
        throw InfeasibleError(reason);
      } catch (const InputError& error) {
        throw InputError(fmt::format("--partitioner {}: {}", request.partitioner, error.what()));
      }
      if (!cache_path.empty())
        write_file_atomically(cache_path, nlohmann::json{{"profile", nlohmann::json::parse(profile_to_json(chosen.profile))},
                                                         {"partition", nlohmann::json::parse(partition_to_json(chosen.partition))}}
                                              .dump() + "\n");
    }
    plan.profile = std::move(chosen.profile);
    plan.partition = std::move(chosen.partition);
    plan.partitioner = request.partitioner;
    expand_to_replicas(plan.partition, "--partitioner " + request.partitioner);
  } else if (!request.replicas.empty()) {
    plan.partition = replicated_partition(plan.profile, platform.hosts, parse_replicas(request.replicas));
  } else if (partition_rule) {
    // A named rule: v stages per device, p x v stages, stage s on the host
    // of device stage_to_device(s) (a loop or a V).
    const std::size_t stages = pipeline_hosts.size() * static_cast<std::size_t>(plan.virtual_stages);
    if (stages > plan.profile.layers.size())
      throw InfeasibleError(fmt::format(
          "--partition {}: {} {} hosts, {} stage{} each, but {} has only {} layers: give a "
          "partition file with at most {} stages",
          request.partition, request.platform_file,
          layout ? fmt::format("gives a pipeline {}", pipeline_hosts.size()) : fmt::format("declares {}", hosts.size()),
          plan.virtual_stages, plan.virtual_stages == 1 ? "" : "s", profile_label, plan.profile.layers.size(),
          plan.profile.layers.size()));
    std::vector<std::string> stage_hosts(stages);
    const std::vector<int> device = stage_to_device(static_cast<int>(stages), plan.virtual_stages, stage_map_of(plan.schedule));
    for (std::size_t s = 0; s < stages; ++s) stage_hosts[s] = pipeline_hosts[static_cast<std::size_t>(device[s])];
    plan.partition = partition_by_rule(request.partition, plan.profile, stage_hosts, plan.virtual_stages, device,
                                       {request.first_pipeline_layers, request.last_pipeline_layers,
                                        request.embedding_in_pipeline_split, request.loss_in_pipeline_split});
    expand_to_replicas(plan.partition, "partition");
  } else {
    // A file may split layers between stages: the plan runs the profile
    // holding the parts.
    // A partitioner may have re-listed a branching model's layers (PipeDream
    // on GNMT): the ranges then count in that order.
    const std::string text = read_text_file(request.partition);
    if (const std::vector<int> order = parse_partition_layer_order(text, request.partition); !order.empty()) {
      if (plan.tensor_parallel > 1)
        throw InputError(fmt::format("{}: a partition with layer_order and --tensor-parallel {}: not supported; give a "
                                     "partition of the profile's own layer order",
                                     request.partition, plan.tensor_parallel));
      const bool json_profile = !request.model.name.empty() || is_json_path(request.profile_file);
      const ModelGraph graph = json_profile ? chain_graph(plan.profile) : read_model_graph(request.profile_file, request.batch_size);
      try {
        plan.profile = reorder_layers(graph, order);
      } catch (const InputError& error) {
        throw InputError(fmt::format("{}: layer_order does not fit {}: {}", request.partition, profile_label, error.what()));
      }
    }
    PartitionFile file = parse_partition_file(text, request.partition, plan.profile);
    plan.profile = std::move(file.profile);
    plan.partition = std::move(file.partition);
    expand_to_replicas(plan.partition, request.partition);
    for (int stage = 0; stage < plan.partition.num_stages(); ++stage)
      for (std::size_t replica = 0; replica < plan.partition.hosts[stage].size(); ++replica) {
        const std::string& host = plan.partition.hosts[stage][replica];
        if (std::find(hosts.begin(), hosts.end(), host) == hosts.end())
          throw InputError(fmt::format("{}: stages[{}].hosts[{}]: expected a host of {}{}, found '{}'",
                                       request.partition, stage, replica, request.platform_file,
                                       plan.tensor_parallel > 1 ? fmt::format(" that leads a tensor-parallel group of {} "
                                                                              "(the first host of each group: {})",
                                                                              plan.tensor_parallel, fmt::join(hosts, ", "))
                                                                : std::string(),
                                       host));
      }
    check_one_device_per_host(plan.partition.hosts, request.partition);
  }
  // A two-copy schedule (DualPipe): the partition placed one copy, stage s
  // on the host of device s (of each of the d pipelines); the second copy
  // mirrors it (stage s also on device p-1-s).
  if (!program && info.two_copies) {
    if (!request.replicas.empty() || !request.partitioner.empty())
      throw InputError(fmt::format("{} {}: {} places the two copies of each stage itself; use the uniform partition "
                                   "or a partition file of one host per stage",
                                   request.replicas.empty() ? "--partitioner" : "--replicas",
                                   request.replicas.empty() ? request.partitioner : request.replicas, plan.schedule));
    for (std::size_t s = 0; s < plan.partition.hosts.size(); ++s)
      if (plan.partition.hosts[s].size() != static_cast<std::size_t>(plan.data_parallel))
        throw InputError(fmt::format("{}: stage {} is placed on {} hosts; {} places the second copy of each stage "
                                     "itself: give one host per stage{}",
                                     partition_rule ? std::string("partition") : request.partition, s,
                                     plan.partition.hosts[s].size(), plan.schedule,
                                     plan.data_parallel > 1 ? " and pipeline" : ""));
    plan.partition.hosts = mirrored_stage_hosts(plan.partition.hosts);
  }
  // Messages about stages per device name --virtual-stages only to a user
  // who gave it; otherwise the schedule's own default is the reason.
  const std::string stages_per_device =
      request.virtual_stages ? fmt::format("--virtual-stages {}: {} holds {} stages per device", plan.virtual_stages,
                                           plan.schedule, plan.virtual_stages)
                             : fmt::format("{} holds {} stages per device", plan.schedule, plan.virtual_stages);
  if (plan.virtual_stages > 1 && (!request.replicas.empty() || !request.partitioner.empty()))
    throw InputError(fmt::format("{} {}: {}; the partitioners and --replicas place one: use the uniform partition or "
                                 "a partition file",
                                 request.replicas.empty() ? "--partitioner" : "--replicas",
                                 request.replicas.empty() ? request.partitioner : request.replicas, stages_per_device));
  if (plan.virtual_stages > 1 && plan.partition.num_stages() % plan.virtual_stages != 0)
    throw InputError(fmt::format("{}: its {} stages do not split into devices of {} stages each; expected a multiple of "
                                 "{} stages{}",
                                 stages_per_device, plan.partition.num_stages(), plan.virtual_stages, plan.virtual_stages,
                                 partition_rule ? " (--stages)" : " in the partition"));
  check_stage_placement(plan, partition_rule ? "partition" : request.partition);
  // FPGA boards keep their own stages' weights on chip when they fit; the
  // plan then carries the analytic times as the layers' times.
  for (std::string& note : place_fpga_weights(plan.profile, plan.partition, platform))
    plan.device_model_notes.push_back(std::move(note));
  for (Layer& layer : plan.profile.layers) layer.times_given = true;
  set_ddp_options(request, plan);
  set_expert_parallel(request, plan);
  plan.extend_mini_batches = !program && !request.mini_batches && !info.flushed;
  plan.mini_batches = program                 ? program->mini_batches
                      : request.mini_batches ? *request.mini_batches
                      : info.flushed         ? 1
                                             : default_mini_batches(plan);
  return plan;
}

namespace {

// The most mini-batches the schedule limits allow for this plan
// (core/limits.hpp: work items and device x mini-batch bookkeeping).
int mini_batches_within_limits(const Plan& plan) {
  long long devices = 0;
  for (const auto& replicas : plan.partition.hosts) devices += static_cast<long long>(replicas.size());
  const long long per_minibatch = std::max<long long>(1, static_cast<long long>(plan.partition.num_stages()) * plan.micro_batches);
  return static_cast<int>(std::max<long long>(
      1, std::min({limits::kMaxWorkItems / per_minibatch, limits::kMaxDeviceMiniBatches / std::max<long long>(1, devices),
                   static_cast<long long>(limits::kMaxMiniBatches)})));
}

}  // namespace

int default_mini_batches(const Plan& plan) {
  int devices = 0;
  for (const auto& replicas : plan.partition.hosts) devices += static_cast<int>(replicas.size());
  return std::min(std::max(32, 4 * devices), mini_batches_within_limits(plan));
}

int max_auto_mini_batches(const Plan& plan) {
  return std::min(16 * default_mini_batches(plan), mini_batches_within_limits(plan));
}

namespace {

// Megatron's tied word embedding across the pipeline (core_v0.14.0:
// LanguageModule.setup_embeddings_and_output_layer keeps a copy of the word
// table on the last stage; finalize_model_grads all-reduces the two copies'
// gradients over the embedding group after the data-parallel
// synchronisation): a profile whose head (op linear, over a vocabulary)
// has no parameters of its own multiplies by the embedding's word table (op
// embedding over a vocabulary: its parameters less the position table).
// Applies when the embedding and the head run on different devices.
struct TiedEmbedding {
  int first_stage = 0, last_stage = 0;
  std::size_t head_layer = 0;
  double word_bytes = 0;  ///< per tensor-parallel member
};
std::optional<TiedEmbedding> tied_embedding_of(const Plan& plan, const Program& program) {
  const std::vector<Layer>& layers = plan.profile.layers;
  std::optional<std::size_t> embedding, head;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    if (!layers[l].vocabulary) continue;
    if (layers[l].op == "embedding" && !embedding) embedding = l;
    if (layers[l].op == "linear" && layers[l].parameter_bytes == 0) head = l;
  }
  if (!embedding || !head || *head < *embedding) return std::nullopt;
  TiedEmbedding tied;
  tied.first_stage = plan.partition.stage_of_layer[*embedding];
  tied.last_stage = plan.partition.stage_of_layer[*head];
  tied.head_layer = *head;
  tied.word_bytes = layers[*embedding].parameter_bytes - layers[*embedding].replicated_parameter_bytes;
  if (!(tied.word_bytes > 0)) return std::nullopt;
  for (const DeviceProgram& device : program.devices)
    if (device.replica == 0 && device.holds(tied.first_stage)) return device.holds(tied.last_stage) ? std::nullopt : std::optional(tied);
  return std::nullopt;
}

// The platform file to hand SimGrid: the original when it still holds the
// plan's XML, else a private copy of the embedded XML (removed on scope exit).
class PlatformCopy {
 public:
  explicit PlatformCopy(const Plan& plan) {
    std::string current;
    try {
      current = read_text_file(plan.platform_file);
    } catch (const InputError&) {
    }
    if (current == plan.platform_xml) {
      path_ = plan.platform_file;
      return;
    }
    const char* tmpdir = std::getenv("TMPDIR");
    std::string name = fmt::format("{}/pipegrid-platform-XXXXXX.xml", tmpdir && *tmpdir ? tmpdir : "/tmp");
    {
      // Created and registered (removed if pipegrid is terminated) at once.
      TerminationSignalsBlocked blocked;
      const int fd = mkstemps(name.data(), 4);
      if (fd < 0) throw InputError(fmt::format("{}: cannot create a temporary copy of the plan's platform", name));
      close(fd);
      registered_ = std::make_unique<RegisteredTemporary>(name);
    }
    path_ = owned_ = name;
    try {
      write_file_atomically(path_, plan.platform_xml);
    } catch (...) {
      std::remove(owned_.c_str());
      throw;
    }
  }
  ~PlatformCopy() {
    if (!owned_.empty()) std::remove(owned_.c_str());
  }
  PlatformCopy(const PlatformCopy&) = delete;
  PlatformCopy& operator=(const PlatformCopy&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_, owned_;
  std::unique_ptr<RegisteredTemporary> registered_;
};

// The Program honours the plan's options that only act through it: an
// --fb-overlap other than 1 needs an overlapped F&B pair, --recompute a
// recompute (R). InputError naming the option otherwise (it would change
// nothing).
void check_program_uses_options(const Plan& plan, const Program& program) {
  const std::string origin = plan.program_text.empty() ? "schedule " + plan.schedule : plan.schedule;
  bool overlapped = false, recomputes = false;
  const bool recompute_asked = plan.recompute || plan.layer_recompute.enabled();
  const std::string recompute_flag =
      plan.recompute ? std::string("--recompute") : "--recompute-granularity " + plan.layer_recompute.granularity;
  for (const DeviceProgram& device : program.devices)
    for (const Stream& stream : device.streams) {
      overlapped = overlapped || !stream.overlapped.empty();
      for (const Action& action : stream.actions) recomputes = recomputes || action.kind == ActionKind::Recompute;
    }
  if (plan.fb_overlap != 1.0 && !overlapped)
    throw InputError(fmt::format("--fb-overlap {}: sets the time of overlapped F&B pairs, and {} runs none; drop "
                                 "--fb-overlap (`pipegrid schedule --list` tells which schedules overlap F and B)",
                                 plan.fb_overlap, origin));
  if (recompute_asked && !recomputes)
    throw InputError(fmt::format("{0}: {1} recomputes nothing (it has no R action); drop {0}, or write the "
                                 "recomputations into the Program",
                                 recompute_flag, origin));
}

// The sizes of the ranks of one pipeline stage with `replicas` replicas
// (Megatron-Core's rank generators over t x cp x replicas ranks, pp 1):
// their expert tensor, expert and expert-data sizes are the plan's.
ParallelSizes stage_parallel_sizes(const Plan& plan, int replicas) {
  return {plan.tensor_parallel, plan.context_parallel, plan.expert_parallel, plan.expert_tensor_parallel, replicas, 1};
}

// All-to-all seconds summed over the leaders and mini-batches, per device and mini-batch.
double per_device_and_mini_batch(const Plan& plan, const RunResult& result, double seconds) {
  if (result.all_to_all_devices <= 0 || plan.mini_batches <= 0) return 0;
  return seconds / (static_cast<double>(result.all_to_all_devices) * plan.mini_batches);
}

// Expert parallelism in a simulation request (docs/semantics.md, "Expert
// parallelism"): each leader's ranks with their expert-parallel groups, the
// layers' all-to-all bytes, and the routed experts' gradients, reduced
// over the expert-data-parallel group of e = t cp d / (etp ep) ranks
// rather than the r replicas the engine's ring of a stage runs over (d, or
// 2 d for two copies of the model, whose experts then sum over 2 e): their
// bytes in the rings are scaled by ((e - 1) / e) / ((r - 1) / r), so that a
// ring's bandwidth term is that of a ring of e over the expert shard (its
// latency term stays the r-ring's; e = 1: no reduction). `memory_stages` gets the
// expert bytes the memory model counts apart.
void add_expert_parallel(const Plan& plan, const PlatformSummary& platform, sim::SimulationRequest& request,
                         std::vector<StageCost>& memory_stages) {
  const int g = plan.tensor_parallel * plan.context_parallel;  // a leader's group: t x cp consecutive hosts
  // A stage's ring runs over its r replicas: d, or 2 d for a schedule that
  // keeps two copies of the model (DualPipe), whose expert shards are then
  // summed over 2 e ranks.
  const auto ring_scale_of = [&](std::size_t s) {
    const int r = static_cast<int>(request.hosts[s].size());
    const double e = static_cast<double>(stage_parallel_sizes(plan, r).expert_data());
    return r > 1 ? ((e - 1) / e) / ((r - 1.0) / r) : 1.0;
  };
  std::vector<std::size_t> layer_in_stage(request.stage_layers.size(), 0);
  for (std::size_t l = 0; l < plan.profile.layers.size(); ++l) {
    const std::size_t s = static_cast<std::size_t>(plan.partition.stage_of_layer[l]);
    const Layer& layer = plan.profile.layers[l];
    sim::LayerCost& cost = request.stage_layers[s][layer_in_stage[s]++];
    cost.moe_dispatch_bytes = layer.moe_dispatch_bytes;
    if (layer.expert_parameter_bytes <= 0) continue;
    const double scaled = layer.expert_parameter_bytes * (ring_scale_of(s) - 1);
    cost.weight_bytes += scaled;
    request.stages[s].weight_bytes += scaled;
    memory_stages[s].expert_weight_bytes += layer.expert_parameter_bytes;
  }
  // Ranks: a stage replica's leader hosts[s][q] and the g - 1 hosts after
  // it; rank m of replica q is local rank m + g q of the stage's t x cp x r
  // ranks (the dense order tp-cp-dp), grouped by the expert generator.
  std::map<std::string, std::size_t> index_of;
  for (std::size_t h = 0; h < platform.hosts.size(); ++h) index_of.emplace(platform.hosts[h].name, h);
  const auto host_of = [&](const std::string& leader, long long member) -> const std::string& {
    const std::size_t at = index_of.at(leader) + static_cast<std::size_t>(member);
    if (at >= platform.hosts.size())
      throw InputError(fmt::format("expert parallelism: the group of '{}' runs past the platform's hosts", printable(leader)));
    return platform.hosts[at].name;
  };
  for (const std::vector<std::string>& replicas : plan.partition.hosts) {
    const ParallelSizes sizes = stage_parallel_sizes(plan, static_cast<int>(replicas.size()));
    const std::vector<std::vector<long long>> groups = parallel_groups(sizes, GroupKind::Expert);
    std::vector<std::size_t> group_of(static_cast<std::size_t>(sizes.world()));
    for (std::size_t k = 0; k < groups.size(); ++k)
      for (const long long local : groups[k]) group_of[static_cast<std::size_t>(local)] = k;
    const auto rank_host = [&](long long local) -> const std::string& {
      return host_of(replicas[static_cast<std::size_t>(local / g)], local % g);
    };
    for (std::size_t q = 0; q < replicas.size(); ++q) {
      std::vector<sim::SimulationRequest::ExpertParallelRank>& ranks = request.expert_parallel_ranks[replicas[q]];
      if (!ranks.empty()) continue;  // a device holding several stages: once
      for (int m = 0; m < g; ++m) {
        const long long local = m + static_cast<long long>(g) * static_cast<long long>(q);
        sim::SimulationRequest::ExpertParallelRank& rank = ranks.emplace_back();
        rank.host = rank_host(local);
        for (const long long peer : groups[group_of[static_cast<std::size_t>(local)]]) rank.group.push_back(rank_host(peer));
      }
    }
  }
}

// The table's line on expert parallelism: the group sizes and what the
// all-to-alls cost per device and mini-batch.
std::string expert_parallel_text(const Plan& plan, const RunResult& result) {
  const ParallelSizes sizes = stage_parallel_sizes(plan, plan.data_parallel);
  std::string text = fmt::format(
      "expert parallel {} x expert tensor {} x expert data {}: all-to-alls {:.4g} s per device and mini-batch, {:.4g} s of "
      "it exposed",
      sizes.ep, sizes.expert_tensor(), sizes.expert_data(), per_device_and_mini_batch(plan, result, result.all_to_all_s),
      per_device_and_mini_batch(plan, result, result.all_to_all_exposed_s));
  if (const auto effective = result.fb_overlap_effective())
    text += fmt::format("; overlapped F&B pairs take {:.3f} of their compute + all-to-alls (fb_overlap_effective)", *effective);
  return text;
}

// One simulation of exactly plan.mini_batches on `platform_path`, whose
// hosts `platform` summarises (checked once by run_plan, whatever the count).
RunResult run_plan_once(const Plan& plan, const std::string& platform_path, const PlatformSummary& platform) {
  RunResult result;
  const ScheduleOptions options = plan_schedule_options(plan, plan.mini_batches, &platform, platform_path);
  const ScheduleInfo& info = plan_schedule_info(plan);
  result.program = plan.program_text.empty() ? generate_schedule(plan.schedule, options)
                                             : parse_program_text(plan.program_text, "plan program");
  validate_program(result.program);
  check_program_uses_options(plan, result.program);

  sim::SimulationRequest request;
  request.platform_file = platform_path;
  request.program = result.program;
  request.stages = stage_costs(plan.profile, plan.partition);
  // Megatron's layer-wise recomputation: each R re-runs its stage's share.
  // Without sequence parallelism a tensor-parallel member keeps each
  // checkpoint's whole input (the profile's output_bytes are its share);
  // with it, its share (Korthikanti et al. 2022: 2sbh/t per checkpoint).
  std::vector<StageRecompute> layerwise;
  if (plan.layer_recompute.enabled()) {
    layerwise = stage_recompute(plan.profile, plan.partition, plan.layer_recompute,
                                plan.sequence_parallel ? 1 : plan.tensor_parallel);
    for (std::size_t s = 0; s < layerwise.size(); ++s) request.stages[s].recompute_s = layerwise[s].recompute_s;
  }
  // PipeOptim predicts the weights before each forward: its cost is part of
  // the forward. The last stage's version gap is D - rank - 1 = 0: it
  // predicts nothing (PipeOptim section 4).
  for (std::size_t s = 0; s + 1 < request.stages.size(); ++s)
    request.stages[s].forward_s += plan.prediction_cost_s_per_byte * request.stages[s].weight_bytes;
  request.stage_layers.resize(request.stages.size());
  const std::optional<TiedEmbedding> tied = tied_embedding_of(plan, result.program);
  for (std::size_t l = 0; l < plan.profile.layers.size(); ++l) {
    const Layer& layer = plan.profile.layers[l];
    sim::LayerCost cost;
    cost.backward_s = layer.backward_s;
    cost.weight_bytes = layer.parameter_bytes;
    // The last stage's copy of a tied word table: weights, gradients and
    // optimizer state of its own, reduced over the replicas with the stage.
    if (tied && l == tied->head_layer) cost.weight_bytes += tied->word_bytes;
    if (!plan.tensor_parallel_collectives.empty()) cost.tensor_parallel = plan.tensor_parallel_collectives[l];
    cost.forward_s = layer.forward_s;
    const BackwardSplit split = backward_split(layer);
    cost.backward_input_s = split.input_s;
    cost.backward_weight_s = split.weight_s;
    for (const auto& [device, times] : layer.device_times) {
      const BackwardSplit device_split = backward_split(layer, times);
      cost.device_times[device] = {times.forward_s, times.backward_s, device_split.input_s, device_split.weight_s};
    }
    std::vector<sim::LayerCost>& stage_layers = request.stage_layers[plan.partition.stage_of_layer[l]];
    if (!layerwise.empty())
      cost.recompute_share = layerwise[plan.partition.stage_of_layer[l]].layer_share[stage_layers.size()];
    stage_layers.push_back(std::move(cost));
  }
  if (tied) {
    request.stages[static_cast<std::size_t>(tied->last_stage)].weight_bytes += tied->word_bytes;
    request.tied_embedding = sim::SimulationRequest::TiedEmbedding{tied->first_stage, tied->last_stage, tied->word_bytes};
  }
  request.hosts = plan.partition.hosts;
  // What the memory model counts: the stages' weights as the ranks hold them.
  std::vector<StageCost> memory_stages = request.stages;
  if (plan.expert_parallel > 1) add_expert_parallel(plan, platform, request, memory_stages);
  // --tp-collectives flows: each group leader's hosts, in ring order.
  if (!plan.tensor_parallel_collectives.empty()) {
    PlatformSummary named = platform;
    named.file = plan.platform_file;
    for (const std::vector<int>& group : tensor_parallel_groups(named, plan.tensor_parallel)) {
      std::vector<std::string>& members =
          request.tensor_parallel_members[platform.hosts[static_cast<std::size_t>(group.front())].name];
      for (const int member : group) members.push_back(platform.hosts[static_cast<std::size_t>(member)].name);
    }
  }
  request.fb_overlap = plan.fb_overlap;
  request.network = sim::parse_network_model(plan.network);
  request.transfer_rule = sim::parse_transfer_rule(plan.transfer_rule);
  request.blocking_transfers = plan.blocking_transfers;
  request.collective_model = sim::parse_collective_model(plan.collective_model);
  // Megatron-Core DDP buckets hold parameters; the layers' weight bytes are in the dtype.
  if (plan.overlap_grad_reduce) request.bucket_bytes = static_cast<double>(plan.ddp_bucket_parameters()) * dtype_bytes(plan.dtype, "--dtype");
  request.distributed_optimizer = plan.distributed_optimizer;
  // Gradients reduced in their own dtype (--gradient-dtype fp32: Megatron's
  // grad_reduce_in_fp32 with --bf16 or --accumulate-allreduce-grads-in-fp32).
  if (!plan.gradient_dtype.empty() && !plan.dtype.empty())
    request.gradient_bytes_per_weight_byte =
        static_cast<double>(dtype_bytes(plan.gradient_dtype, "--gradient-dtype")) / dtype_bytes(plan.dtype, "--dtype");
  // Megatron reduces dense gradients over dp x cp ranks; the ring runs over
  // the d leaders, each sending what a rank of the d x cp ring sends
  // (data_context_gradient_factor; at d = 1 the cp ranks' reduction is not
  // simulated: docs/semantics.md, Context parallelism).
  request.gradient_bytes_per_weight_byte *= data_context_gradient_factor(plan.data_parallel, plan.context_parallel);
  request.overlap_param_gather = plan.overlap_param_gather;
  request.device_step_bytes_per_weight_byte = device_step_bytes_per_weight_byte(plan);
  // Where a device without all-reduces updates its weights (optimizer steps).
  request.update_interval = plan.program_text.empty() ? update_interval(plan.schedule, options) : 0;
  // Megatron recomputes inside the backward, once the gradient has come.
  request.recompute_waits_for_gradient = plan.layer_recompute.enabled();

  sim::SimulationResult simulated = sim::simulate(request);
  result.platform = simulated.platform;
  result.platform.file = plan.platform_file;
  result.timeline = std::move(simulated.timeline);
  result.all_to_all_s = simulated.all_to_all_s;
  result.all_to_all_exposed_s = simulated.all_to_all_exposed_s;
  result.overlapped_pair_span_s = simulated.overlapped_pair_span_s;
  result.overlapped_pair_serial_s = simulated.overlapped_pair_serial_s;
  result.all_to_all_devices = static_cast<int>(request.expert_parallel_ranks.size());

  MemoryModel memory;
  memory.stages = std::move(memory_stages);
  memory.recompute = plan.recompute;
  for (const StageRecompute& stage : layerwise) memory.layerwise.push_back({stage.kept_bytes, stage.recompute_bytes});
  // Megatron's distributed optimizer shards over dp x cp (its data-parallel group with context).
  const int shards = plan.data_parallel * plan.context_parallel;
  memory.resident_weight_factor =
      resident_weight_factor(plan.dtype, plan.optimizer, plan.gradient_dtype, plan.distributed_optimizer ? shards : 0);
  memory.step_weight_factor =
      step_gradient_copy_bytes_per_parameter(plan.dtype, plan.gradient_dtype,
                                             plan.distributed_optimizer ? shards : 0) /
      dtype_bytes(plan.dtype, "--dtype");
  if (plan.expert_parallel > 1 && plan.distributed_optimizer) {
    // The routed experts' optimizer state is sharded over their
    // expert-data-parallel group (Megatron-Core's distributed optimizer).
    const int expert_data = static_cast<int>(stage_parallel_sizes(plan, plan.data_parallel).expert_data());
    memory.expert_resident_weight_factor = resident_weight_factor(plan.dtype, plan.optimizer, plan.gradient_dtype, expert_data);
    memory.expert_step_weight_factor =
        step_gradient_copy_bytes_per_parameter(plan.dtype, plan.gradient_dtype, expert_data) / dtype_bytes(plan.dtype, "--dtype");
  }
  if (!plan.fp8_format.empty()) {  // Transformer Engine's cached FP8 weights and transposes, per stage
    memory.stage_resident_bytes.assign(request.stages.size(), 0.0);
    for (std::size_t l = 0; l < plan.profile.layers.size() && l < plan.partition.stage_of_layer.size(); ++l) {
      const auto stage = static_cast<std::size_t>(plan.partition.stage_of_layer[l]);
      if (stage < memory.stage_resident_bytes.size())
        memory.stage_resident_bytes[stage] += kFp8WeightCacheBytesPerParameter *
                                              fp8_gemm_parameters(plan.profile.layers[l]) / std::max(1, plan.tensor_parallel);
    }
  }
  if (!info.flushed) {
    memory.versioning = info.weights == WeightVersions::Predicted ? WeightVersioning::Prediction
                        : plan.vertical_sync                        ? WeightVersioning::VerticalSync
                                                                    : WeightVersioning::Stashing;
    memory.update_interval = update_interval(plan.schedule, options);
  }
  HostStages stages_of_host;
  for (int s = 0; s < plan.partition.num_stages(); ++s)
    for (const std::string& host : plan.partition.hosts[s]) {
      stages_of_host[host].push_back(s);
      if (plan.memory_bytes) memory.capacity_bytes[host] = *plan.memory_bytes;
      else if (const auto& capacity = platform.host(host).memory_bytes) memory.capacity_bytes[host] = *capacity;
      if (const auto capacity = memory.capacity_bytes.find(host); capacity != memory.capacity_bytes.end())
        memory.reserve_bytes[host] = platform.host(host).memory_reserve_of(capacity->second);
    }
  result.metrics = compute_metrics(result.timeline, memory, stages_of_host, plan.mini_batches,
                                   static_cast<int>(plan.global_batch_size()),
                                   plan.program_text.empty() ? !info.flushed : minibatches_overlap(result.timeline));
  return result;
}

}  // namespace

namespace {

// Tensor parallelism: the groups fit the platform and every stage runs on a
// group's first host (the others are its members). InputError otherwise.
void check_tensor_parallel_placement(const Plan& plan, PlatformSummary platform) {
  if (plan.context_parallel > 1) {
    // Model-parallel groups of t x cp consecutive hosts: a stage on a group's first.
    const std::size_t group = static_cast<std::size_t>(plan.tensor_parallel) * static_cast<std::size_t>(plan.context_parallel);
    context_parallel_rings(platform.hosts.size(), plan.tensor_parallel, plan.context_parallel);  // t x cp divides the hosts
    for (int s = 0; s < plan.partition.num_stages(); ++s)
      for (const std::string& host : plan.partition.hosts[static_cast<std::size_t>(s)]) {
        const int index = platform.host_index(host);
        if (index >= 0 && static_cast<std::size_t>(index) % group != 0)
          throw InputError(fmt::format("partition: stage {} is placed on host '{}', a member of a model-parallel group "
                                       "of t {} x cp {} hosts: place stages on the groups' first hosts ('{}')",
                                       s, printable(host), plan.tensor_parallel, plan.context_parallel,
                                       printable(platform.hosts[static_cast<std::size_t>(index) / group * group].name)));
      }
  }
  if (plan.tensor_parallel == 1) return;
  platform.file = plan.platform_file;
  std::map<std::string, int> group_of;
  const std::vector<std::vector<int>> groups = tensor_parallel_groups(platform, plan.tensor_parallel);
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (const int member : groups[g]) group_of[platform.hosts[static_cast<std::size_t>(member)].name] = static_cast<int>(g);
  for (int s = 0; s < plan.partition.num_stages(); ++s)
    for (const std::string& host : plan.partition.hosts[static_cast<std::size_t>(s)]) {
      const auto found = group_of.find(host);
      if (found == group_of.end()) continue;  // check_partition names unknown hosts
      const std::string& leader = platform.hosts[static_cast<std::size_t>(groups[found->second].front())].name;
      if (leader != host)
        throw InputError(fmt::format("partition: stage {} is placed on host '{}', a member of tensor-parallel group {} "
                                     "(--tensor-parallel {}): place stages on the groups' first hosts ('{}')",
                                     s, printable(host), found->second, plan.tensor_parallel, printable(leader)));
    }
}

}  // namespace

RunResult run_plan(Plan& plan) {
  // What does not depend on the mini-batch count, once: the platform file
  // to hand SimGrid, the partition and the hosts. fbp-as on a GPU is an
  // error, a schedule meant for the other kind of device a warning.
  PlatformCopy platform_file(plan);
  check_partition(plan.partition, plan.profile, "partition");
  check_one_device_per_host(plan.partition.hosts, "partition");
  check_stage_placement(plan, "partition");
  const PlatformSummary platform = platform_from(platform_file.path());
  check_tensor_parallel_placement(plan, platform);
  std::vector<HostInfo> used;
  for (const auto& replicas : plan.partition.hosts)
    for (const std::string& host : replicas) used.push_back(platform.host(host));
  std::vector<std::string> host_warnings;
  if (plan.program_text.empty()) {
    host_warnings = check_schedule_for_hosts(plan.schedule, used);
  } else {
    // A Program that runs two streams with actions on a device needs an
    // asynchronous host (an empty stream runs nothing).
    const Program program = parse_program_text(plan.program_text, plan.schedule);
    for (std::size_t d = 0; d < program.devices.size(); ++d) {
      const DeviceProgram& device = program.devices[d];
      const auto busy_streams = std::count_if(device.streams.begin(), device.streams.end(),
                                              [](const Stream& stream) { return !stream.actions.empty(); });
      for (const int stage : device.stages)
        if (busy_streams > 1 && static_cast<std::size_t>(device.replica) < plan.partition.hosts[stage].size()) {
          const HostInfo& host = platform.host(plan.partition.hosts[stage][device.replica]);
          if (host.execution == Execution::Sync)
            throw InputError(fmt::format("{}: device {} (stage {}) runs {} streams of actions in parallel, but its host "
                                         "'{}' executes synchronously ({}): give that device one stream, or run the "
                                         "Program on an asynchronous host",
                                         plan.schedule, d, stage, busy_streams, host.name, to_string(host.kind)));
        }
    }
  }

  RunResult result = run_plan_once(plan, platform_file.path(), platform);
  const int cap = max_auto_mini_batches(plan);
  while (plan.extend_mini_batches && result.metrics.steady_state && !result.metrics.steady_state->periodic &&
         plan.mini_batches * 2 <= cap) {
    plan.mini_batches *= 2;
    result = run_plan_once(plan, platform_file.path(), platform);
  }
  result.warnings = host_warnings;
  std::vector<std::string> hosts;
  std::set<std::string> models;
  for (const auto& replicas : plan.partition.hosts)
    for (const std::string& host : replicas)
      if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) {
        hosts.push_back(host);
        if (const std::string& model = platform.host(host).device_model; !model.empty()) models.insert(model);
      }
  // The share of each layer's forward recomputed (Megatron's layer-wise recomputation).
  std::vector<double> recomputed;
  if (plan.layer_recompute.enabled()) {
    const std::vector<StageRecompute> stages = stage_recompute(plan.profile, plan.partition, plan.layer_recompute);
    std::vector<std::size_t> next(stages.size(), 0);
    for (const int stage : plan.partition.stage_of_layer)
      recomputed.push_back(stages[static_cast<std::size_t>(stage)].layer_share[next[static_cast<std::size_t>(stage)]++]);
  }
  result.utilisation = flops_utilisation(plan.profile, plan.tensor_parallel, plan.recompute,
                                         plan.micro_batches * plan.data_parallel,
                                         result.metrics.minibatch_time_s, hosts, platform, plan.dtype, plan.sequence_parallel, recomputed,
                                         !plan.fp8_format.empty());
  if (plan.context_parallel > 1) {
    // Each host stands for t x cp GPUs, each running 1 / cp of every micro-batch.
    const int cp = plan.context_parallel;
    FlopsUtilisation& u = result.utilisation;
    if (u.model_flops) *u.model_flops *= cp;
    if (u.hardware_flops) *u.hardware_flops *= cp;
    u.gpus *= cp;
    if (u.peak_flops) *u.peak_flops *= cp;
  }
  for (const std::string& model : models)
    for (const std::string& pass :
         passes_above_hardware(plan.profile, device_model(model, "device_model"), plan.dtype, !plan.fp8_format.empty()))
      result.warnings.push_back("a modelled pass runs above the hardware: " + pass);
  if (const auto& fp8 = result.utilisation.mfu_of_fp8_peak; fp8 && *fp8 > 1)
    result.warnings.push_back(fmt::format(
        "the model FLOPs per second exceed the devices' FP8 peak ({:.1f}% of it, {:.1f} TFLOP/s per GPU): the profile's "
        "times and its FLOPs cannot both be right",
        *fp8 * 100, *result.utilisation.tflops_per_gpu));
  if (const auto& mfu = result.utilisation.mfu; mfu && *mfu > 1 && plan.fp8_format.empty())
    result.warnings.push_back(fmt::format(
        "the model FLOPs per second exceed the devices' peak (MFU {:.1f}%, {:.1f} TFLOP/s per GPU): the profile's "
        "times and its FLOPs cannot both be right",
        *mfu * 100, *result.utilisation.tflops_per_gpu));
  // A stage whose devices never compute (PipeDream's optimizer can make one
  // of a single 0 s layer): the devices it holds add nothing.
  std::map<int, std::pair<double, std::string>> stage_busy;
  for (const DeviceMetrics& device : result.metrics.devices) {
    if (device.stages.size() != 1) continue;
    auto& [busy, hosts] = stage_busy[device.stages.front()];
    busy += device.busy_s;
    hosts += (hosts.empty() ? "" : ", ") + device.host;
  }
  // Data parallelism with fewer micro-batches than hosts: the others idle
  // (and stay out of the all-reduce).
  if (plan.partition.num_stages() == 1 && plan.partition.hosts[0].size() > 1) {
    std::string idle;
    int count = 0;
    for (const DeviceMetrics& device : result.metrics.devices)
      if (device.busy_s == 0) {
        if (count < 6) idle += (idle.empty() ? "" : ", ") + device.host;
        ++count;
      }
    if (count > 6) idle += fmt::format(" and {} more", count - 6);
    if (count > 0)
      result.warnings.push_back(fmt::format(
          "{} of {} hosts do no compute ({}): {} micro-batches leave them without work; give --micro-batches of at "
          "least {} to use every host",
          count, plan.partition.hosts[0].size(), idle, plan.micro_batches, plan.partition.hosts[0].size()));
  }
  if (plan.partition.num_stages() > 1)
    for (const auto& [stage, busy_hosts] : stage_busy)
      if (busy_hosts.first == 0)
        result.warnings.push_back(fmt::format(
            "stage {} ({}) does no compute: its layers take 0 s there, so the pipeline would do the same with its "
            "layers merged into a neighbour on fewer devices (explore runs that partition too)",
            stage, busy_hosts.second));
  if (const auto& steady = result.metrics.steady_state; steady && !steady->periodic) {
    const std::string measured = fmt::format("the mini-batch time is {}", steady->measured_over);
    if (plan.extend_mini_batches)
      result.warnings.push_back(fmt::format(
          "no steady-state cycle confirmed within {} mini-batches (the most pipegrid simulates unasked: 16 x max(32, "
          "4 x devices), within the schedule limits); {}: an estimate, not an exact period",
          plan.mini_batches, measured));
    else
      result.warnings.push_back(fmt::format(
          "--mini-batches {}: too few to confirm a steady-state cycle; {}: an estimate, not an exact period (leave "
          "--mini-batches out to simulate until a cycle is confirmed)",
          plan.mini_batches, measured));
  }
  return result;
}

namespace {

// "3-7" per stage, in the partition file's terms (layers of the unsplit
// profile; "[:0.25]" marks the share of a split last layer a stage does).
std::vector<std::string> stage_layers_text(const Partition& partition) {
  const nlohmann::json form = nlohmann::json::parse(partition_to_json(partition));
  std::vector<std::string> texts;
  for (std::size_t s = 0; s < form.at("stages").size(); ++s) {
    const nlohmann::json& stage = form["stages"][s];
    const int first = stage.at("layers")[0].get<int>(), last = stage.at("layers")[1].get<int>();
    std::string text = first == last ? std::to_string(first) : fmt::format("{}-{}", first, last);
    if (stage.contains("split_last")) text += fmt::format("[:{:.3g}]", stage["split_last"].get<double>());
    texts.push_back(text);
  }
  return texts;
}

}  // namespace

namespace {

// "150.2 TFLOP/s per GPU (model FLOPs) on 32 GPUs: MFU 48.1%, HFU 64.2% of
// 312 TFLOP/s bf16 peak", or what is missing and why.
std::string utilisation_text(const FlopsUtilisation& u, const std::string& dtype) {
  if (!u.tflops_per_gpu) return "n/a: " + u.unavailable;
  std::string text = fmt::format("{:.4g} TFLOP/s per GPU of model FLOPs on {} GPU{}", *u.tflops_per_gpu, u.gpus,
                                 u.gpus == 1 ? "" : "s");
  if (u.mfu)
    text += fmt::format(": MFU {:.1f}%, HFU {:.1f}% of {:.4g} TFLOP/s {} peak per GPU", *u.mfu * 100, *u.hfu * 100,
                        *u.peak_flops / u.gpus / 1e12, dtype.empty() ? "fp32" : dtype);
  else
    text += fmt::format(" (MFU n/a: {})", u.unavailable);
  return text;
}

std::string stage_list_text(const std::vector<int>& stages) {
  std::string text;
  for (const int stage : stages) text += (text.empty() ? "" : ",") + std::to_string(stage);
  return text;
}

// The layers of a device's stages ("0-3", or "0-3,8-11" for several).
std::string layers_of(const std::vector<int>& stages, const std::vector<std::string>& layers) {
  std::string text;
  for (const int stage : stages)
    if (stage >= 0 && stage < static_cast<int>(layers.size())) text += (text.empty() ? "" : ",") + layers[stage];
  return text;
}

}  // namespace

int pipeline_parallel_size(const Plan& plan) { return plan.partition.num_stages() / std::max(1, plan.virtual_stages); }

std::string layout_text(const Plan& plan) {
  const int p = pipeline_parallel_size(plan);
  if (plan.context_parallel > 1)
    return fmt::format(
        "t {} x cp {} x p {} x d {} = {} GPUs{}, ranks in Megatron-Core's order (tensor fastest, then context, data, "
        "pipeline); global batch {} = micro-batch {} x {} micro-batch{} per pipeline x {} pipeline{}",
        plan.tensor_parallel, plan.context_parallel, p, plan.data_parallel,
        static_cast<long long>(plan.tensor_parallel) * plan.context_parallel * p * plan.data_parallel,
        plan.virtual_stages > 1 ? fmt::format(", {} stages per device", plan.virtual_stages) : "", plan.global_batch_size(),
        plan.profile.micro_batch_size, plan.micro_batches, plan.micro_batches == 1 ? "" : "es", plan.data_parallel,
        plan.data_parallel == 1 ? "" : "s");
  return fmt::format(
      "t {} x p {} x d {} = {} GPUs{}, ranks in Megatron-Core's order (tensor fastest, then data, then pipeline); "
      "global batch {} = micro-batch {} x {} micro-batch{} per pipeline x {} pipeline{}",
      plan.tensor_parallel, p, plan.data_parallel, static_cast<long long>(plan.tensor_parallel) * p * plan.data_parallel,
      plan.virtual_stages > 1 ? fmt::format(", {} stages per device", plan.virtual_stages) : "", plan.global_batch_size(),
      plan.profile.micro_batch_size, plan.micro_batches, plan.micro_batches == 1 ? "" : "es", plan.data_parallel,
      plan.data_parallel == 1 ? "" : "s");
}

std::string layout_to_json(const Plan& plan, const PlatformSummary& platform) {
  const int t = plan.tensor_parallel, cp = plan.context_parallel, v = plan.virtual_stages;
  const int stages = plan.partition.num_stages();
  if (!plan.program_text.empty())
    throw InputError("--layout-json: a Program read from a file places its own devices; it has no Megatron rank map");
  const int d = static_cast<int>(plan.partition.hosts.front().size());
  for (int s = 0; s < stages; ++s)
    if (static_cast<int>(plan.partition.hosts[static_cast<std::size_t>(s)].size()) != d)
      throw InputError(fmt::format("--layout-json: stages 0 and {} have {} and {} replicas; a rank map needs whole "
                                   "pipelines (--data-parallel), not stages replicated one by one (--replicas)",
                                   s, d, plan.partition.hosts[static_cast<std::size_t>(s)].size()));
  const int p = stages / v;
  const std::vector<int> device = stage_to_device(stages, v, stage_map_of(plan.schedule));
  std::vector<std::vector<int>> stages_of_device(static_cast<std::size_t>(p));
  for (int s = 0; s < stages; ++s) stages_of_device[static_cast<std::size_t>(device[static_cast<std::size_t>(s)])].push_back(s);
  const std::vector<std::string> layers = stage_layers_text(plan.partition);
  // Megatron-Core's rank generator (core/parallel_layout.hpp).
  ParallelSizes sizes;
  sizes.tp = t;
  sizes.cp = cp;
  sizes.dp = d;
  sizes.pp = p;
  sizes.ep = plan.expert_parallel;
  sizes.etp = plan.expert_tensor_parallel;
  check_parallel_sizes(sizes);
  const bool expert = plan.expert_parallel > 1;
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  std::vector<nlohmann::ordered_json> by_rank(static_cast<std::size_t>(sizes.world()));
  for (int i = 0; i < p; ++i)
    for (int q = 0; q < d; ++q) {
      const std::vector<int>& held = stages_of_device[static_cast<std::size_t>(i)];
      const std::string& leader = plan.partition.hosts[static_cast<std::size_t>(held.front())][static_cast<std::size_t>(q)];
      const int first = platform.host_index(leader);
      for (int c = 0; c < cp; ++c)
        for (int j = 0; j < t; ++j) {
          // The leader's model-parallel group: t x cp consecutive hosts, tensor fastest.
          const std::size_t host = static_cast<std::size_t>(first + j + t * c);
          if (host >= platform.hosts.size())
            throw InputError(fmt::format("--layout-json: the {}-parallel group of '{}' runs past the platform's hosts",
                                         cp > 1 ? "model" : "tensor", printable(leader)));
          const long long rank = dense_rank(sizes, j, c, q, i);
          nlohmann::ordered_json entry;
          entry["rank"] = rank;
          entry["host"] = platform.hosts[host].name;
          entry["tensor_rank"] = j;
          if (cp > 1) entry["context_rank"] = c;
          entry["data_rank"] = q;
          entry["pipeline_rank"] = i;
          if (expert) {
            const RankCoordinates coordinates = rank_coordinates(sizes, rank);
            entry["expert_rank"] = coordinates.expert;
            entry["expert_tensor_rank"] = coordinates.expert_tensor;
            entry["expert_data_rank"] = coordinates.expert_data;
          }
          entry["stages"] = held;
          entry["layers"] = layers_of(held, layers);
          by_rank[static_cast<std::size_t>(rank)] = std::move(entry);
        }
    }
  for (nlohmann::ordered_json& entry : by_rank) ranks.push_back(std::move(entry));
  // Megatron-Core's groups: ranks that differ in the group's coordinates only.
  const auto groups_of = [&](GroupKind kind) { return nlohmann::ordered_json(parallel_groups(sizes, kind)); };
  nlohmann::ordered_json document;
  document["order"] = "tp-cp-dp-pp";
  if (cp == 1 && !expert)
    document["order_note"] = "Megatron-Core's rank order (parallel_state.RankGenerator, order 'tp-cp-ep-dp-pp'): tensor "
                             "fastest, then context (1 here), data, pipeline; expert parallelism is not a factor of it";
  else
    document["order_note"] = "Megatron-Core's rank order (parallel_state.RankGenerator, order 'tp-cp-ep-dp-pp', ep 1 "
                             "for the dense ranks): tensor fastest, then context, data, pipeline; the expert ranks come "
                             "from its expert generator, the same order with cp 1 over the expert tensor size "
                             "('tp-ep-dp-pp', expert data = world / (etp x ep x pp)); dense gradients are reduced over "
                             "'data_with_context' (dp x cp)";
  document["tensor_parallel"] = t;
  if (cp > 1) document["context_parallel"] = cp;
  if (expert) {
    document["expert_parallel"] = sizes.ep;
    document["expert_tensor_parallel"] = sizes.expert_tensor();
    document["expert_data_parallel"] = sizes.expert_data();
  }
  document["pipeline_parallel"] = p;
  document["data_parallel"] = d;
  document["virtual_stages"] = v;
  document["world_size"] = sizes.world();
  document["schedule"] = plan.schedule;
  document["micro_batch_size"] = plan.profile.micro_batch_size;
  document["micro_batches_per_pipeline"] = plan.micro_batches;
  document["global_batch_size"] = plan.global_batch_size();
  document["ranks"] = ranks;
  nlohmann::ordered_json groups;
  groups["tensor"] = groups_of(GroupKind::Tensor);
  if (cp > 1) groups["context"] = groups_of(GroupKind::Context);
  groups["data"] = groups_of(GroupKind::Data);
  if (cp > 1) groups["data_with_context"] = groups_of(GroupKind::DataWithContext);
  groups["pipeline"] = groups_of(GroupKind::Pipeline);
  if (expert) {
    groups["expert"] = groups_of(GroupKind::Expert);
    groups["expert_tensor"] = groups_of(GroupKind::ExpertTensor);
    groups["expert_data"] = groups_of(GroupKind::ExpertData);
  }
  document["groups"] = groups;
  return document.dump(2) + "\n";
}

std::string metrics_to_json(const Plan& plan, const RunResult& result) {
  const Metrics& m = result.metrics;
  nlohmann::ordered_json document;
  document["schedule"] = plan.schedule;
  document["profile"] = plan.profile.name;
  document["platform"] = plan.platform_file;
  document["network"] = plan.network;
  // Present only when not the default: share runs print what they printed before.
  if (plan.transfer_rule != "share") document["transfer_rule"] = plan.transfer_rule;
  if (plan.blocking_transfers) document["blocking_transfers"] = true;
  document["stages"] = plan.partition.num_stages();
  document["micro_batches"] = plan.micro_batches;
  document["mini_batches"] = plan.mini_batches;
  document["micro_batch_size"] = plan.profile.micro_batch_size;
  if (!plan.profile.micro_batch_size_note.empty()) document["micro_batch_size_note"] = plan.profile.micro_batch_size_note;
  // Present only when set: runs without them print what they printed before.
  if (plan.micro_batch_scaling != "none") document["micro_batch_scaling"] = plan.micro_batch_scaling;
  if (!plan.micro_batch_scaling_note.empty()) document["micro_batch_scaling_note"] = plan.micro_batch_scaling_note;
  if (!plan.partitioner.empty()) document["partitioner"] = plan.partitioner;
  if (plan.virtual_stages != 1) document["virtual_stages"] = plan.virtual_stages;
  if (plan.fb_overlap != 1.0) document["fb_overlap"] = plan.fb_overlap;
  if (plan.activation_limit != 0) document["activation_limit"] = plan.activation_limit;
  if (!plan.program_notes.empty()) document["program_notes"] = plan.program_notes;
  if (!plan.device_model_notes.empty()) document["device_model_notes"] = plan.device_model_notes;
  document["recompute"] = plan.recompute;
  // Present only when set: runs without them print what they printed before.
  if (plan.layer_recompute.enabled()) {
    document["recompute_granularity"] = plan.layer_recompute.granularity;
    if (!plan.layer_recompute.method.empty()) document["recompute_method"] = plan.layer_recompute.method;
    if (plan.layer_recompute.num_layers != 0) document["recompute_num_layers"] = plan.layer_recompute.num_layers;
  }
  document["optimizer"] = plan.optimizer;
  // Present only when stated or used: fp32 runs without them print as before.
  if (!plan.dtype.empty()) {
    document["dtype"] = plan.dtype;
    if (!plan.gradient_dtype.empty()) document["gradient_dtype"] = plan.gradient_dtype;
    document["bytes_per_parameter"] = bytes_per_parameter(plan.dtype, plan.optimizer, plan.gradient_dtype).total();
  }
  if (!plan.fp8_format.empty()) document["fp8_format"] = plan.fp8_format;
  if (plan.tensor_parallel != 1) document["tensor_parallel"] = plan.tensor_parallel;
  if (plan.sequence_parallel) document["sequence_parallel"] = true;
  if (plan.tp_collectives != "compute") document["tp_collectives"] = plan.tp_collectives;
  if (!plan.tensor_parallel_note.empty()) document["tensor_parallel_note"] = plan.tensor_parallel_note;
  if (plan.context_parallel != 1) document["context_parallel"] = plan.context_parallel;
  if (!plan.context_parallel_note.empty()) document["context_parallel_note"] = plan.context_parallel_note;
  nlohmann::ordered_json replicas = nlohmann::ordered_json::array();
  for (const auto& hosts : plan.partition.hosts) replicas.push_back(hosts.size());
  document["replicas"] = replicas;
  // Present only with a layout: runs without one print what they printed before.
  if (plan.parallel_layout) {
    document["pipeline_parallel"] = pipeline_parallel_size(plan);
    document["data_parallel"] = plan.data_parallel;
    document["global_batch_size"] = plan.global_batch_size();
    document["layout"] = layout_text(plan);
  }
  if (!plan.megatron_notes.empty()) document["megatron_notes"] = plan.megatron_notes;
  document["minibatch_time_s"] = m.minibatch_time_s;
  document["mean_minibatch_span_s"] = m.mean_minibatch_span_s;
  document["throughput_samples_per_s"] = m.throughput_samples_per_s;
  document["bubble_fraction"] = m.bubble_fraction;
  document["span_bubble_fraction"] = m.span_bubble_fraction;
  document["bytes_per_sample"] = m.bytes_per_sample;
  const FlopsUtilisation& u = result.utilisation;
  auto optional_number = [](const std::optional<double>& value) {
    return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json();
  };
  document["model_flops_per_minibatch"] = optional_number(u.model_flops);
  document["gpus"] = u.gpus;
  document["tflops_per_gpu"] = optional_number(u.tflops_per_gpu);
  document["mfu"] = optional_number(u.mfu);
  document["hfu"] = optional_number(u.hfu);
  if (u.peak_fp8_flops) {  // the FP8 recipe: mfu stays against the dtype's peak
    document["peak_fp8_flops_per_gpu"] = *u.peak_fp8_flops / std::max(1, u.gpus);
    document["mfu_of_fp8_peak"] = optional_number(u.mfu_of_fp8_peak);
  }
  if (!u.unavailable.empty()) document["utilisation_note"] = u.unavailable;
  // Present only with expert parallelism: runs without it print as before.
  if (plan.expert_parallel != 1) {
    document["expert_parallel"] = plan.expert_parallel;
    if (plan.expert_tensor_parallel != 0) document["expert_tensor_parallel"] = plan.expert_tensor_parallel;
    document["all_to_all_s_per_device"] = per_device_and_mini_batch(plan, result, result.all_to_all_s);
    document["all_to_all_exposed_s_per_device"] = per_device_and_mini_batch(plan, result, result.all_to_all_exposed_s);
    document["fb_overlap_effective"] = optional_number(result.fb_overlap_effective());
  }
  if (m.steady_state) {
    const SteadyState& steady = *m.steady_state;
    document["steady_state"] = {{"periodic", steady.periodic},
                                {"period_s", steady.period_s},
                                {"cycle_minibatches", steady.cycle_minibatches},
                                {"warmup_minibatches", steady.warmup_minibatches},
                                {"warmup_s", steady.warmup_s},
                                {"steady_minibatches", steady.steady_completions},
                                {"drain_start_s", steady.drain_start_s},
                                {"window_start_s", steady.window_start_s},
                                {"window_end_s", steady.window_end_s},
                                {"measured_over", steady.measured_over}};
  }
  document["memory_override_bytes"] = plan.memory_bytes ? nlohmann::ordered_json(*plan.memory_bytes) : nlohmann::ordered_json();
  document["partition"] = nlohmann::ordered_json::parse(partition_to_json(plan.partition));
  nlohmann::ordered_json devices = nlohmann::ordered_json::array();
  const std::vector<std::string> layers = stage_layers_text(plan.partition);
  for (const DeviceMetrics& d : m.devices) {
    nlohmann::ordered_json device;
    device["host"] = d.host;
    device["stages"] = d.stages;
    device["layers"] = layers_of(d.stages, layers);
    device["busy_s"] = d.busy_s;
    device["bubble_fraction"] = d.bubble_fraction;
    device["span_bubble_fraction"] = d.span_bubble_fraction;
    device["peak_stashed_microbatches"] = d.peak_stashed_microbatches;
    device["peak_weight_versions"] = d.peak_weight_versions;
    device["peak_memory_bytes"] = d.peak_memory_bytes;
    device["memory_capacity_bytes"] = d.memory_capacity_bytes ? nlohmann::ordered_json(*d.memory_capacity_bytes) : nlohmann::ordered_json();
    device["memory_reserve_bytes"] = d.memory_reserve_bytes;
    device["oom"] = d.oom;
    devices.push_back(device);
  }
  document["devices"] = devices;
  document["warnings"] = result.warnings;
  return document.dump(2) + "\n";
}

namespace {

/// The optimizer step's line, where GPU hosts' device models time it; empty otherwise.
std::string optimizer_step_text(const Plan& plan, const PlatformSummary& platform) {
  std::vector<std::string> models;
  for (const HostInfo& host : platform.hosts)
    if (gpu_device_model(host) != nullptr && std::find(models.begin(), models.end(), host.device_model) == models.end())
      models.push_back(host.device_model);
  if (models.empty() || device_step_bytes_per_weight_byte(plan) <= 0) return "";
  const std::string& dtype = plan.dtype;
  const double element = dtype_bytes(dtype, "--dtype");
  const double fp8_cast = device_step_bytes_per_weight_byte(plan) * element - optimizer_step_bytes_per_parameter(dtype, plan.optimizer);
  return fmt::format("  optimizer step    {} over {} weights: {:g} bytes moved per parameter{}, streamed at {:.0f}% of the {} "
                     "HBM bandwidth (device model; a host's optimizer_step_rate overrides it)\n",
                     plan.optimizer, dtype, optimizer_step_bytes_per_parameter(dtype, plan.optimizer),
                     plan.fp8_format.empty()
                         ? std::string()
                         : fmt::format(", + {:.3g} for the FP8 weights' cast and transpose once per mini-batch ({:g} per "
                                       "FP8-GEMM parameter, averaged over all)",
                                       fp8_cast, fp8_weight_cast_bytes_per_parameter(element)),
                     100 * kMaxMemoryEfficiency, fmt::join(models, ", "));
}

// How a layout's pipelines synchronise gradients (docs/semantics.md,
// "Gradient synchronisation"), and the optimizer step's time.
std::string gradient_sync_text(const Plan& plan, const PlatformSummary& platform) {
  if (plan.context_parallel > 1 && plan.data_parallel == 1)
    return fmt::format("over cp {} (Megatron's dp x cp group): not simulated at d 1; the pipeline runs on the groups' "
                       "leaders only (docs/semantics.md, Context parallelism)",
                       plan.context_parallel);
  std::string text = plan.context_parallel > 1
                         ? fmt::format("over d {} x cp {} (Megatron's dp x cp group; the ring runs over the d leaders, "
                                       "its bytes x {:.4g} so each sends what a rank of the d x cp ring sends): ",
                                       plan.data_parallel, plan.context_parallel,
                                       data_context_gradient_factor(plan.data_parallel, plan.context_parallel))
                         : fmt::format("over d {}: ", plan.data_parallel);
  text += plan.overlap_grad_reduce
                         ? fmt::format("during the backward (--overlap-grad-reduce; the first stage in buckets of {} "
                                       "parameters)",
                                       plan.ddp_bucket_parameters())
                         : "after the backward";
  text += plan.distributed_optimizer
              ? fmt::format("; distributed optimizer: reduce-scatter, step on 1/{} of the parameters, all-gather{}",
                            plan.data_parallel, plan.overlap_param_gather ? " overlapped with the next forward" : "")
              : ", all-reduce";
  if (!plan.gradient_dtype.empty() && !plan.dtype.empty() && plan.gradient_dtype != plan.dtype)
    text += fmt::format("; gradients reduced in {} ({:g} x the {} weights' bytes)", plan.gradient_dtype,
                        static_cast<double>(dtype_bytes(plan.gradient_dtype, "--gradient-dtype")) /
                            dtype_bytes(plan.dtype, "--dtype"),
                        plan.dtype);
  text += fmt::format("; ring collectives as {}", plan.collective_model);
  const bool stepped = std::any_of(platform.hosts.begin(), platform.hosts.end(),
                                   [](const HostInfo& host) { return host.has_optimizer_step(); });
  if (!stepped)
    text += "; the optimizer step takes 0 s (no host declares optimizer_step_rate or optimizer_step_overhead; "
            "docs/platforms.md)";
  return text;
}

}  // namespace

std::string timeline_svg_of_run(const Plan& plan, const RunResult& result) {
  SvgOptions options;
  const std::string platform_name = plan.platform_file.substr(plan.platform_file.find_last_of('/') + 1);
  std::string shape = fmt::format("M={}, {} stages", plan.micro_batches, plan.partition.num_stages());
  if (!plan_schedule_info(plan).flushed) shape = fmt::format("{} mini-batches, {} stages", plan.mini_batches, plan.partition.num_stages());
  std::string replicas;
  for (const auto& hosts : plan.partition.hosts) replicas += (replicas.empty() ? "" : "-") + std::to_string(hosts.size());
  if (std::any_of(plan.partition.hosts.begin(), plan.partition.hosts.end(), [](const auto& h) { return h.size() > 1; }))
    shape += ", replicas " + replicas;
  options.title = fmt::format("{}: {} on {} ({})", plan.schedule, plan.profile.name, platform_name, shape);
  for (const DeviceMetrics& device : result.metrics.devices)
    if (device.memory_capacity_bytes) {
      options.memory_capacity_bytes[device.host] = *device.memory_capacity_bytes;
      options.memory_reserve_bytes[device.host] = device.memory_reserve_bytes;
    }
  options.tensor_parallel = plan.tensor_parallel;
  options.context_parallel = plan.context_parallel;
  return timeline_to_svg(result.timeline, options);
}

std::string metrics_to_table(const Plan& plan, const RunResult& result) {
  const Metrics& m = result.metrics;
  std::string text = fmt::format(
      "{} on {} ({} stages), profile {} ({} layers, micro-batch {}), M={}{}, network {}{}\n", plan.schedule,
      plan.platform_file, plan.partition.num_stages(), plan.profile.name, plan.profile.layers.size(),
      plan.profile.micro_batch_size, plan.micro_batches,
      plan.mini_batches > 1 ? fmt::format(", {} mini-batches", plan.mini_batches) : "", plan.network,
      plan.transfer_rule != "share" ? fmt::format(", transfer rule {}", plan.transfer_rule) : "");
  if (!plan.profile.micro_batch_size_note.empty())
    text += fmt::format("  micro-batch size  {}\n", plan.profile.micro_batch_size_note);
  if (!plan.micro_batch_scaling_note.empty())
    text += fmt::format("  scaling           {} (--micro-batch-scaling {})\n", plan.micro_batch_scaling_note, plan.micro_batch_scaling);
  if (!plan.partitioner.empty())
    text += fmt::format("  partitioner       {}\n", plan.partitioner);
  if (plan.blocking_transfers)
    text += "  transfers         blocking: each send holds its device until it has arrived (Megatron's non-overlapped p2p)\n";
  for (const std::string& note : plan.program_notes) text += fmt::format("  program           {}\n", note);
  for (const std::string& note : plan.device_model_notes) text += fmt::format("  device model      {}\n", note);
  if (!plan.dtype.empty()) {
    const ParameterBytes bytes = bytes_per_parameter(plan.dtype, plan.optimizer, plan.gradient_dtype);
    const double step_copy = step_gradient_copy_bytes_per_parameter(plan.dtype, plan.gradient_dtype);
    text += fmt::format("  precision         {}, {}{}: {} bytes per parameter (weights {} + gradients {}{}{} + optimizer {}){}\n",
                        plan.dtype, plan.optimizer, plan.optimizer_note.empty() ? "" : " (" + plan.optimizer_note + ")",
                        bytes.total(), bytes.weights, bytes.gradients,
                        plan.gradient_dtype.empty() ? "" : " (" + plan.gradient_dtype + ")",
                        bytes.master_weights ? fmt::format(" + fp32 master {}", bytes.master_weights) : "", bytes.optimizer,
                        step_copy > 0 && !plan.distributed_optimizer
                            ? fmt::format("; {:g} during the optimizer step, with its fp32 copy of the gradients",
                                          bytes.total() + step_copy)
                            : "");
  }
  if (plan.distributed_optimizer) {
    const int shards = plan.data_parallel * plan.context_parallel;  // Megatron shards over dp x cp
    const double step_copy = step_gradient_copy_bytes_per_parameter(plan.dtype, plan.gradient_dtype, shards);
    text += fmt::format("  distributed opt.  {:.4g} bytes per parameter over {}: weights and gradients whole, the fp32 master "
                        "weights and optimizer state split {} ways{} (Megatron-LM's distributed-optimizer table)\n",
                        distributed_bytes_per_parameter(plan.dtype, plan.optimizer, plan.gradient_dtype, shards),
                        plan.context_parallel > 1 ? fmt::format("d {} x cp {}", plan.data_parallel, plan.context_parallel)
                                                  : fmt::format("d {}", plan.data_parallel),
                        plan.context_parallel > 1 ? std::string("d x cp") : std::string("d"),
                        step_copy > 0 ? fmt::format("; {:.4g} during the step, with its shard of fp32 gradient copies",
                                                    distributed_bytes_per_parameter(plan.dtype, plan.optimizer,
                                                                                    plan.gradient_dtype, shards) +
                                                        step_copy)
                                      : "");
  }
  if (!plan.fp8_format.empty())
    text += fmt::format("  fp8               {} recipe on {} ({}): the blocks' linear GEMMs in FP8, attention, embedding "
                        "and head in {}; Transformer Engine's FP8 weights and transposes, {:g} bytes per such parameter, "
                        "cached for the run; their saved inputs in FP8 (docs/semantics.md, FP8)\n",
                        plan.fp8_format, plan.dtype,
                        plan.fp8_format == "hybrid" ? "E4M3 forward, E5M2 gradients" : "E4M3 throughout", plan.dtype,
                        kFp8WeightCacheBytesPerParameter);
  if (plan.layer_recompute.enabled())
    text += fmt::format("  recompute         {}\n", layer_recompute_text(plan.layer_recompute));
  if (!plan.tensor_parallel_note.empty()) text += fmt::format("  {}\n", plan.tensor_parallel_note);
  if (plan.expert_parallel != 1) text += fmt::format("  experts           {}\n", expert_parallel_text(plan, result));
  if (!plan.context_parallel_note.empty()) text += fmt::format("  {}\n", plan.context_parallel_note);
  for (const std::string& note : plan.megatron_notes) text += fmt::format("  megatron          {}\n", note);
  if (plan.parallel_layout) text += fmt::format("  layout            {}\n", layout_text(plan));
  if (plan.parallel_layout && (plan.data_parallel > 1 || plan.context_parallel > 1)) text += fmt::format("  gradient sync     {}\n", gradient_sync_text(plan, result.platform));
  text += optimizer_step_text(plan, result.platform);
  if (const auto tied = tied_embedding_of(plan, result.program)) {
    // At d = 1 the engine runs the all-reduce per mini-batch of a flushed
    // Program only (sim/engine.hpp, SimulationRequest::tied_embedding).
    const bool simulated = std::any_of(result.timeline.records.begin(), result.timeline.records.end(),
                                       [](const TimelineRecord& r) { return r.action == "ALLREDUCE" && r.micro_batch == -2; });
    text += fmt::format("  tied embedding    stage {} keeps a copy of stage {}'s word table ({}), as Megatron-LM does; {}\n",
                        tied->last_stage, tied->first_stage, human_bytes(tied->word_bytes),
                        plan.data_parallel > 1 ? "their gradients are all-reduced between the two after the data-parallel "
                                                 "synchronisation, before the optimizer step"
                        : simulated ? "their gradients are all-reduced between the two after each mini-batch's last "
                                      "backward of those stages, before the optimizer step"
                                    : fmt::format("the all-reduce of their gradients is not simulated: {} updates the "
                                                  "weights without a flush after each mini-batch",
                                                  plan.schedule));
  }
  if (m.steady_state) {
    const SteadyState& steady = *m.steady_state;
    text += fmt::format("  mini-batch time   {} (steady-state period: {})\n", human_seconds(m.minibatch_time_s), steady.measured_over);
    if (steady.periodic)
      text += fmt::format("  warm-up           {} to the first steady-state completion ({} mini-batches completed before)\n",
                          human_seconds(steady.warmup_s), steady.warmup_minibatches);
    text += fmt::format("  mean span         {} per mini-batch over the whole run, warm-up and drain included\n",
                        human_seconds(m.mean_minibatch_span_s));
  } else {
    text += fmt::format("  mini-batch time   {}\n", human_seconds(m.minibatch_time_s));
  }
  text += fmt::format("  throughput        {:.4g} samples/s\n", m.throughput_samples_per_s);
  text += fmt::format("  bubble fraction   {:.4f}{}\n", m.bubble_fraction, m.steady_state ? " (inside the steady-state window)" : "");
  text += fmt::format("  span bubble       {:.4f} (per device: idle share from its first start to its last end)\n",
                      m.span_bubble_fraction);
  text += fmt::format("  traffic           {} per sample\n", human_bytes(m.bytes_per_sample));
  text += "  utilisation       " + utilisation_text(result.utilisation, plan.dtype) + "\n";
  if (const FlopsUtilisation& u = result.utilisation; u.peak_fp8_flops && u.mfu_of_fp8_peak)
    text += fmt::format("  fp8 peak          {:.1f}% of the {:.4g} TFLOP/s dense FP8 peak per GPU (the MFU above is against "
                        "the {} dense peak)\n",
                        *u.mfu_of_fp8_peak * 100, *u.peak_fp8_flops / u.gpus / 1e12, plan.dtype);
  if (plan.memory_bytes) text += fmt::format("  memory            {} per device (--memory)\n", human_bytes(*plan.memory_bytes));
  const std::vector<std::string> layers = stage_layers_text(plan.partition);
  std::size_t layers_width = 6;
  for (const std::string& l : layers) layers_width = std::max(layers_width, l.size());
  std::size_t stages_width = 5;
  for (const DeviceMetrics& d : m.devices) {
    stages_width = std::max(stages_width, stage_list_text(d.stages).size());
    layers_width = std::max(layers_width, layers_of(d.stages, layers).size());
  }
  // The reserve column only where a host holds memory back (platform
  // property memory_reserve): out of memory is then peak > capacity - reserve.
  const bool reserved = std::any_of(m.devices.begin(), m.devices.end(),
                                    [](const DeviceMetrics& d) { return d.memory_reserve_bytes > 0; });
  text += fmt::format("  {:<16} {:>{}} {:<{}} {:>12} {:>7} {:>6} {:>8} {:>12} {:>12}{}\n", "host", "stage", stages_width, "layers",
                      layers_width, "busy", "bubble", "stash", "versions", "peak memory", "capacity",
                      reserved ? fmt::format(" {:>12}", "reserve") : "");
  for (const DeviceMetrics& d : m.devices)
    text += fmt::format("  {:<16} {:>{}} {:<{}} {:>12} {:>7.4f} {:>6} {:>8} {:>12} {:>12}{}{}\n", d.host, stage_list_text(d.stages),
                        stages_width, layers_of(d.stages, layers), layers_width,
                        human_seconds(d.busy_s), d.bubble_fraction, d.peak_stashed_microbatches, d.peak_weight_versions,
                        human_bytes(d.peak_memory_bytes), d.memory_capacity_bytes ? human_bytes(*d.memory_capacity_bytes) : "unlimited",
                        reserved ? fmt::format(" {:>12}", human_bytes(d.memory_reserve_bytes)) : "",
                        d.oom ? reserved ? fmt::format("  OUT OF MEMORY (above capacity - reserve, {})",
                                                       human_bytes(*d.memory_capacity_bytes - d.memory_reserve_bytes))
                                         : std::string("  OUT OF MEMORY")
                              : std::string());
  for (const std::string& warning : result.warnings) text += fmt::format("  warning: {}\n", warning);
  return text;
}

}  // namespace pipegrid::api
