// Random-weight checkpoints in the published Hugging Face layouts (config.json +
// model.safetensors), small enough to decode thousands of steps in a test. The weights are drawn
// so the SSM dynamics stay in the regime of trained models: decays spread over (0, 1), dt around
// 0.01..0.1, unit-scale activations.
#pragma once
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/engine/safetensors.h"

namespace replayssm::engine::testing {

class TinyWriter {
 public:
  explicit TinyWriter(uint64_t seed) : rng_(seed) {}
  /// Normal(0, scale) entries.
  void normal(const std::string& name, std::vector<int64_t> shape, double scale) {
    std::normal_distribution<float> d{0.0f, float(scale)};
    add(name, shape, [&] { return d(rng_); });
  }
  void uniform(const std::string& name, std::vector<int64_t> shape, double lo, double hi) {
    std::uniform_real_distribution<float> d{float(lo), float(hi)};
    add(name, shape, [&] { return d(rng_); });
  }
  void constant(const std::string& name, std::vector<int64_t> shape, float v) {
    add(name, shape, [&] { return v; });
  }
  /// nn.Linear weight [out, in] with the usual 1/sqrt(in) scale.
  void linear(const std::string& name, int64_t out, int64_t in) {
    normal(name + ".weight", {out, in}, 1.0 / std::sqrt(double(in)));
  }
  void write(const std::string& dir, const nlohmann::json& config, const std::string& dtype) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/config.json") << config.dump(2);
    for (auto& t : tensors_) t.dtype_name = dtype;
    write_safetensors(dir + "/model.safetensors", tensors_);
  }

 private:
  template <class F>
  void add(const std::string& name, std::vector<int64_t> shape, F draw) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    StWriteTensor t{name, "F32", shape, {}};
    t.values.resize(n);
    for (auto& v : t.values) v = draw();
    tensors_.push_back(std::move(t));
  }
  std::mt19937_64 rng_;
  std::vector<StWriteTensor> tensors_;
};

/// Sizes of a tiny Nemotron-H. The defaults are the CPU test models (the checkpoints they write
/// are fixed); the CUDA tests take d_state 64 (the CUDA kernels run 64 or 128).
struct NemotronDims {
  int64_t V = 256, H = 64, nh = 4, P = 16, N = 16, G = 2, I = 128, ah = 4, kvh = 2, hd = 16;
};

/// Nemotron-H (NemotronHForCausalLM layout, "backbone." prefix): pattern of M / * / - blocks.
inline void write_tiny_nemotron_h(const std::string& dir, uint64_t seed,
                                  const std::string& pattern = "M*M-M", const std::string& dtype = "F32",
                                  const NemotronDims& d = {}) {
  const int64_t V = d.V, H = d.H, nh = d.nh, P = d.P, N = d.N, G = d.G, I = d.I, ah = d.ah;
  const int64_t kvh = d.kvh, hd = d.hd;
  const int64_t di = nh * P, cd = di + 2 * G * N;
  nlohmann::json c = {{"model_type", "nemotron_h"}, {"architectures", {"NemotronHForCausalLM"}},
                      {"vocab_size", V}, {"hidden_size", H}, {"num_hidden_layers", pattern.size()},
                      {"hybrid_override_pattern", pattern}, {"mamba_num_heads", nh},
                      {"mamba_head_dim", P}, {"ssm_state_size", N}, {"n_groups", G},
                      {"conv_kernel", 4}, {"use_conv_bias", true}, {"mamba_proj_bias", false},
                      {"mamba_hidden_act", "silu"}, {"mlp_hidden_act", "relu2"},
                      {"num_attention_heads", ah}, {"num_key_value_heads", kvh}, {"head_dim", hd},
                      {"attention_bias", false}, {"intermediate_size", I}, {"mlp_bias", false},
                      {"layer_norm_epsilon", 1e-5}, {"residual_in_fp32", true},
                      {"tie_word_embeddings", false}, {"expand", 1},
                      {"max_position_embeddings", 4096}};
  TinyWriter w(seed);
  w.normal("backbone.embeddings.weight", {V, H}, 1.0);
  for (size_t i = 0; i < pattern.size(); ++i) {
    const std::string p = "backbone.layers." + std::to_string(i) + ".";
    w.uniform(p + "norm.weight", {H}, 0.8, 1.2);
    const std::string m = p + "mixer.";
    if (pattern[i] == 'M') {
      w.linear(m + "in_proj", 2 * di + 2 * G * N + nh, H);
      w.normal(m + "conv1d.weight", {cd, 1, 4}, 0.5);
      w.normal(m + "conv1d.bias", {cd}, 0.1);
      w.uniform(m + "dt_bias", {nh}, -4.5, -2.5);    // softplus -> dt ~ 0.01 .. 0.08
      w.uniform(m + "A_log", {nh}, 0.0, 2.7);        // A in [-15, -1]
      w.uniform(m + "D", {nh}, 0.5, 1.5);
      w.uniform(m + "norm.weight", {di}, 0.8, 1.2);
      w.linear(m + "out_proj", H, di);
    } else if (pattern[i] == '*') {
      w.linear(m + "q_proj", ah * hd, H);
      w.linear(m + "k_proj", kvh * hd, H);
      w.linear(m + "v_proj", kvh * hd, H);
      w.linear(m + "o_proj", H, ah * hd);
    } else {
      w.linear(m + "up_proj", I, H);
      w.linear(m + "down_proj", H, I);
    }
  }
  w.uniform("backbone.norm_f.weight", {H}, 0.8, 1.2);
  w.linear("lm_head", V, H);
  w.write(dir, c, dtype);
}

