#include <cuda_runtime.h>

#include <string>

#include "cuda/device.h"

namespace replayssm::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver/device" error
    return 0;
  }
  return n;
}

namespace {

/// "13.0" from the CUDA version number 13000.
std::string cuda_version(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace

std::string device_summary() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    // The runtime reports a missing driver as an insufficient one: tell them apart.
    if (err == cudaErrorInsufficientDriver) {
      int driver = 0, runtime = 0;
      cudaDriverGetVersion(&driver);  // 0 when no driver is installed
      cudaRuntimeGetVersion(&runtime);
      if (driver == 0) return "no CUDA device: no NVIDIA driver is installed";
      return "no CUDA device: the NVIDIA driver supports CUDA " + cuda_version(driver) +
             ", this build needs CUDA " + cuda_version(runtime);
    }
    return std::string("no CUDA device: ") + cudaGetErrorString(err);
  }
  if (n == 0) return "no CUDA device";
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  return std::string(prop.name) + ", " + std::to_string(prop.totalGlobalMem >> 20) + " MiB, sm_" +
         std::to_string(prop.major) + std::to_string(prop.minor);
}

}  // namespace replayssm::cuda
