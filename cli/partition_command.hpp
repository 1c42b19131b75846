#pragma once
// `pipegrid partition`: its flags make an api::PartitionRequest (a partitioner
// on a profile and a platform, or a machine hierarchy given on the command
// line); it prints api::partition's result as a table or JSON, and writes it
// as a partition file for `simulate --partition`.

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

/** Adds the subcommand and its options to `app`; returns it so the caller can
 *  test whether it was chosen. */
CLI::App* add_partition_command(CLI::App& app);

/** Runs the subcommand once parsed; returns the exit status. */
int run_partition_command();

}  // namespace pipegrid::cli
