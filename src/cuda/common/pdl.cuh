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

/// The ordinary launch of a step whose flush launch was enqueued first and runs beside it the
/// whole way (Plan::overlap 2; the flush launch triggers at its start): the grid's last block
/// waits for the flush launch, so that this launch's completion still implies it. That block is
/// scheduled last, when the flush launch has mostly finished; the others never wait.
__device__ __forceinline__ void pdl_wait_in_last_block(bool on) {
  if (on && blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 &&
      blockIdx.z == gridDim.z - 1)
    pdl_wait();
}

}  // namespace replayssm::cuda
