// Test support for the Mamba-2 family: shapes, random parameters and tokens, a guarded slot pool,
// and Sim, which drives the CPU ops on a pool and checks every call against the fp64 oracle and
// the sequential (conventional) decoding of the committed stream.
//
// Tolerances: a running forward error bound, carried per state element (DESIGN.md §2 math).
// Units of u (unit roundoff: 2^-24 for the float32 backend, 2^-53 for the oracle). Writing
// M for the magnitude state of the committed stream, M <- a M + delta |x| |B| (it bounds every
// term that enters a state element: |a S|, |delta x B|, and in the replay forms each
// |s_j x_j B_j| and |abar S0|):
//   * conventional float32 step: S <- fl(a S + fl(delta x) B) rounds 4 times per element, delta
//     carries <= (max(1,|dt'|) + 4) u (the dt + dt_bias rounding magnified at most |dt'| times by
//     softplus, plus softplus' own ~3 u), and a = exp(delta A) then has relative error
//     <= (10 |delta A| + 1) u, which multiplies a|S| <= M. So with kc = 32 + 10 |delta A|
//     (32 > 4 + 12 + slack), err_t <= a err_{t-1} + kc u M_t: the budget bconv <- a bconv + kc M.
//   * a replay fold / output over a window of m records in float32: the prefix sums of delta have
//     absolute error <= (m + 1) u P (P = window sum of delta, error relative to P, not to the
//     difference), so each weight exp(A (P_t - P_j)) and the decay exp(A P_t) carry relative error
//     <= |A| P (2m + 11) u =: kappa u; the m-term sum adds m u and the scalars ~32 u. A flush
//     therefore moves the checkpoint budget as bckpt <- abar bckpt + (m + 32 + kappa) M.
//   * an output y_p = sum_n S[p,n] C_n (+ D x_p, * silu(z_p)): an N-term dot adds N u, the skip
//     4 u |D x|, the gate 8 u |y|:
//       |y - y_exact| <= u (sum_n |C_n| (B_n + k M_n) + 4 |D x_p|) |silu z_p| + 8 u |y|
//     with (B, k) = (bconv, N + 4) for the conventional step and (abar bckpt, N + m + 32 + kappa)
//     for replay and verify outputs.
//   * bfloat16 outputs add their rounding, <= 2^-8 |y| (8 significant bits).
// The oracle's own error is the same bound with u = 2^-53, negligible here.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "replayssm/errors.h"
#include "replayssm/mamba2.h"
#include "replayssm/ring.h"
#include "replayssm_ref.h"
#include "test_util.h"

namespace replayssm::testing::m2 {

using ref::Vec;
constexpr double kU32 = 0x1p-24;
constexpr double kBf16Out = 0x1p-8;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Shape {
  int64_t H, P, N, G;
  const char* name;
};
inline constexpr Shape kSmall{4, 8, 16, 2, "small 4x8x16 g2"};
inline constexpr Shape kOddA{24, 48, 64, 3, "odd 24x48x64 g3"};
inline constexpr Shape kOddB{3, 5, 7, 1, "odd 3x5x7 g1"};
inline constexpr Shape kNano{96, 80, 128, 8, "nemotron-3-nano-4b 96x80x128 g8"};
inline constexpr Shape kSuper{128, 64, 128, 8, "nemotron-3-super 128x64x128 g8"};

struct Options {
  DType dtype = DType::kF32;  ///< x, B, C, z and y
  bool dt_same = false;       ///< dt in `dtype` (else float32)
  bool z = true;
  bool D = true;
  bool softplus = true;
};

inline std::string describe(const Shape& s, const Options& o, const RingConfig& cfg) {
  std::ostringstream os;
  os << s.name << ", " << dtype_name(o.dtype) << (o.dt_same ? " dt" : " dt f32")
     << (o.z ? ", z" : ", no z") << (o.D ? ", D" : ", no D") << (o.softplus ? "" : ", no softplus")
     << ", " << ring_mode_name(cfg.mode) << " L=" << cfg.L << " T=" << cfg.T;
  return os.str();
}

inline int64_t size_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

/// A guarded buffer filled with a value (NaN, 0, ...).
inline GuardedBuffer filled(DType t, std::vector<int64_t> shape, double v, uint64_t seed = 7) {
  GuardedBuffer g(t, std::move(shape), seed);
  for (int64_t i = 0; i < g.numel(); ++i) g.set(i, static_cast<float>(v));
  return g;
}

inline double silu(double z) { return z * ref::sigmoid(z); }

// ---- parameters and tokens -----------------------------------------------------------------------

/// One layer's parameters: float32 buffers for the backend and their exact fp64 copies.
struct Params {
  Shape shape;
  Options opt;
  GuardedBuffer A_log, dt_bias, D;
  ref::Mamba2Params ref;

