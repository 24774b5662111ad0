// Per-sequence memory of a model as the engine allocates it (everything a slot holds besides the
// weights): for capacity planning (how many sequences fit a memory budget) and the speculative
// throughput benchmark (`replayssm bench spec`), which compares that capacity across systems.
// Sizes: models.md §1 (per-layer state), precision.h (state modes), ring.h (ring rows).
#pragma once
#include <cstdint>

#include "replayssm/engine/config.h"
#include "replayssm/engine/model.h"

namespace replayssm::engine {

/// Bytes one slot holds, by part.
struct SequenceBytes {
  /// SSM states / checkpoints of every Mamba-2 and GDN layer in the options' state mode (with the
  /// read copy and stochastic-rounding keys of split modes: precision.h state_bytes).
  int64_t ssm_state = 0;
  /// ReplaySSM rings (ssm kReplay): ring_L rows of float32 records per layer — Mamba-2 x, dt, B
  /// (H P + H + G N floats); GDN u, k, g (HV V + H K + HV floats), and v, beta (HV V + HV) in split
  /// modes. (The ring's small per-slot cursors are not counted.)
  int64_t ssm_ring = 0;
  /// The snapshot baseline (ssm kConventional with spec_T > 0): spec_T float32 states per layer.
  int64_t snapshots = 0;
  /// Rolling convolution states: conv_dim x conv_kernel floats per SSM layer; with spec_T > 0
  /// also what a verify step keeps for the conv rollback (another conv_dim x conv_kernel and
  /// spec_T x conv_dim floats).
  int64_t conv = 0;
  /// Attention K and V caches: 2 x kv heads x head_dim bf16 per attention layer and token of
  /// max_context.
  int64_t kv_cache = 0;
  int64_t total() const { return ssm_state + ssm_ring + snapshots + conv + kv_cache; }
};

/// The per-slot bytes of a model loaded with `options` (ring_L = 0 resolved as Model::load does).
/// Errors: as validate_options.
SequenceBytes sequence_bytes(const ModelConfig& cfg, const ModelOptions& options);

/// Parameters of the model a config describes: every tensor the loaders read (model/weights.h,
/// model/moe.cpp), i.e. the checkpoint's tensors (tests compare with every fixture). The CPU
/// engine holds them as float32 (4 bytes each), the CUDA engine as bf16 GEMM weights (2 bytes)
/// plus float32 vectors.
int64_t parameter_count(const ModelConfig& cfg);

}  // namespace replayssm::engine
