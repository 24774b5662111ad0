// GPU tests of the CUDA GDN/KDA decode kernels against the fp64 oracle (reference/): the
// conventional step and the ReplaySSM step (each route and plan forced explicitly) at small, real
// (Qwen3.5-4B, Qwen3.5-122B, Kimi-Linear KDA) and odd (H 3, HV 6, K 64, V 96) shapes, GDN and KDA,
// float32/bfloat16 inputs, float32/float16/bfloat16 states, beta_bf16 on and off, random slot ids
// into a pool larger than the batch with pad rows mixed in. Every call checks: y within the
// tolerance (pad rows exactly 0; y is NaN-poisoned before each launch, pad rows' inputs are NaN),
// the state/checkpoint, the record appended and nothing else written (ordinary steps write no
// state, flushes no ring), cursors only read, slots outside the batch bit-identical, guard bytes
// intact. Ring rows outside a slot's live window hold NaN, so reading one shows up in y. Skipped
// (with the reason) where no CUDA device is present.
//
// Tolerances (errors per head: max |gpu - ref| / max(max |ref|, 0.1), test_gdn_harness.h): every
// step starts from the kernel's own stored values (the oracle's checkpoint, ring records and
// conventional state are re-anchored to what the GPU stored), so the one-step float32 bound of the
// harness applies: 2e-4 for y, the state and u (a sum of at most K + L + 2 <= 194 float products of
// O(1) operands: 194 * 2^-24 * sqrt(128) ~ 1.3e-4 worst case), 1e-5 for k^ and g (per token, no
// recurrence). A float16/bfloat16 state adds one rounding of each stored element, at most
// 2^-11 / 2^-8 of its magnitude (so of the head's largest), plus 2^-25 absolute below float16's
// normal range (store_abs_roundoff), over the 0.1 floor; bfloat16 outputs add 2^-8.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <algorithm>
#include <climits>
#include <set>
#include <string>
#include <vector>

#include "replayssm/errors.h"
#include "test_gdn_cuda_util.h"

namespace replayssm::testing::gdn_cuda {
namespace {

using gdnt::head_err;
using gdnt::kBf16Out;
using gdnt::kFloor;

struct Case {
  GpuCfg s;
  int seqs = 4, pads = 2, steps = 8;
  bool random_start = false;  ///< random checkpoints, rings and cursors instead of reset slots
  bool api = false;           ///< call through replayssm::gdn (the public dispatch)
  std::string describe() const {
    return s.describe() + (random_start ? ", random start" : ", fresh slots") +
           (api ? ", public API" : "");
  }
};

Case make_case(const Shape& shape, Gate gate, DType in, DType state, int L) {
  Case c;
  c.s = make_setup(shape, gate, in, state, L, 0);
  return c;
}

const gdnt::Tolerance kTol;

/// Tolerance of a stored state/checkpoint of dtype t (head-relative, file comment).
double state_tol(DType t) {
  return kTol.state + cuda_test::store_roundoff(t) + cuda_test::store_abs_roundoff(t) / kFloor;
}
double y_tol(DType in) { return kTol.y + (in == kBF16 ? kBf16Out : 0.0); }

/// Whether anything of `slot`'s ring rows but physical row `row` differs between two snapshots
/// of ring buffer k (units rows of `per_row` floats per slot and row).
bool other_rows_changed(const DevPool& pool, const DevPool::Snapshot& a, const DevPool::Snapshot& b,
                        int k, int64_t slot, int64_t units, int64_t per_row, int64_t row) {
  const size_t es = sizeof(float);
  for (int64_t un = 0; un < units; ++un)
    for (int64_t r = 0; r < pool.R; ++r) {
      if (r == row) continue;
      const size_t e = static_cast<size_t>(((slot * units + un) * pool.R + r) * per_row) * es;
      if (std::memcmp(a[k].data() + e, b[k].data() + e, per_row * es) != 0) return true;
    }
  return false;
}

/// A unit vector of n random components.
Vec unit_vector(Rng& rng, int64_t n) {
  Vec v(n);
  double ss = 0.0;
  for (double& e : v) e = rng.normal(), ss += e * e;
  for (double& e : v) e = static_cast<float>(e / std::sqrt(ss));
  return v;
}

// ---- the replay harness -----------------------------------------------------------------------

struct Seq {
  int32_t slot = -1;
  ref::GdnSeq rs;  ///< the oracle's cache, re-anchored to the GPU's stored values
};

/// The case with its pool size: a pool larger than the batch, with slots nobody owns.
Case with_pool(Case c) {
  c.s.slots = 2 * c.seqs + 3;
  return c;
}

class ReplayRun {
 public:
  ReplayRun(const Case& c, uint64_t seed)
      : c_(with_pool(c)), rng_(seed), layer_(c_.s, rng_), pool_(c_.s, c_.s.ring.rows(), rng_) {
    const std::vector<int32_t> slots = pick_slots(rng_, pool_.slots, c.seqs);
    for (int i = 0; i < c.seqs; ++i) seqs_.push_back(start(slots[i], i == 0));
    EXPECT_TRUE(pool_.guards_intact()) << "guards after the start";
  }

