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

#include <fmt/format.h>

#include "core/error.hpp"
#include "schedules/beyond.hpp"
#include "schedules/dual_rank.hpp"

namespace pipegrid {

std::vector<Stream> dualpipev_orders(int p, int m) {
  if (m < 2 * p)
    throw InputError(fmt::format("--micro-batches: dualpipev on {} devices needs at least 2 x devices = {} micro-batches "
                                 "(PyTorch: micro-batches >= stages), found {}",
                                 p, 2 * p, m));
  std::vector<Stream> ranks(p);
  for (int r = 0; r < p; ++r) {
    const int stage[2] = {r, 2 * p - 1 - r}, first[2] = {0, 0};
    dual_rank::append_rank(ranks[static_cast<std::size_t>(r)], stage, first, p - r - 1, r, m - 2 * p + r + 1, r == p - 1);
  }
  return ranks;
}

}  // namespace pipegrid
