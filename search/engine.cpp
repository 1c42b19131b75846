#include "search/engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.hpp"
#include "core/precision.hpp"
#include "core/tensor_parallel.hpp"

namespace pipegrid::search {

namespace {
constexpr double kInfinity = std::numeric_limits<double>::infinity();
}  // namespace

CostModel::CostModel(const Profile& profile, const PlatformSummary& platform, int micro_batches,
                     std::vector<int> tensor_degrees, std::optional<double> memory_bytes, const std::string& optimizer)
    : profile_(profile),
      platform_(platform),
      micro_batches_(micro_batches),
      tensor_degrees_(std::move(tensor_degrees)),
      memory_bytes_(memory_bytes),
      optimizer_(optimizer) {
  if (micro_batches_ < 1) throw InputError(fmt::format("--micro-batches: expected an integer >= 1, found {}", micro_batches_));
  if (profile_.layers.empty()) throw InputError("the profile has no layer");
  const std::size_t n = platform_.hosts.size();
  if (platform_.route_bandwidth_Bps.size() != n)
    throw InputError(fmt::format("{}: the search needs the platform's routes", platform_.file));
  resident_factor_ = resident_weight_factor(profile_.dtype, optimizer_);
  latency_s_.assign(n * n, 0);
  rate_Bps_.assign(n * n, 0);
  nccl_latency_s_.assign(n * n, 0);
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t b = 0; b < n; ++b) {
      LinkNccl nccl;
      if (!platform_.route_links.empty()) nccl = route_nccl(platform_.links, platform_.route_links[a][b]);
      latency_s_[a * n + b] = platform_.route_latency_s[a][b];
      rate_Bps_[a * n + b] = nccl.efficiency * platform_.route_bandwidth_Bps[a][b];
      nccl_latency_s_[a * n + b] = nccl.latency_s;
    }
  for (const int t : tensor_degrees_) {
    Degree degree;
    degree.t = t;
    if (t == 1) {
      degree.profile = profile_;
    } else {
      const std::vector<std::vector<int>> groups = tensor_parallel_groups(platform_, t);
      if (tensor_parallel_spans_servers(platform_, groups))
        throw InputError(fmt::format("--max-tensor-parallel: groups of {} hosts of {} span servers; tensor-parallel "
                                     "groups stay inside one",
                                     t, platform_.file));
      TensorParallelProfile split = tensor_parallel_profile(profile_, t, tensor_parallel_link(platform_, groups), false, false,
                                                            TensorParallelCollectives::Compute, true);
      degree.profile = std::move(split.profile);
      degree.note = std::move(split.note);
    }
    const std::size_t layers = degree.profile.layers.size();
    for (auto* sums : {&degree.forward, &degree.backward, &degree.weights, &degree.stash}) sums->assign(layers + 1, 0);
    for (std::size_t l = 0; l < layers; ++l) {
      const Layer& layer = degree.profile.layers[l];
      degree.forward[l + 1] = degree.forward[l] + layer.forward_s;
      degree.backward[l + 1] = degree.backward[l] + layer.backward_s;
      degree.weights[l + 1] = degree.weights[l] + layer.parameter_bytes;
      degree.stash[l + 1] = degree.stash[l] + layer.stashed_bytes();
    }
    degrees_.push_back(std::move(degree));
  }
}

const CostModel::Degree& CostModel::degree(int t) const {
  for (const Degree& d : degrees_)
    if (d.t == t) return d;
  throw std::logic_error(fmt::format("search: no per-member profile for tensor degree {}", t));
}

const Profile& CostModel::member_profile(int t) const { return degree(t).profile; }
const std::string& CostModel::member_note(int t) const { return degree(t).note; }

CostModel::StageSums CostModel::stage_sums(int first, int last, int t) const {
  const Degree& d = degree(t);
  const std::size_t a = static_cast<std::size_t>(first), b = static_cast<std::size_t>(last) + 1;
  StageSums sums;
  sums.forward_s = d.forward[b] - d.forward[a];
  sums.backward_s = d.backward[b] - d.backward[a];
  sums.weight_bytes = d.weights[b] - d.weights[a];
  const double input = first == 0 ? d.profile.input_bytes / t : d.profile.layers[a - 1].output_bytes;
  sums.stash_bytes = input + d.stash[b] - d.stash[a];
  sums.output_bytes = last + 1 < static_cast<int>(d.profile.layers.size()) ? d.profile.layers[b - 1].output_bytes : 0;
  return sums;
}

