#include <cuda_runtime.h>

#include <string>

#include "common/validate.h"
#include "cuda/common/check.cuh"
#include "cuda/common/rows.h"
#include "replayssm/errors.h"

namespace replayssm::cuda {

bool host_checks_enabled(const Rows& rows) {
  return rows.check_device_ids && !is_capturing(static_cast<cudaStream_t>(rows.stream));
}

std::vector<int32_t> download_i32(const TensorView& t, void* stream) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  if (out.empty()) return out;
  const auto s = static_cast<cudaStream_t>(stream);
  check_cuda(
      cudaMemcpyAsync(out.data(), t.data, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, s),
      "cudaMemcpyAsync (ids to host)");
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize (ids to host)");
  return out;
}

std::vector<int32_t> check_rows(const Rows& rows, int64_t batch, int64_t slots, int64_t T_max,
                                const char* op) {
  const std::string ids_name = std::string(op) + " slot_ids";
  validate::expect(rows.slot_ids, ids_name.c_str(), {batch}, {DType::kI32}, Device::kCUDA);
  check<SlotError>(rows.pad_slot_id < 0 || rows.pad_slot_id >= slots, op, ": pad_slot_id ",
                   rows.pad_slot_id, " is a real slot, expected a value outside [0, ", slots, ")");
  const bool counts = T_max > 0 && !rows.num_tokens.empty();
  if (counts) {
    const std::string n_name = std::string(op) + " num_tokens";
    validate::expect(rows.num_tokens, n_name.c_str(), {batch}, {DType::kI32}, Device::kCUDA);
  }
  if (!host_checks_enabled(rows)) return {};
  // The CPU checks, on host copies (a host view of the copy keeps the messages identical).
  std::vector<int32_t> ids = download_i32(rows.slot_ids, rows.stream);
  Rows host = rows;
  host.slot_ids = make_view(ids.data(), DType::kI32, {batch});
  std::vector<int32_t> n;
  if (counts) {
    n = download_i32(rows.num_tokens, rows.stream);
    host.num_tokens = make_view(n.data(), DType::kI32, {batch});
  } else {
    host.num_tokens = TensorView{};
  }
  validate::slot_ids(host, batch, slots, op);
  if (T_max > 0) validate::num_tokens(host, ids, T_max, op);
  return ids;
}

void check_cursor_values(const RingCursors& cursors, const Rows& rows,
                         const std::vector<int32_t>& ids, int64_t T, const char* op) {
  if (!host_checks_enabled(rows) || ids.empty()) return;
  const std::vector<int32_t> origin = download_i32(cursors.origin, rows.stream);
  const std::vector<int32_t> h = download_i32(cursors.h, rows.stream);
  const std::vector<int32_t> fed =
      rows.num_tokens.empty() ? std::vector<int32_t>(ids.size(), static_cast<int32_t>(T))
                              : download_i32(rows.num_tokens, rows.stream);
  const int32_t R = cursors.config.rows();
  for (size_t b = 0; b < ids.size(); ++b) {
    const int32_t s = ids[b];
    if (s == rows.pad_slot_id) continue;
    check<SlotError>(origin[s] >= 0 && origin[s] < R, op, ": cursors.origin[", s, "] = ",
                     origin[s], " (row ", b, "), expected 0 <= origin < ", R);
    check<SlotError>(h[s] >= 0 && h[s] <= R - fed[b], op, ": cursors.h[", s, "] = ", h[s],
                     " (row ", b, ") leaves no room for ", fed[b], " records, expected 0 <= h <= ",
                     R - fed[b]);
  }
}

}  // namespace replayssm::cuda
