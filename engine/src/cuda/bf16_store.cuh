// Four float32 values stored as bfloat16 (round to nearest even) in one 8-byte store, for the
// engine's element-wise kernels that write the next GEMM's bf16 input.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace replayssm::engine::cuda {

/// The bits of (a, b) as a bfloat16 pair, a in the low half.
__device__ __forceinline__ uint32_t bf16x2_bits(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

/// v[0..4) to p[0..4) (p 8-byte aligned).
__device__ __forceinline__ void store4_bf16(__nv_bfloat16* p, const float* v) {
  *reinterpret_cast<uint2*>(p) = make_uint2(bf16x2_bits(v[0], v[1]), bf16x2_bits(v[2], v[3]));
}

}  // namespace replayssm::engine::cuda
