// The simulator against the closed forms of SEMANTICS.md ("Closed forms the
// simulator reproduces"): mini-batch time, bubble fraction and peak stashed
// micro-batches of every flushed schedule on latency-only chains, exact to
// 1e-9 relative. A seeded sample of the grid runs in CI; the whole grid runs
// with --full-grid (ctest label "long"). Also: the documented
// counterexamples (simulated values), determinism, and a malformed platform.
//
// Grid: N in 2..8, M in 1..32, F and B in {1, 2, 3}, SR in {0, 1/4, 1/2, 1,
// 3/2, 3} (all binary fractions, so the expected values are exact).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/timeline.hpp"
#include "render/timeline_csv.hpp"
#include "schedules/schedules.hpp"
#include "sim/engine.hpp"
#include "sim_test_util.hpp"

namespace pipegrid {
namespace {

bool g_full_grid = false;  // set by --full-grid in main()

using testutil::PlatformCache;
using testutil::SimCase;
using testutil::SimOutcome;

constexpr double kHops[] = {0, 0.25, 0.5, 1, 1.5, 3};
constexpr double kTimes[] = {1, 2, 3};
constexpr int kMinStages = 2, kMaxStages = 8, kMaxMicroBatches = 32;

bool near(double actual, double expected) {
  return std::abs(actual - expected) <= 1e-9 * std::abs(expected) + 1e-12;
}

// ---- The closed forms (SEMANTICS.md), stages counted from 0 here: s = i - 1.

double ideal_time(const SimCase& c) { return (c.micro_batches + c.stages - 1) * (c.forward_s + c.backward_s); }

// ceil((M - 1) / N) for M >= 1.
int ceil_div(int a, int b) { return (a + b - 1) / b; }

/** Forwards a stage runs before its first backward (k_i), or FBP's stash cap. */
int warmup_of(const SimCase& c, int s) {
  const int depth = c.stages - s;  // N - i + 1
  if (c.schedule == "gpipe") return c.micro_batches;
  if (c.schedule == "1f1b-so" || c.schedule == "fbp-as") return std::min(2 * depth, c.micro_batches);
  return std::min(depth, c.micro_batches);  // 1f1b-sno, 1f1b-as
}

/** The mini-batch time's closed form where it holds exactly; nullopt outside
 *  its range. */
std::optional<double> closed_form_time(const SimCase& c) {
  const int N = c.stages, M = c.micro_batches;
  const double F = c.forward_s, B = c.backward_s, SR = c.hop_s;
  if (c.schedule == "gpipe") return ideal_time(c) + 2 * (N - 1) * SR;
  if (c.schedule == "1f1b-sno") return ideal_time(c) + (N + M - 2 - ceil_div(M - 1, N)) * 2 * SR;
  if (c.schedule == "1f1b-so") {
    if (M <= 4 || 2 * SR <= F + B) return ideal_time(c) + (N - 1) * 2 * SR;
    return std::nullopt;
  }
  if (c.schedule == "1f1b-as") {
    if (SR <= std::min(F, B)) return ideal_time(c);
    return std::nullopt;
  }
  if (c.schedule == "fbp-as") {
    if (SR == 0) return ideal_time(c);
    return std::nullopt;
  }
  ADD_FAILURE() << "no closed form for " << c.schedule;
  return std::nullopt;
}

/** Outside its range: a lower bound the schedule must respect, if any. 1F1B-SO:
 *  the formula (SEMANTICS.md). 1F1B-AS: the time with SR = 0 (one ordered
 *  stream per device, so later messages never make anything earlier). FBP
 *  with SR > 0: none is documented. */
std::optional<double> lower_bound_time(const SimCase& c) {
  if (c.schedule == "1f1b-so") return ideal_time(c) + (c.stages - 1) * 2 * c.hop_s;
  if (c.schedule == "1f1b-as") return ideal_time(c);
  return std::nullopt;
}

/** Runs one case and lists every way it departs from SEMANTICS.md. */
std::vector<std::string> check_case(const SimCase& c, PlatformCache& cache, bool* exact_time = nullptr) {
  std::vector<std::string> problems;
  SimOutcome out;
  try {
    out = testutil::run_case(c, cache);
  } catch (const std::exception& error) {
    problems.push_back(fmt::format("{}: simulation failed: {}", describe(c), error.what()));
    return problems;
  }
  const double work = c.micro_batches * (c.forward_s + c.backward_s);
  const std::optional<double> expected = closed_form_time(c);
  if (exact_time) *exact_time = expected.has_value();
  if (expected) {
    if (!near(out.minibatch_time_s, *expected))
      problems.push_back(fmt::format("{}: mini-batch time simulated {:.17g}, closed form {:.17g}", describe(c),
                                     out.minibatch_time_s, *expected));
    const double bubble = 1 - work / *expected;
    if (!near(out.bubble_fraction, bubble))
      problems.push_back(fmt::format("{}: bubble fraction simulated {:.17g}, closed form 1 - M(F+B)/T = {:.17g}",
                                     describe(c), out.bubble_fraction, bubble));
  } else {
    if (auto bound = lower_bound_time(c); bound && out.minibatch_time_s < *bound - 1e-9 * *bound)
      problems.push_back(fmt::format("{}: mini-batch time simulated {:.17g}, below the lower bound {:.17g}", describe(c),
                                     out.minibatch_time_s, *bound));
    if (out.minibatch_time_s > 0 && !near(out.bubble_fraction, 1 - work / out.minibatch_time_s))
      problems.push_back(fmt::format("{}: bubble fraction {:.17g}, expected 1 - M(F+B)/T = {:.17g} with the simulated T",
                                     describe(c), out.bubble_fraction, 1 - work / out.minibatch_time_s));
  }
  for (int s = 0; s < c.stages; ++s) {
    const auto at = static_cast<std::size_t>(s);
    if (!near(out.busy_s[at], work))
      problems.push_back(fmt::format("{}: stage {} busy {:.17g}, expected M(F+B) = {:.17g}", describe(c), s + 1,
                                     out.busy_s[at], work));
    const int k = warmup_of(c, s);
    const int stashed = out.peak_stashed[at];
    const bool fbp = c.schedule == "fbp-as";
    // FBP: at most the cap, equal to it when F <= B (fewer is possible when F > B).
    const bool stash_ok = fbp ? (stashed <= k && (c.forward_s > c.backward_s || stashed == k) && stashed >= 1)
                              : stashed == k;
    if (!stash_ok)
      problems.push_back(fmt::format("{}: stage {} peak stashed micro-batches {}, expected {}{}", describe(c), s + 1,
                                     stashed, fbp && c.forward_s > c.backward_s ? "at most " : "", k));
    // 0-byte messages: peak memory = weights + gradients + peak stash x a.
    const double memory = 2 * testutil::weight_unit(s) + stashed * testutil::stash_unit(s);
    if (!near(out.peak_memory_bytes[at], memory))
      problems.push_back(fmt::format("{}: stage {} peak memory {:.17g}, expected 2w + {}a = {:.17g}", describe(c), s + 1,
                                     out.peak_memory_bytes[at], stashed, memory));
  }
  return problems;
}

// ---- Grids and samples.

std::vector<SimCase> full_grid(const std::string& schedule) {
  std::vector<SimCase> cases;
  for (int n = kMinStages; n <= kMaxStages; ++n)
    for (int m = 1; m <= kMaxMicroBatches; ++m)
      for (double f : kTimes)
        for (double b : kTimes)
          for (double sr : kHops) cases.push_back({schedule, n, m, f, b, sr});
  return cases;
}

/** `in_range` cases where the closed form holds exactly and `out_of_range`
 *  others (SO, AS: lower bound and stash; FBP with SR > 0: stash), drawn
 *  without replacement from the full grid with a fixed seed, plus the grid's
 *  corners. */
std::vector<SimCase> sample(const std::string& schedule, std::size_t in_range, std::size_t out_of_range) {
  std::vector<SimCase> exact, other;
  for (const SimCase& c : full_grid(schedule)) (closed_form_time(c) ? exact : other).push_back(c);
  std::mt19937 random(20240611u + static_cast<unsigned>(schedule.size()));
  std::shuffle(exact.begin(), exact.end(), random);
  std::shuffle(other.begin(), other.end(), random);
  exact.resize(std::min(exact.size(), in_range));
  other.resize(std::min(other.size(), out_of_range));
  std::vector<SimCase> cases;
  for (int n : {kMinStages, kMaxStages})
    for (int m : {1, kMaxMicroBatches}) cases.push_back({schedule, n, m, 1, 3, 0});
  cases.push_back({schedule, kMaxStages, kMaxMicroBatches, 3, 1, schedule == "fbp-as" ? 0.0 : 1});
  cases.insert(cases.end(), exact.begin(), exact.end());
  cases.insert(cases.end(), other.begin(), other.end());
  return cases;
}

void run_cases(const std::vector<SimCase>& cases) {
  PlatformCache cache;
  std::vector<std::string> problems;
  std::size_t exact = 0;
  const auto started = std::chrono::steady_clock::now();
  for (const SimCase& c : cases) {
    bool exact_time = false;
    for (std::string& problem : check_case(c, cache, &exact_time)) problems.push_back(std::move(problem));
    exact += exact_time;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("%zu cases (%zu against the exact time form) in %.1f s\n", cases.size(), exact, seconds);
  std::string listed;
  for (std::size_t p = 0; p < problems.size() && p < 40; ++p) listed += problems[p] + "\n";
  EXPECT_TRUE(problems.empty()) << problems.size() << " problems, the first ones:\n" << listed;
}

// Sample sizes: one simulate() (fork + SimGrid engine) takes about 5-10 ms,
// so each sampled test (about 600 cases) runs in a few seconds; the full grid
// takes 1.5-2 minutes per schedule.
constexpr std::size_t kSampleInRange = 500, kSampleOutOfRange = 100;

TEST(ClosedForms, GPipeSample) { run_cases(sample("gpipe", kSampleInRange, 0)); }
TEST(ClosedForms, OneFOneBSnoSample) { run_cases(sample("1f1b-sno", kSampleInRange, 0)); }
TEST(ClosedForms, OneFOneBSoSample) { run_cases(sample("1f1b-so", kSampleInRange, kSampleOutOfRange)); }
TEST(ClosedForms, OneFOneBAsSample) { run_cases(sample("1f1b-as", kSampleInRange, kSampleOutOfRange)); }
TEST(ClosedForms, FbpAsSample) { run_cases(sample("fbp-as", kSampleInRange, kSampleOutOfRange)); }

// The whole grid (12096 cases per schedule): only with --full-grid.
void run_full_grid(const std::string& schedule) {
  if (!g_full_grid) GTEST_SKIP() << "the full grid runs only with --full-grid";
  run_cases(full_grid(schedule));
}
TEST(ClosedFormsFullGrid, GPipe) { run_full_grid("gpipe"); }
TEST(ClosedFormsFullGrid, OneFOneBSno) { run_full_grid("1f1b-sno"); }
TEST(ClosedFormsFullGrid, OneFOneBSo) { run_full_grid("1f1b-so"); }
TEST(ClosedFormsFullGrid, OneFOneBAs) { run_full_grid("1f1b-as"); }
TEST(ClosedFormsFullGrid, FbpAs) { run_full_grid("fbp-as"); }

// ---- Where the published forms do not hold: the simulator's own values.

TEST(ClosedFormsCounterexamples, OneFOneBSoBeyondItsRange) {
  PlatformCache cache;
  const SimCase c{"1f1b-so", 2, 5, 1, 1, 1.25};
  const double formula = ideal_time(c) + (c.stages - 1) * 2 * c.hop_s;
  EXPECT_DOUBLE_EQ(formula, 14.5);
  const SimOutcome out = testutil::run_case(c, cache);
  EXPECT_NEAR(out.minibatch_time_s, 15, 1e-9 * 15) << describe(c);
  EXPECT_NEAR(out.bubble_fraction, 1 - 10.0 / 15, 1e-9) << describe(c);
}

TEST(ClosedFormsCounterexamples, FbpAsWithHopTime) {
  PlatformCache cache;
  const SimCase c{"fbp-as", 2, 1, 1, 2, 1.5};
  EXPECT_DOUBLE_EQ(ideal_time(c), 6);
  const SimOutcome out = testutil::run_case(c, cache);
  EXPECT_NEAR(out.minibatch_time_s, 6.5, 1e-9 * 6.5) << describe(c);
}

TEST(ClosedFormsCounterexamples, FbpAsStashesFewerWhenForwardIsSlower) {
  PlatformCache cache;
  const SimOutcome out = testutil::run_case({"fbp-as", 3, 8, 3, 1, 0}, cache);
  EXPECT_EQ(out.peak_stashed, (std::vector<int>{5, 3, 2}));
}

TEST(ClosedFormsCounterexamples, FbpAsStashCapReachedWithEqualTimes) {
  PlatformCache cache;
  const SimOutcome out = testutil::run_case({"fbp-as", 3, 8, 1, 1, 0}, cache);
  // The cap 2(N-i+1) = [6, 4, 2] (uncapped FBP would stash [8, 5, 2]).
  EXPECT_EQ(out.peak_stashed, (std::vector<int>{6, 4, 2}));
  EXPECT_NEAR(out.minibatch_time_s, (8 + 3 - 1) * 2.0, 1e-9 * 20);
}

// ---- Determinism and bad input.

TEST(Simulation, SamePlanTwiceGivesIdenticalTimelines) {
  PlatformCache cache;
  for (const SimCase& c : {SimCase{"1f1b-so", 4, 9, 2, 3, 1.5}, SimCase{"fbp-as", 3, 8, 3, 1, 0.5},
                           SimCase{"gpipe", 5, 7, 1, 2, 0.25}}) {
    const SimOutcome first = testutil::run_case(c, cache);
    const SimOutcome second = testutil::run_case(c, cache);
    ASSERT_FALSE(first.timeline.records.empty()) << describe(c);
    EXPECT_EQ(first.timeline.hosts, second.timeline.hosts) << describe(c);
    EXPECT_EQ(timeline_to_csv(first.timeline), timeline_to_csv(second.timeline)) << describe(c);
  }
}

sim::SimulationRequest two_stage_request(const std::string& platform_file) {
  ScheduleOptions options;
  options.num_stages = 2;
  options.micro_batches = 2;
  sim::SimulationRequest request;
  request.platform_file = platform_file;
  request.program = generate_schedule("gpipe", options);
  request.stages = testutil::balanced_stages(2, 1, 1);
  request.hosts = {{testutil::chain_host(0)}, {testutil::chain_host(1)}};
  return request;
}

void expect_rejected_naming_file(const std::string& contents) {
  const testutil::TempFile file("pipegrid-bad", ".xml", contents);
  try {
    sim::simulate(two_stage_request(file.path()));
    ADD_FAILURE() << "simulate accepted the malformed platform:\n" << contents;
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find(file.path()), std::string::npos)
        << "the message does not name " << file.path() << ": " << error.what();
  }
}

TEST(Simulation, MalformedPlatformIsAnInputErrorNamingTheFile) {
  // Unclosed element.
  std::string xml = testutil::chain_platform_xml(2, DeviceKind::Gpu, 0.5);
  xml.resize(xml.find("</zone>"));
  expect_rejected_naming_file(xml);
  // Not XML at all.
  expect_rejected_naming_file("this is not a platform\n");
  // Well-formed XML, but a link with a malformed latency.
  std::string bad_latency = testutil::chain_platform_xml(2, DeviceKind::Gpu, 0.5);
  bad_latency.replace(bad_latency.find("latency=\"0.5s\""), 14, "latency=\"fast\"");
  expect_rejected_naming_file(bad_latency);
}

TEST(Simulation, GeneratedPlatformIsAcceptedWithZeroLatency) {
  // Guards the helper itself: latency 0 links load, and a lone message-free
  // stage takes exactly F + B per micro-batch.
  PlatformCache cache;
  const SimOutcome out = testutil::run_case({"gpipe", 2, 1, 2, 3, 0}, cache);
  EXPECT_NEAR(out.minibatch_time_s, 10, 1e-9 * 10);
}

TEST(ClosedForms, DataParallelWithRecomputation) {
  // dp on the two hosts of a latency-only chain (hop SR, 1 TB/s links): replica
  // 0 runs the ceil(M/2) micro-batches m = 0, 2, ..., each F, then with
  // --recompute its R (a forward again), then B; the ring all-reduce of the
  // stage's W weight bytes then runs 2(r - 1) = 2 rounds of W/2 bytes each:
  //   T = ceil(M/2) (F + B) + 2 (SR + W/(2 x 1e12))               without,
  //   T = ceil(M/2) (2F + B) + 2 (SR + W/(2 x 1e12))              with.
  PlatformCache cache;
  constexpr double kBandwidth = 1e12;
  for (const double hop : {0.0, 0.5, 1.5})
    for (const int m : {2, 3, 5, 8})
      for (const auto& [forward_s, backward_s] : {std::pair{1.0, 2.0}, std::pair{3.0, 1.0}})
        for (const bool recompute : {false, true}) {
          ScheduleOptions options;
          options.num_stages = 1;
          options.micro_batches = m;
          options.replicas = {2};
          options.recompute = recompute;
          sim::SimulationRequest request;
          request.platform_file = cache.get(2, DeviceKind::Gpu, hop);
          request.program = generate_schedule("dp", options);
          request.stages = testutil::balanced_stages(1, forward_s, backward_s);
          request.hosts = {{testutil::chain_host(0), testutil::chain_host(1)}};
          const Timeline timeline = sim::simulate(request).timeline;
          double start = timeline.records.front().start_s, end = timeline.records.front().end_s;
          int recomputations = 0;
          for (const TimelineRecord& record : timeline.records) {
            start = std::min(start, record.start_s);
            end = std::max(end, record.end_s);
            recomputations += record.action == "R";
          }
          const int per_replica = (m + 1) / 2;
          const double all_reduce = 2 * (hop + request.stages[0].weight_bytes / 2 / kBandwidth);
          const double expected = per_replica * ((recompute ? 2 : 1) * forward_s + backward_s) + all_reduce;
          EXPECT_TRUE(near(end - start, expected))
              << "M=" << m << " F=" << forward_s << " B=" << backward_s << " SR=" << hop << " recompute=" << recompute
              << ": simulated " << end - start << ", closed form " << expected;
          EXPECT_EQ(recomputations, recompute ? m : 0);
        }
}

}  // namespace
}  // namespace pipegrid

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);  // removes --gtest_* flags
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--full-grid") {
      pipegrid::g_full_grid = true;
    } else {
      std::fprintf(stderr, "%s: unknown argument '%s' (expected --full-grid or --gtest_* flags)\n", argv[0], argv[i]);
      return 2;
    }
  }
  return RUN_ALL_TESTS();
}
