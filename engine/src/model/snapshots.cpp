#include "model/snapshots.h"

#include <algorithm>

namespace replayssm::engine {

void SnapshotPool::allocate(int64_t slots, int32_t T, int64_t state_size) {
  slots_ = slots;
  T_ = T;
  size_ = state_size;
  pool_.assign(slots * T * state_size, 0.0f);
}

Rows SnapshotPool::begin_token(const Batch& batch, int64_t s, const float* states) {
  ids_.assign(batch.n, -1);
  for (int64_t b = 0; b < batch.n; ++b) {
    const int32_t slot = batch.slots[b];
    if (slot < 0 || batch.ntok[b] <= s) continue;
    const int64_t dst = int64_t(slot) * T_ + s;
    const float* src = s == 0 ? states + slot * size_ : &pool_[(dst - 1) * size_];
    std::copy_n(src, size_, &pool_[dst * size_]);
    ids_[b] = static_cast<int32_t>(dst);
  }
  Rows rows;
  rows.slot_ids = make_view(ids_.data(), DType::kI32, {batch.n});
  rows.pad_slot_id = -1;
  return rows;
}

void SnapshotPool::select(const Batch& batch, const int32_t* accepted, float* states) const {
  for (int64_t b = 0; b < batch.n; ++b) {
    const int32_t slot = batch.slots[b];
    if (slot < 0 || accepted[b] < 1) continue;
    const int64_t src = int64_t(slot) * T_ + accepted[b] - 1;
    std::copy_n(&pool_[src * size_], size_, states + slot * size_);
  }
}

}  // namespace replayssm::engine
