// The ReplaySSM flush in a launch of its own (the dispatcher's choice on the output-only route):
// the ordinary launch (the group kernel with only = 1) leaves flush rows, this kernel serves
// only them and leaves every other row (pad rows included) to that launch. A flush row folds its
// h ring records and then the token into the checkpoint and writes it once:
//   S_h = ā_h·S0 + Σ_{j<h} c_j·x_j·B_jᵀ (records in order), then the conventional update with
//   the token through the same inline functions as the conventional kernel; y from the new state.
// Every rounding is the group kernel's fold in the same order, so the checkpoints and outputs are
// bit-identical to it (and to the conventional step at h = 0).
//
// Why a kernel of its own: inside the group kernel a flush row folds with the ordinary rows'
// register budget (64 per thread: the fold spills), after the block's chain barrier and through
// two checkpoint stages; there a flush cost 2.3x a conventional step at Nano-4B batch 256
// (bench/NOTES.md, "Mamba-2 flush kernel"). Here an item is rows [p0, p0 + rows_per_block) of
// one head of one flush row, shaped like the conventional kernel: every checkpoint chunk of a
// thread is requested straight into registers before anything else, the ring rows are copied
// meanwhile (16-byte cp.async, all in flight), then converted once into B_j [h][N] and c_j·x_j[r]
// as [rows][xs] (a thread reads two or four records of a row with one load), and the fold is a
// register-tiled rank-h update.
// Grid: persistent, x only (flush_kernel below); shared memory FlushSmem.
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/flush_rows.cuh"
#include "cuda/common/ring_window.cuh"
#include "cuda/mamba2/conventional.cuh"
#include "cuda/mamba2/launch.h"
#include "cuda/mamba2/replay.cuh"

namespace replayssm::cuda::mamba2 {

/// One flush item: rows [p0, p0 + nrows) of head hd of batch row b (a flush row of `slot`).
template <class TIn, class TState, class TRing, int N, int RPT>
__device__ __forceinline__ void flush_item(const StepParams& p, const FlushSmem& sm, float* smem,
                                           int b, int slot, int hd, int p0, int nrows) {
  using Lay = Layout<sizeof(TState), N>;
  using namespace replay_detail;
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  constexpr int CPL = Lay::kChunksPerLane;
  constexpr int RQ = RPT >= 8 ? 2 : 4;  // records per round: RPT * RQ c_j·x_j registers
  constexpr int VX = 16 / static_cast<int>(sizeof(TRing));  // ring elements per 16-byte copy
  const int tid = threadIdx.x, lane = tid & 31;
  const int lr = lane % LPR;
  const int grp = (tid >> 5) * Lay::kRowsPerWarp + lane / LPR;  // first row of the thread
  const int pass = (blockDim.x >> 5) * Lay::kRowsPerWarp;       // rows per block pass
  const int R = p.R;
  const RingWindow win = RingWindow::of(p.origin[slot], p.hist[slot], R, 1);  // h <= R - 1
  const int hist = win.hist;
  auto phys = [&](int j) { return win.phys(j); };

  // The checkpoint rows of this thread, straight into registers (all requested before any use).
  const int64_t sh = static_cast<int64_t>(slot) * p.H + hd;
  TState* const S = static_cast<TState*>(p.state) + (sh * p.P + p0) * N;
  uint4 raw[RPT][CPL];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = grp + i * pass;
#pragma unroll
    for (int c = 0; c < CPL; ++c)
      raw[i][c] = r < nrows ? load16_raw_stream(S + static_cast<int64_t>(r) * N + Lay::col(c, lr))
                            : make_uint4(0, 0, 0, 0);
  }

  float* const sB = smem + sm.B;        // [R][N] ring B by logical record
  float* const scx = smem + sm.cx;      // [rows][xs] c_j·x_j by (row, logical record)
  float* const scoef = smem + sm.coef;  // [R] record weights c_j
  float* const sxt = smem + sm.xt;      // [rows] the token's x
  float* const sz = smem + sm.z;        // [rows] the token's z
  float* const shead = smem + sm.head;  // ā
  float* const sBt = smem + sm.Bt;      // [N] the token's B
  float* const sCt = smem + sm.Ct;      // [N] the token's C
  TRing* const rawB = reinterpret_cast<TRing*>(smem + sm.rawB);  // [R][N] ring B as stored
  TRing* const rawx = reinterpret_cast<TRing*>(smem + sm.rawx);  // [R][rows] ring x as stored

