// Dense MLPs (models.md §2.3-2.4): Nemotron-H relu2 down(relu(up x)^2); Qwen SwiGLU
// down(silu(gate x) * up x).
#include <algorithm>

#include "model/mixer.h"
#include "model/weights.h"

namespace replayssm::engine {
namespace {

class Mlp final : public Mixer {
 public:
  Mlp(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p)
      : gated_(cfg.mlp.gated), I_(cfg.mlp.intermediate) {
    MlpWeights w = load_mlp_weights(ck, cfg, p);
    up_ = std::move(w.up);
    gate_ = std::move(w.gate);
    down_ = std::move(w.down);
  }

  void forward(const float* x, float* out, const Batch& batch) override {
    const int64_t B = batch.tokens;
    up_out_.resize(B * I_);
    up_.apply(x, B, up_out_.data());
    if (gated_) {
      gate_out_.resize(B * I_);
      gate_.apply(x, B, gate_out_.data());
      for (int64_t i = 0; i < B * I_; ++i) up_out_[i] *= cpu::silu(gate_out_[i]);
    } else {
      for (float& v : up_out_) v = v > 0 ? v * v : 0.0f;
    }
    down_.apply(up_out_.data(), B, out);
  }

  void reset(const Rows&) override {}

 private:
  bool gated_;
  int64_t I_;
  cpu::Linear up_, gate_, down_;
  std::vector<float> up_out_, gate_out_;
};

}  // namespace

std::unique_ptr<Mixer> make_mlp(const Checkpoint& ck, const ModelConfig& cfg,
                                const std::string& prefix) {
  return std::make_unique<Mlp>(ck, cfg, prefix);
}

}  // namespace replayssm::engine
