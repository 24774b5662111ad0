// parse_config on representative published configs (key names from models.md §1-§2) and on bad
// ones, which must raise ConfigError naming the key with the actual and the expected value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "replayssm/engine/config.h"

namespace replayssm::engine {
namespace {

using json = nlohmann::json;

// Nemotron-3-Nano-4B (dense: '-' MLP blocks), models.md §1.1.
const char* kNano4B = R"({
  "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
  "hidden_size": 3136, "num_hidden_layers": 42, "vocab_size": 131072,
  "hybrid_override_pattern": "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-",
  "mamba_num_heads": 96, "mamba_head_dim": 80, "ssm_state_size": 128, "n_groups": 8,
  "conv_kernel": 4, "use_conv_bias": true, "mamba_proj_bias": false, "chunk_size": 256,
  "mamba_hidden_act": "silu", "expand": 2,
  "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "attention_bias": false,
  "intermediate_size": 12544, "mlp_hidden_act": "relu2", "mlp_bias": false,
  "tie_word_embeddings": false, "layer_norm_epsilon": 1e-05, "residual_in_fp32": false,
  "max_position_embeddings": 262144, "time_step_min": 0.001, "time_step_max": 0.1,
  "time_step_limit": [0.0, "Infinity"], "mamba_ssm_cache_dtype": "float32"
})";

// Nemotron-3-Super-120B-A12B (LatentMoE 'E' blocks), models.md §1.3.
const char* kSuper = R"({
  "model_type": "nemotron_h", "hidden_size": 4096, "num_hidden_layers": 88, "vocab_size": 131072,
  "hybrid_override_pattern": "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
  "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
  "conv_kernel": 4, "chunk_size": 128, "use_conv_bias": true, "mamba_proj_bias": false,
  "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
  "rope_theta": 10000, "partial_rotary_factor": 1.0,
  "n_routed_experts": 512, "num_experts_per_tok": 22, "moe_intermediate_size": 2688,
  "moe_latent_size": 1024, "n_shared_experts": 1, "moe_shared_expert_intermediate_size": 5376,
  "routed_scaling_factor": 5.0, "norm_topk_prob": true, "n_group": 1, "topk_group": 1,
  "mlp_hidden_act": "relu2", "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E",
  "max_position_embeddings": 262144, "eos_token_id": [2, 11], "rms_norm_eps": 1e-05
})";

// state-spaces/mamba2-130m after HF conversion, models.md §1.8.
const char* kMamba2 = R"({
  "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 768,
  "num_heads": 24, "head_dim": 64, "state_size": 128, "n_groups": 1, "expand": 2,
  "conv_kernel": 4, "num_hidden_layers": 24, "vocab_size": 50288, "tie_word_embeddings": true,
  "layer_norm_epsilon": 1e-05, "residual_in_fp32": true, "use_bias": false, "use_conv_bias": true,
  "rms_norm": true, "chunk_size": 256, "hidden_act": "silu"
})";

// Qwen3-Next-80B-A3B, models.md §1.6.
const char* kQwen3Next = R"({
  "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
  "hidden_size": 2048, "num_hidden_layers": 48, "full_attention_interval": 4,
  "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
  "partial_rotary_factor": 0.25, "rope_theta": 10000000, "rope_scaling": null,
  "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
  "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
  "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
  "shared_expert_intermediate_size": 512, "decoder_sparse_step": 1, "mlp_only_layers": [],
  "norm_topk_prob": true, "intermediate_size": 5120, "hidden_act": "silu",
  "vocab_size": 151936, "rms_norm_eps": 1e-06, "tie_word_embeddings": false,
  "max_position_embeddings": 262144, "attention_bias": false
})";

