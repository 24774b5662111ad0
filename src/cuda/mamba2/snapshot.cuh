// The baseline the peers ship for speculative decoding of Mamba-2 (vLLM / SGLang MTP, FlashInfer's
// selective_state_update with per-token state indices): T_b sequential conventional updates of
// one state, each token's state written out as its own snapshot, so that the next step starts
// from the snapshot of the last accepted token (rollback = pick a snapshot; the cost is T_b state
// writes per step). Row b reads state[slot_ids[b]] and writes token s's state to
// state[snap_dst[b, s]] (ids outside [0, slots) skip that write); y_s as the conventional step.
// Kept for side-by-side measurement (issue 5 benchmark) and tested against the oracle like any
// kernel. Per element it runs the conventional step's arithmetic (step_math.cuh) in order.
//
// A block owns one (head, batch row) and every headdim row of it: the rows are requested with
// cp.async; each row is updated T_b times in registers, its y summed by the lanes of the row and
// every snapshot row stored as soon as it is formed. Grid: x = head, y = batch row. Shared
// memory: the state tile [P][N], the tokens' x and z [K][P] each, their a and delta [K] each.
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/mamba2/conventional.cuh"
#include "cuda/mamba2/layout.cuh"
#include "cuda/mamba2/params.h"
#include "cuda/mamba2/step_math.cuh"

namespace replayssm::cuda::mamba2 {

constexpr int kSnapshotThreads = 256;

/// Floats of the snapshot kernel's shared memory (see the file comment).
__host__ __device__ inline int snapshot_smem_floats(int P, int N, int K) {
  return P * N + 2 * ((K * P + 3) / 4 * 4) + 2 * K;
}

template <class TIn, int N, int K>
__global__ void __launch_bounds__(kSnapshotThreads) snapshot_kernel(const StepParams p) {
  using Lay = Layout<4, N>;
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  constexpr int CPL = Lay::kChunksPerLane, RPW = Lay::kRowsPerWarp;
  extern __shared__ __align__(16) float smem[];
  const int P = p.P, Ty = p.Ty;
  const int kp = (K * P + 3) / 4 * 4;
  float* const tile = smem;           // [P][N]
  float* const sx = smem + P * N;     // [K][P]
  float* const sz = sx + kp;          // [K][P]
  float* const sa = sz + kp;          // [K] one-step decays
  float* const sdl = sa + K;          // [K] deltas

  const int hd = blockIdx.x, b = blockIdx.y, g = hd / p.heads_per_group;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int lr = lane % LPR;
  TIn* const y = static_cast<TIn*>(p.y);
  auto tok = [&](int s) { return (static_cast<int64_t>(b) * Ty + s) * p.H + hd; };  // (b, s, hd)

  const int slot = p.slot_ids[b];
  if (slot < 0 || slot >= p.slots) {  // pad row
    for (int i = tid; i < Ty * P; i += blockDim.x) y[tok(i / P) * P + i % P] = from_f32<TIn>(0.0f);
    return;
  }
  const float* const S = static_cast<const float*>(p.state) + (static_cast<int64_t>(slot) * p.H + hd) * P * N;
  const int row0 = warp * RPW + lane / LPR, rstep = (blockDim.x >> 5) * RPW;
  for (int r = row0; r < P; r += rstep)
#pragma unroll
    for (int c = 0; c < CPL; ++c)
      cp_async16(tile + r * N + Lay::col(c, lr), S + static_cast<int64_t>(r) * N + Lay::col(c, lr));
  cp_async_commit();

  const int Tb = p.num_tokens ? min(max(p.num_tokens[b], 1), Ty) : Ty;
  const float A = A_of(p.A_log[hd]);
  if (tid < Tb) {
    const float d = delta_of(load_dt<TIn>(p, tok(tid)), p.dt_bias[hd], p.softplus);
    sdl[tid] = d;
    sa[tid] = decay_of(d, A);
  }
  for (int i = tid; i < Tb * P; i += blockDim.x) {
    sx[i] = to_f32(static_cast<const TIn*>(p.x)[tok(i / P) * P + i % P]);
    sz[i] = p.has_z ? to_f32(static_cast<const TIn*>(p.z)[tok(i / P) * P + i % P]) : 0.0f;
  }
  float bv[K][COLS], cv[K][COLS];
#pragma unroll
  for (int s = 0; s < K; ++s)
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
      const int64_t bc = ((static_cast<int64_t>(b) * Ty + min(s, Tb - 1)) * p.G + g) * N + Lay::col(c, lr);
      load_vec<TIn, VEC>(static_cast<const TIn*>(p.B) + bc, &bv[s][c * VEC]);
      load_vec<TIn, VEC>(static_cast<const TIn*>(p.C) + bc, &cv[s][c * VEC]);
    }
  const float Dh = p.has_D ? p.D[hd] : 0.0f;
  __syncthreads();
  cp_async_wait<0>();

  float* const states = static_cast<float*>(p.state);
  const int nrounds = (P + rstep - 1) / rstep;  // uniform: every lane reaches the shuffles
  for (int k = 0; k < nrounds; ++k) {
    const int r = row0 + k * rstep;
    const bool valid = r < P;
    float s[COLS];
#pragma unroll
    for (int c = 0; c < CPL; ++c)
      unpack16<float>(valid ? *reinterpret_cast<const uint4*>(tile + r * N + Lay::col(c, lr))
                            : make_uint4(0, 0, 0, 0),
                      &s[c * VEC]);
#pragma unroll
    for (int t = 0; t < K; ++t) {
      if (t >= Tb) break;  // uniform over the block
      const float xv = valid ? sx[t * P + r] : 0.0f;
      float part = 0.0f;
      if (valid) part = update_row<COLS>(s, sa[t], __fmul_rn(sdl[t], xv), bv[t], cv[t]);
      const float sum = row_sum<LPR>(part);
      if (valid) {
        if (lr == 0) y[tok(t) * P + r] = from_f32<TIn>(output_of(sum, Dh, p.has_D, xv, p.has_z, sz[t * P + r]));
        const int dst = p.snap_dst[static_cast<int64_t>(b) * Ty + t];
        if (dst >= 0 && dst < p.slots) {
          float* D = states + ((static_cast<int64_t>(dst) * p.H + hd) * P + r) * N;
#pragma unroll
          for (int c = 0; c < CPL; ++c) store16_stream(D + Lay::col(c, lr), &s[c * VEC]);
        }
      }
    }
    if (valid && lr == 0)
      for (int t = Tb; t < Ty; ++t) y[tok(t) * P + r] = from_f32<TIn>(0.0f);
  }
}

}  // namespace replayssm::cuda::mamba2
