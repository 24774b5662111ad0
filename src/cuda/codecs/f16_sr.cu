// float32 -> float16 stochastic-rounding kernel (include/replayssm/codecs.h). Random words come
// from cuRAND's Philox4_32_10 device generator: curand_init(seed, (slot << 32) | step, 4q) then
// curand4() gives the words of elements 4q .. 4q+3 of a row. The rounding itself is
// src/common/codec_math.h, shared with the CPU backend (which computes the same Philox words).
#include <cuda_runtime.h>
#include <curand_kernel.h>

#include "common/codec_math.h"
#include "cuda/codecs/codecs_cuda.h"
#include "cuda/codecs/reduce.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/memory.h"

namespace replayssm::cuda::codecs {
namespace {

/// One thread per quad (4 consecutive elements of a row; the last quad of a row may be partial).
__global__ void sr_kernel(const float* __restrict__ x, int64_t rows, int64_t n,
                          unsigned long long seed, const int32_t* __restrict__ slots,
                          const int32_t* __restrict__ steps, uint16_t* __restrict__ y) {
  const int64_t quads = (n + 3) / 4, total = rows * quads;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += stride) {
    const int64_t r = t / quads, q = t % quads;
    const unsigned long long subsequence =
        (static_cast<unsigned long long>(static_cast<uint32_t>(slots[r])) << 32) |
        static_cast<uint32_t>(steps[r]);
    curandStatePhilox4_32_10_t state;
    curand_init(seed, subsequence, static_cast<unsigned long long>(4 * q), &state);
    const uint4 w = curand4(&state);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t j = 4 * q + i;
      if (j < n) y[r * n + j] = codec::f16_sr(x[r * n + j], words[i]);
    }
  }
}

__global__ void philox_words_kernel(unsigned long long seed, unsigned long long subsequence,
                                    unsigned long long offset, int64_t count, uint32_t* words) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  curandStatePhilox4_32_10_t state;
  curand_init(seed, subsequence, offset, &state);
  for (int64_t k = 0; k < count; ++k) words[k] = curand(&state);
}

}  // namespace

void f16_sr_encode(const TensorView& x, const SrKey& key, const TensorView& y, void* stream) {
  const int64_t rows = x.shape[0], n = x.shape[1];
  if (rows == 0 || n == 0) return;
  sr_kernel<<<grid_for(rows * ((n + 3) / 4), kCodecThreads), kCodecThreads, 0,
              static_cast<cudaStream_t>(stream)>>>(x.ptr<float>(), rows, n, key.seed,
                                                   key.slots.ptr<int32_t>(),
                                                   key.steps.ptr<int32_t>(), y.ptr<uint16_t>());
  check_launch("codecs.f16_sr_encode kernel");
}

void curand_philox_words(uint64_t seed, uint64_t subsequence, uint64_t offset, int64_t count,
                         uint32_t* words) {
  if (count <= 0) return;
  philox_words_kernel<<<1, 1>>>(seed, subsequence, offset, count, words);
  check_launch("codecs.curand_philox_words kernel");
  device_synchronize();
}

}  // namespace replayssm::cuda::codecs
