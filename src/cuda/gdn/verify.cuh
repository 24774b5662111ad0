// The ReplaySSM speculative verify step of Gated DeltaNet / KDA (ring mode kSpeculative), in the
// UT/WY chunk form of method.md §4.4 / DESIGN.md §2. Row b feeds T_b tokens; their records
// (u, k^, g) are appended at logical h..h+T_b-1 and all T_b outputs come from the same checkpoint
// S0 plus the committed history (u_j, k^_j, g_j), j < h, without writing state. With the window
// prefix sums of the gates G_l = sum_{i<=l} g_i (per channel for KDA) and t = h + s:
//   vk_s = e^{G_t} . k^_s,  vq_s = e^{G_t} . q^_s                       (per token, K-vectors)
//   ck[l][s] = k^_l . e^{G_t - G_l} . k^_s,  cq[l][s] = k^_l . e^{G_t - G_l} . q^_s   (l <= t)
//   per state row i:  hk_s = S0_i . vk_s + sum_{j<h} u_j[i] ck[j][s],  hq_s likewise with vq, cq
//   U_s = beta_s (v_s[i] - hk_s) - sum_{s'<s} beta_s ck[h+s'][s] U_s'   (forward substitution)
//   y_s[i] = hq_s + sum_{s'<=s} cq[h+s'][s] U_s'
// U_s is the record u of token s (what sequential decoding of the accepted prefix would store).
// On is_flush rows the committed history alone is folded into S0 (the drafts may be rejected):
//   S0_i <- e^{G_{h-1}} . S0_i + sum_{j<h} u_j[i] (e^{G_{h-1} - G_j} . k^_j).
// Cursors are only read (commit moves them on the device).
//
// A block owns one (value head, batch row) and every V row of it, in the phases of the Mamba-2
// verify kernel (mamba2/verify.cuh): checkpoint rows by cp.async; the window staged in shared
// memory (history from the ring, tokens normalised by one warp each and appended to the ring);
// gate prefix sums; the per-token vectors and record coefficients (one warp per (record, token)
// pair) and the window's solve as two KT x KT matrices, (I + A)^-1 and W (I + A)^-1, shared by
// every row; then per state row the 2 KT dots and history sums in two transposed butterflies (hk,
// then hq), R gathered by shuffles, lane s forming U_s and y_s from its rows of the two matrices,
// and the fold on flush rows. The token axis is padded to KT
// (1, 2, 4, 8). Grid: x = value head, y = batch row. Shared memory: VerifySmem. fp32 state.
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/ring_window.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/common/row_layout.cuh"
#include "cuda/gdn/params.h"
#include "cuda/gdn/step_math.cuh"

