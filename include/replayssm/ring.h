// The ring cursor protocol shared by every family and backend (DESIGN.md §2, method.md §4.2).
//
// Each sequence slot owns, per SSM layer, a checkpoint S0 and a ring of R = L physical record rows;
// the cursors below are per slot and shared by all SSM layers of a model (one commit per step).
// Logical record l (0 = oldest since the checkpoint) lives in physical row (origin + l) mod R.
//
//   h         number of committed records in the ring (logical positions 0..h-1)
//   origin    physical row of logical position 0
//   is_flush  whether the coming step folds records into the checkpoint; decided by the previous
//             commit (data, not a launch shape, so one CUDA graph serves every mix of rows)
//
// A step feeds T_b tokens to row b (decode mode: T_b = 1; speculative mode: 1 <= T_b <= T). Their
// records are written at logical positions h..h+T_b-1 and every output is computed from S0 plus the
// ring; no state is written unless is_flush. On a flush step the first F logical records are folded
// into S0 (written once):
//   decode mode       F = h + 1  (history and the current token: every flush folds exactly L tokens;
//                                 L = 1 makes every step a flush, equal to the conventional step)
//   speculative mode  F = h      (only committed history; drafts may still be rejected)
// commit(n accepted, 1 <= n <= T_b; n = 0 only for pad rows, which are untouched):
//   origin <- (origin + F) mod R;  h <- h + n - F;  is_flush <- (h + 2T > L)
// (F = 0 on non-flush steps). Rejected records stay past h and are overwritten: rollback is a
// cursor move. The 2T rule (rather than T) guarantees room for T records every step (method.md
// §4.2 item 5). reset: h = 0, origin = 0, is_flush = (2T > L), checkpoint zeroed.
#pragma once
#include <cstdint>

#include "replayssm/tensor.h"

namespace replayssm {

enum class RingMode : uint8_t {
  kDecode,       ///< one token per step, flush folds history + current token (T must be 1)
  kSpeculative,  ///< up to T tokens per step (verify), flush folds committed history only
};
const char* ring_mode_name(RingMode m);

/// Ring geometry and flush rule. Valid when L >= 1, 1 <= T <= 8, and (speculative) L >= 2T.
struct RingConfig {
  int32_t L = 16;  ///< ring length: tokens folded per flush in decode mode
  int32_t T = 1;   ///< maximum tokens per step (1 = ordinary decoding)
  RingMode mode = RingMode::kDecode;
  int32_t rows() const { return L; }  ///< physical ring rows R
  /// Throws ConfigError naming the offending value.
  void validate() const;
};

/// Cursor values of one slot (host-side mirror of one row of RingCursors).
struct Cursor {
  int32_t origin = 0;
  int32_t h = 0;
  bool is_flush = false;
  bool operator==(const Cursor&) const = default;
};

/// Records folded into the checkpoint by a step with cursor c (0 when not flushing).
inline int32_t folded_records(const Cursor& c, const RingConfig& cfg) {
  if (!c.is_flush) return 0;
  return cfg.mode == RingMode::kDecode ? c.h + 1 : c.h;
}
/// The cursor of a fresh or reused slot.
inline Cursor reset_cursor(const RingConfig& cfg) { return Cursor{0, 0, 2 * cfg.T > cfg.L}; }
/// The cursor after a step with cursor c whose row accepted n tokens (1 <= n <= tokens fed).
inline Cursor commit_cursor(const Cursor& c, int32_t n, const RingConfig& cfg) {
  const int32_t f = folded_records(c, cfg);
  Cursor next;
  next.origin = (c.origin + f) % cfg.rows();
  next.h = c.h + n - f;
  next.is_flush = next.h + 2 * cfg.T > cfg.L;
  return next;
}

/// Device- or host-resident cursors for a pool of slots; fixed addresses for CUDA graphs.
struct RingCursors {
  TensorView origin;    ///< [slots] int32
  TensorView h;         ///< [slots] int32
  TensorView is_flush;  ///< [slots] int8 (0/1)
  RingConfig config;
};

/// The rows of one step: which slot each batch row addresses, and how many tokens it feeds.
struct Rows {
  TensorView slot_ids;        ///< [batch] int32; pad_slot_id marks a pad row (never read/written)
  int32_t pad_slot_id = -1;   ///< sentinel; must lie outside [0, slots)
  /// [batch] int32, tokens fed per row, 1..T (speculative only). Empty: every row feeds the
  /// call's whole token axis; commit() cannot see that axis and then only bounds num_accepted by
  /// config.T, so pass num_tokens to commit to have it checked against what was fed.
  TensorView num_tokens;
  void* stream = nullptr;     ///< cudaStream_t for CUDA ops (nullptr: the default stream)
  /// CUDA ops: copy device-resident slot ids / counts to the host and validate them before the
  /// launch (synchronises; skipped while the stream is being captured into a CUDA graph). Kernels
  /// treat any id outside [0, slots) as a pad row either way, so nothing outside the pool is touched.
  bool check_device_ids = true;
};

/// Advance the cursors of the rows' slots after a step: num_accepted [batch] int32, 1..T_b per
/// real row (0 for pad rows, which are skipped). Errors: SlotError for out-of-range counts or slots.
void commit(RingCursors& cursors, const Rows& rows, const TensorView& num_accepted);

/// Reset the cursors of the given slots (int32 [n], pad ids skipped) to reset_cursor().
/// The checkpoints are zeroed by the family's reset_slots().
void reset(RingCursors& cursors, const Rows& rows);

}  // namespace replayssm
