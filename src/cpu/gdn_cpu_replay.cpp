// CPU ReplaySSM step and speculative verify for GDN/KDA.
//
// Records since the checkpoint S0 are (u_j, k^_j, g_j) at logical positions j = 0..h-1; a step's
// T_b tokens sit at logical h..h+T_b-1. Seen from position t, record (or token) l carries the
// decay e^{E(l,t)} with E(l,t) = sum_{l < i <= t} g_i, and S0 carries e^{E(-1,t)}.
//
// Decays: E is accumulated directly as a sum of the gates after l (walking l from t down),
// never as a difference of prefix sums. Every g_i = -exp(A_log) softplus(.) is <= 0 and rounding
// is monotone, so every exponent is <= 0 by construction (no clamp needed, nothing overflows) and
// has no cancellation error: its rounding error is relative to |E| itself.
//
// Ordinary rows (decode ordinary step, verify rows without a flush) never form the state. For
// window token s at t = h + s, hk_s = S_h (e^{E(h-1,t)} . k^_s) with S_h the state after the
// history comes from S0 and the records (method.md §3.3(a)):
//   hk_s = S0 (e^{E(-1,t)} . k^_s) + sum_{j<h} u_j [k^_j . e^{E(j,t)} . k^_s],   hq_s likewise,
// and the window's own tokens enter through the chunk form (method.md §4.4), T_b x T_b:
//   A[s][s'] = beta_s (k^_s . e^{E(h+s',t)} . k^_s') for s' < s;   R_s = beta_s (v_s - hk_s);
//   (I + A) U = R by forward substitution;
//   y_s = hq_s + sum_{s'<=s} (q^_s . e^{E(h+s',t)} . k^_s') U_s'.
// Speculative flush rows first materialise S_h row by row (sequential fold of the history, the
// conventional update's arithmetic), write it as the new checkpoint and use it as the base with an
// empty history. Decode flush rows materialise S_h and then run update_row(), the conventional
// step's own code, so L = 1 is the conventional step bit for bit.
//
// Split state modes (precision.h, decode mode only): the ordinary step uses the decoded read copy
// as its base instead of S0 and also appends v and beta (ring_v, ring_beta); the flush decodes the
// checkpoint and refolds the history with update_row() from the raw (v, beta, k^, g) of each
// record, recomputing every u from the float32 checkpoint instead of reading ring_u (which
// carries the read copy's error), then writes the checkpoint back and derives the read copy.
#include <vector>

#include "cpu/state_io.h"

#include "gdn_cpu.h"
#include "gdn_cpu_math.h"

namespace replayssm::gdn::cpu {

namespace state_io = replayssm::cpu::state_io;
namespace {

/// Per-thread buffers, sized once per call from the geometry (never from the pool size).
struct Scratch {
  std::vector<float> khat, qhat, g, beta;  // window tokens [T*K], [T*K], [T*gw], [T]
  std::vector<float> base_k, base_q;       // [T*K] e^{E(-1,t)} . k^_s and . q^_s
  std::vector<float> ch, dh;               // [T*R] history coefficients for hk and hq
  std::vector<float> A, W;                 // [T*T]
  std::vector<float> hist_alpha;           // [R*K] e^{g_j} of the history records (fold)
  std::vector<float> acc, w;               // [gw] running exponent and its exp
  std::vector<float> row, alpha, ak;       // [K]
  std::vector<float> hk, hq, U;            // [T]
  std::vector<float> hist_ak;              // [R*K] e^{g_j} . k^_j (split-mode refold)
  std::vector<float> head;                 // [V*K] float32 copy of a (slot, head) (split modes)
  explicit Scratch(const Geometry& geo, bool split) {
    const size_t T = geo.T, K = geo.K, R = geo.R, gw = geo.gw;
    khat.resize(T * K), qhat.resize(T * K), g.resize(T * gw), beta.resize(T);
    base_k.resize(T * K), base_q.resize(T * K), ch.resize(T * R), dh.resize(T * R);
    A.resize(T * T), W.resize(T * T), hist_alpha.resize(R * K);
    acc.resize(gw), w.resize(gw), row.resize(K), alpha.resize(K), ak.resize(K);
    hk.resize(T), hq.resize(T), U.resize(T);
    if (split) hist_ak.resize(R * K), head.resize(geo.V * K);
  }
};

/// One (row, value head) of a step with its slot's cursor.
struct Job {
  int64_t b, vh, kh, slot, origin, h, Tb;
  bool flush;
};

class Worker {
 public:
  Worker(const Geometry& geo, const Call& c, Scratch& sc) : geo_(geo), c_(c), sc_(sc) {
    state_ = c.cache->state.ptr<float>();
    ring_u_ = c.cache->ring_u.ptr<float>();
    ring_k_ = c.cache->ring_k.ptr<float>();
    ring_g_ = c.cache->ring_g.ptr<float>();
    split_ = c.cache->mode.is_split();
    if (split_) {
      ring_v_ = c.cache->ring_v.ptr<float>();
      ring_beta_ = c.cache->ring_beta.ptr<float>();
    }
  }

