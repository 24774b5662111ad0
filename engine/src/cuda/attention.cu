// Decode attention kernels (kernels.h Attention). attention_prep: one block per (head, row) for the
// nh query heads and then the nkv key/value heads: q/k norm (1 + w), NeoX RoPE on the first
// rotary_dim dims, k and v stored in the bf16 cache at the row's position. attention_decode:
// head_dim 64, 128, 256 (every supported model) on the tensor cores (attention_mma.cu); other
// head_dim % 32 == 0: flash-decoding with GQA sharing on the CUDA cores — one block per (KV head,
// row, chunk of positions) holds the group's queries; each warp scores 32 positions at once (a
// lane per position, its K row in 16-byte loads, every head of the group), keeps an online
// softmax per head and accumulates P·V with the lanes across head_dim, so each K/V row is read
// once per group; the warps' states merge in shared memory, and across chunks in a combine
// kernel (bench/NOTES.md "End-to-end decode steps"). Other head_dim: one block per (query head,
// row), each warp an online softmax over every 4th position.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>

#include "cuda/attention_mma.h"
#include "cuda/attention_rows.cuh"
#include "cuda/kernels.h"
#include "cuda/launch_check.h"

namespace replayssm::engine::cuda {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kDecodeWarps = 4;

__global__ void attention_prep_kernel(Attention p) {
  __shared__ float red[32];
  __shared__ float vals[kMaxHeadDim];
  const int64_t b = blockIdx.y;
  const int head = blockIdx.x, d = threadIdx.x, hd = p.hd;
  const bool is_q = head < p.nh;
  const int j = is_q ? head : head - p.nh;  // kv head for k/v
  const int32_t slot = p.slots[b];
  if (!is_q && (slot < 0 || slot >= p.num_slots)) return;
  const int64_t qw = static_cast<int64_t>(p.nh) * hd * (p.gate ? 2 : 1);
  const float* row = p.proj + b * p.ld;
  const float* src = is_q ? row + static_cast<int64_t>(head) * hd * (p.gate ? 2 : 1)
                          : row + qw + static_cast<int64_t>(j) * hd;
  float v = d < hd ? src[d] : 0.0f;
  const float* norm_w = is_q ? p.q_norm : p.k_norm;
  if (norm_w) {  // Qwen3NextRMSNorm over head_dim, weight (1 + w), fp32
    const float ss = block_sum(v * v, red);
    const float r = 1.0f / sqrtf(ss / static_cast<float>(hd) + p.eps);
    if (d < hd) v = v * r * (1.0f + norm_w[d]);
  }
  const int32_t pos = slot >= 0 && slot < p.num_slots ? row_position(p, b, slot) : 0;
  if (p.rotary_dim > 0) {  // rotate_half on the first rotary_dim dims
    if (d < hd) vals[d] = v;
    __syncthreads();
    const int half = p.rotary_dim / 2;
    if (d < p.rotary_dim) {
      const int i = d < half ? d : d - half;
      const float angle = static_cast<float>(pos) * p.inv_freq[i];
      float sn, cs;
      sincosf(angle, &sn, &cs);
      const float x1 = vals[i], x2 = vals[i + half];
      v = d < half ? x1 * cs - x2 * sn : x2 * cs + x1 * sn;
    }
  }
  if (d >= hd) return;
  if (is_q) {
    p.q[(b * p.nh + head) * hd + d] = v;
    return;
  }
  const int64_t at = ((static_cast<int64_t>(slot) * p.ctx + pos) * p.nkv + j) * hd + d;
  p.kcache[at] = __float2bfloat16_rn(v);
  p.vcache[at] = __float2bfloat16_rn(row[qw + static_cast<int64_t>(p.nkv + j) * hd + d]);
}

/// E = ceil(hd / 32) elements per lane.
template <int E>
__global__ void attention_decode_kernel(Attention p) {
  __shared__ float part_m[kDecodeWarps], part_l[kDecodeWarps];
  __shared__ float part_acc[kDecodeWarps][E * 32];
  const int64_t b = blockIdx.y;
  const int h = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, hd = p.hd;
  const int32_t slot = p.slots[b];
  bf16* out = p.out + (b * p.nh + h) * hd;
  if (slot < 0 || slot >= p.num_slots) {
    for (int d = threadIdx.x; d < hd; d += blockDim.x) out[d] = __float2bfloat16_rn(0.0f);
    return;
  }
  const int j = h / (p.nh / p.nkv);
  const int32_t pos = row_position(p, b, slot);
  const float* q = p.q + (b * p.nh + h) * hd;
  float qv[E], acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    qv[e] = d < hd ? q[d] : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  const int64_t stride = static_cast<int64_t>(p.nkv) * hd;
  const bf16* kbase = p.kcache + (static_cast<int64_t>(slot) * p.ctx * p.nkv + j) * hd;
  const bf16* vbase = p.vcache + (static_cast<int64_t>(slot) * p.ctx * p.nkv + j) * hd;
  for (int32_t t = warp; t <= pos; t += kDecodeWarps) {
    const bf16* kt = kbase + t * stride;
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      if (d < hd) dot += qv[e] * __bfloat162float(kt[d]);
    }
    const float s = warp_sum(dot) * p.scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), w = expf(s - m_new);
    l = l * corr + w;
    const bf16* vt = vbase + t * stride;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      acc[e] = acc[e] * corr + (d < hd ? w * __bfloat162float(vt[d]) : 0.0f);
    }
    m = m_new;
  }
  if (lane == 0) {
    part_m[warp] = m;
    part_l[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < E; ++e) part_acc[warp][lane + 32 * e] = acc[e];
  __syncthreads();
  float M = -FLT_MAX;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) M = fmaxf(M, part_m[w]);
  float L = 0.0f;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) L += part_l[w] * expf(part_m[w] - M);
  const float* gate = p.proj + b * p.ld + static_cast<int64_t>(h) * 2 * hd + hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) o += part_acc[w][d] * expf(part_m[w] - M);
    o /= L;
    if (p.gate) o *= sigmoid(gate[d]);
    out[d] = __float2bfloat16_rn(o);
  }
}

