// Interleaved 1F1B (Megatron's virtual pipeline = PyTorch's
// ScheduleInterleaved1F1B) and PyTorch's ScheduleLoopedBFS. Loop map: rank r
// of p holds stages r, r+p, ..., r+(v-1)p (chunk c = stage c p + r).
// interleaved-1f1b: with mpr = micro_batches_per_round (PyTorch's rule;
// applied when v > 1), rank r runs w = min((v-1) mpr + 2(p-1-r), m v)
// warm-up forwards, then pairs (F, B), then the w remaining B's. Forward op k
// is of chunk (k / mpr) mod v, backward op k (counted from w) of chunk
// v-1 - ((k - w) / mpr) mod v; micro-batches ascend per stage. Bubble
// (p-1)(TF+TB+TW)/v, rank r holds at most min(m v, (v-1) mpr + 2(p-1-r) + 1)
// chunk-micro-batches. looped-bfs: each chunk ascending runs F 0..m-1, then
// each chunk descending runs B m-1..0; same bubble, m v in flight.

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "schedules/beyond.hpp"

namespace pipegrid {

int micro_batches_per_round(const std::string& name, int p, int m) {
  const int rounds = std::max(1, m / p);
  if (m % rounds != 0)
    throw InputError(fmt::format(
        "--micro-batches: {} on {} devices splits the micro-batches into rounds = max(1, micro-batches / devices) = {} "
        "rounds of equal size (PyTorch's rule); expected a multiple of {}, found {}",
        name, p, rounds, rounds, m));
  return m / rounds;
}

std::vector<Stream> interleaved_1f1b_orders(int p, int v, int m) {
  const int mpr = v > 1 ? micro_batches_per_round("interleaved-1f1b", p, m) : m;
  const int total = m * v;
  std::vector<Stream> ranks(p);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min((v - 1) * mpr + 2 * (p - 1 - r), total);
    std::vector<int> next_forward(v, 0), next_backward(v, 0);
    std::vector<Action>& out = ranks[r].actions;
    const auto forward = [&](int op) {
      const int chunk = (op / mpr) % v;
      out.push_back({ActionKind::Forward, chunk * p + r, next_forward[chunk]++, 0});
    };
    const auto backward = [&](int op) {
      const int chunk = v - 1 - ((op - warmup) / mpr) % v;
      out.push_back({ActionKind::Backward, chunk * p + r, next_backward[chunk]++, 0});
    };
    for (int op = 0; op < warmup; ++op) forward(op);
    for (int op = warmup; op < total; ++op) {
      forward(op);
      backward(op);
    }
    for (int op = total; op < total + warmup; ++op) backward(op);
  }
  return ranks;
}

std::vector<Stream> looped_bfs_orders(int p, int v, int m) {
  std::vector<Stream> ranks(p);
  for (int r = 0; r < p; ++r) {
    std::vector<Action>& out = ranks[r].actions;
    for (int chunk = 0; chunk < v; ++chunk)
      for (int mb = 0; mb < m; ++mb) out.push_back({ActionKind::Forward, chunk * p + r, mb, 0});
    for (int chunk = v - 1; chunk >= 0; --chunk)
      for (int mb = m - 1; mb >= 0; --mb) out.push_back({ActionKind::Backward, chunk * p + r, mb, 0});
  }
  return ranks;
}

}  // namespace pipegrid
