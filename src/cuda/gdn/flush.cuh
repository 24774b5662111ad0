// The GDN ReplaySSM flush in a launch of its own (the dispatcher's choice on the output-only route
// of the group kernel, scalar gates, default state mode): the ordinary launch (the group kernel
// with only = 1) leaves flush rows, this kernel serves only them. A flush row folds its h ring
// records and then the token into the checkpoint and writes it once:
//   S_h = ā'·S0 + Σ_{j<h} (c_j·u_j) k^_jᵀ, c_j = e^{g_{j+1} + .. + g_{h-1}}, ā' = e^{g_0 + .. +
//   g_{h-1}} (sums from the token backwards), then the conventional update with the token
//   through delta_rule_row(); y from it.
// Every rounding is the group kernel's fold in the same order (replay_group.cuh), so checkpoints
// and outputs are bit-identical to it (a GPU test), and to the conventional step at h = 0.
// Why a launch of its own: as for Mamba-2 (mamba2/flush.cuh), a flush row folding inside the
// ordinary launch stops streaming and straggles (bench/NOTES_gdn.md).
//
// An item is rows [v0, v0 + rows_per_block) of one value head of one flush row. As in
// mamba2/flush.cuh, a persistent block takes a contiguous range of the items (consecutive items
// share the row's cursor and mostly its key head) and double-buffers them: while item i folds,
// item i + 1's checkpoint tile (each thread copies the chunks it folds), ring rows (every
// physical row: no cursor needed), ring gates, token inputs and cursor words are in flight into
// the other stage (cp.async). Ring k^ is copied only when the (row, key head) changes. Each warp
// forms the record weights (each lane its own suffix sum, in the serial order), the c_j·u_j of
// its own rows and the token itself, so an item needs one block barrier (two when ring k^
// changes).
// Grid: persistent, x only; shared memory FlushSmem (launch.h).
#pragma once
#include <type_traits>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/flush_rows.cuh"
#include "cuda/common/ring_window.cuh"
#include "cuda/gdn/launch.h"
#include "cuda/gdn/step_math.cuh"

