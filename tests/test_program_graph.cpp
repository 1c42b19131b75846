// Issue 31: a run's execution graphs (interchange/program_graph.hpp)
// replayed by the graph engine (sim/graph_engine.hpp) give back the run's
// timeline: every schedule of the catalogue, and the run options that shape
// the graphs (data parallelism, the distributed optimizer, transfer rules,
// blocking transfers, recomputation, network and collective models).

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "api/simulation.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "interchange/chakra_io.hpp"
#include "interchange/program_graph.hpp"
#include "schedules/schedules.hpp"
#include "sim/graph_engine.hpp"

namespace pipegrid {
namespace {

const std::string kSource = PIPEGRID_SOURCE_DIR;

// Eight layers of unequal times with activations and weights worth moving.
std::string write_profile() {
  const std::string path = (std::filesystem::temp_directory_path() / fmt::format("pipegrid-graph-{}.json", ::getpid())).string();
  std::string layers;
  for (int l = 0; l < 8; ++l)
    layers += fmt::format("{}{{\"name\": \"l{}\", \"forward_s\": {}, \"backward_s\": {}, \"output_bytes\": {}, "
                          "\"parameter_bytes\": {}, \"forward_flops\": {}, \"backward_input_flops\": {}, "
                          "\"backward_weight_flops\": {}}}",
                          l == 0 ? "" : ",\n", l, 0.010 + 0.002 * l, 0.021 + 0.003 * l, 4000000 + 500000 * l,
                          8000000 + 1000000 * l, 1e12, 1e12, 1e12);
  std::ofstream(path) << "{\"name\": \"graph8\", \"micro_batch_size\": 1, \"input_bytes\": 1000000, \"layers\": [\n"
                      << layers << "\n]}\n";
  return path;
}

struct Case {
  std::string name;
  api::PlanRequest request;
  std::vector<std::string> required = {"U", "SEND_F", "SEND_B"};  ///< actions its timeline has
};

// A copy of platforms/<name> whose hosts run an optimizer step (3 ms) at
// each weight update, so that the runs have U records.
std::string platform_with_steps(const std::string& name) {
  std::string text = read_text_file(kSource + "/platforms/" + name);
  const std::string kind = "<prop id=\"kind\"";
  for (std::size_t at = text.find(kind); at != std::string::npos; at = text.find(kind, at + 1)) {
    const std::size_t end = text.find("/>", at) + 2;
    text.insert(end, "<prop id=\"optimizer_step_overhead\" value=\"0.003s\"/>");
  }
  static int copies = 0;
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("pipegrid-graph-{}-{}-{}", ::getpid(), copies++, name)).string();
  std::ofstream(path) << text;
  return path;
}

api::PlanRequest base_request(const std::string& schedule, const std::string& platform) {
  api::PlanRequest request;
  request.platform_file = platform_with_steps(platform);
  request.schedule = schedule;
  request.micro_batches = 8;
  request.network = "analytic";
  return request;
}

// Sorted by what identifies a record.
std::vector<TimelineRecord> sorted(std::vector<TimelineRecord> records) {
  std::sort(records.begin(), records.end(), [](const TimelineRecord& x, const TimelineRecord& y) {
    return std::tie(x.host, x.action, x.stage, x.micro_batch, x.mini_batch, x.stream, x.start_s) <
           std::tie(y.host, y.action, y.stage, y.micro_batch, y.mini_batch, y.stream, y.start_s);
  });
  return records;
}

std::string describe(const TimelineRecord& r) {
  return fmt::format("{} {} stage {} micro {} mini {} stream {} [{:.12f}, {:.12f}]", r.host, r.action, r.stage,
                     r.micro_batch, r.mini_batch, r.stream, r.start_s, r.end_s);
}

// What differs between two timelines' records (identity, stream, peer,
// start and end within 1e-9 s, bytes within 1e-9 relative); empty when
// they are the same.
std::vector<std::string> timeline_differences(const Timeline& original, const Timeline& replayed) {
  const std::vector<TimelineRecord> a = sorted(original.records), b = sorted(replayed.records);
  std::vector<std::string> differences;
  if (a.size() != b.size()) {
    differences.push_back(fmt::format("{} records, replayed {}", a.size(), b.size()));
    return differences;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    const TimelineRecord &x = a[i], &y = b[i];
    const bool same = x.host == y.host && x.action == y.action && x.stage == y.stage && x.micro_batch == y.micro_batch &&
                      x.mini_batch == y.mini_batch && x.stream == y.stream && x.peer == y.peer &&
                      std::abs(x.start_s - y.start_s) <= 1e-9 && std::abs(x.end_s - y.end_s) <= 1e-9 &&
                      std::abs(x.bytes - y.bytes) <= 1e-9 * std::max(1.0, x.bytes);
    if (!same) differences.push_back(describe(x) + " replayed as " + describe(y));
  }
  return differences;
}

void expect_same_timeline(const Timeline& original, const Timeline& replayed, const std::string& label) {
  const std::vector<std::string> differences = timeline_differences(original, replayed);
  std::string shown;
  for (std::size_t i = 0; i < differences.size() && i < 10; ++i) shown += "\n  " + differences[i];
  EXPECT_TRUE(differences.empty()) << label << ": " << differences.size() << " records differ:" << shown;
}

struct RoundTrip {
  api::RunResult run;
  interchange::ExecutionTraceSet traces;
  Timeline replayed;
};

RoundTrip round_trip(api::PlanRequest request) {
  const std::string profile = request.model.name.empty() ? write_profile() : "";
  request.profile_file = profile;
  Plan plan = api::make_plan(request);
  if (!profile.empty()) std::filesystem::remove(profile);
  RoundTrip trip;
  trip.run = api::run_plan(plan);
  trip.traces = interchange::trace_set_of_run(plan, trip.run);
  sim::GraphReplayOptions options;
  options.network = sim::parse_network_model(plan.network);
  options.transfer_rule = sim::parse_transfer_rule(plan.transfer_rule);
  options.collective_model = sim::parse_collective_model(plan.collective_model);
  // Through the files: written as Chakra traces, read back, replayed.
  const std::string prefix = (std::filesystem::temp_directory_path() / ("pipegrid-round-trip-" + std::to_string(::getpid()))).string();
  interchange::write_chakra_trace_set(trip.traces, prefix);
  const interchange::ExecutionTraceSet read = interchange::read_chakra_trace_set(prefix);
  for (std::size_t r = 0; r < trip.traces.ranks.size(); ++r) std::filesystem::remove(interchange::chakra_trace_file(prefix, static_cast<int>(r)));
  std::filesystem::remove(interchange::chakra_comm_groups_file(prefix));
  EXPECT_EQ(read.process_groups, trip.traces.process_groups);
  trip.replayed = sim::simulate_graph(read, plan.platform_file, options);
  std::filesystem::remove(request.platform_file);
  return trip;
}

std::size_t count_nodes(const interchange::ExecutionTraceSet& traces, interchange::NodeType type) {
  std::size_t count = 0;
  for (const interchange::RankGraph& rank : traces.ranks)
    for (const interchange::ExecutionNode& node : rank.nodes) count += node.type == type ? 1 : 0;
  return count;
}

TEST(ProgramGraph, EveryScheduleOfTheCatalogueReplaysToItsTimeline) {
  for (const ScheduleInfo& info : schedule_catalog()) {
    const bool fpga = info.intended_kind == DeviceKind::Fpga;
    api::PlanRequest request = base_request(info.name, fpga ? "fpga-4xvcu118-chain.xml" : "bapipe-4xv100-pcie3.xml");
    if (!info.flushed) {
      request.micro_batches = 1;
      request.mini_batches = 3;
    }
    const RoundTrip trip = round_trip(request);
    // A run with transfers makes sends; the comparison covers them too.
    EXPECT_GT(count_nodes(trip.traces, interchange::NodeType::CompNode), 0U) << info.name;
    if (!info.single_stage) {
      EXPECT_GT(count_nodes(trip.traces, interchange::NodeType::CommSendNode), 0U) << info.name;
    }
    expect_same_timeline(trip.run.timeline, trip.replayed, info.name);
  }
}

TEST(ProgramGraph, RunOptionsReplayToTheirTimelines) {
  std::vector<Case> cases;
  {
    Case c{"pipedream replicas 2,1,1,1", base_request("pipedream", "pipedream-cluster-a-2x4.xml")};
    c.request.replicas = "2,1,1,1";
    c.request.micro_batches = 1;
    c.request.mini_batches = 4;
    c.required.push_back("ALLREDUCE");
    cases.push_back(c);
  }
  {
    Case c{"1f1b-sno data parallel 2", base_request("1f1b-sno", "pipedream-cluster-a-2x4.xml")};
    c.request.data_parallel = 2;
    c.required.push_back("ALLREDUCE");
    cases.push_back(c);
  }
  {
    Case c{"interleaved-1f1b d 2 distributed optimizer", base_request("interleaved-1f1b", "pipedream-cluster-a-2x4.xml")};
    c.request.data_parallel = 2;
    c.request.distributed_optimizer = true;
    c.request.optimizer = "adam";
    c.required = {"U", "REDUCE_SCATTER", "ALLGATHER", "SEND_F"};
    cases.push_back(c);
  }
  {
    Case c{"1f1b-sno d 2 rounds", base_request("1f1b-sno", "pipedream-cluster-a-2x4.xml")};
    c.request.data_parallel = 2;
    c.request.collective_model = "rounds";
    c.required.push_back("ALLREDUCE");
    cases.push_back(c);
  }
  {
    Case c{"dp 8 network simgrid", base_request("dp", "pipedream-cluster-a-2x4.xml")};
    c.request.network = "simgrid";
    c.required = {"U", "ALLREDUCE"};
    cases.push_back(c);
  }
  {
    Case c{"1f1b-sno d 2 network simgrid", base_request("1f1b-sno", "pipedream-cluster-a-2x4.xml")};
    c.request.network = "simgrid";
    c.request.data_parallel = 2;
    c.required.push_back("ALLREDUCE");
    cases.push_back(c);
  }
  {
    Case c{"zb-h1 fifo", base_request("zb-h1", "bapipe-4xv100-pcie3.xml")};
    c.request.transfer_rule = "fifo";
    cases.push_back(c);
  }
  {
    Case c{"1f1b-as fifo (cut-through)", base_request("1f1b-as", "fpga-4xvcu118-chain.xml")};
    c.request.transfer_rule = "fifo";
    cases.push_back(c);
  }
  {
    Case c{"1f1b-so blocking transfers", base_request("1f1b-so", "bapipe-4xv100-pcie3.xml")};
    c.request.blocking_transfers = true;
    cases.push_back(c);
  }
  {
    Case c{"gpipe recompute", base_request("gpipe", "bapipe-4xv100-pcie3.xml")};
    c.request.recompute = true;
    c.required.push_back("R");
    cases.push_back(c);
  }
  {
    Case c{"dualpipev overlap 0.8", base_request("dualpipev", "bapipe-4xv100-pcie3.xml")};
    c.request.fb_overlap = 0.8;
    c.request.micro_batches = 8;
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    const RoundTrip trip = round_trip(c.request);
    std::map<std::string, int> actions;
    for (const TimelineRecord& r : trip.run.timeline.records) ++actions[r.action];
    // The runs exercise what they are here for.
    for (const std::string& action : c.required) EXPECT_GT(actions[action], 0) << c.name << ": no " << action;
    expect_same_timeline(trip.run.timeline, trip.replayed, c.name);
  }
}

// Megatron-style runs of a generated GPT (a tied word embedding between the
// first and the last stage, fp16 with Adam): its all-reduces alone (d = 1)
// and paired with the stages' gradient synchronisation (d = 2), and
// tensor parallelism, whose members' ranks are empty.
TEST(ProgramGraph, GeneratedGptLayoutsReplayToTheirTimelines) {
  struct Layout {
    int t, p;
    std::string tp_collectives;
  };
  for (const Layout& layout : {Layout{1, 2, "compute"}, Layout{1, 4, "compute"}, Layout{2, 2, "compute"}, Layout{2, 2, "flows"}}) {
    api::PlanRequest request;
    request.platform_file = platform_with_steps("bapipe-4xv100-pcie3.xml");
    request.model = {"gpt", {{"layers", 4}, {"hidden", 512}, {"heads", 8}, {"sequence", 1024}, {"vocabulary", 1000}, {"tied_embeddings", 1}}, 2, "fp16"};
    request.optimizer = "adam";
    request.schedule = "1f1b-sno";
    request.micro_batches = 4;
    request.partition = "megatron";
    request.network = "analytic";
    request.tensor_parallel = layout.t;
    request.pipeline_parallel = layout.p;
    request.tp_collectives = layout.tp_collectives;
    const std::string label = fmt::format("gpt t {} p {} d {} tp-collectives {}", layout.t, layout.p, 4 / layout.t / layout.p,
                                          layout.tp_collectives);
    const RoundTrip trip = round_trip(request);
    std::size_t tied = 0, empty_ranks = 0;
    for (const TimelineRecord& r : trip.run.timeline.records) tied += r.micro_batch == -2 ? 1 : 0;
    for (const interchange::RankGraph& rank : trip.traces.ranks) empty_ranks += rank.nodes.empty() ? 1 : 0;
    EXPECT_GT(tied, 0U) << label;
    EXPECT_EQ(empty_ranks, layout.t == 1 ? 0U : 2U) << label;
    if (layout.tp_collectives == "compute") {
      expect_same_timeline(trip.run.timeline, trip.replayed, label);
      continue;
    }
    // --tp-collectives flows: the records span compute and the rings'
    // flows, which the replay takes as compute time (docs/semantics.md,
    // Replaying an execution graph): every compute record keeps its
    // duration, but the rings no longer share links with the stage
    // transfers, which end earlier, and so does the mini-batch.
    const std::vector<TimelineRecord> a = sorted(trip.run.timeline.records), b = sorted(trip.replayed.records);
    ASSERT_EQ(a.size(), b.size()) << label;
    double original_end = 0, replayed_end = 0;
    bool some_transfer_faster = false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(describe(a[i]).substr(0, describe(a[i]).find('[')), describe(b[i]).substr(0, describe(b[i]).find('[')));
      if (a[i].kind() == RecordKind::Compute) {
        EXPECT_NEAR(a[i].end_s - a[i].start_s, b[i].end_s - b[i].start_s, 1e-9) << describe(a[i]);
      }
      if (a[i].action.rfind("SEND_", 0) == 0 && b[i].end_s - b[i].start_s < a[i].end_s - a[i].start_s - 1e-9) some_transfer_faster = true;
      original_end = std::max(original_end, a[i].end_s);
      replayed_end = std::max(replayed_end, b[i].end_s);
    }
    EXPECT_TRUE(some_transfer_faster) << label;
    EXPECT_LT(replayed_end, original_end) << label;
  }
}

