// Real execution on cpu:N (validate/): numerics against a single-device
// reference, the executor's timeline against its Program, the model zoo's
// stage splits. Small models so that the suite runs in seconds on 2 cores.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
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

using pipegrid::testutil::input_error_of;

using executor_test::expect_timeline_follows_program;
using executor_test::make_request;
using executor_test::relative_error;
using executor_test::small_model;

struct NumericsCase {
  std::string model, schedule;
  int stages, micro_batches;
  bool recompute = false;
};

void PrintTo(const NumericsCase& c, std::ostream* out) {
  *out << c.model << " " << c.schedule << " N=" << c.stages << " M=" << c.micro_batches << (c.recompute ? " recompute" : "");
}

std::string case_name(const testing::TestParamInfo<NumericsCase>& info) {
  std::string name = info.param.model + "_" + info.param.schedule + "_N" + std::to_string(info.param.stages) + "_M" +
                     std::to_string(info.param.micro_batches) + (info.param.recompute ? "_recompute" : "");
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

class Numerics : public testing::TestWithParam<NumericsCase> {};

// Pipelined with gradient accumulation == one step on the whole mini-batch,
// for the gradients of the last mini-batch and the weights after two updates.
TEST_P(Numerics, MatchesSingleDeviceReference) {
  const NumericsCase& c = GetParam();
  const ModelConfig model = small_model(c.model);
  const ExecutionRequest request = make_request(model, c.schedule, c.stages, c.micro_batches, 2, c.recompute);
  const ExecutionResult result = execute(request);
  const ModelState reference = run_reference(model, c.micro_batches, 2, request.micro_batch_size, request.learning_rate, request.seed);
  ModelState pipelined;
  ASSERT_EQ(result.stages.size(), static_cast<std::size_t>(c.stages));
  for (const ModelState& stage : result.stages) {
    pipelined.weights.insert(pipelined.weights.end(), stage.weights.begin(), stage.weights.end());
    pipelined.gradients.insert(pipelined.gradients.end(), stage.gradients.begin(), stage.gradients.end());
  }
  EXPECT_LT(relative_error(pipelined.gradients, reference.gradients), 1e-5);
  EXPECT_LT(relative_error(pipelined.weights, reference.weights), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Executor, Numerics,
                         testing::Values(NumericsCase{"mlp", "gpipe", 2, 4}, NumericsCase{"mlp", "1f1b-sno", 3, 4},
                                         NumericsCase{"mlp", "1f1b-so", 4, 5}, NumericsCase{"mlp", "gpipe", 4, 3},
                                         NumericsCase{"mlp", "1f1b-sno", 2, 3, true},
                                         NumericsCase{"gpt", "gpipe", 2, 4}, NumericsCase{"gpt", "1f1b-sno", 4, 4},
                                         NumericsCase{"gpt", "1f1b-so", 3, 5},
                                         NumericsCase{"gpt", "gpipe", 3, 2, true},
                                         NumericsCase{"gnmt", "1f1b-sno", 3, 3}, NumericsCase{"vgg16", "gpipe", 2, 2}),
                         case_name);

// PipeDream with weight stashing: the executor's weights after K mini-batches
// equal a sequential replay of the delayed-weights update (PipeDream section
// 3.3): mini-batch k's gradient is taken with stage s at the version its
// forward saw, which on a straight pipeline of n stages (NOAM = n) is
// k - (n - 1 - s) (0-based stage s, at least 0), and each stage's version
// j + 1 is version j minus lr times the gradient of mini-batch j.
class PipeDreamStashing : public testing::TestWithParam<std::pair<std::string, int>> {};

TEST_P(PipeDreamStashing, EqualsDelayedWeightsReplay) {
  at::set_num_threads(1);
  const auto& [name, n] = GetParam();
  const int K = 7;
  const ModelConfig model = resolve_model(small_model(name));
  ExecutionRequest request = make_request(model, "pipedream", n, 1, K);
  request.weight_rule = WeightRule::Stashing;
  const ExecutionResult result = execute(request);

  // The versions the Program gives each forward: updates (backwards) before it on its device.
  std::vector<std::vector<int>> used(n, std::vector<int>(K));
  for (const DeviceProgram& device : request.program.devices) {
    int updates = 0;
    for (const Action& action : device.streams[0].actions) {
      if (action.kind == ActionKind::Backward) ++updates;
      if (action.kind == ActionKind::Forward) used[device.stages.front()][action.mini_batch] = updates;
    }
    for (int k = 0; k < K; ++k) EXPECT_EQ(used[device.stages.front()][k], std::max(0, k - (n - 1 - device.stages.front()))) << "stage " << device.stages.front();
  }

  // Sequential replay on one thread.
  detail::LayerList layers = detail::build_layers(model, request.seed);
  std::vector<std::vector<std::vector<torch::Tensor>>> versions(n);  // [stage][version][parameter]
  for (int s = 0; s < n; ++s) {
    std::vector<torch::Tensor> initial;
    for (const torch::Tensor& p : detail::parameters_of(layers, request.stages[s].first, request.stages[s].second))
      initial.push_back(p.detach().clone());
    versions[s].push_back(initial);
  }
  for (int k = 0; k < K; ++k) {
    for (int s = 0; s < n; ++s) {
      torch::NoGradGuard no_grad;
      auto parameters = detail::parameters_of(layers, request.stages[s].first, request.stages[s].second);
      for (std::size_t p = 0; p < parameters.size(); ++p) parameters[p].copy_(versions[s][used[s][k]][p]);
    }
    auto all = detail::parameters_of(layers, 0, num_layers(model));
    for (torch::Tensor& p : all) p.mutable_grad() = torch::Tensor();
    const detail::Batch batch = detail::make_batch(model, request.seed, k, 0, request.micro_batch_size);
    detail::loss_of(model, detail::run_layers(layers, 0, num_layers(model), batch.input), batch.target).backward();
    for (int s = 0; s < n; ++s) {
      torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> next;
      auto parameters = detail::parameters_of(layers, request.stages[s].first, request.stages[s].second);
      for (std::size_t p = 0; p < parameters.size(); ++p)
        next.push_back(versions[s][k][p] - request.learning_rate * parameters[p].grad());
      versions[s].push_back(next);
    }
  }
  // Compare what the updates moved (final - initial weights): the weights
  // themselves are dominated by their initial values.
  const auto flat = [](const torch::Tensor& t) {
    const torch::Tensor f = t.contiguous().reshape({-1});
    return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  };
  std::vector<std::vector<float>> replay_moves, executed_moves, synchronous_moves;
  const ModelState synchronous = run_reference(model, 1, K, request.micro_batch_size, request.learning_rate, request.seed);
  std::size_t index = 0;
  for (int s = 0; s < n; ++s) {
    ASSERT_EQ(result.stages[s].weights.size(), versions[s][K].size());
    for (std::size_t p = 0; p < versions[s][K].size(); ++p, ++index) {
      const std::vector<float> initial = flat(versions[s][0][p]);
      replay_moves.push_back(flat(versions[s][K][p] - versions[s][0][p]));
      executed_moves.push_back(result.stages[s].weights[p]);
      synchronous_moves.push_back(synchronous.weights[index]);
      for (std::size_t i = 0; i < initial.size(); ++i) {
        executed_moves.back()[i] -= initial[i];
        synchronous_moves.back()[i] -= initial[i];
      }
    }
  }
  EXPECT_LT(relative_error(executed_moves, replay_moves), 1e-5);
  // Stale weights are not the synchronous update: without the delay the moves differ.
  EXPECT_GT(relative_error(synchronous_moves, replay_moves), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Executor, PipeDreamStashing,
                         testing::Values(std::pair{std::string("mlp"), 2}, std::pair{std::string("mlp"), 4},
                                         std::pair{std::string("gpt"), 3}),
                         [](const auto& info) { return info.param.first + "_N" + std::to_string(info.param.second); });

// The updates are real: after two mini-batches the weights moved.
TEST(Executor, WeightsChange) {
  const ModelConfig model = small_model("mlp");
  const ModelState before = run_reference(model, 2, 0, 3, 0.05, 7);
  const ModelState after = run_reference(model, 2, 2, 3, 0.05, 7);
  EXPECT_GT(relative_error(after.weights, before.weights), 1e-4);
}

// Every action of the measured mini-batches appears once, in program order
// per device, with start < end; sends carry bytes to the next stage's device.
TEST(Executor, TimelineHoldsEveryActionOnceInProgramOrder) {
  for (const std::string schedule : {"gpipe", "1f1b-sno", "1f1b-so"}) {
    ExecutionRequest request = make_request(small_model("mlp"), schedule, 3, 4, 3, schedule == "gpipe");
    request.warmup_mini_batches = 1;
    request.keep_state = false;
    const ExecutionResult result = execute(request);
    EXPECT_EQ(result.measured_mini_batches, 2);
    EXPECT_GT(result.minibatch_time_s, 0);
    expect_timeline_follows_program(request, result);
    int sends = 0;
    for (const TimelineRecord& record : result.timeline.records) sends += record.kind() == RecordKind::Transfer;
    EXPECT_EQ(sends, 2 * 2 * 4 * 2);  // 2 cuts, 2 directions, M = 4, 2 mini-batches
    for (const DeviceSummary& device : result.devices) EXPECT_GT(device.busy_s, 0);
  }
}

// Messages are matched by key, whatever order they are sent in; a receiver
// gets a copy; abort() wakes a waiting receiver with the reason.
TEST(Transport, MatchesByKeyCopiesAndAborts) {
  auto transport = make_in_process_transport(2);
  using Kind = MessageKey::Kind;
  torch::Tensor a = torch::full({2}, 1.0f), b = torch::full({2}, 2.0f);
  transport->send(1, {Kind::Activation, 1, 1, 0}, b);
  transport->send(1, {Kind::Activation, 1, 0, 0}, a);
  a.fill_(9.0f);
  EXPECT_TRUE(torch::equal(transport->receive(1, {Kind::Activation, 1, 0, 0}), torch::full({2}, 1.0f)));
  EXPECT_TRUE(torch::equal(transport->receive(1, {Kind::Activation, 1, 1, 0}), b));
  std::string error;
  std::thread waiter([&] {
    try {
      transport->receive(0, {Kind::Gradient, 0, 0, 0});
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
  });
  transport->abort("cpu1 failed");
  waiter.join();
  EXPECT_EQ(error, "cpu1 failed");
}

// Any contiguous split of a zoo model into stages composes to the model.
TEST(ModelZoo, StageSplitsComposeToTheWholeModel) {
  at::set_num_threads(1);
  std::mt19937 random(11);
  for (const std::string& name : model_names()) {
    const ModelConfig model = resolve_model(small_model(name));
    const detail::LayerList layers = detail::build_layers(model, 3);
    const int count = num_layers(model);
    ASSERT_EQ(static_cast<int>(layers.size()), count) << name;
    const detail::Batch batch = detail::make_batch(model, 3, 0, 0, 2);
    torch::NoGradGuard no_grad;
    const torch::Tensor whole = detail::run_layers(layers, 0, count, batch.input);
    for (int trial = 0; trial < 5; ++trial) {
      const int stages = std::uniform_int_distribution<int>(1, count)(random);
      std::vector<int> cuts(count - 1);
      for (int i = 0; i < count - 1; ++i) cuts[i] = i + 1;
      std::shuffle(cuts.begin(), cuts.end(), random);
      cuts.resize(stages - 1);
      std::sort(cuts.begin(), cuts.end());
      cuts.insert(cuts.begin(), 0);
      cuts.push_back(count);
      torch::Tensor x = batch.input;
      for (int s = 0; s < stages; ++s) x = detail::run_layers(layers, cuts[s], cuts[s + 1], x);
      EXPECT_TRUE(torch::equal(x, whole)) << name << " split " << trial << " (seed 11)";
    }
  }
}

TEST(ModelZoo, SameSeedSameWeights) {
  const ModelConfig model = small_model("gpt");
  const auto a = detail::parameters_of(detail::build_layers(model, 5), 0, num_layers(model));
  const auto b = detail::parameters_of(detail::build_layers(model, 5), 0, num_layers(model));
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));
}

TEST(ModelZoo, LayerCounts) {
  EXPECT_EQ(num_layers({"vgg16", {}}), 21);
  EXPECT_EQ(num_layers({"mlp", {{"layers", 5}}}), 5);
  EXPECT_EQ(num_layers({"gnmt", {{"layers", 8}}}), 10);
  EXPECT_EQ(num_layers({"gpt", {{"layers", 12}}}), 14);
}

TEST(ModelZoo, GptFfnDefaultsToFourTimesHidden) {
  const ModelConfig given = resolve_model({"gpt", {{"hidden", 32}, {"heads", 2}, {"layers", 1}}});
  EXPECT_EQ(given.options.at("ffn"), 128);
  // The same weights as an explicit --ffn 128; another ffn, another shape.
  const auto a = detail::parameters_of(detail::build_layers(given, 3), 0, num_layers(given));
  const ModelConfig explicit_ffn = resolve_model({"gpt", {{"hidden", 32}, {"heads", 2}, {"layers", 1}, {"ffn", 128}}});
  const auto b = detail::parameters_of(detail::build_layers(explicit_ffn, 3), 0, num_layers(explicit_ffn));
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));
  const ModelConfig narrow = resolve_model({"gpt", {{"hidden", 32}, {"heads", 2}, {"layers", 1}, {"ffn", 48}}});
  int64_t count = 0, narrow_count = 0;
  for (const torch::Tensor& parameter : a) count += parameter.numel();
  for (const torch::Tensor& parameter : detail::parameters_of(detail::build_layers(narrow, 3), 0, num_layers(narrow)))
    narrow_count += parameter.numel();
  // up (32 x ffn + ffn) and down (ffn x 32 + 32): 65 parameters per unit of ffn.
  EXPECT_EQ(count - narrow_count, 65 * (128 - 48));
}

