// The schedules of issue 14 (schedules/beyond.hpp): exact per-rank orders
// (/work/shared/SCHEDULES-BEYOND.md section 10, PyTorch's regression CSVs),
// and an independent list-scheduling model checking the section 12 table,
// the closed forms of section 1 and the in-flight peaks.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "expect_input_error.hpp"
#include "list_schedule_model.hpp"
#include "schedules/beyond.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid {
namespace {
using testutil::ModelRun;
using testutil::Times;
using testutil::simulate;

using testutil::input_error_of;

Program make(const std::string& name, int p, int m, int v, int mini_batches = 1, bool recompute = false) {
  ScheduleOptions options;
  options.num_stages = p * v;
  options.virtual_stages = v;
  options.micro_batches = m;
  options.mini_batches = mini_batches;
  options.recompute = recompute;
  return generate_schedule(name, options);
}

Program make(const std::string& name, int p, int m) { return make(name, p, m, default_virtual_stages(name)); }

// PyTorch's cell form: `0F0`, `(0F7;7B3)OVERLAP_F_B`; mini-batch 0 only.
std::string cell(const Action& a) {
  const char* letters = "FBRIW";
  return std::to_string(a.stage) + letters[static_cast<int>(a.kind)] + std::to_string(a.micro_batch);
}

std::vector<std::string> cells(const Stream& stream) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < stream.actions.size(); ++i) {
    if (std::find(stream.overlapped.begin(), stream.overlapped.end(), i) != stream.overlapped.end()) {
      out.push_back("(" + cell(stream.actions[i]) + ";" + cell(stream.actions[i + 1]) + ")OVERLAP_F_B");
      ++i;
    } else {
      out.push_back(cell(stream.actions[i]));
    }
  }
  return out;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, separator);) out.push_back(item);
  return out;
}