// Qwen3.5-4B (VLM wrapper, dense), models.md §1.4.
const char* kQwen35 = R"({
  "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
  "tie_word_embeddings": true, "image_token_id": 248056,
  "vision_config": {"model_type": "qwen3_5", "depth": 24, "hidden_size": 1024},
  "text_config": {
    "model_type": "qwen3_5_text", "hidden_size": 2560, "num_hidden_layers": 32,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention",
                    "linear_attention", "linear_attention", "linear_attention", "full_attention",
                    "linear_attention", "linear_attention", "linear_attention", "full_attention",
                    "linear_attention", "linear_attention", "linear_attention", "full_attention",
                    "linear_attention", "linear_attention", "linear_attention", "full_attention",
                    "linear_attention", "linear_attention", "linear_attention", "full_attention",
                    "linear_attention", "linear_attention", "linear_attention", "full_attention",
                    "linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "full_attention_interval": 4,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256, "attn_output_gate": true,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                        "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                        "mrope_interleaved": true},
    "intermediate_size": 9216, "hidden_act": "silu", "vocab_size": 248320, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": true, "max_position_embeddings": 262144, "eos_token_id": 248044,
    "attention_bias": false
  }
})";

// Qwen3.5-122B-A10B (VLM wrapper, MoE), models.md §1.5.
const char* kQwen35Moe = R"({
  "model_type": "qwen3_5_moe",
  "text_config": {
    "model_type": "qwen3_5_moe_text", "hidden_size": 3072, "num_hidden_layers": 48,
    "full_attention_interval": 4, "num_attention_heads": 32, "num_key_value_heads": 2,
    "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 64,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 1024,
    "shared_expert_intermediate_size": 1024, "vocab_size": 248320, "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25}
  }
})";

int64_t count(const std::vector<BlockKind>& v, BlockKind k) {
  return std::count(v.begin(), v.end(), k);
}

std::vector<int64_t> where(const std::vector<BlockKind>& v, BlockKind k) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] == k) out.push_back(static_cast<int64_t>(i));
  return out;
}

/// The ConfigError message parse_config raises for `j` ("" and a failure if none).
std::string config_error(const json& j) {
  try {
    (void)parse_config(j);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for " << j.dump().substr(0, 200);
  return "";
}

void expect_has(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(Config, NemotronNano4B) {
  const ModelConfig c = parse_config(json::parse(kNano4B));
  EXPECT_EQ(c.arch, Arch::kNemotronH);
  EXPECT_STREQ(arch_name(c.arch), "nemotron_h");
  EXPECT_EQ(c.model_type, "nemotron_h");
  EXPECT_EQ(c.weight_prefix, "backbone.");
  EXPECT_EQ(c.hidden_size, 3136);
  EXPECT_EQ(c.vocab_size, 131072);
  EXPECT_EQ(c.num_layers, 42);
  ASSERT_EQ(c.layers.size(), 42u);
  EXPECT_EQ(count(c.layers, BlockKind::kMamba2), 21);
  EXPECT_EQ(count(c.layers, BlockKind::kMlp), 17);
  EXPECT_EQ(where(c.layers, BlockKind::kAttention), (std::vector<int64_t>{12, 17, 24, 32}));
  EXPECT_TRUE(c.qwen_mlp.empty());
  EXPECT_EQ(c.mamba.nheads, 96);
  EXPECT_EQ(c.mamba.headdim, 80);
  EXPECT_EQ(c.mamba.d_inner(), 7680);
  EXPECT_EQ(c.mamba.d_state, 128);
  EXPECT_EQ(c.mamba.ngroups, 8);
  EXPECT_EQ(c.mamba.conv_dim(), 9728);
  EXPECT_EQ(c.mamba.norm_group_size, 960);
  EXPECT_TRUE(c.mamba.use_conv_bias);
  EXPECT_FALSE(c.mamba.proj_bias);
  EXPECT_EQ(c.mamba.dt_min_clamp, 0.0);
  EXPECT_TRUE(std::isinf(c.mamba.dt_max_clamp));
  EXPECT_EQ(c.attn.num_heads, 40);
  EXPECT_EQ(c.attn.num_kv_heads, 8);
  EXPECT_EQ(c.attn.head_dim, 128);
  EXPECT_EQ(c.attn.rotary_dim, 0);
  EXPECT_FALSE(c.attn.output_gate);
  EXPECT_FALSE(c.attn.qk_norm);
  EXPECT_EQ(c.mlp.intermediate, 12544);
  EXPECT_FALSE(c.mlp.gated);
  EXPECT_FALSE(c.qwen_norm);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.residual_in_fp32);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.max_position, 262144);
}

