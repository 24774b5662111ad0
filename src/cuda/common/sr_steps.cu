// The SR step counters' device updates (sr_steps.h): one thread per batch row.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/common/check.cuh"
#include "cuda/common/sr_steps.h"

namespace replayssm::cuda {
namespace {

/// One thread per batch row; `reset`: set to 0, else add 1 where is_flush allows.
__global__ void sr_steps_kernel(int32_t* __restrict__ steps, const int32_t* __restrict__ ids,
                                int32_t batch, int32_t slots, const int8_t* __restrict__ is_flush,
                                bool reset) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int32_t slot = ids[b];
  if (slot < 0 || slot >= slots) return;
  if (reset) {
    steps[slot] = 0;
  } else if (is_flush == nullptr || is_flush[slot] != 0) {
    // Atomic: a slot given twice (the device ids are checked only when host checks are on)
    // advances once per row, as on the CPU.
    atomicAdd(reinterpret_cast<unsigned int*>(steps + slot), 1u);
  }
}

void enqueue_steps(const SrKeys& sr, const Rows& rows, const int8_t* is_flush, int64_t slots,
                   bool reset, const char* what) {
  const int64_t batch = rows.slot_ids.shape[0];
  if (batch == 0 || slots == 0) return;
  constexpr int kThreads = 128;
  sr_steps_kernel<<<static_cast<unsigned>((batch + kThreads - 1) / kThreads), kThreads, 0,
                    static_cast<cudaStream_t>(rows.stream)>>>(
      sr.steps.ptr<int32_t>(), rows.slot_ids.ptr<int32_t>(), static_cast<int32_t>(batch),
      static_cast<int32_t>(std::min<int64_t>(slots, INT32_MAX)), is_flush, reset);
  check_launch(what);
}

}  // namespace

void sr_advance(const SrKeys& sr, const Rows& rows, const int8_t* is_flush, int64_t slots) {
  enqueue_steps(sr, rows, is_flush, slots, false, "sr_advance kernel");
}

void sr_reset(const SrKeys& sr, const Rows& rows, int64_t slots) {
  enqueue_steps(sr, rows, nullptr, slots, true, "sr_reset kernel");
}

}  // namespace replayssm::cuda
