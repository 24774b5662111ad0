// The conventional GDN/KDA decode step: read the state, update it, write it back, y = S q^.
// Bandwidth-bound from small batches on. A block owns rows [r0, r0 + rows_per_block) of the V x K
// state of one (batch row, value head). Every state chunk of a thread (up to kMaxRowsPerThread
// rows) is requested at once with 16-byte cp.async copies into the thread's own part of a
// shared-memory tile (one copy group per row, no registers held, no barrier); the token is
// prepared while they fly, and each row is updated and streamed back as soon as its group has
// landed. Grid: x = value head * nsplit + split, y = batch row.
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/gdn/params.h"
#include "cuda/gdn/step_math.cuh"

namespace replayssm::cuda::gdn {

/// Block coordinates shared by the kernels.
struct BlockRows {
  int split, vh, b, r0, nrows, lane, lr, grp, pass;
  template <class Lay>
  __device__ __forceinline__ static BlockRows of(const StepParams& p) {
    BlockRows x;
    x.split = blockIdx.x % p.nsplit;
    x.vh = blockIdx.x / p.nsplit;
    x.b = blockIdx.y;
    x.r0 = x.split * p.rows_per_block;
    x.nrows = min(p.rows_per_block, p.V - x.r0);
    x.lane = threadIdx.x & 31;
    x.lr = x.lane % Lay::kLanesPerRow;
    x.grp = (threadIdx.x >> 5) * Lay::kRowsPerWarp + x.lane / Lay::kLanesPerRow;  // row group
    x.pass = (blockDim.x >> 5) * Lay::kRowsPerWarp;                                // groups
    return x;
  }
  /// Row i of this thread (valid when < nrows).
  __device__ __forceinline__ int row(int i) const { return grp + i * pass; }
};

/// Pad rows (ids outside [0, slots)): nothing read or written but y = 0.
template <class TIn>
__device__ __forceinline__ void zero_rows(TIn* y, int nrows) {
  for (int r = threadIdx.x; r < nrows; r += blockDim.x) y[r] = from_f32<TIn>(0.0f);
}

/// Requests this thread's rows of a head's state (rows_per_thread of them) into the tile, one
/// cp.async group per row; always commits kMaxRowsPerThread groups (the unused ones empty) so
/// that row i has landed after cp_async_wait_upto(kMaxRowsPerThread - 1 - i).
template <class TState, class Lay>
__device__ __forceinline__ void request_rows(TState* tile, const TState* S, const BlockRows& x,
                                             int rpt) {
  constexpr int K = Lay::kChunks * Lay::kVec;
#pragma unroll
  for (int i = 0; i < kMaxRowsPerThread; ++i) {
    const int r = x.row(i);
    if (i < rpt && r < x.nrows) {
#pragma unroll
      for (int c = 0; c < Lay::kChunksPerLane; ++c)
        cp_async16(tile + r * K + Lay::col(c, x.lr),
                   S + static_cast<int64_t>(r) * K + Lay::col(c, x.lr));
    }
    cp_async_commit();
  }
}

/// v of this thread's rows (0 past the block).
template <class TIn>
__device__ __forceinline__ void load_v(const StepParams& p, const BlockRows& x, float* vv) {
  const TIn* v = static_cast<const TIn*>(p.v) + (static_cast<int64_t>(x.b) * p.HV + x.vh) * p.V +
                 x.r0;
#pragma unroll
  for (int i = 0; i < kMaxRowsPerThread; ++i) {
    const int r = x.row(i);
    vv[i] = (i < p.rows_per_thread && r < x.nrows) ? to_f32(v[r]) : 0.0f;
  }
}

template <class TIn, class TState, int K, bool KDA>
__global__ void __launch_bounds__(kMaxThreads) conventional_kernel(const StepParams p) {
  using Lay = Layout<sizeof(TState), K>;
  using Tok = Token<TIn, sizeof(TState), K, KDA>;
  const BlockRows x = BlockRows::of<Lay>(p);
  TIn* y = static_cast<TIn*>(p.y) + (static_cast<int64_t>(x.b) * p.HV + x.vh) * p.V + x.r0;
  const int slot = p.slot_ids[x.b];
  if (slot < 0 || slot >= p.slots) return zero_rows(y, x.nrows);
  TState* S = static_cast<TState*>(p.state) +
              ((static_cast<int64_t>(slot) * p.HV + x.vh) * p.V + x.r0) * K;
  extern __shared__ __align__(16) float conv_smem[];
  TState* tile = reinterpret_cast<TState*>(conv_smem);  // [rows_per_block][K]
  request_rows<TState, Lay>(tile, S, x, p.rows_per_thread);
  Tok t;
  t.load(p, x.b, x.vh, x.lr);
  float vv[kMaxRowsPerThread];
  load_v<TIn>(p, x, vv);
#pragma unroll
  for (int i = 0; i < kMaxRowsPerThread; ++i) {
    if (i >= p.rows_per_thread) break;  // uniform over the block
    const int r = x.row(i);
    const bool valid = r < x.nrows;
    cp_async_wait_upto(kMaxRowsPerThread - 1 - i);  // groups 0..i have landed
    float s[Tok::COLS];
    tile_row<TState, Lay>(tile, r, x.lr, valid, s);
    const float2 yu = delta_rule_row(s, t, vv[i]);
    if (valid) {
      if (x.lr == 0) y[r] = from_f32<TIn>(yu.x);
      store_row<TState, Lay>(S + static_cast<int64_t>(r) * K, x.lr, s);
    }
  }
}

}  // namespace replayssm::cuda::gdn
