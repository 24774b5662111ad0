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
// verify kernel (mamba2/verify.cuh). Every load of the first phase is requested before the
// first wait (a chain of dependent loads was a block's lifetime): the tokens' inputs (warp s:
// token s's k, q, gate and beta inputs; the tokens' v), which do not depend on the slot, before
// the slot; then each warp's first checkpoint columns (kVerifyPrefetch 16-column groups of its
// 16-row m-tile into registers and, at KT = 8, verify_staged(KT) more into shared memory by
// cp.async; 3 blocks per SM at T <= 4, bound by registers, 2 at T = 8 unless the shared memory
// of long rings or wide heads allows fewer), the cursor, and the window's history by cp.async;
// the tokens normalised (warp s) and appended to the ring; gate prefix sums; the per-token
// vectors and record coefficients (one warp per record, every token at once) and the window's
// solve as two KT x KT matrices, (I + A)^-1 and W (I + A)^-1, shared by every row; then every
// row's [hk | hq] (the 2 KT dots and the history sums) and, on flush rows, the fold on the
// tensor cores, a warp per 16-row m-tile (mma m16n8k8 with tf32 pairs, as
// mamba2/verify_group.cuh), the m-tile's column groups streaming through registers (and the
// stage); into a per-row buffer; then per row R (every token's), and per (row, token) U_s and
// y_s from the two matrices.
// The token axis is padded to KT (1, 2, 4, 8). Grid: x = value head, y = batch row. Shared
// memory: VerifySmem. fp32 state.
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/block_timeline.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/mma_tf32.cuh"
#include "cuda/common/ring_window.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/gdn/params.h"
#include "cuda/gdn/step_math.cuh"

