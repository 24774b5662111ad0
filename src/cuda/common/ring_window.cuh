// A row's ring cursor as the verify and flush kernels use it (ring.h for the protocol): clamped on load
// so that even a corrupt cursor cannot address outside the slot's ring (the host checks reject
// such cursors where they may synchronise), and the logical -> physical record map.
#pragma once
#include <cuda_runtime.h>

namespace replayssm::cuda {

struct RingWindow {
  int R = 1, origin = 0, hist = 0;
  /// origin mod R; history clamped to 0..R - room (room: the records the step appends).
  __device__ __forceinline__ static RingWindow of(int origin_raw, int hist_raw, int R, int room) {
    RingWindow w;
    w.R = R;
    w.origin = origin_raw % R;
    if (w.origin < 0) w.origin += R;
    w.hist = min(max(hist_raw, 0), R - room);
    return w;
  }
  /// Physical ring row of logical record l (0 <= l < R).
  __device__ __forceinline__ int phys(int l) const {
    const int q = origin + l;
    return q >= R ? q - R : q;
  }
};

}  // namespace replayssm::cuda
