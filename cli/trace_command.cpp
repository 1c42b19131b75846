#include "cli/trace_command.hpp"

#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/profile.hpp"
#include "core/program.hpp"
#include "interchange/kineto_import.hpp"
#include "render/timeline_csv.hpp"

namespace pipegrid::cli {
namespace {

struct TraceImportOptions {
  std::vector<std::string> traces;
  std::string csv, profile, platform, program, map;
  int micro_batch_size = 1;
};

TraceImportOptions options;
CLI::App* import_command = nullptr;

}  // namespace

CLI::App* add_trace_command(CLI::App& app) {
  CLI::App* trace = app.add_subcommand("trace", "import profiler traces of real runs (trace import)");
  trace->require_subcommand(1);
  import_command = trace->add_subcommand(
      "import", "read one PyTorch profiler (Kineto) trace per rank: write the measured timeline, a profile and a platform");
  import_command->add_option("traces", options.traces, "one Chrome trace JSON per rank (rank from distributedInfo, else the order)")
      ->required();
  import_command->add_option("--csv", options.csv, "write the measured timeline as CSV (execute --csv's schema)");
  import_command->add_option("--profile", options.profile, "write a profile JSON: one layer per stage, its median F/B/I/W times");
  import_command->add_option("--platform", options.platform,
                             "write a platform XML: one host per rank, links with the fitted p2p latency and bandwidth");
  import_command->add_option("--program", options.program,
                             "write the Program that ran (text form): each rank's actions in the order they ran, for "
                             "validate --program");
  import_command->add_option("--map", options.map,
                             "range mapping JSON (rules: pattern, kind, stage, micro_batch, bytes) instead of the default "
                             "torch.distributed.pipelining names (docs/kineto.md)");
  import_command->add_option("--micro-batch-size", options.micro_batch_size, "samples per micro-batch, written into the profile (default 1)");
  return trace;
}

int run_trace_command() {
  if (options.csv.empty() && options.profile.empty() && options.platform.empty() && options.program.empty())
    throw InputError("trace import: give at least one of --csv, --profile, --platform and --program");
  if (options.micro_batch_size < 1)
    throw InputError(fmt::format("--micro-batch-size: expected at least 1, found {}", options.micro_batch_size));
  kineto::ImportOptions import;
  if (!options.map.empty()) import.mapping = kineto::parse_mapping_json(read_text_file(options.map), options.map);
  import.micro_batch_size = options.micro_batch_size;
  std::vector<kineto::RankTrace> traces;
  for (const std::string& file : options.traces) traces.push_back(kineto::parse_kineto_trace(read_text_file(file), file));
  const kineto::ImportResult result = kineto::import_traces(traces, import);

  if (!options.program.empty()) {
    try {
      validate_program(result.program);
    } catch (const ProgramError& error) {
      throw InputError(fmt::format("--program {}: the actions read from the traces do not form a Program that can run "
                                   "(a rank's trace cut short, or a --map rule naming the wrong stage or micro-batch?):\n{}",
                                   options.program, error.what()));
    }
  }
  OutputFileSet files;
  if (!options.csv.empty()) files.add(options.csv, timeline_to_csv(result.timeline));
  if (!options.profile.empty()) files.add(options.profile, profile_to_json(result.profile));
  if (!options.platform.empty()) files.add(options.platform, result.platform_xml);
  if (!options.program.empty()) files.add(options.program, program_to_text(result.program));
  files.commit();

  std::size_t compute = 0, transfers = 0;
  for (const TimelineRecord& record : result.timeline.records)
    (record.kind() == RecordKind::Compute ? compute : transfers) += 1;
  std::cout << fmt::format("{} ranks ({}), {} stages, {} micro-batches, mini-batches {}: {} compute actions, {} transfers\n",
                           result.timeline.hosts.size(), result.gpu ? "GPU kernels" : "CPU ranges", result.stages,
                           result.micro_batches, result.mini_batches, compute, transfers);
  for (const Layer& layer : result.profile.layers) {
    std::cout << fmt::format("  {}: F {:.6f} s, B {:.6f} s", layer.name, layer.forward_s, layer.backward_s);
    if (layer.backward_input_s) std::cout << fmt::format(" (I {:.6f} s, W {:.6f} s)", *layer.backward_input_s, *layer.backward_weight_s);
    std::cout << fmt::format(", sends {:.0f} bytes\n", layer.output_bytes);
  }
  std::cout << fmt::format("p2p copy: latency {:.6g} s + bytes / {:.6g} B/s\n", result.latency_s, result.bandwidth_Bps);
  if (result.allreduce_bus_bandwidth_Bps)
    std::cout << fmt::format("all-reduce bus bandwidth: {:.6g} B/s\n", *result.allreduce_bus_bandwidth_Bps);
  for (const std::string& note : result.notes) std::cout << "note: " << note << "\n";
  std::size_t overlapped = 0, devices_with_several_stages = 0;
  for (const DeviceProgram& device : result.program.devices) {
    devices_with_several_stages += device.stages.size() > 1;
    for (const Stream& stream : device.streams) overlapped += stream.overlapped.size();
  }
  std::cout << fmt::format("program: {} devices, {} holding several stages, {} overlapped F&B pairs\n",
                           result.program.devices.size(), devices_with_several_stages, overlapped);
  // --device only labels the comparison (nothing runs with --measured).
  std::cout << fmt::format("validate with: pipegrid validate --model mlp --layers {} --program <program> --program-format text "
                           "--micro-batch-size {} --device {}:{} --warmup 0 --profile <profile> --platform <platform> "
                           "--measured <csv>\n",
                           result.stages, options.micro_batch_size, result.gpu ? "cuda" : "cpu", result.program.devices.size());
  return 0;
}

}  // namespace pipegrid::cli
