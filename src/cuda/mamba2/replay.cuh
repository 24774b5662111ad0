// The ReplaySSM decode step (ring mode kDecode). One kernel serves every mix of rows: each row's
// cursor (origin, h, is_flush) is read on the device.
//
//   ordinary row, output-only route:  y = ā·(S0·C) + Σ_{j≤h} s_j·(B_j·C)·x_j + D·x;
//   ordinary row, state-and-output route, and every flush row: the state before the token,
//       S_h = ā_h·S0 + Σ_{j<h} c_j·x_j·B_jᵀ, is materialised in registers, then the conventional
//       update with the current token runs through the same inline functions as the conventional
//       kernel (bit-identical at h = 0); a flush writes the result as the new checkpoint.
//   Ordinary rows append the token's record (x, delta, B) at logical position h; flush rows write
//   nothing to the ring (the token is folded). Cursors are only read (commit moves them).
//
// Shaped like the conventional kernel so that the checkpoint streams: a block owns rows
// [p0, p0 + rows_per_block) of one head for one batch row, in three phases:
//   1. needs the slot only: every checkpoint chunk of the thread is requested with cp.async (one
//      group per row, into the thread's own part of the tile); then the cursor, the head's
//      parameters and the token, as raw loads.
//   2. needs the cursor: ring B chunks (B_j·C reduced by the lanes a record's chunks landed on),
//      ring x of the block's rows, and one warp's record weights, all into shared memory by
//      logical record index; one __syncthreads. With prefetch_ring (latency-bound batches) every
//      physical ring row is requested before the cursor is used.
//   3. ordinary rows are processed as each row's copy group lands; fold rows wait for the tile and
//      fold with the records outer and the thread's rows inner (B_j read once per row group).
// Grid: x = head * nsplit + split, y = batch row. Shared memory: ReplaySmem.
#pragma once
#include <type_traits>

#include "cuda/common/async_copy.cuh"
#include "cuda/mamba2/conventional.cuh"
#include "cuda/mamba2/launch.h"

namespace replayssm::cuda::mamba2 {

namespace replay_detail {

constexpr unsigned kFull = 0xffffffffu;

/// Inclusive suffix sum over the 32 lanes of a warp (x_lane + x_lane+1 + ... + x_31).
__device__ __forceinline__ float suffix_sum(float v, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float t = __shfl_down_sync(kFull, v, off);
    if (lane + off < 32) v = __fadd_rn(v, t);
  }
  return v;
}

/// One warp: the weights of n <= 64 records whose deltas are d0 (record lane) and d1 (record
/// lane + 32), zero past n:
///   c_j = d_j · exp(A · Σ_{j<i<n} d_i) for j < n (c0 = c_lane, c1 = c_{lane+32}, zero past n);
///   returns ā = exp(A · Σ_{i<n} d_i).
/// Suffix sums (not differences of prefix sums) keep every exponent argument exact up to the
/// rounding of the sum itself; arguments are clamped to <= 0.
__device__ __forceinline__ float record_weights_lanes(float d0, float d1, int n, float A, int lane,
                                                      float& c0, float& c1) {
  const float s1 = suffix_sum(d1, lane);
  const float t1 = __shfl_sync(kFull, s1, 0);  // total of records 32..63
  const float s0 = __fadd_rn(suffix_sum(d0, lane), t1);
  float e0 = __shfl_down_sync(kFull, s0, 1);  // exclusive suffix sums
  float e1 = __shfl_down_sync(kFull, s1, 1);
  if (lane == 31) {
    e0 = t1;
    e1 = 0.0f;
  }
  c0 = lane < n ? __fmul_rn(d0, expf(fminf(__fmul_rn(A, e0), 0.0f))) : 0.0f;
  c1 = lane + 32 < n ? __fmul_rn(d1, expf(fminf(__fmul_rn(A, e1), 0.0f))) : 0.0f;
  return expf(fminf(__fmul_rn(A, __shfl_sync(kFull, s0, 0)), 0.0f));
}

/// record_weights_lanes for n <= 32 (d1 = 0) with half the shuffles: the same c0 and ā bits (the
/// suffix sums differ from d1 = 0's at most in the sign of a zero sum, which exp maps to 1).
__device__ __forceinline__ float record_weights_lanes32(float d0, int n, float A, int lane,
                                                        float& c0) {
  const float s0 = suffix_sum(d0, lane);
  float e0 = __shfl_down_sync(kFull, s0, 1);  // exclusive suffix sums
  if (lane == 31) e0 = 0.0f;
  c0 = lane < n ? __fmul_rn(d0, expf(fminf(__fmul_rn(A, e0), 0.0f))) : 0.0f;
  return expf(fminf(__fmul_rn(A, __shfl_sync(kFull, s0, 0)), 0.0f));
}

/// record_weights_lanes with the weights written to coef[0 .. n).
__device__ __forceinline__ float record_weights(float d0, float d1, int n, float A, float* coef,
                                                int lane) {
  float c0, c1;
  const float abar = record_weights_lanes(d0, d1, n, A, lane, c0, c1);
  if (lane < n) coef[lane] = c0;
  if (lane + 32 < n) coef[lane + 32] = c1;
  return abar;
}

/// V elements of T as loaded by vector loads of up to 16 bytes, kept packed until to() converts
/// them: a conversion right after the load would make the warp wait for it there.
template <class T, int V>
struct Loaded {
  static constexpr int kPer = 16 / static_cast<int>(sizeof(T)) < V ? 16 / sizeof(T) : V;
  using Raw = typename detail::Raw<kPer* static_cast<int>(sizeof(T))>::type;
  detail::Pack<T, kPer> part[V / kPer];
  __device__ __forceinline__ void load(const T* p) {
#pragma unroll
    for (int i = 0; i < V / kPer; ++i) part[i].raw = *reinterpret_cast<const Raw*>(p + i * kPer);
  }
  __device__ __forceinline__ void to(float* out) const {
#pragma unroll
    for (int i = 0; i < V / kPer; ++i)
#pragma unroll
      for (int e = 0; e < kPer; ++e) out[i * kPer + e] = to_f32(part[i].e[e]);
  }
};

}  // namespace replay_detail