TEST(Config, NemotronLayersBlockTypeList) {
  // Newer exports: a list, in the legacy (mamba/attention) or current spellings, no pattern.
  json j = json::parse(kNano4B);
  const std::string p = j["hybrid_override_pattern"];
  json list = json::array();
  for (size_t i = 0; i < p.size(); ++i) {
    const char ch = p[i];
    list.push_back(ch == 'M' ? (i % 2 ? "mamba" : "linear_attention")
                   : ch == '*' ? (i % 2 ? "attention" : "full_attention")
                               : "mlp");
  }
  j.erase("hybrid_override_pattern");
  j["layers_block_type"] = list;
  const ModelConfig c = parse_config(j);
  EXPECT_EQ(c.layers, parse_config(json::parse(kNano4B)).layers);
  // Both given and agreeing is fine too; num_hidden_layers may be absent.
  j["hybrid_override_pattern"] = p;
  j.erase("num_hidden_layers");
  EXPECT_EQ(parse_config(j).num_layers, 42);
}

TEST(Config, NemotronSuperLatentMoe) {
  const ModelConfig c = parse_config(json::parse(kSuper));
  EXPECT_EQ(c.num_layers, 88);
  EXPECT_EQ(count(c.layers, BlockKind::kMamba2), 40);
  EXPECT_EQ(count(c.layers, BlockKind::kMoe), 40);
  EXPECT_EQ(where(c.layers, BlockKind::kAttention),
            (std::vector<int64_t>{7, 16, 25, 36, 47, 58, 69, 78}));
  EXPECT_EQ(c.mamba.d_inner(), 8192);
  EXPECT_EQ(c.mamba.conv_dim(), 10240);
  EXPECT_EQ(c.mamba.norm_group_size, 1024);
  EXPECT_EQ(c.attn.num_heads, 32);
  EXPECT_EQ(c.attn.num_kv_heads, 2);
  EXPECT_EQ(c.attn.rotary_dim, 0);  // RoPE keys in the file are ignored by NemotronHAttention
  EXPECT_EQ(c.moe.num_experts, 512);
  EXPECT_EQ(c.moe.top_k, 22);
  EXPECT_EQ(c.moe.expert_intermediate, 2688);
  EXPECT_EQ(c.moe.shared_intermediate, 5376);
  EXPECT_EQ(c.moe.latent_size, 1024);
  EXPECT_TRUE(c.moe.sigmoid_router);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 5.0);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);  // from rms_norm_eps
  // Absent time_step_limit: HF default (0, inf).
  EXPECT_EQ(c.mamba.dt_min_clamp, 0.0);
  EXPECT_TRUE(std::isinf(c.mamba.dt_max_clamp));
}

TEST(Config, Mamba2) {
  const ModelConfig c = parse_config(json::parse(kMamba2));
  EXPECT_EQ(c.arch, Arch::kMamba2);
  EXPECT_EQ(c.weight_prefix, "backbone.");
  EXPECT_EQ(c.num_layers, 24);
  EXPECT_EQ(count(c.layers, BlockKind::kMamba2), 24);
  EXPECT_EQ(c.mamba.d_inner(), 1536);
  EXPECT_EQ(c.mamba.conv_dim(), 1792);
  EXPECT_EQ(c.mamba.norm_group_size, 1536);
  EXPECT_EQ(c.mamba.ngroups, 1);
  EXPECT_EQ(c.vocab_size, 50288);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.residual_in_fp32);
  EXPECT_FALSE(c.mamba.proj_bias);
  EXPECT_TRUE(std::isinf(c.mamba.dt_max_clamp));
}

