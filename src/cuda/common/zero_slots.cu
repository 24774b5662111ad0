#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "common/validate.h"
#include "cuda/common/check.cuh"
#include "cuda/common/rows.h"
#include "cuda/common/sr_steps.h"
#include "cuda/common/zero_slots.h"

namespace replayssm::cuda {
namespace {

/// Grid (x: chunks of the slot, y: batch row); 16-byte words per slot, or 2-byte halves or single
/// bytes when the slot is not a whole number of them (word = 16, 2 or 1).
__global__ void zero_slots_kernel(void* state, const int32_t* __restrict__ ids, int32_t slots,
                                  int64_t slot_bytes, int word) {
  const int32_t slot = ids[blockIdx.y];
  if (slot < 0 || slot >= slots) return;
  char* base = static_cast<char*>(state) + static_cast<int64_t>(slot) * slot_bytes;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (word == 16) {
    uint4* w = reinterpret_cast<uint4*>(base);
    for (int64_t i = first; i < slot_bytes / 16; i += stride) w[i] = make_uint4(0, 0, 0, 0);
  } else if (word == 2) {
    uint16_t* w = reinterpret_cast<uint16_t*>(base);
    for (int64_t i = first; i < slot_bytes / 2; i += stride) w[i] = 0;
  } else {
    for (int64_t i = first; i < slot_bytes; i += stride) base[i] = 0;
  }
}

}  // namespace

void zero_slots(const TensorView& state, const Rows& rows, const char* op) {
  const std::string state_name = std::string(op) + " state";
  // A state or read copy [slots, H, P, N]; the scales of a quantised copy [slots, H, P] or
  // [slots, H].
  constexpr int64_t A = validate::kAny;
  const auto dtypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kU8};
  if (state.ndim == 2)
    validate::expect(state, state_name.c_str(), {A, A}, dtypes, Device::kCUDA);
  else if (state.ndim == 3)
    validate::expect(state, state_name.c_str(), {A, A, A}, dtypes, Device::kCUDA);
  else
    validate::expect(state, state_name.c_str(), {A, A, A, A}, dtypes, Device::kCUDA);
  const int64_t slots = state.shape[0];
  const std::string ids_name = std::string(op) + " slot_ids";
  validate::expect(rows.slot_ids, ids_name.c_str(), {validate::kAny}, {DType::kI32}, Device::kCUDA);
  const int64_t batch = rows.slot_ids.shape[0];
  check_rows(rows, batch, slots, 0, op);
  check<UnsupportedError>(batch <= 65535, op, ": batch ", batch, ", expected <= 65535");
  if (batch == 0 || slots == 0) return;
  const int64_t slot_bytes = state.numel() / slots * dtype_size(state.dtype);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(state.data);
  const int word = slot_bytes % 16 == 0 && addr % 16 == 0 ? 16
                   : slot_bytes % 2 == 0 && addr % 2 == 0 ? 2
                                                          : 1;
  const int64_t words = slot_bytes / word;
  constexpr int kThreads = 256;
  const int64_t chunks = std::min<int64_t>((words + kThreads - 1) / kThreads, 1024);
  const std::string what = std::string(op) + " launch";
  zero_slots_kernel<<<dim3(static_cast<unsigned>(std::max<int64_t>(chunks, 1)),
                           static_cast<unsigned>(batch)),
                      kThreads, 0, static_cast<cudaStream_t>(rows.stream)>>>(
      state.data, rows.slot_ids.ptr<int32_t>(), static_cast<int32_t>(slots), slot_bytes, word);
  check_launch(what.c_str());
}

void zero_split_slots(const TensorView& state, const StateMode& mode, const StateBuffer& read,
                      const SrKeys& sr, const Rows& rows, const char* op) {
  zero_slots(state, rows, op);
  if (mode.uses_sr()) sr_reset(sr, rows, state.shape[0]);
  if (!mode.has_read_copy()) return;
  zero_slots(read.values, rows, op);
  for (const TensorView* s : {&read.scales.rows, &read.scales.blocks, &read.scales.global})
    if (!s->empty()) zero_slots(*s, rows, op);
}

}  // namespace replayssm::cuda
