#include "verify_bench.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>

#include "byte_model.h"
#include "cuda/mamba2/mamba2_cuda.h"
#include "device_fill.h"
#include "mamba2_kernels.h"
#include "replayssm/mamba2.h"
#include "replayssm/ring.h"
#include "slot_pool.h"

namespace replayssm::bench {
namespace {

namespace cm = cuda::mamba2;
constexpr DType kBF16 = DType::kBF16, kF32 = DType::kF32, kI32 = DType::kI32, kI8 = DType::kI8;

size_t nbytes(int64_t n, DType t) { return static_cast<size_t>(n * dtype_size(t)); }

const Mamba2Shape& find_shape(const std::string& name) {
  for (const Mamba2Shape& s : mamba2_shapes())
    if (s.name == name) return s;
  throw BenchError("verify: unknown mamba2 shape " + name);
}

/// Mean history and flush fraction per step of rows starting at the given phases and accepting
/// `accept` tokens of T every step (ring.h's rule, simulated over many steps): the byte model of
/// a verify step depends on both.
struct Cycle {
  double mean_h = 0, flush_fraction = 0;
};
Cycle cycle_of(const RingConfig& cfg, int accept, const std::vector<Cursor>& start, int steps) {
  double hsum = 0, flushes = 0, n = 0;
  for (Cursor c : start)
    for (int s = 0; s < steps; ++s, ++n) {
      hsum += c.h;
      if (c.is_flush && c.h > 0) ++flushes;
      c = commit_cursor(c, accept, cfg);
    }
  return {hsum / n, flushes / n};
}

/// Everything one (shape, batch) point needs on the device.
class SpecPool {
 public:
  SpecPool(const Mamba2Shape& s, int64_t batch, int calls, int L, int Tmax, uint64_t seed,
           cudaStream_t stream)
      : batch_(batch), calls_(calls), slots_(batch * calls), L_(L), Tmax_(Tmax), rng_(seed),
        stream_(stream) {
    const int64_t H = s.H, P = s.P, N = s.N, G = s.G;
    dims_ = {H, P, N, G};
    std::uniform_real_distribution<float> uA(-8.0f, -1.0f), ubias(0.0f, 0.5f), uD(0.5f, 1.5f);
    std::vector<float> A_log(H), dt_bias(H), D(H);
    for (int64_t i = 0; i < H; ++i) {
      A_log[i] = std::log(-uA(rng_));
      dt_bias[i] = ubias(rng_);
      D[i] = uD(rng_);
    }
    A_log_ = DeviceMemory(nbytes(H, kF32)), dt_bias_ = DeviceMemory(nbytes(H, kF32));
    D_ = DeviceMemory(nbytes(H, kF32));
    upload(A_log_, A_log, stream), upload(dt_bias_, dt_bias, stream), upload(D_, D, stream);
    layer_.dims = dims_;
    layer_.A_log = device_view(A_log_, 0, kF32, {H});
    layer_.dt_bias = device_view(dt_bias_, 0, kF32, {H});
    layer_.D = device_view(D_, 0, kF32, {H});

    state_ = DeviceMemory(nbytes(slots_ * H * P * N, kF32));
    fill_uniform(state_.get(), kF32, slots_ * H * P * N, -1.0f, 1.0f, seed + 1, stream);
    ring_x_ = DeviceMemory(nbytes(slots_ * H * L * P, kBF16));
    ring_dt_ = DeviceMemory(nbytes(slots_ * H * L, kF32));
    ring_B_ = DeviceMemory(nbytes(slots_ * G * L * N, kBF16));
    fill_uniform(ring_x_.get(), kBF16, slots_ * H * L * P, -1.0f, 1.0f, seed + 2, stream);
    fill_uniform(ring_dt_.get(), kF32, slots_ * H * L, 0.01f, 0.2f, seed + 3, stream);
    fill_uniform(ring_B_.get(), kBF16, slots_ * G * L * N, -1.0f, 1.0f, seed + 4, stream);

    // Per-call token buffers sized for Tmax tokens; a T-token call views the first batch*T.
    const int64_t tok = calls_ * batch_ * Tmax;
    x_ = DeviceMemory(nbytes(tok * H * P, kBF16)), y_ = DeviceMemory(nbytes(tok * H * P, kBF16));
    dt_ = DeviceMemory(nbytes(tok * H, kBF16));
    B_ = DeviceMemory(nbytes(tok * G * N, kBF16)), C_ = DeviceMemory(nbytes(tok * G * N, kBF16));
    fill_uniform(x_.get(), kBF16, tok * H * P, -1.0f, 1.0f, seed + 5, stream);
    fill_uniform(dt_.get(), kBF16, tok * H, -3.0f, -1.0f, seed + 6, stream);
    fill_uniform(B_.get(), kBF16, tok * G * N, -1.0f, 1.0f, seed + 7, stream);
    fill_uniform(C_.get(), kBF16, tok * G * N, -1.0f, 1.0f, seed + 8, stream);

    std::vector<int32_t> perm(static_cast<size_t>(slots_));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    ids_ = DeviceMemory(nbytes(slots_, kI32));
    upload(ids_, perm, stream);
    accepted_ = DeviceMemory(nbytes(slots_, kI32));
    origin_ = DeviceMemory(nbytes(slots_, kI32)), h_ = DeviceMemory(nbytes(slots_, kI32));
    flush_ = DeviceMemory(nbytes(slots_, kI8));
    BENCH_CUDA(cudaStreamSynchronize(stream));
  }

