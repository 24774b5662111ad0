// The serving loop: a queue of requests decoded together with continuous batching. Each step
// feeds every active request one token (prompt tokens first — prefill one token per step — then
// its own samples); a finished request frees its slot and the next queued request takes it after
// a reset, so slot reuse is exercised on every run.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "replayssm/engine/model.h"
#include "replayssm/engine/sampling.h"

namespace replayssm::engine {

struct Request {
  std::vector<int32_t> prompt;  ///< at least one token
  int32_t max_new_tokens = 64;
};

struct Completion {
  std::vector<int32_t> tokens;  ///< generated tokens (without the prompt)
};

struct ServeStats {
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0;
  double seconds = 0;  ///< wall time of the decode loop
  /// Wall time and tokens of the first step alone (CUDA: kernel loading, workspace allocation,
  /// eager warm-up), so that a rate can be quoted for the steady state after it.
  double first_step_seconds = 0;
  int64_t first_step_tokens = 0;
  /// Tokens (prompt + generated) per second after the first step; 0 with a single step.
  double steady_tokens_per_s() const {
    const double t = seconds - first_step_seconds;
    const int64_t n = prompt_tokens + generated_tokens - first_step_tokens;
    return t > 0 && n > 0 ? double(n) / t : 0.0;
  }
};

/// Called after every generated token: (request index, token).
using TokenCallback = std::function<void(size_t, int32_t)>;
/// Called after every step: (requests finished, requests total).
using StepCallback = std::function<void(size_t, size_t)>;

/// Runs all requests to completion with at most `batch` (<= max_slots) active at once.
/// Errors: ConfigError (empty prompt, batch < 1, prompt + max_new_tokens past the context);
/// Error for a non-finite logit (the run stops: sampling it would stream garbage). Greedy
/// sampling (temperature 0) steps with Model::step_greedy: only the argmax leaves the model.
std::vector<Completion> serve(Model& model, const std::vector<Request>& requests, int32_t batch,
                              const SamplingParams& sampling, ServeStats* stats = nullptr,
                              const TokenCallback& on_token = {}, const StepCallback& on_step = {});

}  // namespace replayssm::engine
