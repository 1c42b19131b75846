// Start-up (issue 17, aim 1): spawns the pipegrid binary N times per command
// and prints the median wall time of `--version`, a 2-layer `simulate` (2
// GPUs, GPipe, M = 2), a `partition` of the same profile and `execute
// --help` (handed to pipegrid-torch, which loads LibTorch), with the ratio
// against the anchors (0.72 s for --version and 0.75 s for the
// 2-layer simulate on main, when every command loaded LibTorch). Nothing
// is asserted. Usage: pipegrid_startup_bench [N] (default 20).

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;

const std::string kBinary = PIPEGRID_BINARY;
const std::string kSourceDir = PIPEGRID_SOURCE_DIR;

/// Runs the binary with `args` (stdout and stderr to /dev/null); returns the
/// wall seconds, or a negative number when it exits with another status than `expected`.
double run_once(const std::vector<std::string>& args, int expected) {
  std::vector<std::string> words = {kBinary};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, kBinary.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
    std::perror("posix_spawn");
    std::exit(1);
  }
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  waitpid(pid, &status, 0);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return WIFEXITED(status) && WEXITSTATUS(status) == expected ? wall : -1;
}

/// Median wall seconds of `runs` runs (after one untimed run that warms the
/// page cache); negative when a run fails.
double median_s(const std::vector<std::string>& args, int runs, int expected = 0) {
  if (run_once(args, expected) < 0) return -1;
  std::vector<double> walls;
  for (int i = 0; i < runs; ++i) {
    const double wall = run_once(args, expected);
    if (wall < 0) return -1;
    walls.push_back(wall);
  }
  std::sort(walls.begin(), walls.end());
  return walls.size() % 2 ? walls[walls.size() / 2] : (walls[walls.size() / 2 - 1] + walls[walls.size() / 2]) / 2;
}

void report(const char* name, double seconds, double anchor_s) {
  if (seconds < 0) {
    std::printf("  %-36s failed (or not in this build)\n", name);
    return;
  }
  std::printf("  %-36s %8.1f ms", name, 1e3 * seconds);
  if (anchor_s > 0) std::printf("   anchor %4.0f ms, %5.3f of it (%.0fx faster)", 1e3 * anchor_s, seconds / anchor_s, anchor_s / seconds);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
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

  std::printf("pipegrid start-up: median wall time of %d runs each (%s)\n", runs, kBinary.c_str());
  report("pipegrid --version", median_s({"--version"}, runs), 0.72);
  report("pipegrid simulate (2 layers, 2 GPUs)",
         median_s({"simulate", "--platform", platform, "--profile", profile, "--schedule", "gpipe", "--micro-batches", "2"}, runs), 0.75);
  report("pipegrid simulate --json",
         median_s({"simulate", "--platform", platform, "--profile", profile, "--schedule", "gpipe", "--micro-batches", "2", "--json"}, runs),
         0.75);
  report("pipegrid partition (2 layers, 2 GPUs)",
         median_s({"partition", "--partitioner", "pipedream", "--profile", profile, "--platform", platform}, runs), 0);
  report("pipegrid schedule --list", median_s({"schedule", "--list"}, runs), 0);
  // Handed to pipegrid-torch: the cost of loading LibTorch, paid only here.
  report("pipegrid execute --help", median_s({"execute", "--help"}, runs), 0);
  fs::remove_all(dir);
  return 0;
}
