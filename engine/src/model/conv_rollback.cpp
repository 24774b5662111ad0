#include "model/conv_rollback.h"

#include <algorithm>

namespace replayssm::engine {

void ConvRollback::save(const Batch& batch, const float* states, int64_t C, int64_t k) {
  C_ = C;
  k_ = k;
  saved_.resize(batch.n * C * k);
  inputs_.resize(batch.tokens * C);
  for (int64_t b = 0; b < batch.n; ++b)
    if (batch.slots[b] >= 0)
      std::copy_n(states + batch.slots[b] * C * k, C * k, &saved_[b * C * k]);
}

void ConvRollback::record(int64_t i, const float* x) { std::copy_n(x, C_, &inputs_[i * C_]); }

void ConvRollback::restore(const Batch& batch, const int32_t* accepted, float* states) const {
  const int64_t C = C_, k = k_;
  for (int64_t b = 0; b < batch.n; ++b) {
    const int64_t n = accepted[b];
    if (batch.slots[b] < 0 || n == batch.ntok[b]) continue;
    float* st = states + batch.slots[b] * C * k;
    const float* old = &saved_[b * C * k];
    const float* in = &inputs_[batch.off[b] * C];
    // Window = saved state (k values) then the n accepted inputs; keep its last k values.
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t w = n + j;  // index into the window of length k + n
        st[c * k + j] = w < k ? old[c * k + w] : in[(w - k) * C + c];
      }
  }
}

}  // namespace replayssm::engine
