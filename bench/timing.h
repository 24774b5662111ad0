// Graph-replay timing (DESIGN.md §4, anchors-h200.md "How it was measured"): the work of one
// measurement (R back-to-back calls, each on its own slots and buffers) runs eagerly a few times,
// is captured once into a CUDA graph, replayed to warm up, then replayed back to back with an
// event between replays. One sample = one replay.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <vector>

namespace replayssm::bench {

struct TimingConfig {
  int eager_passes = 2;    ///< eager runs before capture (module load, first-touch, checks)
  int warm_replays = 3;    ///< graph replays before timing
  int timed_replays = 25;  ///< timed graph replays (median, p10, p90 over these)
};

/// Milliseconds per replay: the median and the 10th / 90th percentiles (linear interpolation
/// between order statistics) of the timed replays.
struct ReplayStats {
  double median_ms = 0, p10_ms = 0, p90_ms = 0;
  std::vector<double> samples_ms;
};

/// Percentile q in [0, 1] of the samples (linear interpolation between order statistics).
double percentile(std::vector<double> samples, double q);

/// Runs `enqueue(stream)` eagerly cfg.eager_passes times (synchronising after each, so an error
/// surfaces there and not inside a graph), captures one call of it into a graph, and times
/// cfg.timed_replays replays after cfg.warm_replays. `enqueue` must leave the device in a state
/// from which it can run again (replays repeat it as captured).
ReplayStats time_graph(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t stream,
                       const TimingConfig& cfg);

}  // namespace replayssm::bench
