// The dispatcher's choice of ring length: ReplaySSM decoding is never slower than the conventional
// step at any batch size (issue "never slower"). Where the replay step cannot win, the ring length
// is 1: every step then folds only the current token into the checkpoint, which is the
// conventional step, and the CUDA replay_step runs the conventional kernel for it. The cursor
// contract (ring.h) is the same at every L, so callers keep one code path.
#pragma once
#include <cstdint>

namespace replayssm {

enum class SsmFamily : uint8_t { kMamba2, kGdn, kKda };
const char* ssm_family_name(SsmFamily f);

/// The ring length to decode `batch` rows with, given the length the caller asked for (>= 1):
/// `requested` where the measured ReplaySSM window beats the conventional step at that batch, else
/// 1. Source: `replayssm_bench kernels` on the H200, fp32 state (bench/results/kernels-all-c58e8c1;
/// re-measured with this dispatcher at c2d8804: the dispatched rows 0.99-1.03x where L = 1):
///   Mamba-2 (Nano-4B, Super): window / conventional 0.55-0.89 at batch 1-8, 1.20-1.38 at batch
///     >= 32 for L 4..16, and < 1 at L = 32 for Nano at batch 256: L = min(requested, 16) at
///     batch >= 32, else 1.
///   GDN, KDA (v1 replay kernels): 0.45-0.99 at every batch: 1.
/// Errors: ConfigError if requested < 1 or batch < 0.
int32_t recommended_ring_length(SsmFamily family, int64_t batch, int32_t requested);

}  // namespace replayssm
