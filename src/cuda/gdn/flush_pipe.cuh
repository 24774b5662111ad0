// The GDN flush launch as a pipeline (the dispatcher's choice where it applies: scalar gate,
// default state mode, ring of at most kFlushPipeMaxR rows, shared memory for two blocks per SM,
// and an all-flush step of >= 6 items per block; flush.cuh elsewhere). Same items, the same
// arithmetic in the same order as flush.cuh (flush_parts.cuh holds the shared pieces), so
// checkpoints and outputs are bit-identical to it and to the group kernel's in-launch fold (GPU
// tests).
// Why: in flush.cuh every item runs cursor -> ring rows -> weights and token (warp 0) -> barrier
// -> fold -> store with nothing of the next item in flight; ncu at Qwen3.5-4B batch 256 put 28% of
// the warps' stall samples on that barrier and DRAM at 48-60% (bench/NOTES_gdn.md "Session 19").
// Here the consumer warps (flush_threads / 32 of them: 2, 4 or 8) only fold, and two producer
// warps run items ahead of them, item n of the block by producer n % 2 (with one producer, its
// serial chain per item was slower than the consumers' fold). Checkpoint rows go through two
// tiles, everything else through three ring buffers, so that an item's copies are issued when
// the consumers start item n - 2:
//   - producer: its next item's cursor and ring gates (block item n + 2) are loaded while it
//     finishes item n; once the consumers hold item n - 2's rows in registers (tile_empty[n % 2])
//     it copies item n's checkpoint rows [nrows][K] into tile n % 2 (one bulk copy) and, after
//     ring_empty[n % 3] (item n - 3 done: implied by the tile wait, kept as the buffer's own
//     guard), the ring k^ and u rows of its h records into ring buffer n % 3 (one bulk copy
//     each, lane j: record j), all completing on full[n % 3]; then the token (k^, q^, alpha·k^,
//     alpha, beta: Token::prepare), v and the record weights c_j = e^{g_{j+1} + .. + g_{h-1}} and
//     ā' into the ring buffer, each lane summing its own suffix of gates from the token backwards
//     (the serial loop's order: same bits), and every lane arrives on full[n % 3] (the copies go
//     first: forming the token before them made the kernel 17% slower, NOTES "Session 19");
//   - consumers (RPT consecutive rows per thread, flush.cuh's layout): wait on full[n % 3], rows
//     from the tile into registers (then tile_empty[n % 2]), ā'·S0 + Σ_j (c_j·u_j) k^_jᵀ (c_j·u_j
//     rounded as flush.cuh rounds it in place), delta_rule_row() with the token, y and the new
//     checkpoint stored, then ring_empty[n % 3] (every consumer thread arrives on both).
// Grid: persistent over the flush rows' items (common/flush_rows.cuh's list and walk); shared
// memory FlushPipeSmem (launch.h); blockDim = consumer threads + 32 x kFlushPipeProducers.
#pragma once
#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/flush_rows.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/ring_window.cuh"
#include "cuda/gdn/flush_parts.cuh"
#include "cuda/gdn/launch.h"
#include "cuda/gdn/step_math.cuh"

namespace replayssm::cuda::gdn {

/// What the producer leaves in a buffer besides the copies.
struct PipeItem {
  int b, slot, vh, v0, nrows, hist;
};

/// Producer warp, step 1 of an item: its cursor and the ring gates of every physical row, loaded
/// while the producer finishes its previous item so that they have landed when step 2 copies
/// (the copies need the cursor). Waits for nothing.
struct PipeFetch {
  float gphys;  // ring g of physical row `lane`
  int origin, hist, b, slot, vh, v0, nrows;

