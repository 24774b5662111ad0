// The ReplaySSM speculative verify step of Mamba-2 (ring mode kSpeculative), in the chunk form of
// DESIGN.md §2 / method.md §4.3. Row b feeds T_b tokens (the last accepted token and T_b - 1
// drafts); their records are appended at logical positions h..h+T_b-1 and, over the window of
// m = h + T_b records (committed history, then the tokens), all T_b outputs come from the same
// checkpoint without writing state:
//   y_s = exp(A·P_{h+s})·(S0·C_s) + Σ_{l≤h+s} δ_l·exp(A·(P_{h+s} − P_l))·(B_l·C_s)·x_l + D·x_{h+s}
// (P = inclusive prefix sums of δ over the window; gated by silu(z_s) when z is given). On
// is_flush rows the committed history alone (l < h, never the drafts) is folded into S0 in the
// same launch, after the outputs have read the old S0:
//   S0 <- exp(A·P_{h-1})·S0 + Σ_{l<h} δ_l·exp(A·(P_{h-1} − P_l))·x_l·B_lᵀ.
// Cursors are only read (commit moves them on the device).
//
// A block owns one (head, batch row): every headdim row of the head. Phases:
//   1. the checkpoint rows are requested with cp.async; warp 0 loads the window's deltas (ring
//      for the history, softplus of the tokens' dt), appends the tokens' deltas and forms the
//      prefix sums; the other threads stage the window's B and x and the tokens' C and z in shared
//      memory and append the tokens' x and B (B by the group's first head) to the ring.
//   2. B_l·C_s for every record and token (the lanes of a row split N, a transposed reduction
//      hands token s's sum to lane group s), times the record weight; warp 0 the decays.
//   3. per headdim row: the K dots S0_r·C_s and the history sums in the same lane partials, one
//      transposed reduction for all K tokens; flush rows then fold and store the row.
// The token axis is padded to K (1, 2, 4 or 8, a compile-time constant); columns past T_b are
// written as 0. Grid: x = head, y = batch row. Shared memory: VerifySmem. fp32 checkpoints only.
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/mamba2/conventional.cuh"
#include "cuda/mamba2/layout.cuh"
#include "cuda/mamba2/params.h"
#include "cuda/mamba2/step_math.cuh"

