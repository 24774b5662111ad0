// The CPU backend of the Mamba-2 ops: float32 arithmetic over a slot pool, OpenMP-parallel over
// (row, head) with a static schedule. The host API (src/api/mamba2.cpp) has validated every
// argument and normalised token tensors to rank 4 ([batch, T, ...]) before these run.
#pragma once
#include <cstdint>
#include <vector>

#include "replayssm/mamba2.h"

namespace replayssm::cpu::mamba2 {

using replayssm::mamba2::Cache;
using replayssm::mamba2::Layer;
using replayssm::mamba2::Tokens;

/// The rows of a call on the host: slot id per row (pad_slot_id = pad row) and tokens fed per row.
struct HostRows {
  std::vector<int32_t> slot;
  std::vector<int32_t> num_tokens;  ///< T_b; 1 for decode steps
  int32_t pad = -1;
  int64_t batch() const { return static_cast<int64_t>(slot.size()); }
  bool is_pad(int64_t b) const { return slot[b] == pad; }
};

void conventional_step(const Layer& layer, Cache& cache, const Tokens& in, const HostRows& rows,
                       const TensorView& y);
void replay_step(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
                 const HostRows& rows, const TensorView& y);
void verify(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
            const HostRows& rows, const TensorView& y);
void reset_slots(Cache& cache, const HostRows& rows);

}  // namespace replayssm::cpu::mamba2