  Params(const Shape& s, const Options& o, Rng& rng)
      : shape(s), opt(o), A_log(DType::kF32, {s.H}, 11), dt_bias(DType::kF32, {s.H}, 12),
        D(DType::kF32, {s.H}, 13) {
    ref.H = s.H, ref.P = s.P, ref.N = s.N, ref.G = s.G, ref.dt_softplus = o.softplus;
    for (int64_t h = 0; h < s.H; ++h) {
      // |A| in [0.5, 4]; dt' = dt + dt_bias mostly in [-5, 1] (softplus) or [0.01, 1.2] (none).
      A_log.set(h, static_cast<float>(rng.uniform(std::log(0.5), std::log(4.0))));
      dt_bias.set(h, static_cast<float>(o.softplus ? rng.uniform(-3.0, 0.0) : rng.uniform(0.0, 0.2)));
      D.set(h, static_cast<float>(rng.normal()));
      ref.A_log.push_back(A_log.get(h));
      ref.dt_bias.push_back(dt_bias.get(h));
      if (o.D) ref.D.push_back(D.get(h));
    }
  }
  mamba2::Layer layer() const {
    mamba2::Layer l;
    l.dims = {shape.H, shape.P, shape.N, shape.G};
    l.A_log = A_log.view();
    l.dt_bias = dt_bias.view();
    if (opt.D) l.D = D.view();
    l.dt_softplus = opt.softplus;
    return l;
  }
  bool guards_intact() const {
    return A_log.guards_intact() && dt_bias.guards_intact() && D.guards_intact();
  }
  DType dt_dtype() const { return opt.dt_same ? opt.dtype : DType::kF32; }
  double A(int64_t h) const { return -std::exp(ref.A_log[h]); }
  int64_t group(int64_t h) const { return h / (shape.H / shape.G); }

