// `replayssm_bench verify`: the speculative verify step (issue 5) against one ordinary ReplaySSM
// decode step and against the peers' snapshot baseline, per shape, batch, T and acceptance, with
// the graph-replay method of DESIGN.md §4 (bench/README.md "verify").
//
// Per point (shape, batch): a pool of R * batch sequences, R = calls per graph by the working-set
// rule of the kernel benchmark (sized by the checkpoint bytes of one call), each sequence with an
// fp32 checkpoint, a ring of L records and speculative cursors at random valid phases. Measured:
//   decode-step  one ordinary replay_step (decode ring, every row at h = L/2 - 1, no flush);
//   replay       L_T steps of mamba2::verify + device commit accepting T (all-accept) or 1
//                (all-reject) per row, so the rows cycle through their flushes; us per step.
//                Ring L_T = max(L, 4T): the early-flush rule (flush when h + 2T > L) makes every
//                step a flush at L = 2T, so T = 8 takes a 32-record ring;
//   snapshot     snapshot_verify (T conventional updates, one fp32 state snapshot per token) +
//                snapshot_select; us per step.
// Inputs and parameters as the kernel benchmark (bf16 tokens; spec_pools.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernel_points.h"

namespace replayssm::bench {

struct VerifyConfig {
  std::vector<std::string> shapes;  ///< Mamba-2 (mamba2_shapes()) or GDN/KDA (gdn_shapes()) shapes
  std::vector<int64_t> batches = {64, 128, 256, 512};
  std::vector<int> Ts = {2, 4, 6, 8};
  int L = 16;
  DType inputs = DType::kBF16;  ///< Mamba-2 x, dt, B, C, y and ring dtype (GDN/KDA: bf16 only)
  KernelConfig timing;  ///< timing, copy_gbps, seed and the progress hooks
};

/// The ring length the verify rows of T tokens run with: max(cfg.L, 4T).
int verify_ring_length(const VerifyConfig& cfg, int T);

/// Graphs run_verify times (for the progress bar).
long verify_graph_count(const VerifyConfig& cfg);

/// One JSON row per measurement (DESIGN.md §4: bench "verify", variant "replay" / "snapshot" /
/// "decode-step", fields T, acceptance, ratio_to_decode_step, speedup with baseline "snapshot").
std::vector<nlohmann::json> run_verify(const VerifyConfig& cfg);

}  // namespace replayssm::bench
