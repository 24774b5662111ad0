#include <vector>

#include "copy_ceiling.h"
#include "cuda_util.h"

namespace replayssm::bench {
namespace {

constexpr int kThreads = 512;

/// Grid-stride copy, 4 x 16 bytes per thread per iteration (all four loads issued before the
/// stores): the access pattern of anchors-h200.md's SM copy kernel.
__global__ void copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const int4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

template <class Fn>
double median_gbps(Fn&& copy_once, int64_t bytes, int warm, int timed, cudaStream_t s) {
  for (int i = 0; i < warm; ++i) copy_once();
  BENCH_CUDA(cudaStreamSynchronize(s));
  std::vector<double> ms;
  for (int i = 0; i < timed; ++i) {
    Event a, b;
    a.record(s);
    copy_once();
    b.record(s);
    BENCH_CUDA(cudaStreamSynchronize(s));
    ms.push_back(b.since(a));
  }
  const double med = percentile(ms, 0.5);
  return 2.0 * static_cast<double>(bytes) / (med * 1e-3) / 1e9;
}

}  // namespace

CopyCeiling measure_copy_ceiling(int64_t bytes, int warm, int timed) {
  if (bytes <= 0 || bytes % 64 != 0) throw BenchError("copy ceiling: bytes must be a multiple of 64");
  DeviceMemory src(static_cast<size_t>(bytes)), dst(static_cast<size_t>(bytes));
  Stream stream;
  const cudaStream_t s = stream.get();
  // Random-looking, non-zero source (zeros can run faster than real data).
  BENCH_CUDA(cudaMemsetAsync(src.get(), 0x5A, static_cast<size_t>(bytes), s));
  BENCH_CUDA(cudaMemsetAsync(dst.get(), 0x00, static_cast<size_t>(bytes), s));

  int dev = 0, sms = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t n16 = bytes / 16;
  const int grid = sms * 4;

  CopyCeiling c;
  c.bytes_per_copy = bytes;
  c.sm_kernel_gbps = median_gbps(
      [&] {
        copy_kernel<<<grid, kThreads, 0, s>>>(src.as<const int4>(), dst.as<int4>(), n16);
        BENCH_CUDA(cudaGetLastError());
      },
      bytes, warm, timed, s);
  c.memcpy_gbps = median_gbps(
      [&] {
        BENCH_CUDA(cudaMemcpyAsync(dst.get(), src.get(), static_cast<size_t>(bytes),
                                   cudaMemcpyDeviceToDevice, s));
      },
      bytes, warm, timed, s);
  return c;
}

}  // namespace replayssm::bench
