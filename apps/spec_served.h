// `replayssm bench spec --drafter`: one point timed through the serving loops (engine serve() and
// serve_speculative()) with a real drafter, instead of an acceptance trace.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/engine/model.h"
#include "replayssm/engine/serve.h"

namespace replayssm::cli {

/// `batch` requests of the first `prompt_len` bytes of the lines of `prompts_file` that are at
/// least that long (cycled when fewer), each generating `new_tokens`. ConfigError when the file
/// cannot be read or has no such line.
std::vector<engine::Request> served_requests(const std::string& prompts_file, int64_t batch,
                                             int prompt_len, int new_tokens);

struct ServedPoint {
  double tokens_per_s = 0;      ///< generated tokens per second of the decode phase
  double ms = 0;                ///< median decode-phase step
  double mean_accepted = 1;     ///< tokens committed per decoding row and step
  double draft_acceptance = 0;  ///< share of drafts kept (0 for standard decoding)
};

/// Serves `requests` (equal prompt lengths, all in one batch) greedily: T = 0 plain decode steps
/// (serve), else speculative steps of T tokens with `drafter` ("ngram" or "model:DIR";
/// serve_speculative). Only the decode phase is timed, from the step that ends the prompts (plain:
/// one token per step; speculative: T per step) to the last, so the speculative loop's chunked
/// prefill does not count for it. Errors as serve() / serve_speculative() / make_drafter().
ServedPoint time_served(engine::Model& model, const std::vector<engine::Request>& requests, int T,
                        const std::string& drafter);

}  // namespace replayssm::cli
