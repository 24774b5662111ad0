// The oracle for Gated DeltaNet and KDA: scalar float64, one sequence and one layer at a time,
// written from DESIGN.md §2 and method.md §3-§4. Index conventions used throughout:
//   gate width gw = K for KDA (a decay per key channel), 1 for GDN (gate index c -> 0);
//   a replay step at cursor h sees ring records j = 0..h-1 (logical) and the current token at
//   logical position h; G_l = sum_{i <= l} g_i is the inclusive prefix sum over logical positions,
//   so the weight of record j seen from position t >= j is exp(G_t - G_j) = prod_{j < i <= t}
//   alpha_i (a record decays by the gates after it, not its own) and the checkpoint's is exp(G_t).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "replayssm/errors.h"
#include "replayssm_ref.h"

namespace replayssm::ref {
namespace {

constexpr double kNormEps = 1e-6;  // inside the sqrt, as HF / FLA l2norm
const double kNaN = std::numeric_limits<double>::quiet_NaN();

int64_t gate_width(const GdnParams& p) { return p.kda ? p.K : 1; }
int64_t gate_index(const GdnParams& p, int64_t c) { return p.kda ? c : 0; }
int64_t key_head(const GdnParams& p, int64_t vh) { return vh / (p.HV / p.H); }

// Round a float to bfloat16 (nearest even), written here independently of src/common/dtype.h.
double round_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

// beta = sigmoid(b). With beta_bf16 the peers' quirk (method.md §3.1): a float32 sigmoid rounded
// to bfloat16. The float32 step is emulated with the expression the backends use so that both
// round the same float (an fp64 sigmoid could land on the other side of a bf16 rounding boundary).
double beta_of(const GdnParams& p, double b) {
  if (!p.beta_bf16) return sigmoid(b);
  const float s = 1.0f / (1.0f + std::exp(-static_cast<float>(b)));
  return round_bf16(s);
}

double q_scale(const GdnParams& p) {
  return p.scale != 0.0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(p.K));
}

// x / sqrt(sum x^2 + eps) * scale for key head kh of a [H*K] vector.
Vec l2norm(const GdnParams& p, const Vec& x, int64_t kh, double scale) {
  double ss = 0.0;
  for (int64_t c = 0; c < p.K; ++c) ss += x[kh * p.K + c] * x[kh * p.K + c];
  const double inv = 1.0 / std::sqrt(ss + kNormEps);
  Vec out(p.K);
  for (int64_t c = 0; c < p.K; ++c) out[c] = x[kh * p.K + c] * inv * scale;
  return out;
}

// g = -exp(A_log) * softplus(a + dt_bias) of value head vh: [gw].
Vec gate(const GdnParams& p, const GdnToken& t, int64_t vh) {
  const int64_t gw = gate_width(p);
  Vec g(gw);
  for (int64_t i = 0; i < gw; ++i)
    g[i] = -std::exp(p.A_log[vh]) * softplus(t.a[vh * gw + i] + p.dt_bias[vh * gw + i]);
  return g;
}

// The record a token writes (k^ per key head, g per value head); u is filled by the step.
GdnRecord token_record(const GdnParams& p, const GdnToken& t) {
  GdnRecord r;
  r.u.assign(p.HV * p.V, kNaN);
  r.v = t.v;
  r.beta.resize(p.HV);
  for (int64_t vh = 0; vh < p.HV; ++vh) r.beta[vh] = beta_of(p, t.b[vh]);
  r.k.resize(p.H * p.K);
  for (int64_t kh = 0; kh < p.H; ++kh) {
    const Vec kn = l2norm(p, t.k, kh, 1.0);
    for (int64_t c = 0; c < p.K; ++c) r.k[kh * p.K + c] = kn[c];
  }
  const int64_t gw = gate_width(p);
  r.g.resize(p.HV * gw);
  for (int64_t vh = 0; vh < p.HV; ++vh) {
    const Vec g = gate(p, t, vh);
    for (int64_t i = 0; i < gw; ++i) r.g[vh * gw + i] = g[i];
  }
  return r;
}

// The conventional step on `state` (in place); returns y and fills rec (u, k^, g).
Vec step(const GdnParams& p, Vec& state, const GdnToken& t, GdnRecord& rec) {
  rec = token_record(p, t);
  const int64_t gw = gate_width(p);
  Vec y(p.HV * p.V);
  for (int64_t vh = 0; vh < p.HV; ++vh) {
    const int64_t kh = key_head(p, vh);
    const Vec q = l2norm(p, t.q, kh, q_scale(p));
    const double* k = &rec.k[kh * p.K];
    const double beta = beta_of(p, t.b[vh]);
    Vec alpha(p.K);
    for (int64_t c = 0; c < p.K; ++c) alpha[c] = std::exp(rec.g[vh * gw + gate_index(p, c)]);
    for (int64_t r = 0; r < p.V; ++r) {
      double* s = &state[(vh * p.V + r) * p.K];
      double hk = 0.0;  // hk = S (alpha . k^)
      for (int64_t c = 0; c < p.K; ++c) hk += s[c] * alpha[c] * k[c];
      const double u = beta * (t.v[vh * p.V + r] - hk);
      double out = 0.0;
      for (int64_t c = 0; c < p.K; ++c) {
        s[c] = s[c] * alpha[c] + u * k[c];  // S <- S diag(alpha) + u k^T
        out += s[c] * q[c];                 // y = S q^
      }
      rec.u[vh * p.V + r] = u;
      y[vh * p.V + r] = out;
    }
  }
  return y;
}

void check_room(const RingConfig& cfg, const Cursor& c, int64_t n, const char* op) {
  check<ConfigError>(c.h >= 0 && c.h + n <= cfg.rows(), op, ": cursor h = ", c.h,
                     " leaves no room for ", n, " records in a ring of ", cfg.rows(), " rows");
}

// Inclusive prefix sums G over logical positions 0..h of one value head: the h history records'
// gates followed by the gates `cur` of the positions after them. Returned as [(h + cur.size()) *
// gw].
Vec prefix_gates(const GdnParams& p, const RingConfig& cfg, const GdnSeq& s, int64_t vh,
                 const std::vector<Vec>& cur) {
  const int64_t gw = gate_width(p), h = s.cursor.h;
  const int64_t n = h + static_cast<int64_t>(cur.size());
  Vec G(n * gw);
  for (int64_t l = 0; l < n; ++l) {
    for (int64_t i = 0; i < gw; ++i) {
      const double g = l < h ? s.ring[ring_row(s.cursor, l, cfg)].g[vh * gw + i] : cur[l - h][i];
      G[l * gw + i] = (l ? G[(l - 1) * gw + i] : 0.0) + g;
    }
  }
  return G;
}

// Decay weights seen from logical position t for one value head, [(h + 1) * K]: row j < h is
// e^{G_t - G_j} (record j), row h is e^{G_t} (the checkpoint).
Vec history_weights(const GdnParams& p, const Vec& G, int64_t h, int64_t t) {
  const int64_t gw = gate_width(p);
  Vec w((h + 1) * p.K);
  for (int64_t c = 0; c < p.K; ++c) {
    const int64_t gi = gate_index(p, c);
    for (int64_t j = 0; j < h; ++j) w[j * p.K + c] = std::exp(G[t * gw + gi] - G[j * gw + gi]);
    w[h * p.K + c] = std::exp(G[t * gw + gi]);
  }
  return w;
}

// (S_t x) for row r of value head vh, where S_t is the state after logical position t (history
// records 0..h-1, then window positions h..t), from S0 and the history only, by the closed form
//   S_t x = S0 (e^{G_t} . x) + sum_{j<h} u_j [(k^_j . e^{G_t - G_j}) . x]
// with w = history_weights(.., t). Window terms are the caller's.
double project_history(const GdnParams& p, const RingConfig& cfg, const GdnSeq& s, int64_t vh,
                       int64_t r, const Vec& w, const Vec& x) {
  const int64_t kh = key_head(p, vh), h = s.cursor.h;
  double acc = 0.0;
  for (int64_t c = 0; c < p.K; ++c) acc += s.S0[(vh * p.V + r) * p.K + c] * w[h * p.K + c] * x[c];
  for (int64_t j = 0; j < h; ++j) {
    const GdnRecord& rec = s.ring[ring_row(s.cursor, j, cfg)];
    double d = 0.0;
    for (int64_t c = 0; c < p.K; ++c) d += rec.k[kh * p.K + c] * w[j * p.K + c] * x[c];
    acc += rec.u[vh * p.V + r] * d;
  }
  return acc;
}

// A split-mode decode step (gdn.h Cache): ordinary steps materialise from the read copy with the
// ring's u (computed from read-copy states) and append the record; flushes refold the history from
// the checkpoint by conventional steps on the raw (v, beta, k^, g) of each record, recomputing
// every u, take the token's step, then round the checkpoint and derive the read copy from it.
Vec split_replay_step(const GdnParams& p, const RingConfig& cfg, GdnSeq& s, const GdnToken& t) {
  const StateMode& mode = s.prec.mode;
  const Cursor c = s.cursor;
  if (!c.is_flush) {
    GdnSeq view = s;
    view.S0 = s.prec.read;
    Vec S = gdn_materialize(p, cfg, view, c.h);
    GdnRecord rec;
    Vec y = step(p, S, t, rec);
    s.ring[ring_row(c, c.h, cfg)] = rec;
    return y;
  }
  Vec S = s.S0;
  const int64_t gw = gate_width(p);
  for (int64_t l = 0; l < c.h; ++l) {
    const GdnRecord& rec = s.ring[ring_row(c, l, cfg)];
    for (int64_t vh = 0; vh < p.HV; ++vh) {
      const int64_t kh = key_head(p, vh);
      for (int64_t r = 0; r < p.V; ++r) {
        double* row = &S[(vh * p.V + r) * p.K];
        double hk = 0.0;
        for (int64_t ch = 0; ch < p.K; ++ch)
          hk += row[ch] * std::exp(rec.g[vh * gw + gate_index(p, ch)]) * rec.k[kh * p.K + ch];
        const double u = rec.beta[vh] * (rec.v[vh * p.V + r] - hk);
        for (int64_t ch = 0; ch < p.K; ++ch)
          row[ch] = row[ch] * std::exp(rec.g[vh * gw + gate_index(p, ch)]) + u * rec.k[kh * p.K + ch];
      }
    }
  }
  GdnRecord rec;
  Vec y = step(p, S, t, rec);
  s.S0 = quantize_state(mode.recurrence, S, p.HV, p.V, p.K, s.prec.sr);
  s.prec.read =
      mode.has_read_copy() ? quantize_state(mode.read, s.S0, p.HV, p.V, p.K, s.prec.sr) : s.S0;
  if (mode.uses_sr()) ++s.prec.sr.step;
  return y;
}

}  // namespace

