// The fp64 oracle started from what a CUDA Mamba-2 pool stored (tests only): one slot's
// sequence from a pool snapshot, the magnitude problem (absolute values) that scales a step's
// rounding bound, and that bound's k per head (test_mamba2_cuda_verify.cpp derives it).
#pragma once
#ifdef RSSM_WITH_CUDA
#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "replayssm_ref.h"

namespace replayssm::testing::cuda_test {

/// One slot's oracle sequence from a pool snapshot (what the GPU stored).
inline ref::Mamba2Seq seq_of(const DevPool& pool, const DevPool::Snapshot& snap, int32_t slot) {
  const m2::Shape& s = pool.s;
  ref::Mamba2Seq q;
  auto get = [&](int i, DType t, int64_t off) { return decode(t, snap[i].data(), off); };
  q.S0.resize(s.H * s.P * s.N);
  for (int64_t i = 0; i < s.H * s.P * s.N; ++i) q.S0[i] = get(0, DType::kF32, pool.state_at(slot) + i);
  q.ring.resize(pool.R);
  for (int64_t r = 0; r < pool.R; ++r) {
    ref::Mamba2Record& rec = q.ring[r];
    rec.x.resize(s.H * s.P), rec.delta.resize(s.H), rec.B.resize(s.G * s.N);
    for (int64_t h = 0; h < s.H; ++h) {
      rec.delta[h] = get(2, DType::kF32, pool.dt_at(slot, h, r));
      for (int64_t p = 0; p < s.P; ++p) rec.x[h * s.P + p] = get(1, pool.ring_t, pool.x_at(slot, h, r) + p);
    }
    for (int64_t g = 0; g < s.G; ++g)
      for (int64_t n = 0; n < s.N; ++n) rec.B[g * s.N + n] = get(3, pool.ring_t, pool.B_at(slot, g, r) + n);
  }
  q.cursor = pool.cursor(snap, slot);
  return q;
}

inline ref::Vec absv(const ref::Vec& v) {
  ref::Vec o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = std::abs(v[i]);
  return o;
}

/// The magnitude problem: every value replaced by its absolute value, no gate (applied after).
inline ref::Mamba2Seq abs_seq(ref::Mamba2Seq q) {
  q.S0 = absv(q.S0);
  for (ref::Mamba2Record& r : q.ring) r.x = absv(r.x), r.B = absv(r.B);
  return q;
}
inline ref::Mamba2Token abs_token(const ref::Mamba2Token& t) {
  ref::Mamba2Token a = t;
  a.x = absv(t.x), a.B = absv(t.B), a.C = absv(t.C), a.z.clear();
  return a;
}

/// k of the verify bound per head (test_mamba2_cuda_verify.cpp's comment), for the window of history deltas plus the tokens'.
inline ref::Vec k_of(const m2::Params& prm, const ref::Mamba2Seq& q,
                     const std::vector<ref::Mamba2Token>& toks, const RingConfig& cfg) {
  const m2::Shape& s = prm.shape;
  const int64_t m = q.cursor.h + static_cast<int64_t>(toks.size());
  ref::Vec k(s.H);
  for (int64_t h = 0; h < s.H; ++h) {
    double Pm = 0.0;
    for (int64_t l = 0; l < q.cursor.h; ++l) Pm += q.ring[ref::ring_row(q.cursor, l, cfg)].delta[h];
    for (const ref::Mamba2Token& t : toks) Pm += ref::mamba2_delta(prm.ref, t, h);
    k[h] = static_cast<double>(s.N + m + 32) + std::abs(prm.A(h)) * Pm * (2.0 * m + 11.0);
  }
  return k;
}

}  // namespace replayssm::testing::cuda_test
#endif  // RSSM_WITH_CUDA