TEST(Config, Mamba2Defaults) {
  // Absent keys take Mamba2Config's defaults (Codestral-sized).
  const ModelConfig c = parse_config(json::parse(R"({"model_type": "mamba2"})"));
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_layers, 64);
  EXPECT_EQ(c.vocab_size, 32768);
  EXPECT_EQ(c.mamba.nheads, 128);
  EXPECT_EQ(c.mamba.ngroups, 8);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(Config, Qwen3Next) {
  const ModelConfig c = parse_config(json::parse(kQwen3Next));
  EXPECT_EQ(c.arch, Arch::kQwen3Next);
  EXPECT_STREQ(arch_name(c.arch), "qwen3_next");
  EXPECT_EQ(c.weight_prefix, "model.");
  EXPECT_EQ(c.num_layers, 48);
  EXPECT_EQ(count(c.layers, BlockKind::kGdn), 36);
  const auto attn = where(c.layers, BlockKind::kAttention);
  ASSERT_EQ(attn.size(), 12u);
  EXPECT_EQ(attn.front(), 3);
  EXPECT_EQ(attn.back(), 47);
  ASSERT_EQ(c.qwen_mlp.size(), 48u);
  EXPECT_EQ(count(c.qwen_mlp, BlockKind::kMoe), 48);
  EXPECT_TRUE(c.gdn.interleaved_proj);
  EXPECT_EQ(c.gdn.num_k_heads, 16);
  EXPECT_EQ(c.gdn.num_v_heads, 32);
  EXPECT_EQ(c.gdn.conv_dim(), 8192);
  EXPECT_EQ(c.attn.head_dim, 256);
  EXPECT_EQ(c.attn.rotary_dim, 64);
  EXPECT_DOUBLE_EQ(c.attn.rope_theta, 1e7);
  EXPECT_TRUE(c.attn.output_gate);
  EXPECT_TRUE(c.attn.qk_norm);
  EXPECT_TRUE(c.qwen_norm);
  EXPECT_FALSE(c.residual_in_fp32);
  EXPECT_EQ(c.moe.num_experts, 512);
  EXPECT_EQ(c.moe.top_k, 10);
  EXPECT_EQ(c.moe.expert_intermediate, 512);
  EXPECT_EQ(c.moe.shared_intermediate, 512);
  EXPECT_FALSE(c.moe.sigmoid_router);
  EXPECT_TRUE(c.mlp.gated);
  EXPECT_EQ(c.mlp.intermediate, 5120);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(Config, Qwen3NextSparseStepAndMlpOnlyLayers) {
  json j = json::parse(kQwen3Next);
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = json::array({5});
  const ModelConfig c = parse_config(j);
  // MoE where (i + 1) % 2 == 0 and i not in mlp_only_layers: 1, 3, 7, 9, ...
  EXPECT_EQ(c.qwen_mlp[0], BlockKind::kMlp);
  EXPECT_EQ(c.qwen_mlp[1], BlockKind::kMoe);
  EXPECT_EQ(c.qwen_mlp[3], BlockKind::kMoe);
  EXPECT_EQ(c.qwen_mlp[5], BlockKind::kMlp);
  EXPECT_EQ(c.qwen_mlp[7], BlockKind::kMoe);
  EXPECT_EQ(count(c.qwen_mlp, BlockKind::kMoe), 23);
  // rope_parameters (transformers v5 layout) is read when present.
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e6}, {"partial_rotary_factor", 0.5}};
  const ModelConfig r = parse_config(j);
  EXPECT_EQ(r.attn.rotary_dim, 128);
  EXPECT_DOUBLE_EQ(r.attn.rope_theta, 5e6);
}

TEST(Config, Qwen35VlmWrapper) {
  const ModelConfig c = parse_config(json::parse(kQwen35));
  EXPECT_EQ(c.arch, Arch::kQwen35);
  EXPECT_EQ(c.model_type, "qwen3_5");
  EXPECT_EQ(c.weight_prefix, "model.language_model.");
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(count(c.layers, BlockKind::kGdn), 24);
  EXPECT_EQ(where(c.layers, BlockKind::kAttention).front(), 3);
  EXPECT_EQ(count(c.qwen_mlp, BlockKind::kMlp), 32);
  EXPECT_EQ(c.moe.num_experts, 0);
  EXPECT_FALSE(c.gdn.interleaved_proj);
  EXPECT_EQ(c.attn.num_heads, 16);
  EXPECT_EQ(c.attn.num_kv_heads, 4);
  EXPECT_EQ(c.attn.rotary_dim, 64);
  EXPECT_DOUBLE_EQ(c.attn.rope_theta, 1e7);
  EXPECT_TRUE(c.attn.output_gate);
  EXPECT_EQ(c.mlp.intermediate, 9216);
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position, 262144);
  // A bare text config (Qwen3_5ForCausalLM export) uses the "model." prefix.
  const ModelConfig t = parse_config(json::parse(kQwen35)["text_config"]);
  EXPECT_EQ(t.weight_prefix, "model.");
  EXPECT_EQ(t.layers, c.layers);
}

