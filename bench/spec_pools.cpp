#include "spec_pools.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cuda/gdn/gdn_cuda.h"
#include "cuda/mamba2/mamba2_cuda.h"
#include "device_fill.h"
#include "slot_pool.h"

namespace replayssm::bench {
namespace {

constexpr DType kBF16 = DType::kBF16, kF32 = DType::kF32, kI32 = DType::kI32, kI8 = DType::kI8;

/// A buffer of n random values in [lo, hi) of dtype t.
DeviceMemory random_of(DType t, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t s) {
  DeviceMemory m(nbytes(n, t));
  fill_uniform(m.get(), t, n, lo, hi, seed, s);
  return m;
}
DeviceMemory random_bf16(int64_t n, float lo, float hi, uint64_t seed, cudaStream_t s) {
  return random_of(kBF16, n, lo, hi, seed, s);
}

/// Throws BenchError if the first T tokens' outputs (dtype t) of any call are not all finite.
void check_outputs(const DeviceMemory& y, DType t, int calls, int64_t batch, int Tmax, int T,
                   int64_t per_token, cudaStream_t s, const std::string& what) {
  for (int r = 0; r < calls; ++r) {
    const int64_t off = static_cast<int64_t>(r) * batch * Tmax * per_token * dtype_size(t);
    const int64_t bad = count_nonfinite(static_cast<const char*>(y.get()) + off, t,
                                        batch * T * per_token, s);
    if (bad) throw BenchError(fmt::format("{}: {} non-finite outputs in call {}", what, bad, r));
  }
}

}  // namespace

// ---- SpecSlots -------------------------------------------------------------------------------

SpecSlots::SpecSlots(int64_t batch, int calls, uint64_t seed, cudaStream_t stream)
    : batch_(batch), calls_(calls), slots_(batch * calls), rng_(seed), stream_(stream) {
  std::vector<int32_t> perm(static_cast<size_t>(slots_));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng_);
  ids_ = DeviceMemory(nbytes(slots_, kI32));
  upload(ids_, perm, stream);
  accepted_ = DeviceMemory(nbytes(slots_, kI32));
  origin_ = DeviceMemory(nbytes(slots_, kI32));
  h_ = DeviceMemory(nbytes(slots_, kI32));
  flush_ = DeviceMemory(nbytes(slots_, kI8));
}

Rows SpecSlots::rows(int r, cudaStream_t s) const {
  Rows rw;
  rw.slot_ids = device_view(ids_, static_cast<int64_t>(r) * batch_ * 4, kI32, {batch_});
  rw.stream = s;
  return rw;
}

RingCursors SpecSlots::cursors(const RingConfig& cfg) const {
  return {device_view(origin_, 0, kI32, {slots_}), device_view(h_, 0, kI32, {slots_}),
          device_view(flush_, 0, kI8, {slots_}), cfg};
}

TensorView SpecSlots::accepted(int r) const {
  return device_view(accepted_, static_cast<int64_t>(r) * batch_ * 4, kI32, {batch_});
}

std::vector<Cursor> SpecSlots::set_spec_cursors(const RingConfig& cfg) {
  std::uniform_int_distribution<int32_t> uo(0, cfg.L - 1), uh(0, cfg.L - cfg.T);
  std::vector<Cursor> cur(static_cast<size_t>(slots_));
  for (Cursor& c : cur) {
    c.origin = uo(rng_);
    c.h = uh(rng_);
    c.is_flush = c.h + 2 * cfg.T > cfg.L;
  }
  put_cursors(cur);
  return cur;
}

void SpecSlots::set_decode_cursors(int L, int h) {
  std::uniform_int_distribution<int32_t> uo(0, L - 1);
  std::vector<Cursor> cur(static_cast<size_t>(slots_));
  for (Cursor& c : cur) c = {uo(rng_), h, false};
  put_cursors(cur);
}

void SpecSlots::set_accepted(int n) {
  upload(accepted_, std::vector<int32_t>(static_cast<size_t>(slots_), n), stream_);
}

void SpecSlots::put_cursors(const std::vector<Cursor>& cur) {
  std::vector<int32_t> o, h;
  std::vector<int8_t> f;
  for (const Cursor& c : cur) o.push_back(c.origin), h.push_back(c.h), f.push_back(c.is_flush);
  upload(origin_, o, stream_), upload(h_, h, stream_), upload(flush_, f, stream_);
}

