#include "cli/explore_command.hpp"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/simulation.hpp"
#include "core/device_model.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/model_graph.hpp"
#include "core/tensor_parallel.hpp"
#include "core/termination.hpp"
#include "partitioners/explorer.hpp"
#include "partitioners/partitioners.hpp"
#include "schedules/beyond.hpp"
#include "schedules/schedules.hpp"
#include "sim/engine.hpp"

namespace pipegrid::cli {
namespace {

struct ExploreOptions {
  std::string platform;
  std::string profile;
  std::optional<int> batch_size;
  int mini_batch_size = 0;
  std::string memory;
  std::vector<std::string> schedules;
  std::vector<std::string> partitioners;
  std::vector<int> micro_batches;
  std::string semantics = "exact";
  int jobs = 0;
  std::string network = "simgrid";
  std::string transfer_rule = "share";
  std::string optimizer;  ///< "": default_optimizer of the dtype
  bool json = false;
  bool split_layers = false;
  std::string save_plan;
  std::vector<int> tensor_parallel;  ///< --tensor-parallel: group sizes to try (empty: 1, 2, 4, 8 where they apply)
  std::string dtype;                 ///< --dtype: the profile's number format when it states none
};

ExploreOptions options;

/// One partition a candidate runs on: the profile it refers to (a split
/// layer makes its own) and who chose it.
struct PartitionChoice {
  std::string label;  ///< "uniform", "pipedream", "uniform=bapipe", ...
  Profile profile;
  Partition partition;
};

struct Candidate {
  std::string schedule;
  bool stale_weights = false;
  int tensor_parallel = 1;  ///< hosts per group; the partition is over the groups' leaders
  MicroBatchShape shape;
  std::optional<std::size_t> partition;  ///< into the choices; absent: see error
  std::optional<std::string> error;      ///< no partition could be made
};

std::string replicas_text(const Partition& partition) {
  std::string text;
  for (const auto& hosts : partition.hosts) text += (text.empty() ? "" : "-") + std::to_string(hosts.size());
  return text;
}

std::vector<std::vector<int>> stage_layer_ranges(const Partition& partition) {
  std::vector<std::vector<int>> ranges(partition.num_stages(), std::vector<int>{-1, -1});
  for (std::size_t l = 0; l < partition.stage_of_layer.size(); ++l) {
    auto& range = ranges[partition.stage_of_layer[l]];
    if (range[0] < 0) range[0] = static_cast<int>(l);
    range[1] = static_cast<int>(l);
  }
  return ranges;
}

bool same_partition(const PartitionChoice& a, const PartitionChoice& b) {
  if (a.profile.layers.size() != b.profile.layers.size()) return false;
  for (std::size_t l = 0; l < a.profile.layers.size(); ++l)
    if (a.profile.layers[l].name != b.profile.layers[l].name) return false;
  return a.partition.stage_of_layer == b.partition.stage_of_layer && a.partition.hosts == b.partition.hosts &&
         a.partition.split_last == b.partition.split_last;
}

/// Everything the candidates are made from, read once.
struct Exploration {
  ModelGraph graph;
  PlatformSummary platform;
  std::optional<double> memory_limit_bytes;
  std::vector<ExploredSchedule> schedules;
  MicroBatchChoices choices;
  /// Tensor-parallel group sizes tried (exploration_tensor_parallel), and per
  /// size the platform the pipeline runs over (the groups' leaders; 1: the
  /// platform) and what the transform did (Plan::tensor_parallel_note).
  std::vector<int> tensor_parallel = {1};
  std::map<int, PlatformSummary> platform_at_t;
  std::map<int, std::string> tensor_parallel_note;
  /// (micro-batch size, t) -> platform, profile at the size (per group
  /// member), run options.
  std::map<std::pair<int, int>, Plan> base_plan_at_size;
  std::vector<PartitionChoice> partitions;
  std::vector<Candidate> candidates;
  std::vector<std::string> notes;
};

// Whether the outputs show tensor parallelism (a t > 1 was tried); without
// it they read as before tensor parallelism existed.
bool shows_tensor_parallel(const Exploration& exploration) { return exploration.tensor_parallel != std::vector<int>{1}; }

Plan candidate_plan(const Exploration& exploration, const Candidate& candidate) {
  Plan plan = exploration.base_plan_at_size.at({candidate.shape.micro_batch_size, candidate.tensor_parallel});
  const PartitionChoice& choice = exploration.partitions.at(*candidate.partition);
  plan.schedule = candidate.schedule;
  plan.profile = choice.profile;
  plan.partition = choice.partition;
  const ScheduleInfo& info = schedule_info(candidate.schedule);
  plan.virtual_stages = default_virtual_stages(candidate.schedule);
  plan.micro_batches = info.flushed ? candidate.shape.micro_batches : 1;
  plan.extend_mini_batches = !info.flushed;
  plan.mini_batches = info.flushed ? 1 : api::default_mini_batches(plan);
  return plan;
}

// The candidates with groups of t hosts (t = 1: no tensor parallelism).
void build_candidates(Exploration& exploration, int t) {
  const PlatformSummary& platform = exploration.platform_at_t.at(t);
  std::vector<std::string> host_names;
  for (const HostInfo& host : platform.hosts) host_names.push_back(host.name);
  const std::vector<std::string> partitioners = options.partitioners.empty() ? partitioner_names() : options.partitioners;
  for (const std::string& name : partitioners)
    if (std::find(partitioner_names().begin(), partitioner_names().end(), name) == partitioner_names().end())
      throw InputError(fmt::format("--partitioners: expected uniform, pipedream or bapipe, found '{}'", name));

  // The micro-batch sizes in play, with a model graph at each.
  std::set<int> sizes;
  for (const MicroBatchShape& shape : exploration.choices.shapes) sizes.insert(shape.micro_batch_size);
  std::map<int, ModelGraph> graph_at_size;
  for (const int size : sizes) {
    api::PlanRequest request;
    request.platform_file = options.platform;
    request.profile_file = options.profile;
    request.batch_size = options.batch_size;
    request.micro_batch_size = size;
    request.schedule = "dp";
    request.network = options.network;
    request.transfer_rule = options.transfer_rule;
    request.optimizer = options.optimizer;
    request.dtype = options.dtype;
    request.tensor_parallel = t;
    Plan base = api::make_plan(request);
    graph_at_size[size] = t == 1 && size == exploration.graph.profile.micro_batch_size ? exploration.graph : chain_graph(base.profile);
    exploration.tensor_parallel_note[t] = base.tensor_parallel_note;
    exploration.base_plan_at_size.emplace(std::make_pair(size, t), std::move(base));
  }

  // Partitions that do not depend on the schedule, per size: uniform and
  // PipeDream's (with replication, and straight).
  struct Fixed {
    std::optional<PartitionChoice> choice;
    std::string error;
  };
  std::map<std::pair<int, std::string>, Fixed> fixed;
  // The inputs explore's partitions are made from at a size (the same
  // partition_for_run that simulate --partitioner calls).
  const auto partition_input = [&](int size) {
    RunPartitionInput input;
    input.graph = graph_at_size.at(size);
    input.platform = platform;
    input.memory_limit_bytes = exploration.memory_limit_bytes;
    input.dtype = exploration.base_plan_at_size.at({size, t}).dtype;
    input.optimizer = exploration.base_plan_at_size.at({size, t}).optimizer;
    return input;
  };
  // PipeDream's memory constraint (its stash formula) describes its own
  // pipeline: the stale-weight schedules also get the partition it chooses
  // under the memory in force, when every device's memory is known.
  const bool memory_known = pipedream_memory_capacity(platform, exploration.memory_limit_bytes).has_value();
  for (const int size : sizes) {
    for (const std::string& name : partitioners) {
      if (name == "bapipe") continue;
      std::vector<std::string> labels = {name};
      if (name == "pipedream") labels = memory_known ? std::vector<std::string>{"pipedream", "pipedream-straight", "pipedream-memory"}
                                                     : std::vector<std::string>{"pipedream", "pipedream-straight"};
      for (const std::string& label : labels) {
        Fixed entry;
        try {
          PartitionerOutput output = partition_for_run(label, partition_input(size));
          entry.choice = PartitionChoice{label, std::move(output.profile), std::move(output.partition)};
        } catch (const InputError& error) {
          entry.error = fmt::format("no {} partition: {}", label, error.what());
        }
        fixed[{size, label}] = std::move(entry);
      }
    }
  }

  const auto add_candidates = [&](const ExploredSchedule& schedule, const MicroBatchShape& shape) {
    Candidate candidate;
    candidate.schedule = schedule.name;
    candidate.stale_weights = schedule.stale_weights;
    candidate.tensor_parallel = t;
    candidate.shape = shape;
    if (schedule_info(schedule.name).single_stage) {
      PartitionChoice whole{"whole model", graph_at_size.at(shape.micro_batch_size).profile, {}};
      whole.partition.stage_of_layer.assign(whole.profile.layers.size(), 0);
      whole.partition.hosts = {host_names};
      exploration.partitions.push_back(std::move(whole));
      candidate.partition = exploration.partitions.size() - 1;
      exploration.candidates.push_back(candidate);
      return;
    }
    // Interleaved and V schedules (several stages per device): the uniform
    // partition into devices x v stages, placed by the schedule's stage map.
    if (const int v = default_virtual_stages(schedule.name); v > 1) {
      const Profile& profile = graph_at_size.at(shape.micro_batch_size).profile;
      const std::size_t stages = host_names.size() * static_cast<std::size_t>(v);
      if (stages > profile.layers.size()) {
        candidate.error = fmt::format("no uniform partition: {} devices x {} stages each need {} layers, the profile has {}",
                                      host_names.size(), v, stages, profile.layers.size());
        exploration.candidates.push_back(candidate);
        return;
      }
      const std::vector<int> device = stage_to_device(static_cast<int>(stages), v, stage_map_of(schedule.name));
      std::vector<std::string> stage_hosts;
      for (std::size_t s = 0; s < stages; ++s) stage_hosts.push_back(host_names[static_cast<std::size_t>(device[s])]);
      PartitionChoice uniform{"uniform", profile, uniform_partition(profile, stage_hosts, static_cast<int>(stages))};
      exploration.partitions.push_back(std::move(uniform));
      candidate.partition = exploration.partitions.size() - 1;
      exploration.candidates.push_back(candidate);
      return;
    }
    // Each partitioner's choice (or why it has none); a partition chosen
    // twice runs once, labelled with both names.
    std::vector<PartitionChoice> chosen;
    std::vector<std::string> failures;
    for (const std::string& name : partitioners) {
      std::vector<std::string> labels = {name};
      if (name == "pipedream") {
        labels = {"pipedream", "pipedream-straight"};
        if (schedule.stale_weights && fixed.count({shape.micro_batch_size, "pipedream-memory"})) labels.push_back("pipedream-memory");
      }
      for (const std::string& label : labels) {
        std::optional<PartitionChoice> choice;
        if (name == "bapipe") {
          // BaPipe plans flushed pipelines of whole backwards; the PipeDream
          // family has its own.
          if (!schedule_info(schedule.name).flushed || is_beyond_schedule(schedule.name)) continue;
          try {
            RunPartitionInput input = partition_input(shape.micro_batch_size);
            input.schedule = schedule.name;
            input.micro_batches = schedule_info(schedule.name).flushed ? shape.micro_batches : 1;
            input.split_layers = options.split_layers;
            PartitionerOutput output = partition_for_run("bapipe", input);
            choice = PartitionChoice{label, std::move(output.profile), std::move(output.partition)};
          } catch (const InputError& error) {
            failures.push_back(error.what());
          }
        } else {
          const Fixed& entry = fixed.at({shape.micro_batch_size, label});
          if (entry.choice) choice = entry.choice;
          else failures.push_back(entry.error);
        }
        if (!choice) continue;
        const auto same = std::find_if(chosen.begin(), chosen.end(), [&](const PartitionChoice& c) { return same_partition(c, *choice); });
        if (same != chosen.end()) same->label += "=" + label;
        else chosen.push_back(std::move(*choice));
      }
    }
    // A partition with stages that do no compute also runs without them, on
    // fewer devices (the ranking prefers that one when it is as fast).
    for (std::size_t c = 0, original = chosen.size(); c < original; ++c) {
      const std::optional<Partition> merged = merge_idle_stages(chosen[c].profile, chosen[c].partition, platform);
      if (!merged) continue;
      PartitionChoice fewer{chosen[c].label.substr(0, chosen[c].label.find('=')) + "-merged", chosen[c].profile, *merged};
      const auto same = std::find_if(chosen.begin(), chosen.end(), [&](const PartitionChoice& other) { return same_partition(other, fewer); });
      if (same != chosen.end()) same->label += "=" + fewer.label;
      else chosen.push_back(std::move(fewer));
    }
    for (PartitionChoice& choice : chosen) {
      exploration.partitions.push_back(std::move(choice));
      Candidate one = candidate;
      one.partition = exploration.partitions.size() - 1;
      exploration.candidates.push_back(one);
    }
    for (const std::string& failure : failures) {
      Candidate one = candidate;
      one.error = failure;
      exploration.candidates.push_back(one);
    }
  };

  for (const ExploredSchedule& schedule : exploration.schedules) {
    if (schedule.stale_weights) {
      // One micro-batch per mini-batch (PipeDream's model): each size once.
      for (const int size : sizes) add_candidates(schedule, {1, size});
    } else {
      for (const MicroBatchShape& shape : exploration.choices.shapes) add_candidates(schedule, shape);
    }
  }
}

/// Runs one candidate (in a worker process) and condenses the result.
CandidateOutcome run_candidate(const Exploration& exploration, const Candidate& candidate) {
  CandidateOutcome outcome;
  outcome.schedule = candidate.schedule;
  outcome.stale_weights = candidate.stale_weights;
  outcome.micro_batches = schedule_info(candidate.schedule).flushed ? candidate.shape.micro_batches : 1;
  outcome.micro_batch_size = candidate.shape.micro_batch_size;
  outcome.tensor_parallel = candidate.tensor_parallel;
  const PlatformSummary& platform = exploration.platform_at_t.at(candidate.tensor_parallel);
  if (!candidate.partition) {
    outcome.partitioner = "-";
    outcome.error = candidate.error;
    return outcome;
  }
  const PartitionChoice& choice = exploration.partitions[*candidate.partition];
  outcome.partitioner = choice.label;
  for (const auto& hosts : choice.partition.hosts) outcome.devices += static_cast<int>(hosts.size()) * candidate.tensor_parallel;
  if (!schedule_info(candidate.schedule).single_stage) {
    outcome.idle_stages = idle_stages(choice.profile, choice.partition, platform);
    if (merge_idle_stages(choice.profile, choice.partition, platform))
      outcome.merged_as = choice.label.substr(0, choice.label.find('=')) + "-merged";
  }
  outcome.replicas = schedule_info(candidate.schedule).single_stage ? fmt::format("{}x", choice.partition.hosts[0].size())
                                                                    : replicas_text(choice.partition);
  try {
    Plan plan = candidate_plan(exploration, candidate);
    const api::RunResult result = api::run_plan(plan);
    outcome.throughput_samples_per_s = result.metrics.throughput_samples_per_s;
    outcome.minibatch_time_s = result.metrics.minibatch_time_s;
    outcome.bubble_fraction = result.metrics.bubble_fraction;
    outcome.tflops_per_gpu = result.utilisation.tflops_per_gpu;
    outcome.mfu = result.utilisation.mfu;
    for (const DeviceMetrics& device : result.metrics.devices) {
      if (device.peak_memory_bytes > outcome.peak_memory_bytes) {
        outcome.peak_memory_bytes = device.peak_memory_bytes;
        outcome.peak_memory_host = device.host;
      }
      // What the device may use: its capacity (or --memory) less its reserve.
      std::optional<double> capacity =
          exploration.memory_limit_bytes ? exploration.memory_limit_bytes : device.memory_capacity_bytes;
      if (capacity) *capacity -= result.platform.host(device.host).memory_reserve_of(*capacity);
      if (capacity && device.peak_memory_bytes > *capacity) outcome.overflows.push_back({device.host, device.peak_memory_bytes, *capacity});
    }
  } catch (const InputError& error) {
    outcome.error = error.what();
  } catch (const ProgramError& error) {
    outcome.error = error.what();
  }
  return outcome;
}

nlohmann::json outcome_to_json(const CandidateOutcome& outcome) {
  nlohmann::json document;
  document["schedule"] = outcome.schedule;
  document["micro_batches"] = outcome.micro_batches;
  document["micro_batch_size"] = outcome.micro_batch_size;
  document["partitioner"] = outcome.partitioner;
  document["replicas"] = outcome.replicas;
  document["stale_weights"] = outcome.stale_weights;
  document["tensor_parallel"] = outcome.tensor_parallel;
  if (outcome.error) document["error"] = *outcome.error;
  document["throughput"] = outcome.throughput_samples_per_s;
  document["minibatch_time"] = outcome.minibatch_time_s;
  document["bubble"] = outcome.bubble_fraction;
  document["tflops_per_gpu"] = outcome.tflops_per_gpu ? nlohmann::json(*outcome.tflops_per_gpu) : nlohmann::json();
  document["mfu"] = outcome.mfu ? nlohmann::json(*outcome.mfu) : nlohmann::json();
  document["peak_memory"] = outcome.peak_memory_bytes;
  document["peak_memory_host"] = outcome.peak_memory_host;
  document["overflows"] = nlohmann::json::array();
  for (const MemoryOverflow& overflow : outcome.overflows)
    document["overflows"].push_back({overflow.host, overflow.peak_bytes, overflow.capacity_bytes});
  document["devices"] = outcome.devices;
  document["idle_stages"] = outcome.idle_stages;
  document["merged_as"] = outcome.merged_as;
  return document;
}

CandidateOutcome outcome_from_json(const nlohmann::json& document) {
  CandidateOutcome outcome;
  outcome.schedule = document.at("schedule");
  outcome.micro_batches = document.at("micro_batches");
  outcome.micro_batch_size = document.at("micro_batch_size");
  outcome.partitioner = document.at("partitioner");
  outcome.replicas = document.at("replicas");
  outcome.stale_weights = document.at("stale_weights");
  outcome.tensor_parallel = document.at("tensor_parallel");
  if (document.contains("error")) outcome.error = document.at("error").get<std::string>();
  outcome.throughput_samples_per_s = document.at("throughput");
  outcome.minibatch_time_s = document.at("minibatch_time");
  outcome.bubble_fraction = document.at("bubble");
  if (!document.at("tflops_per_gpu").is_null()) outcome.tflops_per_gpu = document.at("tflops_per_gpu").get<double>();
  if (!document.at("mfu").is_null()) outcome.mfu = document.at("mfu").get<double>();
  outcome.peak_memory_bytes = document.at("peak_memory");
  outcome.peak_memory_host = document.at("peak_memory_host");
  for (const auto& overflow : document.at("overflows")) outcome.overflows.push_back({overflow[0], overflow[1], overflow[2]});
  outcome.devices = document.at("devices");
  outcome.idle_stages = document.at("idle_stages").get<std::vector<int>>();
  outcome.merged_as = document.at("merged_as");
  return outcome;
}

/// Draws "[#####-----] 23/77" on stderr when it is a terminal.
class ProgressBar {
 public:
  explicit ProgressBar(std::size_t total) : total_(total), enabled_(isatty(STDERR_FILENO) == 1) {}
  void update(std::size_t done) const {
    if (!enabled_ || total_ == 0) return;
    const int width = 40;
    const int filled = static_cast<int>(width * done / total_);
    std::cerr << fmt::format("\rexplore: [{}{}] {}/{} candidates simulated", std::string(filled, '#'),
                             std::string(width - filled, '-'), done, total_)
              << std::flush;
  }
  void finish() const {
    if (enabled_) std::cerr << "\r" << std::string(80, ' ') << "\r" << std::flush;
  }

