// The ReplaySSM decode step for GDN/KDA, group kernel (the dispatcher's default; replay.cuh is
// the fallback where V is not a multiple of 4). Same contract and record layout as replay.cuh.
//
// The dependent chain of a step (slot -> cursor -> ring -> per-record scalars) runs in its own
// warp beside the checkpoint stream instead of in front of it (the structure of the Mamba-2 group
// kernel, bench/NOTES.md v3):
//   - a block owns NHB = heads_per_block value heads of one key head and, of each, UPH units of U
//     consecutive V rows (U = stream row groups x RPT), for one batch row; unit k is value head
//     vh0 + k / UPH, rows from (ru * UPH + k % UPH) * U;
//   - 4 stream warps move the units through `stages` shared-memory stages with cp.async (one copy
//     group per unit; a thread reads only what it copied, so no barrier), and the ring u rows of
//     the block's units (one group, after the cursor; all R rows with prefetch_ring). GDN
//     ordinary rows need from the checkpoint only dk = S0_r·k^ and dq = S0_r·q^ (the decay
//     e^{E(-1)} is a scalar applied in the epilogue), so they are formed as units land;
//   - the chain warp holds the token in the stream threads' lane layout (same bits of k^, q^):
//     ring k^_j of the key head -> k^_j·k^, k^_j·q^; per value head the gate sums from the token
//     backwards (E(j) = g_{j+1} + .. + g_h, never a difference of prefix sums) -> coefficients
//     ck_j = e^{E(j)}·k^_j·k^, cq_j = e^{E(j)}·k^_j·q^ and e^{E(-1)}; for KDA the decay is per key
//     channel, inside the record dots, and e^{E(-1)}⊙k^, e^{E(-1)}⊙q^ go to shared memory (KDA
//     ordinary rows wait for the chain before their dots). It appends k^ and g;
//   - one barrier, then the epilogue per (unit, row): hk = e^{E(-1)} dk + Σ_j u_j[r] ck_j,
//     hq likewise, u = beta (v - hk), y = hq + (k^·q^) u; appends u.
// Fold rows (flush, or the state-and-output route) wait for the chain, then form S_h in closed
// form, S_h = ā'·S0 + Σ_{j<h} u_j (c_j k^_j)ᵀ with c_j = e^{g_{j+1} + .. + g_{h-1}} and
// ā' = e^{g_0 + .. + g_{h-1}} (per channel for KDA, where the chain stores k^_j ⊙ c_j), and run the
// conventional update with the token through delta_rule_row(). At h = 0, ā' = e^0 = 1 and the flush
// equals the conventional step bit for bit. A flush stores S_h+1 as the new checkpoint.
// Quantised read copies (TState e4m3 / nvfp4x2, quant_read.cuh; split modes fp32/fp8 and
// fp32/nvfp4) run only as a split mode's ordinary launch (only = 1, FOLD = false): lanes take
// 16-element chunks (16 bytes of FP8, 8 of NVFP4: one block) and copy each chunk's scale word
// (the row's float32 FP8 scale, or the word holding the chunk's E4M3 block scale) beside the
// codes in the stage; a row's dots are Σ scale · Σ decode(code)·k^ per chunk, the NVFP4 global
// scale of the (slot, value head) applied in the epilogue.
// Grid: x = (kh * nvc + vc) * nru + ru, y = batch row. Shared memory: GroupSmem (launch.h).
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/quant_read.cuh"
#include "cuda/gdn/conventional.cuh"
#include "cuda/gdn/launch.h"