  /// A random token, every value already rounded through the dtype the backend will load.
  ref::Mamba2Token token(Rng& rng) const {
    const Shape& s = shape;
    auto vec = [&](int64_t n, DType t) {
      Vec v(n);
      for (double& e : v) e = through(t, rng.normal());
      return v;
    };
    ref::Mamba2Token t;
    t.x = vec(s.H * s.P, opt.dtype);
    t.B = vec(s.G * s.N, opt.dtype);
    t.C = vec(s.G * s.N, opt.dtype);
    if (opt.z) t.z = vec(s.H * s.P, opt.dtype);
    t.dt.resize(s.H);
    for (double& d : t.dt) {
      // Now and then a dt' around 20, both sides of softplus' linear threshold.
      const double raw = !opt.softplus ? rng.uniform(0.01, 1.0)
                         : rng.integer(0, 29) == 0 ? rng.uniform(21.0, 25.0)
                                                   : rng.uniform(-2.0, 1.0);
      d = through(dt_dtype(), raw);
    }
    return t;
  }
};

// ---- error budgets ---------------------------------------------------------------------------------

/// Advance the magnitude state M and the conventional budget bconv (units of u) through token t.
inline void advance(const Params& prm, const ref::Mamba2Token& t, Vec& M, Vec& bconv) {
  const Shape& s = prm.shape;
  for (int64_t h = 0; h < s.H; ++h) {
    const double dl = ref::mamba2_delta(prm.ref, t, h), A = prm.A(h), a = std::exp(dl * A);
    const double kc = 32.0 + 10.0 * std::abs(dl * A);
    const double* B = &t.B[prm.group(h) * s.N];
    for (int64_t p = 0; p < s.P; ++p) {
      const double dx = dl * std::abs(t.x[h * s.P + p]);
      for (int64_t n = 0; n < s.N; ++n) {
        const int64_t i = (h * s.P + p) * s.N + n;
        M[i] = a * M[i] + dx * std::abs(B[n]);
        bconv[i] = a * bconv[i] + kc * M[i];
      }
    }
  }
}

/// The replay constants of a window of records (history and tokens up to the one of interest):
/// per head, the exact decay abar = exp(A P) and k = m + 32 + kappa (see the file comment).
struct Window {
  Vec abar, k;
};
inline Window window_of(const Params& prm, const std::vector<const Vec*>& deltas) {
  const int64_t m = static_cast<int64_t>(deltas.size());
  Window w{Vec(prm.shape.H), Vec(prm.shape.H)};
  for (int64_t h = 0; h < prm.shape.H; ++h) {
    double P = 0.0;
    for (const Vec* d : deltas) P += (*d)[h];
    w.abar[h] = std::exp(prm.A(h) * P);
    w.k[h] = m + 32.0 + std::abs(prm.A(h)) * P * (2.0 * m + 11.0);
  }
  return w;
}

/// Elementwise bound on |y - y_exact| for output y_ref of token t (file comment), in absolute
/// units: u (sum_n |C_n| (decay_h Bst_n + k_h M_n) + 4 |D x|) |silu z| + 8 u |y|.
inline Vec y_bound(const Params& prm, const ref::Mamba2Token& t, const Vec& y_ref, const Vec& Bst,
                   const Vec& decay, const Vec& M, const Vec& k, double u) {
  const Shape& s = prm.shape;
  Vec out(s.H * s.P);
  for (int64_t h = 0; h < s.H; ++h) {
    const double* C = &t.C[prm.group(h) * s.N];
    for (int64_t p = 0; p < s.P; ++p) {
      const int64_t i = h * s.P + p;
      double acc = 0.0;
      for (int64_t n = 0; n < s.N; ++n) {
        const int64_t e = i * s.N + n;
        acc += std::abs(C[n]) * (decay[h] * Bst[e] + k[h] * M[e]);
      }
      if (!prm.ref.D.empty()) acc += 4.0 * std::abs(prm.ref.D[h] * t.x[i]);
      if (!t.z.empty()) acc *= std::abs(silu(t.z[i]));
      out[i] = u * acc + 8.0 * u * std::abs(y_ref[i]);
    }
  }
  return out;
}

/// "" when |got_i - want_i| <= bound_i for all i, else the worst element. extra_rel adds an output
/// rounding: |fl(v) - v| <= extra_rel |v| with |v| <= |want_i| + bound_i.
inline std::string within(const std::vector<double>& got, const Vec& want, const Vec& bound,
                          double extra_rel) {
  int64_t worst = -1;
  double worst_ratio = 1.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = bound[i] * (1.0 + extra_rel) + extra_rel * std::abs(want[i]);
    const double err = std::abs(got[i] - want[i]);
    const double ratio = std::isnan(got[i]) || std::isnan(want[i]) ? INFINITY : err / tol;
    if (!(ratio <= worst_ratio)) worst = static_cast<int64_t>(i), worst_ratio = ratio;
  }
  if (worst < 0) return "";
  std::ostringstream os;
  os << "element " << worst << ": got " << got[worst] << ", want " << want[worst] << ", |err| "
     << std::abs(got[worst] - want[worst]) << " > bound "
     << bound[worst] * (1.0 + extra_rel) + extra_rel * std::abs(want[worst])
     << " (" << worst_ratio << "x)";
  return os.str();
}

// ---- the slot pool ---------------------------------------------------------------------------------

