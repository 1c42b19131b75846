// zb-auto: Zero Bubble's automatic schedule (schedules/zb_auto.hpp).
//
// The heuristic (paper, section 3.1; the authors' implementation for the
// variants it tries), as implemented here. Every pass is placed as soon as
// its stage is free and its input has arrived (T_comm after the pass it
// needs on the neighbouring stage); a stage's idle time after its first F
// is its bubble. Memory in units of one micro-batch's activations M_B:
// F +1, I -(1 - f), W -f (f = M_W / M_B), the limit K p.
//  1. Warm-up: F0 on every stage. Then, from the last stage but one to the
//     first, as many extra F's as the memory allows while they end (variant
//     "tight") or start ("loose") before the gradient of micro-batch 0
//     arrives from the next stage (its arrival estimated from the next
//     stage's own warm-up); each stage then keeps fewer extra F's than the
//     stage before it (while it has any and micro-batches remain). The
//     extra F's run, then I0 from the last stage to the first.
//  2. For each later micro-batch i: every stage with forwards left wants
//     its next F, unless (variant "defer") it is 2+ forwards ahead of the
//     next stage and, with t the time the next stage could end its coming
//     F and I plus a transfer, either this stage is free only at t or
//     later, or its F (after the W's its memory needs first) would end
//     after t and the wait until t fits in the largest bubble so far minus
//     its own; a stage runs an F only if the next stage does too. Before its F (its I), a stage
//     runs the W's its memory needs, then W's that end before the F's input
//     (the I's gradient) arrives, then one more W into the remaining gap
//     when the gap is larger than the largest bubble minus its own, or
//     (variant "greedy") always. Stage 0 runs all its W's before its I
//     once its forwards are done. Then I_i from the last stage to the first.
//  3. The remaining W's.
// The eight variants (tight or loose, defer or not, greedy or not) are
// built and the least iteration time (the largest, over the stages, of the
// last W's end minus the first F's start) kept, ties to the first in the
// order tight before loose, defer before not, greedy before not.

#include "schedules/zb_auto.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "core/error.hpp"

namespace pipegrid {
namespace {

enum Pass { kForward = 0, kInput = 1, kWeight = 2 };
constexpr double kMemoryTolerance = 1e-9;  // fractions summed over many passes

struct Variant {
  bool tight_warmup;   ///< extra warm-up F's must end before the gradient arrives
  bool defer_forward;  ///< an F may wait when the stage is ahead of the next one
  bool greedy_fill;    ///< a W goes into every gap before an F or I
};

/** The heuristic's state for one variant; throws MemoryStuck when a pass
 *  needs memory and no W is left to free it. */
struct MemoryStuck {};

class Builder {
 public:
  Builder(int p, int m, double limit, const ZbStageTimes& times, Variant variant)
      : p_(p), m_(m), limit_(limit), times_(times), variant_(variant),
        end_(static_cast<std::size_t>(p), {std::vector<double>(static_cast<std::size_t>(m), 0.0),
                                           std::vector<double>(static_cast<std::size_t>(m), 0.0),
                                           std::vector<double>(static_cast<std::size_t>(m), 0.0)}),
        count_(static_cast<std::size_t>(p), {0, 0, 0}), free_at_(static_cast<std::size_t>(p), 0.0),
        memory_(static_cast<std::size_t>(p), 0.0), bubble_(static_cast<std::size_t>(p), 0.0),
        orders_(static_cast<std::size_t>(p)) {}

  void build() {
    warm_up();
    for (int i = 1; i < m_; ++i) steady(i);
    for (int s = 0; s < p_; ++s)
      while (count(s, kWeight) < m_) run(s, kWeight);
  }

  double iteration_s() const {
    double longest = 0;
    for (int s = 0; s < p_; ++s)
      longest = std::max(longest, end(s, kWeight, m_ - 1) - (end(s, kForward, 0) - cost(s, kForward)));
    return longest;
  }

  std::vector<Stream> take_orders() { return std::move(orders_); }