namespace replayssm::cuda::gdn {

constexpr int kVerifyThreads = 256;

/// Shared memory of the verify kernel in floats (every part 16-byte aligned): the checkpoint
/// [V][K], the window's k^ [R][K] (history rows later turned into fold vectors), the tokens' q^
/// [KT][K], gates then their prefix sums [R][GW], the token vectors vk, vq [2 KT][K], history u
/// [V][us] by (row, record), the tokens' v [KT][V], coefficients [R][2 KT], betas [KT], the
/// flush decay [K], and the solve's (I + A)^-1 and W (I + A)^-1 [KT][KT] each.
struct VerifySmem {
  int us = 0;
  int k = 0, q = 0, g = 0, vec = 0, u = 0, v = 0, coef = 0, beta = 0, fd = 0, solve = 0, total = 0;
  __host__ __device__ VerifySmem(int R, int K, int V, int KT, int GW) {
    auto up4 = [](int x) { return (x + 3) / 4 * 4; };
    us = R + 1;  // odd: the record-major staging writes fall on distinct banks
    k = V * K;
    q = k + R * K;
    g = q + KT * K;
    vec = g + up4(R * GW);
    u = vec + 2 * KT * K;
    v = u + up4(V * us);
    coef = v + up4(KT * V);
    beta = coef + up4(R * 2 * KT);
    fd = beta + up4(KT);
    solve = fd + K;
    total = solve + 2 * KT * KT;
  }
};

namespace verify_detail {
constexpr unsigned kFull = 0xffffffffu;
}  // namespace verify_detail

template <class TIn, int K, int KT, bool KDA>
__global__ void __launch_bounds__(kVerifyThreads) verify_kernel(const StepParams p) {
  using Lay = RowLayout<4, K, 32>;
  using namespace verify_detail;
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  constexpr int CPL = Lay::kChunksPerLane, RPW = Lay::kRowsPerWarp;
  constexpr int NV = 2 * KT;  // dots per state row: hk and hq of every token
  // lane -> token column of a transposed_sum of KT values over a row's LPR lanes
  constexpr int SHIFT = LPR / KT == 1 ? 0 : LPR / KT == 2 ? 1 : LPR / KT == 4 ? 2 : LPR / KT == 8 ? 3
                        : LPR / KT == 16 ? 4 : 5;
  static_assert((LPR >> SHIFT) == KT, "KT must divide the lanes of a row");
  constexpr int GW = KDA ? K : 1;

  extern __shared__ __align__(16) float smem[];
  const int R = p.R, V = p.V;
  const VerifySmem sm(R, K, V, KT, GW);
  float* const tile = smem;
  float* const sK = smem + sm.k;
  float* const sQ = smem + sm.q;
  float* const sG = smem + sm.g;
  float* const sVec = smem + sm.vec;  // [NV][K]: vk_0.., then vq_0..
  float* const sU = smem + sm.u;
  float* const sV = smem + sm.v;
  float* const sCoef = smem + sm.coef;  // [R][NV]: ck[l][0..KT), cq[l][0..KT)
  float* const sBeta = smem + sm.beta;
  float* const sFd = smem + sm.fd;

  const int vh = blockIdx.x, b = blockIdx.y, kh = vh / p.group;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const int lr = lane % LPR;
  const int Ty = p.Ty;
  TIn* const y = static_cast<TIn*>(p.y);
  auto y_at = [&](int s, int i) { return ((static_cast<int64_t>(b) * Ty + s) * p.HV + vh) * V + i; };

  const int slot = p.slot_ids[b];
  if (slot < 0 || slot >= p.slots) {  // pad row: nothing read or written but y = 0
    for (int i = tid; i < Ty * V; i += blockDim.x) y[y_at(i / V, i % V)] = from_f32<TIn>(0.0f);
    return;
  }
  const int64_t sv = static_cast<int64_t>(slot) * p.HV + vh;  // (slot, value head)
  float* const S0 = static_cast<float*>(p.state) + sv * V * K;

  // ---- phase 1: checkpoint copies; the cursor; the window.
  const int row0 = warp * RPW + lane / LPR, rstep = nwarps * RPW;
  for (int r = row0; r < V; r += rstep)
#pragma unroll
    for (int c = 0; c < CPL; ++c)
      cp_async16(tile + r * K + Lay::col(c, lr), S0 + static_cast<int64_t>(r) * K + Lay::col(c, lr));
  cp_async_commit();

  const int Tb = p.num_tokens ? min(max(p.num_tokens[b], 1), Ty) : Ty;
  const RingWindow win = RingWindow::of(p.origin[slot], p.hist[slot], R, Tb);
  const int hist = win.hist;
  const bool flush = p.is_flush[slot] != 0;
  const int m = hist + Tb;
  auto phys = [&](int l) { return win.phys(l); };
  const float* const ringk = p.ring_k + (static_cast<int64_t>(slot) * p.H + kh) * R * K;
  float* const ringg = p.ring_g + sv * R * GW;
  float* const ringu = p.ring_u + sv * R * V;

  // History records (all threads, float4 items) and the tokens' v.
  {
    const int nk = hist * (K / 4), ng = KDA ? hist * (K / 4) : hist, nu = hist * (V / 4);
    const int nv = Tb * (V / 4), total = nk + ng + nu + nv;
    for (int i = tid; i < total; i += blockDim.x) {
      int j = i;
      if (j < nk) {
        const int l = j / (K / 4), c4 = (j % (K / 4)) * 4;
        *reinterpret_cast<float4*>(sK + l * K + c4) =
            *reinterpret_cast<const float4*>(ringk + static_cast<int64_t>(phys(l)) * K + c4);
      } else if ((j -= nk) < ng) {
        if constexpr (KDA) {
          const int l = j / (K / 4), c4 = (j % (K / 4)) * 4;
          *reinterpret_cast<float4*>(sG + l * K + c4) =
              *reinterpret_cast<const float4*>(ringg + static_cast<int64_t>(phys(l)) * K + c4);
        } else {
          sG[j] = ringg[phys(j)];
        }
      } else if ((j -= ng) < nu) {
        const int l = j / (V / 4), r4 = (j % (V / 4)) * 4;
        const float4 u4 = *reinterpret_cast<const float4*>(ringu + static_cast<int64_t>(phys(l)) * V + r4);
        sU[(r4 + 0) * sm.us + l] = u4.x, sU[(r4 + 1) * sm.us + l] = u4.y;
        sU[(r4 + 2) * sm.us + l] = u4.z, sU[(r4 + 3) * sm.us + l] = u4.w;
      } else {
        j -= nu;
        const int s = j / (V / 4), r4 = (j % (V / 4)) * 4;
        load_vec<TIn, 4>(static_cast<const TIn*>(p.v) + ((static_cast<int64_t>(b) * Ty + s) * p.HV + vh) * V + r4,
                         sV + s * V + r4);
      }
    }
  }
  // The tokens: warp s normalises k and q, forms the gate and beta, appends k^ (the key head's
  // first value head) and g to the ring.
  for (int s = warp; s < Tb; s += nwarps) {
    const int64_t qk = ((static_cast<int64_t>(b) * Ty + s) * p.H + kh) * K;
    constexpr int PL = K / 32;  // elements per lane
    float kr[PL], qr[PL];
#pragma unroll
    for (int e = 0; e < PL; ++e) {
      kr[e] = to_f32(static_cast<const TIn*>(p.k)[qk + lane + 32 * e]);
      qr[e] = to_f32(static_cast<const TIn*>(p.q)[qk + lane + 32 * e]);
    }
    float sk = 0.0f, sq = 0.0f;
#pragma unroll
    for (int e = 0; e < PL; ++e) sk = __fmaf_rn(kr[e], kr[e], sk), sq = __fmaf_rn(qr[e], qr[e], sq);
    const float ik = inv_norm(lane_group_sum<32>(sk)), iq = inv_norm(lane_group_sum<32>(sq));
    const int l = hist + s, q = phys(l);
    const bool owns_k = vh % p.group == 0;
#pragma unroll
    for (int e = 0; e < PL; ++e) {
      const int c = lane + 32 * e;
      const float kh_ = __fmul_rn(kr[e], ik);
      sK[l * K + c] = kh_;
      sQ[s * K + c] = __fmul_rn(__fmul_rn(qr[e], iq), p.scale);
      if (owns_k) p.ring_k[((static_cast<int64_t>(slot) * p.H + kh) * R + q) * K + c] = kh_;
    }
    const int64_t hv = (static_cast<int64_t>(b) * Ty + s) * p.HV + vh;  // (b, s, vh)
    const float Aexp = expf(p.A_log[vh]);
    if constexpr (KDA) {
#pragma unroll
      for (int e = 0; e < PL; ++e) {
        const int c = lane + 32 * e;
        const float gv = gate_of(to_f32(static_cast<const TIn*>(p.a)[hv * K + c]),
                                 p.dt_bias[static_cast<int64_t>(vh) * K + c], Aexp);
        sG[l * K + c] = gv;
        ringg[static_cast<int64_t>(q) * K + c] = gv;
      }
    } else if (lane == 0) {
      const float gv = gate_of(to_f32(static_cast<const TIn*>(p.a)[hv]), p.dt_bias[vh], Aexp);
      sG[l] = gv;
      ringg[q] = gv;
    }
    if (lane == 0) sBeta[s] = beta_of(to_f32(static_cast<const TIn*>(p.b)[hv]), p.beta_bf16);
  }
  __syncthreads();

  // ---- phase 2: gate prefix sums over the window (one thread per channel).
  for (int c = tid; c < GW; c += blockDim.x) {
    float acc = 0.0f;
    for (int l = 0; l < m; ++l) sG[l * GW + c] = acc = __fadd_rn(acc, sG[l * GW + c]);
  }
  __syncthreads();
  auto G = [&](int l, int c) { return sG[l * GW + (KDA ? c : 0)]; };
  auto decay = [&](float e) { return expf(fminf(e, 0.0f)); };  // e^{G_t - G_l}, never above 1
  // Token vectors vk, vq (zero past T_b) and the flush decay.
  for (int i = tid; i < NV * K; i += blockDim.x) {
    const int n = i / K, c = i % K, s = n % KT;
    float v = 0.0f;
    if (s < Tb) v = __fmul_rn(decay(G(hist + s, c)), n < KT ? sK[(hist + s) * K + c] : sQ[s * K + c]);
    sVec[i] = v;
  }
  if (flush && hist > 0)
    for (int c = tid; c < K; c += blockDim.x) sFd[c] = decay(G(hist - 1, c));
  // Record coefficients ck, cq: one warp per record l, its dots with every token at once (the
  // lanes split K; two transposed butterflies hand token s's ck and cq to lane group s). Zero
  // where l > t.
  {
    constexpr int SH32 = KT == 32 ? 0 : KT == 16 ? 1 : KT == 8 ? 2 : KT == 4 ? 3 : KT == 2 ? 4 : 5;
    static_assert((32 >> SH32) == KT, "KT must divide a warp");
    for (int l = warp; l < m; l += nwarps) {
      float pk[KT], pq[KT];
#pragma unroll
      for (int s = 0; s < KT; ++s) pk[s] = 0.0f, pq[s] = 0.0f;
      for (int c = lane; c < K; c += 32) {
        const float kl = sK[l * K + c];
#pragma unroll
        for (int s = 0; s < KT; ++s) {
          const int t = min(hist + s, m - 1);  // tokens past T_b: any record, zeroed below
          // KDA: the decay is inside the dot; GDN: one decay per pair, applied after the sums.
          const float w = KDA ? __fmul_rn(kl, decay(__fsub_rn(G(t, c), G(l, c)))) : kl;
          pk[s] = __fmaf_rn(w, sK[t * K + c], pk[s]);
          pq[s] = __fmaf_rn(w, sQ[s * K + c], pq[s]);
        }
      }
      const float dk = transposed_sum<KT, 32>(pk, lane), dq = transposed_sum<KT, 32>(pq, lane);
      const int s = lane >> SH32, t = hist + s;
      if ((lane & ((1 << SH32) - 1)) == 0) {
        // (a select, not a product: past T_b the sums may hold anything, sQ rows there are unset)
        const bool live = s < Tb && l <= t;
        const float w = KDA || !live ? 1.0f : decay(__fsub_rn(G(t, 0), G(l, 0)));
        sCoef[l * NV + s] = live ? __fmul_rn(w, dk) : 0.0f;
        sCoef[l * NV + KT + s] = live ? __fmul_rn(w, dq) : 0.0f;
      }
    }
  }
  __syncthreads();
  // The window's solve, shared by every state row (A and W are per block): with
  // A[s][s'] = beta_s ck[h+s'][s] (s' < s) and W[s][s'] = cq[h+s'][s] (s' <= s),
  // U = (I + A)^-1 R and y = hq + W U = hq + (W (I + A)^-1) R, R_s = beta_s (v_s - hk_s).
  // Thread s2 forms column s2 of the inverse by forward substitution; rows past T_b are identity.
  float* const sMinv = smem + sm.solve;  // [KT][KT] (I + A)^-1, unit lower triangular
  float* const sWM = sMinv + KT * KT;    // [KT][KT] W (I + A)^-1, lower triangular
  if (tid < KT) {
    const int s2 = tid;
    for (int s = 0; s < KT; ++s) {
      float v = s == s2 ? 1.0f : 0.0f;
      if (s > s2 && s < Tb)
        for (int k2 = s2; k2 < s; ++k2)
          v = __fsub_rn(v, __fmul_rn(__fmul_rn(sBeta[s], sCoef[(hist + k2) * NV + s]),
                                     sMinv[k2 * KT + s2]));
      sMinv[s * KT + s2] = v;
    }
  }
  __syncthreads();
  if (tid < KT * KT) {
    const int s = tid / KT, s3 = tid % KT;
    float v = 0.0f;
    if (s < Tb)
      for (int s2 = s3; s2 <= s; ++s2)
        v = __fmaf_rn(sCoef[(hist + s2) * NV + KT + s], sMinv[s2 * KT + s3], v);
    sWM[s * KT + s3] = v;
  }
  // Fold vectors of the history (flush rows): k^_j <- e^{G_{h-1} - G_j} . k^_j, in place.
  if (flush && hist > 0)
    for (int i = tid; i < hist * K; i += blockDim.x) {
      const int j = i / K, c = i % K;
      sK[i] = __fmul_rn(sK[i], decay(__fsub_rn(G(hist - 1, c), G(j, c))));
    }
  __syncthreads();

  // ---- phase 3: per state row: hk, hq of every token; the solve; y and the tokens' u.
  cp_async_wait<0>();
  // The token vectors over this lane's columns: vk in registers; vq too up to KT = 4 (at KT = 8
  // it is read from shared memory per row, which keeps two blocks per SM).
  constexpr bool kQRegs = KT <= 4;
  float vk[KT][COLS], vq[kQRegs ? KT : 1][COLS];
#pragma unroll
  for (int n = 0; n < KT; ++n)
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
      const float4 w = *reinterpret_cast<const float4*>(sVec + n * K + Lay::col(c, lr));
      vk[n][c * VEC] = w.x, vk[n][c * VEC + 1] = w.y, vk[n][c * VEC + 2] = w.z, vk[n][c * VEC + 3] = w.w;
      if constexpr (kQRegs) {
        const float4 q4 = *reinterpret_cast<const float4*>(sVec + (KT + n) * K + Lay::col(c, lr));
        vq[n][c * VEC] = q4.x, vq[n][c * VEC + 1] = q4.y, vq[n][c * VEC + 2] = q4.z, vq[n][c * VEC + 3] = q4.w;
      }
    }
  // Lane lr of a row writes token lr's y and u: its rows of the two solve matrices.
  const int so = lr < KT ? lr : 0;
  float mi[KT], wm[KT];
#pragma unroll
  for (int s3 = 0; s3 < KT; ++s3) mi[s3] = sMinv[so * KT + s3], wm[s3] = sWM[so * KT + s3];
  const int col = lr >> SHIFT;  // the token whose hk / hq the butterflies hand this lane
  const float beta_c = col < Tb ? sBeta[col] : 0.0f;
  const int base = lane - lr;   // the row's first lane
  const int nrounds = (V + rstep - 1) / rstep;  // uniform: every lane reaches the shuffles
  for (int k = 0; k < nrounds; ++k) {
    const int r = row0 + k * rstep;
    const bool valid = r < V;
    float s0[COLS];
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
      const float4 t4 = valid ? *reinterpret_cast<const float4*>(tile + r * K + Lay::col(c, lr))
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      s0[c * VEC] = t4.x, s0[c * VEC + 1] = t4.y, s0[c * VEC + 2] = t4.z, s0[c * VEC + 3] = t4.w;
    }
    float pk[KT], pq[KT];
#pragma unroll
    for (int n = 0; n < KT; ++n) {
      float dk = 0.0f, dq = 0.0f;
#pragma unroll
      for (int e = 0; e < COLS; ++e) dk = __fmaf_rn(s0[e], vk[n][e], dk);
      if constexpr (kQRegs) {
#pragma unroll
        for (int e = 0; e < COLS; ++e) dq = __fmaf_rn(s0[e], vq[n][e], dq);
      } else {
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
          const float4 w = *reinterpret_cast<const float4*>(sVec + (KT + n) * K + Lay::col(c, lr));
          dq = __fmaf_rn(s0[c * VEC], w.x, dq), dq = __fmaf_rn(s0[c * VEC + 1], w.y, dq);
          dq = __fmaf_rn(s0[c * VEC + 2], w.z, dq), dq = __fmaf_rn(s0[c * VEC + 3], w.w, dq);
        }
      }
      pk[n] = dk, pq[n] = dq;
    }
    if (valid)
      for (int j = lr; j < hist; j += LPR) {
        const float uj = sU[r * sm.us + j];
#pragma unroll
        for (int n = 0; n < KT; ++n) {
          pk[n] = __fmaf_rn(uj, sCoef[j * NV + n], pk[n]);
          pq[n] = __fmaf_rn(uj, sCoef[j * NV + KT + n], pq[n]);
        }
      }
    const float hk = transposed_sum<KT, LPR>(pk, lr);
    const float hq_col = transposed_sum<KT, LPR>(pq, lr);
    // R_col = beta (v - hk) on each token's lanes; every lane gathers R, lane s forms U_s, y_s.
    const float Rc = col < Tb && valid ? __fmul_rn(beta_c, __fsub_rn(sV[col * V + r], hk)) : 0.0f;
    float R[KT];