  int64_t flushes() const { return flushes_; }
  int64_t ordinary() const { return ordinary_; }

  /// One replay step over a random subset of the sequences plus pad rows; every check; commit.
  void step() {
    const bool first = steps_ == 0;
    SCOPED_TRACE("step " + std::to_string(steps_++));
    const GpuCfg& s = c_.s;
    std::vector<int> order;  // every sequence in the first step, then a random subset
    for (int i = 0; i < c_.seqs; ++i)
      if (first || rng_.uniform(0, 1) < 0.85) order.push_back(i);
    if (order.empty()) order.push_back(0);
    for (int i = 0; i < c_.pads; ++i) order.push_back(-1);
    rng_.shuffle(order);
    const int64_t batch = static_cast<int64_t>(order.size());
    std::vector<ref::GdnToken> toks(static_cast<size_t>(batch));
    std::vector<const ref::GdnToken*> tp(static_cast<size_t>(batch), nullptr);
    std::vector<int32_t> ids(static_cast<size_t>(batch), s.pad);
    for (int64_t b = 0; b < batch; ++b)
      if (order[b] >= 0) {
        toks[b] = gdnt::random_token(rng_, s);
        tp[b] = &toks[b];
        ids[b] = seqs_[order[b]].slot;
      }
    DevStep st(s, batch, /*no_t=*/(steps_ % 2) == 0);
    st.put(tp, ids);
    st.y.poison();
    const DevPool::Snapshot before = pool_.snapshot();

    gdn::Cache cache = pool_.cache();
    const RingCursors cur = pool_.cursors();
    const Rows rows = st.rows(s.pad);
    if (c_.api)
      gdn::replay_step(layer_.layer, cache, cur, st.tokens(), rows, st.y.view());
    else
      cg::replay_step(layer_.layer, cache, cur, st.tokens(), rows, st.y.view(), s.plan);
    cuda::device_synchronize();

    const DevPool::Snapshot after = pool_.snapshot();
    const std::vector<double> y = st.y.values();
    const std::vector<double> S = pool_.state.values(), u = pool_.ring_u.values(),
                              k = pool_.ring_k.values(), g = pool_.ring_g.values();
    EXPECT_TRUE(after[4] == before[4] && after[5] == before[5] && after[6] == before[6])
        << "the step wrote cursors";
    std::set<int32_t> in_batch;
    for (int64_t b = 0; b < batch; ++b) {
      SCOPED_TRACE("row " + std::to_string(b));
      const Vec yb = st.y_row(y, b);
      if (order[b] < 0) {
        for (size_t i = 0; i < yb.size(); ++i)
          if (yb[i] != 0.0) {
            ADD_FAILURE() << "pad row output " << i << " is " << yb[i] << ", expected 0";
            break;
          }
        continue;
      }
      Seq& q = seqs_[order[b]];
      in_batch.insert(q.slot);
      check_row(q, toks[b], yb, before, after, S, u, k, g);
    }
    for (int32_t slot = 0; slot < pool_.slots; ++slot)
      if (!in_batch.count(slot)) {
        EXPECT_EQ(pool_.slot_diff(before, after, slot), "") << "not in the batch";
      }
    EXPECT_TRUE(pool_.guards_intact()) << "pool guard bytes";
    EXPECT_TRUE(st.guards_intact()) << "input/output guard bytes";
    EXPECT_TRUE(layer_.guards_intact()) << "parameter guard bytes";

    // Commit on the device (1 accepted per real row, 0 for pads); the oracle's rule must agree.
    commit_step(pool_, ids, s.pad);
    const DevPool::Snapshot committed = pool_.snapshot();
    for (Seq& q : seqs_) {
      if (!in_batch.count(q.slot)) continue;
      q.rs.cursor = ref::commit(q.rs.cursor, 1, s.ring);
      EXPECT_EQ(pool_.cursor(committed, q.slot), q.rs.cursor) << "device commit, slot " << q.slot;
    }
  }

