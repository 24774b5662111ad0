// The ReplaySSM decode step, group kernel (the dispatcher's default; replay.cuh is the fallback for
// row splits that are not whole 16-byte ring chunks). Same contract as replay.cuh.
//
// An ordinary row needs from its checkpoint only d_r = S0_r·C, which does not depend on the
// cursor, the ring or the record weights. So the dependent chain of a step (slot -> cursor ->
// ring -> weights) runs beside the checkpoint stream instead of in front of it:
//   - a block owns K = heads_per_block heads of one group, rows [p0, p0 + rows_per_block) of
//     each, for one batch row; its last warp is the chain warp: B_j·C of the ring records and of
//     the token, the record weights of the K heads (ring deltas, warp suffix sums), the appended
//     delta and B;
//   - the other warps stream the K checkpoint tiles through two shared-memory stages with
//     cp.async (every thread reads only the chunks it copied: head k + 2 goes into the stage head
//     k has left, no barrier), computing d_r as rows land, and copy the block's ring x rows into
//     shared memory with cp.async (every physical row with prefetch_ring: no wait for the cursor);
//   - one barrier, then the epilogue writes y = ā·d_r + Σ_{j<h} c_j·(B_j·C)·x_j[r] + c_h·(B·C)·x
//     + D·x (coalesced) and appends the ring x rows.
// Fold rows (flush, or the state-and-output route) wait for the chain (one more barrier), then
// fold each head's rows as its tile lands (x_j and B_j from shared memory) and run the
// conventional update through the same inline functions as the conventional kernel. On the
// output-only route the dispatcher sends flush rows to a launch of their own (flush.cuh, the
// same arithmetic) and runs this kernel without the fold compiled in (FOLD = false, only = 1).
// Quantised read copies (TState nvfp4x2 / e4m3, quant_read.cuh) run only as the ordinary launch
// of a split mode (only = 1, no fold is compiled): each lane also copies the scale word of its
// chunk (NVFP4: 8-byte chunks, one block each) into a private slot of the stage; NVFP4's global
// scale per (slot, head) is folded into ā by the chain warp, FP8's row scale into the row's
// partial sums.
// Grid: x = (g * nchunks + chunk) * nsplit + split, y = batch row. Shared memory: GroupSmem.
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/quant_read.cuh"
#include "cuda/common/warp.cuh"
#include "cuda/mamba2/conventional.cuh"
#include "cuda/mamba2/launch.h"
#include "cuda/mamba2/replay.cuh"