// ---- Mamba-2 ----------------------------------------------------------------------------------

Mamba2Spec::Mamba2Spec(const Mamba2Shape& s, int64_t batch, int calls, int Lmax, int Tmax,
                       uint64_t seed, cudaStream_t stream, DType in)
    : SpecSlots(batch, calls, seed, stream), H_(s.H), P_(s.P), N_(s.N), G_(s.G), Lmax_(Lmax),
      Tmax_(Tmax), in_(in) {
  if (in != kBF16 && in != kF32)
    throw BenchError(fmt::format("verify: Mamba-2 inputs {}, expected bfloat16 or float32",
                                 dtype_name(in)));
  // Parameters as the kernel benchmark (mamba2_pool.cpp): A in [-8, -1], dt_bias [0, 0.5].
  std::uniform_real_distribution<float> uA(-8.0f, -1.0f), ubias(0.0f, 0.5f), uD(0.5f, 1.5f);
  std::vector<float> A_log(H_), dt_bias(H_), D(H_);
  for (int64_t i = 0; i < H_; ++i) A_log[i] = std::log(-uA(rng_)), dt_bias[i] = ubias(rng_), D[i] = uD(rng_);
  A_log_ = DeviceMemory(nbytes(H_, kF32)), dt_bias_ = DeviceMemory(nbytes(H_, kF32));
  D_ = DeviceMemory(nbytes(H_, kF32));
  upload(A_log_, A_log, stream), upload(dt_bias_, dt_bias, stream), upload(D_, D, stream);
  layer_.dims = {H_, P_, N_, G_};
  layer_.A_log = device_view(A_log_, 0, kF32, {H_});
  layer_.dt_bias = device_view(dt_bias_, 0, kF32, {H_});
  layer_.D = device_view(D_, 0, kF32, {H_});
  state_ = DeviceMemory(nbytes(slots_ * state_elems(), kF32));
  fill_uniform(state_.get(), kF32, slots_ * state_elems(), -1.0f, 1.0f, seed + 1, stream);
  ring_x_ = random_of(in_, slots_ * H_ * Lmax * P_, -1.0f, 1.0f, seed + 2, stream);
  ring_dt_ = DeviceMemory(nbytes(slots_ * H_ * Lmax, kF32));
  fill_uniform(ring_dt_.get(), kF32, slots_ * H_ * Lmax, 0.01f, 0.2f, seed + 3, stream);
  ring_B_ = random_of(in_, slots_ * G_ * Lmax * N_, -1.0f, 1.0f, seed + 4, stream);
  const int64_t tok = calls_ * batch_ * Tmax;  // token buffers: a T-token call views batch * T
  x_ = random_of(in_, tok * H_ * P_, -1.0f, 1.0f, seed + 5, stream);
  dt_ = random_of(in_, tok * H_, -3.0f, -1.0f, seed + 6, stream);
  B_ = random_of(in_, tok * G_ * N_, -1.0f, 1.0f, seed + 7, stream);
  C_ = random_of(in_, tok * G_ * N_, -1.0f, 1.0f, seed + 8, stream);
  y_ = DeviceMemory(nbytes(tok * H_ * P_, in_));
  BENCH_CUDA(cudaStreamSynchronize(stream));
}

TensorView Mamba2Spec::states(const DeviceMemory& m, int64_t slots) const {
  return device_view(m, 0, kF32, {slots, H_, P_, N_});
}

mamba2::Tokens Mamba2Spec::tokens(int r, int T) const {
  const int64_t t0 = static_cast<int64_t>(r) * batch_ * Tmax_;  // first token of call r
  const int64_t e = dtype_size(in_);
  return {device_view(x_, t0 * H_ * P_ * e, in_, {batch_, T, H_, P_}),
          device_view(dt_, t0 * H_ * e, in_, {batch_, T, H_}),
          device_view(B_, t0 * G_ * N_ * e, in_, {batch_, T, G_, N_}),
          device_view(C_, t0 * G_ * N_ * e, in_, {batch_, T, G_, N_}),
          {}};
}

TensorView Mamba2Spec::y(int r, int T) const {
  const int64_t t0 = static_cast<int64_t>(r) * batch_ * Tmax_;
  return device_view(y_, t0 * H_ * P_ * dtype_size(in_), in_, {batch_, T, H_, P_});
}

