// The work list of a flush launch (mamba2/flush.cuh, gdn/flush.cuh): the rows of the batch that
// flush on this step, in batch order, and the items (flush row, rest) a persistent block takes.
// The grid is fixed (one CUDA graph serves every mix of rows), so instead of a block per (row,
// head) that mostly exits at once, every block lists the flush rows itself (one slot id and one
// is_flush load per row, all in flight) and takes a contiguous, balanced range of the list's
// items: rows that do not flush cost one pass of loads, not a block launch each.
#pragma once
#include <cstdint>

namespace replayssm::cuda {

/// Batch rows listed per pass: the list lives in shared memory ([kFlushScan] ints, plus [32] per
/// warp counts).
constexpr int kFlushScan = 1024;

/// Lists the batch rows of [b0, b1) (b1 - b0 <= kFlushScan) that flush on this step (valid slot,
/// is_flush set), in batch order: list[i] = b and, where list_slots is not null, list_slots[i] =
/// its slot. Returns the count. `list`, `list_slots` [kFlushScan] and `warp_counts` [32] are shared
/// memory; every thread of the block must call it (it synchronises the block, also before it
/// returns). blockDim.x a multiple of 32.
__device__ __forceinline__ int list_flush_rows(const int32_t* slot_ids, const int8_t* is_flush,
                                               int slots, int b0, int b1, int* list,
                                               int* list_slots, int* warp_counts) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  int nf = 0;
  for (int base = b0; base < b1; base += blockDim.x) {
    const int b = base + tid;
    int slot = -1;
    bool f = false;
    if (b < b1) {
      slot = slot_ids[b];
      f = slot >= 0 && slot < slots && is_flush[slot] != 0;
    }
    const unsigned m = __ballot_sync(0xffffffffu, f);
    if (lane == 0) warp_counts[warp] = __popc(m);
    __syncthreads();
    int off = nf, total = 0;
    for (int w = 0; w < nwarps; ++w) {
      off += w < warp ? warp_counts[w] : 0;
      total += warp_counts[w];
    }
    if (f) {
      const int at = off + __popc(m & ((1u << lane) - 1u));
      list[at] = b;
      if (list_slots != nullptr) list_slots[at] = slot;
    }
    nf += total;
    __syncthreads();
  }
  return nf;
}

}  // namespace replayssm::cuda
