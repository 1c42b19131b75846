// `pipegrid plan` (issue 30): how fast the search answers "which layout" and
// whether its answer stands against the published launches.
//
// Speed: GPT-3 175B on 1,024 A100s (global batch 1,536, Calculon's anchor:
// 11.7M configurations, about 11 CPU-hours by its 1% sample) and Megatron's
// 530B on 2,240 A100s (global batch 1,920, MT-NLG's launch; Calculon: 4.5M
// configurations, about 50 CPU-minutes), each searched with `pipegrid plan
// --jobs 2` on DGX A100 80 GB servers: wall seconds, layouts enumerated,
// refused, bounded away by memory and by time, simulated, layouts per
// second, the bound's tightness and the winner.
//
// Quality (--quality): for each Korthikanti et al. 2022 model on its
// published GPU count and global batch (Table 3's launches, the study
// experiments/published-korthikanti-2022.toml), the plan's winner against
// the published layout (selective recomputation + sequence parallelism),
// both predicted by the same model: the published layout's rank in the
// plan when it was simulated, else both predictions.
//
// Prints; asserts nothing (no test asserts on wall-clock time).
// Usage: pipegrid_plan_bench [--quality] [--speed]   (default: both)

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "spawn.hpp"

namespace {

namespace fs = std::filesystem;
using pipegrid::bench::Spawned;
using pipegrid::bench::spawn_and_wait;

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct PlanRun {
  double wall_s = 0;
  nlohmann::json result;
};

PlanRun run_plan(const fs::path& folder, const std::vector<std::string>& args) {
  const fs::path out = folder / "plan.json";
  std::vector<std::string> all = {"plan"};
  all.insert(all.end(), args.begin(), args.end());
  all.insert(all.end(), {"--jobs", "2", "--output-json", out.string()});
  const auto start = std::chrono::steady_clock::now();
  const Spawned spawned = spawn_and_wait(PIPEGRID_BINARY, all, (folder / "stdout").string(), (folder / "stderr").string());
  PlanRun run;
  run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (spawned.status != 0 && spawned.status != 1) {
    std::fprintf(stderr, "plan failed (status %d):\n%s\n", spawned.status, read_all(folder / "stderr").c_str());
    std::exit(1);
  }
  run.result = nlohmann::json::parse(read_all(out));
  return run;
}

double simulate_time(const fs::path& folder, const std::string& platform, const std::string& arguments) {
  const Spawned spawned = spawn_and_wait(
      PIPEGRID_BINARY, {"simulate", "--platform", platform, "--megatron-args", arguments, "--json", "--memory", "1TB"},
      (folder / "sim.json").string(), (folder / "sim.err").string());
  if (spawned.status != 0) {
    std::fprintf(stderr, "simulate failed:\n%s\n", read_all(folder / "sim.err").c_str());
    std::exit(1);
  }
  return nlohmann::json::parse(read_all(folder / "sim.json")).at("minibatch_time_s").get<double>();
}

const std::string kGpt3 =
    "--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048 --fp16";
const std::string kMegatron530 =
    "--num-layers 105 --hidden-size 20480 --num-attention-heads 128 --seq-length 2048 --max-position-embeddings 2048 "
    "--fp16";

void speed(const fs::path& folder) {
  std::printf("Speed: pipegrid plan --jobs 2 on DGX A100 80 GB servers (wall seconds of the whole command)\n\n");
  std::printf("| search | wall s | enumerated | refused | memory-bounded | time-bounded | simulated | layouts/s | "
              "bound mean/max | winner | iteration s | MFU |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  struct Case {
    std::string name, arguments;
    int gpus;
    long long batch;
  };
  for (const Case& c : {Case{"GPT-3 175B, 1,024 A100, batch 1,536", kGpt3, 1024, 1536},
                        Case{"Megatron 530B, 2,240 A100, batch 1,920", kMegatron530, 2240, 1920}}) {
    const PlanRun run = run_plan(folder, {"--server", "dgx-a100-80gb", "--gpus", std::to_string(c.gpus), "--megatron-args",
                                          c.arguments, "--global-batch-size", std::to_string(c.batch)});
    const nlohmann::json& j = run.result;
    const nlohmann::json& w = j.at("ranking").at(0);
    std::printf("| %s | %.1f | %zu | %zu | %zu | %zu | %zu | %.0f | %.3f / %.3f | %s %s | %.2f | %.1f%% |\n", c.name.c_str(),
                run.wall_s, j.at("enumerated").get<std::size_t>(), j.at("refused").get<std::size_t>(),
                j.at("memory_bounded").get<std::size_t>(), j.at("time_bounded").get<std::size_t>(),
                j.at("simulated").get<std::size_t>(), j.at("enumerated").get<double>() / run.wall_s,
                j.at("mean_bound_ratio").get<double>(), j.at("max_bound_ratio").get<double>(),
                w.at("layout").get<std::string>().c_str(), w.at("schedule").get<std::string>().c_str(),
                w.at("iteration_time_s").get<double>(), 100 * w.at("mfu").get<double>());
    std::fflush(stdout);
  }
}

void quality(const fs::path& folder) {
  std::printf("\nQuality: Korthikanti et al. 2022 (Table 3), the plan's winner against the published layout "
              "(selective + sp), both simulated by pipegrid\n\n");
  std::printf("| model | GPUs | batch | published layout | its prediction s | its rank in the plan | plan winner | "
              "winner s | winner faster by |\n|---|---|---|---|---|---|---|---|---|\n");
  struct Case {
    std::string name;
    int layers, hidden, heads, gpus, batch, t, p, v, mbs;
  };
  for (const Case& c : {Case{"22B", 48, 6144, 64, 8, 4, 8, 1, 1, 4}, Case{"175B", 96, 12288, 96, 64, 64, 8, 8, 3, 1},
                        Case{"530B", 105, 20480, 128, 280, 280, 8, 35, 3, 1},
                        Case{"1T", 128, 25600, 160, 512, 512, 8, 64, 1, 1}}) {
    const std::string base = fmt::format(
        "--num-layers {} --hidden-size {} --num-attention-heads {} --ffn-hidden-size {} --seq-length 2048 "
        "--max-position-embeddings 2048 --fp16 --accumulate-allreduce-grads-in-fp32 --attention-backend unfused",
        c.layers, c.hidden, c.heads, 4 * c.hidden);
    const fs::path platform = folder / fmt::format("selene-{}.xml", c.gpus);
    const PlanRun run = run_plan(folder, {"--server", "dgx-a100-80gb", "--gpus", std::to_string(c.gpus), "--megatron-args", base,
                                          "--global-batch-size", std::to_string(c.batch), "--save-platform", platform.string()});
    std::string published = fmt::format("t{} p{} d{}", c.t, c.p, c.gpus / (c.t * c.p));
    if (c.v > 1) published += fmt::format(" v{}", c.v);
    published += fmt::format(" mbs{} selective sp", c.mbs);
    std::string launch = base + fmt::format(" --tensor-model-parallel-size {} --pipeline-model-parallel-size {} "
                                            "--micro-batch-size {} --global-batch-size {} --recompute-activations "
                                            "--sequence-parallel",
                                            c.t, c.p, c.mbs, c.batch);
    if (c.v > 1) launch += fmt::format(" --num-layers-per-virtual-pipeline-stage {}", c.layers / (c.p * c.v));
    const double published_s = simulate_time(folder, platform.string(), launch);
    std::string rank = "not simulated (bound above the winner)";
    const nlohmann::json& ranking = run.result.at("ranking");
    for (std::size_t i = 0; i < ranking.size(); ++i)
      if (ranking[i].at("layout") == published) rank = std::to_string(i + 1);
    const nlohmann::json& w = ranking.at(0);
    const double winner_s = w.at("iteration_time_s").get<double>();
    std::printf("| %s | %d | %d | %s | %.3f | %s | %s %s | %.3f | %.1f%% |\n", c.name.c_str(), c.gpus, c.batch,
                published.c_str(), published_s, rank.c_str(), w.at("layout").get<std::string>().c_str(),
                w.at("schedule").get<std::string>().c_str(), winner_s, 100 * (published_s - winner_s) / published_s);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool run_speed = true, run_quality = true;
  if (argc > 1) {
    run_speed = run_quality = false;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--speed") run_speed = true;
      else if (arg == "--quality") run_quality = true;
      else {
        std::fprintf(stderr, "usage: pipegrid_plan_bench [--speed] [--quality]\n");
        return 2;
      }
    }
  }
  const fs::path folder = fs::temp_directory_path() / fmt::format("pipegrid-plan-bench-{}", static_cast<long>(getpid()));
  fs::create_directories(folder);
  if (run_speed) speed(folder);
  if (run_quality) quality(folder);
  fs::remove_all(folder);
  return 0;
}
