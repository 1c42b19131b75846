// Experiment files: expansion (bundles, when, derive, where, range, geom,
// glob, includes, --set), errors with FILE:LINE and the key, run keys.

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "expect_input_error.hpp"
#include "sweep/experiment.hpp"

namespace pipegrid::sweep {
namespace {

namespace fs = std::filesystem;

std::vector<ParameterSpec> parameters() {
  using K = ParameterSpec::Kind;
  return {{"platform", "--platform", K::Path, {}},       {"profile", "--profile", K::Path, {}},
          {"schedule", "--schedule", K::Text, {}},       {"micro_batches", "--micro-batches", K::Int, {}},
          {"micro_batch_size", "--micro-batch-size", K::Int, {}}, {"partition", "--partition", K::Path, {"uniform"}},
          {"network", "--network", K::Text, {}},         {"memory", "--memory", K::Text, {}},
          {"recompute", "--recompute", K::Flag, {}},     {"partitioner", "--partitioner", K::Text, {}},
          {"prediction_cost", "--prediction-cost", K::Real, {}}};
}

class SweepExperiment : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pipegrid-sweep-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "p");
    write("p/a.xml", "<a/>");
    write("p/b.xml", "<b/>");
    write("p/c.txt", "c");
    write("same-as-a.xml", "<a/>");
    write("m/gnmt/graph.txt", "gnmt");
    write("m/vgg16/graph.txt", "vgg");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name) << text;
  }
  InputQueries queries() {
    InputQueries q;
    q.content_hash = [](const Setting& s) {
      if (!s.inline_platform.empty()) return sha256_hex(s.value.text);
      std::ifstream in(s.resolved_path);
      if (!in) throw InputError("missing " + s.resolved_path);
      std::string text((std::istreambuf_iterator<char>(in)), {});
      return sha256_hex(text);
    };
    q.hosts = [](const Setting& s) -> long long { return s.resolved_path.find("b.xml") != std::string::npos ? 8 : 4; };
    q.layers = [](const Setting&) -> long long { return 40; };
    return q;
  }
  ExperimentPlan plan(const std::string& text, PlanOptions options = {}) {
    write("e.toml", text);
    return plan_experiment((dir_ / "e.toml").string(), [](const std::string&) { return std::optional(parameters()); }, {"simulate"}, options, queries());
  }
  std::string error_of(const std::string& text, PlanOptions options = {}) {
    try {
      plan(text, options);
    } catch (const InputError& error) {
      return error.what();
    }
    return "no error";
  }
  fs::path dir_;
};

const char* kHeader = "schema = 1\nname = \"t\"\n";

TEST_F(SweepExperiment, BundlesWithListsExpandAndLabelsJoinAxisValues) {
  const ExperimentPlan p = plan(std::string(kHeader) + R"T(labels = ["system"]
[defaults]
profile = "p/c.txt"
[[axis]]
name = "platform"
values = ["p/a.xml", "p/b.xml"]
[[axis]]
name = "system"
values = [ { system = "GPipe", schedule = "gpipe" },
           { system = "BaPipe", schedule = ["1f1b-sno", "1f1b-so"], partitioner = "bapipe" } ]
[[axis]]
name = "micro_batches"
values = [4, 8]
)T");
  ASSERT_EQ(p.runs.size(), 2u * 3u * 2u);
  EXPECT_EQ(p.runs[0].label, "a|GPipe|M=4");
  EXPECT_EQ(p.runs[2].label, "a|BaPipe|1f1b-sno|M=4");
  EXPECT_EQ(p.runs[5].label, "a|BaPipe|1f1b-so|M=8");
  EXPECT_EQ(p.runs[6].label, "b|GPipe|M=4");
  // Columns: axes' keys in file order, then defaults.
  EXPECT_EQ(p.columns, (std::vector<std::string>{"platform", "system", "schedule", "partitioner", "micro_batches", "profile"}));
  EXPECT_EQ(p.runs[0].settings.count("partitioner"), 0u);
  EXPECT_EQ(p.runs[2].settings.at("partitioner").value.text, "bapipe");
  for (std::size_t i = 0; i < p.runs.size(); ++i) EXPECT_EQ(p.runs[i].run_index, static_cast<int>(i));
}

