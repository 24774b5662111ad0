// GPU tests of the CUDA Mamba-2 decode kernels against the fp64 oracle (reference/): the
// conventional step and the ReplaySSM step (each route and plan forced explicitly) at small, real
// (Nemotron-3 Nano-4B, Super) and odd shapes, every input/state/ring dtype, random slot ids into a
// pool larger than the batch with pad rows mixed in. Every call checks: y within the derived error
// bound (pad rows exactly 0; y is NaN-poisoned before each launch), the state/checkpoint, the ring
// record appended and nothing else written (ordinary steps write no state; flushes no ring),
// cursors only read, slots outside the batch bit-identical, guard bytes intact. Skipped (with the
// reason) where no CUDA device is present.
//
// Tolerances: test_mamba2_util.h derives them (forward error bounds in units of u = 2^-24 carried
// per state element). Here every step starts from the kernel's own stored values (the oracle's
// checkpoint, ring records and conventional state are re-anchored to what the GPU stored), so the
// bound of one step applies: the budget carried in is 0 and the magnitude state starts at |S0|.
// 16-bit states/checkpoints add one rounding of the stored value (2^-8 bf16, 2^-11 fp16, relative),
// bf16 outputs add 2^-8 |y|.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <algorithm>
#include <climits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/mamba2/mamba2_cuda.h"
#include "cuda_test_util.h"
#include "replayssm/errors.h"
#include "replayssm/mamba2.h"
#include "replayssm/ring.h"
#include "replayssm_ref.h"

namespace replayssm::testing::cuda_test {
namespace {

namespace cm = ::replayssm::cuda::mamba2;
using m2::Params;
using m2::Shape;
using ref::Vec;
constexpr DType kF32 = DType::kF32, kF16 = DType::kF16, kBF16 = DType::kBF16;
constexpr double kU = m2::kU32;

constexpr Shape kTiny{4, 16, 64, 2, "tiny 4x16x64 g2"};
constexpr Shape kOdd{24, 48, 64, 3, "odd 24x48x64 g3"};
constexpr Shape kOddRows{6, 20, 128, 2, "odd rows 6x20x128 g2"};  // blocks of 8, 8 and 4 rows

struct Case {
  Shape shape = kTiny;
  DType in = kF32, state = kF32, ring = kF32;
  bool dt_same = false, z = true, D = true;
  int L = 4;
  cm::Plan plan;
  int seqs = 5, pads = 2, steps = 8;
  int32_t pad_id = -1;
  bool random_start = false;  ///< random checkpoints, rings and cursors instead of reset slots
  bool api = false;           ///< call through replayssm::mamba2 (the public dispatch)

