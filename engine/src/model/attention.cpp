// Decode attention with a per-slot KV cache (models.md §2.1, §2.3, §2.4): q/k/v projections,
// grouped-query attention (query head h reads kv head h / (heads / kv_heads)), softmax in float32,
// o_proj. Nemotron-H: no positional encoding. Qwen gated attention: q_proj emits per head
// [query | gate], q_norm/k_norm (1 + w) per head, partial NeoX RoPE, output * sigmoid(gate).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/mixer.h"
#include "model/weights.h"

namespace replayssm::engine {
namespace {

class Attention final : public Mixer {
 public:
  Attention(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p,
            const ModelOptions& opt)
      : c_(cfg.attn), eps_(cfg.norm_eps), slots_(opt.max_slots), ctx_(opt.max_context) {
    const int64_t nkv = c_.num_kv_heads, hd = c_.head_dim;
    AttentionWeights w = load_attention_weights(ck, cfg, p);
    q_ = std::move(w.q);
    k_ = std::move(w.k);
    v_ = std::move(w.v);
    o_ = std::move(w.o);
    q_norm_ = std::move(w.q_norm);
    k_norm_ = std::move(w.k_norm);
    kcache_.assign(slots_ * ctx_ * nkv * hd, 0.0f);
    vcache_.assign(slots_ * ctx_ * nkv * hd, 0.0f);
  }

  void forward(const float* x, float* out, const Batch& batch) override {
    const int64_t NT = batch.tokens, nh = c_.num_heads, nkv = c_.num_kv_heads, hd = c_.head_dim;
    const int64_t rep = nh / nkv, qw = nh * hd * (c_.output_gate ? 2 : 1);
    qp_.resize(NT * qw);
    kp_.resize(NT * nkv * hd);
    vp_.resize(NT * nkv * hd);
    q_.apply(x, NT, qp_.data());
    k_.apply(x, NT, kp_.data());
    v_.apply(x, NT, vp_.data());
    attn_.resize(NT * nh * hd);
    const float scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
    // A row's tokens go in order: token s writes its key/value at pos + s, then attends to
    // 0..pos + s (causal within a verify step). Keys of rejected drafts stay past the slot's
    // length cursor (the model's position) and are overwritten by later steps.
    for (int64_t b = 0; b < batch.n; ++b) {
      const int64_t slot = batch.slots[b];
      if (slot < 0) continue;
      for (int64_t s = 0; s < batch.ntok[b]; ++s) {
        const int64_t i = batch.off[b] + s, pos = batch.pos[b] + s;
        float* kc = &kcache_[slot * ctx_ * nkv * hd];
        float* vc = &vcache_[slot * ctx_ * nkv * hd];
        for (int64_t j = 0; j < nkv; ++j) {
          float* kh = &kp_[(i * nkv + j) * hd];
          if (c_.qk_norm) cpu::rms_norm(kh, k_norm_.data(), 1, hd, eps_, true, kh);
          if (c_.rotary_dim > 0) cpu::rope_neox(kh, c_.rotary_dim, pos, c_.rope_theta);
          std::memcpy(kc + (pos * nkv + j) * hd, kh, hd * sizeof(float));
          std::memcpy(vc + (pos * nkv + j) * hd, &vp_[(i * nkv + j) * hd], hd * sizeof(float));
        }
        scores_.resize(pos + 1);
        for (int64_t h = 0; h < nh; ++h) {
          const int64_t stride = c_.output_gate ? 2 * hd : hd;
          float* qh = &qp_[i * qw + h * stride];
          if (c_.qk_norm) cpu::rms_norm(qh, q_norm_.data(), 1, hd, eps_, true, qh);
          if (c_.rotary_dim > 0) cpu::rope_neox(qh, c_.rotary_dim, pos, c_.rope_theta);
          const int64_t j = h / rep;
          float mx = -INFINITY;
          for (int64_t t = 0; t <= pos; ++t) {
            const float* kt = kc + (t * nkv + j) * hd;
            float sc = 0;
            for (int64_t d = 0; d < hd; ++d) sc += qh[d] * kt[d];
            scores_[t] = sc * scale;
            mx = std::max(mx, scores_[t]);
          }
          double sum = 0;
          for (int64_t t = 0; t <= pos; ++t) sum += scores_[t] = std::exp(scores_[t] - mx);
          float* o = &attn_[(i * nh + h) * hd];
          std::fill_n(o, hd, 0.0f);
          for (int64_t t = 0; t <= pos; ++t) {
            const float w = static_cast<float>(scores_[t] / sum);
            const float* vt = vc + (t * nkv + j) * hd;
            for (int64_t d = 0; d < hd; ++d) o[d] += w * vt[d];
          }
          if (c_.output_gate) {
            const float* gate = qh + hd;
            for (int64_t d = 0; d < hd; ++d) o[d] *= cpu::sigmoid(gate[d]);
          }
        }
      }
    }
    o_.apply(attn_.data(), NT, out);
  }

  // The KV cache of a fresh slot needs no clearing: a slot only reads positions it wrote.
  void reset(const Rows&) override {}

 private:
  AttentionConfig c_;
  double eps_;
  int64_t slots_, ctx_;
  cpu::Linear q_, k_, v_, o_;
  std::vector<float> q_norm_, k_norm_, kcache_, vcache_;
  std::vector<float> qp_, kp_, vp_, attn_, scores_;
};

}  // namespace

std::unique_ptr<Mixer> make_attention(const Checkpoint& ck, const ModelConfig& cfg,
                                      const std::string& prefix, const ModelOptions& opt) {
  return std::make_unique<Attention>(ck, cfg, prefix, opt);
}

}  // namespace replayssm::engine
