#include "schedules/schedules.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/limits.hpp"
#include "schedules/beyond.hpp"

namespace pipegrid {

const std::vector<ScheduleInfo>& schedule_catalog() {
  static const std::vector<ScheduleInfo> catalog = {
      {"gpipe", "GPipe: all forwards, then all backwards, flush per mini-batch", DeviceKind::Gpu, false, true, false},
      {"1f1b-sno", "BaPipe 1F1B-SNO: 1F1B, N-i+1 warm-up forwards, communication not overlapped (GPU)", DeviceKind::Gpu, false, true, false},
      {"1f1b-so", "BaPipe 1F1B-SO: 1F1B with doubled warm-up so receives hide behind compute (GPU)", DeviceKind::Gpu, false, true, false},
      {"1f1b-as", "BaPipe 1F1B-AS: the 1F1B-SNO order on asynchronous devices (FPGA)", DeviceKind::Fpga, false, true, false},
      {"fbp-as", "BaPipe FBP-AS: forward and backward streams in parallel, stash cap 2(N-i+1) (FPGA)", DeviceKind::Fpga, true, true, false},
      {"pipedream", "PipeDream: 1F1B across mini-batches, NOAM admitted, 1F1B-RR over replicas, weight stashing", DeviceKind::Gpu, false, false, false, 1, StageMap::Loop, {ScheduleOption::VerticalSync}, WeightVersions::Stashing},
      {"pipedream-2bw", "PipeDream-2BW: PipeDream's order, 2 weight versions, update every --update-interval mini-batches", DeviceKind::Gpu, false, false, false, 1, StageMap::Loop, {ScheduleOption::UpdateInterval}, WeightVersions::TwoBuffered},
      {"pipeoptim", "PipeOptim: PipeDream's order with weight prediction (1-2 versions, --prediction-cost)", DeviceKind::Gpu, false, false, false, 1, StageMap::Loop, {ScheduleOption::PredictionCost}, WeightVersions::Predicted},
      {"dp", "Data parallelism: the whole model on every device, then ring all-reduce (--wait-free to overlap)", DeviceKind::Gpu, false, true, true, 1, StageMap::Loop, {ScheduleOption::WaitFree}},
      // Issue 14: several stages per device, split backwards (schedules/beyond.hpp).
      {"interleaved-1f1b", "Interleaved 1F1B (Megatron, PyTorch Interleaved1F1B): --virtual-stages chunks per device in a loop", DeviceKind::Gpu, false, true, false, 0, StageMap::Loop},
      {"looped-bfs", "PyTorch LoopedBFS: --virtual-stages chunks per device in a loop, all forwards then all backwards", DeviceKind::Gpu, false, true, false, 0, StageMap::Loop},
      {"zb-h1", "Zero Bubble H1: 1F1B with the backward split into I and W, W's fill the bubbles, p in flight", DeviceKind::Gpu, false, true, false, 1, StageMap::Loop},
      {"zb-h2", "Zero Bubble H2: extra warm-up forwards, 2p-1 in flight, zero bubble after the start-up", DeviceKind::Gpu, false, true, false, 1, StageMap::Loop},
      {"zb1p", "PyTorch InterleavedZeroBubble (ZB1P): interleaved 1F1B with split backwards, --virtual-stages chunks", DeviceKind::Gpu, false, true, false, 0, StageMap::Loop},
      {"zb-auto", "Zero Bubble's automatic schedule (ZB-1p/ZB-2p of Qi et al., not PyTorch's zb1p): built from the stage times, --activation-limit K (default 1)", DeviceKind::Gpu, false, true, false, 1, StageMap::Loop, {ScheduleOption::ActivationLimit, ScheduleOption::StageTimes}},
      {"zb-v", "Zero Bubble V (PyTorch ZBVZeroBubble): 2 stages per device in a V, split backwards", DeviceKind::Gpu, false, true, false, 2, StageMap::V},
      {"dualpipev", "DualPipeV (DeepSeek, PyTorch DualPipeV): 2 stages per device in a V, overlapped F&B pairs", DeviceKind::Gpu, false, true, false, 2, StageMap::V},
      // Issue 32: DeepSeek-V3's bidirectional DualPipe (schedules/dualpipe.cpp).
      {"dualpipe", "DualPipe (DeepSeek-V3, arXiv 2412.19437): two copies of the model, micro-batches fed from both ends, overlapped F&B pairs, 2x parameters", DeviceKind::Gpu, false, true, false, 1, StageMap::Loop, {}, WeightVersions::Latest, true},
  };
  return catalog;
}

const ScheduleInfo& schedule_info(const std::string& name) {
  for (const ScheduleInfo& info : schedule_catalog())
    if (info.name == name) return info;
  std::string known;
  for (const ScheduleInfo& info : schedule_catalog()) known += (known.empty() ? "" : ", ") + info.name;
  throw InputError(fmt::format("--schedule: unknown schedule '{}'; expected one of: {}", name, known));
}

bool takes_option(const ScheduleInfo& info, ScheduleOption option) {
  return std::find(info.options.begin(), info.options.end(), option) != info.options.end();
}

std::string schedules_taking(ScheduleOption option) {
  std::string names;
  for (const ScheduleInfo& info : schedule_catalog())
    if (takes_option(info, option)) names += (names.empty() ? "" : ", ") + info.name;
  return names;
}

int default_virtual_stages(const std::string& name) {
  const int fixed = schedule_info(name).fixed_virtual_stages;
  return fixed == 0 ? 2 : fixed;
}

StageMap stage_map_of(const std::string& name) { return schedule_info(name).map; }

std::vector<std::vector<std::string>> mirrored_stage_hosts(const std::vector<std::vector<std::string>>& copy_hosts) {
  const std::size_t p = copy_hosts.size();
  std::vector<std::vector<std::string>> hosts(p);
  for (std::size_t s = 0; s < p; ++s) {
    hosts[s] = copy_hosts[std::min(s, p - 1 - s)];
    const auto& second = copy_hosts[std::max(s, p - 1 - s)];
    hosts[s].insert(hosts[s].end(), second.begin(), second.end());
  }
  return hosts;
}

int warmup_forwards(const std::string& name, const std::vector<int>& replicas, int stage, int count) {
  if (name == "gpipe" || name == "dp") return count;
  int later_devices = 0;
  for (std::size_t s = static_cast<std::size_t>(stage); s < replicas.size(); ++s) later_devices += replicas[s];
  const int depth = (later_devices + replicas[stage] - 1) / replicas[stage];
  return std::min(name == "1f1b-so" ? 2 * depth : depth, count);
}

int update_interval(const std::string& name, const ScheduleOptions& options) {
  const ScheduleInfo& info = schedule_info(name);
  if (info.flushed) return 0;
  if (info.name == "pipedream-2bw") return options.update_interval > 0 ? options.update_interval : options.num_stages;
  return 1;
}

void check_schedule_limits(const ScheduleOptions& options) {
  const auto limit = [](const std::string& what, long long found, long long most, const std::string& hint) {
    if (found > most)
      throw InputError(fmt::format("{}: expected at most {}{} (docs/formats.md, Limits), found {}", what, most, hint, found));
  };
  limit("stages (--stages, or the partition's)", options.num_stages, limits::kMaxStages, "");
  limit("--micro-batches", options.micro_batches, limits::kMaxMicroBatches, "");
  limit("--mini-batches", options.mini_batches, limits::kMaxMiniBatches, "");
  limit("--pipeline-depth", options.pipeline_depth, limits::kMaxPipelineDepth, "");
  limit("--update-interval", options.update_interval, limits::kMaxUpdateInterval, "");
  const long long items = static_cast<long long>(std::max(options.num_stages, 1)) * std::max(options.micro_batches, 1) *
                          std::max(options.mini_batches, 1);
  if (items > limits::kMaxWorkItems)
    throw InputError(fmt::format(
        "--micro-batches {} x --mini-batches {} x {} stages: expected at most {} work items (stages x micro-batches x "
        "mini-batches, each a forward and a backward; docs/formats.md, Limits), found {}",
        options.micro_batches, options.mini_batches, options.num_stages, limits::kMaxWorkItems, items));
  if (!options.replicas.empty() && static_cast<int>(options.replicas.size()) != options.num_stages)
    throw InputError(fmt::format("replicas: expected one count per stage ({}), found {}", options.num_stages,
                                 options.replicas.size()));
  if (options.data_parallel < 1 || options.data_parallel > limits::kMaxDevices)
    throw InputError(fmt::format("--data-parallel: expected pipelines from 1 to {}, found {}", limits::kMaxDevices,
                                 options.data_parallel));
  const long long pipeline_devices = std::max(options.num_stages, 1) / std::max(options.virtual_stages, 1);
  limit("devices (pipeline devices x --data-parallel)", pipeline_devices * options.data_parallel, limits::kMaxDevices, "");
  const long long all_items = items * options.data_parallel;
  if (all_items > limits::kMaxReplicatedWorkItems)
    throw InputError(fmt::format(
        "--micro-batches {} x --data-parallel {} x --mini-batches {} x {} stages: expected at most {} work items over "
        "the replicas (docs/formats.md, Limits), found {}",
        options.micro_batches, options.data_parallel, options.mini_batches, options.num_stages,
        limits::kMaxReplicatedWorkItems, all_items));
  long long devices = options.replicas.empty() ? std::max(options.num_stages, 1) : 0;
  for (const int r : options.replicas) {
    if (r < 1) throw InputError(fmt::format("replicas: expected at least 1 per stage, found {}", r));
    devices += r;
  }
  limit("devices (--replicas summed over the stages)", devices, limits::kMaxDevices, "");
  const long long device_mini_batches = devices * std::max(options.mini_batches, 1);
  if (device_mini_batches > limits::kMaxDeviceMiniBatches)
    throw InputError(fmt::format("--mini-batches {} on {} devices: expected at most {} devices x mini-batches "
                                 "(docs/formats.md, Limits), found {}",
                                 options.mini_batches, devices, limits::kMaxDeviceMiniBatches, device_mini_batches));
}

namespace {

Action forward(int stage, int m, int k) { return {ActionKind::Forward, stage, m, k}; }
Action backward(int stage, int m, int k) { return {ActionKind::Backward, stage, m, k}; }

// What one replica runs: (micro-batch, mini-batch) pairs in arrival order.
using Work = std::vector<std::pair<int, int>>;

// Appends the backward of `item`, preceded by its recomputation when asked.
void push_backward(std::vector<Action>& actions, int stage, std::pair<int, int> item, bool recompute) {
  if (recompute) actions.push_back({ActionKind::Recompute, stage, item.first, item.second});
  actions.push_back(backward(stage, item.first, item.second));
}

// `warmup` forwards, then one backward and one forward alternately until the
// forwards are done, then the remaining backwards. warmup = all is GPipe.
std::vector<Action> one_f_one_b(int stage, const Work& work, int warmup, bool recompute) {
  std::vector<Action> actions;
  std::size_t next_forward = 0, next_backward = 0;
  for (; next_forward < static_cast<std::size_t>(warmup); ++next_forward)
    actions.push_back(forward(stage, work[next_forward].first, work[next_forward].second));
  while (next_forward < work.size()) {
    push_backward(actions, stage, work[next_backward++], recompute);
    actions.push_back(forward(stage, work[next_forward].first, work[next_forward].second));
    ++next_forward;
  }
  while (next_backward < work.size()) push_backward(actions, stage, work[next_backward++], recompute);
  return actions;
}

// Forward and backward alternating per item (gradient accumulation); with
// `recompute`, each backward is preceded by its recomputation.
std::vector<Action> forward_backward_pairs(int stage, const Work& work, bool recompute) {
  std::vector<Action> actions;
  for (const auto& item : work) {
    actions.push_back(forward(stage, item.first, item.second));
    push_backward(actions, stage, item, recompute);
  }
  return actions;
}

}  // namespace

Program generate_schedule(const std::string& name, const ScheduleOptions& options) {
  const ScheduleInfo& info = schedule_info(name);
  if (options.num_stages < 1) throw InputError(fmt::format("stages: expected at least 1, found {}", options.num_stages));
  if (options.micro_batches < 1)
    throw InputError(fmt::format("--micro-batches: expected at least 1, found {}", options.micro_batches));
  if (options.mini_batches < 1)
    throw InputError(fmt::format("--mini-batches: expected at least 1, found {}", options.mini_batches));
  check_schedule_limits(options);
  if (!info.flushed && options.micro_batches != 1)
    throw InputError(fmt::format("--micro-batches: {} pipelines whole mini-batches and does not split them; expected 1, "
                                 "found {} (--mini-batches sets how many mini-batches to simulate)",
                                 name, options.micro_batches));
  if (info.single_stage && options.num_stages != 1)
    throw InputError(fmt::format("--schedule {}: runs the whole model on every device; expected 1 stage (replicated on "
                                 "every host), found {} stages",
                                 name, options.num_stages));
  if (options.wait_free && !takes_option(info, ScheduleOption::WaitFree))
    throw InputError(fmt::format("--wait-free: applies to {}, not {}", schedules_taking(ScheduleOption::WaitFree), name));
  if (options.update_interval > 0 && !takes_option(info, ScheduleOption::UpdateInterval))
    throw InputError(fmt::format("--update-interval: applies to {}, not {}", schedules_taking(ScheduleOption::UpdateInterval), name));
  if (options.activation_limit != 0 && !takes_option(info, ScheduleOption::ActivationLimit))
    throw InputError(fmt::format("--activation-limit: applies to {}, not {}", schedules_taking(ScheduleOption::ActivationLimit), name));
  if (options.pipeline_depth < 0 || (options.pipeline_depth > 0 && info.flushed))
    throw InputError(fmt::format("--pipeline-depth: expected mini-batches >= 1 admitted per input replica of a pipedream-family "
                                 "schedule, found {} for {}", options.pipeline_depth, name));
  if (options.update_interval < 0)
    throw InputError(fmt::format("--update-interval: expected at least 1, found {}", options.update_interval));
  if (options.data_parallel != 1) {
    if (!options.replicas.empty())
      throw InputError("--data-parallel and --replicas: both replicate stages; --data-parallel runs whole pipelines "
                       "(Megatron-LM), --replicas replicates stages one by one (PipeDream): give one");
    if (info.single_stage)
      throw InputError(fmt::format("--data-parallel: {} already runs the whole model on every host; drop "
                                   "--data-parallel, or give a pipeline schedule (a pipeline of one stage is data "
                                   "parallelism too)",
                                   name));
    if (!info.flushed)
      throw InputError(fmt::format("--data-parallel: {} pipelines mini-batches without a flush, and replicates stages "
                                   "one by one with --replicas (PipeDream's 1F1B-RR); --data-parallel replicates whole "
                                   "flushed pipelines",
                                   name));
    ScheduleOptions one_pipeline = options;
    one_pipeline.data_parallel = 1;
    return replicate_pipelines(generate_schedule(name, one_pipeline), options.data_parallel, options.overlap_grad_reduce);
  }
  if (is_beyond_schedule(name)) return generate_beyond_schedule(name, options);
  if (options.virtual_stages != 1)
    throw InputError(fmt::format("--virtual-stages: {} runs one stage per device; expected 1, found {}", name,
                                 options.virtual_stages));
  std::vector<int> replicas = options.replicas;
  if (replicas.empty()) replicas.assign(options.num_stages, 1);

  const int N = options.num_stages, M = options.micro_batches, K = options.mini_batches;
  Program program;
  program.num_stages = N;
  program.micro_batches = M;
  program.mini_batches = K;
  const int interval = update_interval(name, options);
  for (int stage = 0; stage < N; ++stage) {
    const int r = replicas[stage];
    // work[q][k]: what replica q runs of mini-batch k (flushed: micro-batches
    // m = q, q + r, ...; non-flushed: the mini-batches k = q, q + r, ...).
    std::vector<std::vector<Work>> work(r, std::vector<Work>(K));
    for (int k = 0; k < K; ++k)
      for (int m = 0; m < M; ++m) work[info.flushed ? m % r : k % r][k].push_back({m, k});
    std::vector<Work> all(r);
    for (int q = 0; q < r; ++q)
      for (const Work& part : work[q]) all[q].insert(all[q].end(), part.begin(), part.end());

    for (int q = 0; q < r; ++q) {
      DeviceProgram device{{stage}, q, {}};
      if (info.name == "fbp-as") {
        // A forward stream and a backward stream sharing the device. F_m waits
        // for B_(m - cap) of the same replica (the stash cap, cap = 2(N-i+1)
        // per replica, from the devices downstream); the next mini-batch's forwards wait for this one's
        // last backward (flush and update).
        const int cap = 2 * warmup_forwards("1f1b-sno", replicas, stage, M * K);
        Stream forwards, backwards;
        for (int k = 0; k < K; ++k) {
          const Work& mine = work[q][k];
          for (std::size_t j = 0; j < mine.size(); ++j) {
            forwards.actions.push_back(forward(stage, mine[j].first, k));
            push_backward(backwards.actions, stage, mine[j], options.recompute);
            if (j >= static_cast<std::size_t>(cap))
              program.extra_dependencies.push_back({backward(stage, mine[j - cap].first, k), forward(stage, mine[j].first, k)});
          }
          if (k > 0 && !mine.empty() && !work[q][k - 1].empty() && r == 1)
            program.extra_dependencies.push_back({backward(stage, work[q][k - 1].back().first, k - 1), forward(stage, mine.front().first, k)});
        }
        device.streams = {std::move(forwards), std::move(backwards)};
      } else if (info.flushed) {
        Stream stream;
        for (int k = 0; k < K; ++k) {
          const Work& mine = work[q][k];
          const int count = static_cast<int>(mine.size());
          auto actions = info.name == "dp" ? forward_backward_pairs(stage, mine, options.recompute)
                                           : one_f_one_b(stage, mine, warmup_forwards(name, replicas, stage, count), options.recompute);
          stream.actions.insert(stream.actions.end(), actions.begin(), actions.end());
        }
        device.streams.push_back(std::move(stream));
      } else {
        const int count = static_cast<int>(all[q].size());
        int warmup = warmup_forwards(name, replicas, stage, count);
        if (options.pipeline_depth > 0) {
          // 64-bit: depth x replicas may exceed an int; the result is at most `count`.
          const long long admitted = (static_cast<long long>(options.pipeline_depth) * replicas[0] + r - 1) / r;
          const long long depth = stage == 0 ? options.pipeline_depth : std::min<long long>(warmup, admitted);
          warmup = static_cast<int>(std::min<long long>(count, depth));
        }
        device.streams.push_back({one_f_one_b(stage, all[q], warmup, options.recompute)});
      }
      program.devices.push_back(std::move(device));
    }

    if (r == 1) continue;
    // Replicas all-reduce their gradients: flushed schedules once per
    // mini-batch, and the next mini-batch waits for it; non-flushed ones after
    // each round of backwards (every `interval` rounds for 2BW), without
    // blocking compute.
    if (info.flushed) {
      for (int k = 0; k < K; ++k) {
        AllReduce all_reduce{stage, k, {}, {}, options.wait_free};
        for (int q = 0; q < r; ++q) {
          if (work[q][k].empty()) continue;
          all_reduce.ready.push_back(backward(stage, work[q][k].back().first, k));
          if (k + 1 < K && !work[q][k + 1].empty()) all_reduce.release.push_back(forward(stage, work[q][k + 1].front().first, k + 1));
        }
        if (all_reduce.ready.size() > 1) program.all_reduces.push_back(std::move(all_reduce));
      }
    } else {
      const int rounds = (K + r - 1) / r;
      for (int round = 0; round < rounds; ++round) {
        if ((round + 1) % interval != 0 && round + 1 != rounds) continue;
        AllReduce all_reduce{stage, round, {}, {}, false};
        for (int q = 0; q < r; ++q)
          if (static_cast<std::size_t>(round) < all[q].size()) all_reduce.ready.push_back(backward(stage, 0, all[q][round].second));
        if (all_reduce.ready.size() > 1) program.all_reduces.push_back(std::move(all_reduce));
      }
    }
  }
  return program;
}

Program replicate_pipelines(const Program& pipeline, int data_parallel, bool overlap_grad_reduce) {
  if (data_parallel < 1) throw InputError(fmt::format("--data-parallel: expected at least 1, found {}", data_parallel));
  if (data_parallel == 1) return pipeline;
  // A pipeline with its own all-reduces (dualpipe's two copies): they grow
  // to the d pipelines' devices; the others need one replica of each stage.
  const bool own_all_reduces = !pipeline.all_reduces.empty();
  if (own_all_reduces && overlap_grad_reduce)
    throw InputError("--overlap-grad-reduce: the pipeline all-reduces the replicas of its stages after the whole "
                     "backward (dualpipe's two copies); drop --overlap-grad-reduce");
  for (const DeviceProgram& device : pipeline.devices)
    if (device.replica != 0 && !own_all_reduces)
      throw InputError("--data-parallel: the pipeline already replicates its stages (replica " +
                       std::to_string(device.replica) + "); give --data-parallel or --replicas");
  const int d = data_parallel;
  const auto renumber = [d](Action action, int q) {
    action.micro_batch = action.micro_batch * d + q;
    return action;
  };
  Program program;
  program.num_stages = pipeline.num_stages;
  program.micro_batches = pipeline.micro_batches * d;
  program.mini_batches = pipeline.mini_batches;
  // Per pipeline device: its last backward and its first action of each
  // stream, per mini-batch, in the pipeline's micro-batch numbering.
  struct Boundaries {
    std::map<int, Action> last_backward;                    // by mini-batch
    std::vector<std::map<int, Action>> first_of_stream;     // per stream, by mini-batch
    /// (mini-batch, stage) -> the stage's last backward and its place in the device's streams
    std::map<std::pair<int, int>, std::pair<Action, std::size_t>> stage_last_backward;
  };
  std::vector<Boundaries> boundaries(pipeline.devices.size());
  for (std::size_t i = 0; i < pipeline.devices.size(); ++i) {
    const DeviceProgram& device = pipeline.devices[i];
    boundaries[i].first_of_stream.resize(device.streams.size());
    std::size_t place = 0;
    for (std::size_t t = 0; t < device.streams.size(); ++t)
      for (const Action& action : device.streams[t].actions) {
        boundaries[i].first_of_stream[t].emplace(action.mini_batch, action);
        if (action.kind == ActionKind::Backward || action.kind == ActionKind::BackwardWeight) {
          // The last in time on the device: streams run concurrently only on
          // asynchronous hosts, where the backward stream holds them all.
          boundaries[i].last_backward[action.mini_batch] = action;
          boundaries[i].stage_last_backward[{action.mini_batch, action.stage}] = {action, place};
        }
        ++place;
      }
  }
  for (std::size_t i = 0; i < pipeline.devices.size(); ++i)
    for (int q = 0; q < d; ++q) {
      DeviceProgram device = pipeline.devices[i];
      device.replica = device.replica * d + q;
      for (Stream& stream : device.streams)
        for (Action& action : stream.actions) action = renumber(action, q);
      program.devices.push_back(std::move(device));
    }
  for (int q = 0; q < d; ++q)
    for (const Dependency& dependency : pipeline.extra_dependencies)
      program.extra_dependencies.push_back({renumber(dependency.before, q), renumber(dependency.after, q)});
  if (own_all_reduces) {
    for (const AllReduce& own : pipeline.all_reduces) {
      AllReduce all_reduce = own;
      all_reduce.ready.clear();
      all_reduce.release.clear();
      for (const Action& action : own.ready)
        for (int q = 0; q < d; ++q) all_reduce.ready.push_back(renumber(action, q));
      for (const Action& action : own.release)
        for (int q = 0; q < d; ++q) all_reduce.release.push_back(renumber(action, q));
      program.all_reduces.push_back(std::move(all_reduce));
    }
    return program;
  }
  std::vector<int> device_of_stage(static_cast<std::size_t>(pipeline.num_stages), -1);
  for (std::size_t i = 0; i < pipeline.devices.size(); ++i)
    for (const int stage : pipeline.devices[i].stages) device_of_stage[static_cast<std::size_t>(stage)] = static_cast<int>(i);
  for (int k = 0; k < pipeline.mini_batches; ++k) {
    std::vector<int> stages(static_cast<std::size_t>(pipeline.num_stages));
    for (int stage = 0; stage < pipeline.num_stages; ++stage) stages[static_cast<std::size_t>(stage)] = stage;
    // The ready backward of a stage's all-reduce in mini-batch k, and where it
    // runs on its device (the order the device takes part in them).
    auto ready_of = [&](int stage) -> std::optional<std::pair<Action, std::size_t>> {
      const int i = device_of_stage[static_cast<std::size_t>(stage)];
      if (i < 0) return std::nullopt;
      const Boundaries& own = boundaries[static_cast<std::size_t>(i)];
      if (overlap_grad_reduce) {
        const auto last = own.stage_last_backward.find({k, stage});
        if (last == own.stage_last_backward.end()) return std::nullopt;
        return last->second;
      }
      const auto last = own.last_backward.find(k);
      if (last == own.last_backward.end()) return std::nullopt;
      return std::pair{last->second, std::size_t{0}};
    };
    if (overlap_grad_reduce)
      std::stable_sort(stages.begin(), stages.end(), [&](int x, int y) {
        const auto a = ready_of(x), b = ready_of(y);
        return (a ? a->second : 0) < (b ? b->second : 0);
      });
    for (const int stage : stages) {
      const int i = device_of_stage[static_cast<std::size_t>(stage)];
      const auto ready = ready_of(stage);
      if (!ready) continue;
      const Boundaries& own = boundaries[static_cast<std::size_t>(i)];
      AllReduce all_reduce{stage, k, {}, {}, false};
      all_reduce.bucketed = overlap_grad_reduce && stage == 0;
      for (int q = 0; q < d; ++q) {
        all_reduce.ready.push_back(renumber(ready->first, q));
        for (const auto& firsts : own.first_of_stream)
          if (const auto next = firsts.find(k + 1); next != firsts.end())
            all_reduce.release.push_back(renumber(next->second, q));
      }
      program.all_reduces.push_back(std::move(all_reduce));
    }
  }
  // A device takes part in the all-reduces in the order listed: by mini-batch,
  // then ascending stage (overlapped: the order of their ready backwards on
  // the device), as built above.
  return program;
}

std::vector<std::string> check_schedule_for_hosts(const std::string& name, const std::vector<HostInfo>& hosts) {
  const ScheduleInfo& info = schedule_info(name);
  std::vector<std::string> warnings;
  for (const HostInfo& host : hosts) {
    if (info.needs_async && host.execution == Execution::Sync)
      throw InputError(fmt::format(
          "--schedule {}: host '{}' executes synchronously ({}); {} runs a forward and a backward in parallel on one "
          "device, which BaPipe notes GPUs cannot do: use it on asynchronous (FPGA) hosts",
          name, host.name, to_string(host.kind), name));
    if (host.kind != info.intended_kind)
      warnings.push_back(fmt::format("warning: schedule {} is meant for {} devices, host '{}' is a {}", name,
                                     to_string(info.intended_kind), host.name, to_string(host.kind)));
  }
  return warnings;
}

}  // namespace pipegrid
