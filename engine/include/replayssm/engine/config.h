// Model configuration parsed from a Hugging Face config.json, for the architectures the engine
// runs: NemotronHForCausalLM (model_type "nemotron_h"), Mamba2ForCausalLM ("mamba2"),
// Qwen3NextForCausalLM ("qwen3_next") and the Qwen3.5 text model ("qwen3_5" / "qwen3_5_text" /
// "qwen3_5_moe" / "qwen3_5_moe_text"; a VLM config is read through its text_config).
// Field meanings and spellings: reference models.md §1-2.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/engine/errors.h"

namespace replayssm::engine {

/// The architecture family (Qwen3.5 dense and MoE are both kQwen35).
enum class Arch { kNemotronH, kMamba2, kQwen3Next, kQwen35 };
/// "nemotron_h", "mamba2", "qwen3_next" or "qwen3_5".
const char* arch_name(Arch a);

/// What a layer (Nemotron-H / Mamba2: one mixer block; Qwen: the token mixer of the layer) is.
enum class BlockKind { kMamba2, kGdn, kAttention, kMlp, kMoe };
/// "mamba2", "gdn", "attention", "mlp" or "moe".
const char* block_name(BlockKind k);

struct Mamba2Config {
  int64_t nheads = 0, headdim = 0, d_state = 0, ngroups = 1, conv_kernel = 4;
  int64_t d_inner() const { return nheads * headdim; }
  int64_t conv_dim() const { return d_inner() + 2 * ngroups * d_state; }
  bool use_conv_bias = true, proj_bias = false;
  /// Gated RMSNorm group size: d_inner / ngroups for Nemotron-H, d_inner for HF Mamba2.
  int64_t norm_group_size = 0;
  double dt_min_clamp = 0.0;   ///< time_step_limit[0]; 0 = none
  double dt_max_clamp = 0.0;   ///< time_step_limit[1]; 0 or inf = none
};

struct GdnConfig {
  int64_t num_k_heads = 0, num_v_heads = 0, head_k_dim = 0, head_v_dim = 0, conv_kernel = 4;
  /// Qwen3-Next stores in_proj_qkvz / in_proj_ba interleaved per key head; Qwen3.5 stores
  /// in_proj_qkv, in_proj_z, in_proj_b, in_proj_a split.
  bool interleaved_proj = false;
  int64_t conv_dim() const { return 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim; }
};

struct AttentionConfig {
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  bool bias = false;
  bool output_gate = false;  ///< Qwen gated attention: q_proj emits [heads, 2*head_dim]
  bool qk_norm = false;      ///< Qwen per-head q_norm / k_norm (1 + w)
  int64_t rotary_dim = 0;    ///< 0: no RoPE (Nemotron-H); else NeoX rotate-half on the first dims
  double rope_theta = 10000.0;
};

struct MlpConfig {
  int64_t intermediate = 0;
  bool gated = false;  ///< SwiGLU (gate_proj, up_proj, down_proj) vs relu2 (up_proj, down_proj)
  bool bias = false;
};

struct MoeConfig {
  int64_t num_experts = 0, top_k = 0, expert_intermediate = 0, shared_intermediate = 0;
  bool norm_topk_prob = true;
  bool sigmoid_router = false;  ///< Nemotron-H: sigmoid + e_score_correction_bias; Qwen: softmax
  double routed_scaling_factor = 1.0;
  /// LatentMoE (Nemotron-3-Super, moe_latent_size): routed experts run at this width between
  /// fc1_latent_proj and fc2_latent_proj; 0 = no latent projections (experts see hidden_size).
  int64_t latent_size = 0;
  /// Grouped top-k routing (n_group, topk_group); 1 and 1 = plain top-k.
  int64_t n_group = 1, topk_group = 1;
};

struct ModelConfig {
  Arch arch = Arch::kNemotronH;
  std::string model_type;
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  double norm_eps = 1e-5;
  bool qwen_norm = false;  ///< (1 + weight) RMSNorm (Qwen) vs weight (Llama style)
  bool tie_word_embeddings = false;
  bool residual_in_fp32 = true;
  std::string weight_prefix;  ///< "backbone." / "model." / "model.language_model."
  /// Nemotron-H / Mamba2: one kind per layer. Qwen: kGdn or kAttention (each layer then has an MLP
  /// or MoE sub-block, `qwen_mlp[i]`).
  std::vector<BlockKind> layers;
  std::vector<BlockKind> qwen_mlp;
  Mamba2Config mamba;
  GdnConfig gdn;
  AttentionConfig attn;
  MlpConfig mlp;
  MoeConfig moe;
  int64_t max_position = 0;  ///< context limit used to size KV caches (max_position_embeddings)
};

/// Parses config.json. Throws ConfigError naming the key for a missing or inconsistent value
/// (unknown model_type/architecture, layer pattern length != num_hidden_layers, heads not
/// dividing, unknown block letter ...).
/// A key that is absent or null takes the default of the transformers config class
/// (NemotronHConfig, Mamba2Config, Qwen3NextConfig, Qwen3_5TextConfig, Qwen3_5MoeTextConfig);
/// only the Nemotron-H layer list (hybrid_override_pattern or layers_block_type) and, for the
/// Qwen3.5 VLM wrappers, text_config are required. model_type falls back to architectures[0].
/// Sections are validated only for block kinds the model uses; activations other than the
/// ones the engine implements (silu for Mamba/Qwen, relu2 for Nemotron-H MLPs) and RoPE
/// scaling types other than default/mrope are rejected. Float values may be the strings
/// "Infinity", "-Infinity", "NaN" (see Checkpoint::open).
ModelConfig parse_config(const nlohmann::json& j);

class Checkpoint;
/// parse_config of a checkpoint's config.json, whose ConfigError names the file
/// ("<dir>/config.json: ..." instead of "config: ..."), so that a run with two checkpoints (a model
/// and a draft model) says which one is at fault.
ModelConfig parse_config_of(const Checkpoint& ck);

}  // namespace replayssm::engine
