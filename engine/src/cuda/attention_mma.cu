// Decode attention on the tensor cores (attention_mma.h). A block serves one KV head j of one row
// group (Attention::tokens_per_row rows of one slot) and up to 16 of its queries (the GQA group's
// heads times the group's tokens) over one chunk of positions. Each of its warps (2 at head_dim
// 256, else 4) walks its own 16-position tiles of the chunk:
//   - the tile's K and V rows (bf16, 16 x head_dim each) stream into the warp's shared-memory
//     stages by cp.async, kStages - 1 tiles ahead (16-byte chunks XOR-swizzled by row, so that
//     ldmatrix reads 8 rows without bank conflicts); positions past the chunk are zero-filled;
//   - scores S = Q K^T on mma m16n8k16 (bf16 in, fp32 accumulate): A = the queries as bf16 hi + lo
//     pairs (q = hi + lo to ~2^-16 relative: the scores carry q at near fp32 precision), built
//     once per block in shared memory in fragment order; B = the K rows by ldmatrix;
//   - an online softmax per query row (fp32 running max; per-lane partial sums reduced at the
//     end) with each query's causal limit (a verify step's token sees up to its own position);
//   - O += P V on mma with P as bf16 hi + lo pairs (the scores' accumulator layout is the A
//     operand's, FlashAttention-2's observation: no shuffles) and V by ldmatrix.trans; O (16 x
//     head_dim fp32) stays in registers.
// The warps' (max, sum, O) then merge through shared memory (the stages, free by then) into the
// output, or into the partials of attention_combine_kernel (Attention::splits > 1).
// The K/V bytes stream once per (KV head, row group, 16 queries); the old CUDA-core kernel read
// each K row with one lane per position and ran ~1 G FMAs per Qwen3.5-4B layer through the CUDA
// cores (bench/NOTES.md "Session 32", "Session 33").
#include "cuda/attention_mma.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/attention_rows.cuh"
#include "cuda/common/async_copy.cuh"
#include "cuda/common/launch.cuh"
#include "replayssm/errors.h"

