// One measured row of the kernel benchmark, and its outputs: the JSON file of DESIGN.md §4 and
// the table printed at the end of a run.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace replayssm::bench {

struct Row {
  // DESIGN.md §4 fields
  std::string family = "mamba2";
  std::string shape;
  int64_t batch = 0;
  std::string variant;         ///< "conventional" | "replay"
  std::optional<int> L;        ///< ring length (replay rows)
  std::string state;           ///< "<recurrence>/<read>", e.g. "fp32/fp32"
  double us = 0, us_p10 = 0, us_p90 = 0;  ///< per call (per step for window rows)
  double bytes = 0;            ///< byte model per call (byte_model.h)
  double gbps = 0, pct_copy_bw = 0;
  double speedup = 0;          ///< conventional µs / this row's µs (same shape, batch, run)
  std::string baseline = "ours-conventional";
  // additions
  std::string mode;            ///< replay: "step" | "flush" | "window" | "mixed"
  std::optional<int> h;        ///< replay step/flush: history records every row holds
  std::string route;           ///< replay: "auto" (the dispatcher) or the forced route
  std::string route_chosen;    ///< the route that ran
  nlohmann::json plan;         ///< resolved launch plan
  int calls = 0;               ///< R: calls (own slots and buffers) per graph replay
  int steps = 1;               ///< steps per call per replay (L for window rows)
  bool commit_in_graph = false;  ///< a device commit of every pool slot per step is timed too
  /// window row at the ring length the dispatcher picks for this batch (dispatch.h): its speedup
  /// is what ReplaySSM decoding delivers at this batch ("never slower" when >= ~1)
  bool dispatched = false;
  int64_t pool_slots = 0;
  int replays = 0;
};

nlohmann::json row_json(const Row& r);

/// The wide summary tables, one per family (one line per shape, batch and L; dispatcher route;
/// window µs of each forced route at the end), printed to stdout.
void print_table(const std::vector<Row>& rows, double copy_gbps);

}  // namespace replayssm::bench
