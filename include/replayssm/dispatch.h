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
///   Mamba-2 (Nano-4B, Super; heads per block by fewest waves, the flush launch overlapping the
///     ordinary one): at batch 8 window 1.14-1.23x, mixed 1.02-1.08x (Nano-4B) and 1.05-1.10x
///     (Super) (f46bfb9 / 16ce3b4 / 3f20ab1 / 91de005 / e264667, five calls); batch 16 window 1.32-1.33x,
///     mixed 1.14-1.16x (613ae4b); mixed 1.30-1.56x at 32, 1.38-1.72x from 64; batch 1
///     0.54-0.55x: L = min(requested, 16) at batch >= 8 (smaller batches are not measured).
///   GDN (Qwen3.5-4B, -122B; group kernel, the ordinary launch without the fold, the flush launch
///     overlapping it; df46788 / f44553d / af3cdd6 / e264667, four calls): at batch 8 mixed
///     1.04-1.08x / 1.22-1.24x (window 1.06-1.10x / 1.35-1.38x), at 32 1.26-1.27x / 1.40x,
///     1.39-1.62x from 64; batch 1 0.45-0.56x:
///     L = min(requested, 16) at batch >= 8 (smaller batches are not measured).
///   KDA (Kimi-Linear): < 1 at every batch: 1.
/// `read_copy`: a split state mode with a read copy (fp32/bf16, fp32/fp16, fp32/fp8, fp32/nvfp4;
/// precision.h): its flushes also write the copy, GDN's refold every record, so replay pays from
/// larger batches; at L = 1 the step is the fp32 conventional one (the copy is never read):
///   Mamba-2 fp32/bf16 (f46bfb9, after the split step's redundant flush launch went): mixed
///     2.11x / 1.92x (Nano-4B / Super) at batch 64; at d9c0ac3, before that fix, 0.67-0.73x at
///     batch 32 (not re-measured since): L = min(requested, 16) at batch >= 64.
///   GDN fp32/bf16 and fp32/fp16 (Qwen3.5-4B, df46788): mixed 0.46x at batch 64, 1.01-1.02x at
///     256, 1.05-1.06x at 512: at batch >= 256.
/// Errors: ConfigError if requested < 1 or batch < 0.
int32_t recommended_ring_length(SsmFamily family, int64_t batch, int32_t requested,
                                bool read_copy = false);

}  // namespace replayssm