namespace replayssm::engine::cuda {
namespace {

using ::replayssm::cuda::cp_async16_zfill;
using ::replayssm::cuda::cp_async_commit;
using ::replayssm::cuda::cp_async_wait;

constexpr int kTile = 16;   // positions per tile (the k of P V, two n-tiles of S)
constexpr int kRows = 16;   // queries per block (the mma's M)
constexpr int kStages = 3;  // tiles per warp in shared memory (kStages - 1 in flight)

/// Shared-memory layout (bytes) of a block of W warps: the warps' stages [warp][stage][K tile | V tile] (reused by the
/// merge as [warp][query][head_dim + 2] floats: O, then max and sum), the queries' A fragments
/// [k-step][lane][hi uint4 | lo uint4], the queries' position counts [kRows] int32.
template <int HD, int W>
struct Smem {
  static constexpr int kRowBytes = HD * 2;
  static constexpr int kTileBytes = kTile * kRowBytes;
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kWarpBytes = kStages * kStageBytes;
  static constexpr int kMergeStride = HD + 2;  // floats per (warp, query) in the merge
  static constexpr int kStagesBytes = W * kWarpBytes;
  static constexpr int kMergeBytes = W * kRows * kMergeStride * 4;
  static constexpr int kQ = kStagesBytes > kMergeBytes ? kStagesBytes : kMergeBytes;
  static constexpr int kQBytes = (HD / 16) * 32 * 32;
  static constexpr int kSeen = kQ + kQBytes;
  static constexpr int kTotal = kSeen + kRows * 4;
};

struct Split2 {
  uint32_t hi, lo;
};
/// (a, b) as bf16 pairs hi + lo with a = hi.x + lo.x, b = hi.y + lo.y to ~2^-16 relative (a in
/// the low half, the mma's lower column).
__device__ __forceinline__ Split2 split2(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(a - hf.x, b - hf.y);
  return {*reinterpret_cast<const uint32_t*>(&h), *reinterpret_cast<const uint32_t*>(&l)};
}

/// d += a · b, m16n8k16, bf16 inputs (A row-major, B column-major), fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Four 8x8 bf16 matrices from shared memory, lane l giving row l % 8 of matrix l / 8; thread
/// (g, c) receives (row g, columns 2c, 2c + 1) of each (TRANS: (rows 2c, 2c + 1, column g)).
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], unsigned addr) {
  if constexpr (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

/// Byte offset of 16-byte chunk ch of tile row r: chunks XOR-swizzled by r % 8.
template <int HD>
__device__ __forceinline__ unsigned tile_offset(int r, int ch) {
  return static_cast<unsigned>(r * HD * 2 + ((ch ^ (r & 7)) << 4));
}

template <int HD, int W>
__global__ void __launch_bounds__(W * 32) attention_mma_kernel(Attention p) {
  using SM = Smem<HD, W>;
  constexpr int kWarps = W;
  constexpr int KS = HD / 16;  // k-steps of Q K^T
  constexpr int NT = HD / 8;   // n-tiles of P V (output columns)
  constexpr int CPR = HD / 8;  // 16-byte chunks per K / V row
  static_assert(CPR % 8 == 0 && (kTile * CPR) % 32 == 0, "head_dim 64, 128 or 256");
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
  const int TT = p.tokens_per_row, G = p.nh / p.nkv, QG = TT * G;
  const int qblocks = (QG + kRows - 1) / kRows;
  const int j = blockIdx.x / qblocks, q0 = (blockIdx.x % qblocks) * kRows;
  const int gb = min(kRows, QG - q0);
  const int64_t rows0 = static_cast<int64_t>(blockIdx.y) * TT;  // the group's first row
  const int split = blockIdx.z;
  // Query r of the block: token (q0 + r) / G of the group, query head j G + (q0 + r) % G.
  auto row_of = [&](int r) { return rows0 + (q0 + r) / G; };
  auto head_of = [&](int r) { return j * G + (q0 + r) % G; };
  const int32_t slot = p.slots[rows0];  // every used token of the group has this slot
  if (slot < 0 || slot >= p.num_slots) {  // pad rows: zeros (the combine kernel's job if split)
    if (p.splits == 1)
      for (int i = tid; i < gb * HD; i += blockDim.x)
        p.out[(row_of(i / HD) * p.nh + head_of(i / HD)) * HD + i % HD] = __float2bfloat16_rn(0.0f);
    return;
  }

  // Positions each query sees (0: an unused token), and the queries' A fragments: for k-step ks
  // and lane (g', c'), rows g', g' + 8 at columns 16 ks + 2c' + {0, 1} and + 8 (zero past gb).
  int32_t* const s_seen = reinterpret_cast<int32_t*>(smem + SM::kSeen);
  if (tid < kRows) {
    int32_t seen = 0;
    if (tid < gb) {
      const int64_t b = row_of(tid);
      const int32_t s = p.slots[b];
      seen = s >= 0 && s < p.num_slots ? row_position(p, b, s) + 1 : 0;
    }
    s_seen[tid] = seen;
  }
  uint4* const s_q = reinterpret_cast<uint4*>(smem + SM::kQ);
  for (int i = tid; i < KS * 32; i += blockDim.x) {
    const int ks = i >> 5, gq = (i & 31) >> 2, k0 = ks * 16 + 2 * (i & 3);
    float v[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = gq + 8 * h;
      if (r < gb) {
        const float* const q = p.q + (row_of(r) * p.nh + head_of(r)) * HD;
        const float2 a = *reinterpret_cast<const float2*>(q + k0);
        const float2 b = *reinterpret_cast<const float2*>(q + k0 + 8);
        v[h][0] = a.x, v[h][1] = a.y, v[h][2] = b.x, v[h][3] = b.y;
      } else {
        v[h][0] = v[h][1] = v[h][2] = v[h][3] = 0.0f;
      }
    }
    const Split2 a0 = split2(v[0][0], v[0][1]), a1 = split2(v[1][0], v[1][1]);
    const Split2 a2 = split2(v[0][2], v[0][3]), a3 = split2(v[1][2], v[1][3]);
    s_q[2 * i] = make_uint4(a0.hi, a1.hi, a2.hi, a3.hi);
    s_q[2 * i + 1] = make_uint4(a0.lo, a1.lo, a2.lo, a3.lo);
  }
  __syncthreads();
  int32_t n = 0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) n = max(n, s_seen[r]);
  const int32_t chunk = (n + p.splits - 1) / p.splits;
  const int32_t c0 = split * chunk, c1 = min(n, c0 + chunk);
  // The lane's rows g and g + 8 see positions below lim[0], lim[1] (within the chunk).
  const int32_t lim[2] = {min(s_seen[g], c1), min(s_seen[g + 8], c1)};

  const int64_t stride = static_cast<int64_t>(p.nkv) * HD;  // elements between positions
  const bf16* const kb = p.kcache + (static_cast<int64_t>(slot) * p.ctx * p.nkv + j) * HD;
  const bf16* const vb = p.vcache + (static_cast<int64_t>(slot) * p.ctx * p.nkv + j) * HD;
  const unsigned wbase =
      static_cast<unsigned>(__cvta_generic_to_shared(smem)) + warp * SM::kWarpBytes;
  auto tile_start = [&](int i) { return c0 + (i * kWarps + warp) * kTile; };
  auto issue = [&](int i) {  // tile i of this warp into stage i % kStages
    const int32_t t0 = tile_start(i);
    const unsigned st = wbase + (i % kStages) * SM::kStageBytes;
#pragma unroll
    for (int k = 0; k < kTile * CPR / 32; ++k) {
      const int idx = lane + 32 * k, r = idx / CPR, ch = idx % CPR;
      const bool ok = t0 + r < c1;
      const int64_t off = static_cast<int64_t>(ok ? t0 + r : c0) * stride + ch * 8;
      const unsigned so = tile_offset<HD>(r, ch);
      cp_async16_zfill(st + so, kb + off, ok);
      cp_async16_zfill(st + SM::kTileBytes + so, vb + off, ok);
    }
  };
  const int span = c1 - c0 - warp * kTile;  // positions from this warp's first tile on
  const int ntiles = span > 0 ? (span + kWarps * kTile - 1) / (kWarps * kTile) : 0;

  float m[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.0f, 0.0f};  // rows g, g + 8
  float o[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < ntiles) issue(i);
    cp_async_commit();
  }
  for (int i = 0; i < ntiles; ++i) {
    if (i + kStages - 1 < ntiles) issue(i + kStages - 1);
    cp_async_commit();  // (empty at the end: the wait below counts kStages - 1 groups after it)
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const unsigned kst = wbase + (i % kStages) * SM::kStageBytes, vst = kst + SM::kTileBytes;
    const int32_t t0 = tile_start(i);

    // S = Q K^T: n-tile e holds positions t0 + 8e + 2c + {0, 1} of rows g, g + 8; hi and lo
    // products in separate accumulators (two shorter mma chains).
    float sh[2][4] = {}, sl[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      const uint4 qh = s_q[2 * (ks * 32 + lane)], ql = s_q[2 * (ks * 32 + lane) + 1];
      const uint32_t ah[4] = {qh.x, qh.y, qh.z, qh.w}, al[4] = {ql.x, ql.y, ql.z, ql.w};
      // matrices: positions 0-7 / 8-15 (n-tiles) x dims 16 ks + 0-7 / 8-15 (b0 / b1)
      const int mi = lane >> 3, r = (mi >> 1) * 8 + (lane & 7), ch = 2 * ks + (mi & 1);
      uint32_t b[4];
      ldmatrix_x4<false>(b, kst + tile_offset<HD>(r, ch));
      mma_bf16(sh[0], ah, b[0], b[1]);
      mma_bf16(sh[1], ah, b[2], b[3]);
      mma_bf16(sl[0], al, b[0], b[1]);
      mma_bf16(sl[1], al, b[2], b[3]);
    }

    // Online softmax: element (e, x) is row g + 8 (x >> 1), position t0 + 8e + 2c + (x & 1).
    float s[2][4], mx[2] = {-FLT_MAX, -FLT_MAX};
    bool ok[2][4];
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int rr = x >> 1;
        ok[e][x] = t0 + 8 * e + 2 * c + (x & 1) < lim[rr];
        s[e][x] = ok[e][x] ? (sh[e][x] + sl[e][x]) * p.scale : -FLT_MAX;
        mx[rr] = fmaxf(mx[rr], s[e][x]);
      }
    float corr[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(0xffffffffu, mx[rr], 1));
      mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(0xffffffffu, mx[rr], 2));
      const float mn = fmaxf(m[rr], mx[rr]);
      corr[rr] = __expf(m[rr] - mn);  // 1 while nothing is seen; 0 from -FLT_MAX
      m[rr] = mn;
    }
    float pr[2][4];
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int x = 0; x < 4; ++x) pr[e][x] = ok[e][x] ? __expf(s[e][x] - m[x >> 1]) : 0.0f;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr)
      l[rr] = l[rr] * corr[rr] + (pr[0][2 * rr] + pr[0][2 * rr + 1] + pr[1][2 * rr] +
                                  pr[1][2 * rr + 1]);
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f))
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        o[nt][0] *= corr[0], o[nt][1] *= corr[0];
        o[nt][2] *= corr[1], o[nt][3] *= corr[1];
      }

    // O += P V: P's A fragment is the scores' layout (k = the tile's position).
    const Split2 p0 = split2(pr[0][0], pr[0][1]), p1 = split2(pr[0][2], pr[0][3]);
    const Split2 p2 = split2(pr[1][0], pr[1][1]), p3 = split2(pr[1][2], pr[1][3]);
    const uint32_t ph[4] = {p0.hi, p1.hi, p2.hi, p3.hi}, pl[4] = {p0.lo, p1.lo, p2.lo, p3.lo};
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {
      // matrices: positions 0-7 / 8-15 (b0 / b1) x dims of n-tiles nt / nt + 1
      const int mi = lane >> 3, r = (mi & 1) * 8 + (lane & 7), ch = nt + (mi >> 1);
      uint32_t b[4];
      ldmatrix_x4<true>(b, vst + tile_offset<HD>(r, ch));
      mma_bf16(o[nt], ph, b[0], b[1]);
      mma_bf16(o[nt], pl, b[0], b[1]);
      mma_bf16(o[nt + 1], ph, b[2], b[3]);
      mma_bf16(o[nt + 1], pl, b[2], b[3]);
    }
    __syncwarp();  // every lane is done with the stage before the next issue refills it
  }
  cp_async_wait<0>();

  // Merge the warps: O rows, max and sum per (warp, query) through the stages' memory.
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
  }
  __syncthreads();  // every warp is done with its stages
  float* const red = reinterpret_cast<float*>(smem);
  constexpr int RS = SM::kMergeStride;
  float* const wr = red + warp * kRows * RS;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    *reinterpret_cast<float2*>(wr + g * RS + nt * 8 + 2 * c) = make_float2(o[nt][0], o[nt][1]);
    *reinterpret_cast<float2*>(wr + (g + 8) * RS + nt * 8 + 2 * c) =
        make_float2(o[nt][2], o[nt][3]);
  }
  if (c == 0) {
    wr[g * RS + HD] = m[0], wr[g * RS + HD + 1] = l[0];
    wr[(g + 8) * RS + HD] = m[1], wr[(g + 8) * RS + HD + 1] = l[1];
  }
  __syncthreads();
  for (int i = tid; i < gb * HD; i += blockDim.x) {
    const int r = i / HD, d = i % HD;
    float M = -FLT_MAX;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, red[(w * kRows + r) * RS + HD]);
    float L = 0.0f, O = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float* const x = red + (w * kRows + r) * RS;
      const float f = expf(x[HD] - M);  // 0 for a warp that saw nothing of this query
      L += x[HD + 1] * f;
      O += x[d] * f;
    }
    store_query(p, row_of(r), head_of(r), d, s_seen[r] != 0, split, M, L, O);
  }
}

