// Scale benchmark (issue 17, aim 4): the built `pipegrid` binary on
// generated platforms of 128 to 2048 hosts (`pipegrid platform cluster`,
// servers of 8 GPUs) and on one plan at M = 10^3, 10^4, 10^5 micro-batches.
// Per run: wall seconds, the process tree's peak resident memory (wait4's
// ru_maxrss: the largest of pipegrid and its simulation child), the
// activities (timeline records: computes, transfers, all-reduces), seconds
// and bytes per activity; per series the ratio of the per-activity cost of
// the largest size to the smallest (1.0: linear), and the ratios against
// the anchors. Nothing is asserted.
//
// Usage: pipegrid_scale_bench [FILTER] (runs whose label contains FILTER:
// "hosts", "dp", "pipeline", "M=", ...; all without one). Set
// PIPEGRID_SCALE_BENCH_MAX_M to stop the micro-batch series earlier.

#include <unistd.h>

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

/// Runs the binary with `args`, stdout to `out`, stderr to `err`.
Timing run(const std::vector<std::string>& args, const std::string& out = "/dev/null", const std::string& err = "/dev/null") {
  return pipegrid::bench::spawn_and_wait(kBinary, args, out, err);
}

/// Records of a timeline CSV: its lines less the "# hosts:" line and the header.
long csv_records(const fs::path& csv) {
  std::ifstream in(csv);
  long lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines > 2 ? lines - 2 : 0;
}

/// A chain profile of `layers` layers (times and sizes varied deterministically).
void write_profile(const fs::path& path, int layers) {
  std::ofstream out(path);
  out << "{\n  \"name\": \"scale" << layers << "\",\n  \"micro_batch_size\": 8,\n  \"input_bytes\": 1000000,\n  \"layers\": [\n";
  for (int l = 0; l < layers; ++l) {
    const double forward = 1e-3 * (1 + (l * 7) % 5);
    out << (l ? ",\n" : "") << "    {\"name\": \"l" << l << "\", \"forward_s\": " << forward << ", \"backward_s\": " << 2 * forward
        << ", \"output_bytes\": " << 1000000 * (1 + l % 4) << ", \"parameter_bytes\": " << 4000000 * (1 + (l * 3) % 3) << "}";
  }
  out << "\n  ]\n}\n";
}

struct Row {
  std::string label;
  Timing timing;
  long activities = 0;
  bool per_activity = true;  ///< false: a few activities, the cost is the platform's (per host, below)
};

void print_row(const Row& row) {
  std::printf("  %-34s %8.3f s %8.1f MB %9ld activities", row.label.c_str(), row.timing.wall_s, row.timing.peak_bytes / 1e6,
              row.activities);
  if (row.per_activity && row.activities > 0)
    std::printf(" %8.2f us/activity %9.0f B/activity", 1e6 * row.timing.wall_s / static_cast<double>(row.activities),
                row.timing.peak_bytes / static_cast<double>(row.activities));
  std::printf("%s\n", row.timing.status == 0 ? "" : (" EXIT " + std::to_string(row.timing.status)).c_str());
  std::fflush(stdout);
}

