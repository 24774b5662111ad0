// The CUDA engine's GEMMs through cuBLAS: bf16 weights and inputs, fp32 accumulation and outputs
// (cublasGemmEx, CUBLAS_COMPUTE_32F). One handle per model, bound to the model's stream with a
// fixed workspace, so the calls can be captured into CUDA graphs and replay the same algorithm.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/arena.h"

namespace replayssm::engine::cuda {

class Blas {
 public:
  Blas(cudaStream_t stream, DeviceArena& arena);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  /// y [B, l.out] (row stride ldy; 0 = l.out) = x [B, l.in] bf16 . W^T (+ bias), or y += that
  /// when accumulate (the residual add of out_proj / o_proj / down_proj).
  void linear(const DeviceLinear& l, const bf16* x, int64_t B, float* y, bool accumulate,
              int64_t ldy = 0);

  /// batch independent y_i [out] fp32 = W_i [out, in] bf16 . x_i [in] bf16 (torch layout, no
  /// bias), with the pointer arrays W, x, y [batch] in device memory (cublasGemmBatchedEx), so a
  /// kernel earlier in the stream can pick the matrices (the MoE experts of each row).
  void gemv_batched(const void* const* W, const void* const* x, void* const* y, int64_t out,
                    int64_t in, int64_t batch);

 private:
  void* handle_ = nullptr;  // cublasHandle_t
  cudaStream_t stream_;
};

}  // namespace replayssm::engine::cuda
