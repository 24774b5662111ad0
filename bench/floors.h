// `replayssm_bench floors`: the byte floors of the speed targets of issue 5 (verify vs one decode
// step, vs the snapshot baseline) and issue 6 (an ordinary step reading a 16-bit / FP8 / NVFP4
// copy vs reading fp32), from the byte model alone (byte_model.h, the kernel benchmarks' own
// counts; no GPU). Each target compares the latencies of two steps; a kernel of either step
// moves at least its design's bytes, at no more than the copy bandwidth, so at equal bandwidth
// the best ratio is the ratio of their bytes. A target beyond that ratio cannot be met by any
// kernel of the design on any GPU; a target inside it needs the slower side within
// floor / target of the faster side's bandwidth. bench/NOTES.md "Session 33" reads the table.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace replayssm::bench {

struct FloorsConfig {
  int L = 16;  ///< ring length of the decode and ordinary steps (verify: max(L, 4T))
};

/// One JSON row per (target, shape, point): bench "floors", "issue", "target", "family", "shape",
/// the two sides' bytes per sequence, "bound" (the best value of the ratio at equal bandwidth: a
/// floor of ratio_to_decode_step, a ceiling of a speedup), the "target_value" (null where
/// it names none at that point), "needs_bandwidth_fraction" (the replay side's bandwidth, as a
/// fraction of the other side's, that the target needs; above 1: impossible) and "meetable".
std::vector<nlohmann::json> run_floors(const FloorsConfig& cfg);

/// The rows as a table, one line per row.
std::string floors_table(const std::vector<nlohmann::json>& rows);

}  // namespace replayssm::bench