  std::string describe() const {
    std::ostringstream os;
    os << shape.name << ", in " << dtype_name(in) << (dt_same ? " (dt too)" : " (dt f32)")
       << ", state " << dtype_name(state) << ", ring " << dtype_name(ring) << (z ? ", z" : "")
       << (D ? ", D" : "") << ", L=" << L << ", route " << cm::route_name(plan.route)
       << ", heads/block " << plan.heads_per_block << ", rows/block " << plan.rows_per_block
       << ", rows/thread " << plan.rows_per_thread << ", prefetch " << plan.prefetch_ring
       << ", pad " << pad_id << (random_start ? ", random start" : ", fresh slots")
       << (api ? ", public API" : "");
    return os.str();
  }
  m2::Options options() const {
    m2::Options o;
    o.dtype = in;
    o.dt_same = dt_same;
    o.z = z;
    o.D = D;
    return o;
  }
};

Vec abs_of(const Vec& v) {
  Vec o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = std::abs(v[i]);
  return o;
}

Vec slice(const std::vector<double>& v, int64_t off, int64_t n) {
  return Vec(v.begin() + off, v.begin() + off + n);
}

/// The magnitude state through one record: M <- a M + delta |x| |B| (test_mamba2_util.h).
void advance_record(const Params& prm, const ref::Mamba2Record& r, Vec& M) {
  const Shape& s = prm.shape;
  for (int64_t h = 0; h < s.H; ++h) {
    const double a = std::exp(r.delta[h] * prm.A(h));
    const double* B = &r.B[prm.group(h) * s.N];
    for (int64_t p = 0; p < s.P; ++p) {
      const double dx = r.delta[h] * std::abs(r.x[h * s.P + p]);
      for (int64_t n = 0; n < s.N; ++n) {
        double& m = M[(h * s.P + p) * s.N + n];
        m = a * m + dx * std::abs(B[n]);
      }
    }
  }
}

ref::Mamba2Record record_of(const Params& prm, const ref::Mamba2Token& t) {
  ref::Mamba2Record r{t.x, Vec(prm.shape.H), t.B};
  for (int64_t h = 0; h < prm.shape.H; ++h) r.delta[h] = ref::mamba2_delta(prm.ref, t, h);
  return r;
}

/// Distinct random slots for the sequences.
std::vector<int32_t> pick_slots(Rng& rng, int64_t slots, int n) {
  std::vector<int32_t> all(static_cast<size_t>(slots));
  for (int64_t i = 0; i < slots; ++i) all[i] = static_cast<int32_t>(i);
  rng.shuffle(all);
  return std::vector<int32_t>(all.begin(), all.begin() + n);
}

/// "" when two snapshots agree on every byte of `slot` (state, ring, cursors), else what changed.
/// Every pool buffer has the slot as its leading axis.
std::string slot_diff(const DevPool& pool, const DevPool::Snapshot& a, const DevPool::Snapshot& b,
                      int32_t slot) {
  static const char* const names[7] = {"state",  "ring_x", "ring_dt", "ring_B",
                                       "origin", "h",      "is_flush"};
  for (int k = 0; k < 7; ++k) {
    const size_t len = a[k].size() / static_cast<size_t>(pool.slots);
    const size_t off = static_cast<size_t>(slot) * len;
    if (std::memcmp(a[k].data() + off, b[k].data() + off, len) != 0)
      return std::string(names[k]) + " of slot " + std::to_string(slot) + " changed";
  }
  return "";
}

// ---- the replay harness
// -----------------------------------------------------------------------------

struct Seq {
  int32_t slot = -1;
  ref::Mamba2Seq rs;  ///< the oracle's cache, re-anchored to the GPU's stored values
  Vec M0;             ///< |S0|: the magnitude state at the checkpoint
};

class ReplayRun {
 public:
  ReplayRun(const Case& c, uint64_t seed)
      : c_(c),
        cfg_{c.L, 1, RingMode::kDecode},
        rng_(seed),
        prm_(c.shape, c.options(), rng_),
        layer_(prm_),
        pool_(c.shape, 2 * c.seqs + 3, cfg_.rows(), c.state, c.ring, rng_) {
    const std::vector<int32_t> slots = pick_slots(rng_, pool_.slots, c.seqs);
    for (int i = 0; i < c.seqs; ++i) seqs_.push_back(start(slots[i]));
    EXPECT_TRUE(pool_.guards_intact()) << "guards after the start";
  }

  int64_t flushes() const { return flushes_; }

