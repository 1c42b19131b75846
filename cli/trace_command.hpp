#pragma once
// `pipegrid trace import RANK_TRACE... [--csv FILE] [--profile FILE]
// [--platform FILE] [--program FILE] [--map FILE] [--micro-batch-size N]`:
// reads one PyTorch profiler (Kineto) Chrome trace per rank of a real
// pipeline-parallel run and writes the measured timeline (execute --csv's
// schema), a profile of each stage's measured times, a platform with the
// fitted p2p link and the Program that ran, the inputs of
// `pipegrid validate --program FILE --measured` (docs/kineto.md).

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

/** Adds `trace` and its subcommand `import` to `app`; returns `trace`. */
CLI::App* add_trace_command(CLI::App& app);

/** Runs `trace import` once parsed; returns the exit status. */
int run_trace_command();

}  // namespace pipegrid::cli
