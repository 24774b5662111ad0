// The ReplaySSM flush in a launch of its own (the dispatcher's choice on the output-only route):
// the ordinary launch (the group kernel with only = 1) leaves flush rows, this kernel serves
// only them and leaves every other row (pad rows included) to that launch. A flush row folds its
// h ring records and then the token into the checkpoint and writes it once:
//   S_h = ā_h·S0 + Σ_{j<h} c_j·x_j·B_jᵀ (records in order), then the conventional update with
//   the token through the same inline functions as the conventional kernel; y from the new state.
// Every rounding is the group kernel's fold in the same order, so the checkpoints and outputs are
// bit-identical to it (and to the conventional step at h = 0).
//
// Why a kernel of its own: inside the group kernel a flush row folds with the ordinary rows'
// register budget (64 per thread: the fold spills), after the block's chain barrier and through
// two checkpoint stages (bench/NOTES.md, "Mamba-2 flush kernel").
//
// An item is rows [p0, p0 + rows_per_block) of one head of one flush row. A persistent block
// takes a contiguous range of the items (consecutive items share the row's cursor and mostly its
// group) and double-buffers them: while item i folds, item i + 1's checkpoint tile (each thread
// copies the chunks it will fold), ring rows (every physical row: the addresses need no cursor),
// ring deltas, token and cursor words are in flight into the other stage (cp.async). Without it
// each item waited for its loads with nothing else in flight and the flush ran at 35% of DRAM
// bandwidth (bench/NOTES.md, "Mamba-2 flush kernel, pipelined"). Ring B (per group) is copied
// and converted only when the (row, group) changes; each warp forms the record weights itself and
// the c_j·x_j of its own rows, so an item needs one block barrier (two when ring B changes).
// Grid: persistent, x only; shared memory FlushSmem (launch.h).
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/flush_rows.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/ring_window.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/mamba2/conventional.cuh"
#include "cuda/mamba2/launch.h"
#include "cuda/mamba2/replay.cuh"

namespace replayssm::cuda::mamba2 {

namespace flush_detail {

/// Item `it` of a flush pass: rows [p0, p0 + nrows) of head hd of flush row fr (batch row b,
/// slot), group g. Items run (flush row, head, split) in order.
struct Item {
  int fr, b, slot, hd, split, p0, nrows, g, key;  ///< key: (flush row, group): ring B's
  __device__ __forceinline__ static Item of(const StepParams& p, const int* list, const int* slots,
                                            int it, int per_row) {
    const int fr = it / per_row, rest = it - fr * per_row;
    const int hd = rest / p.nsplit;
    return at(p, list, slots, fr, hd, rest - hd * p.nsplit);
  }
  __device__ __forceinline__ static Item at(const StepParams& p, const int* list,
                                            const int* slots, int fr, int hd, int split) {
    Item m;
    m.fr = fr, m.hd = hd, m.split = split;
    m.p0 = split * p.rows_per_block;
    m.nrows = min(p.rows_per_block, p.P - m.p0);
    m.b = list[fr];
    m.slot = slots[fr];
    m.g = hd / p.heads_per_group;
    m.key = fr * p.G + m.g;
    return m;
  }
  /// The item after this one (no division: the range is walked in order).
  __device__ __forceinline__ Item next(const StepParams& p, const int* list,
                                       const int* slots) const {
    int f = fr, h = hd, sp = split + 1;
    if (sp == p.nsplit) sp = 0, ++h;
    if (h == p.H) h = 0, ++f;
    return at(p, list, slots, f, h, sp);
  }
};

/// The raw bits of the token's dt (fp32, or the 16-bit input dtype): a plain load whose value is
/// first used one item later (dt_of), so the copy of the next item does not wait for it.
template <class TIn>
__device__ __forceinline__ uint32_t load_dt_bits(const StepParams& p, const Item& m) {
  const int64_t idx = static_cast<int64_t>(m.b) * p.H + m.hd;
  if (std::is_same_v<TIn, float> || p.dt_f32) return static_cast<const uint32_t*>(p.dt)[idx];
  return static_cast<const uint16_t*>(p.dt)[idx];
}
template <class TIn>
__device__ __forceinline__ float dt_of(const StepParams& p, uint32_t bits) {
  if constexpr (std::is_same_v<TIn, float>) {
    return __uint_as_float(bits);
  } else {
    if (p.dt_f32) return __uint_as_float(bits);
    const auto half = static_cast<unsigned short>(bits);
    if constexpr (std::is_same_v<TIn, bf16>)
      return to_f32(__ushort_as_bfloat16(half));
    else
      return to_f32(__ushort_as_half(half));
  }
}

/// Requests item m into stage `st` as one cp.async group of this thread: its own checkpoint
/// chunks, and (spread over the block) the ring x rows, ring B when `copy_B`, the ring deltas, the
/// token's x, z, B and C, and the cursor and head words. Every address needs only the slot.
template <class TIn, class TState, class TRing, int N, int RPT>
__device__ __forceinline__ void prefetch(const StepParams& p, const FlushSmem& sm, float* smem,
                                         const Item& m, int st, bool copy_B) {
  using Lay = Layout<sizeof(TState), N>;
  constexpr int LPR = Lay::kLanesPerRow, CPL = Lay::kChunksPerLane;
  constexpr int VR = 16 / static_cast<int>(sizeof(TRing));  // ring elements per 16-byte copy
  constexpr int VI = 16 / static_cast<int>(sizeof(TIn));    // input elements per 16-byte copy
  float* const base = smem + st * sm.stage;
  const int tid = threadIdx.x, lane = tid & 31, nthreads = blockDim.x;
  const int lr = lane % LPR;
  const int grp = (tid >> 5) * Lay::kRowsPerWarp + lane / LPR;
  const int pass = (nthreads >> 5) * Lay::kRowsPerWarp;
  const int R = p.R;
  const int64_t sh = static_cast<int64_t>(m.slot) * p.H + m.hd;

  const TState* const S = static_cast<const TState*>(p.state) + (sh * p.P + m.p0) * N;
  TState* const tile = reinterpret_cast<TState*>(base + sm.tile);
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = grp + i * pass;
    if (r < m.nrows)
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        const int off = r * N + Lay::col(c, lr);  // the tile is the item's rows as stored
        cp_async16(tile + off, S + off);
      }
  }

