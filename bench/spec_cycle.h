// The steady cycle of speculative cursors under a fixed acceptance (ring.h's commit rule): the
// mean history and flush fraction per step that a verify step's byte model depends on.
#pragma once
#include <vector>

#include "replayssm/ring.h"

namespace replayssm::bench {

struct Cycle {
  double mean_h = 0, flush_fraction = 0;
};

/// Mean history and flush fraction per step of rows starting at the given cursors and accepting
/// `accept` tokens of cfg.T every step, simulated for `steps` steps each.
inline Cycle cycle_of(const RingConfig& cfg, int accept, const std::vector<Cursor>& start,
                      int steps) {
  double hsum = 0, flushes = 0, n = 0;
  for (Cursor c : start)
    for (int s = 0; s < steps; ++s, ++n) {
      hsum += c.h;
      if (c.is_flush && c.h > 0) ++flushes;
      c = commit_cursor(c, accept, cfg);
    }
  return {hsum / n, flushes / n};
}

}  // namespace replayssm::bench
