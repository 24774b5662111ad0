// DESIGN.md §3 invariants 1-4 for the Mamba-2 CPU backend, driven by Sim (test_mamba2_sim.h),
// which checks every call against the oracle and sequential decoding, keeps ring rows outside
// each live window NaN, poisons outputs, checks guards, pad rows and slots outside the batch.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_mamba2_sim.h"

namespace replayssm {
namespace {

using namespace testing::m2;

Sim::Config make(const Shape& s, const Options& o, RingConfig ring, int64_t slots) {
  Sim::Config c;
  c.shape = s, c.opt = o, c.ring = ring, c.slots = slots;
  return c;
}

// Invariant 1, L = 1: every step is a flush whose final update runs the conventional step's
// code, so outputs and checkpoints equal a conventional_step pool bit for bit (Sim's shadow).
TEST(Mamba2Invariants, ReplayWithL1IsBitIdenticalToConventional) {
  const uint64_t seed = testing::test_seed(301);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<Options> opts = {Options{DType::kF32, false, true, true},
                                     Options{DType::kBF16, true, true, true},
                                     Options{DType::kBF16, false, false, false},
                                     Options{DType::kF32, false, true, false, false}};
  int variant = 0;
  for (const Shape& s : {kSmall, kOddA, kOddB}) {
    for (const Options& o : opts) {
      Sim::Config c = make(s, o, RingConfig{1, 1, RingMode::kDecode}, 7);
      c.shadow = true;
      c.rank3 = ++variant % 2 == 0;
      Sim sim(c, seed + variant);
      const std::vector<int> seqs = {sim.start(6), sim.start(2), sim.start(3)};
      const int steps = s.H * s.P * s.N > 10000 ? 8 : 40;
      for (int step = 0; step < steps; ++step)
        ASSERT_TRUE(sim.step(Op::kReplay, sim.random_rows(seqs, step % 2)));
      EXPECT_EQ(sim.flushes(), 3 * steps);
    }
  }
}

// Invariant 1, any L: over >= 10,000 steps crossing >= 300 flushes, outputs within the bound of
// the oracle and of sequential decoding, and every flushed checkpoint within the bound of the
// conventional state at the same token count (oracle fp64 and the CPU conventional shadow).
TEST(Mamba2Invariants, ReplayTracksConventionalOverTenThousandSteps) {
  const uint64_t seed = testing::test_seed(302);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const int L : {2, 4, 8, 16, 32}) {
    Sim::Config c = make(kSmall, Options{DType::kF32, false, true, true}, RingConfig{L, 1, RingMode::kDecode}, 5);
    c.shadow = true;
    Sim sim(c, seed + L);
    const std::vector<int> seqs = {sim.start(4), sim.start(1)};
    const int steps = 10000;
    for (int step = 0; step < steps; ++step)
      ASSERT_TRUE(sim.step(Op::kReplay, sim.random_rows(seqs, step % 5 == 0 ? 1 : 0))) << "L=" << L << " step " << step;
    EXPECT_EQ(sim.flushes(), 2 * (steps / L));
  }
}

// Invariant 2: speculative decoding with T in 1..8, per-row T_b, random accepted counts (true
// tokens first, garbage drafts after them), T_b = 1 steps right after multi-token accepts; the
// accepted outputs and each flushed checkpoint equal sequential decoding of the accepted stream
// (oracle and a conventional_step shadow pool) within the bound.
TEST(Mamba2Invariants, SpeculativeDecodingEqualsSequentialDecoding) {
  const uint64_t seed = testing::test_seed(303);
  SCOPED_TRACE("seed " + std::to_string(seed));
  int variant = 0;
  for (const int T : {1, 2, 3, 4, 5, 6, 7, 8}) {
    for (const int L : {2 * T, 2 * T + 3, 4 * T}) {
      ++variant;
      const Shape& s = variant % 3 == 0 ? kOddB : kSmall;
      const Options o = variant % 2 ? Options{DType::kF32, false, true, true}
                                    : Options{DType::kBF16, true, variant % 4 == 0, true};
      Sim::Config c = make(s, o, RingConfig{L, T, RingMode::kSpeculative}, 9);
      c.shadow = true;
      c.repeat = variant % 5 == 0;
      Sim sim(c, seed + variant);
      const std::vector<int> seqs = {sim.start(7), sim.start(0), sim.start(4)};
      for (int step = 0; step < 150; ++step) {
        std::vector<RowPlan> rows = sim.random_rows(seqs, step % 4 == 3 ? 2 : 0);
        // Phases: every third step all rows feed T and accept everything, the next feeds 1.
        for (RowPlan& r : rows)
          if (r.seq >= 0 && step % 3 == 0) r.Tb = T, r.accept = T;
          else if (r.seq >= 0 && step % 3 == 1) r.Tb = 1, r.accept = 1;
        ASSERT_TRUE(sim.step(Op::kVerify, rows)) << "T=" << T << " L=" << L << " step " << step;
      }
      EXPECT_GT(sim.flushes(), 0);
    }
  }
}

// Invariant 3: pad rows with the sentinels -1, `slots` and a large id are never read (their
// inputs are NaN) nor written (Sim checks every slot outside the batch byte for byte) and get 0.
TEST(Mamba2Invariants, PadRowsAreNoOpsForEverySentinel) {
  const uint64_t seed = testing::test_seed(304);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const int32_t pad : {-1, 6, 1 << 30}) {
    for (const Op op : {Op::kConventional, Op::kReplay, Op::kVerify}) {
      const RingConfig ring = op == Op::kVerify ? RingConfig{8, 3, RingMode::kSpeculative}
                                                : RingConfig{3, 1, RingMode::kDecode};
      Sim::Config c = make(kOddB, Options{}, ring, 6);
      c.pad_id = pad;
      Sim sim(c, seed + pad);
      const std::vector<int> seqs = {sim.start(5), sim.start(0)};
      for (int step = 0; step < 12; ++step)
        ASSERT_TRUE(sim.step(op, sim.random_rows(seqs, 1 + step % 3))) << "pad " << pad;
      // A batch of pad rows only.
      ASSERT_TRUE(sim.step(op, sim.random_rows({}, 3)));
    }
  }
}

