// Qwen3-Next / Qwen3.5 Gated DeltaNet mixer decode step (models.md §2.4-2.5): projections
// (Qwen3-Next: de-interleaved per key head), causal conv + SiLU on [q | k | v], the GDN step
// through the library (L2 norm, scale, beta, gate inside the op), per-head RMSNorm then
// * silu(z), out_proj. Speculative verify steps (T tokens per row): the library's verify (replay)
// or the snapshot baseline (conventional), conv rollback on accept.
#include <algorithm>
#include <cstring>

#include "model/conv_rollback.h"
#include "model/mixer.h"
#include "model/snapshots.h"
#include "model/state_store.h"
#include "model/weights.h"
#include "replayssm/gdn.h"

namespace replayssm::engine {
namespace {

class GdnMixer final : public Mixer {
 public:
  GdnMixer(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p,
           const ModelOptions& opt, SsmShared& ssm)
      : c_(cfg.gdn), eps_(cfg.norm_eps), ssm_(ssm), slots_(opt.max_slots) {
    const int64_t Hk = c_.num_k_heads, Hv = c_.num_v_heads;
    const int64_t dk = c_.head_k_dim, dv = c_.head_v_dim, cd = c_.conv_dim();
    GdnWeights w = load_gdn_weights(ck, cfg, p);
    qkvz_ = std::move(w.qkvz);
    ba_ = std::move(w.ba);
    qkv_ = std::move(w.qkv);
    z_ = std::move(w.z);
    b_ = std::move(w.b);
    a_ = std::move(w.a);
    conv_w_ = std::move(w.conv_w);
    A_log_ = std::move(w.A_log);
    dt_bias_ = std::move(w.dt_bias);
    norm_w_ = std::move(w.norm_w);
    out_proj_ = std::move(w.out_proj);

    conv_state_.assign(slots_ * cd * c_.conv_kernel, 0.0f);
    const int64_t R = ssm_.mode == SsmMode::kReplay ? ssm_.cursors.config.rows() : 1;
    state_.assign(slots_ * Hv * dv * dk, 0.0f);
    ring_u_.assign(slots_ * Hv * R * dv, 0.0f);
    ring_k_.assign(slots_ * Hk * R * dk, 0.0f);
    ring_g_.assign(slots_ * Hv * R, 0.0f);
    cache_.state = make_view(state_.data(), DType::kF32, {slots_, Hv, dv, dk});
    cache_.ring_u = make_view(ring_u_.data(), DType::kF32, {slots_, Hv, R, dv});
    cache_.ring_k = make_view(ring_k_.data(), DType::kF32, {slots_, Hk, R, dk});
    cache_.ring_g = make_view(ring_g_.data(), DType::kF32, {slots_, Hv, R});
    if (ssm_.mode == SsmMode::kConventional && ssm_.spec_T > 0)
      snap_.allocate(slots_, ssm_.spec_T, Hv * dv * dk);
    // State precision mode: checkpoint (or shared state) in its format, read copy, SR keys; split
    // modes also keep each record's raw v and beta (the flush recomputes u from the checkpoint).
    modes_.allocate(ssm_.state_mode, slots_, Hv, dv, dk, ssm_.ssm_layers++);
    modes_.bind(cache_, state_);
    if (cache_.mode.is_split()) {
      ring_v_.assign(slots_ * Hv * R * dv, 0.0f);
      ring_beta_.assign(slots_ * Hv * R, 0.0f);
      cache_.ring_v = make_view(ring_v_.data(), DType::kF32, {slots_, Hv, R, dv});
      cache_.ring_beta = make_view(ring_beta_.data(), DType::kF32, {slots_, Hv, R});
    }
  }

