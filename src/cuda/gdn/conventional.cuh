// The conventional GDN/KDA decode step: read the state, update it, write it back, y = S q^.
// Bandwidth-bound from small batches on. A block owns rows [r0, r0 + rows_per_block) of the V x K
// state of one (batch row, value head). Every state row of a warp (up to kMaxRowsPerThread passes)
// is requested at once into the block's shared-memory tile (TileRows: per-thread cp.async or one
// bulk copy per pass; no registers held, no block barrier); the token is prepared while they fly,
// and each pass is updated and streamed back as soon as it has landed.
// Grid: x = value head * nsplit + split, y = batch row.
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/gdn/params.h"
#include "cuda/gdn/step_math.cuh"

namespace replayssm::cuda::gdn {

/// Block coordinates shared by the kernels. A warp owns rows_per_thread passes of kRowsPerWarp
/// consecutive rows (warp-contiguous, so that a pass is one contiguous run of the state); the
/// lanes of row group lane / LPR take one row per pass.
struct BlockRows {
  int split, vh, b, r0, nrows, lane, lr, warp, grp, pass, wrow0;
  template <class Lay>
  __device__ __forceinline__ static BlockRows of(const StepParams& p) {
    BlockRows x;
    x.split = blockIdx.x % p.nsplit;
    x.vh = blockIdx.x / p.nsplit;
    x.b = blockIdx.y;
    x.r0 = x.split * p.rows_per_block;
    x.nrows = min(p.rows_per_block, p.V - x.r0);
    x.lane = threadIdx.x & 31;
    x.lr = x.lane % Lay::kLanesPerRow;
    x.warp = threadIdx.x >> 5;
    x.grp = x.warp * Lay::kRowsPerWarp + x.lane / Lay::kLanesPerRow;  // row group of the block
    x.pass = (blockDim.x >> 5) * Lay::kRowsPerWarp;                   // row groups of the block
    x.wrow0 = x.warp * Lay::kRowsPerWarp * p.rows_per_thread;         // first row of the warp
    return x;
  }
};

/// The block's rows of a head's state (checkpoint) in a shared-memory tile [rows_per_block][K]:
/// requested all at once, waited for pass by pass, written back pass by pass. Two ways to move
/// them (StepParams::bulk_copy): per-thread 16-byte cp.async copies (one group per pass) and
/// streaming 16-byte stores from registers; or one bulk copy per pass issued by lane 0 and
/// completing on the pass's mbarrier, the updated rows written back into the tile and streamed
/// out by one bulk store per pass. Every member but row() must be called by all lanes of a warp.
template <class TState, class Lay>
struct TileRows {
  static constexpr int K = Lay::kChunks * Lay::kVec;
  static constexpr int RPW = Lay::kRowsPerWarp;
  TState* tile;    // shared memory
  TState* S;       // global: row 0 of the block
  uint64_t* bars;  // this warp's barriers, one per pass (bulk)
  bool bulk;
  int rpt;
  SrSlot sr;  // the slot's stochastic rounding (fp16sr/fp16sr), else none

  __device__ __forceinline__ int row(const BlockRows& x, int i) const {
    return x.wrow0 + i * RPW + x.lane / Lay::kLanesPerRow;
  }
  __device__ __forceinline__ int pass_first(const BlockRows& x, int i) const {
    return x.wrow0 + i * RPW;
  }
  __device__ __forceinline__ int pass_rows(const BlockRows& x, int i) const {
    return max(0, min(RPW, x.nrows - pass_first(x, i)));
  }
  __device__ __forceinline__ uint32_t pass_bytes(const BlockRows& x, int i) const {
    return static_cast<uint32_t>(pass_rows(x, i) * K * static_cast<int>(sizeof(TState)));
  }

  /// Requests every row of this thread (cp.async) or warp (bulk). cp.async always commits
  /// kMaxRowsPerThread groups (the unused ones empty) so that pass i has landed after
  /// cp_async_wait_upto(kMaxRowsPerThread - 1 - i).
  __device__ __forceinline__ void request(const BlockRows& x) {
    if (bulk) {
      if (x.lane == 0) {
        for (int i = 0; i < rpt; ++i) mbar_init(&bars[i], 1);
        for (int i = 0; i < rpt; ++i) {
          const uint32_t bytes = pass_bytes(x, i);
          if (bytes == 0) break;
          const int64_t first = static_cast<int64_t>(pass_first(x, i)) * K;
          mbar_arrive_expect_tx(&bars[i], bytes);
          bulk_load(tile + first, S + first, bytes, &bars[i]);
        }
      }
      __syncwarp();  // the barriers are initialised before any lane waits on them
      return;
    }
#pragma unroll
    for (int i = 0; i < kMaxRowsPerThread; ++i) {
      const int r = row(x, i);
      if (i < rpt && r < x.nrows) {
#pragma unroll
        for (int c = 0; c < Lay::kChunksPerLane; ++c)
          cp_async16(tile + r * K + Lay::col(c, x.lr),
                     S + static_cast<int64_t>(r) * K + Lay::col(c, x.lr));
      }
      cp_async_commit();
    }
  }

