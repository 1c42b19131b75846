#include "sim_test_util.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "schedules/schedules.hpp"
#include "sim/engine.hpp"

namespace pipegrid::testutil {

TempFile::TempFile(const std::string& stem, const std::string& suffix, const std::string& contents) {
  std::string name = (std::filesystem::temp_directory_path() / (stem + "-XXXXXX" + suffix)).string();
  std::vector<char> buffer(name.begin(), name.end());
  buffer.push_back('\0');
  const int fd = mkstemps(buffer.data(), static_cast<int>(suffix.size()));
  if (fd < 0) throw std::runtime_error(fmt::format("mkstemps {}: {}", name, std::strerror(errno)));
  path_ = buffer.data();
  std::size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n <= 0) {
      close(fd);
      std::remove(path_.c_str());
      throw std::runtime_error(fmt::format("write {}: {}", path_, std::strerror(errno)));
    }
    written += static_cast<std::size_t>(n);
  }
  close(fd);
}

TempFile::~TempFile() {
  std::error_code ignored;
  std::filesystem::remove(path_, ignored);
}

std::string chain_host(int index) { return fmt::format("d{}", index); }

std::string chain_platform_xml(int num_hosts, DeviceKind kind, double hop_s) {
  std::string xml =
      "<?xml version='1.0'?>\n"
      "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      "<platform version=\"4.1\">\n"
      "  <zone id=\"chain\" routing=\"Full\">\n";
  for (int h = 0; h < num_hosts; ++h)
    xml += fmt::format("    <host id=\"{}\" speed=\"1f\"><prop id=\"kind\" value=\"{}\"/></host>\n", chain_host(h),
                       to_string(kind));
  // {:.17g} prints the latency exactly (SR values are binary fractions).
  for (int h = 0; h + 1 < num_hosts; ++h)
    xml += fmt::format("    <link id=\"link{}\" bandwidth=\"1TBps\" latency=\"{:.17g}s\" sharing_policy=\"SPLITDUPLEX\"/>\n",
                       h, hop_s);
  // Full routing: every pair of hosts, through the links between them
  // (messages only go to neighbours, but a complete table is a valid platform).
  for (int a = 0; a < num_hosts; ++a)
    for (int b = 0; b < num_hosts; ++b) {
      if (a == b) continue;
      xml += fmt::format("    <route src=\"{}\" dst=\"{}\" symmetrical=\"NO\">", chain_host(a), chain_host(b));
      const int step = a < b ? 1 : -1;
      for (int h = a; h != b; h += step)
        xml += fmt::format("<link_ctn id=\"link{}\" direction=\"{}\"/>", std::min(h, h + step), a < b ? "UP" : "DOWN");
      xml += "</route>\n";
    }
  xml += "  </zone>\n</platform>\n";
  return xml;
}

double stash_unit(int stage) { return 1024.0 * (stage + 1); }
double weight_unit(int stage) { return 8.0 * (stage + 3); }

std::vector<StageCost> balanced_stages(int num_stages, double forward_s, double backward_s) {
  std::vector<StageCost> stages(static_cast<std::size_t>(num_stages));
  for (int s = 0; s < num_stages; ++s) {
    StageCost& cost = stages[static_cast<std::size_t>(s)];
    cost.first_layer = cost.last_layer = s;
    cost.forward_s = forward_s;
    cost.backward_s = backward_s;
    cost.input_bytes = 0;   // 0-byte messages: exactly the link latency per hop
    cost.output_bytes = 0;
    cost.weight_bytes = weight_unit(s);
    cost.stash_bytes = stash_unit(s);
  }
  return stages;
}

std::string describe(const SimCase& c) {
  return fmt::format("{} N={} M={} F={} B={} SR={}{}", c.schedule, c.stages, c.micro_batches, c.forward_s, c.backward_s,
                     c.hop_s, c.transfer_rule == sim::TransferRule::Share ? "" : " fifo");
}

const std::string& PlatformCache::get(int num_hosts, DeviceKind kind, double hop_s) {
  auto& slot = files_[{num_hosts, static_cast<int>(kind), hop_s}];
  if (!slot)
    slot = std::make_unique<TempFile>(fmt::format("pipegrid-chain{}-{}", num_hosts, to_string(kind)), ".xml",
                                      chain_platform_xml(num_hosts, kind, hop_s));
  return slot->path();
}

