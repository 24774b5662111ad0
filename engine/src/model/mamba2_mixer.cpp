// Nemotron-H / Mamba2 mixer decode step (models.md §2.2-2.3): in_proj -> [z | xBC | dt],
// causal conv + SiLU on xBC, the SSM step through the library (conventional or ReplaySSM),
// gated RMSNorm of y * silu(z) per group, out_proj. Speculative verify steps (T tokens per row):
// the library's verify (replay) or the snapshot baseline (conventional), conv rollback on accept.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/conv_rollback.h"
#include "model/mixer.h"
#include "model/snapshots.h"
#include "model/state_store.h"
#include "model/weights.h"
#include "replayssm/mamba2.h"

namespace replayssm::engine {
namespace {

class Mamba2Mixer final : public Mixer {
 public:
  Mamba2Mixer(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p,
              const ModelOptions& opt, SsmShared& ssm)
      : c_(cfg.mamba), eps_(cfg.norm_eps), ssm_(ssm), slots_(opt.max_slots) {
    const int64_t di = c_.d_inner(), cd = c_.conv_dim();
    proj_out_ = 2 * di + 2 * c_.ngroups * c_.d_state + c_.nheads;
    Mamba2Weights w = load_mamba2_weights(ck, cfg, p);
    in_proj_ = std::move(w.in_proj);
    conv_w_ = std::move(w.conv_w);
    conv_b_ = std::move(w.conv_b);
    A_log_ = std::move(w.A_log);
    dt_bias_ = std::move(w.dt_bias);
    D_ = std::move(w.D);
    norm_w_ = std::move(w.norm_w);
    out_proj_ = std::move(w.out_proj);
    zero_bias_.assign(c_.nheads, 0.0f);

    conv_state_.assign(slots_ * cd * c_.conv_kernel, 0.0f);
    const int64_t R = ssm_.mode == SsmMode::kReplay ? ssm_.cursors.config.rows() : 1;
    state_.assign(slots_ * c_.nheads * c_.headdim * c_.d_state, 0.0f);
    ring_x_.assign(slots_ * c_.nheads * R * c_.headdim, 0.0f);
    ring_dt_.assign(slots_ * c_.nheads * R, 0.0f);
    ring_B_.assign(slots_ * c_.ngroups * R * c_.d_state, 0.0f);
    cache_.state = make_view(state_.data(), DType::kF32, {slots_, c_.nheads, c_.headdim, c_.d_state});
    cache_.ring_x = make_view(ring_x_.data(), DType::kF32, {slots_, c_.nheads, R, c_.headdim});
    cache_.ring_dt = make_view(ring_dt_.data(), DType::kF32, {slots_, c_.nheads, R});
    cache_.ring_B = make_view(ring_B_.data(), DType::kF32, {slots_, c_.ngroups, R, c_.d_state});
    if (ssm_.mode == SsmMode::kConventional && ssm_.spec_T > 0)
      snap_.allocate(slots_, ssm_.spec_T, c_.nheads * c_.headdim * c_.d_state);
    // State precision mode: checkpoint (or shared state) in its format, read copy, SR keys.
    modes_.allocate(ssm_.state_mode, slots_, c_.nheads, c_.headdim, c_.d_state, ssm_.ssm_layers++);
    modes_.bind(cache_, state_);
  }

