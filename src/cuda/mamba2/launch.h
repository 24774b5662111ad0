// Declarations of the kernel launchers (defined in launch.cuh, instantiated per dtype in
// launch_*.cu): the host dispatch includes only this.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/flush_rows.cuh"
#include "cuda/mamba2/layout.cuh"
#include "cuda/mamba2/params.h"

namespace replayssm::cuda::mamba2 {

struct LaunchShape {
  dim3 grid;
  int threads = 0;
  size_t smem = 0;  ///< dynamic shared memory bytes (replay)
  int N = 0;        ///< d_state (compile-time in the kernels)
  int rpt = 0;      ///< rows per thread (compile-time in the kernels)
  bool flush = false;  ///< replay: the flush kernel (flush.cuh), not the ordinary-step kernels
  bool overlap = false;  ///< launched programmatically after the ordinary launch (pdl.cuh)
};

/// d_state values and rows-per-thread values the kernels are compiled for. The replay kernel holds
/// 8 rows per thread only with 4-byte checkpoints (a 16-bit row is twice the columns per lane).
inline bool supported_d_state(int64_t N) { return N == 64 || N == 128; }
inline bool conventional_rows_per_thread(int64_t rpt) {
  return rpt == 1 || rpt == 2 || rpt == 4 || rpt == 8;
}
inline bool replay_rows_per_thread(int64_t rpt, int64_t state_bytes) {
  return rpt == 4 || (rpt == 8 && state_bytes == 4);
}

/// Floats (4-byte words) of one checkpoint tile of `rows` rows (a multiple of 4: 16-byte aligned).
constexpr int64_t checkpoint_tile_floats(int64_t rows, int64_t N, int64_t state_bytes) {
  return (rows * N * state_bytes / 4 + 3) / 4 * 4;
}

/// The replay kernel's shared memory, in floats from the start (every part 16-byte aligned): the
/// checkpoint tile [rows][N] (state dtype), sB [R][N] ring B by logical record, sx [rows][xs]
/// ring x by (row, logical record), scoef [cs] record weights, sbc [cs] B_j·C, shead [4]
/// (A, delta, D, ā of the head), and the token's x and z per row, sxt [rows] and sz [rows].
struct ReplaySmem {
  int xs = 0, cs = 0;  ///< row strides of sx and scoef
  int B = 0, x = 0, coef = 0, bc = 0, head = 0, xt = 0, z = 0, total = 0;
  __host__ __device__ ReplaySmem(int R, int N, int rows, int state_bytes) {
    // A fold reads sx rows as 4-record vectors, the lanes of 1, 2 or 4 rows at once: an odd
    // number of 16-byte units per row puts those rows on distinct bank groups.
    int units = (R + 3) / 4;
    if (units % 2 == 0) ++units;
    xs = 4 * units;
    cs = 4 * ((R + 1 + 3) / 4);
    const int rows4 = (rows + 3) / 4 * 4;
    B = static_cast<int>(checkpoint_tile_floats(rows, N, state_bytes));
    x = B + R * N;
    coef = x + rows * xs;
    bc = coef + cs;
    head = bc + cs;
    xt = head + 4;
    z = xt + rows4;
    total = z + rows4;
  }
};

/// The flush kernel (flush.cuh): a block's items go through two stages, and its shared memory is
/// in floats from the start (every part 16-byte aligned). Per stage (`stage` floats apart): the
/// checkpoint tile [rows][N] (state dtype), the ring rows as stored by physical row, x [R][rows]
/// and B [R][N] (ring dtype), the ring deltas [R], the token's x and z [rows] and B and C [N]
/// (input dtype), and the cursor and head words (origin, hist, A_log, dt_bias, D). Then, shared by
/// the stages: ring B in fp32 by logical record [R][N], c_j·x_j by (row, logical record)
/// [rows][xs] (xs: whole 16-byte units, an odd number of them, as ReplaySmem), the flush rows
/// and their slots [kFlushScan] each, and one count per warp [32]. `rows` is rows_per_block.
/// Threads of a flush block at most (eight warps: several blocks per SM). An item is a whole head
/// where its rows fit these warps (the host splits a head's rows only where they do not): a
/// Super-120B head (64 rows of fp32, 32 KB) whole folds its all-flush step in 801 µs at batch 256
/// against 868 µs in two halves, and four or eight pieces are slower still (H200, 7816903,
/// bench/results/sweep-7816903.txt).
constexpr int kFlushThreads = 256;
struct FlushSmem {
  enum Word { kOrigin, kHist, kALog, kDtBias, kD, kWords = 8 };
  int rows = 0, xs = 0;
  int tile = 0, rawx = 0, rawB = 0, rdt = 0, xt = 0, z = 0, Bt = 0, Ct = 0, words = 0, stage = 0;
  int B = 0, cx = 0, list = 0, slots = 0, warps = 0, total = 0;
  __host__ __device__ FlushSmem(int R, int N, int rows_per_block, int state_bytes, int ring_bytes,
                                int in_bytes) {
    auto up4 = [](int v) { return (v + 3) / 4 * 4; };
    auto floats = [&](int elems, int bytes) { return up4((elems * bytes + 3) / 4); };
    rows = rows_per_block;
    int units = (R + 3) / 4;
    if (units % 2 == 0) ++units;
    xs = 4 * units;
    tile = 0;
    rawx = tile + floats(rows * N, state_bytes);
    rawB = rawx + floats(R * rows, ring_bytes);
    rdt = rawB + floats(R * N, ring_bytes);
    xt = rdt + up4(R);
    z = xt + floats(rows, in_bytes);
    Bt = z + floats(rows, in_bytes);
    Ct = Bt + floats(N, in_bytes);
    words = Ct + floats(N, in_bytes);
    stage = words + kWords;
    B = 2 * stage;
    cx = B + up4(R * N);
    list = cx + rows * xs;
    slots = list + kFlushScan;
    warps = slots + kFlushScan;
    total = warps + 32;
  }
};

/// The replay group kernel (replay_group.cuh): token x elements per streaming thread, and its
/// shared memory in floats from the start (every part 16-byte aligned): two checkpoint stages
/// [rows][N] (state_bits per element; a quantised read copy has K stages, one per head, each
/// with one scale word per (row, chunk) after its codes at `side`), ring x [K][R][rows] (ring
/// dtype, by physical row), sB [R][N] ring B by logical record (only where a row may fold: `fold`,
/// never for a quantised copy), S0·C and the token's x [K][rows] each, record weights [K][cs],
/// B_j·C [cs], and per head (A, delta, D, ā). `rows` is rows_per_block, K heads_per_block. The
/// token's z is read from global memory where y is formed.
constexpr int kGroupTokenItems = 8;
struct GroupSmem {
  int cs = 0, tile = 0, side = 0;  ///< weights' row stride; floats of one stage; its scale words
  int x = 0, B = 0, d = 0, xt = 0, coef = 0, bc = 0, head = 0, total = 0;
  __host__ __device__ GroupSmem(int R, int N, int rows, int state_bits, int ring_bytes, int K,
                                bool fold) {
    auto up4 = [](int v) { return (v + 3) / 4 * 4; };
    cs = up4(R + 1);
    side = up4(rows * N * state_bits / 32);
    const int chunks = N * state_bits / (8 * chunk_bytes_of_bits(state_bits));  // per row
    tile = up4(side + (state_bits <= 8 ? rows * chunks : 0));
    x = (state_bits <= 8 ? K : 2) * tile;  // a quantised copy stages every head at once
    B = x + up4((K * R * rows * ring_bytes + 3) / 4);
    d = B + (fold && state_bits > 8 ? R * N : 0);  // ring B rows are for folds only
    xt = d + up4(K * rows);
    coef = xt + up4(K * rows);
    bc = coef + K * cs;
    head = bc + cs;
    total = head + 4 * K;
  }
};

/// Whether a row of a group-kernel launch may fold (materialise its state): every launch but the
/// ordinary one (only = 1) on the output-only route. The others run the instantiation without
/// the fold (FOLD = false), which stages no ring B (GroupSmem's `fold`).
inline bool group_folds(const StepParams& p) { return p.only != 1 || p.state_route; }

template <class TIn, class TState>
void launch_conventional(const StepParams& p, const LaunchShape& ls, cudaStream_t stream);
template <class TIn, class TState, class TRing>
void launch_replay(const StepParams& p, const LaunchShape& ls, cudaStream_t stream);

}  // namespace replayssm::cuda::mamba2
