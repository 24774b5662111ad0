// The teacher-forced evaluation loop: W windows of the text decoded in lockstep by the reference
// and every candidate, compared position by position (eval.h).
#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <memory>
#include <vector>

#include "eval/stats.h"
#include "model/state_store.h"
#include "replayssm/errors.h"

namespace replayssm::engine {

using eval_detail::Accumulator;

EvalResult evaluate(const std::string& model_dir, std::span<const int32_t> tokens,
                    const EvalConfig& reference, std::span<const EvalConfig> candidates,
                    const EvalOptions& options, const EvalProgress& progress) {
  const int64_t N = int64_t(tokens.size()), W = options.windows;
  check<ConfigError>(N >= 2, "the text has ", N, " tokens, expected at least 2");
  check<ConfigError>(W >= 1, "windows is ", W, ", expected >= 1");
  check<ConfigError>(N / W >= 2, "windows is ", W, ": ", N, " tokens give windows of ", N / W,
                     " tokens, expected at least 2 (use at most ", N / 2,
                     N / 2 == 1 ? " window)" : " windows)");
  check<ConfigError>(!candidates.empty(), "no candidate configuration to evaluate");
  eval_detail::validate_edges(options.bucket_edges);
  const int64_t n = N / W, steps = n - 1;
  check<ConfigError>(n <= std::numeric_limits<int32_t>::max(), "windows of ", n,
                     " tokens exceed the engine's context limit");
  check<ConfigError>(W <= std::numeric_limits<int32_t>::max(), "windows is ", W,
                     ", more than the engine's slot limit");

  // Load every model before decoding: an unsupported mode fails here, not halfway through.
  auto load = [&](const EvalConfig& c, EvalConfig& as_run) {
    ModelOptions o = c.options;
    o.max_slots = static_cast<int32_t>(W);
    o.max_context = static_cast<int32_t>(n);
    auto m = Model::load(model_dir, o);
    as_run = {c.label, m->options()};
    // A split mode's read copy is first read on the step after the first flush (before it the
    // copy is the zero state, exact in every format; the first flush is step L - 1 at the
    // latest): at L = 1 (every step flushes) or over windows of n - 1 <= L steps it is never
    // read, and the KL would report 0 whatever the mode.
    // fp16sr/fp16sr has no copy: its ordinary steps read the rounded checkpoint, first read on
    // the step after the first flush, so there L = 1 is measurable (windows of n - 1 > L steps).
    const ModelOptions& ro = m->options();
    const StateMode mode = engine_state_mode(ro.state);
    if (mode.is_split() && ro.ssm == SsmMode::kReplay)
      check<ConfigError>((ro.ring_L >= 2 || !mode.has_read_copy()) && n - 1 > ro.ring_L, "'",
                         c.label, "': a split state "
                         "mode at ring length L = ", ro.ring_L,
                         c.options.ring_L == 0 ? " (the dispatcher's choice for this batch)" : "",
                         " over windows of ", n,
                         " tokens never reads its read copy (L = 1 flushes every step; the first "
                         "flush comes at step L - 1): use L >= 2 and windows of more than L + 1 "
                         "tokens");
    return m;
  };
  EvalResult r;
  auto ref = load(reference, r.reference);
  const int64_t V = ref->config().vocab_size;
  for (int64_t i = 0; i < W * n; ++i)
    check<ConfigError>(tokens[i] >= 0 && tokens[i] < V, "token ", tokens[i], " at index ", i,
                       " outside the vocabulary [0, ", V, ")");
  std::vector<std::unique_ptr<Model>> cands;
  r.candidates.resize(candidates.size());
  for (size_t c = 0; c < candidates.size(); ++c) {
    cands.push_back(load(candidates[c], r.candidates[c].config));
    check<ConfigError>(cands.back()->config().vocab_size == V, "candidate '", candidates[c].label,
                       "' has vocabulary ", cands.back()->config().vocab_size, ", expected ", V);
  }

  const bool all_cuda =
      ref->options().cuda &&
      std::all_of(cands.begin(), cands.end(), [](const auto& m) { return m->options().cuda; });
  std::vector<int32_t> slots(W), feed(W);
  for (int64_t w = 0; w < W; ++w) slots[w] = static_cast<int32_t>(w);
  ref->reset(slots);
  for (auto& m : cands) m->reset(slots);

  const std::vector<EvalStats> buckets = eval_detail::make_buckets(options.bucket_edges, steps);
  const size_t C = cands.size();
  std::vector<Accumulator> all(C), by_bucket(C * buckets.size());
  std::vector<float> ref_logits(W * V), cand_logits(C * W * V);
  size_t b = 0;  // bucket of position t (positions only grow)
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t w = 0; w < W; ++w) feed[w] = tokens[w * n + t];
    // CUDA models step concurrently from host threads (each has its own stream, so one model's
    // small kernels fill the gaps of another's): the results are the same, only sooner. CPU
    // models parallelise inside a step, so they step one after another.
    std::exception_ptr failed;
#pragma omp parallel for schedule(static, 1) num_threads(int(C) + 1) if (all_cuda)
    for (int64_t i = 0; i <= int64_t(C); ++i) {
      try {
        if (i == 0)
          ref->step(feed, slots, ref_logits);
        else
          cands[size_t(i - 1)]->step(
              feed, slots, std::span<float>(cand_logits).subspan(size_t(i - 1) * W * V, W * V));
      } catch (...) {
#pragma omp critical(rssm_eval_error)
        if (!failed) failed = std::current_exception();
      }
    }
    if (failed) std::rethrow_exception(failed);
    while (t >= buckets[b].end) ++b;
    for (int64_t w = 0; w < W; ++w) {
      const std::span<const float> ref_row(ref_logits.data() + w * V, V);
      const double ref_lse = eval_detail::log_sum_exp(ref_row);
      const int32_t next = tokens[w * n + t + 1];
      for (size_t c = 0; c < C; ++c) {
        const std::span<const float> row(cand_logits.data() + (c * W + w) * V, V);
        const TokenComparison cmp = eval_detail::compare_rows(ref_row, ref_lse, row, next);
        all[c].add(cmp);
        by_bucket[c * buckets.size() + b].add(cmp);
      }
    }
    if (progress) progress(t + 1, steps);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  r.windows = W;
  r.window_tokens = n;
  r.tokens_used = W * n;
  r.positions = W * steps;
  r.vocab = V;
  EvalStats whole;
  whole.end = steps;
  for (size_t c = 0; c < C; ++c) {
    r.candidates[c].all = all[c].finish(whole);
    for (size_t i = 0; i < buckets.size(); ++i)
      r.candidates[c].buckets.push_back(by_bucket[c * buckets.size() + i].finish(buckets[i]));
  }
  return r;
}

}  // namespace replayssm::engine
