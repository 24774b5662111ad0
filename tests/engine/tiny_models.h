// Random-weight checkpoints in the published Hugging Face layouts (config.json +
// model.safetensors), small enough to decode thousands of steps in a test. The weights are drawn
// so the SSM dynamics stay in the regime of trained models: decays spread over (0, 1), dt around
// 0.01..0.1, unit-scale activations.
#pragma once
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <stdexcept>
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
  /// The values of a tensor added before (to shape weights after drawing them).
  std::vector<float>& values(const std::string& name) {
    for (auto& t : tensors_)
      if (t.name == name) return t.values;
    throw std::out_of_range("TinyWriter: no tensor " + name);
  }
  std::mt19937_64& rng() { return rng_; }
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

/// Sizes of an MoE block (num_experts 0: none). Used by the CUDA MoE tests.
struct MoeDims {
  int64_t E = 0, top_k = 2, I = 32, shared_I = 48, n_group = 1, topk_group = 1, latent = 0;
  double scaling = 1.0;
};

/// Makes the routing of the layer-0 MoE block robust to rounding: the router reads only
/// embedding channels 0..E-1 (router row e = unit vector e / norm weight e), and those channels
/// of each token's embedding hold a permutation of E values spaced 0.8 apart, drawn per token
/// until every pair of ranking keys (Nemotron-H: sigmoid(logit) + e_score_correction_bias, and
/// the grouped top-k's group scores; Qwen: the logits) is at least `gap` apart. The block's input
/// is then the normalised embedding (Nemotron-H layer 0; Qwen layer 0 after a GDN whose output is
/// scaled down), so the CPU and CUDA engines route every token alike: bf16 rounding moves these
/// keys by ~1e-2 of `gap`, where random routers leave near-ties in a few % of the tokens.
inline void shape_moe_router(TinyWriter& w, const std::string& embed, const std::string& norm,
                             bool one_plus, double eps, const std::string& router,
                             const std::string& bias, int64_t V, int64_t H, const MoeDims& m,
                             double gap) {
  std::vector<float>& emb = w.values(embed);
  const std::vector<float>& nw = w.values(norm);
  std::vector<float>& R = w.values(router);
  const std::vector<float>* b = bias.empty() ? nullptr : &w.values(bias);
  const int64_t E = m.E;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t c = 0; c < H; ++c)
      R[e * H + c] = c == e ? float(1.0 / (one_plus ? 1.0 + nw[e] : double(nw[e]))) : 0.0f;
  std::vector<int> perm(E);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t t = 0; t < V; ++t) {
    float* row = emb.data() + t * H;
    for (int attempt = 0; attempt < 1000; ++attempt) {
      std::shuffle(perm.begin(), perm.end(), w.rng());
      for (int64_t e = 0; e < E; ++e) row[e] = float((perm[e] - (E - 1) / 2.0) * 0.8);
      double ms = 0;
      for (int64_t c = 0; c < H; ++c) ms += double(row[c]) * row[c];
      const double inv = 1.0 / std::sqrt(ms / H + eps);
      std::vector<double> key(E);
      for (int64_t e = 0; e < E; ++e) {
        const double l = row[e] * inv;
        key[e] = b ? 1.0 / (1.0 + std::exp(-l)) + (*b)[e] : l;
      }
      std::vector<double> groups;
      if (m.n_group > 1) {
        const int64_t per = E / m.n_group;
        for (int64_t g = 0; g < m.n_group; ++g) {
          std::vector<double> v(key.begin() + g * per, key.begin() + (g + 1) * per);
          std::sort(v.rbegin(), v.rend());
          groups.push_back(v[0] + (per > 1 ? v[1] : 0.0));
        }
      }
      const auto apart = [gap](const std::vector<double>& k) {
        for (size_t i = 0; i < k.size(); ++i)
          for (size_t j = i + 1; j < k.size(); ++j)
            if (std::fabs(k[i] - k[j]) < gap) return false;
        return true;
      };
      if (apart(key) && apart(groups)) break;
    }
  }
}

/// Sizes of a tiny Nemotron-H. The defaults are the CPU test models (the checkpoints they write
/// are fixed); the CUDA tests take d_state 64 (the CUDA kernels run 64 or 128).
struct NemotronDims {
  int64_t V = 256, H = 64, nh = 4, P = 16, N = 16, G = 2, I = 128, ah = 4, kvh = 2, hd = 16;
  int64_t conv_k = 4;  ///< conv1d taps (every published model: 4)
  MoeDims moe;  ///< the 'E' blocks' sizes (pattern letter E; with moe.E > 0)
};

