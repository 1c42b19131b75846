// trace import's rules (interchange/kineto_import.hpp, docs/kineto.md).
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "interchange/kineto_import.hpp"

namespace pipegrid::kineto {
namespace {

/// One rank's trace of GPipe ranges: `extra` events appended (JSON text).
std::string rank_trace(int rank, const std::string& events) {
  return R"({"distributedInfo": {"rank": )" + std::to_string(rank) + R"(, "world_size": 2}, "traceEvents": [)" + events + "]}";
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

}  // namespace
}  // namespace pipegrid::kineto
