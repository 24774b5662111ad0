// The GDN / KDA ReplaySSM flush in a launch of its own (the dispatcher's choice on the output-only
// route of the group kernel, default state mode): the ordinary launch (the group kernel
// with only = 1) leaves flush rows, this kernel serves only them. A flush row folds its h ring
// records and then the token into the checkpoint and writes it once:
//   S_h = ā'·S0 + Σ_{j<h} (c_j·u_j) k^_jᵀ, c_j = e^{g_{j+1} + .. + g_{h-1}}, ā' = e^{g_0 + .. +
//   g_{h-1}} (sums from the token backwards), then the conventional update with the token
//   through delta_rule_row(); y from it.
// KDA: the decay is per key channel, so c_j and ā' are vectors over K: the fold is
//   S_h = ā'⊙S0 + Σ_{j<h} u_j (c_j⊙k^_j)ᵀ  (ā' scales the columns of S0),
// c_j⊙k^_j formed in shared memory in place (one thread per channel), u_j unscaled.
// Every rounding is the group kernel's fold in the same order (replay_group.cuh), so checkpoints
// and outputs are bit-identical to it (a GPU test), and to the conventional step at h = 0.
// Why: as for Mamba-2 (mamba2/flush.cuh, bench/NOTES.md "Mamba-2 flush kernel"), a flush row
// folding inside the ordinary launch stops streaming and straggles: at Qwen3.5-4B batch 256 a
// flush cost 1.8x a conventional step (bench/NOTES_gdn.md). Here an item is rows
// [v0, v0 + rows_per_block) of one value head of one flush row: the checkpoint goes straight into
// registers (RPT consecutive rows per thread), the ring rows are copied by cp.async (k^_j of the
// key head [h][K], u_j of the rows [h][rows], KDA's g_j [h][K], float32 as stored) while warp 0
// forms the record weights and the token (k^, q^, alpha·k^ into shared memory: registers are for
// the state rows), u_j is scaled by c_j in place (KDA: k^_j by c_j), and the fold is a
// register-tiled rank-h update.
// Grid: persistent over the flush rows' items (common/flush_rows.cuh); shared memory
// FlushSmem (launch.h).
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/flush_rows.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/ring_window.cuh"
#include "cuda/gdn/launch.h"
#include "cuda/gdn/step_math.cuh"

