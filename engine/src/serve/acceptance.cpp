#include "replayssm/engine/acceptance.h"

#include <algorithm>

#include "replayssm/errors.h"

namespace replayssm::engine {
namespace {

/// A draw from weights w (not necessarily normalised; total > 0).
int32_t draw(const std::vector<double>& w, std::mt19937_64& rng) {
  double total = 0;
  for (double v : w) total += v;
  std::uniform_real_distribution<double> u(0.0, total);
  const double r = u(rng);
  double acc = 0;
  int32_t last = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0) continue;
    acc += w[i];
    last = static_cast<int32_t>(i);
    if (r < acc) return last;
  }
  return last;
}

}  // namespace

Verdict accept_greedy(std::span<const int32_t> greedy, std::span<const int32_t> drafts) {
  check<ShapeError>(greedy.size() == drafts.size() + 1, "accept_greedy: ", greedy.size(),
                    " greedy tokens for ", drafts.size(), " drafts, expected drafts + 1");
  Verdict v;
  while (v.accepted < int32_t(drafts.size()) && drafts[v.accepted] == greedy[v.accepted])
    ++v.accepted;
  v.next = greedy[v.accepted];
  return v;
}

Verdict accept_drafts(std::span<const float> logits, int64_t vocab,
                      std::span<const int32_t> drafts, std::span<const std::vector<double>> q,
                      const SamplingParams& p, std::mt19937_64& rng) {
  const int64_t d = static_cast<int64_t>(drafts.size());
  check<ShapeError>(int64_t(logits.size()) == (d + 1) * vocab, "accept_drafts: logits hold ",
                    logits.size(), " floats, expected (drafts + 1) * vocab = ", (d + 1) * vocab);
  check<ShapeError>(q.empty() || int64_t(q.size()) == d, "accept_drafts: ", q.size(),
                    " draft distributions for ", d, " drafts, expected one each or none");
  auto row = [&](int64_t i) { return logits.subspan(i * vocab, vocab); };
  Verdict v;
  if (p.temperature == 0.0) {
    while (v.accepted < d && drafts[v.accepted] == sample_token(row(v.accepted), p, rng))
      ++v.accepted;
    v.next = sample_token(row(v.accepted), p, rng);
    return v;
  }
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (; v.accepted < d; ++v.accepted) {
    const int32_t x = drafts[v.accepted];
    std::vector<double> target = token_probs(row(v.accepted), p);
    const double qx = q.empty() ? 1.0 : q[v.accepted].at(x);
    const double ratio = qx > 0 ? target[x] / qx : 0.0;  // q(x) = 0: x was not q's draw
    if (unit(rng) < std::min(1.0, ratio)) continue;
    // Rejected: draw from the residual max(0, p - q), renormalised.
    double mass = 0;
    for (int64_t t = 0; t < vocab; ++t) {
      const double qt = q.empty() ? (t == x ? 1.0 : 0.0) : q[v.accepted][t];
      target[t] = std::max(0.0, target[t] - qt);
      mass += target[t];
    }
    // p <= q everywhere means p == q: rejection had probability 0; fall back to p.
    v.next = mass > 0 ? draw(target, rng) : sample_token(row(v.accepted), p, rng);
    return v;
  }
  v.next = sample_token(row(d), p, rng);
  return v;
}

}  // namespace replayssm::engine
