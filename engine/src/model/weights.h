// Loading float32 parameters from a checkpoint with their expected shapes: the Hugging Face tensor
// names and shapes of every layer kind in one place (models.md §2.2-2.5), shared by the CPU mixers
// and the CUDA engine (which converts them to its own storage).
#pragma once
#include <string>
#include <vector>

#include "cpu/ops.h"
#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/config.h"

namespace replayssm::engine {

/// nn.Linear weight `name` [out, in] (+ `bias_name` [out] when with_bias).
cpu::Linear load_linear(const Checkpoint& ck, const std::string& name, int64_t out, int64_t in,
                        bool with_bias = false);
/// A depthwise conv1d weight [C, 1, k] stored as [C, k].
std::vector<float> load_conv(const Checkpoint& ck, const std::string& name, int64_t C, int64_t k);

/// Nemotron-H / Mamba2 mixer (`prefix` = "...layers.i.mixer."). in_proj rows: [z | xBC | dt].
struct Mamba2Weights {
  cpu::Linear in_proj;   ///< [2 d_inner + 2 G N + nheads, hidden]
  cpu::Linear out_proj;  ///< [hidden, d_inner]
  std::vector<float> conv_w;  ///< [conv_dim, k]
  std::vector<float> conv_b;  ///< [conv_dim], empty without use_conv_bias
  std::vector<float> A_log, dt_bias, D;  ///< [nheads]
  std::vector<float> norm_w;             ///< [d_inner] gated-norm weight
};
Mamba2Weights load_mamba2_weights(const Checkpoint& ck, const ModelConfig& cfg,
                                  const std::string& prefix);

/// Qwen3-Next / Qwen3.5 Gated DeltaNet mixer (`prefix` = "...layers.i.linear_attn.").
/// Qwen3-Next (interleaved_proj): qkvz and ba, laid out per key head (models.md §2.4); Qwen3.5:
/// qkv ([q | k | v], the conv order), z, b, a.
struct GdnWeights {
  cpu::Linear qkvz, ba, qkv, z, b, a, out_proj;
  std::vector<float> conv_w;           ///< [conv_dim, k] (no bias)
  std::vector<float> A_log, dt_bias;   ///< [num_v_heads]
  std::vector<float> norm_w;           ///< [head_v_dim], shared by all value heads
};
GdnWeights load_gdn_weights(const Checkpoint& ck, const ModelConfig& cfg,
                            const std::string& prefix);

/// Qwen3-Next: the rows of in_proj_qkvz / in_proj_ba reordered so that their outputs come out
/// de-interleaved, [q (Hk dk) | k (Hk dk) | v (Hv dv) | z (Hv dv)] and [b (Hv) | a (Hv)]: the
/// layout of Qwen3.5's split projections. Each output element is the same dot product as before.
cpu::Linear deinterleave_qkvz(const cpu::Linear& qkvz, const GdnConfig& c);
cpu::Linear deinterleave_ba(const cpu::Linear& ba, const GdnConfig& c);

/// Attention (`prefix` = "...mixer." / "...self_attn."): q_proj emits [heads, 2 head_dim]
/// (query | gate per head) with output_gate; q_norm / k_norm [head_dim] with qk_norm.
struct AttentionWeights {
  cpu::Linear q, k, v, o;
  std::vector<float> q_norm, k_norm;
};
AttentionWeights load_attention_weights(const Checkpoint& ck, const ModelConfig& cfg,
                                        const std::string& prefix);

/// Dense MLP: up_proj, down_proj, and gate_proj when gated (SwiGLU).
struct MlpWeights {
  cpu::Linear gate, up, down;
};
MlpWeights load_mlp_weights(const Checkpoint& ck, const ModelConfig& cfg,
                            const std::string& prefix);

}  // namespace replayssm::engine
