// NVFP4 encode/decode kernels (include/replayssm/codecs.h). The per-block math is
// src/common/codec_math.h, shared with the CPU backend, with the elements' E2M1 codes from
// per-block bounds instead of a division each (e2m1_bounds.h: the same codes); only the loop
// structure differs.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "common/codec_math.h"
#include "common/e2m1_bounds.h"
#include "cuda/codecs/codecs_cuda.h"
#include "cuda/codecs/flush_list.cuh"
#include "cuda/codecs/reduce.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/plan_env.h"
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
    scales[b] = codec::nvfp4_encode_block_bounded(v, s2, c);
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
  __shared__ float smem[kBlockMaxSmem];
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x)
    encode_group(x + g * group_elems, group_elems, codes + g * group_elems / 2,
                 scales + g * (group_elems / 16), globals + g, smem);
}

/// The 8 code bytes of a block as one 8-byte word (byte j = elements 2j, 2j + 1).
__device__ __forceinline__ uint2 pack_codes(const uint8_t* c) {
  uint2 p;
  p.x = c[0] | (c[1] << 8) | (c[2] << 16) | (static_cast<uint32_t>(c[3]) << 24);
  p.y = c[4] | (c[5] << 8) | (c[6] << 16) | (static_cast<uint32_t>(c[7]) << 24);
  return p;
}

/// Threads per block of the one-block-per-thread encode: a group's 16-element blocks rounded up
/// to whole warps, at most this many.
constexpr int kWideThreads = 1024;

/// Encodes group g of x with one 16-element block per thread (blockDim.x >= nblocks, whole
/// warps): 16 values in registers, the group amax over the block, then the block's codes from
/// its bounds (e2m1_bounds.h). 32 registers a thread (a few bytes of spill: the callers' loop
/// state) keep 3 blocks of 640 threads (Nano-4B heads) or 2 of 1024 (Qwen3.5-4B) per SM, whose
/// loads overlap each other's arithmetic. `red` is this call's reduction buffer (callers alternate
/// two between consecutive calls).
template <class T>
__device__ __forceinline__ void encode_group_per_thread(const T* __restrict__ x, int64_t g,
                                                        int64_t group_elems,
                                                        uint8_t* __restrict__ codes,
                                                        uint8_t* __restrict__ scales,
                                                        float* __restrict__ globals, float* red) {
  const int64_t nblocks = group_elems / 16, b = threadIdx.x;
  float v[16];
  float amax = 0.0f;
  if (b < nblocks) {
    load_block(x + g * group_elems + b * 16, v);
#pragma unroll
    for (int k = 0; k < 16; ++k) amax = codec::amax_step(amax, v[k]);
  }
  const float s2 = codec::nvfp4_global_scale(block_max(amax, red));
  if (threadIdx.x == 0) globals[g] = s2;
  if (b < nblocks) {
    uint8_t c[8];
    scales[g * nblocks + b] = codec::nvfp4_encode_block_bounded(v, s2, c);
    *reinterpret_cast<uint2*>(codes + (g * nblocks + b) * 8) = pack_codes(c);
  }
}

/// Grid (x: a run of heads_per_block heads, y: batch row), blockDim.x >= the group's 16-element
/// blocks (nblocks <= kWideThreads; groups 16-byte aligned): for a flushing row's slot, each of
/// the run's groups in turn (encode_group_per_thread). The work-list kernel's fallback for
/// batches it cannot list; its (row, head run) blocks of ordinary rows exit at once, which costs
/// an ordinary step ~14 µs at Nano-4B batch 256 (bench/NOTES.md "Session 31").
template <class T>
__global__ void __launch_bounds__(kWideThreads, 2)
    encode_flushed_wide_kernel(const T* __restrict__ x, int64_t group_elems, int heads_per_block,
                               FlushedRows rows, uint8_t* __restrict__ codes,
                               uint8_t* __restrict__ scales, float* __restrict__ globals) {
  __shared__ float smem[2][kBlockMaxSmem];
  const int32_t slot = rows.slot_ids[blockIdx.y];
  if (slot < 0 || slot >= rows.slots || rows.is_flush[slot] == 0) return;
  const int h0 = static_cast<int>(blockIdx.x) * heads_per_block;
  const int h1 = min(h0 + heads_per_block, static_cast<int>(rows.heads));
  for (int h = h0; h < h1; ++h)
    encode_group_per_thread(x, static_cast<int64_t>(slot) * rows.heads + h, group_elems, codes,
                            scales, globals, smem[h & 1]);
}

/// A fixed grid over a work list (flush_list.cuh): items i = blockIdx.x, + gridDim.x, ... of the
/// (flushing row, head) pairs, each one group with one 16-element block per thread (blockDim.x
/// >= nblocks, whole warps).
template <class T>
__global__ void __launch_bounds__(kWideThreads, 2)
    encode_flushed_list_kernel(const T* __restrict__ x, int64_t group_elems, FlushedRows rows,
                               uint8_t* __restrict__ codes, uint8_t* __restrict__ scales,
                               float* __restrict__ globals) {
  extern __shared__ int32_t list[];  // [batch]
  __shared__ float red[2][kBlockMaxSmem];
  __shared__ int32_t counts[32];
  const int32_t n = list_flush_rows(rows, list, counts);
  const int64_t items = static_cast<int64_t>(n) * rows.heads;
  int parity = 0;
  for (int64_t i = blockIdx.x; i < items; i += gridDim.x, parity ^= 1) {
    const int32_t row = list[i / rows.heads];
    const int64_t g = static_cast<int64_t>(rows.slot_ids[row]) * rows.heads + i % rows.heads;
    encode_group_per_thread(x, g, group_elems, codes, scales, globals, red[parity]);
  }
}