constexpr int kSplitWarps = 4;
/// Query heads one block serves (GB, a compile-time size: registers hold GB x E accumulators): the
/// group, rounded up to 1, 2, 4, 6 or 8, at most 8 (E <= 4) or 4; a larger group takes several
/// blocks, each reading the KV head again.
int heads_per_block(int hd, int G) {
  const int most = hd / 32 <= 4 ? 8 : 4, want = std::min(G, most);
  return want <= 2 ? want : want <= 4 ? 4 : want <= 6 ? 6 : 8;
}

/// n consecutive bf16 at p as floats (p aligned to n * 2 bytes when n is 2, 4 or 8).
template <int N>
__device__ __forceinline__ void load_bf16(const bf16* p, float* out) {
  if constexpr (N % 8 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(p + i);
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 f = __bfloat1622float2(h[k]);
        out[i + 2 * k] = f.x;
        out[i + 2 * k + 1] = f.y;
      }
    }
  } else if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const uint2 raw = *reinterpret_cast<const uint2*>(p + i);
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
      const float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]);
      out[i] = a.x, out[i + 1] = a.y, out[i + 2] = b.x, out[i + 3] = b.y;
    }
  } else if constexpr (N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p + i));
      out[i] = f.x, out[i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = __bfloat162float(p[i]);
  }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// hd = 32 E, GB = heads_per_block(hd, TT * G) queries per block, TT = tokens_per_row. A block
