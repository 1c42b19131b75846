#pragma once
// `pipegrid explore`: BaPipe's automatic exploration (api/explore.hpp
// enumerates, simulates and ranks the candidates). Here only its flags,
// turned into an api::ExploreRequest, and the printing of the result: the
// tables (or one JSON object with --json) that say why each loser lost, and
// the winner's plan written with --save-plan.

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

/** Adds the subcommand and its options to `app`; returns it so the caller can
 *  test whether it was chosen. */
CLI::App* add_explore_command(CLI::App& app);

/** Runs the subcommand once parsed; returns the exit status: 0 with a
 *  winner, 1 when no candidate fits. */
int run_explore_command();

}  // namespace pipegrid::cli
