// Robustness of the in-process readers and the counts (issue 12): integers
// out of range, non-finite and huge numbers, JSON errors without library
// jargon, unknown keys, the limits of docs/formats.md ("Limits"), the batch
// size of PipeDream graphs, and the inputs the fuzz targets (tests/fuzz/)
// found.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/limits.hpp"
#include "core/model_graph.hpp"
#include "core/partition.hpp"
#include "core/plan.hpp"
#include "core/profile.hpp"
#include "core/program.hpp"
#include "core/timeline.hpp"
#include "expect_input_error.hpp"
#include "partitioners/antichain.hpp"
#include "partitioners/pipedream.hpp"
#include "render/timeline_csv.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

const std::string kSourceDir = PIPEGRID_SOURCE_DIR;

Profile chain(int layers) {
  Profile profile;
  profile.name = "chain";
  profile.micro_batch_size = 4;
  for (int l = 0; l < layers; ++l) {
    Layer layer;
    layer.name = "l" + std::to_string(l);
    layer.forward_s = 1;
    layer.backward_s = 2;
    layer.output_bytes = l + 1 == layers ? 0 : 10;
    layer.parameter_bytes = 5;
    profile.layers.push_back(layer);
  }
  return profile;
}

/// A file of this test process, removed at the end of the test.
class TemporaryFile {
 public:
  TemporaryFile(const std::string& name, const std::string& content)
      : path_(std::filesystem::temp_directory_path() / ("pipegrid-test-limits-" + std::to_string(::getpid()) + "-" + name)) {
    std::ofstream(path_, std::ios::binary) << content;
  }
  ~TemporaryFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// ------------------------------------------------------------------ JSON

TEST(JsonInput, MalformedTextNamesLineAndColumnWithoutLibraryCodes) {
  const std::string message = input_error_of([] { parse_json_input("{\n  \"a\": tru\n}", "f.json"); });
  EXPECT_CONTAINS(message, "f.json: malformed JSON: parse error at line 3, column 0: syntax error while parsing value");
  EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
}

TEST(JsonInput, NumberBeyondADoubleNamesTheField) {
  const std::string message =
      input_error_of([] { parse_json_input("{\"stages\": [{\"layers\": [0, 1e999]}]}", "p.json"); });
  EXPECT_CONTAINS(message, "p.json: stages[0].layers[1]: expected a finite number, found 1e999 (beyond the range of a "
                           "double) at line 1");
  EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
  EXPECT_CONTAINS(input_error_of([] { parse_json_input("-1e999", "x.json"); }), "x.json: value: expected a finite number");
}

TEST(JsonInput, DeepNestingIsRefused) {
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_CONTAINS(input_error_of([&] { parse_json_input(deep, "d.json"); }), "d.json: expected JSON nested at most 64 levels");
  EXPECT_NO_THROW(parse_json_input(std::string(10, '[') + std::string(10, ']'), "ok.json"));
}

TEST(JsonInput, IntegersOutOfRangeAreNotWrapped) {
  EXPECT_FALSE(json_integer_in(nlohmann::json::parse("4294967297"), 0, std::numeric_limits<int>::max()));
  EXPECT_FALSE(json_integer_in(nlohmann::json::parse("18446744073709551615"), 0, std::numeric_limits<int>::max()));
  EXPECT_FALSE(json_integer_in(nlohmann::json::parse("-1"), 0, 10));
  EXPECT_FALSE(json_integer_in(nlohmann::json::parse("3.0"), 0, 10));
  EXPECT_EQ(json_integer_in(nlohmann::json::parse("7"), 0, 10), 7);
  EXPECT_FALSE(json_number_in(nlohmann::json::parse("1e308"), 0, 1e18));
  EXPECT_EQ(json_number_in(nlohmann::json::parse("1e18"), 0, 1e18), 1e18);
}

// --------------------------------------------------------------- profiles

std::string one_layer_profile(const std::string& field, const std::string& value) {
  std::string layer = R"({"name": "l0", "forward_s": 1, "backward_s": 1, "output_bytes": 0, "parameter_bytes": 0})";
  const auto at = layer.find("\"" + field + "\": ");
  const auto end = layer.find_first_of(",}", at);
  layer.replace(at, end - at, "\"" + field + "\": " + value);
  return R"({"name": "p", "micro_batch_size": 1, "layers": [)" + layer + "]}";
}

TEST(ProfileLimits, SizesAndTimesAreBounded) {
  EXPECT_CONTAINS(input_error_of([] { parse_profile_json(one_layer_profile("parameter_bytes", "1e308"), "p.json"); }),
                  "p.json: layers[0].parameter_bytes: expected at most 1e+18 bytes (docs/formats.md, Limits), found 1e+308");
  EXPECT_CONTAINS(input_error_of([] { parse_profile_json(one_layer_profile("forward_s", "2e9"), "p.json"); }),
                  "p.json: layers[0].forward_s: expected at most 1e+09 seconds (docs/formats.md, Limits), found 2000000000.0");
  EXPECT_CONTAINS(input_error_of([] { parse_profile_json(one_layer_profile("backward_s", "-1"), "p.json"); }),
                  "p.json: layers[0].backward_s: expected a non-negative number, found -1");
  EXPECT_CONTAINS(input_error_of([] { parse_profile_json(one_layer_profile("output_bytes", "1e999"), "p.json"); }),
                  "p.json: layers[0].output_bytes: expected a finite number, found 1e999");
  EXPECT_NO_THROW(parse_profile_json(one_layer_profile("parameter_bytes", "1e18"), "p.json"));
  // check_profile holds profiles from elsewhere to the same limits.
  Profile profile = chain(2);
  profile.layers[1].activation_bytes = 1e300;
  EXPECT_CONTAINS(input_error_of([&] { check_profile(profile, "built"); }),
                  "built: layers[1].activation_bytes: expected at most 1e+18 bytes");
  profile = chain(2);
  profile.layers[0].device_times["V100"] = {1e10, 1};
  EXPECT_CONTAINS(input_error_of([&] { check_profile(profile, "built"); }),
                  "built: layers[0].devices.V100.forward_s: expected at most 1e+09 seconds");
}

TEST(ProfileLimits, MicroBatchSizeBeyondAnIntIsAnError) {
  EXPECT_CONTAINS(input_error_of([] {
                    parse_profile_json(R"({"name": "p", "micro_batch_size": 4294967297, "layers": []})", "p.json");
                  }),
                  "p.json: micro_batch_size: expected an integer >= 1, found 4294967297");
}

TEST(ProfileLimits, ExtrapolationBeyondTheLimitsIsAnError) {
  const Profile profile = parse_profile_json(
      R"({"name": "p", "micro_batch_sizes": [1, 2], "layers": [{"name": "l0", "forward_s": [1, 2], "backward_s": [1, 2],
          "output_bytes": [1e17, 2e17], "parameter_bytes": 0}]})",
      "p.json");
  EXPECT_EQ(profile_at_micro_batch_size(profile, 10).layers[0].output_bytes, 1e18);
  EXPECT_CONTAINS(input_error_of([&] { profile_at_micro_batch_size(profile, 11); }),
                  "profile p at micro-batch size 11: layers[0].output_bytes: expected at most 1e+18 bytes");
}