// Section 10, p = 4, m = 8, default chunks; DualPipeV in torch's cell form.
const std::map<std::string, std::vector<std::string>> kWorkedExamples = {
    {"interleaved-1f1b",
     {"0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5 0F6 4B0 0F7 4B1 4F4 4B2 4F5 4B3 4F6 0B0 4F7 0B1 0B2 0B3 4B4 4B5 4B6 4B7 0B4 0B5 0B6 0B7",
      "1F0 1F1 1F2 1F3 5F0 5F1 5F2 5F3 1F4 5B0 1F5 5B1 1F6 5B2 1F7 5B3 5F4 1B0 5F5 1B1 5F6 1B2 5F7 1B3 5B4 5B5 5B6 5B7 1B4 1B5 1B6 1B7",
      "2F0 2F1 2F2 2F3 6F0 6F1 6F2 6B0 6F3 6B1 2F4 6B2 2F5 6B3 2F6 2B0 2F7 2B1 6F4 2B2 6F5 2B3 6F6 6B4 6F7 6B5 6B6 6B7 2B4 2B5 2B6 2B7",
      "3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3F4 3B0 3F5 3B1 3F6 3B2 3F7 3B3 7F4 7B4 7F5 7B5 7F6 7B6 7F7 7B7 3B4 3B5 3B6 3B7"}},
    {"looped-bfs",
     {"0F0 0F1 0F2 0F3 0F4 0F5 0F6 0F7 4F0 4F1 4F2 4F3 4F4 4F5 4F6 4F7 4B7 4B6 4B5 4B4 4B3 4B2 4B1 4B0 0B7 0B6 0B5 0B4 0B3 0B2 0B1 0B0",
      "1F0 1F1 1F2 1F3 1F4 1F5 1F6 1F7 5F0 5F1 5F2 5F3 5F4 5F5 5F6 5F7 5B7 5B6 5B5 5B4 5B3 5B2 5B1 5B0 1B7 1B6 1B5 1B4 1B3 1B2 1B1 1B0",
      "2F0 2F1 2F2 2F3 2F4 2F5 2F6 2F7 6F0 6F1 6F2 6F3 6F4 6F5 6F6 6F7 6B7 6B6 6B5 6B4 6B3 6B2 6B1 6B0 2B7 2B6 2B5 2B4 2B3 2B2 2B1 2B0",
      "3F0 3F1 3F2 3F3 3F4 3F5 3F6 3F7 7F0 7F1 7F2 7F3 7F4 7F5 7F6 7F7 7B7 7B6 7B5 7B4 7B3 7B2 7B1 7B0 3B7 3B6 3B5 3B4 3B3 3B2 3B1 3B0"}},
    {"zb-h1",
     {"0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7",
      "1F0 1F1 1F2 1I0 1F3 1I1 1W0 1F4 1I2 1W1 1F5 1I3 1W2 1F6 1I4 1W3 1F7 1I5 1W4 1I6 1W5 1I7 1W6 1W7",
      "2F0 2F1 2I0 2F2 2I1 2F3 2I2 2W0 2F4 2I3 2W1 2F5 2I4 2W2 2F6 2I5 2W3 2F7 2I6 2W4 2I7 2W5 2W6 2W7",
      "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7"}},
    {"zb-h2",
     {"0F0 0F1 0F2 0F3 0F4 0F5 0F6 0I0 0W0 0F7 0I1 0W1 0I2 0W2 0I3 0W3 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7",
      "1F0 1F1 1F2 1F3 1F4 1I0 1F5 1I1 1F6 1I2 1W0 1F7 1I3 1W1 1I4 1W2 1I5 1W3 1I6 1W4 1I7 1W5 1W6 1W7",
      "2F0 2F1 2F2 2I0 2F3 2I1 2F4 2I2 2F5 2I3 2F6 2I4 2W0 2F7 2I5 2W1 2I6 2W2 2I7 2W3 2W4 2W5 2W6 2W7",
      "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3F4 3I4 3F5 3I5 3F6 3I6 3W0 3F7 3I7 3W1 3W2 3W3 3W4 3W5 3W6 3W7"}},
    {"zb1p",
     {"0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 4I0 4W0 0F4 4I1 4W1 0F5 4I2 4W2 0F6 4I3 4W3 0F7 0I0 0W0 4F4 0I1 0W1 4F5 0I2 0W2 4F6 0I3 0W3 4F7 4I4 4W4 4I5 4W5 4I6 4W6 4I7 4W7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7",
      "1F0 1F1 1F2 1F3 5F0 5F1 5F2 5I0 5F3 5I1 5W0 1F4 5I2 5W1 1F5 5I3 5W2 1F6 1I0 5W3 1F7 1I1 1W0 5F4 1I2 1W1 5F5 1I3 1W2 5F6 5I4 1W3 5F7 5I5 5W4 5I6 5W5 5I7 5W6 1I4 5W7 1I5 1W4 1I6 1W5 1I7 1W6 1W7",
      "2F0 2F1 2F2 2F3 6F0 6F1 6I0 6F2 6I1 6F3 6I2 6W0 2F4 6I3 6W1 2F5 2I0 6W2 2F6 2I1 6W3 2F7 2I2 2W0 6F4 2I3 2W1 6F5 6I4 2W2 6F6 6I5 2W3 6F7 6I6 6W4 6I7 6W5 2I4 6W6 2I5 6W7 2I6 2W4 2I7 2W5 2W6 2W7",
      "3F0 3F1 3F2 3F3 7F0 7I0 7F1 7I1 7F2 7I2 7F3 7I3 7W0 3F4 3I0 7W1 3F5 3I1 7W2 3F6 3I2 7W3 3F7 3I3 3W0 7F4 7I4 3W1 7F5 7I5 3W2 7F6 7I6 3W3 7F7 7I7 7W4 3I4 7W5 3I5 7W6 3I6 7W7 3I7 3W4 3W5 3W6 3W7"}},
    {"zb-v",
     {"0F0 0F1 0F2 0F3 0F4 0F5 0F6 7F0 7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 7I3 7W3 0F7 0I0 0W0 7F4 7I4 7W4 0I1 0W1 7F5 7I5 7W5 0I2 0W2 7F6 7I6 7W6 0I3 0W3 7F7 7I7 7W7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7",
      "1F0 1F1 1F2 1F3 1F4 6F0 1F5 6F1 6I0 6W0 6F2 6I1 6W1 6F3 6I2 6W2 1F6 1I0 1W0 6F4 6I3 6W3 1F7 1I1 1W1 6F5 6I4 6W4 1I2 1W2 6F6 6I5 6W5 1I3 1W3 6F7 6I6 6W6 1I4 6I7 1I5 1W4 1I6 1W5 1I7 1W6 6W7 1W7",
      "2F0 2F1 2F2 5F0 2F3 5F1 2F4 5F2 5I0 5W0 5F3 5I1 5W1 2F5 2I0 2W0 5F4 5I2 5W2 2F6 2I1 2W1 5F5 5I3 5W3 2F7 2I2 2W2 5F6 5I4 5W4 2I3 2W3 5F7 5I5 5W5 2I4 5I6 2I5 5I7 2I6 2W4 2I7 2W5 5W6 5W7 2W6 2W7",
      "3F0 4F0 3F1 4F1 3F2 4F2 3F3 4F3 4I0 4W0 3F4 3I0 3W0 4F4 4I1 4W1 3F5 3I1 3W1 4F5 4I2 4W2 3F6 3I2 3W2 4F6 4I3 4W3 3F7 3I3 3W3 4F7 4I4 4W4 3I4 4I5 3I5 4I6 3I6 4I7 3I7 3W4 4W5 4W6 4W7 3W5 3W6 3W7"}},
    {"dualpipev",
     {"0F0 0F1 0F2 0F3 0F4 0F5 0F6 7F0 7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 (0F7;7B3)OVERLAP_F_B (7F4;0B0)OVERLAP_F_B 7B4 (7F5;0B1)OVERLAP_F_B 7B5 (7F6;0B2)OVERLAP_F_B 7B6 (7F7;0B3)OVERLAP_F_B 7B7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7",
      "1F0 1F1 1F2 1F3 1F4 6F0 1F5 6F1 6I0 6W0 6F2 6I1 6W1 6F3 (1F6;6B2)OVERLAP_F_B (6F4;1B0)OVERLAP_F_B (1F7;6B3)OVERLAP_F_B (6F5;1B1)OVERLAP_F_B 6B4 (6F6;1B2)OVERLAP_F_B 6B5 (6F7;1B3)OVERLAP_F_B 6B6 1B4 6I7 1I5 6W7 1I6 1W5 1I7 1W6 1W7",
      "2F0 2F1 2F2 5F0 2F3 5F1 2F4 5F2 5I0 5W0 5F3 (2F5;5B1)OVERLAP_F_B (5F4;2B0)OVERLAP_F_B (2F6;5B2)OVERLAP_F_B (5F5;2B1)OVERLAP_F_B (2F7;5B3)OVERLAP_F_B (5F6;2B2)OVERLAP_F_B 5B4 (5F7;2B3)OVERLAP_F_B 5B5 2B4 5B6 2I5 5I7 2I6 2W5 2I7 5W7 2W6 2W7",
      "3F0 4F0 3F1 4F1 3F2 4F2 3F3 4F3 3F4 4B0 (4F4;3B0)OVERLAP_F_B (3F5;4B1)OVERLAP_F_B (4F5;3B1)OVERLAP_F_B (3F6;4B2)OVERLAP_F_B (4F6;3B2)OVERLAP_F_B (3F7;4B3)OVERLAP_F_B (4F7;3B3)OVERLAP_F_B 4B4 3B4 4B5 3B5 4I6 3I6 4I7 3I7 4W6 3W6 4W7 3W7"}},
};