  const mamba2::Dims& dims() const { return dims_; }
  const mamba2::Layer& layer() const { return layer_; }
  int64_t batch() const { return batch_; }
  int calls() const { return calls_; }
  int64_t slots() const { return slots_; }

  mamba2::Tokens tokens(int r, int T) const {
    const int64_t H = dims_.nheads, P = dims_.headdim, N = dims_.d_state, G = dims_.ngroups;
    const int64_t t0 = static_cast<int64_t>(r) * batch_ * Tmax_;  // first token of call r
    return {device_view(x_, t0 * H * P * 2, kBF16, {batch_, T, H, P}),
            device_view(dt_, t0 * H * 2, kBF16, {batch_, T, H}),
            device_view(B_, t0 * G * N * 2, kBF16, {batch_, T, G, N}),
            device_view(C_, t0 * G * N * 2, kBF16, {batch_, T, G, N}),
            {}};
  }
  TensorView y(int r, int T) const {
    const int64_t t0 = static_cast<int64_t>(r) * batch_ * Tmax_;
    return device_view(y_, t0 * dims_.nheads * dims_.headdim * 2, kBF16,
                       {batch_, T, dims_.nheads, dims_.headdim});
  }
  Rows rows(int r, cudaStream_t s) const {
    Rows rw;
    rw.slot_ids = device_view(ids_, static_cast<int64_t>(r) * batch_ * 4, kI32, {batch_});
    rw.stream = s;
    return rw;
  }
  /// The pool with a ring of L <= the allocated length rows (a view of the same buffers).
  mamba2::Cache cache(int L) const {
    const int64_t H = dims_.nheads, P = dims_.headdim, N = dims_.d_state, G = dims_.ngroups;
    if (L > L_) throw BenchError(fmt::format("verify: ring length {} > allocated {}", L, L_));
    return {device_view(state_, 0, kF32, {slots_, H, P, N}),
            device_view(ring_x_, 0, kBF16, {slots_, H, L, P}),
            device_view(ring_dt_, 0, kF32, {slots_, H, L}),
            device_view(ring_B_, 0, kBF16, {slots_, G, L, N})};
  }
  RingCursors cursors(const RingConfig& cfg) const {
    return {device_view(origin_, 0, kI32, {slots_}), device_view(h_, 0, kI32, {slots_}),
            device_view(flush_, 0, kI8, {slots_}), cfg};
  }
  TensorView accepted(int r) const {
    return device_view(accepted_, static_cast<int64_t>(r) * batch_ * 4, kI32, {batch_});
  }

