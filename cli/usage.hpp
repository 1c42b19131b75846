#pragma once
// How pipegrid reads its command lines beyond CLI11's defaults, and how it
// words CLI11's usage errors: shared by main() and by a sweep's simulate
// runs, which parse their command lines with simulate's own options.

#include <string>

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

/** Every integer option of `command` and its subcommands reads its value as
 *  a decimal integer: leading zeros are dropped ("010" is 10, where CLI11
 *  alone would read octal 8), and a value with a base prefix ("0x10", "0b1")
 *  is a usage error naming the option. Call once all options are added. */
void read_integers_as_decimal(CLI::App& command);

/** A CLI11 usage error of `app` as pipegrid says it, without the leading
 *  "pipegrid: error: ": a value CLI11 could not convert names the option,
 *  what it expected and what was typed. */
std::string usage_error_text(const CLI::App& app, const CLI::ParseError& error);

}  // namespace pipegrid::cli