  // The shared parts as one index space spread over the block.
  const int cX = m.nrows / VR, nX = R * cX;  // ring x: R records of nrows
  const int nB = copy_B ? R * N / VR : 0;    // ring B: R records of N, contiguous
  const int cT = m.nrows / VI, nT = p.has_z ? 2 * cT : cT;  // token x (and z)
  const int nBC = 2 * (N / VI);                             // token B and C
  const int nW = FlushSmem::kD + 1;                         // words
  const int total = nX + nB + R + nT + nBC + nW;
  const TRing* const ringx = static_cast<const TRing*>(p.ring_x) + sh * R * p.P + m.p0;
  const TRing* const ringB =
      static_cast<const TRing*>(p.ring_B) + (static_cast<int64_t>(m.slot) * p.G + m.g) * R * N;
  const int64_t io = (static_cast<int64_t>(m.b) * p.H + m.hd) * p.P + m.p0;
  const int64_t bc = (static_cast<int64_t>(m.b) * p.G + m.g) * N;
  for (int idx = tid; idx < total; idx += nthreads) {
    int k = idx;
    if (k < nX) {
      const int q = k / cX, c = k - q * cX;
      cp_async16(reinterpret_cast<TRing*>(base + sm.rawx) + q * sm.rows + c * VR,
                 ringx + static_cast<int64_t>(q) * p.P + c * VR);
      continue;
    }
    k -= nX;
    if (k < nB) {
      cp_async16(reinterpret_cast<TRing*>(base + sm.rawB) + k * VR, ringB + k * VR);
      continue;
    }
    k -= nB;
    if (k < R) {
      cp_async_small<4>(base + sm.rdt + k, p.ring_dt + sh * R + k);
      continue;
    }
    k -= R;
    if (k < nT) {
      const bool z = k >= cT;
      const int c = z ? k - cT : k;
      cp_async16(reinterpret_cast<TIn*>(base + (z ? sm.z : sm.xt)) + c * VI,
                 static_cast<const TIn*>(z ? p.z : p.x) + io + c * VI);
      continue;
    }
    k -= nT;
    if (k < nBC) {
      const bool isC = k >= N / VI;
      const int c = isC ? k - N / VI : k;
      cp_async16(reinterpret_cast<TIn*>(base + (isC ? sm.Ct : sm.Bt)) + c * VI,
                 static_cast<const TIn*>(isC ? p.C : p.B) + bc + c * VI);
      continue;
    }
    k -= nBC;
    const void* src = k == FlushSmem::kOrigin  ? static_cast<const void*>(p.origin + m.slot)
                      : k == FlushSmem::kHist  ? static_cast<const void*>(p.hist + m.slot)
                      : k == FlushSmem::kALog  ? static_cast<const void*>(p.A_log + m.hd)
                      : k == FlushSmem::kDtBias ? static_cast<const void*>(p.dt_bias + m.hd)
                      : p.has_D               ? static_cast<const void*>(p.D + m.hd)
                                              : static_cast<const void*>(p.A_log + m.hd);
    cp_async_small<4>(base + sm.words + k, src);
  }
  cp_async_commit();
}

