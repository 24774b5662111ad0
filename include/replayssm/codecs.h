// Low-precision codecs for the state's read copy and low-precision checkpoints (DESIGN.md §2
// "Precision"; formats in shared/reference/models.md §4): NVFP4 with two-level scaling, FP8 E4M3
// with one float32 scale per row, and float32 -> float16 with stochastic rounding driven by
// counter-based Philox4x32-10. Every op takes float32 [rows, n] data, validates all arguments
// before any work (typed errors naming the actual and expected value) and dispatches on the
// tensors' device. CPU and CUDA compute every code, scale and decoded value from the same source
// (src/common/codec_math.h), so they agree bit for bit.
//
// Element formats (OCP / NVIDIA definitions):
//   E2M1 (FP4): s.ee.m, bias 1; nibble -> value 0,0.5,1,1.5,2,3,4,6 for codes 0..7, codes 8..15
//     the same negated (8 is -0). No Inf, no NaN.
//   E4M3 (OCP "e4m3fn"): s.eeee.mmm, bias 7; e = 0: m * 2^-9 (subnormals, min 2^-9);
//     e = 1..15: (1 + m/8) * 2^(e-7); max finite 448 (0x7E); NaN = S.1111.111 (0x7F, 0xFF); no Inf.
//
// Rounding (shared by every op): conversions to E2M1 and E4M3 round to nearest, ties to even
// (the code with an even mantissa), and saturate: any magnitude above the largest finite value,
// including +-Inf, becomes the largest finite code of its sign (6, resp. 448). The sign of zero and
// of values that round to zero is kept (codes 0x8 / 0x80 = -0). Scale arithmetic is float32, every
// operation correctly rounded (no fused multiply-add); amax is the largest |x| over the *finite*
// elements (NaN and +-Inf do not enter any scale). Decoding a NaN code, or any decode whose float32
// product is NaN, gives the positive quiet NaN 0x7FC00000.
#pragma once
#include <cstdint>

#include "replayssm/errors.h"
#include "replayssm/tensor.h"

