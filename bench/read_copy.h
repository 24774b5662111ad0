// A split mode's read copy of a benchmark pool's [slots, heads, rows, n] state (precision.h
// layout: bf16 / fp16 values, or fp8 codes with row scales, or NVFP4 codes with block and global
// scales). Its values do not change the timing; they are finite with small scales, so that
// outputs stay finite until the first flush re-encodes a slot. Mamba2Pool and GdnPool hold one.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_util.h"
#include "replayssm/precision.h"
#include "replayssm/tensor.h"

namespace replayssm::bench {

class ReadCopy {
 public:
  ReadCopy() = default;
  /// Allocates and fills the copy of format f (kFp32: none). BenchError for other formats.
  ReadCopy(StateFormat f, int64_t slots, int64_t heads, int64_t rows, int64_t n, uint64_t seed,
           cudaStream_t stream);
  /// The copy's views (empty for kFp32).
  StateBuffer buffer() const;

 private:
  StateFormat f_ = StateFormat::kFp32;
  int64_t slots_ = 0, heads_ = 0, rows_ = 0, n_ = 0;
  DeviceMemory values_, scales_, global_;
};

}  // namespace replayssm::bench
