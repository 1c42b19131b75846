// trace import's rules (interchange/kineto_import.hpp, docs/kineto.md).
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "core/program.hpp"
#include "interchange/kineto_import.hpp"

namespace pipegrid::kineto {
namespace {

/// One rank's trace of `world_size` ranks holding `events` (JSON text).
std::string rank_trace(int rank, const std::string& events, int world_size = 2) {
  return R"({"distributedInfo": {"rank": )" + std::to_string(rank) + R"(, "world_size": )" + std::to_string(world_size) +
         R"(}, "traceEvents": [)" + events + "]}";
}

std::string x(const std::string& name, double ts, double dur, int tid, const std::string& cat = "user_annotation",
              const std::string& args = "") {
  return R"({"ph": "X", "cat": ")" + cat + R"(", "name": ")" + name + R"(", "pid": 1, "tid": )" + std::to_string(tid) +
         R"(, "ts": )" + std::to_string(ts) + R"(, "dur": )" + std::to_string(dur) + (args.empty() ? "" : R"(, "args": )" + args) +
         "}";
}

std::string launch(double ts, int tid, int correlation, double kernel_ts, double kernel_dur) {
  const std::string args = R"({"correlation": )" + std::to_string(correlation) + "}";
  return x("cudaLaunchKernel", ts, 2, tid, "cuda_runtime", args) + "," + x("gemm", kernel_ts, kernel_dur, 7, "kernel", args);
}

std::string message(const InputError& error) { return error.what(); }

TEST(KinetoImport, BackwardKernelsOfTheAutogradThreadBelongToTheRangeAroundTheirLaunchByTime) {
  // Rank 0: Forward 0 on thread 1 launches one kernel; Backward 0 on thread 1,
  // whose kernels the autograd thread (2) launches while the range is open.
  const std::string r0 = rank_trace(0, x("Forward 0", 0, 100, 1) + "," + launch(10, 1, 1, 20, 50) + "," + x("Backward 0", 200, 100, 1) +
                                           "," + launch(250, 2, 2, 260, 30) + "," + launch(270, 2, 3, 300, 40));
  const std::string r1 = rank_trace(1, x("Forward 0", 0, 100, 1) + "," + launch(10, 1, 4, 90, 10) + "," + x("Backward 0", 150, 40, 1) +
                                           "," + launch(160, 1, 5, 150, 20));
  const ImportResult result = import_traces({parse_kineto_trace(r0, "r0.json"), parse_kineto_trace(r1, "r1.json")}, {});
  ASSERT_EQ(result.profile.layers.size(), 2u);
  EXPECT_NEAR(result.profile.layers[0].forward_s, 50e-6, 1e-12);
  EXPECT_NEAR(result.profile.layers[0].backward_s, 80e-6, 1e-12);  // 260..340 on the GPU
  EXPECT_NEAR(result.profile.layers[1].forward_s, 10e-6, 1e-12);
  EXPECT_TRUE(result.gpu);
  EXPECT_EQ(result.timeline.hosts, (std::vector<std::string>{"gpu0", "gpu1"}));
}

TEST(KinetoImport, UserMappingCapturesKindStageAndMicroBatch) {
  const RangeMapping mapping = parse_mapping_json(
      R"j({"rules": [{"pattern": "fwd-s(\\d+)-mb(\\d+)", "kind": "F", "stage": "$1", "micro_batch": "$2"},
                    {"pattern": "bwd-s(\\d+)-mb(\\d+)", "kind": "B", "stage": "$1", "micro_batch": "$2"}]})j",
      "map.json");
  ImportOptions options;
  options.mapping = mapping;
  const std::string r0 = rank_trace(0, x("fwd-s0-mb0", 0, 10, 1, "cpu_op") + "," + x("bwd-s0-mb0", 50, 30, 1, "cpu_op"));
  const std::string r1 = rank_trace(1, x("fwd-s1-mb0", 12, 20, 1, "cpu_op") + "," + x("bwd-s1-mb0", 35, 10, 1, "cpu_op"));
  const ImportResult result = import_traces({parse_kineto_trace(r0, "a"), parse_kineto_trace(r1, "b")}, options);
  EXPECT_FALSE(result.gpu);
  EXPECT_EQ(result.stages, 2);
  EXPECT_NEAR(result.profile.layers[1].forward_s, 20e-6, 1e-12);
  EXPECT_NEAR(result.profile.layers[0].backward_s, 30e-6, 1e-12);
  // The default mapping knows none of these names: anonymous blocks, the whole range one forward.
  EXPECT_THROW(import_traces({parse_kineto_trace(r0, "a"), parse_kineto_trace(r1, "b")}, {}), InputError);
}