TEST(ModelZoo, SpecRoundTripsAndNamesItsOrigin) {
  const ModelConfig model = resolve_model({"gpt", {{"hidden", 32}, {"heads", 2}}});
  const std::string spec = model_to_spec(model);
  EXPECT_EQ(spec, "gpt ffn=128 heads=2 hidden=32 layers=4 sequence=32 vocabulary=1024");
  const ModelConfig back = model_from_spec(spec, "p.json");
  EXPECT_EQ(back.name, model.name);
  EXPECT_EQ(back.options, model.options);
  EXPECT_EQ(model_from_spec("mlp  layers=3", "p.json").options.at("layers"), 3);
  EXPECT_CONTAINS(input_error_of([] { model_from_spec("", "p.json"); }), "p.json: model: expected");
  EXPECT_CONTAINS(input_error_of([] { model_from_spec("resnet layers=3", "p.json"); }), "p.json: model 'resnet layers=3'");
  EXPECT_CONTAINS(input_error_of([] { model_from_spec("mlp layers", "p.json"); }), "expected key=value");
  EXPECT_CONTAINS(input_error_of([] { model_from_spec("mlp hidden=-3", "p.json"); }), "positive integer");
  EXPECT_CONTAINS(input_error_of([] { model_from_spec("vgg16 image=40", "p.json"); }), "image=40: vgg16 halves");
}

