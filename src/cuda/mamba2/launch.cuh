// Host-side launch of the kernel templates: picks the instantiation for (d_state, rows per thread)
// and enqueues it. Included by the per-dtype .cu files that instantiate the launchers, so that the
// kernels of different dtypes compile in parallel.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "cuda/common/check.cuh"
#include "cuda/common/launch.cuh"
#include "cuda/mamba2/conventional.cuh"
#include "cuda/mamba2/flush.cuh"
#include "cuda/mamba2/launch.h"
#include "cuda/mamba2/replay.cuh"
#include "cuda/mamba2/replay_group.cuh"
#include "replayssm/errors.h"

namespace replayssm::cuda::mamba2 {

/// Calls fn(N tag, RPT tag) with the compile-time d_state and rows per thread of the launch; Rpts
/// lists the rows-per-thread values the kernel is compiled for.
template <int... Rpts, class Fn>
void with_kernel_shape(int N, int rpt, const char* op, Fn&& fn) {
  auto by_rpt = [&](auto n_tag) {
    const bool found =
        ((rpt == Rpts ? (fn(n_tag, std::integral_constant<int, Rpts>{}), true) : false) || ...);
    if (!found)
      throw UnsupportedError(std::string(op) + ": rows_per_thread " + std::to_string(rpt) +
                             " is not compiled for this kernel");
  };
  if (N == 64) return by_rpt(std::integral_constant<int, 64>{});
  if (N == 128) return by_rpt(std::integral_constant<int, 128>{});
  throw UnsupportedError(std::string(op) + ": d_state " + std::to_string(N) +
                         " is not compiled, expected 64 or 128");
}

template <class TIn, class TState>
void launch_conventional(const StepParams& p, const LaunchShape& ls, cudaStream_t stream) {
  const char* op = "mamba2.conventional_step (cuda)";
  with_kernel_shape<1, 2, 4, 8>(ls.N, ls.rpt, op, [&](auto n, auto rpt) {
    launch_with_smem(conventional_kernel<TIn, TState, decltype(n)::value, decltype(rpt)::value>,
                     ls.grid, ls.threads, ls.smem, stream, p, op);
  });
}

template <class TIn, class TState, class TRing>
void launch_replay(const StepParams& p, const LaunchShape& ls, cudaStream_t stream) {
  const char* op = "mamba2.replay_step (cuda)";
  auto launch = [&](auto n, auto rpt) {
    constexpr int kN = decltype(n)::value, kRpt = decltype(rpt)::value;
    auto kernel = replay_group_kernel<TIn, TState, TRing, kN, kRpt, false>;
    if constexpr (!kQuantState<TState>) {  // quantised read copies: the group kernel only
      if (ls.flush)
        kernel = flush_kernel<TIn, TState, TRing, kN, kRpt>;
      else if (!p.group)
        kernel = replay_kernel<TIn, TState, TRing, kN, kRpt>;
      else if (group_folds(p))  // some row of the launch folds
        kernel = replay_group_kernel<TIn, TState, TRing, kN, kRpt, true>;
    }
    dim3 grid = ls.grid;
    if (ls.flush) grid.x = std::min<unsigned>(grid.x, resident_blocks(kernel, ls.threads, ls.smem));
    launch_with_smem(kernel, grid, ls.threads, ls.smem, stream, p, op, ls.overlap);
  };
  // 8 rows per thread only with 4-byte checkpoints (replay_rows_per_thread).
  if constexpr (sizeof(TState) == 4)
    with_kernel_shape<4, 8>(ls.N, ls.rpt, op, launch);
  else
    with_kernel_shape<4>(ls.N, ls.rpt, op, launch);
}

}  // namespace replayssm::cuda::mamba2