namespace replayssm::cuda::mamba2 {

constexpr int kVerifyMaxThreads = 256;

/// Shared memory of the verify kernel in floats (every part 16-byte aligned): the checkpoint tile
/// [P][N], the window's B [R][N] by logical record, the tokens' C [K][N], x [P][xs] by (row,
/// logical record), the tokens' z [K][P], record weights x B·C [R][K], prefix sums and deltas
/// [R] each, decays [K], flush weights [R] and the flush decay.
struct VerifySmem {
  int xs = 0, zs = 0;  ///< row strides of x and z
  int B = 0, C = 0, x = 0, z = 0, coef = 0, cum = 0, delta = 0, decay = 0, wf = 0, total = 0;
  /// P: the block's headdim rows (rows_per_block).
  __host__ __device__ VerifySmem(int R, int N, int P, int K) {
    auto up4 = [](int v) { return (v + 3) / 4 * 4; };
    xs = R + 1;  // odd: the staging writes (record-major) fall on distinct banks
    zs = P;
    B = P * N;
    C = B + R * N;
    x = C + K * N;
    z = x + up4(P * xs);
    coef = z + up4(K * P);
    cum = coef + R * K;
    delta = cum + up4(R);
    decay = delta + up4(R);
    wf = decay + up4(K + 1);
    total = wf + up4(R);
  }
};

namespace verify_detail {

constexpr unsigned kFull = 0xffffffffu;

}  // namespace verify_detail

/// Eight consecutive elements of T loaded as raw 16-byte pieces (two for float32).
struct Raw8 {
  uint4 w[2];
  template <class T>
  __device__ __forceinline__ void load(const T* src) {
    w[0] = *reinterpret_cast<const uint4*>(src);
    if constexpr (sizeof(T) == 4) w[1] = *reinterpret_cast<const uint4*>(src + 4);
  }
  template <class T>
  __device__ __forceinline__ void to(float* out) const {
    if constexpr (sizeof(T) == 4) {
      unpack16<float>(w[0], out);
      unpack16<float>(w[1], out + 4);
    } else {
      unpack16<T>(w[0], out);
    }
  }
};

template <class T>
__device__ __forceinline__ void store8(T* dst, const float* v) {
  if constexpr (sizeof(T) == 4) {
    store_vec<T, 4>(dst, v);
    store_vec<T, 4>(dst + 4, v + 4);
  } else {
    store_vec<T, 8>(dst, v);
  }
}

/// Phase 1 of verify_kernel for threads t = 0..nt-1: the window's B [m][N] and x [P][xs] (history
/// from the ring, tokens from the inputs, which are also appended to the ring; B by the group's
/// first head only), the tokens' C [K][N] (zero past T_b) and z [K][P], all by items of 8
/// consecutive elements (16-byte loads; P and N multiples of 8). Every load of a round is issued
/// before the first one is used: the staging costs about one memory latency per round.
template <class TIn, class TRing, int N>
__device__ __forceinline__ void stage_window(const StepParams& p, const VerifySmem& sm, float* smem,
                                             int b, int hd, int g, int p0, int nrows, int hist,
                                             int Tb, int origin, bool owns_B, int t, int nt) {
  constexpr int U = 4;  // items per thread in flight
  const int R = p.R, P = p.P, Ty = p.Ty, m = hist + Tb;
  const int slot = p.slot_ids[b];
  const int64_t sh = static_cast<int64_t>(slot) * p.H + hd;
  TRing* const ringx = static_cast<TRing*>(p.ring_x) + sh * R * P;
  TRing* const ringB = static_cast<TRing*>(p.ring_B) + (static_cast<int64_t>(slot) * p.G + g) * R * N;
  auto phys = [&](int l) {
    const int q = origin + l;
    return q >= R ? q - R : q;
  };
  const int nr8 = nrows / 8;  // x and z items per record / token
  const int nB = m * (N / 8), nX = m * nr8, nC = Tb * (N / 8), nZ = p.has_z ? Tb * nr8 : 0;
  const int total = nB + nX + nC + nZ;
  for (int i0 = 0; i0 < total; i0 += U * nt) {
    Raw8 raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      int i = i0 + u * nt + t;
      if (i >= total) continue;
      if (i < nB) {  // B of record l
        const int l = i / (N / 8), n8 = (i % (N / 8)) * 8;
        if (l < hist)
          raw[u].load(ringB + static_cast<int64_t>(phys(l)) * N + n8);
        else
          raw[u].load(static_cast<const TIn*>(p.B) +
                      ((static_cast<int64_t>(b) * Ty + (l - hist)) * p.G + g) * N + n8);
      } else if ((i -= nB) < nX) {  // x of record l, block rows r8..r8+7
        const int l = i / nr8, r8 = (i % nr8) * 8;
        if (l < hist)
          raw[u].load(ringx + static_cast<int64_t>(phys(l)) * P + p0 + r8);
        else
          raw[u].load(static_cast<const TIn*>(p.x) +
                      ((static_cast<int64_t>(b) * Ty + (l - hist)) * p.H + hd) * P + p0 + r8);
      } else if ((i -= nX) < nC) {  // C of token s
        const int s = i / (N / 8), n8 = (i % (N / 8)) * 8;
        raw[u].load(static_cast<const TIn*>(p.C) +
                    ((static_cast<int64_t>(b) * Ty + s) * p.G + g) * N + n8);
      } else {  // z of token s
        i -= nC;
        const int s = i / nr8, r8 = (i % nr8) * 8;
        raw[u].load(static_cast<const TIn*>(p.z) +
                    ((static_cast<int64_t>(b) * Ty + s) * p.H + hd) * P + p0 + r8);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      int i = i0 + u * nt + t;
      if (i >= total) continue;
      float v[8];
      if (i < nB) {
        const int l = i / (N / 8), n8 = (i % (N / 8)) * 8;
        if (l < hist) {
          raw[u].to<TRing>(v);
        } else {
          raw[u].to<TIn>(v);
          if (owns_B) store8<TRing>(ringB + static_cast<int64_t>(phys(l)) * N + n8, v);
        }
        float* dst = smem + sm.B + l * N + n8;
        *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
        *reinterpret_cast<float4*>(dst + 4) = make_float4(v[4], v[5], v[6], v[7]);
      } else if ((i -= nB) < nX) {
        const int l = i / nr8, r8 = (i % nr8) * 8;
        if (l < hist) {
          raw[u].to<TRing>(v);
        } else {
          raw[u].to<TIn>(v);
          store8<TRing>(ringx + static_cast<int64_t>(phys(l)) * P + p0 + r8, v);
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) smem[sm.x + (r8 + e) * sm.xs + l] = v[e];
      } else if ((i -= nX) < nC) {
        const int s = i / (N / 8), n8 = (i % (N / 8)) * 8;
        raw[u].to<TIn>(v);
        float* dst = smem + sm.C + s * N + n8;
        *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
        *reinterpret_cast<float4*>(dst + 4) = make_float4(v[4], v[5], v[6], v[7]);
      } else {
        i -= nC;
        const int s = i / nr8, r8 = (i % nr8) * 8;
        raw[u].to<TIn>(v);
#pragma unroll
        for (int e = 0; e < 8; ++e) smem[sm.z + s * sm.zs + r8 + e] = v[e];
      }
    }
  }
  const int K = (sm.x - sm.C) / N;  // the padded token axis
  for (int i = t; i < (K - Tb) * N; i += nt) smem[sm.C + Tb * N + i] = 0.0f;
}


template <class TIn, class TRing, int N, int K>
__global__ void __launch_bounds__(kVerifyMaxThreads) verify_kernel(const StepParams p) {
  using Lay = Layout<4, N>;  // fp32 checkpoint
  using namespace verify_detail;
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  constexpr int CPL = Lay::kChunksPerLane, RPW = Lay::kRowsPerWarp;
  constexpr int SHIFT = LPR / K == 1 ? 0 : LPR / K == 2 ? 1 : LPR / K == 4 ? 2 : LPR / K == 8 ? 3
                        : LPR / K == 16 ? 4 : 5;  // lane -> token column of transposed_sum
  static_assert((LPR >> SHIFT) == K, "K must divide the lanes of a row");

  extern __shared__ __align__(16) float smem[];
  const int R = p.R, P = p.P;
  const VerifySmem sm(R, N, p.rows_per_block, K);
  float* const tile = smem;             // [P][N] checkpoint rows
  float* const sB = smem + sm.B;        // [R][N] window B by logical record
  float* const sC = smem + sm.C;        // [K][N] tokens' C
  float* const sx = smem + sm.x;        // [P][xs] window x by (row, logical record)
  float* const sz = smem + sm.z;        // [K][P] tokens' z
  float* const scoef = smem + sm.coef;  // [R][K] weight x B_l·C_s
  float* const scum = smem + sm.cum;    // [R] inclusive prefix sums of delta
  float* const sdelta = smem + sm.delta;
  float* const sdecay = smem + sm.decay;  // [K] exp(A P_{h+s}); [K] the flush decay
  float* const swf = smem + sm.wf;        // [R] flush weights

  const int split = blockIdx.x % p.nsplit, hd = blockIdx.x / p.nsplit, b = blockIdx.y;
  const int g = hd / p.heads_per_group;
  const int p0 = split * p.rows_per_block;         // the block's headdim rows p0 .. p0 + nrows
  const int nrows = min(p.rows_per_block, P - p0);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const int lr = lane % LPR;
  const int Ty = p.Ty;
  TIn* const y = static_cast<TIn*>(p.y);
  auto y_at = [&](int s, int r) {  // y [batch, Ty, H, P], block row r
    return ((static_cast<int64_t>(b) * Ty + s) * p.H + hd) * P + p0 + r;
  };

  const int slot = p.slot_ids[b];
  if (slot < 0 || slot >= p.slots) {  // pad row: nothing read or written but y = 0
    for (int i = tid; i < Ty * nrows; i += blockDim.x) y[y_at(i / nrows, i % nrows)] = from_f32<TIn>(0.0f);
    return;
  }
  const int64_t sh = static_cast<int64_t>(slot) * p.H + hd;  // (slot, head)
  float* const S0 = static_cast<float*>(p.state) + (sh * P + p0) * N;

  // ---- phase 1: checkpoint copies, then the cursor and the window.
  const int row0 = warp * RPW + lane / LPR, rstep = nwarps * RPW;  // this thread's rows
  for (int r = row0; r < nrows; r += rstep)
#pragma unroll
    for (int c = 0; c < CPL; ++c)
      cp_async16(tile + r * N + Lay::col(c, lr), S0 + static_cast<int64_t>(r) * N + Lay::col(c, lr));
  cp_async_commit();

  // The row's token count and cursor, clamped so that even corrupt values cannot address outside
  // the slot's ring (the host checks reject them where it may synchronise).
  const int Tb = p.num_tokens ? min(max(p.num_tokens[b], 1), Ty) : Ty;
  int origin = p.origin[slot] % R;
  if (origin < 0) origin += R;
  const int hist = min(max(p.hist[slot], 0), R - Tb);
  const bool flush = p.is_flush[slot] != 0;
  const int m = hist + Tb;
  auto phys = [&](int l) {
    const int q = origin + l;
    return q >= R ? q - R : q;
  };
  const float A = A_of(p.A_log[hd]);
  // The group's first head appends B, the first split of a head its deltas.
  const bool owns_B = hd % p.heads_per_group == 0 && split == 0;

  if (warp == 0) {  // deltas of records lane and lane + 32, appended for the tokens; prefix sums
    float* const rdt = p.ring_dt + sh * R;
    float d[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int l = lane + 32 * u;
      d[u] = 0.0f;
      if (l < hist) {
        d[u] = rdt[phys(l)];
      } else if (l < m) {
        const int64_t it = (static_cast<int64_t>(b) * Ty + (l - hist)) * p.H + hd;
        d[u] = delta_of(load_dt<TIn>(p, it), p.dt_bias[hd], p.softplus);
        if (split == 0) rdt[phys(l)] = d[u];
      }
    }
    const float c0 = warp_prefix_sum(d[0], lane);
    const float c1 = __fadd_rn(warp_prefix_sum(d[1], lane), __shfl_sync(kFull, c0, 31));
    if (lane < m) scum[lane] = c0, sdelta[lane] = d[0];
    if (lane + 32 < m) scum[lane + 32] = c1, sdelta[lane + 32] = d[1];
  } else {
    stage_window<TIn, TRing, N>(p, sm, smem, b, hd, g, p0, nrows, hist, Tb, origin, owns_B,
                                tid - 32, blockDim.x - 32);
  }
  __syncthreads();

  // ---- phase 2: record weights x B_l·C_s (warps 1..), decays and flush weights (warp 0).
  float cv[K][COLS];  // the tokens' C over this lane's columns (zero past T_b)
#pragma unroll
  for (int s = 0; s < K; ++s)
#pragma unroll
    for (int c = 0; c < CPL; ++c)
#pragma unroll
      for (int e = 0; e < VEC; e += 4) {
        const float4 t4 = *reinterpret_cast<const float4*>(sC + s * N + Lay::col(c, lr) + e);
        cv[s][c * VEC + e] = t4.x, cv[s][c * VEC + e + 1] = t4.y;
        cv[s][c * VEC + e + 2] = t4.z, cv[s][c * VEC + e + 3] = t4.w;
      }
  const int col = lr >> SHIFT;                 // the token column this lane ends up with
  const bool col_writer = (lr & ((1 << SHIFT) - 1)) == 0;
  if (warp == 0) {
    if (lane < K) sdecay[lane] = lane < Tb ? expf(fminf(__fmul_rn(A, scum[hist + lane]), 0.0f)) : 0.0f;
    if (flush && hist > 0) {
      const float Pf = scum[hist - 1];
      for (int l = lane; l < hist; l += 32)
        swf[l] = __fmul_rn(sdelta[l], expf(fminf(__fmul_rn(A, __fsub_rn(Pf, scum[l])), 0.0f)));
      if (lane == 0) sdecay[K] = expf(fminf(__fmul_rn(A, Pf), 0.0f));
    }
  } else {
    const int rec0 = (warp - 1) * RPW + lane / LPR, recstep = (nwarps - 1) * RPW;
    const int rounds = (m + recstep - 1) / recstep;  // uniform over the warp (shuffles)
    for (int k = 0; k < rounds; ++k) {
      const int l = rec0 + k * recstep;
      float part[K];
#pragma unroll
      for (int s = 0; s < K; ++s) part[s] = 0.0f;
      if (l < m) {
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
          for (int e = 0; e < VEC; e += 4) {
            const float4 b4 = *reinterpret_cast<const float4*>(sB + l * N + Lay::col(c, lr) + e);
            const float bq[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
            for (int s = 0; s < K; ++s)
#pragma unroll
              for (int q = 0; q < 4; ++q) part[s] = __fmaf_rn(bq[q], cv[s][c * VEC + e + q], part[s]);
          }
      }
      const float bc = transposed_sum<K, LPR>(part, lr);
      if (l < m && col_writer) {
        const int t = hist + col;  // token column col sees records l <= t
        float w = 0.0f;
        if (col < Tb && l <= t)
          w = __fmul_rn(__fmul_rn(sdelta[l], expf(fminf(__fmul_rn(A, __fsub_rn(scum[t], scum[l])), 0.0f))), bc);
        scoef[l * K + col] = w;
      }
    }
  }
  __syncthreads();

  // ---- phase 3: per headdim row, all K outputs; flush rows fold and store the row.
  cp_async_wait<0>();
  float dec[K];
#pragma unroll
  for (int s = 0; s < K; ++s) dec[s] = sdecay[s];
  const float Dh = p.has_D ? p.D[hd] : 0.0f;
  // At K = 8, two rows at a time (their loads, dots and butterflies are independent); at K <= 4
  // one (measured: two rows made T = 4 slower, 711 -> 787 µs, and T = 8 faster, 1282 -> 1133).
  constexpr int RI = K >= 8 ? 2 : 1;
  const int nrounds = (nrows + RI * rstep - 1) / (RI * rstep);  // uniform: shuffles
  for (int k = 0; k < nrounds; ++k) {
    int r[RI];
    bool valid[RI];
    float s0[RI][COLS], part[RI][K];
#pragma unroll
    for (int i = 0; i < RI; ++i) {
      r[i] = row0 + (k * RI + i) * rstep;
      valid[i] = r[i] < nrows;
#pragma unroll
      for (int c = 0; c < CPL; ++c)
#pragma unroll
        for (int e = 0; e < VEC; e += 4) {
          const float4 t4 = valid[i] ? *reinterpret_cast<const float4*>(tile + r[i] * N + Lay::col(c, lr) + e)
                                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          s0[i][c * VEC + e] = t4.x, s0[i][c * VEC + e + 1] = t4.y;
          s0[i][c * VEC + e + 2] = t4.z, s0[i][c * VEC + e + 3] = t4.w;
        }
#pragma unroll
      for (int s = 0; s < K; ++s) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < COLS; ++e) d = __fmaf_rn(s0[i][e], cv[s][e], d);
        part[i][s] = __fmul_rn(dec[s], d);
      }
    }
    for (int l = lr; l < m; l += LPR) {
      const float4* cq = reinterpret_cast<const float4*>(scoef + l * K);
      float cl[K];
#pragma unroll
      for (int s = 0; s < K; s += 4) {
        if constexpr (K >= 4) {
          const float4 c4 = cq[s / 4];
          cl[s] = c4.x, cl[s + 1] = c4.y, cl[s + 2] = c4.z, cl[s + 3] = c4.w;
        } else {
#pragma unroll
          for (int q = 0; q < K; ++q) cl[q] = scoef[l * K + q];
        }
      }
#pragma unroll
      for (int i = 0; i < RI; ++i) {
        const float xl = valid[i] ? sx[r[i] * sm.xs + l] : 0.0f;
#pragma unroll
        for (int s = 0; s < K; ++s) part[i][s] = __fmaf_rn(cl[s], xl, part[i][s]);
      }
    }
    float sum[RI];
#pragma unroll
    for (int i = 0; i < RI; ++i) sum[i] = transposed_sum<K, LPR>(part[i], lr);
#pragma unroll
    for (int i = 0; i < RI; ++i)
      if (valid[i] && col_writer && col < Ty) {
        float out = 0.0f;
        if (col < Tb)
          out = output_of(sum[i], Dh, p.has_D, sx[r[i] * sm.xs + hist + col], p.has_z,
                          p.has_z ? sz[col * sm.zs + r[i]] : 0.0f);
        y[y_at(col, r[i])] = from_f32<TIn>(out);
      }
    if (flush && hist > 0) {  // fold the committed history into the rows, store them
      const float af = sdecay[K];
#pragma unroll
      for (int i = 0; i < RI; ++i)
#pragma unroll
        for (int e = 0; e < COLS; ++e) s0[i][e] = __fmul_rn(af, s0[i][e]);
      for (int l = 0; l < hist; ++l) {
        float cx[RI];
#pragma unroll
        for (int i = 0; i < RI; ++i) cx[i] = valid[i] ? __fmul_rn(swf[l], sx[r[i] * sm.xs + l]) : 0.0f;
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
          for (int e = 0; e < VEC; e += 4) {
            const float4 b4 = *reinterpret_cast<const float4*>(sB + l * N + Lay::col(c, lr) + e);
#pragma unroll
            for (int i = 0; i < RI; ++i) {
              float* sv = &s0[i][c * VEC + e];
              sv[0] = __fmaf_rn(cx[i], b4.x, sv[0]), sv[1] = __fmaf_rn(cx[i], b4.y, sv[1]);
              sv[2] = __fmaf_rn(cx[i], b4.z, sv[2]), sv[3] = __fmaf_rn(cx[i], b4.w, sv[3]);
            }
          }
      }
#pragma unroll
      for (int i = 0; i < RI; ++i)
        if (valid[i])
#pragma unroll
          for (int c = 0; c < CPL; ++c)
            store16_stream(S0 + static_cast<int64_t>(r[i]) * N + Lay::col(c, lr), &s0[i][c * VEC]);
    }
  }
}

}  // namespace replayssm::cuda::mamba2
