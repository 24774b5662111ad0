// Device-side initialisation and checks of benchmark buffers: counter-based random fills (no host
// round trip for multi-GB pools) and a count of non-finite values (outputs are NaN-poisoned before
// a measurement; every element must be finite after it).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "replayssm/tensor.h"

namespace replayssm::bench {

/// n elements of dtype t (float32, float16 or bfloat16) set to uniform values in [lo, hi), a pure
/// function of (seed, index).
void fill_uniform(void* data, DType t, int64_t n, float lo, float hi, uint64_t seed,
                  cudaStream_t stream);

/// n elements (float32, float16 or bfloat16) set to NaN (all bits set).
void fill_nan(void* data, DType t, int64_t n, cudaStream_t stream);

/// Number of NaN or infinite values among n elements of dtype t; synchronises the stream.
int64_t count_nonfinite(const void* data, DType t, int64_t n, cudaStream_t stream);

}  // namespace replayssm::bench
