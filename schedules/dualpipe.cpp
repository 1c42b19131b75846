// DualPipe, the bidirectional schedule of the DeepSeek-V3 technical report
// (arXiv 2412.19437, section 3.2.1, Figure 5), step by step as the
// reference implementation's DualPipe.step (deepseek-ai/DualPipe @3da1bbe,
// dualpipe/dualpipe.py) runs each rank. p ranks (p even), two copies of the
// model, each cut into the same p stages: copy "down" has stage i on rank i
// and runs micro-batches 0..M-1 (M = m/2), copy "up" has stage i on rank
// p-1-i and runs micro-batches M..m-1. With H = p/2 and h = min(r, p-1-r),
// phase 0 of rank r is the copy whose micro-batches enter on its side (down
// for r < H, up otherwise) and phase 1 the other; W = the oldest I without
// its W (the reference's WeightGradStore queue):
//  1. 2(H-h-1) x F(ph0);  2. (h+1) x [F(ph0), F(ph1)];
//  3. (H-h-1) x [I(ph1), W, F(ph1)];
//  4. (M-p+h+1) x [(F(ph0);B(ph1)), (F(ph1);B(ph0))], (a;b) one overlapped
//     op, except the first (F(ph0), B(ph1)) of the middle ranks H-1 and H:
//     two plain ops ("we don't overlap these two chunks");
//  5. (H-h-1) x [B(ph1), (F(ph1);B(ph0))];
//  6. (h+1) x [backward(ph1), backward(ph0)]: B until step (h+1)/2, I from
//     it on (from its ph1 op for odd h, its ph0 op for even h);
//  7. (H-h-1) x [W, I(ph0)];  8. the remaining W's.
// The reference asserts num_ranks % 2 == 0 and num_chunks % 2 == 0,
// num_chunks >= 2 num_ranks (step 4 runs at least once on rank 0).

#include <deque>

#include <fmt/format.h>

#include "core/error.hpp"
#include "schedules/beyond.hpp"

namespace pipegrid {

std::vector<Stream> dualpipe_orders(int p, int m) {
  if (p % 2 != 0)
    throw InputError(fmt::format("--schedule dualpipe: needs an even number of devices (pipeline stages), found {} "
                                 "(DeepSeek's dualpipe.py: num_ranks % 2 == 0); give one device more or fewer, or "
                                 "dualpipev, which takes any number",
                                 p));
  if (m % 2 != 0 || m < 2 * p)
    throw InputError(fmt::format("--micro-batches: dualpipe on {} devices needs an even number of micro-batches, at least "
                                 "2 x devices = {} (half enter from each end; DeepSeek's dualpipe.py: num_chunks % 2 == 0 "
                                 "and num_chunks >= num_ranks * 2), found {}",
                                 p, 2 * p, m));
  const int H = p / 2, M = m / 2;
  std::vector<Stream> ranks(p);
  for (int r = 0; r < p; ++r) {
    const int h = std::min(r, p - 1 - r);
    const bool lower = r < H;
    // Per phase: the stage this rank runs and the first micro-batch of its copy.
    const int stage[2] = {lower ? r : p - 1 - r, lower ? p - 1 - r : r};
    const int first[2] = {lower ? 0 : M, lower ? M : 0};
    const bool middle = h == H - 1;
    int f[2] = {0, 0}, b[2] = {0, 0};
    std::deque<Action> pending;  // I's whose W has not run, oldest first
    Stream& out = ranks[r];
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
    for (int j = 0; j < 2 * (H - h - 1); ++j) plain(F(0));
    for (int j = 0; j < h + 1; ++j) plain(F(0)), plain(F(1));
    for (int j = 0; j < H - h - 1; ++j) plain(B(1, true)), plain(W()), plain(F(1));
    for (int j = 0; j < M - p + h + 1; ++j) {
      const Action forward0 = F(0), backward1 = B(1, false);
      if (j == 0 && middle)
        plain(forward0), plain(backward1);
      else
        overlap(forward0, backward1);
      const Action forward1 = F(1), backward0 = B(0, false);
      overlap(forward1, backward0);
    }
    for (int j = 0; j < H - h - 1; ++j) {
      plain(B(1, false));
      const Action forward1 = F(1), backward0 = B(0, false);
      overlap(forward1, backward0);
    }
    bool split = false;
    for (int j = 0; j < h + 1; ++j) {
      if (j == (h + 1) / 2 && h % 2 == 1) split = true;
      plain(B(1, split));
      if (j == (h + 1) / 2 && h % 2 == 0) split = true;
      plain(B(0, split));
    }
    for (int j = 0; j < H - h - 1; ++j) plain(W()), plain(B(0, true));
    while (!pending.empty()) plain(W());
  }
  return ranks;
}

}  // namespace pipegrid
