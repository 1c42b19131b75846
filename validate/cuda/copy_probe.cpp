// pipegrid-copy-probe: how concurrent copies of one GPU share their path,
// measured with the mechanisms of the CUDA backend (cuda_backend.cpp):
// LibTorch copies on separate CUDA streams, through pinned host memory or
// device to device. It answers the question the simulator's transfer rule
// (simulate --transfer-rule share|fifo, docs/semantics.md) leaves open: when
// two transfers leave a device at once, do they queue (the first arrives
// after T, the second after 2T), share (both after 2T), or overlap (both
// after T, the path is not the bottleneck)?
//
//   pipegrid-copy-probe [--megabytes N,N,...] [--repeats R]
//
// For each size and pattern it prints, as one JSON object on stdout, the
// median over R runs of each copy's end time after a common start (a gate
// that releases every stream at once), divided by the same copy's time alone,
// and the rule those ratios are nearest to. The patterns:
//   d2h-pair-streams   two device -> pinned host copies on two streams
//                      (two sends to two peers, each on its own stream)
//   d2h-pair-stream    the same on one stream (queued by construction; the
//                      control of the method)
//   staged-pair        two whole staged messages (device -> pinned host ->
//                      device, each on its own stream), the backend's
//                      --copy-through host to two peers
//   d2h-h2d            a device -> host and a host -> device copy at once
//                      (the two directions of the link)
//   d2d-pair-streams   two device -> device copies on two streams (the
//                      backend's default between partitions of one GPU)
// Exit status: 0, or 2 when no CUDA GPU is visible.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

