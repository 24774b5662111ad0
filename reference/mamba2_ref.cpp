// The Mamba-2 oracle: scalar float64, one sequence and one layer, written from DESIGN.md §2.
// Replay outputs are *defined* by materialising the state (sequential fold of the checkpoint and
// the ring records) and then taking the conventional step; the closed form is a separate function
// that the tests check against that definition.
#include <cmath>
#include <limits>
#include <stdexcept>

#include "replayssm_ref.h"

namespace replayssm::ref {
namespace {

double A_of(const Mamba2Params& p, int64_t h) { return -std::exp(p.A_log[h]); }
int64_t group_of(const Mamba2Params& p, int64_t h) { return h / (p.H / p.G); }
double silu(double z) { return z * sigmoid(z); }

void require(bool cond, const char* what) {
  if (!cond) throw std::invalid_argument(what);
}

/// One recurrence update S <- a S + delta x B^T for every head, from a record.
void fold_record(const Mamba2Params& p, Vec& S, const Mamba2Record& r) {
  for (int64_t h = 0; h < p.H; ++h) {
    const double a = std::exp(r.delta[h] * A_of(p, h));
    const double* B = &r.B[group_of(p, h) * p.N];
    for (int64_t i = 0; i < p.P; ++i) {
      double* row = &S[(h * p.P + i) * p.N];
      const double dx = r.delta[h] * r.x[h * p.P + i];
      for (int64_t n = 0; n < p.N; ++n) row[n] = a * row[n] + dx * B[n];
    }
  }
}

/// y = S C + D x, then the optional z gate, for every head.
Vec readout(const Mamba2Params& p, const Vec& S, const Mamba2Token& t) {
  Vec y(p.H * p.P);
  for (int64_t h = 0; h < p.H; ++h) {
    const double* C = &t.C[group_of(p, h) * p.N];
    for (int64_t i = 0; i < p.P; ++i) {
      const double* row = &S[(h * p.P + i) * p.N];
      double acc = 0.0;
      for (int64_t n = 0; n < p.N; ++n) acc += row[n] * C[n];
      const int64_t k = h * p.P + i;
      if (!p.D.empty()) acc += p.D[h] * t.x[k];
      if (!t.z.empty()) acc *= silu(t.z[k]);
      y[k] = acc;
    }
  }
  return y;
}

Mamba2Record record_of(const Mamba2Params& p, const Mamba2Token& t) {
  Mamba2Record r{t.x, Vec(p.H), t.B};
  for (int64_t h = 0; h < p.H; ++h) r.delta[h] = mamba2_delta(p, t, h);
  return r;
}

}  // namespace

Mamba2Seq mamba2_new_seq(const Mamba2Params& p, const RingConfig& cfg) {
  // Ring rows start as NaN: a fresh ring is empty, so any read of a row outside the live window
  // poisons the result instead of passing silently.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Mamba2Record empty{Vec(p.H * p.P, nan), Vec(p.H, nan), Vec(p.G * p.N, nan)};
  return Mamba2Seq{Vec(p.H * p.P * p.N, 0.0), std::vector<Mamba2Record>(cfg.rows(), empty),
                   reset(cfg)};
}

double mamba2_delta(const Mamba2Params& p, const Mamba2Token& t, int64_t h) {
  const double v = t.dt[h] + p.dt_bias[h];
  return p.dt_softplus ? softplus(v) : v;
}

Vec mamba2_conventional_step(const Mamba2Params& p, Vec& state, const Mamba2Token& t) {
  fold_record(p, state, record_of(p, t));
  return readout(p, state, t);
}

Vec mamba2_materialize(const Mamba2Params& p, const RingConfig& cfg, const Mamba2Seq& s,
                       int64_t n) {
  Vec S = s.S0;
  for (int64_t l = 0; l < n; ++l) fold_record(p, S, s.ring[ring_row(s.cursor, l, cfg)]);
  return S;
}

Vec mamba2_conventional_step_shared(const Mamba2Params& p, Vec& state, ModeState& prec,
                                    const Mamba2Token& t) {
  require(prec.mode.shared, "mamba2_conventional_step_shared: needs a shared-* mode");
  const Vec y = mamba2_conventional_step(p, state, t);
  state = quantize_state(prec.mode.read, state, p.H, p.P, p.N, prec.sr);
  if (prec.mode.uses_sr()) ++prec.sr.step;
  return y;
}

Vec mamba2_replay_step(const Mamba2Params& p, const RingConfig& cfg, Mamba2Seq& s,
                       const Mamba2Token& t) {
  require(cfg.mode == RingMode::kDecode, "mamba2_replay_step: needs a decode-mode ring");
  const Cursor c = s.cursor;
  require(c.h >= 0 && c.h < cfg.rows(), "mamba2_replay_step: cursor h outside the ring");
  const StateMode& mode = s.prec.mode;
  require(!mode.shared, "mamba2_replay_step: shared baselines run the conventional step");
  // Split modes: ordinary steps start from the read copy; flushes from the checkpoint.
  Vec S;
  if (mode.is_split() && !c.is_flush) {
    Mamba2Seq view = s;
    view.S0 = s.prec.read;
    S = mamba2_materialize(p, cfg, view, c.h);
  } else {
    S = mamba2_materialize(p, cfg, s, c.h);
  }
  const Vec y = mamba2_conventional_step(p, S, t);
  if (c.is_flush) {
    s.S0 = S;  // history + current token folded; the record is not appended
    if (mode.is_split()) {  // y came from the new state; now round the checkpoint, derive read
      s.S0 = quantize_state(mode.recurrence, S, p.H, p.P, p.N, s.prec.sr);
      s.prec.read = mode.has_read_copy()
                        ? quantize_state(mode.read, s.S0, p.H, p.P, p.N, s.prec.sr)
                        : s.S0;
      if (mode.uses_sr()) ++s.prec.sr.step;
    }
  } else {
    s.ring[ring_row(c, c.h, cfg)] = record_of(p, t);
  }
  return y;
}

std::vector<Vec> mamba2_verify(const Mamba2Params& p, const RingConfig& cfg, Mamba2Seq& s,
                               const std::vector<Mamba2Token>& tokens) {
  require(cfg.mode == RingMode::kSpeculative, "mamba2_verify: needs a speculative-mode ring");
  const Cursor c = s.cursor;
  const int64_t T = static_cast<int64_t>(tokens.size());
  require(T >= 1 && T <= cfg.T && c.h >= 0 && c.h + T <= cfg.rows(),
          "mamba2_verify: the tokens do not fit the ring after the history");
  // Outputs: checkpoint + committed history, then the tokens in order (the causal prefix).
  const Vec history = mamba2_materialize(p, cfg, s, c.h);
  Vec S = history;
  std::vector<Vec> ys;
  for (const Mamba2Token& t : tokens) ys.push_back(mamba2_conventional_step(p, S, t));
  for (int64_t k = 0; k < T; ++k) s.ring[ring_row(c, c.h + k, cfg)] = record_of(p, tokens[k]);
  if (c.is_flush) s.S0 = history;  // only committed records; the drafts may be rejected
  return ys;
}

Vec mamba2_replay_closed_form(const Mamba2Params& p, const RingConfig& cfg, const Mamba2Seq& s,
                              const Mamba2Token& t) {
  // Records j = 0..hp-1 from the ring, the current token is record hp.
  const int64_t hp = s.cursor.h;
  std::vector<const Mamba2Record*> recs;
  for (int64_t l = 0; l < hp; ++l) recs.push_back(&s.ring[ring_row(s.cursor, l, cfg)]);
  const Mamba2Record cur = record_of(p, t);
  recs.push_back(&cur);

  Vec y(p.H * p.P, 0.0);
  for (int64_t h = 0; h < p.H; ++h) {
    const double A = A_of(p, h);
    const int64_t g = group_of(p, h);
    const double* C = &t.C[g * p.N];
    Vec Pre(recs.size());  // inclusive prefix sums P_j of delta
    double run = 0.0;
    for (size_t j = 0; j < recs.size(); ++j) Pre[j] = run += recs[j]->delta[h];
    const double abar = std::exp(A * Pre.back());
    for (int64_t i = 0; i < p.P; ++i) {
      double s0c = 0.0;
      for (int64_t n = 0; n < p.N; ++n) s0c += s.S0[(h * p.P + i) * p.N + n] * C[n];
      double acc = abar * s0c;
      for (size_t j = 0; j < recs.size(); ++j) {
        const double sj = recs[j]->delta[h] * std::exp(A * (Pre.back() - Pre[j]));
        double bc = 0.0;
        for (int64_t n = 0; n < p.N; ++n) bc += recs[j]->B[g * p.N + n] * C[n];
        acc += sj * bc * recs[j]->x[h * p.P + i];
      }
      const int64_t k = h * p.P + i;
      if (!p.D.empty()) acc += p.D[h] * t.x[k];
      if (!t.z.empty()) acc *= silu(t.z[k]);
      y[k] = acc;
    }
  }
  return y;
}

}  // namespace replayssm::ref
