// DESIGN.md §3 invariants 1-4 for the GDN/KDA CPU backend: L = 1 is the conventional step bit for
// bit; long decode runs at every L stay within tolerance of the fp64 conventional recurrence with
// the checkpoint matching after each flush; speculative decoding with random T_b and acceptance
// equals sequential decoding of the accepted stream; pad rows, unowned slots, reused slots,
// poisoned outputs, guards and repeated calls. (The Session of test_gdn_harness.h checks pads,
// unowned slots, NaN-filled ring rows and inputs, guards and the oracle on every step.)
#include <gtest/gtest.h>

#include "test_gdn_harness.h"

namespace replayssm::testing::gdnt {
namespace {

using gdn::Gate;

Cfg make(Shape sh, Gate gate, DType dt, bool beta_bf16, RingConfig ring, int64_t slots) {
  Cfg c;
  c.shape = sh, c.gate = gate, c.dtype = dt, c.beta_bf16 = beta_bf16, c.ring = ring,
  c.slots = slots;
  return c;
}

// Invariant 1, first half: with L = 1 every replay step is a flush, which must be the conventional
// step bit for bit (outputs and state), on the same pool contents and inputs.
TEST(GdnInvariants, L1ReplayIsConventionalBitForBit) {
  const uint64_t seed = test_seed(7001);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const Cfg cfg = make(kOdd, gate, dt, dt == DType::kBF16, {1, 1, RingMode::kDecode}, 5);
      SCOPED_TRACE(cfg.describe());
      Session conv(cfg, seed), replay(cfg, seed);  // identical pools
      const std::vector<int32_t> live = {3, 0, 4};
      conv.start(live);
      replay.start(live);
      Rng rng(seed + 1);
      for (int step = 0; step < 12; ++step) {
        std::vector<RowIn> rows;
        for (int32_t s : live) rows.push_back(RowIn{s, {random_token(rng, cfg)}, 1});
        rows.insert(rows.begin() + rng.integer(0, 3), RowIn{cfg.pad, {}, 0});
        conv.step(Op::kConventional, rows);
        replay.step(Op::kReplay, rows);
        ASSERT_FALSE(HasFailure());
        ASSERT_EQ(conv.last->y.payload(), replay.last->y.payload())
            << "outputs differ at step " << step;
        ASSERT_EQ(conv.pool.state.payload(), replay.pool.state.payload())
            << "state differs at step " << step;
      }
    }
}

// Invariant 1, second half: >= 10,000 decode steps at each L (small shape, GDN and KDA), each
// output and every flushed checkpoint within tolerance of the fp64 conventional recurrence of the
// same stream (and of the oracle's replay), with pad rows and slot reuse along the way.
TEST(GdnInvariants, LongDecodeRunsMatchConventional) {
  const uint64_t seed = test_seed(7002);
  SCOPED_TRACE("seed " + std::to_string(seed));
  uint64_t s = seed;
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (int L : {2, 4, 8, 16, 32}) {
      const Cfg cfg = make(kSmall, gate, DType::kF32, false, {L, 1, RingMode::kDecode}, 4);
      SCOPED_TRACE(cfg.describe());
      const Stats st = run_random(cfg, Op::kReplay, 10000, 2, s++, 0.0005);
      ASSERT_FALSE(HasFailure());
      // 2 live rows flush every L steps; the rare restarts (~5 per run) each cut one window short.
      EXPECT_GE(st.flushes, 2 * (10000 / L) - 2 * 10);
      report(cfg, st);
    }
}

// Invariant 2: speculative decoding, T in 1..8, per-row T_b, random acceptance (T_b = 1 right
// after multi-token accepts included), garbage drafts after the accepted ones; accepted outputs and
// every flushed checkpoint equal sequential conventional decoding of the accepted stream.
TEST(GdnInvariants, SpecDecodeEqualsSequentialDecoding) {
  const uint64_t seed = test_seed(7003);
  SCOPED_TRACE("seed " + std::to_string(seed));
  uint64_t s = seed;
  const RingConfig rings[] = {{2, 1, RingMode::kSpeculative},  {4, 2, RingMode::kSpeculative},
                              {7, 3, RingMode::kSpeculative},  {8, 4, RingMode::kSpeculative},
                              {16, 4, RingMode::kSpeculative}, {12, 6, RingMode::kSpeculative},
                              {16, 8, RingMode::kSpeculative}, {32, 8, RingMode::kSpeculative}};
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (const RingConfig& ring : rings) {
      const Cfg cfg = make(kSmall, gate, gate == Gate::kScalar ? DType::kF32 : DType::kBF16,
                           gate == Gate::kScalar, ring, 7);
      SCOPED_TRACE(cfg.describe());
      const Stats st = run_random(cfg, Op::kVerify, 400, 3, s++, 0.01);
      ASSERT_FALSE(HasFailure());
      report(cfg, st);
    }
}

// Invariant 3: a batch of pad rows only (two sentinel choices) reads and writes nothing and
// outputs zeros; the Session checks every slot is bit-identical afterwards.
TEST(GdnInvariants, PadOnlyBatchesTouchNothing) {
  const uint64_t seed = test_seed(7004);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int32_t pad : {-1, 1 << 20}) {
    for (Op op : {Op::kConventional, Op::kReplay, Op::kVerify}) {
      Cfg cfg = make(kSmall, Gate::kChannel, DType::kF32, false,
                     op == Op::kVerify ? RingConfig{8, 4, RingMode::kSpeculative}
                                       : RingConfig{4, 1, RingMode::kDecode},
                     3);
      cfg.pad = pad;
      Session ses(cfg, seed);
      ses.start({1});
      ses.step(op, {RowIn{1, {ses.token()}, 1}});            // some history in slot 1
      ses.step(op, {RowIn{pad, {}, 0}, RowIn{pad, {}, 0}});  // pads only
      ASSERT_FALSE(HasFailure()) << "pad " << pad;
    }
  }
}