// Invariant 3 (known-failures B5): persistent per-slot storage is addressed by slot id and
// per-call outputs by batch row; sparse high ids in a pool much larger than the batch.
TEST(Mamba2Invariants, HighSlotIdsInALargePool) {
  const uint64_t seed = testing::test_seed(307);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Op op : {Op::kConventional, Op::kReplay, Op::kVerify}) {
    const RingConfig ring = op == Op::kVerify ? RingConfig{8, 4, RingMode::kSpeculative}
                                              : RingConfig{4, 1, RingMode::kDecode};
    Sim sim(make(kSmall, Options{}, ring, 256), seed);
    const std::vector<int> seqs = {sim.start(255), sim.start(17), sim.start(150)};
    for (int step = 0; step < 10; ++step) ASSERT_TRUE(sim.step(op, sim.random_rows(seqs, 2)));
  }
}

// Invariant 3: a reused slot (a finished sequence's state and ring, then reset_slots +
// replayssm::reset, ring rows full of garbage) behaves exactly like a never-used one: the same
// tokens in both give byte-identical outputs, checkpoints and live ring rows.
TEST(Mamba2Invariants, ReusedSlotBehavesLikeAFreshOne) {
  const uint64_t seed = testing::test_seed(305);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Op op : {Op::kConventional, Op::kReplay, Op::kVerify}) {
    const RingConfig ring = op == Op::kVerify ? RingConfig{8, 4, RingMode::kSpeculative}
                                              : RingConfig{4, 1, RingMode::kDecode};
    Sim sim(make(kSmall, Options{DType::kBF16, false, true, true}, ring, 8), seed);
    const int old = sim.start(2);
    for (int step = 0; step < 13; ++step) ASSERT_TRUE(sim.step(op, sim.random_rows({old}, 1)));
    const int reused = sim.start(2), fresh = sim.start(6);
    const Shape& s = kSmall;
    for (int step = 0; step < 20; ++step) {
      std::vector<RowPlan> rows = sim.random_rows({reused}, 0);
      RowPlan twin = rows[0];
      twin.seq = fresh, twin.twin = 0;
      rows.push_back(twin);
      ASSERT_TRUE(sim.step(op, rows));
      for (int t = 0; t < rows[0].Tb; ++t)
        ASSERT_EQ(sim.last_y(0, t), sim.last_y(1, t)) << "step " << step << " token " << t;
      Pool& p = sim.pool();
      const int64_t n = s.H * s.P * s.N;
      ASSERT_EQ(0, std::memcmp(p.state.data<float>() + 2 * n, p.state.data<float>() + 6 * n, n * 4)) << "step " << step;
      ASSERT_EQ(p.cursor(2), p.cursor(6));
      if (op == Op::kConventional) continue;
      const Cursor c = p.cursor(2);
      for (int64_t l = 0; l < c.h; ++l) {
        const int64_t r = (c.origin + l) % p.R;
        for (int64_t h = 0; h < s.H; ++h) {
          ASSERT_EQ(0, std::memcmp(p.ring_x.data<float>() + p.x_at(s, 2, h, r), p.ring_x.data<float>() + p.x_at(s, 6, h, r), s.P * 4));
          ASSERT_EQ(p.ring_dt.data<float>()[p.dt_at(s, 2, h, r)], p.ring_dt.data<float>()[p.dt_at(s, 6, h, r)]);
        }
        for (int64_t g = 0; g < s.G; ++g)
          ASSERT_EQ(0, std::memcmp(p.ring_B.data<float>() + p.B_at(s, 2, g, r), p.ring_B.data<float>() + p.B_at(s, 6, g, r), s.N * 4));
      }
    }
  }
}

// Invariant 4: repeated calls from the same inputs are bit-identical (Sim's repeat mode reruns
// each call from a restored cache and compares every byte), at a shape large enough that the
// OpenMP team splits the work.
TEST(Mamba2Invariants, RepeatedCallsAreBitIdentical) {
  const uint64_t seed = testing::test_seed(306);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Op op : {Op::kConventional, Op::kReplay, Op::kVerify}) {
    const RingConfig ring = op == Op::kVerify ? RingConfig{6, 3, RingMode::kSpeculative}
                                              : RingConfig{3, 1, RingMode::kDecode};
    Sim::Config c = make(kOddA, Options{DType::kBF16, true, true, true}, ring, 5);
    c.repeat = true;
    Sim sim(c, seed);
    const std::vector<int> seqs = {sim.start(3), sim.start(1), sim.start(4)};
    for (int step = 0; step < 5; ++step) ASSERT_TRUE(sim.step(op, sim.random_rows(seqs, 1)));
  }
}

}  // namespace
}  // namespace replayssm