/// RSSM_ATTENTION_PLAN (A/B runs only), "key=value" pairs separated by commas: mma=0 takes the
/// CUDA-core kernel, warps=2|4 the warps per block of the tensor-core one (default: 2 at head_dim
/// 256, where 4 warps' stages leave room for one block per SM, else 4), splits=N (1..64) its
/// chunks per row (default: attention_splits' rule). Anything else (another key, a value that is
/// not a whole number in range, a pair without '=') is a ConfigError naming it. Read at every
/// call, so that tests can set it in-process.
struct PlanEnv {
  int mma = 1, warps = 0, splits = 0;
};
PlanEnv plan_env() {
  PlanEnv e;
  const char* env = std::getenv("RSSM_ATTENTION_PLAN");
  if (!env || !*env) return e;
  const std::string all(env);
  size_t at = 0;
  while (at <= all.size()) {
    const size_t end = std::min(all.find(',', at), all.size());
    const std::string kv = all.substr(at, end - at);
    const size_t eq = kv.find('=');
    const std::string k = kv.substr(0, eq == std::string::npos ? kv.size() : eq);
    const std::string v = eq == std::string::npos ? "" : kv.substr(eq + 1);
    char* stop = nullptr;
    const long n = v.empty() ? -1 : std::strtol(v.c_str(), &stop, 10);
    const bool whole = !v.empty() && stop && *stop == '\0';
    const bool ok = whole && (k == "mma"      ? n == 0 || n == 1
                              : k == "warps"  ? n == 2 || n == 4
                              : k == "splits" ? n >= 1 && n <= 64
                                              : false);
    if (!ok)
      throw ConfigError("RSSM_ATTENTION_PLAN: '" + kv +
                        "' (expected mma=0|1, warps=2|4, splits=1..64, comma-separated)");
    (k == "mma" ? e.mma : k == "warps" ? e.warps : e.splits) = static_cast<int>(n);
    at = end + 1;
  }
  return e;
}