/// Folds item m from stage `st` (landed and visible to the block), runs the token's update, and
/// writes y and the new checkpoint (and read copy). `new_B`: the item's (row, group) differs from
/// the block's previous item, so ring B is converted again (one more block barrier).
template <class TIn, class TState, class TRing, int N, int RPT>
__device__ __forceinline__ void fold(const StepParams& p, const FlushSmem& sm, float* smem,
                                     const Item& m, int st, bool new_B, uint32_t dt_bits) {
  using Lay = Layout<sizeof(TState), N>;
  using namespace replay_detail;
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  constexpr int CPL = Lay::kChunksPerLane, RPW = Lay::kRowsPerWarp;
  constexpr int RQ = 4;  // records per round: RPT * RQ c_j·x_j registers, one 16-byte load a row
  static_assert(LPR >= RPT, "y: one lane of a row's lanes per row of the thread");
  const float* const base = smem + st * sm.stage;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthreads = blockDim.x;
  const int lr = lane % LPR;
  const int grp = warp * RPW + lane / LPR;  // first row of the thread
  const int pass = (nthreads >> 5) * RPW;   // rows per block pass
  const int nrows = m.nrows;
  const int* const words = reinterpret_cast<const int*>(base + sm.words);
  const RingWindow win =
      RingWindow::of(words[FlushSmem::kOrigin], words[FlushSmem::kHist], p.R, 1);  // h <= R - 1
  const int hist = win.hist;
  const float A = A_of(__int_as_float(words[FlushSmem::kALog]));
  const float delta =
      delta_of(dt_of<TIn>(p, dt_bits), __int_as_float(words[FlushSmem::kDtBias]), p.softplus);
  const float Dh = p.has_D ? __int_as_float(words[FlushSmem::kD]) : 0.0f;
  float* const sB = smem + sm.B;    // [R][N] ring B by logical record
  float* const scx = smem + sm.cx;  // [rows][xs] c_j·x_j by (row, logical record)

  if (new_B) {  // ring B of the item's group, by logical record
    const TRing* const rawB = reinterpret_cast<const TRing*>(base + sm.rawB);
    for (int idx = tid; idx < hist * N; idx += nthreads) {
      const int j = idx / N, e = idx - j * N;
      sB[idx] = to_f32(rawB[win.phys(j) * N + e]);
    }
  }
  // The record weights (every warp: the group kernel's chain arithmetic), then c_j·x_j of this
  // warp's own rows, which only this warp folds.
  float abar;
  {
    const float* const rdt = base + sm.rdt;
    const float d0 = lane < hist ? rdt[win.phys(lane)] : 0.0f;
    float c0, c1 = 0.0f;
    if (hist <= 32) {  // uniform; the same bits as record_weights_lanes with d1 = 0
      abar = record_weights_lanes32(d0, hist, A, lane, c0);
    } else {
      const float d1 = lane + 32 < hist ? rdt[win.phys(lane + 32)] : 0.0f;
      abar = record_weights_lanes(d0, d1, hist, A, lane, c0, c1);
    }
    const TRing* const rawx = reinterpret_cast<const TRing*>(base + sm.rawx);
    // c·x_j of this warp's own rows for the record a lane holds (lane, or lane + 32), into its
    // column `out` of c_j·x_j.
    auto scale_rows = [&](int j, float c, float* out) {
      const TRing* const x = rawx + win.phys(j) * sm.rows;
#pragma unroll
      for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int w = 0; w < RPW; ++w) {
          const int r = warp * RPW + w + i * pass;
          if (r < nrows) out[r * sm.xs] = __fmul_rn(c, to_f32(x[r]));
        }
    };
    if (lane < hist) scale_rows(lane, c0, scx + lane);
    if (hist > 32 && lane + 32 < hist) scale_rows(lane + 32, c1, scx + lane + 32);
  }
  if (new_B)
    __syncthreads();
  else
    __syncwarp();

  // The thread's checkpoint rows from its own chunks of the tile. Rows past nrows stand in for
  // the thread's first row, or the item's last where the thread has none (their results are
  // dropped); a thread without rows skips the fold.
  const TState* const tile = reinterpret_cast<const TState*>(base + sm.tile);
  const int rsafe = min(grp, nrows - 1);
  float s[RPT][COLS];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = grp + i * pass < nrows ? grp + i * pass : rsafe;
