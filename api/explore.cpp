#include "api/explore.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "api/simulation.hpp"
#include "core/child_pool.hpp"
#include "core/device_model.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/model_graph.hpp"
#include "core/tensor_parallel.hpp"
#include "partitioners/partitioners.hpp"
#include "schedules/beyond.hpp"
#include "schedules/schedules.hpp"
#include "sim/engine.hpp"

namespace pipegrid::api {
namespace {

/// One partition a candidate runs on: the profile it refers to (a split
/// layer makes its own) and who chose it.
struct PartitionChoice {
  std::string label;  ///< "uniform", "pipedream", "uniform=bapipe", ...
  Profile profile;
  Partition partition;
  /// Layouts of d > 1 pipelines: the plan make_plan made for the partition
  /// (its schedule and micro-batches stand for every candidate that runs on
  /// it: candidate_plan sets them); absent: the base plan at the size runs it.
  std::optional<Plan> plan;
};

struct Candidate {
  std::string schedule;
  bool stale_weights = false;
  int tensor_parallel = 1;  ///< hosts per group; the partition is over the groups' leaders
  int pipeline_parallel = 1;  ///< the layout t x p x d it belongs to (CandidateOutcome)
  int data_parallel = 1;
  MicroBatchShape shape;
  std::optional<std::size_t> partition;  ///< into the choices; absent: see error
  std::optional<std::string> error;      ///< no partition could be made
};

std::string replicas_text(const Partition& partition) {
  std::string text;
  for (const auto& hosts : partition.hosts) text += (text.empty() ? "" : "-") + std::to_string(hosts.size());
  return text;
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
  /// The partitioners tried (request.partitioners, or every one that applies).
  std::vector<std::string> partitioners;
  std::vector<std::string> layout_notes;  ///< ExploreResult::layout_notes

  void note_layout(const std::string& note) {
    if (std::find(layout_notes.begin(), layout_notes.end(), note) == layout_notes.end()) layout_notes.push_back(note);
  }
  bool tries(const std::string& partitioner) const {
    return std::find(partitioners.begin(), partitioners.end(), partitioner) != partitioners.end();
  }
};

/// What make_plan is asked for every candidate with groups of t hosts at
/// micro-batch size `size`: the inputs and run options of the request (no
/// memory override: a plan checks the platform's own memory, as simulate
/// --plan does), the dp schedule and one pipeline over every group until the
/// caller says otherwise.
PlanRequest base_plan_request(const ExploreRequest& request, int size, int t) {
  PlanRequest plan_request;
  plan_request.platform_file = request.platform_file;
  plan_request.profile_file = request.profile_file;
  plan_request.batch_size = request.batch_size;
  plan_request.micro_batch_size = size;
  plan_request.schedule = "dp";
  plan_request.network = request.network;
  plan_request.transfer_rule = request.transfer_rule;
  plan_request.optimizer = request.optimizer;
  plan_request.dtype = request.dtype;
  plan_request.tensor_parallel = t;
  plan_request.sequence_parallel = request.sequence_parallel && t > 1;
  return plan_request;
}

/// A make_plan message as a candidate's error says it on one pipeline over
/// every group: without the flag make_plan names, after "no LABEL
/// partition:" (BaPipe's own message names it).
std::string partition_failure(const std::string& label, std::string message) {
  for (const std::string& prefix :
       std::vector<std::string>{"--partitioner " + label + ": ", "--partition " + label + ": ", "no feasible partition: "})
    if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
  return label == "bapipe" ? message : fmt::format("no {} partition: {}", label, message);
}

Plan candidate_plan(const Exploration& exploration, const Candidate& candidate) {
  const PartitionChoice& choice = exploration.partitions.at(*candidate.partition);
  if (choice.plan) {
    // A layout of d pipelines (flushed schedules only): make_plan's plan,
    // for this schedule of the same stages per device and this M.
    Plan plan = *choice.plan;
    plan.schedule = candidate.schedule;
    plan.micro_batches = candidate.shape.micro_batches;
    plan.mini_batches = 1;
    plan.extend_mini_batches = false;
    return plan;
  }
  Plan plan = exploration.base_plan_at_size.at({candidate.shape.micro_batch_size, candidate.tensor_parallel});
  plan.schedule = candidate.schedule;
  plan.profile = choice.profile;
  plan.partition = choice.partition;
  const ScheduleInfo& info = schedule_info(candidate.schedule);
  plan.virtual_stages = default_virtual_stages(candidate.schedule);
  plan.micro_batches = info.flushed ? candidate.shape.micro_batches : 1;
  plan.extend_mini_batches = !info.flushed;
  plan.mini_batches = info.flushed ? 1 : default_mini_batches(plan);
  return plan;
}

// The candidates with groups of t hosts (t = 1: no tensor parallelism) on
// the layouts of one pipeline over every group (`pipelines`: every schedule
// but dp) and of the whole model on every group (`whole_model`: dp).
void build_candidates(const ExploreRequest& request, Exploration& exploration, int t, bool pipelines, bool whole_model) {
  const PlatformSummary& platform = exploration.platform_at_t.at(t);
  std::vector<std::string> host_names;
  for (const HostInfo& host : platform.hosts) host_names.push_back(host.name);
  const int groups = static_cast<int>(host_names.size());
  const std::vector<std::string>& partitioners = exploration.partitioners;

  // The micro-batch sizes in play, with a model graph at each.
  std::set<int> sizes;
  for (const MicroBatchShape& shape : exploration.choices.shapes) sizes.insert(shape.micro_batch_size);
  std::map<int, ModelGraph> graph_at_size;
  for (const int size : sizes) {
    Plan base = make_plan(base_plan_request(request, size, t));
    graph_at_size[size] = t == 1 && size == exploration.graph.profile.micro_batch_size ? exploration.graph : chain_graph(base.profile);
    exploration.tensor_parallel_note[t] = base.tensor_parallel_note;
    exploration.base_plan_at_size.emplace(std::make_pair(size, t), std::move(base));
  }
  if (!pipelines && !whole_model) return;

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
    if (!pipelines) break;
    for (const std::string& name : partitioners) {
      if (name == "bapipe" || name == "megatron") continue;
      std::vector<std::string> labels = {name};
      if (name == "pipedream") labels = memory_known ? std::vector<std::string>{"pipedream", "pipedream-straight", "pipedream-memory"}
                                                     : std::vector<std::string>{"pipedream", "pipedream-straight"};
      for (const std::string& label : labels) {
        Fixed entry;
        try {
          PartitionerOutput output = partition_for_run(label, partition_input(size));
          entry.choice = PartitionChoice{label, std::move(output.profile), std::move(output.partition), std::nullopt};
        } catch (const InputError& error) {
          entry.error = fmt::format("no {} partition: {}", label, error.what());
        }
        fixed[{size, label}] = std::move(entry);
      }
    }
  }
  // Megatron's stage layout (make_plan's --partition megatron) per size and
  // placement of stages on devices; where it does not apply, a note.
  std::map<std::tuple<int, int, int>, std::optional<PartitionChoice>> megatron_at;
  const auto megatron_choice = [&](const std::string& schedule, int size) {
    const int v = default_virtual_stages(schedule);
    const auto key = std::make_tuple(size, v, static_cast<int>(stage_map_of(schedule)));
    if (const auto found = megatron_at.find(key); found != megatron_at.end()) return found->second;
    std::optional<PartitionChoice> choice;
    PlanRequest plan_request = base_plan_request(request, size, t);
    plan_request.schedule = schedule;
    plan_request.partition = "megatron";
    try {
      Plan plan = make_plan(plan_request);
      choice = PartitionChoice{"megatron", std::move(plan.profile), std::move(plan.partition), std::nullopt};
    } catch (const InputError& error) {
      exploration.note_layout(fmt::format("{}{}: {}", layout_label(t, groups, 1),
                                          v > 1 ? fmt::format(" ({} stages per device)", v) : "",
                                          partition_failure("megatron", error.what())));
    }
    megatron_at[key] = choice;
    return choice;
  };
  // Adds `choice` to `chosen`, or its label to the same partition's.
  const auto choose = [](std::vector<PartitionChoice>& chosen, PartitionChoice choice) {
    const auto same = std::find_if(chosen.begin(), chosen.end(), [&](const PartitionChoice& c) { return same_partition(c, choice); });
    if (same != chosen.end()) same->label += "=" + choice.label;
    else chosen.push_back(std::move(choice));
  };

