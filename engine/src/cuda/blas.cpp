#include "cuda/blas.h"

#include <cublas_v2.h>

#include <string>

#include "cuda/launch_check.h"

namespace replayssm::engine::cuda {
namespace {

constexpr size_t kWorkspace = size_t(32) << 20;

void check_blas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(std::string(what) + ": " + cublasGetStatusName(st) + " (" +
                      cublasGetStatusString(st) + ")");
}

cublasHandle_t as_handle(void* h) { return static_cast<cublasHandle_t>(h); }

}  // namespace

Blas::Blas(cudaStream_t stream, DeviceArena& arena) : stream_(stream) {
  cublasHandle_t h = nullptr;
  check_blas(cublasCreate(&h), "cublasCreate");
  handle_ = h;
  check_blas(cublasSetStream(h, stream), "cublasSetStream");
  // A fixed workspace: nothing is allocated while a step is captured into a graph.
  check_blas(cublasSetWorkspace(h, arena.alloc(kWorkspace), kWorkspace), "cublasSetWorkspace");
}

Blas::~Blas() {
  if (handle_) cublasDestroy(as_handle(handle_));
}

void Blas::linear(const DeviceLinear& l, const bf16* x, int64_t B, float* y, bool accumulate,
                  int64_t ldy) {
  if (B == 0) return;
  if (ldy == 0) ldy = l.out;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // Column-major view: y^T [out, B] = W [in, out]^T . x^T [in, B].
  check_blas(cublasGemmEx(as_handle(handle_), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(l.out),
                          static_cast<int>(B), static_cast<int>(l.in), &alpha, l.w, CUDA_R_16BF,
                          static_cast<int>(l.in), x, CUDA_R_16BF, static_cast<int>(l.in), &beta, y,
                          CUDA_R_32F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx (engine linear)");
  if (l.bias) add_bias(y, ldy, l.bias, B, l.out, stream_);
}

void Blas::gemv_batched(const void* const* W, const void* const* x, void* const* y, int64_t out,
                        int64_t in, int64_t batch) {
  if (batch == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view of each: y^T [out, 1] = W [in, out]^T . x^T [in, 1].
  check_blas(cublasGemmBatchedEx(as_handle(handle_), CUBLAS_OP_T, CUBLAS_OP_N,
                                 static_cast<int>(out), 1, static_cast<int>(in), &alpha, W,
                                 CUDA_R_16BF, static_cast<int>(in), x, CUDA_R_16BF,
                                 static_cast<int>(in), &beta, y, CUDA_R_32F,
                                 static_cast<int>(out), static_cast<int>(batch),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "cublasGemmBatchedEx (engine experts)");
}

}  // namespace replayssm::engine::cuda
