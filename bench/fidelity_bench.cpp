// CPU fidelity as a standing benchmark (issue 16): calibrates two small zoo
// models on cpu:2, then validates a fixed matrix of 12 plans (mlp and gpt x
// gpipe, 1f1b-sno, 1f1b-so, interleaved-1f1b, zb-h1, zb-v; 2 devices, M = 4)
// with each launcher asked for, through the pipegrid binary (`calibrate`,
// `validate --json`), and prints the error table and a summary line per
// launcher. Nothing is asserted: timings on a shared CPU are indicative.
//
// Usage: pipegrid_fidelity_bench [--launchers threads[,processes,...]]
//                                [--repeats R] [--pipegrid PATH] [--keep DIR]
// --launchers: each is passed to calibrate and validate as `--launcher L`
// (none for `threads`, the binary's default, so the bench runs against a
// pipegrid without the flag too). A launcher the binary refuses is reported
// with its message and skipped. --keep DIR keeps the calibrated files and
// each plan's JSON report there (default: a temporary folder, removed).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "spawn.hpp"

namespace {

namespace fs = std::filesystem;

struct Model {
  std::string name;                ///< row prefix
  std::vector<std::string> flags;  ///< --model and its options
  int micro_batch_size = 0;
};

struct Schedule {
  std::string name;
  int stages = 2;  ///< 4 on 2 devices for the two-stages-per-device ones
};

// The fixed matrix. Sizes keep a mini-batch at a few to tens of
// milliseconds on one core per device, so that the whole bench stays
// within about 3 minutes on 2 cores.
const std::vector<Model> kModels = {
    {"mlp", {"--model", "mlp", "--hidden", "512", "--layers", "8"}, 32},
    {"gpt", {"--model", "gpt", "--hidden", "128", "--layers", "4", "--heads", "4", "--sequence", "32"}, 4},
};
const std::vector<Schedule> kSchedules = {{"gpipe", 2},  {"1f1b-sno", 2}, {"1f1b-so", 2},
                                          {"interleaved-1f1b", 4}, {"zb-h1", 2}, {"zb-v", 4}};
constexpr int kMicroBatches = 4;
constexpr int kMiniBatches = 3;
constexpr int kWarmup = 1;

struct Outcome {
  int status = -1;
  std::string out, err;
  double wall_s = 0;
};

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Runs `binary args`, stdout and stderr to files in `dir`; both read back.
Outcome run(const std::string& binary, const std::vector<std::string>& args, const fs::path& dir) {
  const std::string out = (dir / "stdout.txt").string(), err = (dir / "stderr.txt").string();
  const pipegrid::bench::Spawned spawned = pipegrid::bench::spawn_and_wait(binary, args, out, err);
  Outcome outcome;
  outcome.wall_s = spawned.wall_s;
  outcome.status = spawned.status;
  outcome.out = read_all(out);
  outcome.err = read_all(err);
  return outcome;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, separator);)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

double median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string milliseconds(double seconds) { return fmt::format("{:.3f} ms", 1e3 * seconds); }
std::string percent(double fraction, bool sign = false) {
  return sign ? fmt::format("{:+.1f}%", 100 * fraction) : fmt::format("{:.1f}%", 100 * fraction);
}