namespace replayssm::cuda::gdn {

constexpr int kVerifyThreads = 256;
/// 16-column groups of a warp's m-tile loaded ahead of their math (8 registers per group). One
/// group ahead (64 registers, 4 blocks per SM) was 4-39% slower at batch 256 on the H200
/// (bench/NOTES.md "Session 25"), and 4 or 8 ahead (2 blocks per SM) 13-24% slower ("Session 26").
constexpr int kVerifyPrefetch = 2;
/// Further groups of the m-tile in flight through shared memory (cp.async) at KT = 8, beside the
/// registers': a ring of kVerifyPrefetch + verify_staged(KT) groups per warp (registers for more
/// groups cost a block per SM). On the H200 at batch 64-512 this was 3-6% faster at KT = 8, and
/// 2-5% slower at KT <= 4 for KDA (bench/NOTES.md "Session 27"). The host stages only where the
/// 16 KB keep the blocks per SM and fit at all (StepParams::staged); else those groups are loaded
/// where they are used.
__host__ __device__ constexpr int verify_staged(int KT) { return KT >= 8 ? 2 : 0; }

/// Blocks per SM the kernel's registers are bounded for: 3 at KT <= 4 (80 registers), 2 at KT = 8
/// (its shared memory allows no more at L 32).
__host__ __device__ constexpr int verify_min_blocks(int KT) { return KT <= 4 ? 3 : 2; }

/// Columns of the per-row products [hk | hq]: 2 KT, padded to the mma's n8 tiles.
__host__ __device__ constexpr int verify_nw8(int KT) { return (2 * KT + 7) / 8 * 8; }

/// Shared memory of the verify kernel in floats (every part 16-byte aligned): the window's k^
/// [R][K] (history rows later turned into fold vectors), the tokens' q^ [KT][K], gates then their
/// prefix sums [R][GW], the token vectors vk, vq as tf32 pairs in mma B-fragment order
/// [NW8 / 8][K / 8][32 lanes][4] (b0.hi, b1.hi, b0.lo, b1.lo), history u [R][us] by (record,
/// row), the tokens' v [KT][V], coefficients [R][2 KT], betas [KT], the flush decay [K], the
/// solve's (I + A)^-1 and W (I + A)^-1 [KT][KT] each, every row's [hk | hq] [V][NW8 + 1] (the
/// odd stride: the epilogue's threads read consecutive rows at one column), and the checkpoint
/// groups staged by cp.async [warp][verify_staged(KT)][2 row halves][32 lanes][4] (a lane reads
/// only what it copied).
struct VerifySmem {
  int us = 0;
  int k = 0, q = 0, g = 0, vec = 0, u = 0, v = 0, coef = 0, beta = 0, fd = 0, solve = 0, h = 0;
  int stage = 0;
  int total = 0;
  __host__ __device__ VerifySmem(int R, int K, int V, int KT, int GW, bool staged) {
    auto up4 = [](int x) { return (x + 3) / 4 * 4; };
    // us = 8 mod 32: phase 3's u fragments (lane (mg, mc) reads record l0 + mc, row r0 + mg) hit
    // 32 banks; a multiple of 4: the rows are cp.async targets.
    us = V + (40 - V % 32) % 32;
    k = 0;
    q = k + R * K;
    g = q + KT * K;
    vec = g + up4(R * GW);
    u = vec + 2 * verify_nw8(KT) * K;
    v = u + R * us;
    coef = v + up4(KT * V);
    beta = coef + up4(R * 2 * KT);
    fd = beta + up4(KT);
    solve = fd + K;
    h = solve + up4(2 * KT * KT);
    stage = h + up4(V * (verify_nw8(KT) + 1));
    total = stage + (staged ? kVerifyThreads / 32 * verify_staged(KT) * 2 * 32 * 4 : 0);
  }
};

template <class TIn, int K, int KT, bool KDA>
__global__ void __launch_bounds__(kVerifyThreads, verify_min_blocks(KT))
    verify_kernel(const StepParams p) {
  constexpr int NV = 2 * KT;  // dots per state row: hk and hq of every token
  constexpr int NW8 = verify_nw8(KT), NT = NW8 / 8;  // their columns in n8 tiles
  static_assert(K % 32 == 0, "head_k_dim a multiple of 32 (16-column groups)");
  // Column groups of a row; in flight in registers (PD) and in shared memory (SD).
  constexpr int KG = K / 16, PD = kVerifyPrefetch, SD = verify_staged(KT), RD = PD + SD;
  static_assert(KG % RD == 0, "the groups in flight divide the column groups");
  constexpr int GW = KDA ? K : 1;

  extern __shared__ __align__(16) float smem[];
  const int R = p.R, V = p.V;
  const bool staged = SD > 0 && p.staged;
  const VerifySmem sm(R, K, V, KT, GW, staged);
  float* const sK = smem + sm.k;
  float* const sQ = smem + sm.q;
  float* const sG = smem + sm.g;
  float* const sVec = smem + sm.vec;  // vk_0.., vq_0.. as mma B fragments (see phase 2)
  float* const sU = smem + sm.u;
  float* const sV = smem + sm.v;
  float* const sCoef = smem + sm.coef;  // [R][NV]: ck[l][0..KT), cq[l][0..KT)
  float* const sBeta = smem + sm.beta;
  float* const sFd = smem + sm.fd;

  const int vh = blockIdx.x, b = blockIdx.y, kh = vh / p.group;
  RSSM_TL_DECL;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const int Ty = p.Ty;
  TIn* const y = static_cast<TIn*>(p.y);
  auto y_at = [&](int s, int i) { return ((static_cast<int64_t>(b) * Ty + s) * p.HV + vh) * V + i; };

  // ---- phase 1. Every load is requested before the first one is waited for: a block's
  // lifetime was a chain of dependent global loads (slot, cursor, ring, tokens, gates, beta; each
  // ~1 us under load). First what does not depend on the slot: warp s's token (k, q, the gate and
  // beta inputs; Ty <= 8 = the warps, host-checked) and the tokens' v rows, into registers.
  static_assert(kVerifyThreads / 32 >= KT, "a warp per token");
  constexpr int PL = K / 32;  // elements of k, q (and KDA's gate) per lane
  const int slot = p.slot_ids[b];
  const int Tb = p.num_tokens ? min(max(p.num_tokens[b], 1), Ty) : Ty;
  const bool tok = warp < Ty;  // this warp's token s = warp
  const int64_t hv = (static_cast<int64_t>(b) * Ty + warp) * p.HV + vh;  // (b, s, vh)
  TIn kraw[PL], qraw[PL], araw[KDA ? PL : 1], braw = from_f32<TIn>(0.0f);
  float dtb[KDA ? PL : 1], alog = 0.0f;
  if (tok) {
    const int64_t qk = ((static_cast<int64_t>(b) * Ty + warp) * p.H + kh) * K;
#pragma unroll
    for (int e = 0; e < PL; ++e) {
      kraw[e] = static_cast<const TIn*>(p.k)[qk + lane + 32 * e];
      qraw[e] = static_cast<const TIn*>(p.q)[qk + lane + 32 * e];
    }
    if constexpr (KDA) {
#pragma unroll
      for (int e = 0; e < PL; ++e) {
        araw[e] = static_cast<const TIn*>(p.a)[hv * K + lane + 32 * e];
        dtb[e] = p.dt_bias[static_cast<int64_t>(vh) * K + lane + 32 * e];
      }
    } else {
      araw[0] = static_cast<const TIn*>(p.a)[hv];
      dtb[0] = p.dt_bias[vh];
    }
    braw = static_cast<const TIn*>(p.b)[hv];
    alog = p.A_log[vh];
  }
  // v: item i = tid (4 elements; V x Ty / 4 <= 256 items up to V 128), the rest after the slot.
  using VRaw = typename detail::Raw<4 * sizeof(TIn)>::type;
  const int nvi = Ty * (V / 4);
  auto v_src = [&](int i) {
    const int s = i / (V / 4), r4 = (i % (V / 4)) * 4;
    return static_cast<const TIn*>(p.v) + ((static_cast<int64_t>(b) * Ty + s) * p.HV + vh) * V + r4;
  };
  auto v_put = [&](int i, const VRaw& raw) {
    detail::Pack<TIn, 4> pk;
    pk.raw = raw;
    float* const dst = sV + (i / (V / 4)) * V + (i % (V / 4)) * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) dst[j] = to_f32(pk.e[j]);
  };
  VRaw v0{};
  if (tid < nvi) v0 = *reinterpret_cast<const VRaw*>(v_src(tid));

