#pragma once
// Helpers shared by the executor's tests: small zoo models, requests, the
// norm-wise relative error, and the check that a measured timeline is its
// Program's (every measured action once, in program order per device
// stream, start < end, sends and all-reduces to the right peers).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/program.hpp"
#include "schedules/schedules.hpp"
#include "validate/executor.hpp"
#include "validate/model_zoo.hpp"

namespace pipegrid::validate::executor_test {

inline ModelConfig small_model(const std::string& name) {
  if (name == "mlp") return {"mlp", {{"hidden", 32}, {"layers", 6}, {"classes", 5}}};
  if (name == "gpt") return {"gpt", {{"vocabulary", 50}, {"hidden", 32}, {"heads", 2}, {"layers", 3}, {"sequence", 8}}};
  if (name == "gnmt") return {"gnmt", {{"vocabulary", 40}, {"hidden", 16}, {"layers", 3}, {"sequence", 6}}};
  return {"vgg16", {{"width", 4}, {"image", 32}, {"hidden", 16}, {"classes", 5}}};
}

inline ExecutionRequest make_request(const ModelConfig& model, const std::string& schedule, const ScheduleOptions& options) {
  ExecutionRequest request;
  request.model = model;
  request.stages = uniform_ranges(num_layers(model), options.num_stages);
  request.program = generate_schedule(schedule, options);
  request.micro_batch_size = 3;
  request.learning_rate = 0.05;
  request.seed = 7;
  request.keep_state = true;
  request.update_interval = std::max(1, update_interval(schedule, options));
  return request;
}

inline ExecutionRequest make_request(const ModelConfig& model, const std::string& schedule, int stages, int micro_batches,
                                     int mini_batches, bool recompute = false) {
  ScheduleOptions options;
  options.num_stages = stages;
  options.micro_batches = micro_batches;
  options.mini_batches = mini_batches;
  options.recompute = recompute;
  return make_request(model, schedule, options);
}

/// ||a - b|| / ||b|| over every value of the lists.
inline double relative_error(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double difference = 0, norm = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].size(), b[i].size()) << "parameter " << i;
    for (std::size_t j = 0; j < std::min(a[i].size(), b[i].size()); ++j) {
      difference += std::pow(double(a[i][j]) - b[i][j], 2);
      norm += std::pow(double(b[i][j]), 2);
    }
  }
  return std::sqrt(difference / norm);
}

/** The measured timeline holds every action of the Program's measured
 *  mini-batches exactly once, in program order per device stream (hosts
 *  cpu<d>), each with start < end; every send goes to the device that
 *  consumes it, with bytes, and none between two stages of one device
 *  (actions F, B, R, I, W); every measured all-reduce (all its ready
 *  backwards measured) has one ALLREDUCE record per participant (per layer
 *  with parameters when per-layer), to the next device of its ring, with
 *  distinct, non-negative rounds per stage and host; optimizer steps (U)
 *  follow measured backwards of their own device. */
