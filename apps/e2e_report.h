// The results of `replayssm bench e2e`: one row per (variant, batch), the table printed at the
// end of a run and the JSON file of DESIGN.md §4 (bench "e2e").
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace replayssm::cli {

struct E2eRow {
  std::string variant;          ///< "conventional" | "replay"
  std::optional<int> L;         ///< ring length (replay rows)
  std::string state = "fp32/fp32";
  int64_t batch = 0;
  double ms = 0, ms_p10 = 0, ms_p90 = 0;  ///< per decode step: median / p10 / p90 over windows
  double tokens_per_s = 0;      ///< batch / median step time
  /// Profiled steps: milliseconds per part (Model::StepTiming::kind_ms, averaged) and the share
  /// of the step the SSM layers (mamba2 + gdn entries) take.
  std::map<std::string, double> kind_ms;
  double profiled_ms = 0, ssm_share = 0;
  /// The conventional step at this batch: the mean of its first and last measurement in the run.
  double baseline_ms = 0;
  double speedup = 0;           ///< baseline_ms / this row's ms
  int repeat = 0;               ///< 1: the conventional baseline measured again, last
  bool dispatched = false;      ///< the ring length ModelOptions::ring_L = 0 picks at this batch
  int64_t gpu_memory_bytes = 0; ///< Model::device_bytes of the model the row ran on
  int64_t max_slots = 0;        ///< the pool that model was built for
  /// A whole step as a serving loop calls it, host clock, median of kServedSteps: step()
  /// (graph + every row's logits downloaded) and step_greedy() (graph + one id per row).
  double served_logits_ms = 0, served_greedy_ms = 0;
  int steps_timed = 0;          ///< timed steps (windows x window steps)
  int window_steps = 0;         ///< steps per window: whole flush cycles of the row's L
};

/// What the JSON records about the run besides the rows.
struct E2eRunInfo {
  std::string arch;             ///< --arch name, or the config's/model's directory name
  std::string weights;          ///< "random" or the checkpoint directory
  std::string device;           ///< "cuda" | "cpu"
  std::string commit;
  int64_t context = 0;
  int windows = 0;
  uint64_t seed = 0;
  std::string family;           ///< "mamba2", "gdn" or "mamba2+gdn": the SSM layers' kind
};

/// One line per batch: each variant's ms per step and speedup, and the SSM share, on stdout.
void print_e2e_table(const E2eRunInfo& info, const std::vector<E2eRow>& rows);

/// {"bench": "e2e", "commit", "gpu", "cpu", "date", ..., "rows": [...]}.
nlohmann::json e2e_json(const E2eRunInfo& info, const std::vector<E2eRow>& rows);

}  // namespace replayssm::cli
