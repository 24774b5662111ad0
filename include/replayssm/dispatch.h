// The dispatcher's choice of ring length: ReplaySSM decoding is never slower than the conventional
// step at any batch size (issue "never slower"). Where the replay step cannot win, the ring length
// is 1: every step then folds only the current token into the checkpoint, which is the
// conventional step, and the CUDA replay_step runs the conventional kernel for it. The cursor
// contract (ring.h) is the same at every L, so callers keep one code path.
#pragma once
#include <cstdint>

#include "replayssm/precision.h"

namespace replayssm {

enum class SsmFamily : uint8_t { kMamba2, kGdn, kKda };
const char* ssm_family_name(SsmFamily f);

/// The ring length to decode `batch` rows with, given the length the caller asked for (>= 1):
/// `requested` (at most 16; KDA 8) where the measured ReplaySSM step beats the conventional step
/// at that batch both when every row flushes on the same step ("window") and when the rows'
/// flushes are spread over the steps ("mixed", the serving case under continuous batching), else
/// 1. Source:
/// `replayssm_bench kernels` on the H200, fp32 state, L = 16, KDA also L = 8
/// (bench/results/kernels-all-*, kernels-mamba2-*, small-*, kernels-kda-L8-*; bench/NOTES.md
/// "Small batches", bench/NOTES_gdn.md "Session 17"):
///   Mamba-2 (Nano-4B, Super; heads per block by fewest waves, the flush launch overlapping the
///     ordinary one), against the small-batch conventional plans of fb24a48 in one call
///     (bench/results/small-*-fb24a48.*): batch 8 window 1.06x / 1.10x but mixed 0.95x / 0.98x
///     (Nano-4B / Super); batch 16 mixed 1.31x / 1.28x (window 1.47x / 1.45x), 1.40-1.43x at 32,
///     1.38-1.72x from 64 (earlier calls); batch 1-4 0.44-0.78x: L = min(requested, 16) at
///     batch >= 16.
///   GDN (Qwen3.5-4B, -122B; group kernel, the ordinary launch without the fold, the flush launch
///     overlapping it), same call: batch 8 mixed 0.98x (Qwen3.5-4B, 2 MiB of state per sequence)
///     but 1.14x (Qwen3.5-122B, 4 MiB); batch 16 mixed 1.10x / 1.29x; batch 4 0.62x / 0.97x;
///     1.28-1.41x at 32 and 1.39-1.62x from 64 (earlier calls): L = min(requested, 16) at batch
///     >= 16, and from batch 8 where a sequence's state in the layer is >= 4 MiB (`state_bytes`;
///     0, unknown, takes 16).
///   KDA (Kimi-Linear; the flush launch and the ordinary launch without the fold, as GDN, H200,
///     bench/NOTES_gdn.md "Session 17"): a record is 2.3% of the state (per-channel g), so L = 8
///     beats 16 at batch 64-256: window 1.29x / 1.38x (mixed 1.24x / 1.36x) at 64 / 256 against
///     1.09x / 1.21x at L = 16 (bench/results/sweep-kda-L-bb52d7c.txt, kda-ab-new-bb52d7c.txt);
///     at L = 8 batch 8 / 16 0.79x / 0.75x window (mixed 0.74x / 0.70x), batch 32 1.22x (1.16x),
///     512 1.20x (1.24x) (kernels-kda-L8-39485d2.txt): L = min(requested, 8) at batch >= 32
///     (with a read copy: below).
/// `read`: the read copy's format of a split state mode (precision.h: kBf16, kFp16, kFp8, kNvfp4),
/// kFp32 for none: its flushes also write the copy (GDN/KDA: recomputing every record's u), so
/// replay pays from larger batches; at L = 1 the step is the mode's conventional one (fp32, or
/// fp16sr/nvfp4's SR-writing one; the copy is never read):
///   Mamba-2 fp32/bf16 (f46bfb9, after the split step's redundant flush launch went): mixed
///     2.11x / 1.92x (Nano-4B / Super) at batch 64; at d9c0ac3, before that fix, 0.67-0.73x at
///     batch 32 (not re-measured since): L = min(requested, 16) at batch >= 64.
///   Mamba-2 NVFP4 copies (fp32/nvfp4, fp16sr/nvfp4; H200, 192ae81, bench/results/
///     s30-kernels-mamba2-*-192ae81.json): mixed at L = 16 / the mode's own L = 1 step, Nano-4B,
///     57.4 / 71.4 and 61.0 / 76.0 µs at batch 32, 88.1 / 135.6 and 94.2 / 143.6 at 64:
///     L = min(requested, 16) at batch >= 32 (fp32/fp8 from 64, as the 16-bit copies).
///   GDN fp32/bf16 (aafb793, bench/results/kernels-gdn-fp32-bf16-aafb793.txt): mixed Qwen3.5-4B
///     0.76x / 0.99x / 1.21x / 1.53x at batch 8 / 16 / 32 / 64 (window 0.99x / 1.32x / 1.43x /
///     1.69x), Qwen3.5-122B 0.83x / 1.12x / 1.28x at batch 4 / 8 / 16: L = min(requested, 16)
///     at batch >= 32, and from batch 8 where a sequence's state is >= 4 MiB.
///   GDN fp32/fp8 (H200, bbcd087, bench/results/precision-gdn-*-bbcd087.*): the ordinary step
///     reads a quarter of the bytes but is issue-bound, and every flush also encodes the copy:
///     mixed Qwen3.5-4B 1.02x at batch 64, 1.40x at 128, 1.53x at 256, 1.60x at 512:
///     L = min(requested, 16) at batch >= 128 (every state size; Qwen3.5-122B not measured).
///   GDN NVFP4 copies (fp32/nvfp4, fp16sr/nvfp4) since session 31's encode (H200, 59a28ff,
///     bench/results/s31-*): mixed / the mode's L = 1 step at Qwen3.5-4B 40.4 / 39.4 and
///     45.8 / 47.8 µs at batch 32, 65.9 / 72.9 and 73.3 / 89.5 at 64, 93.8 / 141.0 and
///     106.3 / 172.6 at 128; Qwen3.5-122B (1bb3d09) 62.3 / 73.1 and 68.9 / 89.9 at 32:
///     L = min(requested, 16) at batch >= 64, and from 32 where a sequence's state is >= 4 MiB
///     (fp16sr/nvfp4's 4% at Qwen3.5-4B batch 32 is inside the spread between leases; batches
///     below 32 not measured).
///   KDA fp32/bf16 at L = 8 (aafb793, kernels-kda-L8-fp32-bf16-aafb793.txt): mixed 0.65x at
///     batch 32, 1.19x / 1.21x / 1.23x / 1.25x at 64 / 128 / 256 / 512: L = min(requested, 8)
///     at batch >= 64.
///   KDA fp32/fp8, fp32/nvfp4 at L = 8 (bbcd087, precision-kda-L8-*-bbcd087.*): mixed 0.56x /
///     0.55x at batch 64, 0.86x / 0.81x at 256, 0.87x / 0.83x at 512 (its quantised ordinary
///     step is slower than the fp32 one): L = 1 at every batch.
/// kFp16Sr (fp16sr/fp16sr: one float16 checkpoint, read as it is): L = 1 is its own conventional
/// step, which writes the checkpoint with stochastic rounding every step (0.72-0.95x the fp32
/// conventional step from batch 8), so the choice is between that and replay (H200, 2026-12-03,
/// one call, bench/results/s29-sr16-kernels-*): Mamba-2 Nano-4B L = 1 / mixed at L = 16
/// 7.4 / 10.3 µs at batch 1, 22.1 / 18.8 at 8, 74.8 / 37.5 at 32; GDN Qwen3.5-4B 4.4 / 11.0,
/// 15.5 / 15.0, 48.0 / 34.4; KDA Kimi-Linear at L = 8 17.6 / 22.7 at 8, 59.4 / 58.6 at 32,
/// 100.8 / 55.7 at 64: L = min(requested, 16) from batch 8 (Mamba-2, GDN), min(requested, 8)
/// from 32 (KDA).
/// `state_bytes`: bytes of one sequence's fp32 recurrent state in one layer (GDN: HV V K 4), or 0;
/// Mamba-2 and KDA ignore it.
/// Errors: ConfigError if requested < 1, batch < 0 or state_bytes < 0.
int32_t recommended_ring_length(SsmFamily family, int64_t batch, int32_t requested,
                                StateFormat read = StateFormat::kFp32, int64_t state_bytes = 0);

}  // namespace replayssm
