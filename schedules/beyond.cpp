// Assembly of the schedules of beyond.hpp into a Program: stage maps,
// mini-batches, recomputation (an R before each B or I, before the
// overlapped pair that holds it), and the options they reject.

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "core/error.hpp"
#include "schedules/beyond.hpp"

namespace pipegrid {
namespace {

using Orders = std::vector<Stream> (*)(int p, int v, int m, const ScheduleOptions& options);

const std::map<std::string, Orders>& beyond_generators() {
  static const std::map<std::string, Orders> generators = {
      {"interleaved-1f1b", [](int p, int v, int m, const ScheduleOptions&) { return interleaved_1f1b_orders(p, v, m); }},
      {"looped-bfs", [](int p, int v, int m, const ScheduleOptions&) { return looped_bfs_orders(p, v, m); }},
      {"zb-h1", [](int p, int, int m, const ScheduleOptions&) { return zb_h1_orders(p, m); }},
      {"zb-h2", [](int p, int, int m, const ScheduleOptions&) { return zb_h2_orders(p, m); }},
      {"zb1p", [](int p, int v, int m, const ScheduleOptions&) { return zb1p_orders(p, v, m); }},
      {"zb-auto",
       [](int p, int, int m, const ScheduleOptions& options) {
         return zb_auto_orders(p, m, options.activation_limit == 0 ? 1.0 : options.activation_limit, options.stage_times);
       }},
      {"zb-v", [](int p, int, int m, const ScheduleOptions&) { return zb_v_orders(p, m); }},
      {"dualpipev", [](int p, int, int m, const ScheduleOptions&) { return dualpipev_orders(p, m); }},
      {"dualpipe", [](int p, int, int m, const ScheduleOptions&) { return dualpipe_orders(p, m); }},
  };
  return generators;
}

// Per mini-batch k and stage s, ascending: the all-reduce of s's gradients
// over the two devices holding it (replica 0's first), each ready at its
// device's last backward of k, releasing both devices' first action of k+1.
void add_copy_all_reduces(Program& program) {
  std::vector<std::map<int, Action>> last_backward(program.devices.size()), first_action(program.devices.size());
  std::map<std::pair<int, int>, std::size_t> holder;  // (stage, replica) -> device
  for (std::size_t d = 0; d < program.devices.size(); ++d) {
    const DeviceProgram& device = program.devices[d];
    for (const int stage : device.stages) holder[{stage, device.replica}] = d;
    for (const Action& action : device.streams.front().actions) {
      first_action[d].emplace(action.mini_batch, action);
      if (action.kind == ActionKind::Backward || action.kind == ActionKind::BackwardWeight)
        last_backward[d][action.mini_batch] = action;
    }
  }
  for (int k = 0; k < program.mini_batches; ++k)
    for (int stage = 0; stage < program.num_stages; ++stage) {
      AllReduce all_reduce{stage, k, {}, {}, false};
      for (const int replica : {0, 1}) {
        const std::size_t d = holder.at({stage, replica});
        all_reduce.ready.push_back(last_backward[d].at(k));
        if (const auto next = first_action[d].find(k + 1); next != first_action[d].end())
          all_reduce.release.push_back(next->second);
      }
      program.all_reduces.push_back(std::move(all_reduce));
    }
}

}  // namespace

bool is_beyond_schedule(const std::string& name) { return beyond_generators().count(name) > 0; }

Program generate_beyond_schedule(const std::string& name, const ScheduleOptions& options) {
  const ScheduleInfo& info = schedule_info(name);
  const int S = options.num_stages, v = options.virtual_stages, m = options.micro_batches;
  if (v < 1) throw InputError(fmt::format("--virtual-stages: expected at least 1 stage per device, found {}", v));
  if (info.fixed_virtual_stages != 0 && v != info.fixed_virtual_stages)
    throw InputError(fmt::format("--virtual-stages: {} runs {} stage{}{} per device; expected {}, found {}", name,
                                 info.fixed_virtual_stages, info.fixed_virtual_stages == 1 ? "" : "s",
                                 info.two_copies ? " of each of its two model copies" : "", info.fixed_virtual_stages, v));
  if (S % v != 0)
    throw InputError(fmt::format("--virtual-stages: {} stages do not split into devices of {} stages each; expected a "
                                 "multiple of {} stages, found {}",
                                 S, v, v, S));
  const int copies = info.two_copies ? 2 : 1;
  if (std::any_of(options.replicas.begin(), options.replicas.end(), [copies](int r) { return r != copies; }))
    throw InputError(info.two_copies
                         ? fmt::format("--replicas: {} runs two copies of the model, stage s on devices s and "
                                       "devices - 1 - s; it places them itself",
                                       name)
                         : fmt::format("--replicas: {} runs one replica per stage", name));
  const int p = S / v;
  const std::vector<Stream> orders = beyond_generators().at(name)(p, v, m, options);

  Program program;
  program.num_stages = S;
  program.micro_batches = m;
  program.mini_batches = options.mini_batches;
  for (int r = 0; r < p; ++r) {
    DeviceProgram device;
    if (info.two_copies) {
      device.stages = {std::min(r, p - 1 - r), std::max(r, p - 1 - r)};
      device.replica = r < p / 2 ? 0 : 1;
    } else {
      for (int c = 0; c < v; ++c)
        device.stages.push_back(info.map == StageMap::V && c % 2 == 1 ? (c + 1) * p - 1 - r : c * p + r);
      std::sort(device.stages.begin(), device.stages.end());
    }
    Stream stream;
    for (int k = 0; k < options.mini_batches; ++k) {
      const Stream& order = orders[r];
      const auto recompute = [&](const Action& action) {
        if (options.recompute && is_input_gradient(action.kind))
          stream.actions.push_back({ActionKind::Recompute, action.stage, action.micro_batch, k});
      };
      std::size_t next_pair = 0;
      for (std::size_t i = 0; i < order.actions.size(); ++i) {
        if (next_pair < order.overlapped.size() && order.overlapped[next_pair] == i) {
          // An overlapped F&B pair: the R of its B or I runs before the pair.
          recompute(order.actions[i]);
          recompute(order.actions[i + 1]);
          stream.overlapped.push_back(stream.actions.size());
          for (const std::size_t j : {i, i + 1}) {
            Action action = order.actions[j];
            action.mini_batch = k;
            stream.actions.push_back(action);
          }
          ++next_pair;
          ++i;
          continue;
        }
        Action action = order.actions[i];
        action.mini_batch = k;
        recompute(action);
        stream.actions.push_back(action);
      }
    }
    device.streams.push_back(std::move(stream));
    program.devices.push_back(std::move(device));
  }
  if (info.two_copies) add_copy_all_reduces(program);
  return program;
}

}  // namespace pipegrid