const std::vector<std::string> kNames = {"interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb1p", "zb-v", "dualpipev"};

TEST(SchedulesBeyond, WorkedExamplesOfFourRanksAndEightMicroBatches) {
  for (const auto& [name, ranks] : kWorkedExamples) {
    const Program program = make(name, 4, 8);
    ASSERT_EQ(program.devices.size(), 4u) << name;
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(program.devices[r].streams.size(), 1u);
      EXPECT_EQ(cells(program.devices[r].streams[0]), split(ranks[r], ' ')) << name << " rank " << r;
    }
  }
}

TEST(SchedulesBeyond, StageMapsAndProgramShape) {
  const std::map<std::string, std::vector<std::vector<int>>> stages = {
      {"interleaved-1f1b", {{0, 4}, {1, 5}, {2, 6}, {3, 7}}}, {"zb1p", {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {"zb-h1", {{0}, {1}, {2}, {3}}},                        {"zb-v", {{0, 7}, {1, 6}, {2, 5}, {3, 4}}},
      {"dualpipev", {{0, 7}, {1, 6}, {2, 5}, {3, 4}}},
  };
  for (const auto& [name, expected] : stages) {
    const Program program = make(name, 4, 8);
    EXPECT_EQ(program.num_stages, 4 * default_virtual_stages(name));
    EXPECT_EQ(program.micro_batches, 8);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(program.devices[r].stages, expected[r]) << name;
      EXPECT_EQ(program.devices[r].replica, 0);
    }
  }
  const Program three = make("interleaved-1f1b", 3, 6, 3);
  EXPECT_EQ(three.devices[1].stages, (std::vector<int>{1, 4, 7}));
  EXPECT_EQ(stage_map_of("zb-v"), StageMap::V);
  EXPECT_EQ(stage_map_of("dualpipev"), StageMap::V);
  EXPECT_EQ(stage_map_of("interleaved-1f1b"), StageMap::Loop);
  for (const std::string name : {"interleaved-1f1b", "looped-bfs", "zb1p", "zb-v", "dualpipev"})
    EXPECT_EQ(default_virtual_stages(name), 2) << name;
  for (const std::string name : {"zb-h1", "zb-h2", "gpipe", "1f1b-sno", "pipedream", "dp"})
    EXPECT_EQ(default_virtual_stages(name), 1) << name;
  for (const std::string& name : kNames) {
    const ScheduleInfo& info = schedule_info(name);
    EXPECT_TRUE(info.flushed && !info.single_stage && !info.needs_async && info.intended_kind == DeviceKind::Gpu) << name;
  }
}

TEST(SchedulesBeyond, DevicesHoldTheStagesOfTheirStageMap) {
  for (const std::string& name : kNames)
    for (int p = 1; p <= 5; ++p)
      for (int v = 1; v <= 3; ++v) {
        const int fixed = schedule_info(name).fixed_virtual_stages;
        if (fixed != 0 && v != fixed) continue;
        const int m = 2 * p * v;
        const Program program = make(name, p, m, v);
        const std::vector<int> device_of = stage_to_device(p * v, v, stage_map_of(name));
        ASSERT_EQ(program.devices.size(), static_cast<std::size_t>(p));
        for (int d = 0; d < p; ++d) {
          EXPECT_EQ(program.devices[d].stages.size(), static_cast<std::size_t>(v)) << name;
          EXPECT_TRUE(std::is_sorted(program.devices[d].stages.begin(), program.devices[d].stages.end())) << name;
          for (const int stage : program.devices[d].stages) EXPECT_EQ(device_of.at(stage), d) << name << " stage " << stage;
        }
      }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// PyTorch's own regression CSV (test/distributed/pipelining/artifacts): one
// row per rank, one cell per step, no idle cells in this file.
TEST(SchedulesBeyond, DualPipeVReproducesPyTorchsCsvRowByRow) {
  const std::vector<std::string> rows =
      split(read_file(std::string(PIPEGRID_SOURCE_DIR) + "/tests/data/torch-pipelining/dualpipev_4rank_10mb.csv"), '\n');
  ASSERT_EQ(rows.size(), 4u);
  const Program program = make("dualpipev", 4, 10);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(cells(program.devices[r].streams[0]), split(rows[r], ',')) << "rank " << r;
}

// The older grammar of this CSV writes the input-gradient half as B (every
// B has its W); empty cells are idle steps, which pipegrid does not emit.
TEST(SchedulesBeyond, Zb1pReproducesPyTorchsComputeCsv) {
  const std::vector<std::string> rows =
      split(read_file(std::string(PIPEGRID_SOURCE_DIR) + "/tests/data/torch-pipelining/zb1p_2rank_2stagep_compute.csv"), '\n');
  ASSERT_EQ(rows.size(), 2u);
  const Program program = make("zb1p", 2, 8, 2);
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> expected;
    for (std::string item : split(rows[r], ',')) {
      if (item.empty()) continue;
      std::replace(item.begin(), item.end(), 'B', 'I');
      expected.push_back(item);
    }
    EXPECT_EQ(cells(program.devices[r].streams[0]), expected) << "rank " << r;
  }
}

// Each (stage, micro-batch) has one F and either one B or one I and one W
// (and one R with recomputation), on a device holding the stage; the model runs it to the end.
void expect_complete(const Program& program, int v, const std::string& what) {
  std::map<std::pair<int, int>, std::string> kinds;
  for (const DeviceProgram& device : program.devices)
    for (const Action& a : device.streams[0].actions) {
      EXPECT_TRUE(std::count(device.stages.begin(), device.stages.end(), a.stage)) << what << ": " << cell(a);
      kinds[{a.stage, a.micro_batch + a.mini_batch * program.micro_batches}] += "FBRIW"[static_cast<int>(a.kind)];
    }
  EXPECT_EQ(kinds.size(), static_cast<std::size_t>(program.num_stages * program.micro_batches * program.mini_batches)) << what;
  for (const auto& [key, letters] : kinds) {
    std::string sorted = letters;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_TRUE(sorted == "BF" || sorted == "FIW" || sorted == "BFR" || sorted == "FIRW") << what << ": stage " << key.first << " has " << letters;
  }
  EXPECT_TRUE(simulate(program, v, {}).complete) << what << ": deadlock in the list-scheduling model";
  try {
    validate_program(program);
  } catch (const ProgramError& error) {
    ADD_FAILURE() << what << ": " << error.what();
  }
}

struct Shape {
  int p, m, v;
};

std::string describe(const std::string& name, const Shape& s, const Times& t = {}) {
  return name + " p=" + std::to_string(s.p) + " m=" + std::to_string(s.m) + " v=" + std::to_string(s.v) +
         " TF=" + std::to_string(t.tf) + " TB=" + std::to_string(t.tb) + " TW=" + std::to_string(t.tw);
}

TEST(SchedulesBeyond, SectionTwelveTableAtUniformTimes) {
  struct Row {
    std::string name;
    double makespan, span, global;
    std::vector<int> peak;
  };
  const std::vector<Row> rows = {
      {"interleaved-1f1b", 28.5, 4.5, 4.5, {11, 9, 7, 5}}, {"looped-bfs", 28.5, 4.5, 4.5, {16, 16, 16, 16}},
      {"zb-h1", 27.0, 3.0, 3.0, {4, 4, 4, 4}},             {"zb-h2", 27.0, 0.0, 3.0, {7, 7, 7, 7}},
      {"zb1p", 25.5, 1.5, 1.5, {8, 8, 8, 8}},              {"zb-v", 25.5, 0.0, 1.5, {8, 8, 8, 8}},
      {"dualpipev", 27.0, 3.0, 3.0, {9, 9, 9, 9}},
  };
  for (const Row& row : rows) {
    const ModelRun run = simulate(make(row.name, 4, 8), default_virtual_stages(row.name), {});
    ASSERT_TRUE(run.complete) << row.name;
    EXPECT_NEAR(run.makespan, row.makespan, 1e-9) << row.name;
    EXPECT_NEAR(run.span_bubble, row.span, 1e-9) << row.name;
    EXPECT_NEAR(run.global_bubble, row.global, 1e-9) << row.name;
    EXPECT_EQ(run.peak, row.peak) << row.name;
  }
}

const std::vector<Times> kTimes = {{1, 1, 1}, {1, 2, 1}, {2, 1, 0.5}, {1.3, 2.1, 0.4}, {0.7, 1.1, 1.9}, {1, 0.5, 3}};

// Shapes PyTorch's micro-batch rule admits, with m >= p; odd p and m % p != 0 included.
const std::vector<Shape> kLoopShapes = {{4, 8, 2}, {4, 10, 2}, {3, 6, 2}, {3, 5, 2}, {3, 8, 2}, {3, 9, 3},
                                        {5, 7, 3}, {5, 10, 2}, {2, 6, 4}, {1, 4, 3}, {4, 4, 1}, {3, 7, 1}};

int mpr_of(const Shape& s) { return s.v > 1 ? micro_batches_per_round("x", s.p, s.m) : s.m; }

TEST(SchedulesBeyond, InterleavedAndLoopedBfsClosedForms) {
  for (const Shape& s : kLoopShapes)
    for (const Times& t : kTimes) {
      const double bubble = (s.p - 1) * (t.tf + t.tb + t.tw) / s.v;
      for (const std::string name : {"interleaved-1f1b", "looped-bfs"}) {
        if (name == "interleaved-1f1b" && s.v == 1) continue;  // 1F1B with doubled warm-up: not the interleaved form
        const ModelRun run = simulate(make(name, s.p, s.m, s.v), s.v, t);
        ASSERT_TRUE(run.complete) << describe(name, s, t);
        EXPECT_NEAR(run.span_bubble, bubble, 1e-9) << describe(name, s, t);
        EXPECT_NEAR(run.global_bubble, bubble, 1e-9) << describe(name, s, t);
        EXPECT_NEAR(run.makespan, s.m * (t.tf + t.tb + t.tw) + bubble, 1e-9) << describe(name, s, t);
      }
    }
  for (const Shape& s : kLoopShapes) {
    const ModelRun interleaved = simulate(make("interleaved-1f1b", s.p, s.m, s.v), s.v, {});
    const ModelRun looped = simulate(make("looped-bfs", s.p, s.m, s.v), s.v, {});
    for (int r = 0; r < s.p; ++r) {
      EXPECT_EQ(interleaved.peak[r], std::min(s.m * s.v, (s.v - 1) * mpr_of(s) + 2 * (s.p - 1 - r) + 1)) << describe("interleaved", s);
      EXPECT_EQ(looped.peak[r], s.m * s.v) << describe("looped-bfs", s);
    }
  }
}

TEST(SchedulesBeyond, ZeroBubbleH1AndZb1pClosedForms) {
  for (const Shape& s : kLoopShapes)
    for (const Times& t : kTimes) {
      const double bubble = (s.p - 1) * std::max(t.tf + t.tb - t.tw, t.tb) / s.v;
      const ModelRun run = simulate(make("zb1p", s.p, s.m, s.v), s.v, t);
      ASSERT_TRUE(run.complete) << describe("zb1p", s, t);
      EXPECT_NEAR(run.span_bubble, bubble, 1e-9) << describe("zb1p", s, t);
      // Global = span unless TB < TF, when the start-up of the last rank shows.
      EXPECT_GE(run.global_bubble, run.span_bubble - 1e-9) << describe("zb1p", s, t);
      if (t.tb >= t.tf) {
        EXPECT_NEAR(run.global_bubble, bubble, 1e-9) << describe("zb1p", s, t);
      }
      if (s.v == 1) {
        const ModelRun h1 = simulate(make("zb-h1", s.p, s.m, 1), 1, t);
        EXPECT_NEAR(h1.span_bubble, bubble, 1e-9) << describe("zb-h1", s, t);
      }
    }
  for (const Shape& s : kLoopShapes) {
    const ModelRun run = simulate(make("zb1p", s.p, s.m, s.v), s.v, {});
    for (int r = 0; r < s.p; ++r) EXPECT_EQ(run.peak[r], (s.v - 1) * mpr_of(s) + s.p) << describe("zb1p", s);
  }
  for (const Shape s : {Shape{4, 8, 1}, Shape{3, 5, 1}, Shape{5, 7, 1}, Shape{2, 3, 1}, Shape{6, 13, 1}}) {
    const ModelRun run = simulate(make("zb-h1", s.p, s.m, 1), 1, {});
    EXPECT_EQ(run.peak, std::vector<int>(s.p, s.p)) << describe("zb-h1", s);
    for (const Times& t : kTimes)
      EXPECT_NEAR(simulate(make("zb-h1", s.p, s.m, 1), 1, t).span_bubble, (s.p - 1) * std::max(t.tf + t.tb - t.tw, t.tb), 1e-9)
          << describe("zb-h1", s, t);
  }
}

TEST(SchedulesBeyond, Zb1pWithOneChunkIsZeroBubbleH1) {
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 12; ++m) EXPECT_EQ(make("zb1p", p, m, 1), make("zb-h1", p, m, 1)) << "p=" << p << " m=" << m;
}

