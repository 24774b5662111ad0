// Plain host-callable wrappers of the CUDA runtime's memory and stream calls, so that tests and
// benchmarks can allocate and move device data without including CUDA headers. Every failure
// throws DeviceError. Only built with the CUDA backend (RSSM_WITH_CUDA).
#pragma once
#include <cstddef>
#include <cstdint>

namespace replayssm::cuda {

void* device_malloc(size_t bytes);
void device_free(void* p) noexcept;
// The copies and the memset are complete when they return, visible to work on every stream.
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_device_to_device(void* dst, const void* src, size_t bytes);
void device_memset(void* dst, int byte, size_t bytes);
void device_synchronize();
/// Multiprocessor count of the current device (0 when there is none).
int sm_count();
/// The multiprocessor count the launch plans size their grids by: sm_count(), or the H200's 132
/// where there is no device (plans stay defined, e.g. for host-side checks).
inline int device_sms() {
  const int n = sm_count();
  return n > 0 ? n : 132;
}
/// Blocks of `smem_bytes` dynamic shared memory each that one SM holds at once (sm_90: 228 KB of
/// shared memory per SM, 1 KB of it reserved per block): the launch plans' occupancy estimate.
inline int64_t blocks_per_sm_by_smem(int64_t smem_bytes) {
  return 228 * 1024 / (smem_bytes + 1024);
}
/// Dynamic shared memory one block may opt into on the current device (227 KB on sm_90; the
/// sm_90 value when the query fails).
size_t max_block_smem();

/// A non-blocking stream and a CUDA graph captured on it (for graph-replay tests and benches).
void* stream_create();
void stream_destroy(void* stream) noexcept;
void stream_synchronize(void* stream);
void begin_capture(void* stream);
/// Ends the capture and instantiates it; returns the executable graph.
void* end_capture(void* stream);
void graph_launch(void* exec, void* stream);
void graph_destroy(void* exec) noexcept;

}  // namespace replayssm::cuda
