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
#include "cuda/mamba2/conventional.cuh"
#include "cuda/mamba2/layout.cuh"
#include "cuda/mamba2/params.h"
#include "cuda/mamba2/step_math.cuh"

namespace replayssm::cuda::mamba2 {

constexpr int kVerifyThreads = 256;

/// Shared memory of the verify kernel in floats (every part 16-byte aligned): the checkpoint tile
/// [P][N], the window's B [R][N] by logical record, the tokens' C [K][N], x [P][xs] by (row,
/// logical record), the tokens' z [K][P], record weights x B·C [R][K], prefix sums and deltas
/// [R] each, decays [K], flush weights [R] and the flush decay.
struct VerifySmem {
  int xs = 0;
  int B = 0, C = 0, x = 0, z = 0, coef = 0, cum = 0, delta = 0, decay = 0, wf = 0, total = 0;
  __host__ __device__ VerifySmem(int R, int N, int P, int K) {
    auto up4 = [](int v) { return (v + 3) / 4 * 4; };
    xs = R + 1;  // odd: the staging writes (record-major) fall on distinct banks
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

/// Sums v[k] over an aligned group of LPR lanes for all K values at once (a transposed butterfly:
/// each step halves the values a lane holds and swaps the other half with its partner). Returns
/// the full sum of value column_of(lr) (= lr / (LPR / K)); every lane of that column's sub-group
/// holds the same bits. Every lane of the warp must call it.
template <int K, int LPR>
__device__ __forceinline__ float transposed_sum(float (&v)[K], int lr) {
  static_assert(K <= LPR, "at most one value per lane");
#pragma unroll
  for (int k = K, off = LPR / 2; k > 1; k >>= 1, off >>= 1) {
    const bool upper = (lr & off) != 0;
#pragma unroll
    for (int i = 0; i < k / 2; ++i) {
      const float send = upper ? v[i] : v[i + k / 2];
      const float keep = upper ? v[i + k / 2] : v[i];
      v[i] = __fadd_rn(keep, __shfl_xor_sync(kFull, send, off));
    }
  }
  float r = v[0];
#pragma unroll
  for (int off = LPR / (2 * K); off > 0; off >>= 1) r = __fadd_rn(r, __shfl_xor_sync(kFull, r, off));
  return r;
}

/// Inclusive prefix sum over the 32 lanes of a warp.
__device__ __forceinline__ float prefix_sum(float v, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float t = __shfl_up_sync(kFull, v, off);
    if (lane >= off) v = __fadd_rn(v, t);
  }
  return v;
}

}  // namespace verify_detail

template <class TIn, class TRing, int N, int K>
__global__ void __launch_bounds__(kVerifyThreads) verify_kernel(const StepParams p) {
  using Lay = Layout<4, N>;  // fp32 checkpoint
  using namespace verify_detail;
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  constexpr int CPL = Lay::kChunksPerLane, RPW = Lay::kRowsPerWarp;
  constexpr int SHIFT = LPR / K == 1 ? 0 : LPR / K == 2 ? 1 : LPR / K == 4 ? 2 : LPR / K == 8 ? 3
                        : LPR / K == 16 ? 4 : 5;  // lane -> token column of transposed_sum
  static_assert((LPR >> SHIFT) == K, "K must divide the lanes of a row");

  extern __shared__ __align__(16) float smem[];
  const int R = p.R, P = p.P;
  const VerifySmem sm(R, N, P, K);
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

  const int hd = blockIdx.x, b = blockIdx.y;
  const int g = hd / p.heads_per_group;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const int lr = lane % LPR;
  const int Ty = p.Ty;
  TIn* const y = static_cast<TIn*>(p.y);
  auto y_at = [&](int s, int r) {  // y [batch, Ty, H, P]
    return ((static_cast<int64_t>(b) * Ty + s) * p.H + hd) * P + r;
  };

  const int slot = p.slot_ids[b];
  if (slot < 0 || slot >= p.slots) {  // pad row: nothing read or written but y = 0
    for (int i = tid; i < Ty * P; i += blockDim.x) y[y_at(i / P, i % P)] = from_f32<TIn>(0.0f);
    return;
  }
  const int64_t sh = static_cast<int64_t>(slot) * p.H + hd;  // (slot, head)
  float* const S0 = static_cast<float*>(p.state) + sh * P * N;

  // ---- phase 1: checkpoint copies, then the cursor and the window.
  const int row0 = warp * RPW + lane / LPR, rstep = nwarps * RPW;  // this thread's rows
  for (int r = row0; r < P; r += rstep)
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
  const TIn* const xin = static_cast<const TIn*>(p.x);
  const TIn* const Bin = static_cast<const TIn*>(p.B);
  const TIn* const Cin = static_cast<const TIn*>(p.C);
  TRing* const ringx = static_cast<TRing*>(p.ring_x) + sh * R * P;
  TRing* const ringB = static_cast<TRing*>(p.ring_B) + (static_cast<int64_t>(slot) * p.G + g) * R * N;
  const bool owns_B = hd % p.heads_per_group == 0;  // the group's first head appends B

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
        rdt[phys(l)] = d[u];
      }
    }
    const float c0 = prefix_sum(d[0], lane);
    const float c1 = __fadd_rn(prefix_sum(d[1], lane), __shfl_sync(kFull, c0, 31));
    if (lane < m) scum[lane] = c0, sdelta[lane] = d[0];
    if (lane + 32 < m) scum[lane + 32] = c1, sdelta[lane + 32] = d[1];
  } else {
    const int t = tid - 32, nt = blockDim.x - 32;
    // B of the window by logical record (16-byte pieces); the tokens' B appended to the ring.
    constexpr int VB = 16 / static_cast<int>(sizeof(TRing));
    for (int i = t; i < m * (N / 4); i += nt) {
      const int l = i / (N / 4), n4 = (i % (N / 4)) * 4;
      float v[4];
      if (l < hist) {
        const TRing* src = ringB + static_cast<int64_t>(phys(l)) * N + n4;
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = to_f32(src[e]);
      } else {
        const int64_t it = ((static_cast<int64_t>(b) * Ty + (l - hist)) * p.G + g) * N + n4;
        load_vec<TIn, 4>(Bin + it, v);
        if (owns_B) {
          TRing* dst = ringB + static_cast<int64_t>(phys(l)) * N + n4;
#pragma unroll
          for (int e = 0; e < 4; ++e) dst[e] = from_f32<TRing>(v[e]);
        }
      }
      *reinterpret_cast<float4*>(sB + l * N + n4) = make_float4(v[0], v[1], v[2], v[3]);
    }
    static_assert(VB >= 4, "ring pieces");
    for (int i = t; i < Tb * (N / 4); i += nt) {  // the tokens' C
      const int s = i / (N / 4), n4 = (i % (N / 4)) * 4;
      float v[4];
      load_vec<TIn, 4>(Cin + ((static_cast<int64_t>(b) * Ty + s) * p.G + g) * N + n4, v);
      *reinterpret_cast<float4*>(sC + s * N + n4) = make_float4(v[0], v[1], v[2], v[3]);
    }
    for (int i = t; i < (K - Tb) * N; i += nt) sC[Tb * N + i] = 0.0f;
    // x of the window by (row, record), row fastest (coalesced); the tokens' x appended.
    for (int i = t; i < m * P; i += nt) {
      const int l = i / P, r = i % P;
      float v;
      if (l < hist) {
        v = to_f32(ringx[static_cast<int64_t>(phys(l)) * P + r]);
      } else {
        v = to_f32(xin[((static_cast<int64_t>(b) * Ty + (l - hist)) * p.H + hd) * P + r]);
        ringx[static_cast<int64_t>(phys(l)) * P + r] = from_f32<TRing>(v);
      }
      sx[r * sm.xs + l] = v;
    }
    if (p.has_z)
      for (int i = t; i < Tb * P; i += nt) {
        const int s = i / P, r = i % P;
        sz[s * P + r] = to_f32(static_cast<const TIn*>(p.z)[((static_cast<int64_t>(b) * Ty + s) * p.H + hd) * P + r]);
      }
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
  const int nrounds = (P + rstep - 1) / rstep;
  for (int k = 0; k < nrounds; ++k) {
    const int r = row0 + k * rstep;
    const bool valid = r < P;
    float s0[COLS];
#pragma unroll
    for (int c = 0; c < CPL; ++c)
#pragma unroll
      for (int e = 0; e < VEC; e += 4) {
        const float4 t4 = valid ? *reinterpret_cast<const float4*>(tile + r * N + Lay::col(c, lr) + e)
                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        s0[c * VEC + e] = t4.x, s0[c * VEC + e + 1] = t4.y;
        s0[c * VEC + e + 2] = t4.z, s0[c * VEC + e + 3] = t4.w;
      }
    float part[K];
#pragma unroll
    for (int s = 0; s < K; ++s) {
      float d = 0.0f;
#pragma unroll
      for (int e = 0; e < COLS; ++e) d = __fmaf_rn(s0[e], cv[s][e], d);
      part[s] = __fmul_rn(dec[s], d);
    }
    if (valid)
      for (int l = lr; l < m; l += LPR) {
        const float xl = sx[r * sm.xs + l];
#pragma unroll
        for (int s = 0; s < K; ++s) part[s] = __fmaf_rn(scoef[l * K + s], xl, part[s]);
      }
    const float sum = transposed_sum<K, LPR>(part, lr);
    if (valid && col_writer && col < Ty) {
      float out = 0.0f;
      if (col < Tb)
        out = output_of(sum, Dh, p.has_D, sx[r * sm.xs + hist + col], p.has_z,
                        p.has_z ? sz[col * P + r] : 0.0f);
      y[y_at(col, r)] = from_f32<TIn>(out);
    }
    if (flush && hist > 0 && valid) {  // fold the committed history into the row, store it
      const float af = sdecay[K];
#pragma unroll
      for (int e = 0; e < COLS; ++e) s0[e] = __fmul_rn(af, s0[e]);
      for (int l = 0; l < hist; ++l) {
        const float cx = __fmul_rn(swf[l], sx[r * sm.xs + l]);
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
          for (int e = 0; e < VEC; e += 4) {
            const float4 b4 = *reinterpret_cast<const float4*>(sB + l * N + Lay::col(c, lr) + e);
            float* sv = &s0[c * VEC + e];
            sv[0] = __fmaf_rn(cx, b4.x, sv[0]), sv[1] = __fmaf_rn(cx, b4.y, sv[1]);
            sv[2] = __fmaf_rn(cx, b4.z, sv[2]), sv[3] = __fmaf_rn(cx, b4.w, sv[3]);
          }
      }
#pragma unroll
      for (int c = 0; c < CPL; ++c)
        store16_stream(S0 + static_cast<int64_t>(r) * N + Lay::col(c, lr), &s0[c * VEC]);
    }
  }
}

}  // namespace replayssm::cuda::mamba2