SimOutcome run_case(const SimCase& c, const std::string& platform_file) {
  ScheduleOptions options;
  options.num_stages = c.stages;
  options.micro_batches = c.micro_batches;
  options.mini_batches = 1;

  sim::SimulationRequest request;
  request.platform_file = platform_file;
  request.program = generate_schedule(c.schedule, options);
  request.stages = balanced_stages(c.stages, c.forward_s, c.backward_s);
  std::map<std::string, int> stage_of_host;
  for (int s = 0; s < c.stages; ++s) {
    request.hosts.push_back({chain_host(s)});
    stage_of_host[chain_host(s)] = s;
  }
  request.network = sim::NetworkModel::Analytic;
  request.transfer_rule = c.transfer_rule;

  sim::SimulationResult result = sim::simulate(request);
  MemoryModel memory;
  memory.stages = request.stages;
  const Metrics metrics = compute_metrics(result.timeline, memory, stage_of_host, 1, c.micro_batches);

  SimOutcome out;
  out.minibatch_time_s = metrics.minibatch_time_s;
  out.bubble_fraction = metrics.bubble_fraction;
  out.busy_s.assign(static_cast<std::size_t>(c.stages), 0);
  out.peak_stashed.assign(static_cast<std::size_t>(c.stages), -1);
  out.peak_memory_bytes.assign(static_cast<std::size_t>(c.stages), -1);
  for (const DeviceMetrics& device : metrics.devices) {
    const auto stage = static_cast<std::size_t>(stage_of_host.at(device.host));
    out.busy_s[stage] = device.busy_s;
    out.peak_stashed[stage] = device.peak_stashed_microbatches;
    out.peak_memory_bytes[stage] = device.peak_memory_bytes;
  }
  out.timeline = std::move(result.timeline);
  return out;
}

SimOutcome run_case(const SimCase& c, PlatformCache& cache) {
  return run_case(c, cache.get(c.stages, schedule_info(c.schedule).intended_kind, c.hop_s));
}

std::string star_platform_xml(int num_hosts, double latency_s, double bandwidth_Bps) {
  std::string xml =
      "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      "<platform version=\"4.1\">\n  <zone id=\"star\" routing=\"Full\">\n";
  for (int h = 0; h < num_hosts; ++h) xml += fmt::format("    <host id=\"h{}\" speed=\"1f\"/>\n", h);
  for (int h = 0; h < num_hosts; ++h)
    xml += fmt::format("    <link id=\"l{}\" bandwidth=\"{:.17g}Bps\" latency=\"{:.17g}s\" sharing_policy=\"SPLITDUPLEX\"/>\n",
                       h, bandwidth_Bps, latency_s);
  for (int a = 0; a < num_hosts; ++a)
    for (int b = 0; b < num_hosts; ++b)
      if (a != b)
        xml += fmt::format(
            "    <route src=\"h{}\" dst=\"h{}\" symmetrical=\"NO\"><link_ctn id=\"l{}\" direction=\"UP\"/>"
            "<link_ctn id=\"l{}\" direction=\"DOWN\"/></route>\n",
            a, b, a, b);
  return xml + "  </zone>\n</platform>\n";
}


sim::SimulationResult simulate_dp_ring(const std::string& platform_path, int r, double weight_bytes, double compute_s,
                                       sim::CollectiveModel model, bool distributed,
                                       double gradient_bytes_per_weight_byte, const std::vector<std::string>& hosts) {
  ScheduleOptions options;
  options.num_stages = 1;
  options.micro_batches = r;
  options.replicas = {r};
  sim::SimulationRequest request;
  request.platform_file = platform_path;
  request.program = generate_schedule("dp", options);
  StageCost stage;
  stage.forward_s = compute_s;
  stage.backward_s = compute_s;
  stage.weight_bytes = weight_bytes;
  request.stages = {stage};
  request.hosts.resize(1);
  for (int h = 0; h < r; ++h) request.hosts[0].push_back(hosts.empty() ? fmt::format("h{}", h) : hosts.at(static_cast<std::size_t>(h)));
  request.network = sim::NetworkModel::Analytic;
  request.collective_model = model;
  request.distributed_optimizer = distributed;
  request.gradient_bytes_per_weight_byte = gradient_bytes_per_weight_byte;
  return sim::simulate(request);
}

std::map<std::string, std::pair<double, double>> action_spans(const sim::SimulationResult& result,
                                                             const std::string& action) {
  std::map<std::string, std::pair<double, double>> out;
  for (const TimelineRecord& record : result.timeline.records)
    if (record.action == action) out[record.host] = {record.start_s, record.end_s};
  return out;
}

}  // namespace pipegrid::testutil
