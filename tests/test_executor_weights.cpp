// The executor's weight rules beyond the flush (validate/executor.hpp,
// WeightRule): PipeDream-2BW, vertical sync, PipeOptim's prediction, and
// replicated stages (all-reduce among replicas: replicated pipelines, dp,
// PipeDream's 1F1B-RR), plus FBP-AS's two streams per device. Each is
// checked against a sequential replay of its update formula (or the
// single-device reference for flushed ones) to a norm-wise relative error
// < 1e-5, against a wrong rule that must differ by clearly more, and its
// timeline against its Program.

#include <gtest/gtest.h>

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/program.hpp"
#include "schedules/schedules.hpp"
#include "tests/executor_test_util.hpp"
#include "tests/expect_input_error.hpp"
#include "validate/detail/model.hpp"
#include "validate/executor.hpp"
#include "validate/model_zoo.hpp"
#include "validate/transport.hpp"

namespace pipegrid::validate {
namespace {

using executor_test::expect_timeline_follows_program;
using pipegrid::testutil::input_error_of;
using executor_test::make_request;
using executor_test::relative_error;
using executor_test::small_model;

using Weights = std::vector<torch::Tensor>;

std::string scientific(double value) {
  std::ostringstream text;
  text << std::scientific << std::setprecision(2) << value;
  return text.str();
}

/** What the replay needs of a non-flushed Program (one micro-batch per
 *  mini-batch), per stage: which mini-batches each update averages, and the
 *  update count (version) each mini-batch's forward and backward see. */
struct StageReplay {
  std::vector<std::vector<int>> windows;  ///< update j: the mini-batches it averages (over all replicas)
  std::map<int, int> forward, backward;   ///< mini-batch -> updates done on its device before its F / its B
};

/** Reads the update points off the Program as the rules state them: a
 *  replicated stage updates after its all-reduces, any other after every
 *  `interval`-th backward of its device. */
std::vector<StageReplay> replay_plan(const Program& program, int interval) {
  std::vector<StageReplay> stages(program.num_stages);
  std::set<Action> ready;
  std::set<int> replicated;
  for (const AllReduce& all_reduce : program.all_reduces) {
    replicated.insert(all_reduce.stage);
    ready.insert(all_reduce.ready.begin(), all_reduce.ready.end());
  }
  for (const DeviceProgram& device : program.devices) {
    StageReplay& stage = stages[device.stages.front()];
    int updates = 0, backwards = 0;
    std::vector<int> pending;
    for (const Action& action : device.streams.at(0).actions) {
      if (action.kind == ActionKind::Forward) stage.forward[action.mini_batch] = updates;
      if (action.kind != ActionKind::Backward) continue;
      stage.backward[action.mini_batch] = updates;
      pending.push_back(action.mini_batch);
      ++backwards;
      if (replicated.count(device.stages.front()) ? ready.count(action) > 0 : backwards % interval == 0) {
        if (static_cast<int>(stage.windows.size()) <= updates) stage.windows.resize(updates + 1);
        stage.windows[updates].insert(stage.windows[updates].end(), pending.begin(), pending.end());
        pending.clear();
        ++updates;
      }
    }
  }
  return stages;
}

enum class Replayed { Stashed, VerticalSync, Prediction, Synchronous };

/** Sequential replay on one thread: mini-batch k's gradient is the whole
 *  model's, with stage s at version forward[k] in the forward and
 *  backward[k] in the backward (Stashed: both the forward's; VerticalSync:
 *  both stage 0's forward version; Prediction: the forward at
 *  w_a - lr (b - a) d_a, with a, b the versions at F and B and d_a the
 *  gradient of update a, the backward at w_b; Synchronous, the wrong rule:
 *  every gradient of window j at version j). Version j + 1 = version j - lr
 *  x the mean of window j's gradients. Returns each stage's final weights
 *  minus its initial ones. */
std::vector<std::vector<float>> replay(const ExecutionRequest& request, const std::vector<StageReplay>& plan, Replayed rule) {
  at::set_num_threads(1);
  const ModelConfig model = resolve_model(request.model);
  const int n = request.program.num_stages, K = request.program.mini_batches;
  const double lr = request.learning_rate;
  detail::LayerList layers = detail::build_layers(model, request.seed);
  std::vector<Weights> parameters(n);
  std::vector<std::vector<Weights>> versions(n), directions(n);
  for (int s = 0; s < n; ++s) {
    parameters[s] = detail::parameters_of(layers, request.stages[s].first, request.stages[s].second);
    Weights initial, zero;
    for (const torch::Tensor& p : parameters[s]) {
      initial.push_back(p.detach().clone());
      zero.push_back(torch::zeros_like(p));
    }
    versions[s].push_back(initial);
    directions[s].push_back(zero);
  }
  std::map<int, std::vector<Weights>> gradients;  // mini-batch -> per stage
  const auto ensure = [&](int s, int version) {
    while (static_cast<int>(versions[s].size()) <= version) {
      const int j = static_cast<int>(versions[s].size()) - 1;
      const std::vector<int>& window = plan[s].windows.at(j);
      Weights mean;
      for (std::size_t p = 0; p < parameters[s].size(); ++p) {
        torch::Tensor sum = torch::zeros_like(parameters[s][p]);
        for (int k : window) sum += gradients.at(k).at(s)[p];
        mean.push_back(sum / static_cast<double>(window.size()));
      }
      Weights next;
      for (std::size_t p = 0; p < mean.size(); ++p) next.push_back(versions[s][j][p] - lr * mean[p]);
      versions[s].push_back(next);
      directions[s].push_back(mean);
    }
  };
  const auto window_of = [&](int s, int k) {
    for (std::size_t j = 0; j < plan[s].windows.size(); ++j)
      if (std::count(plan[s].windows[j].begin(), plan[s].windows[j].end(), k)) return static_cast<int>(j);
    return static_cast<int>(plan[s].windows.size());  // a trailing partial window
  };
  const auto assign = [](const Weights& to, const Weights& values) {
    torch::NoGradGuard no_grad;
    for (std::size_t p = 0; p < to.size(); ++p) to[p].data().copy_(values[p]);
  };
  for (int k = 0; k < K; ++k) {
    std::vector<Weights> forward_weights(n), backward_weights(n);
    for (int s = 0; s < n; ++s) {
      int a = plan[s].forward.at(k), b = plan[s].backward.at(k);
      if (rule == Replayed::Stashed) b = a;
      if (rule == Replayed::VerticalSync) a = b = plan[0].forward.at(k);
      if (rule == Replayed::Synchronous) a = b = window_of(s, k);
      ensure(s, a);
      ensure(s, b);
      forward_weights[s] = versions[s][a];
      if (rule == Replayed::Prediction && b > a) {
        torch::NoGradGuard no_grad;
        forward_weights[s].clear();
        for (std::size_t p = 0; p < parameters[s].size(); ++p)
          forward_weights[s].push_back(versions[s][a][p] - lr * (b - a) * directions[s][a][p]);
      }
      backward_weights[s] = versions[s][b];
    }
    for (int s = 0; s < n; ++s) {
      assign(parameters[s], forward_weights[s]);
      for (torch::Tensor& p : parameters[s]) p.mutable_grad() = torch::Tensor();
    }
    const detail::Batch batch = detail::make_batch(model, request.seed, k, 0, request.micro_batch_size);
    const torch::Tensor loss = detail::loss_of(model, detail::run_layers(layers, 0, num_layers(model), batch.input), batch.target);
    for (int s = 0; s < n; ++s) assign(parameters[s], backward_weights[s]);
    loss.backward();
    for (int s = 0; s < n; ++s) {
      Weights grads;
      for (const torch::Tensor& p : parameters[s]) grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
      gradients[k].push_back(grads);
    }
  }
  std::vector<std::vector<float>> moves;
  for (int s = 0; s < n; ++s) {
    const int last = static_cast<int>(plan[s].windows.size());
    ensure(s, last);
    for (std::size_t p = 0; p < parameters[s].size(); ++p) {
      const torch::Tensor move = (versions[s][last][p] - versions[s][0][p]).contiguous().reshape({-1});
      moves.push_back(std::vector<float>(move.data_ptr<float>(), move.data_ptr<float>() + move.numel()));
    }
  }
  return moves;
}

/** `weights` (the whole model's, in layer order) minus the initial ones. */
std::vector<std::vector<float>> moves_from_start(const ExecutionRequest& request, std::vector<std::vector<float>> moves) {
  const ModelState initial = run_reference(request.model, 1, 0, request.micro_batch_size, request.learning_rate, request.seed);
  EXPECT_EQ(moves.size(), initial.weights.size());
  for (std::size_t p = 0; p < std::min(moves.size(), initial.weights.size()); ++p)
    for (std::size_t i = 0; i < moves[p].size(); ++i) moves[p][i] -= initial.weights[p][i];
  return moves;
}

/** The executor's final weights minus the initial ones, stage by stage. */
std::vector<std::vector<float>> executed_moves(const ExecutionRequest& request, const ExecutionResult& result) {
  std::vector<std::vector<float>> weights;
  for (const ModelState& stage : result.stages) weights.insert(weights.end(), stage.weights.begin(), stage.weights.end());
  return moves_from_start(request, weights);
}

struct StaleCase {
  std::string model, schedule;
  std::vector<int> replicas;  ///< one per stage
  int mini_batches;
  WeightRule rule;
  int update_interval = 0;  ///< pipedream-2bw (0: the number of stages)
};

void PrintTo(const StaleCase& c, std::ostream* out) {
  *out << c.model << " " << c.schedule << " " << to_string(c.rule) << " replicas";
  for (int r : c.replicas) *out << " " << r;
  *out << " K=" << c.mini_batches << " U=" << c.update_interval;
}

std::string stale_name(const testing::TestParamInfo<StaleCase>& info) {
  std::string name = info.param.model + "_" + to_string(info.param.rule) + "_r";
  for (int r : info.param.replicas) name += std::to_string(r);
  name += "_K" + std::to_string(info.param.mini_batches) + "_U" + std::to_string(info.param.update_interval);
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

class StaleWeights : public testing::TestWithParam<StaleCase> {};

// Final weights equal the replay of the rule's update formula; they differ
// from the synchronous (no-delay) rule, and vertical sync and prediction
// from plain stashing, by clearly more; the timeline is the Program's.
TEST_P(StaleWeights, EqualReplayOfTheUpdateFormula) {
  const StaleCase& c = GetParam();
  ScheduleOptions options;
  options.num_stages = static_cast<int>(c.replicas.size());
  options.micro_batches = 1;
  options.mini_batches = c.mini_batches;
  options.replicas = c.replicas;
  options.update_interval = c.update_interval;
  ExecutionRequest request = make_request(resolve_model(small_model(c.model)), c.schedule, options);
  request.weight_rule = c.rule;
  request.warmup_mini_batches = 1;
  // A larger step than the flushed tests' makes the staleness show well
  // above float32's rounding.
  request.learning_rate = 0.2;
  const ExecutionResult result = execute(request);
  expect_timeline_follows_program(request, result);

  const std::vector<StageReplay> plan = replay_plan(request.program, request.update_interval);
  const Replayed rule = c.rule == WeightRule::VerticalSync ? Replayed::VerticalSync
                        : c.rule == WeightRule::Prediction ? Replayed::Prediction
                                                           : Replayed::Stashed;
  const auto expected = replay(request, plan, rule);
  const auto executed = executed_moves(request, result);
  const double error = relative_error(executed, expected);
  EXPECT_LT(error, 1e-5);
  const double synchronous = relative_error(replay(request, plan, Replayed::Synchronous), expected);
  EXPECT_GT(synchronous, 1e-3);
  if (rule != Replayed::Stashed) {
    EXPECT_GT(relative_error(replay(request, plan, Replayed::Stashed), expected), 1e-3);
  }
  RecordProperty("relative_error", scientific(error));
  RecordProperty("synchronous_difference", scientific(synchronous));
}

INSTANTIATE_TEST_SUITE_P(
    Executor, StaleWeights,
    testing::Values(StaleCase{"mlp", "pipedream-2bw", {1, 1}, 9, WeightRule::TwoBW},
                    StaleCase{"mlp", "pipedream-2bw", {1, 1, 1}, 10, WeightRule::TwoBW, 4},
                    StaleCase{"gpt", "pipedream-2bw", {1, 1, 1}, 9, WeightRule::TwoBW},
                    StaleCase{"mlp", "pipedream-2bw", {2, 1}, 12, WeightRule::TwoBW},
                    StaleCase{"mlp", "pipedream", {1, 1, 1}, 8, WeightRule::VerticalSync},
                    StaleCase{"gpt", "pipedream", {1, 1, 1, 1}, 8, WeightRule::VerticalSync},
                    StaleCase{"mlp", "pipeoptim", {1, 1, 1}, 8, WeightRule::Prediction},
                    StaleCase{"gpt", "pipeoptim", {1, 1}, 7, WeightRule::Prediction},
                    StaleCase{"mlp", "pipedream", {2, 1}, 8, WeightRule::Stashing},
                    StaleCase{"mlp", "pipedream", {1, 2}, 8, WeightRule::Stashing},
                    StaleCase{"mlp", "pipedream", {2, 2}, 8, WeightRule::VerticalSync}),
    stale_name);

// The replay's versions for PipeDream-2BW are the paper's: with the update
// interval U >= N, a stage keeps at most 2 versions (the forwards of one
// update window see the two latest).
TEST(TwoBW, AtMostTwoVersionsInFlight) {
  ScheduleOptions options;
  options.num_stages = 3;
  options.mini_batches = 12;
  const Program program = generate_schedule("pipedream-2bw", options);
  const std::vector<StageReplay> plan = replay_plan(program, update_interval("pipedream-2bw", options));
  for (int s = 0; s < 3; ++s) {
    ASSERT_EQ(plan[s].windows.size(), 4u) << "stage " << s;  // 12 mini-batches / U = 3
    for (const auto& [k, version] : plan[s].forward) EXPECT_GE(version, plan[s].backward.at(k) - 1) << "stage " << s << " k " << k;
  }
}

struct FlushedCase {
  std::string model, schedule;
  std::vector<int> replicas;
  int micro_batches;
  bool recompute = false;
  bool wait_free = false;
};

void PrintTo(const FlushedCase& c, std::ostream* out) {
  *out << c.model << " " << c.schedule << " replicas";
  for (int r : c.replicas) *out << " " << r;
  *out << " M=" << c.micro_batches << (c.recompute ? " recompute" : "") << (c.wait_free ? " wait-free" : "");
}

std::string flushed_name(const testing::TestParamInfo<FlushedCase>& info) {
  std::string name = info.param.model + "_" + info.param.schedule + "_r";
  for (int r : info.param.replicas) name += std::to_string(r);
  name += "_M" + std::to_string(info.param.micro_batches) + (info.param.recompute ? "_recompute" : "") +
          (info.param.wait_free ? "_wait_free" : "");
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

class FlushedReplicas : public testing::TestWithParam<FlushedCase> {};

// Data parallelism, replicated pipelines and FBP-AS's two streams equal one
// SGD step per mini-batch on one device (gradients of the last mini-batch,
// weights after three updates); averaging the replicas' gradients instead of
// summing them (the wrong rule) is clearly off.
TEST_P(FlushedReplicas, MatchSingleDeviceReference) {
  const FlushedCase& c = GetParam();
  ScheduleOptions options;
  options.num_stages = static_cast<int>(c.replicas.size());
  options.micro_batches = c.micro_batches;
  options.mini_batches = 3;
  options.replicas = c.replicas;
  options.recompute = c.recompute;
  options.wait_free = c.wait_free;
  const ModelConfig model = resolve_model(small_model(c.model));
  ExecutionRequest request = make_request(model, c.schedule, options);
  request.warmup_mini_batches = 1;
  const ExecutionResult result = execute(request);
  expect_timeline_follows_program(request, result);
  const ModelState reference = run_reference(model, c.micro_batches, 3, request.micro_batch_size, request.learning_rate, request.seed);
  ModelState executed;
  for (const ModelState& stage : result.stages) {
    executed.weights.insert(executed.weights.end(), stage.weights.begin(), stage.weights.end());
    executed.gradients.insert(executed.gradients.end(), stage.gradients.begin(), stage.gradients.end());
  }
  EXPECT_LT(relative_error(executed.gradients, reference.gradients), 1e-5);
  const auto reference_moves = moves_from_start(request, reference.weights);
  const double error = relative_error(executed_moves(request, result), reference_moves);
  EXPECT_LT(error, 1e-5);
  RecordProperty("relative_error", scientific(error));
  const int r = *std::max_element(c.replicas.begin(), c.replicas.end());
  if (r > 1) {
    const ModelState averaged = run_reference(model, c.micro_batches, 3, request.micro_batch_size, request.learning_rate / r, request.seed);
    EXPECT_GT(relative_error(moves_from_start(request, averaged.weights), reference_moves), 1e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(Executor, FlushedReplicas,
                         testing::Values(FlushedCase{"mlp", "dp", {2}, 4}, FlushedCase{"mlp", "dp", {3}, 3},
                                         FlushedCase{"gpt", "dp", {2}, 4, false, true},
                                         FlushedCase{"mlp", "gpipe", {2, 1}, 4}, FlushedCase{"mlp", "1f1b-sno", {1, 2}, 4, true},
                                         FlushedCase{"gpt", "1f1b-so", {2, 2}, 4},
                                         FlushedCase{"mlp", "fbp-as", {1, 1}, 4}, FlushedCase{"mlp", "fbp-as", {1, 1, 1}, 5, true},
                                         FlushedCase{"gpt", "fbp-as", {1, 1}, 3}),
                         flushed_name);

// An all-reduce record per participant as the simulator writes them: stage,
// round (renumbered after the warm-up), layer -1, bytes 2(r-1)/r of the
// stage's gradients, peer the next replica.
TEST(AllReduce, RecordsLikeTheSimulator) {
  ScheduleOptions options;
  options.num_stages = 1;
  options.micro_batches = 4;
  options.mini_batches = 3;
  options.replicas = {2};
  const ModelConfig model = resolve_model(small_model("mlp"));
  ExecutionRequest request = make_request(model, "dp", options);
  request.warmup_mini_batches = 1;
  const ExecutionResult result = execute(request);
  double weight_bytes = 0;
  for (const auto& p : run_reference(model, 1, 0, 3, 0.05, 7).weights) weight_bytes += 4.0 * p.size();
  std::vector<std::tuple<std::string, int, int, std::string>> seen;
  for (const TimelineRecord& record : result.timeline.records)
    if (record.action == "ALLREDUCE") {
      EXPECT_DOUBLE_EQ(record.bytes, weight_bytes);  // 2 (r - 1) / r = 1
      seen.push_back({record.host, record.mini_batch, record.micro_batch, record.peer});
    }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::tuple<std::string, int, int, std::string>>{
                      {"cpu0", 0, -1, "cpu1"}, {"cpu0", 1, -1, "cpu1"}, {"cpu1", 0, -1, "cpu0"}, {"cpu1", 1, -1, "cpu0"}}));
}

// The in-process all-reduce: every participant gets the sum, bitwise the
// same, whatever order they join in; abort wakes a waiting participant.
TEST(Transport, AllReduceSumsInRankOrderAndAborts) {
  auto transport = make_in_process_transport(3);
  std::vector<std::vector<torch::Tensor>> tensors(3);
  for (int r = 0; r < 3; ++r) tensors[r] = {torch::full({2, 2}, 0.1f * (r + 1)), torch::full({3}, 1.0f + r)};
  std::vector<std::thread> threads;
  for (int r : {2, 0, 1}) threads.emplace_back([&, r] { transport->all_reduce(r, {0, 5, -1}, r, 3, tensors[r]); });
  for (std::thread& thread : threads) thread.join();
  const torch::Tensor expected = (torch::full({2, 2}, 0.1f) + torch::full({2, 2}, 0.2f)) + torch::full({2, 2}, 0.3f);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(torch::equal(tensors[r][0], expected)) << r;
    EXPECT_TRUE(torch::equal(tensors[r][1], torch::full({3}, 6.0f))) << r;
  }
  std::string error;
  std::thread waiter([&] {
    try {
      transport->all_reduce(0, {1, 0, -1}, 0, 2, tensors[0]);
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
  });
  transport->abort("cpu1 failed");
  waiter.join();
  EXPECT_EQ(error, "cpu1 failed");
}

TEST(BadInput, WeightRulesAndReplicas) {
  const ModelConfig model = small_model("mlp");
  ScheduleOptions options;
  options.num_stages = 2;
  options.micro_batches = 1;
  options.mini_batches = 5;
  options.replicas = {3, 1};
  ExecutionRequest request = make_request(model, "pipedream", options);
  request.weight_rule = WeightRule::Stashing;
  // Round 1 holds mini-batches 3 and 4: two of the three replicas.
  EXPECT_CONTAINS(input_error_of([&] { execute(request); }), "joins 2 of the stage's 3 replicas");
  options.micro_batches = 2;
  options.mini_batches = 2;
  request = make_request(model, "gpipe", options);
  EXPECT_CONTAINS(input_error_of([&] { execute(request); }), "at least as many micro-batches as replicas");
  request = make_request(model, "gpipe", 2, 2, 2);
  request.weight_rule = WeightRule::TwoBW;
  EXPECT_CONTAINS(input_error_of([&] { execute(request); }), "weight rule 2bw runs one micro-batch per mini-batch");
  request = make_request(model, "fbp-as", 2, 2, 2);
  request.weight_rule = WeightRule::Stashing;
  EXPECT_CONTAINS(input_error_of([&] { execute(request); }), "needs one stream per device");
}

}  // namespace
}  // namespace pipegrid::validate