TEST(ModelZoo, OldNamesAreErrorsThatNameTheNewOnes) {
  EXPECT_EQ(input_error_of([] { resolve_model({"transformer", {}}); }), "--model: unknown model 'transformer'; did you mean 'gpt'?");
  EXPECT_EQ(input_error_of([] { resolve_model({"mlp", {{"width", 64}}}); }), "--width: mlp has no option 'width'; did you mean --hidden?");
  EXPECT_EQ(input_error_of([] { resolve_model({"mlp", {{"depth", 4}}}); }), "--depth: mlp has no option 'depth'; did you mean --layers?");
  EXPECT_CONTAINS(input_error_of([] { resolve_model({"gnmt", {{"vocab", 4}}}); }), "did you mean --vocabulary?");
  EXPECT_CONTAINS(input_error_of([] { resolve_model({"gnmt", {{"seq", 4}}}); }), "did you mean --sequence?");
  EXPECT_CONTAINS(input_error_of([] { resolve_model({"gpt", {{"width", 4}}}); }), "did you mean --hidden?");
  // In a calibrated profile's spec: the file, the spec, the new name.
  EXPECT_EQ(input_error_of([] { model_from_spec("mlp classes=10 depth=4 width=64", "plan.json: profile"); }),
            "plan.json: profile: model 'mlp classes=10 depth=4 width=64': mlp has no option 'depth'; did you mean 'layers'?");
  EXPECT_EQ(input_error_of([] { model_from_spec("transformer heads=2", "p.json"); }),
            "p.json: model 'transformer heads=2': unknown model 'transformer'; did you mean 'gpt'?");
  EXPECT_EQ(current_option_name("mlp", "width"), "hidden");
  EXPECT_EQ(current_option_name("transformer", "seq"), "sequence");
  EXPECT_EQ(current_option_name("vgg16", "width"), "width");
}

