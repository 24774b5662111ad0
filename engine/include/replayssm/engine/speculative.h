// The speculative serving loop (DESIGN.md §2 "Speculative decoding", issue 9 item 2): continuous
// batching as in serve(), but every step is one Model::verify over all active rows followed by one
// Model::accept. A row still in its prompt feeds up to T prompt tokens (chunked prefill, all kept);
// a decoding row feeds its last sampled token plus up to T - 1 drafts from the drafter (fewer near
// its max_new_tokens; none: T_b = 1), and keeps the fed token plus the drafts that pass
// acceptance.h (greedy: exactly the tokens of greedy decoding; temperature > 0: rejection
// sampling from the request's own stream). The model must be loaded with spec_T >= T; its SSM
// mode picks ReplaySSM verify (kReplay) or the snapshot baseline (kConventional).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "replayssm/engine/drafter.h"
#include "replayssm/engine/serve.h"

namespace replayssm::engine {

struct SpecParams {
  int32_t T = 4;                ///< tokens fed per decoding row and step, 1..8 (1: no drafts)
  Drafter* drafter = nullptr;   ///< null: no drafts
};

/// What the verify steps of decoding rows accepted.
struct SpecStats {
  int64_t row_steps = 0;        ///< (decoding row, step) pairs
  int64_t drafted = 0;          ///< draft tokens fed
  int64_t accepted_drafts = 0;  ///< of them kept
  double draft_seconds = 0;     ///< wall time inside the drafter
  /// accepted_hist[n]: row steps that committed n tokens (fed token + kept drafts), n in 1..T.
  std::array<int64_t, 9> accepted_hist{};
  /// Mean tokens committed (= generated) per decoding row step: 1 + kept drafts, in 1..T.
  double mean_accepted() const {
    return row_steps ? double(row_steps + accepted_drafts) / double(row_steps) : 0.0;
  }
  /// Share of draft tokens kept.
  double draft_acceptance() const { return drafted ? double(accepted_drafts) / drafted : 0.0; }
};

/// Runs all requests to completion with at most `batch` active rows. Errors: as serve(), plus
/// ConfigError for T outside 1..8 or above the model's spec_T, and the model's verify errors
/// (UnsupportedError when it was loaded without spec_T).
std::vector<Completion> serve_speculative(Model& model, const std::vector<Request>& requests,
                                          int32_t batch, const SamplingParams& sampling,
                                          const SpecParams& spec, ServeStats* stats = nullptr,
                                          SpecStats* spec_stats = nullptr,
                                          const TokenCallback& on_token = {},
                                          const StepCallback& on_step = {});

}  // namespace replayssm::engine
