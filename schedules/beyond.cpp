// Assembly of the schedules of beyond.hpp into a Program: stage maps,
// mini-batches, recomputation, and the options they reject.

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "core/error.hpp"
#include "schedules/beyond.hpp"

namespace pipegrid {
namespace {

using Orders = std::vector<Stream> (*)(int p, int v, int m);

const std::map<std::string, Orders>& beyond_generators() {
  static const std::map<std::string, Orders> generators = {
      {"interleaved-1f1b", interleaved_1f1b_orders},
      {"looped-bfs", looped_bfs_orders},
      {"zb-h1", [](int p, int, int m) { return zb_h1_orders(p, m); }},
      {"zb-h2", [](int p, int, int m) { return zb_h2_orders(p, m); }},
      {"zb1p", zb1p_orders},
      {"zb-v", [](int p, int, int m) { return zb_v_orders(p, m); }},
      {"dualpipev", [](int p, int, int m) { return dualpipev_orders(p, m); }},
  };
  return generators;
}

}  // namespace

bool is_beyond_schedule(const std::string& name) { return beyond_generators().count(name) > 0; }

Program generate_beyond_schedule(const std::string& name, const ScheduleOptions& options) {
  const ScheduleInfo& info = schedule_info(name);
  const int S = options.num_stages, v = options.virtual_stages, m = options.micro_batches;
  if (v < 1) throw InputError(fmt::format("--virtual-stages: expected at least 1 stage per device, found {}", v));
  if (info.fixed_virtual_stages != 0 && v != info.fixed_virtual_stages)
    throw InputError(fmt::format("--virtual-stages: {} runs {} stage{} per device; expected {}, found {}", name,
                                 info.fixed_virtual_stages, info.fixed_virtual_stages == 1 ? "" : "s",
                                 info.fixed_virtual_stages, v));
  if (S % v != 0)
    throw InputError(fmt::format("--virtual-stages: {} stages do not split into devices of {} stages each; expected a "
                                 "multiple of {} stages, found {}",
                                 S, v, v, S));
  if (std::any_of(options.replicas.begin(), options.replicas.end(), [](int r) { return r != 1; }))
    throw InputError(fmt::format("--replicas: {} runs one replica per stage", name));
  if (options.recompute && name != "interleaved-1f1b" && name != "looped-bfs")
    throw InputError(fmt::format("{}: {} does not recompute; recomputation applies to gpipe, the 1f1b "
                                 "schedules, interleaved-1f1b and looped-bfs",
                                 options.recompute_flag, name));
  const int p = S / v;
  const std::vector<Stream> orders = beyond_generators().at(name)(p, v, m);

  Program program;
  program.num_stages = S;
  program.micro_batches = m;
  program.mini_batches = options.mini_batches;
  for (int r = 0; r < p; ++r) {
    DeviceProgram device;
    for (int c = 0; c < v; ++c)
      device.stages.push_back(info.map == StageMap::V && c % 2 == 1 ? (c + 1) * p - 1 - r : c * p + r);
    std::sort(device.stages.begin(), device.stages.end());
    Stream stream;
    for (int k = 0; k < options.mini_batches; ++k) {
      const Stream& order = orders[r];
      for (const std::size_t position : order.overlapped) stream.overlapped.push_back(stream.actions.size() + position);
      for (Action action : order.actions) {
        action.mini_batch = k;
        if (options.recompute && action.kind == ActionKind::Backward)
          stream.actions.push_back({ActionKind::Recompute, action.stage, action.micro_batch, k});
        stream.actions.push_back(action);
      }
    }
    device.streams.push_back(std::move(stream));
    program.devices.push_back(std::move(device));
  }
  return program;
}

}  // namespace pipegrid
