// Drafters for speculative decoding: they propose the next few tokens of each sequence, which the
// target model then verifies in one step (speculative.h). Two kinds: n-gram prompt lookup (no
// extra model) and a smaller draft model with the target's vocabulary decoding greedily.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "replayssm/engine/model.h"

namespace replayssm::engine {

/// One row to draft for.
struct DraftRow {
  int32_t slot = 0;                  ///< the target's slot of the sequence (drafters may key on it)
  std::span<const int32_t> history;  ///< prompt + generated tokens; the last one is fed next
  int32_t max_drafts = 0;            ///< propose at most this many tokens (0..7)
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  /// "ngram" or "model:DIR".
  virtual std::string name() const = 0;
  /// A new sequence starts in `slot` (a fresh request or a reused slot).
  virtual void start(int32_t /*slot*/) {}
  /// drafts[b] (resized to rows.size()) gets at most rows[b].max_drafts tokens continuing
  /// rows[b].history; fewer or none where the drafter has no proposal.
  virtual void propose(std::span<const DraftRow> rows,
                       std::vector<std::vector<int32_t>>& drafts) = 0;
};

/// Prompt lookup: the longest n in max_n..min_n whose last n tokens of the history occurred
/// earlier in it; proposes what followed their most recent earlier occurrence.
/// ConfigError unless 1 <= min_n <= max_n.
std::unique_ptr<Drafter> make_ngram_drafter(int32_t max_n = 3, int32_t min_n = 1);

/// A draft model decoding greedily, one slot per target slot, on the CUDA engine when `cuda`
/// (make_drafter: where the target runs), else on the CPU. It commits only tokens
/// of the accepted history, so rejected drafts never enter its state: each propose() feeds the
/// history it has not consumed (in verify steps of up to 8 tokens) and then drafts k tokens by
/// re-feeding its own drafts in verify steps it discards (accept 0). ConfigError when its vocab
/// differs from target_vocab.
std::unique_ptr<Drafter> make_model_drafter(const std::string& dir, int64_t target_vocab,
                                            int32_t max_slots, int32_t max_context,
                                            bool cuda = false);

/// "ngram" or "model:DIR" (the draft model on the target's device). ConfigError for anything else (naming the choices) or a draft model
/// whose vocabulary differs from the target's.
std::unique_ptr<Drafter> make_drafter(const std::string& spec, const Model& target);

}  // namespace replayssm::engine
