// Decode attention kernels (kernels.h Attention). attention_prep: one block per (head, row) for the
// nh query heads and then the nkv key/value heads: q/k norm (1 + w), NeoX RoPE on the first
// rotary_dim dims, k and v stored in the bf16 cache at the row's position. attention_decode: one
// block per (query head, row), each warp an online softmax over every 4th position, lanes split
// head_dim, the warps' partial results merged in shared memory.
#include <cfloat>

#include "cuda/kernels.h"
#include "cuda/launch_check.h"
#include "cuda/reduce.cuh"

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
  const int32_t pos = slot >= 0 && slot < p.num_slots ? p.positions[slot] : 0;
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
  const int32_t pos = p.positions[slot];
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

void attention_decode(const Attention& p, int64_t B, cudaStream_t s) {
  if (B == 0) return;
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