/// `d` with widths that take the engine kernels' one-value paths (engine/src/cuda conv.cu,
/// norm.cu, elementwise.cu): 3 conv taps, hidden 66 and intermediate 130 (not multiples of 4),
/// 5 heads in one group (an in_proj row of 2 * 5P + 2N + 5 floats: the gated norm's z stride).
inline NemotronDims odd_widths(NemotronDims d) {
  d.conv_k = 3;
  d.H = 66;
  d.I = 130;
  d.nh = 5;
  d.G = 1;
  return d;
}

/// Nemotron-H (NemotronHForCausalLM layout, "backbone." prefix): pattern of M / * / - / E blocks.
/// An E block (MoE: gate.weight, gate.e_score_correction_bias, experts.{e}.up_proj/down_proj,
/// shared_experts.*, LatentMoE fc1/fc2_latent_proj) must be layer 0, whose router is shaped by
/// shape_moe_router.
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
                      {"conv_kernel", d.conv_k}, {"use_conv_bias", true}, {"mamba_proj_bias", false},
                      {"mamba_hidden_act", "silu"}, {"mlp_hidden_act", "relu2"},
                      {"num_attention_heads", ah}, {"num_key_value_heads", kvh}, {"head_dim", hd},
                      {"attention_bias", false}, {"intermediate_size", I}, {"mlp_bias", false},
                      {"layer_norm_epsilon", 1e-5}, {"residual_in_fp32", true},
                      {"tie_word_embeddings", false}, {"expand", 1},
                      {"max_position_embeddings", 4096}};
  const MoeDims& moe = d.moe;
  if (moe.E > 0) {
    c["n_routed_experts"] = moe.E;
    c["num_experts_per_tok"] = moe.top_k;
    c["moe_intermediate_size"] = moe.I;
    c["n_shared_experts"] = moe.shared_I > 0 ? 1 : 0;
    c["moe_shared_expert_intermediate_size"] = std::max<int64_t>(moe.shared_I, 1);
    c["norm_topk_prob"] = true;
    c["routed_scaling_factor"] = moe.scaling;
    c["n_group"] = moe.n_group;
    c["topk_group"] = moe.topk_group;
    if (moe.latent > 0) c["moe_latent_size"] = moe.latent;
  }
  TinyWriter w(seed);
  w.normal("backbone.embeddings.weight", {V, H}, 1.0);
  for (size_t i = 0; i < pattern.size(); ++i) {
    const std::string p = "backbone.layers." + std::to_string(i) + ".";
    w.uniform(p + "norm.weight", {H}, 0.8, 1.2);
    const std::string m = p + "mixer.";
    if (pattern[i] == 'M') {
      w.linear(m + "in_proj", 2 * di + 2 * G * N + nh, H);
      w.normal(m + "conv1d.weight", {cd, 1, d.conv_k}, 0.5);
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
    } else if (pattern[i] == 'E') {
      if (i != 0 || moe.E <= 0) throw std::invalid_argument("tiny Nemotron-H: E blocks at layer 0");
      w.linear(m + "gate", moe.E, H);
      w.uniform(m + "gate.e_score_correction_bias", {moe.E}, -0.1, 0.1);
      const int64_t width = moe.latent > 0 ? moe.latent : H;
      if (moe.latent > 0) {
        w.linear(m + "fc1_latent_proj", moe.latent, H);
        w.linear(m + "fc2_latent_proj", H, moe.latent);
      }
      for (int64_t e = 0; e < moe.E; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        w.linear(x + "up_proj", moe.I, width);
        w.linear(x + "down_proj", width, moe.I);
      }
      if (moe.shared_I > 0) {
        w.linear(m + "shared_experts.up_proj", moe.shared_I, H);
        w.linear(m + "shared_experts.down_proj", H, moe.shared_I);
      }
    } else {
      w.linear(m + "up_proj", I, H);
      w.linear(m + "down_proj", H, I);
    }
  }
  w.uniform("backbone.norm_f.weight", {H}, 0.8, 1.2);
  w.linear("lm_head", V, H);
  if (moe.E > 0 && !pattern.empty() && pattern[0] == 'E')
    shape_moe_router(w, "backbone.embeddings.weight", "backbone.layers.0.norm.weight", false,
                     1e-5, "backbone.layers.0.mixer.gate.weight",
                     "backbone.layers.0.mixer.gate.e_score_correction_bias", V, H, moe, 0.03);
  w.write(dir, c, dtype);
}

