// The GDN ReplaySSM flush in a launch of its own (the dispatcher's choice on the output-only route
// of the group kernel, scalar gates, default state mode): the ordinary launch (the group kernel
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
// [v0, v0 + rows_per_block) of one value head of one flush row. A block takes a contiguous range
// of items, two deep: the next item's checkpoint rows are copied by cp.async into the other of
// two shared-memory stages while the block folds the current one (every thread copies and later
// reads only its own RPT consecutive rows and lane chunks); the item's ring rows are copied by
// cp.async after its cursor (k^_j of the key head [h][K], u_j of the rows [h][rows], both float32
// as stored) while warp 0 forms the record weights and the token (k^, q^, alpha·k^ into shared
// memory: registers are for the state rows), u_j is scaled by c_j in place (KDA: k^_j by c_j),
// and the fold is a register-tiled rank-h update.
// Grid: persistent over the flush rows' items (common/flush_rows.cuh lists them); shared memory
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
struct FlushItem {
  int b = -1, slot = 0, vh = 0, v0 = 0, nrows = 0;
  /// Item `it` of a pass whose flush rows are list[] (batch rows) and slots[].
  __device__ static FlushItem of(const StepParams& p, const int* list, const int* slots, int it) {
    const int per_row = p.HV * p.nsplit;
    const int fr = it / per_row, rest = it - fr * per_row;
    FlushItem m;
    m.b = list[fr], m.slot = slots[fr];
    m.vh = rest / p.nsplit;
    m.v0 = (rest - m.vh * p.nsplit) * p.rows_per_block;
    m.nrows = min(p.rows_per_block, p.V - m.v0);
    return m;
  }
};

/// The thread's first row of an item (RPT consecutive rows; Lay's row groups over the warps).
template <class Lay, int RPT>
__device__ __forceinline__ int flush_row0() {
  const int lane = threadIdx.x & 31;
  return ((threadIdx.x >> 5) * Lay::kRowsPerWarp + lane / Lay::kLanesPerRow) * RPT;
}

/// Copies this thread's checkpoint rows and chunks of item m into stage st (cp.async), then
/// commits one copy group — an empty one where m is not an item (m.b < 0).
template <class TState, int K, int RPT>
__device__ __forceinline__ void stage_checkpoint(const StepParams& p, const FlushSmem& sm,
                                                 float* smem, const FlushItem& m, int st) {
  using Lay = Layout<sizeof(TState), K>;
  if (m.b >= 0) {
    const int lr = (threadIdx.x & 31) % Lay::kLanesPerRow, r0 = flush_row0<Lay, RPT>();
    const TState* const S =
        static_cast<const TState*>(p.state) +
        ((static_cast<int64_t>(m.slot) * p.HV + m.vh) * p.V + m.v0) * K;
    TState* const tile = reinterpret_cast<TState*>(smem + sm.ckpt + st * sm.stage);
#pragma unroll
    for (int i = 0; i < RPT; ++i)
      if (r0 + i < m.nrows)
#pragma unroll
        for (int c = 0; c < Lay::kChunksPerLane; ++c)
          cp_async16(tile + (r0 + i) * K + Lay::col(c, lr),
                     S + static_cast<int64_t>(r0 + i) * K + Lay::col(c, lr));
  }
  cp_async_commit();
}

/// Folds item m, whose checkpoint rows were staged into stage st one item ago; stages the next
/// item (`next`, or none) into the other stage once its own ring copies are in flight.
template <class TIn, class TState, int K, bool KDA, int RPT>
__device__ __forceinline__ void flush_item(const StepParams& p, const FlushSmem& sm, float* smem,
                                           const FlushItem& m, int st, const FlushItem& next) {
  const int b = m.b, slot = m.slot, vh = m.vh, v0 = m.v0, nrows = m.nrows;
  using Lay = Layout<sizeof(TState), K>;
  using Tok = Token<TIn, sizeof(TState), K, KDA>;
  constexpr int COLS = Lay::kCols, VEC = Lay::kVec, CPL = Lay::kChunksPerLane;
  constexpr int LPR = Lay::kLanesPerRow;
  static_assert(RPT % 4 == 0, "a thread's rows are read as float4 from the ring u rows");
  const int tid = threadIdx.x, lane = tid & 31;
  const int lr = lane % LPR;
  const int r0 = flush_row0<Lay, RPT>();  // the thread's first row
  const int R = p.R;
  const RingWindow win = RingWindow::of(p.origin[slot], p.hist[slot], R, 1);  // h <= R - 1
  const int hist = win.hist;
  auto phys = [&](int j) { return win.phys(j); };

  const int64_t sv = static_cast<int64_t>(slot) * p.HV + vh;
  TState* const S = static_cast<TState*>(p.state) + (sv * p.V + v0) * K;
  const TState* const tile = reinterpret_cast<const TState*>(smem + sm.ckpt + st * sm.stage);

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
  stage_checkpoint<TState, K, RPT>(p, sm, smem, next, st ^ 1);  // the next item, a group behind
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
  cp_async_wait<1>();  // this item's checkpoint rows (one item ago) and ring rows; not the next's
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
    tile_row<TState, Lay>(tile, r0 + i, lr, r0 + i < nrows, s[i]);
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

/// A persistent grid (a few blocks per SM): each pass lists the flush rows (common/flush_rows.cuh)
/// and every block takes a contiguous, balanced range of the pass's items (flush row, value head,
/// split), two deep.
template <class TIn, class TState, int K, bool KDA, int RPT>
__global__ void __launch_bounds__(kFlushThreads, 3) flush_kernel(const StepParams p) {
  extern __shared__ __align__(16) float smem[];
  const FlushSmem sm(p.R, K, p.rows_per_block, KDA ? K : 1, static_cast<int>(sizeof(TState)));
  int* const list = reinterpret_cast<int*>(smem + sm.list);
  int* const slots = reinterpret_cast<int*>(smem + sm.slots);
  const int per_row = p.HV * p.nsplit;
  for (int b0 = 0; b0 < p.batch; b0 += kFlushScan) {
    const int nf = list_flush_rows(p.slot_ids, p.is_flush, p.slots, b0,
                                   min(b0 + kFlushScan, p.batch), list, slots,
                                   reinterpret_cast<int*>(smem + sm.warps));
    const int64_t total = static_cast<int64_t>(nf) * per_row;
    const int it0 = static_cast<int>(total * blockIdx.x / gridDim.x);
    const int it1 = static_cast<int>(total * (blockIdx.x + 1) / gridDim.x);
    if (it0 < it1) {
      FlushItem cur = FlushItem::of(p, list, slots, it0);
      stage_checkpoint<TState, K, RPT>(p, sm, smem, cur, 0);
      for (int it = it0; it < it1; ++it) {
        const FlushItem next = it + 1 < it1 ? FlushItem::of(p, list, slots, it + 1) : FlushItem{};
        flush_item<TIn, TState, K, KDA, RPT>(p, sm, smem, cur, (it - it0) & 1, next);
        __syncthreads();  // the next item reuses the block's ring staging
        cur = next;
      }
    }
    __syncthreads();  // the list is rewritten for the next rows
  }
  // Launched to overlap the ordinary launch (Plan::overlap), this kernel reads nothing that
  // launch writes; it still ends only after it, so that what follows in the stream sees both.
  pdl_wait();
}

}  // namespace replayssm::cuda::gdn
