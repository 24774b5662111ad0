#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "cuda_util.h"
#include "device_fill.h"

namespace replayssm::bench {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <class T>
__global__ void uniform_kernel(T* out, int64_t n, float lo, float span, uint64_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const uint64_t r = splitmix64(seed ^ (static_cast<uint64_t>(i) * 0xd1342543de82ef95ull));
    const float u = static_cast<float>(r >> 40) * 0x1p-24f;  // [0, 1)
    out[i] = from_float<T>(lo + span * u);
  }
}

/// Bits of one element, and the exponent mask that marks NaN/inf (all exponent bits set).
template <class U>
__global__ void nonfinite_kernel(const U* in, int64_t n, U exp_mask,
                                 unsigned long long* count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    local += (in[i] & exp_mask) == exp_mask ? 1ull : 0ull;
  if (local) atomicAdd(count, local);
}

int grid_for(int64_t n) {
  int dev = 0, sms = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t want = (n + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(sms) * 16;
  return static_cast<int>(want < 1 ? 1 : (want < cap ? want : cap));
}

[[noreturn]] void bad_dtype(const char* what, DType t) {
  throw BenchError(std::string(what) + ": dtype " + dtype_name(t) +
                   ", expected float32, float16 or bfloat16");
}

}  // namespace

void fill_uniform(void* data, DType t, int64_t n, float lo, float hi, uint64_t seed,
                  cudaStream_t stream) {
  if (n <= 0) return;
  const int grid = grid_for(n);
  const uint64_t s = seed * 0x2545f4914f6cdd1dull + 0x632be59bd9b4e019ull;
  switch (t) {
    case DType::kF32:
      uniform_kernel<<<grid, kThreads, 0, stream>>>(static_cast<float*>(data), n, lo, hi - lo, s);
      break;
    case DType::kF16:
      uniform_kernel<<<grid, kThreads, 0, stream>>>(static_cast<__half*>(data), n, lo, hi - lo, s);
      break;
    case DType::kBF16:
      uniform_kernel<<<grid, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(data), n, lo,
                                                    hi - lo, s);
      break;
    default:
      bad_dtype("fill_uniform", t);
  }
  BENCH_CUDA(cudaGetLastError());
}

void fill_nan(void* data, DType t, int64_t n, cudaStream_t stream) {
  if (t != DType::kF32 && t != DType::kF16 && t != DType::kBF16) bad_dtype("fill_nan", t);
  if (n <= 0) return;
  BENCH_CUDA(cudaMemsetAsync(data, 0xFF, static_cast<size_t>(n * dtype_size(t)), stream));
}

int64_t count_nonfinite(const void* data, DType t, int64_t n, cudaStream_t stream) {
  if (n <= 0) return 0;
  DeviceMemory count(sizeof(unsigned long long));
  BENCH_CUDA(cudaMemsetAsync(count.get(), 0, sizeof(unsigned long long), stream));
  const int grid = grid_for(n);
  auto* c = count.as<unsigned long long>();
  switch (t) {
    case DType::kF32:
      nonfinite_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const uint32_t*>(data), n,
                                                      0x7f800000u, c);
      break;
    case DType::kF16:
      nonfinite_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const uint16_t*>(data), n,
                                                      static_cast<uint16_t>(0x7c00u), c);
      break;
    case DType::kBF16:
      nonfinite_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const uint16_t*>(data), n,
                                                      static_cast<uint16_t>(0x7f80u), c);
      break;
    default:
      bad_dtype("count_nonfinite", t);
  }
  BENCH_CUDA(cudaGetLastError());
  unsigned long long host = 0;
  BENCH_CUDA(cudaMemcpyAsync(&host, c, sizeof(host), cudaMemcpyDeviceToHost, stream));
  BENCH_CUDA(cudaStreamSynchronize(stream));
  return static_cast<int64_t>(host);
}

}  // namespace replayssm::bench
