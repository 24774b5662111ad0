// `replayssm_bench kernels --family mamba2`: our CUDA Mamba-2 decode kernels, conventional and
// ReplaySSM (per-step, flush, amortised window, mixed phases; the dispatcher's route and each route
// forced), per shape and batch, with the method of DESIGN.md §4 (see bench/README.md).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "replayssm/tensor.h"
#include "results.h"
#include "timing.h"

namespace replayssm::bench {

struct Mamba2Shape {
  std::string name;
  int64_t H, P, N, G;  ///< nheads, headdim, d_state, ngroups
};

/// The real model shapes (reference/models.md): "nano-4b", "super-120b".
const std::vector<Mamba2Shape>& mamba2_shapes();

struct Mamba2Config {
  std::vector<std::string> shapes;
  std::vector<int64_t> batches;         ///< main points: every variant and route at ring length L
  int L = 16;
  std::vector<int> sweep_L;             ///< L sweep: dispatcher route, every mode
  std::vector<int64_t> sweep_batches;
  DType state = DType::kF32;            ///< state / checkpoint dtype
  uint64_t seed = 1;
  TimingConfig timing;
  double copy_gbps = 0;                 ///< for pct_copy_bw
  std::function<void()> on_graph;       ///< called after each timed graph (progress)
  std::function<void(const std::string&)> on_point;  ///< one-line summary per point
};

/// Graphs run_mamba2 will time (for the progress bar).
long mamba2_graph_count(const Mamba2Config& cfg);

/// Runs every point; throws BenchError (or the library's error) on any failure.
std::vector<Row> run_mamba2(const Mamba2Config& cfg);

/// Working-set rule of the method: R = ceil(512 MiB / bytes of the smallest call), clamped to
/// 2..64, so that between two touches of one call's slots the graph moves >= 8x the 60 MB L2.
int calls_per_graph(double smallest_call_bytes);

}  // namespace replayssm::bench