namespace replayssm::cuda::gdn {

// FOLD = false (group_folds, launch.h): an ordinary launch (only = 1, output-only route), whose
// flush rows leave before the row loop: the fold is not compiled, nor is ring k^ staged (GDN), so
// the GDN instantiation at 4 rows per thread fits 96 registers and a fourth block per SM.
// KDA keeps the bound of 3 blocks per SM (its fold instantiation spills at 96 registers); its
// ordinary launch compiles to 80 registers, so where its shared memory allows (L <= 8) a fourth
// block fits anyway (bench/NOTES_gdn.md "Session 17"). A GDN quantised copy's ordinary launch fits
// the 96 registers too (4 bytes of spill at K = 128, ptxas) since its chain warp stages ring k^
// two records per row group (RB below; at four it spilled 500-650 bytes). A 16-bit copy's GDN
// ordinary launch asks for a fifth block per SM (72 registers, 112 bytes of spill; at four a
// third of the cycles had no warp ready): mixed steps 0.7-2.1% faster at Qwen3.5-4B batch
// 64-512, windows level except batch 64 (+3.7%) (bench/NOTES_gdn.md "Session 22").
template <class TIn, class TState, int K, bool KDA, int RPT, bool FOLD>
__global__ void __launch_bounds__(
    kGroupThreads,
    RPT == 4 ? (FOLD || KDA ? 3 : (!kQuantState<TState> && sizeof(TState) == 2 ? 5 : 4)) : 2)
    replay_group_kernel(const StepParams p) {
  constexpr bool QUANT = kQuantState<TState>;
  constexpr int BITS = kStateBits<TState>;
  static_assert(!QUANT || !FOLD, "a quantised read copy is read by ordinary rows only");
  // Lanes of a quantised row hold 16-element chunks (the layout of a 1-byte state).
  constexpr int SB = QUANT ? 1 : static_cast<int>(sizeof(TState));
  using Lay = Layout<SB, K>;
  using Tok = Token<TIn, SB, K, KDA>;
  constexpr int EPU = 8 * static_cast<int>(sizeof(TState)) / BITS;  // elements per TState unit
  constexpr int RS = K / EPU;                                        // TState units per row
  constexpr int CB = kChunkBytes<TState>;                            // bytes of a lane's chunk
  static_assert(!QUANT || Lay::kChunksPerLane == 1, "a quantised row: one chunk per lane");
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  constexpr int CPL = Lay::kChunksPerLane, RPW = Lay::kRowsPerWarp;
  constexpr int NG = kGroupStreamWarps * RPW;  // row groups of the stream warps
  constexpr int U = NG * RPT;                  // rows per unit
  constexpr int FR = 4;                        // rows folded at once
  constexpr int GW = KDA ? K : 1;              // ring gate entries per record and value head
  static_assert(RPT % FR == 0, "rows per thread: a multiple of 4");

  extern __shared__ __align__(16) float smem[];
  const int R = p.R, NHB = p.heads_per_block, UPH = p.units_per_head, NS = p.stages;
  const int NU = NHB * UPH;
  const GroupSmem sm(R, K, GW, U, BITS, NHB, UPH, NS, FOLD || KDA);
  float* const sU = smem + sm.u;      // [NU][R][U] ring u of the units, by physical ring row
  float* const sK = smem + sm.k;      // [R][K] ring k^: GDN by logical record, KDA by physical
                                      // ring row (krow below; KDA fold: then k^_j ⊙ c_j)
  float* const sKK = smem + sm.kk;    // [R] k^_j·k^
  float* const sKQ = smem + sm.kq;    // [R] k^_j·q^
  float* const sCK = smem + sm.ck;    // [NHB][R] ck_j (fold: c_j, GDN)
  float* const sCQ = smem + sm.cq;    // [NHB][R] cq_j
  float* const sBK = smem + sm.bk;    // [NHB][K] KDA: e^{E(-1)}⊙k^ (fold: ā' per channel)
  float* const sBQ = smem + sm.bq;    // [NHB][K] KDA: e^{E(-1)}⊙q^
  float* const sG = smem + sm.g;      // ring g by physical row: [R][K] (KDA), [NHB][R] (GDN)
  float* const sHd = smem + sm.head;  // [NHB][2] e^{E(-1)} (fold: ā'), beta; [2 NHB] k^·q^
  float2* const sDot = reinterpret_cast<float2*>(smem + sm.dot);  // [NU][U] (dk, dq)

  const int ru = blockIdx.x % p.nru;
  const int rest = blockIdx.x / p.nru;
  const int vc = rest % p.nvc;
  const int kh = rest / p.nvc;
  const int b = blockIdx.y;
  const int vh0 = kh * p.group + vc * NHB;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nstream = kGroupStreamWarps * 32;
  const int lr = lane % LPR;
  const int grp = warp * RPW + lane / LPR;  // stream threads: row group 0..NG-1
  auto unit_head = [&](int k) { return vh0 + k / UPH; };
  auto unit_row0 = [&](int k) { return (ru * UPH + k % UPH) * U; };
  auto unit_rows = [&](int k) { return max(0, min(U, p.V - unit_row0(k))); };
  auto y_at = [&](int vh, int row) -> TIn& {
    return static_cast<TIn*>(p.y)[(static_cast<int64_t>(b) * p.HV + vh) * p.V + row];
  };

  const int slot = p.slot_ids[b];
  if (slot < 0 || slot >= p.slots) {  // pad row: nothing read or written but y = 0
    for (int v = tid; v < NU * U; v += blockDim.x) {
      const int k = v / U, r = v - k * U;
      if (r < unit_rows(k)) y_at(unit_head(k), unit_row0(k) + r) = from_f32<TIn>(0.0f);
    }
    return;
  }
  const bool all = p.prefetch_ring;
  // The step's flush launch may start scheduling once every block of this one has started
  // (Plan::overlap): it touches only the flush rows, which this launch leaves untouched.
  if (p.only == 1) pdl_launch_dependents();
  // The cursor: raw loads; resolve() is where a warp first waits for them.
  const int origin_raw = p.origin[slot];
  const int hist_raw = p.hist[slot];
  const int flush_raw = p.is_flush[slot];
  // The ordinary launch of a step with a flush launch may wait for is_flush first (Plan::
  // early_exit) rather than stream stages of a flush row that it then drops.
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
  // The row of record j in sK: KDA stages ring k^ by physical row, GDN by logical record.
  auto krow = [&](int j) { return KDA ? phys(j) : j; };
  auto rows_of = [&](int vh, int row0) {  // global checkpoint rows from row0 of value head vh
    return static_cast<TState*>(p.state) +
           ((static_cast<int64_t>(slot) * p.HV + vh) * p.V + row0) * RS;
  };
  // The units are walked in order, issue and use alike, by counters rather than divisions (head
  // k / UPH, unit k % UPH of it, stage k % NS): per unit and warp the divisions cost as many
  // instructions as a row's dots (ncu, bench/NOTES_gdn.md "Session 18").
  auto advance = [&](int& hd, int& uu, int& st) {
    if (++uu == UPH) uu = 0, ++hd;
    if (++st == NS) st = 0;
  };
  // Stream threads: the next unit's rows into its stage (one copy group, empty past the last
  // unit); called for units 0, 1, 2, .. in order. Addresses are this thread's first row's, set
  // up once: a unit adds (head, unit) offsets, a row a constant stride (the per-copy 64-bit
  // address arithmetic was a tenth of the instructions of an NVFP4 ordinary launch, ncu).
  constexpr int ROWB = RS * static_cast<int>(sizeof(TState));  // bytes per checkpoint row
  constexpr int SRB = BITS == 4 ? K / 16 : 4;                 // bytes of a row's scales
  const int col_b = Lay::col(0, lr) / EPU * static_cast<int>(sizeof(TState));
  const unsigned s_rows =
      static_cast<unsigned>(__cvta_generic_to_shared(smem)) + grp * RPT * ROWB + col_b;
  const unsigned s_side = static_cast<unsigned>(__cvta_generic_to_shared(smem + sm.side)) +
                          (grp * RPT * LPR + lr) * 4;
  const char* g_rows = reinterpret_cast<const char*>(rows_of(vh0, ru * UPH * U)) +
                       static_cast<int64_t>(grp * RPT) * ROWB + col_b;
  const char* g_side = nullptr;
  if constexpr (QUANT)  // NVFP4: the word holding E4M3 block scale lr; FP8: the row's float
    g_side = static_cast<const char*>(p.read_scales) +
             ((static_cast<int64_t>(slot) * p.HV + vh0) * p.V + ru * UPH * U + grp * RPT) * SRB +
             (BITS == 4 ? (lr / 4) * 4 : 0);
  int ik = 0, ihd = 0, iuu = 0, ist = 0;
  auto issue = [&] {
    if (ik < NU) {
      const int urow = ihd * p.V + iuu * U;  // the unit's first row from the block's first
      const unsigned s = s_rows + ist * static_cast<unsigned>(sm.stage) * 4u;
      const char* g = g_rows + static_cast<int64_t>(urow) * ROWB;
      const int n = min(U, p.V - (ru * UPH + iuu) * U) - grp * RPT;  // this thread's rows
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        if (i < n) {
#pragma unroll
          for (int c = 0; c < CPL; ++c)
            cp_async_chunk_at<CB>(s + i * ROWB + c * LPR * CB, g + i * ROWB + c * LPR * CB);
          if constexpr (QUANT)  // the chunk's scale word, into the lane's own word of the stage
            cp_async_chunk_at<4>(s_side + ist * static_cast<unsigned>(sm.stage) * 4u + i * LPR * 4,
                                 g_side + static_cast<int64_t>(urow) * SRB + i * SRB);
        }
      }
    }
    cp_async_commit();
    ++ik;
    advance(ihd, iuu, ist);
  };
  // Stream threads: the ring u rows of the block's units (all R, or the live ones), one group;
  // a thread copies one 16-byte column c of records tid / cpr, + step, .. (unit by unit, counted).
  auto copy_ring_u = [&](bool every_row) {
    constexpr int cpr = U / 4;  // 16-byte copies per ring row segment of a unit
    constexpr int step = kGroupStreamWarps * 32 / cpr;
    static_assert(kGroupStreamWarps * 32 % cpr == 0, "the stream threads cover whole records");
    const int nrec = every_row ? R : hist, c = tid % cpr;
    int k = 0, hd = 0, uu = 0, jj = tid / cpr, st = 0;
    auto carry = [&] {  // jj past the unit's records: on to the next unit
      while (nrec > 0 && jj >= nrec && k < NU) jj -= nrec, ++k, advance(hd, uu, st);
    };
#pragma unroll 1
    for (carry(); nrec > 0 && k < NU; jj += step, carry()) {
      const int row0 = (ru * UPH + uu) * U;
      if (4 * c >= p.V - row0) continue;  // past the unit's rows
      const int q = every_row ? jj : phys(jj);
      const int64_t sv = static_cast<int64_t>(slot) * p.HV + vh0 + hd;
      cp_async16(sU + (k * R + q) * U + 4 * c, p.ring_u + (sv * R + q) * p.V + row0 + 4 * c);
    }
    cp_async_commit();
  };

