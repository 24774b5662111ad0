// The work list of a flush launch (mamba2/flush.cuh, gdn/flush.cuh): the rows of the batch that
// flush on this step, in batch order, and the items (flush row, rest) a persistent block takes.
// The grid is fixed (one CUDA graph serves every mix of rows), so instead of a block per (row,
// head) that mostly exits at once, every block lists the flush rows itself (one slot id and one
// is_flush load per row, all in flight) and walks items blockIdx.x, + gridDim.x, ... of the list:
// rows that do not flush cost one pass of loads, not a block launch each.
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

/// Calls item(b, slot, rest) for each item of this block: rest in [0, per_row) indexes the work
/// of flush row b (valid slot, is_flush set). `list` [kFlushScan] and `warp_counts` [32] are
/// shared memory. Every thread of the block must call it (it synchronises the block); item() may
/// synchronise too: a block's threads see the same items. blockDim.x a multiple of 32.
template <class Item>
__device__ __forceinline__ void for_each_flush_item(const int32_t* slot_ids, const int8_t* is_flush,
                                                    int slots, int batch, int per_row, int* list,
                                                    int* warp_counts, Item&& item) {
  for (int b0 = 0; b0 < batch; b0 += kFlushScan) {
    const int nf = list_flush_rows(slot_ids, is_flush, slots, b0, min(b0 + kFlushScan, batch),
                                   list, nullptr, warp_counts);
    for (int it = blockIdx.x; it < nf * per_row; it += gridDim.x) {
      const int fr = it / per_row;
      const int b = list[fr];
      item(b, slot_ids[b], it - fr * per_row);
      __syncthreads();  // the next item reuses the block's staging
    }
    __syncthreads();  // the list is rewritten for the next rows
  }
}

}  // namespace replayssm::cuda
