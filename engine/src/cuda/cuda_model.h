// The CUDA implementation of Model (include/replayssm/engine/model.h): bf16 weights and cuBLAS
// GEMMs with fp32 accumulation, an fp32 residual stream, the library's SSM ops on device tensors
// (fp32 state; replay or conventional), per-slot conv states and bf16 KV caches, and each decode
// step captured into a CUDA graph per batch size (ModelOptions::cuda_graphs).
#pragma once
#include <memory>
#include <string>

#include "replayssm/engine/model.h"

namespace replayssm::engine {

class Checkpoint;

/// Loads the checkpoint onto the first CUDA device. Errors as Model::load; UnsupportedError when there is
/// no CUDA device or the model needs a size the CUDA kernels do not run (Mamba-2 d_state 64 or
/// 128, GDN head_k_dim 64 or 128, attention head_dim <= 256, conv kernel <= 8, max_slots <= 65535;
/// MoE blocks are not built on CUDA yet).
std::unique_ptr<Model> make_cuda_model(const Checkpoint& ck, const ModelOptions& options);

/// What make_cuda_model checks before reading any weight: a CUDA device, and sizes and modes the
/// CUDA kernels run (UnsupportedError / ConfigError naming the value). options: resolved.
void check_cuda_model(const ModelConfig& cfg, const ModelOptions& options);

}  // namespace replayssm::engine
