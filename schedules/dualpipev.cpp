// DualPipeV (DeepSeek's DualPipe "cut in half", PyTorch's
// ScheduleDualPipeV). V map: rank r of p holds s0 = r and s1 = 2p-1-r;
// needs m >= 2p. Steps of rank r (W = the oldest I without its W):
//  1. 2(p-r-1) x F(s0);  2. (r+1) x [F(s0), F(s1)];
//  3. (p-r-1) x [I(s1), W, F(s1)];
//  4. (m-2p+r+1) x [(F(s0);B(s1)), (F(s1);B(s0))], (a;b) one overlapped
//     op, except the first (F(s0), B(s1)) of rank p-1: two plain ops;
//  5. (p-r-1) x [B(s1), (F(s1);B(s0))];
//  6. (r+1) x [backward(s1), backward(s0)]: B until step (r+1)/2, I from it
//     on (from its s1 op for odd r, its s0 op for even r);
//  7. (p-r-1) x [W, I(s0)];  8. the remaining W's.
// Micro-batches ascend per stage and kind. Reproduces PyTorch's
// dualpipev_4rank_10mb.csv. At uniform times with F&B = F+B the bubble is
// (p-1)(F&B+B-3W) in chunk times (3.0 at p=4); 2p+1 in flight per rank.

#include <deque>

#include <fmt/format.h>

#include "core/error.hpp"
#include "schedules/beyond.hpp"

namespace pipegrid {

std::vector<Stream> dualpipev_orders(int p, int m) {
  if (m < 2 * p)
    throw InputError(fmt::format("--micro-batches: dualpipev on {} devices needs at least 2 x devices = {} micro-batches "
                                 "(PyTorch: micro-batches >= stages), found {}",
                                 p, 2 * p, m));
  std::vector<Stream> ranks(p);
  for (int r = 0; r < p; ++r) {
    const int stage[2] = {r, 2 * p - 1 - r};
    int f[2] = {0, 0}, b[2] = {0, 0};
    std::deque<Action> pending;  // I's whose W has not run, oldest first
    Stream& out = ranks[r];
    const auto F = [&](int c) { return Action{ActionKind::Forward, stage[c], f[c]++, 0}; };
    const auto B = [&](int c, bool split) {
      const Action a{split ? ActionKind::BackwardInput : ActionKind::Backward, stage[c], b[c]++, 0};
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
    for (int j = 0; j < 2 * (p - r - 1); ++j) plain(F(0));
    for (int j = 0; j < r + 1; ++j) plain(F(0)), plain(F(1));
    for (int j = 0; j < p - r - 1; ++j) plain(B(1, true)), plain(W()), plain(F(1));
    for (int j = 0; j < m - 2 * p + r + 1; ++j) {
      const Action forward = F(0), backward = B(1, false);
      if (j == 0 && r == p - 1)
        plain(forward), plain(backward);
      else
        overlap(forward, backward);
      const Action forward1 = F(1), backward0 = B(0, false);
      overlap(forward1, backward0);
    }
    for (int j = 0; j < p - r - 1; ++j) {
      plain(B(1, false));
      const Action forward1 = F(1), backward0 = B(0, false);
      overlap(forward1, backward0);
    }
    bool split = false;
    for (int j = 0; j < r + 1; ++j) {
      if (j == (r + 1) / 2 && r % 2 == 1) split = true;
      plain(B(1, split));
      if (j == (r + 1) / 2 && r % 2 == 0) split = true;
      plain(B(0, split));
    }
    for (int j = 0; j < p - r - 1; ++j) plain(W()), plain(B(0, split));
    while (!pending.empty()) plain(W());
  }
  return ranks;
}

}  // namespace pipegrid
