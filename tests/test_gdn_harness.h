// GDN/KDA test harness: a CPU slot pool in guarded buffers, the fp64 oracle per slot, and the
// fp64 conventional recurrence along each slot's accepted token stream, stepped in lock-step with
// every invariant of DESIGN.md §3 checked on every call.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "replayssm/gdn.h"
#include "replayssm/ring.h"
#include "replayssm_ref.h"
#include "test_util.h"

namespace replayssm::testing::gdnt {

struct Shape {
  const char* name;
  int64_t H, HV, K, V;
};
inline constexpr Shape kSmall{"small", 2, 4, 8, 6};
inline constexpr Shape kOdd{"odd", 3, 6, 64, 96};
inline constexpr Shape kTiny{"tiny", 1, 1, 5, 3};
inline constexpr Shape kQwen4B{"qwen3.5-4b", 16, 32, 128, 128};
inline constexpr Shape kQwen122B{"qwen3.5-122b", 16, 64, 128, 128};
inline constexpr Shape kKimi{"kimi-linear", 32, 32, 128, 128};

// ---- tolerances -------------------------------------------------------------------------------
//
// Errors are measured per head: max |cpu - ref| over the head's elements divided by max |ref| over
// the same head, so no head hides behind a larger one, but by no less than kFloor = 0.1. A head
// whose results are all that small got there by cancellation (u = beta (v - hk) with v ~ hk; y with
// hq ~ -(k^.q^) u); its rounding error is set by the operands, which are O(1) by construction
// (v ~ N(0, 1); the delta rule keeps S k^ ~ v, so state rows are O(|v|)), not by the result.
// 0.1 sits a decade below that operand scale, so it only takes over in such cancellations.
//
// fp32 backend vs fp64 (oracle or conventional recurrence); u = 2^-24 ~ 6.0e-8.
//
// One step: every computed quantity is a sum of at most n = K + L + 2T + 2 <= 178 float products
// (a K-long dot with a checkpoint row plus one term per ring record and window token; K <= 128,
// L <= 32, T <= 8 in these tests), each operand carrying a few u of its own (l2norm, exp of a gate
// sum, softplus). A float sum errs by at most n u sum|terms|, and for unit-norm k^, q^ against
// O(1) state rows sum|terms| <= sqrt(K) ~ 11 times the head's scale: worst case
// 178 * 6e-8 * 11 ~ 1.2e-4; with random rounding (sqrt(n) in place of n) ~ 9e-6.
//
// Along a run the state error is multiplied each step by diag(alpha)(I - beta k^ k^T), norm <= 1,
// and new rounding is added. A direction is forgotten once new keys cancel it, after
// ~K / mean(beta) ~ 16 steps for the long runs' K = 8 (or once alpha decays it), so independent
// rounding accumulates like sqrt(16): ~4e-5. The real shapes (K = 128, memory ~256) run only a
// few steps: sqrt(5) x 9e-6.
//
// tol = 2e-4 for y, the checkpoint and the ring's u: above the one-step worst case and 5x the
// accumulated estimate (the largest error measured across this suite is ~2e-5), while a protocol
// error (a wrong or missing record, a wrong decay index, an off-by-one prefix sum) shows at
// 1e-3..1. bf16 outputs are rounded once to 8 significant bits: + 2^-8 (bf16 unit roundoff).
//
// k^ and g are per token (no recurrence, same formulas in both): l2norm sums K <= 128 squares, at
// most K u = 7.6e-6 relative, halved by the square root, plus a few u; 1e-5 bounds it.
//
// fp64 oracle vs fp64 conventional along the stream: the analysis above with u = 2^-53 ~ 1.1e-16
// gives ~2.2e-13 per step and ~1e-12 accumulated; 1e-10 leaves room for long runs.
struct Tolerance {
  double y = 2e-4, state = 2e-4, u = 2e-4, key = 1e-5, gate = 1e-5, oracle = 1e-10;
};
inline constexpr double kBf16Out = 1.0 / 256.0;  // unit roundoff of bf16 (8 significant bits)

inline constexpr double kFloor = 0.1;

/// max over heads of max|a - b| / max(max|b|, kFloor) within the head (NaN anywhere gives +inf).
inline double head_err(const std::vector<double>& a, const std::vector<double>& b, int64_t heads) {
  const size_t per = b.size() / static_cast<size_t>(heads);
  double worst = 0.0;
  for (int64_t hd = 0; hd < heads; ++hd) {
    double num = 0.0, den = 0.0;
    for (size_t i = hd * per; i < (hd + 1) * per; ++i) {
      if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
      num = std::max(num, std::abs(a[i] - b[i]));
      den = std::max(den, std::abs(b[i]));
    }
    worst = std::max(worst, num / std::max(den, kFloor));
  }
  return worst;
}

// ---- the configuration of a run ------------------------------------------------------------

struct Cfg {
  Shape shape = kSmall;
  gdn::Gate gate = gdn::Gate::kScalar;
  DType dtype = DType::kF32;
  bool beta_bf16 = false;
  RingConfig ring{8, 1, RingMode::kDecode};
  int64_t slots = 6;
  int32_t pad = -1;
  float scale = 0.0f;
  bool kda() const { return gate == gdn::Gate::kChannel; }
  int64_t gw() const { return kda() ? shape.K : 1; }
  std::string describe() const {
    return std::string(shape.name) + " H" + std::to_string(shape.H) + " HV" +
           std::to_string(shape.HV) + " K" + std::to_string(shape.K) + " V" +
           std::to_string(shape.V) + (kda() ? " KDA" : " GDN") + " " + dtype_name(dtype) +
           (beta_bf16 ? " beta_bf16" : "") + " " + ring_mode_name(ring.mode) + " L" +
           std::to_string(ring.L) + " T" + std::to_string(ring.T) + " slots" +
           std::to_string(slots) + " pad" + std::to_string(pad);
  }
};

/// A random token whose values are exactly representable in the input dtype. Gates: a + dt_bias
/// in (-7, 4) and exp(A_log) in (0.22, 1.65) give g in (-6.6, -2e-4): alpha spread over (0.0013,
/// 0.9998). b ~ N(0, 2) spreads beta over (0, 1).
inline ref::GdnToken random_token(Rng& rng, const Cfg& s) {
  const Shape& sh = s.shape;
  auto fill = [&](int64_t n, auto draw) {
    ref::Vec v(n);
    for (auto& x : v) x = through(s.dtype, draw());
    return v;
  };
  ref::GdnToken t;
  t.q = fill(sh.H * sh.K, [&] { return rng.normal(); });
  t.k = fill(sh.H * sh.K, [&] { return rng.normal(); });
  t.v = fill(sh.HV * sh.V, [&] { return rng.normal(); });
  t.a = fill(sh.HV * s.gw(), [&] { return rng.uniform(-6.0, 3.0); });
  t.b = fill(sh.HV, [&] { return rng.normal(0.0, 2.0); });
  return t;
}

// ---- the CPU pool ------------------------------------------------------------------------------

class Pool {
 public:
  Cfg setup;
  int64_t R;
  GuardedBuffer A_log, dt_bias, state, ring_u, ring_k, ring_g, origin, h, flush;

