// Timeline -> Chrome trace event JSON (the "JSON object format" read by
// Perfetto and chrome://tracing).
//
// Layout of the trace:
//   - one process per host, pid = 1 + position in `timeline.hosts` (hosts that
//     only appear in records follow, in order of first appearance), named with
//     process_name and ordered with process_sort_index metadata;
//   - per process, one thread per compute stream (tid = stream, named
//     "compute" for stream 0 and "compute stream k" otherwise) and a
//     "communication" thread for transfers (tids after the compute streams).
//     Transfers of one host may overlap (a middle stage sends activations
//     downstream while gradients go upstream); slices on one thread must not
//     overlap in a trace, so overlapping transfers spill into further threads
//     "communication 2", "communication 3", ... assigned greedily. A device's
//     parts of a ring all-reduce (ALLREDUCE) are transfers too and share
//     these threads with the sends;
//   - every record is one complete event ("ph":"X"), ts and dur in
//     microseconds, name = action + micro-batch (+ "@k" for mini-batch k > 0),
//     or "allreduce r3" / "allreduce layer 12 r3" for an all-reduce part of
//     round 3 (whole stage / one layer), whose args also carry "round" and
//     "layer" (null for the whole stage);
//   - a "memory" counter per process ("ph":"C"): the timeline's memory
//     series when it has one, else one sample at each record's end (compute
//     and transfers alike), in time order.
// The output depends only on the timeline (no clock, no addresses), so the
// same input always gives the same bytes. One event per line keeps the file
// readable and diff-friendly while remaining a single JSON document.

#include <algorithm>
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "render/chrome_trace.hpp"

namespace pipegrid {

namespace {

using Json = nlohmann::ordered_json;

constexpr double kMicrosecondsPerSecond = 1e6;

bool is_allreduce(const TimelineRecord& record) { return TimelineRecord::is_collective(record.action); }

/// Event name of a record: "F3", "B3", "I3", "W3", "SEND_F3", "F3@1" for
/// mini-batch 1; on a host of several stages (interleaved, V) the stage
/// first, as PyTorch names actions ("7F3", "7SEND_F3"); "allreduce r3",
/// "allreduce layer 12 r3" (a layer's or a bucket's) or "allreduce tied r3"
/// (the tied word embedding's) for an all-reduce part; "reducescatter" and
/// "allgather" alike for the distributed optimizer's.
std::string event_name(const TimelineRecord& record, bool several_stages) {
  if (is_allreduce(record)) {
    const char* kind = record.action == "REDUCE_SCATTER" ? "reducescatter"
                       : record.action == "ALLGATHER"    ? "allgather"
                                                         : "allreduce";
    if (record.micro_batch >= 0) return fmt::format("{} layer {} r{}", kind, record.micro_batch, record.mini_batch);
    if (record.micro_batch == -2) return fmt::format("{} tied r{}", kind, record.mini_batch);
    return fmt::format("{} r{}", kind, record.mini_batch);
  }
  std::string name = fmt::format("{}{}{}", several_stages ? std::to_string(record.stage) : "", record.action, record.micro_batch);
  if (record.mini_batch > 0) name += fmt::format("@{}", record.mini_batch);
  return name;
}

std::string compute_thread_name(int stream) {
  return stream == 0 ? std::string("compute") : fmt::format("compute stream {}", stream);
}

/// What the trace needs to know about one host before writing its events.
struct HostTracks {
  int pid = 0;
  std::set<int> compute_streams;     ///< streams with at least one compute record
  std::set<int> stages;              ///< stages of its compute records
  std::vector<std::size_t> records;  ///< indices into timeline.records, input order
  std::map<std::size_t, int> lane;   ///< transfer record index -> communication lane
  int lanes = 0;                     ///< number of communication lanes
  int first_communication_tid() const { return compute_streams.empty() ? 1 : *compute_streams.rbegin() + 1; }
};

/// Puts each transfer of `host` on the first lane that is free at its start
/// (transfers taken by start time, then input order); fills host.lane/lanes.
void assign_communication_lanes(const Timeline& timeline, HostTracks& host) {
  std::vector<std::size_t> transfers;
  for (std::size_t index : host.records)
    if (timeline.records[index].kind() == RecordKind::Transfer) transfers.push_back(index);
  std::stable_sort(transfers.begin(), transfers.end(), [&](std::size_t a, std::size_t b) {
    return timeline.records[a].start_s < timeline.records[b].start_s;
  });
  std::vector<double> lane_end;
  for (std::size_t index : transfers) {
    const TimelineRecord& record = timeline.records[index];
    std::size_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > record.start_s) ++lane;
    if (lane == lane_end.size()) lane_end.push_back(record.end_s);
    lane_end[lane] = std::max(record.end_s, record.start_s);
    host.lane[index] = static_cast<int>(lane);
  }
  host.lanes = static_cast<int>(lane_end.size());
}

Json metadata(const char* what, int pid, int tid, const char* key, Json value) {
  Json event;
  event["name"] = what;
  event["ph"] = "M";
  event["pid"] = pid;
  event["tid"] = tid;
  event["args"] = Json::object({{key, std::move(value)}});
  return event;
}

}  // namespace