// ------------------------------------------------------------- partitions

TEST(PartitionLimits, LayerIndicesBeyondAnIntAreErrorsNotWrapped) {
  const Profile profile = chain(4);
  EXPECT_CONTAINS(input_error_of([&] {
                    parse_partition_file(R"({"stages": [{"layers": [0, 4294967297], "hosts": ["a"]}, {"layers": [2, 3], "hosts": ["b"]}]})",
                                         "p.json", profile);
                  }),
                  "p.json: stages[0].layers[1]: expected a layer index in 0..2147483646, found 4294967297");
  EXPECT_CONTAINS(input_error_of([&] {
                    parse_partition_file(R"({"stages": [{"layers": [18446744073709551615, 3], "hosts": ["a"]}]})", "p.json",
                                         profile);
                  }),
                  "p.json: stages[0].layers[0]: expected a layer index in 0..2147483646, found 18446744073709551615");
  // Within an int but beyond the profile: refused before anything is allocated for it.
  EXPECT_CONTAINS(input_error_of([&] {
                    parse_partition_file(R"({"stages": [{"layers": [0, 2147483646], "hosts": ["a"]}]})", "p.json", profile);
                  }),
                  "p.json: stages[0].layers: expected a range within the profile's 4 layers (0..3), found [0, 2147483646]");
  EXPECT_CONTAINS(input_error_of([] { parse_partition_layer_order(R"({"layer_order": [0, 4294967296]})", "p.json"); }),
                  "p.json: layer_order[1]: expected a layer index in 0..2147483646, found 4294967296");
}

