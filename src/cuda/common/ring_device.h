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

}  // namespace replayssm::cuda