template <class TIn, class TState, class TRing, int N, int RPT>
__global__ void __launch_bounds__(kReplayThreads, 2) replay_kernel(const StepParams p) {
  using Lay = Layout<sizeof(TState), N>;
  using namespace replay_detail;
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  constexpr int CPL = Lay::kChunksPerLane;
  constexpr int VB = 16 / static_cast<int>(sizeof(TRing));  // ring elements per 16-byte chunk
  constexpr int CPR = N / VB;    // 16-byte chunks per ring-B row: a record on CPR adjacent lanes
  constexpr int KB = 2;          // ring-B chunks per thread in flight
  constexpr int KX = 4;          // ring-x elements per thread in flight
  constexpr int FR = 16 / COLS;  // rows folded at once: 16 state registers
  static_assert(32 % CPR == 0 && RPT % FR == 0 && VEC % 4 == 0 && VB % 4 == 0, "layout");

  extern __shared__ __align__(16) float smem[];
  const int R = p.R, rpb = p.rows_per_block;
  const ReplaySmem sm(R, N, rpb, static_cast<int>(sizeof(TState)));
  TState* const tile = reinterpret_cast<TState*>(smem);  // [rows][N]
  float* const sB = smem + sm.B;                         // [R][N] by logical record
  float* const sx = smem + sm.x;                         // [rows][xs] by logical record
  float* const scoef = smem + sm.coef;                   // [cs] record weights
  float* const sbc = smem + sm.bc;                       // [cs] B_j·C
  float* const shead = smem + sm.head;                   // A, delta, D, ā of the head
  float* const sxt = smem + sm.xt;                       // [rows] the token's x
  float* const sz = smem + sm.z;                         // [rows] the token's z

  const int split = blockIdx.x % p.nsplit;
  const int hd = blockIdx.x / p.nsplit;
  const int g = hd / p.heads_per_group;
  const int b = blockIdx.y;
  const int p0 = split * rpb;
  const int nrows = min(rpb, p.P - p0);
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int lr = lane % LPR;
  const int grp = warp * Lay::kRowsPerWarp + lane / LPR;               // first row of the thread
  const int pass = (nthreads >> 5) * Lay::kRowsPerWarp;                // rows per block pass
  const int64_t io = (static_cast<int64_t>(b) * p.H + hd) * p.P + p0;  // (b, head, p0)

  const int slot = p.slot_ids[b];
  if (slot < 0 || slot >= p.slots) {  // pad row: nothing read or written but y = 0
    for (int r = tid; r < nrows; r += nthreads) static_cast<TIn*>(p.y)[io + r] = from_f32<TIn>(0);
    return;
  }
  const int64_t sh = static_cast<int64_t>(slot) * p.H + hd;  // (slot, head)
  TState* const S0 = static_cast<TState*>(p.state) + (sh * p.P + p0) * N;

  // ---- phase 1: the checkpoint copies first; then the cursor, the head's parameters and the
  // token, all as raw loads (a conversion right after a load would make the warp wait there).
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = grp + i * pass;
    if (r < nrows) {
#pragma unroll
      for (int c = 0; c < CPL; ++c)
        cp_async16(tile + r * N + Lay::col(c, lr),
                   S0 + static_cast<int64_t>(r) * N + Lay::col(c, lr));
    }
    cp_async_commit();  // group i: row i of this thread (possibly empty)
  }
  const int origin_raw = p.origin[slot];
  const int hist_raw = p.hist[slot];
  const int flush_raw = p.is_flush[slot];
  const float A_log = p.A_log[hd], dt_bias = p.dt_bias[hd], Dh = p.has_D ? p.D[hd] : 0.0f;
  const float dt = load_dt<TIn>(p, static_cast<int64_t>(b) * p.H + hd);
  const int64_t bcoff = (static_cast<int64_t>(b) * p.G + g) * N;
  const TIn* const Bin = static_cast<const TIn*>(p.B) + bcoff;
  const TIn* const Cin = static_cast<const TIn*>(p.C) + bcoff;
  Loaded<TIn, VEC> braw[CPL], craw[CPL];  // the token's B and C, this lane's columns
