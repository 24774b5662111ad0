// NVFP4 block encoding without a division per element: the E2M1 code of x / sb counts how many of
// seven per-block bounds |x| exceeds. The bounds are computed once per 16-element block from the
// exact products (midpoint ± half a float32 step) · sb in double precision, so the codes equal
// codec_math.h's e2m1_encode(div_rn(x, sb)) for every input (CPU test: tests/test_e2m1_bounds.cpp);
// the CUDA encode kernels use it (the division and the compare chain were most of their
// instructions), the CPU codec keeps the division.
#pragma once
#include "common/codec_math.h"

namespace replayssm::codec {

/// The largest float32 <= p, for a finite double p >= 0.
RSSM_CODEC_FN float f32_round_down(double p) {
#ifdef __CUDA_ARCH__
  return __double2float_rd(p);
#else
  float f = static_cast<float>(p);  // round to nearest (overflow to Inf comes back to FLT_MAX)
  if (static_cast<double>(f) > p) f = f32_from_bits(f32_bits(f) - 1u);  // f > p >= 0, so f > 0
  return f;
#endif
}

/// Bound k (0..6) of a block with multiplier sb (finite, > 0): for every float x that is not NaN,
/// e2m1_encode(div_rn(x, sb)) = sign(x) | #{k : |x| > e2m1_bound(sb, k)}.
/// Why: with q = |x| / sb (exact) and RN its float32 rounding, e2m1_encode's tests are
/// RN(q) > 0.25, >= 0.75, > 1.25, >= 1.75, > 2.5, >= 3.5, > 5 (code > k for k = 0..6). Each
/// midpoint t is even in float32, so a tie rounds to t: RN(q) > t <=> q > t + u/2 and RN(q) >= t
/// <=> q >= t - u/2, u the float32 step beside t. The products P = (t ± u/2) · sb have at most
/// 25 + 24 significant bits, exact in double; |x| > P <=> |x| > RD(P) and |x| >= P <=> |x| >
/// (the largest float32 below P). The sign of div_rn(x, sb) is x's (sb > 0), -0 included.
RSSM_CODEC_FN float e2m1_bound(float sb, int k) {
  // A switch, not a table: a local array indexed at run time would live in local memory.
  double t;
  switch (k) {
    case 0: t = 0.25 + 0x1p-26; break;
    case 1: t = 0.75 - 0x1p-25; break;
    case 2: t = 1.25 + 0x1p-24; break;
    case 3: t = 1.75 - 0x1p-24; break;
    case 4: t = 2.5 + 0x1p-23; break;
    case 5: t = 3.5 - 0x1p-23; break;
    default: t = 5.0 + 0x1p-22; break;
  }
  const double p = t * static_cast<double>(sb);
  float b = f32_round_down(p);
  // For >= (odd k) the bound is the largest float32 below p. p itself is never a float32 (t ± u/2
  // has an odd 25-bit significand, so the product has at least 25 significant bits), so RD(p)
  // already is; the test stays for the statement's sake, in case the midpoints change.
  if ((k & 1) && static_cast<double>(b) == p) b = f32_from_bits(f32_bits(b) - 1u);  // p > 0
  return b;
}

/// All seven: bound[k] = e2m1_bound(sb, k).
RSSM_CODEC_FN void e2m1_bounds(float sb, float* bound) {
  for (int k = 0; k < 7; ++k) bound[k] = e2m1_bound(sb, k);
}

/// E2M1 nibble of x in a block with the given bounds (e2m1_bounds): a binary search over the
/// seven bounds (three comparisons); x not NaN.
RSSM_CODEC_FN uint8_t e2m1_encode_bounded(float x, const float* bound) {
  // The bounds as values before any selection: a select of their addresses would put the
  // caller's array in local memory.
  const float b0 = bound[0], b1 = bound[1], b2 = bound[2], b3 = bound[3], b4 = bound[4],
              b5 = bound[5], b6 = bound[6];
  const float a = abs_bits(x);
  const bool hi = a > b3;  // code >= 4
  const bool mid = a > (hi ? b5 : b1);
  const float lo_bound = hi ? (mid ? b6 : b4) : (mid ? b2 : b0);
  const bool lo = a > lo_bound;
  const uint32_t c = (hi ? 4u : 0u) | (mid ? 2u : 0u) | (lo ? 1u : 0u);
  return static_cast<uint8_t>(((f32_bits(x) >> 28) & 0x8u) | c);
}

/// nvfp4_encode_block (codec_math.h) with the elements' codes from e2m1_bounds: the same codes
/// and scale for every input.
RSSM_CODEC_FN uint8_t nvfp4_encode_block_bounded(const float* x, float s2, uint8_t* codes) {
  const Nvfp4BlockScale b = nvfp4_block_scale_of(x, s2);
  if (nvfp4_codes_without_scale(b, x, codes)) return b.d;
  float bound[7];
  e2m1_bounds(b.sb, bound);
  for (int j = 0; j < 8; ++j)
    codes[j] = static_cast<uint8_t>(e2m1_encode_bounded(x[2 * j], bound) |
                                    (e2m1_encode_bounded(x[2 * j + 1], bound) << 4));
  return b.d;
}

}  // namespace replayssm::codec
