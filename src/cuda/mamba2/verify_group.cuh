// The ReplaySSM speculative verify step of Mamba-2, group kernel (the dispatcher's default from
// batch 128; below it verify.cuh's one-block-per-head form; RSSM_MAMBA2_VERIFY_PLAN=group=0/1
// forces either). Same contract and formulas as verify.cuh:
//   y_s = exp(A·P_{h+s})·(S0·C_s) + Σ_{l≤h+s} δ_l·exp(A·(P_{h+s} − P_l))·(B_l·C_s)·x_l + D·x_{h+s}
// over the window of m = h + T_b records (committed history, then the row's tokens, appended to
// the ring), and on is_flush rows with history S0 <- exp(A·P_{h-1})·S0 + Σ_{l<h} δ_l·exp(A·(P_{h-1}
// − P_l))·x_l·B_lᵀ after the outputs have read the old S0. Cursors are only read.
//
// The structure of the ordinary step's group kernel (replay_group.cuh), with a token axis: the
// outputs need from the checkpoint only d_s = S0_r·C_s, which does not depend on the cursor, so the
// chain (slot -> cursor -> ring -> weights) runs in two warps of its own beside the checkpoint
// stream, once per block of K heads of one group (the whole group where shared memory allows):
//   - streaming warps: the K checkpoint tiles through 2-3 shared-memory stages (cp.async; a thread
//     reads only the chunks it copied), all R physical ring x rows and the tokens' x and z beside
//     them (no cursor wait); per row the KT dots S0_r·C_s and one transposed butterfly; flush rows
//     (the whole block: one batch row) wait for the chain's fold inputs once (ring B, the flush
//     weights; the record weights are formed meanwhile), then fold each row right after its dots
//     and store it — the only state write of a verify step;
//   - chain warp 0: B_l·C_s for every record of the window (ring B, then the tokens' B, which the
//     group's first block appends); chain warp 1 meanwhile: every head's deltas (the tokens'
//     appended), prefix sums, decays and flush weights, all heads' ring deltas in flight at once;
//     then both: the record weights, heads split between them;
//   - one barrier, then the epilogue writes y (coalesced) and appends the tokens' x rows.
// A block's lifetime is then its K tiles' stream (the chain overlaps it), not the chain's
// dependent loads: the measured reason the one-head-per-block form (verify.cuh) and a
// phase-by-phase form of this kernel ran at 2-3x an ordinary step.
// The token axis is padded to KT (1, 2, 4 or 8); outputs past T_b are 0. fp32 checkpoints only.
// Grid: x = (g * nchunks + chunk) * nsplit + split, y = batch row. Shared memory: VerifyGroupSmem.
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/mamba2/conventional.cuh"
#include "cuda/mamba2/layout.cuh"
#include "cuda/mamba2/params.h"
#include "cuda/mamba2/replay.cuh"
#include "cuda/mamba2/step_math.cuh"