/// Grid (x: head, y: batch row): the group (slot, head) of a flushing row's slot, one block each,
/// for groups the wide kernel does not take (more than kWideThreads blocks, or unaligned).
template <class T>
__global__ void __launch_bounds__(kThreads)
    encode_flushed_kernel(const T* __restrict__ x, int64_t group_elems, FlushedRows rows,
                          uint8_t* __restrict__ codes, uint8_t* __restrict__ scales,
                          float* __restrict__ globals) {
  __shared__ float smem[kBlockMaxSmem];
  const int32_t slot = rows.slot_ids[blockIdx.y];
  if (slot < 0 || slot >= rows.slots || rows.is_flush[slot] == 0) return;
  const int64_t g = static_cast<int64_t>(slot) * rows.heads + blockIdx.x;
  const int64_t nblocks = group_elems / 16;
  encode_group(x + g * group_elems, group_elems, codes + g * group_elems / 2, scales + g * nblocks,
               globals + g, smem);
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

namespace {

/// The flushed encode's plan: the kernel (3: one 16-block per thread over a work list; 1: the
/// same over a grid of (head runs, rows), which batches of more than kMaxListRows take), heads
/// per block of kernel 1, and a cap on the work list's grid (0: none). Tuning runs and tests
/// only: RSSM_NVFP4_ENCODE_PLAN="kernel=1|3,hpb=N,grid=N"; other kernels are a ConfigError.
struct EncodePlan {
  int hpb = 4, kernel = 3, grid = 0;
};
EncodePlan encode_plan(int64_t heads) {
  EncodePlan p;
  for_each_plan_override("RSSM_NVFP4_ENCODE_PLAN", [&](const std::string& key, int v) {
    if (key == "hpb" && v > 0) p.hpb = v;
    if (key == "kernel") {
      check<ConfigError>(v == 1 || v == 3, "RSSM_NVFP4_ENCODE_PLAN: kernel=", v,
                         ", expected 1 (head runs) or 3 (work list)");
      p.kernel = v;
    }
    if (key == "grid" && v > 0) p.grid = v;
  });
  p.hpb = static_cast<int>(std::min<int64_t>(p.hpb, heads));
  return p;
}

template <class T>
void launch_encode_flushed(const T* x, const FlushedRows& rows, int64_t group_elems,
                           uint8_t* codes, uint8_t* blocks, float* globals, cudaStream_t s) {
  const int64_t nblocks = group_elems / 16;
  if (nblocks == 0) return;  // empty groups (rows of 0 elements)
  // Every group 16-byte aligned: the base, and the group stride (n is a multiple of 16).
  const bool aligned =
      reinterpret_cast<uintptr_t>(x) % 16 == 0 && group_elems * int64_t{sizeof(T)} % 16 == 0;
  const EncodePlan p = encode_plan(rows.heads);
  const dim3 runs(static_cast<unsigned>((rows.heads + p.hpb - 1) / p.hpb),
                  static_cast<unsigned>(rows.batch));
  const int threads = static_cast<int>((nblocks + 31) / 32 * 32);
  if (p.kernel == 3 && nblocks <= kWideThreads && aligned && rows.batch <= kMaxListRows) {
    const size_t smem = sizeof(int32_t) * rows.batch;
    const int grid =
        list_grid(encode_flushed_list_kernel<T>, threads, int64_t{rows.batch} * rows.heads, p.grid);
    encode_flushed_list_kernel<<<grid, threads, smem, s>>>(
        x, group_elems, rows, codes, blocks, globals);
    return;
  }
  if (nblocks <= kWideThreads && aligned) {
    encode_flushed_wide_kernel<<<runs, threads, 0, s>>>(x, group_elems, p.hpb, rows, codes,
                                                         blocks, globals);
    return;
  }
  const dim3 grid(static_cast<unsigned>(rows.heads), static_cast<unsigned>(rows.batch));
  encode_flushed_kernel<<<grid, kThreads, 0, s>>>(x, group_elems, rows, codes, blocks, globals);
}

}  // namespace

void nvfp4_encode_flushed(const void* x, DType x_dtype, const FlushedRows& rows,
                          int64_t group_rows, int64_t n, const Nvfp4& out, void* stream) {
  if (rows.batch == 0 || rows.heads == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  auto* codes = out.codes.ptr<uint8_t>();
  auto* blocks = out.block_scales.ptr<uint8_t>();
  auto* globals = out.global_scales.ptr<float>();
  check<DTypeError>(x_dtype == DType::kF16 || x_dtype == DType::kF32,
                    "codecs.nvfp4_encode_flushed: checkpoint dtype ", dtype_name(x_dtype),
                    ", expected float32 or float16");
  if (x_dtype == DType::kF16)
    launch_encode_flushed(static_cast<const __half*>(x), rows, group_rows * n, codes, blocks,
                          globals, s);
  else
    launch_encode_flushed(static_cast<const float*>(x), rows, group_rows * n, codes, blocks,
                          globals, s);
  check_launch("codecs.nvfp4_encode_flushed kernel");
}

}  // namespace replayssm::cuda::codecs