 private:
  std::size_t total_;
  bool enabled_;
};

/// Simulates every candidate, `jobs` worker processes at a time (SimGrid
/// allows one engine per process, and processes use every core). Outcomes
/// come back in candidate order whatever the order they finish in.
std::vector<CandidateOutcome> run_candidates(const Exploration& exploration, int jobs) {
  const std::size_t total = exploration.candidates.size();
  std::vector<CandidateOutcome> outcomes(total);
  struct Worker {
    pid_t pid;
    int fd;
    std::size_t index;
    std::string output;
  };
  std::vector<Worker> running;
  std::size_t next = 0, done = 0;
  ProgressBar progress(total);
  progress.update(0);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  while (done < total) {
    while (next < total && static_cast<int>(running.size()) < jobs) {
      int fds[2];
      if (pipe(fds) != 0) throw std::runtime_error("explore: pipe failed");
      // A worker dies with explore; terminated, it stops its own simulation
      // first (core/termination.hpp).
      const pid_t pid = fork_child(ChildStop::Terminate);
      if (pid == 0) {
        close(fds[0]);
        std::string text;
        try {
          text = outcome_to_json(run_candidate(exploration, exploration.candidates[next])).dump();
        } catch (const std::exception& error) {
          CandidateOutcome failed;
          failed.schedule = exploration.candidates[next].schedule;
          failed.tensor_parallel = exploration.candidates[next].tensor_parallel;
          failed.partitioner = "-";
          failed.error = fmt::format("internal error: {}", error.what());
          text = outcome_to_json(failed).dump();
        }
        std::size_t written = 0;
        while (written < text.size()) {
          const ssize_t n = write(fds[1], text.data() + written, text.size() - written);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) _exit(1);
          written += static_cast<std::size_t>(n);
        }
        _exit(0);
      }
      close(fds[1]);
      running.push_back({pid, fds[0], next, ""});
      ++next;
    }
    std::vector<pollfd> polled;
    for (const Worker& worker : running) polled.push_back({worker.fd, POLLIN, 0});
    if (poll(polled.data(), polled.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("explore: poll failed");
    }
    for (std::size_t w = 0; w < running.size();) {
      Worker& worker = running[w];
      if (polled[w].revents == 0) {
        ++w;
        continue;
      }
      char buffer[65536];
      const ssize_t n = read(worker.fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) {
        ++w;
        continue;
      }
      if (n > 0) {
        worker.output.append(buffer, static_cast<std::size_t>(n));
        ++w;
        continue;
      }
      // End of its output: collect the worker.
      close(worker.fd);
      int status = 0;
      while (waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
      }
      forget_child(worker.pid);
      const Candidate& candidate = exploration.candidates[worker.index];
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !worker.output.empty()) {
        outcomes[worker.index] = outcome_from_json(nlohmann::json::parse(worker.output));
      } else {
        CandidateOutcome& failed = outcomes[worker.index];
        failed.schedule = candidate.schedule;
        failed.tensor_parallel = candidate.tensor_parallel;
        failed.partitioner = "-";
        failed.error = WIFSIGNALED(status) ? fmt::format("the simulation died of signal {}", WTERMSIG(status))
                                           : "the simulation's process failed";
      }
      ++done;
      progress.update(done);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(w));
      polled.erase(polled.begin() + static_cast<std::ptrdiff_t>(w));
    }
  }
  progress.finish();
  // A candidate that hit an internal error (a broken invariant of its
  // result, say) is a bug: explore reports it instead of ranking around it.
  for (std::size_t i = 0; i < outcomes.size(); ++i)
    if (outcomes[i].error && outcomes[i].error->rfind("internal error: ", 0) == 0)
      throw std::runtime_error(fmt::format("explore: candidate {} ({}): {}", i + 1, exploration.candidates[i].schedule,
                                           outcomes[i].error->substr(16)));
  return outcomes;
}