namespace replayssm::cuda::mamba2 {

template <class TIn, class TState, class TRing, int N, int RPT, bool FOLD>
__global__ void __launch_bounds__(kReplayThreads, 2) replay_group_kernel(const StepParams p) {
  constexpr int BITS = kStateBits<TState>;
  constexpr bool QUANT = kQuantState<TState>;
  // Whether any row of the launch can fold: not in an output-only ordinary launch (only = 1),
  // whose instantiation then keeps every value in its 64 registers (the fold's code spills).
  constexpr bool CAN_FOLD = FOLD && !QUANT;
  constexpr int CB = kChunkBytes<TState>;  // bytes of a lane's chunk
  using Lay = LayoutVec<8 * CB / BITS, N>;
  using namespace replay_detail;
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  constexpr int CPL = Lay::kChunksPerLane;
  constexpr int EPU = 8 * static_cast<int>(sizeof(TState)) / BITS;  // elements per TState unit
  constexpr int RS = N / EPU;  // TState units per state row
  static_assert(!QUANT || CPL == 1, "a quantised row is at most 32 chunks");
  constexpr int VX = 16 / static_cast<int>(sizeof(TRing));  // ring elements per 16-byte copy
  constexpr int NL = N / 32;            // B and C elements per lane of the chain warp
  constexpr int FR = COLS < 16 ? 16 / COLS : 1;  // rows folded at once: 16 state registers
  constexpr int KT = kGroupTokenItems;  // token x elements per streaming thread
  constexpr int RB = 8;                 // ring B rows per round of the chain warp
  static_assert(RPT % FR == 0 && VEC % 4 == 0 && N % 32 == 0, "layout");

  extern __shared__ __align__(16) float smem[];
  const int R = p.R, rpb = p.rows_per_block, K = p.heads_per_block;
  const GroupSmem sm(R, N, rpb, BITS, static_cast<int>(sizeof(TRing)), K, CAN_FOLD);
  // Checkpoint stages: two, refilled head by head; a quantised copy's small tiles all at once.
  auto stage = [&](int k) { return smem + (QUANT ? k : k & 1) * sm.tile; };
  TRing* const sxr = reinterpret_cast<TRing*>(smem + sm.x);  // [K][R][rpb] ring x, physical rows
  float* const sB = smem + sm.B;        // [R][N] ring B by logical record (fold rows; CAN_FOLD)
  float* const sd = smem + sm.d;        // [K][nrows] S0·C
  float* const sxt = smem + sm.xt;      // [K][nrows] the token's x
  float* const scoef = smem + sm.coef;  // [K][cs] record weights c_j
  float* const sbc = smem + sm.bc;      // [cs] B_j·C, the token's at h
  float* const shead = smem + sm.head;  // [K][4] A, delta, D, ā

  const int split = blockIdx.x % p.nsplit;
  const int rest = blockIdx.x / p.nsplit;
  const int chunk = rest % p.nchunks;
  const int g = rest / p.nchunks;
  const int b = blockIdx.y;
  const int hd0 = g * p.heads_per_group + chunk * K;
  const int p0 = split * rpb;
  const int nrows = min(rpb, p.P - p0);
  const int V = K * nrows;  // (head, row) pairs: v = k * nrows + r
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int nstream = nthreads - 32;  // streaming threads; the last warp is the chain warp
  const int lane = tid & 31, warp = tid >> 5;
  const int lr = lane % LPR;
  const int grp = warp * Lay::kRowsPerWarp + lane / LPR;  // first row of a streaming thread
  const int pass = (nstream >> 5) * Lay::kRowsPerWarp;    // rows per pass of the streaming warps
  TIn* const y0 = static_cast<TIn*>(p.y) + (static_cast<int64_t>(b) * p.H + hd0) * p.P + p0;
  // The token's z of (head k, row r), loaded where y is formed rather than staged in shared memory.
  const TIn* const z0 =
      p.has_z ? static_cast<const TIn*>(p.z) + (static_cast<int64_t>(b) * p.H + hd0) * p.P + p0
              : nullptr;
  auto z_at = [&](int k, int r) { return p.has_z ? to_f32(z0[k * p.P + r]) : 0.0f; };

  const int slot = p.slot_ids[b];
  if (slot < 0 || slot >= p.slots) {  // pad row: nothing read or written but y = 0
    for (int v = tid; v < V; v += nthreads) {
      const int k = v / nrows;
      y0[k * p.P + v - k * nrows] = from_f32<TIn>(0.0f);
    }
    return;
  }
  const int64_t sh0 = static_cast<int64_t>(slot) * p.H + hd0;               // (slot, first head)
  TState* const S0 = static_cast<TState*>(p.state) + (sh0 * p.P + p0) * RS;  // head k: + k*P*RS
  const TRing* const ringx = static_cast<const TRing*>(p.ring_x) + sh0 * R * p.P + p0;
  const int64_t bcoff = (static_cast<int64_t>(b) * p.G + g) * N;
  const TIn* const Bin = static_cast<const TIn*>(p.B) + bcoff;
  const TIn* const Cin = static_cast<const TIn*>(p.C) + bcoff;
  const bool all = p.prefetch_ring;

  // The step's flush launch may start scheduling once every block of this one has started
  // (Plan::overlap): it touches only the flush rows, which this launch leaves untouched.
  if (p.only == 1) pdl_launch_dependents();
  // The cursor: raw loads; resolve() is where a warp first waits for them.
  const int origin_raw = p.origin[slot];
  const int hist_raw = p.hist[slot];
  const int flush_raw = p.is_flush[slot];
  // Split modes: the flush launch leaves ordinary rows at once (one cursor round trip); the
  // ordinary launch drops flush rows after its loads are issued (below), keeping its stream
  // free of the cursor wait.
  if (p.only == 2 && flush_raw == 0) return;
  // The ordinary launch of a step with a flush launch may wait for is_flush first (Plan::
  // early_exit) rather than stream two stages of a flush row that it then drops.
  if (p.only == 1 && p.early_exit && flush_raw != 0) return;
  int origin = 0, hist = 0;
  auto resolve = [&] {
    origin = origin_raw % R;
    if (origin < 0) origin += R;
    hist = min(max(hist_raw, 0), R - 1);
  };
  auto phys = [&](int j) {
    const int q = origin + j;
    return q >= R ? q - R : q;
  };

  // Streaming threads: head k's rows into stage(k) (one copy group, empty past the last head).
  // Addresses are this thread's first row's, set up once: a head adds its offset, a row a stride
  // (as the GDN group kernel's issue(): no shared-window conversion and no address rebuilt from
  // the row index per copy).
  constexpr int ROWB = RS * static_cast<int>(sizeof(TState));  // bytes per checkpoint row
  constexpr int SRB = BITS == 4 ? N / 16 : 4;                 // bytes of a row's scales
  const int col_b = Lay::col(0, lr) / EPU * static_cast<int>(sizeof(TState));
  const unsigned s_rows =
      static_cast<unsigned>(__cvta_generic_to_shared(smem)) + grp * ROWB + col_b;
  const unsigned s_side =
      static_cast<unsigned>(__cvta_generic_to_shared(smem + sm.side)) + (grp * LPR + lr) * 4;
  const char* const g_rows =
      reinterpret_cast<const char*>(S0) + static_cast<int64_t>(grp) * ROWB + col_b;
  const char* g_side = nullptr;
  if constexpr (QUANT)  // NVFP4: the word holding E4M3 block scale lr; FP8: the row's float
    g_side = static_cast<const char*>(p.read_scales) + (sh0 * p.P + p0 + grp) * SRB +
             (BITS == 4 ? (lr / 4) * 4 : 0);
  auto issue = [&](int k) {
    if (k < K) {
      const unsigned st = (QUANT ? k : k & 1) * static_cast<unsigned>(sm.tile) * 4u;
      const char* const gk = g_rows + static_cast<int64_t>(k) * p.P * ROWB;
      const char* const gsk = QUANT ? g_side + static_cast<int64_t>(k) * p.P * SRB : nullptr;
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        const int r = grp + i * pass;
        if (r < nrows) {
          const int dr = i * pass;  // rows past the thread's first
#pragma unroll
          for (int c = 0; c < CPL; ++c)
            cp_async_chunk_at<CB>(s_rows + st + dr * ROWB + c * LPR * CB,
                                  gk + static_cast<int64_t>(dr) * ROWB + c * LPR * CB);
          if constexpr (QUANT)  // this chunk's scale into the lane's own word of the stage
            cp_async_chunk_at<4>(s_side + st + dr * LPR * 4, gsk + dr * SRB);
        }
      }
    }
    cp_async_commit();
  };
  // Streaming threads: the ring x rows of the block's heads (all R, or the live ones), one group.
  auto copy_ring_x = [&](bool every_row) {
    const int cpr = nrows / VX;  // 16-byte copies per ring row segment
    const int nrec = every_row ? R : hist;
    const int total = K * nrec * cpr;
#pragma unroll 1
    for (int idx = tid; idx < total; idx += nstream) {
      const int c = idx % cpr, rec = idx / cpr;
      const int k = rec / nrec, jj = rec - k * nrec;
      const int q = every_row ? jj : phys(jj);
      cp_async16(sxr + (k * R + q) * rpb + c * VX,
                 ringx + (static_cast<int64_t>(k) * R + q) * p.P + c * VX);
    }
    cp_async_commit();
  };

