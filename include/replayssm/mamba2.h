// Mamba-2 decode ops: conventional step, ReplaySSM step (ordinary/flush) and speculative verify.
// Math: DESIGN.md §2 "Mamba-2"; HF `modeling_mamba2.py` / `modeling_nemotron_h.py` mixer decode
// (selective_state_update). Per slot b, head h, group g = h / (H / G):
//   dt' = dt + dt_bias;  delta = softplus(dt') if dt_softplus (dt' kept above 20);  a = exp(delta * A),
//   A = -exp(A_log);  S <- a*S + delta*x*B^T;  y = S*C + D*x;  y <- y * silu(z) if z is given.
// The ops dispatch on the tensors' device (CPU or CUDA) and throw the errors of errors.h.
#pragma once
#include <cstdint>

#include "replayssm/errors.h"
#include "replayssm/precision.h"
#include "replayssm/ring.h"
#include "replayssm/tensor.h"

namespace replayssm::mamba2 {

/// Sizes of one Mamba-2 layer.
struct Dims {
  int64_t nheads = 0;   ///< H
  int64_t headdim = 0;  ///< P
  int64_t d_state = 0;  ///< N
  int64_t ngroups = 0;  ///< G, divides H; heads h*G/H .. share B and C
};

/// Per-layer parameters (all float32, contiguous, on the op's device).
struct Layer {
  Dims dims;
  TensorView A_log;    ///< [H]  A = -exp(A_log)
  TensorView dt_bias;  ///< [H]
  TensorView D;        ///< [H]  skip connection (empty: none)
  bool dt_softplus = true;
};

/// Inputs of one step for a batch of rows: T tokens per row (T = 1 for decode steps).
/// x, B, C and z share one dtype (float32 or bfloat16); dt is float32 or the same dtype as x.
/// A rank without the T axis ([batch, H, P] etc.) is accepted where T = 1.
struct Tokens {
  TensorView x;   ///< [batch, T, H, P]
  TensorView dt;  ///< [batch, T, H]  raw dt (before dt_bias and softplus)
  TensorView B;   ///< [batch, T, G, N]
  TensorView C;   ///< [batch, T, G, N]
  TensorView z;   ///< [batch, T, H, P] optional gate (empty: none)
};

/// A layer's pool of slots. For the conventional step `state` is the recurrent state; for replay
/// it is the checkpoint S0 and the ring holds the records since S0 (ring.h for the protocol).
/// CPU backend: all float32. CUDA backend (conventional_step, replay_step, verify, reset_slots):
/// state float32, float16 or bfloat16 (float32 arithmetic, rounded to nearest even when stored;
/// verify: float32 only);
/// ring_x and ring_B float32, or bfloat16 when the inputs are bfloat16 (a lossless copy);
/// ring_dt float32; d_state 64 or 128, L <= 64; state, B, C and ring_B 16-byte aligned.
///
/// State modes (precision.h; every mode on the CPU backend; the CUDA backend runs fp32/fp32 and,
/// in replay_step and reset_slots, the split modes fp32/bf16, fp32/fp16, fp32/fp8 and fp32/nvfp4
/// with the read copy's values 16-byte and its scales 4-byte aligned, and fp16sr/fp16sr and
/// fp16sr/nvfp4 (the float16 checkpoint's writes rounded stochastically inside the flush and
/// conventional kernels with the codec's Philox words, the slots' step counters advanced on the
/// device; fp16sr/nvfp4's copy encoded from the written checkpoint); other modes
/// raise UnsupportedError naming the mode): `mode` says how `state` is stored and what else is used.
///   fp32/fp32 (default): only state, ring_x, ring_dt, ring_B, exactly as without modes.
///   split modes (replay_step): state is the checkpoint in mode.recurrence's format (fp32 float32;
///     fp16sr float16; fp8 uint8 codes + state_scales.rows), `read` the read copy [slots, H, P, N]
///     in mode.read's format (blocks along d_state, one nvfp4 global scale per (slot, head));
///     fp16sr/fp16sr keeps no read copy (ordinary steps read the checkpoint). Flushes fold the
///     records into the float32-decoded checkpoint, write it back and derive `read` from the
///     checkpoint as stored (with an fp32 recurrence: the new float32 state); ordinary steps read `read` and the ring only. The ring is the same as in
///     fp32/fp32 (its records do not depend on the state), so with an fp32 recurrence every
///     flushed checkpoint equals fp32/fp32's bit for bit.
///   shared-<f> (conventional_step only): state is the one state in format f (nvfp4: uint8
///     [slots, H, P, N/2] with state_scales.blocks and .global), decoded, updated in float32 and
///     re-encoded every step.
///   sr (fp16sr modes): per-slot seeds and step counters of the stochastic rounding.
/// verify() runs fp32/fp32 only.
struct Cache {
  TensorView state;    ///< [slots, H, P, N]
  TensorView ring_x;   ///< [slots, H, R, P]  x of each record
  TensorView ring_dt;  ///< [slots, H, R]     processed delta of each record, float32
  TensorView ring_B;   ///< [slots, G, R, N]  B of each record
  StateMode mode{};          ///< default fp32/fp32
  StateScales state_scales;  ///< scales of a quantised state (fp8: rows; shared-nvfp4: blocks, global)
  StateBuffer read;          ///< the read copy (split modes with has_read_copy())
  SrKeys sr;                 ///< stochastic-rounding keys (modes with uses_sr())
};

/// Conventional decode step (T = 1): reads, updates and writes state[slot] for every real row and
/// writes y [batch, H, P] (or [batch, 1, H, P]; dtype of x). Pad rows get y = 0 and touch nothing.
void conventional_step(const Layer& layer, Cache& cache, const Tokens& in, const Rows& rows,
                       TensorView y);

/// ReplaySSM decode step (ring mode kDecode, T = 1): per row, is_flush selects the flush (fold the
/// h ring records and the current token into the checkpoint, written once, y from the new state)
/// or the ordinary step (y from checkpoint + ring, append the record at logical position h, no
/// state write). Cursors are only read: call replayssm::commit once per step for all layers.
/// Every real row's cursor must address the ring (0 <= origin < R, h + 1 <= L): SlotError if not.
void replay_step(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
                 const Rows& rows, TensorView y);

/// Speculative verify (ring mode kSpeculative): row b feeds T_b = rows.num_tokens[b] tokens
/// (the last accepted token + drafts); their records are appended at logical h..h+T_b-1 and all
/// T_b outputs are computed from the same checkpoint (DESIGN.md §2 "Speculative decoding").
/// On is_flush rows the committed history (0..h-1) is folded into the checkpoint. y [batch, T, H, P];
/// entries past T_b are written as 0. The token axis T of x / y may be narrower than
/// cursors.config.T; an empty num_tokens means every row feeds that T. Every real row's cursor
/// must address the ring (0 <= origin < R, h + T_b <= L): SlotError if not.
void verify(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
            const Rows& rows, TensorView y);

/// Zero the state/checkpoint of the rows' slots (fresh or reused slots; pad ids skipped), with its
/// scales, the read copy and the SR step counter in other modes (SR seeds are kept). The ring
/// rows are left as they are: replayssm::reset empties the ring by resetting the cursors.
void reset_slots(Cache& cache, const Rows& rows);

/// Bytes of state per sequence of one layer in `mode` (the state memory table of issue 6).
inline StateBytes state_bytes(const Dims& d, const StateMode& mode) {
  return replayssm::state_bytes(mode, d.nheads, d.headdim, d.d_state);
}

}  // namespace replayssm::mamba2
