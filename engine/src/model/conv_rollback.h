// Rollback of the SSM layers' causal conv1d state after a speculative verify step. The conv state
// of a slot is the last k inputs ([C, k], oldest first, cpu::conv_step); a verify step shifts in
// all T_b fed tokens, of which only the first n are accepted. Before the step the state is saved
// and the fed inputs kept; restore() rebuilds the state after n tokens from them (DESIGN.md §2:
// the ring rolls back by a cursor move, the conv window by this replay of at most T inputs).
#pragma once
#include <cstdint>
#include <vector>

#include "model/mixer.h"

namespace replayssm::engine {

class ConvRollback {
 public:
  /// Saves the conv state [C, k] of every real row's slot (states: [slots, C, k]).
  void save(const Batch& batch, const float* states, int64_t C, int64_t k);
  /// Keeps the conv input x [C] of packed token i (0 <= i < batch.tokens).
  void record(int64_t i, const float* x);
  /// Sets each real row's state to the state after its first accepted[b] tokens (rows that kept
  /// every fed token already hold it).
  void restore(const Batch& batch, const int32_t* accepted, float* states) const;

 private:
  int64_t C_ = 0, k_ = 0;
  std::vector<float> saved_;   // [n, C, k]
  std::vector<float> inputs_;  // [tokens, C]
};

}  // namespace replayssm::engine