TEST_F(SweepExperiment, ReadingAnAbsentParameterIsAnErrorUnlessGuarded) {
  const std::string base = std::string(kHeader) + R"T(
[defaults]
platform = "p/a.xml"
[[axis]]
name = "schedule"
values = ["dp", "gpipe"]
[[axis]]
name = "micro_batches"
geom = { from = 1, to = 64, factor = 2 }
when = "schedule != 'dp'"
)T";
  const std::string unguarded = base + "[[where]]\nrule = \"micro_batches >= hosts(platform)\"\n";
  EXPECT_NE(error_of(unguarded).find("micro_batches"), std::string::npos) << error_of(unguarded);
  const ExperimentPlan p = plan(base + R"T([derive]
micro_batch_size = "if(has(micro_batches), 256 / micro_batches, 256)"
[[where]]
rule = "not has(micro_batches) or micro_batches >= hosts(platform)"
why = "fewer micro-batches than stages"
)T");
  // dp: 1 run; gpipe: M = 1, 2, ..., 64 (7 values), 1 and 2 dropped (4 hosts).
  ASSERT_EQ(p.runs.size(), 1u + 5u);
  EXPECT_EQ(p.runs_before_where, 8);
  ASSERT_EQ(p.where_rules.size(), 1u);
  EXPECT_EQ(p.where_rules[0].dropped, 2);
  EXPECT_EQ(p.runs[0].label, "dp");
  EXPECT_EQ(p.runs[0].settings.at("micro_batch_size").value.integer, 256);
  EXPECT_EQ(p.runs[1].label, "gpipe|M=4");
  EXPECT_EQ(p.runs[1].settings.at("micro_batch_size").value.kind, Scalar::Kind::Int);
  EXPECT_EQ(p.runs[1].settings.at("micro_batch_size").value.integer, 64);
  EXPECT_EQ(p.runs.back().label, "gpipe|M=64");
}

TEST_F(SweepExperiment, DerivedIntegerParameterThatIsNotIntegralIsAnError) {
  const std::string error = error_of(std::string(kHeader) + R"T(
[[axis]]
name = "micro_batches"
values = [3]
[derive]
micro_batch_size = "256 / micro_batches"
)T");
  EXPECT_NE(error.find("e.toml:8: derive.micro_batch_size"), std::string::npos) << error;
  EXPECT_NE(error.find("micro_batch_size must be an integer"), std::string::npos) << error;
}

TEST_F(SweepExperiment, RangeIsInclusiveGeomHitsToOnlyExactly) {
  const ExperimentPlan r = plan(std::string(kHeader) + "[[axis]]\nname = \"micro_batches\"\nrange = { from = 2, to = 10, step = 4 }\n");
  ASSERT_EQ(r.runs.size(), 3u);  // 2, 6, 10
  EXPECT_EQ(r.runs[2].settings.at("micro_batches").value.integer, 10);
  const ExperimentPlan g = plan(std::string(kHeader) + "[[axis]]\nname = \"micro_batches\"\ngeom = { from = 3, to = 40, factor = 3 }\n");
  ASSERT_EQ(g.runs.size(), 3u);  // 3, 9, 27
  EXPECT_EQ(g.runs[2].settings.at("micro_batches").value.integer, 27);
  const ExperimentPlan exact = plan(std::string(kHeader) + "[[axis]]\nname = \"micro_batches\"\ngeom = { from = 1, to = 32, factor = 2 }\n");
  EXPECT_EQ(exact.runs.size(), 6u);
}

