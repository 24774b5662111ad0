// Warp-level sums shared by the kernels of every family.
#pragma once
#include <cuda_runtime.h>

namespace replayssm::cuda {

/// Inclusive prefix sum over the 32 lanes of a warp, additions in a fixed order (deterministic).
/// Every lane of the warp must call it.
__device__ __forceinline__ float warp_prefix_sum(float v, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float t = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v = __fadd_rn(v, t);
  }
  return v;
}

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

/// Sums v[i] over an aligned group of LPR lanes for all N values at once (N <= LPR, both powers
/// of two): a transposed butterfly, each step halving the values a lane holds and swapping the
/// other half with its partner, N - 1 + log2(LPR / N) shuffles instead of N log2(LPR). Returns
/// the full sum of value lr >> log2(LPR / N) (lr = the lane's position in its group); every lane
/// of that value's sub-group holds the same bits. Every lane of the warp must call it.
template <int N, int LPR>
__device__ __forceinline__ float transposed_sum(float (&v)[N], int lr) {
  static_assert(N <= LPR, "at most one value per lane");
#pragma unroll
  for (int n = N, off = LPR / 2; n > 1; n >>= 1, off >>= 1) {
    const bool upper = (lr & off) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = upper ? v[i] : v[i + n / 2];
      const float keep = upper ? v[i + n / 2] : v[i];
      v[i] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, off));
    }
  }
  float r = v[0];
#pragma unroll
  for (int off = LPR / (2 * N); off > 0; off >>= 1)
    r = __fadd_rn(r, __shfl_xor_sync(0xffffffffu, r, off));
  return r;
}

}  // namespace replayssm::cuda
