#include "core/metrics.hpp"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

namespace pipegrid {

namespace {

// A change of a device's memory (bytes) or stash count at a time. At equal
// times releases come first, so a buffer freed at t and another allocated at
// t never both count.
struct Change {
  double time;
  double bytes;
  int stashes;
  std::size_t record;  ///< record whose end this change is reported after, or npos
};

using Key = std::tuple<int, int, int>;  // stage, micro-batch, mini-batch

Key key_of(const TimelineRecord& record) { return {record.stage, record.micro_batch, record.mini_batch}; }

}  // namespace

MemoryPeaks annotate_memory(Timeline& timeline, const MemoryModel& model,
                            const std::map<std::string, int>& stage_of_host) {
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::map<std::string, std::vector<Change>> changes;
  // Ends of compute actions, to know when a received message is consumed.
  std::map<std::pair<std::string, std::tuple<char, int, int, int>>, double> compute_end;
  std::map<std::pair<std::string, Key>, double> recompute_start;
  for (const TimelineRecord& r : timeline.records)
    if (r.kind() == RecordKind::Compute) {
      compute_end[{r.host, {r.action[0], r.stage, r.micro_batch, r.mini_batch}}] = r.end_s;
      if (r.action == "R") recompute_start[{r.host, key_of(r)}] = r.start_s;
    }

  for (std::size_t i = 0; i < timeline.records.size(); ++i) {
    const TimelineRecord& r = timeline.records[i];
    changes[r.host].push_back({r.end_s, 0, 0, i});
    if (r.kind() == RecordKind::Transfer) {
      // Receive buffer on the peer: from arrival until its consumer ends.
      const bool forward = r.action == "SEND_F";
      const auto consumer = std::make_tuple(forward ? 'F' : 'B', r.stage + (forward ? 1 : -1), r.micro_batch, r.mini_batch);
      const auto end = compute_end.find({r.peer, consumer});
      changes[r.peer].push_back({r.end_s, r.bytes, 0, none});
      changes[r.peer].push_back({end == compute_end.end() ? r.end_s : std::max(r.end_s, end->second), -r.bytes, 0, none});
      continue;
    }
    if (r.stage < 0 || r.stage >= static_cast<int>(model.stages.size())) continue;
    const StageCost& stage = model.stages[r.stage];
    if (r.action == "F") {
      const auto backward_end = compute_end.find({r.host, {'B', r.stage, r.micro_batch, r.mini_batch}});
      const double release = backward_end == compute_end.end() ? r.end_s : backward_end->second;
      const double kept = model.recompute ? stage.input_bytes : stage.stash_bytes;
      changes[r.host].push_back({r.start_s, kept, 1, none});
      changes[r.host].push_back({release, -kept, -1, none});
      if (model.recompute && !recompute_start.count({r.host, key_of(r)})) {
        // Recomputation asked for but this micro-batch was not recomputed: it
        // kept its full stash.
        changes[r.host].push_back({r.start_s, stage.stash_bytes - kept, 0, none});
        changes[r.host].push_back({release, -(stage.stash_bytes - kept), 0, none});
      }
    } else if (r.action == "R") {
      const auto backward_end = compute_end.find({r.host, {'B', r.stage, r.micro_batch, r.mini_batch}});
      const double release = backward_end == compute_end.end() ? r.end_s : backward_end->second;
      changes[r.host].push_back({r.start_s, stage.stash_bytes - stage.input_bytes, 0, none});
      changes[r.host].push_back({release, -(stage.stash_bytes - stage.input_bytes), 0, none});
    }
  }

  MemoryPeaks peaks;
  for (auto& [host, list] : changes) {
    double base = 0;
    if (auto stage = stage_of_host.find(host); stage != stage_of_host.end() && stage->second >= 0 &&
                                               stage->second < static_cast<int>(model.stages.size()))
      base = 2 * model.stages[stage->second].weight_bytes;  // weights + weight gradients
    // Releases, then reports of record ends, then allocations.
    std::stable_sort(list.begin(), list.end(), [](const Change& x, const Change& y) {
      auto rank = [](const Change& c) { return c.bytes < 0 || c.stashes < 0 ? 0 : c.record != static_cast<std::size_t>(-1) ? 1 : 2; };
      return std::make_tuple(x.time, rank(x)) < std::make_tuple(y.time, rank(y));
    });
    double bytes = base, peak = base;
    int stashes = 0, peak_stashes = 0;
    for (const Change& change : list) {
      bytes += change.bytes;
      stashes += change.stashes;
      peak = std::max(peak, bytes);
      peak_stashes = std::max(peak_stashes, stashes);
      if (change.record != static_cast<std::size_t>(-1)) timeline.records[change.record].memory_bytes = bytes;
    }
    peaks.peak_bytes[host] = peak;
    peaks.peak_stashed[host] = peak_stashes;
  }
  for (const auto& [host, stage] : stage_of_host)
    if (!peaks.peak_bytes.count(host) && stage >= 0 && stage < static_cast<int>(model.stages.size()))
      peaks.peak_bytes[host] = 2 * model.stages[stage].weight_bytes;
  return peaks;
}

Metrics compute_metrics(Timeline& timeline, const MemoryModel& model, const std::map<std::string, int>& stage_of_host,
                        int mini_batches, int samples_per_minibatch) {
  Metrics metrics;
  metrics.samples_per_minibatch = samples_per_minibatch;
  const MemoryPeaks peaks = annotate_memory(timeline, model, stage_of_host);
  double first = 0, last = 0, transferred = 0;
  bool any = false;
  std::map<std::string, std::vector<std::pair<double, double>>> busy;
  for (const TimelineRecord& r : timeline.records) {
    if (r.kind() == RecordKind::Transfer) {
      transferred += r.bytes;
      continue;
    }
    first = any ? std::min(first, r.start_s) : r.start_s;
    last = any ? std::max(last, r.end_s) : r.end_s;
    any = true;
    busy[r.host].push_back({r.start_s, r.end_s});
  }
  const double span = last - first;
  metrics.minibatch_time_s = mini_batches > 0 ? span / mini_batches : 0;
  metrics.throughput_samples_per_s = metrics.minibatch_time_s > 0 ? samples_per_minibatch / metrics.minibatch_time_s : 0;
  const double samples = static_cast<double>(samples_per_minibatch) * mini_batches;
  metrics.bytes_per_sample = samples > 0 ? transferred / samples : 0;

  double bubble_sum = 0;
  for (const std::string& host : timeline.hosts) {
    DeviceMetrics device;
    device.host = host;
    if (auto stage = stage_of_host.find(host); stage != stage_of_host.end()) device.stage = stage->second;
    auto& intervals = busy[host];
    std::sort(intervals.begin(), intervals.end());
    double covered_until = -1e300;
    for (const auto& [start, end] : intervals) {
      const double from = std::max(start, covered_until);
      if (end > from) device.busy_s += end - from;
      covered_until = std::max(covered_until, end);
    }
    device.bubble_fraction = span > 0 ? 1 - device.busy_s / span : 0;
    if (auto peak = peaks.peak_bytes.find(host); peak != peaks.peak_bytes.end()) device.peak_memory_bytes = peak->second;
    if (auto peak = peaks.peak_stashed.find(host); peak != peaks.peak_stashed.end())
      device.peak_stashed_microbatches = peak->second;
    if (auto capacity = model.capacity_bytes.find(host); capacity != model.capacity_bytes.end()) {
      device.memory_capacity_bytes = capacity->second;
      device.oom = device.peak_memory_bytes > capacity->second;
    }
    bubble_sum += device.bubble_fraction;
    metrics.devices.push_back(device);
  }
  metrics.bubble_fraction = metrics.devices.empty() ? 0 : bubble_sum / static_cast<double>(metrics.devices.size());
  return metrics;
}

}  // namespace pipegrid
