// `replayssm_bench kernels --family mamba2`: our CUDA Mamba-2 decode kernels, conventional and
// ReplaySSM (per-step, flush, amortised window, mixed phases; the dispatcher's route and each route
// forced), per shape and batch, with the method of DESIGN.md §4 (see bench/README.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernel_points.h"

namespace replayssm::bench {

struct Mamba2Shape {
  std::string name;
  int64_t H, P, N, G;  ///< nheads, headdim, d_state, ngroups
};

/// The real model shapes (reference/models.md): "nano-4b", "super-120b".
const std::vector<Mamba2Shape>& mamba2_shapes();

/// The byte model of one (shape, checkpoint dtype, read format): byte_model.h's counts plus a
/// split mode's read copy.
StepBytes mamba2_mode_bytes(const Mamba2Shape& s, DType state, StateFormat read);

/// Graphs run_mamba2 will time (for the progress bar).
long mamba2_graph_count(const KernelConfig& cfg);
/// Bytes a run moves (for the run-time estimate).
double mamba2_run_bytes(const KernelConfig& cfg);

/// Runs every point; throws BenchError (or the library's error) on any failure.
std::vector<Row> run_mamba2(const KernelConfig& cfg);

}  // namespace replayssm::bench
