// The device data of one `replayssm_bench verify` point (shape, batch), per family: a pool of
// R * batch sequences (fp32 checkpoint, ring, speculative cursors), R calls each with its own
// bf16 token buffers sized for the largest T, and the three ops the benchmark times: one ordinary
// decode step, one verify step, one snapshot-baseline step. SpecSlots holds what every family
// shares (slot ids, accepted counts, cursors).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "byte_model.h"
#include "cuda_util.h"
#include "gdn_kernels.h"
#include "mamba2_kernels.h"
#include "replayssm/gdn.h"
#include "replayssm/mamba2.h"
#include "replayssm/ring.h"

namespace replayssm::bench {

class SpecSlots {
 public:
  SpecSlots(int64_t batch, int calls, uint64_t seed, cudaStream_t stream);
  int64_t batch() const { return batch_; }
  int calls() const { return calls_; }
  int64_t slots() const { return slots_; }
  /// Rows of call r (its run of a random permutation of the pool).
  Rows rows(int r, cudaStream_t s) const;
  RingCursors cursors(const RingConfig& cfg) const;
  /// Accepted counts of call r's rows.
  TensorView accepted(int r) const;
  /// Speculative cursors at random valid phases (h in 0..L-T, the flush rule); returns them.
  std::vector<Cursor> set_spec_cursors(const RingConfig& cfg);
  /// Decode cursors: every row at history h, no flush.
  void set_decode_cursors(int L, int h);
  void set_accepted(int n);

 protected:
  void put_cursors(const std::vector<Cursor>& cur);
  int64_t batch_;
  int calls_;
  int64_t slots_;
  std::mt19937_64 rng_;
  cudaStream_t stream_;
  DeviceMemory ids_, accepted_, origin_, h_, flush_;
};

/// Mamba-2: x, dt, B, C, y bf16 (no z), ring x and B bf16, delta fp32.
class Mamba2Spec : public SpecSlots {
 public:
  /// in: dtype of x, dt, B, C, y and the ring's x and B (bf16, or float32 as the engine feeds).
  Mamba2Spec(const Mamba2Shape& s, int64_t batch, int calls, int Lmax, int Tmax, uint64_t seed,
             cudaStream_t stream, DType in = DType::kBF16);
  static const char* family() { return "mamba2"; }
  /// Bytes per sequence of one step (byte_model.h), fp32 state.
  static StepBytes bytes_of(const Mamba2Shape& s, DType in = DType::kBF16) {
    return mamba2_bytes(s.H, s.P, s.N, s.G, 4, dtype_size(in));
  }
  /// The pool's states viewed as `slots` slots of memory m (the snapshot baseline's pool).
  TensorView states(const DeviceMemory& m, int64_t slots) const;
  int64_t state_elems() const { return H_ * P_ * N_; }
  void decode(int r, cudaStream_t s, int L) const;
  void verify(int r, cudaStream_t s, const RingConfig& cfg) const;
  void snapshot(int r, cudaStream_t s, int T, const TensorView& states, const Rows& rows,
                const TensorView& dst) const;
  void poison();
  void check(int T, const std::string& what);

 private:
  mamba2::Tokens tokens(int r, int T) const;
  TensorView y(int r, int T) const;
  mamba2::Cache cache(int L) const;
  int64_t H_, P_, N_, G_;
  int Lmax_, Tmax_;
  DType in_;
  mamba2::Layer layer_;
  DeviceMemory A_log_, dt_bias_, D_, state_, ring_x_, ring_dt_, ring_B_, x_, dt_, B_, C_, y_;
};

/// GDN / KDA: q, k, v, a, b, y bf16; ring u, k^, g fp32.
class GdnSpec : public SpecSlots {
 public:
  /// in: bf16 only (the GDN/KDA pools are bf16 inputs; BenchError otherwise).
  GdnSpec(const GdnShape& s, int64_t batch, int calls, int Lmax, int Tmax, uint64_t seed,
          cudaStream_t stream, DType in = DType::kBF16);
  const char* family() const { return kda_ ? "kda" : "gdn"; }
  static StepBytes bytes_of(const GdnShape& s, DType = DType::kBF16) {
    return gdn_bytes(s.H, s.HV, s.K, s.V, s.family == "kda" ? s.K : 1, 4);
  }
  TensorView states(const DeviceMemory& m, int64_t slots) const;
  int64_t state_elems() const { return HV_ * V_ * K_; }
  void decode(int r, cudaStream_t s, int L) const;
  void verify(int r, cudaStream_t s, const RingConfig& cfg) const;
  void snapshot(int r, cudaStream_t s, int T, const TensorView& states, const Rows& rows,
                const TensorView& dst) const;
  void poison();
  void check(int T, const std::string& what);

 private:
  gdn::Tokens tokens(int r, int T) const;
  TensorView y(int r, int T) const;
  gdn::Cache cache(int L) const;
  int64_t H_, HV_, K_, V_;
  bool kda_;
  int Lmax_, Tmax_;
  gdn::Layer layer_;
  DeviceMemory A_log_, dt_bias_, state_, ring_u_, ring_k_, ring_g_, q_, k_, v_, a_, b_, y_;
};

}  // namespace replayssm::bench