  const auto add_candidates = [&](const ExploredSchedule& schedule, const MicroBatchShape& shape) {
    Candidate candidate;
    candidate.schedule = schedule.name;
    candidate.stale_weights = schedule.stale_weights;
    candidate.tensor_parallel = t;
    candidate.shape = shape;
    if (schedule_info(schedule.name).single_stage) {
      candidate.data_parallel = groups;
      PartitionChoice whole{"whole model", graph_at_size.at(shape.micro_batch_size).profile, {}, std::nullopt};
      whole.partition.stage_of_layer.assign(whole.profile.layers.size(), 0);
      whole.partition.hosts = {host_names};
      exploration.partitions.push_back(std::move(whole));
      candidate.partition = exploration.partitions.size() - 1;
      exploration.candidates.push_back(candidate);
      return;
    }
    candidate.pipeline_parallel = groups;
    const bool flushed = schedule_info(schedule.name).flushed;
    // Each partitioner's choice (or why it has none); a partition chosen
    // twice runs once, labelled with both names.
    std::vector<PartitionChoice> chosen;
    std::vector<std::string> failures;
    const int v = default_virtual_stages(schedule.name);
    if (v > 1) {
      // Interleaved and V schedules (several stages per device): the uniform
      // partition into devices x v stages, placed by the schedule's stage
      // map, and Megatron's.
      const Profile& profile = graph_at_size.at(shape.micro_batch_size).profile;
      const std::size_t stages = host_names.size() * static_cast<std::size_t>(v);
      if (stages > profile.layers.size()) {
        failures.push_back(fmt::format("no uniform partition: {} devices x {} stages each need {} layers, the profile has {}",
                                       host_names.size(), v, stages, profile.layers.size()));
      } else {
        const std::vector<int> device = stage_to_device(static_cast<int>(stages), v, stage_map_of(schedule.name));
        std::vector<std::string> stage_hosts;
        for (std::size_t s = 0; s < stages; ++s) stage_hosts.push_back(host_names[static_cast<std::size_t>(device[s])]);
        chosen.push_back({"uniform", profile, uniform_partition(profile, stage_hosts, static_cast<int>(stages)), std::nullopt});
      }
      if (exploration.tries("megatron") && flushed)
        if (std::optional<PartitionChoice> megatron = megatron_choice(schedule.name, shape.micro_batch_size)) choose(chosen, *megatron);
    }
    for (const std::string& name : v > 1 ? std::vector<std::string>() : partitioners) {
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
          if (!flushed || is_beyond_schedule(schedule.name)) continue;
          try {
            RunPartitionInput input = partition_input(shape.micro_batch_size);
            input.schedule = schedule.name;
            input.micro_batches = shape.micro_batches;
            input.split_layers = request.split_layers;
            PartitionerOutput output = partition_for_run("bapipe", input);
            choice = PartitionChoice{label, std::move(output.profile), std::move(output.partition), std::nullopt};
          } catch (const InputError& error) {
            failures.push_back(error.what());
          }
        } else if (name == "megatron") {
          // Megatron-LM's layout of flushed pipelines.
          if (!flushed) continue;
          choice = megatron_choice(schedule.name, shape.micro_batch_size);
        } else {
          const Fixed& entry = fixed.at({shape.micro_batch_size, label});
          if (entry.choice) choice = entry.choice;
          else failures.push_back(entry.error);
        }
        if (choice) choose(chosen, std::move(*choice));
      }
    }
    // A partition with stages that do no compute also runs without them, on
    // fewer devices (the ranking prefers that one when it is as fast).
    for (std::size_t c = 0, original = v > 1 ? 0 : chosen.size(); c < original; ++c) {
      const std::optional<Partition> merged = merge_idle_stages(chosen[c].profile, chosen[c].partition, platform);
      if (!merged) continue;
      choose(chosen, {chosen[c].label.substr(0, chosen[c].label.find('=')) + "-merged", chosen[c].profile, *merged, std::nullopt});
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
    if (!(schedule_info(schedule.name).single_stage ? whole_model : pipelines)) continue;
    if (schedule.stale_weights) {
      // One micro-batch per mini-batch (PipeDream's model): each size once.
      for (const int size : sizes) add_candidates(schedule, {1, size});
    } else {
      for (const MicroBatchShape& shape : exploration.choices.shapes) add_candidates(schedule, shape);
    }
  }
}

