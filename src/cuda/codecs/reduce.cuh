// Launch helpers shared by the codec kernels: a block-wide max and the grid size of a
// grid-stride loop.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace replayssm::cuda::codecs {

constexpr int kCodecThreads = 256;  ///< threads per block of every codec kernel
constexpr int64_t kMaxGrid = 65535 * 16;

/// Max of v >= 0 over the block (kCodecThreads threads, all calling); every thread gets it. Max is
/// exact, so the result does not depend on the reduction order. `smem` holds kCodecThreads / 32
/// floats; the caller synchronises before reusing it.
__device__ __forceinline__ float block_max(float v, float* smem) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kCodecThreads / 32 ? smem[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    if (lane == 0) smem[0] = v;
  }
  __syncthreads();
  return smem[0];
}

/// Blocks for `work` items of a grid-stride loop (at least 1, at most kMaxGrid).
inline int grid_for(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<int>(blocks < 1 ? 1 : blocks > kMaxGrid ? kMaxGrid : blocks);
}

}  // namespace replayssm::cuda::codecs
