// The codecs (include/replayssm/codecs.h) on the CPU against the oracle (reference/codec_ref.h):
// every E2M1 and E4M3 code point, round trips, ties to even, saturation, subnormals, NaN/Inf
// rules, NVFP4 and per-row FP8 tensors (codes and scales bit-identical to the oracle, derived
// error bounds), float16 stochastic rounding (oracle, statistics, keying), Philox4x32-10
// known answers, and typed errors that leave the outputs untouched.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "codec_ref.h"
#include "replayssm/codecs.h"
#include "replayssm/errors.h"
#include "test_util.h"

namespace replayssm::testing {
namespace {

namespace cd = ::replayssm::codecs;
namespace oracle = ::replayssm::ref::codec;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// Same value and sign (NaN equals NaN).
bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

/// Host buffers of an NVFP4 tensor [rows, n].
struct HostNvfp4 {
  int64_t rows, n, group_rows;
  std::vector<uint8_t> codes, scales;
  std::vector<float> globals;
  HostNvfp4(int64_t rows_, int64_t n_, int64_t g)
      : rows(rows_),
        n(n_),
        group_rows(g),
        codes(rows_ * n_ / 2, 0xAB),
        scales(rows_ * n_ / 16, 0xCD),
        globals(rows_ / g, -1.0f) {}
  cd::Nvfp4 view() {
    return {make_view(codes.data(), DType::kU8, {rows, n / 2}),
            make_view(scales.data(), DType::kU8, {rows, n / 16}),
            make_view(globals.data(), DType::kF32, {rows / group_rows}), group_rows};
  }
  int code(int64_t i) const { return (codes[i / 2] >> (4 * (i % 2))) & 0xf; }
};

std::vector<float> decode(HostNvfp4& q) {
  std::vector<float> y(q.rows * q.n, kNaN);
  cd::nvfp4_decode(q.view(), make_view(y.data(), DType::kF32, {q.rows, q.n}));
  return y;
}

/// Checks q (the encoding of x) and its decoded values bit for bit against the oracle, group by
/// group: codes, block scales, global scales.
void match_oracle(HostNvfp4& q, const std::vector<float>& x) {
  const std::vector<float> y = decode(q);
  const int64_t g = q.group_rows, rows = q.rows, ge = g * q.n;
  for (int64_t grp = 0; grp < rows / g; ++grp) {
    const std::vector<float> xg(x.begin() + grp * ge, x.begin() + (grp + 1) * ge);
    const oracle::Nvfp4Group o = oracle::nvfp4_encode(xg);
    const std::vector<double> oy = oracle::nvfp4_decode(o);
    EXPECT_EQ(bits(q.globals[grp]), bits(o.global)) << "group " << grp;
    for (int64_t b = 0; b < ge / 16; ++b)
      ASSERT_EQ(q.scales[grp * ge / 16 + b], o.block_scales[b])
          << "group " << grp << " block " << b;
    for (int64_t i = 0; i < ge; ++i) {
      ASSERT_EQ(q.code(grp * ge + i), o.codes[i])
          << "group " << grp << " element " << i << " x = " << xg[i];
      ASSERT_TRUE(same(y[grp * ge + i], oy[i]))
          << "element " << i << ": " << y[grp * ge + i] << " vs oracle " << oy[i];
    }
  }
}

/// Encodes x [rows, n] with group_rows g and matches the result against the oracle.
HostNvfp4 encode_and_match_oracle(std::vector<float> x, int64_t rows, int64_t n, int64_t g) {
  HostNvfp4 q(rows, n, g);
  cd::nvfp4_encode(make_view(x.data(), DType::kF32, {rows, n}), q.view());
  match_oracle(q, x);
  return q;
}

// ---- E2M1 / E4M3 code points -------------------------------------------------------------------

TEST(CodecsFormats, EveryE2M1CodeDecodesToTheOracleValueAndRoundTrips) {
  const double expect[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};  // models.md §4.1
  for (int c = 0; c < 16; ++c) {
    const double v = oracle::e2m1_value(c);
    EXPECT_TRUE(same(v, c < 8 ? expect[c] : -expect[c - 8])) << c;
    EXPECT_TRUE(same(cd::e2m1_decode(static_cast<uint8_t>(c)), v)) << c;
    EXPECT_TRUE(same(cd::e2m1_decode(static_cast<uint8_t>(c | 0xf0)), v)) << "high nibble ignored";
    EXPECT_EQ(cd::e2m1_encode(static_cast<float>(v)), c) << "round trip of code " << c;
  }
}

TEST(CodecsFormats, EveryE4M3CodeDecodesToTheOracleValueAndRoundTrips) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const double v = oracle::e4m3_value(c);
    const float d = cd::e4m3_decode(static_cast<uint8_t>(c));
    if (std::isnan(v)) {
      ++nans;
      EXPECT_EQ(c & 0x7f, 0x7f);
      EXPECT_EQ(bits(d), 0x7fc00000u) << "NaN code " << c << " decodes to the canonical NaN";
      continue;
    }
    EXPECT_TRUE(same(d, v)) << "code " << c << ": " << d << " vs " << v;
    EXPECT_EQ(cd::e4m3_encode(d), c) << "round trip of code " << c;
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(oracle::e4m3_value(0x7e), 448.0);
  EXPECT_EQ(oracle::e4m3_value(0x08), std::ldexp(1.0, -6));  // smallest normal
  EXPECT_EQ(oracle::e4m3_value(0x01), std::ldexp(1.0, -9));  // smallest subnormal
}

TEST(CodecsFormats, E2M1MidpointsTieToEvenAndNeighboursRoundToNearest) {
  struct Tie {
    float v;
    int code;
  };
  const Tie ties[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4},
                      {2.5f, 4},  {3.5f, 6},  {5.f, 6}};
  for (const Tie& t : ties) {
    EXPECT_EQ(cd::e2m1_encode(t.v), t.code) << t.v;
    EXPECT_EQ(cd::e2m1_encode(-t.v), t.code | 8) << -t.v;
    const int below = cd::e2m1_encode(std::nextafter(t.v, 0.f));
    const int above = cd::e2m1_encode(std::nextafter(t.v, 10.f));
    EXPECT_EQ(above, below + 1) << "around " << t.v;
    EXPECT_TRUE(t.code == below || t.code == above);
  }
}

