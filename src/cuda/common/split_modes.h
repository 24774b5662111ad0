// The split state modes the CUDA replay kernels run (precision.h): fp32/bf16 and fp32/fp16, as
// two launches per step — the ordinary rows over the 16-bit read copy, the flush rows over the
// fp32 checkpoint (which also write the copy). Shared by the Mamba-2 and GDN/KDA host code.
#pragma once
#include <cstdint>

#include "common/validate.h"
#include "replayssm/errors.h"
#include "replayssm/precision.h"
#include "replayssm/tensor.h"

namespace replayssm::cuda {

/// Checks a split mode for the CUDA kernels: UnsupportedError naming any mode but fp32/bf16 and
/// fp32/fp16; state [slots, heads, rows, n] float32 and the read copy of the same shape in the
/// mode's 16-bit dtype.
inline void check_split16(const StateMode& m, const TensorView& state, const TensorView& read,
                          int64_t heads, int64_t rows, int64_t n, const char* op) {
  check<UnsupportedError>(!m.shared && m.recurrence == StateFormat::kFp32 &&
                              (m.read == StateFormat::kBf16 || m.read == StateFormat::kFp16),
                          op, ": state mode '", m.name(),
                          "' is not built for CUDA yet, expected fp32/fp32, fp32/bf16 or fp32/fp16");
  const DType rd = m.read == StateFormat::kBf16 ? DType::kBF16 : DType::kF16;
  validate::expect(state, (std::string(op) + " state (fp32 checkpoint)").c_str(),
                   {validate::kAny, heads, rows, n}, {DType::kF32}, Device::kCUDA);
  const auto& sh = state.shape;
  validate::expect(read, (std::string(op) + " read copy").c_str(), {sh[0], sh[1], sh[2], sh[3]},
                   {rd}, Device::kCUDA);
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