  /// One replay step over a random subset of the sequences plus pad rows; every check; commit.
  void step() {
    SCOPED_TRACE("step " + std::to_string(steps_++));
    const Shape& s = c_.shape;
    std::vector<int> order;
    for (int i = 0; i < c_.seqs; ++i)
      if (rng_.uniform(0, 1) < 0.85) order.push_back(i);
    if (order.empty()) order.push_back(0);
    for (int i = 0; i < c_.pads; ++i) order.push_back(-1);
    rng_.shuffle(order);
    const int64_t batch = static_cast<int64_t>(order.size());
    std::vector<ref::Mamba2Token> toks(static_cast<size_t>(batch));
    std::vector<const ref::Mamba2Token*> tp(static_cast<size_t>(batch), nullptr);
    std::vector<int32_t> ids(static_cast<size_t>(batch), c_.pad_id);
    for (int64_t b = 0; b < batch; ++b)
      if (order[b] >= 0) {
        toks[b] = prm_.token(rng_);
        tp[b] = &toks[b];
        ids[b] = seqs_[order[b]].slot;
      }
    DevStep st(prm_, batch, /*rank3=*/(steps_ % 2) == 0);
    st.put(tp, ids);
    st.y.poison();
    const DevPool::Snapshot before = pool_.snapshot();

    mamba2::Cache cache = pool_.cache();
    const RingCursors cur = pool_.cursors(cfg_);
    const Rows rows = st.rows(c_.pad_id);
    if (c_.api)
      mamba2::replay_step(layer_.layer, cache, cur, st.tokens(), rows, st.y.view());
    else
      cm::replay_step(layer_.layer, cache, cur, st.tokens(), rows, st.y.view(), c_.plan);
    cuda::device_synchronize();

    const DevPool::Snapshot after = pool_.snapshot();
    const std::vector<double> y = st.y.values();
    const std::vector<double> S_after = pool_.state.values();
    const std::vector<double> x_after = pool_.ring_x.values(), dt_after = pool_.ring_dt.values(),
                              B_after = pool_.ring_B.values();
    const int64_t HP = s.H * s.P, n = s.H * s.P * s.N;
    const double out_rel = c_.in == kBF16 ? m2::kBf16Out : 0.0;
    EXPECT_TRUE(after[4] == before[4] && after[5] == before[5] && after[6] == before[6])
        << "the step wrote cursors";
    std::set<int32_t> in_batch;
    for (int64_t b = 0; b < batch; ++b) {
      SCOPED_TRACE("row " + std::to_string(b));
      if (order[b] < 0) {
        for (int64_t i = 0; i < HP; ++i)
          if (y[b * HP + i] != 0.0) {
            ADD_FAILURE() << "pad row output " << i << " is " << y[b * HP + i] << ", expected 0";
            break;
          }
        continue;
      }
      Seq& q = seqs_[order[b]];
      in_batch.insert(q.slot);
      check_row(q, toks[b], slice(y, b * HP, HP), before, after, S_after, x_after, dt_after,
                B_after, out_rel, n);
    }
    for (int32_t slot = 0; slot < pool_.slots; ++slot)
      if (!in_batch.count(slot)) {
        EXPECT_EQ(slot_diff(pool_, before, after, slot), "") << "not in the batch";
      }
    EXPECT_TRUE(pool_.guards_intact()) << "pool guard bytes";
    EXPECT_TRUE(st.guards_intact()) << "input/output guard bytes";
    EXPECT_TRUE(layer_.guards_intact()) << "parameter guard bytes";

    // Commit on the device (1 accepted per real row, 0 for pads); the oracle's rule must agree.
    DeviceBuffer acc(DType::kI32, {batch}, 81);
    std::vector<double> av(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) av[b] = order[b] >= 0 ? 1 : 0;
    acc.set_values(av);
    RingCursors cur_mut = pool_.cursors(cfg_);
    replayssm::commit(cur_mut, rows, acc.view());
    cuda::device_synchronize();
    const DevPool::Snapshot committed = pool_.snapshot();
    for (int i = 0; i < c_.seqs; ++i) {
      Seq& q = seqs_[i];
      if (!in_batch.count(q.slot)) continue;
      q.rs.cursor = ref::commit(q.rs.cursor, 1, cfg_);
      EXPECT_EQ(pool_.cursor(committed, q.slot), q.rs.cursor) << "device commit, slot " << q.slot;
    }
  }