// The candidates of the layout t x p x d with 1 < d < groups: d whole
// pipelines of p = groups / d groups each (Megatron-Core's rank order), every
// flushed multi-stage schedule, each pipeline over M micro-batches of the
// mini-batch / d samples, its partitions made by make_plan over the pipeline
// of replica 0 (uniform, pipedream-straight and bapipe, megatron) and
// replicated over the others. Where the mini-batch has no shape for d
// pipelines, a note instead.
void build_layout_candidates(const ExploreRequest& request, Exploration& exploration, int t, int d) {
  const int groups = static_cast<int>(exploration.platform_at_t.at(t).hosts.size());
  const int p = groups / d;
  const std::string layout = layout_label(t, p, d);
  if (request.mini_batch_size % d != 0) {
    exploration.note_layout(fmt::format("{}: not tried: a mini-batch of {} samples does not split over {} pipelines",
                                        layout, request.mini_batch_size, d));
    return;
  }
  // A pipeline's shapes (M x micro-batch size = mini-batch / d). Where
  // --micro-batches leaves none the filter says why; a note says it where
  // there are none at all.
  const std::vector<int> measured = profile_micro_batch_sizes(exploration.graph.profile);
  const int per_pipeline = request.mini_batch_size / d;
  const auto shapes_of = [&](const std::vector<int>& counts) -> std::optional<MicroBatchChoices> {
    try {
      return micro_batch_choices(per_pipeline, measured, counts);
    } catch (const InputError&) {
      return std::nullopt;
    }
  };
  const std::optional<MicroBatchChoices> pipeline_shapes = shapes_of(request.micro_batches);
  if (!pipeline_shapes) {
    if (!shapes_of({}))
      exploration.note_layout(fmt::format("{}: not tried: a pipeline's {} samples ({} / {} pipelines) make no micro-batch "
                                          "of the profile's sizes ({})",
                                          layout, per_pipeline, request.mini_batch_size, d, fmt::join(measured, ", ")));
    return;
  }
  const MicroBatchChoices& choices = *pipeline_shapes;
  // A candidate's partition (into exploration.partitions), or why it has none.
  struct Option {
    std::optional<std::size_t> partition;
    std::string error;
  };
  std::map<std::string, std::optional<PartitionChoice>> made;  // key: label, size, stages per device, stage map[, schedule, M]
  std::map<std::string, std::string> failed;
  std::map<std::string, std::vector<Option>> chosen_at;  // the choices of a schedule and shape, by the keys they depend on
  const auto make = [&](const std::string& key, const std::string& label, const std::string& schedule,
                        const MicroBatchShape& shape) -> std::optional<PartitionChoice> {
    if (const auto found = made.find(key); found != made.end()) return found->second;
    PlanRequest plan_request = base_plan_request(request, shape.micro_batch_size, t);
    plan_request.schedule = schedule;
    plan_request.micro_batches = shape.micro_batches;
    plan_request.pipeline_parallel = p;
    plan_request.data_parallel = d;
    plan_request.memory = request.memory;  // what the partitioners fit stages within
    plan_request.split_layers = request.split_layers;
    if (label == "uniform" || label == "megatron") plan_request.partition = label;
    else plan_request.partitioner = label;
    std::optional<PartitionChoice> choice;
    const int v = default_virtual_stages(schedule);
    const std::size_t layers = exploration.graph.profile.layers.size();
    if (label == "uniform" && static_cast<std::size_t>(p) * v > layers) {
      // As on one pipeline over every group.
      failed[key] = v == 1 ? fmt::format("no uniform partition: {} devices need {} layers, the profile has {}", p, p, layers)
                           : fmt::format("no uniform partition: {} devices x {} stages each need {} layers, the profile has {}",
                                         p, v, p * v, layers);
      made[key] = choice;
      return choice;
    }
    try {
      Plan plan = make_plan(plan_request);
      plan.memory_bytes.reset();  // as every explore plan: the platform's own memory
      choice = PartitionChoice{label, plan.profile, plan.partition, std::move(plan)};
    } catch (const InputError& error) {
      if (label == "megatron")
        exploration.note_layout(fmt::format("{}{}: {}", layout, v > 1 ? fmt::format(" ({} stages per device)", v) : "",
                                            partition_failure("megatron", error.what())));
      else failed[key] = partition_failure(label, error.what());
    }
    made[key] = choice;
    return choice;
  };

  for (const ExploredSchedule& schedule : exploration.schedules) {
    const ScheduleInfo& info = schedule_info(schedule.name);
    if (!info.flushed || info.single_stage) continue;
    const int v = default_virtual_stages(schedule.name);
    const int stage_map = static_cast<int>(stage_map_of(schedule.name));
    // The partitioners place one stage per device; BaPipe plans whole
    // backwards (as on one pipeline over every group).
    const bool bapipe = v == 1 && !is_beyond_schedule(schedule.name) && exploration.tries("bapipe");
    std::vector<std::string> labels = {"uniform"};
    if (v == 1 && exploration.tries("pipedream")) labels.push_back("pipedream-straight");
    if (bapipe) labels.push_back("bapipe");
    if (exploration.tries("megatron")) labels.push_back("megatron");
    if (v == 1 && !exploration.tries("uniform")) labels.erase(labels.begin());
    for (const MicroBatchShape& shape : choices.shapes) {
      const std::string placement = fmt::format("{}|{}|{}", shape.micro_batch_size, v, stage_map);
      const std::string bapipe_key = fmt::format("{}|{}", schedule.name, shape.micro_batches);
      const std::string chosen_key = placement + (bapipe ? "|" + bapipe_key : "");
      if (!chosen_at.count(chosen_key)) {
        std::vector<PartitionChoice> chosen;
        std::vector<std::string> failures;
        for (const std::string& label : labels) {
          const std::string key = label + "|" + placement + (label == "bapipe" ? "|" + bapipe_key : "");
          std::optional<PartitionChoice> choice = make(key, label, schedule.name, shape);
          if (!choice) {
            if (const auto failure = failed.find(key); failure != failed.end()) failures.push_back(failure->second);
            continue;
          }
          const auto same = std::find_if(chosen.begin(), chosen.end(), [&](const PartitionChoice& c) { return same_partition(c, *choice); });
          if (same != chosen.end()) same->label += "=" + label;
          else chosen.push_back(std::move(*choice));
        }
        std::vector<Option>& entries = chosen_at[chosen_key];
        for (PartitionChoice& choice : chosen) {
          exploration.partitions.push_back(std::move(choice));
          entries.push_back({exploration.partitions.size() - 1, ""});
        }
        for (const std::string& failure : failures) entries.push_back({std::nullopt, failure});
      }
      for (const Option& entry : chosen_at.at(chosen_key)) {
        Candidate candidate;
        candidate.schedule = schedule.name;
        candidate.tensor_parallel = t;
        candidate.pipeline_parallel = p;
        candidate.data_parallel = d;
        candidate.shape = shape;
        candidate.partition = entry.partition;
        if (!entry.partition) candidate.error = entry.error;
        exploration.candidates.push_back(candidate);
      }
    }
  }
}

