// The conventional GDN step's transport without its arithmetic (bench/NOTES_gdn.md "Session 21"):
// a Qwen3.5-4B pool (32 value heads of 64 KB fp32 state per slot, 2 x batch slots), each block
// moving `BB` bytes of one (batch row, value head) through registers — every 16-byte load of a
// thread issued before its first store — in place (the conventional step's pattern) or into a
// second pool (FLA's out-of-place pattern), with plain, streaming (.cs) or L2-only (.cg) cache
// operators, at several block shapes. Against cudaMemcpyAsync over 4 GiB and over the same
// bytes. Prints µs and GB/s (read + write). Each batch runs twice: slots drawn at random from
// 2 x batch (a serving pool), then dense (slot b = b, FLA's layout; bench/NOTES_gdn.md "Session
// 22"). Every time is the median over runs of 10 back-to-back launches (per launch), so a launch's
// own overhead does not count against the stream.
// Usage: replayssm_probe_inplace_pattern [batch ...] (default 256 512).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

namespace {

constexpr int kHeads = 32, kHeadBytes = 65536;

enum Hint { kPlain, kStream, kGlobal };

template <int H>
__device__ __forceinline__ int4 load(const int4* p) {
  if constexpr (H == kStream) return __ldcs(p);
  if constexpr (H == kGlobal) return __ldcg(p);
  return *p;
}
template <int H>
__device__ __forceinline__ void store(int4* p, int4 v) {
  if constexpr (H == kStream) return __stcs(p, v);
  if constexpr (H == kGlobal) return __stcg(p, v);
  *p = v;
}

// Grid: x = value head * parts + part, y = batch row.
template <int THREADS, int BB, int H, bool INPLACE>
__global__ void __launch_bounds__(THREADS) move(int4* pool, int4* out, const int* slots) {
  constexpr int N = BB / (16 * THREADS), parts = kHeadBytes / BB;
  static_assert(N >= 1 && BB % (16 * THREADS) == 0, "whole 16-byte loads per thread");
  const int vh = blockIdx.x / parts, part = blockIdx.x % parts;
  const long off =
      ((static_cast<long>(slots[blockIdx.y]) * kHeads + vh) * kHeadBytes + part * BB) / 16;
  const int4* src = pool + off;
  int4* dst = (INPLACE ? pool : out) + off;
  int4 v[N];
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = load<H>(src + i * THREADS + threadIdx.x);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    v[i].x += 1;
    store<H>(dst + i * THREADS + threadIdx.x, v[i]);
  }
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "replayssm_probe_inplace_pattern: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

struct Timer {
  cudaEvent_t e0, e1;
  Timer() { cudaEventCreate(&e0), cudaEventCreate(&e1); }
  template <class F>
  double median_ms(F launch, int runs = 11, int back_to_back = 10) {
    std::vector<float> t;
    for (int r = 0; r < runs + 3; ++r) {
      cudaEventRecord(e0);
      for (int i = 0; i < back_to_back; ++i) launch();
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (r >= 3) t.push_back(ms / back_to_back);  // three warm-up runs
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

template <int THREADS, int BB, int H, bool INPLACE>
void run(Timer& tm, int4* pool, int4* out, const int* slots, int batch, double ref_gbps) {
  const dim3 grid(kHeads * (kHeadBytes / BB), batch);
  const double bytes = 2.0 * batch * kHeads * kHeadBytes;
  const double ms =
      tm.median_ms([&] { move<THREADS, BB, H, INPLACE><<<grid, THREADS>>>(pool, out, slots); });
  static const char* hint[] = {"plain", "cs", "cg"};
  std::printf("  %-8s %-5s %4d threads x %5d B/block (%2d x 16 B/thread): %8.2f us %6.0f GB/s "
              "%5.1f%%\n",
              INPLACE ? "in place" : "copy", hint[H], THREADS, BB, BB / (16 * THREADS), ms * 1e3,
              bytes / ms / 1e6, 100.0 * bytes / ms / 1e6 / ref_gbps);
}

template <int H, bool INPLACE>
void shapes(Timer& tm, int4* pool, int4* out, const int* slots, int batch, double ref) {
  // One-warp blocks, many per SM (FLA's fused_recurrent decode shape: 8 rows of K per program).
  run<32, 2048, H, INPLACE>(tm, pool, out, slots, batch, ref);
  run<32, 4096, H, INPLACE>(tm, pool, out, slots, batch, ref);
  run<32, 8192, H, INPLACE>(tm, pool, out, slots, batch, ref);
  run<64, 4096, H, INPLACE>(tm, pool, out, slots, batch, ref);
  run<64, 8192, H, INPLACE>(tm, pool, out, slots, batch, ref);
  run<128, 8192, H, INPLACE>(tm, pool, out, slots, batch, ref);
  run<128, 16384, H, INPLACE>(tm, pool, out, slots, batch, ref);
  run<256, 16384, H, INPLACE>(tm, pool, out, slots, batch, ref);
  run<128, 32768, H, INPLACE>(tm, pool, out, slots, batch, ref);
  run<256, 32768, H, INPLACE>(tm, pool, out, slots, batch, ref);
  run<512, 32768, H, INPLACE>(tm, pool, out, slots, batch, ref);
  run<256, 65536, H, INPLACE>(tm, pool, out, slots, batch, ref);
  run<512, 65536, H, INPLACE>(tm, pool, out, slots, batch, ref);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches;
  for (int i = 1; i < argc; ++i) batches.push_back(std::atoi(argv[i]));
  if (batches.empty()) batches = {256, 512};
  const int bmax = *std::max_element(batches.begin(), batches.end());
  const long pool_bytes = 2L * bmax * kHeads * kHeadBytes, big = 4L << 30;
  int4 *pool = nullptr, *out = nullptr;
  int* slots = nullptr;
  if (!ok(cudaMalloc(&pool, std::max(pool_bytes, big)), "cudaMalloc") ||
      !ok(cudaMalloc(&out, std::max(pool_bytes, big)), "cudaMalloc") ||
      !ok(cudaMalloc(&slots, bmax * sizeof(int)), "cudaMalloc"))
    return 1;
  cudaMemset(pool, 1, std::max(pool_bytes, big));
  cudaMemset(out, 0, std::max(pool_bytes, big));
  Timer tm;
  const double mc4 =
      tm.median_ms([&] { cudaMemcpyAsync(out, pool, big, cudaMemcpyDeviceToDevice); });
  const double ref = 2.0 * big / mc4 / 1e6;
  std::printf("cudaMemcpyAsync 4 GiB: %.0f GB/s (read + write; the %% column's reference)\n", ref);
  std::mt19937 rng(20261202);
  for (int batch : batches)
    for (int dense = 0; dense < 2; ++dense) {
      std::vector<int> perm(2 * batch);
      std::iota(perm.begin(), perm.end(), 0);
      if (!dense) std::shuffle(perm.begin(), perm.end(), rng);
      cudaMemcpy(slots, perm.data(), batch * sizeof(int), cudaMemcpyHostToDevice);
      const long bytes = static_cast<long>(batch) * kHeads * kHeadBytes;
      const double mc =
          tm.median_ms([&] { cudaMemcpyAsync(out, pool, bytes, cudaMemcpyDeviceToDevice); });
      std::printf("batch %d (%.0f MB of state, %s): cudaMemcpyAsync of the same bytes %.2f us, "
                  "%.0f GB/s\n",
                  batch, bytes / 1e6,
                  dense ? "dense slots 0..batch-1" : "random slots of 2 x batch", mc * 1e3,
                  2.0 * bytes / mc / 1e6);
      shapes<kPlain, true>(tm, pool, out, slots, batch, ref);
      shapes<kStream, true>(tm, pool, out, slots, batch, ref);
      shapes<kGlobal, true>(tm, pool, out, slots, batch, ref);
      shapes<kPlain, false>(tm, pool, out, slots, batch, ref);
      shapes<kStream, false>(tm, pool, out, slots, batch, ref);
    }
  return ok(cudaGetLastError(), "kernels") ? 0 : 1;
}
