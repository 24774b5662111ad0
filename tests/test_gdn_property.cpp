// Property test: thousands of random cases (shape, gate kind, input dtype, beta rounding, q scale,
// op, L, T, pool size, live sequences, pad rows and pad id, per-row T_b, acceptance, slot reuse),
// each run for a few steps in lock-step with the fp64 oracle and the conventional stream by the
// Session of test_gdn_harness.h. One fixed, printed seed (RSSM_SEED overrides it).
#include <gtest/gtest.h>

#include "test_gdn_harness.h"

namespace replayssm::testing::gdnt {
namespace {

TEST(GdnProperty, RandomCasesMatchOracle) {
  const uint64_t seed = test_seed(424242);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("[ gdn      ] property seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  constexpr int kCases = 3000;
  Stats worst;
  int64_t steps = 0, flushes = 0;
  for (int i = 0; i < kCases; ++i) {
    Cfg c;
    const int64_t H = rng.integer(1, 3);
    c.shape = Shape{"prop", H, H * rng.integer(1, 3), rng.integer(1, 9), rng.integer(1, 7)};
    c.gate = rng.integer(0, 1) ? gdn::Gate::kChannel : gdn::Gate::kScalar;
    c.dtype = rng.integer(0, 1) ? DType::kBF16 : DType::kF32;
    c.beta_bf16 = rng.integer(0, 1);
    c.scale = rng.integer(0, 3) ? 0.0f : static_cast<float>(rng.uniform(0.1, 2.0));
    const int64_t kind = rng.integer(0, 5);
    const Op op = kind == 0 ? Op::kConventional : kind <= 2 ? Op::kReplay : Op::kVerify;
    if (op == Op::kVerify) {
      const int T = static_cast<int>(rng.integer(1, 8));
      c.ring = {static_cast<int32_t>(rng.integer(2 * T, 2 * T + 10)), T, RingMode::kSpeculative};
    } else {
      c.ring = {static_cast<int32_t>(rng.integer(1, 12)), 1, RingMode::kDecode};
    }
    c.slots = rng.integer(2, 7);
    c.pad = rng.integer(0, 1) ? -1 : static_cast<int32_t>(c.slots + rng.integer(0, 100));
    const int64_t live = rng.integer(1, c.slots);
    const int64_t n = rng.integer(3, 3 + 2 * c.ring.L);
    SCOPED_TRACE("case " + std::to_string(i) + ": " + c.describe());
    const Stats st = run_random(c, op, n, live, rng.gen(), 0.1, /*check_repeat=*/i % 10 == 0);
    ASSERT_FALSE(HasFailure());
    steps += st.steps, flushes += st.flushes;
    worst.y = std::max(worst.y, c.dtype == DType::kF32 ? st.y : 0.0);
    worst.state = std::max(worst.state, st.state), worst.u = std::max(worst.u, st.u);
    worst.key = std::max(worst.key, st.key), worst.gate = std::max(worst.gate, st.gate);
  }
  worst.steps = steps, worst.flushes = flushes;
  std::printf("[ gdn      ] property: %d cases, %s (y over float32 cases)\n", kCases,
              worst.str().c_str());
}

}  // namespace
}  // namespace replayssm::testing::gdnt
