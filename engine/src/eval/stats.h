// Private helpers of the evaluation: position buckets and running sums of per-position metrics.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "replayssm/engine/eval.h"

namespace replayssm::engine::eval_detail {

/// ConfigError unless edges are strictly increasing and positive.
void validate_edges(std::span<const int64_t> edges);

/// The buckets [0,e1), [e1,e2), ..., [e_last, max) that hold a position of [0, positions).
std::vector<EvalStats> make_buckets(std::span<const int64_t> edges, int64_t positions);

/// log(sum(exp(row))) in float64 (max-shifted).
double log_sum_exp(std::span<const float> row);

/// compare_logits with the reference row's log_sum_exp already known (shared by every candidate).
TokenComparison compare_rows(std::span<const float> ref, double ref_lse,
                             std::span<const float> cand, int32_t next);

/// Running sums over positions; finish() turns them into means.
class Accumulator {
 public:
  void add(const TokenComparison& c) {
    ++n_;
    kl_ += c.kl;
    if (c.kl > kl_max_ || c.kl != c.kl) kl_max_ = c.kl;  // a NaN is kept, not hidden
    agree_ += c.top1_agree ? 1 : 0;
    bits_ += c.cand_bits;
    ref_bits_ += c.ref_bits;
  }
  /// Means over the positions added; bucket bounds from `into` are kept.
  EvalStats finish(EvalStats into) const {
    into.positions = n_;
    const double d = n_ > 0 ? double(n_) : 1.0;
    into.kl = kl_ / d;
    into.kl_max = kl_max_;
    into.top1_agreement = double(agree_) / d;
    into.bits_per_byte = bits_ / d;
    into.ref_bits_per_byte = ref_bits_ / d;
    return into;
  }

 private:
  int64_t n_ = 0, agree_ = 0;
  double kl_ = 0, kl_max_ = 0, bits_ = 0, ref_bits_ = 0;
};

}  // namespace replayssm::engine::eval_detail