#pragma unroll
  for (int c = 0; c < CPL; ++c) {
    braw[c].load(Bin + Lay::col(c, lr));
    craw[c].load(Cin + Lay::col(c, lr));
  }
  // The token's x and z of row tid (a block has at most one row per thread), staged next to
  // the ring just before the barrier.
  TIn xt_raw = from_f32<TIn>(0.0f), zt_raw = xt_raw;
  if (tid < nrows) {
    xt_raw = static_cast<const TIn*>(p.x)[io + tid];
    if (p.has_z) zt_raw = static_cast<const TIn*>(p.z)[io + tid];
  }

  // The cursor, clamped so that even a corrupt cursor cannot address outside the slot's ring.
  // resolve() is where a warp first waits for it: with prefetch_ring, after the ring loads.
  int origin = 0, hist = 0;
  auto resolve = [&] {
    origin = origin_raw % R;
    if (origin < 0) origin += R;
    hist = min(max(hist_raw, 0), R - 1);
  };
  auto phys = [&](int j) {
    const int q = origin + j;
    return q >= R ? q - R : q;
  };

  // ---- phase 2: the ring into shared memory by logical record, and the record weights. ALL
  // (prefetch_ring) loads every physical row, the first round before the cursor is needed.
  auto stage = [&](auto all_tag) {
    constexpr bool ALL = decltype(all_tag)::value;
    if constexpr (!ALL) resolve();
    auto logical = [&](int q) {  // ALL: physical row -> logical record
      const int j = q - origin;
      return j < 0 ? j + R : j;
    };
    const float* rdt = p.ring_dt + sh * R;
    // Warp 0: the ring deltas of records lane and lane + 32 (ALL: of physical rows lane, lane + 32)
    float dt0 = 0.0f, dt1 = 0.0f;
    if (warp == 0) {
      if (ALL ? lane < R : lane < hist) dt0 = rdt[ALL ? lane : phys(lane)];
      if (ALL ? lane + 32 < R : lane + 32 < hist) dt1 = rdt[ALL ? lane + 32 : phys(lane + 32)];
    }
    // Ring B of the group, B_j·C summed by the CPR lanes of record j's chunks; ring x of the
    // block's rows: element (record, r) -> sx[r * xs + logical record].
    const int cB = tid % CPR;
    Loaded<TIn, VB> cwraw;  // the token's C over this thread's chunk of B
    cwraw.load(Cin + cB * VB);
    const TRing* ringB =
        static_cast<const TRing*>(p.ring_B) + (static_cast<int64_t>(slot) * p.G + g) * R * N;
    const TRing* ringx = static_cast<const TRing*>(p.ring_x) + sh * R * p.P + p0;
    const int nB = ALL ? R : hist;
    const int nX = (ALL ? R : hist) * nrows;
    const int per_round = nthreads / CPR;
#pragma unroll 1
    for (int bb = 0, bx = 0; bb < nB || bx < nX; bb += per_round * KB, bx += nthreads * KX) {
      uint4 rawB[KB];
#pragma unroll
      for (int u = 0; u < KB; ++u) {
        const int rec = bb + u * per_round + tid / CPR;
        rawB[u] = make_uint4(0, 0, 0, 0);
        if (rec < nB)
          rawB[u] = *reinterpret_cast<const uint4*>(
              ringB + static_cast<int64_t>(ALL ? rec : phys(rec)) * N + cB * VB);
      }
      TRing rawX[KX];
#pragma unroll
      for (int u = 0; u < KX; ++u) {
        const int idx = bx + u * nthreads + tid;
        const int rec = idx / nrows, r = idx - rec * nrows;
        if (idx < nX) rawX[u] = ringx[static_cast<int64_t>(ALL ? rec : phys(rec)) * p.P + r];
      }
      if constexpr (ALL) resolve();  // the loads above are in flight
      if (bb < nB) {                 // uniform: every lane reaches the shuffles
        float cw[VB];
        cwraw.to(cw);
#pragma unroll
        for (int u = 0; u < KB; ++u) {
          const int rec = bb + u * per_round + tid / CPR;
          float e[VB];
          unpack16<TRing>(rawB[u], e);
          float part = 0.0f;
#pragma unroll
          for (int v = 0; v < VB; ++v) part = __fmaf_rn(e[v], cw[v], part);
          const float bc = row_sum<CPR>(part);
          const int j = ALL ? logical(rec) : rec;
          if (rec < nB && j < hist) {
            float* dst = sB + j * N + cB * VB;
#pragma unroll
            for (int v = 0; v < VB; v += 4)
              *reinterpret_cast<float4*>(dst + v) = make_float4(e[v], e[v + 1], e[v + 2], e[v + 3]);
            if (cB == 0) sbc[j] = bc;
          }
        }
      }
#pragma unroll
      for (int u = 0; u < KX; ++u) {  // (indices recomputed: fewer registers held)
        const int idx = bx + u * nthreads + tid;
        const int rec = idx / nrows, r = idx - rec * nrows;
        const int j = ALL ? logical(rec) : rec;
        if (idx < nX && j < hist) sx[r * sm.xs + j] = to_f32(rawX[u]);
      }
    }
    if constexpr (ALL) resolve();  // (no ring rows to load)
    if (warp == 0) {  // record weights: the history, and for output-only rows the token
      const float A = A_of(A_log), delta = delta_of(dt, dt_bias, p.softplus);
      const int j0 = lane, j1 = lane + 32;
      float d0, d1;
      if constexpr (ALL) {  // logical record j sits in lane phys(j) (mod 32) of dt0 / dt1
        const int q0 = phys(min(j0, R - 1)), q1 = phys(min(j1, R - 1));
        const float a0 = __shfl_sync(kFull, dt0, q0 & 31), b0 = __shfl_sync(kFull, dt1, q0 & 31);
        const float a1 = __shfl_sync(kFull, dt0, q1 & 31), b1 = __shfl_sync(kFull, dt1, q1 & 31);
        d0 = q0 < 32 ? a0 : b0;
        d1 = q1 < 32 ? a1 : b1;
      } else {
        d0 = dt0;
        d1 = dt1;
      }
      const int n = flush_raw != 0 || p.state_route ? hist : hist + 1;
      if (j0 >= hist) d0 = j0 < n ? delta : 0.0f;
      if (j1 >= hist) d1 = j1 < n ? delta : 0.0f;
      const float abar = record_weights(d0, d1, n, A, scoef, lane);
      if (lane == 0) {
        shead[0] = A;
        shead[1] = delta;
        shead[2] = Dh;
        shead[3] = abar;
      }
    }
  };
  if (p.prefetch_ring)
    stage(std::true_type{});
  else
    stage(std::false_type{});
  if (tid < nrows) {
    sxt[tid] = to_f32(xt_raw);
    sz[tid] = to_f32(zt_raw);
  }
  const bool flush = flush_raw != 0;
  const bool fold = flush || p.state_route;  // materialise the state for this row
  float bv[COLS], cv[COLS];
