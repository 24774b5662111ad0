// The per-element arithmetic of a GDN/KDA decode step, shared by the conventional kernel and the
// replay kernel: the token's quantities as one lane holds them (its columns of k^ and q^, the
// gate, beta) and the delta-rule update of one state row. The replay flush's final update calls
// delta_rule_row() exactly as the conventional kernel does, which is what makes an L = 1 replay
// step (every step a flush with no history) bit-identical to the conventional step. Explicit
// round-to-nearest intrinsics pin every rounding, so no contraction choice of the compiler can
// differ between the call sites.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/dtypes.cuh"
#include "cuda/common/row_layout.cuh"
#include "cuda/common/sr_store.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/gdn/params.h"

namespace replayssm::cuda::gdn {

/// Lanes per state row: K = 128 fp32 rows are 32 chunks of 16 bytes, two per lane, 8 columns per
/// lane (registers stay ~64 per thread; a row's sums are 4-step butterflies over 16 lanes).
constexpr int kMaxLanes = 16;
/// Rows a thread owns (all requested at once: up to 8 x 16 bytes x chunks per lane in flight).
constexpr int kMaxRowsPerThread = 8;
constexpr int kMaxThreads = 256;

template <int StateBytes, int K>
using Layout = RowLayout<StateBytes, K, kMaxLanes>;

/// log(1 + e^x), x itself above 20 (the field's threshold).
__device__ __forceinline__ float softplus_of(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/// g = -exp(A_log) softplus(a + dt_bias) (<= 0), with Aexp = exp(A_log).
__device__ __forceinline__ float gate_of(float a, float dt_bias, float Aexp) {
  return __fmul_rn(-Aexp, softplus_of(__fadd_rn(a, dt_bias)));
}

/// beta = sigmoid(b) in float32; beta_bf16 rounds it to bfloat16 like the peers (method.md §3.1).
__device__ __forceinline__ float beta_of(float b, bool bf16_round) {
  const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-b)));
  return bf16_round ? __bfloat162float(__float2bfloat16_rn(s)) : s;
}

/// 1 / sqrt(sum of squares + 1e-6): the l2norm factor (eps inside the square root).
__device__ __forceinline__ float inv_norm(float sum_sq) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(sum_sq, 1e-6f)));
}

/// The token of one (batch row, value head) as the lane at position lr of its row group holds it:
/// its COLS columns of k^, q^ (scaled), alpha . k^ and, for KDA, of the gate; the head's beta.
/// Every lane of the warp must call prepare() / load() (lane-group sums); fetch() only loads.
template <class TIn, int StateBytes, int K, bool KDA>
struct Token {
  using Lay = Layout<StateBytes, K>;
  static constexpr int COLS = Lay::kCols, VEC = Lay::kVec, CPL = Lay::kChunksPerLane;
  static constexpr int LPR = Lay::kLanesPerRow;
  static constexpr int GW = KDA ? COLS : 1;  ///< gate entries held (per column for KDA)
  float khat[COLS], qhat[COLS], ak[COLS];    ///< k^, q^ . scale, alpha . k^
  float g[GW], alpha[GW];                    ///< log-decay and decay e^g
  float beta = 0.0f, kq = 0.0f;              ///< beta and k^ . q^ (summed over the row's lanes)

  /// The token's raw inputs for this lane (fetch), and what the step needs of them (prepare).
  /// fetch issues loads only, so a kernel can put them in flight before it waits on anything.
  struct Raw {
    float kr[COLS], qr[COLS];
    float ar[GW], dr[GW];  ///< gate input a and dt_bias (per column for KDA)
    float A_log, b;
  };