  Pool(const Cfg& s, Rng& rng) : setup(s), R(s.ring.rows()) {
    const Shape& sh = s.shape;
    const int64_t n = s.slots;
    A_log = GuardedBuffer(DType::kF32, {sh.HV}, rng.gen());
    dt_bias = s.kda() ? GuardedBuffer(DType::kF32, {sh.HV, sh.K}, rng.gen())
                      : GuardedBuffer(DType::kF32, {sh.HV}, rng.gen());
    for (int64_t i = 0; i < A_log.numel(); ++i)
      A_log.set(i, static_cast<float>(rng.uniform(-1.5, 0.5)));
    for (int64_t i = 0; i < dt_bias.numel(); ++i)
      dt_bias.set(i, static_cast<float>(rng.uniform(-1.0, 1.0)));
    state = GuardedBuffer(DType::kF32, {n, sh.HV, sh.V, sh.K}, rng.gen());
    ring_u = GuardedBuffer(DType::kF32, {n, sh.HV, R, sh.V}, rng.gen());
    ring_k = GuardedBuffer(DType::kF32, {n, sh.H, R, sh.K}, rng.gen());
    ring_g = s.kda() ? GuardedBuffer(DType::kF32, {n, sh.HV, R, sh.K}, rng.gen())
                     : GuardedBuffer(DType::kF32, {n, sh.HV, R}, rng.gen());
    origin = GuardedBuffer(DType::kI32, {n}, rng.gen());
    h = GuardedBuffer(DType::kI32, {n}, rng.gen());
    flush = GuardedBuffer(DType::kI8, {n}, rng.gen());
    // Slots start as garbage: a slot is only valid after reset_slots + replayssm::reset.
    for (GuardedBuffer* b : {&state, &ring_u, &ring_k, &ring_g})
      for (int64_t i = 0; i < b->numel(); ++i)
        b->set(i, static_cast<float>(rng.normal(0.0, 100.0)));
  }