 private:
  double cost(int s, Pass pass) const {
    const std::size_t i = static_cast<std::size_t>(s);
    return pass == kForward ? times_.forward_s[i] : pass == kInput ? times_.backward_input_s[i] : times_.backward_weight_s[i];
  }
  double memory_of(int s, Pass pass) const {
    const double f = times_.weight_memory_fraction[static_cast<std::size_t>(s)];
    return pass == kForward ? 1.0 : pass == kInput ? -(1.0 - f) : -f;
  }
  int& count(int s, Pass pass) { return count_[static_cast<std::size_t>(s)][pass]; }
  int count(int s, Pass pass) const { return count_[static_cast<std::size_t>(s)][pass]; }
  double& end(int s, Pass pass, int mb) { return end_[static_cast<std::size_t>(s)][pass][static_cast<std::size_t>(mb)]; }
  double end(int s, Pass pass, int mb) const { return end_[static_cast<std::size_t>(s)][pass][static_cast<std::size_t>(mb)]; }
  double& free_at(int s) { return free_at_[static_cast<std::size_t>(s)]; }
  double largest_bubble() const { return *std::max_element(bubble_.begin(), bubble_.end()); }
  double spare_bubble(int s) const { return largest_bubble() - bubble_[static_cast<std::size_t>(s)]; }
  bool weight_pending(int s) const { return count(s, kWeight) < count(s, kInput); }

  // When the input of stage s's next `pass` arrives (none for W, a first
  // stage's F or a last stage's I: the stage's own order covers those).
  std::optional<double> arrival(int s, Pass pass, int mb) const {
    if (pass == kForward && s > 0) return end(s - 1, kForward, mb) + times_.transfer_s;
    if (pass == kInput && s + 1 < p_) return end(s + 1, kInput, mb) + times_.transfer_s;
    return std::nullopt;
  }

  void run(int s, Pass pass) {
    const int mb = count(s, pass);
    double start = free_at(s);
    if (const auto ready = arrival(s, pass, mb)) start = std::max(start, *ready);
    if (count(s, kForward) > 0) bubble_[static_cast<std::size_t>(s)] += start - free_at(s);
    free_at(s) = start + cost(s, pass);
    end(s, pass, mb) = free_at(s);
    memory_[static_cast<std::size_t>(s)] += memory_of(s, pass);
    ++count(s, pass);
    static constexpr ActionKind kinds[] = {ActionKind::Forward, ActionKind::BackwardInput, ActionKind::BackwardWeight};
    orders_[static_cast<std::size_t>(s)].actions.push_back({kinds[pass], s, mb, 0});
  }

  bool fits(int s, double more) const { return memory_[static_cast<std::size_t>(s)] + more <= limit_ + kMemoryTolerance; }

  void make_room(int s, Pass pass) {
    while (!fits(s, memory_of(s, pass))) {
      if (!weight_pending(s)) throw MemoryStuck{};
      run(s, kWeight);
    }
  }

  // W's into the time before `ready` (the next pass's input arrival).
  void fill_with_weights(int s, double ready) {
    while (weight_pending(s) && free_at(s) + cost(s, kWeight) <= ready) run(s, kWeight);
    if (weight_pending(s) && free_at(s) < ready && (variant_.greedy_fill || ready - free_at(s) > spare_bubble(s)))
      run(s, kWeight);
  }

  void warm_up() {
    for (int s = 0; s < p_; ++s) run(s, kForward);
    std::vector<int> extra(static_cast<std::size_t>(p_), 0);
    double gradient_end = end(p_ - 1, kForward, 0) + cost(p_ - 1, kInput);  // I0 of the next stage
    for (int s = p_ - 2; s >= 0; --s) {
      int& more = extra[static_cast<std::size_t>(s)];
      double memory = memory_[static_cast<std::size_t>(s)], busy = free_at(s);
      const double arrives = gradient_end + times_.transfer_s;
      while (count(s, kForward) + more < m_ && memory + memory_of(s, kForward) <= limit_ + kMemoryTolerance) {
        if (variant_.tight_warmup ? busy + cost(s, kForward) > arrives : busy >= arrives) break;
        memory += memory_of(s, kForward);
        busy += cost(s, kForward);
        ++more;
      }
      gradient_end = std::max(busy, arrives) + cost(s, kInput);
    }
    for (int s = 1; s < p_; ++s) {
      int& more = extra[static_cast<std::size_t>(s)];
      while (more > 0 && more >= extra[static_cast<std::size_t>(s - 1)] && count(s, kForward) + more < m_) --more;
    }
    for (int s = 0; s < p_; ++s)
      for (int k = 0; k < extra[static_cast<std::size_t>(s)]; ++k) run(s, kForward);
    for (int s = p_ - 1; s >= 0; --s) run(s, kInput);
  }