TEST_F(SweepExperiment, GlobIsSortedAndRelativeToTheFile) {
  const ExperimentPlan p = plan(std::string(kHeader) + "[[axis]]\nname = \"platform\"\nglob = \"p/*.xml\"\n");
  ASSERT_EQ(p.runs.size(), 2u);
  EXPECT_EQ(p.runs[0].settings.at("platform").value.text, "p/a.xml");
  EXPECT_EQ(p.runs[1].settings.at("platform").value.text, "p/b.xml");
  EXPECT_EQ(p.runs[0].label, "a");
  EXPECT_NE(error_of(std::string(kHeader) + "[[axis]]\nname = \"platform\"\nglob = \"q/*.xml\"\n").find("matches no file"), std::string::npos);
}

TEST_F(SweepExperiment, LabelsOfGraphFilesUseTheirFolder) {
  const ExperimentPlan p = plan(std::string(kHeader) + "[[axis]]\nname = \"profile\"\nvalues = [\"m/gnmt/graph.txt\", \"m/vgg16/graph.txt\"]\n");
  EXPECT_EQ(p.runs[0].label, "gnmt");
  EXPECT_EQ(p.runs[1].label, "vgg16");
}

TEST_F(SweepExperiment, IncludesComeFirstAndTheFileWins) {
  write("_base/b.toml", "schema = 1\n[defaults]\nnetwork = \"analytic\"\nplatform = \"../p/a.xml\"\nschedule = \"gpipe\"\n");
  const ExperimentPlan p = plan(std::string(kHeader) + "include = [\"_base/b.toml\"]\n[defaults]\nschedule = \"1f1b-so\"\n");
  ASSERT_EQ(p.runs.size(), 1u);
  EXPECT_EQ(p.runs[0].settings.at("network").value.text, "analytic");
  EXPECT_EQ(p.runs[0].settings.at("schedule").value.text, "1f1b-so");
  // The base's path is relative to the base.
  EXPECT_EQ(fs::path(p.runs[0].settings.at("platform").resolved_path), (dir_ / "p/a.xml").lexically_normal());
  ASSERT_EQ(p.includes.size(), 1u);
  write("_base/loop.toml", "schema = 1\ninclude = [\"loop.toml\"]\n");
  EXPECT_NE(error_of(std::string(kHeader) + "include = [\"_base/loop.toml\"]\n").find("includes itself"), std::string::npos);
}

TEST_F(SweepExperiment, AbsoluteGlobGivesTheSameValuesWhateverTheExperimentPath) {
  const std::string text = std::string(kHeader) + "[[axis]]\nname = \"platform\"\nglob = \"" + (dir_ / "p").string() + "/*.xml\"\n";
  write("e.toml", text);
  const auto parameters_of = [](const std::string&) { return std::optional(parameters()); };
  const ExperimentPlan absolute = plan_experiment((dir_ / "e.toml").string(), parameters_of, {"simulate"}, {}, queries());
  const fs::path before = fs::current_path();
  fs::current_path(dir_);
  ExperimentPlan relative;
  try {
    relative = plan_experiment("e.toml", parameters_of, {"simulate"}, {}, queries());
  } catch (...) {
    fs::current_path(before);
    throw;
  }
  fs::current_path(before);
  for (const ExperimentPlan* p : std::vector<const ExperimentPlan*>{&absolute, &relative}) {
    ASSERT_EQ(p->runs.size(), 2u);
    EXPECT_EQ(p->runs[0].settings.at("platform").value.text, (dir_ / "p/a.xml").string());
    EXPECT_EQ(p->runs[0].settings.at("platform").resolved_path, (dir_ / "p/a.xml").string());
    EXPECT_EQ(p->runs[1].label, "b");
  }
  EXPECT_EQ(absolute.runs[0].key, relative.runs[0].key);
}

TEST_F(SweepExperiment, GlobValuesAreFilesNeverFolders) {
  fs::create_directories(dir_ / "p/sub.xml");  // a folder named like a match
  const ExperimentPlan p = plan(std::string(kHeader) + "[[axis]]\nname = \"platform\"\nglob = \"p/*.xml\"\n");
  ASSERT_EQ(p.runs.size(), 2u);
  EXPECT_EQ(p.runs[1].settings.at("platform").value.text, "p/b.xml");
  const std::string error = error_of(std::string(kHeader) + "[[axis]]\nname = \"profile\"\nglob = \"m/*\"\n");
  EXPECT_NE(error.find("e.toml:5: glob 'm/*'"), std::string::npos) << error;
  EXPECT_NE(error.find("matches only folders (2), no file"), std::string::npos) << error;
}