TEST(CodecsFormats, E4M3MidpointsTieToEvenAndNeighboursRoundToNearest) {
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = cd::e4m3_decode(static_cast<uint8_t>(c));
    const float hi = cd::e4m3_decode(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: 5 significant bits
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2);
    const int even = c % 2 == 0 ? c : c + 1;
    EXPECT_EQ(cd::e4m3_encode(mid), even) << "tie " << mid;
    EXPECT_EQ(cd::e4m3_encode(-mid), even | 0x80) << "tie " << -mid;
    EXPECT_EQ(cd::e4m3_encode(std::nextafter(mid, 0.f)), c) << mid;
    EXPECT_EQ(cd::e4m3_encode(std::nextafter(mid, 1000.f)), c + 1) << mid;
  }
  // Subnormal corner cases: half the smallest subnormal ties to 0; the largest subnormal and
  // the smallest normal tie to the normal (even).
  EXPECT_EQ(cd::e4m3_encode(0x1p-10f), 0x00);
  EXPECT_EQ(cd::e4m3_encode(-0x1p-10f), 0x80);
  EXPECT_EQ(cd::e4m3_encode(0x1.8p-10f), 0x01);
  EXPECT_EQ(cd::e4m3_encode(7.5f * 0x1p-9f), 0x08);
  EXPECT_EQ(cd::e4m3_encode(FLT_TRUE_MIN), 0x00);
  EXPECT_EQ(cd::e4m3_encode(-0.0f), 0x80);
}

TEST(CodecsFormats, SaturationAndSpecials) {
  for (float v : {448.0f, 449.0f, 464.0f, 479.9f, 480.0f, 1e10f, FLT_MAX, kInf}) {
    EXPECT_EQ(cd::e4m3_encode(v), 0x7e) << v;
    EXPECT_EQ(cd::e4m3_encode(-v), 0xfe) << -v;
  }
  EXPECT_EQ(cd::e4m3_encode(kNaN), 0x7f);
  EXPECT_EQ(cd::e4m3_encode(-kNaN), 0xff);
  for (float v : {6.0f, 6.5f, 7.0f, 1e30f, kInf}) {
    EXPECT_EQ(cd::e2m1_encode(v), 0x7) << v;
    EXPECT_EQ(cd::e2m1_encode(-v), 0xf) << -v;
  }
  EXPECT_EQ(cd::e2m1_encode(kNaN), 0x7) << "E2M1 has no NaN: +6 (cuda_fp4.h's rule)";
  EXPECT_EQ(cd::e2m1_encode(-0.0f), 0x8);
}

TEST(CodecsFormats, EncodersMatchTheOracleOnRandomFloats) {
  const uint64_t seed = test_seed(601);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (int i = 0; i < 200000; ++i) {
    // Random sign, exponent in [2^-24, 2^12) and mantissa bits: every region of both formats.
    const uint32_t e = static_cast<uint32_t>(rng.integer(127 - 24, 127 + 11));
    const uint32_t u = (static_cast<uint32_t>(rng.integer(0, 1)) << 31) | (e << 23) |
                       static_cast<uint32_t>(rng.integer(0, (1 << 23) - 1));
    const float v = from_bits(u);
    ASSERT_EQ(cd::e4m3_encode(v), oracle::e4m3_round(v)) << v;
    ASSERT_EQ(cd::e2m1_encode(v), oracle::e2m1_round(v)) << v;
  }
}

