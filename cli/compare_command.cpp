#include "cli/compare_command.hpp"

#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/timeline_compare.hpp"
#include "render/timeline_csv.hpp"
#include "render/timeline_svg.hpp"

namespace pipegrid::cli {
namespace {

struct CompareCommandOptions {
  std::vector<std::string> timelines;  ///< the simulated one, then the measured ones
  std::string align = "none";
  bool allow_missing = false;
  bool compute_only = false;
  int worst = 5;
  bool json = false;
  std::string svg;
};

CompareCommandOptions options;

}  // namespace

CLI::App* add_compare_command(CLI::App& app) {
  auto* command = app.add_subcommand("compare", "compare a simulated timeline with measured ones (CSV timelines)");
  command->add_option("timelines", options.timelines, "SIM_TIMELINE REAL_TIMELINE [REAL_TIMELINE...] (CSV)");
  command->add_option("--align", options.align,
                      "none (default): mini-batch numbers as recorded; first: number each timeline's mini-batches from 0 "
                      "(a real run that left out warm-up mini-batches)");
  command->add_flag("--allow-missing", options.allow_missing,
                    "compare the actions present in both timelines and list the others, instead of failing");
  command->add_flag("--compute-only", options.compute_only, "match compute actions only (ignore transfers)");
  command->add_option("--worst", options.worst, "how many of the worst actions to list (default 5)");
  command->add_flag("--json", options.json, "print one JSON object on stdout");
  command->add_option("--svg", options.svg, "write both timelines stacked on one time axis (the first measured run)");
  return command;
}

int run_compare_command() {
  if (options.timelines.size() < 2)
    throw InputError(fmt::format("compare: expected SIM_TIMELINE REAL_TIMELINE [REAL_TIMELINE...], found {} file{}",
                                 options.timelines.size(), options.timelines.size() == 1 ? "" : "s"));
  if (options.align != "none" && options.align != "first")
    throw InputError(fmt::format("--align: expected none or first, found '{}'", options.align));
  if (options.worst < 0) throw InputError(fmt::format("--worst: expected a count >= 0, found {}", options.worst));
  CompareOptions compare;
  compare.align_first = options.align == "first";
  compare.allow_missing = options.allow_missing;
  compare.compute_only = options.compute_only;
  compare.worst = options.worst;

  const std::string& simulated_file = options.timelines.front();
  const Timeline simulated = parse_timeline_csv(read_text_file(simulated_file), simulated_file);
  std::vector<Timeline> measured;
  std::vector<TimelineComparison> runs;
  for (std::size_t k = 1; k < options.timelines.size(); ++k) {
    const std::string& file = options.timelines[k];
    measured.push_back(parse_timeline_csv(read_text_file(file), file));
    runs.push_back(compare_timelines(simulated, simulated_file, measured.back(), file, compare));
  }
  if (!options.svg.empty())
    write_file_atomically(options.svg, comparison_to_svg(simulated, measured.front(),
                                                         fmt::format("simulated {} vs measured {}", simulated_file,
                                                                     options.timelines[1])));
  std::cout << (options.json ? comparison_to_json(runs, simulated_file) : comparison_to_table(runs, simulated_file));
  return 0;
}

}  // namespace pipegrid::cli