TEST(KinetoImport, BadMappingNamesTheRuleAndField) {
  try {
    parse_mapping_json(R"j({"rules": [{"pattern": "(", "kind": "F", "micro_batch": "$1"}]})j", "map.json");
    FAIL();
  } catch (const InputError& error) {
    EXPECT_NE(message(error).find("map.json: rules[0]: pattern"), std::string::npos) << message(error);
  }
  try {
    parse_mapping_json(R"({"rules": [{"pattern": "x", "kind": "F"}]})", "map.json");
    FAIL();
  } catch (const InputError& error) {
    EXPECT_NE(message(error).find("map.json: rules[0]: expected the field \"micro_batch\""), std::string::npos) << message(error);
  }
}

TEST(KinetoImport, BadTracesNameTheFileAndEvent) {
  try {
    parse_kineto_trace(R"({"traceEvents": [{"ph": "M"}, {"ph": "X", "name": "Forward 0", "ts": 1}]})", "r0.json");
    FAIL();
  } catch (const InputError& error) {
    EXPECT_NE(message(error).find("r0.json: traceEvents[1] ('Forward 0'): a complete (\"X\") event without \"dur\""), std::string::npos)
        << message(error);
  }
  EXPECT_THROW(parse_kineto_trace(R"({"events": []})", "r0.json"), InputError);
  // Two files, both rank 0: rank 1 is given twice or missing.
  const std::string r0 = rank_trace(0, x("Forward 0", 0, 10, 1) + "," + x("Backward 0", 20, 10, 1));
  try {
    import_traces({parse_kineto_trace(r0, "a.json"), parse_kineto_trace(r0, "b.json")}, {});
    FAIL();
  } catch (const InputError& error) {
    EXPECT_NE(message(error).find("b.json: rank 0 again (a.json is rank 0 too)"), std::string::npos) << message(error);
  }
}

TEST(KinetoImport, UnmatchedSendNamesTheEvent) {
  const std::string send = R"({"Collective name": "send", "dtype": "Float", "In msg nelems": 4, "Dst Rank": 1, "Process Group Ranks": "[0, 1]"})";
  const std::string r0 = rank_trace(0, x("Forward 0", 0, 10, 1) + "," + x("record_param_comms", 5, 1, 1, "cpu_op", send) + "," +
                                           x("Backward 0", 20, 10, 1));
  const std::string r1 = rank_trace(1, x("Forward 0", 0, 10, 1) + "," + x("Backward 0", 12, 5, 1));
  try {
    import_traces({parse_kineto_trace(r0, "r0.json"), parse_kineto_trace(r1, "r1.json")}, {});
    FAIL();
  } catch (const InputError& error) {
    EXPECT_NE(message(error).find("r0.json: traceEvents[1] ('record_param_comms'): send to rank 1 has no matching recv in r1.json"),
              std::string::npos)
        << message(error);
  }
}


TEST(KinetoImport, ProgramHoldsEachRanksStagesAndActionsInTheOrderTheyRan) {
  // A V on two ranks (rank 0: stages 0 and 3, rank 1: stages 1 and 2), one
  // micro-batch, stage 3 and stage 1 with split backwards; the ranges are
  // written out of order: the Program follows their start times.
  const std::string r0 = rank_trace(0, x("PP:3F0", 40, 5, 1) + "," + x("PP:0F0", 0, 5, 1) + "," + x("PP:3I0", 50, 5, 1) + "," +
                                           x("PP:3W0", 60, 5, 1) + "," + x("PP:0B0", 120, 5, 1));
  const std::string r1 = rank_trace(1, x("PP:1F0", 10, 5, 1) + "," + x("PP:2F0", 20, 5, 1) + "," + x("PP:2B0", 70, 5, 1) + "," +
                                           x("PP:1W0", 100, 5, 1) + "," + x("PP:1I0", 90, 5, 1));
  const ImportResult result = import_traces({parse_kineto_trace(r0, "r0.json"), parse_kineto_trace(r1, "r1.json")}, {});
  EXPECT_EQ(result.stages, 4);
  ASSERT_EQ(result.profile.layers.size(), 4u);  // one per stage, not per rank
  EXPECT_TRUE(result.profile.layers[3].backward_input_s.has_value());
  EXPECT_FALSE(result.profile.layers[0].backward_input_s.has_value());
  EXPECT_EQ(program_to_text(result.program),
            "# pipegrid program: 4 stages, 1 micro-batches, 1 mini-batches\n"
            "device 0 stages 0,3 replica 0 stream 0: 0F0 3F0 3I0 3W0 0B0\n"
            "device 1 stages 1,2 replica 0 stream 0: 1F0 2F0 2B0 1I0 1W0\n");
  EXPECT_NO_THROW(validate_program(result.program));
}

TEST(KinetoImport, OverlappedPairRangeSplitsByTheThreadThatLaunchedEachKernel) {
  // Rank 0: 0F0, then DualPipeV's overlapped (0F1;0B0) range on thread 1: the
  // main thread launches the forward's kernel (120..130), the autograd thread
  // (2) the backward's (155..175), then the main thread the backward's tail
  // (180..190); then 0B1. Rank 1: 1F0 1B0 1F1 1B1.
  const std::string r0 = rank_trace(
      0, x("PP:0F0", 0, 50, 1) + "," + launch(10, 1, 1, 20, 10) + "," + x("PP:(0F1;0B0)OVERLAP_F_B", 100, 100, 1) + "," +
             launch(110, 1, 2, 120, 10) + "," + launch(150, 2, 3, 155, 20) + "," + launch(180, 1, 4, 180, 10) + "," +
             x("PP:0B1", 300, 50, 1) + "," + launch(310, 2, 5, 310, 35));
  const std::string r1 = rank_trace(1, x("PP:1F0", 40, 20, 1) + "," + launch(41, 1, 6, 42, 5) + "," + x("PP:1B0", 60, 20, 1) + "," +
                                           launch(61, 1, 7, 62, 5) + "," + x("PP:1F1", 210, 20, 1) + "," + launch(211, 1, 8, 212, 5) +
                                           "," + x("PP:1B1", 240, 20, 1) + "," + launch(241, 1, 9, 242, 5));
  const ImportResult result = import_traces({parse_kineto_trace(r0, "r0.json"), parse_kineto_trace(r1, "r1.json")}, {});
  auto record = [&](const std::string& action, int micro_batch) -> const TimelineRecord& {
    for (const TimelineRecord& r : result.timeline.records)
      if (r.stage == 0 && r.action == action && r.micro_batch == micro_batch) return r;
    throw std::runtime_error("no record " + action);
  };
  EXPECT_NEAR(record("F", 1).end_s - record("F", 1).start_s, 10e-6, 1e-12);  // 120..130
  EXPECT_NEAR(record("B", 0).end_s - record("B", 0).start_s, 35e-6, 1e-12);  // 155..190
  EXPECT_NEAR(record("B", 0).start_s - record("F", 1).end_s, 25e-6, 1e-12);
  ASSERT_EQ(result.program.devices.size(), 2u);
  const Stream& stream = result.program.devices[0].streams.at(0);
  EXPECT_EQ(stream.overlapped, (std::vector<std::size_t>{1}));
  EXPECT_EQ(program_to_text(result.program),
            "# pipegrid program: 2 stages, 2 micro-batches, 1 mini-batches\n"
            "device 0 stage 0 replica 0 stream 0: 0F0 (0F1;0B0) 0B1\n"
            "device 1 stage 1 replica 0 stream 0: 1F0 1B0 1F1 1B1\n");
  EXPECT_NO_THROW(validate_program(result.program));
  EXPECT_NEAR(result.profile.layers[0].forward_s, 10e-6, 1e-12);   // 0F0 and 0F1: 10 us each
  EXPECT_NEAR(result.profile.layers[0].backward_s, 35e-6, 1e-12);  // 0B0 and 0B1: 35 us each
}

TEST(KinetoImport, OverlappedPairWithoutAnotherThreadsKernelsIsLeftOutOfTheMedians) {
  // CPU ranges only: the pair's two actions cannot be told apart.
  const std::string r0 = rank_trace(0, x("PP:0F0", 0, 10, 1) + "," + x("PP:(0F1;0B0)OVERLAP_F_B", 100, 1000, 1) + "," +
                                           x("PP:0B1", 1200, 30, 1));
  const std::string r1 = rank_trace(1, x("PP:1F0", 20, 5, 1) + "," + x("PP:1B0", 30, 5, 1) + "," + x("PP:1F1", 1110, 5, 1) + "," +
                                           x("PP:1B1", 1120, 5, 1));
  const ImportResult result = import_traces({parse_kineto_trace(r0, "r0.json"), parse_kineto_trace(r1, "r1.json")}, {});
  EXPECT_NEAR(result.profile.layers[0].forward_s, 10e-6, 1e-12);
  EXPECT_NEAR(result.profile.layers[0].backward_s, 30e-6, 1e-12);
  bool noted = false;
  for (const std::string& note : result.notes) noted = noted || note.find("1 overlapped pairs launched no kernel") != std::string::npos;
  EXPECT_TRUE(noted);
  EXPECT_EQ(result.program.devices[0].streams.at(0).overlapped, (std::vector<std::size_t>{1}));
}

TEST(KinetoImport, OverlappedPairRulesNeedOneForwardAndOneBackward) {
  try {
    parse_mapping_json(R"j({"rules": [{"pattern": "p(\\d)", "kind": "F", "micro_batch": "$1", "second_kind": "B"}]})j", "map.json");
    FAIL();
  } catch (const InputError& error) {
    EXPECT_NE(message(error).find("map.json: rules[0]: second_kind, second_stage and second_micro_batch: expected all three"),
              std::string::npos)
        << message(error);
  }
  ImportOptions options;
  options.mapping = parse_mapping_json(
      R"j({"rules": [{"pattern": "pair(\\d)", "kind": "F", "stage": "0", "micro_batch": "$1", "second_kind": "W",
                     "second_stage": "0", "second_micro_batch": "$1"}]})j",
      "map.json");
  const std::string r0 = rank_trace(0, x("pair0", 0, 10, 1), 1);
  try {
    import_traces({parse_kineto_trace(r0, "r0.json")}, options);
    FAIL();
  } catch (const InputError& error) {
    EXPECT_NE(message(error).find("kind and second_kind: expected an overlapped pair of one F and one B or I, found 'F' and 'W'"),
              std::string::npos)
        << message(error);
  }
}

}  // namespace
}  // namespace pipegrid::kineto