  /// Rows without a slot: y = 0, nothing read or written.
  void pad(int64_t b, int64_t vh) const { zero_y(b, vh, 0); }

  Job job(int64_t b, int64_t vh) const {
    const RingCursors& cur = *c_.cursors;
    const int64_t slot = c_.slots[b];
    Job x{b, vh, geo_.key_head(vh), slot, 0, 0, c_.num_tokens[b], false};
    x.origin = cur.origin.ptr<int32_t>()[slot];
    x.h = cur.h.ptr<int32_t>()[slot];
    x.flush = cur.is_flush.ptr<int8_t>()[slot] != 0;
    return x;
  }

  /// Decode-mode flush: fold history and token into S0 (written once); y from the new state.
  void decode_flush(const Job& x) {
    prep_window(x);
    decay(geo_, sc_.g.data(), sc_.khat.data(), sc_.alpha.data(), sc_.ak.data());
    history_decays(x);
    float* S = state_ + geo_.state_off(x.slot, x.vh);
    if (split_) {  // the float32-decoded checkpoint
      S = sc_.head.data();
      state_io::decode_head(mode().recurrence, checkpoint(), sgeo(), x.slot, x.vh, S);
    }
    const int64_t v_off = geo_.v_off(x.b, 0, x.vh), y_off = v_off;
    for (int64_t r = 0; r < geo_.V; ++r) {
      float* row = sc_.row.data();
      if (split_)
        refold_row(x, S + r * geo_.K, r, row);
      else
        materialise_row(x, S + r * geo_.K, r, row);
      const float y =
          update_row(row, sc_.alpha.data(), sc_.ak.data(), sc_.khat.data(), sc_.qhat.data(), geo_.K,
                     sc_.beta[0], load_f32(c_.in.v, v_off + r));
      for (int64_t c = 0; c < geo_.K; ++c) S[r * geo_.K + c] = row[c];
      store_f32(c_.y, y_off + r, y);
    }
    if (split_)  // write the checkpoint back and derive the read copy from it
      state_io::store_split_head(mode(), checkpoint(), c_.cache->read, sgeo(), x.slot, x.vh, S,
                                 sr_key(x.slot), c_.cursors->config.L);
  }

