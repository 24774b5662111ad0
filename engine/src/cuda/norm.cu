// RMSNorm and gated RMSNorm kernels (kernels.h): fp32 arithmetic, bf16 output for the next GEMM.
// RMSNorm: one block per row. Gated RMSNorm: one warp per (row, group), its sum by shuffles (a
// group is one head's 64-128 values or a Mamba-2 group's ~1K: a block per group left most of
// its threads idle behind two block barriers). Both move 4 floats per load where the widths and
// pointers allow (V = 4), else one.
#include <cstdint>

#include "cuda/bf16_store.cuh"
#include "cuda/kernels.h"
#include "cuda/launch_check.h"
#include "cuda/reduce.cuh"

namespace replayssm::engine::cuda {
namespace {

constexpr int kThreads = 256;

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

/// V floats at p (V = 4: one 16-byte load).
template <int V>
__device__ __forceinline__ void load_v(const float* p, float* v) {
  if constexpr (V == 4) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  } else {
    v[0] = p[0];
  }
}
/// V values to bf16 at p (V = 4: one 8-byte store).
template <int V>
__device__ __forceinline__ void store_v(bf16* p, const float* v) {
  if constexpr (V == 4) {
    store4_bf16(p, v);
  } else {
    p[0] = __float2bfloat16_rn(v[0]);
  }
}

template <int V>
__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                int64_t n, float eps, bool one_plus, bf16* __restrict__ y) {
  __shared__ float red[32];
  const float* xr = x + blockIdx.x * n;
  bf16* yr = y + blockIdx.x * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x * V; i < n; i += blockDim.x * V) {
    float v[V];
    load_v<V>(xr + i, v);
#pragma unroll
    for (int e = 0; e < V; ++e) ss += v[e] * v[e];
  }
  ss = block_sum(ss, red);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x * V; i < n; i += blockDim.x * V) {
    float v[V], g[V];
    load_v<V>(xr + i, v);
    load_v<V>(w + i, g);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = v[e] * r * (one_plus ? 1.0f + g[e] : g[e]);
    store_v<V>(yr + i, v);
  }
}

/// One warp per (row b, group g): item b * groups + g; kThreads / 32 items per block.
template <int V>
__global__ void gated_rms_norm_kernel(GatedNorm p, int64_t B) {
  const int lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= B * p.groups) return;
  const int64_t b = item / p.groups, base = (item - b * p.groups) * p.group;
  const float* y = p.y + b * p.ldy + base;
  const float* z = p.z + b * p.ldz + base;
  const float* w = p.w + (p.gate_before ? base : 0);
  bf16* out = p.out + b * p.groups * p.group + base;
  float ss = 0.0f;
  for (int64_t i = lane * V; i < p.group; i += 32 * V) {
    float yv[V], zv[V];
    load_v<V>(y + i, yv);
    load_v<V>(z + i, zv);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float t = p.gate_before ? yv[e] * silu(zv[e]) : yv[e];
      ss += t * t;
    }
  }
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(p.group) + p.eps);
  for (int64_t i = lane * V; i < p.group; i += 32 * V) {
    float yv[V], zv[V], wv[V], v[V];
    load_v<V>(y + i, yv);
    load_v<V>(z + i, zv);
    load_v<V>(w + i, wv);
#pragma unroll
    for (int e = 0; e < V; ++e)
      v[e] = p.gate_before ? yv[e] * silu(zv[e]) * r * wv[e] : yv[e] * r * wv[e] * silu(zv[e]);
    store_v<V>(out + i, v);
  }
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t B, int64_t n, float eps, bool one_plus,
              bf16* y, cudaStream_t s) {
  if (B == 0) return;
  if (n % 4 == 0 && aligned(x, 16) && aligned(w, 16) && aligned(y, 8))
    rms_norm_kernel<4><<<static_cast<unsigned>(B), kThreads, 0, s>>>(x, w, n, eps, one_plus, y);
  else
    rms_norm_kernel<1><<<static_cast<unsigned>(B), kThreads, 0, s>>>(x, w, n, eps, one_plus, y);
  check_launch("engine rms_norm");
}

void gated_rms_norm(const GatedNorm& p, int64_t B, cudaStream_t s) {
  if (B == 0) return;
  const int64_t items = B * p.groups, per_block = kThreads / 32;
  const unsigned blocks = static_cast<unsigned>((items + per_block - 1) / per_block);
  if (p.group % 4 == 0 && p.ldy % 4 == 0 && p.ldz % 4 == 0 && aligned(p.y, 16) &&
      aligned(p.z, 16) && aligned(p.w, 16) && aligned(p.out, 8))
    gated_rms_norm_kernel<4><<<blocks, kThreads, 0, s>>>(p, B);
  else
    gated_rms_norm_kernel<1><<<blocks, kThreads, 0, s>>>(p, B);
  check_launch("engine gated_rms_norm");
}

}  // namespace replayssm::engine::cuda