inline void expect_timeline_follows_program(const ExecutionRequest& request, const ExecutionResult& result) {
  const Program& program = request.program;
  const int warmup = request.warmup_mini_batches;
  const auto host = [](int device) { return "cpu" + std::to_string(device); };
  std::map<Action, int> device_of;
  for (std::size_t d = 0; d < program.devices.size(); ++d)
    for (const Stream& stream : program.devices[d].streams)
      for (const Action& action : stream.actions) device_of[action] = static_cast<int>(d);
  std::vector<std::string> hosts;
  for (std::size_t d = 0; d < program.devices.size(); ++d) hosts.push_back(host(static_cast<int>(d)));
  EXPECT_EQ(result.timeline.hosts, hosts);

  std::map<std::pair<std::string, int>, std::vector<Action>> seen;
  std::map<std::string, int> all_reduce_records;
  std::map<std::pair<int, std::string>, std::set<std::pair<int, int>>> rounds;  // (stage, host) -> (round, layer)
  std::set<std::string> sends;
  std::set<std::pair<std::string, Action>> steps;
  std::map<std::pair<std::string, Action>, double> step_start, backward_end;
  for (const TimelineRecord& record : result.timeline.records) {
    EXPECT_LT(record.start_s, record.end_s) << record.host << " " << record.action;
    EXPECT_GE(record.start_s, 0);
    const int k = record.mini_batch + warmup;
    if (record.action == "SEND_F" || record.action == "SEND_B") {
      EXPECT_GT(record.bytes, 0);
      // The consuming stage's forward runs on the device of its B or I.
      const Action consumer{ActionKind::Forward, record.stage + (record.action == "SEND_F" ? 1 : -1), record.micro_batch, k};
      EXPECT_EQ(record.peer, host(device_of.at(consumer))) << to_string(consumer);
      EXPECT_NE(record.peer, record.host) << "a hand-off between two stages of one device is no send";
      const bool first = sends.insert(record.action + to_string(consumer)).second;
      EXPECT_TRUE(first) << "twice: " << record.action << " " << to_string(consumer);
      continue;
    }
    if (record.action == "ALLREDUCE") {
      ++all_reduce_records[record.host];
      EXPECT_GT(record.bytes, 0);
      EXPECT_GE(record.mini_batch, 0);
      const bool first = rounds[std::make_pair(record.stage, record.host)].insert(std::make_pair(record.mini_batch, record.micro_batch)).second;
      EXPECT_TRUE(first) << record.host << " all-reduce round " << record.mini_batch << " twice";
      continue;
    }
    if (record.action == kOptimizerStepAction) {
      // After a B, or the W of a split backward.
      Action backward{ActionKind::Backward, record.stage, record.micro_batch, k};
      if (!device_of.count(backward)) backward.kind = ActionKind::BackwardWeight;
      EXPECT_EQ(record.host, host(device_of.at(backward))) << "optimizer step after " << to_string(backward);
      const bool first = steps.insert({record.host, backward}).second;
      EXPECT_TRUE(first) << record.host << " steps twice after " << to_string(backward);
      step_start[{record.host, backward}] = record.start_s;
      continue;
    }
    const std::map<std::string, ActionKind> kinds{{"F", ActionKind::Forward},       {"B", ActionKind::Backward},
                                                  {"R", ActionKind::Recompute},     {"I", ActionKind::BackwardInput},
                                                  {"W", ActionKind::BackwardWeight}};
    ASSERT_TRUE(kinds.count(record.action)) << "unknown action " << record.action;
    const ActionKind kind = kinds.at(record.action);
    seen[{record.host, record.stream}].push_back({kind, record.stage, record.micro_batch, k});
    if (kind == ActionKind::Backward || kind == ActionKind::BackwardWeight) backward_end[{record.host, seen[{record.host, record.stream}].back()}] = record.end_s;
  }
  // Optimizer steps (U): each after a measured backward of its own device,
  // never before that backward ended; every device that ran a measured
  // backward stepped at least once.
  std::set<std::string> stepped, backed;
  for (const auto& [key, start] : step_start) {
    stepped.insert(key.first);
    ASSERT_TRUE(backward_end.count(key)) << key.first << ": step after an unmeasured " << to_string(key.second);
    EXPECT_GE(start, backward_end.at(key)) << key.first << ": step before " << to_string(key.second) << " ended";
  }
  for (const auto& [key, end] : backward_end) backed.insert(key.first);
  EXPECT_EQ(stepped, backed) << "devices with measured backwards and devices with optimizer steps differ";
  std::size_t expected_sends = 0;
  std::map<std::string, int> expected_all_reduces;
  for (std::size_t d = 0; d < program.devices.size(); ++d) {
    const DeviceProgram& device = program.devices[d];
    for (std::size_t s = 0; s < device.streams.size(); ++s) {
      std::vector<Action> expected;
      for (const Action& action : device.streams[s].actions)
        if (action.mini_batch >= warmup) {
          expected.push_back(action);
          // Sends between devices only: two stages of one device hand off locally.
          const auto elsewhere = [&](int stage) {
            return device_of.at({ActionKind::Forward, stage, action.micro_batch, action.mini_batch}) != static_cast<int>(d);
          };
          if (action.kind == ActionKind::Forward && action.stage < program.num_stages - 1 && elsewhere(action.stage + 1))
            ++expected_sends;
          if (is_input_gradient(action.kind) && action.stage > 0 && elsewhere(action.stage - 1)) ++expected_sends;
        }
      const std::vector<Action>& measured = seen[std::make_pair(host(static_cast<int>(d)), static_cast<int>(s))];
      EXPECT_EQ(measured, expected) << host(static_cast<int>(d)) << " stream " << s;
    }
  }
  EXPECT_EQ(sends.size(), expected_sends);
  for (const AllReduce& all_reduce : program.all_reduces) {
    bool measured = true;
    for (const Action& ready : all_reduce.ready) measured = measured && ready.mini_batch >= warmup;
    if (!measured) continue;
    int jobs = 1;
    if (all_reduce.per_layer) {
      const auto [first, last] = request.stages[all_reduce.stage];
      jobs = last - first;  // the zoo's test models have parameters in every layer
    }
    for (const Action& ready : all_reduce.ready) expected_all_reduces[host(device_of.at(ready))] += jobs;
  }
  EXPECT_EQ(all_reduce_records, expected_all_reduces);
  for (const TimelineRecord& record : result.timeline.records)
    if (record.action == "ALLREDUCE") {
      // The peer is the next participant of the ring.
      const AllReduce* found = nullptr;
      for (const AllReduce& all_reduce : program.all_reduces)
        if (all_reduce.stage == record.stage) found = &all_reduce;
      ASSERT_NE(found, nullptr);
      std::vector<std::string> ring;
      for (const Action& ready : found->ready) ring.push_back(host(device_of.at(ready)));
      const auto at = std::find(ring.begin(), ring.end(), record.host);
      ASSERT_NE(at, ring.end());
      EXPECT_EQ(record.peer, ring[(at - ring.begin() + 1) % ring.size()]);
    }
}

}  // namespace pipegrid::validate::executor_test