TEST_F(SweepExperiment, LabelsNamedLikeResultColumnsAreRefused) {
  for (const char* name : {"status", "run_key", "reason", "label", "run_index", "shard", "sim_wall_s", "throughput_samples_per_s",
                           "host", "busy_s", "total_flops", "partition_result"}) {
    const std::string error = error_of(std::string(kHeader) + "labels = [\"tag\", \"" + name + "\"]\n");
    EXPECT_NE(error.find(fmt::format("e.toml:3: labels: '{}' is a column of the results", name)), std::string::npos) << error;
    EXPECT_NE(error.find("run_key, run_index, label, status, reason"), std::string::npos) << error;
  }
  EXPECT_NE(error_of(std::string(kHeader) + "labels = [\"x\", \"x\"]\n").find("e.toml:3: labels: 'x' is listed twice"), std::string::npos);
  EXPECT_NE(error_of(std::string(kHeader) + "labels = [\"\"]\n").find("e.toml:3: labels: an empty name"), std::string::npos);
  EXPECT_EQ(plan(std::string(kHeader) + "labels = [\"status_note\"]\n").runs.size(), 1u);
}

TEST_F(SweepExperiment, DeriveOfAKeyAnAxisSetsIsAnError) {
  const std::string error = error_of(std::string(kHeader) + R"T(
[[axis]]
name = "micro_batches"
values = [2, 4]
[derive]
micro_batches = "3"
)T");
  EXPECT_NE(error.find("e.toml:8: derive.micro_batches: axis 'micro_batches' (" + (dir_ / "e.toml").string() + ":5) sets 'micro_batches' too"),
            std::string::npos)
      << error;
  // A bundle's key too.
  const std::string bundle = error_of(std::string(kHeader) + R"T(labels = ["system"]
[[axis]]
name = "system"
values = [ { system = "a", schedule = "gpipe" } ]
[derive]
schedule = "'1f1b'"
)T");
  EXPECT_NE(bundle.find("derive.schedule: axis 'system'"), std::string::npos) << bundle;
}

TEST_F(SweepExperiment, SetReplacesADerivedKeyAndSaysSo) {
  PlanOptions options;
  options.sets = {"micro_batch_size=8"};
  const ExperimentPlan p = plan(std::string(kHeader) + "[defaults]\nmicro_batches = 4\n[derive]\nmicro_batch_size = \"256 / micro_batches\"\n", options);
  ASSERT_EQ(p.runs.size(), 1u);
  EXPECT_EQ(p.runs[0].settings.at("micro_batch_size").value.integer, 8);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("--set micro_batch_size=8 replaces derive.micro_batch_size = '256 / micro_batches' (" + (dir_ / "e.toml").string() + ":6)"),
            std::string::npos)
      << p.notes[0];
}