double CostModel::compute_s(int host, double profile_s) const {
  const HostInfo& info = platform_.hosts[static_cast<std::size_t>(host)];
  return profile_s / info.speed_factor + info.action_overhead_s;
}

double CostModel::transfer_s(int from, int to, double bytes) const {
  const std::size_t k = static_cast<std::size_t>(from) * platform_.hosts.size() + static_cast<std::size_t>(to);
  if (rate_Bps_[k] <= 0) return kInfinity;
  return latency_s_[k] + nccl_latency_s_[k] + bytes / rate_Bps_[k];
}

double CostModel::all_reduce_s(const StageConfig& stage, double bytes) const {
  if (stage.data <= 1) return 0;
  const double d = stage.data, steps = 2 * (d - 1);
  double slowest = 0, nccl = 0;
  for (int r = 0; r < stage.data; ++r) {
    const int from = stage.host(r), to = stage.host((r + 1) % stage.data);
    const std::size_t k = static_cast<std::size_t>(from) * platform_.hosts.size() + static_cast<std::size_t>(to);
    if (rate_Bps_[k] <= 0) return kInfinity;
    slowest = std::max(slowest, steps * (latency_s_[k] + bytes / (d * rate_Bps_[k])));
    nccl = std::max(nccl, nccl_latency_s_[k]);
  }
  return slowest + nccl;
}

std::string CostModel::memory_problem(const StageConfig& stage) const {
  const StageSums sums = stage_sums(stage.first_layer, stage.last_layer, stage.tensor);
  const int per_replica = (micro_batches_ + stage.data - 1) / stage.data;
  const double need = sums.weight_bytes * resident_factor_ + sums.stash_bytes * per_replica;
  for (int r = 0; r < stage.data; ++r)
    for (int k = 0; k < stage.tensor; ++k) {
      const HostInfo& host = platform_.hosts[static_cast<std::size_t>(stage.host(r, k))];
      const std::optional<double> capacity = memory_bytes_ ? memory_bytes_ : host.memory_bytes;
      if (!capacity) continue;
      const double usable = *capacity - host.memory_reserve_of(*capacity);
      if (need > usable)
        return fmt::format("{} needs {:.4g} GB (weights {:.4g} GB x {:.3g}, {} stashed micro-batches of {:.4g} GB), has {:.4g} GB",
                           host.name, need / 1e9, sums.weight_bytes / 1e9, resident_factor_, per_replica,
                           sums.stash_bytes / 1e9, usable / 1e9);
    }
  return "";
}

bool CostModel::fits_memory(const StageConfig& stage) const { return memory_problem(stage).empty(); }

// ---------------------------------------------------------------------------
// Task ids: F(s, m) s M + m; B(s, m) S M + s M + m; activation s -> s + 1 of
// micro-batch m 2 S M + s M + m (s < S - 1); gradient s -> s - 1 3 S M + s M
// + m (s > 0); all-reduce of s 4 S M + s. Unused ids (the last stage's
// activations, the first's gradients) have no duration and no edges.

int TaskGraphEngine::id(Kind kind, int stage, int micro_batch) const {
  const int block = stages_ * micro_batches_;
  switch (kind) {
    case Kind::Forward: return stage * micro_batches_ + micro_batch;
    case Kind::Backward: return block + stage * micro_batches_ + micro_batch;
    case Kind::Activation: return 2 * block + stage * micro_batches_ + micro_batch;
    case Kind::Gradient: return 3 * block + stage * micro_batches_ + micro_batch;
    case Kind::AllReduce: return 4 * block + stage;
  }
  return -1;
}

void TaskGraphEngine::allocate(int stages) {
  stages_ = stages;
  micro_batches_ = model_->micro_batches();
  const std::size_t count = static_cast<std::size_t>(4 * stages_ * micro_batches_ + stages_);
  duration_.assign(count, 0);
  start_.assign(count, 0);
  end_.assign(count, 0);
  previous_.assign(count, -1);
  next_.assign(count, -1);
  dirty_.assign(count, 0);
  all_reduce_inputs_.assign(static_cast<std::size_t>(stages_), {});
  // A topological order valid for every strategy of this shape: forwards by
  // micro-batch then stage (F(s, m) waits for F(s, m - d) and for F(s - 1,
  // m)'s activation), then backwards by micro-batch and stage from the last
  // (B(s, m) waits for B(s, m - d) and the gradient of B(s + 1, m); a
  // replica's first backward for its last forward), then the all-reduces.
  order_.clear();
  for (int m = 0; m < micro_batches_; ++m)
    for (int s = 0; s < stages_; ++s) {
      order_.push_back(id(Kind::Forward, s, m));
      if (s + 1 < stages_) order_.push_back(id(Kind::Activation, s, m));
    }
  for (int m = 0; m < micro_batches_; ++m)
    for (int s = stages_ - 1; s >= 0; --s) {
      order_.push_back(id(Kind::Backward, s, m));
      if (s > 0) order_.push_back(id(Kind::Gradient, s, m));
    }
  for (int s = 0; s < stages_; ++s) order_.push_back(id(Kind::AllReduce, s, 0));
  position_.assign(count, static_cast<int>(order_.size()));
  for (std::size_t p = 0; p < order_.size(); ++p) position_[static_cast<std::size_t>(order_[p])] = static_cast<int>(p);
}

