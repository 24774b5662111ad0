// How a block's threads cover state rows. A state row of N elements is read in chunks of Vec
// elements (16 bytes; 8 for NVFP4 read copies, chunk_bytes_of_bits); LPR consecutive lanes share
// a row (each owns CPL chunks, interleaved so that a warp touches contiguous spans), a warp covers
// 32 / LPR rows per pass, and a thread keeps RPT rows in registers, all loaded before the first
// use (RPT * CPL chunks in flight per thread).
#pragma once
#include <cstdint>

namespace replayssm::cuda::mamba2 {

template <int Vec, int N>
struct LayoutVec {
  static constexpr int kVec = Vec;              // state elements per chunk (one access)
  static constexpr int kChunks = N / kVec;      // chunks per state row
  static constexpr int kLanesPerRow = kChunks < 32 ? kChunks : 32;
  static constexpr int kChunksPerLane = kChunks / kLanesPerRow;
  static constexpr int kRowsPerWarp = 32 / kLanesPerRow;
  static constexpr int kCols = kChunksPerLane * kVec;  // state columns held by one lane
  static_assert(N % kVec == 0 && kChunks % kLanesPerRow == 0 &&
                    (kLanesPerRow & (kLanesPerRow - 1)) == 0,
                "d_state must be a power-of-two number of 16-byte state chunks up to 32, or a "
                "multiple of 32 chunks");
  /// First column of chunk c of the lane at position lr within its row.
  static constexpr int col(int c, int lr) { return (c * kLanesPerRow + lr) * kVec; }
};
/// The layout of a state of StateBytes-byte elements.
template <int StateBytes, int N>
using Layout = LayoutVec<16 / StateBytes, N>;

/// Bytes of the chunk a lane copies: 16, but 8 for 4-bit (NVFP4) states (quant_read.cuh
/// kChunkBytes: one 16-element block per lane).
__host__ __device__ constexpr int chunk_bytes_of_bits(int state_bits) {
  return state_bits == 4 ? 8 : 16;
}

/// Host-side mirror of Layout for a runtime d_state and state element size.
struct HostLayout {
  int lanes_per_row, rows_per_warp;
  static HostLayout of(int64_t N, int64_t state_bytes) { return of_bits(N, 8 * state_bytes); }
  /// For state_bits per element (32, 16; 8 and 4 for the quantised read copies).
  static HostLayout of_bits(int64_t N, int64_t state_bits) {
    const int64_t chunks = N * state_bits / (8 * chunk_bytes_of_bits(static_cast<int>(state_bits)));
    const int lpr = static_cast<int>(chunks < 32 ? chunks : 32);
    return HostLayout{lpr, 32 / lpr};
  }
};

/// Largest blocks the kernels are compiled for. The conventional kernel may use up to 128
/// registers per thread; the replay kernel is held to 64 (two 512-thread or four 256-thread blocks
/// per SM) so that several blocks' checkpoint copies are in flight per SM.
constexpr int kMaxThreads = 512;
constexpr int kReplayThreads = 512;

}  // namespace replayssm::cuda::mamba2
