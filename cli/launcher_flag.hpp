#pragma once
// `--launcher threads|processes|env` and `--launcher-timeout`, shared by
// execute, validate and calibrate (docs/validation.md, "Launchers and c10d").

#include <string>

#include <CLI/CLI.hpp>

#include "validate/executor.hpp"

namespace pipegrid::cli {

struct LauncherFlags {
  std::string kind = "threads";
  double timeout_s = 300;
};

/** Adds the two flags to `command`, bound to `flags`. */
void add_launcher_flags(CLI::App& command, LauncherFlags& flags);

/** The launcher the flags name; its ranks run this executable. InputError
 *  for an unknown kind or a timeout that is not positive. */
validate::Launcher launcher_from_flags(const LauncherFlags& flags);

}  // namespace pipegrid::cli