#pragma unroll
    for (int c = 0; c < CPL; ++c)
      unpack16<TState>(*reinterpret_cast<const uint4*>(tile + r * N + Lay::col(c, lr)),
                       &s[i][c * VEC]);
  }
  if (hist > 0 && grp < nrows) {
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
      for (int e = 0; e < COLS; ++e) s[i][e] = __fmul_rn(abar, s[i][e]);
    // RQ records at a time: c_j·x_j of the thread's rows (one 16-byte load per row), then
    // per record its B_j columns and one FMA per state element, records in order.
    const float* src[RPT];  // the thread's rows of c_j·x_j
#pragma unroll
    for (int i = 0; i < RPT; ++i)
      src[i] = scx + (grp + i * pass < nrows ? grp + i * pass : grp) * sm.xs;
#pragma unroll 1
    for (int j0 = 0; j0 < hist; j0 += RQ) {
      float cx[RPT][RQ];
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        const float4 t = *reinterpret_cast<const float4*>(src[i] + j0);
        cx[i][0] = t.x, cx[i][1] = t.y, cx[i][2] = t.z, cx[i][3] = t.w;
      }
#pragma unroll
      for (int q = 0; q < RQ; ++q) {
        if (j0 + q >= hist) break;  // uniform
        float bq[COLS];
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
          for (int e = 0; e < VEC; e += 4) {
            const float4 t =
                *reinterpret_cast<const float4*>(sB + (j0 + q) * N + Lay::col(c, lr) + e);
            bq[c * VEC + e] = t.x, bq[c * VEC + e + 1] = t.y;
            bq[c * VEC + e + 2] = t.z, bq[c * VEC + e + 3] = t.w;
          }
#pragma unroll
        for (int i = 0; i < RPT; ++i)
#pragma unroll
          for (int e = 0; e < COLS; ++e) s[i][e] = __fmaf_rn(cx[i][q], bq[e], s[i][e]);
      }
    }
  }

  // The conventional update with the token, y, and the new checkpoint (and read copy) once.
  const TIn* const xt = reinterpret_cast<const TIn*>(base + sm.xt);
  const TIn* const zt = reinterpret_cast<const TIn*>(base + sm.z);
  const TIn* const Bt = reinterpret_cast<const TIn*>(base + sm.Bt);
  const TIn* const Ct = reinterpret_cast<const TIn*>(base + sm.Ct);
  const float a = decay_of(delta, A);
  const int64_t sh = static_cast<int64_t>(m.slot) * p.H + m.hd;
  // Row i of the thread is grp + i * pass: 32-bit offsets from the item's first row.
  const int64_t row0 = sh * p.P + m.p0;
  TState* const S = static_cast<TState*>(p.state) + row0 * N;
  const SrSlot sr =
      sr_slot(p.sr, m.slot, static_cast<TState*>(p.state) + static_cast<int64_t>(m.slot) * p.H * p.P * N);
  TIn* const y = static_cast<TIn*>(p.y) + (static_cast<int64_t>(m.b) * p.H + m.hd) * p.P + m.p0;
  float bv[COLS], cv[COLS];
#pragma unroll
  for (int c = 0; c < CPL; ++c)
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      bv[c * VEC + e] = to_f32(Bt[Lay::col(c, lr) + e]);
      cv[c * VEC + e] = to_f32(Ct[Lay::col(c, lr) + e]);
    }
  float part[RPT];  // the lane's part of S·C of each of the thread's rows
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = grp + i * pass;
    part[i] = 0.0f;
    if (r < nrows) part[i] = update_row<COLS>(s[i], a, __fmul_rn(delta, to_f32(xt[r])), bv, cv);
  }
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = grp + i * pass;
    if (r < nrows)