std::string throughput_text(double samples_per_s) { return fmt::format("{:.4g}", samples_per_s); }

// With `tensor_parallel`, a column "tp" (hosts per tensor-parallel group)
// after the replicas; without it the table reads as before tensor parallelism.
std::string table(const std::vector<CandidateOutcome>& outcomes, const std::vector<RankedCandidate>& ranking,
                  bool tensor_parallel) {
  // Partition labels ("uniform=bapipe") and replicas vary in length: the
  // columns take the widest.
  std::size_t partition_width = 9, replicas_width = 8, schedule_width = 13;
  for (const RankedCandidate& entry : ranking) {
    schedule_width = std::max(schedule_width, outcomes[entry.index].schedule.size());
    partition_width = std::max(partition_width, outcomes[entry.index].partitioner.size());
    replicas_width = std::max(replicas_width, outcomes[entry.index].replicas.size());
  }
  std::string tp = "tp";  // the row's tensor-parallel cell
  const auto row = [&](const std::string& rank, const std::string& schedule, const std::string& m, const std::string& micro,
                       const std::string& partition, const std::string& replicas, const std::string& throughput,
                       const std::string& time, const std::string& bubble, const std::string& mfu, const std::string& memory,
                       const std::string& verdict) {
    return fmt::format("{:>4}  {:<{}} {:>4} {:>6}  {:<{}}  {:<{}}{} {:>10} {:>11} {:>6} {:>6} {:>11}  {}\n", rank, schedule,
                       schedule_width, m, micro, partition, partition_width, replicas, replicas_width,
                       tensor_parallel ? fmt::format(" {:>3}", tp) : std::string(), throughput, time, bubble, mfu, memory,
                       verdict);
  };
  std::string text = row("rank", "schedule", "M", "micro", "partition", "replicas", "samples/s", "mini-batch", "bubble", "MFU",
                         "peak mem", "verdict");
  for (const RankedCandidate& entry : ranking) {
    const CandidateOutcome& o = outcomes[entry.index];
    const bool ran = !o.error;
    tp = std::to_string(o.tensor_parallel);
    text += row(entry.rank > 0 ? std::to_string(entry.rank) : "-", o.schedule, std::to_string(o.micro_batches),
                std::to_string(o.micro_batch_size), o.partitioner, o.replicas.empty() ? "-" : o.replicas,
                ran ? throughput_text(o.throughput_samples_per_s) : "-", ran ? human_seconds(o.minibatch_time_s) : "-",
                ran ? fmt::format("{:.3f}", o.bubble_fraction) : "-",
                ran && o.mfu ? fmt::format("{:.1f}%", *o.mfu * 100) : "-", ran ? human_bytes(o.peak_memory_bytes) : "-",
                entry.verdict);
  }
  return text;
}

