// The ReplaySSM speculative verify step of Mamba-2, group kernel (the dispatcher's default from
// batch x padded T = 64; below it verify.cuh's one-block-per-head form;
// RSSM_MAMBA2_VERIFY_PLAN=group=0/1 forces either). Same contract and formulas as verify.cuh:
//   y_s = exp(A·P_{h+s})·(S0·C_s) + Σ_{l≤h+s} δ_l·exp(A·(P_{h+s} − P_l))·(B_l·C_s)·x_l + D·x_{h+s}
// over the window of m = h + T_b records (committed history, then the row's tokens, appended to
// the ring), and on is_flush rows with history S0 <- exp(A·P_{h-1})·S0 + Σ_{l<h} δ_l·exp(A·(P_{h-1}
// − P_l))·x_l·B_lᵀ after the outputs have read the old S0. Cursors are only read.
//
// The structure of the ordinary step's group kernel (replay_group.cuh), with a token axis: the
// outputs need from the checkpoint only d_s = S0_r·C_s, which does not depend on the cursor, so the
// chain (slot -> cursor -> ring -> weights) runs in two warps of its own beside the checkpoint
// stream, once per block of K heads of one group (the whole group where shared memory allows):
//   - streaming warps: units of 16 rows x 32 columns of one head's checkpoint, loaded into
//     registers a unit ahead (no shared-memory stage); per unit the partial dots S0·C_s of its
//     32 columns for all KT tokens on the tensor cores (mma m16n8k8, tf32 pairs: common/
//     mma_tf32.cuh; the rows in M, the tokens in N), stored as one of N / 32 partials that the
//     epilogue sums in a fixed order; on flush rows (the whole block: one batch row) the fold
//     of the same registers right after, again on the tensor cores (rows in M, the unit's
//     columns in N, the records in K; the accumulator starts at ā_f·S0), and the unit's store —
//     the only state write of a verify step. Flush rows wait for the chain's fold inputs once;
//     the ring x rows and the tokens' x and z are staged beside the stream (no cursor wait);
//   - chain warp 0: B_l·C_s for every record of the window (ring B, then the tokens' B, which the
//     group's first block appends); chain warp 1 meanwhile: every head's deltas (the tokens'
//     appended), prefix sums, decays and flush weights, all heads' ring deltas in flight at once;
//     then both: the record weights, heads split between them;
//   - one barrier, then the epilogue writes y (coalesced) and appends the tokens' x rows.
// A block's lifetime is then its checkpoint stream (the chain overlaps it), not the chain's
// dependent loads: the measured reason the one-head-per-block form (verify.cuh) and a
// phase-by-phase form of this kernel ran at 2-3x an ordinary step. The dots and the fold ran on
// FFMA before (KT FMAs per element and a butterfly per row; a fold of ~4.6 instructions per FMA):
// 60% of the instructions at T = 4 (ncu, bench/NOTES.md "Session 24").
// The token axis is padded to KT (1, 2, 4 or 8); outputs past T_b are 0. fp32 checkpoints only.
// Grid: x = (g * nchunks + chunk) * nsplit + split, y = batch row. Shared memory: VerifyGroupSmem.
// N a multiple of 32.
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/mma_tf32.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/mamba2/conventional.cuh"
#include "cuda/mamba2/params.h"
#include "cuda/mamba2/replay.cuh"
#include "cuda/mamba2/step_math.cuh"