  gdn::Layer layer() const {
    gdn::Layer l;
    l.dims = {setup.shape.H, setup.shape.HV, setup.shape.K, setup.shape.V, setup.gate};
    l.A_log = A_log.view();
    l.dt_bias = dt_bias.view();
    l.scale = setup.scale;
    l.beta_bf16 = setup.beta_bf16;
    return l;
  }
  gdn::Cache cache() const { return {state.view(), ring_u.view(), ring_k.view(), ring_g.view()}; }
  RingCursors cursors() const { return {origin.view(), h.view(), flush.view(), setup.ring}; }
  Cursor cursor(int64_t slot) const {
    return {origin.data<int32_t>()[slot], h.data<int32_t>()[slot], flush.data<int8_t>()[slot] != 0};
  }
  ref::GdnParams params() const {
    ref::GdnParams p;
    p.H = setup.shape.H, p.HV = setup.shape.HV, p.K = setup.shape.K, p.V = setup.shape.V;
    p.kda = setup.kda();
    for (int64_t i = 0; i < A_log.numel(); ++i) p.A_log.push_back(A_log.get(i));
    for (int64_t i = 0; i < dt_bias.numel(); ++i) p.dt_bias.push_back(dt_bias.get(i));
    p.scale = setup.scale;
    p.beta_bf16 = setup.beta_bf16;
    return p;
  }
  std::vector<GuardedBuffer*> buffers() {
    return {&A_log, &dt_bias, &state, &ring_u, &ring_k, &ring_g, &origin, &h, &flush};
  }
  bool guards_intact() {
    for (GuardedBuffer* b : buffers())
      if (!b->guards_intact()) return false;
    return true;
  }

  // Element ranges of one slot (numel per slot of each cached buffer).
  int64_t per_slot(const GuardedBuffer& b) const { return b.numel() / setup.slots; }
  /// Every byte a slot owns (state, ring, cursors), for bit-identity checks.
  std::vector<uint8_t> slot_bytes(int64_t slot) const {
    std::vector<uint8_t> out;
    for (const GuardedBuffer* b : {&state, &ring_u, &ring_k, &ring_g, &origin, &h, &flush}) {
      const size_t n = static_cast<size_t>(per_slot(*b) * dtype_size(b->view().dtype));
      const uint8_t* p = b->data<uint8_t>() + slot * n;
      out.insert(out.end(), p, p + n);
    }
    return out;
  }

  /// NaN into every ring row of `slot` outside its live window (logical >= h), so a read of a
  /// row the protocol does not own shows up in the outputs.
  void poison_outside_window(int64_t slot) {
    const Cursor c = cursor(slot);
    const Shape& sh = setup.shape;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t l = c.h; l < R; ++l) {
      const int64_t row = (c.origin + l) % R;
      for (int64_t vh = 0; vh < sh.HV; ++vh) {
        for (int64_t r = 0; r < sh.V; ++r)
          ring_u.set(((slot * sh.HV + vh) * R + row) * sh.V + r, nan);
        for (int64_t i = 0; i < setup.gw(); ++i)
          ring_g.set(((slot * sh.HV + vh) * R + row) * setup.gw() + i, nan);
      }
      for (int64_t kh = 0; kh < sh.H; ++kh)
        for (int64_t c2 = 0; c2 < sh.K; ++c2)
          ring_k.set(((slot * sh.H + kh) * R + row) * sh.K + c2, nan);
    }
  }