/// What a candidate is (schedule, shape, layout), before it runs.
CandidateOutcome outcome_of(const Candidate& candidate) {
  CandidateOutcome outcome;
  outcome.schedule = candidate.schedule;
  outcome.stale_weights = candidate.stale_weights;
  const ScheduleInfo& info = schedule_info(candidate.schedule);
  outcome.micro_batches = info.flushed ? candidate.shape.micro_batches : 1;
  outcome.micro_batch_size = candidate.shape.micro_batch_size;
  outcome.tensor_parallel = candidate.tensor_parallel;
  outcome.pipeline_parallel = candidate.pipeline_parallel;
  outcome.data_parallel = candidate.data_parallel;
  outcome.global_batch_size = static_cast<long long>(outcome.micro_batches) * outcome.micro_batch_size *
                              (info.single_stage ? 1 : candidate.data_parallel);
  return outcome;
}

/// Runs one candidate (in a worker process) and condenses the result.
CandidateOutcome run_candidate(const Exploration& exploration, const Candidate& candidate) {
  CandidateOutcome outcome = outcome_of(candidate);
  const PlatformSummary& platform = exploration.platform_at_t.at(candidate.tensor_parallel);
  if (!candidate.partition) {
    outcome.partitioner = "-";
    outcome.error = candidate.error;
    return outcome;
  }
  const PartitionChoice& choice = exploration.partitions[*candidate.partition];
  outcome.partitioner = choice.label;
  std::set<std::string> hosts_used;
  for (const auto& hosts : choice.partition.hosts) hosts_used.insert(hosts.begin(), hosts.end());
  outcome.devices = static_cast<int>(hosts_used.size()) * candidate.tensor_parallel;
  if (!schedule_info(candidate.schedule).single_stage) {
    outcome.idle_stages = idle_stages(choice.profile, choice.partition, platform);
    // Layouts of d pipelines run no merged partition (merged_as names none).
    if (!choice.plan && merge_idle_stages(choice.profile, choice.partition, platform))
      outcome.merged_as = choice.label.substr(0, choice.label.find('=')) + "-merged";
  }
  outcome.replicas = schedule_info(candidate.schedule).single_stage ? fmt::format("{}x", choice.partition.hosts[0].size())
                                                                    : replicas_text(choice.partition);
  try {
    Plan plan = candidate_plan(exploration, candidate);
    const RunResult result = run_plan(plan);
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
  document["pipeline_parallel"] = outcome.pipeline_parallel;
  document["data_parallel"] = outcome.data_parallel;
  document["global_batch_size"] = outcome.global_batch_size;
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
  outcome.pipeline_parallel = document.at("pipeline_parallel");
  outcome.data_parallel = document.at("data_parallel");
  outcome.global_batch_size = document.at("global_batch_size");
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

/// Simulates every candidate, `jobs` worker processes at a time (SimGrid
/// allows one engine per process, and processes use every core). Outcomes
/// come back in candidate order whatever the order they finish in;
/// `progress` (when set) is told as explore() says.
std::vector<CandidateOutcome> run_candidates(const Exploration& exploration, int jobs, const ExploreProgress& progress) {
  const std::size_t total = exploration.candidates.size();
  std::vector<CandidateOutcome> outcomes(total);
  ChildPool pool(jobs, "explore");
  std::size_t next = 0, done = 0;
  if (progress) progress(0, total);
  while (done < total) {
    while (next < total && pool.has_room()) {
      pool.start(next, [&exploration, next] {
        try {
          return outcome_to_json(run_candidate(exploration, exploration.candidates[next])).dump();
        } catch (const std::exception& error) {
          CandidateOutcome failed = outcome_of(exploration.candidates[next]);
          failed.partitioner = "-";
          failed.error = fmt::format("internal error: {}", error.what());
          return outcome_to_json(failed).dump();
        }
      });
      ++next;
    }
    for (const ChildPool::Finished& child : pool.wait_some()) {
      if (child.succeeded()) {
        outcomes[child.index] = outcome_from_json(nlohmann::json::parse(child.output));
      } else {
        CandidateOutcome& failed = outcomes[child.index];
        failed = outcome_of(exploration.candidates[child.index]);
        failed.partitioner = "-";
        failed.error = child.failure_text();
      }
      ++done;
      if (progress) progress(done, total);
    }
  }
  // A candidate that hit an internal error (a broken invariant of its
  // result, say) is a bug: explore reports it instead of ranking around it.
  for (std::size_t i = 0; i < outcomes.size(); ++i)
    if (outcomes[i].error && outcomes[i].error->rfind("internal error: ", 0) == 0)
      throw std::runtime_error(fmt::format("explore: candidate {} ({}): {}", i + 1, exploration.candidates[i].schedule,
                                           outcomes[i].error->substr(16)));
  return outcomes;
}

}  // namespace

std::string layout_label(int tensor_parallel, int pipeline_parallel, int data_parallel) {
  return fmt::format("t{} p{} d{}", tensor_parallel, pipeline_parallel, data_parallel);
}

ExploreResult explore(const ExploreRequest& request, const ExploreProgress& progress) {
  if (request.semantics != "exact" && request.semantics != "all")
    throw InputError(fmt::format("--semantics: expected exact or all, found '{}'", request.semantics));
  if (request.jobs < 0) throw InputError(fmt::format("--jobs: expected an integer >= 1, found {}", request.jobs));
  const int jobs = request.jobs > 0 ? request.jobs : std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  sim::parse_network_model(request.network);
  sim::parse_transfer_rule(request.transfer_rule);
  if (!request.optimizer.empty()) optimizer_copies(request.optimizer);

  Exploration exploration;
  exploration.graph = read_model_graph(request.profile_file, request.batch_size);
  exploration.platform = sim::read_platform(request.platform_file);
  // Partitioners name the platform in their messages: its file name, so
  // that verdicts read the same wherever the file lies.
  exploration.platform.file = request.platform_file.substr(request.platform_file.find_last_of('/') + 1);
  // Layers given by FLOPs only: timed by the hosts' device models at the
  // profile's own micro-batch size (other sizes follow the explorer's
  // scaling), before tensor parallelism splits them.
  try {
    exploration.notes = fill_analytic_times(exploration.graph.profile, exploration.platform);
  } catch (const InputError& error) {
    throw InputError(fmt::format("{}: {}", request.profile_file, error.what()));
  }
  for (Layer& layer : exploration.graph.profile.layers) layer.times_given = true;
  if (!request.memory.empty()) exploration.memory_limit_bytes = parse_bytes(request.memory, "--memory");
  exploration.schedules = exploration_schedules(exploration.platform.hosts, request.schedules);
  exploration.choices = micro_batch_choices(request.mini_batch_size, profile_micro_batch_sizes(exploration.graph.profile),
                                            request.micro_batches);
  // Tensor parallelism: the group sizes that apply, each with the platform
  // of its groups' leaders.
  const bool splits = std::any_of(exploration.graph.profile.layers.begin(), exploration.graph.profile.layers.end(),
                                  [](const Layer& layer) { return tensor_parallel_splits(layer); });
  // By default only groups inside one server are tried (Megatron-LM keeps
  // tensor parallelism within a node); a requested t may span servers.
  exploration.tensor_parallel = exploration_tensor_parallel(request.tensor_parallel, splits, [&](int t) {
    try {
      const std::vector<std::vector<int>> groups = tensor_parallel_groups(exploration.platform, t);
      if (request.tensor_parallel.empty() && tensor_parallel_spans_servers(exploration.platform, groups))
        return fmt::format("--tensor-parallel {}: a group would span servers", t);
      return std::string();
    } catch (const InputError& error) {
      return std::string(error.what());
    }
  });
  // The partitioners: Megatron's stage layout where the profile has
  // transformer layers (megatron_partition's op "transformer").
  const bool transformer = std::any_of(exploration.graph.profile.layers.begin(), exploration.graph.profile.layers.end(),
                                       [](const Layer& layer) { return layer.op == "transformer"; });
  exploration.partitioners = request.partitioners;
  if (exploration.partitioners.empty()) {
    exploration.partitioners = partitioner_names();
    if (transformer) exploration.partitioners.push_back("megatron");
  }
  for (const std::string& name : exploration.partitioners) {
    if (name == "megatron" && !transformer)
      throw InputError("--partitioners megatron: Megatron's stage layout splits transformer layers (op \"transformer\"), "
                       "and the profile has none");
    if (name != "megatron" && std::find(partitioner_names().begin(), partitioner_names().end(), name) == partitioner_names().end())
      throw InputError(fmt::format("--partitioners: expected uniform, pipedream, bapipe or megatron, found '{}'", name));
  }
  // Layouts t x p x d: every d dividing the groups of every t (or those of
  // --data-parallel).
  for (const int d : request.data_parallel)
    if (d < 1) throw InputError(fmt::format("--data-parallel: expected integers >= 1, found {}", d));
  const auto wanted = [&](int d) {
    return request.data_parallel.empty() ||
           std::find(request.data_parallel.begin(), request.data_parallel.end(), d) != request.data_parallel.end();
  };
  const int hosts = static_cast<int>(exploration.platform.hosts.size());
  for (const int d : request.data_parallel)
    if (std::none_of(exploration.tensor_parallel.begin(), exploration.tensor_parallel.end(),
                     [&](int t) { return (hosts / t) % d == 0; })) {
      std::string groups;
      for (const int t : exploration.tensor_parallel)
        groups += fmt::format("{}{} group{} of t = {}", groups.empty() ? "" : ", ", hosts / t, hosts / t == 1 ? "" : "s", t);
      throw InputError(fmt::format("--data-parallel {}: expected a size that divides the number of tensor-parallel "
                                   "groups (t x p x d = the hosts, Megatron's world size): {} has {} hosts, {}",
                                   d, request.platform_file, hosts, groups));
    }
  for (const int t : exploration.tensor_parallel) {
    exploration.platform_at_t[t] =
        t == 1 ? exploration.platform : leader_platform(exploration.platform, tensor_parallel_groups(exploration.platform, t));
    const int groups = hosts / t;
    build_candidates(request, exploration, t, wanted(1), wanted(groups));
    for (int d = 2; d < groups; ++d)
      if (groups % d == 0 && wanted(d)) build_layout_candidates(request, exploration, t, d);
  }
  if (exploration.candidates.empty())
    throw InputError(fmt::format(
        "--data-parallel {}: no candidate left: d = 1 runs one pipeline over every group, d = hosts / t the dp "
        "schedule, the sizes between whole pipelines of flushed schedules of several stages; --schedules keeps {}",
        fmt::join(request.data_parallel, ","), [&] {
          std::vector<std::string> names;
          for (const ExploredSchedule& schedule : exploration.schedules) names.push_back(schedule.name);
          return fmt::format("{}", fmt::join(names, ","));
        }()));

  ExploreResult result;
  result.jobs = jobs;
  result.outcomes = run_candidates(exploration, jobs, progress);
  std::vector<std::size_t> main_group, stale_group;
  for (std::size_t i = 0; i < result.outcomes.size(); ++i)
    (request.semantics == "exact" && result.outcomes[i].stale_weights ? stale_group : main_group).push_back(i);
  result.ranking = rank_candidates(result.outcomes, main_group);
  result.stale_weight_ranking = rank_candidates(result.outcomes, stale_group);
  if (result.has_winner()) result.best_plan = candidate_plan(exploration, exploration.candidates[result.ranking.front().index]);
  for (const Candidate& candidate : exploration.candidates)
    result.partitions.push_back(candidate.partition ? std::optional<Partition>(exploration.partitions[*candidate.partition].partition)
                                                    : std::nullopt);
  result.platform = std::move(exploration.platform);
  result.profile = std::move(exploration.graph.profile);
  result.memory_limit_bytes = exploration.memory_limit_bytes;
  result.micro_batch_choices = std::move(exploration.choices);
  result.device_model_notes = std::move(exploration.notes);
  result.tensor_parallel_tried = std::move(exploration.tensor_parallel);
  result.tensor_parallel_notes = std::move(exploration.tensor_parallel_note);
  // The layouts tried: by t, then d ascending.
  for (const Candidate& candidate : exploration.candidates) {
    const auto same = std::find_if(result.layouts.begin(), result.layouts.end(), [&](const ExploredLayout& layout) {
      return layout.tensor_parallel == candidate.tensor_parallel && layout.data_parallel == candidate.data_parallel;
    });
    if (same != result.layouts.end()) ++same->candidates;
    else result.layouts.push_back({candidate.tensor_parallel, candidate.pipeline_parallel, candidate.data_parallel, 1});
  }
  std::stable_sort(result.layouts.begin(), result.layouts.end(), [](const ExploredLayout& a, const ExploredLayout& b) {
    return a.tensor_parallel != b.tensor_parallel ? a.tensor_parallel < b.tensor_parallel : a.data_parallel < b.data_parallel;
  });
  result.layout_notes = std::move(exploration.layout_notes);
  return result;
}

}  // namespace pipegrid::api