  // Pad row: only the token inputs were read; nothing is written but y = 0.
  if (slot < 0 || slot >= p.slots) {
    for (int i = tid; i < Ty * V; i += blockDim.x) y[y_at(i / V, i % V)] = from_f32<TIn>(0.0f);
    return;
  }
  const int64_t sv = static_cast<int64_t>(slot) * p.HV + vh;  // (slot, value head)
  float* const S0 = static_cast<float*>(p.state) + sv * V * K;

  // Then the slot's: each warp's first checkpoint columns (phase 3's A fragments, in flight
  // while the window is staged), the cursor, and the window's history by cp.async.
  // Lane (mg, mc) of a warp holds rows r0 = 16 mt + mg and r0 + 8, columns 16 kg + 4 mc .. + 3 of
  // each 16-column group kg (phase 3 says why).
  const int mg = lane >> 2, mc = lane & 3;
  const int mts = (V + 15) / 16;
  const float* const S0l = S0 + mg * K + 4 * mc;  // the lane's first element (V K < 2^31)
  auto load_group = [&](int mt, int kg, float4 (&a)[2]) {
    const float* const at = S0l + (mt * 16 * K + 16 * kg);
#pragma unroll
    for (int h = 0; h < 2; ++h)
      a[h] = mt * 16 + mg + 8 * h < V ? __ldcs(reinterpret_cast<const float4*>(at + 8 * h * K))
                                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  };
  // Staged groups: slot j of a warp holds its lane's two float4 of one group.
  float* const sStage = smem + sm.stage + warp * SD * 2 * 128 + lane * 4;
  auto stage_group = [&](int mt, int kg, int j) {
    const float* const at = S0l + (mt * 16 * K + 16 * kg);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* const dst = sStage + (j * 2 + h) * 128;
      if (mt * 16 + mg + 8 * h < V)
        cp_async16(dst, at + 8 * h * K);
      else
        *reinterpret_cast<float4*>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  };
  float4 ahead[PD][2];  // groups kg0 .. kg0 + PD - 1 of the m-tile in hand
  if (warp < mts) {
#pragma unroll
    for (int pf = 0; pf < PD; ++pf) load_group(warp, pf, ahead[pf]);
    if (staged)
#pragma unroll
      for (int j = 0; j < SD; ++j) {  // one copy group per slot (phase 3 waits for them in turn)
        stage_group(warp, PD + j, j);
        cp_async_commit();
      }
  }

