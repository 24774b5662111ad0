// Acceptance of drafted tokens after a speculative verify step (DESIGN.md §2 "Speculative
// decoding"; rejection sampling: Leviathan, Kalman & Matias 2023, "Fast Inference from
// Transformers via Speculative Decoding", Algorithm 1 and Appendix A.1).
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "replayssm/engine/sampling.h"

namespace replayssm::engine {

/// The outcome for one row: how many drafts it keeps and the token that follows them.
struct Verdict {
  int32_t accepted = 0;  ///< drafts kept, 0..d (the row commits accepted + 1 fed tokens)
  int32_t next = 0;      ///< the target's token after the kept drafts (correction or bonus)
};

/// Verifies d drafts. logits: [d + 1, vocab] float32, the target's logits after the row's fed
/// token and after each draft. Greedy (temperature 0): keeps the longest prefix of drafts equal to
/// the target's argmax (lowest id on ties) and next = the argmax after it, so the emitted tokens
/// are those of greedy decoding. temperature > 0 (target p_i = token_probs of row i): draft x_i is
/// kept with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection next is drawn from
/// normalize(max(0, p_i - q_i)); when all are kept, next ~ p_d. The emitted tokens are then
/// distributed as samples from p. q: the drafter's distributions, d rows of [vocab], or empty for
/// a deterministic drafter (q_i one-hot at x_i: keep with probability p_i(x_i), residual = p_i
/// without x_i). rng: the request's stream. Errors: ShapeError (sizes disagree).
Verdict accept_drafts(std::span<const float> logits, int64_t vocab,
                      std::span<const int32_t> drafts, std::span<const std::vector<double>> q,
                      const SamplingParams& p, std::mt19937_64& rng);

/// Greedy acceptance from the target's greedy tokens alone (Model::verify_greedy): greedy [d + 1],
/// greedy[i] = the argmax after the row's fed token (i = 0) or after draft i. Keeps the longest
/// prefix of drafts with drafts[i] == greedy[i], next = greedy[accepted]: accept_drafts at
/// temperature 0 without the logits. Errors: ShapeError (sizes disagree).
Verdict accept_greedy(std::span<const int32_t> greedy, std::span<const int32_t> drafts);

}  // namespace replayssm::engine
