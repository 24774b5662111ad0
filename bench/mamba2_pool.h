// The device data of one benchmark point (shape, batch): layer parameters, a slot pool of
// R * batch slots (state/checkpoint, ring, cursors), and R calls, each with its own inputs,
// outputs and slot ids (call r owns slots perm[r * batch, (r + 1) * batch) of a random
// permutation of the pool, or of the identity with dense_slots). Inputs are random and non-zero,
// in the ranges of anchors-h200.md.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "cuda/mamba2/mamba2_cuda.h"
#include "cuda_util.h"
#include "read_copy.h"
#include "slot_pool.h"
#include "replayssm/mamba2.h"
#include "replayssm/ring.h"

namespace replayssm::bench {

class Mamba2Pool {
 public:
  /// read: the split mode's read copy (bf16, fp16, fp8 or nvfp4 with a float32 checkpoint), or
  /// kFp32 for none. dense_slots: the calls' slots in order (SlotPool).
  Mamba2Pool(const mamba2::Dims& dims, int64_t batch, DType state, int calls, uint64_t seed,
             cudaStream_t stream, StateFormat read = StateFormat::kFp32,
             bool dense_slots = false);

  /// (Re)allocates and fills the ring for ring length L (bf16 x and B, fp32 delta).
  void set_ring(int L);

  /// Cursors of every slot (SlotPool).
  void set_cursors_fixed(int h) { slots_->set_cursors_fixed(h); }
  void set_cursors_mixed() { slots_->set_cursors_mixed(); }

  /// The R conventional calls.
  void enqueue_conventional(cudaStream_t s) const;
  /// `steps` rounds of the R replay calls; after each round, when `commit`, one device commit of
  /// every pool slot (one commit per step for all layers, as a model would).
  void enqueue_replay(cudaStream_t s, const cuda::mamba2::Plan& plan, int steps,
                      bool commit) const;

  /// Sets every output to NaN (a measurement must overwrite all of them).
  void poison_outputs();
  /// Throws BenchError naming `what` if an output or a state value is not finite.
  void check_finite(const std::string& what);

  const mamba2::Dims& dims() const { return layer_.dims; }
  int64_t batch() const { return slots_->batch(); }
  int calls() const { return slots_->calls(); }
  int64_t slots() const { return slots_->slots(); }
  int L() const { return slots_->L(); }
  DType state_dtype() const { return state_t_; }
  StateFormat read_format() const { return read_; }

 private:
  mamba2::Tokens tokens(int r) const;
  TensorView y(int r) const;
  mamba2::Cache cache() const;

  mamba2::Layer layer_;
  int64_t batch_;
  int calls_;
  int64_t nslots_;
  DType state_t_;
  StateFormat read_;
  int L_ = 0;
  uint64_t seed_;
  cudaStream_t stream_;
  std::mt19937_64 rng_;
  std::unique_ptr<SlotPool> slots_;  // made after the parameters (their draws come first)
  DeviceMemory A_log_, dt_bias_, D_;
  DeviceMemory state_;  // checkpoint
  ReadCopy copy_;       // read copy (split modes)
  DeviceMemory x_, dt_, B_, C_, y_;
  DeviceMemory ring_x_, ring_dt_, ring_B_;
};

}  // namespace replayssm::bench
