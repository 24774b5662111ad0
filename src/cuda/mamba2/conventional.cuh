// The conventional Mamba-2 decode step: read the state, update it, write it back, y = S·C + D·x.
// Bandwidth-bound from small batches on: a block owns rows [p0, p0 + rows_per_block) of one
// (row, head). Every state chunk of a thread is requested at once with 16-byte cp.async copies
// into the thread's own part of a shared-memory tile (one group per row, no registers held, no
// barrier); each row is updated and written back (streaming stores) as soon as it has landed,
// while the later rows are still in flight. Grid: x = head * nsplit + split, y = batch row.
#pragma once
#include <type_traits>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/sr_store.cuh"
#include "cuda/mamba2/layout.cuh"
#include "cuda/mamba2/params.h"
#include "cuda/mamba2/step_math.cuh"

namespace replayssm::cuda::mamba2 {

/// Raw dt of element idx: float32, or the input dtype.
template <class TIn>
__device__ __forceinline__ float load_dt(const StepParams& p, int64_t idx) {
  if constexpr (std::is_same_v<TIn, float>) {
    return static_cast<const float*>(p.dt)[idx];
  } else {
    return p.dt_f32 ? static_cast<const float*>(p.dt)[idx]
                    : to_f32(static_cast<const TIn*>(p.dt)[idx]);
  }
}

template <class TIn, class TState, int N, int RPT>
__global__ void __launch_bounds__(kMaxThreads) conventional_kernel(const StepParams p) {
  using Lay = Layout<sizeof(TState), N>;
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  const int split = blockIdx.x % p.nsplit;
  const int hd = blockIdx.x / p.nsplit;
  const int b = blockIdx.y;
  const int p0 = split * p.rows_per_block;
  const int nrows = min(p.rows_per_block, p.P - p0);
  const int lane = threadIdx.x & 31;
  const int lr = lane % LPR;
  const int grp = (threadIdx.x >> 5) * Lay::kRowsPerWarp + lane / LPR;  // first row of the thread
  const int pass = (blockDim.x >> 5) * Lay::kRowsPerWarp;               // rows per block pass
  const int64_t io = (static_cast<int64_t>(b) * p.H + hd) * p.P + p0;   // (b, hd, p0) in x, z, y
  TIn* y = static_cast<TIn*>(p.y) + io;

  const int slot = p.slot_ids[b];
  if (slot < 0 || slot >= p.slots) {  // pad row: nothing read or written but y = 0
    for (int r = threadIdx.x; r < nrows; r += blockDim.x) y[r] = from_f32<TIn>(0.0f);
    return;
  }
  const int g = hd / p.heads_per_group;
  TState* const slot_state = static_cast<TState*>(p.state) + static_cast<int64_t>(slot) * p.H * p.P * N;
  TState* S = slot_state + (static_cast<int64_t>(hd) * p.P + p0) * N;
  const SrSlot sr = sr_slot(p.sr, slot, slot_state);

  extern __shared__ __align__(16) float conv_smem[];
  TState* tile = reinterpret_cast<TState*>(conv_smem);  // [rows_per_block][N]
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = grp + i * pass;
    if (r < nrows) {
#pragma unroll
      for (int c = 0; c < Lay::kChunksPerLane; ++c)
        cp_async16(tile + r * N + Lay::col(c, lr),
                   S + static_cast<int64_t>(r) * N + Lay::col(c, lr));
    }
    cp_async_commit();  // group i: row i of this thread (possibly empty)
  }
  float bv[COLS], cv[COLS];
  const int64_t bc = (static_cast<int64_t>(b) * p.G + g) * N;
#pragma unroll
  for (int c = 0; c < Lay::kChunksPerLane; ++c) {
    load_vec<TIn, VEC>(static_cast<const TIn*>(p.B) + bc + Lay::col(c, lr), &bv[c * VEC]);
    load_vec<TIn, VEC>(static_cast<const TIn*>(p.C) + bc + Lay::col(c, lr), &cv[c * VEC]);
  }
  float xv[RPT], zv[RPT];
  const TIn* x = static_cast<const TIn*>(p.x) + io;
  const TIn* z = static_cast<const TIn*>(p.z) + io;
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = grp + i * pass;
    xv[i] = r < nrows ? to_f32(x[r]) : 0.0f;
    zv[i] = (p.has_z && r < nrows) ? to_f32(z[r]) : 0.0f;
  }
  const float A = A_of(p.A_log[hd]);
  const float delta =
      delta_of(load_dt<TIn>(p, static_cast<int64_t>(b) * p.H + hd), p.dt_bias[hd], p.softplus);
  const float a = decay_of(delta, A);
  const float Dh = p.has_D ? p.D[hd] : 0.0f;

#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = grp + i * pass;
    const bool valid = r < nrows;
    cp_async_wait_upto(RPT - 1 - i);  // groups 0..i have landed
    float s[COLS];
#pragma unroll
    for (int c = 0; c < Lay::kChunksPerLane; ++c)
      unpack16<TState>(valid ? *reinterpret_cast<const uint4*>(tile + r * N + Lay::col(c, lr))
                             : make_uint4(0, 0, 0, 0),
                       &s[c * VEC]);
    float part = 0.0f;
    if (valid) part = update_row<COLS>(s, a, __fmul_rn(delta, xv[i]), bv, cv);
    const float sum = row_sum<LPR>(part);
    if (valid) {
      if (lr == 0) y[r] = from_f32<TIn>(output_of(sum, Dh, p.has_D, xv[i], p.has_z, zv[i]));
#pragma unroll
      for (int c = 0; c < Lay::kChunksPerLane; ++c)
        store16_state(S + static_cast<int64_t>(r) * N + Lay::col(c, lr), &s[c * VEC], sr);
    }
  }
}

}  // namespace replayssm::cuda::mamba2