// ---- Philox4x32-10 -----------------------------------------------------------------------------

TEST(CodecsPhilox, KnownAnswersOfRandom123) {
  // kat_vectors of the Random123 distribution (Salmon et al.): counter, key -> output.
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const cd::PhiloxWords w = cd::philox4x32_10(k.ctr, k.key);
    const auto o =
        oracle::philox4x32_10({k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}, {k.key[0], k.key[1]});
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(w.w[i], k.out[i]) << "word " << i;
      EXPECT_EQ(o[i], k.out[i]) << "oracle word " << i;
    }
  }
}

TEST(CodecsPhilox, SrWordsMatchTheOracleKeying) {
  Rng rng(test_seed(602));
  for (int i = 0; i < 2000; ++i) {
    const uint64_t seed = rng.gen(), index = rng.gen() >> rng.integer(0, 63);
    const uint32_t slot = static_cast<uint32_t>(rng.gen()), step = static_cast<uint32_t>(rng.gen());
    ASSERT_EQ(cd::sr_word(seed, slot, step, index), oracle::sr_word(seed, slot, step, index));
  }
}

// ---- float16 stochastic rounding
// -----------------------------------------------------------------

TEST(CodecsF16Sr, MatchesTheOracleOnRandomValuesAndWords) {
  const uint64_t seed = test_seed(603);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (int i = 0; i < 200000; ++i) {
    // Exponents from fp32 subnormals to beyond fp16's range.
    const uint32_t e = static_cast<uint32_t>(rng.integer(0, 127 + 17));
    const uint32_t u = (static_cast<uint32_t>(rng.integer(0, 1)) << 31) | (e << 23) |
                       static_cast<uint32_t>(rng.integer(0, (1 << 23) - 1));
    const uint32_t word = static_cast<uint32_t>(rng.gen());
    const float x = from_bits(u);
    const uint16_t h = cd::f16_sr(x, word);
    ASSERT_TRUE(same(oracle::f16_value(h), oracle::f16_sr(x, word >> 19)))
        << "x = " << x << " word " << word << ": " << oracle::f16_value(h) << " vs oracle "
        << oracle::f16_sr(x, word >> 19);
  }
}

TEST(CodecsF16Sr, RepresentableValuesNeverChange) {
  const uint32_t words[] = {0u, 1u << 19, 0x7fffffffu, 0xfff80000u, 0xffffffffu, 0x12345678u};
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;  // Inf / NaN
    const float x = static_cast<float>(oracle::f16_value(static_cast<uint16_t>(h)));
    for (uint32_t w : words) ASSERT_EQ(cd::f16_sr(x, w), h) << "fp16 " << h << " word " << w;
  }
}

TEST(CodecsF16Sr, SpecialsSubnormalsAndSaturation) {
  const uint32_t rmax = 0xffffffffu, rhalf = 4096u << 19;
  EXPECT_EQ(cd::f16_sr(kNaN, 0), 0x7e00);
  EXPECT_EQ(cd::f16_sr(-kNaN, 0), 0xfe00);
  EXPECT_EQ(cd::f16_sr(kInf, 0), 0x7bff);
  EXPECT_EQ(cd::f16_sr(-kInf, rmax), 0xfbff);
  EXPECT_EQ(cd::f16_sr(65504.0f, rmax), 0x7bff);
  EXPECT_EQ(cd::f16_sr(65519.0f, rmax), 0x7bff) << "would round to 65536: saturates";
  EXPECT_EQ(cd::f16_sr(1e9f, 0), 0x7bff);
  EXPECT_EQ(cd::f16_sr(-0.0f, rmax), 0x8000);
  // Half the smallest subnormal (2^-25): up exactly when r >= 4096.
  EXPECT_EQ(cd::f16_sr(0x1p-25f, rhalf - (1u << 19)), 0x0000);
  EXPECT_EQ(cd::f16_sr(0x1p-25f, rhalf), 0x0001);
  EXPECT_EQ(cd::f16_sr(-0x1p-25f, rhalf), 0x8001);
  // Just below the smallest normal: the carry gives 0x0400 (2^-14).
  EXPECT_EQ(cd::f16_sr(1023.5f * 0x1p-24f, rhalf), 0x0400);
  EXPECT_EQ(cd::f16_sr(1023.5f * 0x1p-24f, 0), 0x03ff);
  // Normal range: 1 + 2^-11 (half an ulp) with r = 4095 / 4096.
  EXPECT_EQ(cd::f16_sr(1.0f + 0x1p-11f, rhalf - (1u << 19)), 0x3c00);
  EXPECT_EQ(cd::f16_sr(1.0f + 0x1p-11f, rhalf), 0x3c01);
  // Carry into the exponent: just below 2 rounds up to 2.
  EXPECT_EQ(cd::f16_sr(std::nextafter(2.0f, 0.0f), 1u << 19), 0x4000);
  EXPECT_EQ(cd::f16_sr(FLT_TRUE_MIN, rmax), 0x0000) << "far below 2^-24 * 2^-13";
}

