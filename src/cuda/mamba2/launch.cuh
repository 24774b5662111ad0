// Host-side launch of the kernel templates: picks the instantiation for (d_state, rows per thread)
// and enqueues it. Included by the per-dtype .cu files that instantiate the launchers, so that the
// kernels of different dtypes compile in parallel.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "cuda/common/check.cuh"
#include "cuda/mamba2/conventional.cuh"
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
  with_kernel_shape<4, 8>(ls.N, ls.rpt, "mamba2.conventional_step (cuda)", [&](auto n, auto rpt) {
    auto kernel = conventional_kernel<TIn, TState, decltype(n)::value, decltype(rpt)::value>;
    if (ls.smem > 48 * 1024)
      check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(ls.smem)),
                 "mamba2.conventional_step (cuda): raising the shared-memory limit");
    kernel<<<ls.grid, ls.threads, ls.smem, stream>>>(p);
  });
  check_launch("mamba2.conventional_step (cuda) launch");
}

template <class TIn, class TState, class TRing>
void launch_replay(const StepParams& p, const LaunchShape& ls, cudaStream_t stream) {
  auto launch = [&](auto n, auto rpt) {
    constexpr int kN = decltype(n)::value, kRpt = decltype(rpt)::value;
    auto kernel = p.group ? replay_group_kernel<TIn, TState, TRing, kN, kRpt>
                          : replay_kernel<TIn, TState, TRing, kN, kRpt>;
    if (ls.smem > 48 * 1024)
      check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(ls.smem)),
                 "mamba2.replay_step (cuda): raising the shared-memory limit");
    kernel<<<ls.grid, ls.threads, ls.smem, stream>>>(p);
  };
  // 8 rows per thread only with 4-byte checkpoints (replay_rows_per_thread).
  if constexpr (sizeof(TState) == 4)
    with_kernel_shape<4, 8>(ls.N, ls.rpt, "mamba2.replay_step (cuda)", launch);
  else
    with_kernel_shape<4>(ls.N, ls.rpt, "mamba2.replay_step (cuda)", launch);
  check_launch("mamba2.replay_step (cuda) launch");
}

}  // namespace replayssm::cuda::mamba2
