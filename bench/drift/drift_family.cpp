// The families of the drift study; see drift_family.h. Input distributions:
//   Mamba-2 (Nemotron-3-Nano-4B head: P 80, N 128, one group): A = -exp(A_log) with -A
//     log-uniform over [1, 16] and dt_bias = softplus^-1(dt0), dt0 log-uniform over [1e-3, 1e-1]
//     (the Mamba-2 initialisation, which trained checkpoints stay close to); per token raw dt ~
//     N(0, 0.5^2), so delta = softplus(dt + dt_bias) spans ~[5e-4, 0.3] and the decays
//     a = exp(delta A) spread over (0, 1); x, B, C ~ N(0, 1) elementwise; D = 1; no z gate.
//   GDN (Qwen3.5-4B head: K = V = 128) and KDA (Kimi-Linear head: K = V = 128, a decay per key
//     channel): -exp(A_log) log-uniform over [1, 16], dt_bias = softplus^-1(dt0) as above (KDA:
//     per channel); per token a ~ N(0, 1) (KDA: per channel), so alpha = exp(-exp(A_log)
//     softplus(a + dt_bias)) spreads over (0, 1); q, k, v ~ N(0, 1) (q and k are L2-normalised
//     by the op: unit-norm keys); b ~ N(0, 1.5^2), beta = sigmoid(b) over (0, 1).
// One key head per value head; heads get independent parameters.
#include "drift_family.h"

#include <cmath>
#include <cstring>
#include <random>

#include "cpu/state_io.h"
#include "replayssm/gdn.h"
#include "replayssm/mamba2.h"
#include "replayssm/ring.h"