/// Runs f16_sr_encode on a [rows, n] float array with the given key values.
std::vector<uint16_t> sr_tensor(std::vector<float> x, int64_t rows, int64_t n, uint64_t seed,
                                std::vector<int32_t> slots, std::vector<int32_t> steps) {
  std::vector<uint16_t> y(x.size(), 0xffff);
  cd::SrKey key{seed, make_view(slots.data(), DType::kI32, {rows}),
                make_view(steps.data(), DType::kI32, {rows})};
  cd::f16_sr_encode(make_view(x.data(), DType::kF32, {rows, n}), key,
                    make_view(y.data(), DType::kF16, {rows, n}));
  return y;
}

TEST(CodecsF16Sr, TensorOpIsTheScalarRuleWithTheDocumentedKey) {
  const int64_t rows = 5, n = 37;  // n not a multiple of 4: partial last quad
  Rng rng(test_seed(604));
  std::vector<float> x(rows * n);
  for (float& v : x) v = static_cast<float>(rng.normal(0, 100));
  const std::vector<int32_t> slots = {3, -1, 7, 0, 123456}, steps = {0, 9, -5, 2147483647, 1};
  const uint64_t seed = 0x0123456789abcdefull;
  const std::vector<uint16_t> y = sr_tensor(x, rows, n, seed, slots, steps);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j)
      ASSERT_EQ(y[r * n + j],
                cd::f16_sr(x[r * n + j], oracle::sr_word(seed, static_cast<uint32_t>(slots[r]),
                                                         static_cast<uint32_t>(steps[r]), j)))
          << "row " << r << " element " << j;
}

TEST(CodecsF16Sr, KeyedBySeedSlotAndStep) {
  const int64_t n = 1024;
  Rng rng(test_seed(605));
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(rng.uniform(1.0, 2.0));  // not representable in fp16
  auto run = [&](uint64_t seed, int32_t slot, int32_t step) {
    return sr_tensor(x, 1, n, seed, {slot}, {step});
  };
  const auto base = run(42, 3, 10);
  EXPECT_EQ(base, run(42, 3, 10)) << "same (seed, slot, step) reproduces";
  int diff_step = 0, diff_slot = 0, diff_seed = 0;
  const auto s = run(42, 3, 11), sl = run(42, 4, 10), sd = run(43, 3, 10);
  for (int64_t j = 0; j < n; ++j) {
    diff_step += s[j] != base[j];
    diff_slot += sl[j] != base[j];
    diff_seed += sd[j] != base[j];
    ASSERT_LE(std::abs(static_cast<int>(s[j]) - static_cast<int>(base[j])), 1);
  }
  // Each element rounds up with probability p in (0, 1), independently between keys: about
  // 2 p (1 - p) n of 1024 differ (~340 for p uniform); 100 is far in the tail for fresh bits.
  EXPECT_GT(diff_step, 100) << "another step counter draws fresh bits";
  EXPECT_GT(diff_slot, 100);
  EXPECT_GT(diff_seed, 100);
  for (int32_t step = 0; step < 8; ++step)
    EXPECT_NE(cd::sr_word(42, 3, static_cast<uint32_t>(step), 0),
              cd::sr_word(42, 3, static_cast<uint32_t>(step + 1), 0));
}

