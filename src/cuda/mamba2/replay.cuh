// The ReplaySSM decode step (ring mode kDecode). One kernel serves every mix of rows: each row's
// cursor (origin, h, is_flush) is read on the device.
//
//   ordinary row, output-only route:  y = ā·(S0·C) + Σ_{j≤h} s_j·(B_j·C)·x_j + D·x, where
//       B_j·C is computed once per block and shared by the block's heads of the group;
//   ordinary row, state-and-output route, and every flush row: the state before the token,
//       S_h = ā_h·S0 + Σ_{j<h} c_j·x_j·B_jᵀ, is materialised in registers, then the conventional
//       update with the current token runs through the same inline functions as the conventional
//       kernel (bit-identical at h = 0); a flush writes the result as the new checkpoint.
//   Ordinary rows append the token's record (x, delta, B) at logical position h; flush rows write
//   nothing to the ring (the token is folded). Cursors are only read (commit moves them).
//
// Block: heads_per_block heads of group g (consecutive), rows [p0, p0 + rows_per_block) of each,
// one batch row. Grid: x = (g * nchunks + chunk) * nsplit + split, y = batch row.
// Shared memory (floats): sB [R][N] ring B of the group, sx [R][rows_per_block] ring x of the
// current head, sdt [R], scoef [R + 1], sbc [R + 1], sdecay [1] — all indexed by physical ring
// row (sB, sx, sdt) or logical record (scoef, sbc); replay_smem_floats() (launch.h) sizes it.
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/mamba2/conventional.cuh"
#include "cuda/mamba2/launch.h"

namespace replayssm::cuda::mamba2 {

namespace replay_detail {

/// Inclusive suffix sum over the 32 lanes of a warp (x_lane + x_lane+1 + ... + x_31).
__device__ __forceinline__ float suffix_sum(float v, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float t = __shfl_down_sync(0xffffffffu, v, off);
    if (lane + off < 32) v = __fadd_rn(v, t);
  }
  return v;
}

/// Warp 0: the weights of n <= 64 records with deltas d_j (records j < n_ring from the ring,
/// record n_ring = the current token when n = n_ring + 1):
///   coef[j] = d_j · exp(A · Σ_{j<i<n} d_i),   *decay = exp(A · Σ_{i<n} d_i).
/// Suffix sums (not differences of prefix sums) keep every exponent argument exact up to the
/// rounding of the sum itself; arguments are clamped to <= 0.
__device__ __forceinline__ void record_weights(const float* sdt, int origin, int R, int n_ring,
                                               int n, float delta_cur, float A, float* coef,
                                               float* decay, int lane) {
  auto delta_at = [&](int j) -> float {
    if (j < n_ring) {
      const int q = origin + j;
      return sdt[q >= R ? q - R : q];
    }
    return j < n ? delta_cur : 0.0f;
  };
  const int j0 = lane, j1 = lane + 32;
  const float d0 = delta_at(j0), d1 = delta_at(j1);
  const float s1 = suffix_sum(d1, lane);
  const float t1 = __shfl_sync(0xffffffffu, s1, 0);  // total of records 32..63
  const float s0 = __fadd_rn(suffix_sum(d0, lane), t1);
  float e0 = __shfl_down_sync(0xffffffffu, s0, 1);  // exclusive suffix sums
  float e1 = __shfl_down_sync(0xffffffffu, s1, 1);
  if (lane == 31) {
    e0 = t1;
    e1 = 0.0f;
  }
  if (j0 < n) coef[j0] = __fmul_rn(d0, expf(fminf(__fmul_rn(A, e0), 0.0f)));
  if (j1 < n) coef[j1] = __fmul_rn(d1, expf(fminf(__fmul_rn(A, e1), 0.0f)));
  if (lane == 0) *decay = expf(fminf(__fmul_rn(A, s0), 0.0f));
}

/// Copies ring rows into shared memory as float: every physical row (prefetch) or the live ones
/// (logical 0..hist-1). Row q of the source starts at src + q * src_row; row q of the copy at
/// dst + q * dst_row; `width` elements per row.
template <class T>
__device__ __forceinline__ void stage_rows(float* dst, int dst_row, const T* src, int64_t src_row,
                                           int width, int R, int origin, int hist, bool all,
                                           int tid, int nthreads) {
  const int nrec = all ? R : hist;
  const int total = nrec * width;
#pragma unroll 1
  for (int idx = tid; idx < total; idx += nthreads) {
    const int jj = idx / width;
    const int e = idx - jj * width;
    int q = all ? jj : origin + jj;
    if (q >= R) q -= R;
    dst[q * dst_row + e] = to_f32(src[q * src_row + e]);
  }
}

/// The same for rows of N elements that are 16-byte aligned and a multiple of 16 bytes long.
template <class T, int N>
__device__ __forceinline__ void stage_rows_vec(float* dst, const T* src, int R, int origin,
                                               int hist, bool all, int tid, int nthreads) {
  constexpr int kE = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte load
  constexpr int kPerRow = N / kE;
  const int total = (all ? R : hist) * kPerRow;
#pragma unroll 1
  for (int idx = tid; idx < total; idx += nthreads) {
    const int jj = idx / kPerRow;
    const int e = (idx - jj * kPerRow) * kE;
    int q = all ? jj : origin + jj;
    if (q >= R) q -= R;
    float v[kE];
    load_vec<T, kE>(src + static_cast<int64_t>(q) * N + e, v);
#pragma unroll
    for (int i = 0; i < kE; i += 4)
      *reinterpret_cast<float4*>(dst + q * N + e + i) =
          make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
  }
}

}  // namespace replay_detail

