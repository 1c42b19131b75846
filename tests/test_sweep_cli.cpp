// `pipegrid sweep run` against `pipegrid simulate --json` (EXPERIMENTS.md:
// "a row equals simulate --json exactly"): the binary runs the sweep of
// tests/data/sweep-e2e; for each row the test rebuilds the simulate command
// line from the row's own columns (not from the sweep's code), runs it, and
// compares every metric of runs.csv and devices.csv with the JSON, as
// doubles, exactly. `sweep show` must name the same command line.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/io.hpp"
#include "sweep/csv.hpp"
#include "run_command.hpp"

namespace {

namespace fs = std::filesystem;

const std::string kBinary = PIPEGRID_BINARY;
const std::string kCase = std::string(PIPEGRID_SOURCE_DIR) + "/tests/data/sweep-e2e";

using Result = testutil::CommandResult;
using testutil::shell_quote;

/// Runs `words` (shell-quoted) with stdout and stderr captured.
Result run_command(const std::vector<std::string>& words, const fs::path& scratch) {
  return testutil::run_words("", words, (scratch / "stderr.txt").string());
}

double number(const std::string& cell) {
  char* end = nullptr;
  const double value = std::strtod(cell.c_str(), &end);
  EXPECT_TRUE(!cell.empty() && *end == '\0') << "not a number: '" << cell << "'";
  return value;
}

/// A metric cell equals the JSON value exactly (both read as doubles); an
/// absent JSON value is an empty cell.
void expect_cell(const std::string& cell, const nlohmann::json& value, const std::string& what) {
  if (value.is_null()) {
    EXPECT_EQ(cell, "") << what;
    return;
  }
  if (value.is_string()) {
    EXPECT_EQ(cell, value.get<std::string>()) << what;
    return;
  }
  EXPECT_EQ(number(cell), value.get<double>()) << what << ": cell '" << cell << "', JSON " << value.dump();
}

class SweepCli : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/pipegrid-sweep-cli-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    scratch_ = pattern;
  }
  void TearDown() override { fs::remove_all(scratch_); }
  fs::path scratch_;
};

// Columns of sweep-e2e that are simulate flags; the others are labels.
const std::set<std::string> kParameters = {"platform",      "profile", "schedule", "micro_batches",       "mini_batches",
                                           "partitioner",   "memory",  "network",  "micro_batch_scaling", "micro_batch_size"};
const std::set<std::string> kLabels = {"system", "samples"};
const std::set<std::string> kPaths = {"platform", "profile"};