int warps_for(int hd) {
  const int w = plan_env().warps;
  return w ? w : hd >= 256 ? 2 : 4;
}

/// Blocks per (KV head, row group): the group's queries in blocks of kRows (the grid's x / nkv).
int query_blocks(const Attention& p) {
  return (p.tokens_per_row * (p.nh / p.nkv) + kRows - 1) / kRows;
}

template <int HD, int W>
void launch(const Attention& p, int64_t B, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(p.nkv * query_blocks(p)),
                  static_cast<unsigned>(B / p.tokens_per_row), static_cast<unsigned>(p.splits));
  ::replayssm::cuda::launch_with_smem(attention_mma_kernel<HD, W>, grid, W * 32,
                                      Smem<HD, W>::kTotal, s, p,
                                      "engine attention_decode (tensor cores)");
}

/// Shared memory of the head_dim-HD kernel with w warps per block.
template <int HD>
int smem_bytes(int w) {
  return w == 2 ? Smem<HD, 2>::kTotal : Smem<HD, 4>::kTotal;
}

template <int HD>
void launch_hd(const Attention& p, int64_t B, cudaStream_t s) {
  if (warps_for(HD) == 2)
    launch<HD, 2>(p, B, s);
  else
    launch<HD, 4>(p, B, s);
}

}  // namespace

bool attention_mma_fits(const Attention& p) {
  return plan_env().mma == 1 && (p.hd == 64 || p.hd == 128 || p.hd == 256);
}

int64_t attention_mma_blocks(const Attention& p, int64_t B) {
  return int64_t{p.nkv} * query_blocks(p) * (B / p.tokens_per_row);
}

int attention_mma_blocks_per_sm(int hd) {
  // 228 KB of shared memory per SM on the H100/H200 (227 KB usable by a block, 1 KB reserved per
  // block) over the block's layout; the build targets sm_90a.
  const int w = warps_for(hd);
  const int bytes =
      hd == 64 ? smem_bytes<64>(w) : hd == 128 ? smem_bytes<128>(w) : smem_bytes<256>(w);
  return std::max(1, 232448 / (bytes + 1024));
}

int attention_mma_splits_override() { return plan_env().splits; }

void attention_mma_decode(const Attention& p, int64_t B, cudaStream_t s) {
  switch (p.hd) {
    case 64: launch_hd<64>(p, B, s); break;
    case 128: launch_hd<128>(p, B, s); break;
    default: launch_hd<256>(p, B, s); break;
  }
}

}  // namespace replayssm::engine::cuda
