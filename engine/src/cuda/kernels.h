// Host launchers of the CUDA engine's small kernels (everything but the GEMMs, which go through
// cuBLAS, and the SSM steps, which go through the library ops). Row-major; B = rows of the step.
// Activations and norm weights are float32, GEMM inputs and the KV cache bfloat16. Every launcher
// enqueues on `s` and never synchronises, so a decode step can be captured into a CUDA graph.
// Slot ids are device-resident; an id outside [0, num_slots) marks a row that touches no state.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace replayssm::engine::cuda {

using bf16 = __nv_bfloat16;

/// Greedy token of each row of logits [rows, V] fp32: out[r] = the argmax (the lowest id on
/// ties), or -1 when any of the row's logits is NaN or infinite (Model::step_greedy).
void greedy_rows(const float* logits, int64_t rows, int64_t V, int32_t* out, cudaStream_t s);

/// nn.Embedding: out [B, H] fp32 = table [V, H] bf16 at rows tokens [B] int32 (ids outside
/// [0, V) give zero rows; the model checks them on the host).
void embed(const bf16* table, const int32_t* tokens, int64_t B, int64_t H, int64_t V, float* out,
           cudaStream_t s);

/// RMSNorm of each row of x [B, n] fp32 into y [B, n] bf16, in fp32:
/// y = x * rsqrt(mean(x^2) + eps) * w (NemotronHRMSNorm, Mamba2RMSNorm) or * (1 + w) when
/// one_plus (Qwen3NextRMSNorm / Qwen3_5RMSNorm). w [n] fp32.
void rms_norm(const float* x, const float* w, int64_t B, int64_t n, float eps, bool one_plus,
              bf16* y, cudaStream_t s);

/// Gated RMSNorm over groups of `group` channels, rows of `groups * group` channels, in fp32.
/// gate_before (Nemotron-H's MambaRMSNormGated / Zamba2RMSNormGated, per group):
///   t = y * silu(z);  out = t * rsqrt(mean_group(t^2) + eps) * w[g * group + i]
/// else (Qwen3NextRMSNormGated, per value head, weight shared by the heads):
///   out = y * rsqrt(mean_head(y^2) + eps) * w[i] * silu(z)
struct GatedNorm {
  const float* y = nullptr;  ///< [B, groups * group], row stride ldy
  int64_t ldy = 0;
  const float* z = nullptr;  ///< [B, groups * group], row stride ldz (a slice of the projection)
  int64_t ldz = 0;
  const float* w = nullptr;  ///< [groups * group] (gate_before) or [group]
  int64_t group = 0, groups = 0;
  bool gate_before = true;
  float eps = 1e-5f;
  bf16* out = nullptr;  ///< [B, groups * group] contiguous
};
void gated_rms_norm(const GatedNorm& p, int64_t B, cudaStream_t s);

/// Causal depthwise conv1d decode step + SiLU (HF 4-tap cache, oldest first; models.md §2.2
/// step 1) for C channels of kernel k <= 8, with the per-slot rolling state [slots, C, k] fp32:
/// state[slot][c] shifts left by one and takes x = in[b, in_off + c];
/// out[c] = silu(sum_j state[c][j] w[c][j] + bias[c]). Channels [out_begin[r], out_begin[r+1])
/// go to the contiguous buffer out[r] [B, out_begin[r+1] - out_begin[r]] (r < 3; unused ranges
/// empty): Mamba-2 x | B | C, GDN q | k | v.
/// The same launch copies `pass_n` more columns in[b, pass_off + j] into contiguous buffers
/// (j < pass_split to pass_out[0] [B, pass_split], the rest to pass_out[1]): Mamba-2 dt (with
/// dt_process: softplus(v + dt_bias[j]) clamped to [dt_lo, dt_hi], for a dt floor or
/// time_step_limit), GDN b | a.
/// Speculative verify steps (T > 1 or ntok set): row b feeds ntok[b] tokens (1..T; 0 is allowed
/// and touches nothing) one after another through its state; its tokens are the data rows b * T + t of `in` and of
/// every output (all row indices above are such data rows). Outputs of the rows' unused tokens
/// (t >= ntok[b]) and of pad rows (slot outside [0, num_slots)) are written as 0. With `saved`
/// and `kept` the launch also keeps what conv_rollback needs: the state before the step
/// (saved [B, C, k]) and each token's conv input (kept [B * T, C]).
struct ConvStep {
  const float* in = nullptr;  ///< projection rows, row stride ld_in
  int64_t ld_in = 0, in_off = 0;
  int64_t C = 0;
  int k = 4;
  float* state = nullptr;  ///< [num_slots, C, k]
  const int32_t* slots = nullptr;
  int32_t num_slots = 0;
  const float* w = nullptr;     ///< [C, k]
  const float* bias = nullptr;  ///< [C] or nullptr
  float* out[3] = {nullptr, nullptr, nullptr};
  int64_t out_begin[4] = {0, 0, 0, 0};
  int64_t pass_off = 0, pass_n = 0, pass_split = 0;
  float* pass_out[2] = {nullptr, nullptr};
  bool dt_process = false;
  const float* dt_bias = nullptr;  ///< [pass_n] with dt_process
  float dt_lo = 0.0f, dt_hi = 0.0f;  ///< clamp bounds (dt_hi <= 0: no upper bound)
  int T = 1;                       ///< token axis (1: a decode step)
  const int32_t* ntok = nullptr;   ///< [B] tokens per row; nullptr: every row feeds T
  float* saved = nullptr;          ///< [B, C, k] or nullptr
  float* kept = nullptr;           ///< [B * T, C] or nullptr (with saved)
};
void conv_step(const ConvStep& p, int64_t B, cudaStream_t s);

