// mamba2::reset_slots on CUDA: zero the checkpoint (state) of every real row's slot, and in the
// split modes its read copy and the copy's scales.
#include "cuda/common/zero_slots.h"
#include "cuda/mamba2/mamba2_cuda.h"

namespace replayssm::cuda::mamba2 {

void reset_slots(Cache& cache, const Rows& rows) {
  zero_split_slots(cache.state, cache.mode, cache.read, cache.sr, rows, "mamba2.reset_slots (cuda)");
}

}  // namespace replayssm::cuda::mamba2