/// Sizes of a tiny Qwen3-Next. The defaults are the CPU test models (the checkpoints they write
/// are fixed); the CUDA tests take head_k_dim 64 (the CUDA kernels run 64 or 128).
struct QwenDims {
  int64_t V = 256, H = 64, Hk = 2, Hv = 4, dk = 16, dv = 16, I = 128, ah = 4, kvh = 2, hd = 16;
  int64_t conv_k = 4;  ///< linear_conv_kernel_dim (every published model: 4)
  /// moe.E > 0: layer 0's MLP is an MoE block (mlp.gate, mlp.experts.{e}.{gate,up,down}_proj,
  /// mlp.shared_expert.*, mlp.shared_expert_gate; the other layers stay dense via
  /// mlp_only_layers), its router shaped by shape_moe_router and layer 0's GDN out_proj scaled
  /// by 1/50 so the block sees (nearly) the normalised embedding.
  MoeDims moe;
};

/// `d` with the engine kernels' one-value paths: 3 conv taps, hidden 66 and intermediate 130
/// (SwiGLU over widths that are not multiples of 4).
inline QwenDims odd_widths(QwenDims d) {
  d.conv_k = 3;
  d.H = 66;
  d.I = 130;
  return d;
}

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
                      {"linear_conv_kernel_dim", d.conv_k}, {"num_attention_heads", ah},
                      {"num_key_value_heads", kvh}, {"head_dim", hd},
                      {"partial_rotary_factor", 0.25}, {"rope_theta", 10000.0},
                      {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"}, {"intermediate_size", I},
                      {"num_experts", 0}, {"attention_bias", false}, {"tie_word_embeddings", false},
                      {"max_position_embeddings", 4096}};
  const MoeDims& moe = d.moe;
  if (moe.E > 0) {
    c["num_experts"] = moe.E;
    c["num_experts_per_tok"] = moe.top_k;
    c["moe_intermediate_size"] = moe.I;
    c["shared_expert_intermediate_size"] = moe.shared_I;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = {1, 2, 3};
  }
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
      w.normal(m + "conv1d.weight", {cd, 1, d.conv_k}, 0.5);
      w.uniform(m + "dt_bias", {Hv}, -1.0, 1.0);
      w.uniform(m + "A_log", {Hv}, -1.0, 1.5);
      w.uniform(m + "norm.weight", {dv}, 0.8, 1.2);
      if (moe.E > 0 && i == 0)
        w.normal(m + "out_proj.weight", {H, Hv * dv}, 0.02 / std::sqrt(double(Hv * dv)));
      else
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
    if (moe.E > 0 && i == 0) {
      const std::string m = p + "mlp.";
      w.linear(m + "gate", moe.E, H);
      for (int64_t e = 0; e < moe.E; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        w.linear(x + "gate_proj", moe.I, H);
        w.linear(x + "up_proj", moe.I, H);
        w.linear(x + "down_proj", H, moe.I);
      }
      w.linear(m + "shared_expert.gate_proj", moe.shared_I, H);
      w.linear(m + "shared_expert.up_proj", moe.shared_I, H);
      w.linear(m + "shared_expert.down_proj", H, moe.shared_I);
      w.linear(m + "shared_expert_gate", 1, H);
      continue;
    }
    w.linear(p + "mlp.gate_proj", I, H);
    w.linear(p + "mlp.up_proj", I, H);
    w.linear(p + "mlp.down_proj", H, I);
  }
  w.normal("model.norm.weight", {H}, 0.1);
  w.linear("lm_head", V, H);
  if (moe.E > 0)
    shape_moe_router(w, "model.embed_tokens.weight", "model.layers.0.post_attention_layernorm.weight",
                     true, 1e-6, "model.layers.0.mlp.gate.weight", "", V, H, moe, 0.2);
  w.write(dir, c, dtype);
}

}  // namespace replayssm::engine::testing
