// Private pieces of the Mamba-2 CPU backend shared by its translation units: buffer geometry,
// row loads/stores and the float32 arithmetic every route uses. The conventional step and the
// flush's final update call the same inline functions, so at L = 1 they are the same operations
// in the same order (bit-identical by construction, not by a special case).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "cpu/mamba2_cpu.h"

namespace replayssm::cpu::mamba2 {

/// Sizes and strides of one call. Token tensors are rank 4 [batch, T, ...] (normalised by the API).
struct Geo {
  int64_t H, P, N, G, heads_per_group;
  int64_t R;   ///< ring rows (0 when the op has no ring)
  int64_t T;   ///< token axis of the inputs
  int64_t Ty;  ///< token axis of y
  Geo(const Layer& layer, const Tokens& in, const TensorView& y, int64_t rows)
      : H(layer.dims.nheads), P(layer.dims.headdim), N(layer.dims.d_state),
        G(layer.dims.ngroups), heads_per_group(H / G), R(rows), T(in.x.shape[1]),
        Ty(y.shape[1]) {}
  int64_t group(int64_t h) const { return h / heads_per_group; }
  // Offsets (in elements) into the pool buffers.
  int64_t state(int64_t slot, int64_t h) const { return (slot * H + h) * P * N; }
  int64_t ring_x(int64_t slot, int64_t h, int64_t row) const { return ((slot * H + h) * R + row) * P; }
  int64_t ring_dt(int64_t slot, int64_t h, int64_t row) const { return (slot * H + h) * R + row; }
  int64_t ring_B(int64_t slot, int64_t g, int64_t row) const { return ((slot * G + g) * R + row) * N; }
  // Offsets into the per-call token tensors and y.
  int64_t x(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * P; }
  int64_t dt(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * H + h; }
  int64_t bc(int64_t b, int64_t t, int64_t g) const { return ((b * T + t) * G + g) * N; }
  int64_t y(int64_t b, int64_t t, int64_t h) const { return ((b * Ty + t) * H + h) * P; }
};

/// Whether a loop of about `flops` operations is worth waking the OpenMP team: tiny calls run
/// on the calling thread (same results, the per-item arithmetic does not depend on threads).
inline bool worth_threads(int64_t flops) { return flops >= (int64_t{1} << 16); }

/// The cursor of one slot, read from host-resident cursors.
inline Cursor cursor_of(const RingCursors& c, int32_t slot) {
  return Cursor{c.origin.ptr<int32_t>()[slot], c.h.ptr<int32_t>()[slot],
                c.is_flush.ptr<int8_t>()[slot] != 0};
}
inline int64_t ring_row(const Cursor& c, int64_t l, int64_t R) { return (c.origin + l) % R; }

// ---- loads and stores (inputs float32 or bfloat16, converted on load) --------------------------

inline void load_row(const TensorView& t, int64_t off, int64_t n, float* out) {
  if (t.dtype == DType::kF32) {
    std::memcpy(out, t.ptr<const float>() + off, static_cast<size_t>(n) * sizeof(float));
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(t.data) + off;
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(src[i]);
  }
}

inline void store_row(const TensorView& t, int64_t off, int64_t n, const float* v) {
  if (t.dtype == DType::kF32) {
    std::memcpy(t.ptr<float>() + off, v, static_cast<size_t>(n) * sizeof(float));
  } else {
    uint16_t* dst = static_cast<uint16_t*>(t.data) + off;
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(v[i]);
  }
}

/// +0 in every float format is all-zero bytes.
inline void zero_row(const TensorView& t, int64_t off, int64_t n) {
  std::memset(static_cast<uint8_t*>(t.data) + off * dtype_size(t.dtype), 0,
              static_cast<size_t>(n * dtype_size(t.dtype)));
}

// ---- scalar math --------------------------------------------------------------------------------

inline float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }
inline float silu(float z) { return z / (1.0f + std::exp(-z)); }

