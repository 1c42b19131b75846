// Engine throughput benchmark (not a test: nothing here is gated).
// Simulates a 64-device, M = 256 1F1B-SNO plan with pipegrid's engine and,
// in the same run, a bare SimGrid actor loop doing the same number of
// executions and communications on the same platform; prints both rates and
// their ratio. Each side runs in its own process (one SimGrid engine per
// process). The two sides alternate `repeats` times; each figure is the
// best of its repeats (wall clock, and CPU seconds of the process and its
// children), so that other load on the machine weighs on both alike.
//
// Usage: pipegrid_engine_bench [devices] [micro-batches] [repeats]

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <simgrid/s4u.hpp>

#include "schedules/schedules.hpp"
#include "sim/engine.hpp"

namespace sg = simgrid::s4u;

namespace {

std::string write_chain_platform(int devices) {
  std::string xml =
      "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      "<platform version=\"4.1\">\n<zone id=\"bench\" routing=\"Full\">\n";
  for (int d = 0; d < devices; ++d) xml += fmt::format("<host id=\"h{}\" speed=\"1Gf\"/>\n", d);
  for (int d = 0; d + 1 < devices; ++d)
    xml += fmt::format("<link id=\"l{}\" bandwidth=\"10GBps\" latency=\"5us\" sharing_policy=\"SPLITDUPLEX\"/>\n", d);
  for (int d = 0; d + 1 < devices; ++d) {
    xml += fmt::format("<route src=\"h{0}\" dst=\"h{1}\" symmetrical=\"NO\"><link_ctn id=\"l{0}\" direction=\"UP\"/></route>\n", d, d + 1);
    xml += fmt::format("<route src=\"h{1}\" dst=\"h{0}\" symmetrical=\"NO\"><link_ctn id=\"l{0}\" direction=\"DOWN\"/></route>\n", d, d + 1);
  }
  xml += "</zone>\n</platform>\n";
  char name[] = "/tmp/pipegrid-bench-XXXXXX.xml";
  const int fd = mkstemps(name, 4);
  if (fd < 0) std::abort();
  close(fd);
  std::ofstream(name) << xml;
  return name;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// CPU seconds (user + system) of this process and its waited-for children.
double cpu_seconds() {
  double total = 0;
  for (const int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage usage{};
    getrusage(who, &usage);
    total += static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
             1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  }
  return total;
}

struct Timing {
  double wall = 1e300, cpu = 1e300;
  void keep_best(double wall_s, double cpu_s) {
    wall = std::min(wall, wall_s);
    cpu = std::min(cpu, cpu_s);
  }
};

// The bare loop: per device, M forwards and M backwards as plain executions,
// each followed by a send to the neighbour; in its own process.
void bare_loop(const std::string& platform, int devices, int micro_batches) {
  const pid_t child = fork();
  if (child == 0) {
    int argc = 2;
    char arg0[] = "bench", arg1[] = "--log=root.thres:critical";
    char* argv[] = {arg0, arg1, nullptr};
    sg::Engine engine(&argc, argv);
    engine.load_platform(platform);
    for (int d = 0; d < devices; ++d)
      sg::Actor::create(fmt::format("bare{}", d), sg::Host::by_name(fmt::format("h{}", d)), [d, devices, micro_batches] {
        sg::Host* self = sg::this_actor::get_host();
        std::vector<sg::CommPtr> sends;
        for (int m = 0; m < 2 * micro_batches; ++m) {
          sg::this_actor::execute(1e6);
          const bool forward = m < micro_batches;
          const int peer = forward ? d + 1 : d - 1;
          if (peer < 0 || peer >= devices) continue;
          auto comm = sg::Comm::sendto_init(self, sg::Host::by_name(fmt::format("h{}", peer)));
          comm->set_payload_size(1000000);
          comm->start();
          sends.push_back(comm);
        }
        sg::Comm::wait_all(sends);
      });
    engine.run();
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
}

}  // namespace

int main(int argc, char** argv) {
  const int devices = argc > 1 ? std::atoi(argv[1]) : 64;
  const int micro_batches = argc > 2 ? std::atoi(argv[2]) : 256;
  const int repeats = std::max(1, argc > 3 ? std::atoi(argv[3]) : 3);
  const std::string platform = write_chain_platform(devices);

  pipegrid::ScheduleOptions options;
  options.num_stages = devices;
  options.micro_batches = micro_batches;
  pipegrid::sim::SimulationRequest request;
  request.platform_file = platform;
  request.program = pipegrid::generate_schedule("1f1b-sno", options);
  for (int d = 0; d < devices; ++d) {
    pipegrid::StageCost cost;
    cost.forward_s = 1e-3;
    cost.backward_s = 2e-3;
    cost.input_bytes = cost.output_bytes = 1e6;
    request.stages.push_back(cost);
    request.hosts.push_back({fmt::format("h{}", d)});
  }
  const double computes = 2.0 * devices * micro_batches;
  const double transfers = 2.0 * (devices - 1) * micro_batches;

  Timing engine, bare;
  std::size_t records = 0;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    double cpu = cpu_seconds();
    records = pipegrid::sim::simulate(request).timeline.records.size();
    engine.keep_best(seconds_since(start), cpu_seconds() - cpu);
    start = std::chrono::steady_clock::now();
    cpu = cpu_seconds();
    bare_loop(platform, devices, micro_batches);
    bare.keep_best(seconds_since(start), cpu_seconds() - cpu);
  }
  std::remove(platform.c_str());

  const double activities = computes + transfers;
  std::printf("plan: %d devices, M = %d: %.0f executions + %.0f transfers = %.0f activities (%zu timeline records)\n",
              devices, micro_batches, computes, transfers, activities, records);
  std::printf("best of %d runs each; wall clock (CPU seconds of the process and its children)\n", repeats);
  std::printf("pipegrid engine : %8.3f s (%.3f)  %10.0f activities/s  (fork, simulate, timeline round trip included)\n",
              engine.wall, engine.cpu, activities / engine.wall);
  std::printf("bare SimGrid    : %8.3f s (%.3f)  %10.0f activities/s\n", bare.wall, bare.cpu, activities / bare.wall);
  std::printf("ratio engine/bare rate: %.2f (CPU %.2f); aim >= 0.77\n", bare.wall / engine.wall, bare.cpu / engine.cpu);
  std::printf("engine vs the 0.3 s aim: %.3f s = %.2fx the aim\n", engine.wall, engine.wall / 0.3);
  return 0;
}