/// Rollback of the conv state after a speculative verify step (DESIGN.md §2: the ring rolls back
/// by a cursor move, the conv window by this rebuild): row b keeps its first accepted[b] tokens
/// (0..ntok[b]); its state becomes the last k values of (saved state, kept inputs 0..accepted-1)
/// (conv_step's `saved` and `kept` of that step). Rows that kept every fed token and pad rows are
/// untouched.
struct ConvRollback {
  float* state = nullptr;         ///< [num_slots, C, k]
  const float* saved = nullptr;   ///< [B, C, k]
  const float* kept = nullptr;    ///< [B * T, C]
  const int32_t* slots = nullptr; ///< [B]
  const int32_t* ntok = nullptr;  ///< [B]
  const int32_t* accepted = nullptr;  ///< [B]
  int32_t num_slots = 0;
  int64_t C = 0;
  int k = 4, T = 1;
};
void conv_rollback(const ConvRollback& p, int64_t B, cudaStream_t s);

/// Decode attention over a per-slot KV cache (models.md §2.3-2.4): grouped-query heads (query
/// head h reads kv head h / (nh / nkv)), softmax in fp32 over positions 0..pos of the row's slot.
/// Nemotron-H: plain q, k. Qwen gated attention: q_proj emits per head [query | gate], q_norm /
/// k_norm (1 + w) per head, partial NeoX RoPE on the first rotary_dim dims
/// (inv_freq[i] = theta^(-2i / rotary_dim)), output * sigmoid(gate).
struct Attention {
  const float* proj = nullptr;  ///< row b: [q (nh * hd, or nh * 2hd with gate) | k | v (nkv * hd)]
  int64_t ld = 0;
  int nh = 0, nkv = 0, hd = 0;  ///< hd <= 256
  bool gate = false;
  const float* q_norm = nullptr;  ///< [hd] (1 + w) or nullptr
  const float* k_norm = nullptr;
  float eps = 1e-6f;
  int rotary_dim = 0;               ///< 0: no RoPE
  const float* inv_freq = nullptr;  ///< [rotary_dim / 2]
  bf16* kcache = nullptr;           ///< [num_slots, ctx, nkv, hd]
  bf16* vcache = nullptr;
  int64_t ctx = 0;
  int32_t num_slots = 0;
  const int32_t* slots = nullptr;      ///< [B]
  const int32_t* positions = nullptr;  ///< [num_slots] position of the row's token
  /// [B] position of each row's token, or nullptr (positions[slots[b]]): verify steps, where a
  /// slot's T tokens are rows of their own at consecutive positions (prep writes all of their
  /// keys and values before decode reads any, so each sees its predecessors').
  const int32_t* row_pos = nullptr;
  /// Verify steps: rows come in groups of tokens_per_row (B a multiple of it), rows g * T + t
  /// holding token t of one slot at consecutive positions (unused tokens slot -1); split
  /// decoding then serves all of a group's queries of a KV head from one read of its keys and
  /// values, each query masked to the positions up to its own. 1: independent rows.
  int tokens_per_row = 1;
  float scale = 1.0f;                  ///< head_dim^-1/2
  float* q = nullptr;                  ///< scratch [B, nh, hd] fp32
  bf16* out = nullptr;                 ///< [B, nh * hd]
  /// Split decoding (hd % 32 == 0): each row's positions are cut into `splits` chunks decoded by
  /// separate blocks, merged by a combine kernel through part_acc [B, nh, splits, hd] and
  /// part_ml [B, nh, splits, 2] (running max, sum of exponentials). splits = 1: no partials.
  int splits = 1;
  float* part_acc = nullptr;
  float* part_ml = nullptr;
};
/// The split count attention_decode uses for B rows (attention_splits) and the partial rows
/// (B * splits) the largest over B = 1..max_rows rows in groups of 1..max_T tokens needs: the
/// scratch to lay out.
int attention_splits(const Attention& p, int64_t B, int num_sms);
int64_t attention_partial_rows(const Attention& p, int64_t max_rows, int num_sms, int max_T);
/// Normalises / rotates q (into Attention::q) and k, and writes k, v at the row's position.
void attention_prep(const Attention& p, int64_t B, cudaStream_t s);
/// Attention of each query head over its slot's cache: out (bf16) [B, nh * hd]. hd % 32 == 0:
/// flash-decoding over p.splits chunks of positions, one block per (KV head, row, chunk) sharing
/// each K/V row across the group's query heads (hd 64, 128, 256 on the tensor cores:
/// attention_mma.h); other hd: one block per (query head, row).
void attention_decode(const Attention& p, int64_t B, cudaStream_t s);