  /// The record at physical row `row` of `slot` as the oracle's struct.
  ref::GdnRecord record(int64_t slot, int64_t row) const {
    const Shape& sh = setup.shape;
    ref::GdnRecord rec;
    for (int64_t vh = 0; vh < sh.HV; ++vh)
      for (int64_t r = 0; r < sh.V; ++r)
        rec.u.push_back(ring_u.get(((slot * sh.HV + vh) * R + row) * sh.V + r));
    for (int64_t kh = 0; kh < sh.H; ++kh)
      for (int64_t c = 0; c < sh.K; ++c)
        rec.k.push_back(ring_k.get(((slot * sh.H + kh) * R + row) * sh.K + c));
    for (int64_t vh = 0; vh < sh.HV; ++vh)
      for (int64_t i = 0; i < setup.gw(); ++i)
        rec.g.push_back(ring_g.get(((slot * sh.HV + vh) * R + row) * setup.gw() + i));
    return rec;
  }
  ref::Vec slot_state(int64_t slot) const {
    const int64_t n = per_slot(state);
    ref::Vec v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = state.get(slot * n + i);
    return v;
  }
};

// ---- one batch of inputs --------------------------------------------------------------------

/// One batch row of a call: a slot (or the pad id), the tokens it feeds, how many are accepted.
struct RowIn {
  int32_t slot = -1;
  std::vector<ref::GdnToken> tokens;  ///< T_b tokens (none for pad rows)
  int32_t accepted = 1;               ///< 1..T_b for real rows
};

/// Input, output and row buffers of one call: token positions past T_b and pad rows hold NaN,
/// so reading them would show up; y is NaN-poisoned.
struct Batch {
  int64_t B, T;
  GuardedBuffer q, k, v, a, b, y, ids, ntok;
  bool drop_t_axis = false;  ///< pass rank-without-T views (T = 1 only)
  bool with_ntok = true;

  Batch(const Cfg& s, int64_t B_, int64_t T_) : B(B_), T(T_) {
    const Shape& sh = s.shape;
    q = GuardedBuffer(s.dtype, {B, T, sh.H, sh.K}, 11);
    k = GuardedBuffer(s.dtype, {B, T, sh.H, sh.K}, 12);
    v = GuardedBuffer(s.dtype, {B, T, sh.HV, sh.V}, 13);
    a = s.kda() ? GuardedBuffer(s.dtype, {B, T, sh.HV, sh.K}, 14)
                : GuardedBuffer(s.dtype, {B, T, sh.HV}, 14);
    b = GuardedBuffer(s.dtype, {B, T, sh.HV}, 15);
    y = GuardedBuffer(s.dtype, {B, T, sh.HV, sh.V}, 16);
    ids = GuardedBuffer(DType::kI32, {B}, 17);
    ntok = GuardedBuffer(DType::kI32, {B}, 18);
  }
  /// Loads the rows' tokens (NaN elsewhere) and poisons y.
  void fill(const Cfg& s, const std::vector<RowIn>& rows) {
    for (GuardedBuffer* g : {&q, &k, &v, &a, &b, &y}) g->poison();
    for (int64_t r = 0; r < B; ++r) {
      ids.data<int32_t>()[r] = rows[r].slot;
      ntok.data<int32_t>()[r] =
          rows[r].slot == s.pad ? 0 : static_cast<int32_t>(rows[r].tokens.size());
      for (size_t t = 0; t < rows[r].tokens.size(); ++t) {
        const ref::GdnToken& tk = rows[r].tokens[t];
        auto put = [&](GuardedBuffer& buf, const ref::Vec& x) {
          const int64_t per = static_cast<int64_t>(x.size());
          for (int64_t i = 0; i < per; ++i)
            buf.set((r * T + static_cast<int64_t>(t)) * per + i, static_cast<float>(x[i]));
        };
        put(q, tk.q), put(k, tk.k), put(v, tk.v), put(a, tk.a), put(b, tk.b);
      }
    }
  }
  TensorView maybe_drop(const GuardedBuffer& g) const {
    TensorView t = g.view();
    if (!drop_t_axis) return t;
    for (int i = 1; i + 1 < t.ndim; ++i) t.shape[i] = t.shape[i + 1], t.stride[i] = t.stride[i + 1];
    --t.ndim;
    return t;
  }
  gdn::Tokens tokens() const {
    return {maybe_drop(q), maybe_drop(k), maybe_drop(v), maybe_drop(a), maybe_drop(b)};
  }
  TensorView y_view() const { return maybe_drop(y); }
  Rows rows(int32_t pad) const {
    Rows r;
    r.slot_ids = ids.view();
    r.pad_slot_id = pad;
    if (with_ntok) r.num_tokens = ntok.view();
    return r;
  }
  /// y of row r, token t, as doubles [HV*V].
  ref::Vec y_at(int64_t r, int64_t t) const {
    const int64_t per = y.numel() / (B * T);
    ref::Vec out(per);
    for (int64_t i = 0; i < per; ++i) out[i] = y.get((r * T + t) * per + i);
    return out;
  }
  bool guards_intact() const {
    for (const GuardedBuffer* g : {&q, &k, &v, &a, &b, &y, &ids, &ntok})
      if (!g->guards_intact()) return false;
    return true;
  }
};

