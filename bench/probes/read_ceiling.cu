// Bandwidth ceilings of plain SM streams on this GPU (bench/NOTES_gdn.md "Session 19"): read-only
// (what a ReplaySSM ordinary step, which only reads its checkpoint, can reach), copy (read one
// buffer, write another) and in place (read and write the same addresses, the conventional step's
// pattern), each over a 4 GiB buffer at several block shapes, against cudaMemcpyAsync; then
// read-only over 512 MiB (a Qwen3.5-4B batch-256 checkpoint). Medians of 10 runs, events.
// Usage: replayssm_probe_read_ceiling (no arguments).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace {

// Four 16-byte loads per thread in flight per iteration, grid-stride; the XOR keeps them live.
__global__ void read_only(const int4* __restrict__ s, long n, int* sink) {
  long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  const long st = static_cast<long>(gridDim.x) * blockDim.x;
  int acc = 0;
  for (; i + 3 * st < n; i += 4 * st) {
    const int4 a = __ldcs(s + i), b = __ldcs(s + i + st), c = __ldcs(s + i + 2 * st),
               d = __ldcs(s + i + 3 * st);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
           d.z ^ d.w;
  }
  for (; i < n; i += st) {
    const int4 a = __ldcs(s + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x12345678) *sink = acc;  // (never: the buffer holds 0x01 bytes)
}

__global__ void copy(const int4* __restrict__ s, int4* __restrict__ d, long n) {
  long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  const long st = static_cast<long>(gridDim.x) * blockDim.x;
  for (; i + 3 * st < n; i += 4 * st) {
    const int4 a = __ldcs(s + i), b = __ldcs(s + i + st), c = __ldcs(s + i + 2 * st),
               e = __ldcs(s + i + 3 * st);
    __stcs(d + i, a), __stcs(d + i + st, b), __stcs(d + i + 2 * st, c), __stcs(d + i + 3 * st, e);
  }
  for (; i < n; i += st) __stcs(d + i, __ldcs(s + i));
}

__global__ void in_place(int4* s, long n) {
  long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  const long st = static_cast<long>(gridDim.x) * blockDim.x;
  for (; i + 3 * st < n; i += 4 * st) {
    int4 a = __ldcs(s + i), b = __ldcs(s + i + st), c = __ldcs(s + i + 2 * st),
         e = __ldcs(s + i + 3 * st);
    a.x += 1, b.x += 1, c.x += 1, e.x += 1;
    __stcs(s + i, a), __stcs(s + i + st, b), __stcs(s + i + 2 * st, c), __stcs(s + i + 3 * st, e);
  }
  for (; i < n; i += st) {
    int4 a = __ldcs(s + i);
    a.x += 1;
    __stcs(s + i, a);
  }
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "replayssm_probe_read_ceiling: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main() {
  const long bytes = 4L << 30, n = bytes / 16;
  int4 *a = nullptr, *b = nullptr;
  int* sink = nullptr;
  if (!ok(cudaMalloc(&a, bytes), "cudaMalloc") || !ok(cudaMalloc(&b, bytes), "cudaMalloc") ||
      !ok(cudaMalloc(&sink, 4), "cudaMalloc"))
    return 1;
  cudaMemset(a, 1, bytes);
  cudaMemset(b, 0, bytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  auto median_ms = [&](auto launch) {
    std::vector<float> t;
    for (int r = 0; r < 12; ++r) {
      cudaEventRecord(e0);
      launch();
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (r >= 2) t.push_back(ms);  // two warm-up runs
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const double mc = median_ms([&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); });
  std::printf("cudaMemcpyAsync %.0f GB/s (read + write)\n", 2 * bytes / mc / 1e6);
  for (int per_sm : {2, 4, 8})
    for (int threads : {256, 512, 1024}) {
      if (per_sm * threads > 2048) continue;
      const int grid = sms * per_sm;
      const double r = median_ms([&] { read_only<<<grid, threads>>>(a, n, sink); });
      const double c = median_ms([&] { copy<<<grid, threads>>>(a, b, n); });
      const double p = median_ms([&] { in_place<<<grid, threads>>>(a, n); });
      std::printf("%d blocks/SM x %4d threads: read-only %.0f GB/s, copy %.0f GB/s, in place %.0f "
                  "GB/s (read + write)\n",
                  per_sm, threads, bytes / r / 1e6, 2 * bytes / c / 1e6, 2 * bytes / p / 1e6);
    }
  const long small = 512L << 20;
  const double r = median_ms([&] { read_only<<<sms * 4, 512>>>(a, small / 16, sink); });
  std::printf("read-only over 512 MiB: %.1f us, %.0f GB/s\n", r * 1e3, small / r / 1e6);
  return ok(cudaGetLastError(), "kernels") ? 0 : 1;
}
