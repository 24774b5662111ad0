// Block-wide float sum for the engine's row kernels (blockDim.x a multiple of 32, <= 1024).
#pragma once
#include <cuda_runtime.h>

namespace replayssm::engine::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// The sum of v over the block, returned to every thread. `shared` holds >= 32 floats; the
/// function synchronises, so it may be called repeatedly with the same buffer.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // the previous call's readers are done with `shared`
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float t = lane < warps ? shared[lane] : 0.0f;
  return warp_sum(t);
}

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }
__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

}  // namespace replayssm::engine::cuda
