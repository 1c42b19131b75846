// FlexFlow's delta simulation against full re-simulation (docs/search.md,
// "Speed"): the same seeded MCMC search (the same chain, since delta equals
// full exactly) timed once with each, on AlexNet and ResNet-101 over
// FlexFlow's 16-P100 cluster, at two micro-batch counts. Prints steps per
// second of each, the speed-up and the share of tasks delta re-timed;
// FlexFlow's Table 5 reports 2.2-6.9x. Nothing is asserted.

#include <fmt/format.h>

#include <chrono>
#include <string>

#include "search/mcmc.hpp"

namespace {

using namespace pipegrid;

double seconds_of(const search::CostModel& model, search::SearchRequest request, bool full_only, search::SearchResult* out) {
  request.full_only = full_only;
  const auto start = std::chrono::steady_clock::now();
  *out = search::mcmc_search(model, request);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main() {
  const std::string root = PIPEGRID_SOURCE_DIR;
  struct Case {
    const char* name;
    const char* profile;
    long long global_batch;
    int micro_batch_size;
    long long steps;
  };
  const Case cases[] = {
      {"AlexNet, M = 64", "alexnet", 4096, 64, 20000},
      {"AlexNet, M = 256", "alexnet", 4096, 16, 20000},
      {"ResNet-101, M = 16", "resnet101", 1024, 64, 5000},
      {"ResNet-101, M = 64", "resnet101", 1024, 16, 5000},
  };
  fmt::print("{:<22} {:>8} {:>12} {:>12} {:>9} {:>10}\n", "case (16 P100)", "steps", "full steps/s", "delta steps/s",
             "speed-up", "re-timed");
  for (const Case& c : cases) {
    search::SearchRequest request;
    request.profile_file = root + "/models/pipedream/" + c.profile + "/graph.txt";
    request.platform_file = root + "/platforms/flexflow-p100-4x4.xml";
    request.global_batch_size = c.global_batch;
    request.micro_batch_size = c.micro_batch_size;
    request.micro_batch_scaling = "linear";
    request.budget_steps = c.steps;
    request.seed = 1;
    request.simgrid = false;
    request.memory = "1TB";  // every proposal timed (none refused for memory)
    const auto model = search::make_cost_model(request);
    search::SearchResult full, delta;
    const double full_s = seconds_of(*model, request, true, &full);
    const double delta_s = seconds_of(*model, request, false, &delta);
    const double evaluated = static_cast<double>(delta.steps - delta.rejected_memory);
    fmt::print("{:<22} {:>8} {:>12.0f} {:>12.0f} {:>8.2f}x {:>9.1f}%\n", c.name, delta.steps, evaluated / full_s,
               evaluated / delta_s, full_s / delta_s,
               100.0 * static_cast<double>(delta.tasks_retimed) / static_cast<double>(delta.tasks_total));
  }
  return 0;
}