  const RingWindow win = RingWindow::of(p.origin[slot], p.hist[slot], R, Tb);
  const int hist = win.hist;
  const bool flush = p.is_flush[slot] != 0;
  const int m = hist + Tb;
  auto phys = [&](int l) { return win.phys(l); };
  const float* const ringk = p.ring_k + (static_cast<int64_t>(slot) * p.H + kh) * R * K;
  float* const ringg = p.ring_g + sv * R * GW;
  float* const ringu = p.ring_u + sv * R * V;

  // History records, a warp per record: k^ [l][K], u [l][us], KDA's gates [l][K] in 16-byte
  // copies, GDN's gate word (no run-time division: a flat item index cost one per item).
  for (int l = warp; l < hist; l += nwarps) {
    const int64_t q = phys(l);
#pragma unroll
    for (int c4 = 4 * lane; c4 < K; c4 += 128) {
      cp_async16(sK + l * K + c4, ringk + q * K + c4);
      if constexpr (KDA) cp_async16(sG + l * K + c4, ringg + q * K + c4);
    }
    if (!KDA && lane == 0) cp_async_small<4>(sG + l, ringg + q);
    for (int r4 = 4 * lane; r4 < V; r4 += 128) cp_async16(sU + l * sm.us + r4, ringu + q * V + r4);
  }
  cp_async_commit();
  // The rest of v (V x Ty / 4 > 256 items), then the register item.
  for (int i = tid + blockDim.x; i < nvi; i += blockDim.x)
    v_put(i, *reinterpret_cast<const VRaw*>(v_src(i)));
  if (tid < nvi) v_put(tid, v0);
  // Warp s's token: k and q normalised, the gate and beta; k^ appended by the key head's first
  // value head, g by every value head.
  if (tok && warp < Tb) {
    const int s = warp;
    float kr[PL], qr[PL];
#pragma unroll
    for (int e = 0; e < PL; ++e) kr[e] = to_f32(kraw[e]), qr[e] = to_f32(qraw[e]);
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
    const float Aexp = expf(alog);
    if constexpr (KDA) {
#pragma unroll
      for (int e = 0; e < PL; ++e) {
        const int c = lane + 32 * e;
        const float gv = gate_of(to_f32(araw[e]), dtb[e], Aexp);
        sG[l * K + c] = gv;
        ringg[static_cast<int64_t>(q) * K + c] = gv;
      }
    } else if (lane == 0) {
      const float gv = gate_of(to_f32(araw[0]), dtb[0], Aexp);
      sG[l] = gv;
      ringg[q] = gv;
    }
    if (lane == 0) sBeta[s] = beta_of(to_f32(braw), p.beta_bf16);
  }
  RSSM_TL_MARK(1);
  cp_async_wait<0>();
  __syncthreads();
  RSSM_TL_MARK(2);

