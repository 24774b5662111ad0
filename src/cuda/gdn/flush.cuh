// The GDN / KDA ReplaySSM flush in a launch of its own (on the output-only route of the group
// kernel, and always in the split state modes; for GDN at larger batches the dispatcher runs its
// pipelined twin, flush_pipe.cuh): the ordinary launch (the group kernel with only = 1) leaves
// flush rows, this kernel serves only them. A flush row folds its h ring
// records and then the token into the checkpoint and writes it once:
//   S_h = ā'·S0 + Σ_{j<h} (c_j·u_j) k^_jᵀ, c_j = e^{g_{j+1} + .. + g_{h-1}}, ā' = e^{g_0 + .. +
//   g_{h-1}} (sums from the token backwards), then the conventional update with the token
//   through delta_rule_row(); y from it.
// KDA: the decay is per key channel, so c_j and ā' are vectors over K: the fold is
//   S_h = ā'⊙S0 + Σ_{j<h} u_j (c_j⊙k^_j)ᵀ  (ā' scales the columns of S0),
// c_j⊙k^_j formed in shared memory in place (one thread per channel), u_j unscaled.
// Default mode: every rounding is the group kernel's fold in the same order (replay_group.cuh), so
// checkpoints and outputs are bit-identical to it (a GPU test), and to the conventional step at
// h = 0. Split modes: see below.
// Why: as for Mamba-2 (mamba2/flush.cuh, bench/NOTES.md "Mamba-2 flush kernel"), a flush row
// folding inside the ordinary launch stops streaming and straggles: at Qwen3.5-4B batch 256 a
// flush cost 1.8x a conventional step (bench/NOTES_gdn.md). Here an item is rows
// [v0, v0 + rows_per_block) of one value head of one flush row: the checkpoint goes straight into
// registers (RPT consecutive rows per thread), the ring rows are copied by cp.async (k^_j of the
// key head [h][K], u_j of the rows [h][rows], KDA's g_j [h][K], float32 as stored) while warp 0
// forms the record weights and the token (k^, q^, alpha·k^ into shared memory: registers are for
// the state rows), u_j is scaled by c_j in place (KDA: k^_j by c_j), and the fold is a
// register-tiled rank-h update.
// Split state modes (fp32/bf16, fp32/fp16, fp32/fp8, fp32/nvfp4, and fp16sr/nvfp4 over its float16
// checkpoint; EXACT = true): the ordinary steps read a copy, so the ring's u came from copy reads
// and must not enter the recurrence. The flush recomputes every u_j from the checkpoint (fp32:
// exactly as the fp32 mode's ordinary step j computed it
// (replay_group.cuh epilogue, the same roundings in the same order)):
//   u_j = beta_j (v_j - hk_j),  hk_j = A_j·(S0_r·k^_j) + Σ_{i<j} u_i ck_{j,i},
//   A_j = e^{g_j + g_{j-1} + .. + g_0},  ck_{j,i} = e^{g_j + .. + g_{i+1}} k^_i·k^_j
// (KDA: the decay per channel inside the dots, S0_r·(e^{g_j + .. + g_0} ⊙ k^_j) and
// ck_{j,i} = (e^{g_j + .. + g_{i+1}} ⊙ k^_i)·k^_j, A = 1), from the ring's v, beta, k^ and g, then
// folds them as above and writes the checkpoint and its 16-bit copy: the flushed fp32 checkpoint
// is the fp32 mode's (output-only route of the group kernel, the dispatcher's) bit for bit (a GPU
// test), in one pass over S0 instead of h sequential delta-rule updates (bench/NOTES_gdn.md
// "Session 18").
// Grid: persistent over the flush rows' items (common/flush_rows.cuh); shared memory
// FlushSmem (launch.h).
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/flush_rows.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/ring_window.cuh"
#include "cuda/gdn/flush_parts.cuh"
#include "cuda/gdn/launch.h"
#include "cuda/gdn/step_math.cuh"

