// Declarations of the GDN/KDA kernel launchers (defined in launch.cuh, instantiated per state
// dtype in launch_*.cu) and the shared-memory carve-up of the replay kernel: the host dispatch
// includes only this.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/gdn/params.h"

namespace replayssm::cuda::gdn {

struct LaunchShape {
  dim3 grid;
  int threads = 0;
  size_t smem = 0;  ///< dynamic shared memory bytes
  int K = 0;        ///< head_k_dim (compile-time in the kernels)
  bool kda = false;
};

/// Key dimensions the kernels are compiled for.
inline bool supported_head_k_dim(int64_t K) { return K == 64 || K == 128; }

/// Float offsets of the replay kernel's shared memory (every region 16-byte aligned): the
/// checkpoint tile [rows][K] (state dtype), sK [R][K], sG [R + 1][gw], sU [R][rows], sCH [R],
/// sDH [R]. gw = K for KDA, 1 for GDN.
struct ReplaySmem {
  int64_t k, g, u, ch, dh, total;
  __host__ __device__ static constexpr int64_t up4(int64_t n) { return (n + 3) / 4 * 4; }
  __host__ __device__ ReplaySmem(int64_t R, int64_t K, int64_t gw, int64_t rows,
                                 int64_t state_bytes) {
    k = up4(rows * K * state_bytes / 4);
    g = k + R * K;
    u = g + up4((R + 1) * gw);
    ch = u + up4(R * rows);
    dh = ch + up4(R);
    total = dh + up4(R);
  }
};

/// Bytes of the conventional kernel's tile.
inline size_t conventional_smem_bytes(int64_t rows, int64_t K, int64_t state_bytes) {
  return static_cast<size_t>(rows * K * state_bytes);
}

template <class TIn, class TState>
void launch_conventional(const StepParams& p, const LaunchShape& ls, cudaStream_t stream);
template <class TIn, class TState>
void launch_replay(const StepParams& p, const LaunchShape& ls, cudaStream_t stream);

}  // namespace replayssm::cuda::gdn
