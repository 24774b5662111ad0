#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/weights.h"

namespace replayssm::engine {
namespace {

/// Indices of the k largest values (ties: lower index first).
std::vector<int32_t> top_k(const std::vector<float>& v, int64_t k) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

ExpertWeights load_expert(const Checkpoint& ck, const std::string& p, int64_t I, int64_t in,
                          bool gated, bool bias) {
  ExpertWeights e;
  e.up = load_linear(ck, p + "up_proj", I, in, bias);
  if (gated) e.gate = load_linear(ck, p + "gate_proj", I, in, bias);
  e.down = load_linear(ck, p + "down_proj", in, I, bias);
  return e;
}

/// y [out] = expert(x [in]); relu2 when not gated, SwiGLU when gated.
void run_expert(const ExpertWeights& e, const float* x, float* y, std::vector<float>& h,
                std::vector<float>& g) {
  h.resize(e.up.out);
  e.up.apply(x, 1, h.data());
  if (e.gate.out) {
    g.resize(e.gate.out);
    e.gate.apply(x, 1, g.data());
    for (size_t i = 0; i < h.size(); ++i) h[i] *= cpu::silu(g[i]);
  } else {
    for (float& v : h) v = v > 0 ? v * v : 0.0f;
  }
  e.down.apply(h.data(), 1, y);
}

class Moe final : public Mixer {
 public:
  Moe(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p)
      : cfg_(cfg.moe), H_(cfg.hidden_size), w_(load_moe_weights(ck, cfg, p)) {}

  void forward(const float* x, float* out, const Batch& batch) override {
    const int64_t E = cfg_.num_experts;
    logits_.resize(E);
    const int64_t width = w_.fc1_latent.out ? w_.fc1_latent.out : H_;
    latent_.resize(width);
    acc_.resize(width);
    y_.resize(std::max(width, H_));
    for (int64_t b = 0; b < batch.tokens; ++b) {
      const float* xb = x + b * H_;
      float* ob = out + b * H_;
      w_.router.apply(xb, 1, logits_.data());
      const Routing r = route_token(logits_.data(),
                                    w_.correction_bias.empty() ? nullptr : w_.correction_bias.data(),
                                    cfg_);
      const float* xin = xb;
      if (w_.fc1_latent.out) {
        w_.fc1_latent.apply(xb, 1, latent_.data());
        xin = latent_.data();
      }
      std::fill(acc_.begin(), acc_.end(), 0.0f);
      for (size_t k = 0; k < r.expert.size(); ++k) {
        run_expert(w_.experts[r.expert[k]], xin, y_.data(), h_, g_);
        for (int64_t i = 0; i < width; ++i) acc_[i] += r.weight[k] * y_[i];
      }
      if (w_.fc2_latent.out)
        w_.fc2_latent.apply(acc_.data(), 1, ob);
      else
        std::copy(acc_.begin(), acc_.end(), ob);
      if (w_.shared.up.out) {
        run_expert(w_.shared, xb, y_.data(), h_, g_);
        float scale = 1.0f;
        if (w_.shared_gate.out) {
          float gl = 0;
          w_.shared_gate.apply(xb, 1, &gl);
          scale = cpu::sigmoid(gl);
        }
        for (int64_t i = 0; i < H_; ++i) ob[i] += scale * y_[i];
      }
    }
  }

  void reset(const Rows&) override {}