TEST_F(SweepExperiment, AnIntegralFloatIsAnIntegerEverywhere) {
  const ExperimentPlan d = plan(std::string(kHeader) + "[defaults]\nmicro_batches = 2.0\n");
  EXPECT_EQ(d.runs[0].settings.at("micro_batches").value.kind, Scalar::Kind::Int);
  EXPECT_EQ(d.runs[0].settings.at("micro_batches").value.integer, 2);
  const ExperimentPlan r = plan(std::string(kHeader) + "[[axis]]\nname = \"micro_batches\"\nrange = { from = 1.0, to = 3.0 }\n");
  ASSERT_EQ(r.runs.size(), 3u);
  EXPECT_EQ(r.runs[2].settings.at("micro_batches").value.kind, Scalar::Kind::Int);
  EXPECT_EQ(r.runs[2].label, "M=3");
  const ExperimentPlan v = plan(std::string(kHeader) + "[[axis]]\nname = \"micro_batches\"\nvalues = [2, 4.0]\n");
  EXPECT_EQ(v.runs[0].key, d.runs[0].key);
  PlanOptions options;
  options.sets = {"micro_batches=2.0"};
  EXPECT_EQ(plan(std::string(kHeader), options).runs[0].key, d.runs[0].key);

  const std::string fraction = error_of(std::string(kHeader) + "[defaults]\nmicro_batches = 2.5\n");
  EXPECT_NE(fraction.find("e.toml:4: micro_batches: expected an integer, found the float 2.5"), std::string::npos) << fraction;
  const std::string huge = error_of(std::string(kHeader) + "[[axis]]\nname = \"micro_batches\"\ngeom = { from = 1, to = 1e308, factor = 2 }\n");
  EXPECT_NE(huge.find("e.toml:5: micro_batches: expected an integer, found the float 9007199254740992, beyond 2^53"),
            std::string::npos) << huge;
  // A real parameter keeps its float.
  EXPECT_EQ(plan(std::string(kHeader) + "[defaults]\nprediction_cost = 2.0\n").runs[0].settings.at("prediction_cost").value.kind,
            Scalar::Kind::Real);
}

TEST_F(SweepExperiment, RangeBoundsMustBeFinite) {
  const std::string to = error_of(std::string(kHeader) + "[[axis]]\nname = \"micro_batches\"\nrange = { from = 1, to = inf }\n");
  EXPECT_NE(to.find("e.toml:5: range.to: expected a finite number, found inf"), std::string::npos) << to;
  const std::string from = error_of(std::string(kHeader) + "[[axis]]\nname = \"micro_batches\"\ngeom = { from = nan, to = 4 }\n");
  EXPECT_NE(from.find("geom.from: expected a finite number, found nan"), std::string::npos) << from;
  const std::string text = error_of(std::string(kHeader) + "[[axis]]\nname = \"micro_batches\"\nrange = { from = 1, to = 'x' }\n");
  EXPECT_NE(text.find("range.to: expected a number, found a string"), std::string::npos) << text;
}

TEST_F(SweepExperiment, SetReplacesAnAxisAndSaysSo) {
  PlanOptions options;
  options.sets = {"micro_batches=16", "network=analytic"};
  const ExperimentPlan p = plan(std::string(kHeader) + "[[axis]]\nname = \"micro_batches\"\nvalues = [1, 2, 4]\n", options);
  ASSERT_EQ(p.runs.size(), 1u);
  EXPECT_EQ(p.runs[0].settings.at("micro_batches").value.integer, 16);
  EXPECT_EQ(p.runs[0].settings.at("network").value.text, "analytic");
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("replaces axis 'micro_batches'"), std::string::npos) << p.notes[0];
  options.sets = {"netwrok=analytic"};
  EXPECT_NE(error_of(std::string(kHeader), options).find("did you mean 'network'"), std::string::npos);
}

TEST_F(SweepExperiment, WhereOptionFiltersAfterRunIndex) {
  PlanOptions options;
  options.where = "micro_batches > 2";
  const ExperimentPlan p = plan(std::string(kHeader) + "[[axis]]\nname = \"micro_batches\"\nvalues = [1, 2, 4, 8]\n", options);
  ASSERT_EQ(p.runs.size(), 2u);
  EXPECT_EQ(p.runs[0].run_index, 2);
  EXPECT_EQ(p.runs[1].run_index, 3);
}