TEST(SchedulesBeyond, ZeroBubbleH2ClosedForm) {
  for (const Shape s : {Shape{4, 8, 1}, Shape{4, 7, 1}, Shape{3, 5, 1}, Shape{3, 7, 1}, Shape{5, 9, 1}, Shape{5, 12, 1}, Shape{2, 3, 1}}) {
    for (const Times& t : kTimes) {
      const ModelRun run = simulate(make("zb-h2", s.p, s.m, 1), 1, t);
      ASSERT_TRUE(run.complete) << describe("zb-h2", s, t);
      EXPECT_NEAR(run.span_bubble, (s.p - 1) * std::max({0.0, t.tf + t.tb - 2 * t.tw, t.tb - t.tf}), 1e-9) << describe("zb-h2", s, t);
    }
    const ModelRun uniform = simulate(make("zb-h2", s.p, s.m, 1), 1, {});
    EXPECT_NEAR(uniform.global_bubble, s.p - 1, 1e-9) << describe("zb-h2", s);
    EXPECT_EQ(uniform.peak, std::vector<int>(s.p, 2 * s.p - 1)) << describe("zb-h2", s);
  }
}

TEST(SchedulesBeyond, ZeroBubbleVHasNoSpanBubbleAtUniformTimes) {
  for (const auto& [p, m] : std::vector<std::pair<int, int>>{{4, 7}, {4, 8}, {3, 5}, {3, 9}, {5, 10}, {2, 3}, {6, 11}, {1, 3}}) {
    const ModelRun run = simulate(make("zb-v", p, m), 2, {});
    ASSERT_TRUE(run.complete) << "p=" << p << " m=" << m;
    EXPECT_NEAR(run.span_bubble, 0.0, 1e-9) << "p=" << p << " m=" << m;
    EXPECT_NEAR(run.global_bubble, (p - 1) * 0.5, 1e-9) << "p=" << p << " m=" << m;
    EXPECT_EQ(run.peak, std::vector<int>(p, std::min(2 * p, 2 * m))) << "p=" << p << " m=" << m;
  }
  // Below 2p-1 micro-batches the V leaves a bubble (section 7: 1.0 at p=4, m=6).
  EXPECT_NEAR(simulate(make("zb-v", 4, 6), 2, {}).span_bubble, 1.0, 1e-9);
}

