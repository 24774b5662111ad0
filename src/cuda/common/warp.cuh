// Warp-level sums shared by the kernels of every family.
#pragma once
#include <cuda_runtime.h>

namespace replayssm::cuda {

/// Sum over an aligned group of LPR lanes (a butterfly): every lane of the group ends with the
/// same bits, and the order of the additions is fixed (deterministic). Every lane of the warp must
/// call it (full-warp shuffles).
template <int LPR>
__device__ __forceinline__ float lane_group_sum(float v) {
#pragma unroll
  for (int off = LPR / 2; off > 0; off >>= 1)
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

}  // namespace replayssm::cuda
