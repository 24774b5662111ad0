#include "replayssm/engine/serve.h"

#include <chrono>
#include <cmath>
#include <deque>

#include "replayssm/errors.h"
#include "serve/requests.h"

namespace replayssm::engine {

std::vector<Completion> serve(Model& model, const std::vector<Request>& requests, int32_t batch,
                              const SamplingParams& sampling, ServeStats* stats,
                              const TokenCallback& on_token, const StepCallback& on_step) {
  const int64_t V = model.config().vocab_size;
  check_requests(model, requests, batch, sampling);

  struct Active {
    size_t req;
    int32_t slot;
    size_t fed = 0;        // prompt tokens fed so far
    int32_t next = 0;      // token to feed this step
    std::mt19937_64 rng;
  };
  std::vector<Completion> out(requests.size());
  std::deque<size_t> queue;
  for (size_t i = 0; i < requests.size(); ++i) queue.push_back(i);
  std::vector<int32_t> free_slots;
  for (int32_t s = batch - 1; s >= 0; --s) free_slots.push_back(s);
  std::vector<Active> active;
  size_t finished = 0;
  ServeStats st;
  const auto t0 = std::chrono::steady_clock::now();

  std::vector<int32_t> tokens, slots, next;
  std::vector<float> logits;
  // Greedy decoding needs only each row's argmax: step_greedy (on CUDA computed on the device, so
  // one id per row leaves it instead of the row's logits).
  const bool greedy = sampling.temperature == 0.0;
  while (!queue.empty() || !active.empty()) {
    // Admit queued requests into free slots (fresh state for each).
    std::vector<int32_t> fresh;
    while (!queue.empty() && !free_slots.empty()) {
      const size_t r = queue.front();
      queue.pop_front();
      if (requests[r].max_new_tokens == 0) { ++finished; continue; }
      Active a{r, free_slots.back(), 0, 0, request_rng(sampling, r)};
      free_slots.pop_back();
      fresh.push_back(a.slot);
      active.push_back(std::move(a));
    }
    if (!fresh.empty()) model.reset(fresh);
    if (active.empty()) break;

    tokens.clear();
    slots.clear();
    for (Active& a : active) {
      const Request& r = requests[a.req];
      tokens.push_back(a.fed < r.prompt.size() ? r.prompt[a.fed] : a.next);
      slots.push_back(a.slot);
    }
    if (greedy) {
      next.resize(active.size());
      model.step_greedy(tokens, slots, next);
    } else {
      logits.resize(active.size() * V);
      model.step(tokens, slots, logits);
    }
    if (++st.steps == 1) {
      st.first_step_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      st.first_step_tokens = static_cast<int64_t>(tokens.size());
    }

    std::vector<Active> still;
    for (size_t i = 0; i < active.size(); ++i) {
      Active& a = active[i];
      const Request& r = requests[a.req];
      // A NaN or Inf logit (a damaged checkpoint, an overflow) would be sampled as token 0 and
      // stream garbage: stop instead, naming the request and its position.
      if (greedy)
        check_greedy_finite(next[i], a.req, model.position(a.slot) - 1);
      else
        check_logits_finite({logits.data() + i * V, size_t(V)}, a.req, model.position(a.slot) - 1);
      if (a.fed < r.prompt.size()) {
        ++a.fed;
        ++st.prompt_tokens;
        if (a.fed < r.prompt.size()) { still.push_back(std::move(a)); continue; }
      }
      // The logits of the last fed token give the next token.
      const int32_t t =
          greedy ? next[i] : sample_token({logits.data() + i * V, size_t(V)}, sampling, a.rng);
      out[a.req].tokens.push_back(t);
      ++st.generated_tokens;
      if (on_token) on_token(a.req, t);
      if (int32_t(out[a.req].tokens.size()) >= r.max_new_tokens) {
        free_slots.push_back(a.slot);
        ++finished;
      } else {
        a.next = t;
        still.push_back(std::move(a));
      }
    }
    active = std::move(still);
    if (on_step) on_step(finished, requests.size());
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = st;
  return out;
}

}  // namespace replayssm::engine

namespace replayssm::engine {

void check_requests(const Model& model, const std::vector<Request>& requests, int32_t batch,
                    const SamplingParams& sampling) {
  const ModelOptions& opt = model.options();
  const int64_t V = model.config().vocab_size;
  sampling.validate();
  check<ConfigError>(batch >= 1 && batch <= opt.max_slots, "batch is ", batch, ", expected 1..",
                     opt.max_slots, " (the model's max_slots)");
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    check<ConfigError>(!r.prompt.empty(), "request ", i, ": empty prompt");
    check<ConfigError>(r.max_new_tokens >= 0, "request ", i, ": max_new_tokens is ",
                       r.max_new_tokens, ", expected >= 0");
    check<ConfigError>(int64_t(r.prompt.size()) + r.max_new_tokens <= opt.max_context,
                       "request ", i, ": prompt (", r.prompt.size(), " tokens) + max_new_tokens (",
                       r.max_new_tokens, ") exceeds the context of ", opt.max_context);
    for (int32_t t : r.prompt)
      check<ConfigError>(t >= 0 && t < V, "request ", i, ": token ", t, " outside [0, ", V, ")");
  }
}

void check_greedy_finite(int32_t id, size_t request, int64_t position) {
  check<Error>(id >= 0, "request ", request, ": non-finite logit at position ", position);
}

void check_logits_finite(std::span<const float> logits, size_t request, int64_t position) {
  for (size_t v = 0; v < logits.size(); ++v)
    check<Error>(std::isfinite(logits[v]), "request ", request, ": non-finite logit (", logits[v],
                 ") for token ", v, " at position ", position);
}

}  // namespace replayssm::engine
