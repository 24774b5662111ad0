// The split state modes the CUDA replay kernels run (precision.h): fp32/bf16 and fp32/fp16, as
// two launches per step — the ordinary rows over the 16-bit read copy, the flush rows over the
// fp32 checkpoint (which also write the copy); fp32/fp8 and fp32/nvfp4 likewise, with a third
// launch that encodes the flushed slots' copies (mamba2_cuda.cu, gdn_cuda.cu); fp16sr/fp16sr as
// the float16-state replay step with stochastically rounded checkpoint writes, and fp16sr/nvfp4
// as fp32/nvfp4's three launches over that float16 checkpoint. Shared by the
// Mamba-2 and GDN/KDA host code.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "common/state_check.h"
#include "common/validate.h"
#include "cuda/codecs/codecs_cuda.h"
#include "cuda/common/sr_steps.h"
#include "replayssm/errors.h"
#include "replayssm/precision.h"
#include "replayssm/ring.h"
#include "replayssm/tensor.h"

namespace replayssm::cuda {

/// Checks an fp16sr mode's checkpoint (fp16sr/fp16sr, fp16sr/nvfp4) for the CUDA kernels: state
/// [slots, heads, rows, n] float16 (the SR keys are checked by the public API with the mode's
/// other buffers).
inline void check_sr16(const TensorView& state, int64_t heads, int64_t rows, int64_t n,
                       const char* op) {
  validate::expect(state, (std::string(op) + " state (fp16sr checkpoint)").c_str(),
                   {validate::kAny, heads, rows, n}, {DType::kF16}, Device::kCUDA);
}

/// Checks a split mode for the CUDA kernels: UnsupportedError naming any mode but fp32/bf16 and
/// fp32/fp16 (and, with `quant`, fp32/fp8, fp32/nvfp4 and fp16sr/nvfp4); state [slots, heads,
/// rows, n] float32 (fp16sr/nvfp4: float16) and the read copy with its scales in the mode's format
/// (precision.h), the quantised copies' values 16-byte and scales 4-byte aligned. Returns whether
/// the mode's copy is quantised.
inline bool check_split(const StateMode& m, const TensorView& state, const StateBuffer& read,
                        int64_t heads, int64_t rows, int64_t n, bool quant, const char* op) {
  const bool q = m.read == StateFormat::kFp8 || m.read == StateFormat::kNvfp4;
  const bool sr = m.recurrence == StateFormat::kFp16Sr;  // fp16sr/nvfp4
  check<UnsupportedError>(!m.shared &&
                              ((m.recurrence == StateFormat::kFp32 &&
                                (m.read == StateFormat::kBf16 || m.read == StateFormat::kFp16 ||
                                 (quant && q))) ||
                               (quant && sr && m.read == StateFormat::kNvfp4)),
                          op, ": state mode '", m.name(), "' is not built for CUDA yet, expected ",
                          quant ? "fp32/fp32, fp32/bf16, fp32/fp16, fp32/fp8, fp32/nvfp4, "
                                  "fp16sr/fp16sr or fp16sr/nvfp4"
                                : "fp32/fp32, fp32/bf16, fp32/fp16 or fp16sr/fp16sr");
  if (sr)
    check_sr16(state, heads, rows, n, op);
  else
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

/// Whether `m` is fp16sr/fp16sr: one float16 checkpoint, written with stochastic rounding, that
/// ordinary steps read as it is (no read copy).
inline bool is_sr16(const StateMode& m) {
  return !m.shared && m.recurrence == StateFormat::kFp16Sr && m.read == StateFormat::kFp16Sr;
}

/// Runs an fp16sr/fp16sr step: launch() is the float16-state replay step (the kernels round the
/// checkpoint writes stochastically when their parameters carry the SR keys); then the written
/// slots' step counters advance on the device: every real row at L = 1 (each step is a
/// conventional one), else the rows flagged is_flush.
template <class Launch>
void run_sr16(const SrKeys& sr, const RingCursors& cursors, const Rows& rows, int64_t slots,
              Launch&& launch) {
  launch();
  sr_advance(sr, rows, cursors.config.L == 1 ? nullptr : cursors.is_flush.ptr<int8_t>(), slots);
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

/// The plan an ordinary launch over a quantised read copy resolves: `forced` on the output-only
/// route (the copy is read, never folded into a state); ConfigError for a forced state-and-output
/// route. `Plan` and its Route are the family's.
template <class Plan>
Plan quant_read_plan(const Plan& forced, const char* op) {
  using Route = decltype(forced.route);
  check<ConfigError>(forced.route != Route::kStateAndOutput, op,
                     ": plan route state-and-output, but the ordinary rows of a quantised read "
                     "copy run output-only (expected route auto or output-only)");
  Plan p = forced;
  p.route = Route::kOutputOnly;
  return p;
}

/// Runs a quantised split mode's step (fp32/fp8, fp32/nvfp4, fp16sr/nvfp4): launch(cache, only,
/// quant, nvfp4) once for the ordinary rows over the read copy (only = 1, quant = &cache.read) and
/// once for the flush rows over the checkpoint (only = 2), then the flushing slots' copies are
/// encoded from their new checkpoints as stored (codecs_cuda.h, byte for byte the CPU codec's
/// encoding; one NVFP4 global scale per (slot, head), blocks along n); at L = 1 one plain launch
/// (the copy is never read). fp16sr/nvfp4: the launches see the mode fp16sr/fp16sr (the float16
/// checkpoint's writes round stochastically under the SR keys) and the flushed slots' step
/// counters advance after the encode (run_sr16). The state is [slots, heads, rows, n]; `Cache`
/// is the family's cache type.
template <class Cache, class Launch>
void run_split_quant(const Cache& cache, const RingCursors& cursors, const Rows& rows,
                     int64_t heads, int64_t head_rows, int64_t n, Launch&& launch) {
  const bool sr = cache.mode.recurrence == StateFormat::kFp16Sr;
  Cache base = cache;
  base.mode = sr ? StateMode{StateFormat::kFp16Sr, StateFormat::kFp16Sr, false} : StateMode{};
  base.read = StateBuffer{};
  auto step = [&] {
    if (cursors.config.L == 1) return launch(base, int8_t{0}, nullptr, false);
    const bool nvfp4 = cache.mode.read == StateFormat::kNvfp4;
    launch(base, int8_t{1}, &cache.read, nvfp4);
    launch(base, int8_t{2}, nullptr, false);
    codecs::FlushedRows fr;
    fr.slot_ids = rows.slot_ids.ptr<int32_t>();
    fr.is_flush = cursors.is_flush.ptr<int8_t>();
    fr.batch = static_cast<int32_t>(rows.slot_ids.shape[0]);
    fr.slots = static_cast<int32_t>(std::min<int64_t>(cache.state.shape[0], INT32_MAX));
    fr.heads = static_cast<int32_t>(heads);
    if (fr.batch == 0) return;
    if (nvfp4) {
      codecs::Nvfp4 out{cache.read.values, cache.read.scales.blocks, cache.read.scales.global,
                        head_rows};
      codecs::nvfp4_encode_flushed(cache.state.data, cache.state.dtype, fr, head_rows, n, out,
                                   rows.stream);
    } else {
      codecs::Fp8Rows out{cache.read.values, cache.read.scales.rows};
      codecs::fp8_encode_flushed(cache.state.template ptr<float>(), fr, head_rows, n, out,
                                 rows.stream);
    }
  };
  if (sr) return run_sr16(cache.sr, cursors, rows, cache.state.shape[0], step);
  step();
}

}  // namespace replayssm::cuda