TEST(PartitionLimits, OverflowingNumbersAndUnknownKeys) {
  const Profile profile = chain(4);
  EXPECT_CONTAINS(input_error_of([&] {
                    parse_partition_file(R"({"stages": [{"layers": [0, 2], "split_last": -1e999, "hosts": ["a"]}]})", "p.json",
                                         profile);
                  }),
                  "p.json: stages[0].split_last: expected a finite number, found -1e999 (beyond the range of a double)");
  EXPECT_CONTAINS(input_error_of([&] {
                    parse_partition_file(R"({"stages": [{"layers": [0, 3], "hosts": ["a"]}], "layerorder": [0]})", "p.json",
                                         profile);
                  }),
                  "p.json: expected only the fields stages, layer_order, found 'layerorder'");
  EXPECT_CONTAINS(input_error_of([&] {
                    parse_partition_json(R"({"stages": [{"layers": [0, 3], "hosts": ["a"], "replicas": 2}]})", "p.json",
                                         profile);
                  }),
                  "p.json: stages[0]: expected only the fields layers, split_last, hosts, found 'replicas'");
}

// ------------------------------------------------------------------ plans

std::string plan_text(const std::string& extra_fields) {
  return R"({"pipegrid_plan": 1, "schedule": "gpipe", "micro_batches": 2, "mini_batches": 1, "recompute": false,
    "network": "analytic", "platform_file": "p.xml", "platform_xml": "<platform version=\"4.1\"/>",)" +
         extra_fields + R"(
    "partition": {"stages": [{"layers": [0, 0], "hosts": ["d0"]}]},
    "profile": {"name": "one", "micro_batch_size": 1, "layers": [{"name": "l0", "forward_s": 1, "backward_s": 1, "output_bytes": 0, "parameter_bytes": 0}]}})";
}

TEST(PlanLimits, CountsUnknownKeysAndNumbers) {
  EXPECT_NO_THROW(parse_plan_json(plan_text(""), "plan.json"));
  EXPECT_CONTAINS(input_error_of([] { parse_plan_json(plan_text(R"("pipeline_depth": 4294967296,)"), "plan.json"); }),
                  "plan.json: pipeline_depth: expected at most 1000000 (docs/formats.md, Limits), found 4294967296");
  // 2^64 - 1 read as a signed 64-bit integer would be -1.
  EXPECT_CONTAINS(input_error_of([] { parse_plan_json(plan_text(R"("update_interval": 18446744073709551615,)"), "plan.json"); }),
                  "plan.json: update_interval: expected at most 1000000");
  EXPECT_CONTAINS(input_error_of([] { parse_plan_json(plan_text(R"("prediction_cost_s_per_byte": 1e300,)"), "plan.json"); }),
                  "plan.json: prediction_cost_s_per_byte: expected a number in 0..1 (seconds per parameter byte), found 1e+300");
  EXPECT_CONTAINS(input_error_of([] { parse_plan_json(plan_text(R"("prediction_cost_s_per_byte": 1e999,)"), "plan.json"); }),
                  "plan.json: prediction_cost_s_per_byte: expected a finite number, found 1e999");
  EXPECT_CONTAINS(input_error_of([] { parse_plan_json(plan_text(R"("wait_free": false, "waitfree": true,)"), "plan.json"); }),
                  "found 'waitfree'");
  const std::string message = input_error_of([] { parse_plan_json("{\"pipegrid_plan\": 1,", "plan.json"); });
  EXPECT_CONTAINS(message, "plan.json: malformed JSON: parse error at line 1");
  EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
}

