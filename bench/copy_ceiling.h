// The copy ceiling measured in the same run (DESIGN.md §4): a large device-to-device copy through a
// plain SM copy kernel and through cudaMemcpyAsync, eager, timed with events, bytes read + written.
// The larger of the two is the "copy bandwidth" every % copy figure is relative to. (A memcpy
// captured in a graph drops to ~2.7 TB/s on the H200 from 512 MiB up, anchors-h200.md: never a
// ceiling, so neither is captured.)
#pragma once
#include <cstdint>

#include "timing.h"

namespace replayssm::bench {

struct CopyCeiling {
  int64_t bytes_per_copy = 0;  ///< size of the source (the same is written)
  double sm_kernel_gbps = 0;   ///< plain SM copy kernel, median
  double memcpy_gbps = 0;      ///< cudaMemcpyAsync device to device, median
  double best_gbps() const { return sm_kernel_gbps > memcpy_gbps ? sm_kernel_gbps : memcpy_gbps; }
};

/// Copies `bytes` (a multiple of 64) from one buffer to another: warm-up copies, then the median of
/// `timed` copies of each method. GB/s = 2 * bytes / time (1 GB = 1e9 bytes).
CopyCeiling measure_copy_ceiling(int64_t bytes, int warm, int timed);

}  // namespace replayssm::bench
