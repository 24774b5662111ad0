// The snapshot-based speculative decoding the peers use (DESIGN.md §2, issue 5 item 5), kept as
// the baseline ReplaySSM verify is measured against: a verify step runs its T tokens as T
// sequential conventional SSM updates, each writing one full state snapshot, and accept(n)
// selects snapshot n - 1 as the slot's state. Pool: T snapshots per slot, [slots * T, state].
#pragma once
#include <cstdint>
#include <vector>

#include "model/mixer.h"

namespace replayssm::engine {

class SnapshotPool {
 public:
  /// T snapshots of state_size floats for each of `slots` slots.
  void allocate(int64_t slots, int32_t T, int64_t state_size);
  /// Before token s of a verify step: for every real row feeding more than s tokens, copies the
  /// state token s starts from (the slot's state for s = 0, else snapshot s - 1) into snapshot s
  /// and returns library Rows addressing snapshot s (pool slot slot * T + s); other rows are pad
  /// rows (-1). The conventional step then updates snapshot s in place. states: [slots, state].
  Rows begin_token(const Batch& batch, int64_t s, const float* states);
  /// Row b's slot state becomes snapshot accepted[b] - 1 (pad rows: nothing).
  void select(const Batch& batch, const int32_t* accepted, float* states) const;
  float* pool() { return pool_.data(); }
  int64_t pool_slots() const { return slots_ * T_; }

 private:
  int64_t slots_ = 0, size_ = 0;
  int32_t T_ = 0;
  std::vector<float> pool_;
  std::vector<int32_t> ids_;
};

}  // namespace replayssm::engine
