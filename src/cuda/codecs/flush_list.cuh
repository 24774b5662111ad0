// The flushed encodes' work list (nvfp4.cu, fp8_rows.cu): instead of a block per (batch row,
// head) that exits at once unless the row's slot flushes, a fixed grid of about the blocks
// resident at once whose blocks list the flushing rows and stride over (row, head) items. An
// ordinary step then costs one short pass over the rows per block (the early-exit grid cost
// ~14 µs of every ordinary step at Nano-4B batch 256), and a few flushing rows spread over every
// block (bench/NOTES.md "Session 31").
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "cuda/codecs/codecs_cuda.h"
#include "cuda/common/memory.h"

namespace replayssm::cuda::codecs {

/// Rows a work-list block can list in shared memory (int32 each): larger batches take the
/// callers' per-(row, head) grids.
constexpr int kMaxListRows = 8192;

/// Writes to list[0, n) the batch rows whose slot is in [0, rows.slots) and flushes, in order, and
/// returns n. Every thread of the block (whole warps) calls it; `list` is shared memory of
/// rows.batch int32, `counts` of 32; both are complete (and counts reusable) on return.
__device__ __forceinline__ int32_t list_flush_rows(const FlushedRows& rows, int32_t* list,
                                                   int32_t* counts) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  int32_t n = 0;
  for (int r0 = 0; r0 < rows.batch; r0 += static_cast<int>(blockDim.x)) {
    const int r = r0 + static_cast<int>(threadIdx.x);
    bool f = false;
    if (r < rows.batch) {
      const int32_t slot = rows.slot_ids[r];
      f = slot >= 0 && slot < rows.slots && rows.is_flush[slot] != 0;
    }
    const uint32_t m = __ballot_sync(0xffffffffu, f);
    if (lane == 0) counts[warp] = __popc(m);
    __syncthreads();
    int32_t before = 0, total = 0;
    for (int w = 0; w < warps; ++w) {
      const int32_t c = counts[w];
      before += w < warp ? c : 0;
      total += c;
    }
    if (f) list[n + before + __popc(m & ((1u << lane) - 1u))] = r;
    n += total;
    __syncthreads();  // the list is complete and counts may be rewritten
  }
  return n;
}

/// The work-list grid of `kernel` at `threads` threads: the blocks resident at once (the
/// occupancy query, with the largest list's shared memory, once per kernel and block size), at
/// most `items` (>= 1) and at most `cap` where cap > 0 (tuning runs and tests: a small grid makes
/// every block walk several items).
template <class Kernel>
int list_grid(Kernel kernel, int threads, int64_t items, int cap = 0) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> cache;
  int per_sm = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), threads);
    const auto it = cache.find(key);
    if (it != cache.end()) {
      per_sm = it->second;
    } else {
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads,
                                                        sizeof(int32_t) * kMaxListRows) !=
          cudaSuccess) {
        (void)cudaGetLastError();  // not a launch error: fall back to one block per SM
        per_sm = 1;
      }
      cache[key] = per_sm;
    }
  }
  int64_t grid = std::min(int64_t{std::max(per_sm, 1)} * device_sms(), items);
  if (cap > 0) grid = std::min<int64_t>(grid, cap);
  return static_cast<int>(std::max<int64_t>(1, grid));
}

}  // namespace replayssm::cuda::codecs
