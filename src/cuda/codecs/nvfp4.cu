// NVFP4 encode/decode kernels (include/replayssm/codecs.h). The per-block math is
// src/common/codec_math.h, shared with the CPU backend; only the loop structure differs.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/codec_math.h"
#include "cuda/codecs/codecs_cuda.h"
#include "cuda/codecs/reduce.cuh"
#include "cuda/common/check.cuh"
#include "replayssm/errors.h"

namespace replayssm::cuda::codecs {
namespace {

constexpr int kThreads = kCodecThreads;

/// x[i] widened to float (exact for float16).
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

/// The 16 values of one NVFP4 block from 16-byte aligned `src`, widened to float.
__device__ __forceinline__ void load_block(const float* src, float* v) {
  const float4* q = reinterpret_cast<const float4*>(src);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float4 f = q[k];
    v[4 * k] = f.x, v[4 * k + 1] = f.y, v[4 * k + 2] = f.z, v[4 * k + 3] = f.w;
  }
}
__device__ __forceinline__ void load_block(const __half* src, float* v) {
  const uint4* q = reinterpret_cast<const uint4*>(src);
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const uint4 u = q[k];
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[j]));
      v[8 * k + 2 * j] = f.x, v[8 * k + 2 * j + 1] = f.y;
    }
  }
}

/// Encodes one group of group_elems contiguous floats (all kThreads threads of the block call it;
/// `smem` is reused after it returns).
template <class T>
__device__ __forceinline__ void encode_group(const T* __restrict__ xg, int64_t group_elems,
                                             uint8_t* __restrict__ codes,
                                             uint8_t* __restrict__ scales, float* global,
                                             float* smem) {
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < group_elems; i += kThreads)
    amax = codec::amax_step(amax, to_f32(xg[i]));
  const float s2 = codec::nvfp4_global_scale(block_max(amax, smem));
  if (threadIdx.x == 0) *global = s2;
  const int64_t nblocks = group_elems / 16;
  for (int64_t b = threadIdx.x; b < nblocks; b += kThreads) {
    float v[16];
    if ((reinterpret_cast<uintptr_t>(xg + b * 16) & 15) == 0) {
      load_block(xg + b * 16, v);
    } else {
#pragma unroll
      for (int k = 0; k < 16; ++k) v[k] = to_f32(xg[b * 16 + k]);
    }
    uint8_t c[8];
    scales[b] = codec::nvfp4_encode_block(v, s2, c);
    uint8_t* dst = codes + b * 8;
#pragma unroll
    for (int k = 0; k < 8; ++k) dst[k] = c[k];
  }
  __syncthreads();  // smem is reused by the next group
}

/// Grid: one block per group of group_rows rows (group_elems = group_rows * n contiguous floats).
__global__ void __launch_bounds__(kThreads)
    encode_kernel(const float* __restrict__ x, int64_t groups, int64_t group_elems,
                  uint8_t* __restrict__ codes, uint8_t* __restrict__ scales,
                  float* __restrict__ globals) {
  __shared__ float smem[kThreads / 32];
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x)
    encode_group(x + g * group_elems, group_elems, codes + g * group_elems / 2,
                 scales + g * (group_elems / 16), globals + g, smem);
}

/// Encodes one group whose 16-element blocks all fit in the block's registers (nblocks <=
/// kThreads * kResidentBlocks, group 16-byte aligned): every value read once, all loads in
/// flight together, the group amax from the registers.
constexpr int kResidentBlocks = 4;
template <class T>
__device__ __forceinline__ void encode_group_resident(const T* __restrict__ xg,
                                                      int64_t nblocks, uint8_t* __restrict__ codes,
                                                      uint8_t* __restrict__ scales, float* global,
                                                      float* smem) {
  float v[kResidentBlocks][16];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kResidentBlocks; ++j) {
    const int64_t b = threadIdx.x + static_cast<int64_t>(j) * kThreads;
    if (b >= nblocks) break;
    load_block(xg + b * 16, v[j]);
  }
#pragma unroll
  for (int j = 0; j < kResidentBlocks; ++j) {
    if (threadIdx.x + static_cast<int64_t>(j) * kThreads >= nblocks) break;
#pragma unroll
    for (int k = 0; k < 16; ++k) amax = codec::amax_step(amax, v[j][k]);
  }
  const float s2 = codec::nvfp4_global_scale(block_max(amax, smem));
  if (threadIdx.x == 0) *global = s2;
