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
/// (conventional_step, replay_step, reset_slots; verify not built yet): state float32, float16 or
/// bfloat16 (float32 arithmetic, rounded to nearest even when stored), rings float32, q/k/v/a/b
/// float32 or bfloat16; K 64 or 128, L <= 64; state, q, k, rings (KDA: a, dt_bias) 16-byte aligned.
struct Cache {
  TensorView state;   ///< [slots, HV, V, K]
  TensorView ring_u;  ///< [slots, HV, R, V]  correction u of each record
  TensorView ring_k;  ///< [slots, H, R, K]   normalised key k^ of each record
  TensorView ring_g;  ///< [slots, HV, R] (GDN) or [slots, HV, R, K] (KDA): log-decay g (<= 0)
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

/// Zero the state/checkpoint of the rows' slots (pad ids skipped). The ring needs no clearing:
/// replayssm::reset empties the slot's window, and rows outside the window are never read.
void reset_slots(Cache& cache, const Rows& rows);

}  // namespace replayssm::gdn
