// Error checks of the CUDA engine: a failed runtime or cuBLAS call becomes the library's
// DeviceError naming the call.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "replayssm/errors.h"

namespace replayssm::engine::cuda {

inline void check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  // A failed call also leaves its error as the thread's last error (non-sticky ones until read):
  // clear it, or the next check_launch would report it again.
  cudaGetLastError();
  throw DeviceError(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                      cudaGetErrorString(err) + ")");
}

/// Raises the error of the launch just enqueued.
inline void check_launch(const char* what) { check_cuda(cudaGetLastError(), what); }

}  // namespace replayssm::engine::cuda
