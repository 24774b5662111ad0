// Where a block's lifetime goes, phase by phase: a measurement build only (CMake option
// RSSM_BLOCK_TIMELINE, which defines the macro for the kernels that use it; off by default, and
// then every mark compiles to nothing). Thread 0 of each block reads clock64() at the kernel's
// marks (where a mark follows a block-wide barrier it is the block's phase boundary; elsewhere,
// e.g. the last, it is thread 0's own time) and at its end adds the phase durations in SM cycles
// to per-process totals, split by a row class. At process exit the totals are printed to stderr
// as mean cycles per block and phase, every instantiation and launch of the kernel in one set
// (run one configuration per process); blocks that leave early (pad rows) are not counted. The
// marks live in registers of every thread (a few more registers, spills in the largest
// instantiations): the numbers are a breakdown, not a timing (the bench's medians stay that).
#pragma once
#include <cstdint>

#ifdef RSSM_BLOCK_TIMELINE
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace replayssm::cuda::timeline {

constexpr int kMarks = 10;    // mark 0 = block start; durations are between consecutive marks
constexpr int kClasses = 2;   // the kernel's row classes

struct Totals {
  unsigned long long cycles[kClasses][kMarks];
  unsigned long long blocks[kClasses];
};
__device__ Totals g_totals;

/// A block's marks, held by thread 0 (constant indices, so they stay in registers).
struct Marks {
  long long t[kMarks] = {};
  __device__ void mark(int i) {
    if (threadIdx.x == 0) t[i] = clock64();
  }
  /// Marks `last` (the block's end) and adds the durations of marks 1..last to class `cls`.
  __device__ void finish(int last, int cls) {
    mark(last);
    if (threadIdx.x != 0) return;
#pragma unroll
    for (int i = 1; i < kMarks; ++i)
      if (i <= last)
        atomicAdd(&g_totals.cycles[cls][i], static_cast<unsigned long long>(t[i] - t[i - 1]));
    atomicAdd(&g_totals.blocks[cls], 1ull);
  }
};

/// Registers (once) the exit report of kernel `name` whose marks are named by `labels`
/// (kMarks - 1 entries, the phase that ends at each mark).
inline void report_at_exit(const char* name, const char* const* labels) {
  static const char* s_name = nullptr;
  static const char* const* s_labels = nullptr;
  if (s_name) return;
  s_name = name, s_labels = labels;
  std::atexit([] {
    Totals h{};
    if (cudaMemcpyFromSymbol(&h, g_totals, sizeof h) != cudaSuccess) return;
    for (int c = 0; c < kClasses; ++c) {
      if (!h.blocks[c]) continue;
      std::fprintf(stderr, "timeline %s class %d: %llu blocks, mean cycles:", s_name, c,
                   h.blocks[c]);
      unsigned long long tot = 0;
      for (int i = 1; i < kMarks; ++i) tot += h.cycles[c][i];
      for (int i = 1; i < kMarks; ++i)
        if (h.cycles[c][i])
          std::fprintf(stderr, " %s %.0f (%.1f%%)", s_labels[i - 1],
                       static_cast<double>(h.cycles[c][i]) / h.blocks[c],
                       100.0 * h.cycles[c][i] / tot);
      std::fprintf(stderr, " total %.0f\n", static_cast<double>(tot) / h.blocks[c]);
    }
  });
}

}  // namespace replayssm::cuda::timeline
#define RSSM_TL_DECL                             \
  ::replayssm::cuda::timeline::Marks rssm_tl_; \
  rssm_tl_.mark(0)
#define RSSM_TL_MARK(i) rssm_tl_.mark(i)
#define RSSM_TL_FINISH(last, cls) rssm_tl_.finish(last, cls)
#else
#define RSSM_TL_DECL static_cast<void>(0)
#define RSSM_TL_MARK(i) static_cast<void>(0)
#define RSSM_TL_FINISH(last, cls) static_cast<void>(0)
#endif
