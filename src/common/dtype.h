// Scalar conversions between float32 and the 16-bit storage formats, shared by the CPU backend,
// the oracle's input rounding and the tests. Round to nearest even; NaN stays NaN.
#pragma once
#include <cstdint>
#include <cstring>

#include "replayssm/tensor.h"

namespace replayssm {

inline float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

/// The value of element `offset` (in elements) of a CPU view of dtype f32, bf16 or f64, as float.
inline float load_f32(const TensorView& t, int64_t offset) {
  switch (t.dtype) {
    case DType::kF32: return static_cast<const float*>(t.data)[offset];
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(t.data)[offset]);
    case DType::kF64: return static_cast<float>(static_cast<const double*>(t.data)[offset]);
    default: return 0.0f;  // callers validate dtypes first
  }
}

/// Store a float into element `offset` of a CPU view of dtype f32 or bf16.
inline void store_f32(const TensorView& t, int64_t offset, float v) {
  if (t.dtype == DType::kBF16)
    static_cast<uint16_t*>(t.data)[offset] = f32_to_bf16(v);
  else
    static_cast<float*>(t.data)[offset] = v;
}

}  // namespace replayssm
