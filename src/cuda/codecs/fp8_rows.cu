// FP8 E4M3 per-row-scale encode/decode kernels (include/replayssm/codecs.h). The per-element math
// is src/common/codec_math.h, shared with the CPU backend.
#include <cuda_runtime.h>

#include <string>

#include "common/codec_math.h"
#include "cuda/codecs/codecs_cuda.h"
#include "cuda/codecs/flush_list.cuh"
#include "cuda/codecs/reduce.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/plan_env.h"

namespace replayssm::cuda::codecs {
namespace {

/// Grid: one block per row (grid-stride over rows).
__global__ void __launch_bounds__(kCodecThreads)
    encode_kernel(const float* __restrict__ x, int64_t rows, int64_t n, uint8_t* __restrict__ codes,
                  float* __restrict__ scales) {
  __shared__ float smem[kBlockMaxSmem];
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

/// Encodes the rows_per_group rows of n floats from row r0 of x, one warp per row (all
/// kCodecThreads threads call it; warp-level only, no barrier). Rows of n <= 128 (a float4 per
/// lane) are loaded kRowsAtOnce at a time before any is encoded, so a warp waits for memory once
/// per batch of rows rather than once per row.
constexpr int kRowsAtOnce = 8;
__device__ __forceinline__ void encode_group_rows(const float* __restrict__ x, int64_t r0,
                                                  int64_t rows_per_group, int64_t n,
                                                  uint8_t* __restrict__ codes,
                                                  float* __restrict__ scales) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  constexpr int kWarps = kCodecThreads / 32;
  const bool vec = n <= 128 && n % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  for (int64_t i0 = warp; i0 < rows_per_group; i0 += kWarps * kRowsAtOnce) {
    if (vec) {
      float4 v[kRowsAtOnce];
      const bool mine = lane * 4 < n;
#pragma unroll
      for (int u = 0; u < kRowsAtOnce; ++u) {
        const int64_t i = i0 + u * kWarps;
        v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < rows_per_group && mine)
          v[u] = *reinterpret_cast<const float4*>(x + (r0 + i) * n + lane * 4);
      }
#pragma unroll
      for (int u = 0; u < kRowsAtOnce; ++u) {
        const int64_t i = i0 + u * kWarps;
        if (i >= rows_per_group) break;  // uniform over the warp
        float amax = codec::amax_step(codec::amax_step(0.0f, v[u].x), v[u].y);
        amax = codec::amax_step(codec::amax_step(amax, v[u].z), v[u].w);
        for (int off = 16; off > 0; off >>= 1)
          amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const float s = codec::fp8_row_scale(amax);
        if (lane == 0) scales[r0 + i] = s;
        if (mine)
          *reinterpret_cast<uint32_t*>(codes + (r0 + i) * n + lane * 4) =
              codec::fp8_encode(v[u].x, s) | (codec::fp8_encode(v[u].y, s) << 8) |
              (codec::fp8_encode(v[u].z, s) << 16) |
              (static_cast<uint32_t>(codec::fp8_encode(v[u].w, s)) << 24);
      }
      continue;
    }
    for (int64_t i = i0; i < rows_per_group && i < i0 + kWarps * kRowsAtOnce; i += kWarps) {
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
}

/// Grid (x: head, y: batch row): the group (slot, head) of a flushing row's slot; the work
/// list's fallback for batches of more than kMaxListRows.
__global__ void __launch_bounds__(kCodecThreads)
    encode_flushed_kernel(const float* __restrict__ x, int64_t rows_per_group, int64_t n,
                          FlushedRows rows, uint8_t* __restrict__ codes,
                          float* __restrict__ scales) {
  const int32_t slot = rows.slot_ids[blockIdx.y];
  if (slot < 0 || slot >= rows.slots || rows.is_flush[slot] == 0) return;
  encode_group_rows(x, (static_cast<int64_t>(slot) * rows.heads + blockIdx.x) * rows_per_group,
                    rows_per_group, n, codes, scales);
}

/// A fixed grid over a work list (flush_list.cuh): items i = blockIdx.x, + gridDim.x, ... of the
/// (flushing row, head) pairs, each one group.
__global__ void __launch_bounds__(kCodecThreads)
    encode_flushed_list_kernel(const float* __restrict__ x, int64_t rows_per_group, int64_t n,
                               FlushedRows rows, uint8_t* __restrict__ codes,
                               float* __restrict__ scales) {
  extern __shared__ int32_t list[];  // [batch]
  __shared__ int32_t counts[32];
  const int64_t items = static_cast<int64_t>(list_flush_rows(rows, list, counts)) * rows.heads;
  for (int64_t i = blockIdx.x; i < items; i += gridDim.x) {
    const int64_t g = static_cast<int64_t>(rows.slot_ids[list[i / rows.heads]]) * rows.heads +
                      i % rows.heads;
    encode_group_rows(x, g * rows_per_group, rows_per_group, n, codes, scales);
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
  const auto s = static_cast<cudaStream_t>(stream);
  // Tuning runs and tests only: RSSM_FP8_ENCODE_PLAN="list=0" takes the per-(row, head) grid,
  // "grid=N" caps the work list's grid.
  int use_list = 1, cap = 0;
  for_each_plan_override("RSSM_FP8_ENCODE_PLAN", [&](const std::string& key, int v) {
    if (key == "list") use_list = v;
    if (key == "grid" && v > 0) cap = v;
  });
  if (use_list && rows.batch <= kMaxListRows) {
    const size_t smem = sizeof(int32_t) * rows.batch;
    const int grid = list_grid(encode_flushed_list_kernel, kCodecThreads,
                               int64_t{rows.batch} * rows.heads, cap);
    encode_flushed_list_kernel<<<grid, kCodecThreads, smem, s>>>(
        x, rows_per_group, n, rows, out.codes.ptr<uint8_t>(), out.scales.ptr<float>());
  } else {
    encode_flushed_kernel<<<dim3(static_cast<unsigned>(rows.heads),
                                 static_cast<unsigned>(rows.batch)),
                            kCodecThreads, 0, s>>>(x, rows_per_group, n, rows,
                                                   out.codes.ptr<uint8_t>(),
                                                   out.scales.ptr<float>());
  }
  check_launch("codecs.fp8_encode_flushed kernel");
}

}  // namespace replayssm::cuda::codecs