#pragma unroll
  for (int c = 0; c < CPL; ++c) braw[c].to(&bv[c * VEC]), craw[c].to(&cv[c * VEC]);
  if (tid >= nthreads - 32) {  // B·C of the token (record h), by the last warp
    float part = 0.0f;
#pragma unroll
    for (int v = 0; v < COLS; ++v) part = __fmaf_rn(bv[v], cv[v], part);
    const float sum = row_sum<LPR>(part);
    if (tid == nthreads - 32) sbc[hist] = sum;
  }
  __syncthreads();

  // ---- phase 3
  const int qh = phys(hist);  // physical row of the token's record (ordinary rows append there)
  TIn* const y = static_cast<TIn*>(p.y) + io;
  TRing* const rx = static_cast<TRing*>(p.ring_x) + (sh * R + qh) * p.P + p0;
  if (!fold) {
    const float abar = shead[3];
    const float wh = __fmul_rn(scoef[hist], sbc[hist]);  // the token's weight
#pragma unroll 1
    for (int i = 0; i < RPT; ++i) {
      const int r = grp + i * pass;
      cp_async_wait_upto(RPT - 1 - i);  // groups 0..i have landed
      float part = 0.0f;
      if (r < nrows) {
        float s[COLS];
#pragma unroll
        for (int c = 0; c < CPL; ++c)
          unpack16<TState>(*reinterpret_cast<const uint4*>(tile + r * N + Lay::col(c, lr)),
                           &s[c * VEC]);
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < COLS; ++e) d = __fmaf_rn(s[e], cv[e], d);
        part = __fmul_rn(abar, d);
        const float* xr = sx + r * sm.xs;
#pragma unroll 1
        for (int j = lr; j < hist; j += LPR)
          part = __fmaf_rn(__fmul_rn(scoef[j], sbc[j]), xr[j], part);
        if (lr == 0) part = __fmaf_rn(wh, sxt[r], part);
      }
      const float sum = row_sum<LPR>(part);
      if (r < nrows && lr == 0) {
        const float xv = sxt[r];
        y[r] = from_f32<TIn>(output_of(sum, shead[2], p.has_D, xv, p.has_z, sz[r]));
        rx[r] = from_f32<TRing>(xv);
      }
    }
  } else {
    cp_async_wait<0>();
    const float A = shead[0], delta = shead[1], abar = shead[3];
    const float a = decay_of(delta, A);
#pragma unroll 1
    for (int i0 = 0; i0 < RPT; i0 += FR) {
      float s[FR][COLS];
#pragma unroll
      for (int f = 0; f < FR; ++f) {
        const int r = grp + (i0 + f) * pass;
#pragma unroll
        for (int c = 0; c < CPL; ++c)
          unpack16<TState>(r < nrows
                               ? *reinterpret_cast<const uint4*>(tile + r * N + Lay::col(c, lr))
                               : make_uint4(0, 0, 0, 0),
                           &s[f][c * VEC]);
      }
      if (hist > 0) {
        // S_h = ā_h·S0 + Σ_{j<h} c_j·x_j·B_jᵀ, records in order, four at a time.
#pragma unroll
        for (int f = 0; f < FR; ++f)
#pragma unroll
          for (int e = 0; e < COLS; ++e) s[f][e] = __fmul_rn(abar, s[f][e]);
        int j = 0;
#pragma unroll 1
        for (; j + 4 <= hist; j += 4) {
          const float4 cq = *reinterpret_cast<const float4*>(scoef + j);
          float cx[FR][4];
#pragma unroll
          for (int f = 0; f < FR; ++f) {
            const int r = grp + (i0 + f) * pass;
            const float4 xq = r < nrows ? *reinterpret_cast<const float4*>(sx + r * sm.xs + j)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            cx[f][0] = __fmul_rn(cq.x, xq.x);
            cx[f][1] = __fmul_rn(cq.y, xq.y);
            cx[f][2] = __fmul_rn(cq.z, xq.z);
            cx[f][3] = __fmul_rn(cq.w, xq.w);
          }
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) {
            float bq[COLS];
            const float* Bj = sB + (j + jj) * N;
#pragma unroll
            for (int c = 0; c < CPL; ++c)
#pragma unroll
              for (int e = 0; e < VEC; e += 4) {
                const float4 t = *reinterpret_cast<const float4*>(Bj + Lay::col(c, lr) + e);
                bq[c * VEC + e] = t.x, bq[c * VEC + e + 1] = t.y;
                bq[c * VEC + e + 2] = t.z, bq[c * VEC + e + 3] = t.w;
              }
#pragma unroll
            for (int f = 0; f < FR; ++f)
#pragma unroll
              for (int e = 0; e < COLS; ++e) s[f][e] = __fmaf_rn(cx[f][jj], bq[e], s[f][e]);
          }
        }
#pragma unroll 1
        for (; j < hist; ++j) {
          float bq[COLS];
          const float* Bj = sB + j * N;
#pragma unroll
          for (int c = 0; c < CPL; ++c)
#pragma unroll
            for (int e = 0; e < VEC; e += 4) {
              const float4 t = *reinterpret_cast<const float4*>(Bj + Lay::col(c, lr) + e);
              bq[c * VEC + e] = t.x, bq[c * VEC + e + 1] = t.y;
              bq[c * VEC + e + 2] = t.z, bq[c * VEC + e + 3] = t.w;
            }
#pragma unroll
          for (int f = 0; f < FR; ++f) {
            const int r = grp + (i0 + f) * pass;
            const float cx = r < nrows ? __fmul_rn(scoef[j], sx[r * sm.xs + j]) : 0.0f;
#pragma unroll
            for (int e = 0; e < COLS; ++e) s[f][e] = __fmaf_rn(cx, bq[e], s[f][e]);
          }
        }
      }
      // The conventional update with the token: the same code as the conventional kernel.
#pragma unroll
      for (int f = 0; f < FR; ++f) {
        const int r = grp + (i0 + f) * pass;
        const bool valid = r < nrows;
        const float xv = valid ? sxt[r] : 0.0f;
        float part = 0.0f;
        if (valid) part = update_row<COLS>(s[f], a, __fmul_rn(delta, xv), bv, cv);
        const float sum = row_sum<LPR>(part);
        if (valid) {
          if (lr == 0) {
            y[r] = from_f32<TIn>(output_of(sum, shead[2], p.has_D, xv, p.has_z, sz[r]));
            if (!flush) rx[r] = from_f32<TRing>(xv);
          }
          if (flush) {
            const SrSlot sr = sr_slot(p.sr, slot, static_cast<TState*>(p.state) +
                                                      static_cast<int64_t>(slot) * p.H * p.P * N);
#pragma unroll
            for (int c = 0; c < CPL; ++c)
              store16_state(S0 + static_cast<int64_t>(r) * N + Lay::col(c, lr), &s[f][c * VEC],
                            sr);
          }
        }
      }
    }
  }
  if (!flush) {  // the rest of the token's record: delta per head, B once per group
    if (split == 0 && tid == 0) p.ring_dt[sh * R + qh] = shead[1];
    if (hd % p.heads_per_group == 0 && split == 0) {
      TRing* rB =
          static_cast<TRing*>(p.ring_B) + ((static_cast<int64_t>(slot) * p.G + g) * R + qh) * N;
      for (int n = tid; n < N; n += nthreads) rB[n] = from_f32<TRing>(to_f32(Bin[n]));
    }
  }
}

}  // namespace replayssm::cuda::mamba2