void TaskGraphEngine::mark(int task) {
  if (dirty_[static_cast<std::size_t>(task)]) return;
  dirty_[static_cast<std::size_t>(task)] = 1;
  ++pending_;
  first_dirty_ = std::min(first_dirty_, position_[static_cast<std::size_t>(task)]);
}

void TaskGraphEngine::set(int task, double duration, int previous, bool track) {
  const std::size_t t = static_cast<std::size_t>(task);
  if (previous >= 0) next_[static_cast<std::size_t>(previous)] = task;
  if (track && duration_[t] == duration && previous_[t] == previous) return;
  duration_[t] = duration;
  previous_[t] = previous;
  if (track) mark(task);
}

void TaskGraphEngine::assign_stage(int s, bool track) {
  const StageConfig& stage = strategy_.stages[static_cast<std::size_t>(s)];
  const CostModel::StageSums sums = model_->stage_sums(stage.first_layer, stage.last_layer, stage.tensor);
  const int d = stage.data;
  std::vector<int>& inputs = all_reduce_inputs_[static_cast<std::size_t>(s)];
  inputs.clear();
  for (int r = 0; r < d && r < micro_batches_; ++r) {
    const int host = stage.host(r);
    const double forward = model_->compute_s(host, sums.forward_s), backward = model_->compute_s(host, sums.backward_s);
    int previous = -1;
    for (int m = r; m < micro_batches_; m += d) {
      const int task = id(Kind::Forward, s, m);
      next_[static_cast<std::size_t>(task)] = -1;
      set(task, forward, previous, track);
      previous = task;
    }
    for (int m = r; m < micro_batches_; m += d) {
      const int task = id(Kind::Backward, s, m);
      next_[static_cast<std::size_t>(task)] = -1;
      set(task, backward, previous, track);
      previous = task;
    }
    inputs.push_back(previous);
  }
  const int all_reduce = id(Kind::AllReduce, s, 0);
  const double seconds = model_->all_reduce_s(stage, sums.weight_bytes);
  duration_[static_cast<std::size_t>(all_reduce)] = seconds;
  // Re-timed whenever its stage changed: its inputs may change with the
  // same duration (another data degree).
  if (track) mark(all_reduce);
}

// Transfers over the channel from replica m mod d_a of one stage to replica
// m mod d_b of the other: the channel's previous message is micro-batch m -
// lcm(d_a, d_b).
void TaskGraphEngine::assign_transfers(Kind kind, int s, int neighbour, bool track) {
  const StageConfig& from = strategy_.stages[static_cast<std::size_t>(s)];
  const StageConfig& to = strategy_.stages[static_cast<std::size_t>(neighbour)];
  // What crosses the boundary: the output of its lower stage (the activation
  // forward, its gradient backward).
  const StageConfig& lower = neighbour < s ? to : from;
  const double bytes = model_->stage_sums(lower.first_layer, lower.last_layer, lower.tensor).output_bytes;
  const int period = std::lcm(from.data, to.data);
  for (int m = 0; m < micro_batches_; ++m) {
    const int task = id(kind, s, m);
    next_[static_cast<std::size_t>(task)] = -1;
    const double seconds = model_->transfer_s(from.host(m % from.data), to.host(m % to.data), bytes);
    set(task, seconds, m >= period ? id(kind, s, m - period) : -1, track);
  }
}

void TaskGraphEngine::assign_activations(int s, bool track) { assign_transfers(Kind::Activation, s, s + 1, track); }

void TaskGraphEngine::assign_gradients(int s, bool track) { assign_transfers(Kind::Gradient, s, s - 1, track); }

