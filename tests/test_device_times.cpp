// Per-device-type layer times through the SimGrid engine: a host whose
// `device` property a layer lists runs that layer in the listed times, the
// rest of its stage at profile time / speed_factor (SimulationRequest::stages),
// in pipelines and in the per-layer segments of wait-free all-reduces.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "schedules/schedules.hpp"
#include "sim/engine.hpp"
#include "sim_test_util.hpp"

namespace pipegrid {
namespace {

using testutil::TempFile;

// Two hosts of 1 flop/s joined by one fast SPLITDUPLEX link without latency:
// "plain" (speed_factor 2, no device type) and "board" (speed_factor 4,
// device `board_type`).
std::string two_host_xml(const std::string& board_type) {
  return fmt::format(
      "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      "<platform version=\"4.1\">\n  <zone id=\"pair\" routing=\"Full\">\n"
      "    <host id=\"plain\" speed=\"1f\"><prop id=\"speed_factor\" value=\"2\"/></host>\n"
      "    <host id=\"board\" speed=\"1f\"><prop id=\"speed_factor\" value=\"4\"/>"
      "<prop id=\"device\" value=\"{}\"/></host>\n"
      "    <link id=\"l\" bandwidth=\"1TBps\" latency=\"0s\" sharing_policy=\"SPLITDUPLEX\"/>\n"
      "    <route src=\"plain\" dst=\"board\" symmetrical=\"NO\"><link_ctn id=\"l\" direction=\"UP\"/></route>\n"
      "    <route src=\"board\" dst=\"plain\" symmetrical=\"NO\"><link_ctn id=\"l\" direction=\"DOWN\"/></route>\n"
      "  </zone>\n</platform>\n",
      board_type);
}

// Stage layers: "timed" has VCU129 times, "untimed" has none.
sim::LayerCost timed_layer() { return {6, 64, 3, 3, 3, {{"VCU129", {0.7, 1.1, 0.55, 0.55}}}}; }
sim::LayerCost untimed_layer() { return {4, 64, 2, 2, 2, {}}; }

// A stage's costs: the sums of its layers in order, plus `extra_forward_s`
// (time no layer accounts for, as PipeOptim's weight prediction adds).
StageCost stage_of(const std::vector<sim::LayerCost>& layers, double extra_forward_s) {
  StageCost cost;
  for (const sim::LayerCost& layer : layers) {
    cost.forward_s += layer.forward_s;
    cost.backward_s += layer.backward_s;
    cost.weight_bytes += layer.weight_bytes;
  }
  cost.forward_s += extra_forward_s;
  return cost;
}

// Compute durations (end - start) of `action` ("F" or "B") on `host`.
std::vector<double> durations(const Timeline& timeline, const std::string& host, const std::string& action) {
  std::vector<double> result;
  for (const TimelineRecord& r : timeline.records)
    if (r.host == host && r.action == action) result.push_back(r.end_s - r.start_s);
  return result;
}

bool near(double actual, double expected) { return std::abs(actual - expected) <= 1e-9; }

// GPipe, 2 stages, 2 micro-batches: stage 0 on "plain", stage 1 on "board".
Timeline run_pipeline(const std::string& platform_file) {
  ScheduleOptions options;
  options.num_stages = 2;
  options.micro_batches = 2;
  options.mini_batches = 1;
  sim::SimulationRequest request;
  request.platform_file = platform_file;
  request.network = sim::NetworkModel::Analytic;
  request.program = generate_schedule("gpipe", options);
  request.stage_layers = {{timed_layer()}, {timed_layer(), untimed_layer()}};
  request.stages = {stage_of(request.stage_layers[0], 0), stage_of(request.stage_layers[1], 0.5)};
  request.hosts = {{"plain"}, {"board"}};
  return sim::simulate(request).timeline;
}

TEST(DeviceTimes, AHostOfTheListedTypeRunsTheLayerInItsTimes) {
  const TempFile platform("pipegrid-device-times", ".xml", two_host_xml("VCU129"));
  const Timeline timeline = run_pipeline(platform.path());
  // "plain" has no device type: the stage's profile time / 2, device times
  // or not.
  for (const double d : durations(timeline, "plain", "F")) EXPECT_TRUE(near(d, 3.0 / 2)) << d;
  for (const double d : durations(timeline, "plain", "B")) EXPECT_TRUE(near(d, 6.0 / 2)) << d;
  // "board" is a VCU129: "timed" in its VCU129 times, "untimed" and the
  // 0.5 s no layer accounts for at profile time / 4.
  const std::vector<double> forwards = durations(timeline, "board", "F");
  const std::vector<double> backwards = durations(timeline, "board", "B");
  ASSERT_EQ(forwards.size(), 2u);
  ASSERT_EQ(backwards.size(), 2u);
  for (const double d : forwards) EXPECT_TRUE(near(d, 0.7 + (2 + 0.5) / 4)) << d;
  for (const double d : backwards) EXPECT_TRUE(near(d, 1.1 + 4.0 / 4)) << d;
}

TEST(DeviceTimes, AHostOfAnotherTypeScalesTheProfileTimes) {
  const TempFile platform("pipegrid-device-times", ".xml", two_host_xml("VCU118"));
  const Timeline timeline = run_pipeline(platform.path());
  for (const double d : durations(timeline, "board", "F")) EXPECT_EQ(d, (3 + 2 + 0.5) / 4);
  for (const double d : durations(timeline, "board", "B")) EXPECT_EQ(d, (6 + 4) / 4.0);
}

TEST(DeviceTimes, WaitFreeSegmentsFollowTheDeviceTimes) {
  // Data parallelism on both hosts, one all-reduce per layer as its part of
  // the backward ends (segments in reverse layer order).
  const TempFile platform("pipegrid-device-times", ".xml", two_host_xml("VCU129"));
  ScheduleOptions options;
  options.num_stages = 1;
  options.micro_batches = 2;
  options.mini_batches = 1;
  options.replicas = {2};
  options.wait_free = true;
  sim::SimulationRequest request;
  request.platform_file = platform.path();
  request.network = sim::NetworkModel::Analytic;
  request.program = generate_schedule("dp", options);
  request.stage_layers = {{timed_layer(), untimed_layer()}};
  request.stages = {stage_of(request.stage_layers[0], 0)};
  request.hosts = {{"plain", "board"}};
  const Timeline timeline = sim::simulate(request).timeline;
  for (const double d : durations(timeline, "plain", "F")) EXPECT_TRUE(near(d, (3 + 2) / 2.0)) << d;
  for (const double d : durations(timeline, "plain", "B")) EXPECT_TRUE(near(d, (6 + 4) / 2.0)) << d;
  for (const double d : durations(timeline, "board", "F")) EXPECT_TRUE(near(d, 0.7 + 2.0 / 4)) << d;
  for (const double d : durations(timeline, "board", "B")) EXPECT_TRUE(near(d, 1.1 + 4.0 / 4)) << d;
  int all_reduces = 0;
  for (const TimelineRecord& r : timeline.records) all_reduces += r.action == "ALLREDUCE";
  EXPECT_EQ(all_reduces, 4);  // two layers with weights, two replicas
}

}  // namespace
}  // namespace pipegrid