#pragma unroll
  for (int j = 0; j < kResidentBlocks; ++j) {
    const int64_t b = threadIdx.x + static_cast<int64_t>(j) * kThreads;
    if (b >= nblocks) break;
    uint8_t c[8];
    scales[b] = codec::nvfp4_encode_block(v[j], s2, c);
    uint2 packed;
    packed.x = c[0] | (c[1] << 8) | (c[2] << 16) | (static_cast<uint32_t>(c[3]) << 24);
    packed.y = c[4] | (c[5] << 8) | (c[6] << 16) | (static_cast<uint32_t>(c[7]) << 24);
    *reinterpret_cast<uint2*>(codes + b * 8) = packed;
  }
}

/// Grid (x: head, y: batch row): the group (slot, head) of a flushing row's slot, one block each
/// (a row that flushes alone among ordinary ones is done in about one group's time).
template <class T>
__global__ void __launch_bounds__(kThreads)
    encode_flushed_kernel(const T* __restrict__ x, int64_t group_elems, FlushedRows rows,
                          uint8_t* __restrict__ codes, uint8_t* __restrict__ scales,
                          float* __restrict__ globals) {
  __shared__ float smem[kThreads / 32];
  const int32_t slot = rows.slot_ids[blockIdx.y];
  if (slot < 0 || slot >= rows.slots || rows.is_flush[slot] == 0) return;
  const int64_t g = static_cast<int64_t>(slot) * rows.heads + blockIdx.x;
  const T* xg = x + g * group_elems;
  const int64_t nblocks = group_elems / 16;
  if (nblocks <= static_cast<int64_t>(kThreads) * kResidentBlocks &&
      (reinterpret_cast<uintptr_t>(xg) & 15) == 0)
    encode_group_resident(xg, nblocks, codes + g * group_elems / 2, scales + g * nblocks,
                          globals + g, smem);
  else
    encode_group(xg, group_elems, codes + g * group_elems / 2, scales + g * nblocks, globals + g,
                 smem);
}

/// One thread per code byte (elements 2j, 2j+1 of the flat [rows, n] array).
__global__ void decode_kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                              const float* __restrict__ globals, int64_t bytes, int64_t n,
                              int64_t group_rows, float* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < bytes;
       j += stride) {
    const int64_t e = 2 * j, r = e / n;
    const float sb = codec::nvfp4_block_scale(scales[e / 16], globals[r / group_rows]);
    const uint8_t c = codes[j];
    y[e] = codec::nvfp4_decode(c & 0xf, sb);
    y[e + 1] = codec::nvfp4_decode(c >> 4, sb);
  }
}

}  // namespace

void nvfp4_encode(const TensorView& x, const Nvfp4& out, void* stream) {
  const int64_t rows = x.shape[0], n = x.shape[1], groups = rows / out.group_rows;
  if (groups == 0) return;
  const int grid = grid_for(groups, 1);
  encode_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x.ptr<float>(), groups, out.group_rows * n, out.codes.ptr<uint8_t>(),
      out.block_scales.ptr<uint8_t>(), out.global_scales.ptr<float>());
  check_launch("codecs.nvfp4_encode kernel");
}

void nvfp4_decode(const Nvfp4& in, const TensorView& y, void* stream) {
  const int64_t rows = y.shape[0], n = y.shape[1], bytes = rows * n / 2;
  if (bytes == 0) return;
  decode_kernel<<<grid_for(bytes, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      in.codes.ptr<uint8_t>(), in.block_scales.ptr<uint8_t>(), in.global_scales.ptr<float>(), bytes,
      n, in.group_rows, y.ptr<float>());
  check_launch("codecs.nvfp4_decode kernel");
}

void nvfp4_encode_flushed(const void* x, DType x_dtype, const FlushedRows& rows,
                          int64_t group_rows, int64_t n, const Nvfp4& out, void* stream) {
  if (rows.batch == 0 || rows.heads == 0) return;
  const dim3 grid(static_cast<unsigned>(rows.heads), static_cast<unsigned>(rows.batch));
  const auto s = static_cast<cudaStream_t>(stream);
  auto* codes = out.codes.ptr<uint8_t>();
  auto* blocks = out.block_scales.ptr<uint8_t>();
  auto* globals = out.global_scales.ptr<float>();
  check<DTypeError>(x_dtype == DType::kF16 || x_dtype == DType::kF32,
                    "codecs.nvfp4_encode_flushed: checkpoint dtype ", dtype_name(x_dtype),
                    ", expected float32 or float16");
  if (x_dtype == DType::kF16)
    encode_flushed_kernel<<<grid, kThreads, 0, s>>>(static_cast<const __half*>(x), group_rows * n,
                                                     rows, codes, blocks, globals);
  else
    encode_flushed_kernel<<<grid, kThreads, 0, s>>>(static_cast<const float*>(x), group_rows * n,
                                                     rows, codes, blocks, globals);
  check_launch("codecs.nvfp4_encode_flushed kernel");
}

}  // namespace replayssm::cuda::codecs