TEST(ProgramGraph, InterleavedDistributedOptimizerStepsKeepTheirOwnDurations) {
  // Each device of an interleaved layout holds 2 stages of unequal
  // parameters (the embedding and the head sit on the first and last); with
  // the distributed optimizer each stage's step follows the device's last
  // backward, so the steps share their labels: the graphs must give each
  // its own duration, in Program order.
  api::PlanRequest request;
  // An H100 server: its device model times each step by the stage's parameters.
  request.platform_file = (std::filesystem::temp_directory_path() / fmt::format("pipegrid-graph-{}-h100.xml", ::getpid())).string();
  std::ofstream(request.platform_file) << read_text_file(kSource + "/tests/data/common/tp-h100-1x4.xml");
  request.model = {"gpt", {{"layers", 8}, {"hidden", 512}, {"heads", 8}, {"sequence", 1024}, {"vocabulary", 32000}}, 2, "fp16"};
  request.optimizer = "adam";
  request.schedule = "interleaved-1f1b";
  request.virtual_stages = 2;
  request.micro_batches = 4;
  request.partition = "megatron";
  request.network = "analytic";
  request.pipeline_parallel = 2;
  request.data_parallel = 2;
  request.distributed_optimizer = true;
  const RoundTrip trip = round_trip(request);
  std::map<std::tuple<std::string, int, int, int>, std::set<double>> step_durations;
  for (const TimelineRecord& r : trip.run.timeline.records)
    if (r.action == kOptimizerStepAction) step_durations[{r.host, r.stage, r.micro_batch, r.mini_batch}].insert(r.end_s - r.start_s);
  bool shared_label_unequal_steps = false;
  for (const auto& [key, durations] : step_durations) shared_label_unequal_steps |= durations.size() > 1;
  EXPECT_TRUE(shared_label_unequal_steps) << "the case must have steps of one label with unequal durations";
  expect_same_timeline(trip.run.timeline, trip.replayed, "interleaved, distributed optimizer");
}