mamba2::Cache Mamba2Spec::cache(int L) const {
  if (L > Lmax_) throw BenchError(fmt::format("verify: ring length {} > allocated {}", L, Lmax_));
  return {device_view(state_, 0, kF32, {slots_, H_, P_, N_}),
          device_view(ring_x_, 0, in_, {slots_, H_, L, P_}),
          device_view(ring_dt_, 0, kF32, {slots_, H_, L}),
          device_view(ring_B_, 0, in_, {slots_, G_, L, N_})};
}

void Mamba2Spec::decode(int r, cudaStream_t s, int L) const {
  mamba2::Cache c = cache(L);
  cuda::mamba2::replay_step(layer_, c, cursors(RingConfig{L, 1, RingMode::kDecode}), tokens(r, 1),
                            rows(r, s), y(r, 1));
}

void Mamba2Spec::verify(int r, cudaStream_t s, const RingConfig& cfg) const {
  mamba2::Cache c = cache(cfg.L);
  RingCursors cur = cursors(cfg);
  const Rows rw = rows(r, s);
  mamba2::verify(layer_, c, cur, tokens(r, cfg.T), rw, y(r, cfg.T));
  commit(cur, rw, accepted(r));
}

void Mamba2Spec::snapshot(int r, cudaStream_t, int T, const TensorView& states, const Rows& rw,
                          const TensorView& dst) const {
  cuda::mamba2::snapshot_verify(layer_, states, tokens(r, T), rw, dst, y(r, T));
}

void Mamba2Spec::poison() { fill_nan(y_.get(), in_, calls_ * batch_ * Tmax_ * H_ * P_, stream_); }

void Mamba2Spec::check(int T, const std::string& what) {
  check_outputs(y_, in_, calls_, batch_, Tmax_, T, H_ * P_, stream_, what);
}

// ---- GDN / KDA --------------------------------------------------------------------------------

GdnSpec::GdnSpec(const GdnShape& s, int64_t batch, int calls, int Lmax, int Tmax, uint64_t seed,
                 cudaStream_t stream, DType in)
    : SpecSlots(batch, calls, seed, stream), H_(s.H), HV_(s.HV), K_(s.K), V_(s.V),
      kda_(s.gate() == gdn::Gate::kChannel), Lmax_(Lmax), Tmax_(Tmax) {
  if (in != kBF16)
    throw BenchError(fmt::format("verify: {} inputs {}, expected bfloat16 (the GDN/KDA pools are "
                                 "bf16 only)", s.name, dtype_name(in)));
  // Parameters and ranges as the kernel benchmark (gdn_pool.cpp).
  const int64_t gw = kda_ ? K_ : 1;
  std::uniform_real_distribution<float> uA(-1.5f, 0.5f), ubias(-1.0f, 1.0f);
  std::vector<float> A_log(static_cast<size_t>(HV_)), dt_bias(static_cast<size_t>(HV_ * gw));
  for (float& x : A_log) x = uA(rng_);
  for (float& x : dt_bias) x = ubias(rng_);
  A_log_ = DeviceMemory(nbytes(HV_, kF32)), dt_bias_ = DeviceMemory(nbytes(HV_ * gw, kF32));
  upload(A_log_, A_log, stream), upload(dt_bias_, dt_bias, stream);
  layer_.dims = {H_, HV_, K_, V_, s.gate()};
  layer_.A_log = device_view(A_log_, 0, kF32, {HV_});
  layer_.dt_bias = kda_ ? device_view(dt_bias_, 0, kF32, {HV_, K_}) : device_view(dt_bias_, 0, kF32, {HV_});
  state_ = DeviceMemory(nbytes(slots_ * state_elems(), kF32));
  fill_uniform(state_.get(), kF32, slots_ * state_elems(), -1.0f, 1.0f, seed + 1, stream);
  ring_u_ = DeviceMemory(nbytes(slots_ * HV_ * Lmax * V_, kF32));
  ring_k_ = DeviceMemory(nbytes(slots_ * H_ * Lmax * K_, kF32));
  ring_g_ = DeviceMemory(nbytes(slots_ * HV_ * Lmax * gw, kF32));
  fill_uniform(ring_u_.get(), kF32, slots_ * HV_ * Lmax * V_, -1.0f, 1.0f, seed + 2, stream);
  fill_uniform(ring_k_.get(), kF32, slots_ * H_ * Lmax * K_, -0.1f, 0.1f, seed + 3, stream);
  fill_uniform(ring_g_.get(), kF32, slots_ * HV_ * Lmax * gw, -2.0f, -0.01f, seed + 4, stream);
  const int64_t tok = calls_ * batch_ * Tmax;
  q_ = random_bf16(tok * H_ * K_, -1.0f, 1.0f, seed + 5, stream);
  k_ = random_bf16(tok * H_ * K_, -1.0f, 1.0f, seed + 6, stream);
  v_ = random_bf16(tok * HV_ * V_, -1.0f, 1.0f, seed + 7, stream);
  a_ = random_bf16(tok * HV_ * gw, -1.0f, 1.0f, seed + 8, stream);
  b_ = random_bf16(tok * HV_, -2.0f, 2.0f, seed + 9, stream);
  y_ = DeviceMemory(nbytes(tok * HV_ * V_, kBF16));
  BENCH_CUDA(cudaStreamSynchronize(stream));
}

