// The split state modes the CUDA replay kernels run (precision.h): fp32/bf16 and fp32/fp16, as
// two launches per step — the ordinary rows over the 16-bit read copy, the flush rows over the
// fp32 checkpoint (which also write the copy); fp32/fp8 and fp32/nvfp4 likewise, with a third
// launch that encodes the flushed slots' copies (mamba2_cuda.cu, gdn_cuda.cu). Shared by the
// Mamba-2 and GDN/KDA host code.
#pragma once
#include <cstdint>
#include <string>

#include "common/state_check.h"
#include "common/validate.h"
#include "replayssm/errors.h"
#include "replayssm/precision.h"
#include "replayssm/tensor.h"

namespace replayssm::cuda {

/// Checks a split mode for the CUDA kernels: UnsupportedError naming any mode but fp32/bf16 and
/// fp32/fp16 (and, with `quant`, fp32/fp8 and fp32/nvfp4); state [slots, heads, rows, n] float32
/// and the read copy with its scales in the mode's format (precision.h), the quantised copies'
/// values 16-byte and scales 4-byte aligned. Returns whether the mode's copy is quantised.
inline bool check_split(const StateMode& m, const TensorView& state, const StateBuffer& read,
                        int64_t heads, int64_t rows, int64_t n, bool quant, const char* op) {
  const bool q = m.read == StateFormat::kFp8 || m.read == StateFormat::kNvfp4;
  check<UnsupportedError>(!m.shared && m.recurrence == StateFormat::kFp32 &&
                              (m.read == StateFormat::kBf16 || m.read == StateFormat::kFp16 ||
                               (quant && q)),
                          op, ": state mode '", m.name(), "' is not built for CUDA yet, expected ",
                          quant ? "fp32/fp32, fp32/bf16, fp32/fp16, fp32/fp8 or fp32/nvfp4"
                                : "fp32/fp32, fp32/bf16 or fp32/fp16");
  validate::expect(state, (std::string(op) + " state (fp32 checkpoint)").c_str(),
                   {validate::kAny, heads, rows, n}, {DType::kF32}, Device::kCUDA);
  validate::state_buffer(m.read, read.values, read.scales, state.shape[0], heads, rows, n,
                         Device::kCUDA, op, "read copy");
  if (q) {
    auto aligned = [&](const TensorView& t, uintptr_t a, const char* what) {
      check<ConfigError>(reinterpret_cast<uintptr_t>(t.data) % a == 0, op, " read copy ", what,
                         ": address not ", a, "-byte aligned, expected ", a,
                         "-byte alignment (the kernels copy it in ", a, "-byte pieces)");
    };
    aligned(read.values, 16, "values");
    if (m.read == StateFormat::kNvfp4) {
      aligned(read.scales.blocks, 4, "scales.blocks");
      aligned(read.scales.global, 4, "scales.global");
    } else {
      aligned(read.scales.rows, 4, "scales.rows");
    }
  }
  return q;
}

/// Runs a split-mode step: launch(cache, only, copy) once over the read copy for the ordinary
/// rows (only = 1) and once over the checkpoint for the flush rows (only = 2, writing `copy`); at
/// L = 1 (every step a flush of the current token, no ordinary step reads the copy) one plain
/// launch over the checkpoint. `Cache` is the family's cache type.
template <class Cache, class Launch>
void run_split16(const Cache& cache, int32_t L, Launch&& launch) {
  Cache base = cache;
  base.mode = StateMode{};
  base.read = StateBuffer{};
  if (L == 1) return launch(base, int8_t{0}, TensorView{});
  Cache ordinary = base;
  ordinary.state = cache.read.values;
  launch(ordinary, int8_t{1}, TensorView{});
  launch(base, int8_t{2}, cache.read.values);
}

}  // namespace replayssm::cuda