std::string timeline_to_chrome_trace(const Timeline& timeline) {
  // Hosts in display order: the declared ones, then any stray record hosts.
  std::vector<std::string> order;
  std::map<std::string, HostTracks> tracks;
  auto add_host = [&](const std::string& host) {
    if (tracks.count(host)) return;
    order.push_back(host);
    tracks[host].pid = static_cast<int>(order.size());
  };
  for (const std::string& host : timeline.hosts) add_host(host);
  for (std::size_t i = 0; i < timeline.records.size(); ++i) {
    const TimelineRecord& record = timeline.records[i];
    add_host(record.host);
    HostTracks& host = tracks[record.host];
    host.records.push_back(i);
    if (record.kind() == RecordKind::Compute) {
      host.compute_streams.insert(record.stream);
      host.stages.insert(record.stage);
    }
  }
  for (auto& [name, host] : tracks) assign_communication_lanes(timeline, host);

  std::vector<Json> events;
  for (const std::string& name : order) {
    const HostTracks& host = tracks[name];
    events.push_back(metadata("process_name", host.pid, 0, "name", name));
    events.push_back(metadata("process_sort_index", host.pid, 0, "sort_index", host.pid));
    // Threads sort by their tid: compute streams first, communication last.
    for (int stream : host.compute_streams) {
      events.push_back(metadata("thread_name", host.pid, stream, "name", compute_thread_name(stream)));
      events.push_back(metadata("thread_sort_index", host.pid, stream, "sort_index", stream));
    }
    for (int lane = 0; lane < host.lanes; ++lane) {
      const int tid = host.first_communication_tid() + lane;
      const std::string thread = lane == 0 ? std::string("communication") : fmt::format("communication {}", lane + 1);
      events.push_back(metadata("thread_name", host.pid, tid, "name", thread));
      events.push_back(metadata("thread_sort_index", host.pid, tid, "sort_index", tid));
    }

    for (std::size_t index : host.records) {
      const TimelineRecord& record = timeline.records[index];
      const bool transfer = record.kind() == RecordKind::Transfer;
      Json event;
      event["name"] = event_name(record, host.stages.size() > 1);
      event["cat"] = record.action;
      event["ph"] = "X";
      event["ts"] = record.start_s * kMicrosecondsPerSecond;
      event["dur"] = (record.end_s - record.start_s) * kMicrosecondsPerSecond;
      event["pid"] = host.pid;
      event["tid"] = transfer ? host.first_communication_tid() + host.lane.at(index) : record.stream;
      event["args"] = Json::object({{"stage", record.stage},
                                    {"micro_batch", record.micro_batch},
                                    {"mini_batch", record.mini_batch},
                                    {"bytes", record.bytes},
                                    {"peer", record.peer},
                                    {"memory_bytes", record.memory_bytes}});
      if (is_allreduce(record)) {
        event["args"]["round"] = record.mini_batch;
        event["args"]["layer"] = record.micro_batch >= 0 ? Json(record.micro_batch) : Json(nullptr);
      }
      events.push_back(std::move(event));
    }

    // Memory samples in time order: the exact series when the timeline has
    // one (every change), else one per record end; equal end times keep the
    // input order, so the last record to finish at an instant gives the value.
    auto counter = [&](double time_s, double bytes) {
      Json event;
      event["name"] = "memory";
      event["ph"] = "C";
      event["ts"] = time_s * kMicrosecondsPerSecond;
      event["pid"] = host.pid;
      event["args"] = Json::object({{"bytes", bytes}});
      events.push_back(std::move(event));
    };
    if (auto series = timeline.memory_series.find(name); series != timeline.memory_series.end() && !series->second.empty()) {
      for (const auto& [time_s, bytes] : series->second) counter(time_s, bytes);
    } else {
      std::vector<std::size_t> by_end = host.records;
      std::stable_sort(by_end.begin(), by_end.end(), [&](std::size_t a, std::size_t b) {
        return timeline.records[a].end_s < timeline.records[b].end_s;
      });
      for (std::size_t index : by_end) counter(timeline.records[index].end_s, timeline.records[index].memory_bytes);
    }
  }

  std::string text = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  for (std::size_t i = 0; i < events.size(); ++i) {
    text += events[i].dump();
    text += i + 1 < events.size() ? ",\n" : "\n";
  }
  text += "]}\n";
  return text;
}

}  // namespace pipegrid