#pragma unroll
    for (int s = 0; s < KT; ++s) R[s] = __shfl_sync(kFull, Rc, base + (s << SHIFT));
    const float hq = __shfl_sync(kFull, hq_col, base + (so << SHIFT));
    if (valid && lr < Ty) {
      float out = 0.0f;
      if (lr < Tb) {
        float u = 0.0f;
        out = hq;
#pragma unroll
        for (int s3 = 0; s3 < KT; ++s3) u = __fmaf_rn(mi[s3], R[s3], u), out = __fmaf_rn(wm[s3], R[s3], out);
        ringu[static_cast<int64_t>(phys(hist + lr)) * V + r] = u;
      }
      y[y_at(lr, r)] = from_f32<TIn>(out);
    }
    if (flush && hist > 0 && valid) {  // fold the committed history into the row, store it
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        const float4 d4 = *reinterpret_cast<const float4*>(sFd + Lay::col(c, lr));
        s0[c * VEC] = __fmul_rn(s0[c * VEC], d4.x), s0[c * VEC + 1] = __fmul_rn(s0[c * VEC + 1], d4.y);
        s0[c * VEC + 2] = __fmul_rn(s0[c * VEC + 2], d4.z), s0[c * VEC + 3] = __fmul_rn(s0[c * VEC + 3], d4.w);
      }
      for (int j = 0; j < hist; ++j) {
        const float uj = sU[r * sm.us + j];
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
          const float4 f4 = *reinterpret_cast<const float4*>(sK + j * K + Lay::col(c, lr));
          s0[c * VEC] = __fmaf_rn(uj, f4.x, s0[c * VEC]), s0[c * VEC + 1] = __fmaf_rn(uj, f4.y, s0[c * VEC + 1]);
          s0[c * VEC + 2] = __fmaf_rn(uj, f4.z, s0[c * VEC + 2]), s0[c * VEC + 3] = __fmaf_rn(uj, f4.w, s0[c * VEC + 3]);
        }
      }
#pragma unroll
      for (int c = 0; c < CPL; ++c)
        store16_stream(S0 + static_cast<int64_t>(r) * K + Lay::col(c, lr), &s0[c * VEC]);
    }
  }
}

}  // namespace replayssm::cuda::gdn