 private:
  /// A sequence in `slot`: reset slots (reset_slots + device reset, NaN ring rows so that any
  /// read of a dead row poisons the output), or a random checkpoint, ring and cursor.
  Seq start(int32_t slot) {
    const Shape& s = c_.shape;
    Seq q;
    q.slot = slot;
    q.rs = ref::mamba2_new_seq(prm_.ref, cfg_);
    std::vector<double> S = pool_.state.values(), rx = pool_.ring_x.values(),
                        rdt = pool_.ring_dt.values(), rB = pool_.ring_B.values();
    for (int64_t r = 0; r < pool_.R; ++r) {
      for (int64_t hd = 0; hd < s.H; ++hd) {
        std::fill_n(rx.begin() + pool_.x_at(slot, hd, r), s.P, NAN);
        rdt[pool_.dt_at(slot, hd, r)] = NAN;
      }
      for (int64_t g = 0; g < s.G; ++g) std::fill_n(rB.begin() + pool_.B_at(slot, g, r), s.N, NAN);
    }
    if (c_.random_start) {
      for (int64_t i = 0; i < s.H * s.P * s.N; ++i)
        q.rs.S0[i] = S[pool_.state_at(slot) + i] = round_to(c_.state, rng_.normal(0, 1));
      Cursor cu;
      cu.h = static_cast<int32_t>(rng_.integer(0, c_.L - 1));
      cu.origin = static_cast<int32_t>(rng_.integer(0, c_.L - 1));
      cu.is_flush = cu.h + 2 > c_.L;
      q.rs.cursor = cu;
      for (int64_t l = 0; l < cu.h; ++l) {  // live records; the other rows stay NaN
        const int64_t r = ref::ring_row(cu, l, cfg_);
        ref::Mamba2Record& rec = q.rs.ring[r];
        for (int64_t hd = 0; hd < s.H; ++hd) {
          rec.delta[hd] = rdt[pool_.dt_at(slot, hd, r)] =
              static_cast<float>(rng_.uniform(0.01, 1.0));
          for (int64_t p = 0; p < s.P; ++p)
            rec.x[hd * s.P + p] = rx[pool_.x_at(slot, hd, r) + p] =
                round_to(c_.ring, rng_.normal());
        }
        for (int64_t g = 0; g < s.G; ++g)
          for (int64_t nn = 0; nn < s.N; ++nn)
            rec.B[g * s.N + nn] = rB[pool_.B_at(slot, g, r) + nn] =
                round_to(c_.ring, rng_.normal());
      }
      pool_.state.set_values(S);
      std::vector<double> o = pool_.origin.values(), h = pool_.h.values(), f = pool_.flush.values();
      o[slot] = cu.origin, h[slot] = cu.h, f[slot] = cu.is_flush ? 1 : 0;
      pool_.origin.set_values(o), pool_.h.set_values(h), pool_.flush.set_values(f);
    }
    pool_.ring_x.set_values(rx), pool_.ring_dt.set_values(rdt), pool_.ring_B.set_values(rB);
    if (!c_.random_start) {
      DeviceBuffer id(DType::kI32, {1}, 82);
      id.set_values({static_cast<double>(slot)});
      Rows rows;
      rows.slot_ids = id.view();
      rows.pad_slot_id = c_.pad_id;
      mamba2::Cache cache = pool_.cache();
      mamba2::reset_slots(cache, rows);
      RingCursors cur = pool_.cursors(cfg_);
      replayssm::reset(cur, rows);
      cuda::device_synchronize();
      const DevPool::Snapshot snap = pool_.snapshot();
      EXPECT_EQ(pool_.cursor(snap, slot), q.rs.cursor) << "device reset of slot " << slot;
      const std::vector<double> S0 = pool_.state.values();
      for (int64_t i = 0; i < s.H * s.P * s.N; ++i)
        if (S0[pool_.state_at(slot) + i] != 0.0) {
          ADD_FAILURE() << "reset_slots left " << S0[pool_.state_at(slot) + i] << " in slot "
                        << slot;
          break;
        }
    }
    q.M0 = abs_of(q.rs.S0);
    return q;
  }

