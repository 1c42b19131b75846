// PyTorch pipelining schedule CSVs (core/torch_schedule.hpp): PyTorch's own
// regression files (tests/data/torch-pipelining/, copied as they are), the
// round trip through program_to_torch_csv, and malformed inputs.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/program.hpp"
#include "core/torch_schedule.hpp"
#include "tests/expect_input_error.hpp"

namespace pipegrid {
namespace {

std::string data_file(const std::string& name) {
  const std::string path = std::string(PIPEGRID_SOURCE_DIR) + "/tests/data/torch-pipelining/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TorchCsvImport import_file(const std::string& name) { return parse_torch_csv(data_file(name), name); }

// The test's own printer (the PyTorch cell of one action).
std::string cell_of(const Action& action) {
  const char* kinds = "FBRIW";
  return std::to_string(action.stage) + kinds[static_cast<int>(action.kind)] + std::to_string(action.micro_batch);
}

std::vector<std::string> cells_of(const Stream& stream, std::size_t count) {
  std::vector<std::string> cells;
  for (std::size_t i = 0; i < count && i < stream.actions.size(); ++i) cells.push_back(cell_of(stream.actions[i]));
  return cells;
}

// The cells of a CSV text, row by row (split on ',' and "\n"; no quoting).
std::vector<std::vector<std::string>> split_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> row;
    std::size_t begin = 0;
    while (true) {
      const std::size_t end = line.find(',', begin);
      row.push_back(line.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
      if (end == std::string::npos) break;
      begin = end + 1;
    }
    rows.push_back(row);
  }
  return rows;
}

// PyTorch's `_merge_bw`: an I immediately followed by the W of the same
// stage and micro-batch becomes one whole backward (B).
Program merge_bw(Program program) {
  for (DeviceProgram& device : program.devices) {
    for (Stream& stream : device.streams) {
      EXPECT_TRUE(stream.overlapped.empty());
      std::vector<Action> merged;
      for (std::size_t i = 0; i < stream.actions.size(); ++i) {
        const Action& action = stream.actions[i];
        if (action.kind == ActionKind::BackwardInput && i + 1 < stream.actions.size()) {
          const Action& next = stream.actions[i + 1];
          if (next.kind == ActionKind::BackwardWeight && next.stage == action.stage && next.micro_batch == action.micro_batch) {
            Action whole = action;
            whole.kind = ActionKind::Backward;
            merged.push_back(whole);
            ++i;
            continue;
          }
        }
        merged.push_back(action);
      }
      stream.actions = std::move(merged);
    }
  }
  return program;
}

int count_kind(const Program& program, ActionKind kind) {
  int count = 0;
  for (const DeviceProgram& device : program.devices)
    for (const Stream& stream : device.streams)
      for (const Action& action : stream.actions) count += action.kind == kind;
  return count;
}

TEST(TorchCsv, Zb1pComputeFileOlderGrammar) {
  const TorchCsvImport imported = import_file("zb1p_2rank_2stagep_compute.csv");
  const Program& program = imported.program;
  EXPECT_EQ(program.num_stages, 4);
  EXPECT_EQ(program.micro_batches, 8);
  EXPECT_EQ(program.mini_batches, 1);
  ASSERT_EQ(program.devices.size(), 2u);
  EXPECT_EQ(program.devices[0].stages, (std::vector<int>{0, 2}));
  EXPECT_EQ(program.devices[1].stages, (std::vector<int>{1, 3}));
  for (const DeviceProgram& device : program.devices) {
    EXPECT_EQ(device.replica, 0);
    ASSERT_EQ(device.streams.size(), 1u);
    EXPECT_EQ(device.streams[0].actions.size(), 48u);  // 2 stages x 8 micro-batches x (F, I, W)
    EXPECT_TRUE(device.streams[0].overlapped.empty());
  }
  // Every B of the older grammar has a later W: all 32 backwards are split.
  EXPECT_EQ(count_kind(program, ActionKind::Forward), 32);
  EXPECT_EQ(count_kind(program, ActionKind::BackwardInput), 32);
  EXPECT_EQ(count_kind(program, ActionKind::BackwardWeight), 32);
  EXPECT_EQ(count_kind(program, ActionKind::Backward), 0);
  // Rank 1's `3B0,3F1,3B1,3W0`: the W is not adjacent to its B.
  EXPECT_EQ(cells_of(program.devices[1].streams[0], 10),
            (std::vector<std::string>{"1F0", "1F1", "3F0", "3I0", "3F1", "3I1", "3W0", "1F2", "1I0", "3W1"}));
  EXPECT_EQ(cells_of(program.devices[0].streams[0], 8),
            (std::vector<std::string>{"0F0", "0F1", "2F0", "2F1", "2I0", "2W0", "0F2", "2I1"}));
  EXPECT_EQ(cell_of(program.devices[1].streams[0].actions.back()), "1W7");
  EXPECT_EQ(imported.notes,
            (std::vector<std::string>{"2 empty cells (idle steps) dropped",
                                      "older grammar: B read as the input-gradient half (I) for 32 actions, each followed "
                                      "on its row by the W of its stage and micro-batch"}));
}

TEST(TorchCsv, Zb1pCommsFileIsTheComputeFileAfterMergeBw) {
  const TorchCsvImport comms = import_file("zb1p_2rank_2stagep_comms.csv");
  const TorchCsvImport compute = import_file("zb1p_2rank_2stagep_compute.csv");
  EXPECT_EQ(comms.program, merge_bw(compute.program));
  // Rank 0's I,W pairs are adjacent (written BW in the comms file), rank 1's are not.
  EXPECT_EQ(count_kind(comms.program, ActionKind::Backward), 16);
  EXPECT_EQ(count_kind(comms.program, ActionKind::BackwardInput), 16);
  EXPECT_EQ(comms.program.devices[0].stages, (std::vector<int>{0, 2}));
  EXPECT_EQ(comms.program.devices[1].stages, (std::vector<int>{1, 3}));
  EXPECT_EQ(comms.notes,
            (std::vector<std::string>{
                "older grammar: B read as the input-gradient half (I) for 16 actions, each followed on its row by the W of "
                "its stage and micro-batch",
                "older grammar: BW read as a whole backward (B) for 16 actions",
                "24 SEND_F, 24 RECV_F, 24 SEND_B, 24 RECV_B checked and dropped (the simulation's own transfers apply)"}));
}

TEST(TorchCsv, DualPipeVFile) {
  const std::string text = data_file("dualpipev_4rank_10mb.csv");
  const TorchCsvImport imported = parse_torch_csv(text, "dualpipev_4rank_10mb.csv");
  const Program& program = imported.program;
  EXPECT_EQ(program.num_stages, 8);
  EXPECT_EQ(program.micro_batches, 10);
  ASSERT_EQ(program.devices.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(program.devices[r].stages, (std::vector<int>{r, 7 - r})) << r;
  EXPECT_TRUE(imported.notes.empty());
  // Row 0: `...,7F3,(0F7;7B3)OVERLAP_F_B,(7F4;0B0)OVERLAP_F_B,...`.
  const Stream& row0 = program.devices[0].streams[0];
  ASSERT_FALSE(row0.overlapped.empty());
  const std::size_t first = row0.overlapped[0];
  EXPECT_EQ(first, 17u);
  EXPECT_EQ(cell_of(row0.actions[first - 1]), "7F3");
  EXPECT_EQ(cell_of(row0.actions[first]), "0F7");
  EXPECT_EQ(cell_of(row0.actions[first + 1]), "7B3");
  EXPECT_EQ(row0.overlapped[1], first + 2);
  EXPECT_EQ(cell_of(row0.actions[first + 2]), "7F4");
  EXPECT_EQ(cell_of(row0.actions[first + 3]), "0B0");
  std::size_t pairs = 0;
  for (const DeviceProgram& device : program.devices) pairs += device.streams[0].overlapped.size();
  EXPECT_EQ(pairs, 9u + 10u + 11u + 11u);

  // The file has no empty cell; the export writes the same cells in order
  // (and, with its "\n" line ends, the same bytes).
  const std::string written = program_to_torch_csv(program);
  const auto file_cells = split_csv(text);
  for (const auto& row : file_cells)
    for (const std::string& cell : row) EXPECT_FALSE(cell.empty());
  EXPECT_EQ(split_csv(written), file_cells);
  EXPECT_EQ(written, text);
  EXPECT_EQ(parse_torch_csv(written, "written.csv").program, program);
}

TEST(TorchCsv, PyTorchFilesPassTheProgramValidator) {
  for (const char* name : {"zb1p_2rank_2stagep_compute.csv", "zb1p_2rank_2stagep_comms.csv", "dualpipev_4rank_10mb.csv"}) {
    const Program program = import_file(name).program;
    EXPECT_NO_THROW(validate_program(program)) << name;
    EXPECT_EQ(parse_program_text(program_to_text(program), "text"), program) << name;
  }
}

TEST(TorchCsv, CrLfLineEndsReadTheSame) {
  const std::string text = data_file("zb1p_2rank_2stagep_compute.csv");
  std::string crlf;
  for (const char c : text) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  EXPECT_EQ(parse_torch_csv(crlf, "crlf.csv").program, parse_torch_csv(text, "lf.csv").program);
  // Without a final line end, with spaces around cells.
  EXPECT_EQ(parse_torch_csv("0F0, 0B0\n 1F0 ,1B0", "x.csv").program, parse_torch_csv("0F0,0B0\n1F0,1B0\n", "y.csv").program);
}

// PyTorch's test_send_recv examples (SCHEDULES-BEYOND.md 11.3, 11.5).
TEST(TorchCsv, PyTorchSendRecvExamples) {
  // simple_2_rank_2_stage: the compute schedule and its lowering with comms
  // read as the same Program.
  const TorchCsvImport compute = parse_torch_csv("0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1,\n", "compute.csv");
  const TorchCsvImport comms = parse_torch_csv(
      "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
      "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n",
      "comms.csv");
  EXPECT_EQ(comms.program, compute.program);
  EXPECT_EQ(program_to_torch_csv(compute.program), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  EXPECT_EQ(compute.notes, (std::vector<std::string>{"4 empty cells (idle steps) dropped"}));
  // v_2_rank_4_stage (stage -> rank 0, 1, 1, 0; older grammar: B then W is I).
  const TorchCsvImport v = parse_torch_csv(
      "0F0,0F1,,3F0,3B0,3F1,3B1,0B0,3W0,0B1,3W1,0W0,0W1\n"
      ",1F0,2F0,1F1,2F1,2B0,1B0,2B1,1B1,2W0,2W1,1W0,1W1\n",
      "v.csv");
  EXPECT_EQ(v.program.devices[0].stages, (std::vector<int>{0, 3}));
  EXPECT_EQ(v.program.devices[1].stages, (std::vector<int>{1, 2}));
  EXPECT_EQ(program_to_torch_csv(v.program),
            "0F0,0F1,3F0,3I0,3F1,3I1,0I0,3W0,0I1,3W1,0W0,0W1\n"
            "1F0,2F0,1F1,2F1,2I0,1I0,2I1,1I1,2W0,2W1,1W0,1W1\n");
}

Action act(ActionKind kind, int stage, int micro_batch) {
  Action action;
  action.kind = kind;
  action.stage = stage;
  action.micro_batch = micro_batch;
  return action;
}

// p = 2 ranks, V map (rank r holds r and 3 - r), m = 2, with a split
// backward, a whole one and an overlapped F&B pair.
Program v_program() {
  using K = ActionKind;
  Program program;
  program.num_stages = 4;
  program.micro_batches = 2;
  DeviceProgram r0;
  r0.stages = {0, 3};
  r0.streams.push_back(Stream{{act(K::Forward, 0, 0), act(K::Forward, 0, 1), act(K::Forward, 3, 0), act(K::BackwardInput, 3, 0),
                               act(K::Forward, 3, 1), act(K::Backward, 0, 0), act(K::BackwardWeight, 3, 0),
                               act(K::Backward, 3, 1), act(K::Backward, 0, 1)},
                              {4}});
  DeviceProgram r1;
  r1.stages = {1, 2};
  r1.streams.push_back(Stream{{act(K::Forward, 1, 0), act(K::Forward, 2, 0), act(K::Forward, 1, 1), act(K::Forward, 2, 1),
                               act(K::Backward, 2, 0), act(K::BackwardInput, 1, 0), act(K::BackwardWeight, 1, 0),
                               act(K::Backward, 2, 1), act(K::Backward, 1, 1)},
                              {}});
  program.devices = {r0, r1};
  return program;
}

TEST(TorchCsv, ExportWritesCurrentGrammarAndReadsBack) {
  const Program program = v_program();
  EXPECT_NO_THROW(validate_program(program));
  const std::string written = program_to_torch_csv(program);
  EXPECT_EQ(written,
            "0F0,0F1,3F0,3I0,(3F1;0B0)OVERLAP_F_B,3W0,3B1,0B1\n"
            "1F0,2F0,1F1,2F1,2B0,1I0,1W0,2B1,1B1\n");
  const TorchCsvImport back = parse_torch_csv(written, "written.csv");
  EXPECT_EQ(back.program, program);
  EXPECT_TRUE(back.notes.empty());

  // A loop map over 3 ranks, one stage each, 1F1B-like.
  Program loop;
  loop.num_stages = 3;
  loop.micro_batches = 1;
  for (int s = 0; s < 3; ++s) {
    DeviceProgram device;
    device.stages = {s};
    device.streams.push_back(Stream{{act(ActionKind::Forward, s, 0), act(ActionKind::Backward, s, 0)}, {}});
    loop.devices.push_back(device);
  }
  EXPECT_EQ(program_to_torch_csv(loop), "0F0,0B0\n1F0,1B0\n2F0,2B0\n");
  EXPECT_EQ(parse_torch_csv(program_to_torch_csv(loop), "loop.csv").program, loop);
}

TEST(TorchCsv, ExportRejectsWhatTheFormatCannotHold) {
  using testutil::input_error_of;
  auto error_of = [](const Program& program) { return input_error_of([&] { program_to_torch_csv(program); }); };
  {
    Program program = v_program();
    program.mini_batches = 2;
    EXPECT_CONTAINS(error_of(program), "2 mini-batches");
  }
  {
    Program program = v_program();
    program.devices[0].streams[0].actions[0].kind = ActionKind::Recompute;
    EXPECT_CONTAINS(error_of(program), "0R0, a recompute (R)");
  }
  {
    Program program = v_program();
    program.devices[1].streams.push_back(Stream{});
    EXPECT_CONTAINS(error_of(program), "device 1 has 2 streams");
  }
  {
    Program program = v_program();
    program.extra_dependencies.push_back(Dependency{act(ActionKind::Forward, 0, 0), act(ActionKind::Forward, 0, 1)});
    EXPECT_CONTAINS(error_of(program), "1 extra dependencies");
  }
  {
    Program program = v_program();
    program.all_reduces.push_back(AllReduce{});
    EXPECT_CONTAINS(error_of(program), "all-reduces");
  }
  {
    Program program = v_program();
    program.devices[1].replica = 1;
    EXPECT_CONTAINS(error_of(program), "device 1 holds replica 1");
  }
  {
    Program program = v_program();
    program.devices.push_back(program.devices[1]);
    EXPECT_CONTAINS(error_of(program), "stage 1 is held by devices 1 and 2");
  }
  {
    Program program = v_program();
    program.devices[0].streams[0].overlapped = {0};  // 0F0 with 0F1
    EXPECT_CONTAINS(error_of(program), "overlaps 0F0 and 0F1, expected one F and one B or I");
  }
  {
    Program program = v_program();
    program.devices[0].streams[0].actions[2].stage = 1;
    EXPECT_CONTAINS(error_of(program), "device 0 runs 1F0, of a stage it does not hold");
  }
}

// The message of the InputError that reading `text` raises.
std::string import_error(const std::string& text) {
  return testutil::input_error_of([&] { parse_torch_csv(text, "bad.csv"); });
}

// A valid compute+comms file: 2 ranks, stage s on rank s, one micro-batch.
const std::string kComms =
    "0F0,0SEND_F0,0RECV_B0,0B0\n"
    "1RECV_F0,1F0,1B0,1SEND_B0\n";

TEST(TorchCsv, SmallCommsFileReads) {
  const TorchCsvImport imported = parse_torch_csv(kComms, "ok.csv");
  EXPECT_EQ(imported.program.devices[0].streams[0].actions.size(), 2u);
  EXPECT_EQ(imported.notes, (std::vector<std::string>{
                                "1 SEND_F, 1 RECV_F, 1 SEND_B, 1 RECV_B checked and dropped (the simulation's own transfers apply)"}));
  const TorchCsvImport lowered =
      parse_torch_csv("0UNSHARD,0F0,0SEND_F0,0RECV_B0,0B0,0REDUCE_GRAD,0RESHARD\n1RECV_F0,1F0,1B0,1SEND_B0\n", "ok.csv");
  EXPECT_EQ(lowered.program, imported.program);
  EXPECT_EQ(lowered.notes.size(), 3u);
  EXPECT_EQ(lowered.notes[1], "2 UNSHARD/RESHARD ignored");
  EXPECT_EQ(lowered.notes[2], "1 REDUCE_GRAD dropped (the Program has no replicas)");
}

TEST(TorchCsv, MalformedInputsNameRowAndColumn) {
  struct Case {
    std::string text;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"0F0,0X0,0B0\n", {"bad.csv: row 1 (rank 0), column 2 (step 2)", "expected an action type", "'0X0'"}},
      {"0F0,0B0x\n", {"row 1 (rank 0), column 2", "expected the action to end after '0B0' (PyTorch's reader would ignore the rest), found '0B0x'"}},
      {"0F0,0BW0junk\n", {"column 2", "expected the action to end after '0BW0'", "found '0BW0junk'"}},
      {"0F,0B0\n", {"column 1", "expected a micro-batch number after '0F'"}},
      {"F0\n", {"column 1", "expected an action such as 2F0"}},
      {"0f0\n", {"column 1", "expected an action type"}},
      {"\"0F0\"\n", {"column 1", "'\"0F0\"'"}},
      {"0F0,0B0\n1F0,1B0,0F1\n", {"row 2 (rank 1), column 3", "stage 0 on rank 1", "on rank 0 (row 1, column 1)"}},
      {"0B0,0F0\n", {"column 1", "expected 0F0 earlier on this row", "found '0B0' first"}},
      {"0F0,0F1,0B1\n", {"row 1 (rank 0), column 1", "expected a backward of 0F0"}},
      {"0F1,0B1\n", {"row 1 (rank 0):", "found no 0F0"}},
      {"0F0,0F0,0B0\n", {"column 2", "found a second '0F0' (the first at column 1)"}},
      {"0F0,0I0\n", {"column 2", "expected 0W0 later on this row"}},
      {"0F0,0W0,0I0\n", {"column 2", "expected 0I0 earlier on this row (a W follows its I)"}},
      {"0F0,0B0,0W0\n1F0,1I0,1W0\n", {"row 1 (rank 0), column 3", "0B0 at column 2 is a whole backward"}},
      {"0F0,0B0\n2F0,2B0\n", {"bad.csv: expected every stage 0..2", "found no action of stage 1"}},
      {"0F0,0B0\n\n1F0,1B0\n", {"row 2 (rank 1): expected at least one compute action"}},
      {"", {"bad.csv: expected one row of actions per rank, found no row"}},
      {"0F0,(0F1;0B0;0B1)OVERLAP_F_B,0B1\n", {"column 2", "expected two actions in an overlapped op", "found more than 2"}},
      {"0F0,0F1,(0B0;0W1)OVERLAP_F_B\n", {"column 3", "expected one F and one B or I in an overlapped op"}},
      {"0F0,(0F1;0B0)OVERLAP_X,0B1\n", {"column 2", "expected OVERLAP_F_B (or nothing) after ')', found 'OVERLAP_X'"}},
      {"0F0,(0F1;0B0,0B1\n", {"column 2", "expected ')' closing the overlapped op"}},
      {"0F0,(0F0;0B0)\n", {"column 2", "different stages or micro-batches"}},
      {"0F0,0I0,0W0,0BW1,0F1\n", {"column 4", "expected B for a whole backward: BW is the older grammar's"}},
      {"0F0,0SEND_F_RECV_B0,0B0\n", {"column 2", "legacy fused SEND_F_RECV_B"}},
      {"0F0,0UNSHARD1,0B0\n", {"column 2", "expected no micro-batch after UNSHARD"}},
      {"99999F0\n", {"column 1", "expected a stage id below 1024"}},
      {"0F99999999999\n", {"column 1", "expected a micro-batch below 250000"}},
      {"0F0,1F0,0SEND_F0,1B0,0B0\n", {"column 3", "expected no communication between stages 0 and 1: both live on rank 0"}},
      {"0F0,0F1,0SEND_F0,0B0,0B1\n", {"column 3", "the last stage sends no activation"}},
      {"0F0,0B0\n1F0,1B0,0SEND_F0\n", {"row 2 (rank 1), column 3", "stage 0 lives on rank 0"}},
      // A SEND without its RECV: reported at the consumer, naming the SEND.
      {"0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n",
       {"row 2 (rank 1), column 1", "expected 1RECV_F0 before 1F0", "(the 0SEND_F0 at row 1, column 2 has no matching receive)"}},
      // A RECV placed after the action that needs it.
      {"0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n",
       {"row 2 (rank 1), column 2", "expected '1RECV_F0' before 1F0 (column 1)", "found it after"}},
      // A SEND placed before the action that produces it.
      {"0SEND_F0,0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
       {"row 1 (rank 0), column 1", "expected '0SEND_F0' after 0F0 (column 2)", "found it before"}},
      {"0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0\n", {"row 2 (rank 1), column 3", "expected 1SEND_B0 after 1B0", "(the 0RECV_B0 at row 1, column 3 has no matching send)"}},
      {"0F0,0SEND_F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", {"column 3", "found a second"}},
      {"0F0,0SEND_F1,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", {"column 2", "expected a micro-batch 0..0"}},
      {"0F0,0SEND_B0,0B0\n", {"column 2", "the first stage sends no gradient"}},
  };
  for (const Case& c : cases) {
    const std::string message = import_error(c.text);
    for (const std::string& part : c.parts) EXPECT_CONTAINS(message, part) << "input: " << c.text;
  }
}

}  // namespace
}  // namespace pipegrid
