// fp32 products on the tensor cores (sm_80+): mma.sync m16n8k8 with tf32 operands, an fp32 value
// carried as two tf32 parts (hi = x cut to tf32, lo = x - hi, exact in fp32, of which the tensor
// core reads the leading 11 bits). a·b ≈ a_hi·b + a_lo·b (+ a_hi·b_lo for an fp32 b) has a
// relative error per product below 2^-20 for an exact b (a bf16 value: 8 significant bits of
// tf32's 11, no lo part needed) and below ~3·2^-20 for an fp32 b; the tensor core's fp32
// accumulation adds its own rounding (measurements in the literature show truncation) per
// accumulated term. Against tf32's 2^-10 alone this is the "3xTF32" scheme of the GEMM literature.
// That lo may carry 13 low bits the tensor core does not read is an assumption the GPU tests
// check against the fp64 oracle on the H200; masking lo (one more LOP3) would make it explicit.
//
// Fragment layouts of m16n8k8 (PTX ISA, "Matrix fragments for mma.m16n8k8", .tf32), for lane
// = 4 g + c (g = lane >> 2, c = lane & 3):
//   A [16 x 8]: a0 (g, c), a1 (g + 8, c), a2 (g, c + 4), a3 (g + 8, c + 4)
//   B [8 x 8]:  b0 (c, g), b1 (c + 4, g)
//   C, D [16 x 8]: c0 (g, 2c), c1 (g, 2c + 1), c2 (g + 8, 2c), c3 (g + 8, 2c + 1)
// The order of the k index is free as long as A and B follow the same one: kernels map k to
// their own columns so that a lane's A elements are contiguous in memory.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace replayssm::cuda {

/// x = hi + lo exactly (fp32), hi = x with its mantissa cut to tf32's 10 bits (truncation: one
/// LOP3; cvt.rna.tf32.f32 is an emulated sequence of ~7 instructions on sm_90). |lo| < 2^-10 |x|,
/// and the tensor core reads lo's leading 11 bits, so for an exact b, hi·b + lo·b is within
/// 2^-20 |x·b| of x·b.
/// Non-finite x: hi keeps Inf or NaN (a NaN whose payload lies in the low 13 bits becomes Inf),
/// lo is NaN, so the product is NaN (FFMA would give ±Inf for an infinite x and finite b != 0).
/// A non-finite b times a finite x whose lo is 0 is NaN too (0·Inf in the lo product).
struct Tf32Pair {
  uint32_t hi, lo;
  __device__ __forceinline__ static Tf32Pair of(float x) {
    const uint32_t h = __float_as_uint(x) & 0xffffe000u;
    return {h, __float_as_uint(__fsub_rn(x, __uint_as_float(h)))};
  }
  /// x exact in tf32 (a bf16 value): the bits as they are, lo zero.
  __device__ __forceinline__ static Tf32Pair exact(float x) { return {__float_as_uint(x), 0u}; }
};

/// d += A·B for one m16n8k8 tile (tf32 operands, fp32 accumulation). Every lane of the warp must
/// call it with converged control flow.
__device__ __forceinline__ void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// d += A·B with both operands as pairs: a_hi·b_hi, then a_lo·b_hi, then a_hi·b_lo unless B is
/// exact in tf32 (BExact: its lo parts are zero and that product is skipped).
template <bool BExact>
__device__ __forceinline__ void mma_tf32_pairs(float (&d)[4], const Tf32Pair (&a)[4],
                                               const Tf32Pair& b0, const Tf32Pair& b1) {
  mma_tf32(d, a[0].hi, a[1].hi, a[2].hi, a[3].hi, b0.hi, b1.hi);
  mma_tf32(d, a[0].lo, a[1].lo, a[2].lo, a[3].lo, b0.hi, b1.hi);
  if constexpr (!BExact) mma_tf32(d, a[0].hi, a[1].hi, a[2].hi, a[3].hi, b0.lo, b1.lo);
}

}  // namespace replayssm::cuda
