// State precision modes (DESIGN.md §2 "Precision", issue 6): how an SSM layer stores its state.
//
// A mode is named "<recurrence>/<read>":
//   recurrence  the format of the checkpoint S0, the only state the recurrence (the flush) reads
//               and writes: fp32, fp16sr (float16 written with stochastic rounding) or fp8 (E4M3,
//               one float32 scale per row).
//   read        the format of the read copy that ordinary ReplaySSM steps read instead of S0:
//               fp32, bf16, fp16 (round to nearest even), fp16sr, nvfp4 or fp8.
// Split modes: every flush folds the ring into the checkpoint in float32 arithmetic (decoding S0
// first, re-encoding it after), computes y from the new float32 state, and then derives the read
// copy from the checkpoint as stored: the copy is a function of the checkpoint alone, and the
// CUDA flush encodes it in a pass of its own over the written checkpoint (for fp16sr and fp8
// recurrences that is half / a quarter of the float32 bytes). With an fp32 recurrence this is the
// new float32 state itself; fp16sr/nvfp4 and fp8/nvfp4 copies carry the checkpoint's rounding
// too (float16: 2^-11 relative, fp8: 2^-4, each below NVFP4's 2^-2 step; until session 30 these
// two modes encoded the unrounded state). Ordinary steps read only the read copy
// (decoded to float32) plus the ring; nothing decoded from the read copy ever enters the
// recurrence. fp16sr/fp16sr stores no separate copy: its read copy is the checkpoint itself.
// At ring length L = 1 every step flushes and no step reads the copy, so neither backend writes
// it (it keeps whatever it held; the oracle still derives it).
// The supported split modes are fp32/fp32 (the default: the library's behaviour without modes),
// fp32/bf16, fp32/fp16, fp16sr/fp16sr, fp32/nvfp4, fp16sr/nvfp4, fp8/nvfp4 and fp32/fp8.
//
// Shared baselines "shared-<f>" (f = fp16, bf16, fp8, nvfp4): one state of format f that the
// conventional step decodes, updates in float32 (y from the new float32 state) and re-encodes
// every step: the low-precision state the literature compares against. They run through
// conventional_step only.
//
// Formats of a [slots, heads, rows, n] state (Mamba-2: heads H, rows P = headdim, n N = d_state;
// GDN/KDA: heads HV, rows V, n K), with the codecs of codecs.h:
//   fp32    values float32 [slots, heads, rows, n]
//   bf16    values bfloat16 [..] (nearest even);  fp16: values float16 [..] (nearest even,
//           saturating at +-65504, NaN kept)
//   fp16sr  values float16 [..], written by codecs::f16_sr_encode with the slot's whole state as
//           one row: element (h, r, c) has index (h * rows + r) * n + c, key (seed = sr.seeds[slot],
//           slot, step = sr.steps[slot])
//   fp8     values uint8 E4M3 codes [..] + scales.rows float32 [slots, heads, rows] (codecs::Fp8Rows)
//   nvfp4   values uint8 [slots, heads, rows, n/2] + scales.blocks uint8 [slots, heads, rows, n/16]
//           + scales.global float32 [slots, heads] (codecs::Nvfp4 with group_rows = rows: blocks
//           along n, one global scale per (slot, head)); n must be a multiple of 16
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "replayssm/errors.h"
#include "replayssm/tensor.h"

namespace replayssm {

/// A storage format of a state buffer (see the table above).
enum class StateFormat : uint8_t { kFp32, kBf16, kFp16, kFp16Sr, kFp8, kNvfp4 };
/// "fp32", "bf16", "fp16", "fp16sr", "fp8", "nvfp4".
const char* state_format_name(StateFormat f);

/// A state precision mode. The default value is fp32/fp32.
struct StateMode {
  StateFormat recurrence = StateFormat::kFp32;  ///< checkpoint format (shared: the state's)
  StateFormat read = StateFormat::kFp32;        ///< read-copy format (shared: the state's)
  bool shared = false;                          ///< a shared baseline (conventional step only)

  bool operator==(const StateMode&) const = default;
  /// fp32/fp32: only `state` is used, exactly the behaviour of the library without modes.
  bool is_default() const { return !shared && recurrence == StateFormat::kFp32 && read == StateFormat::kFp32; }
  /// A ReplaySSM mode other than fp32/fp32 (checkpoint and read handled apart).
  bool is_split() const { return !shared && !is_default(); }
  /// Whether the read copy is a buffer of its own (split modes except fp16sr/fp16sr).
  bool has_read_copy() const { return is_split() && read != recurrence; }
  /// Whether some write rounds stochastically (and so needs the SR keys).
  bool uses_sr() const { return recurrence == StateFormat::kFp16Sr || read == StateFormat::kFp16Sr; }
  /// The format of the `state` buffer: the checkpoint's (split) or the shared state's.
  StateFormat state_format() const { return shared ? read : recurrence; }
  /// "fp32/nvfp4", "shared-fp8", ...
  std::string name() const;
};

/// Parses a mode name ("fp32/nvfp4", "shared-nvfp4"; "fp32" is accepted for "fp32/fp32").
/// Throws ConfigError naming the value and listing the valid names.
StateMode parse_state_mode(std::string_view name);
/// Every supported mode: the eight split modes in the order of DESIGN.md, then the shared ones.
const std::vector<StateMode>& state_modes();

/// Scale tensors of a quantised state buffer (absent = empty views where the format has none).
struct StateScales {
  TensorView rows;    ///< fp8: [slots, heads, rows] float32, one decode scale per row
  TensorView blocks;  ///< nvfp4: [slots, heads, rows, n/16] uint8, E4M3 block scales
  TensorView global;  ///< nvfp4: [slots, heads] float32, one global scale per (slot, head)
};

/// A [slots, heads, rows, n] state buffer in one format: values and its scales.
struct StateBuffer {
  TensorView values;
  StateScales scales;
};

/// Keys of stochastic rounding (modes with fp16sr), per slot. Results are reproducible for given
/// seeds; a fresh step counter value per write gives fresh bits (also under CUDA-graph replay).
struct SrKeys {
  TensorView seeds;  ///< [slots] int64: the slot's seed, set by the caller (kept by reset_slots)
  TensorView steps;  ///< [slots] int32: SR writes of the slot so far; each SR write uses the value
                     ///< and then increments it; reset_slots sets it to 0
};

/// Bytes per slot of a state in one format: values plus scales.
int64_t state_format_bytes(StateFormat f, int64_t heads, int64_t rows, int64_t n);

/// Bytes of state per sequence (slot) per layer of a mode: checkpoint (shared: the state), the
/// separate read copy, and the SR step counter + seed (12 B when the mode uses SR). Ring buffers
/// are not counted here (GDN split modes add ring_v and ring_beta: gdn.h).
struct StateBytes {
  int64_t checkpoint = 0, read_copy = 0, sr_keys = 0;
  int64_t total() const { return checkpoint + read_copy + sr_keys; }
};
StateBytes state_bytes(const StateMode& mode, int64_t heads, int64_t rows, int64_t n);

}  // namespace replayssm
