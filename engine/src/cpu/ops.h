// Float32 CPU building blocks of the decode step. Row-major; B = rows in the batch.
#pragma once
#include <cstdint>
#include <vector>

namespace replayssm::engine::cpu {

/// A dense layer: y = x W^T (+ bias). W [out, in] as stored by torch nn.Linear.
struct Linear {
  int64_t out = 0, in = 0;
  std::vector<float> w;     ///< [out, in]
  std::vector<float> bias;  ///< [out] or empty
  /// y [B, out] = x [B, in] W^T + bias (BLAS sgemm).
  void apply(const float* x, int64_t B, float* y) const;
};

/// RMSNorm over n channels of each of B rows: y = x * rsqrt(mean(x^2) + eps) * w, or
/// * (1 + w) when one_plus (Qwen style, models.md §2.1). In place allowed.
void rms_norm(const float* x, const float* w, int64_t B, int64_t n, double eps, bool one_plus,
              float* y);

float silu(float v);
float sigmoid(float v);
/// torch.nn.functional.softplus with threshold 20 (returns v when v > 20).
float softplus(float v);

/// Causal depthwise conv1d decode step over C channels with kernel k (HF 4-tap cache, oldest
/// first): shifts state [C, k] left, appends x, out[c] = sum_j state[c][j] w[c][j] (+ bias[c]),
/// then SiLU. w [C, k] (the [C, 1, k] torch weight), bias [C] or nullptr.
void conv_step(float* state, const float* x, const float* w, const float* bias, int64_t C,
               int64_t k, float* out);

/// NeoX rotate-half RoPE on the first rotary_dim dims of a head of size head_dim (the rest pass
/// through), at position pos: inv_freq_i = theta^(-2i / rotary_dim). cos/sin in float32.
void rope_neox(float* head, int64_t rotary_dim, int64_t pos, double theta);

}  // namespace replayssm::engine::cpu