GdnSeq gdn_new_seq(const GdnParams& p, const RingConfig& cfg) {
  GdnSeq s;
  s.S0.assign(p.HV * p.V * p.K, 0.0);
  // Rows outside the live window hold NaN so that any out-of-window read shows up.
  GdnRecord blank{Vec(p.HV * p.V, kNaN), Vec(p.H * p.K, kNaN), Vec(p.HV * gate_width(p), kNaN),
                  Vec(p.HV * p.V, kNaN), Vec(p.HV, kNaN)};
  s.ring.assign(cfg.rows(), blank);
  s.cursor = reset(cfg);
  return s;
}

Vec gdn_conventional_step(const GdnParams& p, Vec& state, const GdnToken& t) {
  GdnRecord rec;
  return step(p, state, t, rec);
}

Vec gdn_materialize(const GdnParams& p, const RingConfig& cfg, const GdnSeq& s, int64_t n) {
  // The sequential fold S <- S diag(e^{g_l}) + u_l k^_l^T over logical records 0..n-1.
  Vec S = s.S0;
  const int64_t gw = gate_width(p);
  for (int64_t l = 0; l < n; ++l) {
    const GdnRecord& rec = s.ring[ring_row(s.cursor, l, cfg)];
    for (int64_t vh = 0; vh < p.HV; ++vh) {
      const int64_t kh = key_head(p, vh);
      Vec alpha(p.K);
      for (int64_t c = 0; c < p.K; ++c) alpha[c] = std::exp(rec.g[vh * gw + gate_index(p, c)]);
      for (int64_t r = 0; r < p.V; ++r)
        for (int64_t c = 0; c < p.K; ++c) {
          double& x = S[(vh * p.V + r) * p.K + c];
          x = x * alpha[c] + rec.u[vh * p.V + r] * rec.k[kh * p.K + c];
        }
    }
  }
  return S;
}

