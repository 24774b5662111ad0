// The baseline the peers ship for speculative decoding of GDN/KDA (vLLM / SGLang MTP with the FLA
// fused_recurrent kernels and per-token state indices): T_b sequential conventional delta-rule
// steps of one state, each token's state written out as its own snapshot; the next step starts
// from the snapshot of the last accepted token. Row b reads state[slot_ids[b]] and writes token
// s's state to state[snap_dst[b, s]] (ids outside [0, slots) skip that write); y_s as the
// conventional step, whose per-row arithmetic it runs (Token, delta_rule_row of step_math.cuh).
// Kept for side-by-side measurement (issue 5) and tested against the oracle.
//
// A block owns one (value head, batch row) and every V row: the rows land in a shared-memory tile
// by cp.async; then token by token (tokens outer: one token's k^, q^, gates in registers), every
// row is updated in the tile and streamed out as that token's snapshot. Grid: x = value head,
// y = batch row. Shared memory: the tile [V][K].
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/gdn/params.h"
#include "cuda/gdn/step_math.cuh"

namespace replayssm::cuda::gdn {

constexpr int kSnapshotThreads = 256;

template <class TIn, int K, bool KDA>
__global__ void __launch_bounds__(kSnapshotThreads) snapshot_kernel(const StepParams p) {
  using Lay = Layout<4, K>;
  using Tok = Token<TIn, 4, K, KDA>;
  constexpr int LPR = Lay::kLanesPerRow, CPL = Lay::kChunksPerLane, VEC = Lay::kVec;
  constexpr int COLS = Lay::kCols, RPW = Lay::kRowsPerWarp;
  extern __shared__ __align__(16) float smem[];
  const int V = p.V, Ty = p.Ty, vh = blockIdx.x, b = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, lr = lane % LPR;
  TIn* const y = static_cast<TIn*>(p.y);
  auto y_at = [&](int s, int i) { return ((static_cast<int64_t>(b) * Ty + s) * p.HV + vh) * V + i; };
  const int slot = p.slot_ids[b];
  if (slot < 0 || slot >= p.slots) {  // pad row
    for (int i = tid; i < Ty * V; i += blockDim.x) y[y_at(i / V, i % V)] = from_f32<TIn>(0.0f);
    return;
  }
  float* const states = static_cast<float*>(p.state);
  const float* const S = states + (static_cast<int64_t>(slot) * p.HV + vh) * V * K;
  const int row0 = warp * RPW + lane / LPR, rstep = (blockDim.x >> 5) * RPW;
  for (int r = row0; r < V; r += rstep)
#pragma unroll
    for (int c = 0; c < CPL; ++c)
      cp_async16(smem + r * K + Lay::col(c, lr), S + static_cast<int64_t>(r) * K + Lay::col(c, lr));
  cp_async_commit();
  const int Tb = p.num_tokens ? min(max(p.num_tokens[b], 1), Ty) : Ty;
  cp_async_wait<0>();  // every thread reads only the rows it copied
  const int nrounds = (V + rstep - 1) / rstep;  // uniform: every lane reaches the row sums
  for (int t = 0; t < Tb; ++t) {
    Tok tok;
    tok.load(p, b * Ty + t, vh, lr);  // the [batch, T, ...] inputs seen as [batch * T, ...]
    const int dst = p.snap_dst[static_cast<int64_t>(b) * Ty + t];
    float* const D = dst >= 0 && dst < p.slots ? states + (static_cast<int64_t>(dst) * p.HV + vh) * V * K
                                                : nullptr;
    for (int k = 0; k < nrounds; ++k) {
      const int r = row0 + k * rstep;
      const bool valid = r < V;
      float s[COLS];
      tile_row<float, Lay>(smem, r, lr, valid, s);
      const float v = valid ? to_f32(static_cast<const TIn*>(p.v)[y_at(t, r)]) : 0.0f;
      const float2 yu = delta_rule_row(s, tok, v);
      if (!valid) continue;
      if (lr == 0) y[y_at(t, r)] = from_f32<TIn>(yu.x);
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        float* dst_s = smem + r * K + Lay::col(c, lr);
#pragma unroll
        for (int e = 0; e < VEC; e += 4)
          *reinterpret_cast<float4*>(dst_s + e) =
              make_float4(s[c * VEC + e], s[c * VEC + e + 1], s[c * VEC + e + 2], s[c * VEC + e + 3]);
      }
      if (D) store_row<float, Lay>(D + static_cast<int64_t>(r) * K, lr, s);
    }
  }
  for (int i = tid; i < (Ty - Tb) * V; i += blockDim.x) y[y_at(Tb + i / V, i % V)] = from_f32<TIn>(0.0f);
}

}  // namespace replayssm::cuda::gdn
