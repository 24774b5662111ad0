// The per-step row bookkeeping of verify steps on the device (kernels.h), so that a captured
// verify graph stays valid from step to step: each token row's slot and position (verify_rows),
// and the snapshot baseline's buffers (snapshot_rows / snapshot_advance): which of a slot's
// spec_T + 1 state buffers a step reads and which its tokens' snapshots overwrite, the rollback
// being a change of buffer, as the peers' serving engines do it (a state index per request
// instead of copying the accepted snapshot back).
#include "cuda/kernels.h"
#include "cuda/launch_check.h"

namespace replayssm::engine::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void verify_rows_kernel(const int32_t* __restrict__ slots,
                                   const int32_t* __restrict__ ntok,
                                   const int32_t* __restrict__ positions, int64_t B, int32_t T,
                                   int32_t num_slots, int32_t* tok_slots, int32_t* tok_pos) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= B * T) return;
  const int64_t b = r / T;
  const int32_t t = static_cast<int32_t>(r % T), slot = slots[b];
  const bool used = slot >= 0 && slot < num_slots && t < ntok[b];
  tok_slots[r] = used ? slot : -1;
  tok_pos[r] = used ? positions[slot] + t : 0;
}

__global__ void snapshot_rows_kernel(const int32_t* __restrict__ slots,
                                     const int32_t* __restrict__ cur, int64_t B, int32_t T,
                                     int32_t buffers, int32_t num_slots, int32_t* src,
                                     int32_t* dst) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= B) return;
  const int32_t slot = slots[b];
  const bool real = slot >= 0 && slot < num_slots;
  const int32_t c = real ? cur[slot] : 0;
  src[b] = real ? slot * buffers + c : -1;
  for (int32_t t = 0; t < T; ++t)
    dst[b * T + t] = real ? slot * buffers + (c + 1 + t) % buffers : -1;
}

__global__ void snapshot_advance_kernel(const int32_t* __restrict__ slots,
                                        const int32_t* __restrict__ accepted, int64_t B,
                                        int32_t buffers, int32_t num_slots, int32_t* cur) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= B) return;
  const int32_t slot = slots[b], n = accepted[b];
  if (slot < 0 || slot >= num_slots || n < 1 || n >= buffers) return;
  cur[slot] = (cur[slot] + n) % buffers;
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

void verify_rows(const int32_t* slots, const int32_t* ntok, const int32_t* positions, int64_t B,
                 int32_t T, int32_t num_slots, int32_t* tok_slots, int32_t* tok_pos,
                 cudaStream_t s) {
  if (B * T == 0) return;
  verify_rows_kernel<<<blocks_for(B * T), kThreads, 0, s>>>(slots, ntok, positions, B, T,
                                                            num_slots, tok_slots, tok_pos);
  check_launch("engine verify_rows");
}

void snapshot_rows(const int32_t* slots, const int32_t* cur, int64_t B, int32_t T,
                   int32_t buffers, int32_t num_slots, int32_t* src, int32_t* dst,
                   cudaStream_t s) {
  if (B == 0) return;
  snapshot_rows_kernel<<<blocks_for(B), kThreads, 0, s>>>(slots, cur, B, T, buffers, num_slots,
                                                          src, dst);
  check_launch("engine snapshot_rows");
}

void snapshot_advance(const int32_t* slots, const int32_t* accepted, int64_t B, int32_t buffers,
                      int32_t num_slots, int32_t* cur, cudaStream_t s) {
  if (B == 0) return;
  snapshot_advance_kernel<<<blocks_for(B), kThreads, 0, s>>>(slots, accepted, B, buffers,
                                                             num_slots, cur);
  check_launch("engine snapshot_advance");
}

}  // namespace replayssm::engine::cuda