namespace {

/** One copy of a pattern: source and destination live on the GPU (d) or in
 *  pinned host memory (h); `stream` indexes the pattern's streams. */
struct CopyStep {
  char from;
  char to;
};
struct Lane {
  std::vector<CopyStep> steps;  ///< run in order on the lane's stream
  int stream = 0;
};
struct Pattern {
  std::string name;
  std::vector<Lane> lanes;
};

at::Tensor buffer(char where, std::int64_t bytes) {
  const auto options = at::TensorOptions().dtype(at::kByte);
  if (where == 'd') return at::empty({bytes}, options.device(at::kCUDA, 0));
  return at::empty({bytes}, options.device(at::kCPU).pinned_memory(true));
}

/** End time (seconds after the gate opens) of each lane, one run. */
std::vector<double> run_once(const Pattern& pattern, std::int64_t bytes, std::vector<c10::cuda::CUDAStream>& streams,
                             const c10::cuda::CUDAStream& gate) {
  std::vector<std::vector<std::pair<at::Tensor, at::Tensor>>> lanes;
  for (const Lane& lane : pattern.lanes) {
    std::vector<std::pair<at::Tensor, at::Tensor>> copies;
    for (const CopyStep& step : lane.steps) copies.emplace_back(buffer(step.from, bytes), buffer(step.to, bytes));
    lanes.push_back(std::move(copies));
  }
  c10::cuda::device_synchronize();
  // The gate: a spin kernel long enough for every copy to be enqueued behind
  // it, then one event every lane's stream waits for.
  {
    c10::cuda::CUDAStreamGuard on_gate(gate);
    at::cuda::sleep(20'000'000);
  }
  at::cuda::CUDAEvent open(cudaEventDefault);
  open.record(gate);
  std::vector<at::cuda::CUDAEvent> ends;
  ends.reserve(pattern.lanes.size());
  for (std::size_t l = 0; l < pattern.lanes.size(); ++l) {
    const c10::cuda::CUDAStream& stream = streams.at(static_cast<std::size_t>(pattern.lanes[l].stream));
    open.block(stream);
    c10::cuda::CUDAStreamGuard on_lane(stream);
    for (auto& [source, destination] : lanes[l]) destination.copy_(source, /*non_blocking=*/true);
    ends.emplace_back(cudaEventDefault);
    ends.back().record(stream);
  }
  c10::cuda::device_synchronize();
  std::vector<double> seconds;
  for (const at::cuda::CUDAEvent& end : ends) seconds.push_back(static_cast<double>(open.elapsed_time(end)) / 1e3);
  return seconds;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/** Median end time of each lane over `repeats` runs (one warm-up first). */
std::vector<double> measure(const Pattern& pattern, std::int64_t bytes, int repeats,
                            std::vector<c10::cuda::CUDAStream>& streams, const c10::cuda::CUDAStream& gate) {
  run_once(pattern, bytes, streams, gate);
  std::vector<std::vector<double>> samples(pattern.lanes.size());
  for (int r = 0; r < repeats; ++r) {
    const std::vector<double> ends = run_once(pattern, bytes, streams, gate);
    for (std::size_t l = 0; l < ends.size(); ++l) samples[l].push_back(ends[l]);
  }
  std::vector<double> medians;
  for (const auto& lane : samples) medians.push_back(median(lane));
  return medians;
}

std::string json_number(double value) {
  std::ostringstream out;
  out.precision(6);
  out << value;
  return out.str();
}

/** The rule whose predicted (first, last) end ratios are nearest in log
 *  distance: queue (1, 2), share (2, 2), overlap (1, 1). */
std::string nearest_rule(double first, double last) {
  struct Rule {
    const char* name;
    double first, last;
  };
  const Rule rules[] = {{"fifo", 1, 2}, {"share", 2, 2}, {"overlap", 1, 1}};
  const Rule* best = &rules[0];
  double best_distance = INFINITY;
  for (const Rule& rule : rules) {
    const double distance = std::pow(std::log(first / rule.first), 2) + std::pow(std::log(last / rule.last), 2);
    if (distance < best_distance) best_distance = distance, best = &rule;
  }
  return best->name;
}

std::vector<std::int64_t> parse_list(const std::string& text) {
  std::vector<std::int64_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) values.push_back(std::stoll(item));
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> megabytes{4, 16, 64};
  int repeats = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--megabytes") {
      megabytes = parse_list(argv[i + 1]);
    } else if (flag == "--repeats") {
      repeats = std::stoi(argv[i + 1]);
    } else {
      std::cerr << "pipegrid-copy-probe: unknown flag " << flag << " (expected --megabytes or --repeats)\n";
      return 2;
    }
  }
  if (c10::cuda::device_count() == 0) {
    std::cerr << "pipegrid-copy-probe: no CUDA GPU is visible\n";
    return 2;
  }
  c10::cuda::CUDAGuard on_gpu(0);
  std::vector<c10::cuda::CUDAStream> streams{c10::cuda::getStreamFromPool(false, 0), c10::cuda::getStreamFromPool(false, 0)};
  const c10::cuda::CUDAStream gate = c10::cuda::getStreamFromPool(false, 0);
  const std::vector<Pattern> patterns{
      {"d2h-pair-streams", {{{{'d', 'h'}}, 0}, {{{'d', 'h'}}, 1}}},
      {"d2h-pair-stream", {{{{'d', 'h'}}, 0}, {{{'d', 'h'}}, 0}}},
      {"staged-pair", {{{{'d', 'h'}, {'h', 'd'}}, 0}, {{{'d', 'h'}, {'h', 'd'}}, 1}}},
      {"d2h-h2d", {{{{'d', 'h'}}, 0}, {{{'h', 'd'}}, 1}}},
      {"d2d-pair-streams", {{{{'d', 'd'}}, 0}, {{{'d', 'd'}}, 1}}},
  };
  std::cout << "{\"device\": \"" << at::cuda::getDeviceProperties(0)->name << "\", \"repeats\": " << repeats
            << ", \"results\": [";
  bool first_row = true;
  for (const std::int64_t mb : megabytes) {
    const std::int64_t bytes = mb << 20;
    for (const Pattern& pattern : patterns) {
      // Each lane alone, then all lanes at once.
      std::vector<double> alone;
      for (const Lane& lane : pattern.lanes) alone.push_back(measure({pattern.name, {lane}}, bytes, repeats, streams, gate)[0]);
      const std::vector<double> together = measure(pattern, bytes, repeats, streams, gate);
      std::vector<double> ratios;
      for (std::size_t l = 0; l < alone.size(); ++l) ratios.push_back(together[l] / alone[l]);
      const double first = *std::min_element(ratios.begin(), ratios.end());
      const double last = *std::max_element(ratios.begin(), ratios.end());
      std::cout << (first_row ? "\n" : ",\n") << "  {\"pattern\": \"" << pattern.name << "\", \"megabytes\": " << mb
                << ", \"alone_s\": [" << json_number(alone[0]) << ", " << json_number(alone[1]) << "], \"together_s\": ["
                << json_number(together[0]) << ", " << json_number(together[1]) << "], \"ratio_first\": " << json_number(first)
                << ", \"ratio_last\": " << json_number(last) << ", \"nearest_rule\": \"" << nearest_rule(first, last) << "\"}";
      first_row = false;
    }
  }
  std::cout << "\n]}\n";
  return 0;
}
