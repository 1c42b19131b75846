#pragma once
// Comparison of a simulated timeline with measured ones (the same schema,
// core/timeline.hpp): mini-batch time, per-action start and end error,
// bubble fraction, and the spread over repeated measured runs. Pure logic: no
// engine. The metric definitions are in docs/validation.md and below.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/timeline.hpp"

namespace pipegrid {

struct CompareOptions {
  /// Renumber each timeline's mini-batches so that its smallest is 0 (a real
  /// run that left out its warm-up mini-batches 0..k-1 starts at k).
  bool align_first = false;
  /// Compare the actions present in both timelines and list the others,
  /// instead of failing when an action is present in one timeline only.
  bool allow_missing = false;
  /// Match compute records only (F, B, R, ...); transfers are ignored.
  bool compute_only = false;
  /// How many of the worst actions to keep (by action error).
  int worst = 5;
  /// The mini-batch time's definition, when the schedule is known: false =
  /// span / mini-batches (flushed schedules, as simulate has it, even when a
  /// device starts the next mini-batch before another finished this one),
  /// true = the steady-state period. Absent: the period when mini-batches
  /// overlap in either timeline (the timelines tell).
  std::optional<bool> steady_period;
  /// Compare one steady cycle instead of every action (schedules without a
  /// flush, whose mini-batches overlap): see compare_timelines.
  bool steady_cycle = false;
  /// steady_cycle: the cycle's length in mini-batches is a multiple of this
  /// (besides the simulated cycle and the replicas' round), e.g. replicas x
  /// update interval when all-reduces come every few rounds (>= 1).
  int cycle_multiple = 1;
  /// steady_cycle: the mini-batches the measured run left out before its
  /// mini-batch 0 (its warm-up; its first measured mini-batch is the
  /// Program's mini-batch `measured_warmup`), so that both cycles are at
  /// one phase of the Program. The simulated timeline starts at the
  /// Program's mini-batch 0.
  int measured_warmup = 0;
};

/** What steady_cycle compared: one cycle of C mini-batches in each timeline. */
struct SteadyCycle {
  int cycle_minibatches = 0;  ///< C
  bool cycle_confirmed = false;  ///< the simulated completions repeat (SteadyState::periodic)
  /// The cycle's mini-batches: the last C whose completions all come before
  /// the simulated drain, and the measured ones at the same distance from
  /// the end of the run (at the same Program phase). Numbers as compared
  /// (after align_first).
  int simulated_first_minibatch = 0, simulated_last_minibatch = 0;
  int measured_first_minibatch = 0, measured_last_minibatch = 0;
  /// Cycle start: the completion of the mini-batch before the cycle's first
  /// (times after the shift to 0).
  double simulated_start_s = 0, measured_start_s = 0;
  /// What each period was measured over (SteadyState::measured_over).
  std::string simulated_period_over, measured_period_over;
};

/** p-th percentile (0 <= p <= 100) by nearest rank: the value of rank
 *  max(1, ceil(p/100 x n)) (1-based) among the n values sorted ascending.
 *  It is always one of the values (p = 0: the smallest, 100: the largest); the median is the 50th percentile, so the lower
 *  of the two middle values when n is even. 0 for no values. */
double nearest_rank_percentile(std::vector<double> values, double p);

/** An action's short name: "<stage><action><micro-batch>[@<mini-batch>]" as
 *  in the Program text form ("2F5", "1B3@1", "0SEND_F1"); an all-reduce
 *  of a whole stage is "1ALLREDUCE" (+"@round"), of a layer "1ALLREDUCE7".
 *  `replica` > 0 appends "[r<replica>]". */
std::string action_name(const TimelineRecord& record, int replica);

struct MatchedAction {
  std::string name;
  double simulated_start_s = 0, simulated_end_s = 0;  ///< shifted so the simulated timeline starts at 0
  double measured_start_s = 0, measured_end_s = 0;    ///< shifted so the measured timeline starts at 0
  double start_error = 0;  ///< |simulated start - measured start| / measured mini-batch time
  double end_error = 0;    ///< |simulated end - measured end| / measured mini-batch time
  double error() const { return start_error > end_error ? start_error : end_error; }
};

struct ErrorSummary {
  double median = 0, p95 = 0, max = 0;  ///< nearest-rank percentiles
};

/** One simulated timeline against one measured one. */
struct TimelineComparison {
  std::string measured_origin;
  int simulated_minibatches = 0, measured_minibatches = 0;  ///< distinct mini-batch numbers of compute records
  double simulated_span_s = 0, measured_span_s = 0;         ///< last end - first start
  /// The mini-batch time as docs/semantics.md defines it (minibatch_time_of):
  /// the steady-state period when mini-batches overlap in either timeline,
  /// else span / mini-batches.
  double simulated_minibatch_time_s = 0, measured_minibatch_time_s = 0;
  double simulated_mean_minibatch_span_s = 0, measured_mean_minibatch_span_s = 0;  ///< span / mini-batches
  bool steady_state = false;  ///< the mini-batch times are steady-state periods
  double relative_error = 0;  ///< (simulated - measured) / measured mini-batch time, signed
  std::size_t matched = 0;    ///< actions present in both
  ErrorSummary action_error;  ///< over max(start error, end error) of each matched action
  ErrorSummary start_error, end_error;
  double simulated_bubble_fraction = 0, measured_bubble_fraction = 0;
  std::vector<MatchedAction> worst;  ///< largest action error first (ties: name order)
  std::vector<std::string> only_simulated, only_measured;  ///< names, in each timeline's time order
  /// Present when the comparison was of one steady cycle (options.steady_cycle).
  std::optional<SteadyCycle> cycle;
};

/** Compares `simulated` with `measured` (origins name the files in
 *  messages). Records are matched by identity, never by host name, since the
 *  two runs may name their devices differently: compute and transfer records
 *  by (action, stage, micro-batch, mini-batch, replica), where the replica
 *  is the rank of the record's host among the hosts holding records of that
 *  stage, in the timeline's host order; records that still share all of
 *  these are matched in order of start time. Optimizer-step records ("U")
 *  are matched like the others when both timelines have some; when only one
 *  has them, they are removed from it before anything is computed (spans,
 *  bubbles, matching), so a timeline without steps compares as before. Both timelines are shifted so
 *  their first record starts at 0. Mini-batch time and bubble fraction of a
 *  timeline as minibatch_time_of gives them (core/metrics.hpp): the
 *  steady-state period and the bubbles inside its window when mini-batches
 *  overlap, else span / mini-batches and 1 - busy / span per device.
 *
 *  With options.steady_cycle both mini-batch times are steady-state
 *  periods and the actions compared are those of one steady cycle: C =
 *  lcm(the simulated cycle, or 1 when none is confirmed; the replicas'
 *  round, lcm of the hosts per stage; options.cycle_multiple) mini-batches.
 *  The simulated cycle is the last C mini-batches k0..k1 whose completions
 *  (ends of their last compute records) all come before the simulated drain
 *  (docs/semantics.md, Steady state); it starts at T0 = the completion of
 *  mini-batch k0 - 1 and its actions are the simulated records starting in
 *  [T0, T0 + C x simulated period). The measured cycle is k0 + D..k1 + D,
 *  where D is the largest shift not beyond the measured run's end (D <=
 *  measured mini-batches - simulated ones) that keeps both at one phase of
 *  the Program (D + measured_warmup a multiple of C); it starts at T0' =
 *  the completion of measured mini-batch k0 + D - 1. Each simulated cycle
 *  action is matched with the measured record of the same identity, its
 *  mini-batch shifted by D (an all-reduce's round by (D +
 *  measured_warmup) / r - ceil(measured_warmup / r), r the stage's
 *  replicas, as the executor renumbers rounds); times are offsets from the
 *  cycle starts and errors are fractions of the measured period. The
 *  measured period is the mean gap between completions over whole cycles
 *  of C before its drain (SteadyState's estimate with rotation C).
 *  only_simulated: cycle actions the measured timeline lacks; only_measured:
 *  measured records in the cycle's mini-batch range with no counterpart in
 *  the simulated timeline.
 *
 *  InputError: a timeline without records, a non-finite time, a measured
 *  mini-batch time of 0, no action in common, (without allow_missing)
 *  actions present in one timeline only, or (steady_cycle) too few
 *  mini-batches before either timeline's drain for one cycle. */
TimelineComparison compare_timelines(const Timeline& simulated, const std::string& simulated_origin,
                                     const Timeline& measured, const std::string& measured_origin,
                                     const CompareOptions& options);

/** Readable report of one or more comparisons with the same simulated
 *  timeline (repeated measured runs): the first run in detail, the spread
 *  over all runs when there are several. */
std::string comparison_to_table(const std::vector<TimelineComparison>& runs, const std::string& simulated_origin);

/** One JSON object: the first run's metrics at top level
 *  (simulated_minibatch_time_s, measured_minibatch_time_s, relative_error,
 *  action_error_median, action_error_p95, action_error_max, ...), then
 *  `runs` (every run's main metrics) and `spread` (min, median, max over
 *  runs). */
std::string comparison_to_json(const std::vector<TimelineComparison>& runs, const std::string& simulated_origin);

}  // namespace pipegrid