#pragma unroll
      for (int c = 0; c < CPL; ++c) store16_state(S + r * N + Lay::col(c, lr), &s[i][c * VEC], sr);
  }
  if (p.copy) {  // the read copy, rounded from the same new fp32 state
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const int r = grp + i * pass;
      if (r >= nrows) continue;
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        const int64_t off = row0 * N + r * N + Lay::col(c, lr);
        if (p.copy_f16)
          store_vec<f16, VEC>(static_cast<f16*>(p.copy) + off, &s[i][c * VEC]);
        else
          store_vec<bf16, VEC>(static_cast<bf16*>(p.copy) + off, &s[i][c * VEC]);
      }
    }
  }
  // The RPT rows' sums over their LPR lanes at once (the butterfly of row_sum, transposed: the
  // same additions, so the same bits): lane lr ends with row lr / (LPR / RPT), whose first lane
  // forms y (the gate's exp and division once per row).
  const float ysum = transposed_sum<RPT, LPR>(part, lr);
  const int ry = grp + lr / (LPR / RPT) * pass;
  if (lr % (LPR / RPT) == 0 && ry < nrows) {
    const float xv = to_f32(xt[ry]), zv = p.has_z ? to_f32(zt[ry]) : 0.0f;
    y[ry] = from_f32<TIn>(output_of(ysum, Dh, p.has_D, xv, p.has_z, zv));
  }
}

}  // namespace flush_detail

/// A persistent grid (a few blocks per SM): each pass lists the flush rows (common/flush_rows.cuh)
/// and every block takes a contiguous, balanced range of the pass's items, two stages deep.
template <class TIn, class TState, class TRing, int N, int RPT>
__global__ void __launch_bounds__(kFlushThreads, 2) flush_kernel(const StepParams p) {
  using namespace flush_detail;
  extern __shared__ __align__(16) float smem[];
  const FlushSmem sm(p.R, N, p.rows_per_block, static_cast<int>(sizeof(TState)),
                     static_cast<int>(sizeof(TRing)), static_cast<int>(sizeof(TIn)));
  int* const list = reinterpret_cast<int*>(smem + sm.list);
  int* const slots = reinterpret_cast<int*>(smem + sm.slots);
  const int per_row = p.H * p.nsplit;
  for (int b0 = 0; b0 < p.batch; b0 += kFlushScan) {
    const int nf = list_flush_rows(p.slot_ids, p.is_flush, p.slots, b0,
                                   min(b0 + kFlushScan, p.batch), list, slots,
                                   reinterpret_cast<int*>(smem + sm.warps));
    const int64_t total = static_cast<int64_t>(nf) * per_row;
    const int it0 = static_cast<int>(total * blockIdx.x / gridDim.x);
    const int it1 = static_cast<int>(total * (blockIdx.x + 1) / gridDim.x);
    if (it0 < it1) {
      Item cur = Item::of(p, list, slots, it0, per_row);
      prefetch<TIn, TState, TRing, N, RPT>(p, sm, smem, cur, 0, true);
      uint32_t dt_next = load_dt_bits<TIn>(p, cur);
      int prev_key = -1;
      for (int it = it0; it < it1; ++it) {
        const int st = (it - it0) & 1;
        const uint32_t dt_cur = dt_next;
        cp_async_wait<0>();  // this item's stage, requested one item ago
        __syncthreads();     // ... visible to all; every thread is done with the other stage
        Item next = cur;
        if (it + 1 < it1) {
          next = cur.next(p, list, slots);
          prefetch<TIn, TState, TRing, N, RPT>(p, sm, smem, next, st ^ 1, next.key != cur.key);
          dt_next = load_dt_bits<TIn>(p, next);
        }
        fold<TIn, TState, TRing, N, RPT>(p, sm, smem, cur, st, cur.key != prev_key, dt_cur);
        prev_key = cur.key;
        cur = next;
      }
    }
    __syncthreads();  // the list is rewritten for the next rows
  }
  // Launched to overlap the ordinary launch (Plan::overlap), this kernel reads nothing that
  // launch writes; it still ends only after that launch, so that what follows in the stream,
  // which waits for this kernel alone, sees both.
  pdl_wait();
}

}  // namespace replayssm::cuda::mamba2