namespace replayssm::drift {
namespace {


double inv_softplus(double y) { return std::log(std::expm1(y)); }

/// Owned storage of a [1, heads, rows, n] state buffer in format f, all zeros.
struct OwnedBuffer {
  StateFormat f = StateFormat::kFp32;
  std::vector<uint8_t> values, blocks;
  std::vector<float> rows, global;
  int64_t heads = 0, nrows = 0, n = 0;
  void init(StateFormat fmt, int64_t h, int64_t r, int64_t len) {
    f = fmt, heads = h, nrows = r, n = len;
    const int64_t e = h * r * len;
    const int64_t bytes = f == StateFormat::kFp32 ? 4 * e : f == StateFormat::kFp8 ? e
                          : f == StateFormat::kNvfp4 ? e / 2 : 2 * e;
    values.assign(bytes, 0), blocks.assign(e / 16, 0), rows.assign(h * r, 0.0f), global.assign(h, 0.0f);
  }
  StateBuffer view() {
    StateBuffer b;
    const DType t = f == StateFormat::kFp32 ? DType::kF32 : f == StateFormat::kBf16 ? DType::kBF16
                    : (f == StateFormat::kFp16 || f == StateFormat::kFp16Sr) ? DType::kF16 : DType::kU8;
    b.values = make_view(values.data(), t, {1, heads, nrows, f == StateFormat::kNvfp4 ? n / 2 : n});
    if (f == StateFormat::kFp8) b.scales.rows = make_view(rows.data(), DType::kF32, {1, heads, nrows});
    if (f == StateFormat::kNvfp4) {
      b.scales.blocks = make_view(blocks.data(), DType::kU8, {1, heads, nrows, n / 16});
      b.scales.global = make_view(global.data(), DType::kF32, {1, heads});
    }
    return b;
  }
  /// The state decoded to float32 [heads * rows * n] (the library's own decoding).
  std::vector<float> decode() {
    std::vector<float> out(heads * nrows * n);
    const StateBuffer b = view();
    for (int64_t h = 0; h < heads; ++h)
      cpu::state_io::decode_head(f, b, cpu::state_io::Geo{heads, nrows, n}, 0, h,
                                 out.data() + h * nrows * n);
    return out;
  }
};

/// What every mode keeps besides its family's ring: state, read copy, SR keys, cursors.
struct ModeStore {
  StateMode mode;
  OwnedBuffer state, read;
  int64_t seed = 0;
  int32_t step = 0, origin = 0, h = 0;
  int8_t flush = 0;
  void init(const StateMode& m, int64_t heads, int64_t rows, int64_t n, int64_t sr_seed, const RingConfig& cfg) {
    mode = m;
    state.init(m.state_format(), heads, rows, n);
    if (m.has_read_copy()) read.init(m.read, heads, rows, n);
    seed = sr_seed;
    const Cursor c = reset_cursor(cfg);
    origin = c.origin, h = c.h, flush = c.is_flush;
  }
  RingCursors cursors(const RingConfig& cfg) {
    return {make_view(&origin, DType::kI32, {1}), make_view(&h, DType::kI32, {1}),
            make_view(&flush, DType::kI8, {1}), cfg};
  }
  template <class Cache>
  void fill(Cache& c) {
    c.mode = mode;
    const StateBuffer s = state.view();
    c.state = s.values;
    c.state_scales = s.scales;
    if (mode.has_read_copy()) c.read = read.view();
    if (mode.uses_sr()) c.sr = SrKeys{make_view(&seed, DType::kI64, {1}), make_view(&step, DType::kI32, {1})};
  }
};

double rel_fro(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d, den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}

int32_t zero_id = 0;
Rows one_row() {
  Rows r;
  r.slot_ids = make_view(&zero_id, DType::kI32, {1});
  return r;
}
int32_t one_accepted = 1;

// ---- Mamba-2 -----------------------------------------------------------------------------------

class Mamba2Run final : public FamilyRun {
 public:
  Mamba2Run(const std::vector<StateMode>& modes, int64_t heads, int L, uint64_t seed)
      : H_(heads), rng_(seed), cfg_{L, 1, RingMode::kDecode} {
    modes_ = modes;
    num_.assign(modes.size(), 0.0);
    A_log_.resize(H_), dt_bias_.resize(H_), D_.assign(H_, 1.0f);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int64_t h = 0; h < H_; ++h) {
      A_log_[h] = static_cast<float>(std::log(16.0) * u(rng_));                // -A in [1, 16]
      dt_bias_[h] = static_cast<float>(inv_softplus(std::exp(std::log(1e-3) + std::log(100.0) * u(rng_))));
    }
    layer_.dims = {H_, kP, kN, 1};
    layer_.A_log = make_view(A_log_.data(), DType::kF32, {H_});
    layer_.dt_bias = make_view(dt_bias_.data(), DType::kF32, {H_});
    layer_.D = make_view(D_.data(), DType::kF32, {H_});
    ref_state_.assign(H_ * kP * kN, 0.0f);
    x_.resize(H_ * kP), dt_.resize(H_), B_.resize(kN), C_.resize(kN);
    y_ref_.resize(H_ * kP), y_.resize(H_ * kP);
    const int64_t R = cfg_.rows();
    stores_.resize(modes.size());
    rings_.resize(modes.size());
    for (size_t m = 0; m < modes.size(); ++m) {
      stores_[m].init(modes[m], H_, kP, kN, static_cast<int64_t>(seed * 7919 + m), cfg_);
      rings_[m].x.assign(H_ * R * kP, 0.0f), rings_[m].dt.assign(H_ * R, 0.0f), rings_[m].B.assign(R * kN, 0.0f);
    }
  }
  std::string shape() const override { return "nano-4b"; }

