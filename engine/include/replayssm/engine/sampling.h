// Token sampling: greedy, or temperature with optional top-k / top-p (nucleus) filtering, from a
// per-request random stream so results do not depend on how requests are batched.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace replayssm::engine {

struct SamplingParams {
  double temperature = 0.0;  ///< 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 0;         ///< 0: no top-k filter
  double top_p = 1.0;        ///< 1: no nucleus filter; else keep the smallest set with mass >= p
  uint64_t seed = 0;
  /// ConfigError for temperature < 0, top_k < 0, top_p outside (0, 1].
  void validate() const;
};

/// Samples one token from logits [vocab] (float32). The generator is the request's own stream.
int32_t sample_token(std::span<const float> logits, const SamplingParams& p, std::mt19937_64& rng);

/// The distribution sample_token draws from for temperature > 0: probabilities [vocab] after
/// temperature, top-k and top-p (0 outside the kept set, summing to 1). Greedy (temperature 0):
/// one-hot at the argmax (lowest id on ties).
std::vector<double> token_probs(std::span<const float> logits, const SamplingParams& p);

/// Greedy token of logits [vocab]: the argmax, the lowest id on ties (sample_token at
/// temperature 0), or -1 when any logit is NaN or infinite (Model::step_greedy's rule).
int32_t greedy_token(std::span<const float> logits);

/// The stream of request `index` for seed p.seed.
std::mt19937_64 request_rng(const SamplingParams& p, uint64_t index);

}  // namespace replayssm::engine
