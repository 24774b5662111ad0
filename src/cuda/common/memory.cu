#include <cuda_runtime.h>

#include "cuda/common/check.cuh"
#include "cuda/common/memory.h"

namespace replayssm::cuda {

void* device_malloc(size_t bytes) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  return p;
}

void device_free(void* p) noexcept { cudaFree(p); }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host to device");
  // From pageable memory cudaMemcpy may return before the DMA lands, ordered only on the legacy
  // stream: wait for it, so that work on non-blocking streams sees the bytes (a test's commit
  // on its own stream once read accepted counts that had not arrived). The same for the device
  // copy and the memset below, which do not wait at all.
  check_cuda(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize after host to device");
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy device to host");
}

void copy_device_to_device(void* dst, const void* src, size_t bytes) {
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy device to device");
  check_cuda(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize after device copy");
}

void device_memset(void* dst, int byte, size_t bytes) {
  check_cuda(cudaMemset(dst, byte, bytes), "cudaMemset");
  check_cuda(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize after cudaMemset");
}

void device_synchronize() { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

size_t max_block_smem() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    cudaGetLastError();
    return 227 * 1024;
  }
  return static_cast<size_t>(n);
}

void* stream_create() {
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}

void stream_destroy(void* stream) noexcept { cudaStreamDestroy(static_cast<cudaStream_t>(stream)); }

void stream_synchronize(void* stream) {
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
}

void begin_capture(void* stream) {
  check_cuda(
      cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal),
      "cudaStreamBeginCapture");
}

void* end_capture(void* stream) {
  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph),
             "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check_cuda(err, "cudaGraphInstantiate");
  return exec;
}

void graph_launch(void* exec, void* stream) {
  check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), static_cast<cudaStream_t>(stream)),
             "cudaGraphLaunch");
}

void graph_destroy(void* exec) noexcept {
  cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

}  // namespace replayssm::cuda
