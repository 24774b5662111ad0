// Pieces shared by the two GDN/KDA flush kernels (flush.cuh, flush_pipe.cuh): the token kept in
// shared memory in the lanes' column layout, and one record's term of the fold. Both kernels must
// round exactly alike (their checkpoints are compared bit for bit by a GPU test), so they share
// the code rather than a description of it.
#pragma once
#include "cuda/gdn/step_math.cuh"

namespace replayssm::cuda::gdn {

/// Writes lane lr's columns of the token t into its per-column vectors in shared memory (K floats
/// each, natural column order: k^, q^ (scaled), alpha·k^ and, for KDA, alpha; tal unused for GDN).
/// Call from the LPR lanes of one row group.
template <class Tok>
__device__ __forceinline__ void token_to_smem(const Tok& t, float* tk, float* tq, float* ta,
                                              float* tal, int lr) {
  using Lay = typename Tok::Lay;
#pragma unroll
  for (int c = 0; c < Tok::CPL; ++c)
#pragma unroll
    for (int v = 0; v < Tok::VEC; ++v) {
      const int i = c * Tok::VEC + v, col = Lay::col(c, lr) + v;
      tk[col] = t.khat[i], tq[col] = t.qhat[i], ta[col] = t.ak[i];
      if constexpr (Tok::GW > 1) tal[col] = t.alpha[i];
    }
}

/// Reads lane lr's columns of the token back into t (GDN's alpha and beta: the caller's).
template <class Tok>
__device__ __forceinline__ void token_from_smem(Tok& t, const float* tk, const float* tq,
                                                const float* ta, const float* tal, int lr) {
  using Lay = typename Tok::Lay;
#pragma unroll
  for (int c = 0; c < Tok::CPL; ++c)
#pragma unroll
    for (int v = 0; v < Tok::VEC; ++v) {
      const int i = c * Tok::VEC + v, col = Lay::col(c, lr) + v;
      t.khat[i] = tk[col], t.qhat[i] = tq[col], t.ak[i] = ta[col];
      if constexpr (Tok::GW > 1) t.alpha[i] = tal[col];
    }
}

/// One record's term of the fold on a thread's RPT consecutive rows from r0:
/// s[i] += u[r0 + i] kq, with u the record's row values in shared memory (four rows per float4
/// read; rows past nrows read row 0 and are never stored). SCALE: u is multiplied by c first
/// (rounded, then the FMA), else u is already c_j·u_j.
template <bool SCALE, int RPT, int COLS>
__device__ __forceinline__ void fold_record(float (&s)[RPT][COLS], const float (&kq)[COLS],
                                            const float* u, int r0, int nrows, float c) {
  static_assert(RPT % 4 == 0, "a thread's rows are read as float4 from the ring u rows");
#pragma unroll
  for (int i0 = 0; i0 < RPT; i0 += 4) {
    const int rq = r0 + i0 < nrows ? r0 + i0 : 0;  // four rows, all valid or none
    const float4 u4 = *reinterpret_cast<const float4*>(u + rq);
    float uf[4] = {u4.x, u4.y, u4.z, u4.w};
    if constexpr (SCALE)
#pragma unroll
      for (int f = 0; f < 4; ++f) uf[f] = __fmul_rn(c, uf[f]);
#pragma unroll
    for (int f = 0; f < 4; ++f)
#pragma unroll
      for (int e = 0; e < COLS; ++e) s[i0 + f][e] = __fmaf_rn(uf[f], kq[e], s[i0 + f][e]);
  }
}

}  // namespace replayssm::cuda::gdn
