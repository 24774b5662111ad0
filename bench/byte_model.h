// Bytes one Mamba-2 decode call moves per sequence (one layer, one step): the model of
// bench/NOTES.md. State/checkpoint S in its storage dtype; bf16 x, dt, B, C, y; ring x and B in
// bf16, ring delta in fp32; an int32 slot id; cursors origin + h (int32) + is_flush (int8).
// B and C are per group (counted once, not per head). GB/s and % copy use these counts, so they
// measure how close a kernel runs to the minimal traffic of its design.
#pragma once
#include <cstdint>

namespace replayssm::bench {

struct Mamba2Bytes {
  int64_t H = 0, P = 0, N = 0, G = 0;
  int64_t state_elem = 4;  ///< bytes per state element

  static constexpr int64_t kCursorBytes = 4 + 4 + 1;

  int64_t state() const { return H * P * N * state_elem; }
  /// x in + y out (H·P bf16 each), dt (one bf16 per head), B and C (G·N bf16 each), slot id.
  int64_t io() const { return 2 * H * P * 2 + H * 2 + 2 * G * N * 2 + 4; }
  /// One ring record: x (H·P bf16), processed delta (H fp32), B (G·N bf16).
  int64_t record() const { return H * P * 2 + H * 4 + G * N * 2; }

  /// Read S, update, write S, y.
  int64_t conventional() const { return 2 * state() + io(); }
  /// Ordinary replay step with h history records: read S0 and h records, append one, y.
  int64_t ordinary(int64_t h) const { return state() + (h + 1) * record() + io() + kCursorBytes; }
  /// Flush at h = L - 1: read S0 and L - 1 records, fold them with the token, write S0 once.
  int64_t flush(int64_t L) const {
    return 2 * state() + (L - 1) * record() + io() + kCursorBytes;
  }
  /// Mean over an L-step window (L - 1 ordinary steps at h = 0..L-2, one flush); also the mean
  /// of a step whose rows sit at uniformly spread phases ("mixed").
  double window(int64_t L) const {
    double sum = static_cast<double>(flush(L));
    for (int64_t h = 0; h + 1 < L; ++h) sum += static_cast<double>(ordinary(h));
    return sum / static_cast<double>(L);
  }
};

}  // namespace replayssm::bench