  void forward(const float* x, float* out, const Batch& batch) override {
    const int64_t B = batch.n, NT = batch.tokens, Tm = batch.T;
    const int64_t di = c_.d_inner(), cd = c_.conv_dim(), k = c_.conv_kernel;
    const int64_t GN = c_.ngroups * c_.d_state, Hh = c_.nheads;
    proj_.resize(NT * proj_out_);
    in_proj_.apply(x, NT, proj_.data());
    // SSM inputs padded to [B, Tm] (the ops' token axis); positions past a row's count stay 0.
    xs_.assign(B * Tm * di, 0.0f);
    Bs_.assign(B * Tm * GN, 0.0f);
    Cs_.assign(B * Tm * GN, 0.0f);
    dt_.assign(B * Tm * Hh, 0.0f);
    conv_out_.resize(cd);
    if (batch.speculative) conv_rb_.save(batch, conv_state_.data(), cd, k);
    for (int64_t b = 0; b < B; ++b) {
      if (batch.slots[b] < 0) continue;
      for (int64_t s = 0; s < batch.ntok[b]; ++s) {
        const int64_t i = batch.off[b] + s, p = b * Tm + s;
        const float* row = proj_.data() + i * proj_out_;  // [z | xBC | dt]
        if (batch.speculative) conv_rb_.record(i, row + di);
        cpu::conv_step(conv_state_.data() + batch.slots[b] * cd * k, row + di, conv_w_.data(),
                       conv_b_.empty() ? nullptr : conv_b_.data(), cd, k, conv_out_.data());
        std::memcpy(&xs_[p * di], conv_out_.data(), di * sizeof(float));
        std::memcpy(&Bs_[p * GN], conv_out_.data() + di, GN * sizeof(float));
        std::memcpy(&Cs_[p * GN], conv_out_.data() + di + GN, GN * sizeof(float));
        const float* dt_raw = row + di + cd;
        for (int64_t h = 0; h < Hh; ++h) {
          // With a dt floor or clamp the processed delta is computed here and the op gets it raw.
          float v = dt_raw[h];
          if (clamped()) {
            v = cpu::softplus(v + dt_bias_[h]);
            if (ssm_.dt_floor > 0) v = std::max(v, float(ssm_.dt_floor));
            if (c_.dt_min_clamp > 0) v = std::max(v, float(c_.dt_min_clamp));
            if (c_.dt_max_clamp > 0 && std::isfinite(c_.dt_max_clamp))
              v = std::min(v, float(c_.dt_max_clamp));
          }
          dt_[p * Hh + h] = v;
        }
      }
    }
    y_.assign(B * Tm * di, 0.0f);
    run_ssm(batch);

    // Gated RMSNorm (gate before the norm): t = y * silu(z), normalised per group of channels.
    const int64_t gs = c_.norm_group_size;
    yp_.resize(NT * di);
    for (int64_t b = 0; b < B; ++b) {
      if (batch.slots[b] < 0) continue;
      for (int64_t s = 0; s < batch.ntok[b]; ++s) {
        const int64_t i = batch.off[b] + s;
        const float* z = proj_.data() + i * proj_out_;
        float* t = &yp_[i * di];
        std::memcpy(t, &y_[(b * Tm + s) * di], di * sizeof(float));
        for (int64_t j = 0; j < di; ++j) t[j] *= cpu::silu(z[j]);
        for (int64_t g0 = 0; g0 < di; g0 += gs)
          cpu::rms_norm(t + g0, norm_w_.data() + g0, 1, gs, eps_, false, t + g0);
      }
    }
    out_proj_.apply(yp_.data(), NT, out);
  }

  void reset(const Rows& rows) override {
    const int64_t cd = c_.conv_dim() * c_.conv_kernel;
    const int32_t* ids = rows.slot_ids.ptr<int32_t>();
    for (int64_t i = 0; i < rows.slot_ids.numel(); ++i)
      std::fill_n(conv_state_.data() + ids[i] * cd, cd, 0.0f);
    mamba2::reset_slots(cache_, rows);
  }

  void accept(const Batch& batch, const int32_t* accepted) override {
    conv_rb_.restore(batch, accepted, conv_state_.data());
    if (ssm_.mode == SsmMode::kConventional) snap_.select(batch, accepted, state_.data());
  }

 private:
  mamba2::Layer layer() const {
    const int64_t Hh = c_.nheads;
    mamba2::Layer l;
    l.dims = {c_.nheads, c_.headdim, c_.d_state, c_.ngroups};
    l.A_log = make_view(const_cast<float*>(A_log_.data()), DType::kF32, {Hh});
    l.dt_bias = make_view(const_cast<float*>(clamped() ? zero_bias_.data() : dt_bias_.data()),
                          DType::kF32, {Hh});
    l.D = make_view(const_cast<float*>(D_.data()), DType::kF32, {Hh});
    l.dt_softplus = !clamped();
    return l;
  }

