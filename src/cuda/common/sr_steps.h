// The per-slot stochastic-rounding step counters of a pool on CUDA (precision.h SrKeys: each SR
// write of a slot uses steps[slot] and then increments it, so every write draws fresh bits, also
// under CUDA-graph replay). Shared by the Mamba-2 and GDN/KDA host code of fp16sr/fp16sr.
#pragma once
#include <cstdint>

#include "replayssm/precision.h"
#include "replayssm/ring.h"

namespace replayssm::cuda {

/// steps[slot] += 1 (mod 2^32) for the slot of every real row of `rows` (ids outside [0, slots) are
/// pad rows) — all of them when `is_flush` is null (a conventional step writes every row), else
/// those with is_flush[slot] != 0 (a replay step writes the flush rows). Enqueued on rows.stream,
/// after the step's kernels. sr.steps int32 [slots] and rows.slot_ids int32 [batch] on CUDA
/// (checked by the caller).
void sr_advance(const SrKeys& sr, const Rows& rows, const int8_t* is_flush, int64_t slots);

/// steps[slot] = 0 for the slot of every real row (reset_slots; seeds are the caller's and kept).
void sr_reset(const SrKeys& sr, const Rows& rows, int64_t slots);

}  // namespace replayssm::cuda
