#include "demo_stacks.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace replayssm::cli {
namespace {

using F = std::vector<float>;

void fill_uniform(F& v, size_t n, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  v.resize(n);
  for (auto& e : v) e = u(rng);
}

TensorView f32(F& v, std::initializer_list<int64_t> shape) {
  return make_view(v.data(), DType::kF32, shape);
}

// Scale each row of `y` ([batch, width]) to unit RMS: the next layer's input, as a norm would.
void rms_normalise(const F& y, F& out, int64_t batch) {
  out.resize(y.size());
  const int64_t width = static_cast<int64_t>(y.size()) / batch;
  for (int64_t b = 0; b < batch; ++b) {
    double ss = 0;
    for (int64_t i = 0; i < width; ++i) ss += double(y[b * width + i]) * y[b * width + i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / width + 1e-6));
    for (int64_t i = 0; i < width; ++i) out[b * width + i] = y[b * width + i] * inv;
  }
}

double rel_err(const F& a, const F& b) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - b[i]));
    den = std::max(den, std::abs(double(b[i])));
  }
  return num / den;
}

}  // namespace

SharedCursors::SharedCursors(int batch, int L)
    : origin(batch, 0), h(batch, 0), slot_ids(batch), accepted(batch, 1), is_flush(batch, 0) {
  for (int b = 0; b < batch; ++b) slot_ids[b] = b;
  cursors.origin = make_view(origin.data(), DType::kI32, {batch});
  cursors.h = make_view(h.data(), DType::kI32, {batch});
  cursors.is_flush = make_view(is_flush.data(), DType::kI8, {batch});
  cursors.config = RingConfig{L, 1, RingMode::kDecode};
  cursors.config.validate();
  rows.slot_ids = make_view(slot_ids.data(), DType::kI32, {batch});
  reset(cursors, rows);
}

long SharedCursors::flushing_rows() const { return std::count(is_flush.begin(), is_flush.end(), 1); }

void SharedCursors::commit_all() {
  commit(cursors, rows, make_view(accepted.data(), DType::kI32, {static_cast<int64_t>(accepted.size())}));
}

mamba2::Dims mamba2_dims(const DemoOptions& o) {
  return o.shape == "real" ? mamba2::Dims{96, 80, 128, 8} : mamba2::Dims{8, 32, 64, 2};
}

gdn::Dims gdn_dims(const DemoOptions& o, bool kda) {
  const bool real = o.shape == "real";
  if (kda)
    return real ? gdn::Dims{32, 32, 128, 128, gdn::Gate::kChannel}
                : gdn::Dims{4, 4, 32, 32, gdn::Gate::kChannel};
  return real ? gdn::Dims{16, 32, 128, 128, gdn::Gate::kScalar}
              : gdn::Dims{2, 4, 32, 32, gdn::Gate::kScalar};
}

// ---- Mamba-2 ------------------------------------------------------------------------------------

Mamba2Stack::Mamba2Stack(const DemoOptions& o)
    : o_(o), cur_(o.batch, o.L), rng_(o.seed) {
  d_ = mamba2_dims(o);
  const int64_t B = o.batch, H = d_.nheads, P = d_.headdim, N = d_.d_state, G = d_.ngroups;
  layers_.resize(o.layers);
  for (auto& l : layers_) {
    fill_uniform(l.A_log, H, rng_, 0.0f, 2.0f);    // A in [-7.4, -1]
    fill_uniform(l.dt_bias, H, rng_, 0.0f, 0.5f);
    fill_uniform(l.D, H, rng_, 0.5f, 1.5f);
    l.state.assign(B * H * P * N, 0.0f);
    l.ckpt.assign(B * H * P * N, 0.0f);
    l.ring_x.assign(B * H * o.L * P, 0.0f);
    l.ring_dt.assign(B * H * o.L, 0.0f);
    l.ring_B.assign(B * G * o.L * N, 0.0f);
  }
}

std::string Mamba2Stack::describe() const {
  return fmt::format("{} (H {}, P {}, N {}, G {})", o_.shape == "real" ? "Nemotron-3-Nano-4B" : "small",
                     d_.nheads, d_.headdim, d_.d_state, d_.ngroups);
}

void Mamba2Stack::draw_inputs() {
  const int64_t B = o_.batch, H = d_.nheads, P = d_.headdim, N = d_.d_state, G = d_.ngroups;
  fill_uniform(x0_, B * H * P, rng_, -1.0f, 1.0f);
  for (auto& l : layers_) {
    fill_uniform(l.dt, B * H, rng_, -3.0f, -1.0f);
    fill_uniform(l.B, B * G * N, rng_, -1.0f, 1.0f);
    fill_uniform(l.C, B * G * N, rng_, -1.0f, 1.0f);
  }
}

