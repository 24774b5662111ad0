// The CUDA backend of the codecs (include/replayssm/codecs.h): host launchers that enqueue one
// kernel each on `stream` (a cudaStream_t; nullptr = the default stream). Arguments are validated
// by the caller (src/common/codecs.cpp) and must be CUDA tensors of the documented shapes. The
// per-element math is src/common/codec_math.h, the same source as the CPU backend; the random
// words of the stochastic rounding come from cuRAND's Philox4_32_10 device generator.
#pragma once
#include <cstdint>

#include "replayssm/codecs.h"
#include "replayssm/tensor.h"

namespace replayssm::cuda::codecs {

using Nvfp4 = ::replayssm::codecs::Nvfp4;
using Fp8Rows = ::replayssm::codecs::Fp8Rows;
using SrKey = ::replayssm::codecs::SrKey;

/// One thread block per group of group_rows rows: amax, global scale, then one 16-element block
/// per thread.
void nvfp4_encode(const TensorView& x, const Nvfp4& out, void* stream);
/// One thread per code byte (two elements).
void nvfp4_decode(const Nvfp4& in, const TensorView& y, void* stream);

/// One thread block per row: amax, scale, then the codes.
void fp8_encode(const TensorView& x, const Fp8Rows& out, void* stream);
void fp8_decode(const Fp8Rows& in, const TensorView& y, void* stream);

/// The rows of a replay step whose slots flush this step (read on the device, so that one CUDA
/// graph serves every mix of rows): batch row b encodes when s = slot_ids[b] is in [0, slots) and
/// is_flush[s] != 0; a slot holds `heads` groups (one (slot, head) each).
struct FlushedRows {
  const int32_t* slot_ids = nullptr;  ///< [batch]
  const int8_t* is_flush = nullptr;   ///< [slots]
  int32_t batch = 0, slots = 0, heads = 0;
};

/// Derives a split mode's NVFP4 read copy after a flush: for every flushing slot s and head h,
/// group g = s * heads + h of x ([slots * heads, group_rows * n], the new checkpoint: float32, or
/// float16 for fp16sr/nvfp4 — x_dtype kF32 or kF16, 16-byte aligned) is encoded exactly as
/// nvfp4_encode encodes its values widened to float32 into group g of `out` (group_rows as
/// out's). Other slots are not touched. One 16-element block per thread, a thread block per
/// group; a fixed grid of about the resident blocks takes the (flushing row, head) items of a
/// work list each block builds from slot_ids and is_flush (up to 8192 rows; beyond, a grid of
/// (head runs, rows)); groups of more than 1024 blocks of 16, or an x that is not 16-byte
/// aligned, take 256-thread blocks. `out.codes` must be 8-byte aligned (a block's codes are
/// stored as one 8-byte word).
void nvfp4_encode_flushed(const void* x, DType x_dtype, const FlushedRows& rows,
                          int64_t group_rows, int64_t n, const Nvfp4& out, void* stream);
/// The FP8 read copy likewise: rows g * rows_per_group .. of x [rows, n] as fp8_encode does
/// (the same work list, one warp per row).
void fp8_encode_flushed(const float* x, const FlushedRows& rows, int64_t rows_per_group, int64_t n,
                        const Fp8Rows& out, void* stream);

/// One thread per four consecutive elements of a row (one curand4 draw).
void f16_sr_encode(const TensorView& x, const SrKey& key, const TensorView& y, void* stream);

/// Diagnostic for the tests: words[k] (k < count, a device buffer) = the k-th curand() of a
/// curandStatePhilox4_32_10_t after curand_init(seed, subsequence, offset). Synchronises.
void curand_philox_words(uint64_t seed, uint64_t subsequence, uint64_t offset, int64_t count,
                         uint32_t* words);

}  // namespace replayssm::cuda::codecs