  /// The T_b window tokens of a row (decode ordinary step: T_b = 1, no flush): outputs and records
  /// from the checkpoint and history; a speculative flush also folds the history into S0.
  void window(const Job& x) {
    const int64_t K = geo_.K, T = geo_.T, R = geo_.R, h = x.h;
    const int64_t first = x.flush ? h : 0;  // oldest position not already inside the base state
    prep_window(x);
    coefficients(x, first);
    if (x.flush) history_decays(x);
    float* S = state_ + geo_.state_off(x.slot, x.vh);
    if (split_) {  // ordinary split-mode step (never a flush here): base = decoded read copy
      S = sc_.head.data();
      if (mode().has_read_copy())
        state_io::decode_head(mode().read, c_.cache->read, sgeo(), x.slot, x.vh, S);
      else
        state_io::decode_head(mode().recurrence, checkpoint(), sgeo(), x.slot, x.vh, S);
      append_v_and_beta(x);
    }
    for (int64_t r = 0; r < geo_.V; ++r) {
      const float* base = S + r * K;
      if (x.flush) {
        materialise_row(x, base, r, sc_.row.data());
        base = sc_.row.data();
      }
      for (int64_t s = 0; s < x.Tb; ++s) {
        float hk = 0.0f, hq = 0.0f;
        for (int64_t c = 0; c < K; ++c) hk += base[c] * sc_.base_k[s * K + c];
        for (int64_t c = 0; c < K; ++c) hq += base[c] * sc_.base_q[s * K + c];
        sc_.hk[s] = hk, sc_.hq[s] = hq;
      }
      for (int64_t j = first; j < h; ++j) {
        const float u = ring_u_[geo_.ring_u_off(x.slot, x.vh, phys(x, j)) + r];
        for (int64_t s = 0; s < x.Tb; ++s) {
          sc_.hk[s] += u * sc_.ch[s * R + j];
          sc_.hq[s] += u * sc_.dh[s * R + j];
        }
      }
      for (int64_t s = 0; s < x.Tb; ++s) {
        // (I + A) U = R, forward substitution; A is strictly lower triangular.
        float u = sc_.beta[s] * (load_f32(c_.in.v, geo_.v_off(x.b, s, x.vh) + r) - sc_.hk[s]);
        for (int64_t sp = 0; sp < s; ++sp) u -= sc_.A[s * T + sp] * sc_.U[sp];
        sc_.U[s] = u;
        float y = sc_.hq[s];
        for (int64_t sp = 0; sp <= s; ++sp) y += sc_.W[s * T + sp] * sc_.U[sp];
        store_f32(c_.y, geo_.v_off(x.b, s, x.vh) + r, y);
        ring_u_[geo_.ring_u_off(x.slot, x.vh, phys(x, h + s)) + r] = u;
      }
      if (x.flush)
        for (int64_t c = 0; c < K; ++c) S[r * K + c] = sc_.row[c];
    }
    append_keys_and_gates(x);
    zero_y(x.b, x.vh, x.Tb);
  }

 private:
  int64_t phys(const Job& x, int64_t l) const { return (x.origin + l) % geo_.R; }

  const StateMode& mode() const { return c_.cache->mode; }
  StateBuffer checkpoint() const { return StateBuffer{c_.cache->state, c_.cache->state_scales}; }
  state_io::Geo sgeo() const { return state_io::Geo{geo_.HV, geo_.V, geo_.K}; }
  state_io::SrDraw sr_key(int64_t slot) const {
    return mode().uses_sr() ? state_io::sr_draw(c_.cache->sr, slot) : state_io::SrDraw{};
  }
  int64_t beta_off(int64_t slot, int64_t vh, int64_t row) const {
    return (slot * geo_.HV + vh) * geo_.R + row;
  }

  /// Split modes: the raw v (layout of ring_u) and beta of the window tokens' records.
  void append_v_and_beta(const Job& x) {
    for (int64_t s = 0; s < x.Tb; ++s) {
      const int64_t p = phys(x, x.h + s);
      float* v = ring_v_ + geo_.ring_u_off(x.slot, x.vh, p);
      for (int64_t r = 0; r < geo_.V; ++r) v[r] = load_f32(c_.in.v, geo_.v_off(x.b, s, x.vh) + r);
      ring_beta_[beta_off(x.slot, x.vh, p)] = sc_.beta[s];
    }
  }