TEST(PlanLimits, PartitionerAndScalingFieldsRoundTripAndAreChecked) {
  Plan plan = parse_plan_json(plan_text(""), "plan.json");
  EXPECT_EQ(plan.partitioner, "");
  EXPECT_EQ(plan.micro_batch_scaling, "none");
  // Written only when set: a plan without them reads back the same text.
  EXPECT_EQ(plan_to_json(parse_plan_json(plan_to_json(plan), "again.json")), plan_to_json(plan));
  EXPECT_EQ(plan_to_json(plan).find("partitioner"), std::string::npos);
  EXPECT_EQ(plan_to_json(plan).find("micro_batch_scaling"), std::string::npos);
  plan.partitioner = "bapipe";
  plan.micro_batch_scaling = "linear";
  plan.micro_batch_scaling_note = "2 samples derived from the measured 1 by linear scaling";
  const Plan back = parse_plan_json(plan_to_json(plan), "again.json");
  EXPECT_EQ(back.partitioner, "bapipe");
  EXPECT_EQ(back.micro_batch_scaling, "linear");
  EXPECT_EQ(back.micro_batch_scaling_note, plan.micro_batch_scaling_note);
  EXPECT_EQ(plan_to_json(back), plan_to_json(plan));
  EXPECT_CONTAINS(input_error_of([] { parse_plan_json(plan_text(R"("micro_batch_scaling": "cubic",)"), "plan.json"); }),
                  "plan.json: micro_batch_scaling: expected a rule of --micro-batch-scaling, found \"cubic\"");
  EXPECT_CONTAINS(input_error_of([] { parse_plan_json(plan_text(R"("partitioner": 3,)"), "plan.json"); }),
                  "plan.json: partitioner: expected a partitioner name, found 3");
}

TEST(PlanLimits, TransferRuleRoundTripsAndIsChecked) {
  Plan plan = parse_plan_json(plan_text(""), "plan.json");
  EXPECT_EQ(plan.transfer_rule, "share");
  // The default is not written: plans saved before the option read the same.
  EXPECT_EQ(plan_to_json(plan).find("transfer_rule"), std::string::npos);
  plan.transfer_rule = "fifo";
  const Plan back = parse_plan_json(plan_to_json(plan), "again.json");
  EXPECT_EQ(back.transfer_rule, "fifo");
  EXPECT_EQ(plan_to_json(back), plan_to_json(plan));
  EXPECT_EQ(parse_plan_json(plan_text(R"("transfer_rule": "share",)"), "plan.json").transfer_rule, "share");
  EXPECT_CONTAINS(input_error_of([] { parse_plan_json(plan_text(R"("transfer_rule": "queue",)"), "plan.json"); }),
                  "plan.json: transfer_rule: expected share or fifo, found \"queue\"");
  EXPECT_CONTAINS(input_error_of([] { parse_plan_json(plan_text(R"("transfer_rule": 1,)"), "plan.json"); }),
                  "plan.json: transfer_rule: expected share or fifo, found 1");
}

TEST(PlanLimits, BlockingTransfersRoundTripsAndIsChecked) {
  Plan plan = parse_plan_json(plan_text(""), "plan.json");
  EXPECT_FALSE(plan.blocking_transfers);
  // The default is not written: plans saved before the option read the same.
  EXPECT_EQ(plan_to_json(plan).find("blocking_transfers"), std::string::npos);
  plan.blocking_transfers = true;
  const Plan back = parse_plan_json(plan_to_json(plan), "again.json");
  EXPECT_TRUE(back.blocking_transfers);
  EXPECT_EQ(plan_to_json(back), plan_to_json(plan));
  EXPECT_FALSE(parse_plan_json(plan_text(R"("blocking_transfers": false,)"), "plan.json").blocking_transfers);
  EXPECT_CONTAINS(input_error_of([] { parse_plan_json(plan_text(R"("blocking_transfers": "yes",)"), "plan.json"); }),
                  "plan.json: blocking_transfers: expected true or false, found \"yes\"");
}

