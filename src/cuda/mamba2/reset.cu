// mamba2::reset_slots on CUDA: zero the checkpoint (state) of every real row's slot, and in the
// split modes fp32/bf16, fp32/fp16 its read copy.
#include "cuda/common/zero_slots.h"
#include "cuda/mamba2/mamba2_cuda.h"

namespace replayssm::cuda::mamba2 {

void reset_slots(Cache& cache, const Rows& rows) {
  zero_slots(cache.state, rows, "mamba2.reset_slots (cuda)");
  if (cache.mode.has_read_copy()) zero_slots(cache.read.values, rows, "mamba2.reset_slots (cuda)");
}

}  // namespace replayssm::cuda::mamba2