/// serves queries q0 .. q0 + gb - 1 of one (KV head j, row group): query q is token q / G (row
/// group * TT + q / G) and query head j * G + q % G, and each query sees positions up to its own
/// token's (the tokens of a verify step are consecutive positions of one slot). Grid (nkv x query
/// blocks, B / TT, splits), kSplitWarps warps.
template <int E, int GB>
__global__ void __launch_bounds__(kSplitWarps * 32, 4) attention_split_kernel(Attention p) {
  constexpr int HD = 32 * E;
  __shared__ __align__(16) float q_s[GB][HD];
  __shared__ float red_m[kSplitWarps][GB], red_l[kSplitWarps][GB];
  __shared__ float red_acc[kSplitWarps][GB][HD];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int TT = p.tokens_per_row, G = p.nh / p.nkv, QG = TT * G;
  const int q_blocks = (QG + GB - 1) / GB;
  const int j = blockIdx.x / q_blocks;
  const int q0 = (blockIdx.x % q_blocks) * GB;
  const int gb = min(GB, QG - q0);
  const int64_t rows0 = static_cast<int64_t>(blockIdx.y) * TT;  // the group's first row
  const int split = blockIdx.z;
  const int32_t slot = p.slots[rows0];  // every used token of the group has this slot
  // Row, query head and positions seen (0: a pad row or an unused token) of each query.
  int64_t row[GB];
  int head[GB];
  int32_t seen[GB];
  int32_t n = 0;
#pragma unroll
  for (int g = 0; g < GB; ++g) {
    const int q = q0 + min(g, gb - 1);
    row[g] = rows0 + q / G;
    head[g] = j * G + q % G;
    const int32_t s = p.slots[row[g]];
    seen[g] = g < gb && s >= 0 && s < p.num_slots ? row_position(p, row[g], s) + 1 : 0;
    n = max(n, seen[g]);
  }
  if (slot < 0 || slot >= p.num_slots) {  // pad rows: zeros (the combine kernel's job if split)
    if (p.splits == 1)
      for (int i = threadIdx.x; i < gb * HD; i += blockDim.x)
        p.out[(row[i / HD] * p.nh + head[i / HD]) * HD + i % HD] = __float2bfloat16_rn(0.0f);
    return;
  }
  const int32_t chunk = (n + p.splits - 1) / p.splits;
  const int32_t c0 = split * chunk, c1 = min(n, c0 + chunk);
  for (int i = threadIdx.x; i < GB * HD; i += blockDim.x) {
    const int g = i / HD;
    q_s[g][i % HD] = g < gb ? p.q[(row[g] * p.nh + head[g]) * HD + i % HD] : 0.0f;
  }
  __syncthreads();

  float m[GB], l[GB], acc[GB][E];
#pragma unroll
  for (int g = 0; g < GB; ++g) {
    m[g] = -FLT_MAX;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
  }
  const int64_t stride = static_cast<int64_t>(p.nkv) * HD;
  const bf16* kb = p.kcache + (static_cast<int64_t>(slot) * p.ctx * p.nkv + j) * HD;
  const bf16* vb = p.vcache + (static_cast<int64_t>(slot) * p.ctx * p.nkv + j) * HD + lane * E;
  for (int32_t t0 = c0 + warp * 32; t0 < c1; t0 += kSplitWarps * 32) {
    const int32_t t = t0 + lane;
    const bool valid = t < c1;
    float sc[GB];
#pragma unroll
    for (int g = 0; g < GB; ++g) sc[g] = 0.0f;
    if (valid) {
      const bf16* kr = kb + t * stride;
#pragma unroll 4
      for (int v = 0; v < HD; v += 8) {
        float k8[8];
        load_bf16<8>(kr + v, k8);
#pragma unroll
        for (int g = 0; g < GB; ++g) {
          const float4 qa = *reinterpret_cast<const float4*>(&q_s[g][v]);
          const float4 qb = *reinterpret_cast<const float4*>(&q_s[g][v + 4]);
          sc[g] += qa.x * k8[0] + qa.y * k8[1] + qa.z * k8[2] + qa.w * k8[3] + qb.x * k8[4] +
                   qb.y * k8[5] + qb.z * k8[6] + qb.w * k8[7];
        }
      }
    }
    float pr[GB];
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      const bool seen_g = valid && t < seen[g];  // causal within the verify step's tokens
      const float s = seen_g ? sc[g] * p.scale : -FLT_MAX;
      const float m_new = fmaxf(m[g], warp_max(s));
      const float corr = expf(m[g] - m_new);
      pr[g] = seen_g ? expf(s - m_new) : 0.0f;
      l[g] = l[g] * corr + warp_sum(pr[g]);
      m[g] = m_new;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] *= corr;
    }
    const int cnt = min(32, c1 - t0);