  __device__ __forceinline__ static Raw fetch(const StepParams& p, int b, int vh, int lr) {
    Raw r;
    const int kh = vh / p.group;
    const int64_t qk = (static_cast<int64_t>(b) * p.H + kh) * K;
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
      load_vec<TIn, VEC>(static_cast<const TIn*>(p.k) + qk + Lay::col(c, lr), &r.kr[c * VEC]);
      load_vec<TIn, VEC>(static_cast<const TIn*>(p.q) + qk + Lay::col(c, lr), &r.qr[c * VEC]);
    }
    const int64_t hv = static_cast<int64_t>(b) * p.HV + vh;  // (b, vh) in a and b
    if constexpr (KDA) {
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        load_vec<TIn, VEC>(static_cast<const TIn*>(p.a) + hv * K + Lay::col(c, lr),
                           &r.ar[c * VEC]);
        load_vec<float, VEC>(p.dt_bias + static_cast<int64_t>(vh) * K + Lay::col(c, lr),
                             &r.dr[c * VEC]);
      }
    } else {
      r.ar[0] = to_f32(static_cast<const TIn*>(p.a)[hv]);
      r.dr[0] = p.dt_bias[vh];
    }
    r.A_log = p.A_log[vh];
    r.b = to_f32(static_cast<const TIn*>(p.b)[hv]);
    return r;
  }

  __device__ __forceinline__ void prepare(const StepParams& p, const Raw& r) {
    const float Aexp = expf(r.A_log);
#pragma unroll
    for (int i = 0; i < GW; ++i) {
      g[i] = gate_of(r.ar[i], r.dr[i], Aexp);
      alpha[i] = expf(g[i]);
    }
    beta = beta_of(r.b, p.beta_bf16);
    float sk = 0.0f, sq = 0.0f;
#pragma unroll
    for (int i = 0; i < COLS; ++i) {
      sk = __fmaf_rn(r.kr[i], r.kr[i], sk);
      sq = __fmaf_rn(r.qr[i], r.qr[i], sq);
    }
    const float ik = inv_norm(lane_group_sum<LPR>(sk));
    const float iq = inv_norm(lane_group_sum<LPR>(sq));
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < COLS; ++i) {
      khat[i] = __fmul_rn(r.kr[i], ik);
      qhat[i] = __fmul_rn(__fmul_rn(r.qr[i], iq), p.scale);
      ak[i] = __fmul_rn(alpha[KDA ? i : 0], khat[i]);
      d = __fmaf_rn(qhat[i], khat[i], d);
    }
    kq = lane_group_sum<LPR>(d);
  }

  __device__ __forceinline__ void load(const StepParams& p, int b, int vh, int lr) {
    prepare(p, fetch(p, b, vh, lr));
  }
};

/// The conventional delta-rule update of one state row, this lane's columns s[0..COLS):
///   hk = s . (alpha . k^);  u = beta (v - hk);  s <- s . alpha + u k^;  y = s . q^.
/// Returns (y, u), both summed over the row's lanes. Every lane of the warp must call it.
template <class Tok>
__device__ __forceinline__ float2 delta_rule_row(float* s, const Tok& t, float v) {
  constexpr int COLS = Tok::COLS;
  float hk = 0.0f;
#pragma unroll
  for (int i = 0; i < COLS; ++i) hk = __fmaf_rn(s[i], t.ak[i], hk);
  hk = lane_group_sum<Tok::LPR>(hk);
  const float u = __fmul_rn(t.beta, __fsub_rn(v, hk));
  float y = 0.0f;
#pragma unroll
  for (int i = 0; i < COLS; ++i) {
    s[i] = __fmaf_rn(s[i], t.alpha[Tok::GW == 1 ? 0 : i], __fmul_rn(u, t.khat[i]));
    y = __fmaf_rn(s[i], t.qhat[i], y);
  }
  return make_float2(lane_group_sum<Tok::LPR>(y), u);
}

/// One lane's chunks of a state row from a shared-memory tile (zeros for rows past the block).
template <class TState, class Lay>
__device__ __forceinline__ void tile_row(const TState* tile, int r, int lr, bool valid, float* s) {
  constexpr int K = Lay::kChunks * Lay::kVec;
#pragma unroll
  for (int c = 0; c < Lay::kChunksPerLane; ++c)
    unpack16<TState>(valid ? *reinterpret_cast<const uint4*>(tile + r * K + Lay::col(c, lr))
                           : make_uint4(0, 0, 0, 0),
                     &s[c * Lay::kVec]);
}

/// One lane's columns of a float32 row in shared memory (a ring k^ row, a token vector), in the
/// lane layout Lay's order, read as float4.
template <class Lay>
__device__ __forceinline__ void lane_cols(const float* row, int lr, float* out) {
  static_assert(Lay::kVec % 4 == 0, "a lane's chunk is whole float4s");
#pragma unroll
  for (int c = 0; c < Lay::kChunksPerLane; ++c)
#pragma unroll
    for (int v = 0; v < Lay::kVec; v += 4) {
      const float4 x = *reinterpret_cast<const float4*>(row + Lay::col(c, lr) + v);
      out[c * Lay::kVec + v] = x.x, out[c * Lay::kVec + v + 1] = x.y;
      out[c * Lay::kVec + v + 2] = x.z, out[c * Lay::kVec + v + 3] = x.w;
    }
}

/// Streams one lane's chunks of a state row back to global memory (rounded to TState; a float16
/// checkpoint of a slot with SR keys stochastically, sr_store.cuh).
template <class TState, class Lay>
__device__ __forceinline__ void store_row(TState* row, int lr, const float* s,
                                          const SrSlot& sr = SrSlot{}) {
#pragma unroll
  for (int c = 0; c < Lay::kChunksPerLane; ++c)
    store16_state(row + Lay::col(c, lr), &s[c * Lay::kVec], sr);
}

}  // namespace replayssm::cuda::gdn
