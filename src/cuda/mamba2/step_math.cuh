// The per-element arithmetic of a Mamba-2 decode step, shared by the conventional kernel and the
// replay kernels. The flush's final update (history folded, then the current token) calls the
// very same functions in the same order as the conventional step, which is what makes an L = 1
// replay step (every step a flush with no history) bit-identical to the conventional step.
// Explicit round-to-nearest intrinsics pin every rounding, so no contraction choice of the
// compiler can differ between the call sites.
#pragma once
#include <cuda_runtime.h>

namespace replayssm::cuda::mamba2 {

/// delta = softplus(dt + dt_bias), the argument itself above 20 (the field's threshold).
__device__ __forceinline__ float delta_of(float dt, float dt_bias, bool softplus) {
  const float v = __fadd_rn(dt, dt_bias);
  if (!softplus) return v;
  return v > 20.0f ? v : log1pf(expf(v));
}

__device__ __forceinline__ float A_of(float A_log) { return -expf(A_log); }

/// a = exp(delta * A), the one-step decay.
__device__ __forceinline__ float decay_of(float delta, float A) {
  return expf(__fmul_rn(delta, A));
}

/// One lane's columns of one state row: s <- a*s + dx*b with dx = delta*x[p]; returns the lane's
/// part of the new row's dot with C.
template <int V>
__device__ __forceinline__ float update_row(float* s, float a, float dx, const float* b,
                                            const float* c) {
  float acc = 0.0f;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    s[v] = __fmaf_rn(a, s[v], __fmul_rn(dx, b[v]));
    acc = __fmaf_rn(s[v], c[v], acc);
  }
  return acc;
}

/// Sum over the LPR lanes of a row (aligned groups of LPR lanes). A butterfly: every lane of the
/// group ends with the same bits, and the order is fixed (deterministic).
template <int LPR>
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int off = LPR / 2; off > 0; off >>= 1)
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ __forceinline__ float silu(float z) { return __fdiv_rn(z, __fadd_rn(1.0f, expf(-z))); }

/// y = S·C + D·x, then y·silu(z) when gated.
__device__ __forceinline__ float output_of(float sum, float D, bool has_D, float x, bool has_z,
                                           float z) {
  const float y = has_D ? __fmaf_rn(D, x, sum) : sum;
  return has_z ? __fmul_rn(y, silu(z)) : y;
}

}  // namespace replayssm::cuda::mamba2
