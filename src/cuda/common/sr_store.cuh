// Checkpoint stores with stochastic rounding (the fp16sr/fp16sr state mode, precision.h): the
// fused form of codecs::f16_sr_encode inside the kernels that write a float16 checkpoint. The
// random words are the codec's — cuRAND's Philox4_32_10 device generator with key = the slot's
// seed, subsequence (slot << 32) | step and offset = the element's index in its slot's state
// ((head * rows + row) * n + column) — and the rounding is codec_math.h's f16_sr, so a checkpoint
// written here is the codec's encoding of the same float32 values, bit for bit.
#pragma once
#include <curand_kernel.h>

#include <cstdint>
#include <type_traits>

#include "common/codec_math.h"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/sr_keys.h"

namespace replayssm::cuda {

/// What one slot's SR stores draw from; `base` null: round to nearest even.
struct SrSlot {
  unsigned long long seed = 0, subsequence = 0;
  const void* base = nullptr;  ///< the slot's first state element: indices count from here
};

/// The SR key of `slot` whose state starts at `base` (of the kernel's state type); reads the
/// seed and step only when the pool has SR keys.
__device__ __forceinline__ SrSlot sr_slot(const SrKeysDev& keys, int slot, const void* base) {
  SrSlot s;
  if (keys.seeds == nullptr) return s;
  s.seed = static_cast<unsigned long long>(keys.seeds[slot]);
  s.subsequence = (static_cast<unsigned long long>(static_cast<uint32_t>(slot)) << 32) |
                  static_cast<uint32_t>(keys.steps[slot]);
  s.base = base;
  return s;
}

/// 16 / sizeof(T) elements rounded from in[] to T as one 16-byte word, for the slot state address
/// p: a float16 state of a slot with SR keys is rounded stochastically (two Philox blocks; p's
/// index in the slot is a multiple of 8 wherever the kernels write 16-byte chunks of rows of 64 or
/// 128 elements), anything else to nearest even.
template <class T>
__device__ __forceinline__ uint4 pack16_state(const T* p, const float* in, const SrSlot& sr) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  if constexpr (std::is_same_v<T, f16>) {
    if (sr.base != nullptr) {
      // The index is a multiple of 8; saying so (& ~7) lets the compiler see that the words start
      // a Philox block, so curand4 needs no next block: two Philox evaluations per 8 elements.
      const auto index = static_cast<unsigned long long>(p - static_cast<const f16*>(sr.base)) & ~7ull;
      curandStatePhilox4_32_10_t st;
      curand_init(sr.seed, sr.subsequence, index, &st);
      const uint4 a = curand4(&st), b = curand4(&st);
      const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      detail::Pack<f16, 8> pk;
#pragma unroll
      for (int v = 0; v < 8; ++v) pk.e[v] = __ushort_as_half(codec::f16_sr(in[v], w[v]));
      return pk.raw;
    }
  }
  detail::Pack<T, V> pk;
#pragma unroll
  for (int v = 0; v < V; ++v) pk.e[v] = from_f32<T>(in[v]);
  return pk.raw;
}

/// store16_stream of a slot's state chunk at p, rounded as pack16_state.
template <class T>
__device__ __forceinline__ void store16_state(T* p, const float* in, const SrSlot& sr) {
  __stcs(reinterpret_cast<uint4*>(p), pack16_state(p, in, sr));
}

}  // namespace replayssm::cuda
