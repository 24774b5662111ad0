#include "gdn_pool.h"

#include <vector>

#include "device_fill.h"
#include "kernel_points.h"

namespace replayssm::bench {
namespace {

constexpr DType kBF16 = DType::kBF16, kF32 = DType::kF32;

}  // namespace

GdnPool::GdnPool(const gdn::Dims& dims, int64_t batch, DType state, int calls, uint64_t seed,
                 cudaStream_t stream, StateFormat read_format, bool dense_slots)
    : batch_(batch),
      calls_(calls),
      nslots_(batch * calls),
      state_t_(state),
      read_f_(read_format),
      seed_(seed),
      stream_(stream),
      rng_(seed) {
  const int64_t H = dims.num_k_heads, HV = dims.num_v_heads, K = dims.head_k_dim,
                V = dims.head_v_dim;
  layer_.dims = dims;
  const int64_t G = gw();

  // Layer parameters (the GPU tests' ranges: exp(A_log) in (0.22, 1.65), dt_bias in (-1, 1)).
  std::uniform_real_distribution<float> uA(-1.5f, 0.5f), ubias(-1.0f, 1.0f);
  std::vector<float> A_log(static_cast<size_t>(HV)), dt_bias(static_cast<size_t>(HV * G));
  for (float& x : A_log) x = uA(rng_);
  for (float& x : dt_bias) x = ubias(rng_);
  A_log_ = DeviceMemory(nbytes(HV, kF32));
  dt_bias_ = DeviceMemory(nbytes(HV * G, kF32));
  upload(A_log_, A_log, stream);
  upload(dt_bias_, dt_bias, stream);
  layer_.A_log = device_view(A_log_, 0, kF32, {HV});
  layer_.dt_bias = G == 1 ? device_view(dt_bias_, 0, kF32, {HV})
                          : device_view(dt_bias_, 0, kF32, {HV, G});

  // The pool's state / checkpoints.
  const int64_t nstate = nslots_ * HV * V * K;
  state_ = DeviceMemory(nbytes(nstate, state));
  fill_uniform(state_.get(), state, nstate, -1.0f, 1.0f, seed_ + 1, stream);
  read_ = ReadCopy(split_mode(state, read_format), nslots_, HV, V, K, seed_ + 6, stream);

  // Per-call inputs and outputs, [calls, batch, ...] back to back.
  const int64_t nqk = nslots_ * H * K, nv = nslots_ * HV * V, na = nslots_ * HV * G,
                nb = nslots_ * HV;
  q_ = DeviceMemory(nbytes(nqk, kBF16));
  k_ = DeviceMemory(nbytes(nqk, kBF16));
  v_ = DeviceMemory(nbytes(nv, kBF16));
  a_ = DeviceMemory(nbytes(na, kBF16));
  b_ = DeviceMemory(nbytes(nb, kBF16));
  y_ = DeviceMemory(nbytes(nv, kBF16));
  fill_uniform(q_.get(), kBF16, nqk, -1.0f, 1.0f, seed_ + 2, stream);
  fill_uniform(k_.get(), kBF16, nqk, -1.0f, 1.0f, seed_ + 3, stream);
  fill_uniform(v_.get(), kBF16, nv, -1.0f, 1.0f, seed_ + 4, stream);
  fill_uniform(a_.get(), kBF16, na, -1.0f, 1.0f, seed_ + 5, stream);
  fill_uniform(b_.get(), kBF16, nb, -2.0f, 2.0f, seed_ + 6, stream);
  fill_nan(y_.get(), kBF16, nv, stream);

  slots_ = std::make_unique<SlotPool>(batch, calls, rng_, stream, dense_slots);
  BENCH_CUDA(cudaStreamSynchronize(stream));
}

void GdnPool::set_ring(int L) {
  const auto& d = layer_.dims;
  L_ = L;
  const int64_t nu = nslots_ * d.num_v_heads * L * d.head_v_dim,
                nk = nslots_ * d.num_k_heads * L * d.head_k_dim,
                ng = nslots_ * d.num_v_heads * L * gw();
  ring_u_.reset(), ring_k_.reset(), ring_g_.reset();  // free before allocating the next size
  ring_v_.reset(), ring_beta_.reset();
  ring_u_ = DeviceMemory(nbytes(nu, kF32));
  ring_k_ = DeviceMemory(nbytes(nk, kF32));
  ring_g_ = DeviceMemory(nbytes(ng, kF32));
  fill_uniform(ring_u_.get(), kF32, nu, -1.0f, 1.0f, seed_ + 10 + L, stream_);
  // Normalised keys: entries of size ~K^-1/2 (|k^| ~ 0.6 at K = 128, |x| <= 0.1 per entry).
  fill_uniform(ring_k_.get(), kF32, nk, -0.1f, 0.1f, seed_ + 11 + L, stream_);
  // Log-decays g = -exp(A_log) softplus(a + dt_bias) <= 0: within the parameters' range.
  fill_uniform(ring_g_.get(), kF32, ng, -2.0f, -0.01f, seed_ + 12 + L, stream_);
  if (split()) {  // split modes: v and beta of each record (the flush recomputes u from them)
    const int64_t nb = nslots_ * d.num_v_heads * L;
    ring_v_ = DeviceMemory(nbytes(nu, kF32));
    ring_beta_ = DeviceMemory(nbytes(nb, kF32));
    fill_uniform(ring_v_.get(), kF32, nu, -1.0f, 1.0f, seed_ + 13 + L, stream_);
    fill_uniform(ring_beta_.get(), kF32, nb, 0.05f, 0.95f, seed_ + 14 + L, stream_);
  }
  slots_->set_L(L);
}

gdn::Tokens GdnPool::tokens(int r) const {
  const auto& d = layer_.dims;
  const int64_t b0 = static_cast<int64_t>(r) * batch_, H = d.num_k_heads, HV = d.num_v_heads,
                K = d.head_k_dim, V = d.head_v_dim, G = gw();
  gdn::Tokens t;
  t.q = device_view(q_, b0 * H * K * 2, kBF16, {batch_, H, K});
  t.k = device_view(k_, b0 * H * K * 2, kBF16, {batch_, H, K});
  t.v = device_view(v_, b0 * HV * V * 2, kBF16, {batch_, HV, V});
  t.a = G == 1 ? device_view(a_, b0 * HV * 2, kBF16, {batch_, HV})
               : device_view(a_, b0 * HV * G * 2, kBF16, {batch_, HV, G});
  t.b = device_view(b_, b0 * HV * 2, kBF16, {batch_, HV});
  return t;
}

TensorView GdnPool::y(int r) const {
  const auto& d = layer_.dims;
  const int64_t b0 = static_cast<int64_t>(r) * batch_;
  return device_view(y_, b0 * d.num_v_heads * d.head_v_dim * 2, kBF16,
                     {batch_, d.num_v_heads, d.head_v_dim});
}

gdn::Cache GdnPool::cache() const {
  const auto& d = layer_.dims;
  gdn::Cache c;
  c.state = device_view(state_, 0, state_t_, {nslots_, d.num_v_heads, d.head_v_dim, d.head_k_dim});
  if (L_ > 0) {
    c.ring_u = device_view(ring_u_, 0, kF32, {nslots_, d.num_v_heads, L_, d.head_v_dim});
    c.ring_k = device_view(ring_k_, 0, kF32, {nslots_, d.num_k_heads, L_, d.head_k_dim});
    c.ring_g = gw() == 1 ? device_view(ring_g_, 0, kF32, {nslots_, d.num_v_heads, L_})
                         : device_view(ring_g_, 0, kF32, {nslots_, d.num_v_heads, L_, gw()});
    if (split()) {
      c.ring_v = device_view(ring_v_, 0, kF32, {nslots_, d.num_v_heads, L_, d.head_v_dim});
      c.ring_beta = device_view(ring_beta_, 0, kF32, {nslots_, d.num_v_heads, L_});
    }
  }
  if (split()) {
    c.mode = read_.mode();
    c.read = read_.buffer();
    c.sr = read_.sr();
  }
  return c;
}

void GdnPool::enqueue_conventional(cudaStream_t s) const {
  gdn::Cache c = cache();
  for (int r = 0; r < calls_; ++r)
    cuda::gdn::conventional_step(layer_, c, tokens(r), slots_->rows(r, s), y(r));
}

void GdnPool::enqueue_replay(cudaStream_t s, const cuda::gdn::Plan& plan, int steps,
                             bool commit) const {
  if (L_ < 1) throw BenchError("GdnPool: set_ring before a replay step");
  gdn::Cache c = cache();
  RingCursors cur = slots_->cursors();
  for (int step = 0; step < steps; ++step) {
    for (int r = 0; r < calls_; ++r)
      cuda::gdn::replay_step(layer_, c, cur, tokens(r), slots_->rows(r, s), y(r), plan);
    if (commit) slots_->commit_all(s);
  }
}

void GdnPool::poison_outputs() {
  const auto& d = layer_.dims;
  fill_nan(y_.get(), kBF16, nslots_ * d.num_v_heads * d.head_v_dim, stream_);
  BENCH_CUDA(cudaStreamSynchronize(stream_));
}

void GdnPool::check_finite(const std::string& what) {
  const auto& d = layer_.dims;
  const int64_t ny = nslots_ * d.num_v_heads * d.head_v_dim;
  const int64_t bad_y = count_nonfinite(y_.get(), kBF16, ny, stream_);
  const int64_t bad_s = count_nonfinite(
      state_.get(), state_t_, nslots_ * d.num_v_heads * d.head_v_dim * d.head_k_dim, stream_);
  if (bad_y || bad_s)
    throw BenchError(what + ": " + std::to_string(bad_y) + " of " + std::to_string(ny) +
                     " outputs and " + std::to_string(bad_s) +
                     " state values are not finite (unwritten output or a broken kernel)");
}

}  // namespace replayssm::bench