  void check_row(Seq& q, const ref::Mamba2Token& tok, const Vec& y_got,
                 const DevPool::Snapshot& before, const DevPool::Snapshot& after,
                 const std::vector<double>& S_after, const std::vector<double>& x_after,
                 const std::vector<double>& dt_after, const std::vector<double>& B_after,
                 double out_rel, int64_t n) {
    const Shape& s = c_.shape;
    const Cursor c = q.rs.cursor;
    EXPECT_EQ(pool_.cursor(before, q.slot), c) << "device cursor differs from the oracle's";
    // Magnitudes and deltas of the window: live records, then the token.
    Vec M = q.M0;
    std::vector<const Vec*> window;
    for (int64_t l = 0; l < c.h; ++l) {
      const ref::Mamba2Record& r = q.rs.ring[ref::ring_row(c, l, cfg_)];
      advance_record(prm_, r, M);
      window.push_back(&r.delta);
    }
    const ref::Mamba2Record cur = record_of(prm_, tok);
    advance_record(prm_, cur, M);
    window.push_back(&cur.delta);

    const Vec y_ref = ref::mamba2_replay_step(prm_.ref, cfg_, q.rs, tok);
    m2::Window w = m2::window_of(prm_, window);
    for (double& k : w.k) k += static_cast<double>(s.N);  // the N-term dots
    const Vec bound = m2::y_bound(prm_, tok, y_ref, Vec(n, 0.0), w.abar, M, w.k, kU);
    EXPECT_EQ(m2::within(y_got, y_ref, bound, out_rel), "")
        << (c.is_flush ? "flush" : "ordinary") << " step output, h = " << c.h;

    const size_t st_bytes = static_cast<size_t>(n * dtype_size(c_.state));
    const size_t st_off = static_cast<size_t>(q.slot) * st_bytes;
    const bool state_same =
        std::memcmp(before[0].data() + st_off, after[0].data() + st_off, st_bytes) == 0;
    const Vec S_got = slice(S_after, pool_.state_at(q.slot), n);
    if (c.is_flush) {
      const m2::Window wf = m2::window_of(prm_, window);  // history + token folded
      Vec bs(static_cast<size_t>(n));
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t i = h * s.P * s.N; i < (h + 1) * s.P * s.N; ++i)
          bs[i] = kU * wf.k[h] * M[i] + store_abs_roundoff(c_.state);
      EXPECT_EQ(m2::within(S_got, q.rs.S0, bs, store_roundoff(c_.state)), "")
          << "checkpoint after folding " << window.size() << " records";
      for (int k = 1; k <= 3; ++k) {
        const size_t len = before[k].size() / static_cast<size_t>(pool_.slots);
        EXPECT_EQ(std::memcmp(before[k].data() + q.slot * len, after[k].data() + q.slot * len, len),
                  0)
            << "a flush wrote the ring (buffer " << k << ")";
      }
      q.rs.S0 = S_got;  // re-anchor to what the GPU stored
      q.M0 = abs_of(S_got);
      ++flushes_;
      return;
    }
    EXPECT_TRUE(state_same) << "an ordinary step wrote the checkpoint";
    // The record at logical h: x and B exact copies, delta within its float32 evaluation error
    // (dt + dt_bias rounded, magnified <= max(1, |dt'|) times by softplus, plus softplus' own
    // few ulps: (max(1, |dt'|) + 8) u relative).
    const int64_t row = ref::ring_row(c, c.h, cfg_);
    ref::Mamba2Record& rec = q.rs.ring[row];
    ref::Mamba2Record got{Vec(s.H * s.P), Vec(s.H), Vec(s.G * s.N)};
    for (int64_t hd = 0; hd < s.H; ++hd) {
      for (int64_t p = 0; p < s.P; ++p)
        got.x[hd * s.P + p] = x_after[pool_.x_at(q.slot, hd, row) + p];
      got.delta[hd] = dt_after[pool_.dt_at(q.slot, hd, row)];
      const double dtp = tok.dt[hd] + prm_.ref.dt_bias[hd];
      const double tol = (std::max(1.0, std::abs(dtp)) + 8.0) * kU * std::abs(rec.delta[hd]);
      EXPECT_LE(std::abs(got.delta[hd] - rec.delta[hd]), tol) << "record delta, head " << hd;
    }
    for (int64_t g = 0; g < s.G; ++g)
      for (int64_t nn = 0; nn < s.N; ++nn)
        got.B[g * s.N + nn] = B_after[pool_.B_at(q.slot, g, row) + nn];
    EXPECT_TRUE(got.x == rec.x) << "record x is not the token's x";
    EXPECT_TRUE(got.B == rec.B) << "record B is not the token's B";
    // Nothing else of the ring changed: every (head or group, row) of the slot but `row`.
    auto others_changed = [&](int k, int64_t units, int64_t per_row, DType t) {
      const size_t es = static_cast<size_t>(dtype_size(t));
      for (int64_t u = 0; u < units; ++u)
        for (int64_t r = 0; r < pool_.R; ++r) {
          if (r == row) continue;
          const size_t e = static_cast<size_t>(((q.slot * units + u) * pool_.R + r) * per_row) * es;
          if (std::memcmp(before[k].data() + e, after[k].data() + e, per_row * es) != 0)
            return true;
        }
      return false;
    };
    EXPECT_FALSE(others_changed(1, s.H, s.P, c_.ring))
        << "ring_x rows other than the new record changed";
    EXPECT_FALSE(others_changed(2, s.H, 1, kF32))
        << "ring_dt rows other than the new record changed";
    EXPECT_FALSE(others_changed(3, s.G, s.N, c_.ring))
        << "ring_B rows other than the new record changed";
    rec = got;  // re-anchor the record to what the GPU stored
  }