TEST(Config, Qwen35MoeVlmWrapper) {
  const ModelConfig c = parse_config(json::parse(kQwen35Moe));
  EXPECT_EQ(c.arch, Arch::kQwen35);
  EXPECT_EQ(c.weight_prefix, "model.language_model.");
  EXPECT_EQ(count(c.layers, BlockKind::kGdn), 36);
  EXPECT_EQ(count(c.layers, BlockKind::kAttention), 12);
  EXPECT_EQ(count(c.qwen_mlp, BlockKind::kMoe), 48);
  EXPECT_EQ(c.gdn.num_v_heads, 64);
  EXPECT_EQ(c.gdn.conv_dim(), 12288);
  EXPECT_EQ(c.moe.num_experts, 256);
  EXPECT_EQ(c.moe.top_k, 8);
  EXPECT_EQ(c.moe.expert_intermediate, 1024);
  EXPECT_EQ(c.moe.shared_intermediate, 1024);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(Config, Names) {
  EXPECT_STREQ(arch_name(Arch::kMamba2), "mamba2");
  EXPECT_STREQ(arch_name(Arch::kQwen35), "qwen3_5");
  EXPECT_STREQ(block_name(BlockKind::kGdn), "gdn");
  EXPECT_STREQ(block_name(BlockKind::kMoe), "moe");
  EXPECT_STREQ(block_name(BlockKind::kAttention), "attention");
}

// ---- bad configs ------------------------------------------------------------------------------

TEST(Config, RejectsPatternLengthMismatch) {
  json j = json::parse(kNano4B);
  j["num_hidden_layers"] = 43;
  expect_has(config_error(j), {"'hybrid_override_pattern'", "42 layers", "num_hidden_layers 43"});
  json q = json::parse(kQwen35);
  q["text_config"]["num_hidden_layers"] = 30;
  expect_has(config_error(q), {"'text_config.layer_types'", "32 layers", "num_hidden_layers 30"});
}

TEST(Config, RejectsUnknownBlock) {
  json j = json::parse(kNano4B);
  j["hybrid_override_pattern"] = "M-X";
  j["num_hidden_layers"] = 3;
  expect_has(config_error(j), {"'hybrid_override_pattern'", "'X' at position 2", "M", "E"});
  json l = json::parse(kNano4B);
  l.erase("hybrid_override_pattern");
  l["layers_block_type"] = json::array({"mamba", "conv"});
  expect_has(config_error(l), {"'layers_block_type'[1]", "\"conv\""});
  json q = json::parse(kQwen3Next);
  q["layer_types"] = json::array();
  for (int i = 0; i < 48; ++i) q["layer_types"].push_back(i == 5 ? "sliding_attention" : "linear_attention");
  expect_has(config_error(q), {"'layer_types'[5]", "sliding_attention"});
  json none = json::parse(kNano4B);
  none.erase("hybrid_override_pattern");
  expect_has(config_error(none), {"hybrid_override_pattern", "layers_block_type"});
  json both = json::parse(kNano4B);
  both["layers_block_type"] = json::array();
  for (int i = 0; i < 42; ++i) both["layers_block_type"].push_back("mamba");
  expect_has(config_error(both), {"disagrees"});
}

TEST(Config, RejectsHeadsNotDividing) {
  json m = json::parse(kNano4B);
  m["n_groups"] = 7;
  expect_has(config_error(m), {"'n_groups' is 7", "divisor of 'mamba_num_heads' 96"});
  json a = json::parse(kNano4B);
  a["num_key_value_heads"] = 3;
  expect_has(config_error(a), {"'num_key_value_heads' is 3", "divisor of 'num_attention_heads' 40"});
  json g = json::parse(kQwen35);
  g["text_config"]["linear_num_key_heads"] = 5;
  expect_has(config_error(g), {"'text_config.linear_num_key_heads' is 5",
                               "'text_config.linear_num_value_heads' 32"});
  json q = json::parse(kQwen3Next);
  q["num_key_value_heads"] = 3;
  expect_has(config_error(q), {"'num_key_value_heads' is 3"});
  json mamba = json::parse(kMamba2);
  mamba["n_groups"] = 5;
  expect_has(config_error(mamba), {"'n_groups' is 5", "'num_heads' 24"});
}

TEST(Config, RejectsInconsistentMamba2Sizes) {
  json j = json::parse(kMamba2);
  j["num_heads"] = 16;
  expect_has(config_error(j), {"'num_heads' 16", "'head_dim' 64", "1024", "'expand' 2",
                               "'hidden_size' 768", "1536"});
}

TEST(Config, RejectsBadValues) {
  json t = json::parse(kNano4B);
  t["hidden_size"] = "big";
  expect_has(config_error(t), {"'hidden_size'", "\"big\"", "expected an integer"});
  json z = json::parse(kMamba2);
  z["hidden_size"] = 0;
  expect_has(config_error(z), {"'hidden_size' is 0", "expected > 0"});
  json b = json::parse(kNano4B);
  b["use_conv_bias"] = 1;
  expect_has(config_error(b), {"'use_conv_bias'", "true or false"});
  json s = json::parse(kNano4B);
  s["ssm_state_size"] = -128;
  expect_has(config_error(s), {"'ssm_state_size' is -128", "expected > 0"});
  json dt = json::parse(kNano4B);
  dt["time_step_limit"] = json::array({0.1});
  expect_has(config_error(dt), {"'time_step_limit'", "[min, max]"});
  json act = json::parse(kNano4B);
  act["mlp_hidden_act"] = "gelu";
  expect_has(config_error(act), {"'mlp_hidden_act' is \"gelu\"", "relu2"});
  json topk = json::parse(kSuper);
  topk["num_experts_per_tok"] = 600;
  expect_has(config_error(topk), {"'num_experts_per_tok' is 600", "'n_routed_experts' 512"});
  json eps = json::parse(kQwen3Next);
  eps["rms_norm_eps"] = 0;
  expect_has(config_error(eps), {"'rms_norm_eps' is 0", "expected > 0"});
}

TEST(Config, RejectsUnsupportedModelsAndRope) {
  expect_has(config_error(json::parse(R"({"model_type": "llama"})")),
             {"'model_type' is \"llama\"", "nemotron_h"});
  expect_has(config_error(json::parse(R"({"hidden_size": 8})")), {"'model_type' is missing"});
  expect_has(config_error(json::array()), {"expected a JSON object"});
  expect_has(config_error(json::parse(R"({"model_type": "qwen3_5"})")), {"'text_config'", "missing"});
  json y = json::parse(kQwen3Next);
  y["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_has(config_error(y), {"'rope_scaling'", "\"yarn\"", "default"});
  json p = json::parse(kQwen35);
  p["text_config"]["rope_parameters"]["partial_rotary_factor"] = 1.5;
  expect_has(config_error(p), {"'text_config.rope_parameters.partial_rotary_factor' is 1.5", "(0, 1]"});
  // model_type absent: architectures[0] decides.
  json a = json::parse(kMamba2);
  a.erase("model_type");
  EXPECT_EQ(parse_config(a).arch, Arch::kMamba2);
}

}  // namespace
}  // namespace replayssm::engine

namespace replayssm::engine {
namespace {

// transformers 5.2x writes non-finite floats as {"__float__": "Infinity"} in config.json.
TEST(Config, TimeStepLimitInTransformersFloatObjectForm) {
  nlohmann::json j = nlohmann::json::parse(R"({"model_type": "mamba2", "num_heads": 4,
    "head_dim": 16, "hidden_size": 32, "expand": 2, "state_size": 16, "n_groups": 1,
    "num_hidden_layers": 2, "vocab_size": 256,
    "time_step_limit": [0.0, {"__float__": "Infinity"}]})");
  const ModelConfig c = parse_config(j);
  EXPECT_TRUE(std::isinf(c.mamba.dt_max_clamp));
  j["time_step_limit"][1] = {{"__float__", "Bogus"}};
  EXPECT_THROW(parse_config(j), ConfigError);
}

}  // namespace
}  // namespace replayssm::engine