// ---- the lock-step session -----------------------------------------------------------------

enum class Op { kConventional, kReplay, kVerify };

/// Largest errors seen, for reporting.
struct Stats {
  double y = 0, state = 0, u = 0, key = 0, gate = 0, stream_y = 0, stream_state = 0, oracle = 0;
  int64_t steps = 0, flushes = 0;
  std::string str() const {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%lld steps, %lld flushes; max err y %.2e state %.2e u %.2e k %.2e g %.2e | vs "
                  "stream y %.2e ckpt %.2e | oracle vs stream %.2e",
                  static_cast<long long>(steps), static_cast<long long>(flushes), y, state, u, key,
                  gate, stream_y, stream_state, oracle);
    return buf;
  }
};

class Session {
 public:
  Cfg setup;
  Rng rng;
  Pool pool;
  ref::GdnParams P;
  Tolerance tol;
  Stats stats;
  std::vector<std::optional<ref::GdnSeq>> seq;  ///< oracle per slot
  std::vector<ref::Vec> conv;  ///< fp64 conventional state along the accepted stream
  bool check_repeat = false;   ///< run each call twice from the same pool: bit-identical
  bool full_T = true;          ///< verify inputs carry T = ring T (else max T_b)
  Batch* last = nullptr;       ///< the last call's buffers
  std::map<std::pair<int64_t, int64_t>, Batch> batches;  ///< call buffers by (batch, T), reused

  Session(const Cfg& s, uint64_t seed) : setup(s), rng(seed), pool(s, rng), P(pool.params()) {
    seq.resize(s.slots);
    conv.resize(s.slots);
  }

  double y_tol() const { return tol.y + (setup.dtype == DType::kBF16 ? kBf16Out : 0.0); }
  ref::GdnToken token() { return random_token(rng, setup); }

  /// A fresh or reused slot: gdn::reset_slots + replayssm::reset on the CPU, a new oracle sequence.
  void start(const std::vector<int32_t>& slots) {
    std::vector<int32_t> ids = slots;
    Rows rows{
        make_view(ids.data(), DType::kI32, {static_cast<int64_t>(ids.size())}), setup.pad, {}};
    gdn::Cache cache = pool.cache();
    RingCursors cur = pool.cursors();
    gdn::reset_slots(cache, rows);
    replayssm::reset(cur, rows);
    for (int32_t s : slots) {
      seq[s] = ref::gdn_new_seq(P, setup.ring);
      conv[s].assign(P.HV * P.V * P.K, 0.0);
    }
  }