TEST(BadInput, ModelsDevicesAndRanges) {
  EXPECT_CONTAINS(input_error_of([] { resolve_model({"resnet", {}}); }), "unknown model 'resnet'; expected one of: mlp, vgg16, gnmt, gpt");
  EXPECT_CONTAINS(input_error_of([] { resolve_model({"mlp", {{"heads", 2}}}); }),
                  "--heads: mlp has no option 'heads'; expected one of: --layers, --hidden, --classes");
  EXPECT_CONTAINS(input_error_of([] { resolve_model({"vgg16", {{"image", 40}}}); }), "--image 40: vgg16 halves the image 5 times");
  EXPECT_CONTAINS(input_error_of([] { resolve_model({"gpt", {{"hidden", 30}, {"heads", 4}}}); }), "--hidden 30: expected a multiple of heads");
  EXPECT_CONTAINS(input_error_of([] { resolve_model({"gpt", {{"ffn", 0}}}); }), "--ffn 0: expected a positive integer");
  EXPECT_CONTAINS(input_error_of([] { parse_device_spec("gpu:2"); }), "expected cpu, cpu:N");
  EXPECT_CONTAINS(input_error_of([] { parse_device_spec("cpu:0"); }), "expected cpu, cpu:N");
  EXPECT_CONTAINS(input_error_of([] { parse_device_spec("cuda-partitioned"); }), "cuda-partitioned:N");
  EXPECT_CONTAINS(input_error_of([] { parse_device_spec("cuda:x"); }), "expected cpu, cpu:N");
  EXPECT_EQ(parse_device_spec("cpu:3").count, 3);
  EXPECT_EQ(parse_device_spec("cuda").kind, "cuda");
  EXPECT_EQ(parse_device_spec("cuda:2").count, 2);
  const DeviceSpec partitioned = parse_device_spec("cuda-partitioned:4");
  EXPECT_EQ(partitioned.kind, "cuda-partitioned");
  EXPECT_EQ(partitioned.count, 4);
  EXPECT_CONTAINS(input_error_of([] { uniform_ranges(3, 4); }), "only 3 layers");
  EXPECT_CONTAINS(input_error_of([] { ranges_from_counts({2, 2}, 6); }), "add up to 4");
  ExecutionRequest request = make_request(small_model("mlp"), "gpipe", 2, 2, 1);
  request.device = parse_device_spec("cpu:3");
  EXPECT_CONTAINS(input_error_of([&] { execute(request); }), "expected cpu:2");
  if (!cuda_devices_built()) {
    request.device = parse_device_spec("cuda-partitioned:2");
    EXPECT_CONTAINS(input_error_of([&] { execute(request); }), "this build has no CUDA LibTorch");
  }
  request.device = {};
  request.copy_through_host = true;
  EXPECT_CONTAINS(input_error_of([&] { execute(request); }), "only for cuda devices");
  request.copy_through_host = false;
  request.warmup_mini_batches = 1;
  EXPECT_CONTAINS(input_error_of([&] { execute(request); }), "--warmup 1");
}

}  // namespace
}  // namespace pipegrid::validate