/// The best fitting candidate of each schedule, in ranking order: the
/// summary that says why the winner's schedule won.
std::string best_per_schedule(const std::vector<CandidateOutcome>& outcomes, const std::vector<RankedCandidate>& ranking,
                              bool tensor_parallel) {
  std::string text;
  std::set<std::string> seen;
  std::optional<double> best;
  std::size_t width = 13;
  for (const RankedCandidate& entry : ranking) width = std::max(width, outcomes[entry.index].schedule.size());
  for (const RankedCandidate& entry : ranking) {
    const CandidateOutcome& o = outcomes[entry.index];
    if (entry.rank == 0 || !seen.insert(o.schedule).second) continue;
    if (!best) best = o.throughput_samples_per_s;
    text += fmt::format("  {:<{}} {:>10} samples/s  {:>7}  with M={}, micro-batch {}, {} partition ({}){}, peak {} on {}\n",
                        o.schedule, width, throughput_text(o.throughput_samples_per_s),
                        seen.size() == 1                                              ? "best"
                        : std::fabs(o.throughput_samples_per_s - *best) <= 1e-9 * *best ? "same"
                                                                                        : fmt::format("-{:.1f}%", 100.0 * (1.0 - o.throughput_samples_per_s / *best)),
                        o.micro_batches, o.micro_batch_size, o.partitioner, o.replicas,
                        tensor_parallel ? fmt::format(", tensor parallel {}", o.tensor_parallel) : std::string(),
                        human_bytes(o.peak_memory_bytes), o.peak_memory_host);
  }
  for (const RankedCandidate& entry : ranking) {
    const CandidateOutcome& o = outcomes[entry.index];
    if (!seen.insert(o.schedule).second) continue;
    // Every candidate of this schedule is out of memory or failed; the first
    // listed is the closest to fitting.
    text += fmt::format("  {:<{}} {:>10} {:>17}  nothing fits: {}\n", o.schedule, width, "-", "", entry.verdict);
  }
  return text;
}

