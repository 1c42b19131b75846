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

#include <fmt/format.h>

#include "core/error.hpp"
#include "schedules/beyond.hpp"
#include "schedules/dual_rank.hpp"

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
    // The reference leaves the first (F, B) of the middle ranks H-1 and H
    // unoverlapped ("we don't overlap these two chunks").
    dual_rank::append_rank(ranks[static_cast<std::size_t>(r)], stage, first, H - h - 1, h, M - p + h + 1, h == H - 1);
  }
  return ranks;
}

}  // namespace pipegrid