  bool wants_forward(int s) const {
    if (count(s, kForward) >= m_) return false;
    if (!variant_.defer_forward || s + 1 >= p_ || count(s, kForward) < count(s + 1, kForward) + 2) return true;
    const double next_done = free_at_[static_cast<std::size_t>(s + 1)] + cost(s + 1, kForward) + cost(s + 1, kInput) +
                             times_.transfer_s;
    const double busy = free_at_[static_cast<std::size_t>(s)];
    if (busy >= next_done) return false;
    // The W's this F's memory would need first.
    double memory = memory_[static_cast<std::size_t>(s)] + memory_of(s, kForward), weights_s = 0;
    for (int w = count(s, kWeight); memory > limit_ + kMemoryTolerance && w < count(s, kInput); ++w) {
      weights_s += cost(s, kWeight);
      memory += memory_of(s, kWeight);
    }
    if (busy + cost(s, kForward) + weights_s <= next_done) return true;
    return next_done - busy > spare_bubble(s);
  }

  void steady(int i) {
    std::vector<bool> forward(static_cast<std::size_t>(p_));
    for (int s = 0; s < p_; ++s) forward[static_cast<std::size_t>(s)] = wants_forward(s);
    for (int s = p_ - 2; s >= 0; --s)
      forward[static_cast<std::size_t>(s)] = forward[static_cast<std::size_t>(s)] && forward[static_cast<std::size_t>(s + 1)];
    for (int s = 0; s < p_; ++s) {
      if (!forward[static_cast<std::size_t>(s)]) continue;
      make_room(s, kForward);
      if (s > 0) fill_with_weights(s, *arrival(s, kForward, count(s, kForward)));
      run(s, kForward);
    }
    for (int s = p_ - 1; s >= 0; --s) {
      make_room(s, kInput);
      if (s + 1 < p_) fill_with_weights(s, *arrival(s, kInput, i));
      if (s == 0 && count(s, kForward) == m_)
        while (weight_pending(s)) run(s, kWeight);
      run(s, kInput);
    }
  }

