// Launch helpers shared by the codec kernels: a block-wide max and the grid size of a
// grid-stride loop.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace replayssm::cuda::codecs {

constexpr int kCodecThreads = 256;  ///< threads per block of every codec kernel
constexpr int64_t kMaxGrid = 65535 * 16;

/// Floats of shared memory a block_max call needs.
constexpr int kBlockMaxSmem = 33;

/// Max of v >= 0 over the block (blockDim.x threads, whole warps, all calling); every thread gets
/// it. Max is exact, so the result does not depend on the reduction order. `smem` holds
/// kBlockMaxSmem floats; it may be reused once every thread has passed the next call's first
/// barrier (callers synchronise, or alternate two buffers between consecutive calls).
__device__ __forceinline__ float block_max(float v, float* smem) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? smem[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    if (lane == 0) smem[32] = v;
  }
  __syncthreads();
  return smem[32];
}

/// Blocks for `work` items of a grid-stride loop (at least 1, at most kMaxGrid).
inline int grid_for(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<int>(blocks < 1 ? 1 : blocks > kMaxGrid ? kMaxGrid : blocks);
}

}  // namespace replayssm::cuda::codecs
