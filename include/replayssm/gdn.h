// Gated DeltaNet and KDA decode ops: conventional step, ReplaySSM step and speculative verify.
// Math: DESIGN.md §2 "Gated DeltaNet"; HF `modeling_qwen3_next.py` (GDN) and
// `modeling_kimi_linear.py` (KDA). Per slot b, value head v, key head k = v / (HV / H):
//   q^ = q / sqrt(sum q^2 + 1e-6) * scale,  k^ = k / sqrt(sum k^2 + 1e-6),  beta = sigmoid(b),
//   g = -exp(A_log) * softplus(a + dt_bias),  alpha = exp(g)
//   GDN: g is a scalar per value head.  KDA: g is a vector over the K key channels.
//   hk = S (alpha . k^);  u = beta (v - hk);  S <- S diag(alpha) + u k^T;  y = S q^
// State S is V x K per value head, stored [slots, HV, V, K] (row = value channel).
#pragma once
#include <cstdint>

#include "replayssm/errors.h"
#include "replayssm/precision.h"
#include "replayssm/ring.h"
#include "replayssm/tensor.h"

namespace replayssm::gdn {

enum class Gate : uint8_t {
  kScalar,   ///< Gated DeltaNet: one decay per value head
  kChannel,  ///< KDA: one decay per (value head, key channel)
};

/// Sizes of one GDN/KDA layer.
struct Dims {
  int64_t num_k_heads = 0;  ///< H
  int64_t num_v_heads = 0;  ///< HV, a multiple of H
  int64_t head_k_dim = 0;   ///< K
  int64_t head_v_dim = 0;   ///< V
  Gate gate = Gate::kScalar;
};

/// Per-layer parameters (float32, contiguous, on the op's device).
struct Layer {
  Dims dims;
  TensorView A_log;    ///< [HV]
  TensorView dt_bias;  ///< [HV] (GDN) or [HV, K] (KDA)
  float scale = 0.0f;  ///< q scale; 0 means K^-1/2
  bool beta_bf16 = false;  ///< round sigmoid(b) to bf16 (matches peers' kernels; method.md §3.1)
};

/// Inputs of one step: T tokens per row. q, k, v, a, b share one dtype (float32 or bfloat16).
/// A rank without the T axis is accepted where T = 1 (for all five tensors alike).
/// Token positions past a row's T_b and pad rows are never read.
struct Tokens {
  TensorView q;  ///< [batch, T, H, K]  before L2 normalisation
  TensorView k;  ///< [batch, T, H, K]  before L2 normalisation
  TensorView v;  ///< [batch, T, HV, V]
  TensorView a;  ///< [batch, T, HV] (GDN) or [batch, T, HV, K] (KDA): gate input
  TensorView b;  ///< [batch, T, HV]  beta input (beta = sigmoid(b))
};

/// A layer's pool of slots: the state (conventional) or checkpoint (replay) and the ring of
/// records (u, k^, g) since the checkpoint. u is kept in float32 so long runs do not drift
/// (method.md §5.1). k^ is written once per key head (by its first value head) and shared by the
/// key head's value heads. R = cursors.config.rows(). CPU backend: all float32. CUDA backend
/// (conventional_step, replay_step, verify, reset_slots): state float32, float16 or bfloat16
/// (float32 arithmetic, rounded to nearest even when stored; verify: float32), rings float32, q/k/v/a/b
/// float32 or bfloat16; K 64 or 128, L <= 64; state, q, k, rings (KDA: a, dt_bias) 16-byte aligned.
///
/// State modes (precision.h; every mode on the CPU backend; the CUDA backend runs fp32/fp32 and,
/// in replay_step and reset_slots, the split modes fp32/bf16, fp32/fp16, fp32/fp8 and fp32/nvfp4
/// (quantised copies 16-byte aligned, their scales 4-byte aligned; the flushed slots' copies are
/// encoded on the device byte for byte as codecs.h encodes them) and fp16sr/fp16sr and
/// fp16sr/nvfp4 (the float16 checkpoint's writes rounded stochastically inside the flush and
/// conventional kernels with the codec's Philox words, the slots' step counters advanced on the
/// device) and rejects the others
/// with UnsupportedError): `mode` says how `state` is stored and what else is used.
///   fp32/fp32 (default): state and ring_u/k/g only, exactly as without modes.
///   split modes (replay_step): state is the checkpoint in mode.recurrence's format (fp32 float32;
///     fp16sr float16; fp8 uint8 codes + state_scales.rows), `read` the read copy [slots, HV, V, K]
///     in mode.read's format (blocks along K, one nvfp4 global scale per (slot, value head));
///     fp16sr/fp16sr keeps no read copy. Ordinary steps read `read` and the ring; their u is
///     computed from the read copy and so carries its error, which is why the ring also keeps the
///     raw v and beta of each record (ring_v, ring_beta, float32): the flush ignores ring_u and
///     recomputes every correction exactly from the float32-decoded checkpoint, record by record
///     (u_j = beta_j (v_j - S (alpha_j . k^_j)); S <- S diag(alpha_j) + u_j k^_j^T: the
///     conventional step's own arithmetic), then takes the token's conventional step (y from the
///     new float32 state), writes the checkpoint back and derives `read` from it as stored (at
///     L = 1, where every step is a flush of the current token and nothing reads `read`, the
///     CUDA backend runs the mode's conventional step, fp32 or fp16sr's, and leaves `read` as it
///     is). With
///     an fp32 recurrence a flushed checkpoint therefore equals the conventional fp32 state of the
///     same tokens bit for bit. Ring cost: R (HV V + HV) * 4 more bytes per slot.
///     fp16sr/fp16sr on CUDA: ordinary steps read the float16 checkpoint itself, so their ring_u
///     is the recurrence's own and the flush folds it (no exact recompute; the CPU backend
///     recomputes, equal within float32 reordering); ring_v and ring_beta are still required and
///     written, as for every split mode; at L = 1 the float16 conventional step runs, its
///     checkpoint written with stochastic rounding.
///   shared-<f> (conventional_step only): state is the one state in format f (nvfp4: uint8
///     [slots, HV, V, K/2] with state_scales.blocks and .global), decoded, updated in float32 and
///     re-encoded every step.
///   sr (fp16sr modes): per-slot seeds and step counters of the stochastic rounding.
/// verify() runs fp32/fp32 only.
struct Cache {
  TensorView state;   ///< [slots, HV, V, K]
  TensorView ring_u;  ///< [slots, HV, R, V]  correction u of each record
  TensorView ring_k;  ///< [slots, H, R, K]   normalised key k^ of each record
  TensorView ring_g;  ///< [slots, HV, R] (GDN) or [slots, HV, R, K] (KDA): log-decay g (<= 0)
  StateMode mode{};          ///< default fp32/fp32
  StateScales state_scales;  ///< scales of a quantised state (fp8: rows; shared-nvfp4: blocks, global)
  StateBuffer read;          ///< the read copy (split modes with has_read_copy())
  SrKeys sr;                 ///< stochastic-rounding keys (modes with uses_sr())
  TensorView ring_v;         ///< [slots, HV, R, V] float32: v of each record (split modes)
  TensorView ring_beta;      ///< [slots, HV, R] float32: beta of each record (split modes)
};

/// Conventional decode step (T = 1): reads, updates and writes state[slot] of every real row;
/// y [batch, HV, V] or [batch, 1, HV, V] (dtype of v). Pad rows: y = 0, untouched. The ring
/// tensors are not used.
void conventional_step(const Layer& layer, Cache& cache, const Tokens& in, const Rows& rows,
                       TensorView y);

/// ReplaySSM decode step (ring mode kDecode); contract as mamba2::replay_step: is_flush rows fold
/// the h records and the token into the checkpoint (written once, y from the new state, no record
/// appended); other rows compute y from checkpoint + ring without writing state and append
/// (u, k^, g) at logical h. Cursors are only read; each real row's cursor must have
/// 0 <= origin < R and h + 1 <= R (SlotError otherwise). y as for conventional_step.
void replay_step(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
                 const Rows& rows, TensorView y);

/// Speculative verify (ring mode kSpeculative); contract as mamba2::verify. T is the tokens' T
/// axis, 1 <= T <= cursors.config.T; row b feeds T_b = rows.num_tokens[b] (empty: T) tokens whose
/// records go to logical h..h+T_b-1 (h + T_b <= R required), all outputs from the same checkpoint.
/// is_flush rows fold only the committed history (0..h-1) into the checkpoint. y [batch, T, HV, V];
/// entries past T_b and pad rows are 0.
void verify(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
            const Rows& rows, TensorView y);

/// Zero the state/checkpoint of the rows' slots (pad ids skipped), with its scales, the read copy
/// and the SR step counter in other modes (SR seeds are kept). The ring needs no clearing:
/// replayssm::reset empties the slot's window, and rows outside the window are never read.
void reset_slots(Cache& cache, const Rows& rows);

/// Bytes of state per sequence of one layer in `mode` (the state memory table of issue 6); the
/// split modes' extra ring bytes (ring_v, ring_beta) are not included.
inline StateBytes state_bytes(const Dims& d, const StateMode& mode) {
  return replayssm::state_bytes(mode, d.num_v_heads, d.head_v_dim, d.head_k_dim);
}

}  // namespace replayssm::gdn
