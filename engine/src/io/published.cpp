// config.json values transcribed from reference models.md §1.1 (Nemotron-3-Nano-4B, ≥ 4 agreeing
// sources) and §1.4 (Qwen3.5-4B text_config); keys as in the published files.
#include "replayssm/engine/published.h"

#include "replayssm/engine/errors.h"

namespace replayssm::engine {
namespace {

constexpr const char* kNemotronNano4B = R"({
  "architectures": ["NemotronHForCausalLM"],
  "model_type": "nemotron_h",
  "hidden_size": 3136,
  "num_hidden_layers": 42,
  "hybrid_override_pattern": "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-",
  "mamba_num_heads": 96,
  "mamba_head_dim": 80,
  "ssm_state_size": 128,
  "n_groups": 8,
  "conv_kernel": 4,
  "use_conv_bias": true,
  "mamba_proj_bias": false,
  "mamba_hidden_act": "silu",
  "chunk_size": 256,
  "num_attention_heads": 40,
  "num_key_value_heads": 8,
  "head_dim": 128,
  "attention_bias": false,
  "intermediate_size": 12544,
  "mlp_hidden_act": "relu2",
  "mlp_bias": false,
  "vocab_size": 131072,
  "tie_word_embeddings": false,
  "layer_norm_epsilon": 1e-05,
  "residual_in_fp32": true,
  "max_position_embeddings": 262144,
  "time_step_min": 0.001,
  "time_step_max": 0.1,
  "time_step_limit": [0.0, "Infinity"]
})";

constexpr const char* kQwen35_4B = R"({
  "architectures": ["Qwen3_5ForCausalLM"],
  "model_type": "qwen3_5_text",
  "hidden_size": 2560,
  "num_hidden_layers": 32,
  "layer_types": [
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention"],
  "full_attention_interval": 4,
  "linear_num_key_heads": 16,
  "linear_num_value_heads": 32,
  "linear_key_head_dim": 128,
  "linear_value_head_dim": 128,
  "linear_conv_kernel_dim": 4,
  "num_attention_heads": 16,
  "num_key_value_heads": 4,
  "head_dim": 256,
  "attn_output_gate": true,
  "attention_bias": false,
  "rope_parameters": {
    "rope_type": "default",
    "rope_theta": 10000000.0,
    "partial_rotary_factor": 0.25,
    "mrope_section": [11, 11, 10],
    "mrope_interleaved": true
  },
  "intermediate_size": 9216,
  "hidden_act": "silu",
  "vocab_size": 248320,
  "rms_norm_eps": 1e-06,
  "tie_word_embeddings": true,
  "max_position_embeddings": 262144
})";

struct Entry {
  const char* name;
  const char* json;
};
constexpr Entry kPublished[] = {{"nemotron-3-nano-4b", kNemotronNano4B}, {"qwen3.5-4b", kQwen35_4B}};

}  // namespace

std::vector<std::string> published_config_names() {
  std::vector<std::string> out;
  for (const Entry& e : kPublished) out.emplace_back(e.name);
  return out;
}

nlohmann::json published_config(const std::string& name) {
  for (const Entry& e : kPublished)
    if (name == e.name) return nlohmann::json::parse(e.json);
  std::string known;
  for (const Entry& e : kPublished) known += std::string(known.empty() ? "" : ", ") + e.name;
  throw ConfigError("unknown architecture '" + name + "', expected one of: " + known);
}

}  // namespace replayssm::engine