/// MLP activation into bf16 out [B, I]: relu2 (Nemotron-H): relu(in[b, i])^2 of in [B, I];
/// SwiGLU (Qwen, gated): silu(in[b, i]) * in[b, I + i] of in [B, 2I] = [gate | up].
void mlp_activation(const float* in, int64_t B, int64_t I, bool gated, bf16* out, cudaStream_t s);

/// y[b, o] += bias[o] for y [B, n] with row stride ldy (nn.Linear bias).
void add_bias(float* y, int64_t ldy, const float* bias, int64_t B, int64_t n, cudaStream_t s);

/// positions[slots[b]] += counts[b] for every row (counts nullptr: 1, a decode step; else the
/// tokens a verify step's rows kept).
void advance_positions(int32_t* positions, const int32_t* slots, const int32_t* counts, int64_t B,
                       int32_t num_slots, cudaStream_t s);

/// A verify step's token rows (rows b * T + t of row b's tokens): tok_slots[r] = slots[b] and
/// tok_pos[r] = positions[slots[b]] + t for t < ntok[b], else -1 and 0 (unused rows, pad rows).
void verify_rows(const int32_t* slots, const int32_t* ntok, const int32_t* positions, int64_t B,
                 int32_t T, int32_t num_slots, int32_t* tok_slots, int32_t* tok_pos,
                 cudaStream_t s);

/// The snapshot baseline of speculative decoding (conventional SSM mode with verify steps; issue
/// 5 item 5): slot s owns `buffers` = spec_T + 1 state buffers, pool rows s * buffers + j, and
/// cur[s] says which holds its state. For each row b: src[b] = its current buffer, and dst [B, T]
/// the buffers its T tokens' snapshots go to, the others in cyclic order
/// after cur (pad rows: -1).
void snapshot_rows(const int32_t* slots, const int32_t* cur, int64_t B, int32_t T,
                   int32_t buffers, int32_t num_slots, int32_t* src, int32_t* dst,
                   cudaStream_t s);
/// The baseline's rollback: row b's state becomes the snapshot after its accepted[b]-th token,
/// cur[slots[b]] = (cur + accepted[b]) % buffers (0: the step is discarded, cur unchanged).
void snapshot_advance(const int32_t* slots, const int32_t* accepted, int64_t B, int32_t buffers,
                      int32_t num_slots, int32_t* cur, cudaStream_t s);

/// Zeroes row slots[b] of `base` (rows of row_bytes bytes, a multiple of 4) for each of n ids.
void zero_slot_rows(void* base, int64_t row_bytes, const int32_t* slots, int64_t n,
                    int32_t num_slots, cudaStream_t s);

}  // namespace replayssm::engine::cuda