  __device__ __forceinline__ void fetch(const StepParams& p, int b_, int rest) {
    const int lane = threadIdx.x & 31;
    b = b_, slot = p.slot_ids[b_];
    vh = rest / p.nsplit, v0 = (rest - vh * p.nsplit) * p.rows_per_block;
    nrows = min(p.rows_per_block, p.V - v0);
    origin = p.origin[slot], hist = p.hist[slot];
    const int64_t sv = static_cast<int64_t>(slot) * p.HV + vh;
    gphys = lane < p.R ? p.ring_g[sv * p.R + lane] : 0.0f;
  }
};

/// Producer warp, step 2, for block item n: once the consumers have the checkpoint rows of item
/// n - 2 in registers (tile_empty, when n >= 2), this item's rows into tile T by one bulk copy;
/// once they are done with item n - 3 (ring_empty, when n >= 3), its ring k^ and u rows into ring
/// buffer B by one bulk copy each (lane j: record j); all complete on `full`. Then the token's loads, the weights and the token into B, and every lane arrives on
/// full. Every lane of the warp calls it.
template <class TIn, class TState, int K>
__device__ __forceinline__ void produce_item(const StepParams& p, const FlushPipeSmem& sm,
                                             float* T, float* B, uint64_t* full,
                                             uint64_t* tile_empty, uint64_t* ring_empty, int n,
                                             const PipeFetch& f) {
  using Lay = Layout<sizeof(TState), K>;
  using Tok = Token<TIn, sizeof(TState), K, false>;
  constexpr int LPR = Lay::kLanesPerRow;
  const int lane = threadIdx.x & 31, lr = lane % LPR;
  const int R = p.R, nrows = f.nrows;
  const RingWindow win = RingWindow::of(f.origin, f.hist, R, 1);  // h <= R - 1
  const int hist = win.hist;
  const int64_t sv = static_cast<int64_t>(f.slot) * p.HV + f.vh;

  if (n >= kFlushPipeTiles) mbar_wait(tile_empty, (n / kFlushPipeTiles - 1) & 1);
  const uint32_t tile_bytes = static_cast<uint32_t>(nrows * K * sizeof(TState));
  if (lane == 0) {
    mbar_expect_tx(full, tile_bytes + static_cast<uint32_t>(hist * (K + nrows) * 4));
    const TState* S = static_cast<const TState*>(p.state) + (sv * p.V + f.v0) * K;
    bulk_load(T, S, tile_bytes, full);
  }
  __syncwarp();
  if (n >= kFlushPipeRings) mbar_wait(ring_empty, (n / kFlushPipeRings - 1) & 1);
  const float* const ringk =
      p.ring_k + (static_cast<int64_t>(f.slot) * p.H + f.vh / p.group) * R * K;
  const float* const ringu = p.ring_u + sv * R * p.V + f.v0;
  for (int j = lane; j < hist; j += 32) {
    const int64_t ph = win.phys(j);
    bulk_load(B + sm.k + j * K, ringk + ph * K, K * 4, full);
    bulk_load(B + sm.u + j * sm.rows, ringu + ph * p.V, static_cast<uint32_t>(nrows * 4), full);
  }

  // The token's inputs and v (L2-resident: back before the copies land).
  const typename Tok::Raw raw = Tok::fetch(p, f.b, f.vh, lr);
  const TIn* const vin =
      static_cast<const TIn*>(p.v) + (static_cast<int64_t>(f.b) * p.HV + f.vh) * p.V + f.v0;
  constexpr int VPL = kFlushPipeMaxRows / 32;  // v entries per lane
  float vv[VPL];
#pragma unroll
  for (int i = 0; i < VPL; ++i)
    vv[i] = lane + 32 * i < nrows ? to_f32(vin[lane + 32 * i]) : 0.0f;

  // The weights: lane j sums g_{h-1}, g_{h-2}, .., g_{j+1} in that order (flush.cuh's serial
  // loop), lane 0 then adds g_0 for ā'.
  const float gj = __shfl_sync(0xffffffffu, f.gphys, win.phys(lane < hist ? lane : 0));
  float acc = 0.0f;
  for (int m = hist - 1; m >= 0; --m) {
    const float gm = __shfl_sync(0xffffffffu, gj, m);
    if (m > lane) acc = __fadd_rn(acc, gm);
  }
  if (lane < hist) B[sm.c + lane] = expf(acc);
  Tok w;
  w.prepare(p, raw);
  if (lane < LPR)  // the token in the consumers' lane layout
    token_to_smem(w, B + sm.tk, B + sm.tq, B + sm.ta, nullptr, lr);
  if (lane == 0) {
    B[sm.head] = expf(hist > 0 ? __fadd_rn(acc, gj) : 0.0f);  // ā'
    B[sm.head + 1] = w.alpha[0], B[sm.head + 2] = w.beta;
    *reinterpret_cast<PipeItem*>(B + sm.item) = PipeItem{f.b, f.slot, f.vh, f.v0, nrows, hist};
  }
#pragma unroll
  for (int i = 0; i < VPL; ++i)
    if (lane + 32 * i < nrows) B[sm.v + lane + 32 * i] = vv[i];
  mbar_arrive(full);  // every lane: its own stores released
}

/// Consumer threads: the item in buffer B (complete: full waited on). Every consumer thread calls
/// it; it synchronises nothing.
template <class TIn, class TState, int K, int RPT>
__device__ __forceinline__ void consume_item(const StepParams& p, const FlushPipeSmem& sm,
                                             const float* T, const float* B,
                                             uint64_t* tile_empty) {
  using Lay = Layout<sizeof(TState), K>;
  using Tok = Token<TIn, sizeof(TState), K, false>;
  constexpr int COLS = Lay::kCols;
  constexpr int LPR = Lay::kLanesPerRow;
  const int tid = threadIdx.x, lane = tid & 31;
  const int lr = lane % LPR;
  const int r0 = ((tid >> 5) * Lay::kRowsPerWarp + lane / LPR) * RPT;
  const PipeItem it = *reinterpret_cast<const PipeItem*>(B + sm.item);

  float s[RPT][COLS];
  const TState* const tile = reinterpret_cast<const TState*>(T);
#pragma unroll
  for (int i = 0; i < RPT; ++i) tile_row<TState, Lay>(tile, r0 + i, lr, r0 + i < it.nrows, s[i]);
  mbar_arrive(tile_empty);  // the rows are in registers: the tile may take the next item's
  const float abar = B[sm.head];
#pragma unroll
  for (int i = 0; i < RPT; ++i)
#pragma unroll
    for (int e = 0; e < COLS; ++e) s[i][e] = __fmul_rn(abar, s[i][e]);
#pragma unroll 2
  for (int j = 0; j < it.hist; ++j) {
    float kq[COLS];
    lane_cols<Lay>(B + sm.k + j * K, lr, kq);
    fold_record<true>(s, kq, B + sm.u + j * sm.rows, r0, it.nrows, B[sm.c + j]);
  }

  Tok t;
  token_from_smem(t, B + sm.tk, B + sm.tq, B + sm.ta, nullptr, lr);
  t.alpha[0] = B[sm.head + 1];
  t.beta = B[sm.head + 2];
  const int64_t sv = static_cast<int64_t>(it.slot) * p.HV + it.vh;
  TState* const S = static_cast<TState*>(p.state) + (sv * p.V + it.v0) * K;
  const SrSlot sr = sr_slot(p.sr, it.slot, static_cast<TState*>(p.state) +
                                               static_cast<int64_t>(it.slot) * p.HV * p.V * K);
  TIn* const y = static_cast<TIn*>(p.y) + (static_cast<int64_t>(it.b) * p.HV + it.vh) * p.V;
  float vv[RPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i) vv[i] = r0 + i < it.nrows ? B[sm.v + r0 + i] : 0.0f;
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = r0 + i;
    const float2 yu = delta_rule_row(s[i], t, vv[i]);
    if (r >= it.nrows) continue;
    if (lr == 0) y[it.v0 + r] = from_f32<TIn>(yu.x);
    store_row<TState, Lay>(S + static_cast<int64_t>(r) * K, lr, s[i], sr);
  }
}

