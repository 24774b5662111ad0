// Decode attention on CUDA (models.md §2.3-2.4; CPU twin: model/attention.cpp): one GEMM for
// [q | k | v], then attention_prep (q/k norm, RoPE, k/v into the per-slot bf16 KV cache at the
// row's position) and attention_decode (GQA softmax over the slot's positions, sigmoid output
// gate), o_proj accumulated into the residual. Nemotron-H: no RoPE, no norms, no gate.
#include <algorithm>
#include <cmath>

#include "cuda/launch_check.h"

#include "cuda/mixers.h"
#include "model/weights.h"

namespace replayssm::engine::cuda {
namespace {

class AttentionMixer final : public CarvedMixer<AttentionMixer> {
  friend class CarvedMixer<AttentionMixer>;  // layout()

 public:
  AttentionMixer(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p,
                 CudaShared& sh)
      : c_(cfg.attn), eps_(static_cast<float>(cfg.norm_eps)), sh_(sh) {
    DeviceArena& a = *sh.arena;
    const AttentionWeights w = load_attention_weights(ck, cfg, p);
    qkv_ = a.upload_linear({&w.q, &w.k, &w.v});
    o_ = a.upload_linear({&w.o});
    if (c_.qk_norm) {
      q_norm_ = a.upload_f32(w.q_norm);
      k_norm_ = a.upload_f32(w.k_norm);
    }
    if (c_.rotary_dim > 0) {  // as cpu::rope_neox: float(1 / theta^(2i / rotary_dim))
      std::vector<float> inv(static_cast<size_t>(c_.rotary_dim / 2));
      for (size_t i = 0; i < inv.size(); ++i)
        inv[i] = static_cast<float>(
            1.0 / std::pow(c_.rope_theta, double(2 * i) / double(c_.rotary_dim)));
      inv_freq_ = a.upload_f32(inv);
    }
    const int64_t cache = sh.slots * sh.context * c_.num_kv_heads * c_.head_dim;
    kcache_ = a.alloc_n<bf16>(cache);
    vcache_ = a.alloc_n<bf16>(cache);
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device),
               "cudaDeviceGetAttribute");
    partial_rows_ = attention_partial_rows(shape(), sh.max_tokens, num_sms_,
                                           std::max(1, sh.spec_T));
  }

  void forward(const bf16* x, float* residual, const DeviceStep& st) override {
    const int64_t B = st.tokens;
    Carve carve(st.scratch);
    const Scratch s = layout(carve);
    st.blas->linear(qkv_, x, B, s.proj, false);
    Attention at = shape();
    at.proj = s.proj;
    at.ld = qkv_.out;
    at.q_norm = q_norm_;
    at.k_norm = k_norm_;
    at.eps = eps_;
    at.rotary_dim = static_cast<int>(c_.rotary_dim);
    at.inv_freq = inv_freq_;
    at.kcache = kcache_;
    at.vcache = vcache_;
    at.ctx = sh_.context;
    at.num_slots = static_cast<int32_t>(sh_.slots);
    at.slots = st.tok_slots;
    at.positions = st.positions;
    at.row_pos = st.tok_pos;
    at.tokens_per_row = static_cast<int>(st.T);
    at.scale = static_cast<float>(1.0 / std::sqrt(double(c_.head_dim)));
    at.q = s.q;
    at.out = s.out;
    at.splits = attention_splits(at, B, num_sms_);
    // The partials' scratch was laid out for the split rule at load time; a rule that changed
    // since (RSSM_ATTENTION_PLAN set in-process) must not write past it.
    if (at.splits > 1 && B * at.splits > partial_rows_)
      throw ConfigError("attention splits " + std::to_string(at.splits) + " x " +
                        std::to_string(B) + " rows exceed the " + std::to_string(partial_rows_) +
                        " partial rows laid out at load (RSSM_ATTENTION_PLAN changed after load?)");
    at.part_acc = s.part_acc;
    at.part_ml = s.part_ml;
    attention_prep(at, B, st.stream);
    attention_decode(at, B, st.stream);
    st.blas->linear(o_, s.out, B, residual, true);
  }

  void reset(const Rows&) override {}

 private:
  struct Scratch {
    float *proj, *q, *part_acc, *part_ml;
    bf16* out;
  };
  Scratch layout(Carve& c) const {
    const int64_t S = sh_.max_tokens, qd = c_.num_heads * c_.head_dim;
    Scratch s;
    s.proj = c.take<float>(S * qkv_.out);
    s.q = c.take<float>(S * qd);
    s.out = c.take<bf16>(S * qd);
    s.part_acc = c.take<float>(partial_rows_ * qd);
    s.part_ml = c.take<float>(partial_rows_ * c_.num_heads * 2);
    return s;
  }
  /// The head sizes and the cache geometry (what attention_splits decides from).
  Attention shape() const {
    Attention at;
    at.nh = static_cast<int>(c_.num_heads);
    at.nkv = static_cast<int>(c_.num_kv_heads);
    at.hd = static_cast<int>(c_.head_dim);
    at.gate = c_.output_gate;
    at.ctx = sh_.context;
    return at;
  }

  AttentionConfig c_;
  float eps_;
  CudaShared& sh_;
  DeviceLinear qkv_, o_;
  float *q_norm_ = nullptr, *k_norm_ = nullptr, *inv_freq_ = nullptr;
  bf16 *kcache_ = nullptr, *vcache_ = nullptr;
  int num_sms_ = 1;
  int64_t partial_rows_ = 0;  ///< B * splits at most, over every batch size (split decoding)
};

}  // namespace

std::unique_ptr<CudaMixer> make_cuda_attention(const Checkpoint& ck, const ModelConfig& cfg,
                                               const std::string& prefix, CudaShared& sh) {
  return std::make_unique<AttentionMixer>(ck, cfg, prefix, sh);
}

}  // namespace replayssm::engine::cuda