  /// Split modes: row r of S_h refolded from the checkpoint row s0 with the conventional update
  /// of each history record, u_j recomputed from (v_j, beta_j) (ring_u is not read).
  void refold_row(const Job& x, const float* s0, int64_t r, float* row) const {
    const int64_t K = geo_.K;
    for (int64_t c = 0; c < K; ++c) row[c] = s0[c];
    for (int64_t j = 0; j < x.h; ++j) {
      const int64_t p = phys(x, j);
      const float* kj = ring_k_ + geo_.ring_k_off(x.slot, x.kh, p);
      const float v = ring_v_[geo_.ring_u_off(x.slot, x.vh, p) + r];
      update_row(row, &sc_.hist_alpha[j * K], &sc_.hist_ak[j * K], kj, kj, K,
                 ring_beta_[beta_off(x.slot, x.vh, p)], v);
    }
  }

  void zero_y(int64_t b, int64_t vh, int64_t from) const {
    for (int64_t s = from; s < geo_.T; ++s)
      for (int64_t r = 0; r < geo_.V; ++r) store_f32(c_.y, geo_.v_off(b, s, vh) + r, 0.0f);
  }

  void prep_window(const Job& x) {
    for (int64_t s = 0; s < x.Tb; ++s)
      prep_token(geo_, c_, x.b, s, x.vh, &sc_.khat[s * geo_.K], &sc_.qhat[s * geo_.K],
                 &sc_.g[s * geo_.gw], &sc_.beta[s]);
  }

  /// Gates of logical position l: a history record's (ring) or a window token's.
  const float* gate_at(const Job& x, int64_t l) const {
    if (l >= x.h) return &sc_.g[(l - x.h) * geo_.gw];
    return ring_g_ + geo_.ring_g_off(x.slot, x.vh, phys(x, l));
  }

  /// sum_c a[c] e^{E}[c] b[c] with the decay vector w (one entry for GDN).
  float wdot(const float* a, const float* b) const {
    float acc = 0.0f;
    for (int64_t c = 0; c < geo_.K; ++c) acc += a[c] * b[c] * sc_.w[geo_.gi(c)];
    return acc;
  }

  /// Checkpoint weights, history coefficients and the window's A and W for targets t = h + s,
  /// over positions first..t.
  void coefficients(const Job& x, int64_t first) {
    const int64_t K = geo_.K, T = geo_.T, R = geo_.R, gw = geo_.gw;
    for (int64_t s = 0; s < x.Tb; ++s) {
      const float* ks = &sc_.khat[s * K];
      const float* qs = &sc_.qhat[s * K];
      for (int64_t i = 0; i < gw; ++i) sc_.acc[i] = 0.0f;
      for (int64_t l = x.h + s; l >= first; --l) {
        for (int64_t i = 0; i < gw; ++i) sc_.w[i] = std::exp(sc_.acc[i]);  // e^{E(l, t)}
        if (l >= x.h) {
          const int64_t sp = l - x.h;
          const float* kp = &sc_.khat[sp * K];
          sc_.W[s * T + sp] = wdot(qs, kp);
          if (sp < s) sc_.A[s * T + sp] = sc_.beta[s] * wdot(ks, kp);
        } else {
          const float* kj = ring_k_ + geo_.ring_k_off(x.slot, x.kh, phys(x, l));
          sc_.ch[s * R + l] = wdot(kj, ks);
          sc_.dh[s * R + l] = wdot(kj, qs);
        }
        const float* gl = gate_at(x, l);
        for (int64_t i = 0; i < gw; ++i) sc_.acc[i] += gl[i];
      }
      for (int64_t i = 0; i < gw; ++i) sc_.w[i] = std::exp(sc_.acc[i]);  // e^{E(first-1, t)}
      for (int64_t c = 0; c < K; ++c) {
        sc_.base_k[s * K + c] = sc_.w[geo_.gi(c)] * ks[c];
        sc_.base_q[s * K + c] = sc_.w[geo_.gi(c)] * qs[c];
      }
    }
  }