double TaskGraphEngine::ready(int task) const {
  const int block = stages_ * micro_batches_;
  const int previous = previous_[static_cast<std::size_t>(task)];
  double at = previous >= 0 ? end_[static_cast<std::size_t>(previous)] : 0.0;
  const auto after = [&](int other) { at = std::max(at, end_[static_cast<std::size_t>(other)]); };
  const int kind = task / block, rest = task % block;
  const int s = rest / micro_batches_, m = rest % micro_batches_;
  switch (kind) {
    case 0:  // forward: the previous stage's activation
      if (s > 0) after(id(Kind::Activation, s - 1, m));
      break;
    case 1:  // backward: the next stage's gradient (the last stage: its forward)
      after(s + 1 < stages_ ? id(Kind::Gradient, s + 1, m) : id(Kind::Forward, s, m));
      break;
    case 2: after(id(Kind::Forward, s, m)); break;
    case 3: after(id(Kind::Backward, s, m)); break;
    default:
      for (const int input : all_reduce_inputs_[static_cast<std::size_t>(rest)]) after(input);
  }
  return at;
}

void TaskGraphEngine::mark_successors(int task) {
  const int block = stages_ * micro_batches_;
  if (const int next = next_[static_cast<std::size_t>(task)]; next >= 0) mark(next);
  const int kind = task / block, rest = task % block;
  const int s = rest / micro_batches_, m = rest % micro_batches_;
  switch (kind) {
    case 0: mark(s + 1 < stages_ ? id(Kind::Activation, s, m) : id(Kind::Backward, s, m)); break;
    case 1:
      if (s > 0) mark(id(Kind::Gradient, s, m));
      mark(id(Kind::AllReduce, s, 0));
      break;
    case 2: mark(id(Kind::Forward, s + 1, m)); break;
    case 3: mark(id(Kind::Backward, s - 1, m)); break;
    default: break;
  }
}

double TaskGraphEngine::makespan() const {
  double at = 0;
  for (int s = 0; s < stages_; ++s) at = std::max(at, end_[static_cast<std::size_t>(id(Kind::AllReduce, s, 0))]);
  return at;
}

double TaskGraphEngine::full(const Strategy& strategy) {
  strategy_ = strategy;
  allocate(strategy.num_stages());
  for (int s = 0; s < stages_; ++s) assign_stage(s, false);
  for (int s = 0; s + 1 < stages_; ++s) assign_activations(s, false);
  for (int s = 1; s < stages_; ++s) assign_gradients(s, false);
  for (const int task : order_) {
    const std::size_t t = static_cast<std::size_t>(task);
    start_[t] = ready(task);
    end_[t] = start_[t] + duration_[t];
  }
  pending_ = 0;
  last_retimed_ = static_cast<std::int64_t>(order_.size());
  return makespan();
}

double TaskGraphEngine::delta(const Strategy& strategy) {
  if (strategy.num_stages() != stages_ || micro_batches_ != model_->micro_batches() || order_.empty()) return full(strategy);
  std::vector<int> changed;
  for (int s = 0; s < stages_; ++s)
    if (!(strategy.stages[static_cast<std::size_t>(s)] == strategy_.stages[static_cast<std::size_t>(s)])) changed.push_back(s);
  strategy_ = strategy;
  first_dirty_ = static_cast<int>(order_.size());
  pending_ = 0;
  std::vector<bool> activations(static_cast<std::size_t>(stages_), false), gradients(static_cast<std::size_t>(stages_), false);
  for (const int s : changed) {
    assign_stage(s, true);
    if (s > 0) activations[static_cast<std::size_t>(s) - 1] = true, gradients[static_cast<std::size_t>(s)] = true;
    if (s + 1 < stages_) activations[static_cast<std::size_t>(s)] = true, gradients[static_cast<std::size_t>(s) + 1] = true;
  }
  for (int s = 0; s < stages_; ++s) {
    if (activations[static_cast<std::size_t>(s)]) assign_activations(s, true);
    if (gradients[static_cast<std::size_t>(s)]) assign_gradients(s, true);
  }
  last_retimed_ = 0;
  for (std::size_t p = static_cast<std::size_t>(first_dirty_); p < order_.size() && pending_ > 0; ++p) {
    const int task = order_[p];
    const std::size_t t = static_cast<std::size_t>(task);
    if (!dirty_[t]) continue;
    dirty_[t] = 0;
    --pending_;
    ++last_retimed_;
    start_[t] = ready(task);
    const double end = start_[t] + duration_[t];
    if (end != end_[t]) {
      end_[t] = end;
      mark_successors(task);
    }
  }
  return makespan();
}

}  // namespace pipegrid::search
