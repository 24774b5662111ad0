// Bytes one decode call moves per sequence (one layer, one step), for every family: a state /
// checkpoint, the step's inputs and output (io), and one ring record; the designs' formulas over
// those three are family-neutral. Mamba-2 counts: bench/NOTES.md (state in its storage dtype;
// bf16 x, dt, B, C, y; ring x and B bf16, ring delta fp32; B and C per group, counted once).
// GDN/KDA counts: bench/NOTES_gdn.md (bf16 q, k, v, a, b, y; ring u, k^, g fp32; k^ per key head
// and q/k per key head counted once). Both: an int32 slot id; cursors origin + h (int32) +
// is_flush (int8). GB/s and % copy use these counts, so they measure how close a kernel runs to
// the minimal traffic of its design.
#pragma once
#include <cstdint>

namespace replayssm::bench {

struct StepBytes {
  int64_t state_bytes = 0;   ///< one slot's state / checkpoint
  int64_t io_bytes = 0;      ///< inputs + output + slot id of one sequence
  int64_t record_bytes = 0;  ///< one ring record as an ordinary step reads it
  int64_t copy_bytes = 0;    ///< split state modes: one slot's read copy (0: none)
  /// Split GDN/KDA modes: what an ordinary step appends beside its record for the exact flush
  /// (v and beta) and never reads back; the flush reads them instead of u.
  int64_t record_extra_bytes = 0;
  int64_t flush_record_bytes = 0;  ///< one record as the flush reads it (0: record_bytes)

  static constexpr int64_t kCursorBytes = 4 + 4 + 1;

  int64_t state() const { return state_bytes; }
  int64_t io() const { return io_bytes; }
  int64_t record() const { return record_bytes; }

  /// Read S, update, write S, y.
  int64_t conventional() const { return 2 * state() + io(); }
  /// Ordinary replay step with h history records: read S0 (or the read copy) and h records,
  /// append one (with its extra), y.
  int64_t ordinary(int64_t h) const {
    return (copy_bytes ? copy_bytes : state()) + (h + 1) * record() + record_extra_bytes + io() +
           kCursorBytes;
  }
  /// Flush at h = L - 1: read S0 and L - 1 records, fold them with the token, write S0 once (and
  /// the read copy).
  int64_t flush(int64_t L) const {
    const int64_t rec = flush_record_bytes ? flush_record_bytes : record();
    return 2 * state() + copy_bytes + (L - 1) * rec + io() + kCursorBytes;
  }
  /// Speculative verify of T tokens (fp32 checkpoint): read S0, the mean_h history records and
  /// the T tokens, append T records, write S0 on the flush_fraction of steps that flush.
  double verify(int T, double mean_h, double flush_fraction) const {
    return static_cast<double>(state()) * (1.0 + flush_fraction) +
           mean_h * static_cast<double>(record()) +
           T * static_cast<double>(io() + record()) + static_cast<double>(kCursorBytes);
  }
  /// The snapshot baseline of T tokens: read the state, write T snapshots, the T tokens' io.
  double snapshot(int T) const {
    return static_cast<double>((1 + T) * state() + T * io());
  }
  /// Mean over an L-step window (L - 1 ordinary steps at h = 0..L-2, one flush); also the mean
  /// of a step whose rows sit at uniformly spread phases ("mixed").
  double window(int64_t L) const {
    double sum = static_cast<double>(flush(L));
    for (int64_t h = 0; h + 1 < L; ++h) sum += static_cast<double>(ordinary(h));
    return sum / static_cast<double>(L);
  }
};

/// Mamba-2: H heads, headdim P, d_state N, G groups, state_elem bytes per state element.
/// io: x in + y out (H·P each), dt (one per head), B and C (G·N each), slot id.
/// record: x (H·P), processed delta (H fp32), B (G·N). in_elem: bytes of those inputs, outputs and
/// ring records (2: bf16, the kernel benchmark's; 4: fp32, the engine's).
inline StepBytes mamba2_bytes(int64_t H, int64_t P, int64_t N, int64_t G, int64_t state_elem,
                              int64_t in_elem = 2) {
  return {H * P * N * state_elem, 2 * H * P * in_elem + H * in_elem + 2 * G * N * in_elem + 4,
          H * P * in_elem + H * 4 + G * N * in_elem};
}

/// GDN / KDA: H key heads, HV value heads, K, V; gw = 1 (GDN, scalar gate) or K (KDA).
/// io: q, k (H·K bf16 each), v and y (HV·V bf16 each), a (HV·gw bf16), b (HV bf16), slot id.
/// record: u (HV·V fp32), k^ (H·K fp32), g (HV·gw fp32).
inline StepBytes gdn_bytes(int64_t H, int64_t HV, int64_t K, int64_t V, int64_t gw,
                           int64_t state_elem) {
  return {HV * V * K * state_elem, 2 * H * K * 2 + 2 * HV * V * 2 + HV * gw * 2 + HV * 2 + 4,
          HV * V * 4 + H * K * 4 + HV * gw * 4};
}

}  // namespace replayssm::bench