 private:
  /// A sequence in `slot`: reset (gdn::reset_slots + device reset), or a random checkpoint,
  /// ring and cursor (`full`: a full ring, h = L - 1, so that the first step flushes even in
  /// short runs). Ring rows outside the live window are NaN either way.
  Seq start(int32_t slot, bool full) {
    const GpuCfg& s = c_.s;
    const Shape& sh = s.shape;
    Seq q;
    q.slot = slot;
    q.rs = ref::gdn_new_seq(layer_.ref, s.ring);
    std::vector<double> S = pool_.state.values(), u = pool_.ring_u.values(),
                        k = pool_.ring_k.values(), g = pool_.ring_g.values();
    const ref::GdnRecord blank = q.rs.ring[0];  // all NaN
    for (int64_t r = 0; r < pool_.R; ++r) pool_.put_record(u, k, g, slot, r, blank);
    if (c_.random_start) {
      for (int64_t i = 0; i < pool_.state_per_slot(); ++i)
        q.rs.S0[i] = S[slot * pool_.state_per_slot() + i] =
            cuda_test::round_to(s.state, rng_.normal(0, 1));
      Cursor cu;
      cu.h = full ? s.ring.L - 1 : static_cast<int32_t>(rng_.integer(0, s.ring.L - 1));
      cu.origin = static_cast<int32_t>(rng_.integer(0, s.ring.L - 1));
      cu.is_flush = cu.h + 2 > s.ring.L;
      q.rs.cursor = cu;
      for (int64_t l = 0; l < cu.h; ++l) {  // live records; the other rows stay NaN
        const int64_t row = ref::ring_row(cu, l, s.ring);
        ref::GdnRecord& rec = q.rs.ring[row];
        for (double& e : rec.u) e = static_cast<float>(rng_.normal());
        for (int64_t kh = 0; kh < sh.H; ++kh) {
          const Vec kv = unit_vector(rng_, sh.K);
          std::copy(kv.begin(), kv.end(), rec.k.begin() + kh * sh.K);
        }
        for (double& e : rec.g) e = static_cast<float>(-rng_.uniform(0.001, 3.0));
        pool_.put_record(u, k, g, slot, row, rec);
      }
      pool_.state.set_values(S);
      pool_.set_cursor(slot, cu);
    }
    pool_.ring_u.set_values(u), pool_.ring_k.set_values(k), pool_.ring_g.set_values(g);
    if (!c_.random_start) {
      reset_slots(pool_, {slot}, s.pad);
      const DevPool::Snapshot snap = pool_.snapshot();
      EXPECT_EQ(pool_.cursor(snap, slot), q.rs.cursor) << "device reset of slot " << slot;
      const std::vector<double> S0 = pool_.state.values();
      for (int64_t i = 0; i < pool_.state_per_slot(); ++i)
        if (S0[slot * pool_.state_per_slot() + i] != 0.0) {
          ADD_FAILURE() << "reset_slots left " << S0[slot * pool_.state_per_slot() + i]
                        << " in slot " << slot;
          break;
        }
    }
    return q;
  }

