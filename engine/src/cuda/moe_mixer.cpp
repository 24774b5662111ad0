// Mixture-of-experts block on CUDA (models.md §2.3-2.5; CPU twin: model/moe.cpp, the same weight
// loader load_moe_weights). One step, with no host synchronisation so it stays capturable into
// the step's CUDA graph:
//  1. router logits [n, E] fp32 through cuBLAS (Qwen: the shared_expert_gate row is stacked under
//     the router, so its logit is column E of the same GEMM);
//  2. moe_route: one warp per row picks the top-k experts and weights exactly as route_token
//     (sigmoid + e_score_correction_bias + grouped top-k, or fp32 softmax; ties to the lower
//     index) and fills the device pointer arrays of the expert GEMMs;
//  3. routed experts as two cublasGemmBatchedEx calls of n * k independent GEMVs, one per
//     (row, choice) pair (A = that expert's bf16 weight, B = the row's bf16 input, fp32 out):
//     [gate | up] (or up), the activation (SwiGLU / relu2) into bf16, down;
//     The batch count n * k is fixed for a batch size, so the launch shapes never depend on the
//     routing; the pointers do, and live on the device. (Chosen over a loop over all E experts
//     with row gathers: no work for unchosen experts, and no per-expert launches, which matter
//     at E = 128..512.)
//  4. moe_combine: the weighted sum over the k choices in fp32, added to the residual, or, for
//     LatentMoE, rounded to bf16 and sent through fc2_latent_proj (the experts then run at
//     latent width on fc1_latent_proj(x));
//  5. shared expert(s): up, activation, down accumulated into the residual; Qwen's
//     sigmoid(shared_expert_gate(x)) scales the activation (down_proj has no bias there, so this
//     equals scaling the output).
#include "cuda/mixers.h"
#include "cuda/moe_kernels.h"
#include "model/moe.h"
#include "model/weights.h"

namespace replayssm::engine::cuda {
namespace {

/// The experts' parts stacked expert after expert into one host linear ([gate; up] per expert
/// when gated): expert e's rows start at e * (rows per expert).
cpu::Linear stack_experts(const std::vector<ExpertWeights>& ex, bool up) {
  cpu::Linear s;
  bool bias = false;
  for (const ExpertWeights& e : ex) {
    for (const cpu::Linear* l : up ? std::vector<const cpu::Linear*>{&e.gate, &e.up}
                                   : std::vector<const cpu::Linear*>{&e.down})
      bias = bias || !l->bias.empty();
  }
  for (const ExpertWeights& e : ex) {
    std::vector<const cpu::Linear*> parts;
    if (up && e.gate.out) parts.push_back(&e.gate);
    parts.push_back(up ? &e.up : &e.down);
    for (const cpu::Linear* l : parts) {
      s.in = l->in;
      s.out += l->out;
      s.w.insert(s.w.end(), l->w.begin(), l->w.end());
      if (bias) {
        if (l->bias.empty())
          s.bias.insert(s.bias.end(), static_cast<size_t>(l->out), 0.0f);
        else
          s.bias.insert(s.bias.end(), l->bias.begin(), l->bias.end());
      }
    }
  }
  return s;
}

class MoeMixer final : public CarvedMixer<MoeMixer> {
  friend class CarvedMixer<MoeMixer>;  // layout()

 public:
  MoeMixer(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p, CudaShared& sh)
      : c_(cfg.moe), H_(cfg.hidden_size), sh_(sh) {
    check<UnsupportedError>(c_.num_experts <= kMoeMaxExperts, "CUDA engine: ", c_.num_experts,
                            " experts, expected <= ", kMoeMaxExperts, " (routing kernel)");
    check<UnsupportedError>(c_.top_k <= c_.num_experts && c_.top_k >= 1, "CUDA engine: top_k ",
                            c_.top_k, " of ", c_.num_experts, " experts");
    const MoeWeights w = load_moe_weights(ck, cfg, p);
    DeviceArena& a = *sh.arena;
    E_ = c_.num_experts;
    K_ = c_.top_k;
    I_ = c_.expert_intermediate;
    gated_ = w.experts.front().gate.out > 0;
    width_ = w.fc1_latent.out ? w.fc1_latent.out : H_;
    gate_col_ = w.shared_gate.out > 0;
    router_ = gate_col_ ? a.upload_linear({&w.router, &w.shared_gate}) : a.upload_linear({&w.router});
    if (!w.correction_bias.empty()) correction_ = a.upload_f32(w.correction_bias);
    if (w.fc1_latent.out) {
      fc1_ = a.upload_linear({&w.fc1_latent});
      fc2_ = a.upload_linear({&w.fc2_latent});
    }
    {
      const cpu::Linear up = stack_experts(w.experts, true);
      up_out_ = up.out / E_;
      const DeviceLinear u = a.upload_linear({&up});
      up_w_ = u.w;
      up_bias_ = u.bias;
    }
    {
      const cpu::Linear down = stack_experts(w.experts, false);
      const DeviceLinear d = a.upload_linear({&down});
      down_w_ = d.w;
      down_bias_ = d.bias;
    }
    if (w.shared.up.out) {
      shared_I_ = w.shared.up.out;
      shared_gated_ = w.shared.gate.out > 0;
      shared_up_ = shared_gated_ ? a.upload_linear({&w.shared.gate, &w.shared.up})
                                 : a.upload_linear({&w.shared.up});
      shared_down_ = a.upload_linear({&w.shared.down});
      check<UnsupportedError>(!gate_col_ || !shared_down_.bias,
                              "CUDA engine: a gated shared expert with a down_proj bias");
    }
  }