/// A = -exp(A_log) and delta = softplus(dt + dt_bias) of one head and token.
struct HeadScalars {
  float A, delta;
};
inline float head_A(const Layer& layer, int64_t h) { return -std::exp(layer.A_log.ptr<const float>()[h]); }
inline HeadScalars head_scalars(const Layer& layer, int64_t h, float dt_raw) {
  const float v = dt_raw + layer.dt_bias.ptr<const float>()[h];
  return HeadScalars{head_A(layer, h), layer.dt_softplus ? softplus(v) : v};
}

/// One token of one (row, head) loaded as float32: x, the optional gate z, B and C of the head's
/// group, and its scalars. Buffers are per thread, allocated once per call.
struct HeadToken {
  std::vector<float> x, z, B, C;
  HeadScalars s{};
  bool gated = false;
  HeadToken(int64_t P, int64_t N) : x(P), z(P), B(N), C(N) {}
  void load(const Layer& layer, const Tokens& in, const Geo& geo, int64_t b, int64_t t, int64_t h) {
    const int64_t g = geo.group(h);
    load_row(in.x, geo.x(b, t, h), geo.P, x.data());
    gated = !in.z.empty();
    if (gated) load_row(in.z, geo.x(b, t, h), geo.P, z.data());
    load_row(in.B, geo.bc(b, t, g), geo.N, B.data());
    load_row(in.C, geo.bc(b, t, g), geo.N, C.data());
    s = head_scalars(layer, h, load_f32(in.dt, geo.dt(b, t, h)));
  }
  const float* z_at(int64_t p) const { return gated ? &z[p] : nullptr; }
};

/// Inclusive prefix sums of delta in one fixed order: cum[j] = delta[0] + ... + delta[j].
inline void prefix_sums(const float* delta, int64_t m, float* cum) {
  float run = 0.0f;
  for (int64_t j = 0; j < m; ++j) cum[j] = run += delta[j];
}

/// Decay of the checkpoint up to and including logical position t (t = -1: none, decay 1).
/// Exponent arguments are <= 0: A < 0 and the prefix sums are non-decreasing.
inline float checkpoint_decay(float A, const float* cum, int64_t t) {
  return std::exp(A * (t >= 0 ? cum[t] : 0.0f));
}
/// Weight of record j in the state at position t >= j: delta_j exp(A (P_t - P_j)).
inline float record_weight(float A, const float* delta, const float* cum, int64_t j, int64_t t) {
  return delta[j] * std::exp(A * (cum[t] - cum[j]));
}

// ---- the recurrence -----------------------------------------------------------------------------

/// The conventional update of one state row followed by its readout:
///   row <- a row + (delta x_p) B;  returns row . C.
/// Used in place by the conventional step and on the folded row by the decode flush.
inline float update_and_read(float* row, int64_t N, float a, float dx, const float* B,
                             const float* C) {
  for (int64_t n = 0; n < N; ++n) row[n] = a * row[n] + dx * B[n];
  float acc = 0.0f;
  for (int64_t n = 0; n < N; ++n) acc += row[n] * C[n];
  return acc;
}

/// y_p from the readout: + D x_p, then the optional z gate.
inline float finish(float acc, const float* D, int64_t h, float x, const float* z) {
  if (D) acc += D[h] * x;
  if (z) acc *= silu(*z);
  return acc;
}

/// Row p of the state after folding records 0..m-1 into the checkpoint:
///   out = decay S0[p, :] + sum_j (w_j x_j[p]) B_j,
/// xs[j] / Bs[j] pointing at record j's x (P values) and B (N values).
inline void fold_row(float* out, const float* S0_row, int64_t N, int64_t p, float decay,
                     const float* w, const float* const* xs, const float* const* Bs, int64_t m) {
  for (int64_t n = 0; n < N; ++n) out[n] = decay * S0_row[n];
  for (int64_t j = 0; j < m; ++j) {
    const float c = w[j] * xs[j][p];
    const float* B = Bs[j];
    for (int64_t n = 0; n < N; ++n) out[n] += c * B[n];
  }
}

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

}  // namespace replayssm::cpu::mamba2
