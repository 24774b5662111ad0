// Self-checks of the fp64 GDN/KDA oracle: a worked example from the formulas, L = 1 replay equal
// to the conventional step exactly, the output-only closed form and the UT/WY chunk form equal to
// the materialised definition, and verify equal to sequential conventional steps (drafts included).
#include <gtest/gtest.h>

#include <cmath>

#include "test_gdn_harness.h"

namespace replayssm::testing::gdnt {
namespace {

using gdn::Gate;
using ref::Vec;

// fp64 tolerance. u = 2^-53 ~ 1.1e-16; one evaluation is a sum of <= 178 products (see the fp32
// analysis in test_gdn_harness.h), whose worst-case error relative to the head maximum is
// 178 u sqrt(K) ~ 2.2e-13. Two formulations of the same step differ by at most twice that:
// 1e-12 bounds it. (An index or decay error shows up at >= 1e-3.)
constexpr double kForm = 1e-12;

ref::GdnParams params(const Cfg& c, Rng& rng) { return Pool(c, rng).params(); }

Cfg make(Shape sh, Gate gate, RingConfig ring, bool beta_bf16 = false) {
  Cfg c;
  c.shape = sh, c.gate = gate, c.ring = ring, c.beta_bf16 = beta_bf16;
  return c;
}

// Two steps worked by hand from the contract (gdn.h): H = 1, HV = 2 (both value heads read key
// head 0), K = 2, V = 1; value head 1 takes a KDA-like different decay per channel in the KDA case.
TEST(GdnOracle, WorkedExampleFromTheFormulas) {
  for (bool kda : {false, true}) {
    SCOPED_TRACE(kda ? "KDA" : "GDN");
    ref::GdnParams p;
    p.H = 1, p.HV = 2, p.K = 2, p.V = 1, p.kda = kda;
    p.A_log = {std::log(0.5), 0.0};
    p.dt_bias = kda ? Vec{0.1, -0.2, 0.3, 0.0} : Vec{0.1, -0.2};
    p.scale = 0.0;
    auto softplus = [](double x) { return std::log(1.0 + std::exp(x)); };
    const ref::GdnToken t1{{3.0, 4.0},
                           {1.0, 0.0},
                           {2.0, -1.0},
                           kda ? Vec{0.4, -1.0, 0.2, 0.7} : Vec{0.4, 0.2},
                           {0.0, 1.0}};
    const ref::GdnToken t2{{0.0, 1.0},
                           {1.0, 1.0},
                           {-1.0, 0.5},
                           kda ? Vec{-0.3, 0.5, 1.0, -2.0} : Vec{-0.3, 1.0},
                           {2.0, -1.0}};
    Vec S(p.HV * p.V * p.K, 0.0);
    Vec want_S(S.size(), 0.0);
    for (const ref::GdnToken* t : {&t1, &t2}) {
      const Vec y = ref::gdn_conventional_step(p, S, *t);
      const double nk = std::sqrt(t->k[0] * t->k[0] + t->k[1] * t->k[1] + 1e-6);
      const double nq = std::sqrt(t->q[0] * t->q[0] + t->q[1] * t->q[1] + 1e-6);
      const double kh[2] = {t->k[0] / nk, t->k[1] / nk};
      const double qh[2] = {t->q[0] / nq / std::sqrt(2.0), t->q[1] / nq / std::sqrt(2.0)};
      for (int vh = 0; vh < 2; ++vh) {
        double alpha[2];
        for (int c = 0; c < 2; ++c) {
          const int i = kda ? vh * 2 + c : vh;
          alpha[c] = std::exp(-std::exp(p.A_log[vh]) * softplus(t->a[i] + p.dt_bias[i]));
        }
        const double beta = 1.0 / (1.0 + std::exp(-t->b[vh]));
        double* s = &want_S[vh * 2];
        const double hk = s[0] * alpha[0] * kh[0] + s[1] * alpha[1] * kh[1];
        const double u = beta * (t->v[vh] - hk);
        for (int c = 0; c < 2; ++c) s[c] = s[c] * alpha[c] + u * kh[c];
        EXPECT_NEAR(y[vh], s[0] * qh[0] + s[1] * qh[1], 1e-15) << "value head " << vh;
      }
      for (size_t i = 0; i < S.size(); ++i) EXPECT_NEAR(S[i], want_S[i], 1e-15) << i;
    }
  }
}

// beta_bf16 rounds a float32 sigmoid to bfloat16: sigmoid(0.3) = 0.57444..., whose nearest bf16
// is 0.57421875 (8 significant bits); seen through y = beta v (k^.q^) from a zero state.
TEST(GdnOracle, BetaBf16Rounding) {
  ref::GdnParams p;
  p.H = p.HV = p.K = p.V = 1, p.A_log = {0.0}, p.dt_bias = {0.0}, p.beta_bf16 = true;
  Vec S(1, 0.0);
  const ref::GdnToken t{{1.0}, {1.0}, {1.0}, {0.0}, {0.3}};
  const double kq = 1.0 / (1.0 + 1e-6);  // k^ q^ with K = 1, scale 1
  EXPECT_NEAR(ref::gdn_conventional_step(p, S, t)[0], 0.57421875 * kq, 1e-15);
  p.beta_bf16 = false;
  S = {0.0};
  EXPECT_NEAR(ref::gdn_conventional_step(p, S, t)[0], 1.0 / (1.0 + std::exp(-0.3)) * kq, 1e-15);
}

// L = 1: every replay step is a flush and equals the conventional step exactly.
TEST(GdnOracle, L1ReplayEqualsConventionalExactly) {
  const uint64_t seed = test_seed(8001);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (Gate gate : {Gate::kScalar, Gate::kChannel}) {
    const Cfg c = make(kOdd, gate, {1, 1, RingMode::kDecode}, true);
    const ref::GdnParams p = params(c, rng);
    ref::GdnSeq s = ref::gdn_new_seq(p, c.ring);
    Vec S(p.HV * p.V * p.K, 0.0);
    for (int step = 0; step < 20; ++step) {
      const ref::GdnToken t = random_token(rng, c);
      ASSERT_TRUE(s.cursor.is_flush);
      ASSERT_EQ(ref::gdn_replay_step(p, c.ring, s, t), ref::gdn_conventional_step(p, S, t)) << step;
      ASSERT_EQ(s.S0, S) << step;
      s.cursor = ref::commit(s.cursor, 1, c.ring);
    }
  }
}

// The output-only closed form (method.md §3.3(a)) equals the materialised definition at every
// cursor position, flush steps included.
TEST(GdnOracle, ClosedFormEqualsMaterialisedStep) {
  const uint64_t seed = test_seed(8002);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  const struct {
    Shape sh;
    int L;
    int steps;
  } cases[] = {{kSmall, 8, 40}, {kTiny, 5, 30}, {kOdd, 16, 20}, {kQwen4B, 4, 5}, {kKimi, 4, 5}};
  for (const auto& cs : cases)
    for (Gate gate : {Gate::kScalar, Gate::kChannel}) {
      const Cfg c = make(cs.sh, gate, {cs.L, 1, RingMode::kDecode});
      SCOPED_TRACE(c.describe());
      const ref::GdnParams p = params(c, rng);
      ref::GdnSeq s = ref::gdn_new_seq(p, c.ring);
      for (int step = 0; step < cs.steps; ++step) {
        const ref::GdnToken t = random_token(rng, c);
        const Vec closed = ref::gdn_replay_closed_form(p, c.ring, s, t);
        const Vec y = ref::gdn_replay_step(p, c.ring, s, t);
        ASSERT_LE(head_err(closed, y, p.HV), kForm) << "step " << step << " h " << s.cursor.h;
        s.cursor = ref::commit(s.cursor, 1, c.ring);
      }
    }
}

// The UT/WY chunk form (method.md §4.4) equals verify's definition (materialise, then T steps)
// for every window, flush rows included.
TEST(GdnOracle, ChunkFormEqualsVerify) {
  const uint64_t seed = test_seed(8003);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  const struct {
    Shape sh;
    RingConfig ring;
    int steps;
  } cases[] = {{kSmall, {8, 4, RingMode::kSpeculative}, 40},
               {kTiny, {16, 8, RingMode::kSpeculative}, 40},
               {kOdd, {6, 3, RingMode::kSpeculative}, 15},
               {kQwen122B, {4, 2, RingMode::kSpeculative}, 3},
               {kKimi, {4, 2, RingMode::kSpeculative}, 3}};
  for (const auto& cs : cases)
    for (Gate gate : {Gate::kScalar, Gate::kChannel}) {
      const Cfg c = make(cs.sh, gate, cs.ring);
      SCOPED_TRACE(c.describe());
      const ref::GdnParams p = params(c, rng);
      ref::GdnSeq s = ref::gdn_new_seq(p, c.ring);
      for (int step = 0; step < cs.steps; ++step) {
        std::vector<ref::GdnToken> toks(rng.integer(1, c.ring.T));
        for (auto& t : toks) t = random_token(rng, c);
        const std::vector<Vec> chunk = ref::gdn_verify_chunk_form(p, c.ring, s, toks);
        const std::vector<Vec> ys = ref::gdn_verify(p, c.ring, s, toks);
        for (size_t i = 0; i < toks.size(); ++i)
          ASSERT_LE(head_err(chunk[i], ys[i], p.HV), kForm) << "step " << step << " token " << i;
        s.cursor = ref::commit(s.cursor, static_cast<int32_t>(rng.integer(1, toks.size())), c.ring);
      }
    }
}

// verify outputs are T sequential conventional steps from the committed state, drafts included;
// the checkpoint after a flush is the conventional state after the committed tokens.
TEST(GdnOracle, VerifyEqualsSequentialConventionalSteps) {
  const uint64_t seed = test_seed(8004);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  const Tolerance tol;
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (RingConfig ring :
         {RingConfig{8, 4, RingMode::kSpeculative}, RingConfig{2, 1, RingMode::kSpeculative},
          RingConfig{16, 8, RingMode::kSpeculative}}) {
      const Cfg c = make(kSmall, gate, ring, gate == Gate::kChannel);
      SCOPED_TRACE(c.describe());
      const ref::GdnParams p = params(c, rng);
      ref::GdnSeq s = ref::gdn_new_seq(p, c.ring);
      Vec committed(p.HV * p.V * p.K, 0.0);
      int flushes = 0;
      for (int step = 0; step < 300; ++step) {
        std::vector<ref::GdnToken> toks(rng.integer(1, c.ring.T));
        for (auto& t : toks) t = random_token(rng, c);
        const bool flush = s.cursor.is_flush;
        const std::vector<Vec> ys = ref::gdn_verify(p, c.ring, s, toks);
        if (flush) {
          ++flushes;
          ASSERT_LE(head_err(s.S0, committed, p.HV), tol.oracle) << "checkpoint at step " << step;
        }
        Vec S = committed;
        const int32_t n = static_cast<int32_t>(rng.integer(1, toks.size()));
        for (size_t i = 0; i < toks.size(); ++i) {
          ASSERT_LE(head_err(ys[i], ref::gdn_conventional_step(p, S, toks[i]), p.HV), tol.oracle)
              << "step " << step << " token " << i;
          if (static_cast<int32_t>(i) + 1 == n) committed = S;
        }
        s.cursor = ref::commit(s.cursor, n, c.ring);
      }
      EXPECT_GT(flushes, 20);
    }
}

}  // namespace
}  // namespace replayssm::testing::gdnt
