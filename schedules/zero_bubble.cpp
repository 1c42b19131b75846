// Zero-bubble schedules (Qi et al., arXiv 2401.10241): the backward split
// into I (input gradient, on the critical path) and W (weight gradient, run
// later to fill bubbles). W always takes the oldest I without its W.
// zb1p (PyTorch's InterleavedZeroBubble), loop map: as interleaved-1f1b with
// w = min((v-1) mpr + p-1-r, m v) warm-up forwards and I for B; after each I
// of backward op k >= w + r, one W; the remaining W's at the end. Bubble
// (p-1) max(TF+TB-TW, TB)/v, (v-1) mpr + p in flight on every rank.
// zb-h1 = zb1p at v = 1: bubble (p-1) max(TF+TB-TW, TB), p in flight.
// zb-h2, one stage per rank, cap C = 2p-1: min(m, 2(p-1-r)+1) forwards;
// while forwards remain: I, W if (F's done - W's done) >= C, F; then (I, W)
// pairs; then the remaining W's. Span bubble (p-1) max(0, TF+TB-2TW, TB-TF)
// for m >= 2p-1, 2p-1 in flight.
// zb-v (PyTorch's ZBVZeroBubble), V map, rank r holds c0 = r and
// c1 = 2p-1-r, n = max(2p-1, m): F(c0) x (2(p-r)-1); r x [F(c1), F(c0)];
// (p-r) x [F(c1), I(c1), W(c1)]; while F(c1) lag F(c0) or F(c0) < n:
// [F(c0) if < n], I(c0), W(c0), F(c1), I(c1), W(c1); r x [I(c0), I(c1)];
// (p-r) x [I(c0), W(c0)]; the remaining W(c1), then W(c0); actions of
// micro-batches >= m dropped. Zero span bubble at uniform times for
// m >= 2p-1; 2p chunk-micro-batches in flight.

#include <algorithm>
#include <deque>

#include "schedules/beyond.hpp"

namespace pipegrid {

std::vector<Stream> zb1p_orders(int p, int v, int m) {
  const int mpr = v > 1 ? micro_batches_per_round("zb1p", p, m) : m;
  const int total = m * v;
  std::vector<Stream> ranks(p);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min((v - 1) * mpr + (p - 1 - r), total);
    std::vector<int> next_forward(v, 0), next_backward(v, 0);
    std::deque<Action> pending;  // I's whose W has not run, oldest first
    std::vector<Action>& out = ranks[r].actions;
    const auto forward = [&](int op) {
      const int chunk = (op / mpr) % v;
      out.push_back({ActionKind::Forward, chunk * p + r, next_forward[chunk]++, 0});
    };
    const auto weight = [&] {
      out.push_back({ActionKind::BackwardWeight, pending.front().stage, pending.front().micro_batch, 0});
      pending.pop_front();
    };
    const auto input = [&](int op) {
      const int chunk = v - 1 - ((op - warmup) / mpr) % v;
      out.push_back({ActionKind::BackwardInput, chunk * p + r, next_backward[chunk]++, 0});
      pending.push_back(out.back());
      if (op - warmup >= r) weight();
    };
    for (int op = 0; op < warmup; ++op) forward(op);
    for (int op = warmup; op < total; ++op) {
      forward(op);
      input(op);
    }
    for (int op = total; op < total + warmup; ++op) input(op);
    while (!pending.empty()) weight();
  }
  return ranks;
}

std::vector<Stream> zb_h1_orders(int p, int m) { return zb1p_orders(p, 1, m); }

std::vector<Stream> zb_h2_orders(int p, int m) {
  const int cap = 2 * p - 1;
  std::vector<Stream> ranks(p);
  for (int r = 0; r < p; ++r) {
    std::vector<Action>& out = ranks[r].actions;
    int f = 0, i = 0, w = 0;
    const auto push = [&](ActionKind kind, int& counter) { out.push_back({kind, r, counter++, 0}); };
    while (f < std::min(m, 2 * (p - 1 - r) + 1)) push(ActionKind::Forward, f);
    while (f < m) {
      push(ActionKind::BackwardInput, i);
      if (f - w >= cap) push(ActionKind::BackwardWeight, w);
      push(ActionKind::Forward, f);
    }
    while (i < m) {
      push(ActionKind::BackwardInput, i);
      push(ActionKind::BackwardWeight, w);
    }
    while (w < m) push(ActionKind::BackwardWeight, w);
  }
  return ranks;
}

std::vector<Stream> zb_v_orders(int p, int m) {
  const int n = std::max(2 * p - 1, m);
  std::vector<Stream> ranks(p);
  for (int r = 0; r < p; ++r) {
    const int stage[2] = {r, 2 * p - 1 - r};
    int f[2] = {0, 0}, i[2] = {0, 0}, w[2] = {0, 0};
    std::vector<Action>& out = ranks[r].actions;
    const auto push = [&](ActionKind kind, int chunk, int* counter) {
      const int mb = counter[chunk]++;
      if (mb < m) out.push_back({kind, stage[chunk], mb, 0});
    };
    const auto F = [&](int c) { push(ActionKind::Forward, c, f); };
    const auto I = [&](int c) { push(ActionKind::BackwardInput, c, i); };
    const auto W = [&](int c) { push(ActionKind::BackwardWeight, c, w); };
    for (int j = 0; j < 2 * (p - r) - 1; ++j) F(0);
    for (int j = 0; j < r; ++j) F(1), F(0);
    for (int j = 0; j < p - r; ++j) F(1), I(1), W(1);
    while (f[1] < f[0] || f[0] < n) {
      if (f[0] < n) F(0);
      I(0), W(0), F(1), I(1), W(1);
    }
    for (int j = 0; j < r; ++j) I(0), I(1);
    for (int j = 0; j < p - r; ++j) I(0), W(0);
    while (w[1] < n) W(1);
    while (w[0] < n) W(0);
  }
  return ranks;
}

}  // namespace pipegrid
