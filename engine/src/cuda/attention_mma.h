// Decode attention on the tensor cores (attention_mma.cu), the path attention_decode takes for
// head_dim 64, 128 and 256 (every attention layer of the supported models): flash-decoding with
// the GQA group's queries (and a verify step's tokens) as the rows of mma m16n8k16.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels.h"

namespace replayssm::engine::cuda {

/// Whether attention_mma_decode serves p: head_dim 64, 128 or 256, unless the environment says
/// RSSM_ATTENTION_PLAN="mma=0" (A/B runs against the CUDA-core kernel; attention_mma.cu lists
/// the keys; ConfigError for another key or value).
bool attention_mma_fits(const Attention& p);
/// Blocks of (KV head, query block of 16, row group) before splitting positions: the grid's x * y.
int64_t attention_mma_blocks(const Attention& p, int64_t B);
/// Blocks resident per SM (shared memory bound): 2 at head_dim 256 and 128, 4 at 64.
int attention_mma_blocks_per_sm(int hd);
/// RSSM_ATTENTION_PLAN's splits=N (A/B runs), 0 when unset.
int attention_mma_splits_override();
/// The attention of attention_decode for p.splits chunks (partials in p.part_acc / p.part_ml
/// when p.splits > 1: the caller runs the combine kernel).
void attention_mma_decode(const Attention& p, int64_t B, cudaStream_t s);

}  // namespace replayssm::engine::cuda