namespace replayssm::cuda::gdn {

/// Split modes (flush_item with EXACT): unpacks the thread's checkpoint rows into s and turns the
/// staged ring rows into the fold's: v_j into u_j recomputed from the checkpoint as the fp32
/// mode's ordinary step j computed it (header), then GDN c_j·u_j; KDA u_j (sK still k^_j). Needs
/// the ring rows (sK, sU = v, sG, sBeta) and GDN's c_j in shared memory; every thread of the
/// block calls it (it synchronises the block, but not before it returns).
template <class TState, int K, bool KDA, int RPT>
__device__ __forceinline__ void exact_u(
    const FlushSmem& sm, float* smem, int R, int hist, int nrows, int r0, int lr,
    const uint4 (&raw)[RPT][Layout<sizeof(TState), K>::kChunksPerLane],
    float (&s)[RPT][Layout<sizeof(TState), K>::kCols]) {
  using Lay = Layout<sizeof(TState), K>;
  constexpr int COLS = Lay::kCols, VEC = Lay::kVec, CPL = Lay::kChunksPerLane;
  constexpr int LPR = Lay::kLanesPerRow;
  constexpr int TPC = LPR / RPT;  // records per transposed sum (RPT rows x TPC records = LPR)
  const int tid = threadIdx.x, nthreads = blockDim.x;
  float* const sK = smem + sm.k;
  float* const sU = smem + sm.u;
  float* const sG = smem + sm.g;
  float* const sC = smem + sm.c;
  float* const sCK = smem + sm.ck;      // [R][R] ck_{j,i} (i < j); GDN: first the weights
  float* const sA = smem + sm.a;        // [R] A_j (GDN)
  float* const sBeta = smem + sm.beta;  // [R] beta_j (flush_item loads it)
  float* const sDk = smem + sm.dk;      // [R][rows] S0_r·k^_j (KDA: ·sBk_j), then u_j
  float* const sBk = smem + sm.bk;      // KDA: [R][K] e^{g_j + .. + g_0} ⊙ k^_j
  auto lane_row = [&](const float* row, float* out) { lane_cols<Lay>(row, lr, out); };

  // 1a. The gate sums, as the chain forms them (from g_j down, one gate at a time). GDN: one
  //     thread per record j: the weights e^{g_j + .. + g_{i+1}} of its pairs (into sCK) and A_j.
  //     KDA: per (record, channel) e^{g_j + .. + g_0} ⊙ k^_j.
  if constexpr (KDA) {
    for (int idx = tid; idx < hist * K; idx += nthreads) {
      const int j = idx / K, k = idx - j * K;
      float acc = sG[j * K + k];
      for (int m = j - 1; m >= 0; --m) acc = __fadd_rn(acc, sG[m * K + k]);
      sBk[j * K + k] = __fmul_rn(expf(acc), sK[j * K + k]);
    }
  } else {
    for (int j = tid; j < hist; j += nthreads) {
      float acc = sG[j];
      for (int i = j - 1; i >= 0; --i) {
        sCK[j * R + i] = expf(acc);
        acc = __fadd_rn(acc, sG[i]);
      }
      sA[j] = expf(acc);
    }
    __syncthreads();
  }
  // 1b. ck_{j,i}: a row group of LPR lanes per record j, its pairs i = j-1, j-2, .. LPR at a
  //     time, each lane's columns in the chain's order (KDA: the weight per channel inside, its
  //     running sum one gate per pair), summed by one transposed butterfly (lane_group_sum's
  //     additions). Rounds are whole-block so that every lane of a warp shuffles.
  constexpr int GPW = 32 / LPR;  // row groups per warp
  const int ngroups = nthreads / LPR, grp = tid / LPR;
  for (int base = 1; base < hist; base += ngroups) {
    const int j = base + grp;  // this group's record (none past hist)
    const bool live = j < hist;
    // Chunks of LPR pairs: as many as the warp's last live record has (a warp-uniform count).
    const int jw = min(base + (grp / GPW) * GPW + GPW - 1, hist - 1);
    const int nchunk = (jw + LPR - 1) / LPR;
    float kj[COLS], run[KDA ? COLS : 1];
    if (live) lane_row(sK + j * K, kj);
    if constexpr (KDA) {
      if (live) lane_row(sG + j * K, run);
    }
    for (int ch = 0; ch < nchunk; ++ch) {
      const int i0 = j - 1 - ch * LPR;
      float part[LPR];
#pragma unroll
      for (int m = 0; m < LPR; ++m) {
        const int i = i0 - m;
        float pk = 0.0f;
        if (live && i >= 0) {
          float ki[COLS];
          lane_row(sK + i * K, ki);
          if constexpr (KDA) {
            if (i < j - 1) {
              float gi[COLS];
              lane_row(sG + (i + 1) * K, gi);
#pragma unroll
              for (int e = 0; e < COLS; ++e) run[e] = __fadd_rn(run[e], gi[e]);
            }
#pragma unroll
            for (int e = 0; e < COLS; ++e) pk = __fmaf_rn(__fmul_rn(expf(run[e]), ki[e]), kj[e], pk);
          } else {
#pragma unroll
            for (int e = 0; e < COLS; ++e) pk = __fmaf_rn(ki[e], kj[e], pk);
          }
        }
        part[m] = pk;
      }
      const float kk = transposed_sum<LPR, LPR>(part, lr);
      const int i = i0 - lr;
      if (live && i >= 0) sCK[j * R + i] = KDA ? kk : __fmul_rn(sCK[j * R + i], kk);
    }
  }

  // 2. The checkpoint rows' dots with k^_j (KDA: with sBk_j), the stream threads' order, TPC
  //    records at a time summed over the row group by one transposed butterfly, into sDk[j][r].
#pragma unroll
  for (int i = 0; i < RPT; ++i)
#pragma unroll
    for (int c = 0; c < CPL; ++c) unpack16<TState>(raw[i][c], &s[i][c * VEC]);
  __syncthreads();  // (KDA: sBk)
  for (int j0 = 0; j0 < hist; j0 += TPC) {
    float part[LPR];
#pragma unroll
    for (int tt = 0; tt < TPC; ++tt) {
      float kq[COLS];
      lane_row((KDA ? sBk : sK) + min(j0 + tt, hist - 1) * K, kq);  // past hist: unused
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        float pk = 0.0f;
#pragma unroll
        for (int e = 0; e < COLS; ++e) pk = __fmaf_rn(s[i][e], kq[e], pk);
        part[i * TPC + tt] = pk;
      }
    }
    const float sum = transposed_sum<LPR, LPR>(part, lr);
    const int i = lr / TPC, j = j0 + lr % TPC;
    if (j < hist && r0 + i < nrows) sDk[j * sm.rows + r0 + i] = sum;
  }
  __syncthreads();

