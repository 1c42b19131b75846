// Issue 31: the graph engine's dispatch rule (sim/graph_engine.hpp) on small
// hand-built execution graphs, with exact times on an analytic platform
// (tests/data/common/chain2-latency.xml: 0.25 s + b / 100 B/s a transfer).

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "interchange/execution_graph.hpp"
#include "sim/graph_engine.hpp"

namespace pipegrid {
namespace {

using interchange::CollectiveType;
using interchange::ExecutionNode;
using interchange::ExecutionTraceSet;
using interchange::NodeType;

const std::string kChain2 = std::string(PIPEGRID_SOURCE_DIR) + "/tests/data/common/chain2-latency.xml";

ExecutionNode compute(std::uint64_t id, const std::string& name, double seconds, std::vector<std::uint64_t> deps = {}) {
  ExecutionNode node;
  node.id = id;
  node.name = name;
  node.type = NodeType::CompNode;
  node.duration_s = seconds;
  node.data_deps = std::move(deps);
  return node;
}

ExecutionNode message(std::uint64_t id, NodeType type, int src, int dst, int tag, double bytes, std::vector<std::uint64_t> deps = {}) {
  ExecutionNode node;
  node.id = id;
  node.name = "x";
  node.type = type;
  node.comm_src = src;
  node.comm_dst = dst;
  node.comm_tag = tag;
  node.comm_size = bytes;
  node.data_deps = std::move(deps);
  return node;
}

const TimelineRecord& record(const Timeline& timeline, const std::string& host, const std::string& action) {
  for (const TimelineRecord& r : timeline.records)
    if (r.host == host && r.action == action) return r;
  throw std::logic_error("no record " + action + " on " + host);
}

ExecutionTraceSet two_ranks() {
  ExecutionTraceSet traces;
  traces.ranks = {{0, {}}, {1, {}}};
  return traces;
}

TEST(GraphEngine, SendTakesLatencyPlusBytesOverBandwidth) {
  ExecutionTraceSet traces = two_ranks();
  traces.ranks[0].nodes = {compute(0, "produce", 1.0), message(1, NodeType::CommSendNode, 0, 1, 7, 200, {0})};
  traces.ranks[1].nodes = {message(0, NodeType::CommRecvNode, 0, 1, 7, 200), compute(1, "consume", 0.5, {0})};
  const Timeline timeline = sim::simulate_graph(traces, kChain2);
  ASSERT_EQ(timeline.records.size(), 3U);
  const TimelineRecord& send = record(timeline, "gpu0", "SEND_x");
  EXPECT_DOUBLE_EQ(send.start_s, 1.0);
  EXPECT_DOUBLE_EQ(send.end_s, 1.0 + 0.25 + 200 / 100.0);
  EXPECT_EQ(send.peer, "gpu1");
  EXPECT_DOUBLE_EQ(send.bytes, 200);
  const TimelineRecord& consume = record(timeline, "gpu1", "consume");
  EXPECT_DOUBLE_EQ(consume.start_s, 3.25);
  EXPECT_DOUBLE_EQ(consume.end_s, 3.75);
  EXPECT_EQ(record(timeline, "gpu0", "produce").end_s, 1.0);
}

TEST(GraphEngine, SendIsEagerAndReceiveWaitsForItsDeps) {
  // The receive is posted late (after a 5 s compute): the message arrived
  // long before; the consumer starts when the receive is ready.
  ExecutionTraceSet traces = two_ranks();
  traces.ranks[0].nodes = {message(0, NodeType::CommSendNode, 0, 1, 0, 100)};
  traces.ranks[1].nodes = {compute(0, "busy", 5.0), message(1, NodeType::CommRecvNode, 0, 1, 0, 100, {0}),
                           compute(2, "consume", 1.0, {1})};
  const Timeline timeline = sim::simulate_graph(traces, kChain2);
  EXPECT_DOUBLE_EQ(record(timeline, "gpu0", "SEND_x").end_s, 1.25);
  EXPECT_DOUBLE_EQ(record(timeline, "gpu1", "consume").start_s, 5.0);
}

TEST(GraphEngine, AllReduceIsTheEnginesRingCollective) {
  // r = 2, S = 100 bytes: 2 (r - 1) = 2 steps of S / r; once both have
  // joined (at 1 s), one flow of 100 bytes (0.25 + 1 s), then one more
  // latency (0.25 s).
  ExecutionTraceSet traces = two_ranks();
  traces.process_groups["pair"] = {0, 1};
  ExecutionNode all_reduce;
  all_reduce.type = NodeType::CommCollNode;
  all_reduce.name = "grads";
  all_reduce.comm_type = CollectiveType::AllReduce;
  all_reduce.comm_size = 100;
  all_reduce.pg_name = "pair";
  ExecutionNode first = all_reduce;
  first.id = 1;
  first.data_deps = {0};
  traces.ranks[0].nodes = {compute(0, "backward", 1.0), first};
  traces.ranks[1].nodes = {all_reduce};
  const Timeline timeline = sim::simulate_graph(traces, kChain2);
  const TimelineRecord& late = record(timeline, "gpu0", "ALLREDUCE");
  const TimelineRecord& early = record(timeline, "gpu1", "ALLREDUCE");
  EXPECT_DOUBLE_EQ(late.start_s, 1.0);
  EXPECT_DOUBLE_EQ(early.start_s, 0.0);
  EXPECT_DOUBLE_EQ(late.end_s, 2.5);
  EXPECT_DOUBLE_EQ(early.end_s, 2.5);
  EXPECT_DOUBLE_EQ(late.bytes, 100);
  EXPECT_EQ(late.peer, "gpu1");
  EXPECT_EQ(late.micro_batch, -1);
}

TEST(GraphEngine, AStreamRunsItsReadyNodesOneAtATimeSmallestIdFirst) {
  ExecutionTraceSet traces;
  traces.ranks = {{0, {}}};
  ExecutionNode other_stream = compute(0, "other", 1.5);
  other_stream.extra["pipegrid_stream"] = "1";
  ExecutionNode lane = compute(4, "lane", 0.5);
  lane.extra["pipegrid_lane"] = "collectives";
  // Ids 1 and 3 are ready at 0 on stream 0: 1 first; 2 waits for 3.
  traces.ranks[0].nodes = {other_stream, compute(1, "first", 2.0), compute(2, "after", 1.0, {3}), compute(3, "second", 1.0), lane};
  const Timeline timeline = sim::simulate_graph(traces, kChain2);
  EXPECT_DOUBLE_EQ(record(timeline, "gpu0", "first").start_s, 0.0);
  EXPECT_DOUBLE_EQ(record(timeline, "gpu0", "second").start_s, 2.0);
  EXPECT_DOUBLE_EQ(record(timeline, "gpu0", "after").start_s, 3.0);
  EXPECT_DOUBLE_EQ(record(timeline, "gpu0", "other").start_s, 0.0);
  EXPECT_EQ(record(timeline, "gpu0", "other").stream, 1);
  EXPECT_DOUBLE_EQ(record(timeline, "gpu0", "lane").start_s, 0.0);
  EXPECT_DOUBLE_EQ(record(timeline, "gpu0", "lane").end_s, 0.5);
}

TEST(GraphEngine, DependencySendsAreDeliveredAtOnce) {
  ExecutionTraceSet traces = two_ranks();
  ExecutionNode send = message(1, NodeType::CommSendNode, 0, 1, 0, 0, {0});
  send.extra["pipegrid_dependency"] = "1";
  traces.ranks[0].nodes = {compute(0, "before", 1.0), send};
  traces.ranks[1].nodes = {message(0, NodeType::CommRecvNode, 0, 1, 0, 0), compute(1, "after", 1.0, {0})};
  const Timeline timeline = sim::simulate_graph(traces, kChain2);
  EXPECT_EQ(timeline.records.size(), 2U);  // no transfer record
  EXPECT_DOUBLE_EQ(record(timeline, "gpu1", "after").start_s, 1.0);
}

TEST(GraphEngine, PipegridAttributesNameTheRecords) {
  ExecutionTraceSet traces;
  traces.ranks = {{0, {}}};
  ExecutionNode node = compute(0, "2F3@1", 1.0);
  node.extra = {{"pipegrid_action", "F"}, {"pipegrid_stage", "2"}, {"pipegrid_micro_batch", "3"}, {"pipegrid_mini_batch", "1"},
                {"pipegrid_stream", "0"}};
  traces.ranks[0].nodes = {node};
  const Timeline timeline = sim::simulate_graph(traces, kChain2);
  ASSERT_EQ(timeline.records.size(), 1U);
  const TimelineRecord& r = timeline.records.front();
  EXPECT_EQ(r.action, "F");
  EXPECT_EQ(r.stage, 2);
  EXPECT_EQ(r.micro_batch, 3);
  EXPECT_EQ(r.mini_batch, 1);
  EXPECT_EQ(timeline.hosts, std::vector<std::string>{"gpu0"});
}

TEST(GraphEngine, TensorsAreHeldFromTheirStartUntilTheLastDataDependentEnds) {
  ExecutionTraceSet traces;
  traces.ranks = {{0, {}}};
  // a (0-1 s, 100 B) is read by c (2-3 s): held 0-3 s. b (1-2 s, 40 B) has
  // no data dependent: held 1-2 s. c states no size. d (3-4 s, 10 B): 3-4 s.
  ExecutionNode a = compute(0, "a", 1.0), b = compute(1, "b", 1.0, {0}), c = compute(2, "c", 1.0, {1}), d = compute(3, "d", 1.0, {2});
  a.tensor_size = 100;
  b.tensor_size = 40;
  d.tensor_size = 10;
  c.data_deps = {0};
  traces.ranks[0].nodes = {a, b, c, d};
  const Timeline timeline = sim::simulate_graph(traces, kChain2);
  const std::vector<std::pair<double, double>> expected = {{0, 100}, {1, 140}, {2, 100}, {3, 10}, {4, 0}};
  EXPECT_EQ(timeline.memory_series.at("gpu0"), expected);
  // memory_bytes: the rank's memory right after the record ends.
  EXPECT_DOUBLE_EQ(record(timeline, "gpu0", "a").memory_bytes, 140);
  EXPECT_DOUBLE_EQ(record(timeline, "gpu0", "b").memory_bytes, 100);
  EXPECT_DOUBLE_EQ(record(timeline, "gpu0", "c").memory_bytes, 10);
  EXPECT_DOUBLE_EQ(record(timeline, "gpu0", "d").memory_bytes, 0);
  // Without any tensor_size: no memory at all.
  for (ExecutionNode& node : traces.ranks[0].nodes) node.tensor_size.reset();
  EXPECT_TRUE(sim::simulate_graph(traces, kChain2).memory_series.empty());
}

void expect_input_error(const ExecutionTraceSet& traces, const std::string& expected) {
  try {
    sim::simulate_graph(traces, kChain2);
    FAIL() << "expected an InputError containing '" << expected << "'";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
  }
}

TEST(GraphEngine, CollectivesPairByIdAndWithoutAGroupSpanEveryRank) {
  // Rank 0 lists its two all-reduces out of id order; rank 1 in order: the
  // k-th by id of each rank are one collective (sizes 100 and 300). Neither
  // names a process group: the group is every rank.
  ExecutionTraceSet traces = two_ranks();
  ExecutionNode small, large;
  for (ExecutionNode* node : {&small, &large}) {
    node->type = NodeType::CommCollNode;
    node->comm_type = CollectiveType::AllReduce;
  }
  small.id = 1, small.name = "small", small.comm_size = 100;
  large.id = 2, large.name = "large", large.comm_size = 300;
  large.ctrl_deps = {1};
  traces.ranks[0].nodes = {large, small};
  traces.ranks[1].nodes = {small, large};
  const Timeline timeline = sim::simulate_graph(traces, kChain2);
  std::vector<double> bytes;
  for (const TimelineRecord& r : timeline.records)
    if (r.host == "gpu0" && r.action == "ALLREDUCE") bytes.push_back(r.bytes);
  EXPECT_EQ(bytes, (std::vector<double>{100, 300}));
}

TEST(GraphEngine, NamesThatTheCsvCannotHoldBecomeUnderscores) {
  ExecutionTraceSet traces;
  traces.ranks = {{0, {compute(0, "aten::mm, \"fused\"\n", 1.0)}}};
  const Timeline timeline = sim::simulate_graph(traces, kChain2);
  ASSERT_EQ(timeline.records.size(), 1U);
  EXPECT_EQ(timeline.records[0].action, "aten::mm_ _fused__");
}

TEST(GraphEngine, MalformedGraphsAreRefused) {
  {
    ExecutionTraceSet traces = two_ranks();
    traces.ranks[0].nodes = {compute(0, "a", 1.0, {5})};
    expect_input_error(traces, "rank 0 node 0 ('a') depends on node 5, which rank 0 does not have");
  }
  {
    ExecutionTraceSet traces = two_ranks();
    traces.ranks[1].nodes = {message(0, NodeType::CommRecvNode, 0, 1, 3, 10)};
    expect_input_error(traces, "no send from rank 0 to rank 1 with tag 3");
  }
  {
    ExecutionTraceSet traces = two_ranks();
    traces.ranks[0].nodes = {compute(0, "a", 1.0, {1}), compute(1, "b", 1.0, {0})};
    expect_input_error(traces, "2 nodes never become ready");
  }
  {
    ExecutionTraceSet traces;
    traces.ranks = {{0, {}}, {1, {}}, {2, {}}};
    traces.ranks[2].nodes = {compute(0, "a", 1.0)};
    expect_input_error(traces, "the execution graphs have 3 ranks, the platform 2 hosts");
  }
  {
    ExecutionTraceSet traces = two_ranks();
    ExecutionNode all_reduce;
    all_reduce.type = NodeType::CommCollNode;
    all_reduce.comm_type = CollectiveType::AllReduce;
    all_reduce.pg_name = "missing";
    traces.ranks[0].nodes = {all_reduce};
    expect_input_error(traces, "process group 'missing' is not declared");
  }
  {
    ExecutionTraceSet traces;
    ExecutionNode labelled = compute(0, "f", 1.0);
    labelled.extra["pipegrid_micro_batch"] = "x";
    traces.ranks = {{0, {labelled}}};
    expect_input_error(traces, "pipegrid_micro_batch");
  }
}

}  // namespace
}  // namespace pipegrid
