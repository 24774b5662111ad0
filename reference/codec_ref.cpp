// Oracle of the codecs; see codec_ref.h.
#include "codec_ref.h"

#include <cmath>
#include <limits>

namespace replayssm::ref::codec {
namespace {

/// Nearest of the non-negative magnitudes values[0..count) to a >= 0; ties go to the even index
/// (the even mantissa: codes of one sign are ordered by value); above the last, the last.
int nearest(double a, const double* values, int count) {
  int best = 0;
  for (int c = 1; c < count; ++c) {
    const double dc = std::fabs(values[c] - a), db = std::fabs(values[best] - a);
    if (dc < db || (dc == db && c % 2 == 0)) best = c;
  }
  return best;
}

double amax_finite(const float* x, size_t count) {
  double m = 0;
  for (size_t i = 0; i < count; ++i)
    if (std::isfinite(x[i])) m = std::fmax(m, std::fabs(static_cast<double>(x[i])));
  return m;
}

int sign_bit(double v) { return std::signbit(v) ? 1 : 0; }

}  // namespace

double e2m1_value(int code) {
  const int s = (code >> 3) & 1, e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? m * 0.5 : std::ldexp(1.0 + m / 2.0, e - 1);
  return s ? -mag : mag;
}

double e4m3_value(int code) {
  const int s = (code >> 7) & 1, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

int e2m1_round(double v) {
  double mags[8];
  for (int c = 0; c < 8; ++c) mags[c] = e2m1_value(c);
  if (std::isinf(v)) return (sign_bit(v) << 3) | 7;
  return (sign_bit(v) << 3) | nearest(std::fabs(v), mags, 8);
}

int e4m3_round(double v) {
  if (std::isnan(v)) return (sign_bit(v) << 7) | 0x7f;
  double mags[127];
  for (int c = 0; c < 127; ++c) mags[c] = e4m3_value(c);
  if (std::isinf(v)) return (sign_bit(v) << 7) | 0x7e;
  return (sign_bit(v) << 7) | nearest(std::fabs(v), mags, 127);
}

Nvfp4Group nvfp4_encode(const std::vector<float>& x) {
  Nvfp4Group q;
  q.global = static_cast<float>(amax_finite(x.data(), x.size()) / 2688.0);
  for (size_t b = 0; b < x.size() / 16; ++b) {
    const float* xb = x.data() + 16 * b;
    bool nan = false;
    for (int i = 0; i < 16; ++i) nan = nan || std::isnan(xb[i]);
    if (nan) {
      q.block_scales.push_back(0x7f);
      for (int i = 0; i < 16; ++i) q.codes.push_back(0);
      continue;
    }
    int d = 0;
    if (q.global > 0) {
      const float six_s2 = static_cast<float>(6.0 * q.global);
      d = e4m3_round(static_cast<float>(amax_finite(xb, 16) / six_s2));
    }
    q.block_scales.push_back(d);
    const float sb = static_cast<float>(e4m3_value(d) * q.global);
    for (int i = 0; i < 16; ++i) {
      if (sb > 0)
        q.codes.push_back(e2m1_round(static_cast<float>(xb[i] / static_cast<double>(sb))));
      else
        q.codes.push_back(std::isinf(xb[i]) ? (sign_bit(xb[i]) << 3) | 7 : 0);
    }
  }
  return q;
}

std::vector<double> nvfp4_decode(const Nvfp4Group& q) {
  std::vector<double> y(q.codes.size());
  for (size_t i = 0; i < y.size(); ++i) {
    const float sb = static_cast<float>(e4m3_value(q.block_scales[i / 16]) * q.global);
    y[i] = static_cast<float>(e2m1_value(q.codes[i]) * sb);
  }
  return y;
}

Fp8Row fp8_encode(const std::vector<float>& x) {
  Fp8Row q;
  q.scale = static_cast<float>(amax_finite(x.data(), x.size()) / 448.0);
  for (float v : x) {
    if (std::isnan(v))
      q.codes.push_back(e4m3_round(v));
    else if (q.scale > 0)
      q.codes.push_back(e4m3_round(static_cast<float>(v / static_cast<double>(q.scale))));
    else
      q.codes.push_back(std::isinf(v) ? (sign_bit(v) << 7) | 0x7e : 0);
  }
  return q;
}

std::vector<double> fp8_decode(const Fp8Row& q) {
  std::vector<double> y;
  for (int c : q.codes) y.push_back(static_cast<float>(e4m3_value(c) * q.scale));
  return y;
}

double f16_value(uint16_t bits) {
  const int s = bits >> 15, e = (bits >> 10) & 31, m = bits & 1023;
  double mag;
  if (e == 31)
    mag = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else
    mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -mag : mag;
}

double f16_sr(double x, uint32_t r13) {
  if (std::isnan(x)) return x;
  const double a = std::fabs(x);
  if (std::isinf(a)) return std::copysign(65504.0, x);
  int e = -14;  // binade of a: a in [2^e, 2^(e+1)), at least the smallest normal's
  if (a >= 0x1p-14) e = std::ilogb(a);
  const double ulp = std::ldexp(1.0, e - 10);
  const double q = std::floor(a / ulp + r13 / 8192.0) * ulp;
  return std::copysign(std::fmin(q, 65504.0), x);
}

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM[2] = {0xD2511F53u, 0xCD9E8D57u};
  constexpr uint32_t kW[2] = {0x9E3779B9u, 0xBB67AE85u};
  for (int round = 1; round <= 10; ++round) {
    if (round > 1) k = {k[0] + kW[0], k[1] + kW[1]};
    const uint64_t p0 = static_cast<uint64_t>(kM[0]) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM[1]) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

uint32_t sr_word(uint64_t seed, uint32_t slot, uint32_t step, uint64_t index) {
  const uint64_t q = index / 4;
  const auto w =
      philox4x32_10({static_cast<uint32_t>(q), static_cast<uint32_t>(q >> 32), step, slot},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return w[index % 4];
}

}  // namespace replayssm::ref::codec
