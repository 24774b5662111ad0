// cp.async (sm_80+): 16-byte global -> shared copies that run in the background without holding
// registers; a thread waits for its own groups and then reads what it copied (no barrier needed
// when every thread reads only its own chunks).
#pragma once
#include <cuda_runtime.h>

namespace replayssm::cuda {

/// Copies 16 bytes; .cg caches in L2 only (the data is read once).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

/// Copies 16 bytes when `valid`, else writes 16 zero bytes and reads nothing (gmem must still be
/// a mapped address); .cg as cp_async16. smem: an address in the shared window.
__device__ __forceinline__ void cp_async16_zfill(unsigned smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}

/// Copies 4 or 8 bytes (.ca: .cg copies only 16), e.g. a scale word beside a chunk.
template <int Bytes>
__device__ __forceinline__ void cp_async_small(void* smem, const void* gmem) {
  static_assert(Bytes == 4 || Bytes == 8, "cp.async.ca copies 4, 8 or 16 bytes");
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(Bytes)
               : "memory");
}

/// Copies one chunk of 16 (L2 only), 8 or 4 bytes to a shared-memory address already in the
/// shared window (the 32-bit address of __cvta_generic_to_shared): loops that copy many chunks
/// convert once, not per copy.
template <int Bytes>
__device__ __forceinline__ void cp_async_chunk_at(unsigned smem, const void* gmem) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (Bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem), "l"(gmem), "n"(Bytes)
                 : "memory");
}

/// Closes the group of the copies issued since the last commit (possibly empty).
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/// Waits until at most `Pending` of this thread's committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

/// cp_async_wait with a run-time count (folded to one instruction in unrolled loops), 0..7.
__device__ __forceinline__ void cp_async_wait_upto(int pending) {
  switch (pending) {
    case 0:
      cp_async_wait<0>();
      break;
    case 1:
      cp_async_wait<1>();
      break;
    case 2:
      cp_async_wait<2>();
      break;
    case 3:
      cp_async_wait<3>();
      break;
    case 4:
      cp_async_wait<4>();
      break;
    case 5:
      cp_async_wait<5>();
      break;
    case 6:
      cp_async_wait<6>();
      break;
    default:
      cp_async_wait<7>();
      break;
  }
}

}  // namespace replayssm::cuda
