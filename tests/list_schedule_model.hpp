#pragma once
// An independent list-scheduling model of a Program, for tests: the
// reference the schedule generators (test_schedules_beyond) and the SimGrid
// engine (test_schedules_beyond_engine) are checked against.

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/program.hpp"

namespace pipegrid::testutil {

// ---------------------------------------------------------------------------
// An independent list-scheduling model: each device runs its stream in order;
// an action starts when the device is free and its dependencies have ended
// (F(s-1); the B or I of s+1, or F(S-1) on the last stage; F(s) for B and I;
// I for W; F for R); no communication. An overlapped pair starts when both
// halves can and lasts `overlap` x (their times added). Chunk op time = full
// stage time / v; B = TB + TW (TB is the input-gradient half, as in the ZB
// papers).

struct Times {
  double tf = 1, tb = 1, tw = 1;
  double overlap = 1;
};

struct ModelRun {
  bool complete = false;
  double makespan = 0;
  double span_bubble = 0;    // max over devices of (last end - first start - work)
  double global_bubble = 0;  // makespan - least work of a device
  std::vector<int> peak;     // chunk-micro-batches in flight, per device
};

inline ModelRun simulate(const Program& program, int v, const Times& t) {
  std::set<Action> present;
  for (const DeviceProgram& device : program.devices)
    for (const Action& a : device.streams.at(0).actions) present.insert(a);
  const int S = program.num_stages;
  const auto duration = [&](const Action& a) {
    switch (a.kind) {
      case ActionKind::Forward: return t.tf / v;
      case ActionKind::Recompute: return t.tf / v;
      case ActionKind::Backward: return (t.tb + t.tw) / v;
      case ActionKind::BackwardInput: return t.tb / v;
      case ActionKind::BackwardWeight: return t.tw / v;
    }
    return 0.0;
  };
  const auto dependencies = [&](const Action& a) {
    std::vector<Action> deps;
    const auto with = [&](ActionKind kind, int stage) { return Action{kind, stage, a.micro_batch, a.mini_batch}; };
    switch (a.kind) {
      case ActionKind::Forward:
        if (a.stage > 0) deps.push_back(with(ActionKind::Forward, a.stage - 1));
        break;
      case ActionKind::Backward:
      case ActionKind::BackwardInput:
        deps.push_back(with(ActionKind::Forward, a.stage));
        if (a.stage + 1 < S)
          deps.push_back(present.count(with(ActionKind::Backward, a.stage + 1)) ? with(ActionKind::Backward, a.stage + 1)
                                                                                 : with(ActionKind::BackwardInput, a.stage + 1));
        break;
      case ActionKind::BackwardWeight:
        deps.push_back(with(ActionKind::BackwardInput, a.stage));
        break;
      case ActionKind::Recompute:
        deps.push_back(with(ActionKind::Forward, a.stage));
        break;
    }
    return deps;
  };

  const std::size_t D = program.devices.size();
  std::map<Action, double> start, end;
  std::vector<std::size_t> next(D, 0);
  std::vector<double> free(D, 0), first(D, -1), work(D, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t d = 0; d < D; ++d) {
      const Stream& stream = program.devices[d].streams[0];
      while (next[d] < stream.actions.size()) {
        const std::size_t i = next[d];
        const bool pair = std::find(stream.overlapped.begin(), stream.overlapped.end(), i) != stream.overlapped.end();
        const std::size_t count = pair ? 2 : 1;
        double ready = free[d];
        bool blocked = false;
        for (std::size_t j = i; j < i + count; ++j)
          for (const Action& dep : dependencies(stream.actions[j])) {
            const auto found = end.find(dep);
            if (found == end.end())
              blocked = true;
            else
              ready = std::max(ready, found->second);
          }
        if (blocked) break;
        const double time =
            pair ? t.overlap * (duration(stream.actions[i]) + duration(stream.actions[i + 1])) : duration(stream.actions[i]);
        for (std::size_t j = i; j < i + count; ++j) {
          start[stream.actions[j]] = ready;
          end[stream.actions[j]] = ready + time;
        }
        if (first[d] < 0) first[d] = ready;
        free[d] = ready + time;
        work[d] += time;
        next[d] += count;
        progress = true;
      }
    }
  }
  ModelRun run;
  run.complete = true;
  for (std::size_t d = 0; d < D; ++d) run.complete = run.complete && next[d] == program.devices[d].streams[0].actions.size();
  if (!run.complete) return run;
  for (std::size_t d = 0; d < D; ++d) run.makespan = std::max(run.makespan, free[d]);
  run.global_bubble = run.makespan - *std::min_element(work.begin(), work.end());
  for (std::size_t d = 0; d < D; ++d) {
    run.span_bubble = std::max(run.span_bubble, free[d] - first[d] - work[d]);
    // +1 when a forward starts, -1 when the final backward (B, or W) ends;
    // at equal times the end comes first.
    std::vector<std::pair<double, int>> events;
    for (const Action& a : program.devices[d].streams[0].actions) {
      if (a.kind == ActionKind::Forward) events.push_back({start[a], +1});
      if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardWeight) events.push_back({end[a], -1});
    }
    std::sort(events.begin(), events.end());
    int now = 0, peak = 0;
    for (const auto& event : events) peak = std::max(peak, now += event.second);
    run.peak.push_back(peak);
  }
  return run;
}

}  // namespace pipegrid::testutil