  /// One call of op on rows, checked against the oracle and the stream; commits the cursors.
  void step(Op op, const std::vector<RowIn>& rows) {
    stats.steps++;
    int64_t T = 1;
    if (op == Op::kVerify) {
      T = full_T ? setup.ring.T : 1;
      for (const RowIn& r : rows) T = std::max<int64_t>(T, static_cast<int64_t>(r.tokens.size()));
    }
    const int64_t B = static_cast<int64_t>(rows.size());
    auto it = batches.find({B, T});
    if (it == batches.end()) it = batches.emplace(std::pair{B, T}, Batch(setup, B, T)).first;
    last = &it->second;
    Batch& batch = *last;
    batch.fill(setup, rows);
    batch.drop_t_axis = T == 1 && rng.integer(0, 3) == 0;
    bool all_T = true;
    for (const RowIn& r : rows)
      all_T = all_T && (r.slot == setup.pad || static_cast<int64_t>(r.tokens.size()) == T);
    batch.with_ntok = op == Op::kVerify && !(all_T && rng.integer(0, 1));

    std::vector<bool> in_batch(setup.slots, false);
    for (const RowIn& r : rows)
      if (r.slot != setup.pad) in_batch[r.slot] = true;
    if (op != Op::kConventional)
      for (int64_t s = 0; s < setup.slots; ++s)
        if (seq[s]) pool.poison_outside_window(s);
    std::vector<std::vector<uint8_t>> before(setup.slots);
    for (int64_t s = 0; s < setup.slots; ++s)
      if (!in_batch[s]) before[s] = pool.slot_bytes(s);
    std::vector<Cursor> cursor(setup.slots);
    for (int64_t s = 0; s < setup.slots; ++s) cursor[s] = pool.cursor(s);

    if (check_repeat) {
      saved_.clear();
      for (GuardedBuffer* b : pool.buffers()) saved_.push_back(b->payload());
    }
    call(op, batch);
    if (check_repeat) repeat(op, batch);

    ASSERT_TRUE(batch.guards_intact()) << "batch buffer guard overwritten";
    ASSERT_TRUE(pool.guards_intact()) << "pool buffer guard overwritten";
    for (int64_t s = 0; s < setup.slots; ++s) {
      if (!in_batch[s]) {
        ASSERT_EQ(before[s], pool.slot_bytes(s)) << "slot " << s << " not in the batch changed";
      }
    }

    const int64_t HV = setup.shape.HV;
    for (size_t r = 0; r < rows.size(); ++r) {
      const RowIn& row = rows[r];
      const int64_t Tb = row.slot == setup.pad ? 0 : static_cast<int64_t>(row.tokens.size());
      for (int64_t t = Tb; t < T; ++t)
        for (double v : batch.y_at(r, t))
          ASSERT_EQ(v, 0.0) << "row " << r << " token " << t << " (past T_b / pad) not 0";
      if (row.slot == setup.pad) continue;
      check_row(op, batch, r, row, cursor[row.slot], HV);
      if (::testing::Test::HasFatalFailure()) return;
    }
    if (op == Op::kConventional) return;
    commit(rows);
  }

 private:
  void call(Op op, const Batch& batch) {
    gdn::Layer layer = pool.layer();
    gdn::Cache cache = pool.cache();
    RingCursors cur = pool.cursors();
    const Rows rows = batch.rows(setup.pad);
    switch (op) {
      case Op::kConventional:
        gdn::conventional_step(layer, cache, batch.tokens(), rows, batch.y_view());
        break;
      case Op::kReplay:
        gdn::replay_step(layer, cache, cur, batch.tokens(), rows, batch.y_view());
        break;
      case Op::kVerify:
        gdn::verify(layer, cache, cur, batch.tokens(), rows, batch.y_view());
        break;
    }
  }

  // Run the call again from the same pool contents: outputs and pool must be bit-identical.
  void repeat(Op op, Batch& batch) {
    std::vector<std::vector<uint8_t>> after;
    for (GuardedBuffer* b : pool.buffers()) after.push_back(b->payload());
    const std::vector<uint8_t> y1 = batch.y.payload();
    auto pool_bufs = pool.buffers();
    for (size_t i = 0; i < pool_bufs.size(); ++i)
      std::memcpy(pool_bufs[i]->data<uint8_t>(), saved_[i].data(), saved_[i].size());
    batch.y.poison();
    call(op, batch);
    EXPECT_EQ(y1, batch.y.payload()) << "repeated call: outputs differ";
    for (size_t i = 0; i < pool_bufs.size(); ++i)
      EXPECT_EQ(after[i], pool_bufs[i]->payload())
          << "repeated call: pool buffer " << i << " differs";
  }

  std::vector<std::vector<uint8_t>> saved_;  ///< pool before the call (check_repeat)