TensorView GdnSpec::states(const DeviceMemory& m, int64_t slots) const {
  return device_view(m, 0, kF32, {slots, HV_, V_, K_});
}

gdn::Tokens GdnSpec::tokens(int r, int T) const {
  const int64_t t0 = static_cast<int64_t>(r) * batch_ * Tmax_;
  const int64_t gw = kda_ ? K_ : 1;
  gdn::Tokens t;
  t.q = device_view(q_, t0 * H_ * K_ * 2, kBF16, {batch_, T, H_, K_});
  t.k = device_view(k_, t0 * H_ * K_ * 2, kBF16, {batch_, T, H_, K_});
  t.v = device_view(v_, t0 * HV_ * V_ * 2, kBF16, {batch_, T, HV_, V_});
  t.a = kda_ ? device_view(a_, t0 * HV_ * gw * 2, kBF16, {batch_, T, HV_, K_})
             : device_view(a_, t0 * HV_ * 2, kBF16, {batch_, T, HV_});
  t.b = device_view(b_, t0 * HV_ * 2, kBF16, {batch_, T, HV_});
  return t;
}

TensorView GdnSpec::y(int r, int T) const {
  const int64_t t0 = static_cast<int64_t>(r) * batch_ * Tmax_;
  return device_view(y_, t0 * HV_ * V_ * 2, kBF16, {batch_, T, HV_, V_});
}

gdn::Cache GdnSpec::cache(int L) const {
  if (L > Lmax_) throw BenchError(fmt::format("verify: ring length {} > allocated {}", L, Lmax_));
  gdn::Cache c;
  c.state = device_view(state_, 0, kF32, {slots_, HV_, V_, K_});
  c.ring_u = device_view(ring_u_, 0, kF32, {slots_, HV_, L, V_});
  c.ring_k = device_view(ring_k_, 0, kF32, {slots_, H_, L, K_});
  c.ring_g = kda_ ? device_view(ring_g_, 0, kF32, {slots_, HV_, L, K_})
                  : device_view(ring_g_, 0, kF32, {slots_, HV_, L});
  return c;
}

void GdnSpec::decode(int r, cudaStream_t s, int L) const {
  gdn::Cache c = cache(L);
  cuda::gdn::replay_step(layer_, c, cursors(RingConfig{L, 1, RingMode::kDecode}), tokens(r, 1),
                         rows(r, s), y(r, 1));
}

void GdnSpec::verify(int r, cudaStream_t s, const RingConfig& cfg) const {
  gdn::Cache c = cache(cfg.L);
  RingCursors cur = cursors(cfg);
  const Rows rw = rows(r, s);
  gdn::verify(layer_, c, cur, tokens(r, cfg.T), rw, y(r, cfg.T));
  commit(cur, rw, accepted(r));
}

void GdnSpec::snapshot(int r, cudaStream_t, int T, const TensorView& states, const Rows& rw,
                       const TensorView& dst) const {
  cuda::gdn::snapshot_verify(layer_, states, tokens(r, T), rw, dst, y(r, T));
}

void GdnSpec::poison() { fill_nan(y_.get(), kBF16, calls_ * batch_ * Tmax_ * HV_ * V_, stream_); }

void GdnSpec::check(int T, const std::string& what) {
  check_outputs(y_, kBF16, calls_, batch_, Tmax_, T, HV_ * V_, stream_, what);
}

}  // namespace replayssm::bench