  /// Speculative cursors at random valid phases (h in 0..L-T, the flush rule); returns them.
  std::vector<Cursor> set_spec_cursors(const RingConfig& cfg) {
    std::uniform_int_distribution<int32_t> uo(0, cfg.L - 1), uh(0, cfg.L - cfg.T);
    std::vector<Cursor> cur(static_cast<size_t>(slots_));
    for (Cursor& c : cur) c = {uo(rng_), uh(rng_), false}, c.is_flush = c.h + 2 * cfg.T > cfg.L;
    put_cursors(cur);
    return cur;
  }
  /// Decode cursors: every row at history h, no flush.
  void set_decode_cursors(int L, int h) {
    std::uniform_int_distribution<int32_t> uo(0, L - 1);
    std::vector<Cursor> cur(static_cast<size_t>(slots_));
    for (Cursor& c : cur) c = {uo(rng_), h, false};
    put_cursors(cur);
  }
  void set_accepted(int n) {
    upload(accepted_, std::vector<int32_t>(static_cast<size_t>(slots_), n), stream_);
  }
  void poison() {
    fill_nan(y_.get(), kBF16, calls_ * batch_ * Tmax_ * dims_.nheads * dims_.headdim, stream_);
  }
  /// Outputs of the first T tokens of every call must be finite after a measurement.
  void check(int T, const std::string& what) {
    for (int r = 0; r < calls_; ++r) {
      const int64_t n = batch_ * T * dims_.nheads * dims_.headdim;
      const int64_t bad = count_nonfinite(
          static_cast<char*>(y_.get()) + static_cast<int64_t>(r) * batch_ * Tmax_ *
                                             dims_.nheads * dims_.headdim * 2,
          kBF16, n, stream_);
      if (bad) throw BenchError(fmt::format("{}: {} non-finite outputs in call {}", what, bad, r));
    }
  }

 private:
  void put_cursors(const std::vector<Cursor>& cur) {
    std::vector<int32_t> o, h;
    std::vector<int8_t> f;
    for (const Cursor& c : cur) o.push_back(c.origin), h.push_back(c.h), f.push_back(c.is_flush);
    upload(origin_, o, stream_), upload(h_, h, stream_), upload(flush_, f, stream_);
  }