TEST(ProgramGraph, TheComparisonSeesAChangedDuration) {
  RoundTrip trip = round_trip(base_request("1f1b-sno", "bapipe-4xv100-pcie3.xml"));
  for (interchange::ExecutionNode& node : trip.traces.ranks.at(1).nodes)
    if (node.type == interchange::NodeType::CompNode) {
      node.duration_s += 1e-6;
      break;
    }
  const Timeline changed = sim::simulate_graph(trip.traces, kSource + "/platforms/bapipe-4xv100-pcie3.xml");
  EXPECT_TRUE(timeline_differences(trip.run.timeline, trip.replayed).empty());
  const std::vector<std::string> differences = timeline_differences(trip.run.timeline, changed);
  ASSERT_FALSE(differences.empty());
  EXPECT_TRUE(std::any_of(differences.begin(), differences.end(),
                          [](const std::string& difference) { return difference.rfind("gpu1 F stage 1 micro 0", 0) == 0; }))
      << differences.front();
}

TEST(ProgramGraph, GraphsCarryThePipegridAttributes) {
  api::PlanRequest request = base_request("dualpipev", "bapipe-4xv100-pcie3.xml");
  request.micro_batches = 8;
  const RoundTrip trip = round_trip(request);
  ASSERT_EQ(trip.traces.ranks.size(), 4U);
  std::size_t overlapped = 0, steps = 0;
  for (const interchange::RankGraph& rank : trip.traces.ranks)
    for (const interchange::ExecutionNode& node : rank.nodes) {
      if (node.type != interchange::NodeType::CompNode) continue;
      const std::string& action = node.extra.at("pipegrid_action");
      if (action == "U") {
        ++steps;
        continue;
      }
      // Named as the Program's text form; FLOPs and activations given.
      EXPECT_EQ(node.name, to_string(Action{action == "F" ? ActionKind::Forward : action == "B" ? ActionKind::Backward
                                                                                 : action == "I" ? ActionKind::BackwardInput
                                                                                                 : ActionKind::BackwardWeight,
                                            std::stoi(node.extra.at("pipegrid_stage")),
                                            std::stoi(node.extra.at("pipegrid_micro_batch")),
                                            std::stoi(node.extra.at("pipegrid_mini_batch"))}));
      EXPECT_TRUE(node.num_ops.has_value()) << node.name;
      if (node.extra.count("pipegrid_overlapped_with")) {
        ++overlapped;
        const auto partner = std::stoull(node.extra.at("pipegrid_overlapped_with"));
        EXPECT_EQ(rank.nodes.at(partner).extra.at("pipegrid_overlapped_with"), std::to_string(node.id));
      }
    }
  EXPECT_GT(overlapped, 0U);
  EXPECT_GT(steps, 0U);
  // Each send has its receive on the destination rank with the same tag.
  for (const interchange::RankGraph& rank : trip.traces.ranks)
    for (const interchange::ExecutionNode& node : rank.nodes) {
      if (node.type != interchange::NodeType::CommSendNode) continue;
      EXPECT_EQ(*node.comm_src, rank.rank);
      const auto& peer = trip.traces.ranks.at(static_cast<std::size_t>(*node.comm_dst)).nodes;
      EXPECT_EQ(std::count_if(peer.begin(), peer.end(), [&](const interchange::ExecutionNode& other) {
                  return other.type == interchange::NodeType::CommRecvNode && other.comm_src == node.comm_src &&
                         other.comm_tag == node.comm_tag && other.comm_size == node.comm_size;
                }),
                1);
    }
}

