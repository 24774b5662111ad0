// Hopper (sm_90) bulk asynchronous copies between global and shared memory, done by the copy
// engine of the SM (the async proxy) rather than per-thread loads: one instruction moves a
// contiguous run of bytes (16-byte aligned, a multiple of 16 long). Loads complete on an mbarrier
// that counts the bytes (expect_tx); stores are tracked in per-thread bulk groups. Shared memory
// written by ordinary stores must be fenced (fence_proxy_async_smem) before a bulk store reads it,
// and a thread that issued bulk stores must wait for them to finish reading shared memory before
// the block may exit (bulk_wait_read_all).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace replayssm::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint64_t gmem_u64(const void* p) {
  return static_cast<uint64_t>(__cvta_generic_to_global(p));
}

/// Initialises an mbarrier expecting `count` arrivals, and makes the initialisation visible to
/// the async proxy (the copy engine completes transactions on it).
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count)
               : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/// Arrives on the barrier and adds `bytes` to the transactions its current phase waits for;
/// returns the arrival's phase token.
__device__ __forceinline__ uint64_t mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  uint64_t state;  // the phase token of the arrival (unused by the callers: they wait on parity)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
               : "=l"(state)
               : "r"(smem_u32(bar)), "r"(bytes)
               : "memory");
  return state;
}

/// Adds `bytes` to the transactions the barrier's current phase waits for, without arriving.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}

/// Arrives on the barrier (release: this thread's earlier memory operations are visible to the
/// threads that see the phase complete).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile(
      "{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared::cta.b64 st, [%0];\n\t}" ::"r"(smem_u32(bar))
      : "memory");
}

/// Waits until the phase of the given parity has completed (all arrivals and bytes in).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

/// Global -> shared, `bytes` contiguous bytes; completes `bytes` transactions on `bar`.
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* gmem_src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_u32(smem_dst)),
      "l"(gmem_u64(gmem_src)), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

/// Makes this thread's ordinary shared-memory stores visible to later bulk copies.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/// Shared -> global, `bytes` contiguous bytes, in this thread's current bulk group.
__device__ __forceinline__ void bulk_store(void* gmem_dst, const void* smem_src, uint32_t bytes) {
  asm volatile(
      "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gmem_u64(gmem_dst)),
      "r"(smem_u32(smem_src)), "r"(bytes)
      : "memory");
}

__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/// Waits until every bulk store this thread issued has finished reading shared memory.
__device__ __forceinline__ void bulk_wait_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

}  // namespace replayssm::cuda