TEST(CodecsF16Sr, MeanOfManyDrawsIsTheValue) {
  const uint64_t seed = test_seed(606);
  std::printf("[ info ] CodecsF16Sr.MeanOfManyDrawsIsTheValue: Philox seed %llu\n",
              static_cast<unsigned long long>(seed));
  const int64_t n = 4096, steps = 64, draws = n * steps;
  // Normal values with fractions 0.3, ~0.999 and ~0.0005 of an ulp, a negative one, a large
  // one, and fp16 subnormals (fraction quantised to 13 bits: bias <= 2^-13 ulp).
  const float values[] = {1.0f + 0.3f * 0x1p-10f,
                          3.0f + 8191.0f * 0x1p-23f,
                          100.0f + 0.015625f * 0x1p-3f,
                          -0.7f,
                          60000.3f,
                          3.3f * 0x1p-24f,
                          -0.01f * 0x1p-24f,
                          1023.9f * 0x1p-24f};
  for (float v : values) {
    // One row per step counter (slot 7 throughout): rows = steps.
    std::vector<int32_t> slot_ids(steps, 7), step_ids(steps);
    for (int32_t s = 0; s < steps; ++s) step_ids[s] = s;
    double sum = 0.0;
    for (uint16_t h : sr_tensor(std::vector<float>(draws, v), steps, n, seed, slot_ids, step_ids))
      sum += oracle::f16_value(h);
    // Rounds to lo or lo + ulp: the count of ups is Binomial(draws, p) with p = (v - lo) / ulp.
    const double a = std::fabs(v);
    const int e = a >= 0x1p-14 ? std::ilogb(a) : -14;
    const double ulp = std::ldexp(1.0, e - 10), lo = std::floor(a / ulp) * ulp;
    const double p = (a - lo) / ulp;
    const double mean = std::fabs(sum / draws);
    const double sigma = ulp * std::sqrt(p * (1 - p) / draws);
    const double bias = a < 0x1p-14 ? ulp * 0x1p-13 : 0.0;
    EXPECT_LE(std::fabs(mean - a), 6 * sigma + bias + 1e-300)
        << "v = " << v << " p = " << p << " mean " << mean << " (" << draws << " draws, seed "
        << seed << ")";
  }
}

// ---- NVFP4
// ---------------------------------------------------------------------------------------

TEST(CodecsNvfp4, MatchesTheOracleOnRandomGroupsOfVaryingScale) {
  const uint64_t seed = test_seed(607);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  const int64_t g = 8, rows = 6 * g, n = 64;
  std::vector<float> x(rows * n);
  for (int64_t grp = 0; grp < rows / g; ++grp) {
    const double mag = std::pow(10.0, rng.uniform(-30, 30));
    for (int64_t b = 0; b < g * n / 16; ++b) {
      // Some blocks far below the group's amax: E4M3-subnormal or flushed block scales.
      const double bm = rng.integer(0, 5) == 0 ? std::pow(2.0, -rng.uniform(6, 20)) : 1.0;
      for (int i = 0; i < 16; ++i)
        x[grp * g * n + b * 16 + i] = static_cast<float>(rng.normal() * mag * bm);
    }
  }
  encode_and_match_oracle(x, rows, n, g);
}

TEST(CodecsNvfp4, ErrorBoundOnRandomNormalData) {
  const uint64_t seed = test_seed(608);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  const int64_t g = 64, rows = 4 * g, n = 128;  // Mamba-2-like: P = 64 rows of N = 128
  std::vector<float> x(rows * n);
  for (float& v : x) v = static_cast<float>(rng.normal());
  HostNvfp4 q = encode_and_match_oracle(x, rows, n, g);
  const std::vector<float> y = decode(q);
  // With s_b = E4M3(d) * s2 the element is q = x / s_b. Inside [-6, 6] E2M1 round to nearest
  // errs by at most half the local spacing: 0.25 below 2, |q| / 4 above (spacing 1 on [2, 4),
  // 2 on [4, 6]). Beyond 6 (E4M3(d) rounded below d) the code saturates to exactly +-6 s_b.
  double num = 0, den = 0;
  for (int64_t i = 0; i < rows * n; ++i) {
    const int64_t r = i / n;
    const float sb = q.globals[r / g] * static_cast<float>(oracle::e4m3_value(q.scales[i / 16]));
    const double ax = std::fabs(x[i]);
    if (ax <= 6.0 * sb)
      ASSERT_LE(std::fabs(x[i] - y[i]), std::max(0.25 * sb, ax / 4) * (1 + 1e-6)) << i;
    else
      ASSERT_EQ(y[i], std::copysign(6.0f * sb, x[i])) << i;
    num += (x[i] - y[i]) * (x[i] - static_cast<double>(y[i]));
    den += static_cast<double>(x[i]) * x[i];
  }
  std::printf("[ info ] NVFP4 relative RMS error on N(0,1) data: %.4f\n", std::sqrt(num / den));
  EXPECT_LT(std::sqrt(num / den), 0.25) << "implied by the per-element bound";
}

TEST(CodecsNvfp4, PackingAndGlobalScale) {
  std::vector<float> x(16, 0.0f);
  x[0] = 6.0f, x[1] = -1.0f, x[15] = 0.5f;
  HostNvfp4 q = encode_and_match_oracle(x, 1, 16, 1);
  EXPECT_EQ(bits(q.globals[0]), bits(6.0f / 2688.0f));
  EXPECT_EQ(q.scales[0], 0x7e) << "the block holding the group amax gets d = 448";
  EXPECT_EQ(q.codes[0], 0xA7) << "element 0 (+6, code 7) low nibble, element 1 (-1, code 0xA) high";
  EXPECT_EQ(q.codes[7], 0x10) << "element 15 (0.5, code 1) in the high nibble of byte 7";
}