TEST_F(SweepExperiment, ErrorsNameFileLineAndKey) {
  const std::string typo = error_of(std::string(kHeader) + "[defaults]\nnetwrok = \"simgrid\"\n");
  EXPECT_NE(typo.find("e.toml:4: unknown key 'netwrok' (did you mean 'network'?)"), std::string::npos) << typo;
  const std::string top = error_of(std::string(kHeader) + "axes = 3\n");
  EXPECT_NE(top.find("e.toml:3: unknown key 'axes'"), std::string::npos) << top;
  const std::string two = error_of(std::string(kHeader) + "[[axis]]\nname = \"schedule\"\nvalues = [\"gpipe\"]\n"
                                                         "[[axis]]\nname = \"s2\"\nvalues = [{schedule = \"dp\"}]\n");
  EXPECT_NE(two.find("one axis per parameter"), std::string::npos) << two;
  const std::string kind = error_of(std::string(kHeader) + "[defaults]\nmicro_batches = \"four\"\n");
  EXPECT_NE(kind.find("micro_batches: expected an integer"), std::string::npos) << kind;
  const std::string toml = error_of(std::string(kHeader) + "[defaults\n");
  EXPECT_NE(toml.find("e.toml:3: not valid TOML"), std::string::npos) << toml;
  const std::string schema = error_of("name = \"x\"\n");
  EXPECT_NE(schema.find("schema"), std::string::npos) << schema;
  const std::string axis = error_of(std::string(kHeader) + "[[axis]]\nname = \"micro_batches\"\nvalue = [1]\n");
  EXPECT_NE(axis.find("e.toml:5: unknown key 'value' (did you mean 'values'?)"), std::string::npos) << axis;
  const std::string expression = error_of(std::string(kHeader) + "[[where]]\nrule = \"1 +\"\n");
  EXPECT_NE(expression.find("e.toml:4"), std::string::npos) << expression;
  const std::string label = error_of(std::string(kHeader) + "[derive]\nsamples = \"256\"\n");
  EXPECT_NE(label.find("unknown key 'samples'"), std::string::npos) << label;
}

TEST_F(SweepExperiment, InlinePlatformTablesAreClusterOptionsNotBundles) {
  const ExperimentPlan p = plan(std::string(kHeader) + R"T([[axis]]
name = "platform"
values = [ { servers = 2, gpus_per_server = 4, device = "V100", memory = "16GiB", intra = "12GBps", inter = "25Gbps" },
           { platform = "p/a.xml", memory = "8GiB" } ]
)T");
  ASSERT_EQ(p.runs.size(), 2u);
  EXPECT_EQ(p.runs[0].label, "2x4-V100");
  EXPECT_EQ(p.runs[0].settings.at("platform").inline_platform.at("gpus_per_server"), "4");
  EXPECT_EQ(p.runs[0].settings.count("memory"), 0u);  // a cluster option, not the memory parameter
  EXPECT_EQ(p.runs[1].settings.at("memory").value.text, "8GiB");  // a bundle
  EXPECT_TRUE(p.runs[1].settings.at("platform").inline_platform.empty());
}

TEST_F(SweepExperiment, RunKeysFollowContentNotPaths) {
  const ExperimentPlan a = plan(std::string(kHeader) + "[defaults]\nplatform = \"p/a.xml\"\nmicro_batches = 4\n");
  const ExperimentPlan same = plan(std::string(kHeader) + "[defaults]\nplatform = \"same-as-a.xml\"\nmicro_batches = 4\n");
  const ExperimentPlan other = plan(std::string(kHeader) + "[defaults]\nplatform = \"p/b.xml\"\nmicro_batches = 4\n");
  ASSERT_EQ(a.runs[0].key.size(), 16u);
  EXPECT_EQ(a.runs[0].key, same.runs[0].key);
  EXPECT_NE(a.runs[0].key, other.runs[0].key);
  write("p/a.xml", "<a />");  // one byte more
  const ExperimentPlan changed = plan(std::string(kHeader) + "[defaults]\nplatform = \"p/a.xml\"\nmicro_batches = 4\n");
  EXPECT_NE(a.runs[0].key, changed.runs[0].key);
  // Labels are not part of the key; the results version is.
  EXPECT_NE(canonical_run_text("simulate", a.runs[0].settings, parameters(), queries()).find("results_version=2"), std::string::npos);
}