TEST(SchedulesBeyond, DualPipeVBubbleAndPeak) {
  // Uniform times, F&B = F + B: (p-1)(F&B + B - 3W) in chunk times = p - 1.
  EXPECT_NEAR(simulate(make("dualpipev", 4, 8), 2, {}).span_bubble, 3.0, 1e-9);
  EXPECT_NEAR(simulate(make("dualpipev", 8, 16), 2, {}).span_bubble, 7.0, 1e-9);
  for (const auto& [p, m] : std::vector<std::pair<int, int>>{{2, 4}, {3, 6}, {3, 9}, {4, 10}, {5, 13}, {8, 20}}) {
    const ModelRun run = simulate(make("dualpipev", p, m), 2, {});
    ASSERT_TRUE(run.complete) << "p=" << p << " m=" << m;
    EXPECT_NEAR(run.span_bubble, p - 1, 1e-9) << "p=" << p << " m=" << m;
    EXPECT_EQ(run.peak, std::vector<int>(p, 2 * p + 1)) << "p=" << p << " m=" << m;
  }
}

TEST(SchedulesBeyond, EveryScheduleIsCompleteAndDeadlockFreeOverAGrid) {
  for (const std::string& name : kNames)
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 14; ++m)
        for (int v = 1; v <= 3; ++v) {
          const int fixed = schedule_info(name).fixed_virtual_stages;
          if (fixed != 0 && v != fixed) continue;
          if (name == "dualpipev" && m < 2 * p) continue;
          if ((name == "interleaved-1f1b" || name == "zb1p") && v > 1 && m % std::max(1, m / p) != 0) continue;
          const Program program = make(name, p, m, v);
          expect_complete(program, v, describe(name, {p, m, v}));
          for (const Times& t : kTimes)
            EXPECT_TRUE(simulate(program, v, {t.tf, t.tb, t.tw, 0.7}).complete) << describe(name, {p, m, v}, t);
        }
}

