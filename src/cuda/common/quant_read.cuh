// Quantised read copies in the replay kernels (precision.h: fp32/nvfp4, fp32/fp8): tag types for
// the tile element, its bits and the bytes of a lane's chunk, and the dot product of one chunk
// with float32 columns. The products are taken in float32 from exactly decoded elements and the
// scales applied per 16-element block (NVFP4) or per row (FP8) after the sums, so a chunk's
// result equals Σ decode(code_i)·c_i up to float32 rounding (codecs.h decodes element by element
// and rounds each scaled value; here the scale multiplies the sum once).
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "common/codec_math.h"

namespace replayssm::cuda {

/// Two E2M1 elements in one byte: the even element in the low nibble (codecs::Nvfp4 codes).
struct nvfp4x2 {
  uint8_t bits;
};
/// One E4M3 element (codecs::Fp8Rows codes).
struct e4m3 {
  uint8_t bits;
};

/// Bits of storage per state element: 32 / 16 for float / 16-bit types, 8 for e4m3, 4 for nvfp4.
template <class T>
constexpr int kStateBits = 8 * static_cast<int>(sizeof(T));
template <>
constexpr int kStateBits<nvfp4x2> = 4;
/// Whether T is a quantised read copy (scaled codes: read-only in the kernels).
template <class T>
constexpr bool kQuantState = kStateBits<T> <= 8;
/// Bytes of the chunk a lane copies and reads at once: 16, but 8 for NVFP4 (16 elements: one
/// block and its one scale per lane, and half the columns of C in registers).
template <class T>
constexpr int kChunkBytes = 16;
template <>
constexpr int kChunkBytes<nvfp4x2> = 8;

/// The 16 elements (one block) of an 8-byte NVFP4 chunk as floats, element i in e[i]: each nibble
/// becomes the float16 whose exponent and mantissa bits are the nibble's (exact: E2M1 value ·
/// 2^-14, signed), widened exactly to float.
__device__ __forceinline__ void nvfp4_chunk_values(const uint2& q, float* e) {
  const uint32_t w[2] = {q.x, q.y};
#pragma unroll
  for (int k = 0; k < 2; ++k)  // word k: elements 8k .. 8k + 7, nibble i = element 8k + i
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t y = w[k] >> (4 * i);  // nibble i in bits 0..3, nibble i + 4 in 16..19
      const uint32_t h = ((y << 9) & 0x0e000e00u) | ((y << 12) & 0x80008000u);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      e[8 * k + i] = f.x;
      e[8 * k + i + 4] = f.y;
    }
}

/// Σ_i E2M1(q_i)·c[i] · 2^-14 over the 16 elements (one block) of an 8-byte NVFP4 chunk, summed
/// in the order nibble pairs (i, i + 4) of word 0, then of word 1.
__device__ __forceinline__ float nvfp4_block_dot(const uint2& q, const float* c) {
  float e[16];
  nvfp4_chunk_values(q, e);
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < 2; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc = __fmaf_rn(e[8 * k + i], c[8 * k + i], acc);
      acc = __fmaf_rn(e[8 * k + i + 4], c[8 * k + i + 4], acc);
    }
  return acc;
}

/// 2^14: undoes the float16 placement of nvfp4_block_dot (callers scale c by it, exactly).
constexpr float kNvfp4DotScale = 16384.0f;

/// Value of an E4M3 code through the hardware conversion to float16 (exact; NaN codes give NaN,
/// as codec::e4m3_decode).
__device__ __forceinline__ float e4m3_to_f32(uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(__half(h));
}

/// The NVFP4 block's contribution Σ decode(q_i)·c[i] / s2 given its E4M3 scale code, with c
/// already scaled by kNvfp4DotScale (the global scale s2 is applied by the caller).
__device__ __forceinline__ float nvfp4_block(const uint2& q, uint8_t scale, const float* c) {
  return __fmul_rn(e4m3_to_f32(scale), nvfp4_block_dot(q, c));
}

/// The 16 elements of a 16-byte FP8 chunk as floats, element i in e[i] (hardware E4M3 -> float16
/// conversion, exact; NaN codes give NaN).
__device__ __forceinline__ void e4m3_chunk_values(const uint4& q, float* e) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(w[k] >> (16 * j)), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&hr));
      e[4 * k + 2 * j] = f.x;
      e[4 * k + 2 * j + 1] = f.y;
    }
}

/// Σ E4M3(q_i)·c[i] over the 16 elements of a 16-byte FP8 chunk, in element order (the row scale
/// is applied by the caller).
__device__ __forceinline__ float e4m3_chunk(const uint4& q, const float* c) {
  float e[16];
  e4m3_chunk_values(q, e);
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) acc = __fmaf_rn(e[i], c[i], acc);
  return acc;
}

}  // namespace replayssm::cuda