/// Ratio of the per-activity cost (seconds, bytes) of the last row to the first.
void print_ratio(const std::vector<Row>& rows, const char* what) {
  if (rows.size() < 2 || rows.front().activities == 0 || rows.back().activities == 0) return;
  const auto per = [](const Row& row, double value) { return value / static_cast<double>(row.activities); };
  std::printf("  %s: per-activity cost, %s against %s: time %.2f, memory %.2f (1.0: proportional to activities)\n", what,
              rows.back().label.c_str(), rows.front().label.c_str(),
              per(rows.back(), rows.back().timing.wall_s) / per(rows.front(), rows.front().timing.wall_s),
              per(rows.back(), rows.back().timing.peak_bytes) / per(rows.front(), rows.front().timing.peak_bytes));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  const auto wanted = [&](const std::string& label) { return filter.empty() || label.find(filter) != std::string::npos; };
  long max_m = 100000;
  if (const char* text = std::getenv("PIPEGRID_SCALE_BENCH_MAX_M")) max_m = std::atol(text);
  char pattern[] = "/tmp/pipegrid-scale-bench-XXXXXX";
  if (!mkdtemp(pattern)) return 1;
  const fs::path dir = pattern;
  const fs::path csv = dir / "timeline.csv";
  const auto platform = [&](int servers, int gpus) {
    const fs::path path = dir / ("cluster-" + std::to_string(servers) + "x" + std::to_string(gpus) + ".xml");
    if (!fs::exists(path) &&
        run({"platform", "cluster", "--servers", std::to_string(servers), "--gpus-per-server", std::to_string(gpus), "--device", "V100",
             "--memory", "32GiB", "--intra", "150GBps,2us", "--inter", "25Gbps,5us", "--output", path.string()})
                .status != 0)
      std::exit(1);
    return path.string();
  };
  const auto profile = [&](int layers) {
    const fs::path path = dir / ("profile-" + std::to_string(layers) + ".json");
    if (!fs::exists(path)) write_profile(path, layers);
    return path.string();
  };
  // One timed run with the timeline written (--csv), counted afterwards.
  const auto simulate = [&](const std::string& label, std::vector<std::string> args, bool per_activity = true) {
    args.insert(args.begin(), "simulate");
    args.insert(args.end(), {"--network", "analytic", "--json", "--csv", csv.string()});
    Row row{label, run(args, (dir / "out.json").string(), (dir / "err.txt").string()), 0, per_activity};
    row.activities = row.timing.status == 0 ? csv_records(csv) : 0;
    fs::remove(csv);
    print_row(row);
    return row;
  };

  std::printf("pipegrid scale bench (%s)\n", kBinary.c_str());
  // One untimed run first: the binary and SimGrid in the page cache.
  run({"simulate", "--platform", platform(1, 2), "--profile", profile(20), "--schedule", "1f1b-sno", "--micro-batches", "4", "--json"});
  const std::vector<int> servers = {16, 32, 64, 128, 256};  // x 8 GPUs: 128 ... 2048 hosts

  // The anchor: a 2-micro-batch data-parallel run (chain of 20
  // layers) on every host: 2 hosts compute, the rest is the platform.
  std::vector<Row> dp;
  if (wanted("hosts dp")) {
    std::printf("data parallel, M = 2 (2 hosts compute: the cost is the platform's) on 128 to 2048 hosts (issue 17: 500 hosts 2.9 s; 2048 hosts: 14.6 s and 1.8 GB to read):\n");
    for (const int s : servers) {
      const std::string label = "hosts dp " + std::to_string(8 * s) + " (" + std::to_string(s) + " x 8)";
      dp.push_back(simulate(label, {"--platform", platform(s, 8), "--profile", profile(20), "--schedule", "dp", "--micro-batches", "2"},
                            false));
    }
    // Two hosts compute whatever the size: the cost is the platform's, per host.
    if (dp.size() >= 2 && dp.front().timing.status == 0 && dp.back().timing.status == 0) {
      const double hosts_ratio = 8.0 * servers.back() / (8.0 * servers.front());
      std::printf("  hosts dp: per-host cost, %d hosts against %d: time %.2f, memory %.2f (1.0: proportional to hosts)\n",
                  8 * servers.back(), 8 * servers.front(), dp.back().timing.wall_s / dp.front().timing.wall_s / hosts_ratio,
                  dp.back().timing.peak_bytes / dp.front().timing.peak_bytes / hosts_ratio);
    }
    for (const Row& row : dp) {
      if (row.label.find(" 512 ") != std::string::npos)
        std::printf("  512 hosts against 2.9 s for 500 hosts: %.3f s (%.1fx faster)\n", row.timing.wall_s, 2.9 / row.timing.wall_s);
      if (row.label.find(" 2048 ") != std::string::npos)
        std::printf("  2048 hosts against 14.6 s and 1.8 GB: %.3f s (%.1fx faster), %.0f MB (%.1fx less)\n", row.timing.wall_s,
                    14.6 / row.timing.wall_s, row.timing.peak_bytes / 1e6, 1.8e9 / row.timing.peak_bytes);
    }
  }

  // A pipeline over every host: hosts / 2 stages of one layer (at most 1024
  // stages; docs/formats.md, Limits), each stage on 2 replicas, 1F1B-SNO, M = 8.
  if (wanted("hosts pipeline")) {
    std::vector<Row> pipeline;
    std::printf("1F1B-SNO pipeline over all hosts: hosts / 2 stages of one layer, 2 replicas each, M = 8:\n");
    for (const int s : servers) {
      const int hosts = 8 * s;
      std::string replicas;
      for (int stage = 0; stage < hosts / 2; ++stage) replicas += stage ? ",2" : "2";
      const std::string label = "hosts pipeline " + std::to_string(hosts);
      pipeline.push_back(simulate(label, {"--platform", platform(s, 8), "--profile", profile(hosts / 2), "--schedule", "1f1b-sno",
                                          "--micro-batches", "8", "--replicas", replicas}));
    }
    print_ratio(pipeline, "hosts pipeline");
  }

  // Micro-batches: a 2-stage 1F1B-SNO plan (the schedule limit is 250,000
  // stages x micro-batches; docs/formats.md, Limits).
  if (wanted("M=")) {
    std::vector<Row> rows;
    std::printf("1F1B-SNO, 2 stages on one server, M micro-batches (issue 17: M = 10^6 ran for minutes without a word):\n");
    for (long m = 1000; m <= max_m; m *= 10)
      rows.push_back(simulate("M=" + std::to_string(m), {"--platform", platform(1, 2), "--profile", profile(20), "--schedule",
                                                        "1f1b-sno", "--micro-batches", std::to_string(m)}));
    print_ratio(rows, "micro-batches");
  }
  fs::remove_all(dir);
  return 0;
}