/// A layer's pool on the host: checkpoint/state, ring and cursors, all guarded.
struct Pool {
  int64_t slots, R;
  GuardedBuffer state, ring_x, ring_dt, ring_B, origin, h, flush;
  Pool(const Shape& s, int64_t slots_, const RingConfig& cfg, Rng& rng)
      : slots(slots_), R(cfg.rows()),
        state(DType::kF32, {slots_, s.H, s.P, s.N}, 21),
        ring_x(filled(DType::kF32, {slots_, s.H, R, s.P}, kNaN, 22)),
        ring_dt(filled(DType::kF32, {slots_, s.H, R}, kNaN, 23)),
        ring_B(filled(DType::kF32, {slots_, s.G, R, s.N}, kNaN, 24)),
        origin(DType::kI32, {slots_}, 25), h(DType::kI32, {slots_}, 26), flush(DType::kI8, {slots_}, 27) {
    // Never-used slots hold garbage: a sequence must start with reset_slots + replayssm::reset.
    float* st = state.data<float>();
    for (int64_t i = 0; i < state.numel(); ++i) st[i] = static_cast<float>(static_cast<int64_t>(rng.gen() % 2001) - 1000) * 0.01f;
    for (int64_t i = 0; i < slots; ++i) {
      origin.data<int32_t>()[i] = static_cast<int32_t>(rng.integer(-5, 100));
      h.data<int32_t>()[i] = static_cast<int32_t>(rng.integer(-5, 100));
      flush.data<int8_t>()[i] = static_cast<int8_t>(rng.integer(0, 1));
    }
  }
  mamba2::Cache cache() const { return {state.view(), ring_x.view(), ring_dt.view(), ring_B.view()}; }
  RingCursors cursors(const RingConfig& cfg) const {
    return {origin.view(), h.view(), flush.view(), cfg};
  }
  Cursor cursor(int32_t slot) const {
    return {origin.data<int32_t>()[slot], h.data<int32_t>()[slot], flush.data<int8_t>()[slot] != 0};
  }
  std::vector<const GuardedBuffer*> buffers() const {
    return {&state, &ring_x, &ring_dt, &ring_B, &origin, &h, &flush};
  }
  std::vector<std::vector<uint8_t>> snapshot() const {
    std::vector<std::vector<uint8_t>> out;
    for (const GuardedBuffer* b : buffers()) out.push_back(b->payload());
    return out;
  }
  void restore(const std::vector<std::vector<uint8_t>>& snap) {
    std::vector<GuardedBuffer*> bufs{&state, &ring_x, &ring_dt, &ring_B, &origin, &h, &flush};
    for (size_t i = 0; i < bufs.size(); ++i)
      std::memcpy(bufs[i]->data<uint8_t>(), snap[i].data(), snap[i].size());
  }
  bool guards_intact() const {
    for (const GuardedBuffer* b : buffers())
      if (!b->guards_intact()) return false;
    return true;
  }
  // Element offsets of one slot's regions.
  int64_t state_at(const Shape& s, int64_t slot) const { return slot * s.H * s.P * s.N; }
  int64_t x_at(const Shape& s, int64_t slot, int64_t hd, int64_t row) const { return ((slot * s.H + hd) * R + row) * s.P; }
  int64_t dt_at(const Shape& s, int64_t slot, int64_t hd, int64_t row) const { return (slot * s.H + hd) * R + row; }
  int64_t B_at(const Shape& s, int64_t slot, int64_t g, int64_t row) const { return ((slot * s.G + g) * R + row) * s.N; }

  /// Overwrite physical ring row `row` of a slot with a value (NaN: any read of it shows up).
  void fill_row(const Shape& s, int64_t slot, int64_t row, float v) {
    for (int64_t hd = 0; hd < s.H; ++hd) {
      std::fill_n(ring_x.data<float>() + x_at(s, slot, hd, row), s.P, v);
      ring_dt.data<float>()[dt_at(s, slot, hd, row)] = v;
    }
    for (int64_t g = 0; g < s.G; ++g) std::fill_n(ring_B.data<float>() + B_at(s, slot, g, row), s.N, v);
  }
  /// Whether the slot's state and ring are byte-identical to a snapshot.
  bool slot_unchanged(const Shape& s, int64_t slot, const std::vector<std::vector<uint8_t>>& snap) const {
    auto same = [&](const GuardedBuffer& b, size_t k, int64_t per_slot) {
      const size_t bytes = static_cast<size_t>(per_slot) * 4, off = static_cast<size_t>(slot) * bytes;
      return std::memcmp(b.data<uint8_t>() + off, snap[k].data() + off, bytes) == 0;
    };
    return same(state, 0, s.H * s.P * s.N) && same(ring_x, 1, s.H * R * s.P) &&
           same(ring_dt, 2, s.H * R) && same(ring_B, 3, s.G * R * s.N);
  }
};