  /// e^{g_j} per key channel of the history records, for the sequential fold.
  void history_decays(const Job& x) {
    for (int64_t j = 0; j < x.h; ++j) {
      const float* gj = gate_at(x, j);
      for (int64_t c = 0; c < geo_.K; ++c)
        sc_.hist_alpha[j * geo_.K + c] = std::exp(gj[geo_.gi(c)]);
      if (split_) {  // alpha . k^ as decay() forms it for the conventional step
        const float* kj = ring_k_ + geo_.ring_k_off(x.slot, x.kh, phys(x, j));
        for (int64_t c = 0; c < geo_.K; ++c)
          sc_.hist_ak[j * geo_.K + c] = sc_.hist_alpha[j * geo_.K + c] * kj[c];
      }
    }
  }

  /// Row r of S_h: the checkpoint row folded with the history, S <- S diag(e^{g_j}) + u_j k^_j^T
  /// (the conventional update's arithmetic; with h = 0 a plain copy).
  void materialise_row(const Job& x, const float* s0, int64_t r, float* row) const {
    const int64_t K = geo_.K;
    for (int64_t c = 0; c < K; ++c) row[c] = s0[c];
    for (int64_t j = 0; j < x.h; ++j) {
      const float u = ring_u_[geo_.ring_u_off(x.slot, x.vh, phys(x, j)) + r];
      const float* kj = ring_k_ + geo_.ring_k_off(x.slot, x.kh, phys(x, j));
      const float* aj = &sc_.hist_alpha[j * K];
      for (int64_t c = 0; c < K; ++c) row[c] = row[c] * aj[c] + u * kj[c];
    }
  }

  /// Records of the window tokens: g per value head, k^ once per key head (its first value head).
  void append_keys_and_gates(const Job& x) {
    for (int64_t s = 0; s < x.Tb; ++s) {
      const int64_t p = phys(x, x.h + s);
      float* g = ring_g_ + geo_.ring_g_off(x.slot, x.vh, p);
      for (int64_t i = 0; i < geo_.gw; ++i) g[i] = sc_.g[s * geo_.gw + i];
      if (x.vh % geo_.group == 0) {
        float* k = ring_k_ + geo_.ring_k_off(x.slot, x.kh, p);
        for (int64_t c = 0; c < geo_.K; ++c) k[c] = sc_.khat[s * geo_.K + c];
      }
    }
  }

  const Geometry& geo_;
  const Call& c_;
  Scratch& sc_;
  float *state_, *ring_u_, *ring_k_, *ring_g_;
  float *ring_v_ = nullptr, *ring_beta_ = nullptr;
  bool split_ = false;
};

template <class Body>
void for_each_job(const Call& c, Body body) {
  const Geometry geo(c);
  const int64_t batch = static_cast<int64_t>(c.slots.size()), n = batch * geo.HV;
#pragma omp parallel if (geo.parallel(batch))
  {
    Scratch sc(geo, c.cache->mode.is_split());
    Worker w(geo, c, sc);
#pragma omp for schedule(static)
    for (int64_t idx = 0; idx < n; ++idx) {
      const int64_t b = idx / geo.HV, vh = idx % geo.HV;
      if (c.slots[b] == c.pad_slot_id)
        w.pad(b, vh);
      else
        body(w, w.job(b, vh));
    }
  }
}

}  // namespace

void replay_step(const Call& c) {
  for_each_job(c, [](Worker& w, const Job& x) {
    if (x.flush)
      w.decode_flush(x);
    else
      w.window(x);
  });
  // Split modes with stochastic rounding: one SR write per flushed slot.
  if (c.cache->mode.is_split() && c.cache->mode.uses_sr())
    for (int32_t s : c.slots)
      if (s != c.pad_slot_id && c.cursors->is_flush.ptr<int8_t>()[s])
        state_io::sr_advance(c.cache->sr, s);
}

void verify(const Call& c) {
  for_each_job(c, [](Worker& w, const Job& x) { w.window(x); });
}

}  // namespace replayssm::gdn::cpu
