#include "mamba2_pool.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "device_fill.h"

namespace replayssm::bench {
namespace {

constexpr DType kBF16 = DType::kBF16, kF32 = DType::kF32;

TensorView view(const DeviceMemory& m, int64_t offset_bytes, DType t,
                std::initializer_list<int64_t> shape) {
  return device_view(m, offset_bytes, t, shape);
}

float softplus(float v) { return std::log1p(std::exp(v)); }

}  // namespace

Mamba2Pool::Mamba2Pool(const mamba2::Dims& dims, int64_t batch, DType state, int calls,
                       uint64_t seed, cudaStream_t stream, StateFormat read,
                       bool dense_slots)
    : batch_(batch),
      calls_(calls),
      nslots_(batch * calls),
      state_t_(state),
      read_(read),
      seed_(seed),
      stream_(stream),
      rng_(seed) {
  const int64_t H = dims.nheads, P = dims.headdim, N = dims.d_state, G = dims.ngroups;
  const int64_t per_call = batch;  // rows of one call

  // Layer parameters (host-drawn: A uniform in [-8, -1] exactly, as the anchors).
  std::uniform_real_distribution<float> uA(-8.0f, -1.0f), ubias(0.0f, 0.5f), uD(0.5f, 1.5f);
  std::vector<float> A_log(H), dt_bias(H), D(H);
  for (int64_t i = 0; i < H; ++i) {
    A_log[i] = std::log(-uA(rng_));
    dt_bias[i] = ubias(rng_);
    D[i] = uD(rng_);
  }
  A_log_ = DeviceMemory(nbytes(H, kF32));
  dt_bias_ = DeviceMemory(nbytes(H, kF32));
  D_ = DeviceMemory(nbytes(H, kF32));
  upload(A_log_, A_log, stream);
  upload(dt_bias_, dt_bias, stream);
  upload(D_, D, stream);
  layer_.dims = dims;
  layer_.A_log = view(A_log_, 0, kF32, {H});
  layer_.dt_bias = view(dt_bias_, 0, kF32, {H});
  layer_.D = view(D_, 0, kF32, {H});
  layer_.dt_softplus = true;

  // The pool's state / checkpoints.
  const int64_t nstate = nslots_ * H * P * N;
  state_ = DeviceMemory(nbytes(nstate, state));
  fill_uniform(state_.get(), state, nstate, -1.0f, 1.0f, seed_ + 1, stream);
  copy_ = ReadCopy(split_mode(state, read), nslots_, H, P, N, seed_ + 6, stream);  // split modes

  // Per-call inputs and outputs, [calls, batch, ...] back to back.
  const int64_t nx = calls_ * per_call * H * P, ndt = calls_ * per_call * H,
                nbc = calls_ * per_call * G * N;
  x_ = DeviceMemory(nbytes(nx, kBF16));
  dt_ = DeviceMemory(nbytes(ndt, kBF16));
  B_ = DeviceMemory(nbytes(nbc, kBF16));
  C_ = DeviceMemory(nbytes(nbc, kBF16));
  y_ = DeviceMemory(nbytes(nx, kBF16));
  fill_uniform(x_.get(), kBF16, nx, -1.0f, 1.0f, seed_ + 2, stream);
  fill_uniform(dt_.get(), kBF16, ndt, -3.0f, -1.0f, seed_ + 3, stream);
  fill_uniform(B_.get(), kBF16, nbc, -1.0f, 1.0f, seed_ + 4, stream);
  fill_uniform(C_.get(), kBF16, nbc, -1.0f, 1.0f, seed_ + 5, stream);
  fill_nan(y_.get(), kBF16, nx, stream);

  slots_ = std::make_unique<SlotPool>(batch, calls, rng_, stream, dense_slots);
  BENCH_CUDA(cudaStreamSynchronize(stream));
}

void Mamba2Pool::set_ring(int L) {
  const auto& d = layer_.dims;
  L_ = L;
  const int64_t nx = nslots_ * d.nheads * L * d.headdim, ndt = nslots_ * d.nheads * L,
                nB = nslots_ * d.ngroups * L * d.d_state;
  ring_x_.reset(), ring_dt_.reset(), ring_B_.reset();  // free before allocating the next size
  ring_x_ = DeviceMemory(nbytes(nx, kBF16));
  ring_dt_ = DeviceMemory(nbytes(ndt, kF32));
  ring_B_ = DeviceMemory(nbytes(nB, kBF16));
  fill_uniform(ring_x_.get(), kBF16, nx, -1.0f, 1.0f, seed_ + 10 + L, stream_);
  // Processed deltas of raw dt in [-3, -1] plus dt_bias in [0, 0.5].
  fill_uniform(ring_dt_.get(), kF32, ndt, softplus(-3.0f), softplus(-0.5f), seed_ + 11 + L,
               stream_);
  fill_uniform(ring_B_.get(), kBF16, nB, -1.0f, 1.0f, seed_ + 12 + L, stream_);
  slots_->set_L(L);
}

mamba2::Tokens Mamba2Pool::tokens(int r) const {
  const auto& d = layer_.dims;
  const int64_t b0 = static_cast<int64_t>(r) * batch_;
  mamba2::Tokens t;
  t.x = view(x_, b0 * d.nheads * d.headdim * 2, kBF16, {batch_, d.nheads, d.headdim});
  t.dt = view(dt_, b0 * d.nheads * 2, kBF16, {batch_, d.nheads});
  t.B = view(B_, b0 * d.ngroups * d.d_state * 2, kBF16, {batch_, d.ngroups, d.d_state});
  t.C = view(C_, b0 * d.ngroups * d.d_state * 2, kBF16, {batch_, d.ngroups, d.d_state});
  return t;
}

TensorView Mamba2Pool::y(int r) const {
  const auto& d = layer_.dims;
  const int64_t b0 = static_cast<int64_t>(r) * batch_;
  return view(y_, b0 * d.nheads * d.headdim * 2, kBF16, {batch_, d.nheads, d.headdim});
}

mamba2::Cache Mamba2Pool::cache() const {
  const auto& d = layer_.dims;
  mamba2::Cache c;
  c.state = view(state_, 0, state_t_, {nslots_, d.nheads, d.headdim, d.d_state});
  if (read_ != StateFormat::kFp32) {
    c.mode = copy_.mode();
    c.read = copy_.buffer();
    c.sr = copy_.sr();
  }
  if (L_ > 0) {
    c.ring_x = view(ring_x_, 0, kBF16, {nslots_, d.nheads, L_, d.headdim});
    c.ring_dt = view(ring_dt_, 0, kF32, {nslots_, d.nheads, L_});
    c.ring_B = view(ring_B_, 0, kBF16, {nslots_, d.ngroups, L_, d.d_state});
  }
  return c;
}

void Mamba2Pool::enqueue_conventional(cudaStream_t s) const {
  mamba2::Cache c = cache();
  for (int r = 0; r < calls_; ++r)
    cuda::mamba2::conventional_step(layer_, c, tokens(r), slots_->rows(r, s), y(r));
}

void Mamba2Pool::enqueue_replay(cudaStream_t s, const cuda::mamba2::Plan& plan, int steps,
                                bool commit) const {
  if (L_ < 1) throw BenchError("Mamba2Pool: set_ring before a replay step");
  mamba2::Cache c = cache();
  RingCursors cur = slots_->cursors();
  for (int step = 0; step < steps; ++step) {
    for (int r = 0; r < calls_; ++r)
      cuda::mamba2::replay_step(layer_, c, cur, tokens(r), slots_->rows(r, s), y(r), plan);
    if (commit) slots_->commit_all(s);
  }
}

void Mamba2Pool::poison_outputs() {
  const auto& d = layer_.dims;
  fill_nan(y_.get(), kBF16, nslots_ * d.nheads * d.headdim, stream_);
  BENCH_CUDA(cudaStreamSynchronize(stream_));
}

void Mamba2Pool::check_finite(const std::string& what) {
  const auto& d = layer_.dims;
  const int64_t ny = nslots_ * d.nheads * d.headdim;
  const int64_t bad_y = count_nonfinite(y_.get(), kBF16, ny, stream_);
  const int64_t bad_s =
      count_nonfinite(state_.get(), state_t_, nslots_ * d.nheads * d.headdim * d.d_state, stream_);
  if (bad_y || bad_s)
    throw BenchError(what + ": " + std::to_string(bad_y) + " of " + std::to_string(ny) +
                     " outputs and " + std::to_string(bad_s) +
                     " state values are not finite (unwritten output or a broken kernel)");
}

}  // namespace replayssm::bench
