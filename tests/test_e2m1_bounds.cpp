// The division-free NVFP4 block encoder of the CUDA kernels (src/common/e2m1_bounds.h) against the
// codec's division (codec_math.h): the same E2M1 codes on quotients within a few float32 steps of
// every tie, at random, at +-0, +-Inf and tiny x, for block multipliers of every binade
// (subnormal ones included), and the same bytes for whole blocks (NaN, Inf, zero and subnormal
// blocks, zero global scale). A positive control shows the near-tie inputs do tell a bound that is
// half a step off.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>

#include "common/codec_math.h"
#include "common/e2m1_bounds.h"
#include "test_util.h"

namespace replayssm {
namespace {

namespace cm = ::replayssm::codec;
using testing::Rng;
using testing::test_seed;

/// A block multiplier as the encoder forms it: an E4M3 value times a global scale of any binade
/// (down to products in float32's subnormals).
float random_sb(Rng& rng) {
  const float e4 = cm::e4m3_decode(static_cast<uint8_t>(rng.integer(1, 0x7e)));
  const float s2 = std::ldexp(static_cast<float>(rng.uniform(1.0, 2.0)),
                              static_cast<int>(rng.integer(-149, 117)));
  return cm::mul_rn(e4, s2);
}

TEST(E2m1Bounds, CodesEqualTheDivisionNearEveryTie) {
  const uint64_t seed = test_seed(611);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 1.0f, 6.0f, 0.5f};
  int64_t checked = 0, naive_wrong = 0;
  for (int i = 0; i < 20000; ++i) {
    const float sb = random_sb(rng);
    if (!(sb > 0.0f)) continue;
    float bound[7], naive[7];
    cm::e2m1_bounds(sb, bound);
    // Positive control: the midpoints alone (no half step), rounded down.
    const double mids[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
    for (int k = 0; k < 7; ++k) naive[k] = cm::f32_round_down(mids[k] * sb);
    auto check = [&](float x) {
      const uint8_t want = cm::e2m1_encode(cm::div_rn(x, sb));
      ASSERT_EQ(cm::e2m1_encode_bounded(x, bound), want)
          << "x " << x << " sb " << sb << " x / sb " << static_cast<double>(x) / sb;
      naive_wrong += cm::e2m1_encode_bounded(x, naive) != want;
      ++checked;
    };
    for (float t : ties) {  // x = RN(t * sb), then 40 float steps either side
      const float x0 = cm::mul_rn(t, sb);
      float up = x0, down = x0;
      for (int k = 0; k < 40; ++k) {
        check(up), check(-up), check(down), check(-down);
        up = std::nextafter(up, INFINITY), down = std::nextafter(down, 0.0f);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    for (int k = 0; k < 20; ++k)  // anywhere in the block's range and beyond
      check(cm::mul_rn(sb, static_cast<float>(rng.uniform(-9.0, 9.0))));
    check(0.0f), check(-0.0f), check(INFINITY), check(-INFINITY), check(FLT_TRUE_MIN),
        check(-FLT_TRUE_MIN), check(FLT_MAX), check(-FLT_MAX);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(checked, 3000000);
  EXPECT_GT(naive_wrong, 1000) << "the near-tie inputs no longer reach the ties";
}

TEST(E2m1Bounds, BlocksEqualTheCodecsBlockEncoder) {
  const uint64_t seed = test_seed(612);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (int i = 0; i < 200000; ++i) {
    float x[16];
    const int kind = static_cast<int>(rng.integer(0, 5));
    const int e = static_cast<int>(rng.integer(-150, 120));
    for (float& v : x) v = std::ldexp(static_cast<float>(rng.uniform(-1.0, 1.0)), e);
    if (kind == 1) x[rng.integer(0, 15)] = NAN;
    if (kind == 2) x[rng.integer(0, 15)] = rng.integer(0, 1) ? INFINITY : -INFINITY;
    if (kind == 3)
      for (float& v : x) v = rng.integer(0, 1) ? 0.0f : -0.0f;
    if (kind == 4) x[rng.integer(0, 15)] *= 64.0f;  // one large element: small ones round to 0
    // The global scale as encode_group forms it from a group amax (or 0, or one of any binade).
    float amax = 0.0f;
    for (float v : x) amax = cm::amax_step(amax, v);
    const int s = static_cast<int>(rng.integer(0, 3));
    const float s2 = s == 0   ? cm::nvfp4_global_scale(amax)
                     : s == 1 ? 0.0f
                     : s == 2 ? cm::nvfp4_global_scale(cm::mul_rn(amax, 4.0f))
                              : std::ldexp(1.0f, static_cast<int>(rng.integer(-149, 100)));
    uint8_t want[8], got[8];
    const uint8_t dw = cm::nvfp4_encode_block(x, s2, want);
    const uint8_t dg = cm::nvfp4_encode_block_bounded(x, s2, got);
    ASSERT_EQ(dg, dw) << "block " << i << " s2 " << s2;
    for (int j = 0; j < 8; ++j) ASSERT_EQ(got[j], want[j]) << "block " << i << " byte " << j;
  }
}

}  // namespace
}  // namespace replayssm
