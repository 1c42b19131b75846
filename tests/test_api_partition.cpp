// api::partition, the facade `pipegrid partition` prints from. Called
// directly on the inputs of end-to-end cases (partition-vgg16-straight-8gpu-
// idle-stages, partition-vgg16-bapipe-predicts-simulation, and GNMT's
// branching graph over a --machines hierarchy), it gives the stages, hosts,
// times, memory estimates, stages without compute, notes and partition file
// that the pipegrid binary prints with --json and writes with --output: the
// CLI may not compute any of them on its own. Bad input is the InputError
// the CLI reports.

#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "scratch_folder.hpp"
#include <nlohmann/json.hpp>

#include "api/partition.hpp"
#include "core/io.hpp"
#include "expect_input_error.hpp"
#include "run_command.hpp"

namespace {

namespace fs = std::filesystem;

const std::string kBinary = PIPEGRID_BINARY;
const std::string kRoot = PIPEGRID_SOURCE_DIR;

/// A scratch folder, removed with its content at the end of the test.
class Scratch : public pipegrid::testutil::ScratchFolder {
 public:
  Scratch() : ScratchFolder("pipegrid-api-partition") {}
};

/// The pipegrid command line that asks for `request` (the flags it sets).
std::vector<std::string> cli_words(const pipegrid::api::PartitionRequest& request) {
  std::vector<std::string> words = {kBinary, "partition", "--partitioner", request.partitioner, "--profile", request.profile_file};
  if (request.batch_size) words.insert(words.end(), {"--batch-size", std::to_string(*request.batch_size)});
  if (!request.platform_file.empty()) words.insert(words.end(), {"--platform", request.platform_file});
  if (!request.machines.empty()) {
    words.push_back("--machines");
    for (const int count : request.machines) words.push_back(std::to_string(count));
  }
  if (!request.bandwidths.empty()) {
    words.push_back("--bandwidth");
    for (const std::string& bandwidth : request.bandwidths) words.push_back(bandwidth);
  }
  if (request.straight) words.push_back("--straight");
  if (!request.memory.empty()) words.insert(words.end(), {"--memory", request.memory});
  if (!request.schedule.empty()) words.insert(words.end(), {"--schedule", request.schedule});
  if (request.micro_batches) words.insert(words.end(), {"--micro-batches", std::to_string(request.micro_batches)});
  return words;
}

/// Runs the facade and the binary on `request` and compares what they say.
void expect_facade_equals_cli(const pipegrid::api::PartitionRequest& request) {
  const pipegrid::api::PartitionResult result = pipegrid::api::partition(request);
  const pipegrid::PartitionerOutput& chosen = result.chosen;

  const Scratch scratch;
  const fs::path partition_path = scratch.path() / "partition.json";
  std::vector<std::string> words = cli_words(request);
  words.insert(words.end(), {"--json", "--output", partition_path.string()});
  const testutil::CommandResult cli = testutil::run_words("", words, (scratch.path() / "stderr.txt").string());
  ASSERT_EQ(cli.status, 0) << cli.err;
  const nlohmann::json printed = nlohmann::json::parse(cli.out);

  EXPECT_EQ(printed.at("profile").get<std::string>(), chosen.profile.name);
  EXPECT_EQ(printed.at("time_per_stage_s").get<double>(), chosen.time_per_stage_s);
  EXPECT_EQ(printed.at("bottleneck_stage").get<int>(), chosen.bottleneck_stage);
  EXPECT_EQ(printed.contains("predicted_minibatch_time_s"), chosen.predicted_minibatch_s.has_value());
  if (chosen.predicted_minibatch_s) {
    EXPECT_EQ(printed.at("predicted_minibatch_time_s").get<double>(), *chosen.predicted_minibatch_s);
    EXPECT_EQ(printed.at("predicted_for").get<std::string>(), chosen.predicted_for);
  }
  EXPECT_EQ(printed.at("stages_without_compute").get<std::vector<int>>(), result.stages_without_compute);
  std::vector<std::string> notes = chosen.notes;
  if (!result.no_compute_note.empty()) notes.push_back(result.no_compute_note);
  EXPECT_EQ(printed.at("notes").get<std::vector<std::string>>(), notes);
  EXPECT_EQ(printed.value("layer_order", std::vector<int>{}), chosen.layer_order);

  const nlohmann::json& stages = printed.at("stages");
  ASSERT_EQ(stages.size(), chosen.stages.size());
  for (std::size_t s = 0; s < chosen.stages.size(); ++s) {
    const pipegrid::StageReport& stage = chosen.stages[s];
    const nlohmann::json& entry = stages[s];
    const std::string where = "stage " + std::to_string(s);
    EXPECT_EQ(entry.at("layers").get<std::vector<int>>(), (std::vector<int>{stage.first_layer, stage.last_layer})) << where;
    EXPECT_EQ(entry.at("hosts").get<std::vector<std::string>>(), stage.hosts) << where;
    EXPECT_EQ(entry.at("compute_s").get<double>(), stage.compute_s) << where;
    EXPECT_EQ(entry.at("communication_s").get<double>(), stage.communication_s) << where;
    EXPECT_EQ(entry.at("memory_bytes").get<double>(), stage.memory_bytes) << where;
    if (chosen.predicted_minibatch_s) {
      EXPECT_EQ(entry.at("stage_time_s").get<double>(), stage.stage_time_s) << where;
    }
  }
  EXPECT_EQ(pipegrid::read_text_file(partition_path.string()), pipegrid::api::partition_file_text(chosen));
}

TEST(partition, StraightPipedreamWithIdleStagesIsTheClis) {
  pipegrid::api::PartitionRequest request;
  request.partitioner = "pipedream";
  request.straight = true;
  request.profile_file = kRoot + "/models/pipedream/vgg16/graph.txt";
  request.platform_file = kRoot + "/platforms/bapipe-8xv100-pcie3.xml";
  const pipegrid::api::PartitionResult result = pipegrid::api::partition(request);
  // The case's point: PipeDream gives lone layers devices of their own.
  EXPECT_EQ(result.stages_without_compute, (std::vector<int>{3, 6}));
  EXPECT_EQ(result.no_compute_note.rfind("stages 3 and 6 do no compute (their layers take 0 s on their hosts)", 0), 0u)
      << result.no_compute_note;
  expect_facade_equals_cli(request);
}

TEST(partition, BapipeWithAPredictedMiniBatchTimeIsTheClis) {
  pipegrid::api::PartitionRequest request;
  request.partitioner = "bapipe";
  request.profile_file = kRoot + "/models/pipedream/vgg16/graph.txt";
  request.platform_file = kRoot + "/platforms/bapipe-4xv100-pcie3.xml";
  request.schedule = "1f1b-so";
  request.micro_batches = 8;
  request.memory = "64GiB";
  ASSERT_TRUE(pipegrid::api::partition(request).chosen.predicted_minibatch_s.has_value());
  expect_facade_equals_cli(request);
}

TEST(partition, BranchingGraphOverAMachineHierarchyIsTheClis) {
  pipegrid::api::PartitionRequest request;
  request.partitioner = "pipedream";
  request.profile_file = kRoot + "/models/pipedream/gnmt/graph.txt";
  request.batch_size = 64;
  request.machines = {2, 2};
  request.bandwidths = {"10Gbps", "1Gbps"};
  const pipegrid::api::PartitionResult result = pipegrid::api::partition(request);
  EXPECT_FALSE(result.chosen.layer_order.empty());  // GNMT's branches re-listed
  for (const pipegrid::StageReport& stage : result.chosen.stages)
    for (const std::string& host : stage.hosts) EXPECT_EQ(host.rfind("gpu", 0), 0u) << host;
  expect_facade_equals_cli(request);
}

TEST(partition, BadInputIsTheInputErrorTheCliReports) {
  pipegrid::api::PartitionRequest request;
  request.partitioner = "pipedream";
  request.profile_file = kRoot + "/models/pipedream/vgg16/graph.txt";
  request.machines = {4, 2};
  request.bandwidths = {"10Gbps"};
  const std::string message = pipegrid::testutil::input_error_of([&] { pipegrid::api::partition(request); });
  EXPECT_EQ(message, "--machines gives 2 levels and --bandwidth 1: expected one bandwidth per level");

  const Scratch scratch;
  const testutil::CommandResult cli = testutil::run_words("", cli_words(request), (scratch.path() / "stderr.txt").string());
  EXPECT_EQ(cli.status, 2);
  EXPECT_EQ(cli.err, "pipegrid: error: " + message + "\n");
}

}  // namespace