  void forward(const float* x, float* out, const Batch& batch) override {
    const int64_t B = batch.n, NT = batch.tokens, Tm = batch.T, Hk = c_.num_k_heads;
    const int64_t Hv = c_.num_v_heads, dk = c_.head_k_dim, dv = c_.head_v_dim;
    const int64_t cd = c_.conv_dim(), k = c_.conv_kernel;
    mixed_.resize(NT * cd);  // [q | k | v] in conv channel order
    z_buf_.resize(NT * Hv * dv);
    a_buf_.resize(NT * Hv);
    b_buf_.resize(NT * Hv);
    project(x, NT);
    // SSM inputs padded to [B, Tm] (the ops' token axis); positions past a row's count stay 0.
    q_.assign(B * Tm * Hk * dk, 0.0f);
    k_.assign(B * Tm * Hk * dk, 0.0f);
    v_.assign(B * Tm * Hv * dv, 0.0f);
    ap_.assign(B * Tm * Hv, 0.0f);
    bp_.assign(B * Tm * Hv, 0.0f);
    conv_out_.resize(cd);
    if (batch.speculative) conv_rb_.save(batch, conv_state_.data(), cd, k);
    for (int64_t b = 0; b < B; ++b) {
      if (batch.slots[b] < 0) continue;
      for (int64_t s = 0; s < batch.ntok[b]; ++s) {
        const int64_t i = batch.off[b] + s, p = b * Tm + s;
        if (batch.speculative) conv_rb_.record(i, &mixed_[i * cd]);
        cpu::conv_step(conv_state_.data() + batch.slots[b] * cd * k, &mixed_[i * cd],
                       conv_w_.data(), nullptr, cd, k, conv_out_.data());
        const float* c = conv_out_.data();
        std::memcpy(&q_[p * Hk * dk], c, Hk * dk * sizeof(float));
        std::memcpy(&k_[p * Hk * dk], c + Hk * dk, Hk * dk * sizeof(float));
        std::memcpy(&v_[p * Hv * dv], c + 2 * Hk * dk, Hv * dv * sizeof(float));
        std::memcpy(&ap_[p * Hv], &a_buf_[i * Hv], Hv * sizeof(float));
        std::memcpy(&bp_[p * Hv], &b_buf_[i * Hv], Hv * sizeof(float));
      }
    }
    y_.assign(B * Tm * Hv * dv, 0.0f);
    run_ssm(batch);

    // Gated RMSNorm (norm before the gate), per value head over dv, plain weight.
    yp_.resize(NT * Hv * dv);
    for (int64_t b = 0; b < B; ++b) {
      if (batch.slots[b] < 0) continue;
      for (int64_t s = 0; s < batch.ntok[b]; ++s)
        std::memcpy(&yp_[(batch.off[b] + s) * Hv * dv], &y_[(b * Tm + s) * Hv * dv],
                    Hv * dv * sizeof(float));
    }
    cpu::rms_norm(yp_.data(), norm_w_.data(), NT * Hv, dv, eps_, false, yp_.data());
    for (int64_t i = 0; i < NT * Hv * dv; ++i) yp_[i] *= cpu::silu(z_buf_[i]);
    out_proj_.apply(yp_.data(), NT, out);
  }

  void reset(const Rows& rows) override {
    const int64_t cs = c_.conv_dim() * c_.conv_kernel;
    const int32_t* ids = rows.slot_ids.ptr<int32_t>();
    for (int64_t i = 0; i < rows.slot_ids.numel(); ++i)
      std::fill_n(conv_state_.data() + ids[i] * cs, cs, 0.0f);
    gdn::reset_slots(cache_, rows);
  }

  void accept(const Batch& batch, const int32_t* accepted) override {
    conv_rb_.restore(batch, accepted, conv_state_.data());
    if (ssm_.mode == SsmMode::kConventional) snap_.select(batch, accepted, state_.data());
  }

 private:
  gdn::Layer layer() {
    const int64_t Hv = c_.num_v_heads;
    gdn::Layer l;
    l.dims = {c_.num_k_heads, Hv, c_.head_k_dim, c_.head_v_dim, gdn::Gate::kScalar};
    l.A_log = make_view(A_log_.data(), DType::kF32, {Hv});
    l.dt_bias = make_view(dt_bias_.data(), DType::kF32, {Hv});
    return l;
  }

  /// The SSM op over the padded inputs: decode step (T = 1), verify, or the snapshot baseline.
  void run_ssm(const Batch& batch) {
    const int64_t B = batch.n, Tm = batch.T, Hk = c_.num_k_heads, Hv = c_.num_v_heads;
    const int64_t dk = c_.head_k_dim, dv = c_.head_v_dim;
    const gdn::Layer l = layer();
    gdn::Tokens in;
    if (!batch.speculative || ssm_.mode == SsmMode::kReplay) {
      in.q = make_view(q_.data(), DType::kF32, {B, Tm, Hk, dk});
      in.k = make_view(k_.data(), DType::kF32, {B, Tm, Hk, dk});
      in.v = make_view(v_.data(), DType::kF32, {B, Tm, Hv, dv});
      in.a = make_view(ap_.data(), DType::kF32, {B, Tm, Hv});
      in.b = make_view(bp_.data(), DType::kF32, {B, Tm, Hv});
      const TensorView y = make_view(y_.data(), DType::kF32, {B, Tm, Hv, dv});
      if (batch.speculative)
        gdn::verify(l, cache_, ssm_.cursors, in, batch.rows, y);
      else if (ssm_.mode == SsmMode::kReplay)
        gdn::replay_step(l, cache_, ssm_.cursors, in, batch.rows, y);
      else
        gdn::conventional_step(l, cache_, in, batch.rows, y);
      return;
    }
    // Snapshot baseline: token s of every row is a conventional step on snapshot s of its slot.
    const int64_t qk = Hk * dk, vv = Hv * dv;
    q1_.resize(B * qk);
    k1_.resize(B * qk);
    v1_.resize(B * vv);
    a1_.resize(B * Hv);
    b1_.resize(B * Hv);
    y1_.resize(B * vv);
    for (int64_t s = 0; s < Tm; ++s) {
      const Rows rows = snap_.begin_token(batch, s, state_.data());
      for (int64_t b = 0; b < B; ++b) {
        const int64_t p = b * Tm + s;
        std::memcpy(&q1_[b * qk], &q_[p * qk], qk * sizeof(float));
        std::memcpy(&k1_[b * qk], &k_[p * qk], qk * sizeof(float));
        std::memcpy(&v1_[b * vv], &v_[p * vv], vv * sizeof(float));
        std::memcpy(&a1_[b * Hv], &ap_[p * Hv], Hv * sizeof(float));
        std::memcpy(&b1_[b * Hv], &bp_[p * Hv], Hv * sizeof(float));
      }
      in.q = make_view(q1_.data(), DType::kF32, {B, Hk, dk});
      in.k = make_view(k1_.data(), DType::kF32, {B, Hk, dk});
      in.v = make_view(v1_.data(), DType::kF32, {B, Hv, dv});
      in.a = make_view(a1_.data(), DType::kF32, {B, Hv});
      in.b = make_view(b1_.data(), DType::kF32, {B, Hv});
      gdn::Cache snap_cache;
      snap_cache.state = make_view(snap_.pool(), DType::kF32, {snap_.pool_slots(), Hv, dv, dk});
      gdn::conventional_step(l, snap_cache, in, rows,
                             make_view(y1_.data(), DType::kF32, {B, Hv, dv}));
      for (int64_t b = 0; b < B; ++b)
        if (rows.slot_ids.ptr<int32_t>()[b] >= 0)
          std::memcpy(&y_[(b * Tm + s) * vv], &y1_[b * vv], vv * sizeof(float));
    }
  }