/// Sizes of a tiny Qwen3-Next. The defaults are the CPU test models (the checkpoints they write
/// are fixed); the CUDA tests take head_k_dim 64 (the CUDA kernels run 64 or 128).
struct QwenDims {
  int64_t V = 256, H = 64, Hk = 2, Hv = 4, dk = 16, dv = 16, I = 128, ah = 4, kvh = 2, hd = 16;
};

/// Qwen3-Next (Qwen3NextForCausalLM layout, interleaved in_proj_qkvz / in_proj_ba, dense MLP).
inline void write_tiny_qwen3_next(const std::string& dir, uint64_t seed,
                                  const std::string& dtype = "F32", const QwenDims& d = {}) {
  const int64_t V = d.V, H = d.H, L = 4, Hk = d.Hk, Hv = d.Hv, dk = d.dk, dv = d.dv, I = d.I;
  const int64_t ah = d.ah, kvh = d.kvh, hd = d.hd, cd = 2 * Hk * dk + Hv * dv;
  nlohmann::json c = {{"model_type", "qwen3_next"}, {"architectures", {"Qwen3NextForCausalLM"}},
                      {"vocab_size", V}, {"hidden_size", H}, {"num_hidden_layers", L},
                      {"layer_types", {"linear_attention", "linear_attention", "full_attention",
                                       "linear_attention"}},
                      {"linear_num_key_heads", Hk}, {"linear_num_value_heads", Hv},
                      {"linear_key_head_dim", dk}, {"linear_value_head_dim", dv},
                      {"linear_conv_kernel_dim", 4}, {"num_attention_heads", ah},
                      {"num_key_value_heads", kvh}, {"head_dim", hd},
                      {"partial_rotary_factor", 0.25}, {"rope_theta", 10000.0},
                      {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"}, {"intermediate_size", I},
                      {"num_experts", 0}, {"attention_bias", false}, {"tie_word_embeddings", false},
                      {"max_position_embeddings", 4096}};
  TinyWriter w(seed);
  w.normal("model.embed_tokens.weight", {V, H}, 1.0);
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w.normal(p + "input_layernorm.weight", {H}, 0.1);  // Qwen norms multiply by (1 + w)
    w.normal(p + "post_attention_layernorm.weight", {H}, 0.1);
    if (i != 2) {
      const std::string m = p + "linear_attn.";
      w.linear(m + "in_proj_qkvz", 2 * Hk * dk + 2 * Hv * dv, H);
      w.linear(m + "in_proj_ba", 2 * Hv, H);
      w.normal(m + "conv1d.weight", {cd, 1, 4}, 0.5);
      w.uniform(m + "dt_bias", {Hv}, -1.0, 1.0);
      w.uniform(m + "A_log", {Hv}, -1.0, 1.5);
      w.uniform(m + "norm.weight", {dv}, 0.8, 1.2);
      w.linear(m + "out_proj", H, Hv * dv);
    } else {
      const std::string m = p + "self_attn.";
      w.linear(m + "q_proj", ah * hd * 2, H);
      w.linear(m + "k_proj", kvh * hd, H);
      w.linear(m + "v_proj", kvh * hd, H);
      w.linear(m + "o_proj", H, ah * hd);
      w.normal(m + "q_norm.weight", {hd}, 0.1);
      w.normal(m + "k_norm.weight", {hd}, 0.1);
    }
    w.linear(p + "mlp.gate_proj", I, H);
    w.linear(p + "mlp.up_proj", I, H);
    w.linear(p + "mlp.down_proj", H, I);
  }
  w.normal("model.norm.weight", {H}, 0.1);
  w.linear("lm_head", V, H);
  w.write(dir, c, dtype);
}

}  // namespace replayssm::engine::testing