  const bool flush = flush_raw != 0;
  const bool fold = flush || p.state_route;  // materialise the state for this row
  Tok t;
  if (tid < nstream) {
    for (int k = 0; k < NS; ++k) issue();
    if (all) copy_ring_u(true);
    t.load(p, b, vh0, lr);
    resolve();
    if (!all) copy_ring_u(false);
  } else {
    // ---- the chain warp (row groups of LPR lanes, as the stream threads)
    const int cg = lane / LPR;
    t.load(p, b, vh0, lr);
    const float* ringk = p.ring_k + (static_cast<int64_t>(slot) * p.H + kh) * R * K;
    const bool keep_k = FOLD && fold;  // GDN: sK exists only then
    if (!all) resolve();
    const int nrec = all ? R : hist;
    // Records per row group in flight: a quantised copy's layout gives a lane 16 columns of each,
    // so 2 (the chain warp's registers bound the whole kernel's, ptxas).
    constexpr int RB = QUANT ? 2 : 4;
    // The ring gates of the block's value heads, by physical row (read by the serial sums).
    const float* ringg0 = p.ring_g + (static_cast<int64_t>(slot) * p.HV + vh0) * R * GW;
    // GDN: the gates of (value head, record) pairs, loaded now and stored after the records.
    constexpr int GU = KDA ? 1 : 8;  // gates per lane in flight
    const int ngate = KDA ? 0 : NHB * nrec;
    auto gate_at = [&](int idx) {  // (head, physical row) offset of pair idx in ring g and sG
      const int hd = idx / nrec, jj = idx - hd * nrec;
      return hd * R + (all ? jj : phys(jj));
    };
    float gv[GU];
#pragma unroll
    for (int u = 0; u < GU; ++u) {
      const int idx = u * 32 + lane;
      gv[u] = idx < ngate ? ringg0[gate_at(idx)] : 0.0f;
    }
    if constexpr (KDA) {
      // KDA: the stream's dots wait for pass 1 below (the decay is per channel, inside them), so
      // the records' k^ and g rows come in one round trip: 16-byte asynchronous copies, all in
      // flight at once, into sK and sG by physical ring row (no registers held while they fly).
      const int cpr = K / 4;
      for (int idx = lane; idx < 2 * nrec * cpr; idx += 32) {
        const int m = idx / cpr, c = idx - m * cpr, jj = m >> 1;
        const int q = all ? jj : phys(jj);
        if (m & 1)
          cp_async16(sG + q * K + 4 * c, ringg0 + q * K + 4 * c);
        else
          cp_async16(sK + q * K + 4 * c, ringk + q * K + 4 * c);
      }
      cp_async_commit();
      if (all) resolve();
      cp_async_wait<0>();
      __syncwarp();
    }
    // GDN: the records' k^ through registers, their dots with the token's k^ and q^ as they land.
#pragma unroll 1
    for (int base = 0; base < (KDA ? 0 : nrec); base += RB * RPW) {
      float kj[RB][COLS];
#pragma unroll
      for (int u = 0; u < RB; ++u) {
        const int jj = base + u * RPW + cg;
        if (jj < nrec) {
          const float* row = ringk + (all ? jj : phys(jj)) * K;
#pragma unroll
          for (int c = 0; c < CPL; ++c)
            load_vec<float, VEC>(row + Lay::col(c, lr), &kj[u][c * VEC]);
        }
      }
      if (all) resolve();  // the first rows are in flight
#pragma unroll
      for (int u = 0; u < RB; ++u) {
        const int jj = base + u * RPW + cg;
        float pk = 0.0f, pq = 0.0f;
        if (jj < nrec) {
#pragma unroll
          for (int i = 0; i < COLS; ++i) {
            pk = __fmaf_rn(kj[u][i], t.khat[i], pk);
            pq = __fmaf_rn(kj[u][i], t.qhat[i], pq);
          }
        }
        pk = lane_group_sum<LPR>(pk);
        pq = lane_group_sum<LPR>(pq);
        int j = jj;
        if (all) j = jj - origin < 0 ? jj - origin + R : jj - origin;  // physical -> logical
        if (jj < nrec && j < hist) {
          if (lr == 0) sKK[j] = pk, sKQ[j] = pq;
          if (keep_k)
#pragma unroll
            for (int c = 0; c < CPL; ++c)
#pragma unroll
              for (int v = 0; v < VEC; ++v) sK[j * K + Lay::col(c, lr) + v] = kj[u][c * VEC + v];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < GU; ++u) {
      const int idx = u * 32 + lane;
      if (idx < ngate) sG[gate_at(idx)] = gv[u];
    }
    for (int idx = GU * 32 + lane; idx < ngate; idx += 32) sG[gate_at(idx)] = ringg0[gate_at(idx)];
    __syncwarp();
    const int qh = phys(hist);  // the token's ring row
    if (!KDA) {
      // One lane per value head: the gate sums from the token backwards.
      if (lane < NHB) {
        const int vh = vh0 + lane;
        const int64_t bv = static_cast<int64_t>(b) * p.HV + vh;
        const float gt = gate_of(to_f32(static_cast<const TIn*>(p.a)[bv]), p.dt_bias[vh],
                                 expf(p.A_log[vh]));
        const float* rg = sG + lane * R;
        float* ck = sCK + lane * R;
        float* cq = sCQ + lane * R;
        float acc = fold ? 0.0f : gt;
#pragma unroll 4
        for (int j = hist - 1; j >= 0; --j) {
          const float gj = rg[phys(j)];
          const float w = expf(acc);
          if (fold) {
            ck[j] = w;
          } else {
            ck[j] = __fmul_rn(w, sKK[j]);
            cq[j] = __fmul_rn(w, sKQ[j]);
          }
          acc = __fadd_rn(acc, gj);
        }
        sHd[2 * lane] = expf(acc);
        sHd[2 * lane + 1] = beta_of(to_f32(static_cast<const TIn*>(p.b)[bv]), p.beta_bf16);
        if (!flush && ru == 0) p.ring_g[(static_cast<int64_t>(slot) * p.HV + vh) * R + qh] = gt;
      }
    } else {
      // Per key channel, one value head (NHB = 1, the plan's rule for KDA). The running gate sums
      // go from the token backwards (E(j) = g_tok + g_{h-1} + .. + g_{j+1}), so every exponent is
      // <= 0 and every E(j) has the same bits in each pass below.
      auto gate_row = [&](int j, float* gj) {
#pragma unroll
        for (int c = 0; c < CPL; ++c)
          load_vec<float, VEC>(sG + phys(j) * K + Lay::col(c, lr), &gj[c * VEC]);
      };
      float acc[COLS];
#pragma unroll
      for (int i = 0; i < COLS; ++i) acc[i] = fold ? 0.0f : t.g[i];
      // Pass 1 (what the stream waits for): the whole sum, e^{E(-1)} (ordinary: ⊙ k^ and q^;
      // fold: ā' per channel), beta, the token's gate record.
#pragma unroll 1
      for (int j = hist - 1; j >= 0; --j) {
        float gj[COLS];
        gate_row(j, gj);
#pragma unroll
        for (int i = 0; i < COLS; ++i) acc[i] = __fadd_rn(acc[i], gj[i]);
      }
      if (cg == 0) {
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
          for (int v = 0; v < VEC; ++v) {
            const int i = c * VEC + v, col = Lay::col(c, lr) + v;
            const float w = expf(acc[i]);
            sBK[col] = fold ? w : __fmul_rn(w, t.khat[i]);
            if (!fold) sBQ[col] = __fmul_rn(w, t.qhat[i]);
          }
        if (lr == 0) sHd[1] = t.beta;
        if (!flush && ru == 0) {
          float* wg = p.ring_g + ((static_cast<int64_t>(slot) * p.HV + vh0) * R + qh) * K;
#pragma unroll
          for (int c = 0; c < CPL; ++c)
#pragma unroll
            for (int v = 0; v < VEC; ++v) wg[Lay::col(c, lr) + v] = t.g[c * VEC + v];
        }
      }
      // Ordinary rows: the stream's dots need only pass 1; the per-record scalars below are for
      // the epilogue and run while the stream reads (barrier 1 of 2).
      if (!fold) __syncthreads();
      // Pass 2: per record, e^{E(j)} (ordinary: inside the dots with k^ and q^; fold: k^_j ⊙ c_j
      // in place), the RPW row groups of the warp taking records in turn (j = h-1-RPW t-cg); each
      // group's running sum adds the gates one at a time in the same order as pass 1.
      float run[COLS];
#pragma unroll
      for (int i = 0; i < COLS; ++i) run[i] = fold ? 0.0f : t.g[i];
      for (int m = 1; m <= cg && hist - m >= 0; ++m) {
        float gj[COLS];
        gate_row(hist - m, gj);
#pragma unroll
        for (int i = 0; i < COLS; ++i) run[i] = __fadd_rn(run[i], gj[i]);
      }
#pragma unroll 1
      for (int t2 = 0; RPW * t2 < hist; ++t2) {
        const int j = hist - 1 - RPW * t2 - cg;
        float pk = 0.0f, pq = 0.0f;
        if (j >= 0) {
#pragma unroll
          for (int c = 0; c < CPL; ++c)
#pragma unroll
            for (int v = 0; v < VEC; ++v) {
              const int i = c * VEC + v;
              float* kjc = sK + krow(j) * K + Lay::col(c, lr) + v;
              const float w = expf(run[i]);
              if (fold) {
                *kjc = __fmul_rn(w, *kjc);
              } else {
                const float kw = __fmul_rn(w, *kjc);
                pk = __fmaf_rn(kw, t.khat[i], pk);
                pq = __fmaf_rn(kw, t.qhat[i], pq);
              }
            }
          // advance to this group's next record: E(j - RPW) = E(j) + g_j + .. + g_{j-RPW+1}
          for (int m = 0; m < RPW && j - m >= 0; ++m) {
            float gj[COLS];
            gate_row(j - m, gj);
#pragma unroll
            for (int i = 0; i < COLS; ++i) run[i] = __fadd_rn(run[i], gj[i]);
          }
        }
        if (!fold) {  // both row groups shuffle (full-warp sums)
          pk = lane_group_sum<LPR>(pk);
          pq = lane_group_sum<LPR>(pq);
          if (j >= 0 && lr == 0) sCK[j] = pk, sCQ[j] = pq;
        }
      }
    }
    if (p.ring_beta && !flush && ru == 0) {  // split modes: the token's beta per value head
      if (KDA) {
        if (lane == 0) p.ring_beta[(static_cast<int64_t>(slot) * p.HV + vh0) * R + qh] = sHd[1];
      } else if (lane < NHB) {
        p.ring_beta[(static_cast<int64_t>(slot) * p.HV + vh0 + lane) * R + qh] = sHd[2 * lane + 1];
      }
    }
    if (lane == 0) sHd[2 * NHB] = t.kq;
    // The token's k^, once per key head.
    if (!flush && vc == 0 && ru == 0) {
      float* wk = p.ring_k + ((static_cast<int64_t>(slot) * p.H + kh) * R + qh) * K;
      if (sizeof(TState) != 4 && p.ring_v) {
        // Split modes read a 16-bit copy, whose lane layout sums |k|^2 in another order: the
        // record gets k^ formed exactly as the fp32 step forms it, so that the flush's exact u
        // (flush.cuh) reproduces the fp32 mode's checkpoint bit for bit.
        using Lay32 = Layout<4, K>;
        Token<TIn, 4, K, KDA> t32;
        const int lr32 = lane % Lay32::kLanesPerRow;
        t32.load(p, b, vh0, lr32);  // every lane (row-group sums)
        if (lane < Lay32::kLanesPerRow) {
#pragma unroll
          for (int c = 0; c < Lay32::kChunksPerLane; ++c)
#pragma unroll
            for (int v = 0; v < Lay32::kVec; ++v)
              wk[Lay32::col(c, lr32) + v] = t32.khat[c * Lay32::kVec + v];
        }
      } else if (cg == 0) {
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
          for (int v = 0; v < VEC; ++v) wk[Lay::col(c, lr) + v] = t.khat[c * VEC + v];
      }
    }
  }

  if (p.only == 1 && flush) {  // a flush row in the ordinary launch (without early exit)
    if (tid < nstream) cp_async_wait<0>();
    return;
  }
  // Barrier 1: fold rows wait for the whole chain and the ring u rows; KDA ordinary rows only for
  // the chain's pass 1 (the chain warp arrived from inside its KDA branch).
  if (fold) {
    if (tid < nstream) cp_async_wait<0>();
    __syncthreads();
  } else if (KDA && tid < nstream) {
    __syncthreads();
  }
  if (tid < nstream) {
    const int qh = phys(hist);
    int cur_head = -1;
    float bk[COLS], bq[COLS];  // the vectors the ordinary rows' dots use
    // NVFP4 codes decode as E2M1 · 2^-14 (nvfp4_chunk_values): the vectors carry 2^14, exactly.
    constexpr float CS = BITS == 4 ? kNvfp4DotScale : 1.0f;
#pragma unroll
    for (int i = 0; i < COLS; ++i) bk[i] = t.khat[i] * CS, bq[i] = t.qhat[i] * CS;
    int hd = 0, uu = 0, st = 0;  // unit k's head (k / UPH), unit of it, stage
#pragma unroll 1
    for (int k = 0; k < NU; ++k) {
      cp_async_wait_upto(k < NS ? NS : NS - 1);  // unit k landed (groups: units 0..NS-1, ring, ..)
      const TState* tile = reinterpret_cast<const TState*>(smem + st * sm.stage);
      const int vh = vh0 + hd, row0 = (ru * UPH + uu) * U, n = max(0, min(U, p.V - row0));
      if (!fold) {
        if (KDA && hd != cur_head) {
          cur_head = hd;
#pragma unroll
          for (int c = 0; c < CPL; ++c)
#pragma unroll
            for (int v = 0; v < VEC; ++v) {
              const int col = Lay::col(c, lr) + v;
              bk[c * VEC + v] = sBK[hd * K + col] * CS;
              bq[c * VEC + v] = sBQ[hd * K + col] * CS;
            }
        }
        // The thread's rows' dots (rows past n read stale stage bytes: their sums are never
        // stored), summed over the row group by one transposed butterfly for all 2 RPT values:
        // the additions of lane_group_sum, so the same bits, for a quarter of the shuffles.
        float part[2 * RPT];
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
          float s[COLS];
          float sc = 1.0f;  // a quantised chunk's scale, applied to its sums
          if constexpr (QUANT) {
            const int r = grp * RPT + i;
            const TState* chunk = tile + r * RS + Lay::col(0, lr) / EPU;
            const uint32_t sw =
                reinterpret_cast<const uint32_t*>(smem + st * sm.stage + sm.side)[r * LPR + lr];
            if constexpr (BITS == 4) {
              nvfp4_chunk_values(*reinterpret_cast<const uint2*>(chunk), s);
              sc = e4m3_to_f32(static_cast<uint8_t>(sw >> ((lr & 3) * 8)));
            } else {
              e4m3_chunk_values(*reinterpret_cast<const uint4*>(chunk), s);
              sc = __uint_as_float(sw);
            }
          } else {
            tile_row<TState, Lay>(tile, grp * RPT + i, lr, true, s);
          }
          float pk = 0.0f, pq = 0.0f;
#pragma unroll
          for (int e = 0; e < COLS; ++e) {
            pk = __fmaf_rn(s[e], bk[e], pk);
            pq = __fmaf_rn(s[e], bq[e], pq);
          }
          if constexpr (QUANT) pk = __fmul_rn(pk, sc), pq = __fmul_rn(pq, sc);
          part[2 * i] = pk, part[2 * i + 1] = pq;
        }
        if constexpr (2 * RPT <= LPR) {
          constexpr int SUB = LPR / (2 * RPT);  // lanes that end with each value
          const float sum = transposed_sum<2 * RPT, LPR>(part, lr);
          const int m = lr / SUB, r = grp * RPT + m / 2;
          if (r < n && lr % SUB == 0) reinterpret_cast<float*>(sDot)[2 * (k * U + r) + m % 2] = sum;
        } else {
#pragma unroll
          for (int i = 0; i < RPT; ++i) {
            const float pk = lane_group_sum<LPR>(part[2 * i]);
            const float pq = lane_group_sum<LPR>(part[2 * i + 1]);
            const int r = grp * RPT + i;
            if (r < n && lr == 0) sDot[k * U + r] = make_float2(pk, pq);
          }
        }
      } else if constexpr (FOLD) {
        if (hd != cur_head) {  // the token's gate and beta of this value head
          cur_head = hd;
          t.load(p, b, vh, lr);
        }
        const float* uk = sU + k * R * U;
        float abar[GW];
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
          for (int v = 0; v < (KDA ? VEC : 1); ++v)
            abar[KDA ? c * VEC + v : 0] = KDA ? sBK[hd * K + Lay::col(c, lr) + v] : sHd[2 * hd];
        const float* cj = sCK + hd * R;
        const TIn* vin = static_cast<const TIn*>(p.v) + (static_cast<int64_t>(b) * p.HV + vh) * p.V;
#pragma unroll 1
        for (int i0 = 0; i0 < RPT; i0 += FR) {
          const int r0 = grp * RPT + i0;
          float s[FR][COLS];
#pragma unroll
          for (int f = 0; f < FR; ++f) {
            tile_row<TState, Lay>(tile, r0 + f, lr, r0 + f < n, s[f]);
#pragma unroll
            for (int e = 0; e < COLS; ++e) s[f][e] = __fmul_rn(abar[KDA ? e : 0], s[f][e]);
          }
#pragma unroll 2
          for (int j = 0; j < hist; ++j) {
            float kq[COLS];
            lane_cols<Lay>(sK + krow(j) * K, lr, kq);
            const float4 u4 = *reinterpret_cast<const float4*>(uk + phys(j) * U + r0);
            float uf[FR] = {u4.x, u4.y, u4.z, u4.w};
            if (!KDA) {
              const float c = cj[j];
#pragma unroll
              for (int f = 0; f < FR; ++f) uf[f] = __fmul_rn(c, uf[f]);
            }
#pragma unroll
            for (int f = 0; f < FR; ++f)
#pragma unroll
              for (int e = 0; e < COLS; ++e) s[f][e] = __fmaf_rn(uf[f], kq[e], s[f][e]);
          }
          // The conventional update with the token: the conventional kernel's own code.
#pragma unroll
          for (int f = 0; f < FR; ++f) {
            const int r = r0 + f;
            const bool valid = r < n;
            const float vv = valid ? to_f32(vin[row0 + r]) : 0.0f;
            const float2 yu = delta_rule_row(s[f], t, vv);
            if (valid) {
              if (lr == 0) {
                y_at(vh, row0 + r) = from_f32<TIn>(yu.x);
                const int64_t rec = ((static_cast<int64_t>(slot) * p.HV + vh) * R + qh) * p.V;
                if (!flush) p.ring_u[rec + row0 + r] = yu.y;
                if (!flush && p.ring_v) p.ring_v[rec + row0 + r] = vv;
              }
              if (flush)
                store_row<TState, Lay>(rows_of(vh, row0) + static_cast<int64_t>(r) * K, lr, s[f],
                                       sr_slot(p.sr, slot, static_cast<TState*>(p.state) +
                                                               static_cast<int64_t>(slot) * p.HV * p.V * K));
            }
          }
        }
      }
      issue();  // unit k + NS, into the stage this thread has just read
      advance(hd, uu, st);
    }
    cp_async_wait<0>();  // the ring u rows (the epilogue reads every thread's copies)
  }
  if (fold) return;  // fold rows wrote y and their records in the row loop
  __syncthreads();

  // ---- epilogue: ordinary rows' y, and the ring u of the token's record
  const int qh = phys(hist);
  const float kq = sHd[2 * NHB];
#pragma unroll 1
  for (int v = tid; v < NU * U; v += blockDim.x) {
    const int k = v / U, r = v - k * U;
    if (r >= unit_rows(k)) continue;
    const int hd = k / UPH, vh = unit_head(k), row = unit_row0(k) + r;
    float2 d = sDot[v];
    if constexpr (BITS == 4) {  // the NVFP4 global scale of (slot, value head)
      const float gs = p.read_global[static_cast<int64_t>(slot) * p.HV + vh];
      d.x = __fmul_rn(d.x, gs), d.y = __fmul_rn(d.y, gs);
    }
    const float A = KDA ? 1.0f : sHd[2 * hd];
    float hk = __fmul_rn(A, d.x), hq = __fmul_rn(A, d.y);
    const float* uk = sU + k * R * U + r;
    const float* ck = sCK + hd * R;
    const float* cq = sCQ + hd * R;
#pragma unroll 4
    for (int j = 0; j < hist; ++j) {
      const float uj = uk[phys(j) * U];
      hk = __fmaf_rn(uj, ck[j], hk);
      hq = __fmaf_rn(uj, cq[j], hq);
    }
    const int64_t bv = static_cast<int64_t>(b) * p.HV + vh;
    const float vv = to_f32(static_cast<const TIn*>(p.v)[bv * p.V + row]);
    const float u = __fmul_rn(sHd[2 * hd + 1], __fsub_rn(vv, hk));
    y_at(vh, row) = from_f32<TIn>(__fmaf_rn(kq, u, hq));
    const int64_t rec = ((static_cast<int64_t>(slot) * p.HV + vh) * R + qh) * p.V + row;
    p.ring_u[rec] = u;
    if (p.ring_v) p.ring_v[rec] = vv;  // split modes: v for the flush's exact u
  }
}

}  // namespace replayssm::cuda::gdn