template <class TIn, class TState, class TRing, int N, int RPT>
__global__ void __launch_bounds__(kReplayThreads, sizeof(TState) == 4 ? 3 : 2)
    replay_kernel(const StepParams p) {
  using Lay = Layout<sizeof(TState), N>;
  using namespace replay_detail;
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  extern __shared__ __align__(16) float smem[];
  const int R = p.R, rpb = p.rows_per_block;
  // Checkpoint tiles of the block's rows, one per head in flight (two when the block has more
  // than one head: the next head's checkpoint streams in while this one is computed).
  TState* sS = reinterpret_cast<TState*>(smem);
  const int tile = rpb * N;  // elements of one checkpoint tile
  float* sB =
      smem + checkpoint_tile_floats(rpb, N, sizeof(TState)) * (p.heads_per_block > 1 ? 2 : 1);
  float* sx = sB + R * N;
  float* sdt = sx + R * rpb;
  float* scoef = sdt + R;
  float* sbc = scoef + R + 1;
  float* sdecay = sbc + R + 1;

  const int split = blockIdx.x % p.nsplit;
  const int rest = blockIdx.x / p.nsplit;
  const int chunk = rest % p.nchunks;
  const int g = rest / p.nchunks;
  const int b = blockIdx.y;
  const int hd0 = g * p.heads_per_group + chunk * p.heads_per_block;
  const int p0 = split * rpb;
  const int nrows = min(rpb, p.P - p0);
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int lr = lane % LPR;
  const int grp = warp * Lay::kRowsPerWarp + lane / LPR;  // first row (and row group) of the thread
  const int pass = (nthreads >> 5) * Lay::kRowsPerWarp;   // row groups per block

  const int slot = p.slot_ids[b];
  if (slot < 0 || slot >= p.slots) {  // pad row: nothing read or written but y = 0
    for (int k = 0; k < p.heads_per_block; ++k) {
      TIn* y = static_cast<TIn*>(p.y) + (static_cast<int64_t>(b) * p.H + hd0 + k) * p.P + p0;
      for (int r = tid; r < nrows; r += nthreads) y[r] = from_f32<TIn>(0.0f);
    }
    return;
  }
  // The cursor, loaded now and used only after the checkpoint loads are issued.
  const int origin_raw = p.origin[slot];
  const int hist_raw = p.hist[slot];
  const bool flush = p.is_flush[slot] != 0;
  const bool fold = flush || p.state_route;  // materialise the state for this row
  const int64_t bcoff = (static_cast<int64_t>(b) * p.G + g) * N;
  int origin = 0, hist = 0;
  auto phys = [&](int j) {
    const int q = origin + j;
    return q >= R ? q - R : q;
  };

  float bv[COLS], cv[COLS];  // the token's B and C (group g), this lane's columns
#pragma unroll
  for (int c = 0; c < Lay::kChunksPerLane; ++c) {
    load_vec<TIn, VEC>(static_cast<const TIn*>(p.B) + bcoff + Lay::col(c, lr), &bv[c * VEC]);
    load_vec<TIn, VEC>(static_cast<const TIn*>(p.C) + bcoff + Lay::col(c, lr), &cv[c * VEC]);
  }
  const TRing* ringB =
      static_cast<const TRing*>(p.ring_B) + (static_cast<int64_t>(slot) * p.G + g) * R * N;

#pragma unroll 1
  for (int k = 0; k < p.heads_per_block; ++k) {
    const int hd = hd0 + k;
    const int64_t io = (static_cast<int64_t>(b) * p.H + hd) * p.P + p0;
    const int64_t sh = static_cast<int64_t>(slot) * p.H + hd;  // (slot, head)
    // This thread's checkpoint chunks, copied asynchronously into its tile (head k was issued by
    // the previous iteration, or just below for k = 0); the next head's copies start now.
    TState* S0 = static_cast<TState*>(p.state) + (sh * p.P + p0) * N;
    auto issue = [&](int kk) {
      const TState* src = static_cast<const TState*>(p.state) +
                          ((static_cast<int64_t>(slot) * p.H + hd0 + kk) * p.P + p0) * N;
      TState* dst = sS + (kk & 1) * tile;
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        const int r = grp + i * pass;
        if (r < nrows) {
#pragma unroll
          for (int c = 0; c < Lay::kChunksPerLane; ++c)
            cp_async16(dst + r * N + Lay::col(c, lr),
                       src + static_cast<int64_t>(r) * N + Lay::col(c, lr));
        }
      }
      cp_async_commit();
    };
    if (k == 0) issue(0);
    if (k + 1 < p.heads_per_block)
      issue(k + 1);
    else
      cp_async_commit();  // an empty group keeps "all but the newest group" meaning head k
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
    const float Dh = p.has_D ? p.D[hd] : 0.0f;

    // Stage the ring records: B of the group once, x and delta of this head. Prefetch stages all
    // R rows without the cursor (one dependent round trip less); otherwise only the live ones.
    const TRing* ringx = static_cast<const TRing*>(p.ring_x) + sh * R * p.P + p0;
    const float* ringdt = p.ring_dt + sh * R;
    if (p.prefetch_ring) {
      if (k == 0) stage_rows_vec<TRing, N>(sB, ringB, R, 0, 0, true, tid, nthreads);
      stage_rows<TRing>(sx, rpb, ringx, p.P, nrows, R, 0, 0, true, tid, nthreads);
      stage_rows<float>(sdt, 1, ringdt, 1, 1, R, 0, 0, true, tid, nthreads);
    }
    // Cursor, clamped so that even a corrupt cursor cannot address outside the slot's ring.
    origin = origin_raw % R;
    if (origin < 0) origin += R;
    hist = min(max(hist_raw, 0), R - 1);
    if (!p.prefetch_ring) {
      if (k == 0) stage_rows_vec<TRing, N>(sB, ringB, R, origin, hist, false, tid, nthreads);
      stage_rows<TRing>(sx, rpb, ringx, p.P, nrows, R, origin, hist, false, tid, nthreads);
      stage_rows<float>(sdt, 1, ringdt, 1, 1, R, origin, hist, false, tid, nthreads);
    }
    const int qh = phys(hist);  // physical row of the token's record (ordinary rows append there)
    __syncthreads();

    if (fold) {
      if (warp == 0) record_weights(sdt, origin, R, hist, hist, delta, A, scoef, sdecay, lane);
    } else {
      if (k == 0) {
        // B_j·C for the records and the token, once per block (shared by its heads): one row
        // group per record, uniform trip count so that every lane reaches the shuffles.
#pragma unroll 1
        for (int base = 0; base <= hist; base += pass) {
          const int j = base + grp;
          float part = 0.0f;
          if (j < hist) {
            const float* Bj = sB + phys(j) * N;
#pragma unroll
            for (int c = 0; c < Lay::kChunksPerLane; ++c)
#pragma unroll
              for (int v = 0; v < VEC; ++v)
                part = __fmaf_rn(Bj[Lay::col(c, lr) + v], cv[c * VEC + v], part);
          } else if (j == hist) {
#pragma unroll
            for (int v = 0; v < COLS; ++v) part = __fmaf_rn(bv[v], cv[v], part);
          }
          const float sum = row_sum<LPR>(part);
          if (j <= hist && lr == 0) sbc[j] = sum;
        }
      }
      if (warp == 0) record_weights(sdt, origin, R, hist, hist + 1, delta, A, scoef, sdecay, lane);
    }
    __syncthreads();

    cp_async_wait<1>();  // this thread's chunks of head k have landed
    const TState* tileS = sS + (k & 1) * tile;
    const float abar = *sdecay;
    TIn* y = static_cast<TIn*>(p.y) + io;
    TRing* rx = static_cast<TRing*>(p.ring_x) + (sh * R + qh) * p.P + p0;
    const float a = decay_of(delta, A);
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const int r = grp + i * pass;
      const bool valid = r < nrows;
      float s[COLS];
#pragma unroll
      for (int c = 0; c < Lay::kChunksPerLane; ++c)
        unpack16<TState>(valid ? *reinterpret_cast<const uint4*>(tileS + r * N + Lay::col(c, lr))
                               : make_uint4(0, 0, 0, 0),
                         &s[c * VEC]);
      float part = 0.0f;
      if (valid) {
        if (fold) {
          if (hist > 0) {
            // S_h = ā_h·S0 + Σ_{j<h} c_j·x_j·B_jᵀ, this row's columns.
#pragma unroll
            for (int v = 0; v < COLS; ++v) s[v] = __fmul_rn(abar, s[v]);
#pragma unroll 1
            for (int j = 0; j < hist; ++j) {
              const int q = phys(j);
              const float cx = __fmul_rn(scoef[j], sx[q * rpb + r]);
              const float* Bj = sB + q * N;
#pragma unroll
              for (int c = 0; c < Lay::kChunksPerLane; ++c)
#pragma unroll
                for (int v = 0; v < VEC; v += 4) {
                  const float4 t = *reinterpret_cast<const float4*>(Bj + Lay::col(c, lr) + v);
                  float* sv = &s[c * VEC + v];
                  sv[0] = __fmaf_rn(cx, t.x, sv[0]);
                  sv[1] = __fmaf_rn(cx, t.y, sv[1]);
                  sv[2] = __fmaf_rn(cx, t.z, sv[2]);
                  sv[3] = __fmaf_rn(cx, t.w, sv[3]);
                }
            }
          }
          // The conventional update with the token: the same code as the conventional kernel.
          part = update_row<COLS>(s, a, __fmul_rn(delta, xv[i]), bv, cv);
        } else {
          float d = 0.0f;
#pragma unroll
          for (int v = 0; v < COLS; ++v) d = __fmaf_rn(s[v], cv[v], d);
          part = __fmul_rn(abar, d);
#pragma unroll 1
          for (int j = lr; j < hist; j += LPR)
            part = __fmaf_rn(__fmul_rn(scoef[j], sbc[j]), sx[phys(j) * rpb + r], part);
          if (lr == 0) part = __fmaf_rn(__fmul_rn(scoef[hist], sbc[hist]), xv[i], part);
        }
      }
      const float sum = row_sum<LPR>(part);
      if (valid) {
        if (lr == 0) {
          y[r] = from_f32<TIn>(output_of(sum, Dh, p.has_D, xv[i], p.has_z, zv[i]));
          if (!flush) rx[r] = from_f32<TRing>(xv[i]);
        }
        if (flush) {
#pragma unroll
          for (int c = 0; c < Lay::kChunksPerLane; ++c)
            store16_stream(S0 + static_cast<int64_t>(r) * N + Lay::col(c, lr), &s[c * VEC]);
        }
      }
    }
    if (!flush) {  // the rest of the token's record: delta per head, B once per group
      if (split == 0 && tid == 0) p.ring_dt[sh * R + qh] = delta;
      if (k == 0 && chunk == 0 && split == 0) {
        TRing* rB =
            static_cast<TRing*>(p.ring_B) + ((static_cast<int64_t>(slot) * p.G + g) * R + qh) * N;
        const TIn* Bin = static_cast<const TIn*>(p.B) + bcoff;
        for (int n = tid; n < N; n += nthreads) rB[n] = from_f32<TRing>(to_f32(Bin[n]));
      }
    }
    if (k + 1 < p.heads_per_block) __syncthreads();  // before the next head restages sx, sdt
  }
}

}  // namespace replayssm::cuda::mamba2
