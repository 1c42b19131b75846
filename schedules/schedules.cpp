#include "schedules/schedules.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"

namespace pipegrid {

const std::vector<ScheduleInfo>& schedule_catalog() {
  static const std::vector<ScheduleInfo> catalog = {
      {"gpipe", "GPipe: all forwards, then all backwards, flush per mini-batch", DeviceKind::Gpu, false, true},
      {"1f1b-sno", "BaPipe 1F1B-SNO: 1F1B, N-i+1 warm-up forwards, communication not overlapped (GPU)", DeviceKind::Gpu, false, true},
      {"1f1b-so", "BaPipe 1F1B-SO: 1F1B with doubled warm-up so receives hide behind compute (GPU)", DeviceKind::Gpu, false, true},
      {"1f1b-as", "BaPipe 1F1B-AS: the 1F1B-SNO order on asynchronous devices (FPGA)", DeviceKind::Fpga, false, true},
      {"fbp-as", "BaPipe FBP-AS: forward and backward streams in parallel, stash cap 2(N-i+1) (FPGA)", DeviceKind::Fpga, true, true},
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

int warmup_forwards(const std::string& name, int num_stages, int stage, int micro_batches) {
  const int depth = num_stages - stage;  // N - i + 1 with 1-based i
  if (name == "gpipe") return micro_batches;
  if (name == "1f1b-so") return std::min(2 * depth, micro_batches);
  return std::min(depth, micro_batches);
}

namespace {

Action forward(int stage, int m, int k) { return {ActionKind::Forward, stage, m, k}; }
Action backward(int stage, int m, int k) { return {ActionKind::Backward, stage, m, k}; }

// Appends the backward of micro-batch m, preceded by its recomputation when asked.
void push_backward(std::vector<Action>& actions, int stage, int m, int k, bool recompute) {
  if (recompute) actions.push_back({ActionKind::Recompute, stage, m, k});
  actions.push_back(backward(stage, m, k));
}

// One stream per stage: `warmup` forwards, then one backward and one forward
// alternately until the forwards are done, then the remaining backwards.
// warmup = M is GPipe.
std::vector<Action> one_f_one_b(int stage, int micro_batches, int warmup, int k, bool recompute) {
  std::vector<Action> actions;
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) actions.push_back(forward(stage, next_forward, k));
  while (next_forward < micro_batches) {
    push_backward(actions, stage, next_backward++, k, recompute);
    actions.push_back(forward(stage, next_forward++, k));
  }
  while (next_backward < micro_batches) push_backward(actions, stage, next_backward++, k, recompute);
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

  const int N = options.num_stages, M = options.micro_batches;
  Program program;
  program.num_stages = N;
  program.micro_batches = M;
  program.mini_batches = options.mini_batches;
  for (int stage = 0; stage < N; ++stage) {
    DeviceProgram device{stage, 0, {}};
    if (info.name == "fbp-as") {
      // A forward stream and a backward stream sharing the device. F_m waits
      // for B_(m - cap) (the stash cap, cap = 2(N-i+1)); the next mini-batch's
      // forwards wait for this one's last backward (flush and update).
      const int cap = 2 * (N - stage);
      Stream forwards, backwards;
      for (int k = 0; k < options.mini_batches; ++k)
        for (int m = 0; m < M; ++m) {
          forwards.actions.push_back(forward(stage, m, k));
          push_backward(backwards.actions, stage, m, k, options.recompute);
          if (m >= cap) program.extra_dependencies.push_back({backward(stage, m - cap, k), forward(stage, m, k)});
          if (k > 0 && m == 0) program.extra_dependencies.push_back({backward(stage, M - 1, k - 1), forward(stage, 0, k)});
        }
      device.streams = {std::move(forwards), std::move(backwards)};
    } else {
      Stream stream;
      const int warmup = warmup_forwards(info.name, N, stage, M);
      for (int k = 0; k < options.mini_batches; ++k) {
        auto actions = one_f_one_b(stage, M, warmup, k, options.recompute);
        stream.actions.insert(stream.actions.end(), actions.begin(), actions.end());
      }
      device.streams.push_back(std::move(stream));
    }
    program.devices.push_back(std::move(device));
  }
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
