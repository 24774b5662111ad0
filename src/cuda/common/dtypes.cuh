// Device-side element conversions and vector loads/stores. Arithmetic is always float32; 16-bit
// storage (bf16, fp16) is widened exactly on load and rounded to nearest even on store.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace replayssm::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(f16 v) { return __half2float(v); }

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ f16 from_f32<f16>(float v) {
  return __float2half_rn(v);
}

namespace detail {
template <int Bytes>
struct Raw;
template <>
struct Raw<4> {
  using type = uint32_t;
};
template <>
struct Raw<8> {
  using type = uint2;
};
template <>
struct Raw<16> {
  using type = uint4;
};

/// V elements of T packed in one register-resident word of V * sizeof(T) bytes.
template <class T, int V>
union Pack {
  typename Raw<V * sizeof(T)>::type raw;
  T e[V];
};
}  // namespace detail

/// Loads V consecutive elements of T (V * sizeof(T) a multiple of 4 bytes, the pointer aligned to
/// min(16, V * sizeof(T))) into out[0..V) as float, in 16-byte (or smaller) vector loads.
template <class T, int V>
__device__ __forceinline__ void load_vec(const T* p, float* out) {
  constexpr int kBytes = V * static_cast<int>(sizeof(T));
  if constexpr (kBytes <= 16) {
    detail::Pack<T, V> pk;
    pk.raw = *reinterpret_cast<const typename detail::Raw<kBytes>::type*>(p);
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = to_f32(pk.e[v]);
  } else {
    constexpr int kPer = 16 / static_cast<int>(sizeof(T));
#pragma unroll
    for (int i = 0; i < V / kPer; ++i) load_vec<T, kPer>(p + i * kPer, out + i * kPer);
  }
}

/// Raw 16-byte chunks: loaded early and kept packed (16-bit state takes half the registers of its
/// float form), unpacked one row at a time.
template <class T>
__device__ __forceinline__ uint4 load16_raw_stream(const T* p) {
  return __ldcs(reinterpret_cast<const uint4*>(p));
}

template <class T>
__device__ __forceinline__ void unpack16(const uint4& raw, float* out) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  detail::Pack<T, V> pk;
  pk.raw = raw;
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = to_f32(pk.e[v]);
}

/// Streaming (evict-first) 16-byte load of 16 / sizeof(T) elements: for data touched once, such
/// as the recurrent state, so that it does not push reused data (B, C, rings) out of L2.
template <class T>
__device__ __forceinline__ void load16_stream(const T* p, float* out) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  detail::Pack<T, V> pk;
  pk.raw = __ldcs(reinterpret_cast<const uint4*>(p));
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = to_f32(pk.e[v]);
}

/// Stores V elements rounded from in[] to T as one vector word (V * sizeof(T) of 4, 8 or 16 bytes;
/// the pointer aligned to it).
template <class T, int V>
__device__ __forceinline__ void store_vec(T* p, const float* in) {
  detail::Pack<T, V> pk;
#pragma unroll
  for (int v = 0; v < V; ++v) pk.e[v] = from_f32<T>(in[v]);
  *reinterpret_cast<typename detail::Raw<V * sizeof(T)>::type*>(p) = pk.raw;
}

/// Streaming 16-byte store of 16 / sizeof(T) elements rounded from in[].
template <class T>
__device__ __forceinline__ void store16_stream(T* p, const float* in) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  detail::Pack<T, V> pk;
#pragma unroll
  for (int v = 0; v < V; ++v) pk.e[v] = from_f32<T>(in[v]);
  __stcs(reinterpret_cast<uint4*>(p), pk.raw);
}

}  // namespace replayssm::cuda
