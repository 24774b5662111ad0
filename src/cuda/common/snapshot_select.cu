#include "cuda/common/snapshot_select.h"

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "common/validate.h"
#include "cuda/common/check.cuh"
#include "cuda/common/rows.h"
#include "replayssm/errors.h"

namespace replayssm::cuda {
namespace {

/// next[b] = snap_dst[b, accepted[b] - 1] for rows whose count lies in 1..T_b; other rows keep
/// next[b] = slot_ids[b] (pad rows, or an unchecked bad count: the state is not moved).
__global__ void snapshot_select_kernel(const int32_t* ids, const int32_t* snap_dst,
                                       const int32_t* num_tokens, const int32_t* accepted,
                                       int32_t* next, int32_t batch, int32_t Ty, int32_t slots) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int32_t slot = ids[b], n = accepted[b];
  const int32_t fed = num_tokens ? num_tokens[b] : Ty;
  const bool ok = slot >= 0 && slot < slots && n >= 1 && n <= fed && fed <= Ty;
  next[b] = ok ? snap_dst[static_cast<int64_t>(b) * Ty + n - 1] : slot;
}

}  // namespace

void snapshot_select(const Rows& rows, int64_t slots, const TensorView& snap_dst,
                     const TensorView& num_accepted, TensorView next_slot_ids) {
  const char* op = "snapshot_select (cuda)";
  check<ShapeError>(snap_dst.ndim == 2, op, " snap_dst: ", snap_dst.describe(),
                    ", expected rank 2 [batch, T]");
  const int64_t batch = snap_dst.shape[0], T = snap_dst.shape[1];
  validate::expect(snap_dst, (std::string(op) + " snap_dst").c_str(), {batch, T}, {DType::kI32},
                   Device::kCUDA);
  validate::expect(num_accepted, (std::string(op) + " num_accepted").c_str(), {batch},
                   {DType::kI32}, Device::kCUDA);
  validate::expect(next_slot_ids, (std::string(op) + " next_slot_ids").c_str(), {batch},
                   {DType::kI32}, Device::kCUDA);
  const std::vector<int32_t> ids = check_rows(rows, batch, slots, T, op);  // host copy, if any
  if (!ids.empty()) {  // counts outside 1..T_b are an error, never an offset
    const std::vector<int32_t> n = download_i32(num_accepted, rows.stream);
    const std::vector<int32_t> fed =
        rows.num_tokens.empty() ? std::vector<int32_t>(batch, static_cast<int32_t>(T))
                                : download_i32(rows.num_tokens, rows.stream);
    for (int64_t b = 0; b < batch; ++b)
      if (ids[b] != rows.pad_slot_id)
        check<SlotError>(n[b] >= 1 && n[b] <= fed[b], op, ": num_accepted[", b, "] = ", n[b],
                         ", expected 1..", fed[b], " (tokens fed to that row)");
  }
  if (batch == 0) return;
  const int threads = 128;
  snapshot_select_kernel<<<static_cast<unsigned>((batch + threads - 1) / threads), threads, 0,
                           static_cast<cudaStream_t>(rows.stream)>>>(
      rows.slot_ids.ptr<int32_t>(), snap_dst.ptr<int32_t>(),
      rows.num_tokens.empty() ? nullptr : rows.num_tokens.ptr<int32_t>(),
      num_accepted.ptr<int32_t>(), next_slot_ids.ptr<int32_t>(), static_cast<int32_t>(batch),
      static_cast<int32_t>(T), static_cast<int32_t>(std::min<int64_t>(slots, INT32_MAX)));
  check_launch((std::string(op) + " launch").c_str());
}

void check_snapshot_slots(const Rows& rows, const std::vector<int32_t>& ids,
                          const TensorView& snap_dst, int64_t slots, const char* op) {
  if (!host_checks_enabled(rows) || ids.empty()) return;
  const std::vector<int32_t> dst = download_i32(snap_dst, rows.stream);
  const int64_t T = snap_dst.shape[1];
  std::vector<int64_t> owner(static_cast<size_t>(slots), -1);  // row reading / writing a slot
  for (size_t b = 0; b < ids.size(); ++b)
    if (ids[b] != rows.pad_slot_id) owner[ids[b]] = static_cast<int64_t>(b);
  std::vector<bool> written(static_cast<size_t>(slots), false);
  for (size_t b = 0; b < ids.size(); ++b) {
    if (ids[b] == rows.pad_slot_id) continue;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t d = dst[b * T + t];
      if (d < 0 || d >= slots) continue;  // skipped write
      check<SlotError>(owner[d] < 0 || owner[d] == static_cast<int64_t>(b), op, ": snap_dst[", b,
                       ", ", t, "] = ", d, " is the source slot of row ", owner[d],
                       ", expected a slot no other row reads");
      check<SlotError>(!written[d], op, ": snap_dst[", b, ", ", t, "] = ", d,
                       " is written twice in one step, expected distinct snapshot slots");
      written[d] = true;
    }
  }
}

}  // namespace replayssm::cuda
