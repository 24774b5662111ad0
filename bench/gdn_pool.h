// The device data of one GDN/KDA benchmark point (shape, batch): layer parameters, a slot pool of
// R * batch slots (fp32/16-bit state or checkpoint, fp32 ring u, k^, g, cursors) and R calls,
// each with its own bf16 inputs (q, k, v, a, b), output y and slot ids (SlotPool). Inputs are
// random and non-zero (ranges in bench/README.md).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "cuda/gdn/gdn_cuda.h"
#include "cuda_util.h"
#include "read_copy.h"
#include "replayssm/gdn.h"
#include "slot_pool.h"

namespace replayssm::bench {

class GdnPool {
 public:
  /// read: the split mode's read copy (kBF16 / kF16 / kFp8 / kNvfp4: fp32/bf16, fp32/fp16,
  /// fp32/fp8, fp32/nvfp4) with ring v and beta, or kFp32 for none. dense_slots: the calls'
  /// slots in order (SlotPool).
  GdnPool(const gdn::Dims& dims, int64_t batch, DType state, int calls, uint64_t seed,
          cudaStream_t stream, StateFormat read = StateFormat::kFp32,
          bool dense_slots = false);

  /// (Re)allocates and fills the ring for ring length L (fp32 u, k^, g).
  void set_ring(int L);
  void set_cursors_fixed(int h) { slots_->set_cursors_fixed(h); }
  void set_cursors_mixed() { slots_->set_cursors_mixed(); }

  /// The R conventional calls.
  void enqueue_conventional(cudaStream_t s) const;
  /// `steps` rounds of the R replay calls, each round followed by one device commit of every
  /// pool slot when `commit`.
  void enqueue_replay(cudaStream_t s, const cuda::gdn::Plan& plan, int steps, bool commit) const;

  /// Sets every output to NaN (a measurement must overwrite all of them).
  void poison_outputs();
  /// Throws BenchError naming `what` if an output or a state value is not finite.
  void check_finite(const std::string& what);

  int64_t batch() const { return slots_->batch(); }
  int calls() const { return slots_->calls(); }
  int64_t slots() const { return slots_->slots(); }
  DType state_dtype() const { return state_t_; }
  StateFormat read_format() const { return read_f_; }

 private:
  bool split() const { return read_f_ != StateFormat::kFp32; }
  int64_t gw() const { return layer_.dims.gate == gdn::Gate::kChannel ? layer_.dims.head_k_dim : 1; }
  gdn::Tokens tokens(int r) const;
  TensorView y(int r) const;
  gdn::Cache cache() const;

  gdn::Layer layer_;
  int64_t batch_;
  int calls_;
  int64_t nslots_;
  DType state_t_;
  StateFormat read_f_;  // the split mode's read copy (kFp32: none)
  int L_ = 0;
  uint64_t seed_;
  cudaStream_t stream_;
  std::mt19937_64 rng_;
  std::unique_ptr<SlotPool> slots_;
  DeviceMemory A_log_, dt_bias_;
  DeviceMemory state_;
  ReadCopy read_;
  DeviceMemory q_, k_, v_, a_, b_, y_;
  DeviceMemory ring_u_, ring_k_, ring_g_, ring_v_, ring_beta_;
};

}  // namespace replayssm::bench