  // Streaming threads: the token's B (fold rows only) and C, this lane's columns.
  float bv[QUANT ? 1 : COLS], cv[COLS];
  if (tid < nstream) {
    issue(0);
    issue(1);
    if constexpr (QUANT)
      for (int k = 2; k < K; ++k) issue(k);
    if (all) copy_ring_x(true);
    TIn xr[KT];
    // (head, row) of item v = tid + i * nstream, stepped without a division per item.
    int ik = tid / nrows, ir = tid - ik * nrows;
#pragma unroll
    for (int i = 0; i < KT; ++i) {
      const int v = tid + i * nstream;
      xr[i] = from_f32<TIn>(0.0f);
      if (i > 0)
        for (ir += nstream; ir >= nrows; ir -= nrows) ++ik;
      if (v < V) {
        const int off = ik * p.P + ir;
        xr[i] =
            static_cast<const TIn*>(p.x)[(static_cast<int64_t>(b) * p.H + hd0) * p.P + p0 + off];
      }
    }
    Loaded<TIn, VEC> braw[QUANT ? 1 : CPL], craw[CPL];
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
      if constexpr (!QUANT) braw[c].load(Bin + Lay::col(c, lr));
      craw[c].load(Cin + Lay::col(c, lr));
    }
    resolve();
    if (!all) copy_ring_x(false);
#pragma unroll
    for (int i = 0; i < KT; ++i) {
      const int v = tid + i * nstream;
      if (v < V) sxt[v] = to_f32(xr[i]);
    }
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
      if constexpr (!QUANT) braw[c].to(&bv[c * VEC]);
      craw[c].to(&cv[c * VEC]);
    }
    if constexpr (BITS == 4)  // exact: nvfp4_block_dot's elements carry 2^-14