Vec gdn_conventional_step_shared(const GdnParams& p, Vec& state, ModeState& prec,
                                 const GdnToken& t) {
  check<ConfigError>(prec.mode.shared, "ref::gdn_conventional_step_shared: needs a shared-* mode");
  GdnRecord rec;
  const Vec y = step(p, state, t, rec);
  state = quantize_state(prec.mode.read, state, p.HV, p.V, p.K, prec.sr);
  if (prec.mode.uses_sr()) ++prec.sr.step;
  return y;
}

Vec gdn_replay_step(const GdnParams& p, const RingConfig& cfg, GdnSeq& s, const GdnToken& t) {
  check<ConfigError>(cfg.mode == RingMode::kDecode, "ref::gdn_replay_step: needs decode mode");
  check_room(cfg, s.cursor, 1, "ref::gdn_replay_step");
  const StateMode& mode = s.prec.mode;
  check<ConfigError>(!mode.shared, "ref::gdn_replay_step: shared baselines run the conventional step");
  if (mode.is_split()) return split_replay_step(p, cfg, s, t);
  // By definition: materialise the state after the history, then take the conventional step.
  Vec S = gdn_materialize(p, cfg, s, s.cursor.h);
  GdnRecord rec;
  Vec y = step(p, S, t, rec);
  if (s.cursor.is_flush)
    s.S0 = S;  // history and token folded; the record is not appended
  else
    s.ring[ring_row(s.cursor, s.cursor.h, cfg)] = rec;
  return y;
}