// --------------------------------------------------------------- programs

TEST(ProgramLimits, HeaderCountsAreBounded) {
  // A header with huge counts made the validator loop over every (stage,
  // micro-batch, mini-batch) triple: 10^18 steps.
  EXPECT_CONTAINS(input_error_of([] {
                    parse_program_text("# pipegrid program: 1000000 stages, 1000000 micro-batches, 1000000 mini-batches\n",
                                       "p.txt");
                  }),
                  "p.txt:1: expected at most 1024 stages");
  EXPECT_CONTAINS(input_error_of([] {
                    parse_program_text("# pipegrid program: 4 stages, 1000 micro-batches, 1000 mini-batches\n", "p.txt");
                  }),
                  "250000 stages x micro-batches x mini-batches");
  // A count beyond an int is not a header (sscanf's %d was undefined there).
  EXPECT_CONTAINS(input_error_of([] {
                    parse_program_text("# pipegrid program: 4294967297 stages, 1 micro-batches, 1 mini-batches\n", "p.txt");
                  }),
                  "p.txt: missing header line");
  Program program;
  program.num_stages = 1000;
  program.micro_batches = 1000;
  program.mini_batches = 1000;
  EXPECT_THROW(validate_program(program), ProgramError);
}

TEST(ProgramLimits, NegativeAndHugeIndicesAreErrors) {
  const std::string header = "# pipegrid program: 1 stages, 1 micro-batches, 1 mini-batches\n";
  EXPECT_CONTAINS(input_error_of([&] { parse_program_text(header + "device -1 stage 0 replica 0 stream 0: 0F0 0B0\n", "p.txt"); }),
                  "p.txt:2: expected 'device D stage S replica R stream T : actions...'");
  EXPECT_CONTAINS(input_error_of([&] {
                    parse_program_text(header + "device 0 stage 0 replica 0 stream 0: 0F0 0B0\nallreduce stage 99999999999 "
                                                "round 0: ready 0B0\n",
                                       "p.txt");
                  }),
                  "p.txt:3: expected 'allreduce stage S round R");
  EXPECT_CONTAINS(input_error_of([&] { parse_program_text(header + "device 0 stage 0 replica 0 stream 0: 0F4294967296\n", "p.txt"); }),
                  "p.txt:2: action '0F4294967296'");
}

// -------------------------------------------------------------- timelines

TEST(TimelineLimits, NumbersMustBeFiniteAndIntegersFitAnInt) {
  const std::string head = "host,stream,stage,action,micro_batch,mini_batch,start_s,end_s,bytes,peer,memory_bytes\n";
  EXPECT_NO_THROW(parse_timeline_csv(head + "gpu0,0,0,F,-1,0,0,1,0,,0\n", "t.csv"));
  EXPECT_CONTAINS(input_error_of([&] { parse_timeline_csv(head + "gpu0,0,0,F,4294967296,0,0,1,0,,0\n", "t.csv"); }),
                  "t.csv:2: field 'micro_batch': expected an integer in -2147483648..2147483647, found '4294967296'");
  EXPECT_CONTAINS(input_error_of([&] { parse_timeline_csv(head + "gpu0,1e300,0,F,0,0,0,1,0,,0\n", "t.csv"); }),
                  "t.csv:2: field 'stream': expected an integer");
  EXPECT_CONTAINS(input_error_of([&] { parse_timeline_csv(head + "gpu0,0,0,F,0,0,0,inf,0,,0\n", "t.csv"); }),
                  "t.csv:2: field 'end_s': expected a number, found 'inf' (finite");
  EXPECT_CONTAINS(input_error_of([&] { parse_timeline_csv(head + "gpu0,0,0,F,0,0,nan,1,0,,0\n", "t.csv"); }),
                  "t.csv:2: field 'start_s': expected a number, found 'nan' (finite");
  EXPECT_CONTAINS(input_error_of([&] { parse_timeline_csv(head + "gpu0,0,0,F,0,0,0,1e400,0,,0\n", "t.csv"); }),
                  "t.csv:2: field 'end_s': expected a number, found '1e400' (finite");
  // Host ids are listed separated by spaces: one with a space would not read back.
  EXPECT_CONTAINS(input_error_of([&] { parse_timeline_csv(head + "gpu 0,0,0,F,0,0,0,1,0,,0\n", "t.csv"); }),
                  "t.csv:2: field 'host': expected a host id without spaces, found 'gpu 0'");
}

