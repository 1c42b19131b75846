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

/// The kTypicalQuantile-th quantile, nearest rank (rank max(1, ceil(q n))); 0 for none.
double typical_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(std::ceil(kTypicalQuantile * static_cast<double>(values.size())));
  return values[std::max<std::size_t>(rank, 1) - 1];
}

}  // namespace

StageTimeFit fit_stage_times(const std::vector<StageTimeGroup>& groups, double stalled_s) {
  StageTimeFit fit;
  // Each group's typical duration and weight (its action count); the sums of
  // all durations and of the layer times, outliers included.
  std::vector<double> x, y, n;
  double total = 0, all_durations = 0, all_layers = 0;
  for (const StageTimeGroup& group : groups) {
    if (group.durations_s.empty()) continue;
    x.push_back(group.layers_s);
    y.push_back(typical_of(group.durations_s));
    n.push_back(static_cast<double>(group.durations_s.size()));
    total += n.back();
    for (double duration : group.durations_s) all_durations += duration;
    all_layers += n.back() * group.layers_s;
  }
  if (x.empty()) return fit;
  const auto [low, high] = std::minmax_element(x.begin(), x.end());
  if (*low <= 0 || *high < *low * (1 + kDistinctLayerTimes)) {
    // One profiled size (or sizes too close to tell apart): nothing
    // separates a factor from a constant; the constant is the median residual.
    for (std::size_t g = 0; g < x.size(); ++g) fit.constant_s += (y[g] - x[g]) * n[g] / total;
    fit.note = "one profiled action size: the constant is the median residual";
  } else {
    // The constant: the intercept of the line through the medians.
    double sn = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (std::size_t g = 0; g < x.size(); ++g) {
      sn += n[g];
      sx += n[g] * x[g];
      sy += n[g] * y[g];
      sxx += n[g] * x[g] * x[g];
      sxy += n[g] * x[g] * y[g];
    }
    const double slope = (sn * sxy - sx * sy) / (sn * sxx - sx * sx);
    fit.constant_s = (sy - slope * sx) / sn;
  }
  // What every action pays whatever its size cannot exceed a share of the
  // shortest action, nor be negative (that is a factor below 1).
  const double shortest = *std::min_element(y.begin(), y.end());
  const double cap = kMaxConstantShare * shortest;
  const double bounded = std::clamp(fit.constant_s, 0.0, cap);
  if (bounded != fit.constant_s) {
    fit.note += fit.note.empty() ? "" : "; ";
    fit.note += fit.constant_s > cap ? fmt::format("fitted constant {:.3g} s above {:.0f}% of the shortest action ({:.3g} s): "
                                                   "capped, the rest goes to the factor",
                                                   fit.constant_s, 100 * kMaxConstantShare, shortest)
                                     : fmt::format("fitted constant {:.3g} s below 0: set to 0", fit.constant_s);
    fit.constant_s = bounded;
  }
  // The factor: all the time the actions took beyond the constant, and the
  // stalls of a worker that had its input, per profiled second: descheduled
  // time included (the real run pays it).
  fit.factor = all_layers > 0 ? std::max(all_durations - total * fit.constant_s + std::max(stalled_s, 0.0), 0.0) / all_layers : 1;
  if (!(fit.factor > 0)) fit.factor = 1;
  return fit;
}

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

  std::vector<StageTimeGroup> in_action;  // per (action kind, stage)
  std::map<std::tuple<std::string, int>, std::size_t> group_of;
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
        const auto [group, added] = group_of.try_emplace({record.action, record.stage}, in_action.size());
        if (added) in_action.push_back({layers, {}});
        in_action[group->second].durations_s.push_back(record.end_s - record.start_s);
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
  overhead.dispatch_s = typical_of(dispatch);
  const double send = typical_of(sends), wait = typical_of(waited);
  // Time a worker with work to do spent beyond the typical: waiting for a core.
  double stalled = 0;
  for (double gap : dispatch) stalled += std::max(0.0, gap - overhead.dispatch_s);
  for (double duration : sends) stalled += std::max(0.0, duration - send);
  for (double delay : waited) stalled += std::max(0.0, delay - wait);
  const StageTimeFit fit = fit_stage_times(in_action, stalled);
  overhead.in_action_s = fit.constant_s;
  overhead.compute_factor = fit.factor;
  overhead.fit_note = fit.note;
  overhead.send_s = send * static_cast<double>(sends.size()) / actions;
  overhead.action_overhead_s = std::max(0.0, overhead.in_action_s + overhead.dispatch_s + overhead.send_s);
  overhead.wakeup_s = waited.empty() ? 0 : std::max(0.0, wait - overhead.dispatch_s);
  return overhead;
}

std::string calibration_platform_xml(const Calibration& calibration, int devices, const std::string& description) {
  // SimGrid wants a finite bandwidth: a copy too fast to fit a slope gets 1 PB/s.
  const double bandwidth = std::isfinite(calibration.bandwidth_bytes_per_s) ? calibration.bandwidth_bytes_per_s : 1e15;
  const Calibration::Overhead& overhead = calibration.overhead;
  const double latency = calibration.latency_s + overhead.wakeup_s;
  const bool step = calibration.step_rate_bytes_per_s > 0;
  const double step_rate = std::isfinite(calibration.step_rate_bytes_per_s) ? calibration.step_rate_bytes_per_s : 1e15;
  const double speed_factor = overhead.compute_factor > 0 ? 1 / overhead.compute_factor : 1;
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
  if (calibration.busy_devices > 0)
    xml += fmt::format("  Layers timed on device 0 while the other {} device{} ran the model's forward and backward\n"
                       "  ({} passes): the profile holds the workers' contention.\n",
                       calibration.busy_devices, calibration.busy_devices == 1 ? "" : "s", calibration.busy_passes);
  xml += fmt::format(
      "  Per-action overhead {:.6g} s = in-action {:.6g} s + dispatch {:.6g} s + sends {:.6g} s,\n"
      "  attributed over {} actions of {}; the actions ran {:.4g} x their profiled\n"
      "  layer time beyond that (speed_factor {:.6g}){}{}.\n-->\n",
      overhead.action_overhead_s, overhead.in_action_s, overhead.dispatch_s, overhead.send_s, overhead.actions,
      overhead.plan.empty() ? "no run" : overhead.plan, overhead.compute_factor, speed_factor,
      overhead.fit_note.empty() ? "" : "; ", overhead.fit_note);
  xml += "<platform version=\"4.1\">\n  <zone id=\"calibrated-cpu\" routing=\"Full\">\n";
  for (int d = 0; d < devices; ++d) {
    xml += fmt::format("    <host id=\"{}\" speed=\"1Gf\">\n      <prop id=\"kind\" value=\"gpu\"/>\n", host(d));
    if (calibration.memory_bytes > 0) xml += fmt::format("      <prop id=\"memory\" value=\"{:.0f}B\"/>\n", calibration.memory_bytes);
    xml += fmt::format("      <prop id=\"action_overhead\" value=\"{:.9g}s\"/>\n", overhead.action_overhead_s);
    xml += fmt::format("      <prop id=\"speed_factor\" value=\"{:.9g}\"/>\n", speed_factor);
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
