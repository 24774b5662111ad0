// The ReplaySSM decode step (ring mode kDecode) for GDN/KDA. One kernel serves every mix of rows:
// each row's cursor (origin, h, is_flush) is read on the device.
//
// Records since the checkpoint S0 are (u_j, k^_j, g_j), j = 0..h-1; the token sits at logical h.
// E(j) = g_{j+1} + ... + g_h is the running sum of the gates after j up to the token (per key
// channel for KDA), accumulated from the token backwards, never a difference of prefix sums; every
// g <= 0, so every exponent is <= 0 with a rounding error relative to itself.
//
//   ordinary row, output-only route (method.md §3.3(a)): per record the scalars
//       ch_j = k^_j . e^{E(j)} . k^ and dh_j = k^_j . e^{E(j)} . q^, then per checkpoint row both
//       projections from one pass over the row,
//       hk = S0_r . (e^{E(-1)} . k^) + sum_j u_j[r] ch_j,   hq = S0_r . (e^{E(-1)} . q^) + ...,
//       u = beta (v - hk),  y = hq + (k^ . q^) u;  the checkpoint is read once and not written.
//   flush row (and ordinary rows of the state-and-output route): the state before the token,
//       S_h = S0 folded with the records (S <- S diag(e^{g_j}) + u_j k^_j^T in order), then the
//       conventional update with the token through delta_rule_row(), the conventional kernel's
//       own code (bit-identical at h = 0). A flush writes S as the new checkpoint.
//   Ordinary rows append the token's record (u of the block's rows, g per value head, k^ once per
//   key head by its first value head) at logical h; flush rows write nothing to the ring.
//
// Block: rows [r0, r0 + rows_per_block) of one (batch row, value head), as the conventional
// kernel. The checkpoint rows stream into a shared-memory tile (TileRows: cp.async or bulk copies,
// waited for pass by pass);
// the live ring records (all R rows with prefetch_ring) are staged in shared memory as float while
// they fly. Shared memory (ReplaySmem, launch.h): tile, sK [R][K] (k^ of the key head), sG [R +
// 1][GW] (g of the value head, row R = the token's, turned into decays in place), sU
// [R][rows_per_block] (u of the block's rows), sCH [R], sDH [R]; ring rows are indexed by physical
// row.
#pragma once
#include "cuda/common/async_copy.cuh"
#include "cuda/gdn/conventional.cuh"
#include "cuda/gdn/launch.h"

