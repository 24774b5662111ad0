// Programmatic dependent launch (sm_90+): a kernel launched with launch_with_smem(..., overlap =
// true) may start while the previous kernel of its stream still runs, once every block of that
// kernel has called pdl_launch_dependents() (or exited). Both instructions are no-ops where the
// launch was not programmatic, and compile to nothing below sm_90.
#pragma once

namespace replayssm::cuda {

/// Lets the stream's next kernel, if launched programmatically, start scheduling its blocks once
/// every block of this kernel has called this (or exited). Says nothing about memory: the next
/// kernel must not read what this one writes unless it calls pdl_wait() first.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// Waits until the previous kernel of the stream has completed and its writes are visible. A
/// programmatically launched kernel calls it before it reads that kernel's results and, where it
/// reads none, before it ends, so that its completion still implies the previous kernel's (the
/// stream's later work waits on it alone).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace replayssm::cuda