#pragma unroll 8
    for (int i = 0; i < cnt; ++i) {
      float v[E];
      load_bf16<E>(vb + (t0 + i) * stride, v);
#pragma unroll
      for (int g = 0; g < GB; ++g) {
        const float pi = __shfl_sync(0xffffffffu, pr[g], i);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] += pi * v[e];
      }
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < GB; ++g) red_m[warp][g] = m[g], red_l[warp][g] = l[g];
  }
#pragma unroll
  for (int g = 0; g < GB; ++g)
#pragma unroll
    for (int e = 0; e < E; ++e) red_acc[warp][g][lane * E + e] = acc[g][e];
  __syncthreads();
  for (int i = threadIdx.x; i < gb * HD; i += blockDim.x) {
    const int g = i / HD, d = i % HD;
    float M = -FLT_MAX;
#pragma unroll
    for (int w = 0; w < kSplitWarps; ++w) M = fmaxf(M, red_m[w][g]);
    float L = 0.0f, O = 0.0f;
#pragma unroll
    for (int w = 0; w < kSplitWarps; ++w) {
      const float f = expf(red_m[w][g] - M);
      L += red_l[w][g] * f;
      O += red_acc[w][g][d] * f;
    }
    store_query(p, row[g], head[g], d, seen[g] != 0, split, M, L, O);
  }
}

/// Merges the chunks of attention_split_kernel: grid (nh, B), hd threads.
__global__ void attention_combine_kernel(Attention p) {
  const int h = blockIdx.x, d = threadIdx.x;
  const int64_t b = blockIdx.y;
  const int32_t slot = p.slots[b];
  if (slot < 0 || slot >= p.num_slots) {
    p.out[(b * p.nh + h) * p.hd + d] = __float2bfloat16_rn(0.0f);
    return;
  }
  const int64_t base = (b * p.nh + h) * p.splits;
  float M = -FLT_MAX;
  for (int s = 0; s < p.splits; ++s) M = fmaxf(M, p.part_ml[2 * (base + s)]);
  float L = 0.0f, O = 0.0f;
  for (int s = 0; s < p.splits; ++s) {
    const float f = expf(p.part_ml[2 * (base + s)] - M);  // 0 for an empty chunk
    L += p.part_ml[2 * (base + s) + 1] * f;
    O += p.part_acc[(base + s) * p.hd + d] * f;
  }
  write_out(p, b, h, d, O / L);
}

template <int E, int GB>
void launch_split_gb(const Attention& p, int64_t B, cudaStream_t s) {
  const int QG = p.tokens_per_row * (p.nh / p.nkv);
  const dim3 grid(static_cast<unsigned>(p.nkv * ((QG + GB - 1) / GB)),
                  static_cast<unsigned>(B / p.tokens_per_row), static_cast<unsigned>(p.splits));
  attention_split_kernel<E, GB><<<grid, kSplitWarps * 32, 0, s>>>(p);
}

template <int E>
void launch_split(const Attention& p, int64_t B, cudaStream_t s) {
  const int QG = p.tokens_per_row * (p.nh / p.nkv);
  switch (heads_per_block(p.hd, QG)) {
    case 1: launch_split_gb<E, 1>(p, B, s); break;
    case 2: launch_split_gb<E, 2>(p, B, s); break;
    case 4: launch_split_gb<E, 4>(p, B, s); break;
    default:
      if constexpr (E <= 4) {
        if (heads_per_block(p.hd, QG) == 6)
          launch_split_gb<E, 6>(p, B, s);
        else
          launch_split_gb<E, 8>(p, B, s);
      }
  }
}

