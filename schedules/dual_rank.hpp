#pragma once
// Internal to schedules/: the step order DualPipe and DualPipeV share
// (DeepSeek's dualpipe.py and its V form, PyTorch's ScheduleDualPipeV): one
// rank's compute order over its two stages, given each phase's stage and
// first micro-batch. dualpipe.cpp and dualpipev.cpp state their counts.

#include <deque>

#include "core/program.hpp"

namespace pipegrid::dual_rank {

/** Appends to `out` one rank's eight steps, phase c in {0, 1} running
 *  stage[c] with micro-batches first[c], first[c] + 1, ... per kind, and W
 *  the oldest I without its W:
 *   1. 2 warm x F(0);  2. (k+1) x [F(0), F(1)];  3. warm x [I(1), W, F(1)];
 *   4. steady x [(F(0);B(1)), (F(1);B(0))], (a;b) one overlapped op, the
 *      first (F(0), B(1)) as two plain ops when first_pair_plain;
 *   5. warm x [B(1), (F(1);B(0))];
 *   6. (k+1) x [backward(1), backward(0)]: B until step (k+1)/2, I from it
 *      on (from its phase-1 op for odd k, its phase-0 op for even k);
 *   7. warm x [W, I(0)];  8. the remaining W's. */
inline void append_rank(Stream& out, const int (&stage)[2], const int (&first)[2], int warm, int k, int steady,
                        bool first_pair_plain) {
  int f[2] = {0, 0}, b[2] = {0, 0};
  std::deque<Action> pending;  // I's whose W has not run, oldest first
  const auto F = [&](int c) { return Action{ActionKind::Forward, stage[c], first[c] + f[c]++, 0}; };
  const auto B = [&](int c, bool split) {
    const Action a{split ? ActionKind::BackwardInput : ActionKind::Backward, stage[c], first[c] + b[c]++, 0};
    if (split) pending.push_back(a);
    return a;
  };
  const auto W = [&] {
    const Action a{ActionKind::BackwardWeight, pending.front().stage, pending.front().micro_batch, 0};
    pending.pop_front();
    return a;
  };
  const auto plain = [&](Action a) { out.actions.push_back(a); };
  const auto overlap = [&](Action forward, Action backward) {
    out.overlapped.push_back(out.actions.size());
    out.actions.push_back(forward);
    out.actions.push_back(backward);
  };
  for (int j = 0; j < 2 * warm; ++j) plain(F(0));
  for (int j = 0; j < k + 1; ++j) plain(F(0)), plain(F(1));
  for (int j = 0; j < warm; ++j) plain(B(1, true)), plain(W()), plain(F(1));
  for (int j = 0; j < steady; ++j) {
    const Action forward0 = F(0), backward1 = B(1, false);
    if (j == 0 && first_pair_plain)
      plain(forward0), plain(backward1);
    else
      overlap(forward0, backward1);
    const Action forward1 = F(1), backward0 = B(0, false);
    overlap(forward1, backward0);
  }
  for (int j = 0; j < warm; ++j) {
    plain(B(1, false));
    const Action forward1 = F(1), backward0 = B(0, false);
    overlap(forward1, backward0);
  }
  bool split = false;
  for (int j = 0; j < k + 1; ++j) {
    if (j == (k + 1) / 2 && k % 2 == 1) split = true;
    plain(B(1, split));
    if (j == (k + 1) / 2 && k % 2 == 0) split = true;
    plain(B(0, split));
  }
  for (int j = 0; j < warm; ++j) plain(W()), plain(B(0, true));
  while (!pending.empty()) plain(W());
}

}  // namespace pipegrid::dual_rank
