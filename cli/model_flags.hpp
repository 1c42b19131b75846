#pragma once
// The zoo model's options as flags of execute, validate and calibrate
// (`--model gpt --layers 2 --hidden 64`): the shared vocabulary of the
// model generators, one flag per option name (validate::option_names()).

#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "validate/model_zoo.hpp"

namespace pipegrid::cli {

/** Where the flags' values land; one object per command. */
struct ModelFlags {
  std::map<std::string, int> values;        ///< option name -> value, bound to `--NAME`
  std::vector<std::string> old_options;     ///< the retired `--model-option key=value`
  std::map<std::string, int> old_values;    ///< the retired names as flags (`--depth 4`)
};

/** Adds `--layers`, `--hidden`, ... (integers) to `command`, and hidden
 *  `--model-option`, `--depth`, `--vocab` and `--seq` whose use is an error
 *  naming the flag to give instead. */
void add_model_flags(CLI::App& command, ModelFlags& flags);

/** The model flags given on `command` (retired ones included). */
std::vector<std::string> given_model_flags(const CLI::App& command);

/** Model `name` with the options given as flags, resolved (defaults filled
 *  in); InputError naming the flag for an option the model does not have,
 *  a value that is not positive, or a use of `--model-option`. */
validate::ModelConfig model_from_flags(const std::string& name, const ModelFlags& flags, const CLI::App& command);

}  // namespace pipegrid::cli
