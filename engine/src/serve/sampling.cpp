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

int32_t sample_token(std::span<const float> logits, const SamplingParams& p,
                     std::mt19937_64& rng) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (p.temperature == 0.0)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int64_t keep = p.top_k > 0 ? std::min<int64_t>(p.top_k, V) : V;
  std::vector<double> prob(keep);
  const double mx = logits[ids[0]];
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += prob[i] = std::exp((logits[ids[i]] - mx) / p.temperature);
  if (p.top_p < 1.0) {
    double mass = 0;
    int64_t n = 0;
    while (n < keep && mass < p.top_p * sum) mass += prob[n++];
    keep = std::max<int64_t>(n, 1);
    sum = mass;
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng), acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += prob[i];
    if (r < acc) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace replayssm::engine