  void step() override {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x_) v = nd(rng_);
    for (float& v : dt_) v = 0.5f * nd(rng_);
    for (float& v : B_) v = nd(rng_);
    for (float& v : C_) v = nd(rng_);
    const mamba2::Tokens in{make_view(x_.data(), DType::kF32, {1, H_, kP}), make_view(dt_.data(), DType::kF32, {1, H_}),
                            make_view(B_.data(), DType::kF32, {1, 1, kN}), make_view(C_.data(), DType::kF32, {1, 1, kN}), {}};
    mamba2::Cache ref;
    ref.state = make_view(ref_state_.data(), DType::kF32, {1, H_, kP, kN});
    mamba2::conventional_step(layer_, ref, in, one_row(), make_view(y_ref_.data(), DType::kF32, {1, H_, kP}));
    add_reference(y_ref_.data(), H_ * kP);
    const int64_t R = cfg_.rows();
    for (size_t m = 0; m < stores_.size(); ++m) {
      ModeStore& st = stores_[m];
      mamba2::Cache c;
      st.fill(c);
      const TensorView y = make_view(y_.data(), DType::kF32, {1, H_, kP});
      if (st.mode.shared) {
        mamba2::conventional_step(layer_, c, in, one_row(), y);
      } else {
        c.ring_x = make_view(rings_[m].x.data(), DType::kF32, {1, H_, R, kP});
        c.ring_dt = make_view(rings_[m].dt.data(), DType::kF32, {1, H_, R});
        c.ring_B = make_view(rings_[m].B.data(), DType::kF32, {1, 1, R, kN});
        RingCursors cur = st.cursors(cfg_);
        mamba2::replay_step(layer_, c, cur, in, one_row(), y);
        replayssm::commit(cur, one_row(), make_view(&one_accepted, DType::kI32, {1}));
      }
      add_output(m, y_.data(), y_ref_.data(), H_ * kP);
    }
  }
  double state_rel_error(size_t m) const override {
    return rel_fro(const_cast<ModeStore&>(stores_[m]).state.decode(), ref_state_);
  }

 private:
  static constexpr int64_t kP = 80, kN = 128;
  struct Ring {
    std::vector<float> x, dt, B;
  };
  int64_t H_;
  std::mt19937_64 rng_;
  RingConfig cfg_;
  std::vector<float> A_log_, dt_bias_, D_, ref_state_, x_, dt_, B_, C_, y_ref_, y_;
  mamba2::Layer layer_;
  std::vector<ModeStore> stores_;
  std::vector<Ring> rings_;
};

// ---- GDN / KDA ---------------------------------------------------------------------------------

class GdnRun final : public FamilyRun {
 public:
  GdnRun(const std::vector<StateMode>& modes, int64_t heads, int L, uint64_t seed, bool kda)
      : HV_(heads), kda_(kda), gw_(kda ? kK : 1), rng_(seed), cfg_{L, 1, RingMode::kDecode} {
    modes_ = modes;
    num_.assign(modes.size(), 0.0);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    A_log_.resize(HV_), dt_bias_.resize(HV_ * gw_);
    for (int64_t h = 0; h < HV_; ++h) A_log_[h] = static_cast<float>(std::log(16.0) * u(rng_));
    for (float& b : dt_bias_) b = static_cast<float>(inv_softplus(std::exp(std::log(1e-3) + std::log(100.0) * u(rng_))));
    layer_.dims = {HV_, HV_, kK, kV, kda ? gdn::Gate::kChannel : gdn::Gate::kScalar};
    layer_.A_log = make_view(A_log_.data(), DType::kF32, {HV_});
    layer_.dt_bias = kda ? make_view(dt_bias_.data(), DType::kF32, {HV_, kK}) : make_view(dt_bias_.data(), DType::kF32, {HV_});
    ref_state_.assign(HV_ * kV * kK, 0.0f);
    q_.resize(HV_ * kK), k_.resize(HV_ * kK), v_.resize(HV_ * kV), a_.resize(HV_ * gw_), b_.resize(HV_);
    y_ref_.resize(HV_ * kV), y_.resize(HV_ * kV);
    const int64_t R = cfg_.rows();
    stores_.resize(modes.size());
    rings_.resize(modes.size());
    for (size_t m = 0; m < modes.size(); ++m) {
      stores_[m].init(modes[m], HV_, kV, kK, static_cast<int64_t>(seed * 7919 + m), cfg_);
      Ring& r = rings_[m];
      r.u.assign(HV_ * R * kV, 0.0f), r.k.assign(HV_ * R * kK, 0.0f), r.g.assign(HV_ * R * gw_, 0.0f);
      r.v.assign(HV_ * R * kV, 0.0f), r.beta.assign(HV_ * R, 0.0f);
    }
  }
  std::string shape() const override { return kda_ ? "kimi-linear" : "qwen3.5-4b"; }