TEST(SchedulesBeyond, MiniBatchesRepeatTheOrder) {
  for (const std::string& name : kNames) {
    const Program one = make(name, 3, 6), two = make(name, 3, 6, default_virtual_stages(name), 2);
    EXPECT_EQ(two.mini_batches, 2);
    for (std::size_t d = 0; d < one.devices.size(); ++d) {
      const Stream& a = one.devices[d].streams[0];
      const Stream& b = two.devices[d].streams[0];
      ASSERT_EQ(b.actions.size(), 2 * a.actions.size()) << name;
      for (std::size_t i = 0; i < a.actions.size(); ++i) {
        EXPECT_EQ(b.actions[i], a.actions[i]);
        Action later = a.actions[i];
        later.mini_batch = 1;
        EXPECT_EQ(b.actions[i + a.actions.size()], later);
      }
      std::vector<std::size_t> overlapped = a.overlapped;
      for (const std::size_t i : a.overlapped) overlapped.push_back(i + a.actions.size());
      EXPECT_EQ(b.overlapped, overlapped) << name;
    }
    expect_complete(two, default_virtual_stages(name), name + " x2");
  }
}

TEST(SchedulesBeyond, RecomputeRunsAnRBeforeEachBackward) {
  const Program program = make("interleaved-1f1b", 2, 2, 2, 1, true);
  EXPECT_EQ(cells(program.devices[1].streams[0]), split("1F0 1F1 3F0 3R0 3B0 3F1 3R1 3B1 1R0 1B0 1R1 1B1", ' '));
  expect_complete(make("looped-bfs", 3, 4, 2, 1, true), 2, "looped-bfs recompute");
}

