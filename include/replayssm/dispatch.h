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
/// `requested` (at most 16) where the measured ReplaySSM step beats the conventional step at that
/// batch both when every row flushes on the same step ("window") and when the rows' flushes are
/// spread over the steps ("mixed", the serving case under continuous batching), else 1. Source:
/// `replayssm_bench kernels` on the H200, fp32 state, L = 16 (bench/results/kernels-all-*, kernels-mamba2-*):
///   Mamba-2 (Nano-4B, Super; 613ae4b, heads per block by fewest waves): window 1.32-1.33x and
///     mixed 1.14-1.16x at batch 16, mixed 1.24-1.29x at 32, 1.33-1.64x from 64; at batch 8 the
///     mixed phases 0.92x (Nano-4B): L = min(requested, 16) at batch >= 16.
///   GDN (Qwen3.5-4B, -122B; group kernel, 7241bec): mixed 0.93-0.96x at batch 32, 1.07-1.40x from
///     batch 64 (window 1.24-1.43x from 32): L = min(requested, 16) at batch >= 64.
///   KDA (Kimi-Linear): < 1 at every batch: 1.
/// Errors: ConfigError if requested < 1 or batch < 0.
int32_t recommended_ring_length(SsmFamily family, int64_t batch, int32_t requested);

}  // namespace replayssm