  /// The SSM op over the padded inputs: decode step (T = 1), verify, or the snapshot baseline.
  void run_ssm(const Batch& batch) {
    const int64_t B = batch.n, Tm = batch.T, Hh = c_.nheads, P = c_.headdim;
    const int64_t G = c_.ngroups, N = c_.d_state;
    const mamba2::Layer l = layer();
    mamba2::Tokens in;
    if (!batch.speculative || ssm_.mode == SsmMode::kReplay) {
      in.x = make_view(xs_.data(), DType::kF32, {B, Tm, Hh, P});
      in.dt = make_view(dt_.data(), DType::kF32, {B, Tm, Hh});
      in.B = make_view(Bs_.data(), DType::kF32, {B, Tm, G, N});
      in.C = make_view(Cs_.data(), DType::kF32, {B, Tm, G, N});
      const TensorView y = make_view(y_.data(), DType::kF32, {B, Tm, Hh, P});
      if (batch.speculative)
        mamba2::verify(l, cache_, ssm_.cursors, in, batch.rows, y);
      else if (ssm_.mode == SsmMode::kReplay)
        mamba2::replay_step(l, cache_, ssm_.cursors, in, batch.rows, y);
      else
        mamba2::conventional_step(l, cache_, in, batch.rows, y);
      return;
    }
    // Snapshot baseline: token s of every row is a conventional step on snapshot s of its slot.
    const int64_t di = Hh * P, GN = G * N;
    x1_.resize(B * di);
    dt1_.resize(B * Hh);
    B1_.resize(B * GN);
    C1_.resize(B * GN);
    y1_.resize(B * di);
    for (int64_t s = 0; s < Tm; ++s) {
      const Rows rows = snap_.begin_token(batch, s, state_.data());
      for (int64_t b = 0; b < B; ++b) {
        const int64_t p = b * Tm + s;
        std::memcpy(&x1_[b * di], &xs_[p * di], di * sizeof(float));
        std::memcpy(&dt1_[b * Hh], &dt_[p * Hh], Hh * sizeof(float));
        std::memcpy(&B1_[b * GN], &Bs_[p * GN], GN * sizeof(float));
        std::memcpy(&C1_[b * GN], &Cs_[p * GN], GN * sizeof(float));
      }
      in.x = make_view(x1_.data(), DType::kF32, {B, Hh, P});
      in.dt = make_view(dt1_.data(), DType::kF32, {B, Hh});
      in.B = make_view(B1_.data(), DType::kF32, {B, G, N});
      in.C = make_view(C1_.data(), DType::kF32, {B, G, N});
      mamba2::Cache snap_cache;
      snap_cache.state = make_view(snap_.pool(), DType::kF32, {snap_.pool_slots(), Hh, P, N});
      mamba2::conventional_step(l, snap_cache, in, rows,
                                make_view(y1_.data(), DType::kF32, {B, Hh, P}));
      for (int64_t b = 0; b < B; ++b)
        if (rows.slot_ids.ptr<int32_t>()[b] >= 0)
          std::memcpy(&y_[(b * Tm + s) * di], &y1_[b * di], di * sizeof(float));
    }
  }

  bool clamped() const {
    return ssm_.dt_floor > 0 || c_.dt_min_clamp > 0 ||
           (c_.dt_max_clamp > 0 && std::isfinite(c_.dt_max_clamp));
  }

  Mamba2Config c_;
  double eps_;
  SsmShared& ssm_;
  int64_t slots_;
  int64_t proj_out_ = 0;
  cpu::Linear in_proj_, out_proj_;
  std::vector<float> conv_w_, conv_b_, A_log_, dt_bias_, D_, norm_w_, zero_bias_;
  std::vector<float> conv_state_, state_, ring_x_, ring_dt_, ring_B_;
  mamba2::Cache cache_;
  ModeStore modes_;
  ConvRollback conv_rb_;
  SnapshotPool snap_;
  std::vector<float> proj_, xs_, Bs_, Cs_, dt_, y_, yp_, conv_out_;  // scratch
  std::vector<float> x1_, dt1_, B1_, C1_, y1_;                         // snapshot scratch
};

}  // namespace

std::unique_ptr<Mixer> make_mamba2_mixer(const Checkpoint& ck, const ModelConfig& cfg,
                                         const std::string& prefix, const ModelOptions& opt,
                                         SsmShared& ssm) {
  return std::make_unique<Mamba2Mixer>(ck, cfg, prefix, opt, ssm);
}

}  // namespace replayssm::engine