  void check_row(Op op, const Batch& batch, size_t r, const RowIn& row, const Cursor& c,
                 int64_t HV) {
    const int32_t slot = row.slot;
    ref::GdnSeq& s = *seq[slot];
    if (op != Op::kConventional) {
      EXPECT_EQ(s.cursor, c) << "slot " << slot << ": oracle and CPU cursors differ";
    }
    const int64_t Tb = static_cast<int64_t>(row.tokens.size());
    std::vector<ref::Vec> y_ref;
    if (op == Op::kConventional)
      y_ref.push_back(ref::gdn_conventional_step(P, s.S0, row.tokens[0]));
    else if (op == Op::kReplay)
      y_ref.push_back(ref::gdn_replay_step(P, setup.ring, s, row.tokens[0]));
    else
      y_ref = ref::gdn_verify(P, setup.ring, s, row.tokens);

    for (int64_t t = 0; t < Tb; ++t) {
      const double e = head_err(batch.y_at(r, t), y_ref[t], HV);
      stats.y = std::max(stats.y, e);
      EXPECT_LE(e, y_tol()) << "y of row " << r << " token " << t << " (slot " << slot << ", h "
                            << c.h << ", flush " << c.is_flush << ")";
    }
    const bool folded = op == Op::kConventional || c.is_flush;
    if (folded) {
      const double e = head_err(pool.slot_state(slot), s.S0, HV);
      stats.state = std::max(stats.state, e);
      if (op != Op::kConventional) stats.flushes++;
      EXPECT_LE(e, tol.state) << "checkpoint of slot " << slot << " after the step (h " << c.h
                              << ")";
    }
    // The accepted tokens continue the slot's stream: fp64 conventional outputs and states.
    const bool spec = op == Op::kVerify;
    if (spec && c.is_flush) check_checkpoint_vs_stream(slot, HV);  // committed history only
    for (int32_t i = 0; i < row.accepted; ++i) {
      const ref::Vec yc = ref::gdn_conventional_step(P, conv[slot], row.tokens[i]);
      const double e_cpu = head_err(batch.y_at(r, i), yc, HV);
      const double e_ref = head_err(y_ref[i], yc, HV);
      stats.stream_y = std::max(stats.stream_y, e_cpu);
      stats.oracle = std::max(stats.oracle, e_ref);
      EXPECT_LE(e_cpu, y_tol()) << "row " << r << " token " << i << " vs the conventional stream";
      EXPECT_LE(e_ref, tol.oracle)
          << "oracle row " << r << " token " << i << " vs the conventional stream";
    }
    if (folded && !spec) check_checkpoint_vs_stream(slot, HV);  // history + token (decode)
  }

  void check_checkpoint_vs_stream(int32_t slot, int64_t HV) {
    const double e = head_err(pool.slot_state(slot), conv[slot], HV);
    stats.stream_state = std::max(stats.stream_state, e);
    EXPECT_LE(e, tol.state) << "checkpoint of slot " << slot << " vs the conventional stream";
    const double eo = head_err(seq[slot]->S0, conv[slot], HV);
    stats.oracle = std::max(stats.oracle, eo);
    EXPECT_LE(eo, tol.oracle) << "oracle checkpoint of slot " << slot
                              << " vs the conventional stream";
  }

  void commit(const std::vector<RowIn>& rows) {
    std::vector<int32_t> ids, acc, fed;
    for (const RowIn& r : rows) {
      ids.push_back(r.slot);
      acc.push_back(r.slot == setup.pad ? 0 : r.accepted);
      fed.push_back(r.slot == setup.pad ? 0 : static_cast<int32_t>(r.tokens.size()));
    }
    const int64_t B = static_cast<int64_t>(rows.size());
    Rows rv{make_view(ids.data(), DType::kI32, {B}), setup.pad,
            make_view(fed.data(), DType::kI32, {B})};
    RingCursors cur = pool.cursors();
    replayssm::commit(cur, rv, make_view(acc.data(), DType::kI32, {B}));
    const int64_t HV = setup.shape.HV, H = setup.shape.H;
    for (const RowIn& r : rows) {
      if (r.slot == setup.pad) continue;
      ref::GdnSeq& s = *seq[r.slot];
      s.cursor = ref::commit(s.cursor, r.accepted, setup.ring);
      ASSERT_EQ(s.cursor, pool.cursor(r.slot)) << "cursor after commit, slot " << r.slot;
      // Ring contents at the live logical positions.
      for (int64_t l = 0; l < s.cursor.h; ++l) {
        const int64_t row = ref::ring_row(s.cursor, l, setup.ring);
        const ref::GdnRecord cpu = pool.record(r.slot, row);
        const ref::GdnRecord& want = s.ring[row];
        const double eu = head_err(cpu.u, want.u, HV), ek = head_err(cpu.k, want.k, H),
                     eg = head_err(cpu.g, want.g, HV);
        stats.u = std::max(stats.u, eu), stats.key = std::max(stats.key, ek),
        stats.gate = std::max(stats.gate, eg);
        EXPECT_LE(eu, tol.u) << "ring u, slot " << r.slot << " logical " << l;
        EXPECT_LE(ek, tol.key) << "ring k, slot " << r.slot << " logical " << l;
        EXPECT_LE(eg, tol.gate) << "ring g, slot " << r.slot << " logical " << l;
      }
    }
  }
};

