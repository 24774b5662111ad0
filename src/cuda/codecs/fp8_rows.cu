// FP8 E4M3 per-row-scale encode/decode kernels (include/replayssm/codecs.h). The per-element math
// is src/common/codec_math.h, shared with the CPU backend.
#include <cuda_runtime.h>

#include "common/codec_math.h"
#include "cuda/codecs/codecs_cuda.h"
#include "cuda/codecs/reduce.cuh"
#include "cuda/common/check.cuh"

namespace replayssm::cuda::codecs {
namespace {

/// Grid: one block per row (grid-stride over rows).
__global__ void __launch_bounds__(kCodecThreads)
    encode_kernel(const float* __restrict__ x, int64_t rows, int64_t n, uint8_t* __restrict__ codes,
                  float* __restrict__ scales) {
  __shared__ float smem[kCodecThreads / 32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * n;
    float amax = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += kCodecThreads) amax = codec::amax_step(amax, xr[j]);
    const float s = codec::fp8_row_scale(block_max(amax, smem));
    if (threadIdx.x == 0) scales[r] = s;
    for (int64_t j = threadIdx.x; j < n; j += kCodecThreads)
      codes[r * n + j] = codec::fp8_encode(xr[j], s);
    __syncthreads();  // smem is reused by the next row
  }
}

/// Grid (x: chunk of kFlushedHeads heads, y: batch row), one warp per row: the rows of the heads
/// (slot, h) of a flushing row's slot, rows_per_group rows of n floats each.
__global__ void __launch_bounds__(kCodecThreads)
    encode_flushed_kernel(const float* __restrict__ x, int64_t rows_per_group, int64_t n,
                          FlushedRows rows, uint8_t* __restrict__ codes,
                          float* __restrict__ scales) {
  const int32_t slot = rows.slot_ids[blockIdx.y];
  if (slot < 0 || slot >= rows.slots || rows.is_flush[slot] == 0) return;
  const int64_t h0 = static_cast<int64_t>(blockIdx.x) * kFlushedHeads;
  const int64_t nh = min(static_cast<int64_t>(kFlushedHeads), rows.heads - h0);
  const int64_t r0 = (static_cast<int64_t>(slot) * rows.heads + h0) * rows_per_group;
  const int lane = threadIdx.x % 32;
  for (int64_t i = threadIdx.x / 32; i < nh * rows_per_group; i += kCodecThreads / 32) {
    const float* xr = x + (r0 + i) * n;
    float amax = 0.0f;
    for (int64_t j = lane; j < n; j += 32) amax = codec::amax_step(amax, xr[j]);
    for (int off = 16; off > 0; off >>= 1)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float s = codec::fp8_row_scale(amax);
    if (lane == 0) scales[r0 + i] = s;
    for (int64_t j = lane; j < n; j += 32) codes[(r0 + i) * n + j] = codec::fp8_encode(xr[j], s);
  }
}

/// One thread per element of the flat [rows, n] array.
__global__ void decode_kernel(const uint8_t* __restrict__ codes, const float* __restrict__ scales,
                              int64_t total, int64_t n, float* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += stride)
    y[i] = codec::fp8_decode(codes[i], scales[i / n]);
}

}  // namespace

void fp8_encode(const TensorView& x, const Fp8Rows& out, void* stream) {
  const int64_t rows = x.shape[0], n = x.shape[1];
  if (rows == 0) return;
  encode_kernel<<<grid_for(rows, 1), kCodecThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x.ptr<float>(), rows, n, out.codes.ptr<uint8_t>(), out.scales.ptr<float>());
  check_launch("codecs.fp8_encode kernel");
}

void fp8_decode(const Fp8Rows& in, const TensorView& y, void* stream) {
  const int64_t total = y.shape[0] * y.shape[1];
  if (total == 0) return;
  decode_kernel<<<grid_for(total, kCodecThreads), kCodecThreads, 0,
                  static_cast<cudaStream_t>(stream)>>>(
      in.codes.ptr<uint8_t>(), in.scales.ptr<float>(), total, y.shape[1], y.ptr<float>());
  check_launch("codecs.fp8_decode kernel");
}

void fp8_encode_flushed(const float* x, const FlushedRows& rows, int64_t rows_per_group, int64_t n,
                        const Fp8Rows& out, void* stream) {
  if (rows.batch == 0 || rows.heads == 0) return;
  const unsigned chunks = static_cast<unsigned>((rows.heads + kFlushedHeads - 1) / kFlushedHeads);
  encode_flushed_kernel<<<dim3(chunks, static_cast<unsigned>(rows.batch)),
                          kCodecThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, rows_per_group, n, rows, out.codes.ptr<uint8_t>(), out.scales.ptr<float>());
  check_launch("codecs.fp8_encode_flushed kernel");
}

}  // namespace replayssm::cuda::codecs
