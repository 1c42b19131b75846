// The simulator's inputs from a Calibration, and the attribution of the
// executor's per-action overhead from measured timelines (no LibTorch here).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "core/error.hpp"
#include "validate/calibrate.hpp"

namespace pipegrid::validate {
namespace {

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

Calibration::Overhead attribute_overhead(const std::vector<Timeline>& measured, const Profile& profile,
                                         const LayerRanges& ranges, double copy_latency_s, double copy_bandwidth_Bps) {
  // Profiled forward and backward time of each stage.
  std::vector<double> stage_forward(ranges.size(), 0), stage_backward(ranges.size(), 0);
  for (std::size_t s = 0; s < ranges.size(); ++s)
    for (int l = ranges[s].first; l < ranges[s].second; ++l) {
      if (l < 0 || l >= static_cast<int>(profile.layers.size()))
        throw InputError(fmt::format("overhead attribution: stage {} names layer {}, the profile has {} layers", s, l,
                                     profile.layers.size()));
      stage_forward[s] += profile.layers[l].forward_s;
      stage_backward[s] += profile.layers[l].backward_s;
    }
  const int last_stage = static_cast<int>(ranges.size()) - 1;

  std::map<std::string, std::vector<double>> in_action;  // per action kind
  std::vector<double> dispatch, waited, sends;
  int actions = 0;
  for (const Timeline& timeline : measured) {
    // When each message could be received: its SEND record's start + the
    // fitted copy time (the record's end comes later when the sending worker
    // is descheduled after handing the message over).
    std::map<std::tuple<std::string, int, int, int>, double> sent;  // (action, producer stage, micro, mini)
    std::map<std::string, std::vector<const TimelineRecord*>> by_host;
    std::map<std::tuple<std::string, int>, const TimelineRecord*> last_backward;  // (host, mini-batch)
    for (const TimelineRecord& record : timeline.records) {
      by_host[record.host].push_back(&record);
      if (record.action == "SEND_F" || record.action == "SEND_B") {
        const double copy = copy_latency_s + (copy_bandwidth_Bps > 0 ? record.bytes / copy_bandwidth_Bps : 0.0);
        sent[{record.action, record.stage, record.micro_batch, record.mini_batch}] = record.start_s + copy;
        sends.push_back(record.end_s - record.start_s);
      }
      if (record.action == "B") {
        const TimelineRecord*& last = last_backward[{record.host, record.mini_batch}];
        if (last == nullptr || record.end_s > last->end_s) last = &record;
      }
    }
    for (auto& [host, records] : by_host) {
      std::stable_sort(records.begin(), records.end(),
                       [](const TimelineRecord* a, const TimelineRecord* b) { return a->start_s < b->start_s; });
      for (std::size_t i = 0; i < records.size(); ++i) {
        const TimelineRecord& record = *records[i];
        const bool forward = record.action == "F" || record.action == "R";
        if (!forward && record.action != "B") continue;
        if (record.stage < 0 || record.stage > last_stage)
          throw InputError(fmt::format("overhead attribution: {} runs stage {}, expected 0..{}", host, record.stage, last_stage));
        ++actions;
        const double layers = forward ? stage_forward[record.stage] : stage_backward[record.stage];
        in_action[record.action].push_back(record.end_s - record.start_s - layers);
        if (i == 0) continue;
        const TimelineRecord& previous = *records[i - 1];
        if (previous.action == "B" && last_backward.at({host, previous.mini_batch}) == &previous) continue;
        double input_ready = -std::numeric_limits<double>::infinity();
        if (record.action == "F" && record.stage > 0) {
          if (auto it = sent.find({"SEND_F", record.stage - 1, record.micro_batch, record.mini_batch}); it != sent.end())
            input_ready = it->second;
        } else if (record.action == "B" && record.stage < last_stage) {
          if (auto it = sent.find({"SEND_B", record.stage + 1, record.micro_batch, record.mini_batch}); it != sent.end())
            input_ready = it->second;
        }
        if (input_ready > previous.end_s)
          waited.push_back(record.start_s - input_ready);
        else
          dispatch.push_back(record.start_s - previous.end_s);
      }
    }
  }
  if (actions == 0) throw InputError("overhead attribution: the measured timelines have no compute action");

  Calibration::Overhead overhead;
  overhead.actions = actions;
  for (const auto& [kind, values] : in_action)
    overhead.in_action_s += median_of(values) * static_cast<double>(values.size()) / actions;
  overhead.dispatch_s = median_of(dispatch);
  overhead.send_s = median_of(sends) * static_cast<double>(sends.size()) / actions;
  overhead.action_overhead_s = std::max(0.0, overhead.in_action_s + overhead.dispatch_s + overhead.send_s);
  overhead.wakeup_s = waited.empty() ? 0 : std::max(0.0, median_of(waited) - overhead.dispatch_s);
  return overhead;
}

std::string calibration_platform_xml(const Calibration& calibration, int devices, const std::string& description) {
  // SimGrid wants a finite bandwidth: a copy too fast to fit a slope gets 1 PB/s.
  const double bandwidth = std::isfinite(calibration.bandwidth_bytes_per_s) ? calibration.bandwidth_bytes_per_s : 1e15;
  const Calibration::Overhead& overhead = calibration.overhead;
  const double latency = calibration.latency_s + overhead.wakeup_s;
  const bool step = calibration.step_rate_bytes_per_s > 0;
  const double step_rate = std::isfinite(calibration.step_rate_bytes_per_s) ? calibration.step_rate_bytes_per_s : 1e15;
  const bool named = static_cast<int>(calibration.hosts.size()) == devices;
  const auto host = [&](int d) { return named ? calibration.hosts[d] : fmt::format("cpu{}", d); };
  const bool gpu = named && calibration.hosts.front().rfind("gpu", 0) == 0;
  std::string xml = "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n<!--\n";
  xml += fmt::format("  Written by pipegrid calibrate: {}\n", description);
  if (gpu)
    xml += fmt::format(
        "  {} GPU devices (a GPU each, or SM partitions of one GPU), timed with CUDA events on the\n"
        "  streams the work ran on. Each host runs one action at a time (kind gpu). A copy between\n"
        "  two devices is the copy on the sender's copy stream, fitted over {} message sizes as\n"
        "  latency {:.6g} s + bytes / {:.6g} B/s; the links' latency adds the measured wake-up\n"
        "  of a waiting worker, {:.6g} s (docs/validation.md). One link per pair of hosts.\n",
        devices, calibration.copies.size(), calibration.latency_s, bandwidth, overhead.wakeup_s);
  else
    xml += fmt::format(
        "  cpu:{} worker threads of one process, one intra-op thread each. Each host runs one\n"
        "  action at a time (kind gpu: synchronous execution). A copy between two workers is the\n"
        "  in-process transport's send + receive, fitted over {} message sizes as\n"
        "  latency {:.6g} s + bytes / {:.6g} B/s; the links' latency adds the measured wake-up\n"
        "  of a waiting worker, {:.6g} s (docs/validation.md). One link per pair of hosts.\n",
        devices, calibration.copies.size(), calibration.latency_s, bandwidth, overhead.wakeup_s);
  if (calibration.memory_bytes > 0)
    xml += fmt::format("  Memory per host: {:.0f} bytes (the GPU's total memory, shared equally by its partitions).\n",
                       calibration.memory_bytes);
  if (step)
    xml += fmt::format("  Optimizer step (SGD step + zero_grad), fitted over {} parameter sizes:\n"
                       "  {:.6g} s + parameter bytes / {:.6g} B/s.\n",
                       calibration.steps.size(), calibration.step_overhead_s, step_rate);
  xml += fmt::format(
      "  Per-action overhead {:.6g} s = in-action {:.6g} s + dispatch {:.6g} s + sends {:.6g} s,\n"
      "  attributed over {} actions of {}.\n-->\n",
      overhead.action_overhead_s, overhead.in_action_s, overhead.dispatch_s, overhead.send_s, overhead.actions,
      overhead.plan.empty() ? "no run" : overhead.plan);
  xml += "<platform version=\"4.1\">\n  <zone id=\"calibrated-cpu\" routing=\"Full\">\n";
  for (int d = 0; d < devices; ++d) {
    xml += fmt::format("    <host id=\"{}\" speed=\"1Gf\">\n      <prop id=\"kind\" value=\"gpu\"/>\n", host(d));
    if (calibration.memory_bytes > 0) xml += fmt::format("      <prop id=\"memory\" value=\"{:.0f}B\"/>\n", calibration.memory_bytes);
    xml += fmt::format("      <prop id=\"action_overhead\" value=\"{:.9g}s\"/>\n", overhead.action_overhead_s);
    if (step) {
      xml += fmt::format("      <prop id=\"optimizer_step_rate\" value=\"{:.9g}Bps\"/>\n", step_rate);
      xml += fmt::format("      <prop id=\"optimizer_step_overhead\" value=\"{:.9g}s\"/>\n", calibration.step_overhead_s);
    }
    xml += "    </host>\n";
  }
  for (int a = 0; a < devices; ++a)
    for (int b = a + 1; b < devices; ++b)
      xml += fmt::format("    <link id=\"copy{}-{}\" bandwidth=\"{:.9g}Bps\" latency=\"{:.9g}s\"/>\n", a, b, bandwidth,
                         latency);
  for (int a = 0; a < devices; ++a)
    for (int b = a + 1; b < devices; ++b)
      xml += fmt::format("    <route src=\"{}\" dst=\"{}\"><link_ctn id=\"copy{}-{}\"/></route>\n", host(a), host(b), a, b);
  xml += "  </zone>\n</platform>\n";
  return xml;
}

}  // namespace pipegrid::validate
