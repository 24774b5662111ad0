// Shared float32 building blocks of the GDN/KDA CPU backend: geometry and indexing, per-token
// preparation (l2norm, beta, gate) and the conventional update of one state row. The conventional
// step and the replay flush both call update_row(), so a flush with an empty history is the
// conventional step bit for bit (DESIGN.md §3 invariant 1).
#pragma once
#include <cmath>
#include <cstdint>

#include "common/dtype.h"
#include "gdn_cpu.h"

namespace replayssm::gdn::cpu {

/// Sizes of a call and the flat offsets of its contiguous tensors.
struct Geometry {
  int64_t H, HV, K, V;
  int64_t gw;     ///< gate width: K (KDA, a decay per key channel) or 1 (GDN)
  int64_t group;  ///< value heads per key head
  int64_t T;      ///< token axis of the inputs and y
  int64_t R;      ///< ring rows (0 without cursors)
  float scale;    ///< q scale, resolved (0 -> K^-1/2)

  Geometry(const Call& c) {
    const Dims& d = c.layer->dims;
    H = d.num_k_heads, HV = d.num_v_heads, K = d.head_k_dim, V = d.head_v_dim;
    gw = d.gate == Gate::kChannel ? K : 1;
    group = HV / H;
    T = c.in.q.shape[1];
    R = c.cursors ? c.cursors->config.rows() : 0;
    scale = c.layer->scale != 0.0f ? c.layer->scale : 1.0f / std::sqrt(static_cast<float>(K));
  }
  /// Whether a call over `batch` rows is worth a parallel region: below ~64k multiply-adds the
  /// fork/join (on a loaded machine, threads spinning at the barrier) costs more than the work.
  bool parallel(int64_t batch) const {
    return batch * HV * V * K * (T + R / 4) >= (int64_t{1} << 16);
  }
  int64_t key_head(int64_t vh) const { return vh / group; }
  /// Gate entry of key channel c: the channel itself (KDA) or the head's one gate (GDN).
  int64_t gi(int64_t c) const { return gw == 1 ? 0 : c; }
  // token tensors [batch, T, heads, dim]
  int64_t qk_off(int64_t b, int64_t t, int64_t kh) const { return ((b * T + t) * H + kh) * K; }
  int64_t v_off(int64_t b, int64_t t, int64_t vh) const { return ((b * T + t) * HV + vh) * V; }
  int64_t head_off(int64_t b, int64_t t, int64_t vh) const { return (b * T + t) * HV + vh; }
  // cache tensors
  int64_t state_off(int64_t slot, int64_t vh) const { return (slot * HV + vh) * V * K; }
  int64_t ring_u_off(int64_t slot, int64_t vh, int64_t row) const {
    return ((slot * HV + vh) * R + row) * V;
  }
  int64_t ring_k_off(int64_t slot, int64_t kh, int64_t row) const {
    return ((slot * H + kh) * R + row) * K;
  }
  int64_t ring_g_off(int64_t slot, int64_t vh, int64_t row) const {
    return ((slot * HV + vh) * R + row) * gw;
  }
};

inline float softplus_f(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

/// x / sqrt(sum x^2 + 1e-6) * scale of the K values of view x at offset off.
inline void l2norm(const TensorView& x, int64_t off, int64_t K, float scale, float* out) {
  float ss = 0.0f;
  for (int64_t c = 0; c < K; ++c) {
    const float v = load_f32(x, off + c);
    ss += v * v;
  }
  const float inv = 1.0f / std::sqrt(ss + 1e-6f);
  for (int64_t c = 0; c < K; ++c) out[c] = load_f32(x, off + c) * inv * scale;
}

/// The per-token quantities of value head vh: k^ and q^ of its key head [K], its gate g [gw]
/// (g = -exp(A_log) softplus(a + dt_bias), <= 0) and beta.
inline void prep_token(const Geometry& geo, const Call& c, int64_t b, int64_t t, int64_t vh,
                       float* khat, float* qhat, float* g, float* beta) {
  const int64_t kh = geo.key_head(vh);
  l2norm(c.in.k, geo.qk_off(b, t, kh), geo.K, 1.0f, khat);
  l2norm(c.in.q, geo.qk_off(b, t, kh), geo.K, geo.scale, qhat);
  const float A = std::exp(c.layer->A_log.ptr<float>()[vh]);
  const float* dt_bias = c.layer->dt_bias.ptr<float>() + vh * geo.gw;
  const int64_t a_off = geo.head_off(b, t, vh) * geo.gw;
  for (int64_t i = 0; i < geo.gw; ++i)
    g[i] = -A * softplus_f(load_f32(c.in.a, a_off + i) + dt_bias[i]);
  // sigmoid in float32; beta_bf16 rounds it to bfloat16 like the peers' kernels (method.md §3.1)
  const float s = 1.0f / (1.0f + std::exp(-load_f32(c.in.b, geo.head_off(b, t, vh))));
  *beta = c.layer->beta_bf16 ? bf16_to_f32(f32_to_bf16(s)) : s;
}

/// alpha[c] = e^{g} per key channel and ak = alpha . k^.
inline void decay(const Geometry& geo, const float* g, const float* khat, float* alpha, float* ak) {
  for (int64_t c = 0; c < geo.K; ++c) {
    alpha[c] = std::exp(g[geo.gi(c)]);
    ak[c] = alpha[c] * khat[c];
  }
}

/// The conventional step on one state row s[0..K) (value channel with input v), in place:
/// hk = s . (alpha . k^);  u = beta (v - hk);  s <- s . alpha + u k^;  returns y = s . q^.
inline float update_row(float* s, const float* alpha, const float* ak, const float* khat,
                        const float* qhat, int64_t K, float beta, float v) {
  float hk = 0.0f;
  for (int64_t c = 0; c < K; ++c) hk += s[c] * ak[c];
  const float u = beta * (v - hk);
  for (int64_t c = 0; c < K; ++c) s[c] = s[c] * alpha[c] + u * khat[c];
  float y = 0.0f;
  for (int64_t c = 0; c < K; ++c) y += s[c] * qhat[c];
  return y;
}

}  // namespace replayssm::gdn::cpu
