#include "api/planner.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/simulation.hpp"
#include "core/child_pool.hpp"
#include "core/device_model.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/platform_check.hpp"
#include "core/precision.hpp"
#include "core/recompute.hpp"
#include "core/program.hpp"
#include "generators/model_generators.hpp"
#include "layout/megatron_args.hpp"
#include "schedules/schedules.hpp"
#include "sim/engine.hpp"

namespace pipegrid::api {

std::string PlannedLayout::label() const {
  std::string text = fmt::format("t{} p{} d{}", tensor_parallel, pipeline_parallel, data_parallel);
  if (virtual_stages > 1) text += fmt::format(" v{}", virtual_stages);
  text += fmt::format(" mbs{}", micro_batch_size);
  if (recompute != "none") text += " " + recompute;
  if (sequence_parallel) text += " sp";
  if (distributed_optimizer) text += " distopt";
  return text;
}

namespace {

using Clock = std::chrono::steady_clock;

// The arguments plan chooses: a base launch that gives one of them is refused.
const std::vector<std::string>& chosen_arguments() {
  static const std::vector<std::string> names = {
      "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
      "--num-virtual-stages-per-pipeline-rank", "--micro-batch-size", "--recompute-granularity", "--recompute-method",
      "--recompute-num-layers", "--recompute-activations", "--sequence-parallel", "--use-distributed-optimizer",
      "--overlap-grad-reduce", "--overlap-param-gather", "--decoder-first-pipeline-num-layers",
      "--decoder-last-pipeline-num-layers"};
  return names;
}

// The words of the arguments, split at whitespace (quotes kept: enough to
// find an argument's name, which read_megatron_args then reads properly).
std::vector<std::string> words_of(const std::string& text) {
  std::istringstream stream(text);
  std::vector<std::string> words;
  for (std::string word; stream >> word;) words.push_back(word);
  return words;
}

std::vector<int> divisors(long long n, long long at_most) {
  std::vector<int> found;
  for (long long k = 1; k <= std::min(n, at_most); ++k)
    if (n % k == 0) found.push_back(static_cast<int>(k));
  return found;
}

bool allowed(const std::vector<int>& filter, int value) {
  return filter.empty() || std::find(filter.begin(), filter.end(), value) != filter.end();
}

std::string layout_arguments(const PlannedLayout& layout, int layers, long long global_batch, bool overlap_grad_reduce) {
  std::string text = fmt::format(" --tensor-model-parallel-size {} --pipeline-model-parallel-size {}",
                                 layout.tensor_parallel, layout.pipeline_parallel);
  if (layout.virtual_stages > 1)
    text += fmt::format(" --num-layers-per-virtual-pipeline-stage {}",
                        layers / (layout.pipeline_parallel * layout.virtual_stages));
  text += fmt::format(" --micro-batch-size {} --global-batch-size {}", layout.micro_batch_size, global_batch);
  if (layout.recompute == "selective") text += " --recompute-activations";
  if (layout.recompute == "full")
    text += " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  if (layout.sequence_parallel) text += " --sequence-parallel";
  if (layout.distributed_optimizer) text += " --use-distributed-optimizer";
  if (overlap_grad_reduce && layout.data_parallel > 1) {
    text += " --overlap-grad-reduce";
    if (layout.distributed_optimizer) text += " --overlap-param-gather";
  }
  return text;
}

// Per stage, on the platform's GPU: what one micro-batch costs.
struct StageTimes {
  double forward_s = 0, backward_s = 0, recompute_s = 0;
  double weight_bytes = 0;
  double input_bytes = 0, output_bytes = 0;  ///< what its F receives, what its B receives
  double kept_bytes = 0;  ///< held from the start of its F to the end of its backward
};

// Per pipeline rank: the stages it holds, in the order a chunk is numbered.
struct StageModel {
  std::vector<StageTimes> stages;
  std::vector<int> first_layer;  ///< per stage: its first layer (checked against the simulated plan's)
};

// What the candidates sharing (t, micro-batch size, sp, recompute) share:
// the per-member profile and the plan's precision and recomputation.
struct ProfileKey {
  int tensor_parallel, micro_batch_size;
  bool sequence_parallel;
  std::string recompute;
  auto operator<=>(const ProfileKey&) const = default;
};

struct ProfileEntry {
  std::optional<Plan> plan;  ///< absent: make_plan refused the key (error says why)
  std::string error;
};

struct Candidate {
  PlannedLayout layout;
  double bound_time_s = 0, bound_memory_bytes = 0;
  const StageModel* stages = nullptr;
  const Plan* shape = nullptr;
  const Program* program = nullptr;  ///< one pipeline's, for the dependency bound
  bool refined = false;              ///< bound_time_s includes the dependency bound
  HostInfo gpu;  ///< with the optimizer step its device model implies
};

// What the memory bound takes from a schedule's one-pipeline Program, per
// device (pipeline rank): the stages of the forwards before its first
// backward. At the start of that backward every one of them holds its
// stash, and none has been freed.
struct RankSchedule {
  std::vector<int> held;
};

struct ScheduleFacts {
  Program program;  ///< one pipeline's
  std::vector<RankSchedule> ranks;
};

std::vector<RankSchedule> rank_schedules(const Program& program) {
  std::vector<RankSchedule> ranks(program.devices.size());
  for (std::size_t d = 0; d < program.devices.size(); ++d)
    for (const Stream& stream : program.devices[d].streams)
      for (const Action& action : stream.actions) {
        if (action.kind != ActionKind::Forward) break;
        ranks[d].held.push_back(action.stage);
      }
  return ranks;
}

// What the bounds know of a route: its narrowest link, its links' latency,
// and NCCL's values on it (the smallest efficiency, the largest start
// latency of its links), as the engine applies them.
struct RouteFacts {
  double bandwidth_Bps = 0, latency_s = 0, nccl_efficiency = 1, nccl_latency_s = 0;
  /// Least seconds of one flow of `bytes` over it: SimGrid takes at least
  /// the latency plus bytes at the narrowest link's bandwidth.
  double flow_s(double bytes) const { return bandwidth_Bps > 0 ? latency_s + bytes / bandwidth_Bps : 0; }
};
struct RingRates {
  RouteFacts intra, inter;  ///< inside a server; into another server
};

// A ring collective's least time on the platform (docs/planner.md): NCCL's
// start latency once, then each participant's flow carries k S / r bytes
// divided by the ring's efficiency (the least over its hops) to the next
// (k = 2 (r - 1) for an all-reduce, r - 1 for a reduce-scatter or an
// all-gather); a step into another server spreads over at most
// `members_per_server` rails. Contention only adds to it.
double ring_least_s(double bytes, int participants, int steps, int members_per_server, bool crosses_servers,
                    const RingRates& rates) {
  if (participants <= 1 || bytes <= 0) return 0;
  const bool inside = members_per_server > 1;
  double efficiency = 1, latency = 0;
  if (inside) efficiency = std::min(efficiency, rates.intra.nccl_efficiency), latency = std::max(latency, rates.intra.nccl_latency_s);
  if (crosses_servers)
    efficiency = std::min(efficiency, rates.inter.nccl_efficiency), latency = std::max(latency, rates.inter.nccl_latency_s);
  const double flow = steps * bytes / participants / efficiency;
  double least = 0;
  if (inside) least = rates.intra.flow_s(flow);
  if (crosses_servers) least = std::max(least, rates.inter.flow_s(flow / members_per_server));
  return latency + least;
}

// The lower bounds of one candidate (docs/planner.md, "Bounds"): its time
// and its peak memory on the busiest rank.
struct Bounds {
  double time_s = 0, memory_bytes = 0;
};

// The closed forms (docs/planner.md, "Bounds"); the communication of data
// parallelism is left to the dependency bound, which refines this one
// before a layout is simulated.
Bounds candidate_bounds(const PlannedLayout& layout, const StageModel& model, const Plan& shape,
                        const std::vector<RankSchedule>& schedule, const HostInfo& gpu) {
  const int p = layout.pipeline_parallel, v = layout.virtual_stages, m = layout.micro_batches;
  const int stages = p * v;
  Bounds bounds;
  // Time: rank r cannot start before micro-batch 1's forward has crossed
  // stages 0..r-1 (fill), then runs m (F + R + B) of each of its stages
  // (work), and the optimizer step of each (steps): its host's compute runs
  // one execution at a time at full speed, or shares its speed among them.
  // After its last backward (of a stage s >= r) the gradient still crosses
  // stages s-1..0, each a recompute and a backward (drain). Each F and B
  // pays the host's action overhead (R's is left out: a lower bound). Without
  // all-reduces (d = 1) the steps run on the compute stream right after
  // each stage's last backward: only the step of the stage whose backward
  // ends last, stage r, can overlap the drain.
  std::vector<double> fill(stages + 1, 0), drain(stages + 1, 0);
  const double overhead = gpu.action_overhead_s;
  for (int s = 0; s < stages; ++s) {
    const StageTimes& stage = model.stages[static_cast<std::size_t>(s)];
    fill[s + 1] = fill[s] + stage.forward_s + overhead;
    drain[s + 1] = drain[s] + stage.backward_s + overhead + stage.recompute_s;
  }
  const double resident = resident_weight_factor(shape.dtype, shape.optimizer, shape.gradient_dtype,
                                                 layout.distributed_optimizer ? layout.data_parallel : 0);
  const double step_extra =
      step_gradient_copy_bytes_per_parameter(shape.dtype, shape.gradient_dtype,
                                             layout.distributed_optimizer ? layout.data_parallel : 0) /
      dtype_bytes(shape.dtype, "--dtype");
  for (int r = 0; r < p; ++r) {
    double work = 0, weights = 0, steps = 0, first_chunk_step = 0;
    for (int chunk = 0; chunk < v; ++chunk) {
      const StageTimes& stage = model.stages[static_cast<std::size_t>(r + chunk * p)];
      work += m * (stage.forward_s + stage.backward_s + 2 * overhead + stage.recompute_s);
      weights += stage.weight_bytes;
      const double step =
          gpu.has_optimizer_step()
              ? gpu.optimizer_step_s(stage.weight_bytes / (layout.distributed_optimizer ? layout.data_parallel : 1))
              : 0;
      // Without data parallelism, the first and the last stage (of a
      // pipeline of several) may share a tied word table: their steps then
      // run after its all-reduce, beside the compute stream (sim/engine.cpp,
      // lone tied syncs). Those steps count only where the stage ends the
      // rank's work (chunk 0).
      const int stage_index = r + chunk * p;
      const bool beside = layout.data_parallel == 1 && stages > 1 && stage_index == stages - 1 && chunk > 0;
      if (!beside) steps += step;
      if (chunk == 0) first_chunk_step = step;
    }
    const double tail = layout.data_parallel == 1 ? steps - first_chunk_step + std::max(drain[r], first_chunk_step)
                                                  : std::max(drain[r], steps);
    bounds.time_s = std::max(bounds.time_s, fill[r] + work + tail);
    double activations = 0;
    for (const int stage : schedule[static_cast<std::size_t>(r)].held) activations += model.stages[static_cast<std::size_t>(stage)].kept_bytes;
    bounds.memory_bytes = std::max(bounds.memory_bytes, resident * weights + std::max(activations, step_extra * weights));
  }
  return bounds;
}

// The contention-free schedule (docs/planner.md, "The dependency bound"):
// every device runs its Program's actions in order, each no earlier than
// its inputs (a forward's activation, a backward's and a recompute's
// gradient) have crossed from another device at the route's narrowest link
// bandwidth, for exactly its own time; the optimizer steps follow each
// stage's last backward (d = 1), or each device's communication stream runs
// its stages' reductions, steps and all-gathers at their least times in the
// order their last backwards end (which no other order beats). SimGrid's
// runs share links, devices and bandwidth, add latencies and NCCL's
// efficiency: each only delays, so this end is a lower bound.
double dependency_bound(const Candidate& candidate, const Program& program, int gpus_per_server, const RingRates& rates,
                        bool overlap_grad_reduce) {
  const PlannedLayout& layout = candidate.layout;
  const StageModel& model = *candidate.stages;
  const HostInfo& gpu = candidate.gpu;
  const int stages = program.num_stages, m = program.micro_batches;
  const int p = layout.pipeline_parallel, t = layout.tensor_parallel, d = layout.data_parallel;
  const std::vector<int> device_of = stage_to_device(stages, layout.virtual_stages, stage_map_of(layout.schedule));
  // Pipeline rank r's first host: t (d r) in Megatron-Core's order.
  const auto server_of = [&](int rank) { return static_cast<long long>(t) * d * rank / gpus_per_server; };
  const auto transfer_s = [&](int from_stage, int to_stage, double bytes) {
    const int a = device_of[static_cast<std::size_t>(from_stage)], b = device_of[static_cast<std::size_t>(to_stage)];
    if (a == b || bytes <= 0) return 0.0;
    // The engine sends bytes / efficiency; the receiver has it one NCCL
    // start latency after the flow's end.
    const RouteFacts& route = server_of(a) == server_of(b) ? rates.intra : rates.inter;
    return route.bandwidth_Bps > 0 ? route.flow_s(bytes / route.nccl_efficiency) + route.nccl_latency_s : 0.0;
  };
  const double overhead = gpu.action_overhead_s;
  const double inf = std::numeric_limits<double>::infinity();
  const auto at = [&](int stage, int micro) { return static_cast<std::size_t>(stage) * m + static_cast<std::size_t>(micro); };
  std::vector<double> forward_end(static_cast<std::size_t>(stages) * m, inf), backward_end(forward_end);
  std::vector<double> last_backward_start(static_cast<std::size_t>(stages), 0), last_backward_end(last_backward_start);
  std::vector<int> backwards_left(static_cast<std::size_t>(stages), m);
  std::vector<std::size_t> next(program.devices.size(), 0);
  std::vector<double> free(program.devices.size(), 0);
  double tied_step_end = 0;
  std::size_t left = 0;
  for (const DeviceProgram& device : program.devices) {
    if (device.streams.size() != 1) return 0;  // not a one-stream schedule: no dependency bound
    left += device.streams.front().actions.size();
  }
  while (left > 0) {
    bool progressed = false;
    for (std::size_t dv = 0; dv < program.devices.size(); ++dv) {
      const std::vector<Action>& actions = program.devices[dv].streams.front().actions;
      while (next[dv] < actions.size()) {
        const Action& a = actions[next[dv]];
        const StageTimes& stage = model.stages[static_cast<std::size_t>(a.stage)];
        double ready = free[dv], duration = 0;
        if (a.kind == ActionKind::Forward) {
          if (a.stage > 0) {
            const double input = forward_end[at(a.stage - 1, a.micro_batch)];
            if (input == inf) break;
            ready = std::max(ready, input + transfer_s(a.stage - 1, a.stage, stage.input_bytes));
          }
          duration = stage.forward_s + overhead;
        } else if (a.kind == ActionKind::Recompute || a.kind == ActionKind::Backward) {
          if (a.stage + 1 < stages) {
            const double gradient = backward_end[at(a.stage + 1, a.micro_batch)];
            if (gradient == inf) break;
            ready = std::max(ready, gradient + transfer_s(a.stage + 1, a.stage, stage.output_bytes));
          }
          duration = a.kind == ActionKind::Recompute ? stage.recompute_s : stage.backward_s + overhead;
        } else {
          return 0;  // split backwards: not bounded here
        }
        const double end = ready + duration;
        free[dv] = end;
        if (a.kind == ActionKind::Forward) forward_end[at(a.stage, a.micro_batch)] = end;
        if (a.kind == ActionKind::Backward) {
          backward_end[at(a.stage, a.micro_batch)] = end;
          if (--backwards_left[static_cast<std::size_t>(a.stage)] == 0) {
            last_backward_start[static_cast<std::size_t>(a.stage)] = ready;
            last_backward_end[static_cast<std::size_t>(a.stage)] = end;
            // Without data parallelism the step runs here, on the compute
            // stream; the first and the last stage's (a tied word table's
            // all-reduce may come first) run beside it, after this end.
            if (d == 1 && gpu.has_optimizer_step()) {
              const double step = gpu.optimizer_step_s(stage.weight_bytes);
              if (stages > 1 && (a.stage == 0 || a.stage == stages - 1)) tied_step_end = std::max(tied_step_end, end + step);
              else free[dv] += step;
            }
          }
        }
        ++next[dv];
        --left;
        progressed = true;
      }
    }
    if (!progressed) return 0;  // a dependency the rule above does not see: no bound
  }
  double end = tied_step_end;
  for (const double f : free) end = std::max(end, f);
  if (d > 1) {
    const int members = std::max(1, std::min(d, gpus_per_server / t));
    const bool crosses = static_cast<long long>(d) * t > gpus_per_server;
    const Plan& shape = *candidate.shape;
    const double gradient_factor =
        shape.gradient_dtype.empty()
            ? 1.0
            : static_cast<double>(dtype_bytes(shape.gradient_dtype, "--gradient-dtype")) / dtype_bytes(shape.dtype, "--dtype");
    for (int rank = 0; rank < p; ++rank) {
      std::vector<std::pair<double, int>> order;
      for (int s = rank; s < stages; s += p) order.emplace_back(last_backward_end[static_cast<std::size_t>(s)], s);
      std::sort(order.begin(), order.end());
      double stream = 0;
      for (const auto& [ready, s] : order) {
        const StageTimes& stage = model.stages[static_cast<std::size_t>(s)];
        const double gradients = stage.weight_bytes * gradient_factor;
        const double reduce = layout.distributed_optimizer ? ring_least_s(gradients, d, d - 1, members, crosses, rates)
                                                           : ring_least_s(gradients, d, 2 * (d - 1), members, crosses, rates);
        const double gather =
            layout.distributed_optimizer ? ring_least_s(stage.weight_bytes, d, d - 1, members, crosses, rates) : 0;
        const double step =
            gpu.has_optimizer_step() ? gpu.optimizer_step_s(stage.weight_bytes / (layout.distributed_optimizer ? d : 1)) : 0;
        // With --overlap-grad-reduce the reduction may start with the last
        // backward; it cannot end before that backward has.
        stream = overlap_grad_reduce
                     ? std::max(std::max(stream, last_backward_start[static_cast<std::size_t>(s)]) + reduce, ready)
                     : std::max(stream, ready) + reduce;
        stream += step + gather;
      }
      end = std::max(end, stream);
    }
  }
  return end;
}

StageModel stage_model(const Plan& shape, const MegatronLaunch& base, int p, int v, const HostInfo& gpu) {
  const int stages = p * v;
  std::vector<std::string> stage_hosts(static_cast<std::size_t>(stages));
  const std::vector<int> device = stage_to_device(stages, v, stage_map_of(megatron_schedule(v)));
  for (int s = 0; s < stages; ++s) stage_hosts[static_cast<std::size_t>(s)] = fmt::format("rank{}", device[static_cast<std::size_t>(s)]);
  const Partition partition =
      megatron_partition(shape.profile, stage_hosts, stages, v, device, std::nullopt, std::nullopt,
                         base.embedding_in_pipeline_split, base.loss_in_pipeline_split);
  const std::vector<StageCost> costs = stage_costs(shape.profile, partition);
  std::vector<StageRecompute> recompute;
  if (shape.layer_recompute.enabled())
    recompute = stage_recompute(shape.profile, partition, shape.layer_recompute,
                                shape.sequence_parallel ? 1 : shape.tensor_parallel);
  StageModel model;
  model.stages.resize(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    StageTimes& times = model.stages[static_cast<std::size_t>(s)];
    const StageCost& cost = costs[static_cast<std::size_t>(s)];
    model.first_layer.push_back(cost.first_layer);
    for (int l = cost.first_layer; l <= cost.last_layer; ++l) {
      const LayerTimes on_gpu = layer_times_on(shape.profile.layers[static_cast<std::size_t>(l)], gpu);
      times.forward_s += on_gpu.forward_s;
      times.backward_s += on_gpu.backward_s;
      if (!recompute.empty())
        times.recompute_s += recompute[static_cast<std::size_t>(s)].layer_share[static_cast<std::size_t>(l - cost.first_layer)] *
                             on_gpu.forward_s;
    }
    times.weight_bytes = cost.weight_bytes;
    times.input_bytes = cost.input_bytes;
    times.output_bytes = cost.output_bytes;
    times.kept_bytes = recompute.empty() ? cost.stash_bytes : recompute[static_cast<std::size_t>(s)].kept_bytes;
  }
  return model;
}

nlohmann::json simulated_to_json(const SimulatedLayout& s) {
  nlohmann::json j;
  const PlannedLayout& l = s.layout;
  j["layout"] = l.label();
  j["tensor_parallel"] = l.tensor_parallel;
  j["pipeline_parallel"] = l.pipeline_parallel;
  j["data_parallel"] = l.data_parallel;
  j["virtual_stages"] = l.virtual_stages;
  j["micro_batch_size"] = l.micro_batch_size;
  j["micro_batches"] = l.micro_batches;
  j["schedule"] = l.schedule;
  j["recompute"] = l.recompute;
  j["sequence_parallel"] = l.sequence_parallel;
  j["distributed_optimizer"] = l.distributed_optimizer;
  j["megatron_args"] = s.megatron_args;
  j["bound_time_s"] = s.bound_time_s;
  j["bound_memory_bytes"] = s.bound_memory_bytes;
  if (!s.error.empty()) {
    j["error"] = s.error;
    return j;
  }
  j["iteration_time_s"] = s.iteration_time_s;
  j["throughput_samples_per_s"] = s.throughput_samples_per_s;
  j["peak_memory_bytes"] = s.peak_memory_bytes;
  j["peak_memory_host"] = s.peak_memory_host;
  j["fits"] = s.fits;
  j["bubble_fraction"] = s.bubble_fraction;
  j["tflops_per_gpu"] = s.tflops_per_gpu ? nlohmann::json(*s.tflops_per_gpu) : nlohmann::json();
  j["mfu"] = s.mfu ? nlohmann::json(*s.mfu) : nlohmann::json();
  j["simulation_order"] = s.order;
  return j;
}

// Runs in a forked child: the layout's launch simulated as `pipegrid
// simulate --megatron-args` runs it. Returns JSON: the metrics, or the
// refusal.
std::string simulate_layout(const PlannerRequest& request, const std::string& arguments) {
  nlohmann::json out;
  try {
    PlanRequest plan_request;
    plan_request.platform_file = request.platform_file;
    plan_request.megatron_args = arguments;
    plan_request.memory = request.memory;
    Plan plan = make_plan(plan_request);
    RunResult result = run_plan(plan);
    out["time"] = result.metrics.minibatch_time_s;
    out["throughput"] = result.metrics.throughput_samples_per_s;
    out["bubble"] = result.metrics.bubble_fraction;
    double peak = 0;
    std::string host;
    bool fits = true;
    for (const DeviceMetrics& device : result.metrics.devices) {
      if (device.peak_memory_bytes > peak || host.empty()) {
        peak = device.peak_memory_bytes;
        host = device.host;
      }
      if (device.oom) fits = false;
    }
    out["peak"] = peak;
    out["peak_host"] = host;
    out["fits"] = fits;
    out["tflops"] = result.utilisation.tflops_per_gpu ? nlohmann::json(*result.utilisation.tflops_per_gpu) : nlohmann::json();
    out["mfu"] = result.utilisation.mfu ? nlohmann::json(*result.utilisation.mfu) : nlohmann::json();
    std::vector<int> first;
    for (const StageCost& cost : stage_costs(plan.profile, plan.partition)) first.push_back(cost.first_layer);
    out["first_layers"] = first;
  } catch (const InputError& error) {
    out["error"] = error.what();
  }
  return out.dump();
}

void check_choices(const std::vector<std::string>& given, const std::vector<std::string>& known, const std::string& flag) {
  if (given.empty()) throw InputError(fmt::format("{}: expected at least one of {}", flag, fmt::join(known, ", ")));
  for (const std::string& value : given)
    if (std::find(known.begin(), known.end(), value) == known.end())
      throw InputError(fmt::format("{}: expected {}, found '{}'", flag, fmt::join(known, ", "), printable(value)));
}

}  // namespace

PlannerResult plan(const PlannerRequest& request, const PlannerProgress& progress) {
  const Clock::time_point started = Clock::now();
  PlannerResult result;
  result.base_arguments = request.megatron_args;
  if (request.jobs < 0) throw InputError(fmt::format("--jobs: expected an integer >= 1, found {}", request.jobs));
  result.jobs = request.jobs > 0 ? request.jobs : std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  if (request.top < 1) throw InputError(fmt::format("--top: expected an integer >= 1, found {}", request.top));
  if (request.max_micro_batch_size < 1)
    throw InputError(fmt::format("--max-micro-batch-size: expected an integer >= 1, found {}", request.max_micro_batch_size));
  const std::vector<std::string> schedules = request.schedules.empty() ? megatron_schedules() : request.schedules;
  check_choices(schedules, megatron_schedules(), "--schedules");
  check_choices(request.recompute, {"none", "selective", "full"}, "--recompute");
  if (request.sequence_parallel.empty()) throw InputError("--sequence-parallel: expected on, off or both");
  if (request.distributed_optimizer.empty()) throw InputError("--distributed-optimizer: expected on, off or both");

  // The base launch: the model and its training, no layout.
  if (request.megatron_args.empty()) throw InputError("plan: give the model as --megatron-args or --megatron-args-file");
  for (const std::string& word : words_of(request.megatron_args))
    for (const std::string& name : chosen_arguments())
      if (word == name || word.rfind(name + "=", 0) == 0)
        throw InputError(fmt::format("{}: {} is what plan chooses; leave it out (restrict the search with plan's "
                                     "--tensor-parallel, --pipeline-parallel, --virtual-stages, --micro-batch-sizes, "
                                     "--recompute, --sequence-parallel, --distributed-optimizer)",
                                     request.origin, name));
  const MegatronLaunch base = read_megatron_args(request.megatron_args + " --micro-batch-size 1", request.origin);
  const int layers = static_cast<int>(resolve_model_spec(base.model).options.at("layers"));
  if (request.global_batch_size && base.global_batch_size && *request.global_batch_size != *base.global_batch_size)
    throw InputError(fmt::format("--global-batch-size {}: {} sets --global-batch-size {}; give one", *request.global_batch_size,
                                 request.origin, *base.global_batch_size));
  const std::optional<long long> global = request.global_batch_size ? request.global_batch_size : base.global_batch_size;
  if (!global) throw InputError(fmt::format("plan: give --global-batch-size (or put it in {})", request.origin));
  if (*global < 1) throw InputError(fmt::format("--global-batch-size: expected an integer >= 1, found {}", *global));
  result.global_batch_size = *global;

  // The platform: identical GPUs in identical servers.
  enable_input_cache();
  const PlatformSummary platform = platform_summary(request.platform_file);
  if (platform.hosts.empty()) throw InputError(fmt::format("{}: no hosts", request.platform_file));
  const HostInfo& first = platform.hosts.front();
  std::map<std::string, int> per_server;
  for (const HostInfo& host : platform.hosts) {
    if (host.device_model != first.device_model || host.device_type != first.device_type ||
        host.memory_bytes != first.memory_bytes || host.speed_factor != first.speed_factor)
      throw InputError(fmt::format("{}: host '{}' differs from '{}' (device, memory or speed): plan's enumeration "
                                   "lays Megatron-LM's uniform layouts over identical GPUs",
                                   request.platform_file, printable(host.name), printable(first.name)));
    ++per_server[host.server];
  }
  if (!gpu_device_model(first))
    throw InputError(fmt::format("{}: host '{}' names no GPU of the device catalogue (its `device` or `device_model`): "
                                 "plan times Megatron-LM's layers with a GPU's model",
                                 request.platform_file, printable(first.name)));
  result.gpus = static_cast<int>(platform.hosts.size());
  result.gpus_per_server = per_server.begin()->second;
  for (const auto& [server, count] : per_server)
    if (count != result.gpus_per_server)
      throw InputError(fmt::format("{}: server '{}' has {} GPUs and '{}' {}: plan needs servers of equal size",
                                   request.platform_file, printable(per_server.begin()->first), result.gpus_per_server,
                                   printable(server), count));
  result.device = first.device_model;
  std::optional<double> capacity = first.memory_bytes;
  if (!request.memory.empty()) capacity = parse_bytes(request.memory, "--memory");
  result.usable_memory_bytes =
      capacity ? *capacity - first.memory_reserve_of(*capacity) : std::numeric_limits<double>::infinity();

  // The links a ring step crosses: inside a server (host 0 to its
  // neighbour) and into another server (host 0 to the next server's first).
  RingRates rates;
  {
    std::vector<std::pair<std::size_t, std::size_t>> pairs;
    if (result.gpus_per_server > 1) pairs.emplace_back(0, 1);
    const bool next_server = per_server.size() > 1 &&
                             platform.hosts[static_cast<std::size_t>(result.gpus_per_server)].server != first.server;
    if (next_server) pairs.emplace_back(0, static_cast<std::size_t>(result.gpus_per_server));
    if (!pairs.empty()) {
      const RouteTable table = sim::read_routes(request.platform_file, pairs);
      const auto facts = [&](const HostRoute& route) {
        RouteFacts f;
        f.latency_s = route.latency_s;
        for (const int link : route.links) {
          const LinkInfo& info = table.links[static_cast<std::size_t>(link)];
          if (f.bandwidth_Bps == 0 || info.bandwidth_Bps < f.bandwidth_Bps) f.bandwidth_Bps = info.bandwidth_Bps;
          f.nccl_efficiency = std::min(f.nccl_efficiency, info.nccl_efficiency);
          f.nccl_latency_s = std::max(f.nccl_latency_s, info.nccl_latency_s);
        }
        return f;
      };
      std::size_t next_route = 0;
      if (result.gpus_per_server > 1) rates.intra = facts(table.routes[next_route++]);
      if (next_server) rates.inter = facts(table.routes[next_route]);
    }
  }

  // Enumerate. Tensor sizes: divisors of the server's GPUs (Megatron-LM
  // keeps tensor parallelism in a node) unless asked for.
  const int gpus = result.gpus;
  std::vector<Candidate> candidates;
  std::map<std::string, std::size_t> refusal_index;
  const auto refuse = [&](const std::string& reason, std::size_t count) {
    const auto [it, added] = refusal_index.emplace(reason, result.refusals.size());
    if (added) result.refusals.emplace_back(reason, 0);
    result.refusals[it->second].second += count;
    result.refused += count;
  };
  std::map<ProfileKey, ProfileEntry> profiles;
  std::map<std::tuple<ProfileKey, int, int>, StageModel> stage_models;
  std::map<std::tuple<std::string, int, int, int>, ScheduleFacts> held_of;
  std::map<std::string, std::string> launch_check;  // d-independent arguments -> refusal ("" when accepted)

  const std::vector<int> tensor_sizes =
      request.tensor_parallel.empty() ? divisors(result.gpus_per_server, result.gpus_per_server) : request.tensor_parallel;
  for (const int t : tensor_sizes) {
    if (t < 1 || gpus % t != 0) {
      if (!request.tensor_parallel.empty())
        throw InputError(fmt::format("--tensor-parallel {}: does not divide the platform's {} GPUs", t, gpus));
      continue;
    }
    for (const int p : divisors(gpus / t, layers)) {
      // Megatron-LM splits the layers evenly over the pipeline ranks.
      if (layers % p != 0 || !allowed(request.pipeline_parallel, p)) continue;
      const int d = gpus / (t * p);
      if (!allowed(request.data_parallel, d)) continue;
      if (*global % d != 0) continue;
      for (const int mbs : divisors(*global / d, request.max_micro_batch_size)) {
        if (!allowed(request.micro_batch_sizes, mbs)) continue;
        const int m = static_cast<int>(*global / d / mbs);
        // Model chunks per rank: 1, or (Megatron-LM interleaves pipelines of
        // two ranks or more) any v dividing the rank's layers; each v runs
        // the schedule the launch gives it.
        std::vector<int> chunks = {1};
        if (p > 1)
          for (int v = 2; v <= layers / p; ++v)
            if (layers % (p * v) == 0 && allowed(request.virtual_stages, v)) chunks.push_back(v);
        for (const int v : chunks) {
          const std::string schedule = megatron_schedule(v);
          if (std::find(schedules.begin(), schedules.end(), schedule) == schedules.end()) continue;
          for (const std::string& recompute : request.recompute)
            for (const bool sp : request.sequence_parallel) {
              if (sp && t == 1) continue;  // Megatron turns it off at t = 1: the same layout
              for (const bool distopt : request.distributed_optimizer) {
                if (distopt && d == 1) continue;  // nothing to shard: the same layout
                Candidate candidate;
                candidate.layout = PlannedLayout{t, p, d, v, mbs, m, schedule, recompute, sp, distopt};
                ++result.enumerated;
                candidates.push_back(std::move(candidate));
              }
            }
        }
      }
    }
  }
  if (candidates.empty())
    throw InputError(fmt::format("plan: no layout of {} GPUs divides the global batch {} and the model's {} layers "
                                 "within the restrictions given",
                                 gpus, *global, layers));

  // Bounds for each candidate Megatron-LM accepts.
  std::vector<Candidate> kept;
  std::vector<std::string> kept_arguments;
  for (Candidate& candidate : candidates) {
    const PlannedLayout& layout = candidate.layout;
    // Megatron-LM's own checks, without the data-parallel size (the sizes
    // divide by construction).
    PlannedLayout probe = layout;
    probe.data_parallel = 1;
    probe.distributed_optimizer = false;
    const std::string probe_arguments =
        request.megatron_args + layout_arguments(probe, layers, layout.micro_batch_size, false);
    auto checked = launch_check.find(probe_arguments);
    if (checked == launch_check.end()) {
      std::string why;
      try {
        read_megatron_args(probe_arguments, request.origin);
      } catch (const InputError& error) {
        why = error.what();
        const std::size_t colon = why.find(": ");
        if (colon != std::string::npos && why.compare(0, colon, request.origin) == 0) why = why.substr(colon + 2);
      }
      checked = launch_check.emplace(probe_arguments, why).first;
    }
    if (!checked->second.empty()) {
      refuse(checked->second, 1);
      continue;
    }
    // Megatron-LM's interleaved schedule runs micro-batches in groups of p
    // (core_v0.14.0, megatron/core/pipeline_parallel/schedules.py).
    if (layout.virtual_stages > 1 && layout.micro_batches % layout.pipeline_parallel != 0) {
      refuse("the interleaved schedule needs micro-batches per pipeline divisible by the pipeline size", 1);
      continue;
    }
    const ProfileKey key{layout.tensor_parallel, layout.micro_batch_size, layout.sequence_parallel, layout.recompute};
    auto entry = profiles.find(key);
    if (entry == profiles.end()) {
      ProfileEntry made;
      PlannedLayout shape_layout{layout.tensor_parallel, 1, gpus / layout.tensor_parallel, 1, layout.micro_batch_size,
                                 1, megatron_schedule(1), layout.recompute, layout.sequence_parallel, false};
      PlanRequest shape_request;
      shape_request.platform_file = request.platform_file;
      shape_request.megatron_args =
          request.megatron_args + layout_arguments(shape_layout, layers,
                                                   static_cast<long long>(layout.micro_batch_size) * shape_layout.data_parallel,
                                                   false);
      try {
        made.plan = make_plan(shape_request);
      } catch (const InputError& error) {
        made.error = error.what();
      }
      entry = profiles.emplace(key, std::move(made)).first;
    }
    if (!entry->second.plan) {
      refuse(entry->second.error, 1);
      continue;
    }
    const Plan& shape = *entry->second.plan;
    auto model = stage_models.find({key, layout.pipeline_parallel, layout.virtual_stages});
    if (model == stage_models.end())
      model = stage_models
                  .emplace(std::tuple{key, layout.pipeline_parallel, layout.virtual_stages},
                           stage_model(shape, base, layout.pipeline_parallel, layout.virtual_stages, first))
                  .first;
    auto held = held_of.find({layout.schedule, layout.pipeline_parallel, layout.virtual_stages, layout.micro_batches});
    if (held == held_of.end())
    {
      ScheduleOptions options;
      options.num_stages = layout.pipeline_parallel * layout.virtual_stages;
      options.virtual_stages = layout.virtual_stages;
      options.micro_batches = layout.micro_batches;
      ScheduleFacts facts;
      facts.program = generate_schedule(layout.schedule, options);
      facts.ranks = rank_schedules(facts.program);
      held = held_of
                 .emplace(std::tuple{layout.schedule, layout.pipeline_parallel, layout.virtual_stages, layout.micro_batches},
                          std::move(facts))
                 .first;
    }
    // The GPU with the optimizer step its device model gives the run (as
    // run_plan does for fp16 and bf16).
    candidate.gpu = first;
    if (!candidate.gpu.has_optimizer_step() && (shape.dtype == "fp16" || shape.dtype == "bf16")) {
      PlatformSummary one;
      one.hosts = {candidate.gpu};
      give_device_optimizer_steps(one, optimizer_step_bytes_per_parameter(shape.dtype, shape.optimizer) /
                                           dtype_bytes(shape.dtype, "--dtype"));
      candidate.gpu = one.hosts.front();
    }
    const Bounds bounds = candidate_bounds(layout, model->second, shape, held->second.ranks, candidate.gpu);
    candidate.bound_time_s = bounds.time_s;
    candidate.bound_memory_bytes = bounds.memory_bytes;
    candidate.stages = &model->second;
    candidate.shape = &shape;
    candidate.program = &held->second.program;
    if (bounds.memory_bytes > result.usable_memory_bytes) {
      ++result.memory_bounded;
      if (!result.least_discarded_memory_bytes || bounds.memory_bytes < *result.least_discarded_memory_bytes) {
        result.least_discarded_memory_bytes = bounds.memory_bytes;
        result.least_discarded_memory_layout = layout.label() + " " + layout.schedule;
      }
      continue;
    }
    kept.push_back(candidate);
  }
  // Best first: least bound, ties by label (deterministic). A candidate's
  // bound is first the closed form; when it comes up it is refined by the
  // dependency bound (an O(actions) pass) and goes back in the queue,
  // unless --exhaustive (every layout simulated anyway).
  // (--exhaustive refines every bound at once: every layout is simulated
  // and checked against it.)
  if (request.exhaustive)
    for (Candidate& candidate : kept) {
      candidate.refined = true;
      candidate.bound_time_s = std::max(candidate.bound_time_s, dependency_bound(candidate, *candidate.program, result.gpus_per_server,
                                                                                 rates, request.overlap_grad_reduce));
    }
  std::set<std::tuple<double, std::string, std::size_t>> queue;
  for (std::size_t i = 0; i < kept.size(); ++i) queue.emplace(kept[i].bound_time_s, kept[i].layout.label() + " " + kept[i].layout.schedule, i);
  std::vector<SimulatedLayout> simulated(kept.size());
  std::vector<bool> done(kept.size(), false);
  ChildPool pool(result.jobs, "plan");
  std::size_t started_count = 0, finished = 0;
  double best = std::numeric_limits<double>::infinity();
  if (progress) progress(0, 0, 0);
  while (true) {
    while (!queue.empty() && pool.has_room() && (request.exhaustive || std::get<0>(*queue.begin()) < best)) {
      const std::size_t next = std::get<2>(*queue.begin());
      Candidate& candidate = kept[next];
      if (!candidate.refined) {
        queue.erase(queue.begin());
        candidate.refined = true;
        candidate.bound_time_s = std::max(candidate.bound_time_s,
                                          dependency_bound(candidate, *candidate.program, result.gpus_per_server, rates,
                                                           request.overlap_grad_reduce));
        queue.emplace(candidate.bound_time_s, candidate.layout.label() + " " + candidate.layout.schedule, next);
        continue;
      }
      queue.erase(queue.begin());
      SimulatedLayout& entry = simulated[next];
      entry.layout = kept[next].layout;
      entry.megatron_args =
          request.megatron_args + layout_arguments(entry.layout, layers, *global, request.overlap_grad_reduce);
      entry.bound_time_s = kept[next].bound_time_s;
      entry.bound_memory_bytes = kept[next].bound_memory_bytes;
      entry.order = static_cast<int>(++started_count);
      const std::string arguments = entry.megatron_args;
      pool.start(next, [&request, arguments] {
        try {
          return simulate_layout(request, arguments);
        } catch (const std::exception& error) {
          return nlohmann::json{{"internal_error", error.what()}}.dump();
        }
      });
    }
    if (pool.idle()) break;
    for (const ChildPool::Finished& child : pool.wait_some()) {
      const std::size_t index = child.index;
      SimulatedLayout& entry = simulated[index];
      done[index] = true;
      ++finished;
      if (!child.succeeded())
        throw std::runtime_error(fmt::format("plan: {}: {}", entry.layout.label(), child.failure_text()));
      const nlohmann::json j = nlohmann::json::parse(child.output);
      if (j.contains("internal_error"))
        throw std::runtime_error(fmt::format("plan: {}: {}", entry.layout.label(), j.at("internal_error").get<std::string>()));
      if (j.contains("error")) {
        entry.error = j.at("error").get<std::string>();
      } else {
        entry.iteration_time_s = j.at("time");
        entry.throughput_samples_per_s = j.at("throughput");
        entry.bubble_fraction = j.at("bubble");
        entry.peak_memory_bytes = j.at("peak");
        entry.peak_memory_host = j.at("peak_host");
        entry.fits = j.at("fits");
        if (!j.at("tflops").is_null()) entry.tflops_per_gpu = j.at("tflops").get<double>();
        if (!j.at("mfu").is_null()) entry.mfu = j.at("mfu").get<double>();
        // The bounds are proofs: a simulated value below one is a bug.
        if (j.at("first_layers").get<std::vector<int>>() != kept[index].stages->first_layer)
          throw std::runtime_error(fmt::format("plan: {}: the simulated plan's stages differ from those bounded",
                                               entry.layout.label()));
        if (entry.iteration_time_s < entry.bound_time_s * (1 - 1e-9))
          throw std::runtime_error(fmt::format("plan: {}: simulated {} s, below its lower bound {} s", entry.layout.label(),
                                               entry.iteration_time_s, entry.bound_time_s));
        if (entry.peak_memory_bytes < entry.bound_memory_bytes * (1 - 1e-9))
          throw std::runtime_error(fmt::format("plan: {}: simulated peak {} B, below its lower bound {} B",
                                               entry.layout.label(), entry.peak_memory_bytes, entry.bound_memory_bytes));
        if (entry.fits) best = std::min(best, entry.iteration_time_s);
      }
    }
    if (progress) progress(finished, started_count, std::isfinite(best) ? best : 0);
  }
  result.simulated = finished;
  result.time_bounded = kept.size() - finished;
  if (!queue.empty()) result.best_unsimulated_bound_s = std::get<0>(*queue.begin());

  // Rank: fitting by time, then not fitting, then refused; ties by label.
  double ratio_sum = 0;
  std::size_t ratios = 0;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (!done[i]) continue;
    const SimulatedLayout& entry = simulated[i];
    if (entry.error.empty() && entry.bound_time_s > 0) {
      const double ratio = entry.iteration_time_s / entry.bound_time_s;
      ratio_sum += ratio;
      ++ratios;
      result.max_bound_ratio = std::max(result.max_bound_ratio, ratio);
    }
    result.ranking.push_back(entry);
  }
  if (ratios > 0) result.mean_bound_ratio = ratio_sum / static_cast<double>(ratios);
  const auto rank_key = [](const SimulatedLayout& s) {
    const int group = !s.error.empty() ? 2 : s.fits ? 0 : 1;
    return std::tuple(group, group == 0 ? s.iteration_time_s : s.peak_memory_bytes, s.layout.label());
  };
  std::sort(result.ranking.begin(), result.ranking.end(),
            [&](const SimulatedLayout& a, const SimulatedLayout& b) { return rank_key(a) < rank_key(b); });
  // The Pareto front of the fitting layouts: by memory ascending, each with
  // more throughput than every one before it.
  std::vector<std::size_t> fitting;
  for (std::size_t i = 0; i < result.ranking.size(); ++i)
    if (result.ranking[i].fits) fitting.push_back(i);
  std::sort(fitting.begin(), fitting.end(), [&](std::size_t a, std::size_t b) {
    const SimulatedLayout &x = result.ranking[a], &y = result.ranking[b];
    return std::tuple(x.peak_memory_bytes, -x.throughput_samples_per_s, x.layout.label()) <
           std::tuple(y.peak_memory_bytes, -y.throughput_samples_per_s, y.layout.label());
  });
  double front = -1;
  for (const std::size_t i : fitting)
    if (result.ranking[i].throughput_samples_per_s > front) {
      result.pareto.push_back(i);
      front = result.ranking[i].throughput_samples_per_s;
    }
  if (request.overlap_grad_reduce)
    result.notes.push_back("layouts of d > 1 overlap the gradient reduction with the backward (--overlap-grad-reduce) "
                           "and, with the distributed optimizer, the parameter gather with the forward "
                           "(--overlap-param-gather), as Megatron-LM's performance launches do");
  result.elapsed_s = std::chrono::duration<double>(Clock::now() - started).count();
  return result;
}