/// The lines of calibrate's output that say what it attributed.
std::string calibration_summary(const std::string& out) {
  std::string summary;
  for (const std::string& line : split(out, '\n'))
    if (line.rfind("per-action overhead", 0) == 0 || line.rfind("stage actions", 0) == 0 || line.rfind("layers timed", 0) == 0 ||
        line.rfind("copy:", 0) == 0)
      summary += "  " + line + "\n";
  return summary;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> launchers = {"threads", "processes"};
  std::string binary = PIPEGRID_BINARY;
  std::string keep;
  int repeats = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--launchers" && has_value) {
      launchers = split(argv[++i], ',');
    } else if (arg == "--repeats" && has_value) {
      repeats = std::atoi(argv[++i]);
    } else if (arg == "--pipegrid" && has_value) {
      binary = argv[++i];
    } else if (arg == "--keep" && has_value) {
      keep = argv[++i];
    } else {
      std::cerr << "usage: pipegrid_fidelity_bench [--launchers threads[,processes]] [--repeats R] [--pipegrid PATH] "
                   "[--keep DIR]\n";
      return 2;
    }
  }
  if (launchers.empty() || repeats < 1) {
    std::cerr << "pipegrid_fidelity_bench: --launchers needs a name, --repeats at least 1\n";
    return 2;
  }
  fs::path dir;
  if (keep.empty()) {
    char pattern[] = "/tmp/pipegrid-fidelity-bench-XXXXXX";
    if (!mkdtemp(pattern)) return 1;
    dir = pattern;
  } else {
    dir = keep;
    fs::create_directories(dir);
  }

  const auto load = [] {
    double averages[3] = {0, 0, 0};
    return getloadavg(averages, 3) == 3 ? fmt::format("{:.2f} {:.2f} {:.2f}", averages[0], averages[1], averages[2])
                                        : std::string("unknown");
  };
  std::cout << fmt::format("load average at the start: {} on {} cores\n", load(), std::thread::hardware_concurrency());
  const auto bench_start = std::chrono::steady_clock::now();
  std::cout << fmt::format("{} plans on cpu:2, M = {}, {} measured mini-batches after {} warm-up, {} runs each; "
                           "relative error = (simulated - measured) / measured mini-batch time, median of the runs\n",
                           kModels.size() * kSchedules.size(), kMicroBatches, kMiniBatches, kWarmup, repeats);
  for (const std::string& launcher : launchers) {
    const std::vector<std::string> launcher_flags =
        launcher == "threads" ? std::vector<std::string>{} : std::vector<std::string>{"--launcher", launcher};
    std::cout << fmt::format("\nlauncher {}\n", launcher);
    struct Row {
      std::string plan, simulated, measured, error, spread, action;
      double relative_error = std::nan("");
    };
    std::vector<Row> rows;
    bool refused = false;
    for (const Model& model : kModels) {
      const std::string stem = fmt::format("{}-{}", model.name, launcher);
      const std::string profile = (dir / (stem + ".json")).string(), platform = (dir / (stem + ".xml")).string();
      std::vector<std::string> args = {"calibrate"};
      args.insert(args.end(), model.flags.begin(), model.flags.end());
      for (const std::string& word : {std::string("--micro-batch-size"), std::to_string(model.micro_batch_size),
                                      std::string("--device"), std::string("cpu:2"), std::string("--output-profile"),
                                      profile, std::string("--output-platform"), platform})
        args.push_back(word);
      args.insert(args.end(), launcher_flags.begin(), launcher_flags.end());
      const Outcome calibrated = run(binary, args, dir);
      if (calibrated.status != 0) {
        std::cout << fmt::format("  calibrate {} failed (exit {}): {}", model.name, calibrated.status, calibrated.err);
        refused = true;
        break;
      }
      std::cout << fmt::format("calibrated {} in {:.1f} s:\n{}", model.name, calibrated.wall_s,
                               calibration_summary(calibrated.out));
      for (const Schedule& schedule : kSchedules) {
        Row row;
        row.plan = fmt::format("{}-{}-m{}", model.name, schedule.name, kMicroBatches);
        std::vector<std::string> plan = {"validate"};
        plan.insert(plan.end(), model.flags.begin(), model.flags.end());
        for (const std::string& word :
             {std::string("--schedule"), schedule.name, std::string("--stages"), std::to_string(schedule.stages),
              std::string("--micro-batches"), std::to_string(kMicroBatches), std::string("--micro-batch-size"),
              std::to_string(model.micro_batch_size), std::string("--device"), std::string("cpu:2"),
              std::string("--repeats"), std::to_string(repeats), std::string("--mini-batches"), std::to_string(kMiniBatches),
              std::string("--warmup"), std::to_string(kWarmup), std::string("--profile"), profile,
              std::string("--platform"), platform, std::string("--json")})
          plan.push_back(word);
        plan.insert(plan.end(), launcher_flags.begin(), launcher_flags.end());
        const Outcome validated = run(binary, plan, dir);
        if (validated.status != 0) {
          const std::vector<std::string> message = split(validated.err, '\n');
          row.simulated = fmt::format("failed (exit {}): {}", validated.status, message.empty() ? "" : message.front());
          rows.push_back(row);
          continue;
        }
        if (!keep.empty()) std::ofstream(dir / (row.plan + "-" + launcher + ".json")) << validated.out;
        const nlohmann::json report = nlohmann::json::parse(validated.out);
        const nlohmann::json& spread = report.at("spread");
        std::vector<double> action_medians;
        for (const nlohmann::json& one : report.at("runs")) action_medians.push_back(one.at("action_error_median").get<double>());
        const double measured = spread.at("measured_minibatch_time_s").at("median").get<double>();
        row.relative_error = spread.at("relative_error").at("median").get<double>();
        row.simulated = milliseconds(report.at("simulated_minibatch_time_s").get<double>());
        row.measured = milliseconds(measured);
        row.error = percent(row.relative_error, true);
        row.spread = percent((spread.at("measured_minibatch_time_s").at("max").get<double>() -
                              spread.at("measured_minibatch_time_s").at("min").get<double>()) /
                             measured);
        row.action = fmt::format("{} / {}", percent(median(action_medians)),
                                 percent(spread.at("action_error_p95").at("median").get<double>()));
        rows.push_back(row);
      }
    }
    if (refused) continue;
    std::cout << "\n| plan | simulated | measured (median of runs) | relative error | run spread | action error median / p95 |\n"
                 "| --- | --- | --- | --- | --- | --- |\n";
    std::vector<double> errors;
    for (const Row& row : rows) {
      if (std::isnan(row.relative_error)) {
        std::cout << fmt::format("| {} | {} | | | | |\n", row.plan, row.simulated);
        continue;
      }
      errors.push_back(std::abs(row.relative_error));
      std::cout << fmt::format("| {} | {} | {} | {} | {} | {} |\n", row.plan, row.simulated, row.measured, row.error,
                               row.spread, row.action);
    }
    std::cout << fmt::format("\nlauncher {}: {} of {} plans validated: median |error| {}, max {}\n", launcher, errors.size(),
                             rows.size(), errors.empty() ? "-" : percent(median(errors)),
                             errors.empty() ? "-" : percent(*std::max_element(errors.begin(), errors.end())));
  }
  std::cout << fmt::format("\nbench wall time {:.1f} s; load average at the end: {}\n",
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - bench_start).count(), load());
  if (keep.empty()) fs::remove_all(dir);
  return 0;
}