namespace replayssm::cuda::gdn {

namespace flush_detail {

/// Item of a flush pass: rows [v0, v0 + nrows) of value head vh of flush row fr (batch row b,
/// slot), key head kh. Items run (flush row, value head, split) in order.
struct Item {
  int fr, b, slot, vh, split, v0, nrows, kh, key;  ///< key: (flush row, key head): ring k^'s
  __device__ __forceinline__ static Item at(const StepParams& p, const int* list,
                                            const int* slots, int fr, int vh, int split) {
    Item m;
    m.fr = fr, m.vh = vh, m.split = split;
    m.v0 = split * p.rows_per_block;
    m.nrows = min(p.rows_per_block, p.V - m.v0);
    m.b = list[fr];
    m.slot = slots[fr];
    m.kh = vh / p.group;
    m.key = fr * p.H + m.kh;
    return m;
  }
  __device__ __forceinline__ static Item of(const StepParams& p, const int* list, const int* slots,
                                            int it, int per_row) {
    const int fr = it / per_row, rest = it - fr * per_row;
    const int vh = rest / p.nsplit;
    return at(p, list, slots, fr, vh, rest - vh * p.nsplit);
  }
  /// The item after this one (no division: the range is walked in order).
  __device__ __forceinline__ Item next(const StepParams& p, const int* list,
                                       const int* slots) const {
    int f = fr, h = vh, sp = split + 1;
    if (sp == p.nsplit) sp = 0, ++h;
    if (h == p.HV) h = 0, ++f;
    return at(p, list, slots, f, h, sp);
  }
};

/// The raw bits of the token's a and b (input dtype), plain loads first used one item later.
template <class TIn>
struct GateBits {
  uint32_t a = 0, b = 0;
  __device__ __forceinline__ void load(const StepParams& p, const Item& m) {
    const int64_t hv = static_cast<int64_t>(m.b) * p.HV + m.vh;
    if constexpr (std::is_same_v<TIn, float>) {
      a = static_cast<const uint32_t*>(p.a)[hv];
      b = static_cast<const uint32_t*>(p.b)[hv];
    } else {
      a = static_cast<const uint16_t*>(p.a)[hv];
      b = static_cast<const uint16_t*>(p.b)[hv];
    }
  }
  __device__ __forceinline__ static float value(uint32_t bits) {
    if constexpr (std::is_same_v<TIn, float>)
      return __uint_as_float(bits);
    else if constexpr (std::is_same_v<TIn, bf16>)
      return to_f32(__ushort_as_bfloat16(static_cast<unsigned short>(bits)));
    else
      return to_f32(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
};

/// Requests item m into stage `st` as one cp.async group of this thread: its own checkpoint
/// chunks, and (spread over the block) the ring u rows, ring k^ when `copy_k`, the ring gates,
/// the token's k, q and v, and the cursor and head words. Every address needs only the slot.
template <class TIn, class TState, int K, int RPT>
__device__ __forceinline__ void prefetch(const StepParams& p, const FlushSmem& sm, float* smem,
                                         const Item& m, int st, bool copy_k) {
  using Lay = Layout<sizeof(TState), K>;
  constexpr int LPR = Lay::kLanesPerRow, CPL = Lay::kChunksPerLane;
  constexpr int VI = 16 / static_cast<int>(sizeof(TIn));  // input elements per 16-byte copy
  constexpr int V4 = 4 / static_cast<int>(sizeof(TIn));   // input elements per 4-byte copy
  float* const base = smem + st * sm.stage;
  const int tid = threadIdx.x, lane = tid & 31, nthreads = blockDim.x;
  const int lr = lane % LPR;
  const int r0 = ((tid >> 5) * Lay::kRowsPerWarp + lane / LPR) * RPT;  // the thread's first row
  const int R = p.R;
  const int64_t sv = static_cast<int64_t>(m.slot) * p.HV + m.vh;

  const TState* const S = static_cast<const TState*>(p.state) + (sv * p.V + m.v0) * K;
  TState* const tile = reinterpret_cast<TState*>(base + sm.tile);
#pragma unroll
  for (int i = 0; i < RPT; ++i)
    if (r0 + i < m.nrows)
#pragma unroll
      for (int c = 0; c < CPL; ++c)
        cp_async16(tile + (r0 + i) * K + Lay::col(c, lr),
                   S + static_cast<int64_t>(r0 + i) * K + Lay::col(c, lr));

  // The shared parts as one index space spread over the block.
  const int cU = m.nrows / 4, nU = R * cU;  // ring u: R records of nrows floats
  const int nK = copy_k ? R * K / 4 : 0;    // ring k^: R records of K floats, contiguous
  const int nQK = 2 * (K / VI);             // token k and q
  const int nV = m.nrows / V4;              // token v, 4-byte pieces
  const int total = nU + nK + R + nQK + nV + FlushSmem::kWords;
  const float* const ringu = p.ring_u + sv * R * p.V + m.v0;
  const float* const ringk = p.ring_k + (static_cast<int64_t>(m.slot) * p.H + m.kh) * R * K;
  const int64_t qk = (static_cast<int64_t>(m.b) * p.H + m.kh) * K;
  const int64_t vo = (static_cast<int64_t>(m.b) * p.HV + m.vh) * p.V + m.v0;
  for (int idx = tid; idx < total; idx += nthreads) {
    int k = idx;
    if (k < nU) {
      const int q = k / cU, c = k - q * cU;
      cp_async16(base + sm.rawu + q * sm.rows + 4 * c, ringu + static_cast<int64_t>(q) * p.V + 4 * c);
      continue;
    }
    k -= nU;
    if (k < nK) {
      cp_async16(base + sm.rawk + 4 * k, ringk + 4 * k);
      continue;
    }
    k -= nK;
    if (k < R) {
      cp_async_small<4>(base + sm.rawg + k, p.ring_g + sv * R + k);
      continue;
    }
    k -= R;
    if (k < nQK) {
      const bool isq = k >= K / VI;
      const int c = isq ? k - K / VI : k;
      cp_async16(reinterpret_cast<TIn*>(base + (isq ? sm.tq : sm.tk)) + c * VI,
                 static_cast<const TIn*>(isq ? p.q : p.k) + qk + c * VI);
      continue;
    }
    k -= nQK;
    if (k < nV) {
      cp_async_small<4>(reinterpret_cast<TIn*>(base + sm.tv) + k * V4,
                        static_cast<const TIn*>(p.v) + vo + k * V4);
      continue;
    }
    k -= nV;
    const void* src = k == FlushSmem::kOrigin ? static_cast<const void*>(p.origin + m.slot)
                      : k == FlushSmem::kHist ? static_cast<const void*>(p.hist + m.slot)
                      : k == FlushSmem::kALog ? static_cast<const void*>(p.A_log + m.vh)
                                              : static_cast<const void*>(p.dt_bias + m.vh);
    cp_async_small<4>(base + sm.words + k, src);
  }
  cp_async_commit();
}

/// Folds item m from stage `st` (landed and visible to the block), runs the token's update, and
/// writes y and the new checkpoint. `new_k`: the item's (row, key head) differs from the block's
/// previous item, so ring k^ is laid out again (one more block barrier).
template <class TIn, class TState, int K, int RPT>
__device__ __forceinline__ void fold(const StepParams& p, const FlushSmem& sm, float* smem,
                                     const Item& m, int st, bool new_k, GateBits<TIn> gates) {
  using Lay = Layout<sizeof(TState), K>;
  using Tok = Token<TIn, sizeof(TState), K, false>;
  constexpr int COLS = Lay::kCols, VEC = Lay::kVec, CPL = Lay::kChunksPerLane;
  constexpr int LPR = Lay::kLanesPerRow, RPW = Lay::kRowsPerWarp;
  static_assert(RPT % 4 == 0, "a thread's rows are read as float4 from the c_j·u_j rows");
  const float* const base = smem + st * sm.stage;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthreads = blockDim.x;
  const int lr = lane % LPR;
  const int r0 = (warp * RPW + lane / LPR) * RPT;  // the thread's first row
  const int nrows = m.nrows;
  const int* const words = reinterpret_cast<const int*>(base + sm.words);
  const RingWindow win =
      RingWindow::of(words[FlushSmem::kOrigin], words[FlushSmem::kHist], p.R, 1);  // h <= R - 1
  const int hist = win.hist;
  float* const sK = smem + sm.k;    // [R][K] ring k^ by logical record
  float* const scu = smem + sm.cu;  // [R][rows] c_j·u_j by logical record

  if (new_k) {  // ring k^ of the item's key head, by logical record
    const float* const rawk = base + sm.rawk;
    for (int idx = tid; idx < hist * K; idx += nthreads) {
      const int j = idx / K, e = idx - j * K;
      sK[idx] = rawk[win.phys(j) * K + e];
    }
  }
  // The record weights, each lane its own c_j: the exclusive suffix sum of the gates in the
  // group kernel's serial order (from the token backwards, starting at 0); lane 0 goes on to
  // ā'. Then c_j·u_j of this warp's own rows, which only this warp folds.
  const float* const rawg = base + sm.rawg;
  float acc0 = 0.0f, acc1 = 0.0f;  // records lane and lane + 32
  for (int i = hist - 1; i >= 0; --i) {
    const float gi = rawg[win.phys(i)];
    if (i > lane) acc0 = __fadd_rn(acc0, gi);
    if (i > lane + 32) acc1 = __fadd_rn(acc1, gi);
  }
  const float c0 = expf(acc0), c1 = expf(acc1);
  const float abar =
      __shfl_sync(0xffffffffu, expf(hist > 0 ? __fadd_rn(acc0, rawg[win.phys(0)]) : 0.0f), 0);
  {
    const float* const rawu = base + sm.rawu;
    const int q0 = win.phys(min(lane, p.R - 1)), q1 = win.phys(min(lane + 32, p.R - 1));
    const int w0 = warp * RPW * RPT;  // the warp's rows: [w0, w0 + RPW * RPT)
    for (int r = w0; r < min(w0 + RPW * RPT, nrows); ++r) {
      if (lane < hist) scu[lane * sm.rows + r] = __fmul_rn(c0, rawu[q0 * sm.rows + r]);
      if (hist > 32 && lane + 32 < hist)
        scu[(lane + 32) * sm.rows + r] = __fmul_rn(c1, rawu[q1 * sm.rows + r]);
    }
  }
  if (new_k)
    __syncthreads();
  else
    __syncwarp();

  // The thread's checkpoint rows from its own chunks of the tile, then the rank-h fold.
  const TState* const tile = reinterpret_cast<const TState*>(base + sm.tile);
  const bool mine = r0 < nrows;  // a thread's four rows are all valid or none
  float s[RPT][COLS];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
#pragma unroll
    for (int c = 0; c < CPL; ++c)
      unpack16<TState>(mine ? *reinterpret_cast<const uint4*>(tile + (r0 + i) * K + Lay::col(c, lr))
                            : make_uint4(0, 0, 0, 0),
                       &s[i][c * VEC]);
#pragma unroll
    for (int e = 0; e < COLS; ++e) s[i][e] = __fmul_rn(abar, s[i][e]);
  }
  if (mine) {
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
        const float4 u4 = *reinterpret_cast<const float4*>(scu + j * sm.rows + r0 + i0);
        const float uf[4] = {u4.x, u4.y, u4.z, u4.w};
#pragma unroll
        for (int f = 0; f < 4; ++f)
#pragma unroll
          for (int e = 0; e < COLS; ++e) s[i0 + f][e] = __fmaf_rn(uf[f], kq[e], s[i0 + f][e]);
      }
    }
  }