TEST(CodecsNvfp4, ZeroGroupsAndZeroBlocks) {
  const int64_t n = 32;
  std::vector<float> x(2 * n, 0.0f);
  x[n + 20] = -3.0f;  // group 1 (row 1): block 0 all zero, block 1 not
  x[5] = -0.0f;
  HostNvfp4 q = encode_and_match_oracle(x, 2, n, 1);
  EXPECT_EQ(q.globals[0], 0.0f);
  EXPECT_EQ(q.scales[0], 0);
  EXPECT_EQ(q.scales[1], 0);
  EXPECT_EQ(q.scales[2], 0) << "zero block in a nonzero group";
  EXPECT_NE(q.scales[3], 0);
  for (int64_t j = 0; j < n / 2 + 8; ++j) EXPECT_EQ(q.codes[j], 0) << "byte " << j;
  const std::vector<float> y = decode(q);
  for (int64_t i = 0; i < n + 16; ++i) EXPECT_EQ(bits(y[i]), 0u) << "+0 for element " << i;
}

TEST(CodecsNvfp4, SubnormalAndFlushedBlockScales) {
  // Group amax 2688 -> s2 = 1. Block scales d = amax_b / 6.
  std::vector<float> x(64, 0.0f);
  x[0] = 2688.0f;  // block 0: d = 448
  x[16] = 0.03f;   // block 1: d = 0.005 -> E4M3 subnormal 3 * 2^-9
  x[17] = -0.011f;
  x[32] = 0.005f;        // block 2: d < 2^-10 -> 0: the block flushes to zero
  x[48] = 6 * 0x1p-10f;  // block 3: d = 2^-10 exactly, ties to 0
  HostNvfp4 q = encode_and_match_oracle(x, 1, 64, 1);
  EXPECT_EQ(q.globals[0], 1.0f);
  EXPECT_EQ(q.scales[0], 0x7e);
  EXPECT_EQ(q.scales[1], 0x03);
  EXPECT_EQ(q.scales[2], 0x00);
  EXPECT_EQ(q.scales[3], 0x00);
  const std::vector<float> y = decode(q);
  const double sb = 3 * 0x1p-9;
  EXPECT_LE(std::fabs(y[16] - 0.03), 0.25 * sb + 0.03 / 4);
  EXPECT_EQ(y[16], 6 * sb) << "0.03 / s_b = 5.12 rounds to 6";
  EXPECT_EQ(y[17], -2 * sb) << "-0.011 / s_b = -1.877 rounds to -2";
  EXPECT_EQ(y[32], 0.0f);
  EXPECT_EQ(y[48], 0.0f);
}

TEST(CodecsNvfp4, NaNPoisonsItsBlockOnlyAndInfSaturates) {
  const int64_t n = 48;
  Rng rng(test_seed(609));
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(rng.normal());
  std::vector<float> clean = x;
  x[3] = kNaN;
  x[20] = -kInf;
  clean[3] = 0.0f, clean[20] = 0.0f;
  HostNvfp4 q = encode_and_match_oracle(x, 1, n, 1);
  HostNvfp4 c = encode_and_match_oracle(clean, 1, n, 1);
  EXPECT_EQ(bits(q.globals[0]), bits(c.globals[0])) << "NaN and Inf do not enter amax";
  EXPECT_EQ(q.scales[0], 0x7f);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(q.codes[j], 0);
  EXPECT_EQ(q.scales[1], c.scales[1]);
  EXPECT_EQ(q.code(20), 0xf) << "-Inf saturates to -6";
  EXPECT_EQ(q.scales[2], c.scales[2]);
  const std::vector<float> y = decode(q);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(bits(y[i]), 0x7fc00000u) << i;
  const float sb1 = cd::e4m3_decode(q.scales[1]) * q.globals[0];
  EXPECT_EQ(y[20], -6.0f * sb1);
  // Inf in a zero group: code +-6, decodes to 0 with the zero scale.
  std::vector<float> z(16, 0.0f);
  z[2] = kInf;
  HostNvfp4 qz = encode_and_match_oracle(z, 1, 16, 1);
  EXPECT_EQ(qz.code(2), 0x7);
  EXPECT_EQ(decode(qz)[2], 0.0f);
}

TEST(CodecsNvfp4, TinyGroupsWhoseGlobalScaleUnderflowEncodeAsZero) {
  std::vector<float> x(16, 0.0f);
  x[0] = 1e-42f;  // / 2688 underflows float32 to 0
  x[1] = 1e-38f * 0.5f;
  HostNvfp4 q = encode_and_match_oracle(x, 1, 16, 1);
  EXPECT_GT(q.globals[0], 0.0f) << "1e-38/2688 is an fp32 subnormal, still > 0";
  x[1] = 0.0f;
  HostNvfp4 z = encode_and_match_oracle(x, 1, 16, 1);
  EXPECT_EQ(z.globals[0], 0.0f);
  EXPECT_EQ(decode(z)[0], 0.0f);
}

