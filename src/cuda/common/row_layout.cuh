// How a block's threads cover state rows, for any family whose state rows are N contiguous
// elements. A row is read in 16-byte chunks; LPR consecutive lanes share a row (each owns CPL
// chunks, interleaved so that a warp touches contiguous spans of LPR x 16 bytes), a warp covers
// 32 / LPR rows per pass. MaxLanes caps LPR: fewer lanes per row means more columns per lane
// (registers) and shorter butterfly sums (shuffles).
#pragma once
#include <cstdint>

namespace replayssm::cuda {

template <int StateBytes, int N, int MaxLanes>
struct RowLayout {
  static constexpr int kVec = 16 / StateBytes;  // state elements per 16-byte access
  static constexpr int kChunks = N / kVec;      // 16-byte chunks per state row
  static constexpr int kLanesPerRow = kChunks < MaxLanes ? kChunks : MaxLanes;
  static constexpr int kChunksPerLane = kChunks / kLanesPerRow;
  static constexpr int kRowsPerWarp = 32 / kLanesPerRow;
  static constexpr int kCols = kChunksPerLane * kVec;  // state columns held by one lane
  static_assert(N % kVec == 0 && kChunks % kLanesPerRow == 0 &&
                    (kLanesPerRow & (kLanesPerRow - 1)) == 0 && MaxLanes <= 32,
                "a row must be a power-of-two number of 16-byte chunks up to MaxLanes, or a "
                "multiple of MaxLanes chunks");
  /// First column of chunk c of the lane at position lr within its row.
  static constexpr int col(int c, int lr) { return (c * kLanesPerRow + lr) * kVec; }
};

/// Host-side mirror of RowLayout for a runtime row length and element size.
struct HostRowLayout {
  int lanes_per_row, rows_per_warp, cols;
  static HostRowLayout of(int64_t N, int64_t state_bytes, int max_lanes) {
    const int64_t chunks = N * state_bytes / 16;
    const int lpr = static_cast<int>(chunks < max_lanes ? chunks : max_lanes);
    return HostRowLayout{lpr, 32 / lpr, static_cast<int>(N / lpr)};
  }
};

}  // namespace replayssm::cuda
