// The device data of one benchmark point (shape, batch): layer parameters, a slot pool of
// R * batch slots (state/checkpoint, ring, cursors), and R calls, each with its own inputs,
// outputs and slot ids (call r owns slots perm[r * batch, (r + 1) * batch) of a random
// permutation of the pool). Inputs are random and non-zero, in the ranges of anchors-h200.md.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <string>

#include "cuda/mamba2/mamba2_cuda.h"
#include "cuda_util.h"
#include "replayssm/mamba2.h"
#include "replayssm/ring.h"

namespace replayssm::bench {

class Mamba2Pool {
 public:
  Mamba2Pool(const mamba2::Dims& dims, int64_t batch, DType state, int calls, uint64_t seed,
             cudaStream_t stream);

  /// (Re)allocates and fills the ring for ring length L (bf16 x and B, fp32 delta).
  void set_ring(int L);

  /// Cursors of every slot: all rows hold h records (is_flush iff h = L - 1).
  void set_cursors_fixed(int h);
  /// Every row at a random phase h in 0..L-1, the phases spread evenly over the pool (1/L of the
  /// rows flush on each step).
  void set_cursors_mixed();

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
  int64_t batch() const { return batch_; }
  int calls() const { return calls_; }
  int64_t slots() const { return slots_; }
  int L() const { return L_; }
  DType state_dtype() const { return state_t_; }

 private:
  mamba2::Tokens tokens(int r) const;
  TensorView y(int r) const;
  Rows rows(int r, cudaStream_t s) const;
  mamba2::Cache cache() const;
  RingCursors cursors() const;
  void upload_cursors(const std::vector<int32_t>& h);

  mamba2::Layer layer_;
  int64_t batch_;
  int calls_;
  int64_t slots_;
  DType state_t_;
  int L_ = 0;
  uint64_t seed_;
  cudaStream_t stream_;
  std::mt19937_64 rng_;
  DeviceMemory A_log_, dt_bias_, D_;
  DeviceMemory state_;
  DeviceMemory x_, dt_, B_, C_, y_, ids_, ones_;
  DeviceMemory ring_x_, ring_dt_, ring_B_, origin_, h_, flush_;
};

}  // namespace replayssm::bench
