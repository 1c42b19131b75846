#include "partitioners/explorer.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "partitioners/partitioners.hpp"
#include "schedules/beyond.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid {

std::vector<ExploredSchedule> exploration_schedules(const std::vector<HostInfo>& hosts,
                                                    const std::vector<std::string>& requested) {
  const bool some_sync = std::any_of(hosts.begin(), hosts.end(), [](const HostInfo& h) { return h.execution == Execution::Sync; });
  const bool some_async = std::any_of(hosts.begin(), hosts.end(), [](const HostInfo& h) { return h.execution == Execution::Async; });
  const auto reason_against = [&](const std::string& name) -> std::string {
    if ((name == "1f1b-sno" || name == "1f1b-so") && !some_sync)
      return "it is BaPipe's schedule for synchronous devices (GPUs) and every host is asynchronous: use 1f1b-as";
    if (name == "1f1b-as" && !some_async)
      return "it is BaPipe's schedule for asynchronous devices (FPGAs) and every host is synchronous: use 1f1b-sno";
    if (name == "fbp-as" && some_sync)
      return "it runs forward and backward at once, which a synchronous host (GPU) cannot";
    return "";
  };
  for (const std::string& name : requested) {
    if (schedule_info(name).two_copies)  // unknown names: InputError listing the known ones
      throw InputError(fmt::format("--schedules: {} is not explored yet: explore places one copy of the model, and {} "
                                   "runs two (each stage also on the mirrored device); simulate it with --schedule {}",
                                   name, name, name));
    if (const std::string reason = reason_against(name); !reason.empty())
      throw InputError(fmt::format("--schedules: {} cannot run on this platform: {}", name, reason));
  }
  std::vector<ExploredSchedule> schedules;
  for (const ScheduleInfo& info : schedule_catalog()) {
    if (!requested.empty() && std::find(requested.begin(), requested.end(), info.name) == requested.end()) continue;
    if (!reason_against(info.name).empty() || info.two_copies) continue;
    schedules.push_back({info.name, !info.flushed});
  }
  return schedules;
}

MicroBatchChoices micro_batch_choices(int mini_batch_size, const std::vector<int>& measured_sizes,
                                      const std::vector<int>& requested_counts) {
  if (mini_batch_size < 1) throw InputError(fmt::format("--mini-batch-size: expected an integer >= 1, found {}", mini_batch_size));
  if (measured_sizes.empty()) throw InputError("profile: no micro-batch size");
  for (const int count : requested_counts)
    if (count < 1) throw InputError(fmt::format("--micro-batches: expected integers >= 1, found {}", count));
  const auto wanted = [&](int count) {
    return requested_counts.empty() || std::find(requested_counts.begin(), requested_counts.end(), count) != requested_counts.end();
  };
  MicroBatchChoices choices;
  if (measured_sizes.size() == 1) {
    const int size = measured_sizes.front();
    if (mini_batch_size % size != 0)
      throw InputError(fmt::format(
          "--mini-batch-size {}: the profile has times for micro-batches of {} {} only, so the mini-batch must be a "
          "multiple of {}",
          mini_batch_size, size, size == 1 ? "sample" : "samples", size));
    const int most = mini_batch_size / size;
    for (int count = 1; count <= most; ++count)
      if (most % count == 0 && wanted(count)) choices.shapes.push_back({count, size});
    const char* samples = size == 1 ? "sample" : "samples";
    choices.note = fmt::format(
        "the profile has times for micro-batches of {} {} only: the micro-batch size stays {} (no invented "
        "scaling) and M runs over the divisors of {} / {} = {}, each mini-batch M x {} {}",
        size, samples, size, mini_batch_size, size, most, size, samples);
  } else {
    const int smallest = measured_sizes.front(), largest = measured_sizes.back();
    std::vector<int> outside;
    for (int count = 1; count <= mini_batch_size; ++count) {
      if (mini_batch_size % count != 0 || !wanted(count)) continue;
      const int size = mini_batch_size / count;
      if (size < smallest || size > largest) {
        outside.push_back(count);
        continue;
      }
      choices.shapes.push_back({count, size});
    }
    std::string measured;
    for (const int size : measured_sizes) measured += (measured.empty() ? "" : ", ") + std::to_string(size);
    choices.note = fmt::format(
        "the profile has times for micro-batches of {} samples: M runs over the divisors of {} whose micro-batch "
        "lies in {}..{} (times interpolated between measured sizes, never extrapolated)",
        measured, mini_batch_size, smallest, largest);
  }
  if (choices.shapes.empty())
    throw InputError(fmt::format("--mini-batch-size {}{}: no micro-batch count fits ({})", mini_batch_size,
                                 requested_counts.empty() ? "" : " with the requested --micro-batches", choices.note));
  return choices;
}