namespace replayssm::cuda::mamba2 {

/// Threads of a verify group block: streaming warps plus the two chain warps, at most.
constexpr int kVerifyChainThreads = 64;
constexpr int kVerifyGroupThreads = 256 + kVerifyChainThreads;
/// Shared memory per block (two blocks per SM) the host picks heads per block under.
constexpr int kVerifyBlockSmem = 112 * 1024;
/// Columns of a streaming unit (its partial dots are one of N / kVerifyUnitCols partials).
constexpr int kVerifyUnitCols = 32;
/// Units a streaming warp requests into L2 ahead of their loads where the plan asks for it
/// (VerifyPlan::l2ahead; 8 ahead was slower at every measured point, bench/NOTES.md "Session 26").
constexpr int kVerifyL2Ahead = 4;

/// Shared memory of verify_group_kernel in floats (every part 16-byte aligned): ring x [K][R][rows]
/// (ring dtype, by physical row), the tokens' x and z [K][KT][rows] each (input dtype), ring B
/// [R][N] by logical record (fp32, flush rows; columns swizzled by fold_col), the partial dots
/// S0·C_s [K][N / 32][KT][rows], record weights [K][R][KT], B_l·C_s [R][KT], decays [K][KT + 1]
/// (the last: the flush decay), flush weights [K][R], D and A [2][K], and every head's window
/// deltas and their prefix sums [K][2][64]. `rows` is rows_per_block, K heads_per_block.
struct VerifyGroupSmem {
  int x = 0, xt = 0, zt = 0, B = 0, d = 0, coef = 0, bc = 0, dec = 0, wf = 0, D = 0;
  int win = 0, total = 0;
  __host__ __device__ VerifyGroupSmem(int R, int N, int rows, int K, int KT, int ring_bytes,
                                      int in_bytes) {
    auto up4 = [](int v) { return (v + 3) / 4 * 4; };
    auto floats = [&](int elems, int bytes) { return up4((elems * bytes + 3) / 4); };
    x = 0;
    xt = x + floats(K * R * rows, ring_bytes);
    zt = xt + floats(K * KT * rows, in_bytes);
    B = zt + floats(K * KT * rows, in_bytes);
    d = B + R * N;
    coef = d + up4(K * (N / kVerifyUnitCols) * KT * rows);
    bc = coef + up4(K * R * KT);
    dec = bc + up4(R * KT);
    wf = dec + up4(K * (KT + 1));
    D = wf + up4(K * R);
    win = D + up4(2 * K);
    total = win + K * 128;
  }
};

namespace verify_group_detail {

constexpr unsigned kFull = 0xffffffffu;

constexpr int log2i(int v) { return v <= 1 ? 0 : 1 + log2i(v / 2); }

/// Where column n of ring B record l sits in its shared-memory row: bits 1 and 4 flipped by the
/// record's low two bits, so that the fold's B fragments (lane 4g + c reads record c or c + 4 at
/// one of eight columns chosen by g) hit 32 different banks.
__device__ __forceinline__ int fold_col(int l, int n) { return n ^ (((l & 1) << 1) | ((l & 2) << 3)); }

/// The chain warp's B_l·C_s for one record (NL elements of B per lane, c the tokens' C over the
/// same elements): lane groups of 32 / KT lanes end with token column lane >> log2(32 / KT); the
/// group's first lane writes bc[l][col]. Every lane of the warp must call it.
template <int KT, int NL>
__device__ __forceinline__ void record_bc(const float (&e)[NL], const float (&c)[KT][NL],
                                          float* bc, int l, int lane) {
  constexpr int SH = log2i(32 / KT);
  float part[KT];
#pragma unroll
  for (int s = 0; s < KT; ++s) {
    part[s] = 0.0f;
#pragma unroll
    for (int v = 0; v < NL; ++v) part[s] = __fmaf_rn(e[v], c[s][v], part[s]);
  }
  const float sum = transposed_sum<KT, 32>(part, lane);
  if ((lane & ((1 << SH) - 1)) == 0) bc[l * KT + (lane >> SH)] = sum;
}

}  // namespace verify_group_detail

template <class TIn, class TRing, int N, int KT, int L2A = 0>
__global__ void __launch_bounds__(kVerifyGroupThreads, 2) verify_group_kernel(const StepParams p) {
  using namespace verify_group_detail;
  using replay_detail::Loaded;
  static_assert(N % kVerifyUnitCols == 0 && KT <= 8, "d_state a multiple of 32, at most 8 tokens");
  constexpr int NQ = N / kVerifyUnitCols;  // column units of a row: partial dots per element
  constexpr int NL = N / 32;               // B and C elements per lane of chain warp 0
  constexpr int VX = 16 / static_cast<int>(sizeof(TRing));  // ring x elements per 16-byte copy
  constexpr int VI = 16 / static_cast<int>(sizeof(TIn));    // input elements per 16-byte copy
  constexpr int RB = KT >= 8 ? 4 : 8;  // ring B rows in flight (chain warp 0)
  constexpr int HB = 8;                // heads' ring deltas in flight (chain warp 1)
  constexpr bool kCExact = sizeof(TIn) == 2;    // bf16 C: exact in tf32, no lo part
  constexpr bool kBExact = sizeof(TRing) == 2;  // bf16 ring B likewise

  extern __shared__ __align__(16) float smem[];
  const int R = p.R, P = p.P, rpb = p.rows_per_block, K = p.heads_per_block, Ty = p.Ty;
  const VerifyGroupSmem sm(R, N, rpb, K, KT, static_cast<int>(sizeof(TRing)),
                           static_cast<int>(sizeof(TIn)));
  TRing* const sxr = reinterpret_cast<TRing*>(smem + sm.x);  // [K][R][rpb] ring x, physical rows
  TIn* const sxt = reinterpret_cast<TIn*>(smem + sm.xt);     // [K][KT][rpb] tokens' x
  TIn* const szt = reinterpret_cast<TIn*>(smem + sm.zt);     // [K][KT][rpb] tokens' z
  float* const sB = smem + sm.B;        // [R][N] ring B by logical record (flush rows; fold_col)
  float* const sd = smem + sm.d;        // [K][NQ][KT][rpb] partial S0·C_s of each column unit
  float* const scoef = smem + sm.coef;  // [K][R][KT] record weights x B_l·C_s
  float* const sbc = smem + sm.bc;      // [R][KT] B_l·C_s
  float* const sdec = smem + sm.dec;    // [K][KT + 1] exp(A P_{h+s}); [KT]: the flush decay
  float* const swf = smem + sm.wf;      // [K][R] flush weights
  float* const sD = smem + sm.D;        // [K] D, then [K] A
  float* const swin = smem + sm.win;    // [K][2][64] window deltas, their prefix sums

  const int split = blockIdx.x % p.nsplit;
  const int rest = blockIdx.x / p.nsplit;
  const int chunk = rest % p.nchunks;
  const int g = rest / p.nchunks;
  const int b = blockIdx.y;
  const int hd0 = g * p.heads_per_group + chunk * K;
  const int p0 = split * rpb;
  const int nrows = min(rpb, P - p0);
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int nstream = nthreads - kVerifyChainThreads;  // the last two warps are the chain warps
  const int lane = tid & 31, warp = tid >> 5;
  TIn* const y = static_cast<TIn*>(p.y);
  auto y_at = [&](int s, int k, int r) {  // y [batch, Ty, H, P]
    return ((static_cast<int64_t>(b) * Ty + s) * p.H + hd0 + k) * P + p0 + r;
  };

  const int slot = p.slot_ids[b];
  if (slot < 0 || slot >= p.slots) {  // pad row: nothing read or written but y = 0
    const int V = K * nrows;
    for (int i = tid; i < Ty * V; i += nthreads) {
      const int s = i / V, v = i - s * V, k = v / nrows;
      y[y_at(s, k, v - k * nrows)] = from_f32<TIn>(0.0f);
    }
    return;
  }
  const int64_t sh0 = static_cast<int64_t>(slot) * p.H + hd0;  // (slot, first head)
  float* const S0 = static_cast<float*>(p.state) + (sh0 * P + p0) * N;  // head k: + k*P*N
  const TRing* const ringx = static_cast<const TRing*>(p.ring_x) + sh0 * R * P + p0;

  // The cursor and token count (raw loads; resolve() is where a warp first waits for them),
  // clamped so that even corrupt values cannot address outside the slot's ring.
  const int origin_raw = p.origin[slot];
  const int hist_raw = p.hist[slot];
  const int flush_raw = p.is_flush[slot];
  const int Tb = p.num_tokens ? min(max(p.num_tokens[b], 1), Ty) : Ty;
  int origin = 0, hist = 0;
  auto resolve = [&] {
    origin = origin_raw % R;
    if (origin < 0) origin += R;
    hist = min(max(hist_raw, 0), R - Tb);
  };
  auto phys = [&](int l) {
    const int q = origin + l;
    return q >= R ? q - R : q;
  };

  // Streaming warps: unit u = (head k, m-tile mt, column unit q), u = (k * mts + mt) * NQ + q;
  // warp w takes units w, w + nw, ... A lane (mg, mc) = (lane >> 2, lane & 3) holds rows
  // 16 mt + mg and + 8 of the unit, columns 32 q + 16 m + 4 mc .. + 3 (m = 0, 1): v[h][m] for the
  // row half h. Rows past the block's are zero and never stored.
  // A warp walks its units in (k, mt, q) coordinates, stepping by nw units without divisions.
  const int nw = nstream >> 5, mts = (nrows + 15) / 16;
  const int mg = lane >> 2, mc = lane & 3;
  struct Unit {
    int k, mt, q;
  };
  const int step_q = nw % NQ, step_mt = (nw / NQ) % mts, step_k = (nw / NQ) / mts;
  auto next_unit = [&](Unit u) {
    u.q += step_q;
    u.mt += step_mt;
    if (u.q >= NQ) u.q -= NQ, ++u.mt;
    if (u.mt >= mts) u.mt -= mts, ++u.k;
    u.k += step_k;
    return u;
  };
  const Unit first{warp / NQ / mts, (warp / NQ) % mts, warp % NQ};
  auto load_unit = [&](const Unit& u, float4 (&v)[2][2]) {
    const int k = u.k, q = u.q, r = u.mt * 16 + mg;
    const float* src = S0 + (static_cast<int64_t>(k) * P + r) * N + q * kVerifyUnitCols + 4 * mc;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int m = 0; m < 2; ++m)
        v[h][m] = r + 8 * h < nrows ? __ldcs(reinterpret_cast<const float4*>(src + h * 8 * N + 16 * m))
                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  };
  // L2A > 0: each streaming warp requests the unit L2A on into L2 (16 lanes, one 128-byte row
  // each) as it loads the next one, so that unit's loads later hit L2.
  auto l2_unit = [&](const Unit& u) {
    const int r = u.mt * 16 + lane;
    if (lane < 16 && r < nrows)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(S0 + (static_cast<int64_t>(u.k) * P + r) * N +
                                                    u.q * kVerifyUnitCols));
  };
  Unit pf = first;
  float4 va[2][2], vb[2][2];  // the unit in hand and the next one
  if (tid < nstream) {
    if (first.k < K) load_unit(first, va);
    if constexpr (L2A > 0)
      for (int i = 0; i <= L2A; ++i) {
        if (i > 0 && pf.k < K) l2_unit(pf);
        pf = next_unit(pf);
      }
    {  // every physical ring x row of the block's heads, and the tokens' x and z: one group
      const int cpr = nrows / VX, total = K * R * cpr;
#pragma unroll 1
      for (int idx = tid; idx < total; idx += nstream) {
        const int c = idx % cpr, rec = idx / cpr, k = rec / R, q = rec - k * R;
        cp_async16(sxr + (k * R + q) * rpb + c * VX,
                   ringx + (static_cast<int64_t>(k) * R + q) * P + c * VX);
      }
      const int cpi = nrows / VI, nt = K * Ty * cpi, nz = p.has_z ? 2 * nt : nt;
#pragma unroll 1
      for (int idx = tid; idx < nz; idx += nstream) {
        const bool is_z = idx >= nt;
        const int i = is_z ? idx - nt : idx;
        const int c = i % cpi, ks = i / cpi, k = ks / Ty, s = ks - k * Ty;
        const int64_t src = ((static_cast<int64_t>(b) * Ty + s) * p.H + hd0 + k) * P + p0 + c * VI;
        cp_async16((is_z ? szt : sxt) + (k * KT + s) * rpb + c * VI,
                   static_cast<const TIn*>(is_z ? p.z : p.x) + src);
      }
      cp_async_commit();
    }
    resolve();
  } else {
    const int cw = (tid - nstream) >> 5;  // chain warp 0 or 1
    resolve();
    const int m = hist + Tb;
    const bool fold = flush_raw != 0 && hist > 0;
    if (cw == 0) {
      // ---- B_l·C_s of the history (ring B, RB rows in flight; kept in fp32 for a fold) ...
      float c[KT][NL];
      {
        Loaded<TIn, NL> ct[KT];
#pragma unroll
        for (int s = 0; s < KT; ++s)
          if (s < Ty)
            ct[s].load(static_cast<const TIn*>(p.C) +
                       ((static_cast<int64_t>(b) * Ty + s) * p.G + g) * N + lane * NL);
#pragma unroll
        for (int s = 0; s < KT; ++s) {
          if (s < Ty)
            ct[s].to(c[s]);
          else
#pragma unroll
            for (int v = 0; v < NL; ++v) c[s][v] = 0.0f;
        }
      }
      TRing* const ringB =
          static_cast<TRing*>(p.ring_B) + (static_cast<int64_t>(slot) * p.G + g) * R * N;
#pragma unroll 1
      for (int l0 = 0; l0 < hist; l0 += RB) {
        Loaded<TRing, NL> rb[RB];
#pragma unroll
        for (int u = 0; u < RB; ++u)
          if (l0 + u < hist) rb[u].load(ringB + static_cast<int64_t>(phys(l0 + u)) * N + lane * NL);
#pragma unroll
        for (int u = 0; u < RB; ++u) {
          const int l = l0 + u;
          if (l >= hist) break;  // uniform
          float e[NL];
          rb[u].to(e);
          record_bc<KT, NL>(e, c, sbc, l, lane);
          if (fold)
#pragma unroll
            for (int v = 0; v < NL; ++v) sB[l * N + fold_col(l, lane * NL + v)] = e[v];
        }
      }
      // ... and of the tokens (inputs; the group's first block appends them to the ring).
      const bool owns_B = chunk == 0 && split == 0;
      Loaded<TIn, NL> tb[KT];
#pragma unroll
      for (int t = 0; t < KT; ++t)
        if (t < Tb)
          tb[t].load(static_cast<const TIn*>(p.B) +
                     ((static_cast<int64_t>(b) * Ty + t) * p.G + g) * N + lane * NL);
#pragma unroll
      for (int t = 0; t < KT; ++t) {
        if (t >= Tb) break;  // uniform
        float e[NL];
        tb[t].to(e);
        record_bc<KT, NL>(e, c, sbc, hist + t, lane);
        if (owns_B) {
          TRing* dst = ringB + static_cast<int64_t>(phys(hist + t)) * N + lane * NL;
#pragma unroll
          for (int v = 0; v < NL; ++v) dst[v] = from_f32<TRing>(e[v]);
        }
      }
    } else {
      // ---- every head's window deltas (the tokens' appended by the first split), prefix sums,
      // decays and flush weights; HB heads' loads in flight at a time.
      float A = 0.0f, dtb = 0.0f;  // lane k < K: head hd0 + k
      if (lane < K) {
        const int hd = hd0 + lane;
        A = A_of(p.A_log[hd]);
        dtb = p.dt_bias[hd];
        sD[lane] = p.has_D ? p.D[hd] : 0.0f;
      }
#pragma unroll 1
      for (int k0 = 0; k0 < K; k0 += HB) {
        float d0[HB], d1[HB];
#pragma unroll
        for (int u = 0; u < HB; ++u) {
          const int k = k0 + u;
          d0[u] = d1[u] = 0.0f;
          if (k >= K) continue;
          const float* rdt = p.ring_dt + (sh0 + k) * R;
          const int64_t it = (static_cast<int64_t>(b) * Ty - hist) * p.H + hd0 + k;
          if (lane < hist)
            d0[u] = rdt[phys(lane)];
          else if (lane < m)
            d0[u] = load_dt<TIn>(p, it + static_cast<int64_t>(lane) * p.H);
          if (lane + 32 < hist)
            d1[u] = rdt[phys(lane + 32)];
          else if (lane + 32 < m)
            d1[u] = load_dt<TIn>(p, it + static_cast<int64_t>(lane + 32) * p.H);
        }
#pragma unroll
        for (int u = 0; u < HB; ++u) {
          const int k = k0 + u;
          if (k >= K) break;  // uniform
          const float Ak = __shfl_sync(kFull, A, k), dtbk = __shfl_sync(kFull, dtb, k);
          float* const rdt = p.ring_dt + (sh0 + k) * R;
          float e0 = d0[u], e1 = d1[u];
          if (lane >= hist && lane < m) {
            e0 = delta_of(e0, dtbk, p.softplus);
            if (split == 0) rdt[phys(lane)] = e0;
          }
          if (lane + 32 >= hist && lane + 32 < m) {
            e1 = delta_of(e1, dtbk, p.softplus);
            if (split == 0) rdt[phys(lane + 32)] = e1;
          }
          const float c0 = warp_prefix_sum(e0, lane);
          const float c1 = __fadd_rn(warp_prefix_sum(e1, lane), __shfl_sync(kFull, c0, 31));
          float* const win = swin + k * 128;
          win[lane] = e0, win[lane + 32] = e1, win[64 + lane] = c0, win[96 + lane] = c1;
          // decays exp(A P_{h+s}): P_t from the lane that holds record t
          float* const dec = sdec + k * (KT + 1);
          const int t = min(hist + lane % KT, 63);
          const float Pt0 = __shfl_sync(kFull, c0, t & 31), Pt1 = __shfl_sync(kFull, c1, t & 31);
          if (lane < KT) dec[lane] = lane < Tb ? expf(fminf(__fmul_rn(Ak, t < 32 ? Pt0 : Pt1), 0.0f)) : 0.0f;
          if (fold) {
            const int f = hist - 1;
            const float f0 = __shfl_sync(kFull, c0, f & 31), f1 = __shfl_sync(kFull, c1, f & 31);
            const float Pf = f < 32 ? f0 : f1;
            if (lane < hist)
              swf[k * R + lane] = __fmul_rn(e0, expf(fminf(__fmul_rn(Ak, __fsub_rn(Pf, c0)), 0.0f)));
            if (lane + 32 < hist)
              swf[k * R + lane + 32] = __fmul_rn(e1, expf(fminf(__fmul_rn(Ak, __fsub_rn(Pf, c1)), 0.0f)));
            if (lane == 0) dec[KT] = expf(fminf(__fmul_rn(Ak, Pf), 0.0f));
          }
        }
      }
      if (lane < K) sD[K + lane] = A;
    }
    __syncwarp();  // bar.sync is warp-aligned; lanes diverged just above
    asm volatile("bar.sync 1, %0;" ::"n"(kVerifyChainThreads) : "memory");
    // A fold needs B_l, the flush weights and decay, not the record weights: flush rows' streams
    // go on while the chain warps form those.
    if (fold) __syncthreads();  // pairs with the streaming warps' fold barrier below
    // ---- both chain warps: record weights, heads split between them.
#pragma unroll 1
    for (int k = cw; k < K; k += 2) {
      const float Ak = sD[K + k];
      const float* const win = swin + k * 128;
      float* const coef = scoef + k * R * KT;
      for (int i = lane; i < m * KT; i += 32) {
        const int l = i / KT, s = i - l * KT, t = hist + s;
        float w = 0.0f;
        if (s < Tb && l <= t)
          w = __fmul_rn(__fmul_rn(win[l], expf(fminf(__fmul_rn(Ak, __fsub_rn(win[64 + t], win[64 + l])), 0.0f))),
                        sbc[l * KT + s]);
        coef[i] = w;
      }
    }
  }

  const bool fold = flush_raw != 0 && hist > 0;  // block-uniform: one batch row
  if (tid < nstream) {
    if (fold) {  // the flush weights, B_l and x_l are needed before the first fold
      cp_async_wait<0>();
      __syncthreads();  // pairs with the chain warps' fold barrier (same `fold`: one batch row)
    }
    // The tokens' C as the B fragments of the warp's column unit q: lane (mg, mc) holds token mg's
    // C at columns 32 q + 16 m + 4 mc + 2 e + {0, 1} as b0, b1 of k-step (m, e) — the same
    // columns as its checkpoint elements (the k order of a dot is free). Tokens past Ty are 0.
    uint32_t cb[2][4], cl[2][4];  // tf32 hi and lo parts (lo unused for bf16 inputs: exact)
    int cq = -1;
    auto load_c = [&](int q) {
#pragma unroll
      for (int mm = 0; mm < 2; ++mm) {
        float cf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (mg < Ty)
          load_vec<TIn, 4>(static_cast<const TIn*>(p.C) + ((static_cast<int64_t>(b) * Ty + mg) * p.G + g) * N +
                               q * kVerifyUnitCols + 16 * mm + 4 * mc,
                           cf);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const Tf32Pair t = Tf32Pair::of(cf[j]);
          cb[mm][j] = kCExact ? __float_as_uint(cf[j]) : t.hi;
          cl[mm][j] = t.lo;
        }
      }
    };
    // One unit: its dots, and on flush rows its fold and store (cur: its elements).
    auto unit = [&](const Unit& at, const float4 (&cur)[2][2]) {
      const int q = at.q, mt = at.mt, k = at.k;
      if (q != cq) {  // warp-uniform
        load_c(q);
        cq = q;
      }
      const int r0 = mt * 16 + mg;  // this lane's rows r0 and r0 + 8
      // Element (h, mm, e, t): row r0 + 8 h, column 32 q + 16 mm + 4 mc + 2 e + t.
      auto el = [&](int h, int mm, int e, int t) {
        const float4& v = cur[h][mm];
        return e ? (t ? v.w : v.z) : (t ? v.y : v.x);
      };
      // ---- partial dots S0·C_s over the unit's columns: rows in M, tokens in N, columns in K
      float dh[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int mm = 0; mm < 2; ++mm)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const Tf32Pair a0 = Tf32Pair::of(el(0, mm, e, 0)), a1 = Tf32Pair::of(el(1, mm, e, 0));
          const Tf32Pair a2 = Tf32Pair::of(el(0, mm, e, 1)), a3 = Tf32Pair::of(el(1, mm, e, 1));
          const uint32_t b0 = cb[mm][2 * e], b1 = cb[mm][2 * e + 1];
          mma_tf32(dh, a0.hi, a1.hi, a2.hi, a3.hi, b0, b1);
          mma_tf32(dl, a0.lo, a1.lo, a2.lo, a3.lo, b0, b1);
          if constexpr (!kCExact) mma_tf32(dl, a0.hi, a1.hi, a2.hi, a3.hi, cl[mm][2 * e], cl[mm][2 * e + 1]);
        }
      {  // d_j: row r0 + 8 (j >> 1), token 2 mc + (j & 1)
        float* const dq = sd + (k * NQ + q) * KT * rpb;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int s = 2 * mc + (j & 1), r = r0 + (j >> 1) * 8;
          if (s < KT && r < nrows) dq[s * rpb + r] = __fadd_rn(dh[j], dl[j]);
        }
      }
      if (fold) {  // S_h = ā_f·S0 + Σ_{l<h} w_l·x_l·B_lᵀ: rows in M, the unit's columns in N
        // (n-tile (mm, e): n = 2 c' + t is column 32 q + 16 mm + 4 c' + 2 e + t, so that each
        // lane accumulates its own elements), records in K
        const float af = sdec[k * (KT + 1) + KT];
        const float* const wk = swf + k * R;
        const TRing* const xk = sxr + k * R * rpb;
        float d[2][2][4];
#pragma unroll
        for (int mm = 0; mm < 2; ++mm)
#pragma unroll
          for (int e = 0; e < 2; ++e)
#pragma unroll
            for (int j = 0; j < 4; ++j) d[mm][e][j] = __fmul_rn(af, el(j >> 1, mm, e, j & 1));
        const int colg = q * kVerifyUnitCols + 4 * (mg >> 1) + (mg & 1);  // B column of n = mg
#pragma unroll 1
        for (int l0 = 0; l0 < hist; l0 += 8) {
          const int la = l0 + mc, lb = la + 4;  // this lane's records (k = mc, mc + 4)
          float w[4];  // a0 (r0, la), a1 (r0 + 8, la), a2 (r0, lb), a3 (r0 + 8, lb)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int l = j < 2 ? la : lb, r = r0 + (j & 1) * 8;
            w[j] = l < hist && r < nrows ? __fmul_rn(wk[l], to_f32(xk[phys(l) * rpb + r])) : 0.0f;
          }
          const Tf32Pair wp[4] = {Tf32Pair::of(w[0]), Tf32Pair::of(w[1]), Tf32Pair::of(w[2]),
                                  Tf32Pair::of(w[3])};
          auto pair = [](float x) { return kBExact ? Tf32Pair::exact(x) : Tf32Pair::of(x); };
#pragma unroll
          for (int mm = 0; mm < 2; ++mm)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int col = colg + 16 * mm + 2 * e;
              const float ba = la < hist ? sB[la * N + fold_col(la, col)] : 0.0f;
              const float bb = lb < hist ? sB[lb * N + fold_col(lb, col)] : 0.0f;
              mma_tf32_pairs<kBExact>(d[mm][e], wp, pair(ba), pair(bb));
            }
        }
        float* const dst = S0 + (static_cast<int64_t>(k) * P + r0) * N + q * kVerifyUnitCols + 4 * mc;
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (r0 + 8 * h < nrows)
#pragma unroll
            for (int mm = 0; mm < 2; ++mm) {
              const float o[4] = {d[mm][0][2 * h], d[mm][0][2 * h + 1], d[mm][1][2 * h], d[mm][1][2 * h + 1]};
              store16_stream(dst + h * 8 * N + 16 * mm, o);
            }
      }
    };
    // Each unit loads the next one's elements before its own math.