nlohmann::ordered_json ranked_json(const std::vector<CandidateOutcome>& outcomes, const std::vector<RankedCandidate>& ranking,
                                   const Exploration& exploration, const std::vector<std::size_t>& candidate_of_outcome) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const RankedCandidate& entry : ranking) {
    const CandidateOutcome& o = outcomes[entry.index];
    nlohmann::ordered_json item;
    item["rank"] = entry.rank;
    item["verdict"] = entry.verdict;
    item["fits"] = o.fits();
    item["schedule"] = o.schedule;
    item["stale_weights"] = o.stale_weights;
    if (shows_tensor_parallel(exploration)) item["tensor_parallel"] = o.tensor_parallel;
    item["micro_batches"] = o.micro_batches;
    item["micro_batch_size"] = o.micro_batch_size;
    item["partitioner"] = o.partitioner;
    item["stages_without_compute"] = o.idle_stages;
    const Candidate& candidate = exploration.candidates[candidate_of_outcome[entry.index]];
    if (candidate.partition) {
      const Partition& partition = exploration.partitions[*candidate.partition].partition;
      nlohmann::ordered_json stages = nlohmann::ordered_json::array();
      const auto ranges = stage_layer_ranges(partition);
      for (int s = 0; s < partition.num_stages(); ++s)
        stages.push_back({{"layers", ranges[s]}, {"replicas", partition.hosts[s].size()}, {"hosts", partition.hosts[s]}});
      item["stages"] = stages;
    }
    if (o.error) {
      item["error"] = *o.error;
    } else {
      item["throughput_samples_per_s"] = o.throughput_samples_per_s;
      item["minibatch_time_s"] = o.minibatch_time_s;
      item["bubble_fraction"] = o.bubble_fraction;
      item["tflops_per_gpu"] = o.tflops_per_gpu ? nlohmann::ordered_json(*o.tflops_per_gpu) : nlohmann::ordered_json();
      item["mfu"] = o.mfu ? nlohmann::ordered_json(*o.mfu) : nlohmann::ordered_json();
      item["peak_memory_bytes"] = o.peak_memory_bytes;
      item["peak_memory_host"] = o.peak_memory_host;
      nlohmann::ordered_json overflows = nlohmann::ordered_json::array();
      for (const MemoryOverflow& overflow : o.overflows)
        overflows.push_back({{"host", overflow.host}, {"peak_memory_bytes", overflow.peak_bytes}, {"capacity_bytes", overflow.capacity_bytes}});
      item["out_of_memory"] = overflows;
    }
    list.push_back(item);
  }
  return list;
}

}  // namespace