  // 3. Per row (one thread each), the records in order: hk_j = A_j·dk_j + Σ_{i<j} u_i ck_{j,i},
  //    u_j = beta_j (v_j - hk_j), as the epilogue of the ordinary step forms them; u_j replaces
  //    dk_j (read by the later records) and v_j (GDN: as c_j·u_j, the fold's operand). The first
  //    UR records' u stay in registers (a fully unrolled triangle), the rest come back from sDk.
  constexpr int UR = 16;
  for (int r = tid; r < nrows; r += nthreads) {
    float u[UR];
    auto record = [&](int j, float hk) {
      const float uj = __fmul_rn(sBeta[j], __fsub_rn(sU[j * sm.rows + r], hk));
      sDk[j * sm.rows + r] = uj;
      sU[j * sm.rows + r] = KDA ? uj : __fmul_rn(sC[j], uj);
      return uj;
    };
    auto hk0 = [&](int j) {
      const float dk = sDk[j * sm.rows + r];
      return KDA ? dk : __fmul_rn(sA[j], dk);
    };
#pragma unroll
    for (int j = 0; j < UR; ++j) {
      if (j < hist) {
        float hk = hk0(j);
#pragma unroll
        for (int i = 0; i < j; ++i) hk = __fmaf_rn(u[i], sCK[j * R + i], hk);
        u[j] = record(j, hk);
      }
    }
    for (int j = UR; j < hist; ++j) {
      float hk = hk0(j);
#pragma unroll
      for (int i = 0; i < UR; ++i) hk = __fmaf_rn(u[i], sCK[j * R + i], hk);
      for (int i = UR; i < j; ++i) hk = __fmaf_rn(sDk[i * sm.rows + r], sCK[j * R + i], hk);
      record(j, hk);
    }
  }
}