  // ---- phase 2: gate prefix sums over the window (one thread per channel; eight loads in
  // flight at a time, the sums in record order).
  for (int c = tid; c < GW; c += blockDim.x) {
    float acc = 0.0f;
    for (int l0 = 0; l0 < m; l0 += 8) {
      float g8[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) g8[i] = l0 + i < m ? sG[(l0 + i) * GW + c] : 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i)
        if (l0 + i < m) sG[(l0 + i) * GW + c] = acc = __fadd_rn(acc, g8[i]);
    }
  }
  __syncthreads();
  RSSM_TL_MARK(3);
  auto G = [&](int l, int c) { return sG[l * GW + (KDA ? c : 0)]; };
  auto decay = [&](float e) { return expf(fminf(e, 0.0f)); };  // e^{G_t - G_l}, never above 1
  // Token vectors vk, vq (zero past T_b and in the padding columns) and the flush decay. Column n
  // of [vk | vq] is the n-th column of the mma's B: element (k = col, n) is stored where lane
  // 4 (n % 8) + c reads it as b0 / b1 of k-step 2 m + e (col = 16 m + 4 c + 2 e + t; phase 3).
  // A thread keeps one column c and walks the tokens: one decay per (token, column) serves vk and
  // vq, and the column's fragment position is computed once.
  {
    static_assert(kVerifyThreads % K == 0, "whole columns per pass");
    constexpr int kStep = kVerifyThreads / K;
    const int c = tid % K;
    const int ks = 2 * (c >> 4) + ((c >> 1) & 1), cl = ((c >> 2) & 3), ct = c & 1;
    auto put = [&](int n, float v) {
      const Tf32Pair pv = Tf32Pair::of(v);  // split once here, not in every warp's k-steps
      float* const at = sVec + (((n >> 3) * (K / 8) + ks) * 32 + 4 * (n & 7) + cl) * 4 + ct;
      at[0] = __uint_as_float(pv.hi), at[2] = __uint_as_float(pv.lo);
    };
    for (int s = tid / K; s < KT; s += kStep) {
      float vk = 0.0f, vq = 0.0f;
      if (s < Tb) {
        const float w = decay(G(hist + s, c));
        vk = __fmul_rn(w, sK[(hist + s) * K + c]);
        vq = __fmul_rn(w, sQ[s * K + c]);
      }
      put(s, vk);
      put(KT + s, vq);
    }
    for (int n = NV + tid / K; n < NW8; n += kStep) put(n, 0.0f);  // padding columns (KT < 4)
  }
  if (flush && hist > 0)
    for (int c = tid; c < K; c += blockDim.x) sFd[c] = decay(G(hist - 1, c));
  // Record coefficients ck, cq: one warp per record l, its dots with every token at once (the
  // lanes split K; two transposed butterflies hand token s's ck and cq to lane group s). Zero
  // where l > t.
  {
    constexpr int SH32 = KT == 32 ? 0 : KT == 16 ? 1 : KT == 8 ? 2 : KT == 4 ? 3 : KT == 2 ? 4 : 5;
    static_assert((32 >> SH32) == KT, "KT must divide a warp");
    // The tokens' k^_t, q^_s at the lane's columns, in registers for every record (KDA's G_t
    // too stayed in shared memory: in registers they spilled 24 / 60 bytes at KT 4 / 8, ptxas).
    float tk[KT][PL], tq[KT][PL];
    int tt[KT];
#pragma unroll
    for (int s = 0; s < KT; ++s) {
      const int t = tt[s] = min(hist + s, m - 1);  // tokens past T_b: any record, zeroed below
#pragma unroll
      for (int e = 0; e < PL; ++e) {
        const int c = lane + 32 * e;
        tk[s][e] = sK[t * K + c];
        tq[s][e] = sQ[s * K + c];
      }
    }
    for (int l = warp; l < m; l += nwarps) {
      float pk[KT], pq[KT];
#pragma unroll
      for (int s = 0; s < KT; ++s) pk[s] = 0.0f, pq[s] = 0.0f;
#pragma unroll
      for (int e = 0; e < PL; ++e) {
        const int c = lane + 32 * e;
        const float kl = sK[l * K + c];
        const float gl = KDA ? G(l, c) : 0.0f;
#pragma unroll
        for (int s = 0; s < KT; ++s) {
          // KDA: the decay is inside the dot; GDN: one decay per pair, applied after the sums.
          const float w = KDA ? __fmul_rn(kl, decay(__fsub_rn(G(tt[s], c), gl))) : kl;
          pk[s] = __fmaf_rn(w, tk[s][e], pk[s]);
          pq[s] = __fmaf_rn(w, tq[s][e], pq[s]);
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
  RSSM_TL_MARK(4);
  // The window's solve, shared by every state row (A and W are per block): with
  // A[s][s'] = beta_s ck[h+s'][s] (s' < s) and W[s][s'] = cq[h+s'][s] (s' <= s),
  // U = (I + A)^-1 R and y = hq + W U = hq + (W (I + A)^-1) R, R_s = beta_s (v_s - hk_s).
  // Thread s2 forms column s2 of the inverse by forward substitution in registers, then column s2
  // of W (I + A)^-1 from them (no barrier between: the column is the thread's own); rows past T_b
  // are identity (inverse) and zero (W).
  float* const sMinv = smem + sm.solve;  // [KT][KT] (I + A)^-1, unit lower triangular
  float* const sWM = sMinv + KT * KT;    // [KT][KT] W (I + A)^-1, lower triangular
  if (tid < KT) {
    const int s2 = tid;
    float x[KT];
#pragma unroll
    for (int s = 0; s < KT; ++s) {
      float v = s == s2 ? 1.0f : 0.0f;
      if (s > s2 && s < Tb) {
        const float bs = sBeta[s];
#pragma unroll
        for (int k2 = 0; k2 < s; ++k2)
          if (k2 >= s2) v = __fsub_rn(v, __fmul_rn(__fmul_rn(bs, sCoef[(hist + k2) * NV + s]), x[k2]));
      }
      x[s] = v;
      sMinv[s * KT + s2] = v;
    }
#pragma unroll
    for (int s = 0; s < KT; ++s) {
      float v = 0.0f;
      if (s < Tb)
#pragma unroll
        for (int k2 = 0; k2 <= s; ++k2)
          if (k2 >= s2) v = __fmaf_rn(sCoef[(hist + k2) * NV + KT + s], x[k2], v);
      sWM[s * KT + s2] = v;
    }
  }
  // Fold vectors of the history (flush rows): k^_j <- e^{G_{h-1} - G_j} . k^_j, in place.
  if (flush && hist > 0)
    for (int i = tid; i < hist * K; i += blockDim.x) {
      const int j = i / K, c = i % K;
      sK[i] = __fmul_rn(sK[i], decay(__fsub_rn(G(hist - 1, c), G(j, c))));
    }
  __syncthreads();
  RSSM_TL_MARK(5);

  // ---- phase 3: every row's [hk | hq] on the tensor cores (mma m16n8k8, fp32 as tf32 hi + lo
  // pairs: common/mma_tf32.cuh), a warp per 16-row m-tile; on flush rows the fold likewise. Then
  // per (row, token) the solve, y and the token's u.
  //   [hk | hq] = S0 · [vk | vq] + U_hist · [ck | cq]    (rows in M, the 2 KT columns in N)
  //   S0 <- fd ⊙ S0 + U_hist · Kf                         (rows in M, 8 state columns in N)
  // A lane (mg, mc) holds rows r0 = 16 mt + mg and r0 + 8, columns 16 kg + 4 mc .. + 3 of each
  // 16-column group kg: k-step 2 kg + e takes columns 16 kg + 4 mc + 2 e + {0, 1} as k = mc and
  // mc + 4 (the k order of a dot is free), and the fold's n-tile (kg, e) maps n = 2 c' + t to
  // column 16 kg + 4 c' + 2 e + t, so that a lane's accumulators are its own elements. The groups
  // stream RD = PD + SD ahead of their math through a ring of PD register and SD shared-memory
  // slots (phase 1 requested the first RD), running into the warp's next m-tile; a warp's rows
  // are its own, so the fold's stores race with no load. (The group loop stays rolled: unrolled,
  // 23 fewer instructions per group, the kernel 40% larger and 2-4% slower at T <= 4.)
  float* const sH = smem + sm.h;  // [V][HS] every row's [hk | hq]
  constexpr int HS = NW8 + 1;
  {
    const bool fold = flush && hist > 0;
    // U_hist as the A fragments of record k-step l0: a0 (r0, l0 + mc), a1 (r0 + 8, ..),
    // a2 (r0, l0 + mc + 4), a3 (r0 + 8, ..); zero past the rows and the history.
    auto u_frag = [&](int r0, int l0, Tf32Pair (&w)[4]) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int l = l0 + mc + (j >> 1) * 4, r = r0 + (j & 1) * 8;
        w[j] = Tf32Pair::of(l < hist && r < V ? sU[l * sm.us + r] : 0.0f);
      }
    };
#pragma unroll 1
    for (int mt = warp; mt < mts; mt += nwarps) {
      const int r0 = mt * 16 + mg;
      float dh[NT][4], dl[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) dh[nt][j] = dl[nt][j] = 0.0f;
#pragma unroll 1
      for (int kg0 = 0; kg0 < KG; kg0 += RD) {
#pragma unroll
        for (int pf = 0; pf < RD; ++pf) {
          const int kg = kg0 + pf;
          // Its slot takes the group RD on: of this m-tile, else of the warp's next one.
          const bool here = kg + RD < KG;
          const int nmt = here ? mt : mt + nwarps, nkg = here ? kg + RD : kg + RD - KG;
          float4 a[2];  // rows r0, r0 + 8 of group kg
          if (pf < PD) {
            a[0] = ahead[pf][0], a[1] = ahead[pf][1];
            if (nmt < mts) load_group(nmt, nkg, ahead[pf]);
          } else if (!staged) {  // (no room for the stage: loaded where it is used)
            load_group(mt, kg, a);
          } else {  // the slot's copy group is the older of the SD issued after it
            cp_async_wait<(SD > 0 ? SD - 1 : 0)>();
            const int j = pf - PD;
            a[0] = *reinterpret_cast<const float4*>(sStage + (j * 2) * 128);
            a[1] = *reinterpret_cast<const float4*>(sStage + (j * 2 + 1) * 128);
            if (nmt < mts) stage_group(nmt, nkg, j);
            cp_async_commit();  // (empty at the end: each slot's wait counts SD - 1 commits after it)
          }
          // element (h, e, t): row r0 + 8 h, column 16 kg + 4 mc + 2 e + t
          auto el = [&](int h, int e, int t) {
            const float4& v = a[h];
            return e ? (t ? v.w : v.z) : (t ? v.y : v.x);
          };
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const Tf32Pair s0[4] = {Tf32Pair::of(el(0, e, 0)), Tf32Pair::of(el(1, e, 0)),
                                    Tf32Pair::of(el(0, e, 1)), Tf32Pair::of(el(1, e, 1))};
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              const float* const bp = sVec + ((nt * (K / 8) + 2 * kg + e) * 32 + lane) * 4;
              const float4 bv = *reinterpret_cast<const float4*>(bp);
              const Tf32Pair b0{__float_as_uint(bv.x), __float_as_uint(bv.z)};
              const Tf32Pair b1{__float_as_uint(bv.y), __float_as_uint(bv.w)};
              mma_tf32(dh[nt], s0[0].hi, s0[1].hi, s0[2].hi, s0[3].hi, b0.hi, b1.hi);
              mma_tf32(dl[nt], s0[0].lo, s0[1].lo, s0[2].lo, s0[3].lo, b0.hi, b1.hi);
              mma_tf32(dl[nt], s0[0].hi, s0[1].hi, s0[2].hi, s0[3].hi, b0.lo, b1.lo);
            }
          }
          if (fold) {  // this group's 16 columns of the flushed checkpoint, then its store
            const float4 fd4 = *reinterpret_cast<const float4*>(sFd + 16 * kg + 4 * mc);
            const float fd[4] = {fd4.x, fd4.y, fd4.z, fd4.w};
            float d[2][4];  // n-tile e: c0 (r0, 2e), c1 (r0, 2e + 1), c2 / c3 row r0 + 8
#pragma unroll
            for (int e = 0; e < 2; ++e)
#pragma unroll
              for (int j = 0; j < 4; ++j)
                d[e][j] = __fmul_rn(fd[2 * e + (j & 1)], el(j >> 1, e, j & 1));
            const int colg = 16 * kg + 4 * (mg >> 1) + (mg & 1);  // the B column of n = mg
#pragma unroll 1
            for (int l0 = 0; l0 < hist; l0 += 8) {
              Tf32Pair w[4];
              u_frag(r0, l0, w);
              const int la = l0 + mc, lb = la + 4;
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const Tf32Pair b0 = Tf32Pair::of(la < hist ? sK[la * K + colg + 2 * e] : 0.0f);
                const Tf32Pair b1 = Tf32Pair::of(lb < hist ? sK[lb * K + colg + 2 * e] : 0.0f);
                mma_tf32_pairs<false>(d[e], w, b0, b1);
              }
            }
#pragma unroll
            for (int h = 0; h < 2; ++h)
              if (r0 + 8 * h < V) {
                const float o[4] = {d[0][2 * h], d[0][2 * h + 1], d[1][2 * h], d[1][2 * h + 1]};
                store16_stream(S0 + static_cast<int64_t>(r0 + 8 * h) * K + 16 * kg + 4 * mc, o);
              }
          }
        }
      }
      // + U_hist · [ck | cq]: records in K, column n of sCoef's rows (zero past NV).
#pragma unroll 1
      for (int l0 = 0; l0 < hist; l0 += 8) {
        Tf32Pair w[4];
        u_frag(r0, l0, w);
        const int la = l0 + mc, lb = la + 4;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int n = nt * 8 + mg;
          const Tf32Pair b0 = Tf32Pair::of(n < NV && la < hist ? sCoef[la * NV + n] : 0.0f);
          const Tf32Pair b1 = Tf32Pair::of(n < NV && lb < hist ? sCoef[lb * NV + n] : 0.0f);
          mma_tf32_pairs<false>(dl[nt], w, b0, b1);
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int r = r0 + (j >> 1) * 8, n = nt * 8 + 2 * mc + (j & 1);
          if (r < V) sH[r * HS + n] = __fadd_rn(dh[nt][j], dl[nt][j]);
        }
    }
  }
  __syncthreads();
  RSSM_TL_MARK(6);
  // Per row: R_s3 = beta (v - hk) for every token once, then per token U_s = sum Minv[s][s3] R_s3
  // (the token's record u) and y_s = hq_s + sum WM[s][s3] R_s3. Item i = (token group g, row r):
  // the block's threads split the tokens into tg groups where V leaves threads over (2 at V 128).
  const int tg = max(1, static_cast<int>(blockDim.x) / V);
  for (int i = tid; i < tg * V; i += blockDim.x) {
    const int g = i / V, r = i - g * V;
    const float* const hr = sH + r * HS;
    float Rt[KT];  // R_s3 of every token (R itself is the ring length)
#pragma unroll
    for (int s3 = 0; s3 < KT; ++s3)
      Rt[s3] = s3 < Tb ? __fmul_rn(sBeta[s3], __fsub_rn(sV[s3 * V + r], hr[s3])) : 0.0f;
    for (int s = g; s < Ty; s += tg) {
      float out = 0.0f;
      if (s < Tb) {
        float u = 0.0f;
        out = hr[KT + s];
#pragma unroll
        for (int s3 = 0; s3 < KT; ++s3) {
          u = __fmaf_rn(sMinv[s * KT + s3], Rt[s3], u);
          out = __fmaf_rn(sWM[s * KT + s3], Rt[s3], out);
        }
        ringu[static_cast<int64_t>(phys(hist + s)) * V + r] = u;
      }
      y[y_at(s, r)] = from_f32<TIn>(out);
    }
  }
  RSSM_TL_FINISH(7, flush && hist > 0);
}

}  // namespace replayssm::cuda::gdn