// Invariant 3: a slot reused after a run (reset_slots + replayssm::reset; its ring rows hold the
// old records and are then NaN-filled outside the empty window) behaves exactly like a never-used
// slot fed the same tokens: bit-identical outputs, checkpoints and records.
TEST(GdnInvariants, ReusedSlotBehavesLikeFreshSlot) {
  const uint64_t seed = test_seed(7005);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (Op op : {Op::kReplay, Op::kVerify}) {
    const Cfg cfg = make(kSmall, Gate::kScalar, DType::kBF16, true,
                         op == Op::kVerify ? RingConfig{8, 3, RingMode::kSpeculative}
                                           : RingConfig{8, 1, RingMode::kDecode},
                         6);
    SCOPED_TRACE(cfg.describe());
    Session ses(cfg, seed);
    const int32_t used = 2, fresh = 5;
    ses.start({used});
    RowDrawer drawer(cfg);
    for (int i = 0; i < 23; ++i) ses.step(op, drawer.draw(ses, {used}, op));
    ses.start({used, fresh});
    for (int i = 0; i < 30; ++i) {
      std::vector<RowIn> rows = drawer.draw(ses, {used}, op);
      RowIn twin;
      for (const RowIn& r : rows)
        if (r.slot == used) twin = r;
      twin.slot = fresh;
      rows.insert(rows.begin(), twin);
      ses.step(op, rows);
      ASSERT_FALSE(HasFailure());
      const Batch& b = *ses.last;
      size_t ru = 0;
      for (size_t r = 0; r < rows.size(); ++r)
        if (rows[r].slot == used) ru = r;
      for (int64_t t = 0; t < b.T; ++t)
        ASSERT_EQ(b.y_at(0, t), b.y_at(ru, t)) << "step " << i << " token " << t;
      ASSERT_EQ(ses.pool.slot_state(used), ses.pool.slot_state(fresh)) << "step " << i;
      ASSERT_EQ(ses.pool.cursor(used), ses.pool.cursor(fresh));
      const Cursor c = ses.pool.cursor(used);
      for (int64_t l = 0; l < c.h; ++l) {
        const int64_t row = (c.origin + l) % ses.pool.R;
        const ref::GdnRecord a = ses.pool.record(used, row), z = ses.pool.record(fresh, row);
        ASSERT_TRUE(a.u == z.u && a.k == z.k && a.g == z.g) << "record " << l << " at step " << i;
      }
    }
  }
}

// Invariant 4: every call run twice from the same pool contents gives bit-identical outputs,
// checkpoints and rings (flush and non-flush rows, several batch compositions).
TEST(GdnInvariants, RepeatedCallsAreBitIdentical) {
  const uint64_t seed = test_seed(7006);
  SCOPED_TRACE("seed " + std::to_string(seed));
  uint64_t s = seed;
  for (Gate gate : {Gate::kScalar, Gate::kChannel}) {
    const Cfg dec = make(kOdd, gate, DType::kF32, false, {4, 1, RingMode::kDecode}, 5);
    const Cfg spec = make(kOdd, gate, DType::kBF16, true, {8, 4, RingMode::kSpeculative}, 5);
    for (const auto& [cfg, op] : {std::pair{dec, Op::kConventional}, std::pair{dec, Op::kReplay},
                                  std::pair{spec, Op::kVerify}}) {
      SCOPED_TRACE(cfg.describe());
      run_random(cfg, op, 10, 3, s++, 0.1, /*check_repeat=*/true);
      ASSERT_FALSE(HasFailure());
    }
  }
}

}  // namespace
}  // namespace replayssm::testing::gdnt