/// One line of measured errors on stdout, so runs document the margins to the tolerances.
inline void report(const Cfg& c, const Stats& st) {
  std::printf("[ gdn      ] %s: %s\n", c.describe().c_str(), st.str().c_str());
}

// ---- random batches ------------------------------------------------------------------------

/// Draws the rows of one step for the live sequences in `live` (slot ids): every live slot once, in
/// random order, with pad rows mixed in. Speculative rows feed T_b in 1..T tokens (T_b = 1 more
/// often right after a multi-token accept) and accept 1..T_b of them; the accepted ones continue
/// the stream, the rest are garbage drafts that must leave no trace.
class RowDrawer {
 public:
  double pad_rate = 0.25;
  std::vector<int32_t> last_accepted;  ///< per slot

  explicit RowDrawer(const Cfg& s) : last_accepted(s.slots, 1) {}

  std::vector<RowIn> draw(Session& ses, const std::vector<int32_t>& live, Op op) {
    Rng& rng = ses.rng;
    std::vector<RowIn> rows;
    for (int32_t slot : live) {
      RowIn r;
      r.slot = slot;
      int64_t Tb = 1;
      if (op == Op::kVerify) {
        const int32_t T = ses.setup.ring.T;
        Tb = (last_accepted[slot] > 1 && rng.integer(0, 2) == 0) ? 1 : rng.integer(1, T);
        r.accepted = static_cast<int32_t>(rng.integer(0, 2) == 0 ? Tb : rng.integer(1, Tb));
        last_accepted[slot] = r.accepted;
      }
      for (int64_t t = 0; t < Tb; ++t) r.tokens.push_back(ses.token());
      rows.push_back(std::move(r));
      while (rng.uniform(0.0, 1.0) < pad_rate) rows.push_back(RowIn{ses.setup.pad, {}, 0});
    }
    ses.rng.shuffle(rows);
    return rows;
  }
};

/// Runs `steps` random steps of op over `live_n` sequences on random slots of the pool (pad rows
/// mixed in). With probability restart_rate per step a sequence ends and its slot, or a free one,
/// starts a new sequence (slot reuse). Stops at the first failure. Returns the error statistics.
inline Stats run_random(const Cfg& setup, Op op, int64_t steps, int64_t live_n, uint64_t seed,
                        double restart_rate = 0.02, bool check_repeat = false) {
  Session ses(setup, seed);
  ses.check_repeat = check_repeat;
  std::vector<int32_t> all(setup.slots);
  for (int32_t i = 0; i < setup.slots; ++i) all[i] = i;
  ses.rng.shuffle(all);
  std::vector<int32_t> live(all.begin(), all.begin() + live_n);
  std::vector<int32_t> spare(all.begin() + live_n, all.end());
  ses.start(live);
  RowDrawer drawer(setup);
  for (int64_t i = 0; i < steps; ++i) {
    if (ses.rng.uniform(0.0, 1.0) < restart_rate) {
      const int64_t j = ses.rng.integer(0, live_n - 1);
      if (!spare.empty() && ses.rng.integer(0, 1))
        std::swap(live[j], spare[ses.rng.integer(0, spare.size() - 1)]);
      ses.start({live[j]});
    }
    ses.full_T = ses.rng.integer(0, 1);
    ses.step(op, drawer.draw(ses, live, op));
    if (::testing::Test::HasFailure()) break;
  }
  return ses.stats;
}

}  // namespace replayssm::testing::gdnt
