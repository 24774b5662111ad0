// mamba2::reset_slots on CUDA: zero the checkpoint (state) of every real row's slot, and in the
// split modes its read copy and the copy's scales.
#include "cuda/common/zero_slots.h"
#include "cuda/mamba2/mamba2_cuda.h"

namespace replayssm::cuda::mamba2 {

void reset_slots(Cache& cache, const Rows& rows) {
  const char* op = "mamba2.reset_slots (cuda)";
  zero_slots(cache.state, rows, op);
  if (!cache.mode.has_read_copy()) return;
  zero_slots(cache.read.values, rows, op);  // all-zero codes and scales decode to 0
  for (const TensorView* s : {&cache.read.scales.rows, &cache.read.scales.blocks,
                              &cache.read.scales.global})
    if (!s->empty()) zero_slots(*s, rows, op);
}

}  // namespace replayssm::cuda::mamba2