namespace replayssm::cuda::mamba2 {

/// Threads of a verify group block: streaming warps plus the two chain warps, at most.
constexpr int kVerifyChainThreads = 64;
constexpr int kVerifyGroupThreads = 256 + kVerifyChainThreads;
/// Checkpoint tile bytes per stage the host aims at (it splits a head's rows to stay under it),
/// and shared memory per block (two blocks per SM) it picks heads per block under.
constexpr int kVerifyTileBytes = 20 * 1024;
constexpr int kVerifyBlockSmem = 112 * 1024;

/// Shared memory of verify_group_kernel in floats (every part 16-byte aligned): `stages`
/// checkpoint stages [rows][N] (fp32), ring x [K][R][rows] (ring dtype, by physical row), the tokens' x and
/// z [K][KT][rows] each (input dtype), ring B [R][N] by logical record (fp32, flush rows), the
/// dots S0·C_s [K][KT][rows], record weights [K][R][KT], B_l·C_s [R][KT], decays [K][KT + 1]
/// (the last: the flush decay), flush weights [K][R], D and A [2][K], and every head's window deltas and
/// their prefix sums [K][2][64]. `rows` is rows_per_block, K heads_per_block.
struct VerifyGroupSmem {
  int tile = 0, x = 0, xt = 0, zt = 0, B = 0, d = 0, coef = 0, bc = 0, dec = 0, wf = 0, D = 0;
  int win = 0, total = 0;
  __host__ __device__ VerifyGroupSmem(int R, int N, int rows, int K, int KT, int ring_bytes,
                                      int in_bytes, int stages) {
    auto up4 = [](int v) { return (v + 3) / 4 * 4; };
    auto floats = [&](int elems, int bytes) { return up4((elems * bytes + 3) / 4); };
    tile = up4(rows * N);
    x = stages * tile;
    xt = x + floats(K * R * rows, ring_bytes);
    zt = xt + floats(K * KT * rows, in_bytes);
    B = zt + floats(K * KT * rows, in_bytes);
    d = B + R * N;
    coef = d + up4(K * KT * rows);
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

template <class TIn, class TRing, int N, int KT>
__global__ void __launch_bounds__(kVerifyGroupThreads, 2) verify_group_kernel(const StepParams p) {
  using Lay = Layout<4, N>;  // fp32 checkpoint
  using namespace verify_group_detail;
  using replay_detail::Loaded;
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  constexpr int CPL = Lay::kChunksPerLane, RPW = Lay::kRowsPerWarp;
  constexpr int SHIFT = log2i(LPR / KT);  // lane -> token column of a row's butterfly
  static_assert((LPR >> SHIFT) == KT, "KT must divide the lanes of a row");
  constexpr int NL = N / 32;              // B and C elements per lane of chain warp 0
  constexpr int VX = 16 / static_cast<int>(sizeof(TRing));  // ring x elements per 16-byte copy
  constexpr int VI = 16 / static_cast<int>(sizeof(TIn));    // input elements per 16-byte copy
  constexpr int RB = KT >= 8 ? 4 : 8;  // ring B rows in flight (chain warp 0)
  constexpr int HB = 8;                // heads' ring deltas in flight (chain warp 1)
  constexpr int FR = COLS <= 4 ? 2 : 1;  // rows folded at once (B loaded once for them)

  extern __shared__ __align__(16) float smem[];
  const int R = p.R, P = p.P, rpb = p.rows_per_block, K = p.heads_per_block, Ty = p.Ty;
  const int ns = p.stages;  // checkpoint stages (2 or 3)
  const VerifyGroupSmem sm(R, N, rpb, K, KT, static_cast<int>(sizeof(TRing)),
                           static_cast<int>(sizeof(TIn)), ns);
  auto stage = [&](int k) { return smem + (k % ns) * sm.tile; };
  TRing* const sxr = reinterpret_cast<TRing*>(smem + sm.x);  // [K][R][rpb] ring x, physical rows
  TIn* const sxt = reinterpret_cast<TIn*>(smem + sm.xt);     // [K][KT][rpb] tokens' x
  TIn* const szt = reinterpret_cast<TIn*>(smem + sm.zt);     // [K][KT][rpb] tokens' z
  float* const sB = smem + sm.B;        // [R][N] ring B by logical record (flush rows)
  float* const sd = smem + sm.d;        // [K][KT][rpb] S0·C_s
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
  const int lr = lane % LPR;
  const int grp = warp * RPW + lane / LPR;  // first row of a streaming thread
  const int pass = (nstream >> 5) * RPW;    // rows per pass of the streaming warps
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

  // Streaming threads: head k's rows into stage(k) (one copy group, empty past the last head).
  auto issue = [&](int k) {
    if (k < K) {
      float* dst = stage(k);
      const float* src = S0 + static_cast<int64_t>(k) * P * N;
      for (int r = grp; r < nrows; r += pass)
#pragma unroll
        for (int c = 0; c < CPL; ++c)
          cp_async16(dst + r * N + Lay::col(c, lr), src + static_cast<int64_t>(r) * N + Lay::col(c, lr));
    }
    cp_async_commit();
  };

  float cv[KT][COLS];  // streaming threads: the tokens' C over this lane's columns
  if (tid < nstream) {
    for (int k = 0; k < ns; ++k) issue(k);
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
    Loaded<TIn, VEC> craw[KT][CPL];
#pragma unroll
    for (int s = 0; s < KT; ++s)
      if (s < Ty)
#pragma unroll
        for (int c = 0; c < CPL; ++c)
          craw[s][c].load(static_cast<const TIn*>(p.C) +
                          ((static_cast<int64_t>(b) * Ty + s) * p.G + g) * N + Lay::col(c, lr));
#pragma unroll
    for (int s = 0; s < KT; ++s)
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        if (s < Ty)
          craw[s][c].to(&cv[s][c * VEC]);
        else
#pragma unroll
          for (int e = 0; e < VEC; ++e) cv[s][c * VEC + e] = 0.0f;
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
            for (int v = 0; v < NL; ++v) sB[l * N + lane * NL + v] = e[v];
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
    if (fold) {  // the flush weights, B_l and x_l are needed before the first row
      cp_async_wait<0>();
      __syncthreads();  // pairs with the chain warps' fold barrier (same `fold`: one batch row)
    }
    const int nrounds = (nrows + pass - 1) / pass;  // uniform over the warp (shuffles)
#pragma unroll 1
    for (int k = 0; k < K; ++k) {
      // Head k landed (copy groups: h0 .. h(ns-1), ring and tokens, h(ns), ...).
      cp_async_wait_upto(k < ns ? ns : ns - 1);
      const float* tile = stage(k);
      float* const dk = sd + k * KT * rpb;
#pragma unroll 1
      for (int i = 0; i < nrounds; ++i) {
        const int r = grp + i * pass;
        const bool valid = r < nrows;
        float s0[COLS];
#pragma unroll
        for (int cc = 0; cc < CPL; ++cc)
#pragma unroll
          for (int e = 0; e < VEC; e += 4) {
            const float4 t4 = valid ? *reinterpret_cast<const float4*>(tile + r * N + Lay::col(cc, lr) + e)
                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            s0[cc * VEC + e] = t4.x, s0[cc * VEC + e + 1] = t4.y;
            s0[cc * VEC + e + 2] = t4.z, s0[cc * VEC + e + 3] = t4.w;
          }
        float part[KT];
#pragma unroll
        for (int s = 0; s < KT; ++s) {
          part[s] = 0.0f;
#pragma unroll
          for (int e = 0; e < COLS; ++e) part[s] = __fmaf_rn(s0[e], cv[s][e], part[s]);
        }
        const float sum = transposed_sum<KT, LPR>(part, lr);
        if (valid && (lr & ((1 << SHIFT) - 1)) == 0) dk[(lr >> SHIFT) * rpb + r] = sum;
      }
      if (fold) {  // S_h = ā_f·S0 + Σ_{l<h} w_l·x_l·B_lᵀ, records in order, FR rows at a time
        const float af = sdec[k * (KT + 1) + KT];
        const float* const wk = swf + k * R;
        const TRing* const xk = sxr + k * R * rpb;
#pragma unroll 1
        for (int i = 0; i < nrounds; i += FR) {
          int r[FR];
          bool valid[FR];
          float s0[FR][COLS];
#pragma unroll
          for (int f = 0; f < FR; ++f) {
            r[f] = grp + (i + f) * pass;
            valid[f] = r[f] < nrows;
#pragma unroll
            for (int cc = 0; cc < CPL; ++cc)
#pragma unroll
              for (int e = 0; e < VEC; e += 4) {
                const float4 t4 = valid[f] ? *reinterpret_cast<const float4*>(tile + r[f] * N + Lay::col(cc, lr) + e)
                                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                float* sv = &s0[f][cc * VEC + e];
                sv[0] = __fmul_rn(af, t4.x), sv[1] = __fmul_rn(af, t4.y);
                sv[2] = __fmul_rn(af, t4.z), sv[3] = __fmul_rn(af, t4.w);
              }
          }
#pragma unroll 1
          for (int l = 0; l < hist; ++l) {
            const TRing* const xl = xk + phys(l) * rpb;
            float cx[FR];
#pragma unroll
            for (int f = 0; f < FR; ++f) cx[f] = valid[f] ? __fmul_rn(wk[l], to_f32(xl[r[f]])) : 0.0f;
#pragma unroll
            for (int cc = 0; cc < CPL; ++cc)
#pragma unroll
              for (int e = 0; e < VEC; e += 4) {
                const float4 b4 = *reinterpret_cast<const float4*>(sB + l * N + Lay::col(cc, lr) + e);
#pragma unroll
                for (int f = 0; f < FR; ++f) {
                  float* sv = &s0[f][cc * VEC + e];
                  sv[0] = __fmaf_rn(cx[f], b4.x, sv[0]), sv[1] = __fmaf_rn(cx[f], b4.y, sv[1]);
                  sv[2] = __fmaf_rn(cx[f], b4.z, sv[2]), sv[3] = __fmaf_rn(cx[f], b4.w, sv[3]);
                }
              }
          }
#pragma unroll
          for (int f = 0; f < FR; ++f)
            if (valid[f]) {
              float* const dst = S0 + (static_cast<int64_t>(k) * P + r[f]) * N;
#pragma unroll
              for (int cc = 0; cc < CPL; ++cc) store16_stream(dst + Lay::col(cc, lr), &s0[f][cc * VEC]);
            }
        }
      }
      issue(k + ns);  // into the stage this thread has just read
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
    const float* const dk = sd + k * KT * rpb + r;
#pragma unroll
    for (int s = 0; s < KT; ++s) {
      if (s >= Ty) break;
      float out = 0.0f;
      if (s < Tb) {
        const float sum = __fadd_rn(__fmul_rn(dec[s], dk[s * rpb]), acc[s]);
        out = output_of(sum, sD[k], p.has_D, to_f32(xt[s * rpb]), p.has_z,
                        p.has_z ? to_f32(szt[(k * KT + s) * rpb + r]) : 0.0f);
      }
      y[y_at(s, k, r)] = from_f32<TIn>(out);
    }
  }
}

}  // namespace replayssm::cuda::mamba2