namespace replayssm::codecs {

constexpr int64_t kNvfp4Block = 16;      ///< elements per E4M3 block scale (innermost axis)
constexpr float kE2M1Max = 6.0f;         ///< largest E2M1 magnitude
constexpr float kE4M3Max = 448.0f;       ///< largest finite E4M3 magnitude
constexpr float kNvfp4GlobalDiv = 2688;  ///< 6 * 448: global scale = amax / 2688

// ---- NVFP4 ------------------------------------------------------------------------------------

/// An NVFP4 tensor of logical shape [rows, n] (n a multiple of 16): E2M1 codes, one E4M3 scale per
/// 16 consecutive elements of a row, and one float32 "global" scale per group of `group_rows`
/// consecutive rows. 0.5625 bytes per element plus 4 bytes per group. For a Mamba-2 state
/// [slots, H, P, N] use rows = slots*H*P, n = N, group_rows = P (one global scale per (slot, head),
/// blocks along d_state); for GDN/KDA [slots, HV, V, K]: rows = slots*HV*V, n = K, group_rows = V.
struct Nvfp4 {
  TensorView codes;          ///< [rows, n/2] uint8: element 2j in the low nibble, 2j+1 in the high
  TensorView block_scales;   ///< [rows, n/16] uint8: E4M3 bit patterns (0x7F marks a NaN block)
  TensorView global_scales;  ///< [rows / group_rows] float32
  int64_t group_rows = 1;    ///< rows sharing one global scale (>= 1, divides rows)
};

/// Encodes x [rows, n] float32 into `out` (recipe of NVIDIA ModelOpt's NVFP4, models.md §4.2):
///   amax_g = max |x| over the group's finite elements;  s2 = amax_g / 2688        (global scale)
///   per block of 16: amax_b likewise;  d = E4M3(amax_b / (s2 * 6))  (0 when s2 == 0)
///   s_b = e4m3(d) * s2;  element code = E2M1(x / s_b)                (ties to even, saturating)
/// Special cases: a block holding a NaN gets scale code 0x7F and element codes 0 (it decodes to 16
/// NaNs; the NaN does not enter amax_g, so other blocks are unaffected). A block whose s_b is 0
/// (all-zero block, a zero group, or amax_b / (6 s2) below half of E4M3's smallest subnormal 2^-9,
/// i.e. a block below about amax_g * 2^-10 / 448 that flushes to zero, or a group whose
/// amax_g / 2688 underflows float32) gets element code 0 for every finite element and +-6 (code
/// 0x7 / 0xF) for +-Inf; it decodes to zeros. +-Inf elsewhere saturates to +-6 (decodes to
/// +-6 * s_b). Block scales may be E4M3 subnormals (d < 2^-6); they are used as they are.
void nvfp4_encode(const TensorView& x, const Nvfp4& out, void* stream = nullptr);

/// Decodes `in` into y [rows, n] float32: y = E2M1(code) * (E4M3(d) * s2), each product rounded
/// to float32 in that order. NaN blocks (d = 0x7F or 0xFF) decode to NaN.
void nvfp4_decode(const Nvfp4& in, const TensorView& y, void* stream = nullptr);

// ---- FP8 E4M3 with a per-row scale ------------------------------------------------------------

/// An FP8 tensor of shape [rows, n]: E4M3 codes and one float32 scale per row (the innermost
/// vector, e.g. one d_state row of a Mamba-2 state: rows = slots*H*P, n = N).
struct Fp8Rows {
  TensorView codes;   ///< [rows, n] uint8, E4M3 bit patterns
  TensorView scales;  ///< [rows] float32 decode scales
};

/// Encodes x [rows, n] float32: scale = amax_row / 448 (amax over the row's finite elements);
/// code = E4M3(x / scale) (ties to even, saturating). NaN elements get 0x7F with their sign.
/// A row whose scale is 0 (all finite elements zero, or amax / 448 underflows) gets code 0 for
/// every finite element and +-448 (0x7E / 0xFE) for +-Inf; it decodes to zeros.
void fp8_encode(const TensorView& x, const Fp8Rows& out, void* stream = nullptr);

/// Decodes `in` into y [rows, n] float32: y = E4M3(code) * scale (float32 product).
void fp8_decode(const Fp8Rows& in, const TensorView& y, void* stream = nullptr);

// ---- float16 with stochastic rounding ---------------------------------------------------------

/// What keys the random bits of a stochastic-rounding store. Element j of row r draws from
/// Philox4x32-10 with key = (seed low 32 bits, seed high 32 bits) and
/// counter = (q low 32, q high 32, steps[r], slots[r]) where q = j / 4, using output word j % 4.
/// This is exactly cuRAND's curand_init(seed, subsequence = (slot << 32) | step, offset = j)
/// followed by curand() (the CUDA kernels call cuRAND; the CPU computes the same words).
/// A graph replay that advances steps[] on the device draws fresh bits; the same
/// (seed, slot, step) reproduces the same result. Steps are taken modulo 2^32.
struct SrKey {
  uint64_t seed = 0;
  TensorView slots;  ///< [rows] int32 (bit pattern used as uint32): e.g. the row's pool slot
  TensorView steps;  ///< [rows] int32 (bit pattern used as uint32): the slot's step counter
};

/// Converts x [rows, n] float32 to y [rows, n] float16 (IEEE binary16 bits, dtype kF16) with
/// stochastic rounding: with r = the top 13 bits of the element's random word (word >> 19), in
/// [0, 8191],
///   |x| >= 2^-14 (fp16 normal range): add r to the float32 magnitude bits (13 bits below the fp16
///     mantissa's last bit) and truncate the low 13 bits (carries into the exponent are exact);
///   |x| <  2^-14 (fp16 subnormals, spacing 2^-24): mantissa = floor((floor(|x| * 2^37) + r) / 2^13)
///     = floor(|x| * 2^24 + r / 2^13), which may reach 1024 = the smallest normal;
/// so |x| rounds up with probability (fraction of an fp16 ulp discarded), exactly for normal
/// results and to within 2^-13 of an ulp for subnormal ones: E[SR(x)] = x. The sign is kept.
/// Values exactly representable in fp16 never change. Overflow saturates: a result beyond 65504,
/// and +-Inf, become +-65504 (0x7BFF / 0xFBFF); NaN becomes the quiet NaN 0x7E00 with its sign.
void f16_sr_encode(const TensorView& x, const SrKey& key, const TensorView& y,
                   void* stream = nullptr);

// ---- scalar building blocks (host; the tensor ops apply exactly these per element) ------------

/// E4M3 code of v: nearest, ties to even, saturating; NaN -> 0x7F | sign.
uint8_t e4m3_encode(float v);
/// Value of an E4M3 code (NaN codes -> 0x7FC00000).
float e4m3_decode(uint8_t c);
/// E2M1 nibble of v: nearest, ties to even, saturating; NaN -> 0x7.
uint8_t e2m1_encode(float v);
/// Value of the low nibble of c.
float e2m1_decode(uint8_t c);
/// float16 bits of x stochastically rounded with the random word `word` (rule of f16_sr_encode).
uint16_t f16_sr(float x, uint32_t word);
/// The random word of element `index` of a row keyed by (seed, slot, step) (see SrKey).
uint32_t sr_word(uint64_t seed, uint32_t slot, uint32_t step, uint64_t index);

/// The Philox4x32-10 block function (Salmon et al., SC'11): 10 rounds of the 4x32 S-box with
/// multipliers 0xD2511F53 (word 0) and 0xCD9E8D57 (word 2) and the Weyl key schedule
/// (0x9E3779B9, 0xBB67AE85) added before rounds 2..10.
struct PhiloxWords {
  uint32_t w[4];
};
PhiloxWords philox4x32_10(const uint32_t counter[4], const uint32_t key[2]);

}  // namespace replayssm::codecs
