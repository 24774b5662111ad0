// Outputs of `replayssm eval`: the table printed to stdout and the JSON file of DESIGN.md §4
// (bench "kl", one row per model, state and position bucket).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/engine/eval.h"

namespace replayssm::cli {

/// What the run was, for the report: the names and settings around the engine's EvalResult.
struct EvalRunInfo {
  std::string model;      ///< checkpoint directory as given
  std::string text;       ///< text file as given
  std::string device;     ///< "cpu" | "cuda"
  std::string commit;     ///< git commit of the build ("unknown" when not found)
  int64_t text_tokens = 0;  ///< tokens (bytes) in the file, before --tokens
  std::vector<int64_t> bucket_edges;
  /// Labels of the modes the CUDA engine ran emulated (ModelOptions::emulate_state: the mode's
  /// values over float32 storage) rather than with kernels of their own.
  std::vector<std::string> emulated;
};

/// The name a state mode is reported under: "fp32" is "fp32/fp32"; other names as given.
std::string state_label(const std::string& mode);

/// The table: one block per candidate, a line for all positions then one per bucket.
void print_eval_table(const EvalRunInfo& info, const engine::EvalResult& r);

/// The JSON document (DESIGN.md §4). Rows: per candidate, one for all positions (bucket "all")
/// and one per bucket, with "kl" (mean, nats), "kl_max", "top1_agreement", "bits_per_byte",
/// "ref_bits_per_byte", "emulated" (EvalRunInfo::emulated); where the "shared-nvfp4" baseline ran, per split mode (precision.h's
/// split modes: not fp32/fp32) one row
/// with "kl_reduction_vs_shared" = shared KL / this mode's KL in the 64K-128K bucket (or the
/// last bucket reached).
nlohmann::json eval_json(const EvalRunInfo& info, const engine::EvalResult& r);

}  // namespace replayssm::cli
