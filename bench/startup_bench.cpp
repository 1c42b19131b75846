// Start-up (issue 17, aim 1): spawns the pipegrid binary N times per command
// and prints the median wall time of `--version`, a 2-layer `simulate` (2
// GPUs, GPipe, M = 2), a `partition` of the same profile and `execute
// --help` (handed to pipegrid-torch, which loads LibTorch), with the ratio
// against the anchors (0.72 s for --version and 0.75 s for the
// 2-layer simulate on main, when every command loaded LibTorch), and the
// floor every simulating command pays: this bench run as a program that
// links SimGrid (as pipegrid does) and returns at once. Nothing is
// asserted. Usage: pipegrid_startup_bench [N] (default 20).

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <simgrid/forward.h>
#include <simgrid/version.h>

#include "spawn.hpp"

namespace {

namespace fs = std::filesystem;

const std::string kBinary = PIPEGRID_BINARY;
const std::string kSourceDir = PIPEGRID_SOURCE_DIR;

struct Timing {
  double wall_s = -1, cpu_s = -1;  ///< negative: the run failed
};

/// Runs the binary with `args` (stdout and stderr to /dev/null); returns its
/// wall and CPU seconds (user + system, its children included), or
/// negative ones when it exits with another status than `expected`.
Timing run_once(const std::vector<std::string>& args, int expected, const std::string& binary = kBinary) {
  const pipegrid::bench::Spawned spawned = pipegrid::bench::spawn_and_wait(binary, args);
  if (spawned.status != expected) return {};
  return {spawned.wall_s, spawned.cpu_s};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// The median wall and CPU seconds of `runs` runs (after one untimed run
/// that warms the page cache); negative when a run fails.
Timing median_of(const std::vector<std::string>& args, int runs, int expected = 0, const std::string& binary = kBinary) {
  if (run_once(args, expected, binary).wall_s < 0) return {};
  std::vector<double> walls, cpus;
  for (int i = 0; i < runs; ++i) {
    const Timing timing = run_once(args, expected, binary);
    if (timing.wall_s < 0) return {};
    walls.push_back(timing.wall_s);
    cpus.push_back(timing.cpu_s);
  }
  return {median(walls), median(cpus)};
}

void report(const char* name, const Timing& timing, double anchor_s) {
  if (timing.wall_s < 0) {
    std::printf("  %-38s failed (or not in this build)\n", name);
    return;
  }
  std::printf("  %-38s %7.1f ms wall %7.1f ms CPU", name, 1e3 * timing.wall_s, 1e3 * timing.cpu_s);
  if (anchor_s > 0)
    std::printf("   anchor %3.0f ms: %5.3f of it (%.1fx faster)", 1e3 * anchor_s, timing.wall_s / anchor_s, anchor_s / timing.wall_s);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--floor") return 0;  // loaded SimGrid and its libraries, nothing else
  int major = 0, minor = 0, patch = 0;
  sg_version_get(&major, &minor, &patch);
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  char pattern[] = "/tmp/pipegrid-startup-bench-XXXXXX";
  if (!mkdtemp(pattern)) return 1;
  const fs::path dir = pattern;
  const std::string profile = (dir / "two-layers.json").string();
  std::ofstream(profile) << "{\n  \"name\": \"two-layers\",\n  \"micro_batch_size\": 4,\n  \"input_bytes\": 40,\n  \"layers\": [\n"
                            "    {\"name\": \"l0\", \"forward_s\": 0.5, \"backward_s\": 1.0, \"output_bytes\": 25, \"parameter_bytes\": 100},\n"
                            "    {\"name\": \"l1\", \"forward_s\": 1.0, \"backward_s\": 1.5, \"output_bytes\": 10, \"parameter_bytes\": 300}\n"
                            "  ]\n}\n";
  const std::string platform = kSourceDir + "/tests/data/common/chain2-latency.xml";

  std::printf("pipegrid start-up: median wall and CPU time of %d runs each (%s; SimGrid %d.%d.%d)\n", runs, kBinary.c_str(), major,
              minor, patch);
  std::error_code error;
  const std::string self = fs::read_symlink("/proc/self/exe", error).string();
  report("floor: a program linking SimGrid", error ? Timing{} : median_of({"--floor"}, runs, 0, self), 0);
  report("pipegrid --version", median_of({"--version"}, runs), 0.72);
  report("pipegrid simulate (2 layers, 2 GPUs)",
         median_of({"simulate", "--platform", platform, "--profile", profile, "--schedule", "gpipe", "--micro-batches", "2"}, runs), 0.75);
  report("pipegrid simulate --json",
         median_of({"simulate", "--platform", platform, "--profile", profile, "--schedule", "gpipe", "--micro-batches", "2", "--json"}, runs),
         0.75);
  report("pipegrid partition (2 layers, 2 GPUs)",
         median_of({"partition", "--partitioner", "pipedream", "--profile", profile, "--platform", platform}, runs), 0);
  report("pipegrid schedule --list", median_of({"schedule", "--list"}, runs), 0);
  // Handed to pipegrid-torch: the cost of loading LibTorch, paid only here.
  report("pipegrid execute --help", median_of({"execute", "--help"}, runs), 0);
  fs::remove_all(dir);
  return 0;
}
