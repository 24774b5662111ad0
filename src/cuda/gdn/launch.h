// Declarations of the GDN/KDA kernel launchers (defined in launch.cuh, instantiated per state
// dtype in launch_*.cu) and the shared-memory carve-up of the replay kernel: the host dispatch
// includes only this.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/flush_rows.cuh"
#include "cuda/gdn/params.h"

namespace replayssm::cuda::gdn {

struct LaunchShape {
  dim3 grid;
  int threads = 0;
  size_t smem = 0;  ///< dynamic shared memory bytes
  int K = 0;        ///< head_k_dim (compile-time in the kernels)
  bool kda = false;
  int rpt = 8;      ///< group kernel: rows per thread per unit (compile-time, 4 or 8)
  bool flush = false;  ///< a flush kernel (flush.cuh, flush_pipe.cuh), not the ordinary-step ones
  bool overlap = false;  ///< launched programmatically after the ordinary launch (pdl.cuh)
};

/// Key dimensions the kernels are compiled for.
inline bool supported_head_k_dim(int64_t K) { return K == 64 || K == 128; }

/// Float offsets of the replay kernel's shared memory (every region 16-byte aligned): the
/// checkpoint tile [rows][K] (state dtype), sK [R][K], sG [R + 1][gw], sU [R][rows], sCH [R],
/// sDH [R]. gw = K for KDA, 1 for GDN.
struct ReplaySmem {
  int64_t k, g, u, ch, dh, total;
  __host__ __device__ static constexpr int64_t up4(int64_t n) { return (n + 3) / 4 * 4; }
  __host__ __device__ ReplaySmem(int64_t R, int64_t K, int64_t gw, int64_t rows,
                                 int64_t state_bytes) {
    k = up4(rows * K * state_bytes / 4);
    g = k + R * K;
    u = g + up4((R + 1) * gw);
    ch = u + up4(R * rows);
    dh = ch + up4(R);
    total = dh + up4(R);
  }
};

/// The replay group kernel's threads: kGroupStreamWarps stream warps and one chain warp.
constexpr int kGroupStreamWarps = 4;
constexpr int kGroupThreads = (kGroupStreamWarps + 1) * 32;

/// Whether a row of a group-kernel launch may fold (materialise its state): every launch but the
/// ordinary one of a step whose flush rows have a launch of their own (only = 1) on the
/// output-only route. The others run the instantiation without the fold (FOLD = false).
inline bool group_folds(const StepParams& p) { return p.only != 1 || p.state_route; }

/// Float offsets of the group kernel's shared memory (every region 16-byte aligned): `stages`
/// checkpoint stages [U][K] (state_bits per element; a quantised read copy's stage, state_bits
/// 8 or 4, then holds from `side` one scale word per 16-element lane chunk, [U][K / 16]), sU
/// [NU][R][U] ring u, sK [R][K], sKK/sKQ [R], sCK/sCQ
/// [NHB][R], sBK/sBQ [NHB][K] (KDA), sG ring gates by physical row ([R][K] KDA, [NHB][R] GDN),
/// head scalars [2 NHB + 1], sDot [NU][U] float2.
/// U = rows per unit, NU = NHB x UPH units per block, gw = K for KDA, 1 for GDN; sK is empty
/// without ring_k (a GDN launch that folds no row: only = 1, output-only route).
struct GroupSmem {
  int64_t side, stage, u, k, kk, kq, ck, cq, bk, bq, g, head, dot, total;
  __host__ __device__ static constexpr int64_t up4(int64_t n) { return (n + 3) / 4 * 4; }
  __host__ __device__ GroupSmem(int64_t R, int64_t K, int64_t gw, int64_t U, int64_t state_bits,
                                int64_t nhb, int64_t uph, int64_t stages, bool ring_k) {
    side = up4(U * K * state_bits / 32);
    stage = side + (state_bits <= 8 ? up4(U * K / 16) : 0);
    u = stages * stage;
    k = u + up4(nhb * uph * R * U);
    kk = k + (ring_k ? R * K : 0);
    kq = kk + up4(R);
    ck = kq + up4(R);
    cq = ck + up4(nhb * R);
    bk = cq + up4(nhb * R);
    bq = bk + (gw > 1 ? nhb * K : 0);
    g = bq + (gw > 1 ? nhb * K : 0);
    head = g + up4(gw > 1 ? R * K : nhb * R);
    dot = head + up4(2 * nhb + 1);
    total = dot + 2 * nhb * uph * U;
  }
};

/// The flush kernel (flush.cuh): threads per block at most, and its shared memory in floats from
/// the start (every part 16-byte aligned): sK [R][K] ring k^ and sU [R][rows] ring u (then
/// c_j·u_j; KDA: c_j⊙k^_j) by logical record, ring g [R][gw] by logical record, c_j [R] (KDA: ā'
/// [K]), ā' and the token's alpha and beta, the token's k^, q^, alpha·k^ and (KDA) alpha [K]
/// each, the flush-row list [kFlushScan] and per-warp counts [32]; with `exact` (split modes,
/// flush.cuh exact_u) then ck [R][R], A [R], beta [R], dk [R][rows] and (KDA) bk [R][K].
/// `rows` is rows_per_block; gw = K for KDA, 1 for GDN.
constexpr int kFlushThreads = 256;
constexpr int kFlushRowsPerThread = 4;
struct FlushSmem {
  int rows = 0, k = 0, u = 0, g = 0, c = 0, head = 0, tk = 0, tq = 0, ta = 0, tal = 0, list = 0;
  int warps = 0, ck = 0, a = 0, beta = 0, dk = 0, bk = 0, total = 0;
  __host__ __device__ FlushSmem(int R, int K, int rows_per_block, int gw, bool exact = false) {
    auto up4 = [](int n) { return (n + 3) / 4 * 4; };
    rows = up4(rows_per_block);
    u = k + R * K;
    g = u + R * rows;
    c = g + up4(R * gw);
    head = c + up4(gw > 1 ? K : R);
    tk = head + 4;
    tq = tk + K;
    ta = tq + K;
    tal = ta + K;
    list = tal + (gw > 1 ? K : 0);
    warps = list + kFlushScan;
    ck = warps + 32;
    a = ck + (exact ? up4(R * R) : 0);
    beta = a + (exact ? up4(R) : 0);
    dk = beta + (exact ? up4(R) : 0);
    bk = dk + (exact ? R * rows : 0);
    total = bk + (exact && gw > 1 ? R * K : 0);
  }
};

/// The pipelined flush kernel (flush_pipe.cuh): ring rows it takes at most (one record per lane
/// of its producer warp), and its shared memory in floats: two checkpoint tiles [rows][K] (state
/// dtype) from `tile0`, `tile` floats apart; three ring buffers from `ring0`, `rbuf` floats apart,
/// each (offsets from its start) ring k^ [R][K] and u [R][rows] by logical record, c_j [R], ā' and
/// the token's alpha and beta [4], the token's k^, q^, alpha·k^ [K] each, its v [rows] and the
/// item [8 ints]; then the flush-row list [kFlushScan], per-warp counts [32] and the eight
/// mbarriers. `rows` is rows_per_block rounded up to a multiple of 4.
constexpr int kFlushPipeMaxR = 32;
constexpr int kFlushPipeMaxRows = 128;  ///< rows_per_block at most (the producer's v loads)
constexpr int kFlushPipeTiles = 2, kFlushPipeRings = 3;
constexpr int kFlushPipeProducers = 2;  ///< producer warps after the consumer warps
struct FlushPipeSmem {
  int rows = 0, tile0 = 0, tile = 0, ring0 = 0, rbuf = 0;
  int k = 0, u = 0, c = 0, head = 0, tk = 0, tq = 0, ta = 0, v = 0, item = 0;
  int list = 0, warps = 0, bars = 0, total = 0;
  __host__ __device__ FlushPipeSmem(int R, int K, int rows_per_block, int state_bytes) {
    auto up4 = [](int n) { return (n + 3) / 4 * 4; };
    rows = up4(rows_per_block);
    tile = up4(rows * K * state_bytes / 4);
    ring0 = tile0 + kFlushPipeTiles * tile;
    u = k + R * K;
    c = u + R * rows;
    head = c + up4(R);
    tk = head + 4;
    tq = tk + K;
    ta = tq + K;
    v = ta + K;
    item = v + rows;
    rbuf = item + 8;
    list = ring0 + kFlushPipeRings * rbuf;
    warps = list + kFlushScan;
    bars = warps + 32;
    total = bars + 2 * (kFlushPipeTiles + 2 * kFlushPipeRings);
  }
};

/// Bytes of the conventional kernel's tile.
inline size_t conventional_smem_bytes(int64_t rows, int64_t K, int64_t state_bytes) {
  return static_cast<size_t>(rows * K * state_bytes);
}

template <class TIn, class TState>
void launch_conventional(const StepParams& p, const LaunchShape& ls, cudaStream_t stream);
template <class TIn, class TState>
void launch_replay(const StepParams& p, const LaunchShape& ls, cudaStream_t stream);

}  // namespace replayssm::cuda::gdn