CLI::App* add_explore_command(CLI::App& app) {
  auto* command = app.add_subcommand("explore", "find the fastest schedule x micro-batches x partition that fits in memory");
  command->add_option("--platform", options.platform, "SimGrid platform XML (hosts, routes, memory)")->required();
  command->add_option("--profile", options.profile, "profile JSON, or PipeDream graph.txt")->required();
  command->add_option("--mini-batch-size", options.mini_batch_size, "samples per mini-batch (split into M micro-batches)")->required();
  command->add_option("--memory", options.memory,
                      "memory per device (bytes or 16GiB), in place of the hosts' own `memory`");
  command->add_option("--schedules", options.schedules, "only these schedules (default: every one valid on the hosts)")->delimiter(',');
  command->add_option("--partitioners", options.partitioners, "only these partitioners (default: uniform,pipedream,bapipe)")->delimiter(',');
  command->add_option("--micro-batches", options.micro_batches, "only these micro-batch counts M (default: every divisor)")->delimiter(',');
  command->add_option("--semantics", options.semantics,
                      "exact (default: stale-weight schedules ranked apart) or all (one ranking for every schedule)");
  command->add_option("--jobs", options.jobs, "simulations at once (default: the number of cores)");
  command->add_option("--network", options.network, "simgrid (default) or analytic");
  command->add_option("--transfer-rule", options.transfer_rule,
                      "share (default) or fifo: how concurrent activations and gradients share the network (as simulate)");
  command->add_option("--optimizer", options.optimizer,
                      "sgd, momentum or adam: optimizer state in memory (default: adam for fp16 and bf16, sgd for fp32)");
  command->add_option("--batch-size", options.batch_size, "micro-batch size the profile was measured at (graph.txt)");
  command->add_option("--save-plan", options.save_plan, "write the winner's plan (pipegrid simulate --plan FILE re-runs it)");
  command->add_flag("--json", options.json, "print one JSON object on stdout");
  command->add_flag("--split-layers", options.split_layers,
                    "bapipe: split boundary layers between GPUs too (by default only between FPGAs)");
  command->add_option("--tensor-parallel", options.tensor_parallel,
                      "only these tensor-parallel group sizes (default: 1, 2, 4, 8 where they divide the servers' hosts, "
                      "t > 1 for profiles with transformer layers with FLOPs)")
      ->delimiter(',');
  command->add_option("--dtype", options.dtype, "fp32, fp16 or bf16: the profile's number format when it states none");
  return command;
}

