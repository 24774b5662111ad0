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

/// The merged result of query head h of row b, element d, from one chunk of positions: zero for
/// an unused token (seen false; the combine kernel's job when split), O / L when the chunk is the
/// whole context (splits 1), else the chunk's partials (O, and its max M and sum L once per row).
__device__ __forceinline__ void store_query(const Attention& p, int64_t b, int h, int d, bool seen,
                                            int split, float M, float L, float O) {
  if (!seen) {
    if (p.splits == 1) p.out[(b * p.nh + h) * p.hd + d] = __float2bfloat16_rn(0.0f);
  } else if (p.splits == 1) {
    write_out(p, b, h, d, O / L);
  } else {
    const int64_t part = (b * p.nh + h) * p.splits + split;
    p.part_acc[part * p.hd + d] = O;
    if (d == 0) p.part_ml[2 * part] = M, p.part_ml[2 * part + 1] = L;
  }
}

}  // namespace replayssm::engine::cuda