// Split backwards: the R precedes the I (the W needs no activations the I
// has not used). Overlapped F&B pairs: the R of the pair's B or I runs
// before the pair, which stays one op.
TEST(SchedulesBeyond, RecomputeRunsAnRBeforeEachInputGradientAndEachOverlappedPair) {
  EXPECT_EQ(cells(make("zb-h1", 2, 3, 1, 1, true).devices[0].streams[0]),
            split("0F0 0F1 0R0 0I0 0W0 0F2 0R1 0I1 0W1 0R2 0I2 0W2", ' '));
  const Program dualpipev = make("dualpipev", 2, 4, 2, 1, true);
  EXPECT_EQ(cells(dualpipev.devices[0].streams[0]),
            split("0F0 0F1 0F2 3F0 3R0 3I0 3W0 3F1 3R1 (0F3;3B1)OVERLAP_F_B 0R0 (3F2;0B0)OVERLAP_F_B 3R2 3B2 0R1 "
                  "(3F3;0B1)OVERLAP_F_B 3R3 3B3 0R2 0I2 0W2 0R3 0I3 0W3",
                  ' '));
  for (const std::string name : {"zb-h1", "zb-h2", "zb1p", "zb-v", "dualpipev"})
    for (int p : {2, 3, 4}) {
      const int v = default_virtual_stages(name), m = 2 * p;
      const Program plain = make(name, p, m, v, 2), recomputed = make(name, p, m, v, 2, true);
      expect_complete(recomputed, v, name + " recompute");
      for (std::size_t d = 0; d < plain.devices.size(); ++d) {
        // Without the R's, the same order and the same pairs.
        const Stream& with = recomputed.devices[d].streams[0];
        Stream without;
        for (std::size_t i = 0; i < with.actions.size(); ++i) {
          if (std::find(with.overlapped.begin(), with.overlapped.end(), i) != with.overlapped.end())
            without.overlapped.push_back(without.actions.size());
          if (with.actions[i].kind != ActionKind::Recompute) without.actions.push_back(with.actions[i]);
        }
        EXPECT_EQ(without, plain.devices[d].streams[0]) << name << " p=" << p;
        // One R per B or I, right before it or before its pair.
        for (std::size_t i = 0; i < with.actions.size(); ++i) {
          if (!is_input_gradient(with.actions[i].kind)) continue;
          const bool paired = std::find(with.overlapped.begin(), with.overlapped.end(), i - 1) != with.overlapped.end();
          const std::size_t before = paired ? i - 2 : i - 1;
          ASSERT_LT(before, i) << name;
          Action expected = with.actions[i];
          expected.kind = ActionKind::Recompute;
          EXPECT_EQ(with.actions[before], expected) << name << " p=" << p << " at " << i;
        }
      }
    }
}

