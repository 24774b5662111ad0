// Dense MLP on CUDA (models.md §2.3-2.4; CPU twin: model/mlp.cpp): one GEMM for [gate | up]
// (Qwen SwiGLU) or up (Nemotron-H relu2), the activation into bf16, down_proj accumulated into
// the residual.
#include "cuda/mixers.h"
#include "model/weights.h"

namespace replayssm::engine::cuda {
namespace {

class MlpMixer final : public CarvedMixer<MlpMixer> {
  friend class CarvedMixer<MlpMixer>;  // layout()

 public:
  MlpMixer(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p, CudaShared& sh)
      : gated_(cfg.mlp.gated), I_(cfg.mlp.intermediate), sh_(sh) {
    const MlpWeights w = load_mlp_weights(ck, cfg, p);
    DeviceArena& a = *sh.arena;
    up_ = gated_ ? a.upload_linear({&w.gate, &w.up}) : a.upload_linear({&w.up});
    down_ = a.upload_linear({&w.down});
  }

  void forward(const bf16* x, float* residual, const DeviceStep& st) override {
    Carve carve(st.scratch);
    const Scratch s = layout(carve);
    st.blas->linear(up_, x, st.tokens, s.up, false);
    mlp_activation(s.up, st.tokens, I_, gated_, s.act, st.stream);
    st.blas->linear(down_, s.act, st.tokens, residual, true);
  }

  void reset(const Rows&) override {}

 private:
  struct Scratch {
    float* up;
    bf16* act;
  };
  Scratch layout(Carve& c) const {
    Scratch s;
    s.up = c.take<float>(sh_.max_tokens * up_.out);
    s.act = c.take<bf16>(sh_.max_tokens * I_);
    return s;
  }

  bool gated_;
  int64_t I_;
  CudaShared& sh_;
  DeviceLinear up_, down_;
};

}  // namespace

std::unique_ptr<CudaMixer> make_cuda_mlp(const Checkpoint& ck, const ModelConfig& cfg,
                                         const std::string& prefix, CudaShared& sh) {
  return std::make_unique<MlpMixer>(ck, cfg, prefix, sh);
}

}  // namespace replayssm::engine::cuda
