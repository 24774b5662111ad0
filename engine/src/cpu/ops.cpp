#include "cpu/ops.h"

#include <cblas.h>

#include <cmath>

namespace replayssm::engine::cpu {

void Linear::apply(const float* x, int64_t B, float* y) const {
  if (!bias.empty()) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t o = 0; o < out; ++o) y[b * out + o] = bias[o];
  }
  // Decode GEMMs have few rows: sgemm would pack all of W on every call (measured 77% of a
  // batch-1 step); a matrix-vector product per row reads W once per row without packing.
  if (B <= 4) {
    for (int64_t b = 0; b < B; ++b)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(out), static_cast<int>(in), 1.0f,
                  w.data(), static_cast<int>(in), x + b * in, 1, bias.empty() ? 0.0f : 1.0f,
                  y + b * out, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(B), static_cast<int>(out),
              static_cast<int>(in), 1.0f, x, static_cast<int>(in), w.data(),
              static_cast<int>(in), bias.empty() ? 0.0f : 1.0f, y, static_cast<int>(out));
}

void rms_norm(const float* x, const float* w, int64_t B, int64_t n, double eps, bool one_plus,
              float* y) {
  for (int64_t b = 0; b < B; ++b) {
    const float* xr = x + b * n;
    float* yr = y + b * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / double(n) + eps));
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * r * (one_plus ? 1.0f + w[i] : w[i]);
  }
}

float silu(float v) { return v / (1.0f + std::exp(-v)); }
float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

void conv_step(float* state, const float* x, const float* w, const float* bias, int64_t C,
               int64_t k, float* out) {
  for (int64_t c = 0; c < C; ++c) {
    float* s = state + c * k;
    for (int64_t j = 0; j + 1 < k; ++j) s[j] = s[j + 1];
    s[k - 1] = x[c];
    float acc = bias ? bias[c] : 0.0f;
    for (int64_t j = 0; j < k; ++j) acc += s[j] * w[c * k + j];
    out[c] = silu(acc);
  }
}

void rope_neox(float* head, int64_t rotary_dim, int64_t pos, double theta) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float inv_freq =
        static_cast<float>(1.0 / std::pow(theta, double(2 * i) / double(rotary_dim)));
    const float angle = static_cast<float>(pos) * inv_freq;
    const float c = std::cos(angle), s = std::sin(angle);
    const float x1 = head[i], x2 = head[i + half];
    head[i] = x1 * c - x2 * s;
    head[i + half] = x2 * c + x1 * s;
  }
}

}  // namespace replayssm::engine::cpu
