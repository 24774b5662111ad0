// Per-element and per-block math of the codecs (include/replayssm/codecs.h), shared by the CPU
// (src/common/codecs.cpp) and the CUDA kernels (src/cuda/codecs/): one source compiled for both,
// so both produce the same bits. Every rounding to E2M1, E4M3 and float16 is done on integer bit
// patterns; float arithmetic goes only through mul_rn/div_rn (correctly rounded float32, never
// contracted into a fused multiply-add) and comparisons. No CUDA fp8/fp4 intrinsics are used.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define RSSM_CODEC_FN __host__ __device__ __forceinline__
#else
#define RSSM_CODEC_FN inline
#endif

namespace replayssm::codec {

constexpr uint32_t kQuietNaN = 0x7fc00000u;  ///< the float every decoded NaN becomes

// ---- float32 bits and correctly rounded arithmetic -------------------------------------------

RSSM_CODEC_FN uint32_t f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

RSSM_CODEC_FN float f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

RSSM_CODEC_FN float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

RSSM_CODEC_FN float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

RSSM_CODEC_FN bool is_nan(float f) { return (f32_bits(f) & 0x7fffffffu) > 0x7f800000u; }
RSSM_CODEC_FN bool is_inf(float f) { return (f32_bits(f) & 0x7fffffffu) == 0x7f800000u; }
RSSM_CODEC_FN float abs_bits(float f) { return f32_from_bits(f32_bits(f) & 0x7fffffffu); }
/// NaN (whatever its payload or sign) -> 0x7FC00000; anything else unchanged.
RSSM_CODEC_FN float canonical_nan(float f) { return is_nan(f) ? f32_from_bits(kQuietNaN) : f; }

/// The running max of |x| over finite x (NaN and +-Inf are skipped).
RSSM_CODEC_FN float amax_step(float m, float x) {
  const float a = abs_bits(x);
  return (f32_bits(a) < 0x7f800000u && a > m) ? a : m;
}

/// m / 2^s rounded to nearest, ties to even (m < 2^24, s >= 1).
RSSM_CODEC_FN uint32_t shift_rne(uint32_t m, int s) {
  if (s >= 26) return 0;  // m / 2^s < 0.25
  const uint32_t q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

/// Significand (with the implicit bit) and effective biased exponent of a finite float32
/// magnitude `a` (bits): |x| = M * 2^(E - 150), subnormals as E = 1 without the implicit bit.
struct Unpacked {
  uint32_t M;
  int E;
};
RSSM_CODEC_FN Unpacked unpack(uint32_t a) {
  const int e = static_cast<int>(a >> 23);
  return {(a & 0x7fffffu) | (e ? 0x800000u : 0u), e ? e : 1};
}

// ---- E4M3 ------------------------------------------------------------------------------------

/// E4M3 code of v: round to nearest even, saturating to +-448 (Inf too), NaN -> 0x7F | sign.
RSSM_CODEC_FN uint8_t e4m3_encode(float v) {
  const uint32_t u = f32_bits(v), a = u & 0x7fffffffu;
  const uint32_t sign = (u >> 24) & 0x80u;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if (a > 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // |v| > 448
  if (a < 0x3c800000u) {                                           // |v| < 2^-6: subnormal
    const Unpacked p = unpack(a);  // |v| * 2^9 = M * 2^(E - 141), E <= 120
    return static_cast<uint8_t>(sign | shift_rne(p.M, 141 - p.E));  // 8 = smallest normal
  }
  // Normal: keep 3 of the 23 mantissa bits (ties to even); the carry may bump the exponent.
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
  return static_cast<uint8_t>(sign | ((r >> 20) - (120u << 3)));  // rebias 127 -> 7
}

/// Value of an E4M3 code; NaN codes give 0x7FC00000.
RSSM_CODEC_FN float e4m3_decode(uint8_t c) {
  const uint32_t e = (c >> 3) & 0xfu, m = c & 7u, sign = static_cast<uint32_t>(c & 0x80u) << 24;
  if (e == 15 && m == 7) return f32_from_bits(kQuietNaN);
  if (e == 0) return f32_from_bits(f32_bits(mul_rn(static_cast<float>(m), 0x1p-9f)) | sign);
  return f32_from_bits(sign | ((e + 120u) << 23) | (m << 20));
}

// ---- E2M1 ------------------------------------------------------------------------------------

/// E2M1 nibble of v: round to nearest even (midpoints 0.25->0, 0.75->1, 1.25->1, 1.75->2,
/// 2.5->2, 3.5->4, 5->4), saturating to +-6 (Inf too); NaN -> 0x7 (+6, as CUDA's cuda_fp4.h).
/// The code is the number of thresholds |v| passes (each a midpoint, the ties going to the even
/// code: '>' where the lower code is even, '>=' where the upper is): no branch, so CPU loops over
/// it vectorise (a compare chain mispredicted on random data).
RSSM_CODEC_FN uint8_t e2m1_encode(float v) {
  const uint32_t sign = (f32_bits(v) >> 28) & 0x8u;
  const float a = abs_bits(v);
  const uint32_t c = static_cast<uint32_t>(a > 0.25f) + static_cast<uint32_t>(a >= 0.75f) +
                     static_cast<uint32_t>(a > 1.25f) + static_cast<uint32_t>(a >= 1.75f) +
                     static_cast<uint32_t>(a > 2.5f) + static_cast<uint32_t>(a >= 3.5f) +
                     static_cast<uint32_t>(a > 5.0f);
  return is_nan(v) ? uint8_t{0x7u} : static_cast<uint8_t>(sign | c);
}

/// Value of the low nibble of c.
RSSM_CODEC_FN float e2m1_decode(uint8_t c) {
  const uint32_t e = (c >> 1) & 3u, m = c & 1u;
  const uint32_t halves = e == 0 ? m : (2u + m) << (e - 1);  // magnitude in units of 0.5
  const float mag = mul_rn(static_cast<float>(halves), 0.5f);
  return f32_from_bits(f32_bits(mag) | (static_cast<uint32_t>(c & 8u) << 28));
}

// ---- NVFP4 -----------------------------------------------------------------------------------

/// Global (decode) scale of a group from its finite amax: amax / (6 * 448).
RSSM_CODEC_FN float nvfp4_global_scale(float amax) { return div_rn(amax, 2688.0f); }

/// The scale of a 16-element block x[0..16) with global scale s2: `nan` for a block holding a NaN
/// (its scale code 0x7F, every element code 0), else the E4M3 scale code d of amax / (6 s2) and
/// the block's multiplier sb = E4M3(d) * s2: 0 (nvfp4_codes_without_scale) or the divisor of the
/// elements' E2M1 codes.
struct Nvfp4BlockScale {
  bool nan;
  uint8_t d;
  float sb;
};
RSSM_CODEC_FN Nvfp4BlockScale nvfp4_block_scale_of(const float* x, float s2) {
  float amax = 0.0f;
  bool nan = false;
  for (int i = 0; i < 16; ++i) {
    nan = nan || is_nan(x[i]);
    amax = amax_step(amax, x[i]);
  }
  if (nan) return {true, 0x7fu, 0.0f};
  const uint8_t d = s2 > 0.0f ? e4m3_encode(div_rn(amax, mul_rn(s2, 6.0f))) : uint8_t{0};
  return {false, d, mul_rn(e4m3_decode(d), s2)};
}

/// The code bytes of a block whose elements need no division: a NaN block (every code 0) or a
/// zero-scale one (every finite element 0, +-Inf saturates to +-6). Returns false, writing
/// nothing, for a block with sb > 0.
RSSM_CODEC_FN bool nvfp4_codes_without_scale(const Nvfp4BlockScale& b, const float* x,
                                             uint8_t* codes) {
  if (!b.nan && b.sb > 0.0f) return false;
  for (int j = 0; j < 8; ++j) {
    uint8_t c[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      const float v = x[2 * j + i];
      if (!b.nan && is_inf(v)) c[i] = static_cast<uint8_t>(((f32_bits(v) >> 28) & 0x8u) | 0x7u);
    }
    codes[j] = static_cast<uint8_t>(c[0] | (c[1] << 4));
  }
  return true;
}

/// Encodes x[0..16) with global scale s2: code byte j holds elements 2j (low) and 2j+1 (high);
/// returns the block's E4M3 scale code (0x7F for a block holding a NaN).
RSSM_CODEC_FN uint8_t nvfp4_encode_block(const float* x, float s2, uint8_t* codes) {
  const Nvfp4BlockScale b = nvfp4_block_scale_of(x, s2);
  if (nvfp4_codes_without_scale(b, x, codes)) return b.d;
  for (int j = 0; j < 8; ++j)
    codes[j] = static_cast<uint8_t>(e2m1_encode(div_rn(x[2 * j], b.sb)) |
                                    (e2m1_encode(div_rn(x[2 * j + 1], b.sb)) << 4));
  return b.d;
}

/// The float32 multiplier of a block: E4M3(d) * s2 (NaN for a NaN block).
RSSM_CODEC_FN float nvfp4_block_scale(uint8_t d, float s2) { return mul_rn(e4m3_decode(d), s2); }

/// Decoded value of nibble `code` in a block with multiplier sb (= nvfp4_block_scale).
RSSM_CODEC_FN float nvfp4_decode(uint8_t code, float sb) {
  return canonical_nan(mul_rn(e2m1_decode(code), sb));
}

// ---- FP8 E4M3, per-row scale -----------------------------------------------------------------

/// Decode scale of a row from its finite amax: amax / 448.
RSSM_CODEC_FN float fp8_row_scale(float amax) { return div_rn(amax, 448.0f); }

/// E4M3 code of x in a row with decode scale `scale`.
RSSM_CODEC_FN uint8_t fp8_encode(float x, float scale) {
  if (is_nan(x) || scale > 0.0f) return e4m3_encode(is_nan(x) ? x : div_rn(x, scale));
  return is_inf(x) ? static_cast<uint8_t>(((f32_bits(x) >> 24) & 0x80u) | 0x7eu) : 0;
}

RSSM_CODEC_FN float fp8_decode(uint8_t c, float scale) {
  return canonical_nan(mul_rn(e4m3_decode(c), scale));
}

// ---- float16 with stochastic rounding --------------------------------------------------------

/// float16 bits of x rounded stochastically with the top 13 bits of `word` (codecs.h rule).
RSSM_CODEC_FN uint16_t f16_sr(float x, uint32_t word) {
  const uint32_t u = f32_bits(x), a = u & 0x7fffffffu;
  const uint32_t sign = (u >> 16) & 0x8000u;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  const uint32_t r = word >> 19;
  if (a >= 0x38800000u) {              // |x| >= 2^-14: add r below the fp16 mantissa, truncate
    const uint32_t t = (a + r) >> 13;  // (E << 10) | mantissa
    if (t >= (143u << 10)) return static_cast<uint16_t>(sign | 0x7bffu);  // fp16 exponent 31
    return static_cast<uint16_t>(sign | (t - (112u << 10)));              // rebias 127 -> 15
  }
  // fp16 subnormal range: floor(|x| * 2^37) = M * 2^(E - 113), E <= 112.
  const Unpacked p = unpack(a);
  const int s = 113 - p.E;
  const uint32_t f = s >= 32 ? 0u : p.M >> s;
  return static_cast<uint16_t>(sign | ((f + r) >> 13));
}

/// float16 bits of x rounded to nearest, ties to even (the fp16 state / read copy of
/// precision.h), saturating: results beyond 65504 and +-Inf become +-65504 (0x7BFF / 0xFBFF), as
/// f16_sr does; NaN becomes the quiet NaN 0x7E00 with its sign.
RSSM_CODEC_FN uint16_t f16_rne(float x) {
  const uint32_t u = f32_bits(x), a = u & 0x7fffffffu;
  const uint32_t sign = (u >> 16) & 0x8000u;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 0x38800000u) {  // |x| >= 2^-14: keep 10 of the 23 mantissa bits, ties to even
    const uint32_t t = (a + 0xfffu + ((a >> 13) & 1u)) >> 13;
    if (t >= (143u << 10)) return static_cast<uint16_t>(sign | 0x7bffu);
    return static_cast<uint16_t>(sign | (t - (112u << 10)));
  }
  // fp16 subnormals: mantissa = round(|x| * 2^24) = M * 2^(E - 126) rounded (may reach 1024).
  const Unpacked p = unpack(a);
  return static_cast<uint16_t>(sign | shift_rne(p.M, 126 - p.E));
}

/// Value of float16 bits (exact in float32; NaN -> 0x7FC00000).
RSSM_CODEC_FN float f16_decode(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 1023u;
  if (e == 31) return m ? f32_from_bits(kQuietNaN) : f32_from_bits(sign | 0x7f800000u);
  if (e == 0) return f32_from_bits(f32_bits(mul_rn(static_cast<float>(m), 0x1p-24f)) | sign);
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

// ---- Philox4x32-10 ---------------------------------------------------------------------------

struct Philox4 {
  uint32_t x, y, z, w;
};

/// The Philox4x32-10 block function (Salmon et al. 2011): counter c, key (k0, k1).
RSSM_CODEC_FN Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k0 += 0x9e3779b9u, k1 += 0xbb67ae85u;
    const uint64_t p0 = static_cast<uint64_t>(0xd2511f53u) * c.x;
    const uint64_t p1 = static_cast<uint64_t>(0xcd9e8d57u) * c.z;
    c = {static_cast<uint32_t>(p1 >> 32) ^ c.y ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c.w ^ k1, static_cast<uint32_t>(p0)};
  }
  return c;
}

/// The four random words of elements 4q .. 4q+3 of a row keyed by (seed, slot, step).
RSSM_CODEC_FN Philox4 sr_block(uint64_t seed, uint32_t slot, uint32_t step, uint64_t q) {
  return philox4x32_10({static_cast<uint32_t>(q), static_cast<uint32_t>(q >> 32), step, slot},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

/// Word i (0..3) of a block.
RSSM_CODEC_FN uint32_t philox_word(const Philox4& b, int i) {
  return i == 0 ? b.x : i == 1 ? b.y : i == 2 ? b.z : b.w;
}

}  // namespace replayssm::codec
