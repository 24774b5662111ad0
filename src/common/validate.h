// Host-side argument validation shared by every op: each check throws the typed error of
// errors.h with a message naming the op, the argument, the actual and the expected value.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "replayssm/errors.h"
#include "replayssm/ring.h"
#include "replayssm/tensor.h"

namespace replayssm::validate {

constexpr int64_t kAny = -1;  ///< wildcard size in expect()

/// Checks t's rank and sizes (kAny matches anything), dtype (one of `dtypes`), device and that it
/// is contiguous. `what` names the argument in messages, e.g. "mamba2.verify x".
void expect(const TensorView& t, const char* what, std::initializer_list<int64_t> shape,
            std::initializer_list<DType> dtypes, Device device);

/// Same as expect() but an absent (empty) view is accepted.
void expect_optional(const TensorView& t, const char* what, std::initializer_list<int64_t> shape,
                     std::initializer_list<DType> dtypes, Device device);

/// Returns t with a T axis of size 1 inserted at dim 1 when t has rank `rank_with_t - 1`.
TensorView with_token_axis(const TensorView& t, int rank_with_t);

/// Validates rows against a pool of `slots` slots on `device` and returns the host copy of the
/// slot ids (CPU only; CUDA validates on the device). Checks: int32 [batch], pad sentinel outside
/// [0, slots), every real id in range and no id used twice.
std::vector<int32_t> slot_ids(const Rows& rows, int64_t batch, int64_t slots, const char* op);

/// Host copy of per-row token counts for a verify call (T_max fills an absent num_tokens);
/// checks 1 <= T_b <= T_max for real rows.
std::vector<int32_t> num_tokens(const Rows& rows, const std::vector<int32_t>& slot_ids,
                                int64_t T_max, const char* op);

/// Checks the cursors' tensors ([slots] int32/int32/int8) and config; `mode` the mode the op needs.
void cursors(const RingCursors& c, int64_t slots, RingMode mode, Device device, const char* op);

/// All views must live on the same device; returns it.
Device common_device(std::initializer_list<const TensorView*> views, const char* op);

}  // namespace replayssm::validate
