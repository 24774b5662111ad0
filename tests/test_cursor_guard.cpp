// A corrupt cursor (h near INT32_MAX, found by a newcomer's review: h + T overflowed the check)
// must raise SlotError from every replay op and leave every buffer as it was.
#include <gtest/gtest.h>

#include <climits>
#include <vector>

#include "replayssm/errors.h"
#include "replayssm/gdn.h"
#include "replayssm/mamba2.h"

namespace replayssm {
namespace {

TensorView f32(std::vector<float>& v, std::initializer_list<int64_t> s) {
  return make_view(v.data(), DType::kF32, s);
}

struct OneSlot {
  std::vector<int32_t> origin{0}, h{INT32_MAX}, ids{0}, ntok{2};
  std::vector<int8_t> flush{0};
  RingCursors cursors(RingConfig cfg) {
    RingCursors c;
    c.origin = make_view(origin.data(), DType::kI32, {1});
    c.h = make_view(h.data(), DType::kI32, {1});
    c.is_flush = make_view(flush.data(), DType::kI8, {1});
    c.config = cfg;
    return c;
  }
  Rows rows(bool with_ntok) {
    return Rows{make_view(ids.data(), DType::kI32, {1}), -1,
                with_ntok ? make_view(ntok.data(), DType::kI32, {1}) : TensorView{}};
  }
};

TEST(CursorGuard, Mamba2ReplayAndVerifyRejectOverflowingH) {
  const int64_t H = 2, P = 3, N = 4, G = 1, L = 4;
  std::vector<float> A_log(H, 0.5f), dt_bias(H, 0.1f), x(2 * H * P, 1.0f), dt(2 * H, 0.0f),
      B(2 * G * N, 1.0f), C(2 * G * N, 1.0f), y(2 * H * P, 7.0f), S(H * P * N, 3.0f),
      rx(H * L * P, 5.0f), rdt(H * L, 5.0f), rB(G * L * N, 5.0f);
  const std::vector<float> y0 = y, S0 = S, rx0 = rx;
  mamba2::Layer layer{{H, P, N, G}, f32(A_log, {H}), f32(dt_bias, {H}), {}, true};
  mamba2::Cache cache{f32(S, {1, H, P, N}), f32(rx, {1, H, L, P}), f32(rdt, {1, H, L}),
                      f32(rB, {1, G, L, N})};
  OneSlot one;
  for (int32_t h : {INT32_MAX, INT32_MAX - 1, static_cast<int32_t>(L)}) {
    one.h[0] = h;
    RingCursors dec = one.cursors({L, 1, RingMode::kDecode});
    mamba2::Tokens t1{f32(x, {1, H, P}), f32(dt, {1, H}), f32(B, {1, G, N}), f32(C, {1, G, N}), {}};
    EXPECT_THROW(mamba2::replay_step(layer, cache, dec, t1, one.rows(false), f32(y, {1, H, P})),
                 SlotError) << h;
    RingCursors spec = one.cursors({L, 2, RingMode::kSpeculative});
    mamba2::Tokens t2{f32(x, {1, 2, H, P}), f32(dt, {1, 2, H}), f32(B, {1, 2, G, N}),
                      f32(C, {1, 2, G, N}), {}};
    EXPECT_THROW(mamba2::verify(layer, cache, spec, t2, one.rows(true), f32(y, {1, 2, H, P})),
                 SlotError) << h;
  }
  EXPECT_EQ(y, y0);
  EXPECT_EQ(S, S0);
  EXPECT_EQ(rx, rx0);
}

TEST(CursorGuard, GdnAndKdaReplayAndVerifyRejectOverflowingH) {
  const int64_t H = 1, HV = 2, K = 4, V = 3, L = 4;
  for (bool kda : {false, true}) {
    const int64_t gw = kda ? K : 1;
    std::vector<float> A_log(HV, 0.5f), dt_bias(HV * gw, 0.1f), q(2 * H * K, 1.0f),
        k(2 * H * K, 1.0f), v(2 * HV * V, 1.0f), a(2 * HV * gw, 0.0f), b(2 * HV, 0.0f),
        y(2 * HV * V, 7.0f), S(HV * V * K, 3.0f), ru(HV * L * V, 5.0f), rk(H * L * K, 5.0f),
        rg(HV * L * gw, -1.0f);
    const std::vector<float> y0 = y, S0 = S, ru0 = ru;
    gdn::Layer layer{{H, HV, K, V, kda ? gdn::Gate::kChannel : gdn::Gate::kScalar},
                     f32(A_log, {HV}), kda ? f32(dt_bias, {HV, K}) : f32(dt_bias, {HV})};
    gdn::Cache cache{f32(S, {1, HV, V, K}), f32(ru, {1, HV, L, V}), f32(rk, {1, H, L, K}),
                     kda ? f32(rg, {1, HV, L, K}) : f32(rg, {1, HV, L})};
    OneSlot one;
    for (int32_t h : {INT32_MAX, INT32_MAX - 1, static_cast<int32_t>(L)}) {
      one.h[0] = h;
      RingCursors dec = one.cursors({L, 1, RingMode::kDecode});
      gdn::Tokens t1{f32(q, {1, H, K}), f32(k, {1, H, K}), f32(v, {1, HV, V}),
                     kda ? f32(a, {1, HV, K}) : f32(a, {1, HV}), f32(b, {1, HV})};
      EXPECT_THROW(gdn::replay_step(layer, cache, dec, t1, one.rows(false), f32(y, {1, HV, V})),
                   SlotError) << h << (kda ? " kda" : " gdn");
      RingCursors spec = one.cursors({L, 2, RingMode::kSpeculative});
      gdn::Tokens t2{f32(q, {1, 2, H, K}), f32(k, {1, 2, H, K}), f32(v, {1, 2, HV, V}),
                     kda ? f32(a, {1, 2, HV, K}) : f32(a, {1, 2, HV}), f32(b, {1, 2, HV})};
      EXPECT_THROW(gdn::verify(layer, cache, spec, t2, one.rows(true), f32(y, {1, 2, HV, V})),
                   SlotError) << h << (kda ? " kda" : " gdn");
    }
    EXPECT_EQ(y, y0);
    EXPECT_EQ(S, S0);
    EXPECT_EQ(ru, ru0);
  }
}

}  // namespace
}  // namespace replayssm