#pragma unroll 1
    for (Unit at = first; at.k < K;) {
      const Unit nx = next_unit(at);
      if (nx.k < K) load_unit(nx, vb);
      if constexpr (L2A > 0) {
        if (pf.k < K) l2_unit(pf);
        pf = next_unit(pf);
      }
      unit(at, va);
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int mm = 0; mm < 2; ++mm) va[h][mm] = vb[h][mm];
      at = nx;
    }
    cp_async_wait<0>();  // the ring and token rows (the epilogue reads every thread's copies)
  }
  __syncthreads();

  // ---- epilogue: y of every token of the row, and the tokens' x rows appended to the ring
  TRing* const rxw = static_cast<TRing*>(p.ring_x) + sh0 * R * P + p0;  // head k: + k*R*P
  const int V = K * nrows;
#pragma unroll 1
  for (int v = tid; v < V; v += nthreads) {
    const int k = v / nrows, r = v - k * nrows;
    const float* const coef = scoef + k * R * KT;
    const TRing* const xk = sxr + k * R * rpb + r;
    const TIn* const xt = sxt + k * KT * rpb + r;
    float acc[KT];
#pragma unroll
    for (int s = 0; s < KT; ++s) acc[s] = 0.0f;
#pragma unroll 2
    for (int l = 0; l < hist; ++l) {
      const float xl = to_f32(xk[phys(l) * rpb]);
#pragma unroll
      for (int s = 0; s < KT; ++s) acc[s] = __fmaf_rn(coef[l * KT + s], xl, acc[s]);
    }
#pragma unroll
    for (int t = 0; t < KT; ++t) {
      if (t >= Tb) break;
      const float xl = to_f32(xt[t * rpb]);
#pragma unroll
      for (int s = 0; s < KT; ++s) acc[s] = __fmaf_rn(coef[(hist + t) * KT + s], xl, acc[s]);
      rxw[(static_cast<int64_t>(k) * R + phys(hist + t)) * P + r] = from_f32<TRing>(xl);
    }
    const float* const dec = sdec + k * (KT + 1);
    const float* const dk = sd + k * NQ * KT * rpb + r;  // the column units' partial dots
#pragma unroll
    for (int s = 0; s < KT; ++s) {
      if (s >= Ty) break;
      float out = 0.0f;
      if (s < Tb) {
        float dot = dk[s * rpb];
#pragma unroll
        for (int q = 1; q < NQ; ++q) dot = __fadd_rn(dot, dk[(q * KT + s) * rpb]);
        const float sum = __fadd_rn(__fmul_rn(dec[s], dot), acc[s]);
        out = output_of(sum, sD[k], p.has_D, to_f32(xt[s * rpb]), p.has_z,
                        p.has_z ? to_f32(szt[(k * KT + s) * rpb + r]) : 0.0f);
      }
      y[y_at(s, k, r)] = from_f32<TIn>(out);
    }
  }
}

}  // namespace replayssm::cuda::mamba2