void launch_combine(const Attention& p, int64_t B, cudaStream_t s) {
  attention_combine_kernel<<<dim3(static_cast<unsigned>(p.nh), static_cast<unsigned>(B)), p.hd, 0,
                             s>>>(p);
  check_launch("engine attention_decode (combine)");
}

template <int E>
void launch_decode(const Attention& p, int64_t B, cudaStream_t s) {
  attention_decode_kernel<E><<<dim3(static_cast<unsigned>(p.nh), static_cast<unsigned>(B)),
                               kDecodeWarps * 32, 0, s>>>(p);
}

}  // namespace

void attention_prep(const Attention& p, int64_t B, cudaStream_t s) {
  if (B == 0) return;
  const int threads = (p.hd + 31) / 32 * 32;
  attention_prep_kernel<<<dim3(static_cast<unsigned>(p.nh + p.nkv), static_cast<unsigned>(B)),
                          threads, 0, s>>>(p);
  check_launch("engine attention_prep");
}

int attention_splits(const Attention& p, int64_t B, int num_sms) {
  if (p.hd % 32 != 0 || B <= 0) return 1;
  int64_t blocks = 0, per_sm = 4;
  if (attention_mma_fits(p)) {
    if (const int forced = attention_mma_splits_override()) return forced;
    // Two waves of the tensor-core kernel (2-4 resident blocks per SM by its shared memory).
    blocks = attention_mma_blocks(p, B);
    per_sm = 2 * attention_mma_blocks_per_sm(p.hd);
  } else {
    const int QG = p.tokens_per_row * (p.nh / p.nkv), GB = heads_per_block(p.hd, QG);
    blocks = int64_t{p.nkv} * ((QG + GB - 1) / GB) * (B / p.tokens_per_row);
  }
  // About per_sm blocks per SM; a chunk keeps at least 64 positions of a full context.
  const int64_t want = (per_sm * int64_t{num_sms} + blocks - 1) / blocks;
  const int64_t most = std::max<int64_t>(1, (p.ctx + 63) / 64);
  return static_cast<int>(std::clamp<int64_t>(want, 1, std::min<int64_t>(most, 64)));
}

int64_t attention_partial_rows(const Attention& p, int64_t max_rows, int num_sms, int max_T) {
  int64_t most = 0;
  for (int TT = 1; TT <= max_T; ++TT) {
    Attention q = p;
    q.tokens_per_row = TT;
    for (int64_t B = TT; B <= max_rows; B += TT) {
      const int splits = attention_splits(q, B, num_sms);
      if (splits > 1) most = std::max(most, B * splits);
    }
  }
  return most;
}

void attention_decode(const Attention& p, int64_t B, cudaStream_t s) {
  if (B == 0) return;
  if (attention_mma_fits(p)) {
    attention_mma_decode(p, B, s);
    if (p.splits > 1) launch_combine(p, B, s);
    return;
  }
  if (p.hd % 32 == 0 && p.hd <= 256) {
    switch (p.hd / 32) {
      case 1: launch_split<1>(p, B, s); break;
      case 2: launch_split<2>(p, B, s); break;
      case 3: launch_split<3>(p, B, s); break;
      case 4: launch_split<4>(p, B, s); break;
      case 5: launch_split<5>(p, B, s); break;
      case 6: launch_split<6>(p, B, s); break;
      case 7: launch_split<7>(p, B, s); break;
      default: launch_split<8>(p, B, s); break;
    }
    check_launch("engine attention_decode (split)");
    if (p.splits > 1) launch_combine(p, B, s);
    return;
  }
  switch ((p.hd + 31) / 32) {
    case 1: launch_decode<1>(p, B, s); break;
    case 2: launch_decode<2>(p, B, s); break;
    case 3: launch_decode<3>(p, B, s); break;
    case 4: launch_decode<4>(p, B, s); break;
    case 5: launch_decode<5>(p, B, s); break;
    case 6: launch_decode<6>(p, B, s); break;
    case 7: launch_decode<7>(p, B, s); break;
    default: launch_decode<8>(p, B, s); break;
  }
  check_launch("engine attention_decode");
}

}  // namespace replayssm::engine::cuda