std::vector<Vec> gdn_verify(const GdnParams& p, const RingConfig& cfg, GdnSeq& s,
                            const std::vector<GdnToken>& tokens) {
  check<ConfigError>(cfg.mode == RingMode::kSpeculative, "ref::gdn_verify: needs speculative mode");
  const int64_t T = static_cast<int64_t>(tokens.size());
  check<ConfigError>(T >= 1 && T <= cfg.T, "ref::gdn_verify: ", T, " tokens, expected 1..", cfg.T);
  check_room(cfg, s.cursor, T, "ref::gdn_verify");
  // Outputs by definition: the state after the committed history, then T conventional steps.
  Vec S = gdn_materialize(p, cfg, s, s.cursor.h);
  if (s.cursor.is_flush) s.S0 = S;  // only committed history is folded
  std::vector<Vec> ys;
  for (int64_t i = 0; i < T; ++i) {
    GdnRecord rec;
    ys.push_back(step(p, S, tokens[i], rec));
    s.ring[ring_row(s.cursor, s.cursor.h + i, cfg)] = rec;
  }
  return ys;
}

Vec gdn_replay_closed_form(const GdnParams& p, const RingConfig& cfg, const GdnSeq& s,
                           const GdnToken& t) {
  // method.md §3.3(a) with the token's own decay folded into the weights: with G over logical
  // positions 0..h (history, then the token at h), the state S before the token satisfies
  //   hk = S (alpha . k^) = S0 (e^{G_h} . k^) + sum_{j<h} u_j [(k^_j . e^{G_h - G_j}) . k^],
  //   hq = S (alpha . q^) likewise,  u = beta (v - hk),  y = S_new q^ = hq + (k^ . q^) u.
  const GdnRecord cur = token_record(p, t);
  const int64_t gw = gate_width(p), h = s.cursor.h;
  Vec y(p.HV * p.V);
  for (int64_t vh = 0; vh < p.HV; ++vh) {
    const int64_t kh = key_head(p, vh);
    const Vec q = l2norm(p, t.q, kh, q_scale(p));
    const Vec k(cur.k.begin() + kh * p.K, cur.k.begin() + (kh + 1) * p.K);
    const Vec G =
        prefix_gates(p, cfg, s, vh, {Vec(cur.g.begin() + vh * gw, cur.g.begin() + (vh + 1) * gw)});
    double kq = 0.0;
    for (int64_t c = 0; c < p.K; ++c) kq += k[c] * q[c];
    const double beta = beta_of(p, t.b[vh]);
    const Vec w = history_weights(p, G, h, h);
    for (int64_t r = 0; r < p.V; ++r) {
      const double hk = project_history(p, cfg, s, vh, r, w, k);
      const double hq = project_history(p, cfg, s, vh, r, w, q);
      const double u = beta * (t.v[vh * p.V + r] - hk);
      y[vh * p.V + r] = hq + kq * u;
    }
  }
  return y;
}

