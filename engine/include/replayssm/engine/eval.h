// Teacher-forced evaluation of state modes (issue 10): a text is split into W windows (consecutive
// chunks of equal length) decoded together as a batch of W slots, one token per step on the decode
// path, by a reference configuration and each candidate configuration in lockstep (each its own
// Model; memory O(vocab x W) beyond the models). At every position the next-token distributions are
// compared: KL(reference || candidate), top-1 agreement, and each side's bits per byte.
//
// Positions: window w holds tokens[w*n, (w+1)*n) with n = floor(tokens / W) (the last tokens % W
// tokens are not used). Step t feeds each window's token t and predicts its token t+1; its position
// is t (0-based, counted within the window), so a window contributes n-1 positions 0..n-2.
// Units: KL in nats; bits per byte = -log2 p(actual next token), which is bits per byte for the
// byte-level models (one token = one byte) and bits per token otherwise.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "replayssm/engine/model.h"

namespace replayssm::engine {

/// A configuration evaluated: a label for reports and the options its model is loaded with
/// (ssm, ring_L, state by name, dt_floor, cuda). evaluate() sets max_slots = W and max_context =
/// the window length; the other fields are used as given.
struct EvalConfig {
  std::string label;
  ModelOptions options;
};

/// Upper edges of the default position buckets: 0-1K, 1K-4K, 4K-16K, 16K-64K, 64K-128K (positions
/// at or past the last edge form one more bucket, "128K+").
std::vector<int64_t> default_bucket_edges();

struct EvalOptions {
  int64_t windows = 1;  ///< W >= 1; each window needs >= 2 tokens
  /// Strictly increasing positive upper edges e1 < e2 < ...: buckets [0,e1), [e1,e2), ...,
  /// [e_last, inf). Positions are counted within each window.
  std::vector<int64_t> bucket_edges = default_bucket_edges();
};

/// Means over a set of positions (all windows together).
struct EvalStats {
  int64_t begin = 0;  ///< first position of the bucket (within a window)
  int64_t end = std::numeric_limits<int64_t>::max();  ///< one past the last; max() = open
  int64_t positions = 0;       ///< positions counted (over all windows)
  double kl = 0;               ///< mean KL(reference || candidate), nats
  double kl_max = 0;           ///< largest KL at one position, nats
  double top1_agreement = 0;   ///< fraction of positions where both argmaxes agree, [0, 1]
  double bits_per_byte = 0;    ///< candidate: mean -log2 p(actual next token)
  double ref_bits_per_byte = 0;  ///< reference: mean -log2 p(actual next token)
};

/// A bucket's name: "0-1K", "1K-4K", ..., "128K+" (K = 1024 where the edge is a multiple of it).
std::string bucket_label(int64_t begin, int64_t end);

struct CandidateResult {
  EvalConfig config;  ///< as run: max_slots, max_context and a ring_L of 0 resolved
  EvalStats all;                   ///< every position (begin 0, end = window length - 1)
  std::vector<EvalStats> buckets;  ///< the buckets holding at least one position, in order
};

struct EvalResult {
  int64_t windows = 0;        ///< W
  int64_t window_tokens = 0;  ///< n: tokens per window
  int64_t tokens_used = 0;    ///< W * n
  int64_t positions = 0;      ///< W * (n - 1): compared positions per candidate
  int64_t vocab = 0;
  EvalConfig reference;       ///< as run (like CandidateResult::config)
  double seconds = 0;         ///< wall time of the decode loop (all models)
  std::vector<CandidateResult> candidates;
};

/// The per-position comparison of one row of logits.
struct TokenComparison {
  double kl = 0;             ///< KL(p_ref || p_cand), nats, from float64 log-softmax
  bool top1_agree = false;   ///< argmax (first maximum) of both rows is the same token
  double ref_bits = 0;       ///< -log2 p_ref(next)
  double cand_bits = 0;      ///< -log2 p_cand(next)
};

/// Compares two rows of logits ([vocab] each) for the actual next token `next` (in [0, vocab)).
/// Equal rows give kl == 0 exactly. ShapeError if the sizes differ or are 0, ConfigError if next is
/// out of range.
TokenComparison compare_logits(std::span<const float> ref, std::span<const float> cand,
                               int32_t next);

/// Called after every decode step: (steps done, steps total = n - 1).
using EvalProgress = std::function<void(int64_t, int64_t)>;

/// Loads model_dir once per configuration and evaluates every candidate against the reference on
/// `tokens` (ids in [0, vocab)), teacher-forced, W windows in lockstep.
/// Errors (raised before any decoding): ConfigError (fewer than 2 tokens, windows < 1, a window
/// shorter than 2 tokens, bucket edges not strictly increasing and positive, no candidate, a token
/// out of range, a split state mode whose read copy would never be read: ring length L < 2 as
/// run, e.g. ring_L 0 resolved by the dispatcher to 1, or windows of at most L + 1 tokens); from
/// Model::load: UnsupportedError (a state mode or device not built),
/// ConfigError, CheckpointError.
EvalResult evaluate(const std::string& model_dir, std::span<const int32_t> tokens,
                    const EvalConfig& reference, std::span<const EvalConfig> candidates,
                    const EvalOptions& options = {}, const EvalProgress& progress = {});

}  // namespace replayssm::engine