  /// Waits until pass i (i a compile-time constant in an unrolled loop) has landed.
  __device__ __forceinline__ void wait(const BlockRows& x, int i) {
    if (bulk) {
      if (pass_rows(x, i) > 0) mbar_wait(&bars[i], 0);
    } else {
      cp_async_wait_upto(kMaxRowsPerThread - 1 - i);
    }
  }

  /// Writes this lane's updated chunks of pass i's row back (valid rows only).
  __device__ __forceinline__ void store(const BlockRows& x, int i, bool valid, const float* s) {
    const int r = row(x, i);
    if (!bulk) {
      if (valid) store_row<TState, Lay>(S + static_cast<int64_t>(r) * K, x.lr, s, sr);
      return;
    }
    if (valid) {
#pragma unroll
      for (int c = 0; c < Lay::kChunksPerLane; ++c) {
        *reinterpret_cast<uint4*>(tile + r * K + Lay::col(c, x.lr)) =
            pack16_state(S + static_cast<int64_t>(r) * K + Lay::col(c, x.lr),
                         &s[c * Lay::kVec], sr);
      }
      fence_proxy_async_smem();
    }
    __syncwarp();
    const uint32_t bytes = pass_bytes(x, i);
    if (x.lane == 0 && bytes > 0) {
      const int64_t first = static_cast<int64_t>(pass_first(x, i)) * K;
      bulk_store(S + first, tile + first, bytes);
      bulk_commit();
    }
  }

  /// Before the block may exit: bulk stores have finished reading the tile.
  __device__ __forceinline__ void finish(const BlockRows& x) {
    if (bulk && x.lane == 0) bulk_wait_read_all();
  }
};

/// Pad rows (ids outside [0, slots)): nothing read or written but y = 0.
template <class TIn>
__device__ __forceinline__ void zero_rows(TIn* y, int nrows) {
  for (int r = threadIdx.x; r < nrows; r += blockDim.x) y[r] = from_f32<TIn>(0.0f);
}

/// v of this thread's rows (0 past the block).
template <class TIn, class Tile>
__device__ __forceinline__ void load_v(const StepParams& p, const BlockRows& x, const Tile& tile,
                                       float* vv) {
  const TIn* v =
      static_cast<const TIn*>(p.v) + (static_cast<int64_t>(x.b) * p.HV + x.vh) * p.V + x.r0;
#pragma unroll
  for (int i = 0; i < kMaxRowsPerThread; ++i) {
    const int r = tile.row(x, i);
    vv[i] = (i < p.rows_per_thread && r < x.nrows) ? to_f32(v[r]) : 0.0f;
  }
}

template <class TIn, class TState, int K, bool KDA>
__global__ void __launch_bounds__(kMaxThreads) conventional_kernel(const StepParams p) {
  using Lay = Layout<sizeof(TState), K>;
  using Tok = Token<TIn, sizeof(TState), K, KDA>;
  const BlockRows x = BlockRows::of<Lay>(p);
  TIn* y = static_cast<TIn*>(p.y) + (static_cast<int64_t>(x.b) * p.HV + x.vh) * p.V + x.r0;
  const int slot = p.slot_ids[x.b];
  // The token's inputs and v do not depend on the slot: their loads are in flight with the slot
  // id's (latency-bound small batches wait on that chain), and the arithmetic on them runs while
  // the state rows fly.
  const typename Tok::Raw raw = Tok::fetch(p, x.b, x.vh, x.lr);
  extern __shared__ __align__(16) float conv_smem[];
  __shared__ uint64_t bars[kMaxThreads / 32][kMaxRowsPerThread];
  TileRows<TState, Lay> tile{reinterpret_cast<TState*>(conv_smem), nullptr, bars[x.warp],
                             p.bulk_copy, p.rows_per_thread};
  float vv[kMaxRowsPerThread];
  load_v<TIn>(p, x, tile, vv);
  if (slot < 0 || slot >= p.slots) return zero_rows(y, x.nrows);
  TState* const slot_state = static_cast<TState*>(p.state) + static_cast<int64_t>(slot) * p.HV * p.V * K;
  tile.S = slot_state + (static_cast<int64_t>(x.vh) * p.V + x.r0) * K;
  tile.sr = sr_slot(p.sr, slot, slot_state);
  tile.request(x);
  Tok t;
  t.prepare(p, raw);
#pragma unroll
  for (int i = 0; i < kMaxRowsPerThread; ++i) {
    if (i >= p.rows_per_thread) break;  // uniform over the block
    const int r = tile.row(x, i);
    const bool valid = r < x.nrows;
    tile.wait(x, i);
    float s[Tok::COLS];
    tile_row<TState, Lay>(tile.tile, r, x.lr, valid, s);
    const float2 yu = delta_rule_row(s, t, vv[i]);
    if (valid && x.lr == 0) y[r] = from_f32<TIn>(yu.x);
    tile.store(x, i, valid, s);
  }
  tile.finish(x);
}

}  // namespace replayssm::cuda::gdn
