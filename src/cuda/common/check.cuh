// Host-side CUDA error handling for the launchers: every runtime call is checked and a failure
// becomes the library's DeviceError naming the call.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "replayssm/errors.h"
#include "replayssm/tensor.h"

namespace replayssm::cuda {

inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw DeviceError(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                      cudaGetErrorString(err) + ")");
}

/// Raises the error of the launch just enqueued (bad configuration, missing kernel image).
inline void check_launch(const char* what) { check_cuda(cudaGetLastError(), what); }

/// Whether work enqueued on `stream` is being captured into a CUDA graph (then nothing may
/// synchronise, so host-side checks of device data are skipped).
inline bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

/// UnsupportedError unless the tensor's data pointer is 16-byte aligned (the kernels' vector
/// loads), naming the op and the argument.
inline void check_aligned(const TensorView& t, const char* op, const char* name) {
  check<UnsupportedError>(reinterpret_cast<uintptr_t>(t.data) % 16 == 0, op, " ", name,
                          ": data pointer is not 16-byte aligned, expected 16-byte alignment "
                          "(vector loads)");
}

}  // namespace replayssm::cuda