  Case c_;
  RingConfig cfg_;
  Rng rng_;
  Params prm_;
  DevLayer layer_;
  DevPool pool_;
  std::vector<Seq> seqs_;
  int64_t steps_ = 0, flushes_ = 0;
};

void run_replay(const Case& c, uint64_t seed) {
  SCOPED_TRACE(c.describe() + ", seed " + std::to_string(seed));
  ReplayRun run(c, seed);
  for (int i = 0; i < c.steps && !::testing::Test::HasFatalFailure(); ++i) {
    run.step();
    if (::testing::Test::HasFailure()) break;  // one failing step is enough to read
  }
}

// ---- the conventional step
// -----------------------------------------------------------------------

void run_conventional(const Case& c, uint64_t seed) {
  SCOPED_TRACE(c.describe() + ", seed " + std::to_string(seed));
  Rng rng(seed);
  const Params prm(c.shape, c.options(), rng);
  DevLayer layer(prm);
  DevPool pool(c.shape, 2 * c.seqs + 3, 1, c.state, kF32, rng);
  const std::vector<int32_t> slots = pick_slots(rng, pool.slots, c.seqs);
  const Shape& s = c.shape;
  const int64_t HP = s.H * s.P, n = HP * s.N;
  for (int step = 0; step < c.steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<int> order;
    for (int i = 0; i < c.seqs; ++i) order.push_back(i);
    for (int i = 0; i < c.pads; ++i) order.push_back(-1);
    rng.shuffle(order);
    const int64_t batch = static_cast<int64_t>(order.size());
    std::vector<ref::Mamba2Token> toks(static_cast<size_t>(batch));
    std::vector<const ref::Mamba2Token*> tp(static_cast<size_t>(batch), nullptr);
    std::vector<int32_t> ids(static_cast<size_t>(batch), c.pad_id);
    for (int64_t b = 0; b < batch; ++b)
      if (order[b] >= 0) toks[b] = prm.token(rng), tp[b] = &toks[b], ids[b] = slots[order[b]];
    DevStep st(prm, batch, step % 2 == 1);
    st.put(tp, ids);
    st.y.poison();
    const DevPool::Snapshot before = pool.snapshot();
    const std::vector<double> S_before = pool.state.values();
    mamba2::Cache cache = pool.cache();
    if (c.api)
      mamba2::conventional_step(layer.layer, cache, st.tokens(), st.rows(c.pad_id), st.y.view());
    else
      cm::conventional_step(layer.layer, cache, st.tokens(), st.rows(c.pad_id), st.y.view(),
                            c.plan);
    cuda::device_synchronize();
    const DevPool::Snapshot after = pool.snapshot();
    const std::vector<double> y = st.y.values(), S_after = pool.state.values();
    std::set<int32_t> in_batch;
    for (int64_t b = 0; b < batch; ++b) {
      SCOPED_TRACE("row " + std::to_string(b));
      if (order[b] < 0) {
        for (int64_t i = 0; i < HP; ++i)
          if (y[b * HP + i] != 0.0) {
            ADD_FAILURE() << "pad row output " << i << " is " << y[b * HP + i];
            break;
          }
        continue;
      }
      const int32_t slot = ids[b];
      in_batch.insert(slot);
      // One step from the stored state: M starts at |S|, the carried budget at 0.
      Vec S = slice(S_before, pool.state_at(slot), n);
      Vec M = abs_of(S), bconv(static_cast<size_t>(n), 0.0);
      const Vec y_ref = ref::mamba2_conventional_step(prm.ref, S, toks[b]);
      m2::advance(prm, toks[b], M, bconv);
      const Vec bound =
          m2::y_bound(prm, toks[b], y_ref, bconv, Vec(s.H, 1.0), M, Vec(s.H, s.N + 4.0), kU);
      EXPECT_EQ(m2::within(slice(y, b * HP, HP), y_ref, bound, c.in == kBF16 ? m2::kBf16Out : 0.0),
                "")
          << "output";
      Vec bs(bconv.size());
      for (size_t i = 0; i < bs.size(); ++i) bs[i] = kU * bconv[i] + store_abs_roundoff(c.state);
      EXPECT_EQ(m2::within(slice(S_after, pool.state_at(slot), n), S, bs, store_roundoff(c.state)),
                "")
          << "state";
    }
    for (int32_t slot = 0; slot < pool.slots; ++slot)
      if (!in_batch.count(slot)) {
        EXPECT_EQ(slot_diff(pool, before, after, slot), "") << "not in the batch";
      }
    EXPECT_TRUE(pool.guards_intact() && st.guards_intact() && layer.guards_intact())
        << "guard bytes";
    if (::testing::Test::HasFailure()) break;
  }
}

uint64_t seed_for(uint64_t fallback) { return test_seed(fallback); }

// ---- conventional
// ----------------------------------------------------------------------------------

TEST(Mamba2Cuda, ConventionalMatchesOracleAllDtypesSmall) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (DType in : {kF32, kBF16})
    for (DType st : {kF32, kF16, kBF16})
      for (int rpt : {1, 2, 4, 8}) {
        Case c;
        c.in = in, c.state = st, c.dt_same = in == kBF16 && st == kF16, c.steps = 4;
        c.plan.rows_per_thread = rpt;
        c.z = st != kBF16, c.D = st != kF16;
        run_conventional(c, seed_for(1001));
      }
}

