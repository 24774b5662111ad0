// Device commit/reset of the ring cursors: one thread per batch row, the rule of ring.h.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "common/validate.h"
#include "cuda/common/check.cuh"
#include "cuda/common/ring_device.h"
#include "cuda/common/rows.h"

namespace replayssm::cuda {
namespace {

struct CursorPtrs {
  int32_t* origin;
  int32_t* h;
  int8_t* is_flush;
  int32_t slots;
};

__global__ void commit_kernel(CursorPtrs c, const int32_t* __restrict__ ids,
                              const int32_t* __restrict__ num_tokens,
                              const int32_t* __restrict__ accepted, int32_t batch, int32_t R,
                              int32_t L, int32_t T, bool decode, bool discard) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int32_t slot = ids[b];
  if (slot < 0 || slot >= c.slots) return;  // pad row (or an unchecked bad id): untouched
  const int32_t fed = num_tokens ? num_tokens[b] : T;
  const int32_t n = accepted[b];
  // discard: only the rows that kept nothing move (by the rule with n = 0); else counts 1..fed.
  if (discard ? n != 0 : (n < 1 || n > fed)) return;
  const int32_t h = c.h[slot];
  const bool flush = c.is_flush[slot] != 0;
  const int32_t folded = flush ? (decode ? h + 1 : h) : 0;
  const int32_t next_h = h + n - folded;
  c.origin[slot] = (c.origin[slot] + folded) % R;
  c.h[slot] = next_h;
  c.is_flush[slot] = next_h + 2 * T > L ? 1 : 0;
}

__global__ void reset_kernel(CursorPtrs c, const int32_t* __restrict__ ids, int32_t batch,
                             int8_t flush) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int32_t slot = ids[b];
  if (slot < 0 || slot >= c.slots) return;
  c.origin[slot] = 0;
  c.h[slot] = 0;
  c.is_flush[slot] = flush;
}

int64_t slots_of(const RingCursors& cursors, const char* op) {
  const std::string what = std::string(op) + " cursors.h";
  validate::expect(cursors.h, what.c_str(), {validate::kAny}, {DType::kI32}, Device::kCUDA);
  return cursors.h.shape[0];
}

int64_t batch_of(const Rows& rows, const char* op) {
  const std::string what = std::string(op) + " slot_ids";
  validate::expect(rows.slot_ids, what.c_str(), {validate::kAny}, {DType::kI32}, Device::kCUDA);
  return rows.slot_ids.shape[0];
}

CursorPtrs ptrs(const RingCursors& c, int64_t slots) {
  return CursorPtrs{c.origin.ptr<int32_t>(), c.h.ptr<int32_t>(), c.is_flush.ptr<int8_t>(),
                    static_cast<int32_t>(slots)};
}

constexpr int kThreads = 256;

}  // namespace

void ring_commit(RingCursors& cursors, const Rows& rows, const TensorView& num_accepted) {
  const char* op = "ring.commit";
  const int64_t slots = slots_of(cursors, op);
  validate::cursors(cursors, slots, cursors.config.mode, Device::kCUDA, op);
  const int64_t batch = batch_of(rows, op);
  const RingConfig& cfg = cursors.config;
  const std::vector<int32_t> ids = check_rows(rows, batch, slots, cfg.T, op);
  validate::expect(num_accepted, "ring.commit num_accepted", {batch}, {DType::kI32}, Device::kCUDA);
  if (!ids.empty()) {
    // Validate every row before any cursor moves: an error leaves all cursors as they were.
    const std::vector<int32_t> n = download_i32(num_accepted, rows.stream);
    std::vector<int32_t> fed(ids.size(), cfg.T);
    if (!rows.num_tokens.empty()) fed = download_i32(rows.num_tokens, rows.stream);
    for (int64_t b = 0; b < batch; ++b) {
      if (ids[b] == rows.pad_slot_id) continue;
      check<SlotError>(n[b] >= 1 && n[b] <= fed[b], op, ": num_accepted[", b, "] = ", n[b],
                       ", expected 1..", fed[b], " (tokens fed to that row)");
    }
  }
  if (batch == 0) return;
  const auto stream = static_cast<cudaStream_t>(rows.stream);
  const int blocks = static_cast<int>((batch + kThreads - 1) / kThreads);
  commit_kernel<<<blocks, kThreads, 0, stream>>>(
      ptrs(cursors, slots), rows.slot_ids.ptr<int32_t>(),
      rows.num_tokens.empty() ? nullptr : rows.num_tokens.ptr<int32_t>(),
      num_accepted.ptr<int32_t>(), static_cast<int32_t>(batch), cfg.rows(), cfg.L, cfg.T,
      cfg.mode == RingMode::kDecode, /*discard=*/false);
  check_launch("ring.commit kernel launch");
}

void ring_discard(RingCursors& cursors, const Rows& rows, const TensorView& num_accepted) {
  const char* op = "ring.discard";
  const int64_t slots = slots_of(cursors, op);
  validate::cursors(cursors, slots, cursors.config.mode, Device::kCUDA, op);
  check<ConfigError>(cursors.config.mode == RingMode::kSpeculative, op,
                     ": discarding a step needs speculative cursors");
  const int64_t batch = batch_of(rows, op);
  validate::expect(num_accepted, "ring.discard num_accepted", {batch}, {DType::kI32},
                   Device::kCUDA);
  if (batch == 0) return;
  const RingConfig& cfg = cursors.config;
  const auto stream = static_cast<cudaStream_t>(rows.stream);
  const int blocks = static_cast<int>((batch + kThreads - 1) / kThreads);
  commit_kernel<<<blocks, kThreads, 0, stream>>>(
      ptrs(cursors, slots), rows.slot_ids.ptr<int32_t>(), nullptr, num_accepted.ptr<int32_t>(),
      static_cast<int32_t>(batch), cfg.rows(), cfg.L, cfg.T, /*decode=*/false, /*discard=*/true);
  check_launch("ring.discard kernel launch");
}

void ring_reset(RingCursors& cursors, const Rows& rows) {
  const char* op = "ring.reset";
  const int64_t slots = slots_of(cursors, op);
  validate::cursors(cursors, slots, cursors.config.mode, Device::kCUDA, op);
  const int64_t batch = batch_of(rows, op);
  check_rows(rows, batch, slots, 0, op);
  if (batch == 0) return;
  const auto stream = static_cast<cudaStream_t>(rows.stream);
  const int blocks = static_cast<int>((batch + kThreads - 1) / kThreads);
  const Cursor fresh = reset_cursor(cursors.config);
  reset_kernel<<<blocks, kThreads, 0, stream>>>(ptrs(cursors, slots), rows.slot_ids.ptr<int32_t>(),
                                                static_cast<int32_t>(batch),
                                                static_cast<int8_t>(fresh.is_flush ? 1 : 0));
  check_launch("ring.reset kernel launch");
}

}  // namespace replayssm::cuda