template <class TIn, class TState, int K, int RPT>
__global__ void __launch_bounds__(kFlushThreads + 32 * kFlushPipeProducers, 2)
    flush_pipe_kernel(const StepParams p) {
  extern __shared__ __align__(16) float smem[];
  const FlushPipeSmem sm(p.R, K, p.rows_per_block, static_cast<int>(sizeof(TState)));
  const int tid = threadIdx.x;
  // The last kFlushPipeProducers warps produce, item n by producer n % kFlushPipeProducers.
  const int nconsumer = static_cast<int>(blockDim.x) - 32 * kFlushPipeProducers;
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + sm.bars);  // [rings]
  uint64_t* const ring_empty = full + kFlushPipeRings;                  // [rings]
  uint64_t* const tile_empty = ring_empty + kFlushPipeRings;            // [tiles]
  int* const list = reinterpret_cast<int*>(smem + sm.list);
  if (tid == 0) {
    for (int i = 0; i < kFlushPipeRings; ++i)
      mbar_init(&full[i], 32), mbar_init(&ring_empty[i], nconsumer);
    for (int i = 0; i < kFlushPipeTiles; ++i) mbar_init(&tile_empty[i], nconsumer);
  }  // (list_flush_rows synchronises the block before anyone waits on them)
  const int per_row = p.HV * p.nsplit;
  int n = 0;  // items of this block so far: tile n % 2, ring buffer n % 3 (and its full barrier)
  auto tile_of = [&](int m) { return smem + sm.tile0 + (m % kFlushPipeTiles) * sm.tile; };
  auto ring_of = [&](int m) { return smem + sm.ring0 + (m % kFlushPipeRings) * sm.rbuf; };
  for (int b0 = 0; b0 < p.batch; b0 += kFlushScan) {
    const int nf = list_flush_rows(p.slot_ids, p.is_flush, p.slots, b0,
                                   min(b0 + kFlushScan, p.batch), list, nullptr,
                                   reinterpret_cast<int*>(smem + sm.warps));
    const int nitems = nf * per_row;
    if (tid >= nconsumer) {  // a producer: its next item's loads issued during its current one
      const int pw = (tid - nconsumer) >> 5, step = kFlushPipeProducers * gridDim.x;
      PipeFetch cur, next;
      auto fetch = [&](PipeFetch& f, int it) {
        const int fr = it / per_row;
        f.fetch(p, list[fr], it - fr * per_row);
      };
      const int first = blockIdx.x + pw * gridDim.x;
      if (first < nitems) fetch(cur, first);
      for (int it = first, m = n + pw; it < nitems; it += step, m += kFlushPipeProducers) {
        if (it + step < nitems) fetch(next, it + step);
        produce_item<TIn, TState, K>(p, sm, tile_of(m), ring_of(m), &full[m % kFlushPipeRings],
                                     &tile_empty[m % kFlushPipeTiles],
                                     &ring_empty[m % kFlushPipeRings], m, cur);
        cur = next;
      }
      if (static_cast<int>(blockIdx.x) < nitems)  // this block's items of the pass
        n += (nitems - 1 - static_cast<int>(blockIdx.x)) / static_cast<int>(gridDim.x) + 1;
    } else {
      for (int it = blockIdx.x; it < nitems; it += gridDim.x, ++n) {
        mbar_wait(&full[n % kFlushPipeRings], (n / kFlushPipeRings) & 1);
        consume_item<TIn, TState, K, RPT>(p, sm, tile_of(n), ring_of(n),
                                          &tile_empty[n % kFlushPipeTiles]);
        mbar_arrive(&ring_empty[n % kFlushPipeRings]);
      }
    }
    __syncthreads();  // the list is rewritten for the next rows
  }
  // As flush.cuh: this launch may overlap the ordinary launch, and ends only after it.
  pdl_wait();
}

}  // namespace replayssm::cuda::gdn