// -------------------------------------------------------------- graph.txt

std::string graph_node(const std::string& id, const std::string& description, const std::string& activation,
                       const std::string& forward_ms = "1.0") {
  return id + " -- " + description + " -- forward_compute_time=" + forward_ms +
         ", backward_compute_time=1.0, activation_size=" + activation + ", parameter_size=10.0\n";
}

TEST(GraphLimits, HugeValuesNameTheLine) {
  const TemporaryFile bytes("huge-bytes.txt", graph_node("node1", "Input0", "602112.0") + graph_node("node2", "Linear", "1e300") +
                                                  "\tnode1 -- node2\n");
  EXPECT_CONTAINS(input_error_of([&] { read_profile(bytes.path(), std::nullopt); }),
                  ":2: activation_size: expected at most 1e+18 bytes (docs/formats.md, Limits), found '1e300'");
  const TemporaryFile time("huge-time.txt", graph_node("node1", "Input0", "602112.0") +
                                                graph_node("node2", "Linear", "8.0", "1e13") + "\tnode1 -- node2\n");
  EXPECT_CONTAINS(input_error_of([&] { read_profile(time.path(), std::nullopt); }),
                  ":2: forward_compute_time: expected at most 1e+12 ms (docs/formats.md, Limits), found '1e13'");
  // Summed cut bytes beyond the limit: check_profile names the layer.
  std::string wide = graph_node("node0", "Input0", "602112.0");
  for (int n = 1; n <= 3; ++n) wide += graph_node("node" + std::to_string(n), "Linear", "9e17");
  wide += graph_node("node4", "Add", "8.0");
  for (int n = 1; n <= 3; ++n) wide += "\tnode0 -- node" + std::to_string(n) + "\n\tnode" + std::to_string(n) + " -- node4\n";
  const TemporaryFile cut("wide-cut.txt", wide);
  EXPECT_CONTAINS(input_error_of([&] { read_profile(cut.path(), std::nullopt); }), "output_bytes: expected at most 1e+18 bytes");
}

TEST(GraphBatchSize, GnmtIsInferredFromTheLstmHiddenStates) {
  const Profile gnmt = read_profile(kSourceDir + "/models/pipedream/gnmt/graph.txt", std::nullopt);
  EXPECT_EQ(gnmt.micro_batch_size, 32);
  EXPECT_EQ(gnmt.micro_batch_size_note,
            "inferred from the LSTM hidden states: 131072 bytes = 32 x 1024 float32 (6 LSTM nodes)");
  const Profile vgg16 = read_profile(kSourceDir + "/models/pipedream/vgg16/graph.txt", std::nullopt);
  EXPECT_EQ(vgg16.micro_batch_size, 128);
  EXPECT_EQ(vgg16.micro_batch_size_note, "inferred from the input: 77070336 bytes = 128 x 3x224x224 float32 images");
  // Stated: no note.
  EXPECT_EQ(read_profile(kSourceDir + "/models/pipedream/gnmt/graph.txt", 64).micro_batch_size_note, "");
}

