// The codecs' oracle (include/replayssm/codecs.h): scalar, written from the format definitions
// (OCP FP8/FP4, NVIDIA NVFP4, Philox4x32-10 of Salmon et al. 2011), slow and obvious. Format
// values come from the sign/exponent/mantissa formulas in float64; rounding is a search for the
// nearest representable value (ties to the even code). Where the documented rule itself is a
// float32 operation (scales, x / scale) the oracle rounds that step to float32 explicitly.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace replayssm::ref::codec {

/// Value of an E2M1 nibble: s.ee.m, bias 1, e = 0 subnormal (m * 0.5).
double e2m1_value(int code);
/// Value of an E4M3 (OCP e4m3fn) byte: s.eeee.mmm, bias 7; S.1111.111 is NaN; no Inf.
double e4m3_value(int code);

/// Nearest E2M1 code to v (ties to the code with an even mantissa bit), saturating at +-6;
/// the sign of v (also of -0) is kept. v must not be NaN.
int e2m1_round(double v);
/// Nearest finite E4M3 code to v (ties to even mantissa), saturating at +-448; NaN -> 0x7F|sign.
int e4m3_round(double v);

/// One NVFP4 row group ([rows, n] floats sharing a global scale): unpacked element codes (one
/// per element), block scale codes (one per 16 elements) and the global scale.
struct Nvfp4Group {
  std::vector<int> codes;
  std::vector<int> block_scales;
  float global = 0.0f;
};
Nvfp4Group nvfp4_encode(const std::vector<float>& x);  ///< x.size() a multiple of 16
std::vector<double> nvfp4_decode(const Nvfp4Group& q);

/// One FP8 row: codes and the decode scale.
struct Fp8Row {
  std::vector<int> codes;
  float scale = 0.0f;
};
Fp8Row fp8_encode(const std::vector<float>& x);
std::vector<double> fp8_decode(const Fp8Row& q);

/// Value of IEEE binary16 bits.
double f16_value(uint16_t bits);
/// Stochastic rounding of x to float16 with r in [0, 8192): sign(x) * floor(|x|/ulp + r/8192) *
/// ulp, ulp = the fp16 spacing at |x| (2^-24 below 2^-14), saturating at 65504. The value, as
/// double (NaN for NaN).
double f16_sr(double x, uint32_t r13);

/// Philox4x32-10: counter (4 words), key (2 words) -> 4 words.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);
/// The random word of element `index` of a row keyed by (seed, slot, step): counter
/// (index/4 low, index/4 high, step, slot), key (seed low, seed high), word index % 4.
uint32_t sr_word(uint64_t seed, uint32_t slot, uint32_t step, uint64_t index);

}  // namespace replayssm::ref::codec