std::string planner_result_to_json(const PlannerResult& result) {
  nlohmann::json j;
  j["gpus"] = result.gpus;
  j["gpus_per_server"] = result.gpus_per_server;
  j["device"] = result.device;
  j["usable_memory_bytes"] = std::isfinite(result.usable_memory_bytes) ? nlohmann::json(result.usable_memory_bytes)
                                                                        : nlohmann::json();
  j["global_batch_size"] = result.global_batch_size;
  j["base_arguments"] = result.base_arguments;
  j["enumerated"] = result.enumerated;
  j["refused"] = result.refused;
  j["memory_bounded"] = result.memory_bounded;
  j["time_bounded"] = result.time_bounded;
  j["simulated"] = result.simulated;
  j["refusals"] = nlohmann::json::array();
  for (const auto& [reason, count] : result.refusals) j["refusals"].push_back({{"reason", reason}, {"count", count}});
  j["best_unsimulated_bound_s"] =
      result.best_unsimulated_bound_s ? nlohmann::json(*result.best_unsimulated_bound_s) : nlohmann::json();
  j["least_discarded_memory_bytes"] =
      result.least_discarded_memory_bytes ? nlohmann::json(*result.least_discarded_memory_bytes) : nlohmann::json();
  j["least_discarded_memory_layout"] = result.least_discarded_memory_layout;
  j["mean_bound_ratio"] = result.mean_bound_ratio;
  j["max_bound_ratio"] = result.max_bound_ratio;
  j["ranking"] = nlohmann::json::array();
  for (const SimulatedLayout& s : result.ranking) j["ranking"].push_back(simulated_to_json(s));
  j["pareto"] = result.pareto;
  j["notes"] = result.notes;
  return j.dump(2) + "\n";
}

}  // namespace pipegrid::api
