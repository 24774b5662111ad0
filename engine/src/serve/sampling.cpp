#include "replayssm/engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "replayssm/errors.h"

namespace replayssm::engine {

void SamplingParams::validate() const {
  check<ConfigError>(temperature >= 0 && std::isfinite(temperature), "temperature is ",
                     temperature, ", expected >= 0");
  check<ConfigError>(top_k >= 0, "top_k is ", top_k, ", expected >= 0");
  check<ConfigError>(top_p > 0 && top_p <= 1, "top_p is ", top_p, ", expected in (0, 1]");
}

std::mt19937_64 request_rng(const SamplingParams& p, uint64_t index) {
  std::seed_seq seq{uint32_t(p.seed), uint32_t(p.seed >> 32), uint32_t(index),
                    uint32_t(index >> 32)};
  return std::mt19937_64(seq);
}

namespace {

/// The tokens sample_token keeps, most likely first, with unnormalised weights (sum: their total).
struct Kept {
  std::vector<int32_t> ids;
  std::vector<double> prob;
  int64_t keep = 0;
  double sum = 0;
};

Kept kept_tokens(std::span<const float> logits, const SamplingParams& p) {
  const int64_t V = static_cast<int64_t>(logits.size());
  Kept k;
  k.ids.resize(V);
  std::iota(k.ids.begin(), k.ids.end(), 0);
  std::stable_sort(k.ids.begin(), k.ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  k.keep = p.top_k > 0 ? std::min<int64_t>(p.top_k, V) : V;
  k.prob.resize(k.keep);
  const double mx = logits[k.ids[0]];
  for (int64_t i = 0; i < k.keep; ++i)
    k.sum += k.prob[i] = std::exp((logits[k.ids[i]] - mx) / p.temperature);
  if (p.top_p < 1.0) {
    double mass = 0;
    int64_t n = 0;
    while (n < k.keep && mass < p.top_p * k.sum) mass += k.prob[n++];
    k.keep = std::max<int64_t>(n, 1);
    k.sum = mass;
  }
  return k;
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

int32_t greedy_token(std::span<const float> logits) {
  for (const float v : logits)
    if (!std::isfinite(v)) return -1;
  return argmax(logits);
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p,
                     std::mt19937_64& rng) {
  if (p.temperature == 0.0) return argmax(logits);
  const Kept k = kept_tokens(logits, p);
  std::uniform_real_distribution<double> u(0.0, k.sum);
  double r = u(rng), acc = 0;
  for (int64_t i = 0; i < k.keep; ++i) {
    acc += k.prob[i];
    if (r < acc) return k.ids[i];
  }
  return k.ids[k.keep - 1];
}

std::vector<double> token_probs(std::span<const float> logits, const SamplingParams& p) {
  std::vector<double> out(logits.size(), 0.0);
  if (p.temperature == 0.0) {
    out[argmax(logits)] = 1.0;
    return out;
  }
  const Kept k = kept_tokens(logits, p);
  for (int64_t i = 0; i < k.keep; ++i) out[k.ids[i]] = k.prob[i] / k.sum;
  return out;
}

}  // namespace replayssm::engine
