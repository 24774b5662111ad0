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

/// One thread per four consecutive elements of a row (one curand4 draw).
void f16_sr_encode(const TensorView& x, const SrKey& key, const TensorView& y, void* stream);

/// Diagnostic for the tests: words[k] (k < count, a device buffer) = the k-th curand() of a
/// curandStatePhilox4_32_10_t after curand_init(seed, subsequence, offset). Synchronises.
void curand_philox_words(uint64_t seed, uint64_t subsequence, uint64_t offset, int64_t count,
                         uint32_t* words);

}  // namespace replayssm::cuda::codecs