/// One flush item: rows [v0, v0 + nrows) of value head vh of batch row b (a flush row of slot).
/// EXACT: a split mode's flush (u recomputed from ring v and beta; a 16-bit copy written too, when
/// p.copy is set).
template <class TIn, class TState, int K, bool KDA, int RPT, bool EXACT>
__device__ __forceinline__ void flush_item(const StepParams& p, const FlushSmem& sm, float* smem,
                                           int b, int slot, int vh, int v0, int nrows) {
  using Lay = Layout<sizeof(TState), K>;
  using Tok = Token<TIn, sizeof(TState), K, KDA>;
  constexpr int COLS = Lay::kCols, VEC = Lay::kVec, CPL = Lay::kChunksPerLane;
  constexpr int LPR = Lay::kLanesPerRow;
  static_assert(RPT % 4 == 0, "a thread's rows are read as float4 from the ring u rows");
  static_assert(!EXACT || LPR % RPT == 0, "split modes: a row group's sums spread over its lanes");
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

  // Ring rows as stored (float32), 16-byte asynchronous copies all in flight at once (split
  // modes: v in place of u, which becomes u once recomputed).
  const int kh = vh / p.group;
  const float* const ringk = p.ring_k + (static_cast<int64_t>(slot) * p.H + kh) * R * K;
  const float* const ringu = (EXACT ? p.ring_v : p.ring_u) + sv * R * p.V + v0;
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
  if (EXACT && tid < 32)  // split modes: the records' beta
    for (int j = lane; j < hist; j += 32) smem[sm.beta + j] = p.ring_beta[sv * R + phys(j)];
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
      token_to_smem(w, sTk, sTq, sTa, sTal, lr);
      if (lane == 0) sHd[1] = w.alpha[0], sHd[2] = w.beta;
    }
  }
  cp_async_wait<0>();
  __syncthreads();
  float s[RPT][COLS];
  if constexpr (EXACT) exact_u<TState, K, KDA, RPT>(sm, smem, R, hist, nrows, r0, lr, raw, s);
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
  } else if constexpr (!EXACT) {  // (exact_u scaled them)
    for (int idx = tid; idx < hist * nrows; idx += blockDim.x) {  // c_j·u_j[r], in place
      const int j = idx / nrows, r = idx - j * nrows;
      sU[j * sm.rows + r] = __fmul_rn(sC[j], sU[j * sm.rows + r]);
    }
  }
  __syncthreads();

  float abar[KDA ? COLS : 1];
#pragma unroll
  for (int c = 0; c < CPL; ++c)
#pragma unroll
    for (int v = 0; v < (KDA ? VEC : 1); ++v)
      abar[KDA ? c * VEC + v : 0] = KDA ? sC[Lay::col(c, lr) + v] : sHd[0];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    if constexpr (!EXACT)  // (exact_u unpacked them for its dots)
#pragma unroll
      for (int c = 0; c < CPL; ++c) unpack16<TState>(raw[i][c], &s[i][c * VEC]);
#pragma unroll
    for (int e = 0; e < COLS; ++e) s[i][e] = __fmul_rn(abar[KDA ? e : 0], s[i][e]);
  }
#pragma unroll 2
  for (int j = 0; j < hist; ++j) {
    float kq[COLS];
    lane_cols<Lay>(sK + j * K, lr, kq);
    fold_record<false>(s, kq, sU + j * sm.rows, r0, nrows, 1.0f);
  }

  // The conventional update with the token (the conventional kernel's own code), y, and the new
  // checkpoint written once. The token's columns come back from shared memory only now: through
  // the fold the registers hold the state rows.
  Tok t;
  token_from_smem(t, sTk, sTq, sTa, sTal, lr);
  const SrSlot sr = sr_slot(p.sr, slot, static_cast<TState*>(p.state) +
                                            static_cast<int64_t>(slot) * p.HV * p.V * K);
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
    store_row<TState, Lay>(S + static_cast<int64_t>(r) * K, lr, s[i], sr);
    if (EXACT && p.copy) {  // a 16-bit read copy, rounded from the same fp32 row (quantised
                            // copies are encoded after the launch: split_modes.h)
      const int64_t off = (sv * p.V + v0 + r) * K;
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

/// A persistent grid (a few blocks per SM) over the flush rows' items (flush row, value head,
/// split): common/flush_rows.cuh.
template <class TIn, class TState, int K, bool KDA, int RPT, bool EXACT>
__global__ void __launch_bounds__(kFlushThreads, EXACT ? 2 : 3) flush_kernel(const StepParams p) {
  extern __shared__ __align__(16) float smem[];
  const FlushSmem sm(p.R, K, p.rows_per_block, KDA ? K : 1, EXACT);
  auto item = [&](int b, int slot, int rest) {
    const int vh = rest / p.nsplit, v0 = (rest - vh * p.nsplit) * p.rows_per_block;
    flush_item<TIn, TState, K, KDA, RPT, EXACT>(p, sm, smem, b, slot, vh, v0,
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