TEST(ProgramGraph, CollectivesNameTheirRingAsAProcessGroup) {
  api::PlanRequest request = base_request("1f1b-sno", "pipedream-cluster-a-2x4.xml");
  request.data_parallel = 2;
  const RoundTrip trip = round_trip(request);
  EXPECT_EQ(count_nodes(trip.traces, interchange::NodeType::CommCollNode), 8U);  // 4 stages x 2 replicas
  ASSERT_FALSE(trip.traces.process_groups.empty());
  for (const interchange::RankGraph& rank : trip.traces.ranks)
    for (const interchange::ExecutionNode& node : rank.nodes)
      if (node.type == interchange::NodeType::CommCollNode) {
        const std::vector<int>& group = trip.traces.process_groups.at(node.pg_name);
        EXPECT_EQ(group.size(), 2U);
        EXPECT_NE(std::find(group.begin(), group.end(), rank.rank), group.end());
        EXPECT_EQ(node.comm_type, interchange::CollectiveType::AllReduce);
      }
}

TEST(ProgramGraph, WaitFreeAllReducesAreRefused) {
  api::PlanRequest request = base_request("dp", "bapipe-4xv100-pcie3.xml");
  request.wait_free = true;
  const std::string profile = write_profile();
  request.profile_file = profile;
  Plan plan = api::make_plan(request);
  std::filesystem::remove(profile);
  const api::RunResult run = api::run_plan(plan);
  std::filesystem::remove(request.platform_file);
  try {
    interchange::trace_set_of_run(plan, run);
    FAIL() << "expected an InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("per layer or per bucket"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace pipegrid
