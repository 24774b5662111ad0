// What the decode attention kernels (attention.cu, attention_mma.cu) share: a row's position and
// the output write of one query head (optional sigmoid gate, bf16).
#pragma once
#include <cuda_bf16.h>

#include "cuda/kernels.h"
#include "cuda/reduce.cuh"

namespace replayssm::engine::cuda {

/// Position of row b's token (Attention::row_pos when set, else its slot's position).
__device__ __forceinline__ int32_t row_position(const Attention& p, int64_t b, int32_t slot) {
  return p.row_pos ? p.row_pos[b] : p.positions[slot];
}

/// Writes element d of query head h of row b from its normalised output o (gate applied here).
__device__ __forceinline__ void write_out(const Attention& p, int64_t b, int h, int d, float o) {
  if (p.gate) o *= sigmoid(p.proj[b * p.ld + static_cast<int64_t>(h) * 2 * p.hd + p.hd + d]);
  p.out[(b * p.nh + h) * p.hd + d] = __float2bfloat16_rn(o);
}

}  // namespace replayssm::engine::cuda