void Mamba2Stack::run(bool replay) {
  const int64_t B = o_.batch, H = d_.nheads, P = d_.headdim, N = d_.d_state, G = d_.ngroups,
                R = o_.L;
  F& y = replay ? y_replay_ : y_conv_;
  x_ = x0_;
  y.assign(B * H * P, 0.0f);
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto& l = layers_[i];
    mamba2::Layer layer{d_, f32(l.A_log, {H}), f32(l.dt_bias, {H}), f32(l.D, {H}), true};
    mamba2::Tokens in{f32(x_, {B, H, P}), f32(l.dt, {B, H}), f32(l.B, {B, G, N}), f32(l.C, {B, G, N}), {}};
    if (replay) {
      mamba2::Cache cache{f32(l.ckpt, {B, H, P, N}), f32(l.ring_x, {B, H, R, P}),
                          f32(l.ring_dt, {B, H, R}), f32(l.ring_B, {B, G, R, N})};
      mamba2::replay_step(layer, cache, cur_.cursors, in, cur_.rows, f32(y, {B, H, P}));
    } else {
      mamba2::Cache cache{f32(l.state, {B, H, P, N}), {}, {}, {}};
      mamba2::conventional_step(layer, cache, in, cur_.rows, f32(y, {B, H, P}));
    }
    if (i + 1 < layers_.size()) rms_normalise(y, x_, B);
  }
}

void Mamba2Stack::step_conventional() { run(false); }

long Mamba2Stack::step_replay() {
  const long flushes = cur_.flushing_rows();
  run(true);
  cur_.commit_all();
  return flushes;
}

double Mamba2Stack::output_rel_err() const { return rel_err(y_replay_, y_conv_); }

// ---- Gated DeltaNet / KDA -----------------------------------------------------------------------

GdnStack::GdnStack(const DemoOptions& o, bool kda) : o_(o), cur_(o.batch, o.L), rng_(o.seed + 1) {
  d_ = gdn_dims(o, kda);
  const int64_t B = o.batch, H = d_.num_k_heads, HV = d_.num_v_heads, K = d_.head_k_dim,
                V = d_.head_v_dim, R = o.L, gw = kda ? K : 1;
  layers_.resize(o.layers);
  for (auto& l : layers_) {
    fill_uniform(l.A_log, HV, rng_, -2.0f, 1.0f);
    fill_uniform(l.dt_bias, HV * gw, rng_, 0.0f, 0.5f);
    l.state.assign(B * HV * V * K, 0.0f);
    l.ckpt.assign(B * HV * V * K, 0.0f);
    l.ring_u.assign(B * HV * R * V, 0.0f);
    l.ring_k.assign(B * H * R * K, 0.0f);
    l.ring_g.assign(B * HV * R * gw, 0.0f);
  }
}

std::string GdnStack::describe() const {
  const bool kda = d_.gate == gdn::Gate::kChannel;
  const char* name = o_.shape != "real" ? "small" : kda ? "Kimi-Linear" : "Qwen3.5-4B";
  return fmt::format("{} (H {}, HV {}, K {}, V {}{})", name, d_.num_k_heads, d_.num_v_heads,
                     d_.head_k_dim, d_.head_v_dim, kda ? ", per-channel gate" : "");
}

void GdnStack::draw_inputs() {
  const int64_t B = o_.batch, H = d_.num_k_heads, HV = d_.num_v_heads, K = d_.head_k_dim,
                V = d_.head_v_dim, gw = d_.gate == gdn::Gate::kChannel ? K : 1;
  fill_uniform(v0_, B * HV * V, rng_, -1.0f, 1.0f);
  for (auto& l : layers_) {
    fill_uniform(l.q, B * H * K, rng_, -1.0f, 1.0f);
    fill_uniform(l.k, B * H * K, rng_, -1.0f, 1.0f);
    fill_uniform(l.a, B * HV * gw, rng_, -3.0f, 3.0f);
    fill_uniform(l.b, B * HV, rng_, -3.0f, 3.0f);
  }
}

void GdnStack::run(bool replay) {
  const bool kda = d_.gate == gdn::Gate::kChannel;
  const int64_t B = o_.batch, H = d_.num_k_heads, HV = d_.num_v_heads, K = d_.head_k_dim,
                V = d_.head_v_dim, R = o_.L;
  F& y = replay ? y_replay_ : y_conv_;
  v_ = v0_;
  y.assign(B * HV * V, 0.0f);
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto& l = layers_[i];
    gdn::Layer layer{d_, f32(l.A_log, {HV}), kda ? f32(l.dt_bias, {HV, K}) : f32(l.dt_bias, {HV})};
    gdn::Tokens in{f32(l.q, {B, H, K}), f32(l.k, {B, H, K}), f32(v_, {B, HV, V}),
                   kda ? f32(l.a, {B, HV, K}) : f32(l.a, {B, HV}), f32(l.b, {B, HV})};
    if (replay) {
      gdn::Cache cache{f32(l.ckpt, {B, HV, V, K}), f32(l.ring_u, {B, HV, R, V}),
                       f32(l.ring_k, {B, H, R, K}),
                       kda ? f32(l.ring_g, {B, HV, R, K}) : f32(l.ring_g, {B, HV, R})};
      gdn::replay_step(layer, cache, cur_.cursors, in, cur_.rows, f32(y, {B, HV, V}));
    } else {
      gdn::Cache cache{f32(l.state, {B, HV, V, K}), {}, {}, {}};
      gdn::conventional_step(layer, cache, in, cur_.rows, f32(y, {B, HV, V}));
    }
    if (i + 1 < layers_.size()) rms_normalise(y, v_, B);
  }
}

void GdnStack::step_conventional() { run(false); }

long GdnStack::step_replay() {
  const long flushes = cur_.flushing_rows();
  run(true);
  cur_.commit_all();
  return flushes;
}

double GdnStack::output_rel_err() const { return rel_err(y_replay_, y_conv_); }

}  // namespace replayssm::cli