  // The ring rows as stored, 16-byte asynchronous copies all in flight at once: B_j of group g,
  // x_j of this head's rows (nrows is a multiple of 8: the group kernel's row unit).
  const int g = hd / p.heads_per_group;
  const TRing* const ringB =
      static_cast<const TRing*>(p.ring_B) + (static_cast<int64_t>(slot) * p.G + g) * R * N;
  const TRing* const ringx = static_cast<const TRing*>(p.ring_x) + sh * R * p.P + p0;
  const int cB = N / VX, cX = nrows / VX;
  for (int idx = tid; idx < hist * (cB + cX); idx += blockDim.x) {
    if (idx < hist * cB) {
      const int j = idx / cB, c = idx - j * cB;
      cp_async16(rawB + j * N + c * VX, ringB + static_cast<int64_t>(phys(j)) * N + c * VX);
    } else {
      const int k = idx - hist * cB, j = k / cX, c = k - j * cX;
      cp_async16(rawx + j * sm.rows + c * VX,
                 ringx + static_cast<int64_t>(phys(j)) * p.P + c * VX);
    }
  }
  cp_async_commit();

  // The head's parameters and the token (every thread: broadcast loads).
  const float A = A_of(p.A_log[hd]);
  const float delta =
      delta_of(load_dt<TIn>(p, static_cast<int64_t>(b) * p.H + hd), p.dt_bias[hd], p.softplus);
  const float Dh = p.has_D ? p.D[hd] : 0.0f;
  const int64_t bcoff = (static_cast<int64_t>(b) * p.G + g) * N;
  const int64_t io = (static_cast<int64_t>(b) * p.H + hd) * p.P + p0;  // (b, hd, p0) in x, z, y
  for (int e = tid; e < N; e += blockDim.x) {
    sBt[e] = to_f32(static_cast<const TIn*>(p.B)[bcoff + e]);
    sCt[e] = to_f32(static_cast<const TIn*>(p.C)[bcoff + e]);
  }
  for (int r = tid; r < nrows; r += blockDim.x) {
    sxt[r] = to_f32(static_cast<const TIn*>(p.x)[io + r]);
    sz[r] = p.has_z ? to_f32(static_cast<const TIn*>(p.z)[io + r]) : 0.0f;
  }
  if (tid < 32) {  // the record weights, as the group kernel's chain warp forms them
    const float* rdt = p.ring_dt + sh * R;
    const float d0 = lane < hist ? rdt[phys(lane)] : 0.0f;
    const float d1 = lane + 32 < hist ? rdt[phys(lane + 32)] : 0.0f;
    const float abar = record_weights(d0, d1, hist, A, scoef, lane);
    if (lane == 0) shead[0] = abar;
  }
  cp_async_wait<0>();
  __syncthreads();
  // To fp32: B_j, and c_j·x_j[r] transposed to [row][record] (the group kernel's rounding).
  for (int idx = tid; idx < hist * N; idx += blockDim.x) sB[idx] = to_f32(rawB[idx]);
  for (int idx = tid; idx < hist * nrows; idx += blockDim.x) {
    const int j = idx / nrows, r = idx - j * nrows;
    scx[r * sm.xs + j] = __fmul_rn(scoef[j], to_f32(rawx[j * sm.rows + r]));
  }
  __syncthreads();

