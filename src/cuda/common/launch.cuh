// The launch of one kernel with dynamic shared memory, shared by every family's launchers.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "cuda/common/check.cuh"

namespace replayssm::cuda {

/// Whether the current device runs programmatic dependent launches (compute capability >= 9.0),
/// asked once per device. A failing query answers false (the plain launch then reports it).
inline bool programmatic_launch_supported() {
  constexpr int kDevices = 64;
  static std::atomic<int8_t> known[kDevices] = {};  // 0 unknown, 1 no, 2 yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) return false;
  int8_t k = known[device].load(std::memory_order_relaxed);
  if (k == 0) {
    int major = 0;
    k = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                major >= 9
            ? 2
            : 1;
    known[device].store(k, std::memory_order_relaxed);
  }
  return k == 2;
}

/// Enqueues kernel<<<grid, threads, smem, stream>>>(p), first raising the kernel's dynamic
/// shared-memory limit when smem exceeds the 48 KB default; a failure is a DeviceError naming op.
/// `overlap`: a programmatic dependent launch (common/pdl.cuh): the kernel may start while the
/// stream's previous kernel runs its last blocks; the caller guarantees that the two touch
/// disjoint memory where either writes (or that the kernel waits first: pdl_wait) and that the
/// kernel calls pdl_wait before it ends. Ignored below sm_90 (and a no-op on the device where the
/// kernels are compiled for an older architecture: the launch then waits as a plain one would).
template <class Kernel, class Params>
void launch_with_smem(Kernel kernel, dim3 grid, int threads, size_t smem, cudaStream_t stream,
                      const Params& p, const char* op, bool overlap = false) {
  if (smem > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)),
               (std::string(op) + ": raising the shared-memory limit").c_str());
  if (overlap && programmatic_launch_supported()) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(static_cast<unsigned>(threads));
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, p);
    if (err != cudaSuccess) cudaGetLastError();  // reported here, not by the next launch's check
    check_cuda(err, (std::string(op) + " launch").c_str());
    return;
  }
  kernel<<<grid, threads, smem, stream>>>(p);
  check_launch((std::string(op) + " launch").c_str());
}

/// Blocks of `kernel` (threads and dynamic shared memory as given) resident on the whole device
/// at once: the grid of a persistent kernel. Raises the shared-memory limit first, as
/// launch_with_smem does; a failure is a DeviceError.
template <class Kernel>
unsigned resident_blocks(Kernel kernel, int threads, size_t smem) {
  if (smem > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)),
               "raising the shared-memory limit");
  int per_sm = 0, device = 0, sms = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem),
             "occupancy of a persistent kernel");
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
             "multiprocessor count");
  return static_cast<unsigned>(std::max(1, per_sm) * sms);
}

}  // namespace replayssm::cuda