/// The token buffers of one call: [batch, T, ...] (or [batch, ...] without the T axis), NaN where
/// no token is fed so that a read of a pad row or of an entry past T_b shows up.
struct Inputs {
  int64_t batch, T, H, P, G, N;
  bool rank3, with_z;
  GuardedBuffer x, dt, B, C, z, y, slot_ids, num_tokens;

  static std::vector<int64_t> dims(int64_t b, int64_t t, int64_t h, int64_t p, bool rank3) {
    return rank3 ? std::vector<int64_t>{b, h, p} : std::vector<int64_t>{b, t, h, p};
  }
  Inputs(const Params& prm, int64_t batch_, int64_t T_, bool rank3_ = false)
      : batch(batch_), T(T_), H(prm.shape.H), P(prm.shape.P), G(prm.shape.G), N(prm.shape.N),
        rank3(rank3_), with_z(prm.opt.z),
        x(filled(prm.opt.dtype, dims(batch_, T_, H, P, rank3), kNaN, 31)),
        dt(filled(prm.dt_dtype(), rank3 ? std::vector<int64_t>{batch_, H} : std::vector<int64_t>{batch_, T_, H}, kNaN, 32)),
        B(filled(prm.opt.dtype, dims(batch_, T_, G, N, rank3), kNaN, 33)),
        C(filled(prm.opt.dtype, dims(batch_, T_, G, N, rank3), kNaN, 34)),
        z(filled(prm.opt.dtype, dims(batch_, T_, H, P, rank3), kNaN, 35)),
        y(prm.opt.dtype, dims(batch_, T_, H, P, rank3), 36),
        slot_ids(DType::kI32, {batch_}, 37), num_tokens(DType::kI32, {batch_}, 38) {}

  /// Back to "no token anywhere" (NaN inputs) for reuse by another call of the same geometry.
  void clear() {
    for (GuardedBuffer* g : {&x, &dt, &B, &C, &z})
      for (int64_t i = 0; i < g->numel(); ++i) g->set(i, NAN);
  }
  void put(int64_t b, int64_t t, const ref::Mamba2Token& tok) {
    const int64_t bt = b * T + t;
    for (int64_t i = 0; i < H * P; ++i) {
      x.set(bt * H * P + i, static_cast<float>(tok.x[i]));
      if (with_z) z.set(bt * H * P + i, static_cast<float>(tok.z[i]));
    }
    for (int64_t h = 0; h < H; ++h) dt.set(bt * H + h, static_cast<float>(tok.dt[h]));
    for (int64_t i = 0; i < G * N; ++i) {
      B.set(bt * G * N + i, static_cast<float>(tok.B[i]));
      C.set(bt * G * N + i, static_cast<float>(tok.C[i]));
    }
  }
  mamba2::Tokens tokens() const {
    mamba2::Tokens t{x.view(), dt.view(), B.view(), C.view(), {}};
    if (with_z) t.z = z.view();
    return t;
  }
  double y_at(int64_t b, int64_t t, int64_t i) const { return y.get((b * T + t) * H * P + i); }
  std::vector<double> y_row(int64_t b, int64_t t) const {
    std::vector<double> v(H * P);
    for (int64_t i = 0; i < H * P; ++i) v[i] = y_at(b, t, i);
    return v;
  }
  /// Whether y[b, t0.., :] is exactly +-0 everywhere.
  bool y_zero_from(int64_t b, int64_t t0) const {
    for (int64_t t = t0; t < T; ++t)
      for (int64_t i = 0; i < H * P; ++i)
        if (y_at(b, t, i) != 0.0) return false;
    return true;
  }
  bool guards_intact() const {
    return x.guards_intact() && dt.guards_intact() && B.guards_intact() && C.guards_intact() &&
           z.guards_intact() && y.guards_intact() && slot_ids.guards_intact() &&
           num_tokens.guards_intact();
  }
};

}  // namespace replayssm::testing::m2