namespace replayssm::cuda::gdn {

/// One flush item: rows [v0, v0 + nrows) of value head vh of batch row b (a flush row of slot).
template <class TIn, class TState, int K, bool KDA, int RPT>
__device__ __forceinline__ void flush_item(const StepParams& p, const FlushSmem& sm, float* smem,
                                           int b, int slot, int vh, int v0, int nrows) {
  using Lay = Layout<sizeof(TState), K>;
  using Tok = Token<TIn, sizeof(TState), K, KDA>;
  constexpr int COLS = Lay::kCols, VEC = Lay::kVec, CPL = Lay::kChunksPerLane;
  constexpr int LPR = Lay::kLanesPerRow;
  static_assert(RPT % 4 == 0, "a thread's rows are read as float4 from the ring u rows");
  const int tid = threadIdx.x, lane = tid & 31;
  const int lr = lane % LPR;
  const int r0 = ((tid >> 5) * Lay::kRowsPerWarp + lane / LPR) * RPT;  // the thread's first row
  const int R = p.R;
  const RingWindow win = RingWindow::of(p.origin[slot], p.hist[slot], R, 1);  // h <= R - 1
  const int hist = win.hist;
  auto phys = [&](int j) { return win.phys(j); };

  // The checkpoint rows of this thread, straight into registers (all requested before any use).
  const int64_t sv = static_cast<int64_t>(slot) * p.HV + vh;
  TState* const S = static_cast<TState*>(p.state) + (sv * p.V + v0) * K;
  uint4 raw[RPT][CPL];
#pragma unroll
  for (int i = 0; i < RPT; ++i)
#pragma unroll
    for (int c = 0; c < CPL; ++c)
      raw[i][c] = r0 + i < nrows ? load16_raw_stream(S + static_cast<int64_t>(r0 + i) * K +
                                                     Lay::col(c, lr))
                                 : make_uint4(0, 0, 0, 0);

  float* const sK = smem + sm.k;        // [R][K] ring k^ by logical record (KDA: then c_j⊙k^_j)
  float* const sU = smem + sm.u;        // [R][rows] ring u (GDN: then c_j·u_j)
  float* const sG = smem + sm.g;        // [R][gw] ring g by logical record
  float* const sC = smem + sm.c;        // GDN: [R] c_j; KDA: [K] ā' per channel
  float* const sHd = smem + sm.head;    // ā' (GDN), the token's alpha (GDN) and beta
  float* const sTal = smem + sm.tal;    // KDA: [K] the token's alpha per channel
  float* const sTk = smem + sm.tk;      // [K] the token's k^
  float* const sTq = smem + sm.tq;      // [K] the token's q^ (scaled)
  float* const sTa = smem + sm.ta;      // [K] the token's alpha·k^

  // Ring rows as stored (float32), 16-byte asynchronous copies all in flight at once.
  const int kh = vh / p.group;
  const float* const ringk = p.ring_k + (static_cast<int64_t>(slot) * p.H + kh) * R * K;
  const float* const ringu = p.ring_u + sv * R * p.V + v0;
  const int cK = K / 4, cU = nrows / 4;  // nrows: a multiple of 4 (the group kernel's V)
  const int cG = K / 4;                   // KDA: the records' gate rows too
  const float* const ringg = p.ring_g + sv * R * (KDA ? K : 1);
  for (int idx = tid; idx < hist * (cK + cU + (KDA ? cG : 0)); idx += blockDim.x) {
    if (idx < hist * cK) {
      const int j = idx / cK, c = idx - j * cK;
      cp_async16(sK + j * K + 4 * c, ringk + static_cast<int64_t>(phys(j)) * K + 4 * c);
    } else if (idx < hist * (cK + cU)) {
      const int m = idx - hist * cK, j = m / cU, c = m - j * cU;
      cp_async16(sU + j * sm.rows + 4 * c, ringu + static_cast<int64_t>(phys(j)) * p.V + 4 * c);
    } else {
      const int m = idx - hist * (cK + cU), j = m / cG, c = m - j * cG;
      cp_async16(sG + j * K + 4 * c, ringg + static_cast<int64_t>(phys(j)) * K + 4 * c);
    }
  }
  cp_async_commit();
  if (!KDA && tid < 32) {  // the record weights, as the group kernel's chain lane forms them
    for (int j = lane; j < hist; j += 32) sG[j] = ringg[phys(j)];
    __syncwarp();
    if (lane == 0) {
      float acc = 0.0f;
      for (int j = hist - 1; j >= 0; --j) {
        sC[j] = expf(acc);
        acc = __fadd_rn(acc, sG[j]);
      }
      sHd[0] = expf(acc);
    }
  }
  if (tid < 32) {  // the token of (b, vh), formed by warp 0 in the lanes' layout, kept in smem
    Tok w;
    w.load(p, b, vh, lr);
    if (lane < LPR) {
#pragma unroll
      for (int c = 0; c < CPL; ++c)
#pragma unroll
        for (int v = 0; v < VEC; ++v) {
          const int i = c * VEC + v, col = Lay::col(c, lr) + v;
          sTk[col] = w.khat[i], sTq[col] = w.qhat[i], sTa[col] = w.ak[i];
          if constexpr (KDA) sTal[col] = w.alpha[i];
        }
      if (lane == 0) sHd[1] = w.alpha[0], sHd[2] = w.beta;
    }
  }
  cp_async_wait<0>();
  __syncthreads();
  if constexpr (KDA) {
    // Per key channel, as the group kernel's chain forms them: the gate sums from the newest
    // record back, c_j⊙k^_j in place, then ā'.
    for (int k = tid; k < K; k += blockDim.x) {
      float acc = 0.0f;
      for (int j = hist - 1; j >= 0; --j) {
        sK[j * K + k] = __fmul_rn(expf(acc), sK[j * K + k]);
        acc = __fadd_rn(acc, sG[j * K + k]);
      }
      sC[k] = expf(acc);
    }
  } else {
    for (int idx = tid; idx < hist * nrows; idx += blockDim.x) {  // c_j·u_j[r], in place
      const int j = idx / nrows, r = idx - j * nrows;
      sU[j * sm.rows + r] = __fmul_rn(sC[j], sU[j * sm.rows + r]);
    }
  }
  __syncthreads();

  float s[RPT][COLS];
  float abar[KDA ? COLS : 1];
#pragma unroll
  for (int c = 0; c < CPL; ++c)
#pragma unroll
    for (int v = 0; v < (KDA ? VEC : 1); ++v)
      abar[KDA ? c * VEC + v : 0] = KDA ? sC[Lay::col(c, lr) + v] : sHd[0];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
#pragma unroll
    for (int c = 0; c < CPL; ++c) unpack16<TState>(raw[i][c], &s[i][c * VEC]);
#pragma unroll
    for (int e = 0; e < COLS; ++e) s[i][e] = __fmul_rn(abar[KDA ? e : 0], s[i][e]);
  }
#pragma unroll 2
  for (int j = 0; j < hist; ++j) {
    float kq[COLS];
#pragma unroll
    for (int c = 0; c < CPL; ++c)
#pragma unroll
      for (int v = 0; v < VEC; v += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(sK + j * K + Lay::col(c, lr) + v);
        kq[c * VEC + v] = k4.x, kq[c * VEC + v + 1] = k4.y;
        kq[c * VEC + v + 2] = k4.z, kq[c * VEC + v + 3] = k4.w;
      }
#pragma unroll
    for (int i0 = 0; i0 < RPT; i0 += 4) {
      const int rq = r0 + i0 < nrows ? r0 + i0 : 0;  // four rows, all valid or none
      const float4 u4 = *reinterpret_cast<const float4*>(sU + j * sm.rows + rq);
      const float uf[4] = {u4.x, u4.y, u4.z, u4.w};
#pragma unroll
      for (int f = 0; f < 4; ++f)
#pragma unroll
        for (int e = 0; e < COLS; ++e) s[i0 + f][e] = __fmaf_rn(uf[f], kq[e], s[i0 + f][e]);
    }
  }

