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

/// Speculative steps, when host_checks_enabled(rows): every real row's cursor addresses the ring
/// with room for its T_b tokens (0 <= origin < R, 0 <= h <= R - T_b), else SlotError naming the
/// slot (as the CPU backend; the kernels would clamp it). ids: check_rows' host copy; T: the
/// token axis (T_b when rows.num_tokens is empty).
void check_cursor_values(const RingCursors& cursors, const Rows& rows,
                         const std::vector<int32_t>& ids, int64_t T, const char* op);

}  // namespace replayssm::cuda