 private:
  MoeConfig cfg_;
  int64_t H_;
  MoeWeights w_;
  std::vector<float> logits_, latent_, acc_, y_, h_, g_;
};

}  // namespace

Routing route_token(const float* logits, const float* correction_bias, const MoeConfig& c) {
  const int64_t E = c.num_experts;
  Routing r;
  std::vector<float> score(E), choice(E);
  if (c.sigmoid_router) {
    for (int64_t e = 0; e < E; ++e) {
      score[e] = cpu::sigmoid(logits[e]);
      choice[e] = score[e] + (correction_bias ? correction_bias[e] : 0.0f);
    }
    if (c.n_group > 1) {  // keep the topk_group groups whose two best choices sum highest
      const int64_t per = E / c.n_group;
      std::vector<float> group(c.n_group);
      for (int64_t g = 0; g < c.n_group; ++g) {
        std::vector<float> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
        const auto best = top_k(v, std::min<int64_t>(2, per));
        for (int32_t i : best) group[g] += v[i];
      }
      const auto keep = top_k(group, c.topk_group);
      for (int64_t g = 0; g < c.n_group; ++g)
        if (std::find(keep.begin(), keep.end(), g) == keep.end())
          std::fill(choice.begin() + g * per, choice.begin() + (g + 1) * per, -INFINITY);
    }
    r.expert = top_k(choice, c.top_k);
    double sum = 0;
    for (int32_t e : r.expert) sum += score[e];
    for (int32_t e : r.expert) {
      double w = score[e];
      if (c.norm_topk_prob) w /= sum + 1e-20;
      r.weight.push_back(static_cast<float>(w * c.routed_scaling_factor));
    }
    return r;
  }
  // Softmax in float32 over all experts, then top-k.
  const float mx = *std::max_element(logits, logits + E);
  double z = 0;
  for (int64_t e = 0; e < E; ++e) z += score[e] = std::exp(logits[e] - mx);
  for (auto& s : score) s = static_cast<float>(s / z);
  r.expert = top_k(score, c.top_k);
  double sum = 0;
  for (int32_t e : r.expert) sum += score[e];
  for (int32_t e : r.expert)
    r.weight.push_back(static_cast<float>(c.norm_topk_prob ? score[e] / sum : score[e]));
  return r;
}

MoeWeights load_moe_weights(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p) {
  const MoeConfig& c = cfg.moe;
  const int64_t H = cfg.hidden_size, E = c.num_experts, I = c.expert_intermediate;
  const bool qwen = !c.sigmoid_router;  // Qwen: SwiGLU experts; Nemotron-H: relu2
  MoeWeights w;
  w.router = load_linear(ck, p + "gate", E, H);
  if (c.sigmoid_router) w.correction_bias = ck.load(p + "gate.e_score_correction_bias", {E});
  const int64_t width = c.latent_size > 0 ? c.latent_size : H;
  if (c.latent_size > 0) {
    w.fc1_latent = load_linear(ck, p + "fc1_latent_proj", c.latent_size, H, cfg.mlp.bias);
    w.fc2_latent = load_linear(ck, p + "fc2_latent_proj", H, c.latent_size, cfg.mlp.bias);
  }
  if (ck.has(p + "experts.gate_up_proj")) {  // Qwen3.5-MoE: fused 3-D experts
    const auto gu = ck.load(p + "experts.gate_up_proj", {E, 2 * I, H});
    const auto dn = ck.load(p + "experts.down_proj", {E, H, I});
    for (int64_t e = 0; e < E; ++e) {
      ExpertWeights x;
      x.gate = {I, H, std::vector<float>(gu.begin() + (e * 2 * I) * H, gu.begin() + (e * 2 * I + I) * H), {}};
      x.up = {I, H, std::vector<float>(gu.begin() + (e * 2 * I + I) * H, gu.begin() + (e + 1) * 2 * I * H), {}};
      x.down = {H, I, std::vector<float>(dn.begin() + e * H * I, dn.begin() + (e + 1) * H * I), {}};
      w.experts.push_back(std::move(x));
    }
  } else {
    for (int64_t e = 0; e < E; ++e)
      w.experts.push_back(load_expert(ck, p + "experts." + std::to_string(e) + ".", I, width, qwen,
                                      cfg.mlp.bias));
  }
  if (c.shared_intermediate > 0) {
    w.shared = load_expert(ck, p + (qwen ? "shared_expert." : "shared_experts."),
                           c.shared_intermediate, H, qwen, cfg.mlp.bias);
    if (qwen) w.shared_gate = load_linear(ck, p + "shared_expert_gate", 1, H);
  }
  return w;
}

std::unique_ptr<Mixer> make_moe(const Checkpoint& ck, const ModelConfig& cfg,
                                const std::string& prefix) {
  return std::make_unique<Moe>(ck, cfg, prefix);
}

}  // namespace replayssm::engine
