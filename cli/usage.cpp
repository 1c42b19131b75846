#include "cli/usage.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "core/platform_check.hpp"

namespace pipegrid::cli {
namespace {

// The option `name` as CLI11 names it in its errors ("--hidden", or a
// positional's name), in the subcommands parsed so far first.
const CLI::Option* option_named(const CLI::App& app, const std::string& name) {
  for (const CLI::App* command : app.get_subcommands())
    if (const CLI::Option* option = option_named(*command, name)) return option;
  return app.get_option_no_throw(name);
}

// What a value of CLI11's type name `type` ("INT", "FLOAT", ...) is, for a
// message; empty for types without a description.
std::string value_description(const std::string& type) {
  if (type == "INT" || type == "[INT]") return "an integer";
  if (type == "UINT" || type == "[UINT]") return "an integer >= 0";
  if (type == "FLOAT" || type == "[FLOAT]") return "a number";
  return "";
}

// An optional sign and decimal digits only.
bool integer_text(const std::string& text) {
  const std::size_t digits = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  return text.size() > digits && text.find_first_not_of("0123456789", digits) == std::string::npos;
}

}  // namespace

void read_integers_as_decimal(CLI::App& command) {
  for (CLI::Option* option : command.get_options()) {
    const std::string type = option->get_type_name();
    if (type != "INT" && type != "UINT") continue;
    option->transform(CLI::Validator(
        [](std::string& text) -> std::string {
          const std::size_t sign = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
          if (text.size() > sign + 1 && text[sign] == '0' && std::isalpha(static_cast<unsigned char>(text[sign + 1])))
            return fmt::format("expected a decimal integer, found '{}'", printable(text));
          if (integer_text(text)) {
            const std::size_t first = std::min(text.find_first_not_of('0', sign), text.size() - 1);
            text.erase(sign, first - sign);
          }
          return "";
        },
        "", "decimal"));
  }
  for (CLI::App* subcommand : command.get_subcommands([](CLI::App*) { return true; })) read_integers_as_decimal(*subcommand);
}

std::string usage_error_text(const CLI::App& app, const CLI::ParseError& error) {
  std::string text = error.what();
  static const std::string kConversion = "Could not convert: ";
  if (text.rfind(kConversion, 0) == 0) {
    const std::size_t equals = text.find(" = ", kConversion.size());
    if (equals != std::string::npos) {
      const std::string name = text.substr(kConversion.size(), equals - kConversion.size());
      const std::string value = text.substr(equals + 3);
      const CLI::Option* option = option_named(app, name);
      const std::string expected = option ? value_description(option->get_type_name()) : "";
      if (!expected.empty())
        return fmt::format("{}: expected {}, found '{}'{}", name, expected, printable(value),
                           expected != "a number" && integer_text(value) ? ", which is out of range" : "");
      return fmt::format("{}: cannot read '{}' as its value", name, printable(value));
    }
  }
  return text;
}

}  // namespace pipegrid::cli
