// The CUDA implementation of replayssm::commit / replayssm::reset (ring.h) for device-resident
// cursors; src/common/ring.cpp dispatches here when the cursors live on CUDA. Same checks and
// errors as the CPU path when host checks are enabled (Rows::check_device_ids, stream not
// capturing); otherwise the kernel skips rows it cannot apply (ids outside [0, slots), counts
// outside 1..T_b) instead of failing, so a captured graph can never write outside the pool.
#pragma once
#include "replayssm/ring.h"
#include "replayssm/tensor.h"

namespace replayssm::cuda {

void ring_commit(RingCursors& cursors, const Rows& rows, const TensorView& num_accepted);
void ring_reset(RingCursors& cursors, const Rows& rows);

/// The other half of a speculative step's commit, for callers that let a real row keep nothing
/// (the engine's Model::accept with a count of 0: the row's verify step is discarded): every row
/// whose num_accepted is 0 moves by ring.h's rule with n = 0 (commit_cursor(c, 0): no record
/// becomes history; a flush step's fold of the committed history, already in the checkpoint,
/// still rebases the origin). Other rows and pad ids are untouched; ring_commit moves those (it
/// skips 0 counts when host checks are off). Speculative cursors only (ConfigError); no host
/// checks of ids or counts.
void ring_discard(RingCursors& cursors, const Rows& rows, const TensorView& num_accepted);

}  // namespace replayssm::cuda