std::vector<Vec> gdn_verify_chunk_form(const GdnParams& p, const RingConfig& cfg, const GdnSeq& s,
                                       const std::vector<GdnToken>& tokens) {
  // method.md §4.4 over the window s = 0..T-1 at logical h+s, with S_h never formed:
  //   hk_s = S_h (e^{G^w_s} . k^_s), hq_s likewise (G^w: in-window inclusive prefix; by the closed
  //   form this is the projection with the whole-window prefix G at position h+s);
  //   A[s][s'] = beta_s (k^_s . e^{G_{h+s} - G_{h+s'}} . k^_s') for s' < s;  R_s = beta_s (v_s -
  //   hk_s); (I + A) U = R (forward substitution);  y_s = hq_s + sum_{s'<=s} (k^_s' . e^{..} .
  //   q^_s) U_s'.
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t gw = gate_width(p), h = s.cursor.h;
  std::vector<GdnRecord> cur;
  for (const GdnToken& t : tokens) cur.push_back(token_record(p, t));
  std::vector<Vec> ys(T, Vec(p.HV * p.V));
  for (int64_t vh = 0; vh < p.HV; ++vh) {
    const int64_t kh = key_head(p, vh);
    std::vector<Vec> k(T), q(T), gcur(T);
    Vec beta(T);
    for (int64_t i = 0; i < T; ++i) {
      k[i] = Vec(cur[i].k.begin() + kh * p.K, cur[i].k.begin() + (kh + 1) * p.K);
      q[i] = l2norm(p, tokens[i].q, kh, q_scale(p));
      gcur[i] = Vec(cur[i].g.begin() + vh * gw, cur[i].g.begin() + (vh + 1) * gw);
      beta[i] = beta_of(p, tokens[i].b[vh]);
    }
    const Vec G = prefix_gates(p, cfg, s, vh, gcur);
    // decayed inner product x . e^{G_{h+a} - G_{h+b}} . z between window positions a >= b
    auto wdot = [&](const Vec& x, int64_t a, int64_t b, const Vec& z) {
      double acc = 0.0;
      for (int64_t c = 0; c < p.K; ++c) {
        const int64_t gi = gate_index(p, c);
        acc += x[c] * std::exp(G[(h + a) * gw + gi] - G[(h + b) * gw + gi]) * z[c];
      }
      return acc;
    };
    std::vector<Vec> A(T, Vec(T, 0.0)), W(T, Vec(T, 0.0));
    for (int64_t a = 0; a < T; ++a)
      for (int64_t b = 0; b <= a; ++b) {
        if (b < a) A[a][b] = beta[a] * wdot(k[a], a, b, k[b]);
        W[a][b] = wdot(q[a], a, b, k[b]);
      }
    std::vector<Vec> w(T);
    for (int64_t a = 0; a < T; ++a) w[a] = history_weights(p, G, h, h + a);
    for (int64_t r = 0; r < p.V; ++r) {
      Vec U(T), hq(T);
      for (int64_t a = 0; a < T; ++a) {
        const double hk = project_history(p, cfg, s, vh, r, w[a], k[a]);
        hq[a] = project_history(p, cfg, s, vh, r, w[a], q[a]);
        double acc = beta[a] * (tokens[a].v[vh * p.V + r] - hk);
        for (int64_t b = 0; b < a; ++b) acc -= A[a][b] * U[b];
        U[a] = acc;
      }
      for (int64_t a = 0; a < T; ++a) {
        double acc = hq[a];
        for (int64_t b = 0; b <= a; ++b) acc += W[a][b] * U[b];
        ys[a][vh * p.V + r] = acc;
      }
    }
  }
  return ys;
}

}  // namespace replayssm::ref
