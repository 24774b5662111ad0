// The rollback of the snapshot speculative baseline (mamba2/snapshot.cuh, gdn/snapshot.cuh),
// shared by every family: the next step of row b reads the snapshot of its last accepted token.
#pragma once
#include <cstdint>
#include <vector>

#include "replayssm/ring.h"
#include "replayssm/tensor.h"

namespace replayssm::cuda {

/// next_slot_ids[b] = snap_dst[b, num_accepted[b] - 1] on the device (snap_dst [batch, T] int32,
/// num_accepted and next_slot_ids [batch] int32; rows.slot_ids the ids the step read, pad rows
/// keep theirs). Counts outside 1..T_b: SlotError when host checks run, else the row keeps its
/// slot (never an offset).
void snapshot_select(const Rows& rows, int64_t slots, const TensorView& snap_dst,
                     const TensorView& num_accepted, TensorView next_slot_ids);

/// The snapshot baselines' slot rule, when host_checks_enabled(rows): the snapshot slots of the
/// real rows' tokens (snap_dst [batch, T] int32 entries inside [0, slots)) are distinct and none
/// is another row's source slot (one block's snapshot store would race another's read), else
/// SlotError. A row may write over its own source. ids: check_rows' host copy.
void check_snapshot_slots(const Rows& rows, const std::vector<int32_t>& ids,
                          const TensorView& snap_dst, int64_t slots, const char* op);

}  // namespace replayssm::cuda
