// libFuzzer target: experiment files (sweep::plan_experiment: the TOML
// reader, includes, axes, bundles, derive, where, expansion and run keys).
// The input is written to experiment.toml in a private folder (the reader
// takes a file; includes and globs resolve next to it) and planned with a
// fixed list of parameters and InputQueries that read no file. Only
// InputError may escape the reader; a plan must hold what its contract says
// (indices in order, unique labels, 16-hex-digit keys).

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "sweep/experiment.hpp"
#include "tests/fuzz/fuzz_common.hpp"

namespace {

using pipegrid::sweep::ParameterSpec;

std::vector<ParameterSpec> simulate_parameters() {
  using Kind = ParameterSpec::Kind;
  const auto make = [](const char* name, const char* flag, Kind kind) {
    ParameterSpec spec;
    spec.name = name;
    spec.flag = flag;
    spec.kind = kind;
    return spec;
  };
  std::vector<ParameterSpec> specs = {
      make("platform", "--platform", Kind::Path),       make("profile", "--profile", Kind::Path),
      make("schedule", "--schedule", Kind::Text),       make("micro_batches", "--micro-batches", Kind::Int),
      make("mini_batches", "--mini-batches", Kind::Int), make("partition", "--partition", Kind::Path),
      make("replicas", "--replicas", Kind::Text),       make("network", "--network", Kind::Text),
      make("memory", "--memory", Kind::Text),           make("recompute", "--recompute", Kind::Flag),
      make("micro_batch_size", "--micro-batch-size", Kind::Real),
      make("prediction_cost", "--prediction-cost", Kind::Real),
      make("partitioner", "--partitioner", Kind::Text)};
  specs[5].literals = {"uniform"};
  ParameterSpec machines = make("machines", "--machines", Kind::Text);
  machines.several = true;
  specs.push_back(machines);
  return specs;
}

/// A private folder for the input file, made once and removed at exit (the
/// name is never destroyed: the exit hook runs after static destructors).
const std::string& folder() {
  static const std::string* const path = [] {
    char pattern[] = "/tmp/pipegrid-fuzz-experiment-XXXXXX";
    if (!mkdtemp(pattern)) std::abort();
    const std::string* name = new std::string(pattern);
    std::atexit([] { std::filesystem::remove_all(folder()); });
    return name;
  }();
  return *path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  const std::string file = folder() + "/experiment.toml";
  {
    FILE* out = std::fopen(file.c_str(), "wb");
    if (!out) std::abort();
    if (size > 0 && std::fwrite(data, 1, size, out) != size) std::abort();
    std::fclose(out);
  }
  static const std::vector<ParameterSpec> parameters = simulate_parameters();
  const sweep::ParametersOf parameters_of = [](const std::string& command) -> std::optional<std::vector<ParameterSpec>> {
    if (command == "model") return std::nullopt;
    return parameters;
  };
  sweep::InputQueries queries;
  queries.hosts = [](const sweep::Setting&) { return 4LL; };
  queries.layers = [](const sweep::Setting&) { return 8LL; };
  queries.content_hash = [](const sweep::Setting& setting) {
    return sweep::sha256_hex(setting.resolved_path + "\n" + setting.value.to_text());
  };
  const std::vector<std::string> capabilities = {"simulate", "partition", "sweep"};
  try {
    const sweep::ExperimentPlan plan = sweep::plan_experiment(file, parameters_of, capabilities, {}, queries);
    std::set<std::string> labels;
    int previous = -1;
    for (const sweep::PlannedRun& run : plan.runs) {
      fuzz::fuzz_check(run.run_index > previous, "run indices out of order");
      previous = run.run_index;
      fuzz::fuzz_check(labels.insert(run.label).second, "two runs with one label");
      fuzz::fuzz_check(run.key.size() == 16 && run.key.find_first_not_of("0123456789abcdef") == std::string::npos,
                       "a run key that is not 16 hex digits");
    }
    fuzz::fuzz_check(static_cast<int>(plan.runs.size()) == plan.runs_after_file_where, "runs lost without --where");
    fuzz::fuzz_check(plan.runs_after_file_where <= plan.runs_before_where, "more runs after where than before");
    const std::vector<sweep::PlannedRun> shard = sweep::runs_of_shard(plan.runs, {1, 3});
    fuzz::fuzz_check(shard.size() <= plan.runs.size(), "a shard larger than the plan");
  } catch (const InputError&) {
  }
  return 0;
}