TEST_F(SweepCli, EveryRowEqualsSimulateJson) {
  const fs::path out = scratch_ / "out";
  const Result sweep = run_command({kBinary, "sweep", "run", kCase + "/experiment.toml", "--out", out.string(), "--jobs", "2"}, scratch_);
  ASSERT_EQ(sweep.status, 0) << sweep.err;
  const pipegrid::CsvTable runs = pipegrid::read_csv_file((out / "runs.csv").string());
  const pipegrid::CsvTable devices = pipegrid::read_csv_file((out / "devices.csv").string());
  ASSERT_EQ(runs.rows.size(), 18u);
  const auto at = [&](const std::vector<std::string>& row, const char* column) { return row[runs.require_column(column)]; };
  const std::size_t first = runs.require_column("label") + 1, last = runs.require_column("status");
  std::set<std::string> statuses;
  for (const auto& row : runs.rows) {
    const std::string label = at(row, "label"), key = at(row, "run_key"), status = at(row, "status");
    SCOPED_TRACE("run " + label);
    statuses.insert(status);
    // The command line, from the row's parameter columns.
    std::vector<std::string> args = {kBinary, "simulate"};
    std::vector<std::string> pairs;
    for (std::size_t c = first; c < last; ++c) {
      const std::string& column = runs.header[c];
      if (kLabels.count(column)) continue;
      ASSERT_TRUE(kParameters.count(column)) << "unexpected column " << column;
      if (row[c].empty()) continue;
      std::string flag = "--" + column;
      std::replace(flag.begin(), flag.end(), '_', '-');
      const std::string value = kPaths.count(column) ? (fs::path(kCase) / row[c]).lexically_normal().string() : row[c];
      args.push_back(flag);
      args.push_back(value);
      pairs.push_back(flag + " " + value);
    }
    // sweep show names the same command line (its flags in another order).
    const Result show = run_command({kBinary, "sweep", "show", out.string(), "--run", label}, scratch_);
    const std::string prefix = "pipegrid: " + label + " [" + key + "]: pipegrid simulate ";
    ASSERT_EQ(show.err.rfind(prefix, 0), 0u) << show.err;
    std::vector<std::string> words;
    std::string shown = show.err.substr(prefix.size(), show.err.find('\n') - prefix.size());
    for (std::size_t start = 0; start <= shown.size();) {
      const std::size_t space = std::min(shown.find(' ', start), shown.size());
      words.push_back(shown.substr(start, space - start));
      start = space + 1;
    }
    std::vector<std::string> shown_pairs;
    for (std::size_t w = 0; w + 1 < words.size(); w += 2) shown_pairs.push_back(words[w] + " " + words[w + 1]);
    std::sort(pairs.begin(), pairs.end());
    std::sort(shown_pairs.begin(), shown_pairs.end());
    EXPECT_EQ(shown_pairs, pairs);
    EXPECT_EQ(show.status, status == "infeasible" ? 2 : 0) << show.err;

    args.push_back("--json");
    const Result simulate = run_command(args, scratch_);
    if (status == "infeasible") {
      EXPECT_NE(simulate.status, 0);
      EXPECT_NE(simulate.err.find(at(row, "reason")), std::string::npos) << simulate.err;
      for (std::size_t c = last + 2; c < runs.header.size() && runs.header[c] != "sim_wall_s"; ++c) EXPECT_EQ(row[c], "") << runs.header[c];
      continue;
    }
    ASSERT_EQ(simulate.status, 0) << simulate.err;
    const nlohmann::json json = nlohmann::json::parse(simulate.out);
    bool oom = false;
    const nlohmann::json* peak = nullptr;
    for (const auto& device : json.at("devices")) {
      oom = oom || device.at("oom").get<bool>();
      if (!peak || device.at("peak_memory_bytes").get<double>() > peak->at("peak_memory_bytes").get<double>()) peak = &device;
    }
    EXPECT_EQ(status, oom ? "oom" : "ok");
    for (const char* metric : {"minibatch_time_s", "throughput_samples_per_s", "bubble_fraction", "bytes_per_sample", "stages"})
      expect_cell(at(row, metric), json.at(metric), metric);
    expect_cell(at(row, "steady_period_s"), json.contains("steady_state") ? json["steady_state"].value("period_s", nlohmann::json()) : nlohmann::json(),
                "steady_period_s");
    ASSERT_NE(peak, nullptr);
    expect_cell(at(row, "peak_memory_bytes"), peak->at("peak_memory_bytes"), "peak_memory_bytes");
    expect_cell(at(row, "peak_memory_host"), peak->at("host"), "peak_memory_host");
    expect_cell(at(row, "memory_capacity_bytes"), peak->at("memory_capacity_bytes"), "memory_capacity_bytes");
    // devices.csv: one row per device of this run, in the JSON's order.
    std::vector<const std::vector<std::string>*> device_rows;
    for (const auto& device : devices.rows)
      if (device[devices.require_column("run_key")] == key) device_rows.push_back(&device);
    ASSERT_EQ(device_rows.size(), json.at("devices").size());
    for (std::size_t d = 0; d < device_rows.size(); ++d) {
      const auto& cells = *device_rows[d];
      const nlohmann::json& device = json.at("devices")[d];
      const auto cell = [&](const char* column) { return cells[devices.require_column(column)]; };
      expect_cell(cell("host"), device.at("host"), "host");
      std::string stages;
      for (const auto& stage : device.at("stages")) stages += (stages.empty() ? "" : ";") + std::to_string(stage.get<int>());
      EXPECT_EQ(cell("stages"), stages) << "stages";
      expect_cell(cell("busy_s"), device.at("busy_s"), "busy_s");
      expect_cell(cell("bubble_fraction"), device.at("bubble_fraction"), "device bubble_fraction");
      expect_cell(cell("peak_memory_bytes"), device.at("peak_memory_bytes"), "device peak_memory_bytes");
      expect_cell(cell("memory_capacity_bytes"), device.at("memory_capacity_bytes"), "device memory_capacity_bytes");
      expect_cell(cell("peak_stashed"), device.at("peak_stashed_microbatches"), "peak_stashed");
      expect_cell(cell("weight_versions"), device.at("peak_weight_versions"), "weight_versions");
    }
  }
  // The sweep must cover the statuses it compares.
  EXPECT_EQ(statuses, (std::set<std::string>{"ok", "oom", "infeasible"}));
}

}  // namespace