TEST(SweepRunKey, ResultsVersionGolden) {
  // Changing the simulator's results for the same inputs means bumping
  // kResultsVersion, which changes every key: update this golden with it.
  std::map<std::string, Setting> settings;
  settings["micro_batches"].value = Scalar::of_int(8);
  settings["schedule"].value = Scalar::of_text("gpipe");
  const std::string text = canonical_run_text("simulate", settings, parameters(), {});
  EXPECT_EQ(text, "pipegrid-run\ncommand=simulate\nresults_version=2\nmicro_batches=n:8\nschedule=s:gpipe\n");
  EXPECT_EQ(run_key_of(text), "31193eca3ce29258") << "update the golden key: " << run_key_of(text);
}

/// An environment of the given variables (nullptr for the others).
std::function<const char*(const char*)> environment_of(const std::map<std::string, std::string>& variables) {
  return [variables](const char* name) -> const char* {
    const auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  };
}

/// The Slurm variables of task `id` of `sbatch --array=MIN-MAX:STEP` (COUNT tasks).
std::map<std::string, std::string> slurm_array(const std::string& id, const std::string& min, const std::string& max,
                                               const std::string& step, const std::string& count) {
  return {{"SLURM_ARRAY_TASK_ID", id},
          {"SLURM_ARRAY_TASK_MIN", min},
          {"SLURM_ARRAY_TASK_MAX", max},
          {"SLURM_ARRAY_TASK_STEP", step},
          {"SLURM_ARRAY_TASK_COUNT", count}};
}

std::string shard_error(const std::map<std::string, std::string>& variables) {
  return testutil::input_error_of([&] { shard_from_environment(environment_of(variables)); });
}

TEST(SweepShard, FromLaunchersAndText) {
  EXPECT_EQ(parse_shard("1/3").index, 1);
  EXPECT_THROW(parse_shard("3/3"), InputError);
  EXPECT_THROW(parse_shard("x"), InputError);
  Shard slurm = shard_from_environment(environment_of(slurm_array("5", "4", "6", "1", "3")));
  EXPECT_EQ(slurm.index, 1);
  EXPECT_EQ(slurm.count, 3);
  Shard srun = shard_from_environment(environment_of({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}}));
  EXPECT_EQ(srun.index, 2);
  Shard ompi = shard_from_environment(environment_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
  EXPECT_EQ(ompi.count, 2);
  Shard mpich = shard_from_environment(environment_of({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}}));
  EXPECT_EQ(mpich.index, 3);
  EXPECT_THROW(shard_from_environment(environment_of({})), InputError);
}

TEST(SweepShard, TextStatesTheCapAndTakesOnlyDigits) {
  EXPECT_EQ(parse_shard("999999/1000000").count, 1000000);
  EXPECT_CONTAINS(testutil::input_error_of([] { parse_shard("0/2000000"); }), "expected at most 1000000 shards (N), found '0/2000000'");
  EXPECT_CONTAINS(testutil::input_error_of([] { parse_shard("1/4294967298"); }), "at most 1000000 shards");
  EXPECT_CONTAINS(testutil::input_error_of([] { parse_shard("0/99999999999999999999999"); }), "at most 1000000 shards");
  for (const char* text : {"-1/3", "+1/3", " 1/3", "1/3 ", "1/", "/3", "1/3/5", "0x1/3", ""})
    EXPECT_CONTAINS(testutil::input_error_of([&] { parse_shard(text); }), "expected I/N (integers, 0 <= I < N <= 1000000) or auto");
  EXPECT_CONTAINS(testutil::input_error_of([] { parse_shard("0/0"); }), "expected I/N with 0 <= I < N, found '0/0'");
}