  void forward(const bf16* x, float* residual, const DeviceStep& st) override {
    const int64_t n = st.tokens, P = n * K_;
    if (n == 0) return;
    Carve carve(st.scratch);
    const Scratch s = layout(carve);
    st.blas->linear(router_, x, n, s.logits, false);
    const bf16* xin = x;
    if (fc1_.out) {
      st.blas->linear(fc1_, x, n, s.latent, false);
      to_bf16(s.latent, n * width_, s.latent_bf16, st.stream);
      xin = s.latent_bf16;
    }
    MoeRoute r;
    r.logits = s.logits;
    r.ld_logits = router_.out;
    r.correction_bias = correction_;
    r.E = static_cast<int>(E_);
    r.k = static_cast<int>(K_);
    r.n_group = static_cast<int>(c_.n_group);
    r.topk_group = static_cast<int>(c_.topk_group);
    r.sigmoid_router = c_.sigmoid_router;
    r.norm_topk_prob = c_.norm_topk_prob;
    r.scaling = c_.routed_scaling_factor;
    r.expert = s.expert;
    r.weight = s.weight;
    r.w_up = up_w_;
    r.xin = xin;
    r.h = s.h;
    r.w_down = down_w_;
    r.act = s.act;
    r.y = s.y;
    r.up_out = up_out_;
    r.width = width_;
    r.I = I_;
    r.a_up = s.ptrs;
    r.b_up = s.ptrs + P;
    r.c_up = const_cast<void**>(s.ptrs + 2 * P);
    r.a_down = s.ptrs + 3 * P;
    r.b_down = s.ptrs + 4 * P;
    r.c_down = const_cast<void**>(s.ptrs + 5 * P);
    moe_route(r, n, st.stream);
    st.blas->gemv_batched(r.a_up, r.b_up, r.c_up, up_out_, width_, P);
    moe_activation(s.h, P, I_, gated_, up_bias_, s.expert, nullptr, 0, s.act, st.stream);
    st.blas->gemv_batched(r.a_down, r.b_down, r.c_down, width_, I_, P);
    if (fc2_.out) {
      moe_combine(s.y, s.expert, s.weight, down_bias_, n, static_cast<int>(K_), width_, nullptr,
                  s.combined, st.stream);
      st.blas->linear(fc2_, s.combined, n, residual, true);
    } else {
      moe_combine(s.y, s.expert, s.weight, down_bias_, n, static_cast<int>(K_), width_, residual,
                  nullptr, st.stream);
    }
    if (shared_I_) {
      st.blas->linear(shared_up_, x, n, s.shared_h, false);
      moe_activation(s.shared_h, n, shared_I_, shared_gated_, nullptr, nullptr,
                     gate_col_ ? s.logits + E_ : nullptr, router_.out, s.shared_act, st.stream);
      st.blas->linear(shared_down_, s.shared_act, n, residual, true);
    }
  }

  void reset(const Rows&) override {}

 private:
  struct Scratch {
    float* logits;
    float* latent;
    bf16* latent_bf16;
    int32_t* expert;
    float* weight;
    const void** ptrs;  ///< 6 arrays of S * k pointers: up A, B, C, down A, B, C
    float* h;
    bf16* act;
    float* y;
    bf16* combined;
    float* shared_h;
    bf16* shared_act;
  };
  Scratch layout(Carve& c) const {
    const int64_t S = sh_.max_tokens, P = S * K_;
    Scratch s;
    s.logits = c.take<float>(S * router_.out);
    s.latent = fc1_.out ? c.take<float>(S * width_) : nullptr;
    s.latent_bf16 = fc1_.out ? c.take<bf16>(S * width_) : nullptr;
    s.expert = c.take<int32_t>(P);
    s.weight = c.take<float>(P);
    s.ptrs = c.take<const void*>(6 * P);
    s.h = c.take<float>(P * up_out_);
    s.act = c.take<bf16>(P * I_);
    s.y = c.take<float>(P * width_);
    s.combined = fc2_.out ? c.take<bf16>(S * width_) : nullptr;
    s.shared_h = shared_I_ ? c.take<float>(S * shared_up_.out) : nullptr;
    s.shared_act = shared_I_ ? c.take<bf16>(S * shared_I_) : nullptr;
    return s;
  }

  MoeConfig c_;
  int64_t H_;
  CudaShared& sh_;
  int64_t E_ = 0, K_ = 0, I_ = 0, width_ = 0, up_out_ = 0, shared_I_ = 0;
  bool gated_ = false, gate_col_ = false, shared_gated_ = false;
  DeviceLinear router_, fc1_, fc2_, shared_up_, shared_down_;
  const float* correction_ = nullptr;
  const bf16* up_w_ = nullptr;
  const bf16* down_w_ = nullptr;
  const float* up_bias_ = nullptr;
  const float* down_bias_ = nullptr;
};

}  // namespace

std::unique_ptr<CudaMixer> make_cuda_moe(const Checkpoint& ck, const ModelConfig& cfg,
                                         const std::string& prefix, CudaShared& sh) {
  return std::make_unique<MoeMixer>(ck, cfg, prefix, sh);
}

}  // namespace replayssm::engine::cuda
