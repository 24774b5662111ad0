// Host-side checks of the rows of a CUDA op. Slot ids (and per-row counts) live on the device; the
// kernels treat any id outside [0, slots) as a pad row, so nothing outside the pool is touched
// whatever the ids hold. When Rows::check_device_ids is set and the stream is not being captured,
// the ids are copied to the host and checked like the CPU backend's (SlotError before any launch).
#pragma once
#include <cstdint>
#include <vector>

#include "replayssm/ring.h"
#include "replayssm/tensor.h"

namespace replayssm::cuda {

/// Whether host copies of device-resident ids are taken and checked for these rows now.
bool host_checks_enabled(const Rows& rows);

/// Host copy of a contiguous int32 CUDA tensor (synchronises rows' stream).
std::vector<int32_t> download_i32(const TensorView& t, void* stream);

/// Checks rows for an op on a pool of `slots` slots: slot_ids int32 [batch] on CUDA, the pad
/// sentinel outside [0, slots), num_tokens (when T_max > 0 and given) int32 [batch] on CUDA; then,
/// when host_checks_enabled(rows): every real id in range and used once, 1 <= num_tokens <= T_max.
/// Returns the host ids when they were copied, else an empty vector.
std::vector<int32_t> check_rows(const Rows& rows, int64_t batch, int64_t slots, int64_t T_max,
                                const char* op);

}  // namespace replayssm::cuda
