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

// What each option means, for --help (defaults: docs/validation.md, Models).
const std::map<std::string, std::string> kHelp = {
    {"layers", "mlp: Linear layers (8); gnmt: LSTM layers (4); gpt: decoder blocks (4)"},
    {"hidden", "mlp, gnmt: hidden width (256); gpt: model dimension (256); vgg16: classifier width"},
    {"heads", "gpt: attention heads, dividing hidden (4)"},
    {"ffn", "gpt: feed-forward width (4 x hidden)"},
    {"sequence", "gnmt (16), gpt (32): tokens per sample"},
    {"vocabulary", "gnmt, gpt: vocabulary size (1024)"},
    {"classes", "mlp (10), vgg16 (1000): output classes"},
    {"image", "vgg16: square input side, a multiple of 32 (224)"},
    {"width", "vgg16: channels of the first block (64), scaling every block"},
};

}  // namespace

void add_model_flags(CLI::App& command, ModelFlags& flags) {
  for (const std::string& name : validate::option_names())
    command.add_option("--" + name, flags.values[name], kHelp.at(name))
        ->group("Model options (integers; an option the model does not have is an error)");
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