  float s[RPT][COLS];
#pragma unroll
  for (int i = 0; i < RPT; ++i)
#pragma unroll
    for (int c = 0; c < CPL; ++c) unpack16<TState>(raw[i][c], &s[i][c * VEC]);
  if (hist > 0) {
    const float abar = shead[0];
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
      for (int e = 0; e < COLS; ++e) s[i][e] = __fmul_rn(abar, s[i][e]);
    // RQ records at a time: c_j·x_j of the thread's rows (one 8- or 16-byte load per row), then
    // per record its B_j columns and one FMA per state element, records in order.
#pragma unroll 1
    for (int j0 = 0; j0 < hist; j0 += RQ) {
      float cx[RPT][RQ];
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        const int r = min(grp + i * pass, nrows - 1);  // rows past nrows: any valid address
        const float* src = scx + r * sm.xs + j0;
        if constexpr (RQ == 4) {
          const float4 t = *reinterpret_cast<const float4*>(src);
          cx[i][0] = t.x, cx[i][1] = t.y, cx[i][2] = t.z, cx[i][3] = t.w;
        } else {
          const float2 t = *reinterpret_cast<const float2*>(src);
          cx[i][0] = t.x, cx[i][1] = t.y;
        }
      }
#pragma unroll
      for (int q = 0; q < RQ; ++q) {
        if (j0 + q >= hist) break;  // uniform
        float bq[COLS];
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
          for (int e = 0; e < VEC; e += 4) {
            const float4 t =
                *reinterpret_cast<const float4*>(sB + (j0 + q) * N + Lay::col(c, lr) + e);
            bq[c * VEC + e] = t.x, bq[c * VEC + e + 1] = t.y;
            bq[c * VEC + e + 2] = t.z, bq[c * VEC + e + 3] = t.w;
          }
#pragma unroll
        for (int i = 0; i < RPT; ++i)
#pragma unroll
          for (int e = 0; e < COLS; ++e) s[i][e] = __fmaf_rn(cx[i][q], bq[e], s[i][e]);
      }
    }
  }

  // The conventional update with the token, y, and the new checkpoint (and read copy) once.
  const float a = decay_of(delta, A);
  TIn* const y = static_cast<TIn*>(p.y) + io;
  float bv[COLS], cv[COLS];
#pragma unroll
  for (int c = 0; c < CPL; ++c)
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      bv[c * VEC + e] = sBt[Lay::col(c, lr) + e];
      cv[c * VEC + e] = sCt[Lay::col(c, lr) + e];
    }
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = grp + i * pass;
    const bool valid = r < nrows;
    const float xv = valid ? sxt[r] : 0.0f;
    float part = 0.0f;
    if (valid) part = update_row<COLS>(s[i], a, __fmul_rn(delta, xv), bv, cv);
    const float sum = row_sum<LPR>(part);
    if (!valid) continue;
    if (lr == 0) y[r] = from_f32<TIn>(output_of(sum, Dh, p.has_D, xv, p.has_z, sz[r]));
#pragma unroll
    for (int c = 0; c < CPL; ++c)
      store16_stream(S + static_cast<int64_t>(r) * N + Lay::col(c, lr), &s[i][c * VEC]);
    if (p.copy) {  // the read copy, rounded from the same new fp32 state
      const int64_t off = (sh * p.P + p0 + r) * N;
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        if (p.copy_f16)
          store_vec<f16, VEC>(static_cast<f16*>(p.copy) + off + Lay::col(c, lr), &s[i][c * VEC]);
        else
          store_vec<bf16, VEC>(static_cast<bf16*>(p.copy) + off + Lay::col(c, lr), &s[i][c * VEC]);
      }
    }
  }
}

/// A persistent grid (a few blocks per SM) over the flush rows' items (flush row, head, split):
/// common/flush_rows.cuh.
template <class TIn, class TState, class TRing, int N, int RPT>
__global__ void __launch_bounds__(kFlushThreads, 3) flush_kernel(const StepParams p) {
  extern __shared__ __align__(16) float smem[];
  const FlushSmem sm(p.R, N, p.rows_per_block, static_cast<int>(sizeof(TRing)));
  auto item = [&](int b, int slot, int rest) {
    const int hd = rest / p.nsplit, p0 = (rest - hd * p.nsplit) * p.rows_per_block;
    flush_item<TIn, TState, TRing, N, RPT>(p, sm, smem, b, slot, hd, p0,
                                           min(p.rows_per_block, p.P - p0));
  };
  for_each_flush_item(p.slot_ids, p.is_flush, p.slots, p.batch, p.H * p.nsplit,
                      reinterpret_cast<int*>(smem + sm.list),
                      reinterpret_cast<int*>(smem + sm.warps), item);
}

}  // namespace replayssm::cuda::mamba2
