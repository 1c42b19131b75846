#pragma once
// MLCommons Chakra execution traces from the command line (docs/chakra.md):
//   pipegrid export --format chakra --out PREFIX (simulate's inputs | --plan FILE)
// simulates the run and writes its execution graphs, one `PREFIX.<rank>.et`
// per platform host and `PREFIX.json` (the communicator groups);
//   pipegrid simulate --platform FILE --chakra PREFIX [--csv/--svg/--trace/--json]
// replays a trace set on the platform (sim/graph_engine.hpp's dispatch rule).

#include <string>

#include <CLI/CLI.hpp>

namespace pipegrid::cli {

CLI::App* add_export_command(CLI::App& app);
int run_export_command();

/// What `simulate --chakra` writes besides its summary.
struct ChakraReplayOutputs {
  std::string csv, trace, svg;
  bool json = false;
};

/** `simulate --chakra PREFIX`: reads the trace set, replays it on the
 *  platform `simulate` was given and prints the summary (or its JSON).
 *  Every simulate option other than --platform, --network, --transfer-rule,
 *  --collective-model and the outputs --csv, --svg, --trace, --json is
 *  refused (InputError naming it): the traces hold the model, the layout
 *  and the schedule. */
int run_chakra_replay(const CLI::App& simulate, const std::string& prefix, const std::string& platform_file,
                      const std::string& network, const std::string& transfer_rule, const std::string& collective_model,
                      const ChakraReplayOutputs& outputs);

}  // namespace pipegrid::cli
