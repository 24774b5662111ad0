// RMSNorm and gated RMSNorm kernels (kernels.h): one block per normalised row or group, fp32
// arithmetic, bf16 output for the next GEMM.
#include "cuda/kernels.h"
#include "cuda/launch_check.h"
#include "cuda/reduce.cuh"

namespace replayssm::engine::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                int64_t n, float eps, bool one_plus, bf16* __restrict__ y) {
  __shared__ float red[32];
  const float* xr = x + blockIdx.x * n;
  bf16* yr = y + blockIdx.x * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss, red);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = __float2bfloat16_rn(xr[i] * r * (one_plus ? 1.0f + w[i] : w[i]));
}

/// grid (groups, B).
__global__ void gated_rms_norm_kernel(GatedNorm p) {
  __shared__ float red[32];
  const int64_t b = blockIdx.y, g = blockIdx.x, base = g * p.group;
  const float* y = p.y + b * p.ldy + base;
  const float* z = p.z + b * p.ldz + base;
  const float* w = p.w + (p.gate_before ? base : 0);
  bf16* out = p.out + b * p.groups * p.group + base;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < p.group; i += blockDim.x) {
    const float t = p.gate_before ? y[i] * silu(z[i]) : y[i];
    ss += t * t;
  }
  ss = block_sum(ss, red);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(p.group) + p.eps);
  for (int64_t i = threadIdx.x; i < p.group; i += blockDim.x) {
    const float v = p.gate_before ? y[i] * silu(z[i]) * r * w[i] : y[i] * r * w[i] * silu(z[i]);
    out[i] = __float2bfloat16_rn(v);
  }
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t B, int64_t n, float eps, bool one_plus,
              bf16* y, cudaStream_t s) {
  if (B == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(B), kThreads, 0, s>>>(x, w, n, eps, one_plus, y);
  check_launch("engine rms_norm");
}

void gated_rms_norm(const GatedNorm& p, int64_t B, cudaStream_t s) {
  if (B == 0) return;
  const int threads = p.group >= 256 ? kThreads : p.group >= 128 ? 128 : 64;
  gated_rms_norm_kernel<<<dim3(static_cast<unsigned>(p.groups), static_cast<unsigned>(B)),
                          threads, 0, s>>>(p);
  check_launch("engine gated_rms_norm");
}

}  // namespace replayssm::engine::cuda
