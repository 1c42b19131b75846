// Times `pipegrid sweep run` on a sweep of 10,240 small runs (5 generated
// 4-GPU platforms x 8 profiles of 8 layers x 4 schedules (GPipe with and without recomputation, 1F1B-SNO, 1F1B-SO) x M = 1..64, 4
// stages each) with --jobs 2, and the same runs' cost as separate
// `pipegrid simulate --json` processes (a sample of every 40th run, one at a
// time). Prints runs per second, the sweep's CPU-seconds per run against a
// simulate process's, the total against the 3-minute aim (issue 17), and
// the figures measured before the sweep runner's changes (docs/performance.md,
// "Sweeps"). Nothing is asserted. Usage: pipegrid_sweep_bench [JOBS]
// (default 2); PIPEGRID_SWEEP_BENCH_KEEP=1 keeps (and names) its folder, to
// profile `sweep run` on the same inputs.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "spawn.hpp"

namespace {

namespace fs = std::filesystem;

const std::string kBinary = PIPEGRID_BINARY;

using Timing = pipegrid::bench::Spawned;

/// Runs the binary with `args`, stdout to `out` (or /dev/null), stderr kept.
Timing run(const std::vector<std::string>& args, const std::string& out = "/dev/null") {
  return pipegrid::bench::spawn_and_wait(kBinary, args, out, "");
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

int main(int argc, char** argv) {
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 2;
  char pattern[] = "/tmp/pipegrid-sweep-bench-XXXXXX";
  if (!mkdtemp(pattern)) return 1;
  const fs::path dir = pattern;

  // 5 platforms: 4 GPUs (1 x 4 or 2 x 2), varied links.
  const std::vector<std::vector<std::string>> platforms = {
      {"1", "4", "150GBps,2us", "25Gbps,5us"}, {"2", "2", "150GBps,2us", "25Gbps,5us"}, {"1", "4", "16GBps,5us", "10Gbps,5us"},
      {"2", "2", "16GBps,5us", "10Gbps,10us"}, {"2", "2", "300GBps,1us", "100Gbps,2us"}};
  for (std::size_t p = 0; p < platforms.size(); ++p) {
    const auto& shape = platforms[p];
    const Timing made = run({"platform", "cluster", "--servers", shape[0], "--gpus-per-server", shape[1], "--device", "V100", "--memory",
                             "32GiB", "--intra", shape[2], "--inter", shape[3], "--output", (dir / ("platform-" + std::to_string(p) + ".xml")).string()});
    if (made.status != 0) return 1;
  }
  // 8 profiles of 8 layers (2 per stage), times and sizes varied deterministically.
  for (int f = 0; f < 8; ++f) {
    std::string layers;
    for (int l = 0; l < 8; ++l) {
      const double forward = 1e-3 * (1 + (l * 7 + f * 3) % 5);
      layers += (l ? ",\n" : "") + std::string("    {\"name\": \"l") + std::to_string(l) + "\", \"forward_s\": " + std::to_string(forward) +
                ", \"backward_s\": " + std::to_string(2 * forward) + ", \"output_bytes\": " + std::to_string(1000000 * (1 + (l + f) % 4)) +
                ", \"parameter_bytes\": " + std::to_string(4000000 * (1 + (l * 3 + f) % 3)) + "}";
    }
    write(dir / ("profile-" + std::to_string(f) + ".json"),
          "{\n  \"name\": \"bench" + std::to_string(f) + "\",\n  \"micro_batch_size\": 8,\n  \"input_bytes\": 1000000,\n  \"layers\": [\n" + layers +
              "\n  ]\n}\n");
  }
  write(dir / "experiment.toml",
        "schema = 1\nname = \"sweep-bench\"\n[[axis]]\nname = \"platform\"\nglob = \"platform-*.xml\"\n"
        "[[axis]]\nname = \"profile\"\nglob = \"profile-*.json\"\n"
        "[[axis]]\nname = \"schedule\"\nvalues = [ { schedule = \"gpipe\" }, { schedule = \"1f1b-sno\" }, { schedule = \"1f1b-so\" },\n"
        "  { schedule = \"gpipe\", recompute = true } ]\n"
        "[[axis]]\nname = \"micro_batches\"\nrange = { from = 1, to = 64 }\n");
  const std::string experiment = (dir / "experiment.toml").string();
  const Timing plan = run({"sweep", "plan", experiment}, (dir / "plan.txt").string());
  if (plan.status != 0) return 1;
  constexpr int kRuns = 5 * 8 * 4 * 64;

  const Timing sweep = run({"sweep", "run", experiment, "--out", (dir / "out").string(), "--jobs", std::to_string(jobs)},
                           (dir / "run.txt").string());
  std::ifstream summary(dir / "run.txt");
  std::string line;
  std::getline(summary, line);
  std::printf("sweep run --jobs %d: %d runs in %.1f s wall (%.1f CPU-s), %.0f runs/s, exit %d\n  %s\n", jobs, kRuns, sweep.wall_s,
              sweep.cpu_s, kRuns / sweep.wall_s, sweep.status, line.c_str());
  std::printf("  sweep plan alone (expansion, keys, hashes): %.2f s\n", plan.wall_s);

  // The same runs as separate simulate processes: every 40th run of the plan.
  const std::vector<std::string> schedules = {"gpipe", "1f1b-sno", "1f1b-so", "gpipe"};
  double simulate_wall = 0, simulate_cpu = 0;
  int sampled = 0;
  for (int index = 0; index < kRuns; index += 40) {
    const int m = index % 64 + 1, s = index / 64 % 4, f = index / 256 % 8, p = index / 2048;
    std::vector<std::string> args = {"simulate", "--platform", (dir / ("platform-" + std::to_string(p) + ".xml")).string(), "--profile",
                                     (dir / ("profile-" + std::to_string(f) + ".json")).string(), "--schedule", schedules[s],
                                     "--micro-batches", std::to_string(m), "--json"};
    if (s == 3) args.push_back("--recompute");
    const Timing one = run(args);
    simulate_wall += one.wall_s;
    simulate_cpu += one.cpu_s;
    ++sampled;
  }
  const double per_simulate_wall = simulate_wall / sampled, per_simulate_cpu = simulate_cpu / sampled;
  const double per_sweep_cpu = sweep.cpu_s / kRuns, per_sweep_wall_core = sweep.wall_s * jobs / kRuns;
  std::printf("simulate --json, one process per run (%d sampled runs): %.1f ms wall, %.1f ms CPU per run\n", sampled,
              1e3 * per_simulate_wall, 1e3 * per_simulate_cpu);
  std::printf("sweep per run: %.1f ms CPU, %.1f ms core-wall (wall x jobs / runs); ratio to a simulate process: %.2f (CPU), %.2f (wall)\n",
              1e3 * per_sweep_cpu, 1e3 * per_sweep_wall_core, per_sweep_cpu / per_simulate_cpu, per_sweep_wall_core / per_simulate_wall);
  std::printf("the same %d runs as simulate processes, %d at a time: about %.1f s; the sweep: %.1f s (%.2fx)\n", kRuns, jobs,
              per_simulate_wall * kRuns / jobs, sweep.wall_s, sweep.wall_s / (per_simulate_wall * kRuns / jobs));
  std::printf("total against the 3-minute aim: %.1f s of 180 s (%.2f)\n", sweep.wall_s, sweep.wall_s / 180);
  // Before (docs/performance.md, "Sweeps"): the sweep runner before its
  // changes, on this 2-core machine, RelWithDebInfo, --jobs 2: main at
  // 1fb26da (LibTorch linked), and main at 04910a7 (LibTorch split off, the
  // engine's changes in), both running the same runner.
  constexpr double kBeforeTorchCpuPerRun = 26.0e-3, kBeforeTorchWall = 144.5;
  constexpr double kBeforeCpuPerRun = 9.4e-3, kBeforeWall = 51.9;
  std::printf("before: %.1f ms CPU per run, %.1f s wall (main at 1fb26da, LibTorch linked); %.1f ms, %.1f s wall "
              "(main at 04910a7); now %.1f ms, %.1f s: %.2fx / %.2fx less CPU\n",
              1e3 * kBeforeTorchCpuPerRun, kBeforeTorchWall, 1e3 * kBeforeCpuPerRun, kBeforeWall, 1e3 * per_sweep_cpu, sweep.wall_s,
              kBeforeTorchCpuPerRun / per_sweep_cpu, kBeforeCpuPerRun / per_sweep_cpu);
  std::printf("the sweep on 2 idle cores at this CPU cost: about %.0f s of 180 s\n", sweep.cpu_s / 2);
  if (std::getenv("PIPEGRID_SWEEP_BENCH_KEEP")) std::printf("inputs and results kept in %s\n", dir.c_str());
  else fs::remove_all(dir);
  return 0;
}
