#include "cli/model_flags.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/platform_check.hpp"

namespace pipegrid::cli {
namespace {

// Option names before issue 15 that are no option of any zoo model now
// (width still is, of vgg16).
const std::vector<std::string> kRetiredNames = {"depth", "vocab", "seq"};

}  // namespace

void add_model_flags(CLI::App& command, ModelFlags& flags) {
  for (const std::string& name : validate::option_names())
    command.add_option("--" + name, flags.values[name], fmt::format("model option {} (as for pipegrid model)", name))
        ->group("Model options (mlp: layers hidden classes; vgg16: width image hidden classes; gnmt: layers hidden "
                "vocabulary sequence; gpt: layers hidden heads ffn sequence vocabulary)");
  // Retired: their use is an error that names the flag (group "" hides them).
  command.add_option("--model-option", flags.old_options, "retired: give the option as a flag, e.g. --hidden 64")->group("");
  for (const std::string& name : kRetiredNames)
    command.add_option("--" + name, flags.old_values[name], "retired option name")->group("");
}

std::vector<std::string> given_model_flags(const CLI::App& command) {
  std::vector<std::string> given;
  for (const std::string& name : validate::option_names())
    if (command.count("--" + name)) given.push_back("--" + name);
  if (command.count("--model-option")) given.push_back("--model-option");
  for (const std::string& name : kRetiredNames)
    if (command.count("--" + name)) given.push_back("--" + name);
  return given;
}

validate::ModelConfig model_from_flags(const std::string& name, const ModelFlags& flags, const CLI::App& command) {
  if (!flags.old_options.empty()) {
    // `--model-option width=64`: the flags of the options' names (their new
    // names where they were renamed).
    std::vector<std::string> flags_to_give;
    for (const std::string& text : flags.old_options) {
      const auto equals = text.find('=');
      if (equals == std::string::npos || equals == 0) {
        flags_to_give = {"each option as a flag, e.g. --layers 4 --hidden 64"};
        break;
      }
      flags_to_give.push_back(fmt::format("--{} {}", printable(validate::current_option_name(name, text.substr(0, equals))),
                                          printable(text.substr(equals + 1))));
    }
    throw InputError(fmt::format("--model-option {}: the model's options are flags now; give {}",
                                 printable(fmt::format("{}", fmt::join(flags.old_options, ", "))), fmt::join(flags_to_give, " ")));
  }
  validate::ModelConfig config{name, {}};
  for (const std::string& option : validate::option_names())
    if (command.count("--" + option)) config.options[option] = flags.values.at(option);
  // A retired name: resolve_model names the new one ("--depth: mlp has no
  // option 'depth'; did you mean --layers?").
  for (const std::string& old : kRetiredNames)
    if (command.count("--" + old)) config.options[old] = flags.old_values.at(old);
  return validate::resolve_model(config);
}

}  // namespace pipegrid::cli
