// The oracle's cursor protocol, written from DESIGN.md §2 "Speculative decoding" as a small state
// machine (history length and origin), independent of the inline helpers in ring.h.
#include <cmath>

#include "replayssm_ref.h"

namespace replayssm::ref {

double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

int64_t ring_row(const Cursor& c, int64_t l, const RingConfig& cfg) {
  return (c.origin + l) % cfg.L;
}

Cursor commit(const Cursor& c, int32_t n, const RingConfig& cfg) {
  Cursor next = c;
  if (c.is_flush && cfg.mode == RingMode::kDecode) {
    // The flush folded the history and the token: the ring is empty after the record row
    // the token would have used.
    next.origin = static_cast<int32_t>(ring_row(c, c.h + 1, cfg));
    next.h = 0;
  } else if (c.is_flush) {
    // The committed history was folded; the accepted tokens of this step become the history.
    next.origin = static_cast<int32_t>(ring_row(c, c.h, cfg));
    next.h = n;
  } else {
    next.h = c.h + n;
  }
  // Flush one window early so the next step always has room for T records.
  next.is_flush = next.h + 2 * cfg.T > cfg.L;
  return next;
}

Cursor reset(const RingConfig& cfg) { return Cursor{0, 0, 2 * cfg.T > cfg.L}; }

}  // namespace replayssm::ref
