// A split mode's read copy of a benchmark pool's [slots, heads, rows, n] state (precision.h
// layout: bf16 / fp16 values, or fp8 codes with row scales, or NVFP4 codes with block and global
// scales), and the stochastic-rounding keys of the fp16sr modes. The copy's values do not change
// the timing; they are finite with small scales, so that outputs stay finite until the first
// flush re-encodes a slot. fp16sr/fp16sr has no copy (its float16 checkpoint is read as it is).
// Mamba2Pool and GdnPool hold one.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_util.h"
#include "replayssm/precision.h"
#include "replayssm/tensor.h"

namespace replayssm::bench {

/// The split mode a pool of `checkpoint` dtype with read copy `read` runs: fp32/fp32 for kFp32;
/// fp16sr/<read> over a float16 checkpoint (fp16sr/fp16sr, fp16sr/nvfp4); else fp32/<read>.
StateMode split_mode(DType checkpoint, StateFormat read);

class ReadCopy {
 public:
  ReadCopy() = default;
  /// Allocates and fills the read copy of `mode` (none for fp32/fp32 and fp16sr/fp16sr) and its
  /// SR keys (modes that use SR). BenchError for a copy format the benchmark has no fill for.
  ReadCopy(const StateMode& mode, int64_t slots, int64_t heads, int64_t rows, int64_t n,
           uint64_t seed, cudaStream_t stream);
  /// The copy's views (empty without a copy).
  StateBuffer buffer() const;
  const StateMode& mode() const { return mode_; }
  /// The SR keys (seeds and step counters of every slot; empty unless the mode uses SR).
  SrKeys sr() const;

 private:
  StateMode mode_;
  int64_t slots_ = 0, heads_ = 0, rows_ = 0, n_ = 0;
  DeviceMemory values_, scales_, global_, seeds_, steps_;
};

}  // namespace replayssm::bench
