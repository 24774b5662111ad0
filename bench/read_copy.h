// A split mode's read copy of a benchmark pool's [slots, heads, rows, n] state (precision.h
// layout: bf16 / fp16 values, or fp8 codes with row scales, or NVFP4 codes with block and global
// scales). Its values do not change the timing; they are finite with small scales, so that
// outputs stay finite until the first flush re-encodes a slot. fp16sr/fp16sr has no copy (its
// float16 checkpoint is read as it is) but stochastic-rounding keys, held here instead.
// Mamba2Pool and GdnPool hold one.
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
  /// Allocates and fills the copy of format f (kFp32: none; kFp16Sr: the SR keys of
  /// fp16sr/fp16sr). BenchError for other formats.
  ReadCopy(StateFormat f, int64_t slots, int64_t heads, int64_t rows, int64_t n, uint64_t seed,
           cudaStream_t stream);
  /// The copy's views (empty for kFp32 and kFp16Sr).
  StateBuffer buffer() const;
  /// The mode: fp32/<f>, or fp16sr/fp16sr for kFp16Sr.
  StateMode mode() const;
  /// The SR keys (kFp16Sr: seeds and step counters of every slot; else none).
  SrKeys sr() const;

 private:
  StateFormat f_ = StateFormat::kFp32;
  int64_t slots_ = 0, heads_ = 0, rows_ = 0, n_ = 0;
  DeviceMemory values_, scales_, global_;
};

}  // namespace replayssm::bench
