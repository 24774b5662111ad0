// Declarations of the kernel launchers (defined in launch.cuh, instantiated per dtype in
// launch_*.cu): the host dispatch includes only this.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/mamba2/params.h"

namespace replayssm::cuda::mamba2 {

struct LaunchShape {
  dim3 grid;
  int threads = 0;
  size_t smem = 0;  ///< dynamic shared memory bytes (replay)
  int N = 0;        ///< d_state (compile-time in the kernels)
  int rpt = 0;      ///< rows per thread (compile-time in the kernels)
};

/// d_state values and rows-per-thread values the kernels are compiled for. The replay kernel keeps
/// 4 rows per thread: with its ring staging it needs ~80 registers per thread already, and 8 rows
/// would spill.
inline bool supported_d_state(int64_t N) { return N == 64 || N == 128; }
constexpr int kReplayRowsPerThread = 4;
inline bool conventional_rows_per_thread(int64_t rpt) { return rpt == 4 || rpt == 8; }

/// Floats (4-byte words) of one checkpoint tile of `rows` rows (a multiple of 4: 16-byte aligned).
constexpr int64_t checkpoint_tile_floats(int64_t rows, int64_t N, int64_t state_bytes) {
  return (rows * N * state_bytes / 4 + 3) / 4 * 4;
}

/// Shared-memory floats of the replay kernel: checkpoint tiles (two when heads_per_block > 1),
/// then sB [R][N], sx [R][rows], sdt [R], scoef [R + 1], sbc [R + 1], sdecay [1] (the carve-up at
/// the top of replay_kernel).
inline int64_t replay_smem_floats(int64_t R, int64_t N, int64_t rows_per_block, int64_t state_bytes,
                                  int64_t heads_per_block) {
  return checkpoint_tile_floats(rows_per_block, N, state_bytes) * (heads_per_block > 1 ? 2 : 1) +
         R * N + R * rows_per_block + R + 2 * (R + 1) + 1;
}

template <class TIn, class TState>
void launch_conventional(const StepParams& p, const LaunchShape& ls, cudaStream_t stream);
template <class TIn, class TState, class TRing>
void launch_replay(const StepParams& p, const LaunchShape& ls, cudaStream_t stream);

}  // namespace replayssm::cuda::mamba2
