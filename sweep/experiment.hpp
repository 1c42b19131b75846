#pragma once
// Experiment files (TOML, ../EXPERIMENTS.md "The file"): reading, expanding
// into the plan of runs, and the run keys. Pure: no SimGrid, no simulation;
// what a parameter is comes from the caller (the CLI takes it from
// simulate's own option definitions).

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pipegrid::sweep {

/// One scalar of an experiment: absent, a boolean, an integer, a real or a
/// text. Integers stay integers (they print without a decimal point).
struct Scalar {
  enum class Kind { Absent, Bool, Int, Real, Text };
  Kind kind = Kind::Absent;
  bool boolean = false;
  long long integer = 0;
  double real = 0;
  std::string text;

  static Scalar of_bool(bool value);
  static Scalar of_int(long long value);
  static Scalar of_real(double value);
  static Scalar of_text(std::string value);
  bool absent() const { return kind == Kind::Absent; }
  bool numeric() const { return kind == Kind::Int || kind == Kind::Real; }
  double number() const { return kind == Kind::Int ? static_cast<double>(integer) : real; }
  /// The text a CSV cell or a command line holds: integers without a
  /// decimal point, reals in the shortest text that reads back the same,
  /// booleans true/false, absent as the empty string.
  std::string to_text() const;
  bool operator==(const Scalar& other) const;
};

/// What a parameter takes, from the option definitions of the command.
struct ParameterSpec {
  enum class Kind { Flag, Int, Real, Text, Path };
  std::string name;  ///< snake_case: micro_batches
  std::string flag;  ///< the command's flag: --micro-batches; empty: a positional (model's NAME)
  Kind kind = Kind::Text;
  /// For Path parameters: values that name no file (partition = "uniform").
  std::vector<std::string> literals;
  /// The option takes several values (partition's --machines 4 4): a text
  /// value is split at spaces into them.
  bool several = false;
};

/// Where a value came from, for errors: FILE:LINE.
struct SourcePlace {
  std::string file;
  int line = 0;
  std::string text() const;
};

/// A parameter's value in one run: the scalar as written, and for a file
/// parameter, the file it names (resolved against the experiment file that
/// wrote it, or the current folder for --set).
struct Setting {
  Scalar value;
  std::string resolved_path;  ///< empty unless the value names a file
  /// A platform given as an inline table (EXPERIMENTS.md "Platforms from
  /// parameters"): its options, value.text holds their compact form.
  std::map<std::string, std::string> inline_platform;
};

/// One run of the plan.
struct PlannedRun {
  int run_index = 0;  ///< counts runs left after the file's [[where]] rules
  std::string label;  ///< axis values joined by '|', unique within the plan
  std::map<std::string, Setting> settings;  ///< parameters and labels; absent ones missing
  std::string key;                          ///< run_key (16 hex digits)
};

struct WhereReport {
  std::string rule, why;
  SourcePlace place;
  int dropped = 0;
};

struct AxisReport {
  std::string name;
  std::vector<std::string> keys;    ///< the columns it sets (a bundle sets several)
  std::vector<std::string> values;  ///< as labels print them
  std::optional<std::string> when;
};

/// Functions the expressions may call that need the inputs: hosts(platform)
/// and layers(profile). Given the resolved setting; throw InputError.
struct InputQueries {
  std::function<long long(const Setting& platform)> hosts;
  std::function<long long(const Setting& profile)> layers;
  /// SHA-256 of a setting's file content (or generated content), hex.
  std::function<std::string(const Setting& file_setting)> content_hash;
};

struct PlanOptions {
  std::vector<std::string> sets;  ///< --set k=v, in order
  std::string where;              ///< --where EXPR; empty: none
  std::string working_dir = ".";  ///< --set paths resolve here
};

struct ExperimentPlan {
  std::string file;
  std::string name, title;
  std::string command = "simulate";
  std::vector<std::string> requires_capabilities;
  std::vector<std::string> missing_capabilities;  ///< of requires, those this build lacks
  std::vector<std::string> includes;              ///< resolved, in reading order
  std::vector<std::string> columns;               ///< parameter and label columns, in CSV order
  std::vector<std::string> axis_names;            ///< axes in file order
  std::vector<AxisReport> axes;
  std::vector<WhereReport> where_rules;
  int runs_before_where = 0;
  int runs_after_file_where = 0;  ///< run_index counts these
  std::vector<PlannedRun> runs;   ///< after --where (not sharded)
  std::vector<std::string> notes;  ///< e.g. "--set micro_batches=4 replaces axis 'micro_batches'"
  std::vector<std::string> input_files;  ///< every distinct resolved input file, sorted
  std::string experiment_text;           ///< the file as read
  std::vector<ParameterSpec> parameters;  ///< of the command
  std::vector<std::string> sets;          ///< the --set options it was planned with
  std::string where;                      ///< the --where option
};

/// The parameters of a command (its input options), or nullopt when this
/// build lacks the command: its keys are then not checked, and the plan
/// lists the command as a missing capability.
using ParametersOf = std::function<std::optional<std::vector<ParameterSpec>>(const std::string& command)>;

/** Reads and expands an experiment file. `parameters_of` gives the file's
 *  command's parameters; `capabilities` what this build can do (for
 *  `requires`). Throws InputError naming FILE:LINE and the key on any error. */
ExperimentPlan plan_experiment(const std::string& file, const ParametersOf& parameters_of,
                               const std::vector<std::string>& capabilities, const PlanOptions& options,
                               const InputQueries& queries);

/// The results version: changes whenever the simulator's results change for
/// the same inputs (tests/data's results-version golden catches a forgotten
/// bump). Enters every run key.
inline constexpr int kResultsVersion = 2;

/** The canonical text a run key hashes: command, results version, and the
 *  run's parameters sorted by name, files replaced by their content hash.
 *  Labels are not part of it. */
std::string canonical_run_text(const std::string& command, const std::map<std::string, Setting>& settings,
                               const std::vector<ParameterSpec>& parameters, const InputQueries& queries);
/** 16 hex digits of SHA-256 (OpenSSL). */
std::string sha256_hex(const std::string& bytes);
std::string run_key_of(const std::string& canonical_text);

/** --shard i/n: the runs with run_index % n == i; 0 <= index < count <= 1000000. */
struct Shard {
  int index = 0, count = 1;
};
/** "I/N", two plain decimal integers; InputError otherwise (N over 1000000
 *  says so). */
Shard parse_shard(const std::string& text);
/** --shard auto: from Slurm arrays, srun, Open MPI or MPICH variables (in
 *  that order); `environment` looks a variable up (nullptr when unset).
 *  A Slurm array task's shard is its position in MIN-MAX:STEP (every one of
 *  SLURM_ARRAY_TASK_MIN, _MAX, _STEP, _COUNT required; an array given as a
 *  list is refused). Every value is a non-negative integer read without
 *  narrowing, under the limits of parse_shard; InputError otherwise. */
Shard shard_from_environment(const std::function<const char*(const char*)>& environment);
std::vector<PlannedRun> runs_of_shard(const std::vector<PlannedRun>& runs, const Shard& shard);

}  // namespace pipegrid::sweep
