// The numerics of state precision modes that the library's CUDA SSM kernels do not run (shared-*
// baselines, the fp8 recurrence), rebuilt around the
// kernels that exist, over float32 storage (ModelOptions::emulate_state; for accuracy studies such
// as `replayssm eval`: the values are the mode's, the memory and the speed are not).
//
// The rounding is precision.h's: a format's values are what the codecs (src/common/codec_math.h,
// the same source as the CPU backend) encode and decode, fp16sr keyed per slot by (seed, slot,
// step) over the slot's whole state as one row, as the CPU backend's state_io does. How each mode
// is assembled is in StateEmulation (state_emulation.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/arena.h"
#include "replayssm/precision.h"
#include "replayssm/tensor.h"

namespace replayssm::engine::cuda {

/// One rounding pass over the [slots, heads, rows, n] float32 states of a step's rows: for every
/// batch row b whose slot s = slot_ids[b] is in [0, num_slots) (and, with only_flush, has
/// only_flush[s] != 0), each (s, head) is decoded(encoded(src)) in `format` and written to dst
/// (float32, may be src) and/or dst16 (float16 bits of the same values, rounded to nearest: exact
/// for fp16, fp16sr and values float16 already holds; otherwise, e.g. fp8 and nvfp4 values, one
/// more rounding of at most half a float16 ulp, saturating at 65504).
/// Formats: fp32 (a copy), bf16, fp16 (nearest even), fp16sr (then sr_steps[s] += 1), fp8 (one
/// scale per row), nvfp4 (one global scale per (slot, head), E4M3 scales per 16 along n; n % 16
/// == 0). Enqueued on `s`, no synchronisation (graph-capturable).
struct SlotRounding {
  const float* src = nullptr;
  float* dst = nullptr;
  uint16_t* dst16 = nullptr;
  StateFormat format = StateFormat::kFp32;
  const int32_t* slot_ids = nullptr;
  int64_t batch = 0;
  int32_t num_slots = 0;
  const int8_t* only_flush = nullptr;
  int64_t heads = 0, rows = 0, n = 0;
  const int64_t* sr_seeds = nullptr;  ///< fp16sr: [num_slots]
  int32_t* sr_steps = nullptr;        ///< fp16sr: [num_slots], advanced once per rounded slot
};
void round_slots(const SlotRounding& p, cudaStream_t s);

enum class SsmFamilyKind { kMamba2, kGdn };

/// A layer's emulation of a mode the kernels do not run (empty for native modes). Per step:
///   shared-f:   the fp32 conventional step, then every row's state := Q_f(state).
///   split r/q on Mamba-2 (the ring holds only inputs, so fp32/fp32 replay over `state` is the
///     mode when `state` holds what ordinary rows read): before the step the flushing slots'
///     state := master (the checkpoint); after it, for the slots that flushed, master :=
///     R_r(new state) and state := Q_q(master), the copy of the checkpoint as stored.
///   split r/q on GDN (the flush must recompute u from the checkpoint: the library's fp32/fp16
///     split mode, ring v and beta): after the step, for the slots that flushed, the checkpoint
///     := R_r(new checkpoint), then the float16 read copy := Q_q(that checkpoint) rounded to
///     float16 (for fp8 and nvfp4 one more rounding of at most half a float16 ulp on top of the
///     format's own).
/// (The fp16sr modes run natively, with alloc_sr_keys' keys; no emulated mode draws SR bits
/// today, but an emulated SR format would draw the CPU engine's, through `layer`.)
class StateEmulation {
 public:
  StateEmulation() = default;
  /// `mode` as requested; state geometry [slots, heads, rows, n]; `layer` the SSM layer index
  /// (SR seeds per (layer, slot) as the CPU engine draws them).
  StateEmulation(const StateMode& mode, SsmFamilyKind family, DeviceArena& arena, int64_t slots,
                 int64_t heads, int64_t rows, int64_t n, int64_t layer);
  bool active() const { return active_; }
  /// The mode the library runs under the emulation (fp32/fp32; GDN split: fp32/fp16).
  StateMode library_mode() const;
  /// Before the library's replay step (Mamba-2 split modes: the checkpoint into the flushing rows).
  void before_step(float* state, const int32_t* slot_ids, int64_t batch, const int8_t* is_flush,
                   cudaStream_t s) const;
  /// After the library's step. `copy16`: the GDN split mode's float16 read copy.
  void after_step(float* state, uint16_t* copy16, const int32_t* slot_ids, int64_t batch,
                  const int8_t* is_flush, cudaStream_t s) const;
  /// Zeroes the rows' master checkpoint and restarts their SR draws (reset_slots's part).
  void reset(const int32_t* slot_ids, int64_t batch, cudaStream_t s) const;

 private:
  SlotRounding pass(const float* src, float* dst, uint16_t* dst16, StateFormat f,
                    const int32_t* slot_ids, int64_t batch, const int8_t* mask) const;
  bool active_ = false;
  StateMode mode_{};
  SsmFamilyKind family_ = SsmFamilyKind::kMamba2;
  int64_t slots_ = 0, heads_ = 0, rows_ = 0, n_ = 0;
  float* master_ = nullptr;  ///< Mamba-2 split modes: the checkpoint [slots, heads, rows, n]
  int64_t* seeds_ = nullptr;
  int32_t* steps_ = nullptr;
};

/// The stochastic-rounding keys of S slots in SSM layer `layer`: seeds drawn as the CPU engine
/// draws them (sr_seed), so both engines round alike; step counters zeroed (reset_slots zeroes a
/// slot's counter again for each new sequence). Used by the native fp16sr modes.
SrKeys alloc_sr_keys(DeviceArena& a, int64_t S, int64_t layer);

}  // namespace replayssm::engine::cuda
