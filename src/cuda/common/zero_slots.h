// Zeroing the state/checkpoint slots of a pool on CUDA: the reset_slots of every family.
#pragma once
#include "replayssm/precision.h"
#include "replayssm/ring.h"
#include "replayssm/tensor.h"

namespace replayssm::cuda {

/// Zero state[slot] (all trailing axes) for the slot id of every row of `rows` (device-resident
/// int32 ids; ids outside [0, slots) are pad rows and skipped). Validates `state` (rank 4, or 2..3
/// for the scales of a quantised read copy; float32, float16, bfloat16 or uint8; contiguous, on
/// CUDA; messages name "<op> state") and the rows (check_rows) before anything is enqueued on
/// rows.stream. Shapes against a layer are the caller's (the public API checks them first).
void zero_slots(const TensorView& state, const Rows& rows, const char* op);

/// zero_slots of the checkpoint `state` and, in a split mode with a read copy, of the copy's
/// values and scales (all-zero codes and scales decode to 0); in a mode with stochastic rounding
/// the slots' SR step counters go back to 0 (seeds are kept).
void zero_split_slots(const TensorView& state, const StateMode& mode, const StateBuffer& read,
                      const SrKeys& sr, const Rows& rows, const char* op);

}  // namespace replayssm::cuda