TEST(SchedulesBeyond, BadOptionsAreInputErrors) {
  const auto error = [](const std::string& name, int stages, int v, int m, const std::function<void(ScheduleOptions&)>& more = {}) {
    ScheduleOptions options;
    options.num_stages = stages;
    options.virtual_stages = v;
    options.micro_batches = m;
    if (more) more(options);
    return input_error_of([&] { generate_schedule(name, options); });
  };
  std::string message = error("interleaved-1f1b", 8, 2, 9);
  EXPECT_CONTAINS(message, "--micro-batches");
  EXPECT_CONTAINS(message, "rounds = max(1, micro-batches / devices) = 2");
  EXPECT_CONTAINS(message, "found 9");
  EXPECT_CONTAINS(error("zb1p", 6, 2, 7), "--micro-batches");
  message = error("dualpipev", 8, 2, 7);
  EXPECT_CONTAINS(message, "--micro-batches");
  EXPECT_CONTAINS(message, "at least 2 x devices = 8");
  EXPECT_CONTAINS(error("zb-v", 6, 3, 8), "--virtual-stages: zb-v runs 2 stages per device; expected 2, found 3");
  EXPECT_CONTAINS(error("dualpipev", 4, 1, 8), "--virtual-stages");
  EXPECT_CONTAINS(error("zb-h1", 8, 2, 8), "--virtual-stages: zb-h1 runs 1 stage per device; expected 1, found 2");
  EXPECT_CONTAINS(error("zb-h2", 8, 2, 8), "--virtual-stages");
  EXPECT_CONTAINS(error("gpipe", 8, 2, 8), "--virtual-stages: gpipe runs one stage per device");
  EXPECT_CONTAINS(error("interleaved-1f1b", 7, 2, 8), "--virtual-stages: 7 stages do not split");
  EXPECT_CONTAINS(error("looped-bfs", 4, 0, 8), "--virtual-stages: expected at least 1");
  EXPECT_CONTAINS(error("zb-v", 4, 2, 8, [](ScheduleOptions& o) { o.replicas = {1, 2, 1, 1}; }),
                  "--replicas: zb-v runs one replica per stage");
  // One replica per stage, stated explicitly, is fine.
  ScheduleOptions options;
  options.num_stages = 4;
  options.virtual_stages = 2;
  options.micro_batches = 4;
  options.replicas = {1, 1, 1, 1};
  EXPECT_NO_THROW(generate_schedule("zb-v", options));
}

}  // namespace
}  // namespace pipegrid