// ---- FP8 E4M3 per-row
// --------------------------------------------------------------------------------

struct HostFp8 {
  int64_t rows, n;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  HostFp8(int64_t r, int64_t n_) : rows(r), n(n_), codes(r * n_, 0xAB), scales(r, -1.0f) {}
  cd::Fp8Rows view() {
    return {make_view(codes.data(), DType::kU8, {rows, n}),
            make_view(scales.data(), DType::kF32, {rows})};
  }
};

HostFp8 fp8_match_oracle(std::vector<float> x, int64_t rows, int64_t n, std::vector<float>* y_out) {
  HostFp8 q(rows, n);
  cd::fp8_encode(make_view(x.data(), DType::kF32, {rows, n}), q.view());
  std::vector<float> y(rows * n, kNaN);
  cd::fp8_decode(q.view(), make_view(y.data(), DType::kF32, {rows, n}));
  for (int64_t r = 0; r < rows; ++r) {
    const oracle::Fp8Row o =
        oracle::fp8_encode(std::vector<float>(x.begin() + r * n, x.begin() + (r + 1) * n));
    const std::vector<double> oy = oracle::fp8_decode(o);
    EXPECT_EQ(bits(q.scales[r]), bits(o.scale)) << "row " << r;
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(q.codes[r * n + j], o.codes[j]) << "row " << r << " element " << j;
      EXPECT_TRUE(same(y[r * n + j], oy[j])) << "row " << r << " element " << j;
    }
  }
  if (y_out) *y_out = y;
  return q;
}

TEST(CodecsFp8, PerRowScaleMatchesTheOracleWithinTheDerivedBound) {
  const uint64_t seed = test_seed(610);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  const int64_t rows = 64, n = 128;
  std::vector<float> x(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    const double mag = std::pow(10.0, rng.uniform(-35, 35));
    for (int64_t j = 0; j < n; ++j) x[r * n + j] = static_cast<float>(rng.normal() * mag);
  }
  std::vector<float> y;
  HostFp8 q = fp8_match_oracle(x, rows, n, &y);
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0;
    for (int64_t j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[r * n + j]));
    EXPECT_EQ(q.scales[r], amax / 448.0f);
    for (int64_t j = 0; j < n; ++j) {
      const double ax = std::fabs(x[r * n + j]), s = q.scales[r];
      if (ax == amax) {
        EXPECT_EQ(q.codes[r * n + j] & 0x7f, 0x7e) << "the amax element is +-448";
      }
      // E4M3 RNE: relative 2^-4 for normals (|x/s| >= 2^-6), absolute 2^-10 s for subnormals;
      // plus the float32 roundings of x / s and code * s.
      // (+ 2^-149: the product may be an fp32 subnormal, rounded to an absolute 2^-150.)
      const double bound = std::max(ax * 0x1p-4, s * 0x1p-10) * (1 + 1e-6) + 0x1p-149;
      ASSERT_LE(std::fabs(x[r * n + j] - y[r * n + j]), bound) << "row " << r << " j " << j;
    }
  }
}

TEST(CodecsFp8, ZeroRowsSpecialsAndTinyRows) {
  const int64_t n = 8;
  std::vector<float> x = {0,      -0.0f,   0,    0, 0,     0,      0,  0,   // zero row
                          1,      -kInf,   kNaN, 2, -kNaN, 0.001f, -3, 0,   // specials
                          0,      kInf,    0,    0, 0,     0,      0,  0,   // Inf in a zero row
                          1e-44f, -2e-44f, 0,    0, 0,     0,      0,  0};  // scale underflows
  std::vector<float> y;
  HostFp8 q = fp8_match_oracle(x, 4, n, &y);
  EXPECT_EQ(q.scales[0], 0.0f);
  for (int j = 0; j < n; ++j) EXPECT_EQ(q.codes[j], 0) << "zero row, element " << j;
  EXPECT_EQ(q.scales[1], 3.0f / 448.0f) << "amax over finite elements";
  EXPECT_EQ(q.codes[n + 1], 0xfe);
  EXPECT_EQ(q.codes[n + 2], 0x7f);
  EXPECT_EQ(q.codes[n + 4], 0xff);
  EXPECT_EQ(q.codes[n + 6], 0xfe);
  EXPECT_EQ(bits(y[n + 2]), 0x7fc00000u);
  EXPECT_EQ(y[n + 1], -448.0f * q.scales[1]);
  EXPECT_EQ(q.scales[2], 0.0f);
  EXPECT_EQ(q.codes[2 * n + 1], 0x7e);
  EXPECT_EQ(y[2 * n + 1], 0.0f);
  EXPECT_EQ(q.scales[3], 0.0f);
  EXPECT_EQ(q.codes[3 * n], 0);
}

