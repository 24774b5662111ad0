#include "timing.h"

#include <algorithm>
#include <cmath>

#include "cuda_util.h"

namespace replayssm::bench {

double percentile(std::vector<double> samples, double q) {
  if (samples.empty()) throw BenchError("percentile of no samples");
  std::sort(samples.begin(), samples.end());
  const double pos = q * static_cast<double>(samples.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, samples.size() - 1);
  return samples[lo] + (pos - static_cast<double>(lo)) * (samples[hi] - samples[lo]);
}

namespace {

/// Captures enqueue(stream) into an instantiated graph; a throw during capture ends the capture
/// first so that the stream is usable (and the error is the one reported).
GraphExec capture(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t stream) {
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue(stream);
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
  try {
    GraphExec exec(graph);
    cudaGraphDestroy(graph);
    return exec;
  } catch (...) {
    cudaGraphDestroy(graph);
    throw;
  }
}

}  // namespace

ReplayStats time_graph(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t stream,
                       const TimingConfig& cfg) {
  if (cfg.timed_replays < 1) throw BenchError("timed_replays must be >= 1");
  for (int i = 0; i < cfg.eager_passes; ++i) {
    enqueue(stream);
    BENCH_CUDA(cudaStreamSynchronize(stream));
    BENCH_CUDA(cudaGetLastError());
  }
  const GraphExec exec = capture(enqueue, stream);
  for (int i = 0; i < cfg.warm_replays; ++i) exec.launch(stream);
  BENCH_CUDA(cudaStreamSynchronize(stream));

  std::vector<Event> events(static_cast<size_t>(cfg.timed_replays) + 1);
  events[0].record(stream);
  for (int i = 0; i < cfg.timed_replays; ++i) {
    exec.launch(stream);
    events[i + 1].record(stream);
  }
  BENCH_CUDA(cudaStreamSynchronize(stream));
  BENCH_CUDA(cudaGetLastError());

  ReplayStats st;
  for (int i = 0; i < cfg.timed_replays; ++i)
    st.samples_ms.push_back(events[i + 1].since(events[i]));
  st.median_ms = percentile(st.samples_ms, 0.5);
  st.p10_ms = percentile(st.samples_ms, 0.1);
  st.p90_ms = percentile(st.samples_ms, 0.9);
  return st;
}

}  // namespace replayssm::bench