  // The conventional update with the token (the conventional kernel's own code), y, and the new
  // checkpoint written once. The token's columns come back from shared memory only now: through
  // the fold the registers hold the state rows.
  Tok t;
#pragma unroll
  for (int c = 0; c < CPL; ++c)
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      const int i = c * VEC + v, col = Lay::col(c, lr) + v;
      t.khat[i] = sTk[col], t.qhat[i] = sTq[col], t.ak[i] = sTa[col];
      if constexpr (KDA) t.alpha[i] = sTal[col];
    }
  if constexpr (!KDA) t.alpha[0] = sHd[1];
  t.beta = sHd[2];
  const TIn* const vin = static_cast<const TIn*>(p.v) + (static_cast<int64_t>(b) * p.HV + vh) * p.V;
  TIn* const y = static_cast<TIn*>(p.y) + (static_cast<int64_t>(b) * p.HV + vh) * p.V;
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = r0 + i;
    const bool valid = r < nrows;
    const float vv = valid ? to_f32(vin[v0 + r]) : 0.0f;
    const float2 yu = delta_rule_row(s[i], t, vv);
    if (!valid) continue;
    if (lr == 0) y[v0 + r] = from_f32<TIn>(yu.x);
    store_row<TState, Lay>(S + static_cast<int64_t>(r) * K, lr, s[i]);
  }
}

/// A persistent grid (a few blocks per SM) over the flush rows' items (flush row, value head,
/// split): common/flush_rows.cuh.
template <class TIn, class TState, int K, bool KDA, int RPT>
__global__ void __launch_bounds__(kFlushThreads, 3) flush_kernel(const StepParams p) {
  extern __shared__ __align__(16) float smem[];
  const FlushSmem sm(p.R, K, p.rows_per_block, KDA ? K : 1);
  auto item = [&](int b, int slot, int rest) {
    const int vh = rest / p.nsplit, v0 = (rest - vh * p.nsplit) * p.rows_per_block;
    flush_item<TIn, TState, K, KDA, RPT>(p, sm, smem, b, slot, vh, v0,
                                         min(p.rows_per_block, p.V - v0));
  };
  for_each_flush_item(p.slot_ids, p.is_flush, p.slots, p.batch, p.HV * p.nsplit,
                      reinterpret_cast<int*>(smem + sm.list),
                      reinterpret_cast<int*>(smem + sm.warps), item);
  // Launched to overlap the ordinary launch (Plan::overlap), this kernel reads nothing that
  // launch writes; it still ends only after it, so that what follows in the stream sees both.
  pdl_wait();
}

}  // namespace replayssm::cuda::gdn