TEST(Mamba2Cuda, ConventionalMatchesOracleRealAndOddShapes) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (const Shape& sh : {m2::kNano, m2::kSuper, kOdd, kOddRows}) {
    Case c;
    c.shape = sh, c.in = kBF16, c.state = kF32, c.seqs = 3, c.pads = 2, c.steps = 2;
    run_conventional(c, seed_for(1002));
    c.plan.rows_per_thread = 4, c.plan.rows_per_block = 8;  // many small blocks
    c.state = kBF16;
    run_conventional(c, seed_for(1003));
    c.plan.rows_per_thread = 1, c.plan.rows_per_block = 4;  // one chunk per thread
    c.state = kF32;
    run_conventional(c, seed_for(1004));
  }
}

TEST(Mamba2Cuda, ConventionalPadSentinelsAndPublicApi) {
  RSSM_SKIP_WITHOUT_CUDA();
  Case c;
  c.steps = 2;
  for (int32_t pad : {-1, 13, INT_MAX}) {  // 13 = slots: the first id past the pool
    c.pad_id = pad;
    run_conventional(c, seed_for(1004));
  }
  c.api = true, c.in = kBF16, c.state = kF16;
  run_conventional(c, seed_for(1005));
}

// ---- replay vs the oracle
// ----------------------------------------------------------------------------

TEST(Mamba2Cuda, ReplayMatchesOracleAllDtypesRoutesSmall) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (DType in : {kF32, kBF16})
    for (DType st : {kF32, kF16, kBF16})
      for (DType ring : {kF32, kBF16}) {
        if (ring == kBF16 && in != kBF16) continue;  // a bf16 ring copies bf16 inputs only
        for (cm::Route route : {cm::Route::kOutputOnly, cm::Route::kStateAndOutput})
          for (int prefetch : {0, 1}) {
            Case c;
            c.in = in, c.state = st, c.ring = ring, c.L = 4, c.steps = 10;
            c.dt_same = in == kBF16 && ring == kF32;
            c.plan.route = route, c.plan.prefetch_ring = prefetch;
            run_replay(c, seed_for(2001));
          }
      }
}