  void check_row(Seq& q, const ref::GdnToken& tok, const Vec& y_got,
                 const DevPool::Snapshot& before, const DevPool::Snapshot& after,
                 const std::vector<double>& S, const std::vector<double>& u,
                 const std::vector<double>& k, const std::vector<double>& g) {
    const GpuCfg& s = c_.s;
    const Shape& sh = s.shape;
    const Cursor c = q.rs.cursor;
    EXPECT_EQ(pool_.cursor(before, q.slot), c) << "device cursor differs from the oracle's";
    const Vec y_ref = ref::gdn_replay_step(layer_.ref, s.ring, q.rs, tok);
    EXPECT_LE(head_err(y_got, y_ref, sh.HV), y_tol(s.dtype))
        << (c.is_flush ? "flush" : "ordinary") << " step output, h = " << c.h;

    const int64_t n = pool_.state_per_slot();
    const size_t st_bytes = static_cast<size_t>(n * dtype_size(s.state));
    const size_t st_off = static_cast<size_t>(q.slot) * st_bytes;
    const bool state_same =
        std::memcmp(before[0].data() + st_off, after[0].data() + st_off, st_bytes) == 0;
    const Vec S_got(S.begin() + q.slot * n, S.begin() + (q.slot + 1) * n);
    if (c.is_flush) {
      EXPECT_LE(head_err(S_got, q.rs.S0, sh.HV), state_tol(s.state))
          << "checkpoint after folding " << c.h + 1 << " records";
      for (int kb = 1; kb <= 3; ++kb) {
        const size_t len = before[kb].size() / static_cast<size_t>(pool_.slots);
        EXPECT_EQ(
            std::memcmp(before[kb].data() + q.slot * len, after[kb].data() + q.slot * len, len), 0)
            << "a flush wrote the ring (" << DevPool::kNames[kb] << ")";
      }
      q.rs.S0 = S_got;  // re-anchor to what the GPU stored
      ++flushes_;
      return;
    }
    ++ordinary_;
    EXPECT_TRUE(state_same) << "an ordinary step wrote the checkpoint";
    const int64_t row = ref::ring_row(c, c.h, s.ring);
    ref::GdnRecord& want = q.rs.ring[row];
    const ref::GdnRecord got = pool_.record(u, k, g, q.slot, row);
    EXPECT_LE(head_err(got.u, want.u, sh.HV), kTol.u) << "record u";
    EXPECT_LE(head_err(got.k, want.k, sh.H), kTol.key) << "record k^";
    EXPECT_LE(head_err(got.g, want.g, sh.HV), kTol.gate) << "record g";
    EXPECT_FALSE(other_rows_changed(pool_, before, after, 1, q.slot, sh.HV, sh.V, row))
        << "ring_u rows other than the new record changed";
    EXPECT_FALSE(other_rows_changed(pool_, before, after, 2, q.slot, sh.H, sh.K, row))
        << "ring_k rows other than the new record changed";
    EXPECT_FALSE(other_rows_changed(pool_, before, after, 3, q.slot, sh.HV, pool_.gw, row))
        << "ring_g rows other than the new record changed";
    want = got;  // re-anchor the record to what the GPU stored
  }