namespace {

double largest_overflow(const CandidateOutcome& outcome) {
  double worst = 0;
  for (const MemoryOverflow& overflow : outcome.overflows) worst = std::max(worst, overflow.peak_bytes - overflow.capacity_bytes);
  return worst;
}

bool same_throughput(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

std::string overflow_verdict(const CandidateOutcome& outcome) {
  const auto worst = std::max_element(outcome.overflows.begin(), outcome.overflows.end(), [](const auto& a, const auto& b) {
    return a.peak_bytes - a.capacity_bytes < b.peak_bytes - b.capacity_bytes;
  });
  std::string verdict = fmt::format("out of memory on {} by {} ({} > {})", worst->host, human_bytes(worst->peak_bytes - worst->capacity_bytes),
                                    human_bytes(worst->peak_bytes), human_bytes(worst->capacity_bytes));
  if (outcome.overflows.size() > 1) verdict += fmt::format(", and on {} more", outcome.overflows.size() - 1);
  return verdict;
}

}  // namespace

std::vector<int> exploration_tensor_parallel(const std::vector<int>& requested, bool splits,
                                             const std::function<std::string(int)>& why_not) {
  std::vector<int> sizes;
  if (requested.empty()) {
    for (const int t : {1, 2, 4, 8})
      if ((t == 1 || splits) && why_not(t).empty()) sizes.push_back(t);
    return sizes;
  }
  for (const int t : requested) {
    if (std::find(sizes.begin(), sizes.end(), t) != sizes.end()) continue;
    if (const std::string reason = why_not(t); !reason.empty()) throw InputError(reason);
    if (t > 1 && !splits)
      throw InputError(fmt::format("--tensor-parallel {}: the profile has no transformer layer with FLOPs (op "
                                   "\"transformer\" and forward_flops) to split; every layer would be replicated",
                                   t));
    sizes.push_back(t);
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

std::vector<RankedCandidate> rank_candidates(const std::vector<CandidateOutcome>& outcomes,
                                             const std::vector<std::size_t>& members) {
  std::vector<std::size_t> fitting, out_of_memory, failed;
  for (const std::size_t i : members) {
    const CandidateOutcome& outcome = outcomes.at(i);
    if (outcome.error) failed.push_back(i);
    else if (!outcome.overflows.empty()) out_of_memory.push_back(i);
    else fitting.push_back(i);
  }
  // deferred_to[i]: the fitting candidate on fewer devices that candidate i
  // (with idle stages) ranks right after.
  std::map<std::size_t, std::size_t> deferred_to;
  for (const std::size_t i : fitting) {
    const CandidateOutcome& x = outcomes[i];
    if (x.idle_stages.empty() || x.merged_as.empty()) continue;
    for (const std::size_t j : fitting) {
      const CandidateOutcome& y = outcomes[j];
      if (y.schedule != x.schedule || y.micro_batches != x.micro_batches || y.micro_batch_size != x.micro_batch_size ||
          y.tensor_parallel != x.tensor_parallel || y.pipeline_parallel != x.pipeline_parallel ||
          y.data_parallel != x.data_parallel)
        continue;
      bool named = false;
      for (std::size_t from = 0; from <= y.partitioner.size();) {
        const std::size_t to = std::min(y.partitioner.find('=', from), y.partitioner.size());
        named = named || y.partitioner.substr(from, to - from) == x.merged_as;
        from = to + 1;
      }
      if (named && y.throughput_samples_per_s >= kFewerDevicesShare * x.throughput_samples_per_s) deferred_to[i] = j;
    }
  }
  const auto ranked_throughput = [&](std::size_t i) {
    const auto deferred = deferred_to.find(i);
    return deferred == deferred_to.end()
               ? outcomes[i].throughput_samples_per_s
               : std::min(outcomes[i].throughput_samples_per_s, outcomes[deferred->second].throughput_samples_per_s);
  };
  std::stable_sort(fitting.begin(), fitting.end(), [&](std::size_t a, std::size_t b) {
    const CandidateOutcome &x = outcomes[a], &y = outcomes[b];
    const double tx = ranked_throughput(a), ty = ranked_throughput(b);
    if (!same_throughput(tx, ty)) return tx > ty;
    const auto a_after = deferred_to.find(a), b_after = deferred_to.find(b);
    if (a_after != deferred_to.end() && a_after->second == b) return false;
    if (b_after != deferred_to.end() && b_after->second == a) return true;
    if (x.peak_memory_bytes != y.peak_memory_bytes) return x.peak_memory_bytes < y.peak_memory_bytes;
    return a < b;
  });
  std::stable_sort(out_of_memory.begin(), out_of_memory.end(), [&](std::size_t a, std::size_t b) {
    const double x = largest_overflow(outcomes[a]), y = largest_overflow(outcomes[b]);
    return x != y ? x < y : a < b;
  });
  std::vector<RankedCandidate> ranking;
  for (std::size_t k = 0; k < fitting.size(); ++k) {
    const CandidateOutcome& outcome = outcomes[fitting[k]];
    std::string verdict = "winner";
    if (const auto deferred = deferred_to.find(fitting[k]); deferred != deferred_to.end()) {
      const CandidateOutcome& fewer = outcomes[deferred->second];
      const int saved = outcome.devices - fewer.devices;
      verdict = fmt::format("{} no compute: the same partition without {} ({}, {} devices) runs at {:.4g} vs {:.4g} "
                            "samples/s on {} fewer device{}",
                            stage_list_text(outcome.idle_stages) + (outcome.idle_stages.size() == 1 ? " does" : " do"),
                            outcome.idle_stages.size() == 1 ? "it" : "them", fewer.partitioner, fewer.devices,
                            fewer.throughput_samples_per_s, outcome.throughput_samples_per_s, saved, saved == 1 ? "" : "s");
    } else if (k > 0) {
      const CandidateOutcome& best = outcomes[fitting[0]];
      if (same_throughput(outcome.throughput_samples_per_s, best.throughput_samples_per_s)) {
        verdict = outcome.peak_memory_bytes == best.peak_memory_bytes
                      ? "as fast, with the same peak memory; listed later"
                      : fmt::format("as fast, more peak memory ({} vs {})", human_bytes(outcome.peak_memory_bytes),
                                    human_bytes(best.peak_memory_bytes));
      } else {
        verdict = fmt::format("slower by {:.1f}% ({:.4g} vs {:.4g} samples/s)",
                              100.0 * (1.0 - outcome.throughput_samples_per_s / best.throughput_samples_per_s),
                              outcome.throughput_samples_per_s, best.throughput_samples_per_s);
      }
    }
    ranking.push_back({fitting[k], static_cast<int>(k) + 1, verdict});
  }
  for (const std::size_t i : out_of_memory) ranking.push_back({i, 0, overflow_verdict(outcomes[i])});
  for (const std::size_t i : failed) ranking.push_back({i, 0, *outcomes[i].error});
  return ranking;
}

}  // namespace pipegrid