TEST(GraphBatchSize, DisagreeingLstmsOrNoneAskForTheBatchSizeUnlessOptional) {
  const std::string input = graph_node("node1", "Input0", "0.0");
  const TemporaryFile disagree(
      "lstm-disagree.txt", input + graph_node("node2", "LSTM(16, 8)", "[4096.0; 64.0; 64.0]") +
                               graph_node("node3", "LSTM(8, 8)", "[4096.0; 128.0; 128.0]") + "\tnode1 -- node2\n\tnode2 -- node3\n");
  EXPECT_CONTAINS(input_error_of([&] { read_profile(disagree.path(), std::nullopt); }), "cannot infer the batch size");
  const TemporaryFile agree("lstm-agree.txt", input + graph_node("node2", "LSTM(16, 8)", "[4096.0; 64.0; 64.0]") +
                                                  graph_node("node3", "LSTM(8, 8)", "[4096.0; 64.0; 64.0]") +
                                                  "\tnode1 -- node2\n\tnode2 -- node3\n");
  EXPECT_EQ(read_profile(agree.path(), std::nullopt).micro_batch_size, 2);
  const TemporaryFile none("no-batch.txt", input + graph_node("node2", "Linear", "64.0") + "\tnode1 -- node2\n");
  EXPECT_CONTAINS(input_error_of([&] { read_model_graph(none.path(), std::nullopt); }),
                  "cannot infer the batch size: expected the input to be a whole number of 3x224x224 float32 images");
  const ModelGraph graph = read_model_graph(none.path(), std::nullopt, BatchSizeUse::Optional);
  EXPECT_FALSE(graph.profile.micro_batch_size_known);
  EXPECT_EQ(graph.profile.micro_batch_size_note.rfind("unknown: ", 0), 0u) << graph.profile.micro_batch_size_note;
}

TEST(GraphLimits, InvalidUtf8IsRefusedWhereItIsRead) {
  // Found by fuzz_pipedream_graph: a name with the byte 0xB7 was read, then
  // profile_to_json (a plan, partition --json) died on it (type_error.316).
  const TemporaryFile file("utf8.txt", graph_node("node1", "Input0", "602112.0") +
                                           graph_node("node2", "Lin\xB7" "ear", "8.0") + "\tnode1 -- node2\n");
  EXPECT_CONTAINS(input_error_of([&] { read_profile(file.path(), std::nullopt); }),
                  ":2: expected UTF-8 text, found the byte 0xB7 at column 13");
  EXPECT_EQ(first_invalid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), std::nullopt);
  EXPECT_EQ(first_invalid_utf8("ab\xC0\xAF"), 2u);      // overlong
  EXPECT_EQ(first_invalid_utf8("\xED\xA0\x80"), 0u);   // a surrogate
  EXPECT_EQ(first_invalid_utf8("x\xF4\x90\x80\x80"), 1u);  // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8("x\xE2\x82"), 1u);       // cut short
  const std::string head = "host,stream,stage,action,micro_batch,mini_batch,start_s,end_s,bytes,peer,memory_bytes\n";
  EXPECT_CONTAINS(input_error_of([&] { parse_timeline_csv(head + "gpu\xFF,0,0,F,0,0,0,1,0,,0\n", "t.csv"); }),
                  "t.csv:2: expected UTF-8 text, found the byte 0xFF at column 4");
}

// -------------------------------------------------------------- schedules

ScheduleOptions shape(int stages, int micro_batches, int mini_batches) {
  ScheduleOptions options;
  options.num_stages = stages;
  options.micro_batches = micro_batches;
  options.mini_batches = mini_batches;
  return options;
}