  Case c_;
  Rng rng_;
  DevLayer layer_;
  DevPool pool_;
  std::vector<Seq> seqs_;
  int64_t steps_ = 0, flushes_ = 0, ordinary_ = 0;
};

void run_replay(const Case& c, uint64_t seed) {
  SCOPED_TRACE(c.describe() + ", seed " + std::to_string(seed));
  ReplayRun run(c, seed);
  for (int i = 0; i < c.steps; ++i) {
    run.step();
    if (::testing::Test::HasFailure()) return;  // one failing step is enough to read
  }
  // A run that never exercised both branches proves less than it claims.
  if (c.random_start || c.steps >= 2 * c.s.ring.L) {
    EXPECT_GT(run.flushes(), 0) << "no flush row";
  }
  if (c.s.ring.L > 1) {
    EXPECT_GT(run.ordinary(), 0) << "no ordinary row";
  }
}

// ---- the conventional step --------------------------------------------------------------------

void run_conventional(Case c, uint64_t seed) {
  SCOPED_TRACE(c.describe() + ", seed " + std::to_string(seed));
  Rng rng(seed);
  GpuCfg& s = c.s;
  s.slots = 2 * c.seqs + 3;
  s.ring = RingConfig{1, 1, RingMode::kDecode};
  const DevLayer layer(s, rng);
  DevPool pool(s, 1, rng);
  const std::vector<int32_t> slots = pick_slots(rng, pool.slots, c.seqs);
  const Shape& sh = s.shape;
  const int64_t n = pool.state_per_slot();
  for (int step = 0; step < c.steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<int> order;
    for (int i = 0; i < c.seqs; ++i) order.push_back(i);
    for (int i = 0; i < c.pads; ++i) order.push_back(-1);
    rng.shuffle(order);
    const int64_t batch = static_cast<int64_t>(order.size());
    std::vector<ref::GdnToken> toks(static_cast<size_t>(batch));
    std::vector<const ref::GdnToken*> tp(static_cast<size_t>(batch), nullptr);
    std::vector<int32_t> ids(static_cast<size_t>(batch), s.pad);
    for (int64_t b = 0; b < batch; ++b)
      if (order[b] >= 0)
        toks[b] = gdnt::random_token(rng, s), tp[b] = &toks[b], ids[b] = slots[order[b]];
    DevStep st(s, batch, step % 2 == 1);
    st.put(tp, ids);
    st.y.poison();
    const DevPool::Snapshot before = pool.snapshot();
    const std::vector<double> S_before = pool.state.values();
    gdn::Cache cache = pool.cache();
    if (c.api)
      gdn::conventional_step(layer.layer, cache, st.tokens(), st.rows(s.pad), st.y.view());
    else
      cg::conventional_step(layer.layer, cache, st.tokens(), st.rows(s.pad), st.y.view(), s.plan);
    cuda::device_synchronize();
    const DevPool::Snapshot after = pool.snapshot();
    const std::vector<double> y = st.y.values(), S_after = pool.state.values();
    std::set<int32_t> in_batch;
    for (int64_t b = 0; b < batch; ++b) {
      SCOPED_TRACE("row " + std::to_string(b));
      const Vec yb = st.y_row(y, b);
      if (order[b] < 0) {
        for (size_t i = 0; i < yb.size(); ++i)
          if (yb[i] != 0.0) {
            ADD_FAILURE() << "pad row output " << i << " is " << yb[i];
            break;
          }
        continue;
      }
      const int32_t slot = ids[b];
      in_batch.insert(slot);
      // One step from the stored state (the oracle re-anchored to it).
      Vec S(S_before.begin() + slot * n, S_before.begin() + (slot + 1) * n);
      const Vec y_ref = ref::gdn_conventional_step(layer.ref, S, toks[b]);
      EXPECT_LE(head_err(yb, y_ref, sh.HV), y_tol(s.dtype)) << "output";
      const Vec S_got(S_after.begin() + slot * n, S_after.begin() + (slot + 1) * n);
      EXPECT_LE(head_err(S_got, S, sh.HV), state_tol(s.state)) << "state";
    }
    for (int32_t slot = 0; slot < pool.slots; ++slot)
      if (!in_batch.count(slot)) {
        EXPECT_EQ(pool.slot_diff(before, after, slot), "") << "not in the batch";
      }
    EXPECT_TRUE(pool.guards_intact() && st.guards_intact() && layer.guards_intact())
        << "guard bytes";
    if (::testing::Test::HasFailure()) return;
  }
}

uint64_t seed_for(uint64_t fallback) { return test_seed(fallback); }

// ---- conventional -----------------------------------------------------------------------------

TEST(GdnCuda, ConventionalMatchesOracleAllDtypesSmall) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (DType in : {kF32, kBF16})
      for (DType st : {kF32, kF16, kBF16})
        for (int rpt : {2, 8})
          for (int bulk : {0, 1}) {
            Case c = make_case(kGpuSmall, gate, in, st, 1);
            c.s.beta_bf16 = in == kBF16 && st != kF16;
            c.s.plan.rows_per_thread = rpt, c.s.plan.bulk_copy = bulk;
            c.steps = 4;
            run_conventional(c, seed_for(11001));
            if (::testing::Test::HasFailure()) return;
          }
}

TEST(GdnCuda, ConventionalMatchesOracleRealAndOddShapes) {
  RSSM_SKIP_WITHOUT_CUDA();
  struct ShapeGate {
    Shape shape;
    Gate gate;
  };
  for (const ShapeGate& sg :
       {ShapeGate{kOdd, Gate::kScalar}, ShapeGate{kOdd, Gate::kChannel},
        ShapeGate{kQwen4B, Gate::kScalar}, ShapeGate{kQwen122B, Gate::kScalar},
        ShapeGate{kKimi, Gate::kChannel}}) {
    Case c = make_case(sg.shape, sg.gate, kBF16, kF32, 1);
    c.seqs = 3, c.pads = 2, c.steps = 2, c.s.beta_bf16 = true;
    run_conventional(c, seed_for(11002));
    c.s.plan.rows_per_thread = 1, c.s.plan.rows_per_block = 8;  // many small blocks
    c.s.plan.bulk_copy = 1;
    c.s.state = kBF16, c.s.dtype = kF32, c.s.beta_bf16 = false;
    run_conventional(c, seed_for(11003));
    c.s.plan.rows_per_thread = 2, c.s.plan.rows_per_block = 32;  // the 2-4 MiB small-batch plan
    c.s.plan.bulk_copy = 0;
    run_conventional(c, seed_for(11009));  // bf16 state: one chunk per lane
    c.s.state = kF32;                      // fp32 state (the dispatcher's): two chunks per lane
    run_conventional(c, seed_for(11010));
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(GdnCuda, ConventionalPadSentinelsScaleAndPublicApi) {
  RSSM_SKIP_WITHOUT_CUDA();
  Case c = make_case(kGpuSmall, Gate::kScalar, kF32, kF32, 1);
  c.steps = 2;
  for (int32_t pad : {-1, 11, INT_MAX}) {  // 11 = slots (2 * 4 + 3): the first id past the pool
    c.s.pad = pad;
    run_conventional(c, seed_for(11004));
  }
  c.s.pad = -1, c.s.scale = 0.3f;  // an explicit q scale
  run_conventional(c, seed_for(11005));
  c.s.scale = 0.0f, c.api = true, c.s.dtype = kBF16, c.s.state = kF16, c.s.gate = Gate::kChannel;
  run_conventional(c, seed_for(11006));
}

// ---- replay vs the oracle ---------------------------------------------------------------------

TEST(GdnCuda, ReplayMatchesOracleAllDtypesRoutesSmall) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (DType in : {kF32, kBF16})
      for (DType st : {kF32, kF16, kBF16})
        for (cg::Route route : {cg::Route::kOutputOnly, cg::Route::kStateAndOutput})
          for (int prefetch : {0, 1})
            for (int bulk : {0, 1}) {
              Case c = make_case(kGpuSmall, gate, in, st, 4);
              c.s.beta_bf16 = prefetch == 1;
              c.s.plan.route = route, c.s.plan.prefetch_ring = prefetch, c.s.plan.bulk_copy = bulk;
              c.steps = 10;
              run_replay(c, seed_for(12001));
              if (::testing::Test::HasFailure()) return;
            }
}

TEST(GdnCuda, ReplayPlansRowSplitsAndRingLengths) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (int L : {1, 2, 3, 8, 16, 64})
      for (cg::Route route : {cg::Route::kOutputOnly, cg::Route::kStateAndOutput}) {
        Case c = make_case(kGpuSmall, gate, kBF16, kF32, L);
        c.steps = std::min(2 * L + 2, 20);
        c.random_start = L > 3;
        c.s.plan.route = route;
        // V = 16 over blocks of 12 (float4 u staging) and 4 rows, or of 6 rows (scalar staging),
        // with 1 or 2 rows per thread; the last block partial.
        c.s.plan.rows_per_block = L % 2 ? 6 : 12;
        c.s.plan.rows_per_thread = L % 2 ? 2 : 1;
        c.s.plan.bulk_copy = L >= 8 ? 1 : 0;
        run_replay(c, seed_for(12002));
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(GdnCuda, ReplayGroupKernelShapesMatchOracle) {
  RSSM_SKIP_WITHOUT_CUDA();
  // The group kernel's block shapes forced on the odd shape (K 64, V 96, two value heads per key
  // head): units of 32 / 64 / 128 rows (last one partial, or past V: empty), 1-2 value heads and
  // 1-3 units per head per block, 1-4 stages (fewer or more than the block's units), across
  // flushes from random rings and cursors.
  struct G {
    int rpt, hpb, uph, stages;
  };
  const G shapes[] = {{8, 2, 2, 2}, {4, 1, 3, 3}, {8, 1, 1, 1}, {4, 2, 1, 4}, {8, 2, 3, 2}};
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (const G& g : shapes)
      for (cg::Route route : {cg::Route::kOutputOnly, cg::Route::kStateAndOutput})
        for (int prefetch : {0, 1}) {
          Case c = make_case(kOdd, gate, kBF16, prefetch ? kBF16 : kF32, 16);
          c.steps = 20, c.seqs = 4, c.random_start = true, c.s.beta_bf16 = prefetch == 1;
          c.s.plan.kernel = 2, c.s.plan.route = route, c.s.plan.prefetch_ring = prefetch;
          c.s.plan.rows_per_thread = g.rpt, c.s.plan.units_per_head = g.uph;
          c.s.plan.heads_per_block = gate == Gate::kChannel ? 1 : g.hpb;
          c.s.plan.stages = g.stages;
          run_replay(c, seed_for(12008));
          if (::testing::Test::HasFailure()) return;
        }
}

TEST(GdnCuda, ReplayPlanErrors) {
  RSSM_SKIP_WITHOUT_CUDA();
  Case c = make_case(kOdd, Gate::kChannel, kF32, kF32, 4);
  c.steps = 1;
  c.s.plan.kernel = 2, c.s.plan.heads_per_block = 2;  // KDA: one value head per block
  EXPECT_THROW(run_replay(c, seed_for(12009)), ConfigError);
  c.s.plan.heads_per_block = 0, c.s.plan.rows_per_thread = 2;  // the group kernel: 4 or 8
  EXPECT_THROW(run_replay(c, seed_for(12009)), ConfigError);
  c.s.plan.rows_per_thread = 0, c.s.plan.stages = 5;
  EXPECT_THROW(run_replay(c, seed_for(12009)), ConfigError);
  c.s.plan.stages = 0, c.s.plan.kernel = 3;
  EXPECT_THROW(run_replay(c, seed_for(12009)), ConfigError);
}

TEST(GdnCuda, ReplayMatchesOracleOddShape) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (cg::Route route : {cg::Route::kOutputOnly, cg::Route::kStateAndOutput})
      for (int prefetch : {0, 1}) {
        Case c = make_case(kOdd, gate, kBF16, prefetch ? kF16 : kF32, 8);
        c.steps = 5, c.seqs = 4, c.random_start = true;
        c.s.plan.route = route, c.s.plan.prefetch_ring = prefetch,
        c.s.plan.bulk_copy = 1 - prefetch;
        run_replay(c, seed_for(12003));
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(GdnCuda, ReplayMatchesOracleRealShapes) {
  RSSM_SKIP_WITHOUT_CUDA();
  struct ShapeGate {
    Shape shape;
    Gate gate;
  };
  for (const ShapeGate& sg :
       {ShapeGate{kQwen4B, Gate::kScalar}, ShapeGate{kQwen122B, Gate::kScalar},
        ShapeGate{kKimi, Gate::kChannel}})
    for (cg::Route route : {cg::Route::kOutputOnly, cg::Route::kStateAndOutput}) {
      Case c = make_case(sg.shape, sg.gate, kBF16, kF32, 16);
      c.steps = 3, c.seqs = 3, c.pads = 2, c.random_start = true, c.s.beta_bf16 = true;
      c.s.plan.route = route;
      run_replay(c, seed_for(12004));
      c.s.state = kBF16, c.s.plan.prefetch_ring = 1, c.s.plan.bulk_copy = 1, c.s.ring.L = 8;
      run_replay(c, seed_for(12005));
      if (::testing::Test::HasFailure()) return;
    }
}

TEST(GdnCuda, ReplayPadSentinelsAndPublicApi) {
  RSSM_SKIP_WITHOUT_CUDA();
  Case c = make_case(kGpuSmall, Gate::kScalar, kF32, kF32, 4);
  c.steps = 6;
  for (int32_t pad : {-1, 11, INT_MAX}) {
    c.s.pad = pad;
    run_replay(c, seed_for(12006));
  }
  c.s.pad = -1, c.api = true, c.s.dtype = kBF16, c.s.state = kBF16, c.s.ring.L = 3;
  c.s.gate = Gate::kChannel;
  c.steps = 8;
  run_replay(c, seed_for(12007));
}

}  // namespace
}  // namespace replayssm::testing::gdn_cuda

#else  // built without the CUDA backend

TEST(GdnCuda, SkippedWithoutCudaBackend) { GTEST_SKIP() << "built without the CUDA backend"; }

#endif  // RSSM_WITH_CUDA
