// The Mamba-2 oracle checked against itself in fp64: L = 1 replay is the conventional step
// exactly; the closed form of DESIGN.md §2 equals the materialised definition; verify outputs are
// sequential conventional steps; flushed checkpoints are the sequential state.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "replayssm_ref.h"
#include "test_mamba2_util.h"

namespace replayssm {
namespace {

using namespace testing::m2;
using testing::Rng;

constexpr double kU64 = 0x1p-53;

TEST(Mamba2Oracle, ReplayWithL1IsTheConventionalStepExactly) {
  const uint64_t seed = testing::test_seed(201);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Shape& s : {kSmall, kOddA, kOddB}) {
    for (const bool gates : {true, false}) {
      Rng rng(seed);
      const Params prm(s, Options{DType::kF32, false, gates, gates}, rng);
      const RingConfig cfg{1, 1, RingMode::kDecode};
      ref::Mamba2Seq seq = ref::mamba2_new_seq(prm.ref, cfg);
      Vec S(s.H * s.P * s.N, 0.0);
      for (int step = 0; step < 30; ++step) {
        ASSERT_TRUE(seq.cursor.is_flush);
        const ref::Mamba2Token t = prm.token(rng);
        const Vec y = ref::mamba2_replay_step(prm.ref, cfg, seq, t);
        ASSERT_TRUE(y == ref::mamba2_conventional_step(prm.ref, S, t)) << s.name << " step " << step;
        ASSERT_TRUE(seq.S0 == S) << s.name << " step " << step;
        seq.cursor = ref::commit(seq.cursor, 1, cfg);
      }
    }
  }
}

// The closed form (prefix sums, decays from P_p - P_j, B.C inner products) and the definition
// (sequential fold) round differently. Both are fp64; the bound is the float32 analysis of
// test_mamba2_util.h with u = 2^-53: the closed form within (N + m + 32 + kappa) u M|C|, the
// m sequential steps of the definition within m (32 + 10 |delta A|max) u M|C| plus the N-term
// readout: a few 1e-13 of M|C| here, far below 1e-12.
TEST(Mamba2Oracle, ClosedFormEqualsMaterialisedDefinition) {
  const uint64_t seed = testing::test_seed(202);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Shape& s : {kSmall, kOddA, kOddB}) {
    for (const int L : {2, 4, 8, 16, 32}) {
      SCOPED_TRACE(std::string(s.name) + " L=" + std::to_string(L));
      Rng rng(seed + L);
      const Params prm(s, Options{DType::kF32, false, L % 4 == 0, L != 8}, rng);
      const RingConfig cfg{L, 1, RingMode::kDecode};
      ref::Mamba2Seq seq = ref::mamba2_new_seq(prm.ref, cfg);
      Vec M(s.H * s.P * s.N, 0.0), unused(M.size(), 0.0);
      std::vector<double> max_dA(s.H, 0.0);
      const int steps = s.H * s.P * s.N > 10000 ? 2 * L + 3 : 3 * L + 5;
      for (int step = 0; step < steps; ++step) {
        const ref::Mamba2Token t = prm.token(rng);
        const int64_t m = seq.cursor.h + 1;
        Vec cur(s.H);
        std::vector<const Vec*> window;
        for (int64_t l = 0; l + 1 < m; ++l) window.push_back(&seq.ring[ref::ring_row(seq.cursor, l, cfg)].delta);
        for (int64_t h = 0; h < s.H; ++h) {
          cur[h] = ref::mamba2_delta(prm.ref, t, h);
          max_dA[h] = std::max(max_dA[h], std::abs(cur[h] * prm.A(h)));
        }
        window.push_back(&cur);
        const Window w = window_of(prm, window);
        const Vec cf = ref::mamba2_replay_closed_form(prm.ref, cfg, seq, t);
        const Vec y = ref::mamba2_replay_step(prm.ref, cfg, seq, t);
        advance(prm, t, M, unused);
        Vec k(s.H);
        for (int64_t h = 0; h < s.H; ++h) k[h] = 2.0 * s.N + w.k[h] + m * (32.0 + 10.0 * max_dA[h]);
        const Vec bound = y_bound(prm, t, y, Vec(M.size(), 0.0), Vec(s.H, 0.0), M, k, kU64);
        ASSERT_EQ(within(cf, y, bound, 0.0), "") << "step " << step << ", " << m << " records";
        seq.cursor = ref::commit(seq.cursor, 1, cfg);
      }
    }
  }
}

// Verify is defined by the same sequential fold as the conventional step, so its outputs and
// flushed checkpoints equal sequential decoding exactly, rejected drafts included.
TEST(Mamba2Oracle, VerifyIsSequentialDecoding) {
  const uint64_t seed = testing::test_seed(203);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Shape& s : {kSmall, kOddB}) {
    for (const int T : {1, 2, 3, 4, 8}) {
      for (const int L : {2 * T, 2 * T + 3, 4 * T}) {
        SCOPED_TRACE(std::string(s.name) + " T=" + std::to_string(T) + " L=" + std::to_string(L));
        Rng rng(seed + 10 * T + L);
        const Params prm(s, Options{}, rng);
        const RingConfig cfg{L, T, RingMode::kSpeculative};
        ref::Mamba2Seq seq = ref::mamba2_new_seq(prm.ref, cfg);
        Vec S(s.H * s.P * s.N, 0.0);
        int flushes = 0;
        for (int step = 0; step < 60; ++step) {
          const int Tb = static_cast<int>(rng.integer(1, T)), n = static_cast<int>(rng.integer(1, Tb));
          std::vector<ref::Mamba2Token> toks;
          for (int i = 0; i < Tb; ++i) toks.push_back(prm.token(rng));
          const bool flush = seq.cursor.is_flush;
          const std::vector<Vec> ys = ref::mamba2_verify(prm.ref, cfg, seq, toks);
          if (flush) {
            ASSERT_TRUE(seq.S0 == S) << "step " << step;
            ++flushes;
          }
          Vec Sd = S;
          for (int i = 0; i < Tb; ++i) {
            ASSERT_TRUE(ys[i] == ref::mamba2_conventional_step(prm.ref, Sd, toks[i])) << "step " << step << " token " << i;
            if (i + 1 == n) S = Sd;
          }
          seq.cursor = ref::commit(seq.cursor, n, cfg);
        }
        EXPECT_GT(flushes, 0);
      }
    }
  }
}

}  // namespace
}  // namespace replayssm