namespace replayssm::cuda::gdn {

namespace replay_detail {

/// One array of ring rows to stage: row q of the source starts at src + q * src_row, of the copy at
/// dst + q * dst_row; `units` per row, each 4 floats (vec4: the pointers and row strides then
/// multiples of 4 floats) or 1.
struct StageRegion {
  float* dst;
  const float* src;
  int64_t src_row;
  int dst_row, units;
  bool vec4;
};

/// Copies the ring rows of three regions into shared memory: every physical row (all) or the live
/// ones (physical rows of logical 0..hist-1). A thread issues up to kU loads, across the regions,
/// before it stores any, so a block's records arrive in one round trip when each thread's share
/// is <= kU units (not one round trip per region or per element).
template <int kU>
__device__ __forceinline__ void stage(float* smem, const StageRegion& r0, const StageRegion& r1,
                                      const StageRegion& r2, int R, int origin, int hist, bool all,
                                      int tid, int nthreads) {
  const int rows = all ? R : hist;
  const int n0 = rows * r0.units, n1 = n0 + rows * r1.units, total = n1 + rows * r2.units;
#pragma unroll 1
  for (int base = tid; base < total; base += kU * nthreads) {
    float4 v[kU];
    int off[kU];  // destination float offset from smem: >= 0 a float4, <= -2 a float at -off - 2
#pragma unroll
    for (int i = 0; i < kU; ++i) {
      const int idx = base + i * nthreads;
      off[i] = -1;
      if (idx < total) {
        const bool in0 = idx < n0, in1 = !in0 && idx < n1;
        const StageRegion& g = in0 ? r0 : in1 ? r1 : r2;
        const int local = idx - (in0 ? 0 : in1 ? n0 : n1);
        const int j = local / g.units;
        const int e = local - j * g.units;
        int q = all ? j : origin + j;
        if (q >= R) q -= R;
        const int dst = static_cast<int>(g.dst - smem) + q * g.dst_row;
        if (g.vec4) {
          v[i] = *reinterpret_cast<const float4*>(g.src + q * g.src_row + 4 * e);
          off[i] = dst + 4 * e;
        } else {
          v[i].x = g.src[q * g.src_row + e];
          off[i] = -(dst + e) - 2;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kU; ++i) {
      if (off[i] >= 0)
        *reinterpret_cast<float4*>(smem + off[i]) = v[i];
      else if (off[i] <= -2)
        smem[-off[i] - 2] = v[i].x;
    }
  }
}

}  // namespace replay_detail

template <class TIn, class TState, int K, bool KDA>
__global__ void __launch_bounds__(kMaxThreads) replay_kernel(const StepParams p) {
  using Lay = Layout<sizeof(TState), K>;
  using Tok = Token<TIn, sizeof(TState), K, KDA>;
  using namespace replay_detail;
  constexpr int LPR = Lay::kLanesPerRow, COLS = Lay::kCols, VEC = Lay::kVec;
  constexpr int GW = KDA ? K : 1;  // ring gate entries per record and value head
  const BlockRows x = BlockRows::of<Lay>(p);
  const int R = p.R, rpb = p.rows_per_block;
  const int tid = threadIdx.x, nthreads = blockDim.x;
  TIn* y = static_cast<TIn*>(p.y) + (static_cast<int64_t>(x.b) * p.HV + x.vh) * p.V + x.r0;
  const int slot = p.slot_ids[x.b];
  if (slot < 0 || slot >= p.slots) return zero_rows(y, x.nrows);
  // The cursor, loaded now and used only after the checkpoint copies are issued.
  const int origin_raw = p.origin[slot];
  const int hist_raw = p.hist[slot];
  const bool flush = p.is_flush[slot] != 0;
  const bool fold = flush || p.state_route;  // materialise the state for this row

  extern __shared__ __align__(16) float smem[];
  __shared__ uint64_t bars[kMaxThreads / 32][kMaxRowsPerThread];
  const ReplaySmem sm(R, K, GW, rpb, sizeof(TState));
  float* sK = smem + sm.k;
  float* sG = smem + sm.g;
  float* sU = smem + sm.u;
  float* sCH = smem + sm.ch;
  float* sDH = smem + sm.dh;

  const int64_t sv = static_cast<int64_t>(slot) * p.HV + x.vh;  // (slot, value head)
  TileRows<TState, Lay> tile{reinterpret_cast<TState*>(smem),
                             static_cast<TState*>(p.state) + (sv * p.V + x.r0) * K, bars[x.warp],
                             p.bulk_copy, p.rows_per_thread};
  tile.request(x);
  if (flush)
    tile.sr = sr_slot(p.sr, slot, static_cast<TState*>(p.state) +
                                      static_cast<int64_t>(slot) * p.HV * p.V * K);
  Tok t;
  t.load(p, x.b, x.vh, x.lr);
  float vv[kMaxRowsPerThread];
  load_v<TIn>(p, x, tile, vv);

  const int kh = x.vh / p.group;
  const float* ringk = p.ring_k + (static_cast<int64_t>(slot) * p.H + kh) * R * K;
  const float* ringg = p.ring_g + sv * R * GW;
  const float* ringu = p.ring_u + sv * R * p.V + x.r0;
  const bool u_vec4 = (p.V % 4) == 0 && (x.r0 % 4) == 0 && (x.nrows % 4) == 0 && (rpb % 4) == 0;
  // Cursor, clamped so that even a corrupt cursor cannot address outside the slot's ring.
  int origin = origin_raw % R;
  if (origin < 0) origin += R;
  const int h = min(max(hist_raw, 0), R - 1);
  auto phys = [&](int j) {
    const int q = origin + j;
    return q >= R ? q - R : q;
  };
  // Stage the records: every physical row with prefetch (no wait for the cursor), else the live
  // ones. k^ rows of the key head, g of the value head, u of the block's rows.
  stage<8>(smem, StageRegion{sK, ringk, K, K, K / 4, true},
           StageRegion{sG, ringg, GW, GW, KDA ? GW / 4 : 1, KDA},
           StageRegion{sU, ringu, p.V, rpb, u_vec4 ? x.nrows / 4 : x.nrows, u_vec4}, R, origin, h,
           p.prefetch_ring, tid, nthreads);
  // The token's gate goes to row R of sG (the row group of lanes 0..LPR-1 holds every column once).
  if constexpr (KDA) {
    if (tid < LPR) {
#pragma unroll
      for (int c = 0; c < Lay::kChunksPerLane; ++c)
#pragma unroll
        for (int v = 0; v < VEC; ++v) sG[R * GW + Lay::col(c, x.lr) + v] = t.g[c * VEC + v];
    }
  } else {
    if (tid == 0) sG[R] = t.g[0];
  }
  __syncthreads();

  // The token's record but u (ordinary rows, first split): g per value head, k^ once per key
  // head. Its ring row is outside the window this step reads.
  if (!flush && x.split == 0) {
    const int qh = phys(h);
    float* rg = p.ring_g + (sv * R + qh) * GW;
    float* rk = p.ring_k + ((static_cast<int64_t>(slot) * p.H + kh) * R + qh) * K;
    const bool write_k = x.vh % p.group == 0;
    if (tid < LPR) {
#pragma unroll
      for (int c = 0; c < Lay::kChunksPerLane; ++c)
#pragma unroll
        for (int v = 0; v < VEC; v += 4) {
          const int col = Lay::col(c, x.lr) + v;
          const int i = c * VEC + v;
          if (write_k)
            *reinterpret_cast<float4*>(rk + col) =
                make_float4(t.khat[i], t.khat[i + 1], t.khat[i + 2], t.khat[i + 3]);
          if constexpr (KDA)
            *reinterpret_cast<float4*>(rg + col) =
                make_float4(t.g[i], t.g[i + 1], t.g[i + 2], t.g[i + 3]);
        }
      if (!KDA && tid == 0) rg[0] = t.g[0];
    }
  }

  if (fold) {
    // The records' own decays e^{g_j} for the sequential fold.
    for (int idx = tid; idx < h * GW; idx += nthreads) {
      const int j = idx / GW;
      const int c = idx - j * GW;
      float* gq = sG + phys(j) * GW + c;
      *gq = expf(*gq);
    }
  } else {
    // Running sums of the gates after each record, from the token backwards, per channel:
    // sG[record j] <- e^{E(j)}, sG[R] <- e^{E(-1)} (the checkpoint's decay).
    for (int c = tid; c < GW; c += nthreads) {
      float acc = sG[R * GW + c];  // E(h - 1) = g_h
#pragma unroll 4
      for (int j = h - 1; j >= 0; --j) {
        float* gq = sG + phys(j) * GW + c;
        const float gj = *gq;
        *gq = expf(acc);
        acc = __fadd_rn(acc, gj);
      }
      sG[R * GW + c] = expf(acc);
    }
  }
  __syncthreads();

  float bk[COLS], bq[COLS];  // e^{E(-1)} . k^ and e^{E(-1)} . q^ (output-only route)
  if (!fold) {
    // ch_j and dh_j: one row group per record, uniform trip count (every lane reaches the sums).
#pragma unroll 1
    for (int base = 0; base < h; base += x.pass) {
      const int j = base + x.grp;
      float pk = 0.0f, pq = 0.0f;
      if (j < h) {
        const int q = phys(j);
        const float* kj = sK + q * K;
        const float* wj = sG + q * GW;
#pragma unroll
        for (int c = 0; c < Lay::kChunksPerLane; ++c)
#pragma unroll
          for (int v = 0; v < VEC; v += 4) {
            const int col = Lay::col(c, x.lr) + v;
            const float4 k4 = *reinterpret_cast<const float4*>(kj + col);
            const float kv[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int i = c * VEC + v + e;
              const float kw = KDA ? __fmul_rn(wj[col + e], kv[e]) : kv[e];
              pk = __fmaf_rn(kw, t.khat[i], pk);
              pq = __fmaf_rn(kw, t.qhat[i], pq);
            }
          }
      }
      pk = lane_group_sum<LPR>(pk);
      pq = lane_group_sum<LPR>(pq);
      if (j < h && x.lr == 0) {
        const float w = KDA ? 1.0f : sG[phys(j)];  // GDN: the record's one decay
        sCH[j] = KDA ? pk : __fmul_rn(w, pk);
        sDH[j] = KDA ? pq : __fmul_rn(w, pq);
      }
    }
#pragma unroll
    for (int c = 0; c < Lay::kChunksPerLane; ++c)
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        const int i = c * VEC + v;
        const float w = sG[R * GW + (KDA ? Lay::col(c, x.lr) + v : 0)];
        bk[i] = __fmul_rn(w, t.khat[i]);
        bq[i] = __fmul_rn(w, t.qhat[i]);
      }
    __syncthreads();
  }

  const int qh = phys(h);  // physical row of the token's record (ordinary rows append there)
  float* ru = p.ring_u + (sv * R + qh) * p.V + x.r0;
  // The row loops (one per branch, so that each keeps only its own registers live). Row i of the
  // thread waits for its own copy group i only.
  if (fold) {
#pragma unroll
    for (int i = 0; i < kMaxRowsPerThread; ++i) {
      if (i >= p.rows_per_thread) break;  // uniform over the block
      const int r = tile.row(x, i);
      const bool valid = r < x.nrows;
      tile.wait(x, i);
      float s[COLS];
      tile_row<TState, Lay>(tile.tile, r, x.lr, valid, s);
      if (valid) {
        // S_h: the checkpoint row folded with the records in order.
#pragma unroll 1
        for (int j = 0; j < h; ++j) {
          const int q = phys(j);
          const float uj = sU[q * rpb + r];
          const float* kj = sK + q * K;
          const float* aj = sG + q * GW;
#pragma unroll
          for (int c = 0; c < Lay::kChunksPerLane; ++c)
#pragma unroll
            for (int v = 0; v < VEC; v += 4) {
              const int col = Lay::col(c, x.lr) + v;
              const float4 k4 = *reinterpret_cast<const float4*>(kj + col);
              const float kv[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                float& se = s[c * VEC + v + e];
                se = __fmaf_rn(se, aj[KDA ? col + e : 0], __fmul_rn(uj, kv[e]));
              }
            }
        }
      }
      // The conventional update with the token: the conventional kernel's own code.
      const float2 yu = delta_rule_row(s, t, vv[i]);
      if (valid && x.lr == 0) {
        y[r] = from_f32<TIn>(yu.x);
        if (!flush) ru[r] = yu.y;
      }
      if (flush) tile.store(x, i, valid, s);  // uniform over the block
    }
  } else {
#pragma unroll
    for (int i = 0; i < kMaxRowsPerThread; ++i) {
      if (i >= p.rows_per_thread) break;  // uniform over the block
      const int r = tile.row(x, i);
      const bool valid = r < x.nrows;
      tile.wait(x, i);
      float s[COLS];
      tile_row<TState, Lay>(tile.tile, r, x.lr, valid, s);
      float pk = 0.0f, pq = 0.0f;
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        pk = __fmaf_rn(s[c], bk[c], pk);
        pq = __fmaf_rn(s[c], bq[c], pq);
      }
      if (valid) {
#pragma unroll 1
        for (int j = x.lr; j < h; j += LPR) {
          const float uj = sU[phys(j) * rpb + r];
          pk = __fmaf_rn(uj, sCH[j], pk);
          pq = __fmaf_rn(uj, sDH[j], pq);
        }
      }
      const float hk = lane_group_sum<LPR>(pk);
      const float hq = lane_group_sum<LPR>(pq);
      const float u = __fmul_rn(t.beta, __fsub_rn(vv[i], hk));
      if (valid && x.lr == 0) {
        y[r] = from_f32<TIn>(__fmaf_rn(t.kq, u, hq));
        ru[r] = u;
      }
    }
  }
  tile.finish(x);
}

}  // namespace replayssm::cuda::gdn
