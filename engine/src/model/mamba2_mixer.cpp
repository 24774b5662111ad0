// Nemotron-H / Mamba2 mixer decode step (models.md §2.2-2.3): in_proj -> [z | xBC | dt],
// causal conv + SiLU on xBC, the SSM step through the library (conventional or ReplaySSM),
// gated RMSNorm of y * silu(z) per group, out_proj.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/mixer.h"
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
  }

  void forward(const float* x, float* out, const Batch& batch) override {
    const int64_t B = batch.n, di = c_.d_inner(), cd = c_.conv_dim(), k = c_.conv_kernel;
    const int64_t GN = c_.ngroups * c_.d_state, Hh = c_.nheads;
    proj_.resize(B * proj_out_);
    in_proj_.apply(x, B, proj_.data());
    xs_.resize(B * di);
    Bs_.resize(B * GN);
    Cs_.resize(B * GN);
    dt_.resize(B * Hh);
    y_.resize(B * di);
    conv_out_.resize(cd);
    for (int64_t b = 0; b < B; ++b) {
      const float* row = proj_.data() + b * proj_out_;  // [z | xBC | dt]
      cpu::conv_step(conv_state_.data() + batch.slots[b] * cd * k, row + di, conv_w_.data(),
                     conv_b_.empty() ? nullptr : conv_b_.data(), cd, k, conv_out_.data());
      std::memcpy(&xs_[b * di], conv_out_.data(), di * sizeof(float));
      std::memcpy(&Bs_[b * GN], conv_out_.data() + di, GN * sizeof(float));
      std::memcpy(&Cs_[b * GN], conv_out_.data() + di + GN, GN * sizeof(float));
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
        dt_[b * Hh + h] = v;
      }
    }
    mamba2::Layer layer;
    layer.dims = {c_.nheads, c_.headdim, c_.d_state, c_.ngroups};
    layer.A_log = make_view(A_log_.data(), DType::kF32, {Hh});
    layer.dt_bias = make_view(clamped() ? zero_bias_.data() : dt_bias_.data(), DType::kF32, {Hh});
    layer.D = make_view(D_.data(), DType::kF32, {Hh});
    layer.dt_softplus = !clamped();
    mamba2::Tokens in;
    in.x = make_view(xs_.data(), DType::kF32, {B, Hh, c_.headdim});
    in.dt = make_view(dt_.data(), DType::kF32, {B, Hh});
    in.B = make_view(Bs_.data(), DType::kF32, {B, c_.ngroups, c_.d_state});
    in.C = make_view(Cs_.data(), DType::kF32, {B, c_.ngroups, c_.d_state});
    const TensorView y = make_view(y_.data(), DType::kF32, {B, Hh, c_.headdim});
    if (ssm_.mode == SsmMode::kReplay)
      mamba2::replay_step(layer, cache_, ssm_.cursors, in, batch.rows, y);
    else
      mamba2::conventional_step(layer, cache_, in, batch.rows, y);

    // Gated RMSNorm (gate before the norm): t = y * silu(z), normalised per group of channels.
    const int64_t gs = c_.norm_group_size;
    for (int64_t b = 0; b < B; ++b) {
      const float* z = proj_.data() + b * proj_out_;
      float* t = &y_[b * di];
      for (int64_t i = 0; i < di; ++i) t[i] *= cpu::silu(z[i]);
      for (int64_t g0 = 0; g0 < di; g0 += gs)
        cpu::rms_norm(t + g0, norm_w_.data() + g0, 1, gs, eps_, false, t + g0);
    }
    out_proj_.apply(y_.data(), B, out);
  }

  void reset(const Rows& rows) override {
    const int64_t cd = c_.conv_dim() * c_.conv_kernel;
    const int32_t* ids = rows.slot_ids.ptr<int32_t>();
    for (int64_t i = 0; i < rows.slot_ids.numel(); ++i)
      std::fill_n(conv_state_.data() + ids[i] * cd, cd, 0.0f);
    mamba2::reset_slots(cache_, rows);
  }

 private:
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
  std::vector<float> proj_, xs_, Bs_, Cs_, dt_, y_, conv_out_;  // scratch
};

}  // namespace

std::unique_ptr<Mixer> make_mamba2_mixer(const Checkpoint& ck, const ModelConfig& cfg,
                                         const std::string& prefix, const ModelOptions& opt,
                                         SsmShared& ssm) {
  return std::make_unique<Mamba2Mixer>(ck, cfg, prefix, opt, ssm);
}

}  // namespace replayssm::engine
