// Property test: thousands of random cases (shape, op, ring length, token counts, acceptance
// pattern, batch composition with pad rows, pad sentinel, slot reuse, dtypes and optional
// inputs), each run for a few steps by Sim against the oracle and sequential decoding.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_mamba2_sim.h"

namespace replayssm {
namespace {

using namespace testing::m2;

TEST(Mamba2Property, RandomCasesMatchTheOracle) {
  const uint64_t seed = testing::test_seed(501);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (RSSM_SEED overrides)");
  testing::Rng rng(seed);
  const int kCases = 3000;
  int64_t steps = 0, flushes = 0;
  for (int k = 0; k < kCases; ++k) {
    Sim::Config c;
    const int64_t G = rng.integer(1, 4), H = G * rng.integer(1, 4);
    c.shape = Shape{H, rng.integer(1, 9), rng.integer(1, 17), G, "random"};
    c.opt.dtype = rng.integer(0, 1) ? DType::kBF16 : DType::kF32;
    c.opt.dt_same = rng.integer(0, 1);
    c.opt.z = rng.integer(0, 1);
    c.opt.D = rng.integer(0, 1);
    c.opt.softplus = rng.integer(0, 5) != 0;
    const int kind = static_cast<int>(rng.integer(0, 4));  // replay and verify twice as often
    const Op op = kind == 0 ? Op::kConventional : kind <= 2 ? Op::kReplay : Op::kVerify;
    if (op == Op::kVerify) {
      const int T = static_cast<int>(rng.integer(1, 8));
      c.ring = RingConfig{static_cast<int>(rng.integer(2 * T, 2 * T + 8)), T, RingMode::kSpeculative};
    } else {
      c.ring = RingConfig{static_cast<int>(rng.integer(1, 12)), 1, RingMode::kDecode};
    }
    c.slots = rng.integer(2, 8);
    c.pad_id = rng.integer(0, 1) ? -1 : static_cast<int32_t>(c.slots + rng.integer(0, 100));
    c.rank3 = op != Op::kVerify && rng.integer(0, 3) == 0;
    c.shadow = rng.integer(0, 3) == 0;
    c.repeat = rng.integer(0, 9) == 0;
    SCOPED_TRACE("case " + std::to_string(k) + ": " + op_name(op) + " H" + std::to_string(H) + " P" +
                 std::to_string(c.shape.P) + " N" + std::to_string(c.shape.N) + " G" +
                 std::to_string(G) + " slots " + std::to_string(c.slots) + " pad " +
                 std::to_string(c.pad_id));
    Sim sim(c, rng.integer(0, 1 << 30));

    // Sequences in random distinct slots; now and then one finishes and its slot is reused.
    std::vector<int32_t> free_slots;
    for (int32_t s = 0; s < c.slots; ++s) free_slots.push_back(s);
    sim.rng().shuffle(free_slots);
    const int nseq = static_cast<int>(rng.integer(1, c.slots));
    std::vector<int> seqs;
    for (int i = 0; i < nseq; ++i) seqs.push_back(sim.start(free_slots[i]));
    const int nsteps = static_cast<int>(rng.integer(1, 10));
    for (int step = 0; step < nsteps; ++step) {
      if (rng.integer(0, 7) == 0) {
        const size_t i = static_cast<size_t>(rng.integer(0, nseq - 1));
        seqs[i] = sim.start(sim.seq(seqs[i]).slot);
      }
      // A random subset of the sequences in this batch, plus pad rows.
      std::vector<int> batch;
      for (int q : seqs)
        if (rng.integer(0, 3) != 0) batch.push_back(q);
      ASSERT_TRUE(sim.step(op, sim.random_rows(batch, static_cast<int>(rng.integer(0, 2)))));
      ++steps;
    }
    flushes += sim.flushes();
  }
  // The cases must actually exercise flushes and verify steps (not a test that cannot fail).
  EXPECT_GT(flushes, kCases);
  EXPECT_GT(steps, 4 * kCases);
}

}  // namespace
}  // namespace replayssm
