// Host-side launch of the kernel templates: picks the instantiation for (K, gate kind) and
// enqueues it. Included by the per-dtype .cu files that instantiate the launchers, so that the
// kernels of different dtypes compile in parallel.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "cuda/common/check.cuh"
#include "cuda/common/launch.cuh"
#include "cuda/gdn/conventional.cuh"
#include "cuda/gdn/flush.cuh"
#include "cuda/gdn/flush_pipe.cuh"
#include "cuda/gdn/launch.h"
#include "cuda/gdn/replay.cuh"
#include "cuda/gdn/replay_group.cuh"
#include "replayssm/errors.h"

namespace replayssm::cuda::gdn {

/// Calls fn(K tag, KDA tag) with the compile-time head_k_dim and gate kind of the launch.
template <class Fn>
void with_kernel_shape(int K, bool kda, const char* op, Fn&& fn) {
  auto by_gate = [&](auto k_tag) {
    if (kda) return fn(k_tag, std::true_type{});
    fn(k_tag, std::false_type{});
  };
  if (K == 64) return by_gate(std::integral_constant<int, 64>{});
  if (K == 128) return by_gate(std::integral_constant<int, 128>{});
  throw UnsupportedError(std::string(op) + ": head_k_dim " + std::to_string(K) +
                         " is not compiled, expected 64 or 128");
}

template <class Kernel>
void enqueue(Kernel kernel, const StepParams& p, const LaunchShape& ls, cudaStream_t stream,
             const char* op) {
  launch_with_smem(kernel, ls.grid, ls.threads, ls.smem, stream, p, op, ls.overlap);
}

template <class TIn, class TState>
void launch_conventional(const StepParams& p, const LaunchShape& ls, cudaStream_t stream) {
  const char* op = "gdn.conventional_step (cuda)";
  with_kernel_shape(ls.K, ls.kda, op, [&](auto k, auto kda) {
    enqueue(conventional_kernel<TIn, TState, decltype(k)::value, decltype(kda)::value>, p, ls,
            stream, op);
  });
}

template <class TIn, class TState>
void launch_replay(const StepParams& p, const LaunchShape& ls, cudaStream_t stream) {
  const char* op = "gdn.replay_step (cuda)";
  with_kernel_shape(ls.K, ls.kda, op, [&](auto k, auto kda) {
    constexpr int K = decltype(k)::value;
    constexpr bool KDA = decltype(kda)::value;
    // A launch in which no row folds runs the instantiation without the fold (group_folds); a
    // quantised read copy only that one (a split mode's ordinary launch).
    auto group = [&](auto rpt) {
      constexpr int RPT = decltype(rpt)::value;
      if constexpr (!kQuantState<TState>)
        if (group_folds(p))
          return enqueue(replay_group_kernel<TIn, TState, K, KDA, RPT, true>, p, ls, stream, op);
      enqueue(replay_group_kernel<TIn, TState, K, KDA, RPT, false>, p, ls, stream, op);
    };
    if constexpr (!kQuantState<TState>) {
      if (ls.flush) {
        // A persistent grid: at most the blocks resident at once.
        auto persistent = [&](auto kernel) {
          LaunchShape fs = ls;
          fs.grid.x = std::min<unsigned>(fs.grid.x, resident_blocks(kernel, fs.threads, fs.smem));
          enqueue(kernel, p, fs, stream, op);
        };
        // Split modes whose ordinary rows read a copy recompute u in the flush (EXACT; fp32
        // checkpoints, and fp16sr/nvfp4's float16 one).
        if constexpr (std::is_same_v<TState, float> || std::is_same_v<TState, f16>)
          if (p.exact_u)
            return persistent(flush_kernel<TIn, TState, K, KDA, kFlushRowsPerThread, true>);
        if constexpr (!KDA)
          if (p.flush_pipe)
            return persistent(flush_pipe_kernel<TIn, TState, K, kFlushRowsPerThread>);
        return persistent(flush_kernel<TIn, TState, K, KDA, kFlushRowsPerThread, false>);
      }
      if (!p.group_kernel) return enqueue(replay_kernel<TIn, TState, K, KDA>, p, ls, stream, op);
    }
    if (ls.rpt == 4) return group(std::integral_constant<int, 4>{});
    group(std::integral_constant<int, 8>{});
  });
}

}  // namespace replayssm::cuda::gdn