// ---- errors
// --------------------------------------------------------------------------------------

template <class E, class F>
void expect_error(F f, const char* needle) {
  try {
    f();
    ADD_FAILURE() << "no error, expected one mentioning " << needle;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CodecsErrors, TypedErrorsNameActualAndExpectedAndTouchNothing) {
  const int64_t rows = 4, n = 32;
  GuardedBuffer x(DType::kF32, {rows, n}, 1);
  HostNvfp4 q(rows, n, 2);
  const HostNvfp4 before = q;
  expect_error<ShapeError>(
      [&] {
        GuardedBuffer bad(DType::kF32, {rows, 24}, 2);
        cd::nvfp4_encode(bad.view(), q.view());
      },
      "24, expected a positive multiple of 16");
  expect_error<ShapeError>(
      [&] {
        HostNvfp4 r(rows, n, 2);
        r.group_rows = 3;
        cd::nvfp4_encode(x.view(), r.view());
      },
      "rows = 4, expected a multiple of group_rows = 3");
  expect_error<ConfigError>(
      [&] {
        cd::Nvfp4 v = q.view();
        v.group_rows = 0;
        cd::nvfp4_encode(x.view(), v);
      },
      "group_rows = 0");
  expect_error<DTypeError>(
      [&] {
        cd::Nvfp4 v = q.view();
        v.codes.dtype = DType::kI8;
        cd::nvfp4_encode(x.view(), v);
      },
      "dtype int8, expected uint8");
  expect_error<ShapeError>(
      [&] {
        cd::Nvfp4 v = q.view();
        v.global_scales.shape[0] = 4;
        cd::nvfp4_encode(x.view(), v);
      },
      "shape[0] is 4, expected 2");
  EXPECT_EQ(q.codes, before.codes);
  EXPECT_EQ(q.scales, before.scales);
  EXPECT_EQ(q.globals, before.globals);

  HostFp8 f(rows, n);
  expect_error<ShapeError>(
      [&] {
        cd::Fp8Rows v = f.view();
        v.scales.shape[0] = 5;
        cd::fp8_encode(x.view(), v);
      },
      "shape[0] is 5, expected 4");
  expect_error<DTypeError>(
      [&] {
        GuardedBuffer xb(DType::kBF16, {rows, n}, 3);
        cd::fp8_encode(xb.view(), f.view());
      },
      "dtype bfloat16, expected float32");
  for (uint8_t c : f.codes) EXPECT_EQ(c, 0xAB);

  std::vector<int32_t> ids(rows), steps(rows + 1);
  GuardedBuffer y16(DType::kF16, {rows, n}, 4);
  cd::SrKey key{1, make_view(ids.data(), DType::kI32, {rows}),
                make_view(steps.data(), DType::kI32, {rows + 1})};
  expect_error<ShapeError>([&] { cd::f16_sr_encode(x.view(), key, y16.view()); },
                           "key.steps: shape[0] is 5, expected 4");
  key.steps.shape[0] = rows;
  expect_error<DTypeError>([&] { cd::f16_sr_encode(x.view(), key, x.view()); },
                           "y: dtype float32, expected float16");
  EXPECT_TRUE(x.guards_intact());
}

TEST(CodecsErrors, CpuOutputsStayInsideTheirBuffers) {
  const int64_t rows = 4, n = 48;
  Rng rng(test_seed(611));
  GuardedBuffer x(DType::kF32, {rows, n}, 5), codes(DType::kU8, {rows, n / 2}, 6),
      scales(DType::kU8, {rows, n / 16}, 7), globals(DType::kF32, {rows / 2}, 8),
      y(DType::kF32, {rows, n}, 9), f8(DType::kU8, {rows, n}, 10), s8(DType::kF32, {rows}, 11),
      h(DType::kF16, {rows, n}, 12), ids(DType::kI32, {rows}, 13), st(DType::kI32, {rows}, 14);
  for (int64_t i = 0; i < rows * n; ++i) x.set(i, static_cast<float>(rng.normal()));
  const cd::Nvfp4 q{codes.view(), scales.view(), globals.view(), 2};
  cd::nvfp4_encode(x.view(), q);
  cd::nvfp4_decode(q, y.view());
  cd::fp8_encode(x.view(), {f8.view(), s8.view()});
  cd::fp8_decode({f8.view(), s8.view()}, y.view());
  cd::f16_sr_encode(x.view(), {9, ids.view(), st.view()}, h.view());
  for (const GuardedBuffer* b : {&x, &codes, &scales, &globals, &y, &f8, &s8, &h, &ids, &st})
    EXPECT_TRUE(b->guards_intact());
}

}  // namespace
}  // namespace replayssm::testing
