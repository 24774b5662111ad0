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

namespace detail {
/// Step STEP of transposed_sum: the lane keeps half of its n = N >> STEP values and adds its
/// partner's copies of them. A template per step, so that every loop has a constant trip count:
/// written as one loop halving n, nvcc left it rolled at N = 16 and put v on the stack (64 bytes
/// of local memory per thread).
template <int N, int LPR, int STEP>
__device__ __forceinline__ void transposed_step(float (&v)[N], int lr) {
  constexpr int n = N >> STEP, off = LPR >> (STEP + 1);
  if constexpr (n > 1) {
    const bool upper = (lr & off) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float lo = v[i], hi = v[i + n / 2];
      v[i] = __fadd_rn(upper ? hi : lo, __shfl_xor_sync(0xffffffffu, upper ? lo : hi, off));
    }
    transposed_step<N, LPR, STEP + 1>(v, lr);
  }
}
}  // namespace detail

/// Sums v[i] over an aligned group of LPR lanes for all N values at once (N <= LPR, both powers
/// of two): a transposed butterfly, each step halving the values a lane holds and swapping the
/// other half with its partner, N - 1 + log2(LPR / N) shuffles instead of N log2(LPR). The
/// additions are lane_group_sum's, offset by offset (LPR / 2 first), so each sum has its bits.
/// Returns the full sum of value lr >> log2(LPR / N) (lr = the lane's position in its group);
/// every lane of that value's sub-group holds the same bits. Every lane of the warp must call it.
template <int N, int LPR>
__device__ __forceinline__ float transposed_sum(float (&v)[N], int lr) {
  static_assert(N <= LPR && (N & (N - 1)) == 0, "a power of two values, at most one per lane");
  detail::transposed_step<N, LPR, 0>(v, lr);
  float r = v[0];
#pragma unroll
  for (int off = LPR / (2 * N); off > 0; off >>= 1)
    r = __fadd_rn(r, __shfl_xor_sync(0xffffffffu, r, off));
  return r;
}

}  // namespace replayssm::cuda