TEST(ScheduleLimits, CountsBeyondTheLimitsNameTheFlag) {
  EXPECT_CONTAINS(input_error_of([] { generate_schedule("gpipe", shape(100000, 3, 1)); }),
                  "stages (--stages, or the partition's): expected at most 1024 (docs/formats.md, Limits), found 100000");
  EXPECT_CONTAINS(input_error_of([] { generate_schedule("gpipe", shape(1, 1000000, 1)); }),
                  "--micro-batches: expected at most 250000");
  EXPECT_CONTAINS(input_error_of([] { generate_schedule("pipedream", shape(2, 1, 2147483647)); }),
                  "--mini-batches: expected at most 250000");
  EXPECT_CONTAINS(input_error_of([] { generate_schedule("1f1b-so", shape(64, 1000, 5)); }),
                  "--micro-batches 1000 x --mini-batches 5 x 64 stages: expected at most 250000 work items");
  ScheduleOptions replicated = shape(1, 1, 1);
  replicated.replicas = {20000};
  EXPECT_CONTAINS(input_error_of([&] { generate_schedule("dp", replicated); }),
                  "devices (--replicas summed over the stages): expected at most 16384");
  replicated.replicas = {4096};
  replicated.mini_batches = 1000;
  replicated.micro_batches = 1;
  EXPECT_CONTAINS(input_error_of([&] { generate_schedule("dp", replicated); }),
                  "--mini-batches 1000 on 4096 devices: expected at most 1000000 devices x mini-batches");
  ScheduleOptions deep = shape(2, 1, 4);
  deep.pipeline_depth = 2147483647;
  EXPECT_CONTAINS(input_error_of([&] { generate_schedule("pipeoptim", deep); }),
                  "--pipeline-depth: expected at most 1000000 (docs/formats.md, Limits), found 2147483647");
  ScheduleOptions interval = shape(2, 1, 4);
  interval.update_interval = 2000000;
  EXPECT_CONTAINS(input_error_of([&] { generate_schedule("pipedream-2bw", interval); }), "--update-interval: expected at most");
}

TEST(ScheduleLimits, TheLargestDepthTimesReplicasDoesNotOverflow) {
  // depth x input replicas exceeded an int before (UBSan: signed overflow).
  ScheduleOptions options = shape(2, 1, 8);
  options.replicas = {4000, 1};
  options.pipeline_depth = limits::kMaxPipelineDepth;
  const Program program = generate_schedule("pipedream", options);
  EXPECT_NO_THROW(validate_program(program));
  EXPECT_EQ(program.devices.size(), 4001u);
}

TEST(ScheduleLimits, AtTheLimitsTheProgramIsGenerated) {
  const Program program = generate_schedule("gpipe", shape(4, 250, 250));
  EXPECT_EQ(program.devices.size(), 4u);
  EXPECT_EQ(program.devices[0].streams[0].actions.size(), 2u * 250 * 250);
}

// ------------------------------------------------------------ partitioners

TEST(PipeDreamLimits, MachinesAreBoundedWithoutOverflow) {
  EXPECT_CONTAINS(input_error_of([] { total_machines({65536, 65536}); }),
                  "--machines: expected at most 4096 machines in all (the product of the counts per level; "
                  "docs/formats.md, Limits), found 65536 x 65536");
  EXPECT_CONTAINS(input_error_of([] { total_machines({2147483647, 2147483647, 2}); }), "found 2147483647 x 2147483647 x 2");
  EXPECT_CONTAINS(input_error_of([] { total_machines({4, 0}); }), "--machines: expected counts >= 1, found 0 at level 2");
  EXPECT_EQ(total_machines({4, 4}), 16);
  const StateChain states = antichain_states(chain_graph(chain(3)));
  PipeDreamOptions options;
  options.levels = {{65536, 1e9}, {65536, 1e9}};
  EXPECT_CONTAINS(input_error_of([&] { solve_pipedream(states, options); }), "found 65536 x 65536");
}

TEST(PipeDreamLimits, TablesAndAntichainsAreBounded) {
  const StateChain states = antichain_states(chain_graph(chain(1000)));
  PipeDreamOptions options;
  options.levels = {{64, 1e9}, {64, 1e9}};
  EXPECT_CONTAINS(input_error_of([&] { solve_pipedream(states, options); }),
                  "pipedream: 1000 states over the machines 64 x 64 need tables of 6.41e+07 cells, more than the limit of "
                  "3.2e+07");
  EXPECT_CONTAINS(input_error_of([] { antichain_states(chain_graph(chain(limits::kMaxAntichainLayers + 1))); }),
                  "chain: expected at most 4096 layers for PipeDream's antichain construction");
}

}  // namespace
}  // namespace pipegrid
