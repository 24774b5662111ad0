// Checks shared by the serving loops (serve.h, speculative.h).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "replayssm/engine/serve.h"

namespace replayssm::engine {

/// ConfigError for a bad batch, an empty prompt, a token outside the vocab or a request that
/// does not fit the context; sampling.validate().
void check_requests(const Model& model, const std::vector<Request>& requests, int32_t batch,
                    const SamplingParams& sampling);

/// Error for a NaN or Inf logit (a damaged checkpoint, an overflow): sampling it would stream
/// garbage, so the run stops naming the request and the position.
void check_logits_finite(std::span<const float> logits, size_t request, int64_t position);
/// The same for a greedy id from Model::step_greedy / verify_greedy (-1: a non-finite row).
void check_greedy_finite(int32_t id, size_t request, int64_t position);

}  // namespace replayssm::engine