TEST(Mamba2Cuda, ReplayPlansHeadsPerBlockRowSplitsAndRingLengths) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (int L : {1, 2, 3, 8, 16, 64})
    for (cm::Route route : {cm::Route::kOutputOnly, cm::Route::kStateAndOutput})
      for (int v = 0; v < 3; ++v) {
        Case c;
        c.in = kBF16, c.ring = kBF16, c.L = L, c.steps = std::min(2 * L + 2, 20),
        c.random_start = L > 3;
        c.plan.route = route;
        if (v < 2) {  // the per-head kernel: P = 16 over 4 blocks, the last one partial
          c.plan.rows_per_block = 5, c.plan.prefetch_ring = v;
        } else {  // the group kernel: both heads of a group in a block, P split in two
          c.plan.heads_per_block = 2, c.plan.rows_per_block = 8;
        }
        run_replay(c, seed_for(2002));
      }
}

TEST(Mamba2Cuda, ReplayMatchesOracleOddShape) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (int rpt : {4, 8})
    for (int hpb : {1, 4})
      for (cm::Route route : {cm::Route::kOutputOnly, cm::Route::kStateAndOutput}) {
        Case c;
        c.shape = kOdd, c.in = kBF16, c.ring = kBF16, c.L = 8, c.steps = 5, c.seqs = 4;
        c.random_start = true;
        c.plan.route = route, c.plan.rows_per_thread = rpt, c.plan.heads_per_block = hpb;
        run_replay(c, seed_for(2003));
      }
}

TEST(Mamba2Cuda, ReplayMatchesOracleRealShapes) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (const Shape& sh : {m2::kNano, m2::kSuper})
    for (cm::Route route : {cm::Route::kOutputOnly, cm::Route::kStateAndOutput}) {
      Case c;
      c.shape = sh, c.in = kBF16, c.ring = kBF16, c.L = 16, c.steps = 3, c.seqs = 3, c.pads = 2;
      c.random_start = true, c.z = false;
      c.plan.route = route;
      run_replay(c, seed_for(2004));
      c.state = kF16, c.plan.prefetch_ring = 1, c.plan.heads_per_block = 4, c.L = 8;
      run_replay(c, seed_for(2005));
    }
}

TEST(Mamba2Cuda, ReplayEightRowsPerThreadWholeHeadBlocks) {
  RSSM_SKIP_WITHOUT_CUDA();
  // The dispatcher's large-batch kernel for fp32 checkpoints (8 rows per thread, a whole head per
  // block), forced at small batches: flush and ordinary rows at every h, both routes.
  for (const Shape& sh : {kTiny, kOdd, m2::kSuper})
    for (cm::Route route : {cm::Route::kOutputOnly, cm::Route::kStateAndOutput})
      for (int prefetch : {0, 1}) {
        if (sh.H == m2::kSuper.H && prefetch == 1) continue;  // the real shape once per route
        Case c;
        c.shape = sh, c.in = kBF16, c.ring = kBF16, c.L = 16, c.seqs = 3, c.pads = 1;
        c.steps = sh.H == m2::kSuper.H ? 3 : 6;
        c.random_start = true;
        c.plan.route = route, c.plan.prefetch_ring = prefetch, c.plan.rows_per_thread = 8;
        c.plan.rows_per_block = static_cast<int>(sh.P);
        run_replay(c, seed_for(2008));
      }
}

TEST(Mamba2Cuda, ReplayPadSentinelsAndPublicApi) {
  RSSM_SKIP_WITHOUT_CUDA();
  Case c;
  c.steps = 6;
  for (int32_t pad : {-1, 13, INT_MAX}) {
    c.pad_id = pad;
    run_replay(c, seed_for(2006));
  }
  c.api = true, c.in = kBF16, c.ring = kBF16, c.state = kBF16, c.L = 3;
  run_replay(c, seed_for(2007));
}

}  // namespace
}  // namespace replayssm::testing::cuda_test

#else  // built without the CUDA backend

TEST(Mamba2Cuda, SkippedWithoutCudaBackend) { GTEST_SKIP() << "built without the CUDA backend"; }

#endif  // RSSM_WITH_CUDA