  void step() override {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& x : q_) x = nd(rng_);
    for (float& x : k_) x = nd(rng_);
    for (float& x : v_) x = nd(rng_);
    for (float& x : a_) x = nd(rng_);
    for (float& x : b_) x = 1.5f * nd(rng_);
    const gdn::Tokens in{make_view(q_.data(), DType::kF32, {1, HV_, kK}), make_view(k_.data(), DType::kF32, {1, HV_, kK}),
                         make_view(v_.data(), DType::kF32, {1, HV_, kV}),
                         kda_ ? make_view(a_.data(), DType::kF32, {1, HV_, kK}) : make_view(a_.data(), DType::kF32, {1, HV_}),
                         make_view(b_.data(), DType::kF32, {1, HV_})};
    gdn::Cache ref;
    ref.state = make_view(ref_state_.data(), DType::kF32, {1, HV_, kV, kK});
    gdn::conventional_step(layer_, ref, in, one_row(), make_view(y_ref_.data(), DType::kF32, {1, HV_, kV}));
    add_reference(y_ref_.data(), HV_ * kV);
    const int64_t R = cfg_.rows();
    for (size_t m = 0; m < stores_.size(); ++m) {
      ModeStore& st = stores_[m];
      gdn::Cache c;
      st.fill(c);
      const TensorView y = make_view(y_.data(), DType::kF32, {1, HV_, kV});
      if (st.mode.shared) {
        gdn::conventional_step(layer_, c, in, one_row(), y);
      } else {
        Ring& r = rings_[m];
        c.ring_u = make_view(r.u.data(), DType::kF32, {1, HV_, R, kV});
        c.ring_k = make_view(r.k.data(), DType::kF32, {1, HV_, R, kK});
        c.ring_g = kda_ ? make_view(r.g.data(), DType::kF32, {1, HV_, R, kK}) : make_view(r.g.data(), DType::kF32, {1, HV_, R});
        if (st.mode.is_split()) {
          c.ring_v = make_view(r.v.data(), DType::kF32, {1, HV_, R, kV});
          c.ring_beta = make_view(r.beta.data(), DType::kF32, {1, HV_, R});
        }
        RingCursors cur = st.cursors(cfg_);
        gdn::replay_step(layer_, c, cur, in, one_row(), y);
        replayssm::commit(cur, one_row(), make_view(&one_accepted, DType::kI32, {1}));
      }
      add_output(m, y_.data(), y_ref_.data(), HV_ * kV);
    }
  }
  double state_rel_error(size_t m) const override {
    return rel_fro(const_cast<ModeStore&>(stores_[m]).state.decode(), ref_state_);
  }

 private:
  static constexpr int64_t kK = 128, kV = 128;
  struct Ring {
    std::vector<float> u, k, g, v, beta;
  };
  int64_t HV_;
  bool kda_;
  int64_t gw_;
  std::mt19937_64 rng_;
  RingConfig cfg_;
  std::vector<float> A_log_, dt_bias_, ref_state_, q_, k_, v_, a_, b_, y_ref_, y_;
  gdn::Layer layer_;
  std::vector<ModeStore> stores_;
  std::vector<Ring> rings_;
};

}  // namespace

const char* family_name(Family f) {
  return f == Family::kMamba2 ? "mamba2" : f == Family::kGdn ? "gdn" : "kda";
}

std::vector<double> FamilyRun::take_output_errors() {
  std::vector<double> out(num_.size());
  for (size_t m = 0; m < num_.size(); ++m) out[m] = den_ > 0 ? std::sqrt(num_[m] / den_) : 0.0;
  std::fill(num_.begin(), num_.end(), 0.0);
  den_ = 0;
  return out;
}

void FamilyRun::add_output(size_t m, const float* y, const float* y_ref, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += (static_cast<double>(y[i]) - y_ref[i]) * (static_cast<double>(y[i]) - y_ref[i]);
  num_[m] += s;
}

void FamilyRun::add_reference(const float* y_ref, int64_t n) {
  for (int64_t i = 0; i < n; ++i) den_ += static_cast<double>(y_ref[i]) * y_ref[i];
}

std::unique_ptr<FamilyRun> make_run(Family f, const std::vector<StateMode>& modes, int64_t heads,
                                    int L, uint64_t seed) {
  if (f == Family::kMamba2) return std::make_unique<Mamba2Run>(modes, heads, L, seed);
  return std::make_unique<GdnRun>(modes, heads, L, seed, f == Family::kKda);
}

}  // namespace replayssm::drift