  /// Fills mixed_ ([q | k | v]), z_buf_, a_buf_, b_buf_ from the projections.
  void project(const float* x, int64_t B) {
    const int64_t Hk = c_.num_k_heads, Hv = c_.num_v_heads, r = Hv / Hk;
    const int64_t dk = c_.head_k_dim, dv = c_.head_v_dim, cd = c_.conv_dim();
    if (!c_.interleaved_proj) {
      qkv_.apply(x, B, mixed_.data());
      z_.apply(x, B, z_buf_.data());
      b_.apply(x, B, b_buf_.data());
      a_.apply(x, B, a_buf_.data());
      return;
    }
    // Qwen3-Next: per key head g, [q_g | k_g | v_{g*r..} | z_{g*r..}] and [b (r) | a (r)].
    const int64_t blk = 2 * dk + 2 * r * dv;
    proj_.resize(B * qkvz_.out);
    qkvz_.apply(x, B, proj_.data());
    ba_out_.resize(B * 2 * Hv);
    ba_.apply(x, B, ba_out_.data());
    for (int64_t b = 0; b < B; ++b) {
      float* m = &mixed_[b * cd];
      for (int64_t g = 0; g < Hk; ++g) {
        const float* src = &proj_[b * qkvz_.out + g * blk];
        std::memcpy(m + g * dk, src, dk * sizeof(float));
        std::memcpy(m + Hk * dk + g * dk, src + dk, dk * sizeof(float));
        std::memcpy(m + 2 * Hk * dk + g * r * dv, src + 2 * dk, r * dv * sizeof(float));
        std::memcpy(&z_buf_[b * Hv * dv + g * r * dv], src + 2 * dk + r * dv,
                    r * dv * sizeof(float));
        const float* ba = &ba_out_[b * 2 * Hv + g * 2 * r];
        std::memcpy(&b_buf_[b * Hv + g * r], ba, r * sizeof(float));
        std::memcpy(&a_buf_[b * Hv + g * r], ba + r, r * sizeof(float));
      }
    }
  }

  GdnConfig c_;
  double eps_;
  SsmShared& ssm_;
  int64_t slots_;
  cpu::Linear qkvz_, ba_, qkv_, z_, b_, a_, out_proj_;
  std::vector<float> conv_w_, A_log_, dt_bias_, norm_w_;
  std::vector<float> conv_state_, state_, ring_u_, ring_k_, ring_g_, ring_v_, ring_beta_;
  gdn::Cache cache_;
  ModeStore modes_;
  ConvRollback conv_rb_;
  SnapshotPool snap_;
  std::vector<float> mixed_, z_buf_, a_buf_, b_buf_, proj_, ba_out_, conv_out_;  // packed
  std::vector<float> q_, k_, v_, ap_, bp_, y_, yp_;                           // padded [B, T]
  std::vector<float> q1_, k1_, v1_, a1_, b1_, y1_;                            // snapshot scratch
};

}  // namespace

std::unique_ptr<Mixer> make_gdn_mixer(const Checkpoint& ck, const ModelConfig& cfg,
                                      const std::string& prefix, const ModelOptions& opt,
                                      SsmShared& ssm) {
  return std::make_unique<GdnMixer>(ck, cfg, prefix, opt, ssm);
}

}  // namespace replayssm::engine
