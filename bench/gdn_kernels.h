// `replayssm_bench kernels --family gdn|kda`: our CUDA Gated DeltaNet / KDA decode kernels,
// conventional and ReplaySSM (per-step, flush, amortised window, mixed phases; the dispatcher's
// route and each route forced), per shape and batch, with the method of DESIGN.md §4 (the shared
// loop of kernel_points.h; byte model of bench/NOTES_gdn.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernel_points.h"
#include "replayssm/gdn.h"

namespace replayssm::bench {

struct GdnShape {
  std::string name;
  std::string family;  ///< "gdn" (scalar gate) or "kda" (per-channel gate)
  int64_t H, HV, K, V;
  gdn::Gate gate() const { return family == "kda" ? gdn::Gate::kChannel : gdn::Gate::kScalar; }
};

/// The real model shapes: "qwen3.5-4b", "qwen3.5-122b" (GDN), "kimi-linear" (KDA).
const std::vector<GdnShape>& gdn_shapes();
/// Names of the shapes of `family` ("gdn" or "kda").
std::vector<std::string> gdn_shape_names(const std::string& family);

/// The byte model of one (shape, checkpoint dtype, read format): byte_model.h's counts plus a
/// split mode's read copy and the v, beta its ordinary steps append for the exact flush.
StepBytes gdn_mode_bytes(const GdnShape& s, DType state, StateFormat read);

/// Graphs run_gdn will time (for the progress bar); cfg.shapes are GdnShape names.
long gdn_graph_count(const KernelConfig& cfg);
/// Bytes a run moves (for the run-time estimate).
double gdn_run_bytes(const KernelConfig& cfg);

/// Runs every point of cfg.shapes (GDN and KDA shapes alike; each row's family is its shape's).
std::vector<Row> run_gdn(const KernelConfig& cfg);

}  // namespace replayssm::bench
