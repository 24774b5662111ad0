// Per-position comparison of two next-token distributions given as logits: float64 log-softmax,
// KL(reference || candidate) in nats, top-1 agreement, -log2 p(next) on both sides.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "eval/stats.h"
#include "replayssm/errors.h"

namespace replayssm::engine {
namespace eval_detail {

double log_sum_exp(std::span<const float> row) {
  double m = -std::numeric_limits<double>::infinity();
  for (float z : row) m = std::max(m, double(z));
  if (!std::isfinite(m)) return m;  // all -inf (or a +inf / NaN row): propagate
  double s = 0;
  for (float z : row) s += std::exp(double(z) - m);
  return m + std::log(s);
}

namespace {
size_t argmax(std::span<const float> row) {
  return size_t(std::max_element(row.begin(), row.end()) - row.begin());  // first maximum
}
}  // namespace

TokenComparison compare_rows(std::span<const float> ref, double ref_lse,
                             std::span<const float> cand, int32_t next) {
  const double cand_lse = log_sum_exp(cand);
  // KL = sum_i p_i (log p_i - log q_i). Identical rows give identical log-probabilities, so every
  // term is exactly 0; terms with p_i == 0 (underflow) contribute 0.
  double kl = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double lp = double(ref[i]) - ref_lse;
    const double p = std::exp(lp);
    if (p > 0) kl += p * (lp - (double(cand[i]) - cand_lse));
  }
  TokenComparison c;
  c.kl = kl;
  c.top1_agree = argmax(ref) == argmax(cand);
  c.ref_bits = -(double(ref[next]) - ref_lse) / std::numbers::ln2;
  c.cand_bits = -(double(cand[next]) - cand_lse) / std::numbers::ln2;
  return c;
}

}  // namespace eval_detail

TokenComparison compare_logits(std::span<const float> ref, std::span<const float> cand,
                               int32_t next) {
  check<ShapeError>(!ref.empty() && ref.size() == cand.size(), "compare_logits: rows of ",
                    ref.size(), " and ", cand.size(), " logits, expected equal non-zero sizes");
  check<ConfigError>(next >= 0 && size_t(next) < ref.size(), "compare_logits: next token ", next,
                     " outside [0, ", ref.size(), ")");
  return eval_detail::compare_rows(ref, eval_detail::log_sum_exp(ref), cand, next);
}

}  // namespace replayssm::engine