int run_explore_command() {
  if (options.semantics != "exact" && options.semantics != "all")
    throw InputError(fmt::format("--semantics: expected exact or all, found '{}'", options.semantics));
  if (options.jobs < 0) throw InputError(fmt::format("--jobs: expected an integer >= 1, found {}", options.jobs));
  const int jobs = options.jobs > 0 ? options.jobs : std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  sim::parse_network_model(options.network);
  sim::parse_transfer_rule(options.transfer_rule);
  if (!options.optimizer.empty()) optimizer_copies(options.optimizer);

  Exploration exploration;
  exploration.graph = read_model_graph(options.profile, options.batch_size);
  exploration.platform = sim::read_platform(options.platform);
  // Partitioners name the platform in their messages: its file name, so
  // that verdicts read the same wherever the file lies.
  exploration.platform.file = options.platform.substr(options.platform.find_last_of('/') + 1);
  // Layers given by FLOPs only: timed by the hosts' device models at the
  // profile's own micro-batch size (other sizes follow the explorer's
  // scaling), before tensor parallelism splits them.
  try {
    exploration.notes = fill_analytic_times(exploration.graph.profile, exploration.platform);
  } catch (const InputError& error) {
    throw InputError(fmt::format("{}: {}", options.profile, error.what()));
  }
  for (Layer& layer : exploration.graph.profile.layers) layer.times_given = true;
  if (!options.memory.empty()) exploration.memory_limit_bytes = parse_bytes(options.memory, "--memory");
  exploration.schedules = exploration_schedules(exploration.platform.hosts, options.schedules);
  exploration.choices = micro_batch_choices(options.mini_batch_size, profile_micro_batch_sizes(exploration.graph.profile),
                                            options.micro_batches);
  // Tensor parallelism: the group sizes that apply, each with the platform
  // of its groups' leaders.
  const bool splits = std::any_of(exploration.graph.profile.layers.begin(), exploration.graph.profile.layers.end(),
                                  [](const Layer& layer) { return tensor_parallel_splits(layer); });
  exploration.tensor_parallel = exploration_tensor_parallel(options.tensor_parallel, splits, [&](int t) {
    try {
      tensor_parallel_groups(exploration.platform, t);
      return std::string();
    } catch (const InputError& error) {
      return std::string(error.what());
    }
  });
  for (const int t : exploration.tensor_parallel) {
    exploration.platform_at_t[t] =
        t == 1 ? exploration.platform : leader_platform(exploration.platform, tensor_parallel_groups(exploration.platform, t));
    build_candidates(exploration, t);
  }
  const bool show_tp = shows_tensor_parallel(exploration);
  std::vector<CandidateOutcome> outcomes = run_candidates(exploration, jobs);
  std::vector<std::size_t> candidate_of_outcome(outcomes.size());
  for (std::size_t i = 0; i < outcomes.size(); ++i) candidate_of_outcome[i] = i;

  std::vector<std::size_t> main_group, stale_group;
  for (std::size_t i = 0; i < outcomes.size(); ++i)
    (options.semantics == "exact" && outcomes[i].stale_weights ? stale_group : main_group).push_back(i);
  const std::vector<RankedCandidate> ranking = rank_candidates(outcomes, main_group);
  const std::vector<RankedCandidate> stale_ranking = rank_candidates(outcomes, stale_group);
  const bool has_winner = !ranking.empty() && ranking.front().rank == 1;

  if (has_winner && !options.save_plan.empty())
    write_file_atomically(options.save_plan, plan_to_json(candidate_plan(exploration, exploration.candidates[ranking.front().index])));

  const std::string platform_name = options.platform.substr(options.platform.find_last_of('/') + 1);
  const Profile& profile = exploration.graph.profile;
  std::string memory_rule = "each host's own `memory`";
  if (exploration.memory_limit_bytes)
    memory_rule = fmt::format("{} per device (--memory, in place of the hosts' own)", human_bytes(*exploration.memory_limit_bytes));
  if (std::any_of(exploration.platform.hosts.begin(), exploration.platform.hosts.end(),
                  [](const HostInfo& host) { return host.memory_reserve_bytes || host.memory_reserve_fraction; }))
    memory_rule += ", less each host's `memory_reserve` (out of memory: peak > capacity - reserve)";
  if (options.json) {
    nlohmann::ordered_json document;
    document["platform"] = platform_name;
    document["profile"] = profile.name;
    document["mini_batch_size"] = options.mini_batch_size;
    if (exploration.memory_limit_bytes) document["memory_limit_bytes"] = *exploration.memory_limit_bytes;
    document["semantics"] = options.semantics;
    if (options.transfer_rule != "share") document["transfer_rule"] = options.transfer_rule;
    document["micro_batch_note"] = exploration.choices.note;
    if (!exploration.notes.empty()) document["device_model_notes"] = exploration.notes;
    if (show_tp) {
      document["tensor_parallel_tried"] = exploration.tensor_parallel;
      nlohmann::ordered_json notes = nlohmann::ordered_json::object();
      for (const auto& [t, note] : exploration.tensor_parallel_note)
        if (t > 1) notes[std::to_string(t)] = note;
      document["tensor_parallel_notes"] = notes;
    }
    document["candidates_simulated"] = outcomes.size();
    if (has_winner) document["winner"] = ranked_json(outcomes, {ranking.front()}, exploration, candidate_of_outcome)[0];
    else document["winner"] = nullptr;
    document["ranking"] = ranked_json(outcomes, ranking, exploration, candidate_of_outcome);
    if (options.semantics == "exact") document["stale_weight_ranking"] = ranked_json(outcomes, stale_ranking, exploration, candidate_of_outcome);
    std::cout << document.dump(2) << "\n";
    return has_winner ? 0 : 1;
  }

  std::string kinds;
  std::map<std::string, int> kind_counts;
  for (const HostInfo& host : exploration.platform.hosts)
    ++kind_counts[host.device_type.empty() ? to_string(host.kind) : host.device_type];
  for (const auto& [kind, count] : kind_counts) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", count, kind);
  std::cout << fmt::format("pipegrid explore: {} ({} layers) on {} ({} hosts: {}), mini-batch {} samples\n", profile.name,
                           profile.layers.size(), platform_name, exploration.platform.hosts.size(), kinds, options.mini_batch_size);
  std::cout << fmt::format("micro-batches: {}\n", exploration.choices.note);
  for (const std::string& note : exploration.notes) std::cout << fmt::format("device model: {}\n", note);
  std::cout << fmt::format("memory: {}; {} network model{}; {} candidates simulated, {} at a time\n", memory_rule, options.network,
                           options.transfer_rule != "share" ? fmt::format(", transfer rule {}", options.transfer_rule) : "",
                           outcomes.size(), jobs);
  if (show_tp) {
    std::string tried;
    for (const int t : exploration.tensor_parallel) tried += (tried.empty() ? "" : ", ") + std::to_string(t);
    std::cout << fmt::format("tensor parallel: t = {} hosts per group (tp)\n", tried);
    for (const auto& [t, note] : exploration.tensor_parallel_note)
      if (t > 1) std::cout << fmt::format("  {}\n", note);
  }
  std::cout << "\n";
  if (has_winner) {
    const CandidateOutcome& w = outcomes[ranking.front().index];
    std::cout << fmt::format("winner: {} with M={} micro-batches of {}, {} partition (replicas {}{}): {} samples/s, mini-batch {}, "
                             "peak memory {} on {}\n",
                             w.schedule, w.micro_batches, w.micro_batch_size, w.partitioner, w.replicas,
                             show_tp ? fmt::format(", tensor parallel {}", w.tensor_parallel) : std::string(),
                             throughput_text(w.throughput_samples_per_s),
                             human_seconds(w.minibatch_time_s), human_bytes(w.peak_memory_bytes), w.peak_memory_host);
  } else {
    std::cout << "no candidate fits: every one is out of memory or failed (see the verdicts)\n";
  }
  std::cout << "\nbest of each schedule:\n" << best_per_schedule(outcomes, ranking, show_tp);
  std::cout << "\nall candidates" << (options.semantics == "exact" ? " (weight-exact schedules)" : "") << ":\n"
            << table(outcomes, ranking, show_tp);
  if (!stale_ranking.empty()) {
    std::cout << "\nstale-weight schedules, ranked apart (they trade statistical efficiency for throughput; --semantics all "
                 "ranks them with the others):\n"
              << table(outcomes, stale_ranking, show_tp);
  }
  std::cout << "\nM: micro-batches per mini-batch; micro: samples per micro-batch; replicas: per stage (dp: hosts running the "
               "whole model);\nsamples/s: throughput (flushed schedules: one mini-batch; the others: the steady state); a "
               "partition named a=b was chosen alike by both.\n";
  if (show_tp)
    std::cout << "tp: hosts per tensor-parallel group (t consecutive hosts of one server run each stage split t ways; "
                 "stages placed on the groups' first hosts; peak memory per group member).\n";
  if (has_winner && !options.save_plan.empty())
    std::cout << fmt::format("winner's plan: {} (pipegrid simulate --plan {} --svg winner.svg){}\n", options.save_plan,
                             options.save_plan,
                             exploration.memory_limit_bytes ? "; the plan checks memory against the platform's own `memory`, "
                                                              "not --memory"
                                                            : "");
  return has_winner ? 0 : 1;
}

}  // namespace pipegrid::cli