  // The token (every warp forms it: the conventional kernel's arithmetic), the conventional
  // update through delta_rule_row(), y, and the new checkpoint written once.
  Tok t;
  t.form(p, reinterpret_cast<const TIn*>(base + sm.tk), reinterpret_cast<const TIn*>(base + sm.tq),
         lr, GateBits<TIn>::value(gates.a), GateBits<TIn>::value(gates.b),
         __int_as_float(words[FlushSmem::kALog]), __int_as_float(words[FlushSmem::kDtBias]));
  const TIn* const tv = reinterpret_cast<const TIn*>(base + sm.tv);
  const int64_t sv = static_cast<int64_t>(m.slot) * p.HV + m.vh;
  TState* const S = static_cast<TState*>(p.state) + (sv * p.V + m.v0) * K;
  TIn* const y = static_cast<TIn*>(p.y) + (static_cast<int64_t>(m.b) * p.HV + m.vh) * p.V + m.v0;
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = r0 + i;
    const float vv = mine ? to_f32(tv[r]) : 0.0f;
    const float2 yu = delta_rule_row(s[i], t, vv);
    if (!mine) continue;
    if (lr == 0) y[r] = from_f32<TIn>(yu.x);
    store_row<TState, Lay>(S + static_cast<int64_t>(r) * K, lr, s[i]);
  }
}

}  // namespace flush_detail