TEST(SweepShard, LauncherCountsAreReadWithoutNarrowing) {
  // 2^31 used to wrap to a negative count, 2^32+2 to 2.
  EXPECT_CONTAINS(shard_error({{"PMI_RANK", "0"}, {"PMI_SIZE", "2147483648"}}), "PMI_SIZE='2147483648': expected at most 1000000 shards");
  EXPECT_CONTAINS(shard_error({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4294967298"}}),
                  "OMPI_COMM_WORLD_SIZE='4294967298': expected at most 1000000 shards");
  EXPECT_CONTAINS(shard_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "18446744073709551618"}}), "SLURM_NTASKS='18446744073709551618'");
  EXPECT_CONTAINS(shard_error(slurm_array("0", "0", "1999999", "1", "2000000")), "SLURM_ARRAY_TASK_COUNT='2000000': expected at most 1000000 shards");
  EXPECT_CONTAINS(shard_error({{"PMI_RANK", "4294967297"}, {"PMI_SIZE", "4"}}), "PMI_RANK='4294967297': expected a rank below 4 (PMI_SIZE='4')");
  EXPECT_CONTAINS(shard_error({{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}}), "PMI_SIZE='0': expected at least 1 shard");
  EXPECT_CONTAINS(shard_error({{"PMI_RANK", "-1"}, {"PMI_SIZE", "4"}}), "PMI_RANK='-1': expected a non-negative integer");
  EXPECT_CONTAINS(shard_error({{"OMPI_COMM_WORLD_RANK", "1x"}, {"OMPI_COMM_WORLD_SIZE", "4"}}), "OMPI_COMM_WORLD_RANK='1x'");
  const Shard last = shard_from_environment(environment_of({{"PMI_RANK", "999999"}, {"PMI_SIZE", "1000000"}}));
  EXPECT_EQ(last.index, 999999);
  EXPECT_EQ(last.count, 1000000);
}

TEST(SweepShard, SlurmArrayTaskIsItsPositionInTheArray) {
  // --array=0-4:2: tasks 0, 2, 4 are shards 0, 1, 2 of 3.
  for (const auto& [id, index] : {std::pair{"0", 0}, {"2", 1}, {"4", 2}}) {
    const Shard shard = shard_from_environment(environment_of(slurm_array(id, "0", "4", "2", "3")));
    EXPECT_EQ(shard.index, index) << "task " << id;
    EXPECT_EQ(shard.count, 3);
  }
  // --array=1,5,9 is the range 1-9:4.
  EXPECT_EQ(shard_from_environment(environment_of(slurm_array("9", "1", "9", "4", "3"))).index, 2);
  // --array=3-7: from MIN, not from 0.
  EXPECT_EQ(shard_from_environment(environment_of(slurm_array("7", "3", "7", "1", "5"))).index, 4);
}

TEST(SweepShard, SlurmArrayWithoutAPositionIsRefused) {
  // A list (--array=1,2,9) is no range MIN-MAX:STEP of COUNT tasks.
  EXPECT_CONTAINS(shard_error(slurm_array("2", "1", "9", "1", "3")), "the Slurm array is not one range MIN-MAX:STEP of COUNT tasks");
  EXPECT_CONTAINS(shard_error(slurm_array("2", "1", "9", "1", "3")), "--shard \"$SLURM_ARRAY_TASK_ID/N\"");
  EXPECT_CONTAINS(shard_error(slurm_array("2", "0", "4", "0", "3")), "not one range");
  EXPECT_CONTAINS(shard_error(slurm_array("2", "4", "0", "1", "3")), "not one range");
  // A task outside the array, or between its steps.
  EXPECT_CONTAINS(shard_error(slurm_array("3", "0", "4", "2", "3")), "SLURM_ARRAY_TASK_ID='3': not a task of the array 0-4:2");
  EXPECT_CONTAINS(shard_error(slurm_array("6", "0", "4", "2", "3")), "not a task of the array");
  EXPECT_CONTAINS(shard_error(slurm_array("-1", "0", "4", "2", "3")), "SLURM_ARRAY_TASK_ID='-1': expected a non-negative integer");
  // A missing variable is an error, never a default of 0.
  for (const char* name : {"SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP", "SLURM_ARRAY_TASK_COUNT"}) {
    std::map<std::string, std::string> variables = slurm_array("1", "0", "2", "1", "3");
    variables.erase(name);
    EXPECT_CONTAINS(shard_error(variables), std::string("SLURM_ARRAY_TASK_ID is set but ") + name + " is not");
  }
}

}  // namespace
}  // namespace pipegrid::sweep
