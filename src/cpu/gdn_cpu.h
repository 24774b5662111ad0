// CPU backend of the GDN/KDA ops (float32 arithmetic, OpenMP over (row, value head)). Called by
// src/api/gdn.cpp after every argument has been validated; nothing here checks or throws.
#pragma once
#include <cstdint>
#include <vector>

#include "replayssm/gdn.h"

namespace replayssm::gdn::cpu {

/// One validated call. Token views and y carry the T axis (T = 1 for decode ops); all views are
/// contiguous CPU tensors of the shapes in gdn.h; cursors is null for the conventional step.
struct Call {
  const Layer* layer = nullptr;
  const Cache* cache = nullptr;
  const RingCursors* cursors = nullptr;
  Tokens in;
  TensorView y;
  std::vector<int32_t> slots;       ///< slot id per row (pad_slot_id for pad rows)
  std::vector<int32_t> num_tokens;  ///< T_b per row (1 for decode ops)
  int32_t pad_slot_id = -1;
};

void conventional_step(const Call& call);
void replay_step(const Call& call);
void verify(const Call& call);
/// Zero state[slot] of every real id.
void reset_slots(const TensorView& state, const std::vector<int32_t>& slots, int32_t pad_slot_id);
/// Any state mode (precision.h): zero the state and its scales, the read copy and the SR step
/// counter of every real id.
void reset_slots(const Cache& cache, const std::vector<int32_t>& slots, int32_t pad_slot_id);

}  // namespace replayssm::gdn::cpu