  mamba2::Dims dims_;
  int64_t batch_;
  int calls_;
  int64_t slots_;
  int L_, Tmax_;
  std::mt19937_64 rng_;
  cudaStream_t stream_;
  DeviceMemory A_log_, dt_bias_, D_, state_, ring_x_, ring_dt_, ring_B_;
  DeviceMemory x_, dt_, B_, C_, y_, ids_, accepted_, origin_, h_, flush_;
  mamba2::Layer layer_;
};

/// The snapshot baseline's pool for T tokens: per row a source state and T snapshot states.
struct SnapshotPool {
  DeviceMemory states, dst, next;
  int64_t slots;
  SnapshotPool(const mamba2::Dims& d, int64_t rows, int T, uint64_t seed, cudaStream_t s)
      : slots(rows * (T + 1)) {
    const int64_t n = slots * d.nheads * d.headdim * d.d_state;
    states = DeviceMemory(nbytes(n, kF32));
    fill_uniform(states.get(), kF32, n, -1.0f, 1.0f, seed, s);
    std::vector<int32_t> dv(static_cast<size_t>(rows * T));
    for (int64_t r = 0; r < rows; ++r)
      for (int t = 0; t < T; ++t) dv[r * T + t] = static_cast<int32_t>(r * (T + 1) + 1 + t);
    dst = DeviceMemory(nbytes(rows * T, kI32));
    upload(dst, dv, s);
    next = DeviceMemory(nbytes(rows, kI32));
  }
};

nlohmann::json row_of(const Row& m, const std::string& shape, const std::string& variant, int L) {
  nlohmann::json j;
  j["family"] = "mamba2";
  j["shape"] = shape;
  j["batch"] = m.batch;
  j["variant"] = variant;
  j["state"] = "fp32/fp32";
  j["L"] = L;
  j["us"] = m.us;
  j["us_p10"] = m.us_p10;
  j["us_p90"] = m.us_p90;
  j["bytes"] = m.bytes;
  j["gbps"] = m.gbps;
  j["pct_copy_bw"] = m.pct_copy_bw;
  j["calls"] = m.calls;
  j["steps"] = m.steps;
  j["pool_slots"] = m.pool_slots;
  j["replays"] = m.replays;
  return j;
}

}  // namespace

int verify_ring_length(const VerifyConfig& cfg, int T) { return std::max(cfg.L, 4 * T); }

long verify_graph_count(const VerifyConfig& cfg) {
  return static_cast<long>(cfg.shapes.size() * cfg.batches.size() * (1 + 4 * cfg.Ts.size()));
}

std::vector<nlohmann::json> run_verify(const VerifyConfig& cfg) {
  std::vector<nlohmann::json> out;
  Stream stream;
  const cudaStream_t s = stream.get();
  const int Tmax = *std::max_element(cfg.Ts.begin(), cfg.Ts.end());
  for (const std::string& name : cfg.shapes) {
    const Mamba2Shape& sh = find_shape(name);
    const StepBytes bm = mamba2_bytes(sh.H, sh.P, sh.N, sh.G, 4);
    for (int64_t batch : cfg.batches) {
      const int calls = calls_per_graph(static_cast<double>(bm.state()) * batch);
      SpecPool pool(sh, batch, calls, verify_ring_length(cfg, Tmax), Tmax,
                    cfg.timing.seed + 7919ull * batch, s);
      const PoolStats ps{batch, pool.slots(), calls, kF32, kF32};
      const std::string where = fmt::format("{} batch {}", name, batch);

      // One ordinary ReplaySSM decode step: every row at h = L/2 - 1 (mean history of a window).
      const RingConfig dcfg{cfg.L, 1, RingMode::kDecode};
      const int hd = cfg.L / 2 - 1;
      pool.set_decode_cursors(cfg.L, hd);
      mamba2::Cache dcache = pool.cache(cfg.L);
      const Row dec = measure(
          ps, [&] { pool.poison(); }, [&](const std::string& w) { pool.check(1, w); },
          [&](cudaStream_t st) {
            for (int r = 0; r < calls; ++r)
              cm::replay_step(pool.layer(), dcache, pool.cursors(dcfg), pool.tokens(r, 1),
                              pool.rows(r, st), pool.y(r, 1));
          },
          1, static_cast<double>(bm.ordinary(hd)) * batch, cfg.timing, s, where + " decode step");
      nlohmann::json dj = row_of(dec, name, "decode-step", cfg.L);
      dj["h"] = hd;
      out.push_back(dj);

      for (int T : cfg.Ts) {
        const int L = verify_ring_length(cfg, T);
        const RingConfig scfg{L, T, RingMode::kSpeculative};
        mamba2::Cache cache = pool.cache(L);
        // The snapshot baseline first (its pool is freed before the replay rows are timed).
        double snap_us[2] = {0, 0};
        std::vector<nlohmann::json> snap_rows;
        {
          SnapshotPool sp(pool.dims(), calls * batch, T, cfg.timing.seed + 31 * T, s);
          const TensorView states = device_view(sp.states, 0, kF32,
                                                {sp.slots, sh.H, sh.P, sh.N});
          // Row i of the pool reads slot (T + 1) i and writes its snapshots to the T after it.
          DeviceMemory src(nbytes(calls * batch, kI32));
          std::vector<int32_t> sv(static_cast<size_t>(calls * batch));
          for (size_t i = 0; i < sv.size(); ++i) sv[i] = static_cast<int32_t>(i * (T + 1));
          upload(src, sv, s);
          for (int a = 0; a < 2; ++a) {
            pool.set_accepted(a == 0 ? T : 1);
            const Row m = measure(
                ps, [&] { pool.poison(); }, [&](const std::string& w) { pool.check(T, w); },
                [&](cudaStream_t st) {
                  for (int r = 0; r < calls; ++r) {
                    Rows rw;
                    rw.slot_ids = device_view(src, static_cast<int64_t>(r) * batch * 4, kI32, {batch});
                    rw.stream = st;
                    const TensorView dst = device_view(
                        sp.dst, static_cast<int64_t>(r) * batch * T * 4, kI32, {batch, T});
                    cm::snapshot_verify(pool.layer(), states, pool.tokens(r, T), rw, dst,
                                        pool.y(r, T));
                    cm::snapshot_select(rw, sp.slots, dst, pool.accepted(r),
                                        device_view(sp.next, static_cast<int64_t>(r) * batch * 4,
                                                    kI32, {batch}));
                  }
                },
                1, static_cast<double>((1 + T) * bm.state() + T * bm.io()) * batch, cfg.timing,
                s, fmt::format("{} T {} snapshot", where, T));
            snap_us[a] = m.us;
            nlohmann::json j = row_of(m, name, "snapshot", L);
            j["T"] = T;
            j["acceptance"] = a == 0 ? "all-accept" : "all-reject";
            j["ratio_to_decode_step"] = m.us / dec.us;
            snap_rows.push_back(j);
          }
        }
        for (int a = 0; a < 2; ++a) {
          const int accept = a == 0 ? T : 1;
          pool.set_accepted(accept);
          const std::vector<Cursor> start = pool.set_spec_cursors(scfg);
          const Cycle cyc = cycle_of(scfg, accept, start, L);
          const double bytes = static_cast<double>(bm.state()) * (1.0 + cyc.flush_fraction) +
                               cyc.mean_h * static_cast<double>(bm.record()) +
                               T * static_cast<double>(bm.io() + bm.record()) +
                               StepBytes::kCursorBytes;
          const Row m = measure(
              ps, [&] { pool.poison(); }, [&](const std::string& w) { pool.check(T, w); },
              [&](cudaStream_t st) {
                for (int step = 0; step < L; ++step)
                  for (int r = 0; r < calls; ++r) {
                    const Rows rw = pool.rows(r, st);
                    RingCursors cur = pool.cursors(scfg);
                    mamba2::verify(pool.layer(), cache, cur, pool.tokens(r, T), rw, pool.y(r, T));
                    commit(cur, rw, pool.accepted(r));
                  }
              },
              L, bytes * batch, cfg.timing, s, fmt::format("{} T {} verify", where, T));
          nlohmann::json j = row_of(m, name, "replay", L);
          j["T"] = T;
          j["acceptance"] = a == 0 ? "all-accept" : "all-reject";
          j["ratio_to_decode_step"] = m.us / dec.us;
          j["speedup"] = snap_us[a] / m.us;
          j["baseline"] = "snapshot";
          j["mean_h"] = cyc.mean_h;
          j["flush_fraction"] = cyc.flush_fraction;
          j["commit_in_graph"] = true;
          out.push_back(j);
          if (cfg.timing.on_point)
            cfg.timing.on_point(fmt::format(
                "{} T {} (L {}) {}: verify {:.1f} us ({:.2f}x decode step {:.1f} us), snapshot {:.1f} us "
                "({:.2f}x)",
                where, T, L, a == 0 ? "all-accept" : "all-reject", m.us, m.us / dec.us, dec.us,
                snap_us[a], snap_us[a] / m.us));
        }
        for (nlohmann::json& j : snap_rows) out.push_back(j);
      }
    }
  }
  return out;
}

}  // namespace replayssm::bench