#pragma unroll
      for (int e = 0; e < COLS; ++e) cv[e] = __fmul_rn(cv[e], kNvfp4DotScale);
  } else {
    // ---- the chain warp
    float A = 0.0f, delta = 0.0f, Dk = 0.0f;  // lane k < K: head hd0 + k
    if (lane < K) {
      const int hd = hd0 + lane;
      const float A_log = p.A_log[hd], dt_bias = p.dt_bias[hd];
      Dk = p.has_D ? p.D[hd] : 0.0f;
      const float dt = load_dt<TIn>(p, static_cast<int64_t>(b) * p.H + hd);
      A = A_of(A_log);
      delta = delta_of(dt, dt_bias, p.softplus);
    }
    Loaded<TIn, NL> bt, ct;  // the token's B and C, elements lane * NL ..
    bt.load(Bin + lane * NL);
    ct.load(Cin + lane * NL);
    if (!all) resolve();
    // Ring B of the group: B_j·C per record (every physical row when prefetching), rows of B for
    // the fold by logical record.
    const TRing* ringB =
        static_cast<const TRing*>(p.ring_B) + (static_cast<int64_t>(slot) * p.G + g) * R * N;
    const int nB = all ? R : hist;
    float c[NL];
    ct.to(c);
#pragma unroll 1
    for (int j0 = 0; j0 < nB; j0 += RB) {
      Loaded<TRing, NL> rb[RB];
#pragma unroll
      for (int u = 0; u < RB; ++u)
        if (j0 + u < nB) rb[u].load(ringB + (all ? j0 + u : phys(j0 + u)) * N + lane * NL);
      if (all) resolve();  // the first rows are in flight
      const bool fold = CAN_FOLD && (flush_raw != 0 || p.state_route);
#pragma unroll
      for (int u = 0; u < RB; ++u) {
        if (j0 + u >= nB) break;  // uniform
        float e[NL];
        rb[u].to(e);
        float part = 0.0f;
#pragma unroll
        for (int v = 0; v < NL; ++v) part = __fmaf_rn(e[v], c[v], part);
        const float bc = row_sum<32>(part);
        int j = j0 + u;
        if (all) j = j - origin < 0 ? j - origin + R : j - origin;  // physical -> logical
        if (j < hist) {
          if (lane == 0) sbc[j] = bc;
          if (fold)
#pragma unroll
            for (int v = 0; v < NL; ++v) sB[j * N + lane * NL + v] = e[v];
        }
      }
    }
    {  // the token's B·C (record h)
      float e[NL];
      bt.to(e);
      float part = 0.0f;
#pragma unroll
      for (int v = 0; v < NL; ++v) part = __fmaf_rn(e[v], c[v], part);
      const float bc = row_sum<32>(part);
      if (lane == 0) sbc[hist] = bc;
    }
    // Record weights, four heads' ring deltas in flight at a time.
    const bool fold = CAN_FOLD && (flush_raw != 0 || p.state_route);
    const int n = fold ? hist : hist + 1;  // records weighted (the token is record h)
#pragma unroll 1
    for (int k0 = 0; k0 < K; k0 += 4) {
      float d0[4], d1[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float* rdt = p.ring_dt + (sh0 + k0 + u) * R;
        d0[u] = k0 + u < K && lane < hist ? rdt[phys(lane)] : 0.0f;
        d1[u] = k0 + u < K && lane + 32 < hist ? rdt[phys(lane + 32)] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int k = k0 + u;
        if (k >= K) break;  // uniform
        const float Ak = __shfl_sync(kFull, A, k), dk = __shfl_sync(kFull, delta, k);
        const float Dh = __shfl_sync(kFull, Dk, k);
        const float e0 = lane < hist ? d0[u] : (lane < n ? dk : 0.0f);
        const float e1 = lane + 32 < hist ? d1[u] : (lane + 32 < n ? dk : 0.0f);
        float* coef = scoef + k * sm.cs;
        float abar = record_weights(e0, e1, n, Ak, coef, lane);
        if (lane == 0) {
          if constexpr (BITS == 4) abar = __fmul_rn(abar, p.read_global[sh0 + k]);  // ā·s2
          float* hk = shead + 4 * k;
          hk[0] = Ak, hk[1] = dk, hk[2] = Dh, hk[3] = abar;
        }
        if (!fold) {  // ordinary rows weigh x_j by w_j = c_j·(B_j·C)
          __syncwarp();
          for (int j = lane; j < n; j += 32) coef[j] = __fmul_rn(coef[j], sbc[j]);
        }
      }
    }
    if (flush_raw == 0) {  // the token's record: delta per head, B once per group
      const int qh = phys(hist);
      if (split == 0 && lane < K) p.ring_dt[(sh0 + lane) * R + qh] = delta;
      if (chunk == 0 && split == 0) {
        TRing* rB =
            static_cast<TRing*>(p.ring_B) + ((static_cast<int64_t>(slot) * p.G + g) * R + qh) * N;
        for (int v = lane; v < N; v += 32) rB[v] = from_f32<TRing>(to_f32(Bin[v]));
      }
    }
  }

  const bool flush = flush_raw != 0;
  if (p.only == 1 && flush) {  // a flush row in the ordinary launch: the flush launch serves it
    if (tid < nstream) cp_async_wait<0>();
    return;
  }
  const bool fold = CAN_FOLD && (flush || p.state_route);  // materialise the state
  if (fold) {  // the weights, B_j and x_j are needed before the first row
    if (tid < nstream) cp_async_wait<0>();
    __syncthreads();
  }
  if (tid < nstream) {
#pragma unroll 1
    for (int k = 0; k < K; ++k) {
      // Head k landed (copy groups: h0, h1, ring, h2, ...; quantised: h0 .. h(K-1), ring).
      if constexpr (QUANT) {
        if (k == 0) cp_async_wait<1>();
      } else {
        cp_async_wait_upto(k < 2 ? 2 : 1);
      }
      const TState* tile = reinterpret_cast<const TState*>(stage(k));
      if (!fold) {  // ordinary rows: S0·C (quantised copies: from the codes, scaled)
        float part[RPT];
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
          const int r = grp + i * pass;
          part[i] = 0.0f;
          if (r >= nrows) continue;
          if constexpr (QUANT) {
            const uint32_t* side = reinterpret_cast<const uint32_t*>(stage(k) + sm.side);
            const TState* chunk = tile + r * RS + Lay::col(0, lr) / EPU;
            const uint32_t sw = side[r * LPR + lr];
            if constexpr (BITS == 4)
              part[i] = nvfp4_block(*reinterpret_cast<const uint2*>(chunk),
                                    static_cast<uint8_t>(sw >> ((lr & 3) * 8)), cv);
            else
              part[i] = __fmul_rn(e4m3_chunk(*reinterpret_cast<const uint4*>(chunk), cv),
                                  __uint_as_float(sw));
          } else {
            float s[COLS];
#pragma unroll
            for (int cc = 0; cc < CPL; ++cc)
              unpack16<TState>(*reinterpret_cast<const uint4*>(tile + r * N + Lay::col(cc, lr)),
                               &s[cc * VEC]);
#pragma unroll
            for (int e = 0; e < COLS; ++e) part[i] = __fmaf_rn(s[e], cv[e], part[i]);
          }
        }
        // The RPT rows' sums over their LPR lanes at once (row_sum's additions, offset by offset:
        // each row's sum has row_sum's bits): lane lr ends with row lr / (LPR/RPT).
        static_assert(RPT <= LPR, "a transposed sum holds at most one row per lane");
        const float sum = transposed_sum<RPT, LPR>(part, lr);
        const int r = grp + lr / (LPR / RPT) * pass;
        if (lr % (LPR / RPT) == 0 && r < nrows) sd[k * nrows + r] = sum;
      } else if constexpr (CAN_FOLD) {
        const float* coef = scoef + k * sm.cs;
        const float* hk = shead + 4 * k;
        const float A = hk[0], delta = hk[1], abar = hk[3];
        const float a = decay_of(delta, A);
        const TRing* xk = sxr + k * R * rpb;
#pragma unroll 1
        for (int i0 = 0; i0 < RPT; i0 += FR) {
          float s[FR][COLS];
#pragma unroll
          for (int f = 0; f < FR; ++f) {
            const int r = grp + (i0 + f) * pass;
#pragma unroll
            for (int cc = 0; cc < CPL; ++cc)
              unpack16<TState>(
                  r < nrows ? *reinterpret_cast<const uint4*>(tile + r * N + Lay::col(cc, lr))
                            : make_uint4(0, 0, 0, 0),
                  &s[f][cc * VEC]);
          }
          if (hist > 0) {
            // S_h = ā_h·S0 + Σ_{j<h} c_j·x_j·B_jᵀ, records in order.
#pragma unroll
            for (int f = 0; f < FR; ++f)
#pragma unroll
              for (int e = 0; e < COLS; ++e) s[f][e] = __fmul_rn(abar, s[f][e]);
#pragma unroll 1
            for (int j = 0; j < hist; ++j) {
              float bq[COLS];
              const float* Bj = sB + j * N;
#pragma unroll
              for (int cc = 0; cc < CPL; ++cc)
#pragma unroll
                for (int e = 0; e < VEC; e += 4) {
                  const float4 t = *reinterpret_cast<const float4*>(Bj + Lay::col(cc, lr) + e);
                  bq[cc * VEC + e] = t.x, bq[cc * VEC + e + 1] = t.y;
                  bq[cc * VEC + e + 2] = t.z, bq[cc * VEC + e + 3] = t.w;
                }
              const TRing* xj = xk + phys(j) * rpb;
              const float cj = coef[j];
#pragma unroll
              for (int f = 0; f < FR; ++f) {
                const int r = grp + (i0 + f) * pass;
                const float cx = r < nrows ? __fmul_rn(cj, to_f32(xj[r])) : 0.0f;
#pragma unroll
                for (int e = 0; e < COLS; ++e) s[f][e] = __fmaf_rn(cx, bq[e], s[f][e]);
              }
            }
          }
          // The conventional update with the token: the same code as the conventional kernel.
#pragma unroll
          for (int f = 0; f < FR; ++f) {
            const int r = grp + (i0 + f) * pass;
            const bool valid = r < nrows;
            const float xv = valid ? sxt[k * nrows + r] : 0.0f;
            float part = 0.0f;
            if (valid) part = update_row<COLS>(s[f], a, __fmul_rn(delta, xv), bv, cv);
            const float sum = row_sum<LPR>(part);
            if (valid) {
              if (lr == 0)
                y0[k * p.P + r] =
                    from_f32<TIn>(output_of(sum, hk[2], p.has_D, xv, p.has_z, z_at(k, r)));
              if (flush) {
                TState* dst = S0 + (static_cast<int64_t>(k) * p.P + r) * N;
                const SrSlot sr = sr_slot(p.sr, slot, static_cast<TState*>(p.state) +
                                                          static_cast<int64_t>(slot) * p.H * p.P * RS);
#pragma unroll
                for (int cc = 0; cc < CPL; ++cc)
                  store16_state(dst + Lay::col(cc, lr), &s[f][cc * VEC], sr);
                if (p.copy) {  // the read copy, rounded from the same new fp32 state
                  const int64_t off = (sh0 + k) * p.P * N + static_cast<int64_t>(p0 + r) * N;
#pragma unroll
                  for (int cc = 0; cc < CPL; ++cc) {
                    if (p.copy_f16)
                      store_vec<f16, VEC>(static_cast<f16*>(p.copy) + off + Lay::col(cc, lr),
                                          &s[f][cc * VEC]);
                    else
                      store_vec<bf16, VEC>(static_cast<bf16*>(p.copy) + off + Lay::col(cc, lr),
                                           &s[f][cc * VEC]);
                  }
                }
              }
            }
          }
        }
      }
      if constexpr (!QUANT) issue(k + 2);  // into the stage this thread has just read
    }
    cp_async_wait<0>();  // the ring x rows (the epilogue reads every thread's copies)
  }
  __syncthreads();

  // ---- epilogue: ordinary rows' y, and the ring x rows of the token's record
  const int qh = phys(hist);
  TRing* const rxw = static_cast<TRing*>(p.ring_x) + (sh0 * R + qh) * p.P + p0;  // head k: k*R*P
  int k = tid / nrows, r = tid - k * nrows;  // (head, row) of v, stepped without a division
#pragma unroll 1
  for (int v = tid; v < V; v += nthreads, r += nthreads) {
    for (; r >= nrows; r -= nrows) ++k;
    const float xv = sxt[v];
    if (!fold) {
      const float zv = z_at(k, r);  // in flight during the record sum
      const float* w = scoef + k * sm.cs;  // w_j = c_j·(B_j·C), the token's at h
      const float* hk = shead + 4 * k;
      const TRing* xk = sxr + k * R * rpb + r;
      float sum = __fmul_rn(hk[3], sd[v]);
#pragma unroll 4
      for (int j = 0; j < hist; ++j) sum = __fmaf_rn(w[j], to_f32(xk[phys(j) * rpb]), sum);
      sum = __fmaf_rn(w[hist], xv, sum);
      y0[k * p.P + r] = from_f32<TIn>(output_of(sum, hk[2], p.has_D, xv, p.has_z, zv));
    }
    if (!flush) rxw[static_cast<int64_t>(k) * R * p.P + r] = from_f32<TRing>(xv);
  }
}

}  // namespace replayssm::cuda::mamba2