  int p_, m_;
  double limit_;
  const ZbStageTimes& times_;
  Variant variant_;
  std::vector<std::array<std::vector<double>, 3>> end_;  // [stage][pass][micro-batch]
  std::vector<std::array<int, 3>> count_;
  std::vector<double> free_at_, memory_, bubble_;
  std::vector<Stream> orders_;
};

void check_times(const std::vector<double>& values, const char* field, int stages, double most) {
  if (values.size() != static_cast<std::size_t>(stages))
    throw InputError(fmt::format("zb-auto stage times: {}: expected one value per stage ({}), found {}", field, stages,
                                 values.size()));
  for (std::size_t s = 0; s < values.size(); ++s)
    if (!std::isfinite(values[s]) || values[s] < 0 || values[s] > most)
      throw InputError(fmt::format("zb-auto stage times: {} of stage {}: expected a finite value in [0, {}], found {}",
                                   field, s, most, values[s]));
}

}  // namespace

ZbStageTimes resolved_stage_times(const ZbStageTimes& times, int stages) {
  ZbStageTimes resolved = times;
  const auto fill = [stages](std::vector<double>& values, double value) {
    if (values.empty()) values.assign(static_cast<std::size_t>(stages), value);
  };
  fill(resolved.forward_s, 1);
  fill(resolved.backward_input_s, 1);
  fill(resolved.backward_weight_s, 1);
  fill(resolved.weight_memory_fraction, 1);
  const double huge = 1e30;
  check_times(resolved.forward_s, "forward_s", stages, huge);
  check_times(resolved.backward_input_s, "backward_input_s", stages, huge);
  check_times(resolved.backward_weight_s, "backward_weight_s", stages, huge);
  check_times(resolved.weight_memory_fraction, "weight_memory_fraction", stages, 1);
  if (!std::isfinite(resolved.transfer_s) || resolved.transfer_s < 0)
    throw InputError(fmt::format("zb-auto stage times: transfer_s: expected a finite value >= 0, found {}", resolved.transfer_s));
  return resolved;
}

double min_activation_limit(int stages) { return 1.0 / std::max(stages, 1); }

std::vector<Stream> zb_auto_orders(int stages, int micro_batches, double activation_limit, const ZbStageTimes& times) {
  const double least = min_activation_limit(stages);
  if (!std::isfinite(activation_limit) || activation_limit < least - kMemoryTolerance)
    throw InputError(fmt::format("--activation-limit: expected at least {} for zb-auto on {} stages (1/p: one "
                                 "micro-batch's activations per stage; 1 is the paper's ZB-1p, 2 its ZB-2p), found {}",
                                 least, stages, activation_limit));
  const ZbStageTimes resolved = resolved_stage_times(times, stages);
  const double limit = activation_limit * stages;
  std::optional<double> best;
  std::vector<Stream> best_orders;
  for (const bool tight : {true, false})
    for (const bool defer : {true, false})
      for (const bool greedy : {true, false}) {
        Builder builder(stages, micro_batches, limit, resolved, {tight, defer, greedy});
        try {
          builder.build();
        } catch (const MemoryStuck&) {
          continue;
        }
        const double iteration = builder.iteration_s();
        if (!best || iteration < *best) {
          best = iteration;
          best_orders = builder.take_orders();
        }
      }
  if (!best)  // not reached for limits >= 1/p: every pass finds a W to free or fits
    throw InputError(fmt::format("--activation-limit {}: zb-auto found no schedule on {} stages within the limit",
                                 activation_limit, stages));
  return best_orders;
}

double one_stage_per_device_iteration_s(const Program& program, const ZbStageTimes& times) {
  const int p = program.num_stages, m = program.micro_batches;
  if (static_cast<int>(program.devices.size()) != p)
    throw InputError(fmt::format("iteration time: expected one device per stage ({}), found {} devices", p,
                                 program.devices.size()));
  const ZbStageTimes resolved = resolved_stage_times(times, p);
  // end[kind][stage][micro-batch], negative until run.
  std::array<std::vector<std::vector<double>>, 5> ends;
  for (auto& kind : ends) kind.assign(static_cast<std::size_t>(p), std::vector<double>(static_cast<std::size_t>(m), -1.0));
  const auto at = [&](ActionKind kind, int s, int mb) -> double& {
    return ends[static_cast<std::size_t>(kind)][static_cast<std::size_t>(s)][static_cast<std::size_t>(mb)];
  };
  const auto gradient_end = [&](int s, int mb) { return std::max(at(ActionKind::Backward, s, mb), at(ActionKind::BackwardInput, s, mb)); };
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  std::vector<double> free_at(static_cast<std::size_t>(p), 0.0), first_start(static_cast<std::size_t>(p), -1.0);
  for (int d = 0; d < p; ++d) {
    const DeviceProgram& device = program.devices[static_cast<std::size_t>(d)];
    if (device.stages != std::vector<int>{d} || device.streams.size() != 1)
      throw InputError(fmt::format("iteration time: device {} must hold stage {} alone, with one stream", d, d));
  }
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int d = 0; d < p; ++d) {
      const std::vector<Action>& actions = program.devices[static_cast<std::size_t>(d)].streams.front().actions;
      std::size_t& k = next[static_cast<std::size_t>(d)];
      while (k < actions.size()) {
        const Action& action = actions[k];
        if (action.mini_batch != 0 || action.micro_batch < 0 || action.micro_batch >= m)
          throw InputError(fmt::format("iteration time: {}: expected one mini-batch of {} micro-batches", to_string(action), m));
        const int s = action.stage, mb = action.micro_batch;
        const std::size_t i = static_cast<std::size_t>(s);
        double ready = 0, duration = 0;
        switch (action.kind) {
          case ActionKind::Forward:
            if (s > 0 && (ready = at(ActionKind::Forward, s - 1, mb)) < 0) goto blocked;
            if (s > 0) ready += resolved.transfer_s;
            duration = resolved.forward_s[i];
            break;
          case ActionKind::Recompute:
            if ((ready = at(ActionKind::Forward, s, mb)) < 0) goto blocked;
            duration = resolved.forward_s[i];
            break;
          case ActionKind::Backward:
          case ActionKind::BackwardInput:
            if (at(ActionKind::Forward, s, mb) < 0) goto blocked;
            ready = at(ActionKind::Forward, s, mb);
            if (s + 1 < p) {
              const double gradient = gradient_end(s + 1, mb);
              if (gradient < 0) goto blocked;
              ready = std::max(ready, gradient + resolved.transfer_s);
            }
            duration = resolved.backward_input_s[i] + (action.kind == ActionKind::Backward ? resolved.backward_weight_s[i] : 0);
            break;
          case ActionKind::BackwardWeight:
            if ((ready = at(ActionKind::BackwardInput, s, mb)) < 0) goto blocked;
            duration = resolved.backward_weight_s[i];
            break;
        }
        {
          const double start = std::max(free_at[i], ready);
          if (first_start[i] < 0) first_start[i] = start;
          free_at[i] = start + duration;
          at(action.kind, s, mb) = free_at[i];
          ++k;
          progressed = true;
          continue;
        }
      blocked:
        break;
      }
    }
  }
  double longest = 0;
  for (int d = 0; d < p; ++d) {
    const std::size_t i = static_cast<std::size_t>(d);
    if (next[i] != program.devices[i].streams.front().actions.size())
      throw InputError(fmt::format("iteration time: device {} waits forever at action {}", d, next[i]));
    if (first_start[i] >= 0) longest = std::max(longest, free_at[i] - first_start[i]);
  }
  return longest;
}

}  // namespace pipegrid
