// The family-neutral part of a benchmark pool: R * batch slots, the random slot permutation that
// gives call r its run of `batch` slot ids, and the ring cursors of every slot (origin, h,
// is_flush) with the decode-mode device commit. Mamba2Pool and GdnPool hold one.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda_util.h"
#include "replayssm/ring.h"
#include "replayssm/tensor.h"

namespace replayssm::bench {

/// Bytes of n elements of dtype t.
inline size_t nbytes(int64_t n, DType t) { return static_cast<size_t>(n * dtype_size(t)); }

/// A view of `shape` at byte `offset_bytes` of device allocation m.
TensorView device_view(const DeviceMemory& m, int64_t offset_bytes, DType t,
                       std::initializer_list<int64_t> shape);

/// Copies v to dst and synchronises (v may go out of scope).
template <class T>
void upload(DeviceMemory& dst, const std::vector<T>& v, cudaStream_t s) {
  BENCH_CUDA(cudaMemcpyAsync(dst.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  BENCH_CUDA(cudaStreamSynchronize(s));
}

class SlotPool {
 public:
  /// Draws the permutation from rng (kept by reference: cursor origins are drawn from it too);
  /// dense: no permutation, call r takes slots r * batch .. r * batch + batch - 1 in order (the
  /// layout of a peer benchmark's dense batch, such as FLA's; the kernels still index by slot).
  SlotPool(int64_t batch, int calls, std::mt19937_64& rng, cudaStream_t stream,
           bool dense = false);

  /// Ring length of the cursors; every row back at h = 0.
  void set_L(int L);
  /// Cursors of every slot: all rows hold h records (is_flush iff h = L - 1).
  void set_cursors_fixed(int h);
  /// Every row at a random phase h in 0..L-1, the phases spread evenly over the pool (1/L of the
  /// rows flush on each step).
  void set_cursors_mixed();

  /// Rows of call r (its run of the permutation) on stream s.
  Rows rows(int r, cudaStream_t s) const;
  RingCursors cursors() const;
  /// One device commit of every pool slot, accepting one token each (a decode step).
  void commit_all(cudaStream_t s) const;

  int64_t batch() const { return batch_; }
  int calls() const { return calls_; }
  int64_t slots() const { return slots_; }
  int L() const { return L_; }

 private:
  void upload_cursors(const std::vector<int32_t>& h);

  int64_t batch_;
  int calls_;
  int64_t slots_;
  int L_ = 0;
  std::mt19937_64& rng_;
  cudaStream_t stream_;
  DeviceMemory ids_, ones_, origin_, h_, flush_;
};

}  // namespace replayssm::bench
