#pragma once
// `pipegrid explore`: BaPipe's automatic exploration. Enumerates schedule x
// micro-batch count x partition (every partitioner, with and without
// replicated stages) for a platform, a profile and a mini-batch size;
// simulates each candidate in its own process, several at once; ranks them
// by throughput among those that fit in memory and says why each loser lost.

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

/** Adds the subcommand and its options to `app`; returns it so the caller can
 *  test whether it was chosen. */
CLI::App* add_explore_command(CLI::App& app);

/** Runs the subcommand once parsed; returns the exit status: 0 with a
 *  winner, 1 when no candidate fits. */
int run_explore_command();

}  // namespace pipegrid::cli