/// A persistent grid (a few blocks per SM): each pass lists the flush rows (common/flush_rows.cuh)
/// and every block takes a contiguous, balanced range of the pass's items, two stages deep.
template <class TIn, class TState, int K, int RPT>
__global__ void __launch_bounds__(kFlushThreads, 2) flush_kernel(const StepParams p) {
  using namespace flush_detail;
  extern __shared__ __align__(16) float smem[];
  const FlushSmem sm(p.R, K, p.rows_per_block, static_cast<int>(sizeof(TState)),
                     static_cast<int>(sizeof(TIn)));
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
      Item cur = Item::of(p, list, slots, it0, per_row);
      prefetch<TIn, TState, K, RPT>(p, sm, smem, cur, 0, true);
      GateBits<TIn> next_gates;
      next_gates.load(p, cur);
      int prev_key = -1;
      for (int it = it0; it < it1; ++it) {
        const int st = (it - it0) & 1;
        const GateBits<TIn> gates = next_gates;
        cp_async_wait<0>();  // this item's stage, requested one item ago
        __syncthreads();     // ... visible to all; every thread is done with the other stage
        Item next = cur;
        if (it + 1 < it1) {
          next = cur.next(p, list, slots);
          prefetch<TIn, TState, K, RPT>(p, sm, smem, next, st ^ 1, next.key != cur.key);
          next_gates.load(p, next);
        }
        fold<TIn, TState, K, RPT>(p, sm, smem, cur, st, cur.key != prev_key, gates);
        prev_key = cur.key;
        cur = next;
      }
    }
    __syncthreads();  // the list is rewritten for the next rows
  }
}

}  // namespace replayssm::cuda::gdn
